/*  tuner.c — the hyperparameter feedback rules: adaptive KL coefficient, learning rate from KL and
    from evaluation plateaus, temperature from entropy. */
#include "baton/tuner.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void bt_tuner_config_init(bt_tuner_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->start.kl_coef = 0.0;
    cfg->start.lr = 1e-4;
    cfg->start.temperature = 1.0;
    cfg->kl = (bt_tuner_kl_config){.target = 0.01, .horizon = 10000.0, .min = 1e-4, .max = 1.0};
    cfg->lr_kl =
        (bt_tuner_lr_kl_config){.target = 0.01, .factor = 1.5, .min_lr = 1e-5, .max_lr = 1e-2};
    cfg->lr_plateau.mode = BT_TUNER_MAX;
    snprintf(cfg->lr_plateau.metric, sizeof cfg->lr_plateau.metric, "accuracy");
    cfg->lr_plateau.patience = 3;
    cfg->lr_plateau.factor = 0.5;
    cfg->lr_plateau.min_delta = 0.0;
    cfg->lr_plateau.min_lr = 1e-6;
    cfg->temperature = (bt_tuner_temperature_config){
        .entropy_low = 0.2, .entropy_high = 2.0, .step = 0.05, .min = 0.5, .max = 1.5};
    cfg->mixture = (bt_tuner_mixture_config){.metric = BT_TUNER_MIXTURE_ACCURACY,
                                             .every_steps = 10,
                                             .rate = 1.0,
                                             .min_weight = 0.05,
                                             .max_weight = 20.0};
    cfg->n_sources = 1;
    cfg->start_weights[0] = 1.0;
}

static bool s_positive(double x) {
    return x > 0.0 && isfinite(x);
}

static bool s_nonnegative(double x) {
    return x >= 0.0 && isfinite(x);
}

