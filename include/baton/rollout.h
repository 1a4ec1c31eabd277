/*  rollout.h — the rollout core: sample group_size completions per training prompt with the KV
    cache, score them with the task's verifier or a reward service, and return plain arrays; plus
    the versioned weights that move a policy between workers.  No sockets of its own.
    Threading: a call uses the model, task and result on the calling thread only.
    Lifetime: a bt_rollout_batch or bt_weights holds heap arrays until its release function. */
#ifndef BATON_ROLLOUT_H
#define BATON_ROLLOUT_H

#include "baton/messages.h"
#include "baton/episodes.h"
#include "baton/model.h"
#include "baton/reward_service.h"
#include "baton/sample.h"
#include "baton/source.h"
#include "baton/status.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sampling ------------------------------------------------------------------------------- */
typedef struct bt_rollout_config {
    int64_t group_size;                  /* >= 1 completions per prompt */
    bt_sample_config sample;             /* max_new_tokens, temperature, top_k, top_p, use_cache */
    bt_reward_service_t *reward_service; /* borrowed; NULL: the task scores (bt_source_score) */
    bt_env_t *env;              /* borrowed; NULL: no environment (single-turn unless
                                   episode.max_turns > 1, which then needs one) */
    bt_episode_config episode;  /* turns, episode tokens, interleaving, reward (episodes.h) */
} bt_rollout_config;

/*  group_size 8; sampling as bt_sample_config_init but max_new_tokens 8; no reward service, no
    environment, bt_episode_config_init. */
void bt_rollout_config_init(bt_rollout_config *cfg);

/*  A rollout or eval TASK's "seed" numbers the job within its step or evaluation in its low
    BT_JOB_SEED_BITS bits (the controller's rollout jobs, bt_config_eval_seed's shards); the
    bits above name the work alone (run.seed, step, dataset).  Draws are keyed by those, seed >>
    BT_JOB_SEED_BITS, so a completion does not depend on which job or shard carried it. */
#define BT_JOB_SEED_BITS 6

/*  The key of completion `sample` of prompt id under a rollout TASK's seed: (seed >>
    BT_JOB_SEED_BITS, "rollout", prompt_id, sample) chained with bt_rng_key. */
uint64_t bt_rollout_key(uint64_t seed, uint64_t prompt_id, int64_t sample);

/*  Samples cfg->group_size completions of each training example indices[0 .. n_prompts) in ONE
    bt_generate call: prompt = BOS + the prompt's bytes; each completion is decoded (up to its EOS)
    and all are scored against their examples' answers with one bt_reward_score call (one request
    to cfg->reward_service when set).  Completion j of prompt id p draws its tokens from
    bt_rollout_key(seed, p, j) alone (bt_generate), so it is the same whichever job, batch or
    worker holds p.  Only ids the tokenizer has are sampled (bt_sample_config.vocab_limit).
    version is recorded in the result.  Fills *out, releasing what it held; on failure (a reward
    service's error included) *out is empty. */
bt_status bt_rollout_sample(bt_model *model, const bt_tokenizer_t *tok, bt_source_t *task,
                            const uint64_t *indices, int64_t n_prompts,
                            const bt_rollout_config *cfg, int64_t version, uint64_t seed,
                            bt_rollout_batch *out);

/*  Supervised demonstrations in the same layout: one row per training example (group_size 1)
    whose completion is the example's demonstration followed by EOS (reward 1, correct, finished,
    log-probs 0, version -1), for bt_trainer_sft_step: its answer bytes (one model turn), or the
    turns of its bt_source_example.demo, each part tokenized on its own (no BOS), model turns with
    loss_mask 1, observations 0 (turn: the model turn they answer), the EOS 1; n_turns the model
    turns.  max_new_tokens is the longest demonstration's bytes + 1.
    Fills *out, releasing what it held; on failure *out is empty. */
bt_status bt_rollout_demonstrations(const bt_tokenizer_t *tok, bt_source_t *task,
                                    const uint64_t *indices, int64_t n, bt_rollout_batch *out);

/* ---- versioned weights ---------------------------------------------------------------------- */
/*  Copies every parameter of model to host memory: as float32, except that at precision BT_BF16
    (bt_model_set_precision) the matrix-product weights (bt_model_param_is_matmul) are rounded to
    bfloat16 (nearest even, as torch's .to()) - the values autocast's forward reads, in half the
    bytes; the embedding, norms and biases, which autocast reads as float32, stay float32.  Fills
    *out, releasing what it held; on failure *out is empty. */
bt_status bt_weights_export(const bt_model *model, int64_t version, bt_weights *out);
/*  Copies w into model's parameters under no-grad; a BF16 tensor becomes its exact float32 value,
    which a bf16 forward casts back to the same bfloat16.  Every parameter of model must appear in
    w with its shape (extra entries are an error too); the first mismatch is reported by name and
    the model may then hold a mix of old and new weights. */
bt_status bt_weights_load(bt_model *model, const bt_weights *w);
/*  dst gets src's parameters (same config, any devices) under no-grad, bit-identical float32:
    in-process, what bt_weights_export + bt_weights_load give a forward at either precision. */
bt_status bt_weights_copy(bt_model *dst, const bt_model *src);

#ifdef __cplusplus
}
#endif
#endif
