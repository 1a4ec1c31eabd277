/*  runstate.h — the controller's part of a checkpoint (state.json): step, policy version, data
    cursor, training time, trigger states, evaluations to run again, fault-handling state.  With
    the trainer's weights and optimizer it is everything an exact resume needs (every random draw
    is seeded from run.seed and the step, so there are no generator states to keep).
    Threading: plain values and functions.  Lifetime: a value with no heap parts. */
#ifndef BATON_RUNSTATE_H
#define BATON_RUNSTATE_H

#include "baton/config.h"
#include "baton/status.h"
#include "baton/trigger.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_RUNSTATE_MAX_PENDING 16

/*  An evaluation that had not finished at the checkpoint, pinned to the checkpoint's version: the
    resumed run starts it again. */
typedef struct bt_runstate_eval {
    int32_t dataset;
    int64_t step;
    char trigger[32];
} bt_runstate_eval;

typedef struct bt_runstate {
    int64_t step;         /* GRPO steps done */
    int64_t version;      /* policy version after them */
    uint64_t cursor;      /* next training-stream index */
    double train_seconds; /* bt_train_clock at the checkpoint */
    double last_reward, last_accuracy;
    int64_t metrics_size; /* bytes of metrics.jsonl at the checkpoint */
    int64_t events_size;  /* bytes of events.jsonl then; -1 in a state.json from before it */
    int64_t global_step;  /* train and sft lines the policy had written to metrics.jsonl (their
                             global_step); -1 in a state.json from before it */
    double canary_loss;   /* the trainer's loss on the fixed canary batch */
    bool nan_injected;    /* debug.inject_nan_at_step has fired */
    double loss_ema;      /* |loss| EMA for spike detection, over loss_n steps */
    int64_t loss_n;
    double tokens;    /* completion tokens sampled so far */
    double clip_high; /* the ratio's upper clip the next updates use (PBT may have moved it); NaN
                         in a state.json from before it: the config's */
    int32_t n_triggers;
    bt_trigger triggers[BT_EVAL_MAX_DATASETS];
    int32_t n_pending;
    bt_runstate_eval pending[BT_RUNSTATE_MAX_PENDING];
    bool has_tuner; /* false in a state.json written before the tuner existed */
    bt_tuner tuner; /* its state; cfg is not saved (the run's config gives it) */
} bt_runstate;

/*  JSON text that reads back to the same struct, every double exact.  Caller owns the result;
    free() it.  NULL when out of memory. */
char *bt_runstate_to_json(const bt_runstate *s);
/*  Parses state.json text; source names it in errors ("PATH: triggers[1].interval: ...").
    BT_EFORMAT for malformed JSON, a missing or mistyped field, or a value no run can have: a
    negative count, step, version or byte size, a non-finite number where one must be known, a
    pending evaluation after the checkpoint's step, tuner values outside what the workers accept:
      "PATH.metrics_size: expected an integer in [0, 9007199254740992], got -1" */
bt_status bt_runstate_from_json(const char *text, const char *source, bt_runstate *out);
/*  s against the run it would resume: its step within cfg's grpo.steps, one trigger per eval
    dataset and pending evaluations of existing ones, and metrics_size (events_size) no larger
    than the metrics_bytes (events_bytes) metrics.jsonl (events.jsonl) holds now.  BT_EINVAL
    saying what is wrong and what to do. */
bt_status bt_runstate_check(const bt_runstate *s, const bt_config *cfg, int64_t metrics_bytes,
                            int64_t events_bytes, const char *source);

/*  A run with variants: the population's part of a checkpoint (population.json), beside each
    policy's state.json in a folder of its name.  Every policy stands at step when it is taken. */
typedef struct bt_runstate_population {
    int64_t step;     /* GRPO steps every live policy had done */
    int64_t pbt_step; /* the step of the last PBT round (0: none) */
    int32_t n;        /* policies, in the config's order */
    struct {
        char name[BT_CONFIG_NAME_MAX];
        bool stopped; /* stopped early (scaling.stop_margin): no folder of its own */
        int64_t step; /* its steps done (where it stopped) */
    } policies[BT_CONFIG_MAX_VARIANTS];
} bt_runstate_population;

/*  JSON text of p; caller frees; NULL when out of memory. */
char *bt_runstate_population_to_json(const bt_runstate_population *p);
/*  Parses population.json; BT_EFORMAT naming source and the field that is missing or wrong. */
bt_status bt_runstate_population_from_json(const char *text, const char *source,
                                           bt_runstate_population *out);

#ifdef __cplusplus
}
#endif
#endif
