/*  test_trigger.c — evaluation triggers against firing lists computed here by plain loops: steps,
    epochs and training seconds, marks, the training clock, resume by copying the struct, the
    adaptive interval on synthetic metric streams, deferral while busy, and config errors. */
#include "baton/trigger.h"
#include "check.h"

#include <stdarg.h>
#include <stdint.h>

#define S_MAX_FIRES 512

/* ---- fixed intervals --------------------------------------------------------------------------
 */

static void s_test_steps(void) {
    bt_trigger_config cfg;
    bt_trigger_config_init(&cfg);
    cfg.every_steps = 3;
    bt_trigger t;
    bt_trigger_init(&t, &cfg);
    int64_t fired[S_MAX_FIRES];
    int n = 0;
    for (int64_t s = 1; s <= 20; s++) {
        int r = bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, false, NULL, NULL);
        CHECK(r == 0 || r == BT_TRIGGER_STEPS);
        if (r)
            fired[n++] = s;
    }
    int m = 0; /* expected: the multiples of 3 up to 20 */
    for (int64_t s = 3; s <= 20; s += 3, m++)
        CHECK(m < n && fired[m] == s);
    CHECK(n == m && t.fired == m);

    /* an evaluation outside the trigger at step 4: the interval counts from it */
    bt_trigger_init(&t, &cfg);
    n = 0;
    for (int64_t s = 1; s <= 20; s++) {
        if (s == 4) {
            bt_trigger_mark(&t, &(bt_trigger_at){4, 0, 0.0, 0});
            continue;
        }
        if (bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, false, NULL, NULL))
            fired[n++] = s;
    }
    int64_t want[] = {3, 7, 10, 13, 16, 19};
    CHECK(n == 6);
    for (int i = 0; i < 6 && i < n; i++)
        CHECK(fired[i] == want[i]);

    /* every_steps 0: the step trigger is off */
    cfg.every_steps = 0;
    bt_trigger_init(&t, &cfg);
    for (int64_t s = 1; s <= 100; s++)
        CHECK(bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, false, NULL, NULL) == 0);
}

/*  Completed epochs as a function of the step: epoch = step * num / den (at most one per step). */
static void s_test_epochs(void) {
    const int64_t ratios[][2] = {{7, 20}, {3, 10}, {1, 1}, {1, 3}};
    for (int64_t every = 1; every <= 4; every++) {
        for (int r = 0; r < 4; r++) {
            int64_t num = ratios[r][0], den = ratios[r][1];
            bt_trigger_config cfg;
            bt_trigger_config_init(&cfg);
            cfg.every_steps = 0;
            cfg.every_epochs = every;
            bt_trigger t;
            bt_trigger_init(&t, &cfg);
            int fires = 0;
            for (int64_t s = 1; s <= 200; s++) {
                int64_t epoch = s * num / den, prev = (s - 1) * num / den;
                /* fires exactly when the epoch count crosses a multiple of every */
                int want = epoch / every > prev / every ? BT_TRIGGER_EPOCHS : 0;
                int got =
                    bt_trigger_check(&t, &(bt_trigger_at){s, epoch, 0.0, 0}, false, NULL, NULL);
                CHECK(got == want);
                fires += got != 0;
            }
            CHECK(fires == (int)(200 * num / den / every)); /* none missed */
        }
    }
}

/*  Irregular step durations, all multiples of 0.25 s so the sums are exact, with one gap that spans
    more than two multiples of 10 s. */
static double s_gap(int i) {
    static const double gaps[] = {0.75, 1.5, 0.25, 2.0, 3.5, 0.5, 1.25};
    return i == 40 ? 25.0 : gaps[i % 7];
}

