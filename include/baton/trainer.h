/*  trainer.h — the trainer core: the policy, its frozen reference copy and AdamW; one GRPO update
    (or one supervised warm-start update) from a batch of completions.  No sockets.
    Threading: a trainer, its models and optimizer belong to one thread at a time.
    Lifetime: from bt_trainer_new() to bt_trainer_destroy(); it owns the policy and the reference.

    Sequences.  Completion c becomes the sequence prompt ++ completion (length P + L), placed in a
    row at some column c0 (0 unless packed), the rest of the row padding or other sequences.
    bt_model_token_logprobs(_packed) gives (B, T-1) log-probs, element t predicting ids[t+1], so
    the completion's tokens are predicted at t = c0+P-1 .. c0+P+L-2: the completion mask is 1
    exactly there, and old_logp[row, c0+P-1+j] is the behaviour log-prob of completion token j.

    Batching (cfg.batching) only decides which sequences share a forward pass and where they sit;
    every sequence is computed as if alone (packed rows get restarting positions and a
    block-diagonal mask) and every loss divides by a constant of the whole batch, so the loss, the
    gradients and the statistics do not depend on it (to float rounding).

    Shared prefixes (cfg.share_prefix, GRPO steps).  A run of consecutive completions with the
    same prompt tokens is one item: the prompt once at c0, then each completion in batch order,
    completion g at column r_g with positions P, P+1, ... and a segment of its own that attends to
    the prompt's (bt_model_forward_shared).  Element r_g-1+j still predicts its token j: for j = 0
    that element is the prompt's last (g = 0) or the previous completion's last token, whose own
    prediction is never used, and its log-prob is read from the prompt's last output row.  So
    P + sum L tokens are computed instead of sum (P + L), and only stats.slots and stats.shared
    tell the layouts apart. */
#ifndef BATON_TRAINER_H
#define BATON_TRAINER_H

#include "baton/grpo.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/rollout.h"
#include "baton/status.h"
#include "baton/tensor.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_trainer_config {
    bt_adamw_config adamw; /* bt_adamw_defaults() */
    double max_grad_norm;  /* global-norm clip; <= 0: no clipping (1.0) */
    int64_t micro_batch;   /* sequences per forward/backward pass, >= 1 (32); "pack": rows */
    bt_batching batching;  /* BT_BATCHING_BUCKET: the fastest once a batch spans several
                              micro-batches (docs/architecture.md, bench_pack) */
    int64_t pack_tokens;   /* "pack": token slots per micro-batch; 0: micro_batch rows (0) */
    bool share_prefix;     /* GRPO steps compute a run of consecutive sequences with the same
                              prompt tokens (at most micro_batch) as one item: the prompt once,
                              each completion attending to it (bt_model_forward_shared); not
                              under dynamic rope scaling, nor for SFT (true) */
    bool reference;        /* keep a frozen copy of the initial policy, needed by any step
                              with kl_coef > 0 (false) */
    bt_shard shard;        /* workers.shard: BT_SHARD_OPTIMIZER keeps AdamW's moments for this
                              rank's shard of the flat parameters only, BT_SHARD_GRADIENTS also
                              reduce-scatters the gradients (bt_group_reduce_scatter_grads);
                              BT_SHARD_PARAMETERS also the weights, gathered a layer at a time
                              (bt_model_set_units): between calls only rank 0 holds them
                              (BT_SHARD_NONE) */
} bt_trainer_config;

void bt_trainer_config_init(bt_trainer_config *cfg);

typedef struct bt_trainer bt_trainer_t;

/*  Takes ownership of *policy_p and sets it to NULL, even on error.  With cfg->reference the
    reference is a copy of the policy as it is now, frozen (no grad); for a LoRA policy
    (bt_model_lora) it is the policy's own base with the adapters off, held once: AdamW then
    gets bt_model_params, the adapters alone.  Version starts at 0.
    Caller owns the result; destroy with bt_trainer_destroy().  NULL on failure, the reason in
    bt_last_error(). */
bt_trainer_t *bt_trainer_new(bt_model **policy_p, const bt_trainer_config *cfg);
void bt_trainer_destroy(bt_trainer_t **self_p);

/*  The sequences per forward/backward pass (cfg.micro_batch).  Setting it (>= 1) changes only
    how the next steps split their batch: the loss, the gradients and the update do not depend on
    it (to float rounding); the out-of-memory retry lowers it (workers/worker.c). */
int64_t bt_trainer_micro_batch(const bt_trainer_t *self);
void bt_trainer_set_micro_batch(bt_trainer_t *self, int64_t micro_batch);
/*  Borrowed: valid while self lives.  Export it with bt_weights_export(policy, version, ...). */
bt_model *bt_trainer_policy(bt_trainer_t *self);
/*  Borrowed; NULL without cfg->reference, and for a LoRA policy (its reference is its base). */
bt_model *bt_trainer_reference(bt_trainer_t *self);
/*  Borrowed: for checkpoints (moments, step count). */
bt_adamw *bt_trainer_optimizer(bt_trainer_t *self);
/*  Optimizer updates applied so far (GRPO and SFT alike): the version of the policy's weights. */
int64_t bt_trainer_version(const bt_trainer_t *self);
void bt_trainer_set_version(bt_trainer_t *self, int64_t version);

