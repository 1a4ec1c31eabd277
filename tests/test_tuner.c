/*  test_tuner.c — the tuner's rules against values worked out by hand: the adaptive KL coefficient
    over a sequence of steps (the clip at +-0.2, the multiplier's clamp, the bounds), the learning
    rate from KL at exactly 2x and 0.5x the target, plateau decays after exactly P evaluations, the
    temperature band; a copied state continues identically; disabled rules never decide; the
    event line read back by an independent JSON parser. */
#include "baton/tuner.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/*  Every rule off; start values kl_coef 0.05, lr 4e-4, temperature 1. */
static bt_tuner_config s_config(void) {
    bt_tuner_config cfg;
    bt_tuner_config_init(&cfg);
    cfg.start.kl_coef = 0.05;
    cfg.start.lr = 4e-4;
    cfg.start.temperature = 1.0;
    return cfg;
}

static int s_step(bt_tuner *t, int64_t step, double kl, double entropy, int64_t n,
                  bt_tuner_decision *out) {
    bt_tuner_step_stats s = {.kl = kl, .entropy = entropy, .n_samples = n};
    return bt_tuner_after_step(t, step, &s, out, BT_TUNER_MAX_DECISIONS);
}

/* ---- adaptive KL ------------------------------------------------------------------------------
 */

static void s_test_adaptive_kl(void) {
    bt_tuner_config cfg = s_config();
    cfg.kl.enabled = true;
    cfg.kl.target = 0.01;
    cfg.kl.horizon = 1000;
    cfg.kl.min = 0.001;
    cfg.kl.max = 0.2;
    CHECK_OK(bt_tuner_config_validate(&cfg));
    bt_tuner t;
    bt_tuner_init(&t, &cfg);
    CHECK(t.kl_coef == 0.05);

    /* beta after each step, by hand: e = clip(kl / 0.01 - 1, -0.2, 0.2),
       mult = clamp(1 + e n / 1000, 0.5, 1.5), beta = clamp(beta mult, 0.001, 0.2) */
    const struct {
        double kl;
        int64_t n;
        double beta; /* after the step */
        bool decides;
    } seq[] = {
        {0.0125, 100, 0.051, true},      /* e 0.25 clipped to 0.2; x1.02 */
        {0.011, 200, 0.05202, true},     /* e 0.1; x1.02 */
        {0.005, 500, 0.046818, true},    /* e -0.5 clipped to -0.2; x0.9 */
        {0.01, 700, 0.046818, false},    /* e 0: no change, no decision */
        {0.008, 5000, 0.023409, true},   /* e -0.2, n / horizon = 5: 1 - 1 = 0, clamped to 0.5 */
        {0.0, 10000, 0.0117045, true},   /* n / horizon = 10: 1 - 2 = -1, clamped to 0.5 */
        {0.0, 10000, 0.00585225, true},  /* x0.5 */
        {0.0, 10000, 0.002926125, true}, /* x0.5 */
        {0.0, 10000, 0.0014630625, true},
        {0.0, 10000, 0.001, true},  /* 0.00073153125, raised to min */
        {0.0, 10000, 0.001, false}, /* at min: no change */
        {NAN, 100, 0.001, false},   /* not measured: nothing */
        {1.0, 0, 0.001, false},     /* no samples: nothing */
        {1.0, 100, 0.00102, true},  /* e 99 clipped to 0.2: x1.02 */
    };
    int n_seq = (int)(sizeof seq / sizeof *seq);
    for (int i = 0; i < n_seq; i++) {
        bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];
        double before = t.kl_coef;
        int n = s_step(&t, i + 1, seq[i].kl, 1.0, seq[i].n, d);
        CHECK_REL(t.kl_coef, seq[i].beta, 1e-12);
        CHECK(n == (seq[i].decides ? 1 : 0));
        if (n == 1) {
            CHECK(strcmp(d[0].rule, "adaptive_kl") == 0 && strcmp(d[0].param, "kl_coef") == 0);
            CHECK(d[0].step == i + 1 && d[0].before == before && d[0].after == t.kl_coef);
            CHECK(d[0].n_metrics == 2 && strcmp(d[0].metrics[0].name, "kl") == 0);
            CHECK(d[0].metrics[0].value == seq[i].kl);
            CHECK(strcmp(d[0].metrics[1].name, "n_samples") == 0);
            CHECK(d[0].metrics[1].value == (double)seq[i].n);
            CHECK(d[0].reason[0] != '\0');
        }
    }
    CHECK(t.decisions == 10);
    /* only this rule is on: the other hyperparameters never moved */
    CHECK(t.lr == 4e-4 && t.temperature == 1.0);

    /* up to the ceiling: x1.5 a step (mult 1 + 0.2 * 10 = 3, clamped) from 0.001 reaches 0.2 at
       the 14th step (1.5^13 = 194.6 < 200 <= 1.5^14), then stays */
    bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];
    bt_tuner_init(&t, &cfg);
    t.kl_coef = 0.001;
    double want = 0.001;
    for (int i = 1; i <= 16; i++) {
        int n = s_step(&t, i, 1.0, 1.0, 10000, d);
        want = want * 1.5 > 0.2 ? 0.2 : want * 1.5;
        CHECK_REL(t.kl_coef, want, 1e-12);
        CHECK(n == (i <= 14 ? 1 : 0));
        CHECK(t.kl_coef > 0.0 && t.kl_coef <= 0.2);
    }
    CHECK(t.kl_coef == 0.2);

    /* huge batches never make beta zero or negative: at most halved a step, then held at min */
    bt_tuner_init(&t, &cfg);
    for (int i = 1; i <= 50; i++) {
        s_step(&t, i, 0.0, 1.0, INT64_C(1) << 40, d);
        CHECK(t.kl_coef >= 0.001);
    }
    CHECK(t.kl_coef == 0.001);
}