static void s_test_seconds(void) {
    bt_trigger_config cfg;
    bt_trigger_config_init(&cfg);
    cfg.every_steps = 0;
    cfg.every_seconds = 10.0;
    bt_trigger t;
    bt_trigger_init(&t, &cfg);
    double now = 0.0;
    int fires = 0;
    for (int i = 1; i <= 200; i++) {
        double prev = now;
        now += s_gap(i);
        /* fires at the first check at or after each multiple of 10 s, once per check */
        int want = floor(now / 10.0) > floor(prev / 10.0) ? BT_TRIGGER_SECONDS : 0;
        int got = bt_trigger_check(&t, &(bt_trigger_at){i, 0, now, 0}, false, NULL, NULL);
        CHECK(got == want);
        fires += got != 0;
    }
    CHECK(fires > 20);

    /* a mark at 13 s: the next multiple is 23 s */
    bt_trigger_init(&t, &cfg);
    bt_trigger_mark(&t, &(bt_trigger_at){0, 0, 13.0, 0});
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){1, 0, 22.75, 0}, false, NULL, NULL) == 0);
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){2, 0, 23.0, 0}, false, NULL, NULL) ==
          BT_TRIGGER_SECONDS);
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){3, 0, 32.5, 0}, false, NULL, NULL) == 0);
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){4, 0, 33.5, 0}, false, NULL, NULL) ==
          BT_TRIGGER_SECONDS);

    /* a second check at the same time never fires again, also where (seconds - last) / every
       rounds one short of the whole number of intervals */
    cfg.every_seconds = 1.1692;
    bt_trigger_init(&t, &cfg);
    bt_trigger_mark(&t, &(bt_trigger_at){0, 0, 863.369, 0});
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){1, 0, 894.9374, 0}, false, NULL, NULL) ==
          BT_TRIGGER_SECONDS);
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){2, 0, 894.9374, 0}, false, NULL, NULL) == 0);
    CHECK(t.last_seconds <= 894.9374);
    cfg.every_seconds = 10.0;

    /* steps every 5 and seconds every 10 at 1.5 s a step: each bit on its own schedule, both bits
       when both are due (step 20 = 30 s) */
    cfg.every_steps = 5;
    bt_trigger_init(&t, &cfg);
    int both = 0;
    for (int64_t s = 1; s <= 100; s++) {
        double sec = 1.5 * (double)s, prev = 1.5 * (double)(s - 1);
        int want = (s % 5 == 0 ? BT_TRIGGER_STEPS : 0) |
                   (floor(sec / 10.0) > floor(prev / 10.0) ? BT_TRIGGER_SECONDS : 0);
        int got = bt_trigger_check(&t, &(bt_trigger_at){s, 0, sec, 0}, false, NULL, NULL);
        CHECK(got == want);
        both += got == (BT_TRIGGER_STEPS | BT_TRIGGER_SECONDS);
    }
    CHECK(both >= 2);
}

static void s_test_clock(void) {
    bt_train_clock c;
    bt_train_clock_init(&c, 0.0);
    CHECK(bt_train_clock_seconds(&c, 50.0) == 0.0); /* stopped */
    bt_train_clock_start(&c, 0.0);
    CHECK(bt_train_clock_seconds(&c, 4.0) == 4.0);
    bt_train_clock_stop(&c, 10.0);
    bt_train_clock_stop(&c, 60.0); /* idempotent */
    CHECK(bt_train_clock_seconds(&c, 99.0) == 10.0);
    bt_train_clock_start(&c, 100.0);
    bt_train_clock_start(&c, 103.0); /* idempotent: still counting from 100 */
    CHECK(bt_train_clock_seconds(&c, 105.0) == 15.0);

    /* a resume restores the saved seconds and counts from its own start */
    bt_train_clock_init(&c, 15.0);
    bt_train_clock_start(&c, 200.0);
    CHECK(bt_train_clock_seconds(&c, 205.0) == 20.0);
    bt_train_clock_stop(&c, 205.0);
    bt_train_clock_start(&c, 300.0);
    CHECK(bt_train_clock_seconds(&c, 301.0) == 21.0);

    /* a seconds trigger on the clock: 1 s steps, stopped after step 12 for 900 s of wall time;
       the 20 s evaluation comes 8 steps after the resume, not at the resume */
    bt_trigger_config cfg;
    bt_trigger_config_init(&cfg);
    cfg.every_steps = 0;
    cfg.every_seconds = 10.0;
    bt_trigger t;
    bt_trigger_init(&t, &cfg);
    bt_train_clock_init(&c, 0.0);
    bt_train_clock_start(&c, 0.0);
    double wall = 0.0;
    for (int64_t s = 1; s <= 30; s++) {
        wall += 1.0;
        if (s == 13) {
            bt_train_clock_stop(&c, wall - 1.0);
            double saved = bt_train_clock_seconds(&c, wall);
            CHECK(saved == 12.0);
            wall += 900.0;
            bt_train_clock_init(&c, saved);
            bt_train_clock_start(&c, wall - 1.0);
        }
        int got = bt_trigger_check(&t, &(bt_trigger_at){s, 0, bt_train_clock_seconds(&c, wall), 0},
                                   false, NULL, NULL);
        CHECK(got == (s % 10 == 0 ? BT_TRIGGER_SECONDS : 0));
    }
}

