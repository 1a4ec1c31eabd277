/*  test_grpo.c — GRPO advantages, loss, gradients and LR schedules against hand-computed values,
    an explicit REINFORCE surrogate, float64 finite differences and full-batch references. */
#include "baton/grpo.h"
#include "check.h"
#include "grpo_reference.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------------------- */

static uint64_t s_rng_state = 42;

/*  The GRPO settings these tests were written against, stated here rather than taken from a
    library default (a config's are in config/config.c's key table): GRPO's kl_coef 0.04 with k3,
    DAPO's clip-higher, token-mean aggregation, Dr. GRPO's max_tokens 1024 for token_sum_norm. */

/* Uniform in [lo, hi) from a 64-bit LCG (Knuth's MMIX constants). */
static double s_uniform(double lo, double hi) {
    s_rng_state = s_rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(s_rng_state >> 11) / 9007199254740992.0;
}

static bt_tensor *s_f32(bt_ctx *ctx, int ndim, const int64_t *shape, const float *v) {
    return bt_from_host(ctx, BT_F32, bt_cpu(), ndim, shape, v);
}

static double s_item(bt_tensor *t) {
    double v = NAN;
    CHECK(t != NULL);
    if (t)
        CHECK_OK(bt_item(t, &v));
    return v;
}

/* Copies the gradient of leaf (n float32 elements) into out. */
static void s_grad(bt_ctx *ctx, bt_tensor *leaf, float *out, int64_t n) {
    CHECK_OK(bt_to_host(bt_grad(ctx, leaf), out, (size_t)n * sizeof *out));
}

/* max |a - b| / max |b| over n elements. */
static double s_rel_diff(const float *a, const float *b, int64_t n) {
    double diff = 0.0, scale = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return diff / scale;
}

/* ---- advantages ----------------------------------------------------------------------------- */

static void test_advantages(void) {
    /* three groups of four: {1,0,0,1}, {2,4,9,5}, {0.1 x4} */
    const double r[12] = {1, 0, 0, 1, 2, 4, 9, 5, 0.1, 0.1, 0.1, 0.1};
    double a[12];
    CHECK_OK(bt_grpo_advantages(r, 3, 4, BT_ADV_NORM_STD, a));
    /* mean 0.5, unbiased var (4 * 0.25) / 3 = 1/3, std 0.5773502691896258 */
    double a1 = 0.5 / (0.5773502691896258 + 1e-6); /* 0.866024... */
    CHECK_NEAR(a[0], a1, 1e-12);
    CHECK_NEAR(a[1], -a1, 1e-12);
    CHECK_NEAR(a[2], -a1, 1e-12);
    CHECK_NEAR(a[3], a1, 1e-12);
    /* mean 5, deviations -3 -1 4 0, unbiased var (9 + 1 + 16) / 3, std 2.943920288775949 */
    double s2 = 2.943920288775949 + 1e-6;
    CHECK_NEAR(a[4], -3.0 / s2, 1e-12);
    CHECK_NEAR(a[5], -1.0 / s2, 1e-12);
    CHECK_NEAR(a[6], 4.0 / s2, 1e-12);
    CHECK_NEAR(a[7], 0.0, 1e-12);
    for (int i = 8; i < 12; i++)
        CHECK(a[i] == 0.0); /* zero variance: zeros, not NaN nor 1e-11 noise */
    CHECK(bt_grpo_group_has_zero_variance(r + 8, 4));
    CHECK(!bt_grpo_group_has_zero_variance(r, 4));

    /* Dr. GRPO: no division */
    CHECK_OK(bt_grpo_advantages(r, 3, 4, BT_ADV_NORM_NONE, a));
    const double none[8] = {0.5, -0.5, -0.5, 0.5, -3, -1, 4, 0};
    for (int i = 0; i < 8; i++)
        CHECK_NEAR(a[i], none[i], 1e-15);

    /* in place, and a group of one */
    double buf[4] = {2, 4, 9, 5};
    CHECK_OK(bt_grpo_advantages(buf, 1, 4, BT_ADV_NORM_NONE, buf));
    CHECK_NEAR(buf[2], 4.0, 1e-15);
    CHECK_OK(bt_grpo_advantages(r + 6, 1, 1, BT_ADV_NORM_STD, a));
    CHECK(a[0] == 0.0);

    CHECK(bt_grpo_advantages(r, 1, 0, BT_ADV_NORM_STD, a) == BT_EINVAL);
    const double bad[2] = {1.0, NAN};
    CHECK(bt_grpo_advantages(bad, 1, 2, BT_ADV_NORM_STD, a) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "reward 1");
}

/* ---- configuration -------------------------------------------------------------------------- */

static void test_config(void) {
    bt_grpo_config cfg = bt_test_grpo_config();
    CHECK(cfg.clip_low == 0.2 && cfg.clip_high == 0.28);
    CHECK(cfg.loss_agg == BT_LOSS_AGG_TOKEN_MEAN && cfg.adv_norm == BT_ADV_NORM_STD);
    CHECK_OK(bt_grpo_config_validate(&cfg));
    cfg.clip_low = 1.0;
    CHECK(bt_grpo_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "grpo.clip_low");
    cfg = bt_test_grpo_config();
    cfg.loss_agg = BT_LOSS_AGG_TOKEN_SUM_NORM;
    cfg.max_tokens = 0;
    CHECK(bt_grpo_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "grpo.max_tokens");

    const int64_t lengths[3] = {3, 2, 7};
    cfg.max_tokens = 16;
    CHECK(bt_grpo_normaliser(&cfg, lengths, 3) == 48.0); /* 3 seqs * 16 */
    cfg.loss_agg = BT_LOSS_AGG_TOKEN_MEAN;
    CHECK(bt_grpo_normaliser(&cfg, lengths, 3) == 12.0); /* 3 + 2 + 7 */
    cfg.loss_agg = BT_LOSS_AGG_SEQ_MEAN;
    CHECK(bt_grpo_normaliser(&cfg, lengths, 3) == 3.0);
}

/* ---- hand-computed loss values -------------------------------------------------------------- */

/*  B = 2 sequences, T = 3; sequence 1 has 2 tokens and garbage in its padding.
    Log-ratios logp - old_logp: 0, 0.5, -0.5 | -0.5, 0.125, (pad); A = +1 | -2.
    With clip_low 0.2, clip_high 0.28, pg_t = -min(rho A, clamp(rho, 0.8, 1.28) A):
      (0,0) rho 1                -> -1
      (0,1) rho e^0.5 = 1.6487   -> -min(1.6487, 1.28) = -1.28     clip-high branch, no gradient
      (0,2) rho e^-0.5 = 0.6065  -> -min(0.6065, 0.8)  = -e^-0.5
      (1,0) rho e^-0.5, A = -2   -> -min(-1.2131, -1.6) = 1.6      clip-low branch, no gradient
      (1,1) rho e^0.125 = 1.1331 -> -min(-2.2663, -2.2663) = 2 e^0.125
    x = logp - ref_logp: 0.25, -0.375, 0, 0.5, -0.125.  Entropies 1, 2, 0.5, 1.5, 0.25.
    The padding's log-ratio (150), log r (150) and entropy (inf) would overflow if used. */
