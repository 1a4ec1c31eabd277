/*  tuner.h — the hyperparameter feedback rules: an adaptive KL coefficient, the learning rate from
    KL or from evaluation plateaus, the sampling temperature from policy entropy; pure decisions,
    no I/O.  Threading: one thread at a time.  Lifetime: plain values; copying one is checkpointing
    it.

    The decision contract.  The caller feeds each finished step (bt_tuner_after_step) and each
    finished evaluation of the chosen metric (bt_tuner_after_eval).  A rule that changes a
    hyperparameter changes the struct's current value (kl_coef, lr, temperature) at once and
    returns a decision describing the change; the caller applies the current values at the next
    step boundary: after the calls for step S (S steps done), step S+1 trains with kl_coef and
    bt_lr_at(schedule, S) * bt_tuner_lr_scale(), and its rollouts sample at temperature.  Work
    already dispatched keeps the values it was given (asynchronous rollouts queued before the
    decision sample at the old temperature).  Nothing is undone: a decision is final. */
#ifndef BATON_TUNER_H
#define BATON_TUNER_H

#include "baton/jsonl.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_TUNER_NAME_MAX 64 /* a dataset or metric name, with the NUL */
#define BT_TUNER_MAX_DECISIONS                                                                     \
    11                         /* at most this many decisions come out of one call:                \
                                  3 rules + a mixture weight per source */
#define BT_TUNER_MAX_METRICS 3 /* metrics named by one decision */

/*  The adaptive KL coefficient's step multiplier 1 + e * n / horizon is clamped to this range,
    so beta never reaches 0 (e = -0.2 with n / horizon >= 5 would give 0 or less). */
#define BT_TUNER_KL_MULT_MIN 0.5
#define BT_TUNER_KL_MULT_MAX 1.5

/*  Values appear in configs: append only. */
typedef enum bt_tuner_mode {
    BT_TUNER_MAX = 0, /* "max": higher is better (accuracy) */
    BT_TUNER_MIN = 1  /* "min": lower is better (nll_per_token, perplexity) */
} bt_tuner_mode;

/*  Adaptive KL coefficient (Ziegler et al. 2019), after every step. */
typedef struct bt_tuner_kl_config {
    bool enabled;
    double target;  /* KL the coefficient steers toward, in the unit of the KL fed in */
    double horizon; /* samples over which a relative error of 1 changes beta by a factor e */
    double min;     /* beta stays in [min, max]; min > 0 */
    double max;
} bt_tuner_kl_config;

/*  Learning rate from KL (rsl_rl's adaptive schedule), after every step. */
typedef struct bt_tuner_lr_kl_config {
    bool enabled;
    double target; /* KL above 2 x target divides lr by factor, below target / 2 multiplies */
    double factor; /* > 1 */
    double min_lr; /* lr stays in [min_lr, max_lr] */
    double max_lr;
} bt_tuner_lr_kl_config;

/*  Learning rate decay on evaluation plateaus, after every evaluation of one metric. */
typedef struct bt_tuner_plateau_config {
    bool enabled;
    char dataset[BT_TUNER_NAME_MAX]; /* for the caller: the eval dataset whose metric it feeds */
    char metric[BT_TUNER_NAME_MAX];  /* the metric's name in the eval line, e.g. "accuracy" */
    bt_tuner_mode mode;
    int64_t patience; /* evaluations in a row without improvement that decay lr; >= 1 */
    double factor;    /* lr multiplier of a decay, in (0, 1) */
    double min_delta; /* an improvement beats the best by more than this; >= 0 */
    double min_lr;    /* a decay never takes lr below this */
} bt_tuner_plateau_config;

/*  Sampling temperature steered to keep the policy entropy in [entropy_low, entropy_high]. */
typedef struct bt_tuner_temperature_config {
    bool enabled;
    double entropy_low;  /* entropy below this raises the temperature by step */
    double entropy_high; /* entropy above this lowers it by step; > entropy_low */
    double step;         /* > 0 */
    double min;          /* temperature stays in [min, max]; min > 0 */
    double max;
} bt_tuner_temperature_config;

#define BT_TUNER_MAX_SOURCES 8 /* data sources whose mixture weights the mixture rule steers */

