/*  trigger.c — evaluation triggers: step, epoch, training-time and token intervals, the adaptive
    step interval, and the training clock. */
#include "baton/trigger.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void bt_trigger_config_init(bt_trigger_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->every_steps = 10;
    cfg->floor = 1;
    cfg->ceiling = 80;
    cfg->fast = 0.01;
    cfg->plateau = 0.001;
    cfg->drop = 0.05;
    cfg->ema = 0.5;
}

bt_status bt_trigger_config_validate(const bt_trigger_config *cfg) {
    if (cfg->every_steps < 0)
        return bt_fail(BT_EINVAL, "every_steps: expected an integer >= 0, got %lld",
                       (long long)cfg->every_steps);
    if (cfg->every_epochs < 0)
        return bt_fail(BT_EINVAL, "every_epochs: expected an integer >= 0, got %lld",
                       (long long)cfg->every_epochs);
    if (!(cfg->every_seconds >= 0.0 && isfinite(cfg->every_seconds)))
        return bt_fail(BT_EINVAL, "every_seconds: expected a number >= 0, got %g",
                       cfg->every_seconds);
    if (!(cfg->every_tokens >= 0.0 && isfinite(cfg->every_tokens)))
        return bt_fail(BT_EINVAL, "every_tokens: expected a number >= 0, got %g",
                       cfg->every_tokens);
    if (!cfg->adaptive)
        return BT_OK;
    if (cfg->every_steps < 1)
        return bt_fail(BT_EINVAL, "every_steps: adaptive needs an integer >= 1, got %lld",
                       (long long)cfg->every_steps);
    if (cfg->floor < 1 || cfg->floor > cfg->every_steps)
        return bt_fail(BT_EINVAL, "floor: expected 1 <= floor <= every_steps (%lld), got %lld",
                       (long long)cfg->every_steps, (long long)cfg->floor);
    if (cfg->ceiling < cfg->every_steps)
        return bt_fail(BT_EINVAL, "ceiling: expected ceiling >= every_steps (%lld), got %lld",
                       (long long)cfg->every_steps, (long long)cfg->ceiling);
    if (!(cfg->fast > 0.0 && isfinite(cfg->fast)))
        return bt_fail(BT_EINVAL, "fast: expected a number > 0, got %g", cfg->fast);
    if (!(cfg->plateau >= 0.0 && cfg->plateau < cfg->fast))
        return bt_fail(BT_EINVAL, "plateau: expected 0 <= plateau < fast (%g), got %g", cfg->fast,
                       cfg->plateau);
    if (!(cfg->drop > 0.0)) /* +inf turns the alarm off */
        return bt_fail(BT_EINVAL, "drop: expected a number > 0, got %g", cfg->drop);
    if (!(cfg->ema > 0.0 && cfg->ema <= 1.0))
        return bt_fail(BT_EINVAL, "ema: expected 0 < ema <= 1, got %g", cfg->ema);
    return BT_OK;
}

void bt_trigger_init(bt_trigger *t, const bt_trigger_config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->interval = cfg->every_steps;
}

const char *bt_trigger_reasons_str(int reasons, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s%s", (reasons & BT_TRIGGER_STEPS) ? "+steps" : "",
             (reasons & BT_TRIGGER_EPOCHS) ? "+epochs" : "",
             (reasons & BT_TRIGGER_SECONDS) ? "+seconds" : "",
             (reasons & BT_TRIGGER_TOKENS) ? "+tokens" : "");
    if (buf[0]) /* past the leading '+' */
        memmove(buf, buf + 1, strlen(buf));
    return buf;
}

static void s_event(bt_trigger_event *ev, const char *kind, const bt_trigger *t, int64_t step,
                    int64_t old_interval, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
static void s_event(bt_trigger_event *ev, const char *kind, const bt_trigger *t, int64_t step,
                    int64_t old_interval, const char *fmt, ...) {
    ev->kind = kind;
    ev->step = step;
    ev->old_interval = old_interval;
    ev->new_interval = t->interval;
    ev->value = t->has_value ? t->last_value : 0.0;
    ev->rate = t->has_rate ? t->rate_ema : 0.0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->reason, sizeof ev->reason, fmt, ap);
    va_end(ap);
}

/*  The reason bits due at this check, without changing anything. */
static int s_due(const bt_trigger *t, const bt_trigger_at *at) {
    int due = 0;
    if (t->cfg.every_steps > 0 && at->step - t->last_step >= t->interval)
        due |= BT_TRIGGER_STEPS;
    if (t->cfg.every_epochs > 0 && at->epoch - t->last_epoch >= t->cfg.every_epochs)
        due |= BT_TRIGGER_EPOCHS;
    if (t->cfg.every_seconds > 0.0 && at->seconds - t->last_seconds >= t->cfg.every_seconds)
        due |= BT_TRIGGER_SECONDS;
    if (t->cfg.every_tokens > 0.0 && at->tokens - t->last_tokens >= t->cfg.every_tokens)
        due |= BT_TRIGGER_TOKENS;
    return due;
}

/*  *last advanced to the last multiple of every (counted from it) that is <= now; the second
    step fixes a floor() one short from rounding (every 1.1692 from 863.369 to 894.9374), which
    would fire twice. */
static void s_advance_multiple(double *last, double every, double now) {
    *last += every * floor((now - *last) / every);
    if (now - *last >= every)
        *last += every;
}