typedef struct s_fixture {
    bt_tensor *logp, *old_logp, *ref_logp, *adv, *mask, *entropy; /* (2, 3), adv (2) */
} s_fixture;

static const double s_x[5] = {0.25, -0.375, 0.0, 0.5, -0.125};

static s_fixture s_fixture_new(bt_ctx *ctx) {
    const int64_t bt[2] = {2, 3}, b[1] = {2};
    const float logp[6] = {-1.0f, -0.5f, -1.5f, -2.0f, -0.875f, 50.0f};
    const float old[6] = {-1.0f, -1.0f, -1.0f, -1.5f, -1.0f, -100.0f};
    const float ref[6] = {-1.25f, -0.125f, -1.5f, -2.5f, -0.75f, 200.0f};
    const float adv[2] = {1.0f, -2.0f};
    const float mask[6] = {1, 1, 1, 1, 1, 0};
    const float ent[6] = {1.0f, 2.0f, 0.5f, 1.5f, 0.25f, INFINITY};
    s_fixture f = {s_f32(ctx, 2, bt, logp), s_f32(ctx, 2, bt, old),  s_f32(ctx, 2, bt, ref),
                   s_f32(ctx, 1, b, adv),   s_f32(ctx, 2, bt, mask), s_f32(ctx, 2, bt, ent)};
    CHECK_OK(bt_set_requires_grad(f.logp, true));
    CHECK_OK(bt_set_requires_grad(f.entropy, true));
    return f;
}

/* The loss value after a fresh backward; the gradients of logp and entropy land in g_logp and
   g_ent. */
static double s_run(bt_ctx *ctx, const bt_grpo_config *cfg, s_fixture *f, bool ref, bool ent,
                    double normaliser, bt_grpo_stats *stats, float g_logp[6], float g_ent[6]) {
    bt_tensor *leaves[2] = {f->logp, f->entropy};
    bt_zero_grad(leaves, 2);
    bt_tensor *loss = bt_grpo_loss(ctx, cfg, f->logp, f->old_logp, ref ? f->ref_logp : NULL, f->adv,
                                   f->mask, NULL, ent ? f->entropy : NULL, normaliser, stats);
    if (!loss) {
        fprintf(stderr, "bt_grpo_loss: %s\n", bt_last_error());
        CHECK(loss != NULL);
        return NAN;
    }
    CHECK_OK(bt_backward(loss));
    s_grad(ctx, f->logp, g_logp, 6);
    s_grad(ctx, f->entropy, g_ent, 6);
    return s_item(loss);
}

static void test_loss_hand_computed(void) {
    bt_ctx *ctx = bt_ctx_new();
    s_fixture f = s_fixture_new(ctx);
    const double seq0 = -1.0 - 1.28 - exp(-0.5), seq1 = 1.6 + 2.0 * exp(0.125);
    const double pg_sum = seq0 + seq1;
    const int64_t lengths[2] = {3, 2};
    float g[6], ge[6];

    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.0;
    bt_grpo_stats st = {0};
    double loss =
        s_run(ctx, &cfg, &f, false, false, bt_grpo_normaliser(&cfg, lengths, 2), &st, g, ge);
    CHECK_NEAR(loss, pg_sum / 5.0, 1e-6); /* token mean over 5 tokens */
    /* d/dlogp of -rho A / 5 is -rho A / 5 on unclipped tokens; 0 where clipped or padded */
    CHECK_NEAR(g[0], -1.0 / 5.0, 1e-6);
    CHECK(g[1] == 0.0f);
    CHECK_NEAR(g[2], -exp(-0.5) / 5.0, 1e-6);
    CHECK(g[3] == 0.0f);
    CHECK_NEAR(g[4], 2.0 * exp(0.125) / 5.0, 1e-6);
    CHECK(g[5] == 0.0f);
    CHECK(st.tokens == 5.0);
    CHECK_NEAR(st.pg_loss_sum, pg_sum, 1e-6);
    CHECK(st.clip_low_tokens == 1.0 && st.clip_high_tokens == 1.0);
    CHECK_NEAR(st.ratio_sum, 1.0 + exp(0.5) + 2.0 * exp(-0.5) + exp(0.125), 1e-6);
    CHECK_NEAR(st.ratio_max, exp(0.5), 1e-6);
    CHECK_NEAR(st.ratio_min, exp(-0.5), 1e-6);
    /* the spread and the sampler/trainer mismatch: rho^2 and rho - 1 - log rho by hand */
    const double lr[5] = {0.0, 0.5, -0.5, -0.5, 0.125};
    double sumsq = 0, mismatch = 0;
    for (int t = 0; t < 5; t++) {
        sumsq += exp(2 * lr[t]);
        mismatch += exp(lr[t]) - 1 - lr[t];
    }
    CHECK_REL(st.ratio_sumsq, sumsq, 1e-6);
    CHECK_REL(st.mismatch_sum, mismatch, 1e-6);
    CHECK(st.kl_sum == 0.0 && st.entropy_sum == 0.0);

    /* stats add up over calls */
    s_run(ctx, &cfg, &f, false, false, 5.0, &st, g, ge);
    CHECK(st.tokens == 10.0 && st.clip_low_tokens == 2.0);
    CHECK_NEAR(st.ratio_max, exp(0.5), 1e-6);

    cfg.loss_agg = BT_LOSS_AGG_SEQ_MEAN; /* (seq0 / 3 + seq1 / 2) / 2 sequences */
    double norm = bt_grpo_normaliser(&cfg, lengths, 2);
    CHECK(norm == 2.0);
    loss = s_run(ctx, &cfg, &f, false, false, norm, NULL, g, ge);
    CHECK_NEAR(loss, (seq0 / 3.0 + seq1 / 2.0) / 2.0, 1e-6);
    CHECK_NEAR(g[4], 2.0 * exp(0.125) / 2.0 / 2.0, 1e-6); /* weight 1 / len 2, then / 2 */

    cfg.loss_agg = BT_LOSS_AGG_TOKEN_SUM_NORM; /* pg_sum / (2 seqs * 4 max_tokens) */
    cfg.max_tokens = 4;
    norm = bt_grpo_normaliser(&cfg, lengths, 2);
    CHECK(norm == 8.0);
    loss = s_run(ctx, &cfg, &f, false, false, norm, NULL, g, ge);
    CHECK_NEAR(loss, pg_sum / 8.0, 1e-6);

    /* k1 = -log r = x, summed: 0.25 - 0.375 + 0 + 0.5 - 0.125 = 0.25; entropy sum 5.25 */
    cfg.loss_agg = BT_LOSS_AGG_TOKEN_MEAN;
    cfg.kl_coef = 0.1;
    cfg.kl_estimator = BT_KL_K1;
    cfg.entropy_coef = 0.01;
    bt_grpo_stats st1 = {0};
    loss = s_run(ctx, &cfg, &f, true, true, 5.0, &st1, g, ge);
    CHECK_NEAR(loss, (pg_sum + 0.1 * 0.25 - 0.01 * 5.25) / 5.0, 1e-6);
    CHECK_NEAR(g[1], 0.1 / 5.0, 1e-7); /* clipped token: only d k1 / d logp = 1 remains */
    CHECK(g[5] == 0.0f);
    CHECK_NEAR(ge[0], -0.01 / 5.0, 1e-8);
    CHECK(ge[5] == 0.0f);
    CHECK_NEAR(st1.kl_sum, 0.25, 1e-6);
    CHECK_NEAR(st1.entropy_sum, 5.25, 1e-6);

    /* k3 with log r = -x: r - log r - 1 = e^-x + x - 1; its derivative in logp is 1 - e^-x */
    cfg.kl_estimator = BT_KL_K3;
    cfg.entropy_coef = 0.0;
    double k3_sum = 0.0;
    for (int i = 0; i < 5; i++)
        k3_sum += exp(-s_x[i]) + s_x[i] - 1.0; /* 0.0187 + 0.0700 + 0 + 0.1065 + 0.0081 */
    bt_grpo_stats st3 = {0};
    loss = s_run(ctx, &cfg, &f, true, true, 5.0, &st3, g, ge);
    CHECK_NEAR(loss, (pg_sum + 0.1 * k3_sum) / 5.0, 1e-6);
    CHECK_NEAR(g[1], 0.1 * (1.0 - exp(0.375)) / 5.0, 1e-7);
    CHECK(g[5] == 0.0f && ge[0] == 0.0f);
    CHECK_NEAR(st3.kl_sum, k3_sum, 1e-6);
    CHECK(isfinite(st3.ratio_max));

    /* failures: NULL result and a message */
    CHECK(bt_grpo_loss(ctx, &cfg, f.logp, f.old_logp, NULL, f.adv, f.mask, NULL, NULL, 5.0, NULL) ==
          NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "ref_logp");
    CHECK(bt_grpo_loss(ctx, &cfg, f.logp, f.old_logp, f.ref_logp, f.adv, f.mask, NULL, NULL, 0.0,
                       NULL) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "normaliser");
    const int64_t three[1] = {3};
    const float adv3[3] = {1, 2, 3};
    CHECK(bt_grpo_loss(ctx, &cfg, f.logp, f.old_logp, f.ref_logp, s_f32(ctx, 1, three, adv3),
                       f.mask, NULL, NULL, 5.0, NULL) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "adv");
    CHECK(bt_grpo_loss(ctx, &cfg, NULL, f.old_logp, f.ref_logp, f.adv, f.mask, NULL, NULL, 5.0,
                       NULL) == NULL);
    bt_ctx_destroy(&ctx);
}

