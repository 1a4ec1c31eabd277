/*  messages.h — baton's payloads as wire messages: batches of completions, published weights and
    evaluation sums, each written into and read back from a bt_msg_t.  Readers check every size
    and value against the declared shapes, so a malformed payload is an error, never a crash.
    Threading: plain functions on caller-owned values.  Lifetime: results are caller-owned. */
#ifndef BATON_MESSAGES_H
#define BATON_MESSAGES_H

#include "baton/evaluator.h"
#include "baton/rollout.h"
#include "baton/status.h"
#include "baton/trainer.h"
#include "baton/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  Fields version, group_size, n_prompts, temperature; tensors indices (P) I64, prompt_tokens
    (n, Pmax) I32, prompt_lens (n) I64, tokens (n, L) I32, logprobs (n, L) F32, lengths (n) I64,
    rewards (n) F64, correct (n) U8, finished (n) U8. */
bt_status bt_batch_to_msg(const bt_rollout_batch *b, bt_msg_t *msg);
/*  Fills *out (releasing what it held); BT_EFORMAT naming the first inconsistency. */
bt_status bt_batch_from_msg(const bt_msg_t *msg, bt_rollout_batch *out);
/*  Rows of parts[0..n) one after the other (same group_size and temperature); strides are the
    largest of the parts; version is the oldest.  Fills *out, releasing what it held. */
bt_status bt_batch_concat(const bt_rollout_batch *parts, int n, bt_rollout_batch *out);

/*  The groups g of in with keep[g] true, in order (DAPO dynamic sampling drops the groups whose
    rewards are all equal).  Fills *out, releasing what it held. */
bt_status bt_batch_keep_groups(const bt_rollout_batch *in, const bool *keep, bt_rollout_batch *out);

/*  Field version; one F32 tensor per parameter under its name.  Zero-copy: the frames sent are
    w's arrays, whose ownership passes to the message (w->data[i] become NULL, even on error). */
bt_status bt_weights_to_msg(bt_weights *w, bt_msg_t *msg);
bt_status bt_weights_from_msg(const bt_msg_t *msg, bt_weights *out);

/*  Fields version, stats.loss, stats.pg_loss, stats.kl, stats.clip_frac, stats.entropy,
    stats.grad_norm, stats.tokens, and stats.finite: false when one of them was NaN or infinite
    (that one is left out and reads back as NaN), so a diverged step still reports. */
bt_status bt_trainer_stats_to_msg(const bt_trainer_stats *s, bt_msg_t *msg);
bt_status bt_trainer_stats_from_msg(const bt_msg_t *msg, bt_trainer_stats *out);

/*  Fields examples, samples, completions, correct, reward_sum, length_sum, truncated; tensor
    correct_hist (samples + 1) I64. */
bt_status bt_sums_to_msg(const bt_evaluator_sums *s, bt_msg_t *msg);
/*  A trainer's whole state: fields version and adam_steps; per parameter NAME the F32 tensors
    param.NAME, exp_avg.NAME and exp_avg_sq.NAME (AdamW's moments), host copies taken now. */
bt_status bt_trainer_state_to_msg(bt_trainer_t *tr, bt_msg_t *msg);
/*  Loads such a state into tr (its version field is not read): every tensor present with the
    model's shapes (else BT_EFORMAT naming it), then the step count; the trainer's version becomes
    version (a rollback gives the restored weights a new, unused version number). */
bt_status bt_trainer_state_from_msg(const bt_msg_t *msg, int64_t version, bt_trainer_t *tr);
bt_status bt_sums_from_msg(const bt_msg_t *msg, bt_evaluator_sums *out);

#ifdef __cplusplus
}
#endif
#endif