static void s_fire(bt_trigger *t, int reasons, const bt_trigger_at *at) {
    if (reasons & BT_TRIGGER_STEPS)
        t->last_step = at->step;
    if (reasons & BT_TRIGGER_EPOCHS)
        t->last_epoch = at->epoch;
    if ((reasons & BT_TRIGGER_SECONDS) && t->cfg.every_seconds > 0.0)
        s_advance_multiple(&t->last_seconds, t->cfg.every_seconds, at->seconds);
    if ((reasons & BT_TRIGGER_TOKENS) && t->cfg.every_tokens > 0.0)
        s_advance_multiple(&t->last_tokens, t->cfg.every_tokens, at->tokens);
    t->pending = false;
    t->pending_reasons = 0;
    t->fired++;
}

int bt_trigger_check(bt_trigger *t, const bt_trigger_at *at, bool busy, bt_trigger_event *ev,
                     int *n_ev) {
    if (n_ev)
        *n_ev = 0;
    int64_t step = at->step;
    int due = s_due(t, at);
    if (!t->cfg.adaptive) {
        if (due)
            s_fire(t, due, at);
        return due;
    }
    if (!due && !t->pending)
        return 0;
    if (busy) {
        bool first = !t->pending;
        t->pending = true;
        t->pending_reasons |= due;
        if (first) {
            t->deferred++;
            if (ev && n_ev) {
                char buf[32];
                s_event(ev, "deferred", t, step, t->interval,
                        "evaluation due at step %lld (%s) deferred: evaluators busy",
                        (long long)step,
                        bt_trigger_reasons_str(t->pending_reasons, buf, sizeof buf));
                *n_ev = 1;
            }
        }
        return 0;
    }
    int reasons = due | t->pending_reasons;
    s_fire(t, reasons, at);
    return reasons;
}

void bt_trigger_mark(bt_trigger *t, const bt_trigger_at *at) {
    t->last_step = at->step;
    t->last_epoch = at->epoch;
    t->last_seconds = at->seconds;
    t->last_tokens = at->tokens;
    t->pending = false;
    t->pending_reasons = 0;
}

int bt_trigger_observe(bt_trigger *t, int64_t step, double value, bt_trigger_event *ev,
                       int max_ev) {
    BT_ASSERT(max_ev >= 0 && (ev || max_ev == 0));
    if (!isfinite(value) || (t->has_value && step < t->last_value_step))
        return 0;
    bool had_value = t->has_value;
    double prev = t->last_value;
    int64_t prev_step = t->last_value_step;
    t->has_value = true;
    t->last_value = value;
    t->last_value_step = step;
    if (!t->cfg.adaptive || !had_value)
        return 0;

    const bt_trigger_config *cfg = &t->cfg;
    if (step != prev_step) {
        double rate = (value - prev) / (double)(step - prev_step); /* metric change per step */
        t->rate_ema = t->has_rate ? cfg->ema * rate + (1.0 - cfg->ema) * t->rate_ema : rate;
        t->has_rate = true;
    }

    bt_trigger_event out[2]; /* at most an alarm and an interval change */
    int n = 0;
    int64_t old = t->interval;
    int64_t halved = old / 2 < cfg->floor ? cfg->floor : old / 2;
    int64_t doubled = old > cfg->ceiling / 2 ? cfg->ceiling : old * 2;
    double fall = prev - value;
    if (fall > cfg->drop) {
        s_event(&out[n++], "alarm", t, step, old,
                "metric dropped %.4g (%.4g at step %lld -> %.4g at step %lld, > drop %g)", fall,
                prev, (long long)prev_step, value, (long long)step, cfg->drop);
        t->interval = halved;
        if (t->interval != old)
            s_event(&out[n++], "interval", t, step, old,
                    "metric dropped %.4g (> drop %g): interval %lld -> %lld", fall, cfg->drop,
                    (long long)old, (long long)t->interval);
    } else if (t->has_rate && fabs(t->rate_ema) > cfg->fast) {
        t->interval = halved;
        if (t->interval != old)
            s_event(&out[n++], "interval", t, step, old,
                    "metric moved %.4g/step (|EMA| > fast %g): interval %lld -> %lld", t->rate_ema,
                    cfg->fast, (long long)old, (long long)t->interval);
    } else if (t->has_rate && fabs(t->rate_ema) < cfg->plateau) {
        t->interval = doubled;
        if (t->interval != old)
            s_event(&out[n++], "interval", t, step, old,
                    "metric moved %.4g/step (|EMA| < plateau %g): interval %lld -> %lld",
                    t->rate_ema, cfg->plateau, (long long)old, (long long)t->interval);
    }
    int written = n < max_ev ? n : max_ev;
    for (int i = 0; i < written; i++)
        ev[i] = out[i];
    return written;
}

void bt_train_clock_init(bt_train_clock *c, double seconds_so_far) {
    c->base = seconds_so_far;
    c->since = 0.0;
    c->running = false;
}

void bt_train_clock_start(bt_train_clock *c, double now) {
    if (c->running)
        return;
    c->since = now;
    c->running = true;
}

void bt_train_clock_stop(bt_train_clock *c, double now) {
    if (!c->running)
        return;
    c->base += now - c->since;
    c->running = false;
}

double bt_train_clock_seconds(const bt_train_clock *c, double now) {
    return c->running ? c->base + (now - c->since) : c->base;
}