/* ---- learning rate from KL -------------------------------------------------------------------
 */

static void s_test_lr_kl(void) {
    bt_tuner_config cfg = s_config();
    cfg.lr_kl.enabled = true;
    cfg.lr_kl.target = 0.01;
    cfg.lr_kl.factor = 1.5;
    cfg.lr_kl.min_lr = 1e-4;
    cfg.lr_kl.max_lr = 1e-3;
    CHECK_OK(bt_tuner_config_validate(&cfg));
    bt_tuner t;
    bt_tuner_init(&t, &cfg);
    bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];

    /* 0.02 is exactly 2 x 0.01 in binary too (a doubling is exact), likewise 0.005 = 0.01 / 2:
       the thresholds are strict, so neither edge changes anything */
    CHECK(s_step(&t, 1, 0.02, 1.0, 100, d) == 0 && t.lr == 4e-4);
    CHECK(s_step(&t, 2, 0.005, 1.0, 100, d) == 0 && t.lr == 4e-4);
    CHECK(s_step(&t, 3, 0.01, 1.0, 100, d) == 0 && t.lr == 4e-4);
    /* one ulp past an edge does */
    CHECK(s_step(&t, 4, nextafter(0.02, 1.0), 1.0, 100, d) == 1);
    CHECK_REL(t.lr, 4e-4 / 1.5, 1e-15);
    CHECK(strcmp(d[0].rule, "lr_kl") == 0 && strcmp(d[0].param, "lr") == 0 && d[0].step == 4);
    CHECK(d[0].before == 4e-4 && d[0].after == t.lr && d[0].n_metrics == 1);
    CHECK(strcmp(d[0].metrics[0].name, "kl") == 0 && d[0].metrics[0].value > 0.02);
    CHECK(s_step(&t, 5, nextafter(0.005, 0.0), 1.0, 100, d) == 1);
    CHECK_REL(t.lr, 4e-4, 1e-15);
    CHECK(d[0].after > d[0].before);
    CHECK_NEAR(bt_tuner_lr_scale(&t), 1.0, 1e-12);

    /* a KL of 0 is one not measured, and a negative k1 estimate is no reason to speed up */
    double lr = t.lr;
    CHECK(s_step(&t, 6, 0.0, 1.0, 100, d) == 0 && t.lr == lr);
    CHECK(s_step(&t, 7, -0.001, 1.0, 100, d) == 0 && t.lr == lr);
    CHECK(s_step(&t, 8, INFINITY, 1.0, 100, d) == 0 && t.lr == lr);

    /* bounds: 4e-4 / 1.5^k reaches the floor 1e-4 at k = 4 (1.5^3 = 3.375 < 4 <= 1.5^4) */
    double want = t.lr;
    for (int i = 0; i < 6; i++) {
        int n = s_step(&t, 10 + i, 0.5, 1.0, 100, d);
        want = want / 1.5 < 1e-4 ? 1e-4 : want / 1.5;
        CHECK_REL(t.lr, want, 1e-14);
        CHECK(n == (i < 4 ? 1 : 0));
    }
    CHECK(t.lr == 1e-4);
    CHECK_STR_CONTAINS(d[0].reason, "min_lr"); /* the last decision (i = 3) hit the floor */
    /* 1e-4 * 1.5^k reaches the ceiling 1e-3 at k = 6 (1.5^5 = 7.6 < 10 <= 1.5^6 = 11.4) */
    want = t.lr;
    for (int i = 0; i < 8; i++) {
        int n = s_step(&t, 20 + i, 0.001, 1.0, 100, d);
        want = want * 1.5 > 1e-3 ? 1e-3 : want * 1.5;
        CHECK_REL(t.lr, want, 1e-14);
        CHECK(n == (i < 6 ? 1 : 0));
    }
    CHECK(t.lr == 1e-3);

    /* a bound stops the rule but never moves lr the other way: below min_lr (as a plateau decay
       may leave it), a high KL leaves it alone and a low KL still raises it */
    t.lr = 5e-5;
    CHECK(s_step(&t, 30, 0.5, 1.0, 100, d) == 0 && t.lr == 5e-5);
    CHECK(s_step(&t, 31, 0.001, 1.0, 100, d) == 1);
    CHECK_REL(t.lr, 7.5e-5, 1e-14);
    CHECK(t.kl_coef == 0.05 && t.temperature == 1.0);
}

