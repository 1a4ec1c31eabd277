/*  trigger.h — when a training run evaluates: every N steps, epochs, training seconds or sampled
    tokens, with a
    step interval that can adapt to how fast the metric moves; pure computation, no clock read.
    Threading: one thread at a time.  Lifetime: plain values; copying one is checkpointing it. */
#ifndef BATON_TRIGGER_H
#define BATON_TRIGGER_H

#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_trigger_config {
    int64_t every_steps;  /* fire every N training steps; 0: off */
    int64_t every_epochs; /* fire every N completed epochs; 0: off */
    double every_seconds; /* fire every N seconds of training time; 0: off */
    double every_tokens;  /* fire every N completion tokens sampled for training; 0: off */
    bool adaptive;        /* adapt the step interval to the metric (bt_trigger_observe) */
    int64_t floor;        /* adaptive: least step interval, 1 <= floor <= every_steps */
    int64_t ceiling;      /* adaptive: greatest step interval, >= every_steps */
    double fast;          /* adaptive: |EMA of metric change per step| above this: halve */
    double plateau;       /* adaptive: |EMA| below this: double the interval */
    double drop;          /* adaptive: a fall between consecutive evaluations above this: alarm */
    double ema;           /* adaptive: EMA weight of the newest rate, in (0, 1] */
} bt_trigger_config;

/*  every_steps 10, epochs, seconds and tokens off, not adaptive; floor 1, ceiling 80, fast 0.01,
    plateau 0.001, drop 0.05, ema 0.5. */
void bt_trigger_config_init(bt_trigger_config *cfg);
/*  BT_EINVAL with a message naming the field, e.g.
    "floor: expected 1 <= floor <= every_steps (10), got 0".  The adaptive fields are checked only
    when adaptive is set; adaptive needs every_steps >= 1 and 0 <= plateau < fast. */
bt_status bt_trigger_config_validate(const bt_trigger_config *cfg);

/*  All the state, a plain value. */
typedef struct bt_trigger {
    bt_trigger_config cfg;
    int64_t interval;    /* current step interval (every_steps unless adaptive changed it) */
    int64_t last_step;   /* step at which the step trigger last fired or was marked (0) */
    int64_t last_epoch;  /* epoch count at which the epoch trigger last fired or was marked (0) */
    double last_seconds; /* the multiple of every_seconds the time trigger last fired for, counted
                            from the last mark (0) */
    double last_tokens;  /* the same for every_tokens and the token count */
    bool pending;        /* adaptive: due, but deferred because the evaluators were busy */
    int pending_reasons; /* adaptive: BT_TRIGGER_* bits remembered while pending */
    bool has_value;      /* a metric was observed: last_value, last_value_step are set */
    bool has_rate;       /* adaptive: two metrics were observed: rate_ema is set */
    double last_value;   /* the metric of the latest evaluation observed */
    int64_t last_value_step; /* the step of that evaluation */
    double rate_ema;         /* adaptive: EMA of the metric's change per step */
    int64_t fired;           /* checks that returned non-zero */
    int64_t deferred;        /* adaptive: deferral episodes (one "deferred" event each) */
} bt_trigger;

/*  Reason bits of bt_trigger_check: what it returns (and pending_reasons holds) is an OR of
    them.  Values appear in logs and in state.json: append only. */
typedef enum bt_trigger_reason {
    BT_TRIGGER_STEPS = 1,
    BT_TRIGGER_EPOCHS = 2,
    BT_TRIGGER_SECONDS = 4,
    BT_TRIGGER_TOKENS = 8
} bt_trigger_reason;

/*  Where training stands at a check: the trigger's four counters. */
typedef struct bt_trigger_at {
    int64_t step;  /* training steps done */
    int64_t epoch; /* completed epochs of the epoch source */
    double
        seconds; /* training seconds (bt_train_clock: the time a run was stopped does not count) */
    double tokens; /* completion tokens sampled for training so far */
} bt_trigger_at;

/*  "steps+seconds": the names of the reason bits, joined by '+' ("" for none). */
const char *bt_trigger_reasons_str(int reasons, char *buf, size_t len);

