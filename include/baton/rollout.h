/*  rollout.h — the rollout core: sample group_size completions per training prompt with the KV
    cache, score them with the task's verifier or a reward service, and return plain arrays; plus
    the versioned weights that move a policy between workers.  No sockets of its own.
    Threading: a call uses the model, task and result on the calling thread only.
    Lifetime: a bt_rollout_batch or bt_weights holds heap arrays until its release function. */
#ifndef BATON_ROLLOUT_H
#define BATON_ROLLOUT_H

#include "baton/model.h"
#include "baton/reward_service.h"
#include "baton/sample.h"
#include "baton/status.h"
#include "baton/tasks.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- batches of completions ----------------------------------------------------------------- */
/*  n = n_prompts * group_size completions; completion c belongs to prompt c / group_size, so a
    group's completions are consecutive.  Row c of a (n, stride) array is [c * stride, (c+1) * stride).
    Every row keeps its own copy of its prompt, so batches can be cut and joined by rows. */
/*  Prompt ids: BT_PROMPT_ID (tasks.h). */
typedef struct bt_rollout_batch {
    int64_t n_prompts;
    int64_t group_size;
    int64_t n;              /* completions */
    int64_t version;        /* policy version the completions were sampled with (-1: not sampled) */
    double temperature;     /* sampling temperature; the log-probs are at this temperature (0: 1) */
    int64_t max_prompt_len; /* stride of prompt_tokens */
    int64_t max_new_tokens; /* stride of tokens and logprobs */
    uint64_t *indices;      /* (n_prompts) prompt id of each prompt (BT_PROMPT_ID) */
    int32_t *prompt_tokens; /* (n, max_prompt_len) BOS + prompt bytes, then padding */
    int64_t *prompt_lens;   /* (n) */
    int32_t *tokens;        /* (n, max_new_tokens) completion ids, the EOS included, then padding */
    float *logprobs;        /* (n, max_new_tokens) behaviour log-prob of each token */
    int64_t *lengths;       /* (n) completion tokens, the EOS included */
    double *rewards;        /* (n) the decoded completion's reward (bt_reward_score) */
    bool *correct;          /* (n) its answer check (verifier's or reward service's) */
    bool *finished;         /* (n) ended with EOS (false: truncated at max_new_tokens) */
} bt_rollout_batch;

void bt_rollout_batch_init(bt_rollout_batch *b);
/*  Frees the arrays and re-initialises b.  NULL-safe, idempotent. */
void bt_rollout_batch_release(bt_rollout_batch *b);
/*  Releases what b held, then allocates every array for n_prompts * group_size rows, all zero,
    version -1.  Readers never look past a row's length, so padding may hold anything.
    BT_EINVAL for sizes < 1 (n_prompts may be 0), BT_ENOMEM when out of memory. */
bt_status bt_rollout_batch_alloc(bt_rollout_batch *b, int64_t n_prompts, int64_t group_size,
                                 int64_t max_prompt_len, int64_t max_new_tokens);

/* ---- sampling ------------------------------------------------------------------------------- */
typedef struct bt_rollout_config {
    int64_t group_size;                  /* >= 1 completions per prompt */
    bt_sample_config sample;             /* max_new_tokens, temperature, top_k, top_p, use_cache */
    bt_reward_service_t *reward_service; /* borrowed; NULL: the task scores (bt_task_score) */
} bt_rollout_config;

/*  group_size 8; sampling as bt_sample_config_init but max_new_tokens 8; no reward service. */
void bt_rollout_config_init(bt_rollout_config *cfg);

/*  A rollout or eval TASK's "seed" numbers the job within its step or evaluation in its low
    BT_TASK_SEED_JOB_BITS bits (the controller's rollout jobs, bt_config_eval_seed's shards); the
    bits above name the work alone (run.seed, step, dataset).  Draws are keyed by those, seed >>
    BT_TASK_SEED_JOB_BITS, so a completion does not depend on which job or shard carried it. */
#define BT_TASK_SEED_JOB_BITS 6

/*  The key of completion `sample` of prompt id under a rollout TASK's seed: (seed >>
    BT_TASK_SEED_JOB_BITS, "rollout", prompt_id, sample) chained with bt_rng_key. */
uint64_t bt_rollout_key(uint64_t seed, uint64_t prompt_id, int64_t sample);

/*  Samples cfg->group_size completions of each training example indices[0 .. n_prompts) in ONE
    bt_generate call: prompt = BOS + the prompt's bytes; each completion is decoded (up to its EOS)
    and all are scored against their examples' answers with one bt_reward_score call (one request
    to cfg->reward_service when set).  Completion j of prompt id p draws its tokens from
    bt_rollout_key(seed, p, j) alone (bt_generate), so it is the same whichever job, batch or
    worker holds p.  Only ids the tokenizer has are sampled (bt_sample_config.vocab_limit).
    version is recorded in the result.  Fills *out, releasing what it held; on failure (a reward
    service's error included) *out is empty. */
bt_status bt_rollout_sample(bt_model *model, const bt_tokenizer_t *tok, bt_task_t *task,
                            const uint64_t *indices, int64_t n_prompts,
                            const bt_rollout_config *cfg, int64_t version, uint64_t seed,
                            bt_rollout_batch *out);

/*  Supervised demonstrations in the same layout: one row per training example (group_size 1)
    whose completion is the example's answer bytes followed by EOS (reward 1, correct, finished,
    log-probs 0, version -1), for bt_trainer_sft_step.  max_new_tokens is the longest answer + 1.
    Fills *out, releasing what it held; on failure *out is empty. */
bt_status bt_rollout_demonstrations(const bt_tokenizer_t *tok, bt_task_t *task,
                                    const uint64_t *indices, int64_t n, bt_rollout_batch *out);

/* ---- versioned weights ---------------------------------------------------------------------- */
/*  A model's parameters as host float32 arrays under their Hugging Face names, in
    bt_model_params() order: what WEIGHTS carries from the trainer to rollout and eval workers. */
typedef struct bt_weights {
    int64_t version;
    int n;
    char **names;                   /* (n) NUL-terminated */
    int *ndim;                      /* (n) */
    int64_t (*shape)[BT_MAX_DIMS];  /* (n) */
    int64_t *numel;                 /* (n) */
    float **data;                   /* (n) arrays of numel[i] elements, row-major */
} bt_weights;

void bt_weights_init(bt_weights *w);
/*  NULL-safe, idempotent. */
void bt_weights_release(bt_weights *w);
/*  Copies every parameter of model to host memory.  Fills *out, releasing what it held; on
    failure *out is empty. */
bt_status bt_weights_export(const bt_model *model, int64_t version, bt_weights *out);
/*  Copies w into model's parameters under no-grad.  Every parameter of model must appear in w
    with its shape (extra entries are an error too); the first mismatch is reported by name and
    the model may then hold a mix of old and new weights. */
bt_status bt_weights_load(bt_model *model, const bt_weights *w);
/*  In-process shortcut for bt_weights_export + bt_weights_load: dst gets src's parameters (same
    config, any devices) under no-grad; bit-identical. */
bt_status bt_weights_copy(bt_model *dst, const bt_model *src);

#ifdef __cplusplus
}
#endif
#endif