/*  Makes the reference a frozen copy of the policy as it is now: RL's KL anchor is the policy it
    starts from (after any supervised warm start), not the one the trainer was built with.  BT_OK
    at once without a reference, and for a LoRA policy, whose reference stays its base model. */
bt_status bt_trainer_freeze_reference(bt_trainer_t *self);

/*  Data parallelism: makes the trainer one rank of group (borrowed: it must outlive its use; NULL:
    alone again).  Every rank then gets the same whole batch and computes a contiguous share of its
    rows (rank r of K: rows [n*r/K, n*(r+1)/K)), with the whole batch's normaliser; the gradients
    and statistics are summed over the ranks before the one clip and AdamW step every rank makes,
    so K ranks make the update one trainer makes with the whole batch (to float rounding) and stay
    identical.  When any rank fails a step, every rank fails it and none updates. */
void bt_trainer_set_group(bt_trainer_t *self, bt_group *group);
/*  Copies rank root's whole state (weights, reference, AdamW moments and step count, version) to
    every rank of the group: what a re-formed group does first.  BT_OK at once without a group. */
bt_status bt_trainer_sync(bt_trainer_t *self, int root);

/*  One GRPO update on batch with advantages[c] for completion c (float64, rounded to float32),
    or, when batch->has_turn_rewards, advantages[c * BT_MAX_TURNS + t] for turn t of episode c
    (bt_grpo_turn_advantages), each token taking its turn's.  Only the tokens loss_mask marks
    train: an environment token is an input the policy attends to, and nothing else (no loss
    term, no statistic, not counted by any aggregation's normaliser).  It
    recomputes the policy's log-probs at the batch's sampling temperature (so rho = 1 when the
    policy is the behaviour policy), the reference's under no-grad when cfg->kl_coef > 0, forms
    bt_grpo_loss per micro-batch (the trainer's batching) with the normaliser of the WHOLE batch
    (bt_grpo_normaliser), backpropagates each, clips the global norm, steps AdamW at lr and
    increments the version.  stats may be NULL.  On failure the weights are unchanged
    (unless AdamW itself failed) and the gradients are dropped. */
bt_status bt_trainer_grpo_step(bt_trainer_t *self, const bt_rollout_batch *batch,
                               const double *advantages, double lr, const bt_grpo_config *cfg,
                               bt_trainer_stats *stats);

/*  One supervised update: teacher-forced cross-entropy on the completion tokens only (for
    bt_rollout_demonstrations: the answer and its EOS, not the prompt), summed over the batch and
    divided by its completion tokens (bt_sft_loss), at temperature 1; then clip, AdamW at lr,
    version++.  stats->loss is the mean NLL per token before the update. */
bt_status bt_trainer_sft_step(bt_trainer_t *self, const bt_rollout_batch *batch, double lr,
                              bt_trainer_stats *stats);

/*  The same supervised loss without gradients or an update: the checkpoints' canary, which a
    restored trainer must reproduce. */
bt_status bt_trainer_sft_loss(bt_trainer_t *self, const bt_rollout_batch *batch, double *loss);

/*  A trainer's whole state: fields version and adam_steps; per parameter NAME the F32 tensors
    param.NAME, exp_avg.NAME and exp_avg_sq.NAME (AdamW's moments), host copies taken now. */
bt_status bt_trainer_state_to_msg(bt_trainer_t *tr, bt_msg_t *msg);
/*  A sharded trainer (cfg.shard) writes its rank's slice of the flat moments instead, as the
    1-D tensors exp_avg.shard-R-of-N and exp_avg_sq.shard-R-of-N (R, N: five digits), and the
    weights (param., ref.) only on rank 0.  bt_trainer_state_merge adds another rank's shards of
    the same snapshot to into (sharing from's bytes): the states of all N ranks merged into rank
    0's are the whole state. */
bt_status bt_trainer_state_merge(bt_msg_t *into, const bt_msg_t *from);
/*  Loads such a state into tr (its version field is not read): every tensor present with the
    model's shapes (else BT_EFORMAT naming it), the moments per parameter or as the N shards of
    any number of ranks (each rank of a sharded trainer takes its slice of either; a replicated
    one all of either: a sharded state resumes on any number of ranks), then the step count; the
   trainer's version becomes version (a rollback gives the restored weights a new, unused version
   number). */
bt_status bt_trainer_state_from_msg(const bt_msg_t *msg, int64_t version, bt_trainer_t *tr);

#ifdef __cplusplus
}
#endif
#endif