/*  The fixture's two sequences back to back in one packed row (1, 5), each token carrying its
    sequence's advantage and completion length: the hand-computed values of the padded layout. */
static void test_packed_row(void) {
    bt_ctx *ctx = bt_ctx_new();
    const int64_t row[2] = {1, 5};
    const float logp[5] = {-1.0f, -0.5f, -1.5f, -2.0f, -0.875f};
    const float old[5] = {-1.0f, -1.0f, -1.0f, -1.5f, -1.0f};
    const float ref[5] = {-1.25f, -0.125f, -1.5f, -2.5f, -0.75f};
    const float adv[5] = {1, 1, 1, -2, -2}, len[5] = {3, 3, 3, 2, 2}, ones[5] = {1, 1, 1, 1, 1};
    const float ent[5] = {1.0f, 2.0f, 0.5f, 1.5f, 0.25f};
    bt_tensor *tl = s_f32(ctx, 2, row, logp), *te = s_f32(ctx, 2, row, ent);
    CHECK_OK(bt_set_requires_grad(tl, true));
    CHECK_OK(bt_set_requires_grad(te, true));
    bt_tensor *to = s_f32(ctx, 2, row, old), *tr = s_f32(ctx, 2, row, ref);
    bt_tensor *ta = s_f32(ctx, 2, row, adv), *tn = s_f32(ctx, 2, row, len);
    bt_tensor *tm = s_f32(ctx, 2, row, ones);
    const double seq0 = -1.0 - 1.28 - exp(-0.5), seq1 = 1.6 + 2.0 * exp(0.125);
    double k3_sum = 0.0;
    for (int i = 0; i < 5; i++)
        k3_sum += exp(-s_x[i]) + s_x[i] - 1.0;

    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.0;
    cfg.loss_agg = BT_LOSS_AGG_SEQ_MEAN;
    bt_grpo_stats st = {0};
    float g[5];
    double loss = s_item(bt_grpo_loss(ctx, &cfg, tl, to, NULL, ta, tm, tn, NULL, 2.0, &st));
    CHECK_NEAR(loss, (seq0 / 3.0 + seq1 / 2.0) / 2.0, 1e-6);
    CHECK_OK(bt_backward(bt_grpo_loss(ctx, &cfg, tl, to, NULL, ta, tm, tn, NULL, 2.0, NULL)));
    s_grad(ctx, tl, g, 5);
    CHECK_NEAR(g[0], -1.0 / 3.0 / 2.0, 1e-6);
    CHECK(g[1] == 0.0f && g[3] == 0.0f); /* the clipped tokens */
    CHECK_NEAR(g[4], 2.0 * exp(0.125) / 2.0 / 2.0, 1e-6);
    CHECK(st.tokens == 5.0 && st.clip_low_tokens == 1.0 && st.clip_high_tokens == 1.0);
    CHECK_NEAR(st.pg_loss_sum, seq0 + seq1, 1e-6);
    /* without seq_len the row would be one sequence of 5 tokens */
    loss = s_item(bt_grpo_loss(ctx, &cfg, tl, to, NULL, ta, tm, NULL, NULL, 2.0, NULL));
    CHECK_NEAR(loss, (seq0 + seq1) / 5.0 / 2.0, 1e-6);

    cfg.loss_agg = BT_LOSS_AGG_TOKEN_MEAN; /* with k3 and the entropy bonus */
    cfg.kl_coef = 0.1;
    cfg.entropy_coef = 0.01;
    loss = s_item(bt_grpo_loss(ctx, &cfg, tl, to, tr, ta, tm, tn, te, 5.0, NULL));
    CHECK_NEAR(loss, (seq0 + seq1 + 0.1 * k3_sum - 0.01 * 5.25) / 5.0, 1e-6);
    bt_ctx_destroy(&ctx);
}

/*  AReaL's decoupled objective on the fixture, by hand.  The proximal policy is the one being
    updated, so rho = 1 and pg_t = -w_t A with w_t = exp(logp - old) = 1, e^0.5, e^-0.5 | e^-0.5,
    e^0.125; cap 1.5 drops the e^0.5 token; d loss / d logp_t = -w_t A / 5 (token mean, 5 tokens).
    On a batch the policy sampled itself (old = logp) it is the standard loss, gradients too. */