/* ---- learning rate on plateaus ---------------------------------------------------------------
 */

static int s_eval(bt_tuner *t, int64_t step, double value, bt_tuner_decision *d) {
    return bt_tuner_after_eval(t, step, value, d, 1);
}

static void s_test_plateau(void) {
    bt_tuner_config cfg = s_config();
    cfg.start.lr = 1e-4;
    cfg.lr_plateau.enabled = true;
    snprintf(cfg.lr_plateau.dataset, sizeof cfg.lr_plateau.dataset, "heldout");
    cfg.lr_plateau.patience = 3;
    cfg.lr_plateau.factor = 0.5;
    cfg.lr_plateau.min_delta = 0.125; /* binary fractions: the edges are exact */
    cfg.lr_plateau.min_lr = 1e-5;
    CHECK_OK(bt_tuner_config_validate(&cfg));
    bt_tuner t;
    bt_tuner_init(&t, &cfg);
    bt_tuner_decision d[1];

    CHECK(s_eval(&t, 0, 0.25, d) == 0 && t.has_best && t.best == 0.25); /* the first sets best */
    CHECK(s_eval(&t, 10, 0.3, d) == 0 && t.bad_evals == 1);             /* not above 0.25 + 0.125 */
    CHECK(s_eval(&t, 20, 0.375, d) == 0 && t.bad_evals == 2); /* exactly best + min_delta: no */
    CHECK(s_eval(&t, 30, 0.2, d) == 1);                       /* the 3rd in a row: decay */
    CHECK(t.lr == 5e-5 && t.bad_evals == 0 && t.best == 0.25 && t.best_step == 0);
    CHECK(strcmp(d[0].rule, "lr_plateau") == 0 && strcmp(d[0].param, "lr") == 0);
    CHECK(d[0].step == 30 && d[0].before == 1e-4 && d[0].after == 5e-5 && d[0].n_metrics == 3);
    CHECK(strcmp(d[0].metrics[0].name, "accuracy") == 0 && d[0].metrics[0].value == 0.2);
    CHECK(strcmp(d[0].metrics[1].name, "best") == 0 && d[0].metrics[1].value == 0.25);
    CHECK(strcmp(d[0].metrics[2].name, "bad_evals") == 0 && d[0].metrics[2].value == 3);
    CHECK_STR_CONTAINS(d[0].reason, "heldout");
    CHECK_NEAR(bt_tuner_lr_scale(&t), 0.5, 1e-15);

    /* an improvement resets the count */
    CHECK(s_eval(&t, 40, 0.25, d) == 0 && t.bad_evals == 1);
    CHECK(s_eval(&t, 50, 0.5, d) == 0 && t.bad_evals == 0 && t.best == 0.5 && t.best_step == 50);
    /* late, repeated or non-finite results are ignored: they neither count nor improve */
    CHECK(s_eval(&t, 40, 0.0, d) == 0 && s_eval(&t, 50, 0.0, d) == 0);
    CHECK(s_eval(&t, 55, NAN, d) == 0 && t.bad_evals == 0 && t.last_eval_step == 50);
    CHECK(s_eval(&t, 60, 0.5, d) == 0 && s_eval(&t, 70, 0.5, d) == 0 && t.bad_evals == 2);
    CHECK(s_eval(&t, 80, 0.5, d) == 1 && t.lr == 2.5e-5);
    /* decays every P = 3 evaluations on a flat metric, until the floor 1e-5 */
    const double lrs[] = {1.25e-5, 1e-5}; /* 6.25e-6 is raised to min_lr */
    int decisions = 0;
    for (int i = 0; i < 12; i++) {
        int n = s_eval(&t, 90 + 10 * i, 0.5, d);
        CHECK(n == ((i % 3 == 2 && i < 6) ? 1 : 0));
        if (n)
            CHECK(t.lr == lrs[decisions++]);
    }
    CHECK(decisions == 2 && t.lr == 1e-5);

    /* mode min: lower is better, by more than min_delta */
    cfg.lr_plateau.mode = BT_TUNER_MIN;
    cfg.lr_plateau.patience = 1;
    snprintf(cfg.lr_plateau.metric, sizeof cfg.lr_plateau.metric, "nll_per_token");
    bt_tuner_init(&t, &cfg);
    CHECK(s_eval(&t, 0, 2.0, d) == 0 && t.best == 2.0);
    /* exactly best - min_delta is no improvement: with patience 1 it decays at once */
    CHECK(s_eval(&t, 1, 1.875, d) == 1 && t.best == 2.0 && t.bad_evals == 0 && t.lr == 5e-5);
    CHECK(s_eval(&t, 2, 1.5, d) == 0 && t.best == 1.5 && t.lr == 5e-5); /* improved */
    CHECK(s_eval(&t, 3, 3.0, d) == 1 && t.lr == 2.5e-5);                /* worse: decay */
    CHECK(strcmp(d[0].metrics[0].name, "nll_per_token") == 0 && d[0].metrics[0].value == 3.0);
}

