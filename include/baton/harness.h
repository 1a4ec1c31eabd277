/*  harness.h — offline evaluation: every eval.datasets entry of a run config against one or more
    models in this process, with a results cache, the results JSON and a regression gate.
    Threading: a result belongs to the thread that made it.  Lifetime: bt_harness_run() to
    bt_harness_result_destroy(). */
#ifndef BATON_HARNESS_H
#define BATON_HARNESS_H

#include "baton/config.h"
#include "baton/evaluator.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  What is evaluated.  Values appear on the command line and in results: append only. */
typedef enum bt_harness_mode {
    BT_HARNESS_FULL = 0,       /* "full": each dataset's configured count (0 = all) */
    BT_HARNESS_QUICK = 1,      /* "quick": the first min(count, BT_HARNESS_QUICK_COUNT) items */
    BT_HARNESS_COMPARE = 2,    /* "compare": full, for two models or more */
    BT_HARNESS_INCREMENTAL = 3 /* "incremental": full, reading evaluated pairs from the cache */
} bt_harness_mode;

#define BT_HARNESS_QUICK_COUNT 50
#define BT_HARNESS_INIT "init" /* a model argument: the config's version-0 model */

/*  "full", "quick", "compare", "incremental"; "unknown" out of range.  Static string. */
const char *bt_harness_mode_name(bt_harness_mode mode);
/*  BT_EINVAL "--mode X: expected one of ..." for any other text. */
bt_status bt_harness_mode_parse(const char *text, bt_harness_mode *out);

typedef struct bt_harness_options {
    bt_harness_mode mode;  /* (BT_HARNESS_FULL) */
    const char *cache_dir; /* incremental: a JSON file per (model, dataset); NULL: the default
                              (".baton-eval-cache"), created when missing (not its parents) */
} bt_harness_options;

void bt_harness_options_init(bt_harness_options *opt);

/*  One dataset evaluated for one model. */
typedef struct bt_harness_dataset {
    char name[BT_EVAL_NAME_MAX];
    int n_metrics;
    bt_eval_metric metrics[BT_EVAL_MAX_METRICS]; /* bt_evaluator_metrics' names and order */
    double seconds;                              /* wall time of this invocation on it */
    bool cached;                                 /* read from the cache, not computed */
} bt_harness_dataset;

typedef struct bt_harness_model {
    char path[BT_CONFIG_PATH_MAX]; /* the model argument: a directory or "init" */
    uint64_t hash;                 /* of the weights and model config (the cache key's half) */
    double seconds;                /* wall time of the whole model, loading included */
    bt_harness_dataset datasets[BT_EVAL_MAX_DATASETS]; /* in eval.datasets order */
} bt_harness_model;

/*  Read-only to the caller. */
typedef struct bt_harness_result {
    bt_harness_mode mode;
    bt_config cfg; /* the resolved config evaluated */
    int n_models;
    bt_harness_model *models; /* [n_models], in argument order */
} bt_harness_result;

/*  Evaluates models[0..n_models) (directories as bt_model_save writes them, or "init") on every
    dataset of cfg, each as one shard from its first item, with the byte-level tokenizer, on
    cfg->run.device.  Sampling is seeded from run.seed and the dataset's index as a training run's
    step-0 evaluation on one eval worker, so a repeated call gives the same numbers.  In
    incremental mode a pair found in the cache is read, not computed; its key hashes (with
    XXH3-64) the bytes of config.json and model.safetensors ("init" without model.path: the model
    config and run.seed) and what the dataset's numbers depend on: its entry (triggers aside),
    index and count, the task section, reward.service (the endpoint only: the cache cannot see a
    service change how it scores), run.seed, run.device, the probes (probes datasets: eval.probes
    and eval.probes_source's, as parsed, so that a changed line is evaluated again) and the bytes
    of its source or task files.  Generate datasets are scored as on an eval worker: by
    reward.service when set.  opt may be NULL (defaults).  Errors name the model or file
    at fault.  Caller owns *out (NULL on error): destroy with bt_harness_result_destroy(). */
bt_status bt_harness_run(const bt_config *cfg, const char *const *models, int n_models,
                         const bt_harness_options *opt, bt_harness_result **out);
/*  NULL-safe and idempotent; sets *self_p to NULL. */
void bt_harness_result_destroy(bt_harness_result **self_p);

/*  Writes one row per dataset.metric and one column per model: "value ± stderr" where a
    <metric>_stderr exists (those rows themselves are folded in). */
void bt_harness_print(const bt_harness_result *r, FILE *out);

/*  Writes the results JSON (docs: `baton eval`) to path through path.tmp and a rename; non-finite
    values are null.  BT_EIO naming the path when it cannot. */
bt_status bt_harness_write_json(const bt_harness_result *r, const char *path);

/*  Compares models[0] with the "results" object of the JSON at baseline_path.  A metric whose
    direction is known (higher: accuracy, pass@*, maj@*, reward_mean, robust.*, pairs_accuracy,
    probe.*.logp; lower, relative: perplexity, nll_per_token) regresses when it dropped by more
    than max_drop, or when the baseline has it and the current results do not.  Writes one row per
    baseline metric to table (dataset, metric, baseline, current, delta, status: ok, DROP, missing
    or info) and the count of regressions to *regressions.  BT_EIO or BT_EFORMAT naming the path
    when the baseline cannot be read. */
bt_status bt_harness_gate(const bt_harness_result *r, const char *baseline_path, double max_drop,
                          FILE *table, int *regressions);

#ifdef __cplusplus
}
#endif
#endif