static void test_decoupled(void) {
    bt_ctx *ctx = bt_ctx_new();
    s_fixture f = s_fixture_new(ctx);
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.0;
    cfg.decoupled = true;
    cfg.behav_weight_cap = 1.5;
    const double w[5] = {1.0, exp(0.5), exp(-0.5), exp(-0.5), exp(0.125)};
    const double A[5] = {1, 1, 1, -2, -2};
    const int cell[5] = {0, 1, 2, 3, 4}; /* (0,0) (0,1) (0,2) (1,0) (1,1); (1,2) is padding */
    for (int capped = 1; capped >= 0; capped--) {
        cfg.behav_weight_cap = capped ? 1.5 : 0.0;
        bt_grpo_stats st = {0};
        float g[6], ge[6];
        double loss = s_run(ctx, &cfg, &f, false, false, 5.0, &st, g, ge), want = 0;
        for (int t = 0; t < 5; t++) {
            double wt = capped && w[t] > 1.5 ? 0.0 : w[t];
            want += -wt * A[t] / 5.0;
            CHECK(fabs(g[cell[t]] + wt * A[t] / 5.0) <= 1e-6);
        }
        CHECK(g[5] == 0.0f);
        CHECK_REL(loss, want, 1e-6);
        CHECK_REL(st.ratio_sum, w[0] + w[1] + w[2] + w[3] + w[4], 1e-6); /* pi_theta / pi_behav */
        CHECK(st.clip_low_tokens == 0 && st.clip_high_tokens == 0);
    }
    /* on-policy: old = logp, so w = 1 and both objectives agree */
    const int64_t bt[2] = {2, 3};
    float lp[6];
    CHECK_OK(bt_to_host(f.logp, lp, sizeof lp));
    f.old_logp = s_f32(ctx, 2, bt, lp);
    float g_dec[6], g_std[6], ge[6];
    double l_dec = s_run(ctx, &cfg, &f, false, false, 5.0, NULL, g_dec, ge);
    cfg.decoupled = false;
    double l_std = s_run(ctx, &cfg, &f, false, false, 5.0, NULL, g_std, ge);
    CHECK_REL(l_dec, l_std, 1e-7);
    CHECK(s_rel_diff(g_dec, g_std, 6) < 1e-6);
    bt_ctx_destroy(&ctx);
}

/*  Truncated importance sampling on the fixture, by hand: as the decoupled objective, but each
    token's weight w_t = exp(logp - old) is truncated at the cap instead of dropped: cap 1.5 turns
    the e^0.5 token's weight into 1.5.  d loss / d logp_t = -min(w_t, cap) A / 5.  A cap above
    every weight is the decoupled objective without a cap; on-policy it is the standard loss.
    The mismatch statistic is the same whatever the objective; it is 0 on-policy. */
static void test_tis(void) {
    bt_ctx *ctx = bt_ctx_new();
    s_fixture f = s_fixture_new(ctx);
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.0;
    cfg.tis_cap = 1.5;
    const double w[5] = {1.0, exp(0.5), exp(-0.5), exp(-0.5), exp(0.125)};
    const double A[5] = {1, 1, 1, -2, -2};
    bt_grpo_stats st = {0};
    float g[6], ge[6];
    double loss = s_run(ctx, &cfg, &f, false, false, 5.0, &st, g, ge), want = 0;
    for (int t = 0; t < 5; t++) {
        double wt = w[t] > 1.5 ? 1.5 : w[t];
        want += -wt * A[t] / 5.0;
        CHECK(fabs(g[t] + wt * A[t] / 5.0) <= 1e-6);
    }
    CHECK(g[5] == 0.0f);
    CHECK_REL(loss, want, 1e-6);
    CHECK(st.clip_low_tokens == 0 && st.clip_high_tokens == 0);
    CHECK_NEAR(st.ratio_max, exp(0.5), 1e-6); /* the statistics describe pi_theta / pi_behav */
    float g_dec[6];
    cfg.tis_cap = 100.0;
    double l_tis = s_run(ctx, &cfg, &f, false, false, 5.0, NULL, g, ge);
    cfg.tis_cap = 0.0;
    cfg.decoupled = true;
    cfg.behav_weight_cap = 0.0;
    double l_dec = s_run(ctx, &cfg, &f, false, false, 5.0, NULL, g_dec, ge);
    CHECK_REL(l_tis, l_dec, 1e-7);
    CHECK(s_rel_diff(g, g_dec, 6) < 1e-6);
    /* both at once is refused */
    cfg.tis_cap = 2.0;
    CHECK(bt_grpo_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "grpo.tis_cap");
    cfg.decoupled = false;
    CHECK_OK(bt_grpo_config_validate(&cfg));
    /* on-policy: w = 1, the standard loss and gradients, no mismatch */
    const int64_t bt[2] = {2, 3};
    float lp[6], g_std[6];
    CHECK_OK(bt_to_host(f.logp, lp, sizeof lp));
    f.old_logp = s_f32(ctx, 2, bt, lp);
    bt_grpo_stats on = {0};
    l_tis = s_run(ctx, &cfg, &f, false, false, 5.0, &on, g, ge);
    cfg.tis_cap = 0.0;
    double l_std = s_run(ctx, &cfg, &f, false, false, 5.0, NULL, g_std, ge);
    CHECK_REL(l_tis, l_std, 1e-7);
    CHECK(s_rel_diff(g, g_std, 6) < 1e-6);
    CHECK(on.mismatch_sum == 0.0 && on.ratio_min == 1.0 && on.ratio_max == 1.0);
    bt_ctx_destroy(&ctx);
}

static void test_sft_loss(void) {
    bt_ctx *ctx = bt_ctx_new();
    const int64_t shape[2] = {2, 2};
    const float lp[4] = {-1.0f, -2.0f, -0.5f, -INFINITY}, m[4] = {1, 1, 1, 0};
    bt_tensor *logp = s_f32(ctx, 2, shape, lp);
    CHECK_OK(bt_set_requires_grad(logp, true));
    bt_tensor *loss = bt_sft_loss(ctx, logp, s_f32(ctx, 2, shape, m), 4.0);
    CHECK_NEAR(s_item(loss), (1.0 + 2.0 + 0.5) / 4.0, 1e-7); /* padding's -inf is ignored */
    CHECK_OK(bt_backward(loss));
    float g[4];
    s_grad(ctx, logp, g, 4);
    CHECK(g[0] == -0.25f && g[2] == -0.25f && g[3] == 0.0f);
    bt_ctx_destroy(&ctx);
}

/* ---- a tiny differentiable policy ----------------------------------------------------------- */

/*  logits = x W^T; returns log softmax(logits)[ids], (B, T); entropy_out (B, T) when not NULL.
    x (B, T, F), w (V, F), ids (B, T) int64. */
static bt_tensor *s_policy(bt_ctx *ctx, bt_tensor *x, bt_tensor *w, bt_tensor *ids,
                           bt_tensor **entropy_out) {
    bt_tensor *lp = bt_log_softmax(ctx, bt_linear(ctx, x, w), -1); /* (B, T, V) */
    if (entropy_out)                                               /* H = -sum_v p_v log p_v */
        *entropy_out = bt_neg(ctx, bt_sum(ctx, bt_mul(ctx, bt_exp(ctx, lp), lp), -1, false));
    bt_tensor *picked = bt_gather(ctx, lp, 2, bt_unsqueeze(ctx, ids, 2)); /* (B, T, 1) */
    const int64_t shape[2] = {bt_dim(ids, 0), bt_dim(ids, 1)};
    return bt_reshape(ctx, picked, 2, shape);
}

enum { RB = 3, RT = 4, RV = 5, RF = 6 };