typedef struct bt_trigger_event {
    const char *kind; /* static string: "interval" (the step interval changed), "alarm" (the
                         metric dropped), "deferred" (due while the evaluators were busy) */
    int64_t step;     /* the check's step, or the step of the evaluation observed */
    int64_t old_interval, new_interval; /* equal unless kind is "interval" */
    double value, rate; /* the latest metric and its EMA rate (0 before there is one) */
    char reason[160];   /* one readable sentence with numbers, e.g.
                           "metric moved 0.031/step (|EMA| > fast 0.01): interval 10 -> 5" */
} bt_trigger_event;

/*  cfg must have passed bt_trigger_config_validate.  Counts every interval from 0. */
void bt_trigger_init(bt_trigger *t, const bt_trigger_config *cfg);

/*  Called at a step boundary with where training stands (at), busy = the evaluators still have
    queued work.  The four conditions are independent:
      steps   when every_steps > 0 and step - last_step >= interval; then last_step = step
      epochs  when every_epochs > 0 and epoch - last_epoch >= every_epochs; then last_epoch = epoch
      seconds when every_seconds > 0 and seconds - last_seconds >= every_seconds; then last_seconds
              advances by whole multiples of every_seconds to the last one <= seconds, so the
              trigger fires at the first check at or after each multiple (once when a gap spans
              several) and does not drift late by a step per evaluation.
      tokens  the same with every_tokens, tokens and last_tokens.
    Only the conditions that fire update their 'last'.  Returns the OR of the reason bits that
    fired; 0: do not evaluate.
    Fixed mode ignores busy (the caller queues evaluations).  Adaptive mode, when due but busy:
    returns 0 and sets pending, remembering the reasons; the first check of such an episode writes
    a "deferred" event.  The deferred evaluation fires at the first later check that is not busy,
    with the remembered reasons OR the ones due then.
    ev (room for one event) and n_ev may be NULL; *n_ev is set to 0 or 1. */
int bt_trigger_check(bt_trigger *t, const bt_trigger_at *at, bool busy, bt_trigger_event *ev,
                     int *n_ev);

/*  Records an evaluation the caller ran outside the trigger (step 0, the final step), so all four
    intervals count from it; clears a pending deferral. */
void bt_trigger_mark(bt_trigger *t, const bt_trigger_at *at);

/*  Feeds the primary metric (higher is better) of the evaluation made at step.  Without adaptive,
    only records it and returns 0.  Adaptive (rates per step):
      rate = (value - last_value) / (step - last_value_step), skipped when step == last_value_step
      rate_ema = has_rate ? ema * rate + (1 - ema) * rate_ema : rate
      last_value - value > drop:  an "alarm" event; the interval halves (not below floor)
      else |rate_ema| > fast:     the interval halves (not below floor)
      else |rate_ema| < plateau:  the interval doubles (not above ceiling)
    with an "interval" event whose reason names the rule, only when the interval changed.
    A non-finite value, or a step before the last one observed (an evaluation that finished out of
    order), is ignored: returns 0 and changes nothing.
    Writes at most max_ev events (an alarm first) into ev and returns how many; the state changes
    the same way whatever max_ev is. */
int bt_trigger_observe(bt_trigger *t, int64_t step, double value, bt_trigger_event *ev, int max_ev);

/*  Training-time clock: counts seconds only while running, so the time a run spends stopped
    (between a checkpoint and its resume) is not training time.  Plain value; a checkpoint saves
    bt_train_clock_seconds() and a resume restores it with bt_train_clock_init(c, saved).
    now is any monotonic clock in seconds (bt_now()); start and stop are idempotent. */
typedef struct bt_train_clock {
    double base;  /* training seconds before the current run of the clock */
    double since; /* now at the last start */
    bool running;
} bt_train_clock;

/*  Stopped, holding seconds_so_far. */
void bt_train_clock_init(bt_train_clock *c, double seconds_so_far);
void bt_train_clock_start(bt_train_clock *c, double now);
void bt_train_clock_stop(bt_train_clock *c, double now);
double bt_train_clock_seconds(const bt_train_clock *c, double now);

#ifdef __cplusplus
}
#endif
#endif