bt_status bt_tuner_config_validate(const bt_tuner_config *cfg) {
    const bt_tuner_kl_config *kl = &cfg->kl;
    if (kl->enabled) {
        if (!s_positive(kl->target))
            return bt_fail(BT_EINVAL, "tuner.kl.target: expected a number > 0, got %g", kl->target);
        if (!s_positive(kl->horizon))
            return bt_fail(BT_EINVAL, "tuner.kl.horizon: expected a number > 0, got %g",
                           kl->horizon);
        if (!s_positive(kl->min))
            return bt_fail(BT_EINVAL, "tuner.kl.min: expected a number > 0, got %g", kl->min);
        if (!(kl->max >= kl->min && isfinite(kl->max)))
            return bt_fail(BT_EINVAL,
                           "tuner.kl.max: expected a number >= tuner.kl.min (%g), got %g", kl->min,
                           kl->max);
        if (!(cfg->start.kl_coef >= kl->min && cfg->start.kl_coef <= kl->max))
            return bt_fail(BT_EINVAL,
                           "grpo.kl_coef: expected a number in [tuner.kl.min (%g), tuner.kl.max "
                           "(%g)] when tuner.kl.enabled, got %g",
                           kl->min, kl->max, cfg->start.kl_coef);
    }
    const bt_tuner_lr_kl_config *lk = &cfg->lr_kl;
    if (lk->enabled) {
        if (!s_positive(lk->target))
            return bt_fail(BT_EINVAL, "tuner.lr_kl.target: expected a number > 0, got %g",
                           lk->target);
        if (!(lk->factor > 1.0 && isfinite(lk->factor)))
            return bt_fail(BT_EINVAL, "tuner.lr_kl.factor: expected a number > 1, got %g",
                           lk->factor);
        if (!s_nonnegative(lk->min_lr))
            return bt_fail(BT_EINVAL, "tuner.lr_kl.min_lr: expected a number >= 0, got %g",
                           lk->min_lr);
        if (!(lk->max_lr >= lk->min_lr && isfinite(lk->max_lr)))
            return bt_fail(BT_EINVAL,
                           "tuner.lr_kl.max_lr: expected a number >= tuner.lr_kl.min_lr (%g), got "
                           "%g",
                           lk->min_lr, lk->max_lr);
        if (!(cfg->start.lr > 0.0 && cfg->start.lr >= lk->min_lr && cfg->start.lr <= lk->max_lr))
            return bt_fail(BT_EINVAL,
                           "grpo.lr: expected a number > 0 in [tuner.lr_kl.min_lr (%g), "
                           "tuner.lr_kl.max_lr (%g)] when tuner.lr_kl.enabled, got %g",
                           lk->min_lr, lk->max_lr, cfg->start.lr);
        if (!(cfg->start.kl_coef > 0.0))
            return bt_fail(BT_EINVAL,
                           "tuner.lr_kl.enabled: needs grpo.kl_coef > 0 (the trainer measures KL "
                           "only then), got grpo.kl_coef %g",
                           cfg->start.kl_coef);
    }
    const bt_tuner_plateau_config *pl = &cfg->lr_plateau;
    if (pl->enabled) {
        if (!pl->metric[0])
            return bt_fail(BT_EINVAL, "tuner.lr_plateau.metric: expected a metric name, got \"\"");
        if (pl->mode != BT_TUNER_MAX && pl->mode != BT_TUNER_MIN)
            return bt_fail(BT_EINVAL, "tuner.lr_plateau.mode: unknown value %d", (int)pl->mode);
        if (pl->patience < 1)
            return bt_fail(BT_EINVAL,
                           "tuner.lr_plateau.patience: expected an integer >= 1, got %lld",
                           (long long)pl->patience);
        if (!(pl->factor > 0.0 && pl->factor < 1.0))
            return bt_fail(BT_EINVAL,
                           "tuner.lr_plateau.factor: expected a number in (0, 1), got %g",
                           pl->factor);
        if (!s_nonnegative(pl->min_delta))
            return bt_fail(BT_EINVAL, "tuner.lr_plateau.min_delta: expected a number >= 0, got %g",
                           pl->min_delta);
        if (!s_positive(cfg->start.lr))
            return bt_fail(BT_EINVAL,
                           "grpo.lr: expected a number > 0 when tuner.lr_plateau.enabled, got %g",
                           cfg->start.lr);
        if (!(pl->min_lr >= 0.0 && pl->min_lr <= cfg->start.lr))
            return bt_fail(
                BT_EINVAL,
                "tuner.lr_plateau.min_lr: expected a number in [0, grpo.lr (%g)], got %g",
                cfg->start.lr, pl->min_lr);
    }
    const bt_tuner_temperature_config *tc = &cfg->temperature;
    if (tc->enabled) {
        if (!s_nonnegative(tc->entropy_low))
            return bt_fail(BT_EINVAL,
                           "tuner.temperature.entropy_low: expected a number >= 0, got %g",
                           tc->entropy_low);
        if (!(tc->entropy_high > tc->entropy_low && isfinite(tc->entropy_high)))
            return bt_fail(BT_EINVAL,
                           "tuner.temperature.entropy_high: expected a number > "
                           "tuner.temperature.entropy_low (%g), got %g",
                           tc->entropy_low, tc->entropy_high);
        if (!s_positive(tc->step))
            return bt_fail(BT_EINVAL, "tuner.temperature.step: expected a number > 0, got %g",
                           tc->step);
        if (!s_positive(tc->min))
            return bt_fail(BT_EINVAL, "tuner.temperature.min: expected a number > 0, got %g",
                           tc->min);
        if (!(tc->max >= tc->min && isfinite(tc->max)))
            return bt_fail(
                BT_EINVAL,
                "tuner.temperature.max: expected a number >= tuner.temperature.min (%g), "
                "got %g",
                tc->min, tc->max);
        if (!(cfg->start.temperature >= tc->min && cfg->start.temperature <= tc->max))
            return bt_fail(BT_EINVAL,
                           "grpo.temperature: expected a number in [tuner.temperature.min (%g), "
                           "tuner.temperature.max (%g)] when tuner.temperature.enabled, got %g",
                           tc->min, tc->max, cfg->start.temperature);
    }
    const bt_tuner_mixture_config *mc = &cfg->mixture;
    if (mc->enabled) {
        if (cfg->n_sources < 2)
            return bt_fail(BT_EINVAL,
                           "tuner.mixture.enabled: needs data.sources with 2 or more "
                           "sources, got %d",
                           cfg->n_sources);
        if (mc->every_steps < 1)
            return bt_fail(BT_EINVAL,
                           "tuner.mixture.every_steps: expected an integer >= 1, got "
                           "%lld",
                           (long long)mc->every_steps);
        if (!s_positive(mc->rate))
            return bt_fail(BT_EINVAL, "tuner.mixture.rate: expected a number > 0, got %g",
                           mc->rate);
        if (!s_positive(mc->min_weight))
            return bt_fail(BT_EINVAL, "tuner.mixture.min_weight: expected a number > 0, got %g",
                           mc->min_weight);
        if (!(mc->max_weight >= mc->min_weight && isfinite(mc->max_weight)))
            return bt_fail(BT_EINVAL,
                           "tuner.mixture.max_weight: expected a number >= "
                           "tuner.mixture.min_weight (%g), got %g",
                           mc->min_weight, mc->max_weight);
        for (int k = 0; k < cfg->n_sources; k++)
            if (!(cfg->start_weights[k] >= mc->min_weight &&
                  cfg->start_weights[k] <= mc->max_weight))
                return bt_fail(BT_EINVAL,
                               "data.sources[%d].weight: expected a number in "
                               "[tuner.mixture.min_weight (%g), tuner.mixture.max_weight (%g)] "
                               "when tuner.mixture.enabled, got %g",
                               k, mc->min_weight, mc->max_weight, cfg->start_weights[k]);
    }
    return BT_OK;
}