/* The REINFORCE surrogate sum_{b,t} c_bt log softmax(x_bt W^T)[id_bt] in plain float64. */
static double s_surrogate_f64(const double *w, const float *x, const int64_t *ids,
                              const double *c) {
    double s = 0.0;
    for (int i = 0; i < RB * RT; i++) {
        double logits[RV], mx = -INFINITY, z = 0.0;
        for (int v = 0; v < RV; v++) {
            logits[v] = 0.0;
            for (int k = 0; k < RF; k++)
                logits[v] += (double)x[i * RF + k] * w[v * RF + k];
            mx = fmax(mx, logits[v]);
        }
        for (int v = 0; v < RV; v++)
            z += exp(logits[v] - mx);
        s += c[i] * (logits[ids[i]] - mx - log(z));
    }
    return s;
}

/*  With rho = 1 and no KL the GRPO gradient is the REINFORCE gradient
    -sum_i A_i sum_t w_it grad logp_it / normaliser (w = 1, or 1 / len_i for SEQ_MEAN). */
static void test_reinforce_gradient(bt_loss_agg agg) {
    bt_ctx *ctx = bt_ctx_new();
    float x[RB * RT * RF], w[RV * RF], mask[RB * RT];
    int64_t ids[RB * RT];
    const float adv[RB] = {1.5f, -0.5f, -1.0f};
    const int64_t lengths[RB] = {4, 2, 3};
    for (int i = 0; i < RB * RT * RF; i++)
        x[i] = (float)s_uniform(-1, 1);
    for (int i = 0; i < RV * RF; i++)
        w[i] = (float)s_uniform(-1, 1);
    for (int i = 0; i < RB * RT; i++) {
        ids[i] = (int64_t)s_uniform(0, RV);
        mask[i] = i % RT < lengths[i / RT] ? 1.0f : 0.0f;
    }
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.0;
    cfg.loss_agg = agg;
    cfg.max_tokens = 5;
    double norm = bt_grpo_normaliser(&cfg, lengths, RB);

    const int64_t xs[3] = {RB, RT, RF}, ws[2] = {RV, RF}, bt[2] = {RB, RT}, bs[1] = {RB};
    bt_tensor *tx = s_f32(ctx, 3, xs, x), *tw = s_f32(ctx, 2, ws, w);
    bt_tensor *tids = bt_from_host(ctx, BT_I64, bt_cpu(), 2, bt, ids);
    CHECK_OK(bt_set_requires_grad(tw, true));
    bt_tensor *logp = s_policy(ctx, tx, tw, tids, NULL);
    bt_tensor *loss =
        bt_grpo_loss(ctx, &cfg, logp, bt_detach(ctx, logp), NULL, s_f32(ctx, 1, bs, adv),
                     s_f32(ctx, 2, bt, mask), NULL, NULL, norm, NULL);
    CHECK_OK(bt_backward(loss));
    float g_grpo[RV * RF], g_reinforce[RV * RF];
    s_grad(ctx, tw, g_grpo, RV * RF);

    /* c_it = -A_i w_it / normaliser, the surrogate's coefficient of logp_it */
    double c[RB * RT];
    float cf[RB * RT];
    for (int i = 0; i < RB * RT; i++) {
        double weight = agg == BT_LOSS_AGG_SEQ_MEAN ? 1.0 / (double)lengths[i / RT] : 1.0;
        c[i] = -(double)adv[i / RT] * mask[i] * weight / norm;
        cf[i] = (float)c[i];
    }
    bt_zero_grad(&tw, 1);
    logp = s_policy(ctx, tx, tw, tids, NULL); /* a fresh graph: backward freed the first */
    bt_tensor *surrogate = bt_sum_all(ctx, bt_mul(ctx, s_f32(ctx, 2, bt, cf), logp));
    CHECK_OK(bt_backward(surrogate));
    s_grad(ctx, tw, g_reinforce, RV * RF);
    CHECK(s_rel_diff(g_grpo, g_reinforce, RV * RF) < 1e-5);

    /* central differences of the float64 surrogate */
    double wd[RV * RF];
    for (int i = 0; i < RV * RF; i++)
        wd[i] = w[i];
    const double h = 1e-5;
    for (int i = 0; i < RV * RF; i++) {
        double keep = wd[i];
        wd[i] = keep + h;
        double up = s_surrogate_f64(wd, x, ids, c);
        wd[i] = keep - h;
        double down = s_surrogate_f64(wd, x, ids, c);
        wd[i] = keep;
        CHECK_NEAR(g_grpo[i], (up - down) / (2.0 * h), 2e-6);
    }
    bt_ctx_destroy(&ctx);
}

/* ---- gradient accumulation ------------------------------------------------------------------ */

enum { AB = 8, AT = 6, AV = 5, AF = 4, AMICRO = 4 };

typedef struct s_batch {
    bt_tensor *x, *ids, *old_logp, *ref_logp, *adv, *mask; /* (B, T, F), (B, T) ..., adv (B) */
} s_batch;

static s_batch s_batch_slice(bt_ctx *ctx, const s_batch *b, int64_t start, int64_t end) {
    s_batch m = {
        bt_slice(ctx, b->x, 0, start, end, 1),        bt_slice(ctx, b->ids, 0, start, end, 1),
        bt_slice(ctx, b->old_logp, 0, start, end, 1), bt_slice(ctx, b->ref_logp, 0, start, end, 1),
        bt_slice(ctx, b->adv, 0, start, end, 1),      bt_slice(ctx, b->mask, 0, start, end, 1)};
    return m;
}

/* Runs forward and backward on b; returns the loss value and adds to *stats. */
static double s_step(bt_ctx *ctx, const bt_grpo_config *cfg, const s_batch *b, bt_tensor *w,
                     double norm, bt_grpo_stats *stats) {
    bt_tensor *entropy = NULL;
    bt_tensor *logp = s_policy(ctx, b->x, w, b->ids, &entropy);
    bt_tensor *loss = bt_grpo_loss(ctx, cfg, logp, b->old_logp, b->ref_logp, b->adv, b->mask, NULL,
                                   entropy, norm, stats);
    CHECK(loss != NULL);
    CHECK_OK(bt_backward(loss));
    return s_item(loss);
}

