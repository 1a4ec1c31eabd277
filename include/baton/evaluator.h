/*  evaluator.h — the evaluation core: held-out accuracy, reward, response length and the counts
    behind unbiased pass@k of a model on a task, as SUMS so that shards add up exactly.  No sockets.
    Threading: a call uses the model, task, generator and result on the calling thread only.
    Lifetime: plain values; nothing to create or destroy.  Load published weights into the model
    with bt_weights_load (rollout.h). */
#ifndef BATON_EVALUATOR_H
#define BATON_EVALUATOR_H

#include "baton/model.h"
#include "baton/status.h"
#include "baton/tasks.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_EVALUATOR_MAX_SAMPLES 128

typedef struct bt_evaluator_config {
    size_t start;           /* first held-out example of the shard (0) */
    size_t count;           /* examples in the shard; start + count <= held-out size (200) */
    int64_t samples;        /* completions per example, 1..BT_EVALUATOR_MAX_SAMPLES (1) */
    double temperature;     /* 0: greedy, only with samples == 1 (0) */
    int64_t top_k;          /* 0 = off (0) */
    double top_p;           /* 1 = off (1) */
    int64_t max_new_tokens; /* >= 1 (8) */
    int64_t batch;          /* sequences per bt_generate call, >= samples (256) */
} bt_evaluator_config;

void bt_evaluator_config_init(bt_evaluator_config *cfg);

/*  Sums over a shard; add shards with bt_evaluator_sums_add. */
typedef struct bt_evaluator_sums {
    int64_t examples;    /* held-out examples evaluated */
    int64_t samples;     /* completions per example (k) */
    int64_t completions; /* examples * samples */
    int64_t correct;     /* examples whose first completion is correct (greedy: accuracy) */
    double reward_sum;   /* bt_task_reward over all completions */
    double length_sum;   /* completion tokens (the EOS included) over all completions */
    int64_t truncated;   /* completions that reached max_new_tokens without EOS */
    int64_t correct_hist[BT_EVALUATOR_MAX_SAMPLES + 1]; /* [c]: examples with c of k correct */
} bt_evaluator_sums;

/*  Empty sums for k samples per example. */
void bt_evaluator_sums_init(bt_evaluator_sums *s, int64_t samples);
/*  total += part.  BT_EINVAL when their sample counts differ. */
bt_status bt_evaluator_sums_add(bt_evaluator_sums *total, const bt_evaluator_sums *part);

/*  Evaluates held-out examples [cfg->start, cfg->start + cfg->count): prompt = BOS + bytes,
    cfg->samples completions each, generated in batches of up to cfg->batch sequences with the KV
    cache, decoded and scored with bt_task_reward.  gen may be NULL when greedy.  Fills *out. */
bt_status bt_evaluator_run(bt_model *model, const bt_tokenizer_t *tok, const bt_task_t *task,
                           const bt_evaluator_config *cfg, bt_gen *gen, bt_evaluator_sums *out);

#ifdef __cplusplus
}
#endif
#endif