void bt_tuner_init(bt_tuner *t, const bt_tuner_config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->kl_coef = cfg->start.kl_coef;
    t->lr = cfg->start.lr;
    t->temperature = cfg->start.temperature;
    for (int k = 0; k < cfg->n_sources && k < BT_TUNER_MAX_SOURCES; k++)
        t->weights[k] = cfg->start_weights[k];
}

double bt_tuner_lr_scale(const bt_tuner *t) {
    return t->cfg.start.lr > 0.0 ? t->lr / t->cfg.start.lr : 1.0;
}

/*  x moved down to want, but never below floor, and never up (when x is already below floor). */
static double s_down(double x, double want, double floor) {
    return fmax(want, fmin(x, floor));
}

/*  x moved up to want, but never above ceiling, and never down. */
static double s_up(double x, double want, double ceiling) {
    return fmin(want, fmax(x, ceiling));
}

static double s_clamp(double x, double lo, double hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

/*  Decisions of one call, kept in order; those past max are counted but not written. */
typedef struct s_out {
    bt_tuner_decision *out;
    int max, n;
} s_out;

static void s_decide(bt_tuner *t, s_out *o, const bt_tuner_decision *d) {
    t->decisions++;
    if (o->n < o->max)
        o->out[o->n++] = *d;
}

static void s_metric(bt_tuner_decision *d, const char *name, double value) {
    BT_ASSERT(d->n_metrics < BT_TUNER_MAX_METRICS);
    snprintf(d->metrics[d->n_metrics].name, BT_TUNER_NAME_MAX, "%s", name);
    d->metrics[d->n_metrics].value = value;
    d->n_metrics++;
}

static void s_reason(bt_tuner_decision *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void s_reason(bt_tuner_decision *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->reason, sizeof d->reason, fmt, ap);
    va_end(ap);
}

static bt_tuner_decision s_decision(const char *rule, const char *param, int64_t step,
                                    double before, double after) {
    bt_tuner_decision d;
    memset(&d, 0, sizeof d);
    d.rule = rule;
    d.param = param;
    d.step = step;
    d.before = before;
    d.after = after;
    d.source = -1;
    return d;
}

/*  Adaptive KL coefficient (Ziegler et al. 2019): e = clip(KL / target - 1, -0.2, 0.2),
    beta <- beta * (1 + e * n / horizon), the multiplier clamped so beta stays positive. */
static void s_adaptive_kl(bt_tuner *t, int64_t step, const bt_tuner_step_stats *s, s_out *o) {
    const bt_tuner_kl_config *c = &t->cfg.kl;
    if (!c->enabled || !isfinite(s->kl) || s->n_samples <= 0)
        return;
    double e = s_clamp(s->kl / c->target - 1.0, -0.2, 0.2);
    double mult = s_clamp(1.0 + e * (double)s->n_samples / c->horizon, BT_TUNER_KL_MULT_MIN,
                          BT_TUNER_KL_MULT_MAX);
    double before = t->kl_coef, after = s_clamp(before * mult, c->min, c->max);
    if (after == before)
        return;
    t->kl_coef = after;
    bt_tuner_decision d = s_decision("adaptive_kl", "kl_coef", step, before, after);
    s_metric(&d, "kl", s->kl);
    s_metric(&d, "n_samples", (double)s->n_samples);
    s_reason(&d, "kl %.4g vs target %g: error %+.4g, x%.6g over %lld samples (horizon %g)%s", s->kl,
             c->target, e, mult, (long long)s->n_samples, c->horizon,
             after != before * mult ? ", at a bound" : "");
    s_decide(t, o, &d);
}

/*  KL-adaptive learning rate (rsl_rl): lr / factor when KL > 2 target, lr * factor when
    0 < KL < target / 2. */
static void s_lr_kl(bt_tuner *t, int64_t step, const bt_tuner_step_stats *s, s_out *o) {
    const bt_tuner_lr_kl_config *c = &t->cfg.lr_kl;
    if (!c->enabled || !isfinite(s->kl))
        return;
    double before = t->lr, after = before;
    bool down = s->kl > 2.0 * c->target;
    if (down)
        after = s_down(before, before / c->factor, c->min_lr);
    else if (s->kl > 0.0 && s->kl < c->target / 2.0)
        after = s_up(before, before * c->factor, c->max_lr);
    if (after == before)
        return;
    t->lr = after;
    bt_tuner_decision d = s_decision("lr_kl", "lr", step, before, after);
    s_metric(&d, "kl", s->kl);
    if (down)
        s_reason(&d, "kl %.4g > 2 x target %g: lr / %g%s", s->kl, c->target, c->factor,
                 after != before / c->factor ? ", at min_lr" : "");
    else
        s_reason(&d, "kl %.4g < target %g / 2: lr x %g%s", s->kl, c->target, c->factor,
                 after != before * c->factor ? ", at max_lr" : "");
    s_decide(t, o, &d);
}

/*  Temperature steered to keep the policy entropy in [entropy_low, entropy_high]. */
static void s_temperature(bt_tuner *t, int64_t step, const bt_tuner_step_stats *s, s_out *o) {
    const bt_tuner_temperature_config *c = &t->cfg.temperature;
    if (!c->enabled || !isfinite(s->entropy))
        return;
    double before = t->temperature, after = before;
    bool low = s->entropy < c->entropy_low;
    if (low)
        after = s_up(before, before + c->step, c->max);
    else if (s->entropy > c->entropy_high)
        after = s_down(before, before - c->step, c->min);
    if (after == before)
        return;
    t->temperature = after;
    bt_tuner_decision d = s_decision("temperature", "temperature", step, before, after);
    s_metric(&d, "entropy", s->entropy);
    if (low)
        s_reason(&d, "entropy %.4g < entropy_low %g: temperature + %g%s", s->entropy,
                 c->entropy_low, c->step, after != before + c->step ? ", at max" : "");
    else
        s_reason(&d, "entropy %.4g > entropy_high %g: temperature - %g%s", s->entropy,
                 c->entropy_high, c->step, after != before - c->step ? ", at min" : "");
    s_decide(t, o, &d);
}

/*  Mixture weights by multiplicative weights over the window's per-source statistics. */
static void s_mixture(bt_tuner *t, int64_t step, const bt_tuner_step_stats *s, s_out *o) {
    const bt_tuner_mixture_config *c = &t->cfg.mixture;
    int n = t->cfg.n_sources;
    if (!c->enabled || n < 2)
        return;
    for (int k = 0; k < n && k < s->n_sources; k++) {
        t->window[k].n += s->sources[k].n;
        t->window[k].correct += s->sources[k].correct;
        t->window[k].reward += s->sources[k].reward;
        t->window[k].reward_sq += s->sources[k].reward_sq;
    }
    if (++t->window_steps < c->every_steps)
        return;
    double value[BT_TUNER_MAX_SOURCES], mean = 0;
    int seen = 0;
    for (int k = 0; k < n; k++) {
        double m = t->window[k].n;
        if (m <= 0) {
            value[k] = NAN;
            continue;
        }
        double r = t->window[k].reward / m;
        value[k] = c->metric == BT_TUNER_MIXTURE_ACCURACY
                       ? t->window[k].correct / m
                       : fmax(0.0, t->window[k].reward_sq / m - r * r);
        mean += value[k];
        seen++;
    }
    memset(t->window, 0, sizeof t->window);
    t->window_steps = 0;
    if (seen < 2)
        return; /* nothing to compare */
    mean /= seen;
    for (int k = 0; k < n; k++) {
        if (!isfinite(value[k]))
            continue;
        double g = c->metric == BT_TUNER_MIXTURE_ACCURACY ? mean - value[k]
                   : mean > 0                             ? (value[k] - mean) / mean
                                                          : 0.0;
        double before = t->weights[k];
        double after = s_clamp(before * exp(c->rate * g), c->min_weight, c->max_weight);
        if (after == before)
            continue;
        t->weights[k] = after;
        bt_tuner_decision d = s_decision("mixture", "weight", step, before, after);
        d.source = k;
        const char *name = c->metric == BT_TUNER_MIXTURE_ACCURACY ? "accuracy" : "reward_variance";
        s_metric(&d, name, value[k]);
        s_metric(&d, c->metric == BT_TUNER_MIXTURE_ACCURACY ? "mean_accuracy" : "mean_variance",
                 mean);
        s_reason(&d, "%s %.4g vs mean %.4g over the last %lld steps: weight x %.4g%s", name,
                 value[k], mean, (long long)c->every_steps, exp(c->rate * g),
                 after != before * exp(c->rate * g) ? ", at a bound" : "");
        s_decide(t, o, &d);
    }
}

int bt_tuner_after_step(bt_tuner *t, int64_t step, const bt_tuner_step_stats *stats,
                        bt_tuner_decision *out, int max_out) {
    BT_ASSERT(t && stats && max_out >= 0 && (out || max_out == 0));
    s_out o = {.out = out, .max = max_out, .n = 0};
    s_adaptive_kl(t, step, stats, &o);
    s_lr_kl(t, step, stats, &o);
    s_temperature(t, step, stats, &o);
    s_mixture(t, step, stats, &o);
    return o.n;
}

int bt_tuner_after_eval(bt_tuner *t, int64_t step, double value, bt_tuner_decision *out,
                        int max_out) {
    BT_ASSERT(t && max_out >= 0 && (out || max_out == 0));
    const bt_tuner_plateau_config *c = &t->cfg.lr_plateau;
    if (!c->enabled || !isfinite(value) || (t->has_best && step <= t->last_eval_step))
        return 0;
    t->last_eval_step = step;
    bool better = !t->has_best || (c->mode == BT_TUNER_MIN ? value < t->best - c->min_delta
                                                           : value > t->best + c->min_delta);
    if (better) {
        t->has_best = true;
        t->best = value;
        t->best_step = step;
        t->bad_evals = 0;
        return 0;
    }
    if (++t->bad_evals < c->patience)
        return 0;
    int64_t bad = t->bad_evals;
    t->bad_evals = 0;
    double before = t->lr, after = s_down(before, before * c->factor, c->min_lr);
    if (after == before)
        return 0;
    t->lr = after;
    bt_tuner_decision d = s_decision("lr_plateau", "lr", step, before, after);
    s_metric(&d, c->metric, value);
    s_metric(&d, "best", t->best);
    s_metric(&d, "bad_evals", (double)bad);
    s_reason(&d,
             "%s of %s: %lld evaluations without %s the best %.4g (step %lld) by more than "
             "%g: lr x %g%s",
             c->metric, c->dataset[0] ? c->dataset : "the dataset", (long long)bad,
             c->mode == BT_TUNER_MIN ? "going below" : "going above", t->best,
             (long long)t->best_step, c->min_delta, c->factor,
             after != before * c->factor ? ", at min_lr" : "");
    s_out o = {.out = out, .max = max_out, .n = 0};
    s_decide(t, &o, &d);
    return o.n;
}

void bt_tuner_decision_jsonl(const bt_tuner_decision *d, double time, bt_jsonl *line) {
    bt_jsonl_init(line);
    bt_jsonl_str(line, "event", "tuner");
    bt_jsonl_num(line, "time", time);
    bt_jsonl_str(line, "rule", d->rule);
    bt_jsonl_int(line, "step", d->step);
    bt_jsonl_str(line, "param", d->param);
    bt_jsonl_num(line, "before", d->before);
    bt_jsonl_num(line, "after", d->after);
    for (int i = 0; i < d->n_metrics; i++)
        bt_jsonl_num(line, d->metrics[i].name, d->metrics[i].value);
    bt_jsonl_str(line, "reason", d->reason);
}