/*  Values appear in configs: append only. */
typedef enum bt_tuner_mixture_metric {
    BT_TUNER_MIXTURE_ACCURACY = 0,       /* "accuracy": up-weight a source whose accuracy lags */
    BT_TUNER_MIXTURE_REWARD_VARIANCE = 1 /* "reward_variance": up-weight the most informative */
} bt_tuner_mixture_metric;

/*  Data mixture weights from per-source training statistics, every every_steps steps
    (multiplicative weights, as DoReMi and curriculum bandits do): source s's weight is multiplied
    by exp(rate * g_s), g_s = mean accuracy - acc_s ("accuracy") or (var_s - mean var) / mean var
    ("reward_variance"), means over the sources seen in the window; then clamped to
    [min_weight, max_weight].  Weights are relative (draws are proportional to them). */
typedef struct bt_tuner_mixture_config {
    bool enabled;
    bt_tuner_mixture_metric metric;
    int64_t every_steps; /* >= 1 */
    double rate;         /* > 0 */
    double min_weight;   /* > 0 */
    double max_weight;   /* >= min_weight */
} bt_tuner_mixture_config;

typedef struct bt_tuner_config {
    struct {
        double kl_coef;     /* beta at the start (grpo.kl_coef) */
        double lr;          /* the peak learning rate at the start (grpo.lr) */
        double temperature; /* the rollouts' temperature at the start (grpo.temperature) */
    } start;
    bt_tuner_kl_config kl;
    bt_tuner_lr_kl_config lr_kl;
    bt_tuner_plateau_config lr_plateau;
    bt_tuner_temperature_config temperature;
    bt_tuner_mixture_config mixture;
    int n_sources;                              /* data sources (1 without data.sources) */
    double start_weights[BT_TUNER_MAX_SOURCES]; /* their configured weights */
} bt_tuner_config;

/*  Every rule off.  start: kl_coef 0, lr 1e-4, temperature 1.  kl: target 0.01, horizon 10000,
    min 1e-4, max 1.  lr_kl: target 0.01, factor 1.5, min_lr 1e-5, max_lr 1e-2.  lr_plateau:
    dataset "", metric "accuracy", mode max, patience 3, factor 0.5, min_delta 0, min_lr 1e-6.
    temperature: entropy_low 0.2, entropy_high 2, step 0.05, min 0.5, max 1.5.  mixture: metric
    accuracy, every_steps 10, rate 1, min_weight 0.05, max_weight 20; one source of weight 1. */
void bt_tuner_config_init(bt_tuner_config *cfg);
/*  BT_EINVAL with a message naming the config key, e.g.
    "grpo.kl_coef: expected a number in [tuner.kl.min (0.0001), tuner.kl.max (1)] when
    tuner.kl.enabled, got 0".  Only the enabled rules are checked; each needs its hyperparameter's
    start value inside its bounds, and the KL rules need start.kl_coef > 0 (the trainer measures
    KL only then). */
bt_status bt_tuner_config_validate(const bt_tuner_config *cfg);

/*  All the state, a plain value: memcpy it to checkpoint, copy it back to resume. */
typedef struct bt_tuner {
    bt_tuner_config cfg;
    double kl_coef; /* the current values: what the next step uses */
    double lr;      /* the peak learning rate; the schedule's shape multiplies it */
    double temperature;
    bool has_best;          /* lr_plateau: an evaluation was observed; best, best_step are set */
    double best;            /* lr_plateau: the best metric so far */
    int64_t best_step;      /* lr_plateau: the step of that evaluation */
    int64_t last_eval_step; /* lr_plateau: the step of the latest evaluation observed */
    int64_t bad_evals;      /* lr_plateau: evaluations since the best, or since the last decay */
    int64_t decisions;      /* decisions made so far */
    double weights[BT_TUNER_MAX_SOURCES]; /* mixture: the current source weights */
    struct {                              /* mixture: per source, since the last adjustment */
        double n, correct, reward, reward_sq;
    } window[BT_TUNER_MAX_SOURCES];
    int64_t window_steps; /* mixture: steps fed since the last adjustment */
} bt_tuner;

/*  What one finished step measured. */
typedef struct bt_tuner_step_stats {
    double kl;         /* the train line's kl: token mean of the KL to the reference */
    double entropy;    /* the train line's entropy: token mean, nats */
    int64_t n_samples; /* completions trained on in the step */
    int n_sources;     /* per-source statistics below (0: none) */
    struct {
        double n, correct, reward, reward_sq; /* completions; correct ones; sum r; sum r^2 */
    } sources[BT_TUNER_MAX_SOURCES];
} bt_tuner_step_stats;