/* ---- temperature -----------------------------------------------------------------------------
 */

static void s_test_temperature(void) {
    bt_tuner_config cfg = s_config();
    cfg.temperature.enabled = true;
    cfg.temperature.entropy_low = 0.5;
    cfg.temperature.entropy_high = 1.5;
    cfg.temperature.step = 0.25;
    cfg.temperature.min = 0.5;
    cfg.temperature.max = 1.5;
    CHECK_OK(bt_tuner_config_validate(&cfg));
    bt_tuner t;
    bt_tuner_init(&t, &cfg);
    bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];

    /* in the band, the edges included: nothing */
    const double inside[] = {0.5, 1.0, 1.5};
    for (int i = 0; i < 3; i++)
        CHECK(s_step(&t, i + 1, 0.0, inside[i], 100, d) == 0 && t.temperature == 1.0);
    CHECK(s_step(&t, 4, 0.0, NAN, 100, d) == 0 && t.temperature == 1.0);
    /* below the band: up by 0.25 to the ceiling 1.5 */
    CHECK(s_step(&t, 5, 0.0, 0.4, 100, d) == 1 && t.temperature == 1.25);
    CHECK(strcmp(d[0].rule, "temperature") == 0 && strcmp(d[0].param, "temperature") == 0);
    CHECK(d[0].before == 1.0 && d[0].after == 1.25 && d[0].n_metrics == 1);
    CHECK(strcmp(d[0].metrics[0].name, "entropy") == 0 && d[0].metrics[0].value == 0.4);
    CHECK(s_step(&t, 6, 0.0, 0.4, 100, d) == 1 && t.temperature == 1.5);
    CHECK(s_step(&t, 7, 0.0, 0.0, 100, d) == 0 && t.temperature == 1.5);
    /* above: down to the floor 0.5 */
    const double down[] = {1.25, 1.0, 0.75, 0.5, 0.5, 0.5};
    for (int i = 0; i < 6; i++) {
        CHECK(s_step(&t, 8 + i, 0.0, 1.6, 100, d) == (i < 4 ? 1 : 0));
        CHECK(t.temperature == down[i]);
    }
    /* a step that does not divide the range stops at the bound */
    cfg.temperature.step = 0.3;
    bt_tuner_init(&t, &cfg);
    CHECK(s_step(&t, 1, 0.0, 0.1, 100, d) == 1);
    CHECK_NEAR(t.temperature, 1.3, 1e-15);
    CHECK(s_step(&t, 2, 0.0, 0.1, 100, d) == 1 && t.temperature == 1.5);
    CHECK_STR_CONTAINS(d[0].reason, "at max");
}