static void test_accumulation(bt_loss_agg agg) {
    bt_ctx *pctx = bt_ctx_new(), *ctx = bt_ctx_new();
    float x[AB * AT * AF], w[AV * AF], mask[AB * AT], adv[AB];
    int64_t ids[AB * AT];
    const int64_t lengths[AB] = {6, 3, 5, 1, 4, 6, 2, 5};
    const double rewards[AB] = {1, 0, 0, 1, 0.5, 0, 1, 1}; /* two groups of four */
    double a[AB];
    CHECK_OK(bt_grpo_advantages(rewards, 2, 4, BT_ADV_NORM_STD, a));
    for (int i = 0; i < AB; i++)
        adv[i] = (float)a[i];
    for (int i = 0; i < AB * AT * AF; i++)
        x[i] = (float)s_uniform(-2, 2);
    for (int i = 0; i < AV * AF; i++)
        w[i] = (float)s_uniform(-1, 1);
    for (int i = 0; i < AB * AT; i++) {
        ids[i] = (int64_t)s_uniform(0, AV);
        mask[i] = i % AT < lengths[i / AT] ? 1.0f : 0.0f;
    }
    const int64_t xs[3] = {AB, AT, AF}, ws[2] = {AV, AF}, bt[2] = {AB, AT}, bs[1] = {AB};
    bt_tensor *tw = s_f32(pctx, 2, ws, w);
    CHECK_OK(bt_set_requires_grad(tw, true));
    s_batch full = {s_f32(ctx, 3, xs, x),
                    bt_from_host(ctx, BT_I64, bt_cpu(), 2, bt, ids),
                    NULL,
                    NULL,
                    s_f32(ctx, 1, bs, adv),
                    s_f32(ctx, 2, bt, mask)};

    /* behaviour and reference log-probs: the current ones moved by up to 0.4 and 0.3 nats, and
       garbage in the padding (-1e4 / +1e4) that would overflow exp() if it were not masked */
    float lp[AB * AT], old[AB * AT], ref[AB * AT];
    bool grad = bt_set_grad_enabled(false);
    CHECK_OK(bt_to_host(s_policy(ctx, full.x, tw, full.ids, NULL), lp, sizeof lp));
    bt_set_grad_enabled(grad);
    for (int i = 0; i < AB * AT; i++) {
        old[i] = mask[i] != 0.0f ? lp[i] + (float)s_uniform(-0.4, 0.4) : -1e4f;
        ref[i] = mask[i] != 0.0f ? lp[i] + (float)s_uniform(-0.3, 0.3) : 1e4f;
    }
    full.old_logp = s_f32(ctx, 2, bt, old);
    full.ref_logp = s_f32(ctx, 2, bt, ref);

    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.05;
    cfg.entropy_coef = 0.01;
    cfg.loss_agg = agg;
    cfg.max_tokens = AT;
    double norm = bt_grpo_normaliser(&cfg, lengths, AB);

    float g_full[AV * AF], g_acc[AV * AF];
    bt_grpo_stats st_full = {0}, st_acc = {0};
    double loss_full = s_step(ctx, &cfg, &full, tw, norm, &st_full);
    s_grad(ctx, tw, g_full, AV * AF);
    bt_zero_grad(&tw, 1);
    double loss_acc = 0.0;
    for (int k = 0; k < AMICRO; k++) {
        s_batch micro = s_batch_slice(ctx, &full, k * AB / AMICRO, (k + 1) * AB / AMICRO);
        loss_acc += s_step(ctx, &cfg, &micro, tw, norm, &st_acc);
    }
    s_grad(ctx, tw, g_acc, AV * AF);

    CHECK(isfinite(loss_full));
    CHECK_REL(loss_acc, loss_full, 1e-5);
    CHECK(s_rel_diff(g_acc, g_full, AV * AF) < 1e-5);
    CHECK(st_full.tokens == 32.0 && st_acc.tokens == 32.0);
    CHECK(st_full.clip_low_tokens + st_full.clip_high_tokens > 0.0); /* both paths exercised */
    CHECK(st_acc.clip_low_tokens == st_full.clip_low_tokens);
    CHECK(st_acc.clip_high_tokens == st_full.clip_high_tokens);
    CHECK_REL(st_acc.pg_loss_sum, st_full.pg_loss_sum, 1e-5);
    CHECK_REL(st_acc.kl_sum, st_full.kl_sum, 1e-5);
    CHECK_REL(st_acc.entropy_sum, st_full.entropy_sum, 1e-5);
    CHECK_REL(st_acc.ratio_max, st_full.ratio_max, 1e-6);
    bt_ctx_destroy(&ctx);
    bt_ctx_destroy(&pctx);
}

/* ---- loss masks: environment tokens inside a completion ------------------------------------- */

/*  A float64 reference of bt_grpo_loss on a padded (B, T) batch, written from the formulas with
    the masked tokens dropped: those tokens are skipped, so whatever they hold cannot reach the
    value.  Fills g_logp and g_ent (B * T) with d loss / d logp and d loss / d entropy (0 at
    skipped tokens) and returns the loss.  adv per row; no decoupling, no TIS. */
static double s_loss_f64(const bt_grpo_config *cfg, int B, int T, const float *logp,
                         const float *old, const float *ref, const float *ent, const float *adv,
                         const float *mask, double *g_logp, double *g_ent, double *tokens) {
    double n_tok = 0.0, loss = 0.0;
    int64_t trained[8] = {0};
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            trained[b] += mask[b * T + t] != 0.0f;
    for (int b = 0; b < B; b++)
        n_tok += (double)trained[b];
    double norm = cfg->loss_agg == BT_LOSS_AGG_TOKEN_MEAN ? n_tok
                  : cfg->loss_agg == BT_LOSS_AGG_SEQ_MEAN ? (double)B
                                                          : (double)B * (double)cfg->max_tokens;
    for (int i = 0; i < B * T; i++) {
        g_logp[i] = g_ent[i] = 0.0;
        if (mask[i] == 0.0f)
            continue; /* an environment token: dropped */
        int b = i / T;
        double w = (cfg->loss_agg == BT_LOSS_AGG_SEQ_MEAN ? 1.0 / (double)trained[b] : 1.0) / norm;
        double A = adv[b], lr = (double)logp[i] - (double)old[i], rho = exp(lr);
        double clamped = fmin(fmax(rho, 1.0 - cfg->clip_low), 1.0 + cfg->clip_high);
        bool unclipped = rho * A <= clamped * A; /* min picks the unclipped term */
        double pg = -fmin(rho * A, clamped * A);
        double x = (double)ref[i] - (double)logp[i]; /* log r, r = p_ref / p */
        double kl = cfg->kl_estimator == BT_KL_K1 ? -x : exp(x) - x - 1.0;
        double dkl = cfg->kl_estimator == BT_KL_K1 ? 1.0 : 1.0 - exp(x);
        loss += w * (pg + cfg->kl_coef * kl - cfg->entropy_coef * (double)ent[i]);
        g_logp[i] = w * ((unclipped ? -rho * A : 0.0) + cfg->kl_coef * dkl);
        g_ent[i] = -w * cfg->entropy_coef;
    }
    *tokens = n_tok;
    return loss;
}

/*  Two episodes of 6 tokens (T = 6): model tokens, then an observation (mask 0) holding garbage
    that would overflow exp() or turn the sums to NaN if it were used, then model tokens again.
    Loss and gradients equal the float64 reference without those tokens for every aggregation,
    with k1 and k3 KL and the entropy bonus; the observation's gradients are exactly 0; the
    statistics count the 8 model tokens only.  And a mask of all ones over the same batch is the
    unmasked loss the library always computed (the same call, the same bits). */