/*  One change of one hyperparameter, with what caused it. */
typedef struct bt_tuner_decision {
    const char *rule;  /* static: "adaptive_kl", "lr_kl", "lr_plateau", "temperature" */
    const char *param; /* static: "kl_coef", "lr" (the peak learning rate), "temperature",
                          "weight" (a data source's mixture weight) */
    int source;        /* "weight": the source's index; -1 otherwise */
    int64_t step;      /* the step or evaluation step fed in; it applies from step + 1 */
    double before, after;
    int n_metrics;
    struct {
        char name[BT_TUNER_NAME_MAX];
        double value;
    } metrics[BT_TUNER_MAX_METRICS]; /* the inputs that triggered it, e.g. kl = 0.031 */
    char reason[192];                /* one readable sentence with the numbers */
} bt_tuner_decision;

/*  cfg must have passed bt_tuner_config_validate.  Current values = cfg->start. */
void bt_tuner_init(bt_tuner *t, const bt_tuner_config *cfg);

/*  Feeds step `step` (steps done) and runs the enabled step rules in this order:
      adaptive_kl  e = clip(kl / target - 1, -0.2, 0.2)
                   kl_coef <- clamp(kl_coef * clamp(1 + e * n_samples / horizon,
                                    BT_TUNER_KL_MULT_MIN, BT_TUNER_KL_MULT_MAX), min, max)
      lr_kl        kl > 2 * target:      lr <- lr / factor, not below min_lr
                   0 < kl < target / 2:  lr <- lr * factor, not above max_lr
                   (strict: kl exactly 2 * target or target / 2 changes nothing; kl <= 0 never
                   raises lr, as rsl_rl: a KL of 0 is one not measured)
      temperature  entropy < entropy_low:  temperature <- temperature + step, not above max
                   entropy > entropy_high: temperature <- temperature - step, not below min
                   (strict at both edges)
    A bound stops a rule; it never moves a value the other way (an lr below lr_kl.min_lr after a
    plateau decay is not raised by a KL above 2 x target).  A rule with a non-finite input, or
    adaptive_kl with n_samples <= 0, does nothing.  Each change of value is one decision; writes at
    most max_out (<= BT_TUNER_MAX_DECISIONS needed) into out and returns how many; the state
    changes the same way whatever max_out is.  out may be NULL when max_out is 0. */
int bt_tuner_after_step(bt_tuner *t, int64_t step, const bt_tuner_step_stats *stats,
                        bt_tuner_decision *out, int max_out);

/*  Feeds the value of lr_plateau.metric from the evaluation of lr_plateau.dataset made at step
    (the policy of step `step`).  Without lr_plateau, returns 0 and changes nothing.  An
    improvement is value > best + min_delta (mode max) or value < best - min_delta (mode min); the
    first evaluation sets the best.  An improvement sets best and bad_evals = 0; any other
    evaluation adds one to bad_evals, and the patience-th in a row decays lr <- lr * factor, not
    below min_lr, and sets bad_evals = 0 (the best stays).  So with patience P the decay comes at
    exactly the P-th evaluation without improvement (PyTorch's ReduceLROnPlateau waits for P+1).
    A non-finite value, or an evaluation at or before the step of the latest one observed (a late
    or repeated result), is ignored.  Returns 0 or 1 decisions, as bt_tuner_after_step. */
int bt_tuner_after_eval(bt_tuner *t, int64_t step, double value, bt_tuner_decision *out,
                        int max_out);

/*  lr / start.lr: the factor by which the caller multiplies the schedule's learning rate (1 when
    start.lr is 0). */
double bt_tuner_lr_scale(const bt_tuner *t);

/*  The event line of a decision for events.jsonl (written by bt_runlog_event), time in seconds since the
    start:
      {"event":"tuner","time":T,"rule":"adaptive_kl","step":S,"param":"kl_coef","before":B,
       "after":A,<metric>:V,...,"reason":"..."}
    with one field per metric of the decision, under its name ("kl", "n_samples", "entropy", the
    plateau metric's name, "best", "bad_evals"). */
void bt_tuner_decision_jsonl(const bt_tuner_decision *d, double time, bt_jsonl *line);

#ifdef __cplusplus
}
#endif
#endif