/* ---- resume -----------------------------------------------------------------------------------
 */

/*  Rises fast, plateaus, drops at step 120, then drifts up slowly. */
static double s_metric_mixed(int64_t s) {
    if (s < 60)
        return 0.02 * (double)s;
    if (s < 120)
        return 1.2 + 0.0001 * (double)(s - 60);
    return 0.9 + 0.003 * (double)(s - 120);
}

typedef struct s_log {
    char text[1 << 16];
    size_t len;
} s_log;

static void s_logf(s_log *log, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void s_logf(s_log *log, const char *fmt, ...) {
    size_t room = sizeof log->text - log->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(log->text + log->len, room, fmt, ap);
    va_end(ap);
    CHECK(n >= 0 && (size_t)n < room);
    if (n >= 0 && (size_t)n < room)
        log->len += (size_t)n;
}

/*  Steps 1..200 with steps, epochs and seconds triggers, a synchronous evaluation whenever one
    fires, evaluators busy 3 steps in 11, and steps of 1.25 or 0.5 s.  With split > 0 the run
    stops after step split: the trigger is copied out (a checkpoint), the original overwritten,
    900 s of wall time pass, and the copy and the clock's saved seconds resume it. */
static void s_simulate(const bt_trigger_config *cfg, int64_t split, s_log *log) {
    log->len = 0;
    log->text[0] = '\0';
    bt_trigger t;
    bt_trigger_init(&t, cfg);
    bt_trigger_mark(&t, &(bt_trigger_at){0, 0, 0.0, 0});
    bt_trigger_observe(&t, 0, s_metric_mixed(0), NULL, 0);
    bt_train_clock c;
    bt_train_clock_init(&c, 0.0);
    bt_train_clock_start(&c, 0.0);
    double wall = 0.0;
    for (int64_t s = 1; s <= 200; s++) {
        wall += s % 3 ? 1.25 : 0.5;
        bt_trigger_event ev[2];
        int n_ev;
        int r = bt_trigger_check(
            &t, &(bt_trigger_at){s, s * 7 / 20, bt_train_clock_seconds(&c, wall), 0}, s % 11 < 3,
            ev, &n_ev);
        for (int i = 0; i < n_ev; i++)
            s_logf(log, "%lld check %s %s\n", (long long)s, ev[i].kind, ev[i].reason);
        if (r) {
            s_logf(log, "%lld fire %d\n", (long long)s, r);
            int n = bt_trigger_observe(&t, s, s_metric_mixed(s), ev, 2);
            for (int i = 0; i < n; i++)
                s_logf(log, "%lld observe %s %lld->%lld %s\n", (long long)s, ev[i].kind,
                       (long long)ev[i].old_interval, (long long)ev[i].new_interval, ev[i].reason);
        }
        if (s == split) {
            bt_trigger saved = t;
            bt_train_clock_stop(&c, wall);
            double seconds = bt_train_clock_seconds(&c, wall);
            memset(&t, 0xA5, sizeof t);
            memset(&c, 0xA5, sizeof c);
            wall += 900.0;
            t = saved;
            bt_train_clock_init(&c, seconds);
            bt_train_clock_start(&c, wall);
        }
    }
}

static void s_test_resume(void) {
    static s_log whole, resumed;
    bt_trigger_config cfg;
    bt_trigger_config_init(&cfg);
    cfg.every_steps = 8;
    cfg.every_epochs = 5;
    cfg.every_seconds = 30.0;
    cfg.floor = 2;
    cfg.ceiling = 32;
    for (int adaptive = 0; adaptive <= 1; adaptive++) {
        cfg.adaptive = adaptive;
        CHECK_OK(bt_trigger_config_validate(&cfg));
        s_simulate(&cfg, 0, &whole);
        if (adaptive) { /* the stream exercises every kind of event */
            CHECK_STR_CONTAINS(whole.text, "deferred");
            CHECK_STR_CONTAINS(whole.text, "alarm");
            CHECK_STR_CONTAINS(whole.text, "fast");
            CHECK_STR_CONTAINS(whole.text, "plateau");
        }
        const int64_t splits[] = {1, 2, 37, 100, 121, 150, 199};
        for (int i = 0; i < 7; i++) {
            s_simulate(&cfg, splits[i], &resumed);
            CHECK(whole.len == resumed.len && strcmp(whole.text, resumed.text) == 0);
        }
    }
}

/* ---- adaptive interval ------------------------------------------------------------------------
 */

typedef struct s_trace {
    int64_t fires[S_MAX_FIRES];
    int64_t interval_after[S_MAX_FIRES]; /* the interval once the fire's metric was observed */
    int n_fires;
    bt_trigger_event ev[64];
    int n_ev;
} s_trace;

/*  Evaluates at step 0 and whenever the step trigger fires, feeding metric(step) each time. */
static void s_drive(bt_trigger *t, int64_t steps, double (*metric)(int64_t), s_trace *tr) {
    memset(tr, 0, sizeof *tr);
    bt_trigger_mark(t, &(bt_trigger_at){0, 0, 0.0, 0});
    CHECK(bt_trigger_observe(t, 0, metric(0), NULL, 0) == 0);
    for (int64_t s = 1; s <= steps; s++) {
        int n_ev = -1;
        int r = bt_trigger_check(t, &(bt_trigger_at){s, 0, 0.0, 0}, false, NULL, &n_ev);
        CHECK(n_ev == 0);
        if (!r)
            continue;
        CHECK(r == BT_TRIGGER_STEPS);
        bt_trigger_event ev[2];
        int n = bt_trigger_observe(t, s, metric(s), ev, 2);
        for (int i = 0; i < n && tr->n_ev < 64; i++)
            tr->ev[tr->n_ev++] = ev[i];
        if (tr->n_fires < S_MAX_FIRES) {
            tr->fires[tr->n_fires] = s;
            tr->interval_after[tr->n_fires++] = t->interval;
        }
    }
    /* the step rule: each fire comes one current interval after the one before */
    for (int i = 1; i < tr->n_fires; i++)
        CHECK(tr->fires[i] - tr->fires[i - 1] == tr->interval_after[i - 1]);
}

static double s_metric_fast(int64_t s) {
    return 0.05 * (double)s;
}
static double s_metric_fast_down(int64_t s) {
    return 1.0 - 0.05 * (double)s;
}
static double s_metric_flat(int64_t s) {
    return 0.5;
}
static double s_metric_drift_up(int64_t s) {
    return 0.1 + 0.003 * (double)s;
}
static double s_metric_drift_down(int64_t s) {
    return 2.0 - 0.003 * (double)s;
}
static double s_metric_drop(int64_t s) {
    return s < 100 ? s_metric_drift_up(s) : s_metric_drift_up(s) - 0.2;
}

static void s_adaptive_config(bt_trigger_config *cfg) {
    bt_trigger_config_init(cfg);
    cfg->adaptive = true;
    cfg->every_steps = 16;
    cfg->floor = 2;
    cfg->ceiling = 64;
    CHECK_OK(bt_trigger_config_validate(cfg));
}

static void s_test_adaptive(void) {
    static s_trace tr;
    bt_trigger_config cfg;
    s_adaptive_config(&cfg);
    bt_trigger t;

    /* fast rise or fall (|0.05|/step > fast 0.01; the fall with the drop alarm off):
       16 -> 8 -> 4 -> 2, then it stays at the floor */
    double (*fasts[2])(int64_t) = {s_metric_fast, s_metric_fast_down};
    for (int f = 0; f < 2; f++) {
        bt_trigger_config c = cfg;
        c.drop = f ? INFINITY : c.drop;
        bt_trigger_init(&t, &c);
        s_drive(&t, 200, fasts[f], &tr);
        int k = 0;
        for (int64_t iv = 16; iv > cfg.floor; iv /= 2, k++) {
            CHECK(k < tr.n_ev && strcmp(tr.ev[k].kind, "interval") == 0);
            CHECK(k < tr.n_ev && tr.ev[k].old_interval == iv && tr.ev[k].new_interval == iv / 2);
            if (k < tr.n_ev) {
                CHECK_STR_CONTAINS(tr.ev[k].reason, "fast");
                CHECK_NEAR(tr.ev[k].rate, f ? -0.05 : 0.05, 1e-12);
                CHECK_NEAR(tr.ev[k].value, fasts[f](tr.ev[k].step), 1e-12);
            }
        }
        CHECK(tr.n_ev == 3 && t.interval == cfg.floor);
        CHECK(tr.n_fires >= 4 && tr.fires[0] == 16 && tr.fires[1] == 24 && tr.fires[2] == 28 &&
              tr.fires[3] == 30);
    }

    /* flat (rate 0 < plateau 0.001): 16 -> 32 -> 64, then it stays at the ceiling */
    bt_trigger_init(&t, &cfg);
    s_drive(&t, 400, s_metric_flat, &tr);
    int k = 0;
    for (int64_t iv = 16; iv < cfg.ceiling; iv *= 2, k++) {
        CHECK(k < tr.n_ev && strcmp(tr.ev[k].kind, "interval") == 0);
        CHECK(k < tr.n_ev && tr.ev[k].old_interval == iv && tr.ev[k].new_interval == iv * 2);
        if (k < tr.n_ev)
            CHECK_STR_CONTAINS(tr.ev[k].reason, "plateau");
    }
    CHECK(tr.n_ev == 2 && t.interval == cfg.ceiling);
    CHECK(tr.n_fires >= 4 && tr.fires[0] == 16 && tr.fires[1] == 48 && tr.fires[2] == 112 &&
          tr.fires[3] == 176);

    /* slow drift, up or down (|0.003|/step, between plateau and fast; 0.048 per evaluation is
       under drop 0.05): the interval stays, the fires are the multiples of 16 */
    double (*drifts[2])(int64_t) = {s_metric_drift_up, s_metric_drift_down};
    for (int d = 0; d < 2; d++) {
        bt_trigger_init(&t, &cfg);
        s_drive(&t, 400, drifts[d], &tr);
        CHECK(tr.n_ev == 0 && t.interval == 16 && tr.n_fires == 25);
        CHECK_NEAR(fabs(t.rate_ema), 0.003, 1e-12);
    }

    /* a drop of 0.2 at step 100: the evaluation at 112 sees 0.236 after 0.388 at 96, a fall of
       0.152 > drop 0.05 */
    bt_trigger_init(&t, &cfg);
    s_drive(&t, 112, s_metric_drop, &tr);
    CHECK(tr.n_fires == 7 && tr.fires[6] == 112);
    CHECK(tr.n_ev == 2 && t.interval == 8);
    if (tr.n_ev == 2) {
        CHECK(strcmp(tr.ev[0].kind, "alarm") == 0 && tr.ev[0].step == 112);
        CHECK_NEAR(tr.ev[0].value, s_metric_drop(112), 1e-12);
        CHECK_STR_CONTAINS(tr.ev[0].reason, "drop");
        CHECK(strcmp(tr.ev[1].kind, "interval") == 0);
        CHECK(tr.ev[1].old_interval == 16 && tr.ev[1].new_interval == 8);
        CHECK_STR_CONTAINS(tr.ev[1].reason, "drop");
    }

    /* the EMA by hand (ema 0.25): values 0, 0.1, 0.15, 0.15 at steps 0, 10, 20, 30 have rates
       0.01, 0.005, 0 and EMAs 0.01, 0.25*0.005 + 0.75*0.01 = 0.00875, 0.75*0.00875 = 0.0065625
       (fast 0.02 keeps the interval) */
    cfg.fast = 0.02;
    cfg.ema = 0.25;
    bt_trigger_init(&t, &cfg);
    const double vals[] = {0.0, 0.1, 0.15, 0.15}, emas[] = {0.01, 0.00875, 0.0065625};
    bt_trigger_event ev[2];
    CHECK(bt_trigger_observe(&t, 0, vals[0], ev, 2) == 0 && !t.has_rate);
    for (int i = 1; i < 4; i++) {
        CHECK(bt_trigger_observe(&t, 10 * i, vals[i], ev, 2) == 0);
        CHECK_NEAR(t.rate_ema, emas[i - 1], 1e-15);
    }
    CHECK(bt_trigger_observe(&t, 30, 0.16, ev, 2) == 0); /* same step: no rate */
    CHECK_NEAR(t.rate_ema, 0.0065625, 1e-15);
    CHECK(t.last_value == 0.16);
    CHECK(bt_trigger_observe(&t, 25, 0.0, ev, 2) == 0); /* out of order: ignored */
    CHECK(bt_trigger_observe(&t, 40, NAN, ev, 2) == 0); /* not a number: ignored */
    CHECK(t.last_value == 0.16 && t.last_value_step == 30 && t.interval == 16);

    /* room for one event: the alarm; the interval halves all the same */
    bt_trigger_init(&t, &cfg);
    bt_trigger_observe(&t, 0, 0.5, NULL, 0);
    CHECK(bt_trigger_observe(&t, 10, 0.4, ev, 1) == 1 && strcmp(ev[0].kind, "alarm") == 0);
    CHECK(ev[0].old_interval == 16 && ev[0].new_interval == 16 && t.interval == 8);

    /* fixed mode records the metric and never changes the interval */
    cfg.adaptive = false;
    bt_trigger_init(&t, &cfg);
    s_drive(&t, 200, s_metric_fast, &tr);
    CHECK(tr.n_ev == 0 && t.interval == 16 && tr.n_fires == 12 && t.last_value_step == 192);
}

static void s_test_busy(void) {
    bt_trigger_config cfg;
    bt_trigger_config_init(&cfg);
    cfg.every_steps = 5;
    cfg.adaptive = true;
    bt_trigger t;
    bt_trigger_init(&t, &cfg);
    bt_trigger_event ev;
    int n_ev;

    /* due at 5 while busy through 8: one "deferred" event, the evaluation at 9 */
    for (int64_t s = 1; s <= 9; s++) {
        bool busy = s >= 5 && s <= 8;
        int r = bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, busy, &ev, &n_ev);
        CHECK(r == (s == 9 ? BT_TRIGGER_STEPS : 0));
        CHECK(n_ev == (s == 5));
        if (s == 5) {
            CHECK(strcmp(ev.kind, "deferred") == 0 && ev.step == 5);
            CHECK_STR_CONTAINS(ev.reason, "steps");
            CHECK_STR_CONTAINS(ev.reason, "busy");
        }
        CHECK(t.pending == busy);
    }
    CHECK(t.fired == 1 && t.deferred == 1);
    /* the next interval counts from the evaluation at 9 */
    for (int64_t s = 10; s <= 14; s++)
        CHECK(bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, false, &ev, &n_ev) ==
              (s == 14 ? BT_TRIGGER_STEPS : 0));

    /* the reason is remembered: deferred at 5, an earlier evaluation's flat metric doubles the
       interval to 10 meanwhile; step 6, where nothing is due by itself, fires for the steps */
    bt_trigger_init(&t, &cfg);
    bt_trigger_observe(&t, 0, 0.5, NULL, 0);
    for (int64_t s = 1; s <= 6; s++) {
        if (s == 6)
            CHECK(bt_trigger_observe(&t, 4, 0.5, &ev, 1) == 1 && t.interval == 10);
        CHECK(bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, s == 5, NULL, NULL) ==
              (s == 6 ? BT_TRIGGER_STEPS : 0));
    }

    /* and joined by the ones due later: as above, with seconds due from 6 (busy), fired at 7 */
    cfg.every_seconds = 6.0;
    bt_trigger_init(&t, &cfg);
    bt_trigger_observe(&t, 0, 0.5, NULL, 0);
    int deferred_events = 0;
    for (int64_t s = 1; s <= 7; s++) {
        if (s == 6)
            CHECK(bt_trigger_observe(&t, 4, 0.5, &ev, 1) == 1 && t.interval == 10);
        int r = bt_trigger_check(&t, &(bt_trigger_at){s, 0, (double)s, 0}, s == 5 || s == 6, &ev,
                                 &n_ev);
        deferred_events += n_ev;
        CHECK(r == (s == 7 ? (BT_TRIGGER_STEPS | BT_TRIGGER_SECONDS) : 0));
    }
    CHECK(deferred_events == 1);

    /* a mark (an evaluation outside the trigger) ends the deferral */
    cfg.every_seconds = 0.0;
    bt_trigger_init(&t, &cfg);
    for (int64_t s = 1; s <= 5; s++)
        bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, true, NULL, NULL);
    CHECK(t.pending);
    bt_trigger_mark(&t, &(bt_trigger_at){5, 0, 0.0, 0});
    CHECK(!t.pending &&
          bt_trigger_check(&t, &(bt_trigger_at){6, 0, 0.0, 0}, false, NULL, NULL) == 0);

    /* fixed mode ignores busy: fires on schedule, no events */
    cfg.adaptive = false;
    bt_trigger_init(&t, &cfg);
    for (int64_t s = 1; s <= 20; s++) {
        int r = bt_trigger_check(&t, &(bt_trigger_at){s, 0, 0.0, 0}, true, &ev, &n_ev);
        CHECK(r == (s % 5 == 0 ? BT_TRIGGER_STEPS : 0) && n_ev == 0);
    }
    CHECK(t.deferred == 0 && !t.pending);
}