/* ---- all the rules: order, checkpoint, disabled --------------------------------------------- */

/*  Every rule on, bounds the synthetic streams below reach. */
static bt_tuner_config s_all_config(void) {
    bt_tuner_config cfg = s_config();
    cfg.kl.enabled = cfg.lr_kl.enabled = cfg.lr_plateau.enabled = cfg.temperature.enabled = true;
    cfg.kl.horizon = 2000;
    cfg.lr_kl.target = 0.02;
    cfg.lr_plateau.patience = 2;
    cfg.lr_plateau.min_delta = 0.01;
    cfg.temperature.entropy_low = 0.6;
    cfg.temperature.entropy_high = 1.2;
    return cfg;
}

/*  A deterministic stream: KL around 0.01-0.05, entropy around 0.3-1.5, an evaluation every 5
    steps with an accuracy that rises then stalls. */
static uint64_t s_lcg(uint64_t *x) {
    *x = *x * 6364136223846793005u + 1442695040888963407u;
    return *x >> 11;
}
static double s_unit(uint64_t *x) {
    return (double)s_lcg(x) / 9007199254740992.0;
}

typedef struct s_log {
    bt_tuner_decision d[1200];
    int n;
} s_log;

static void s_feed(bt_tuner *t, uint64_t *rng, int64_t from, int64_t to, s_log *log) {
    for (int64_t s = from; s <= to; s++) {
        bt_tuner_step_stats st = {.kl = 0.05 * s_unit(rng),
                                  .entropy = 0.3 + 1.2 * s_unit(rng),
                                  .n_samples = 64 + (int64_t)(s_lcg(rng) % 256)};
        bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];
        int n = bt_tuner_after_step(t, s, &st, d, BT_TUNER_MAX_DECISIONS);
        for (int i = 0; i < n && log->n < 1200; i++)
            log->d[log->n++] = d[i];
        if (s % 5 == 0) {
            double acc = (s < 100 ? 0.003 * (double)s : 0.3) + 0.01 * s_unit(rng);
            n = bt_tuner_after_eval(t, s, acc, d, 1);
            for (int i = 0; i < n && log->n < 1200; i++)
                log->d[log->n++] = d[i];
        }
    }
}

static bool s_same_decision(const bt_tuner_decision *a, const bt_tuner_decision *b) {
    bool same = strcmp(a->rule, b->rule) == 0 && strcmp(a->param, b->param) == 0 &&
                a->step == b->step && a->before == b->before && a->after == b->after &&
                a->n_metrics == b->n_metrics && strcmp(a->reason, b->reason) == 0;
    for (int i = 0; same && i < a->n_metrics; i++)
        same = strcmp(a->metrics[i].name, b->metrics[i].name) == 0 &&
               a->metrics[i].value == b->metrics[i].value;
    return same;
}