static void test_observation_mask(void) {
    enum { B = 2, T = 6 };
    bt_ctx *ctx = bt_ctx_new();
    const int64_t bt[2] = {B, T}, b1[1] = {B};
    /* episode 0: m m o o m m; episode 1: m o o m m m (o: environment tokens) */
    const float mask[B * T] = {1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1};
    float logp[B * T], old[B * T], ref[B * T], ent[B * T];
    const float adv[B] = {0.75f, -1.25f};
    /* logp - old: 0.35 on A > 0 above 1 + clip_high, -0.35 on A < 0 below 1 - clip_low */
    const float log_ratio[B * T] = {0.35f,  -0.1f, 0, 0,     0.05f,  0.2f,
                                    -0.35f, 0,     0, 0.15f, -0.05f, 0.3f};
    for (int i = 0; i < B * T; i++) {
        logp[i] = (float)s_uniform(-3.0, -0.1);
        old[i] = logp[i] - log_ratio[i];
        ref[i] = logp[i] + (float)s_uniform(-0.3, 0.3);
        ent[i] = (float)s_uniform(0.1, 2.0);
        if (mask[i] == 0.0f) { /* what an observation's slots may hold */
            logp[i] = 80.0f;
            old[i] = -1e4f;
            ref[i] = 1e4f;
            ent[i] = INFINITY;
        }
    }
    const bt_loss_agg aggs[3] = {BT_LOSS_AGG_TOKEN_MEAN, BT_LOSS_AGG_SEQ_MEAN,
                                 BT_LOSS_AGG_TOKEN_SUM_NORM};
    const bt_kl_estimator kls[2] = {BT_KL_K1, BT_KL_K3};
    double clipped = 0;
    for (int a = 0; a < 3; a++) {
        for (int k = 0; k < 2; k++) {
            bt_grpo_config cfg = bt_test_grpo_config();
            cfg.loss_agg = aggs[a];
            cfg.max_tokens = 7;
            cfg.kl_coef = 0.1;
            cfg.kl_estimator = kls[k];
            cfg.entropy_coef = 0.02;
            double want_g[B * T], want_ge[B * T], tokens;
            double want =
                s_loss_f64(&cfg, B, T, logp, old, ref, ent, adv, mask, want_g, want_ge, &tokens);
            CHECK(tokens == 8.0);
            const int64_t lens[B] = {4, 4}; /* the trained tokens of each episode */
            double norm = bt_grpo_normaliser(&cfg, lens, B);
            bt_tensor *tl = s_f32(ctx, 2, bt, logp), *te = s_f32(ctx, 2, bt, ent);
            CHECK_OK(bt_set_requires_grad(tl, true));
            CHECK_OK(bt_set_requires_grad(te, true));
            bt_grpo_stats st = {0};
            bt_tensor *loss =
                bt_grpo_loss(ctx, &cfg, tl, s_f32(ctx, 2, bt, old), s_f32(ctx, 2, bt, ref),
                             s_f32(ctx, 1, b1, adv), s_f32(ctx, 2, bt, mask), NULL, te, norm, &st);
            CHECK_REL(s_item(loss), want, 1e-6);
            CHECK_OK(bt_backward(loss));
            float g[B * T], ge[B * T];
            s_grad(ctx, tl, g, B * T);
            s_grad(ctx, te, ge, B * T);
            for (int i = 0; i < B * T; i++) {
                CHECK_NEAR(g[i], want_g[i], 1e-6);
                CHECK_NEAR(ge[i], want_ge[i], 1e-8);
                if (mask[i] == 0.0f)
                    CHECK(g[i] == 0.0f && ge[i] == 0.0f); /* exactly: no term reaches them */
            }
            CHECK(st.tokens == 8.0);
            CHECK(isfinite(st.ratio_max) && isfinite(st.ratio_sumsq) && isfinite(st.kl_sum));
            CHECK(isfinite(st.entropy_sum) && isfinite(st.mismatch_sum));
            CHECK(st.clip_low_tokens == 1.0 && st.clip_high_tokens == 1.0);
            clipped += st.clip_low_tokens + st.clip_high_tokens;
            bt_ctx_reset(ctx);
        }
    }
    CHECK(clipped == 12.0); /* both clipped branches, in each of the six losses */
    bt_ctx_destroy(&ctx);
}

/*  d loss / d logits at an environment token is exactly zero, every vocabulary entry of it: a
    policy of free logits (B, T, V) gives log-probs and entropies, and the masked positions'
    logits get no gradient while every model token's do.  Changing the id of an environment
    token (which, here, no other position sees) changes neither the loss nor any gradient, bit
    for bit.  (Through attention it does reach the gradient: test_trainer.c, one layer.) */
static void test_masked_logits(void) {
    enum { B = 2, T = 5, V = 7 };
    bt_ctx *ctx = bt_ctx_new();
    const float mask[B * T] = {1, 0, 0, 1, 1, 1, 1, 0, 1, 0};
    float logits[B * T * V], old[B * T];
    int64_t ids[B * T];
    const float adv[B] = {1.0f, -0.5f};
    for (int i = 0; i < B * T * V; i++)
        logits[i] = (float)s_uniform(-2, 2);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int64_t)s_uniform(0, V);
        old[i] = (float)s_uniform(-3, -1);
    }
    const int64_t s3[3] = {B, T, V}, s2[2] = {B, T}, s1[1] = {B};
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.0;
    cfg.entropy_coef = 0.05;
    float g[2][B * T * V];
    double loss[2];
    for (int run = 0; run < 2; run++) {
        if (run == 1)
            ids[1] = (ids[1] + 3) % V; /* an environment token's id changes */
        bt_tensor *tlog = s_f32(ctx, 3, s3, logits);
        CHECK_OK(bt_set_requires_grad(tlog, true));
        bt_tensor *lp = bt_log_softmax(ctx, tlog, -1); /* (B, T, V) */
        bt_tensor *ent = bt_neg(ctx, bt_sum(ctx, bt_mul(ctx, bt_exp(ctx, lp), lp), -1, false));
        bt_tensor *tids = bt_from_host(ctx, BT_I64, bt_cpu(), 2, s2, ids);
        bt_tensor *logp = bt_reshape(ctx, bt_gather(ctx, lp, 2, bt_unsqueeze(ctx, tids, 2)), 2, s2);
        bt_tensor *l =
            bt_grpo_loss(ctx, &cfg, logp, s_f32(ctx, 2, s2, old), NULL, s_f32(ctx, 1, s1, adv),
                         s_f32(ctx, 2, s2, mask), NULL, ent, 7.0, NULL);
        loss[run] = s_item(l);
        CHECK_OK(bt_backward(l));
        s_grad(ctx, tlog, g[run], B * T * V);
        bt_ctx_reset(ctx);
    }
    for (int i = 0; i < B * T; i++) {
        double sq = 0.0;
        for (int v = 0; v < V; v++)
            sq += (double)g[0][i * V + v] * g[0][i * V + v];
        if (mask[i] == 0.0f)
            CHECK(sq == 0.0); /* every entry exactly 0 */
        else
            CHECK(sq > 0.0);
    }
    CHECK(loss[0] == loss[1]);
    CHECK(memcmp(g[0], g[1], sizeof g[0]) == 0);
    bt_ctx_destroy(&ctx);
}

/* ---- per-turn advantages -------------------------------------------------------------------- */

/*  Return-to-go and the group's normalisation by hand.  Group 0 (gamma 0.5): episode 0 took 3
    turns with rewards 1, 0, 2: G = 1 + 0.5 (0 + 0.5 * 2) = 1.5, 0 + 0.5 * 2 = 1, 2; episode 1 one
    turn of reward 0: G = 0.  The group's four returns 1.5, 1, 2, 0: mean 1.125, deviations
    0.375, -0.125, 0.875, -1.125, unbiased variance (0.140625 + 0.015625 + 0.765625 + 1.265625) / 3
    = 0.729166..., std 0.853912...; group 1: two episodes of two turns of reward 3. */