/* ---- config -----------------------------------------------------------------------------------
 */

static void s_check_rejects(const bt_trigger_config *cfg, const char *field) {
    char want[64];
    snprintf(want, sizeof want, "%s: ", field);
    CHECK(bt_trigger_config_validate(cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), want);
    CHECK(strncmp(bt_last_error(), want, strlen(want)) == 0);
}

/*  Expects base with one field changed (S_REJECTS(floor = 0, "floor")) to be rejected, with a
    message that starts with the field's name. */
#define S_REJECTS(assignment, field)                                                               \
    do {                                                                                           \
        bt_trigger_config c_ = base;                                                               \
        c_.assignment;                                                                             \
        s_check_rejects(&c_, field);                                                               \
    } while (0)

static void s_test_config(void) {
    bt_trigger_config base, c;
    bt_trigger_config_init(&base);
    CHECK(base.every_steps == 10 && base.every_epochs == 0 && base.every_seconds == 0.0 &&
          !base.adaptive);
    CHECK_OK(bt_trigger_config_validate(&base));
    S_REJECTS(every_steps = -1, "every_steps");
    S_REJECTS(every_epochs = -2, "every_epochs");
    S_REJECTS(every_seconds = -1.0, "every_seconds");
    S_REJECTS(every_seconds = NAN, "every_seconds");
    c = base;
    c.floor = 0; /* the adaptive fields are not checked when fixed */
    CHECK_OK(bt_trigger_config_validate(&c));

    base.adaptive = true;
    CHECK_OK(bt_trigger_config_validate(&base));
    S_REJECTS(every_steps = 0, "every_steps");
    S_REJECTS(floor = 0, "floor");
    CHECK(strcmp(bt_last_error(), "floor: expected 1 <= floor <= every_steps (10), got 0") == 0);
    S_REJECTS(floor = 11, "floor");
    S_REJECTS(ceiling = 9, "ceiling");
    S_REJECTS(fast = 0.0, "fast");
    S_REJECTS(plateau = 0.01, "plateau"); /* not below fast */
    S_REJECTS(plateau = -0.001, "plateau");
    S_REJECTS(drop = 0.0, "drop");
    S_REJECTS(drop = NAN, "drop");
    S_REJECTS(ema = 0.0, "ema");
    S_REJECTS(ema = 1.5, "ema");
    c = base;
    c.floor = 10;
    c.ceiling = 10; /* a fixed interval in adaptive clothing */
    CHECK_OK(bt_trigger_config_validate(&c));
}