static void s_test_checkpoint(void) {
    bt_tuner_config cfg = s_all_config();
    CHECK_OK(bt_tuner_config_validate(&cfg));
    static s_log whole, first, resumed, other;
    bt_tuner t;
    bt_tuner_init(&t, &cfg);
    uint64_t rng = 42;
    s_feed(&t, &rng, 1, 300, &whole);

    /* the same run, stopped at step 150: the bytes of the struct are the checkpoint */
    bt_tuner a;
    bt_tuner_init(&a, &cfg);
    uint64_t rng2 = 42;
    s_feed(&a, &rng2, 1, 150, &first);
    unsigned char saved[sizeof(bt_tuner)];
    memcpy(saved, &a, sizeof a);
    uint64_t saved_rng = rng2;
    memset(&a, 0xab, sizeof a); /* the process dies */

    bt_tuner b;
    bt_tuner_init(&b, &cfg); /* a fresh tuner, then the checkpoint over it */
    uint64_t rng3 = 7;
    s_feed(&b, &rng3, 1, 20, &other); /* ...which had another history */
    memcpy(&b, saved, sizeof b);
    s_feed(&b, &saved_rng, 151, 300, &resumed);

    CHECK(first.n + resumed.n == whole.n);
    for (int i = 0; i < whole.n; i++) {
        const bt_tuner_decision *r = i < first.n ? &first.d[i] : &resumed.d[i - first.n];
        if (!s_same_decision(&whole.d[i], r)) {
            fprintf(stderr, "decision %d differs after the resume\n", i);
            s_check_failures++;
            break;
        }
    }
    CHECK(memcmp(&t, &b, sizeof t) == 0);
    /* the stream exercised every rule */
    const char *rules[] = {"adaptive_kl", "lr_kl", "lr_plateau", "temperature"};
    for (int r = 0; r < 4; r++) {
        int count = 0;
        for (int i = 0; i < whole.n; i++)
            count += strcmp(whole.d[i].rule, rules[r]) == 0;
        if (count == 0)
            fprintf(stderr, "rule %s never decided\n", rules[r]);
        CHECK(count > 0);
    }
    CHECK(t.decisions == whole.n);

    /* writing fewer decisions changes nothing in the state */
    bt_tuner c;
    bt_tuner_init(&c, &cfg);
    rng = 42;
    for (int64_t s = 1; s <= 300; s++) {
        bt_tuner_step_stats st = {.kl = 0.05 * s_unit(&rng),
                                  .entropy = 0.3 + 1.2 * s_unit(&rng),
                                  .n_samples = 64 + (int64_t)(s_lcg(&rng) % 256)};
        CHECK(bt_tuner_after_step(&c, s, &st, NULL, 0) == 0);
        if (s % 5 == 0) {
            double acc = (s < 100 ? 0.003 * (double)s : 0.3) + 0.01 * s_unit(&rng);
            CHECK(bt_tuner_after_eval(&c, s, acc, NULL, 0) == 0);
        }
    }
    CHECK(memcmp(&t, &c, sizeof t) == 0);
}

/*  Each rule off in turn (and all off): it never decides and its value never moves. */
static void s_test_disabled(void) {
    for (int off = 0; off <= 4; off++) {
        bt_tuner_config cfg = s_all_config();
        if (off == 0 || off == 4)
            cfg.kl.enabled = false;
        if (off == 1 || off == 4)
            cfg.lr_kl.enabled = false;
        if (off == 2 || off == 4)
            cfg.lr_plateau.enabled = false;
        if (off == 3 || off == 4)
            cfg.temperature.enabled = false;
        if (off == 4) /* the start values of rules that are off need no bounds */
            cfg.start.kl_coef = 0.0;
        CHECK_OK(bt_tuner_config_validate(&cfg));
        bt_tuner t;
        bt_tuner_init(&t, &cfg);
        static s_log log;
        log.n = 0;
        uint64_t rng = 9;
        s_feed(&t, &rng, 1, 300, &log);
        /* extreme inputs too */
        bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];
        for (int i = 0; i < 10; i++) {
            int n = s_step(&t, 301 + i, i % 2 ? 100.0 : 0.0, i % 2 ? 100.0 : 0.0, 1000000, d);
            for (int k = 0; k < n && log.n < 1200; k++)
                log.d[log.n++] = d[k];
        }
        const char *rule[] = {"adaptive_kl", "lr_kl", "lr_plateau", "temperature"};
        for (int i = 0; i < log.n; i++)
            for (int r = 0; r < 4; r++)
                if ((off == r || off == 4) && strcmp(log.d[i].rule, rule[r]) == 0) {
                    fprintf(stderr, "disabled rule %s decided at step %lld\n", rule[r],
                            (long long)log.d[i].step);
                    s_check_failures++;
                }
        if (off == 0 || off == 4)
            CHECK(t.kl_coef == cfg.start.kl_coef);
        if (off == 3 || off == 4)
            CHECK(t.temperature == 1.0);
        if (off == 2 || off == 4)
            CHECK(!t.has_best && t.bad_evals == 0);
        if (off == 4)
            CHECK(log.n == 0 && t.decisions == 0 && t.lr == cfg.start.lr);
    }
}