static void test_turn_advantages(void) {
    enum { K = 4 };
    const double r[4 * K] = {1, 0, 2, 0, 0, 0, 0, 0, /* group 0 */
                             3, 3, 0, 0, 3, 3, 0, 0};
    const int64_t turns[4] = {3, 1, 2, 2};
    double a[4 * K];
    CHECK_OK(bt_grpo_turn_advantages(r, turns, 2, 2, K, 0.5, BT_ADV_NORM_STD, a));
    const double G[4] = {1.5, 1.0, 2.0, 0.0}, mean = 1.125;
    double ss = 0;
    for (int i = 0; i < 4; i++)
        ss += (G[i] - mean) * (G[i] - mean);
    double sd = sqrt(ss / 3.0) + 1e-6;
    CHECK_NEAR(sd - 1e-6, 0.8539125638299665, 1e-12);
    CHECK_NEAR(a[0], (1.5 - mean) / sd, 1e-12);
    CHECK_NEAR(a[1], (1.0 - mean) / sd, 1e-12);
    CHECK_NEAR(a[2], (2.0 - mean) / sd, 1e-12);
    CHECK(a[3] == 0.0); /* past the episode's turns */
    CHECK_NEAR(a[K], (0.0 - mean) / sd, 1e-12);
    for (int t = 1; t < K; t++)
        CHECK(a[K + t] == 0.0);
    /* group 1's returns: 3 + 0.5 * 3 = 4.5 and 3, twice: mean 3.75, deviations +-0.75 */
    double sd1 = sqrt(4 * 0.5625 / 3.0) + 1e-6;
    CHECK_NEAR(a[2 * K], 0.75 / sd1, 1e-12);
    CHECK_NEAR(a[2 * K + 1], -0.75 / sd1, 1e-12);
    CHECK_NEAR(a[3 * K], 0.75 / sd1, 1e-12);

    /* gamma 1, Dr. GRPO's norm: the undiscounted sums less the group's mean (3, 2, 2, 0 -> 1.75) */
    CHECK_OK(bt_grpo_turn_advantages(r, turns, 1, 2, K, 1.0, BT_ADV_NORM_NONE, a));
    CHECK_NEAR(a[0], 3.0 - 1.75, 1e-15);
    CHECK_NEAR(a[1], 2.0 - 1.75, 1e-15);
    CHECK_NEAR(a[2], 2.0 - 1.75, 1e-15);
    CHECK_NEAR(a[K], 0.0 - 1.75, 1e-15);

    /* one turn per episode: the per-episode advantages, whatever gamma */
    const double single[8] = {2, 4, 9, 5, 1, 0, 0, 1};
    const int64_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    double per_turn[8], per_episode[8];
    CHECK_OK(bt_grpo_turn_advantages(single, ones, 2, 4, 1, 0.3, BT_ADV_NORM_STD, per_turn));
    CHECK_OK(bt_grpo_advantages(single, 2, 4, BT_ADV_NORM_STD, per_episode));
    for (int i = 0; i < 8; i++)
        CHECK(per_turn[i] == per_episode[i]);

    /* bad input is named */
    CHECK(bt_grpo_turn_advantages(r, turns, 2, 2, K, 1.5, BT_ADV_NORM_STD, a) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "grpo.turn_gamma");
    const int64_t zero[4] = {3, 0, 2, 2};
    CHECK(bt_grpo_turn_advantages(r, zero, 2, 2, K, 1.0, BT_ADV_NORM_STD, a) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "episode 1: n_turns 0");
    double nan_r[4 * K];
    memcpy(nan_r, r, sizeof nan_r);
    nan_r[K + 0] = NAN;
    CHECK(bt_grpo_turn_advantages(nan_r, turns, 2, 2, K, 1.0, BT_ADV_NORM_STD, a) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "episode 1 turn 0");
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.turn_gamma = -0.1;
    CHECK(bt_grpo_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "grpo.turn_gamma");
}

/* ---- learning-rate schedules ---------------------------------------------------------------- */

static void test_lr_schedules(void) {
    bt_lr_schedule s = {.kind = BT_LR_CONSTANT,
                        .lr = 1e-3,
                        .min_lr = 1e-4,
                        .warmup_steps = 10,
                        .total_steps = 110,
                        .decay_steps = 20};
    CHECK(bt_lr_at(&s, 0) == 1e-3 && bt_lr_at(&s, 500) == 1e-3);

    s.kind = BT_LR_WARMUP_LINEAR; /* lr (s + 1) / 10 during warmup */
    CHECK_NEAR(bt_lr_at(&s, 0), 1e-4, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 4), 5e-4, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 9), 1e-3, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 1000), 1e-3, 1e-15);

    s.kind = BT_LR_COSINE; /* 1e-4 + 0.5 * 9e-4 * (1 + cos(pi (s - 10) / 100)) */
    CHECK_OK(bt_lr_schedule_validate(&s));
    CHECK_NEAR(bt_lr_at(&s, 0), 1e-4, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 10), 1e-3, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 35), 1e-4 + 4.5e-4 * (1.0 + 0.7071067811865476), 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 60), 5.5e-4, 1e-15); /* halfway: the mean of lr and min_lr */
    CHECK_NEAR(bt_lr_at(&s, 110), 1e-4, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 200), 1e-4, 1e-15);

    s.kind = BT_LR_WSD; /* stable until 110 - 20 = 90, then linear to 1e-4 at 110 */
    CHECK_OK(bt_lr_schedule_validate(&s));
    CHECK_NEAR(bt_lr_at(&s, 9), 1e-3, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 50), 1e-3, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 90), 1e-3, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 95), 1e-3 - 0.25 * 9e-4, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 100), 5.5e-4, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 110), 1e-4, 1e-15);
    CHECK_NEAR(bt_lr_at(&s, 111), 1e-4, 1e-15);

    s.decay_steps = 0;
    CHECK(bt_lr_schedule_validate(&s) == BT_EINVAL);
    s.kind = BT_LR_COSINE;
    s.total_steps = 10;
    CHECK(bt_lr_schedule_validate(&s) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "total_steps");

    const char *names[4] = {"constant", "warmup", "cosine", "wsd"};
    const bt_lr_kind kinds[4] = {BT_LR_CONSTANT, BT_LR_WARMUP_LINEAR, BT_LR_COSINE, BT_LR_WSD};
    for (int i = 0; i < 4; i++) {
        bt_lr_kind k = BT_LR_CONSTANT;
        CHECK_OK(bt_lr_kind_parse(names[i], &k));
        CHECK(k == kinds[i]);
        CHECK(strcmp(bt_lr_kind_name(kinds[i]), names[i]) == 0);
    }
    bt_lr_kind k;
    CHECK(bt_lr_kind_parse("linear", &k) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "\"linear\"");
    CHECK_STR_CONTAINS(bt_last_error(), "constant, warmup, cosine or wsd");
}

int main(void) {
    test_advantages();
    test_config();
    test_loss_hand_computed();
    test_packed_row();
    test_decoupled();
    test_tis();
    test_sft_loss();
    const bt_loss_agg aggs[3] = {BT_LOSS_AGG_TOKEN_MEAN, BT_LOSS_AGG_SEQ_MEAN,
                                 BT_LOSS_AGG_TOKEN_SUM_NORM};
    for (int i = 0; i < 3; i++) {
        test_reinforce_gradient(aggs[i]);
        test_accumulation(aggs[i]);
    }
    test_observation_mask();
    test_masked_logits();
    test_turn_advantages();
    test_lr_schedules();
    return check_exit();
}