/*  Tokens: fires at the first check at or after each multiple of every_tokens (counted from the
    last mark), once when a step's tokens span several multiples, independently of the step
    trigger; the reasons read "steps+tokens" when both fire. */
static void s_test_tokens(void) {
    bt_trigger_config cfg;
    bt_trigger_config_init(&cfg);
    cfg.every_steps = 0;
    cfg.every_tokens = 100.0;
    CHECK_OK(bt_trigger_config_validate(&cfg));
    bt_trigger t;
    bt_trigger_init(&t, &cfg);
    /* tokens after each step, and what a check should return: the multiples of 100 crossed */
    const double tokens[] = {40, 99, 100, 150, 350, 399, 400, 401};
    const int want[] = {0, 0, BT_TRIGGER_TOKENS, 0, BT_TRIGGER_TOKENS, 0, BT_TRIGGER_TOKENS, 0};
    for (int i = 0; i < 8; i++)
        CHECK(bt_trigger_check(&t, &(bt_trigger_at){.step = i + 1, .tokens = tokens[i]}, false,
                               NULL, NULL) == want[i]);
    CHECK(t.last_tokens == 400.0 && t.fired == 3);
    /* a mark at 1,050 tokens: the next multiple is 1,150 */
    bt_trigger_mark(&t, &(bt_trigger_at){.step = 9, .tokens = 1050});
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){.step = 10, .tokens = 1149}, false, NULL, NULL) ==
          0);
    CHECK(bt_trigger_check(&t, &(bt_trigger_at){.step = 11, .tokens = 1150}, false, NULL, NULL) ==
          BT_TRIGGER_TOKENS);
    /* with a step trigger beside it: each on its own schedule, both bits when both are due */
    cfg.every_steps = 2;
    bt_trigger_init(&t, &cfg);
    int both = 0, steps_only = 0, tokens_only = 0;
    for (int s = 1; s <= 12; s++) {
        int r = bt_trigger_check(&t, &(bt_trigger_at){.step = s, .tokens = 35.0 * s}, false, NULL,
                                 NULL);
        bool step_due = s % 2 == 0, token_due = floor(35.0 * s / 100) > floor(35.0 * (s - 1) / 100);
        CHECK(r == ((step_due ? BT_TRIGGER_STEPS : 0) | (token_due ? BT_TRIGGER_TOKENS : 0)));
        both += step_due && token_due;
        steps_only += step_due && !token_due;
        tokens_only += !step_due && token_due;
    }
    CHECK(both > 0 && steps_only > 0 && tokens_only > 0);
    char buf[64];
    CHECK(strcmp(bt_trigger_reasons_str(BT_TRIGGER_STEPS | BT_TRIGGER_TOKENS, buf, sizeof buf),
                 "steps+tokens") == 0);
    CHECK(strcmp(bt_trigger_reasons_str(0, buf, sizeof buf), "") == 0);
    cfg.every_tokens = -1;
    CHECK(bt_trigger_config_validate(&cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "every_tokens: expected a number >= 0, got -1");
}

int main(void) {
    s_test_steps();
    s_test_epochs();
    s_test_seconds();
    s_test_tokens();
    s_test_clock();
    s_test_resume();
    s_test_adaptive();
    s_test_busy();
    s_test_config();
    return check_exit();
}