/* ---- the event line, config errors ---------------------------------------------------------- */

static void s_test_jsonl(void) {
    bt_tuner_config cfg = s_config();
    cfg.kl.enabled = true;
    cfg.kl.horizon = 10000;
    bt_tuner t;
    bt_tuner_init(&t, &cfg);
    bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];
    CHECK(s_step(&t, 40, 0.031, 1.0, 128, d) == 1);
    bt_jsonl line;
    bt_tuner_decision_jsonl(&d[0], 12.5, &line);
    CHECK(!line.overflow);
    char text[sizeof line.buf + 2];
    snprintf(text, sizeof text, "%s}", line.buf); /* bt_runlog_event closes the object */
    cJSON *j = cJSON_Parse(text);
    CHECK(j != NULL);
    if (!j)
        return;
    CHECK(strcmp(cJSON_GetObjectItem(j, "event")->valuestring, "tuner") == 0);
    CHECK(cJSON_GetObjectItem(j, "time")->valuedouble == 12.5);
    CHECK(strcmp(cJSON_GetObjectItem(j, "rule")->valuestring, "adaptive_kl") == 0);
    CHECK(cJSON_GetObjectItem(j, "step")->valuedouble == 40);
    CHECK(strcmp(cJSON_GetObjectItem(j, "param")->valuestring, "kl_coef") == 0);
    CHECK(cJSON_GetObjectItem(j, "before")->valuedouble == 0.05);
    /* e = clip(3.1 - 1) = 0.2; x(1 + 0.2 * 128 / 10000) = x1.00256 */
    CHECK_REL(cJSON_GetObjectItem(j, "after")->valuedouble, 0.05 * 1.00256, 1e-12);
    CHECK(cJSON_GetObjectItem(j, "after")->valuedouble == d[0].after); /* exact text */
    CHECK(cJSON_GetObjectItem(j, "kl")->valuedouble == 0.031);
    CHECK(cJSON_GetObjectItem(j, "n_samples")->valuedouble == 128);
    CHECK(strcmp(cJSON_GetObjectItem(j, "reason")->valuestring, d[0].reason) == 0);
    CHECK_STR_CONTAINS(d[0].reason, "kl 0.031 vs target 0.01");
    CHECK(cJSON_GetArraySize(j) == 10);
    cJSON_Delete(j);
}

static void s_test_validate(void) {
    bt_tuner_config cfg = s_config();
    CHECK_OK(bt_tuner_config_validate(&cfg)); /* all off */
    cfg = s_all_config();
    CHECK_OK(bt_tuner_config_validate(&cfg));
    cfg.kl.min = 0.0;
    CHECK(bt_tuner_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "tuner.kl.min: expected a number > 0, got 0");
    cfg = s_all_config();
    cfg.start.kl_coef = 0.0;
    cfg.kl.enabled = false;
    CHECK(bt_tuner_config_validate(&cfg) == BT_EINVAL); /* lr_kl needs a measured KL */
    CHECK_STR_CONTAINS(bt_last_error(), "tuner.lr_kl.enabled: needs grpo.kl_coef > 0");
    cfg = s_all_config();
    cfg.lr_plateau.patience = 0;
    CHECK(bt_tuner_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "tuner.lr_plateau.patience");
    cfg = s_all_config();
    cfg.temperature.step = NAN;
    CHECK(bt_tuner_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "tuner.temperature.step");
}

/* ---- mixture weights ------------------------------------------------------------------------ */

/*  Two windows of 2 steps; weights by hand: w_s * exp(rate * g_s), clamped. */
static void s_test_mixture(void) {
    bt_tuner_config cfg = s_config();
    cfg.mixture = (bt_tuner_mixture_config){.enabled = true,
                                            .metric = BT_TUNER_MIXTURE_ACCURACY,
                                            .every_steps = 2,
                                            .rate = 2.0,
                                            .min_weight = 0.5,
                                            .max_weight = 4.0};
    cfg.n_sources = 3;
    cfg.start_weights[0] = 1.0;
    cfg.start_weights[1] = 2.0;
    cfg.start_weights[2] = 1.0;
    CHECK_OK(bt_tuner_config_validate(&cfg));
    bt_tuner t;
    bt_tuner_init(&t, &cfg);
    bt_tuner_step_stats s = {.kl = NAN, .entropy = NAN, .n_samples = 8, .n_sources = 3};
    /* step 1: source 0 4/8 right, source 1 8/8, source 2 not sampled */
    s.sources[0].n = 8, s.sources[0].correct = 4;
    s.sources[1].n = 8, s.sources[1].correct = 8;
    bt_tuner_decision d[BT_TUNER_MAX_DECISIONS];
    CHECK(bt_tuner_after_step(&t, 1, &s, d, BT_TUNER_MAX_DECISIONS) == 0); /* window not full */
    /* step 2: source 0 0/8 more, source 1 4/8 more: window accuracies 4/16 = 0.25, 12/16 = 0.75,
       mean 0.5; g0 = +0.25, g1 = -0.25: w0 = 1 e^0.5, w1 = 2 e^-0.5; source 2 unseen: kept */
    s.sources[0].correct = 0;
    s.sources[1].correct = 4;
    int n = bt_tuner_after_step(&t, 2, &s, d, BT_TUNER_MAX_DECISIONS);
    CHECK(n == 2);
    CHECK(d[0].source == 0 && !strcmp(d[0].rule, "mixture") && !strcmp(d[0].param, "weight"));
    CHECK_NEAR(d[0].before, 1.0, 0);
    CHECK_NEAR(d[0].after, exp(0.5), 1e-15);
    CHECK_NEAR(d[0].metrics[0].value, 0.25, 1e-15);
    CHECK_NEAR(d[0].metrics[1].value, 0.5, 1e-15);
    CHECK(d[1].source == 1);
    CHECK_NEAR(d[1].after, 2.0 * exp(-0.5), 1e-15);
    CHECK_NEAR(t.weights[2], 1.0, 0);
    /* next window: source 0 far behind: its weight would be e^0.5 e^(2 * 0.5) > 4: clamped */
    s.sources[0].correct = 0;
    s.sources[1].correct = 8;
    CHECK(bt_tuner_after_step(&t, 3, &s, d, BT_TUNER_MAX_DECISIONS) == 0);
    n = bt_tuner_after_step(&t, 4, &s, d, BT_TUNER_MAX_DECISIONS);
    CHECK(n == 2 && d[0].source == 0);
    CHECK_NEAR(d[0].after, 4.0, 0);
    CHECK_STR_CONTAINS(d[0].reason, "at a bound");
    CHECK_NEAR(d[1].after, fmax(0.5, 2.0 * exp(-0.5) * exp(-1.0)), 1e-15);

    /* reward variance: the most varied source gains: var 0.25 vs 0 (mean 0.125): g = +1, -1 */
    cfg.mixture.metric = BT_TUNER_MIXTURE_REWARD_VARIANCE;
    cfg.mixture.every_steps = 1;
    cfg.mixture.rate = 0.1;
    bt_tuner_init(&t, &cfg);
    bt_tuner_step_stats v = {.kl = NAN, .entropy = NAN, .n_sources = 2};
    v.sources[0].n = 4, v.sources[0].reward = 2, v.sources[0].reward_sq = 2; /* 0,0,1,1 */
    v.sources[1].n = 4, v.sources[1].reward = 4, v.sources[1].reward_sq = 4; /* 1,1,1,1 */
    n = bt_tuner_after_step(&t, 1, &v, d, BT_TUNER_MAX_DECISIONS);
    CHECK(n == 2);
    CHECK_NEAR(d[0].after, exp(0.1), 1e-15);
    CHECK_NEAR(d[1].after, 2.0 * exp(-0.1), 1e-15);

    /* a weight outside the bounds, one source, bad bounds */
    cfg = s_config();
    cfg.mixture.enabled = true;
    cfg.n_sources = 1;
    CHECK(bt_tuner_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "needs data.sources with 2 or more");
    cfg.n_sources = 2;
    cfg.start_weights[1] = 100;
    CHECK(bt_tuner_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "data.sources[1].weight");
}

int main(void) {
    s_test_adaptive_kl();
    s_test_lr_kl();
    s_test_plateau();
    s_test_temperature();
    s_test_checkpoint();
    s_test_disabled();
    s_test_jsonl();
    s_test_validate();
    s_test_mixture();
    return check_exit();
}
