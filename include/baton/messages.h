/*  messages.h — baton's payloads and their wire form: batches of completions, published weights,
    trainer statistics and evaluation sums, each a plain value written into and read back from a
    bt_msg_t.  Readers check every size and value against the declared shapes, so a malformed
    payload is an error, never a crash.  The workers fill them (rollout.h, trainer.h, evaluator.h),
    the controller reads them; both meet here, below either.
    Threading: plain functions on caller-owned values.  Lifetime: a bt_rollout_batch or bt_weights
    holds heap arrays until its release function; results are caller-owned. */
#ifndef BATON_MESSAGES_H
#define BATON_MESSAGES_H

#include "baton/config.h" /* BT_EVALUATOR_MAX_SAMPLES, BT_EVAL_MAX_PROBES */
#include "baton/dtype.h"
#include "baton/msg.h"
#include "baton/source.h" /* BT_PERTURB_COUNT */
#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- batches of completions ----------------------------------------------------------------- */
/*  n = n_prompts * group_size completions; completion c belongs to prompt c / group_size, so a
    group's completions are consecutive.  Row c of a (n, stride) array is [c * stride, (c+1) *
   stride). Every row keeps its own copy of its prompt, so batches can be cut and joined by rows. */
/*  Prompt ids: BT_PROMPT_ID (source.h).
    A multi-turn episode's completion is its model turns and the environment's observations in
    the order they came (model turn 0, observation 0, model turn 1, ...), as ids: loss_mask tells
    which tokens the policy sampled, turn which model turn each belongs to.  A single-turn batch
    is the default of every one of these fields: all ones, turn 0, one turn, no turn rewards. */
#define BT_MAX_TURNS 64 /* model turns one episode may take (turn is a byte) */
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
    float *logprobs;        /* (n, max_new_tokens) behaviour log-prob of each token the policy
                               sampled (loss_mask 1); anything at environment tokens */
    int64_t *lengths;       /* (n) completion tokens, the EOS included (environment tokens too) */
    double *rewards;        /* (n) the decoded completion's reward (bt_reward_score): the
                               episode's final reward */
    bool *correct;          /* (n) its answer check (verifier's or reward service's) */
    bool *finished;         /* (n) ended with EOS (false: truncated at max_new_tokens) */
    uint8_t *loss_mask;     /* (n, max_new_tokens) 1: a token the policy sampled (trained), 0: an
                               environment token (an observation: no gradient, no statistic) */
    uint8_t *turn;          /* (n, max_new_tokens) the model turn (0-based, < n_turns) a token
                               belongs to; an observation, to the turn it answers */
    int64_t *n_turns;       /* (n) model turns of the episode, [1, BT_MAX_TURNS] */
    double *turn_rewards;   /* (n, BT_MAX_TURNS) each model turn's reward, 0 past n_turns */
    bool has_turn_rewards;  /* turn_rewards hold the environment's: advantages per turn
                               (bt_grpo_turn_advantages); false: one per episode, from rewards */
} bt_rollout_batch;

void bt_rollout_batch_init(bt_rollout_batch *b);
/*  Frees the arrays and re-initialises b.  NULL-safe, idempotent. */
void bt_rollout_batch_release(bt_rollout_batch *b);
/*  Releases what b held, then allocates every array for n_prompts * group_size rows, all zero,
    version -1, but loss_mask all ones and n_turns all 1: a single-turn batch.  Readers never
    look past a row's length, so padding may hold anything.
    BT_EINVAL for sizes < 1 (n_prompts may be 0), BT_ENOMEM when out of memory. */
bt_status bt_rollout_batch_alloc(bt_rollout_batch *b, int64_t n_prompts, int64_t group_size,
                                 int64_t max_prompt_len, int64_t max_new_tokens);

/* ---- versioned weights ---------------------------------------------------------------------- */
/*  A model's parameters as host arrays under their Hugging Face names, in bt_model_params()
    order: what WEIGHTS carries from the trainer to rollout and eval workers.  Each is float32,
    or bfloat16 for a matrix-product weight of a bf16 run (bt_weights_export). */
typedef struct bt_weights {
    int64_t version;
    int n;
    char **names;                  /* (n) NUL-terminated */
    int *ndim;                     /* (n) */
    int64_t (*shape)[BT_MAX_DIMS]; /* (n) */
    int64_t *numel;                /* (n) */
    bt_dtype *dtype;               /* (n) BT_F32 or BT_BF16 */
    void **data;                   /* (n) arrays of numel[i] elements of dtype[i], row-major */
} bt_weights;

void bt_weights_init(bt_weights *w);
/*  NULL-safe, idempotent. */
void bt_weights_release(bt_weights *w);

/* ---- trainer statistics --------------------------------------------------------------------- */
/*  One update's statistics.  Token means are over completion tokens. */
typedef struct bt_trainer_stats {
    double loss;        /* the batch loss that was differentiated (sum over micro-batches) */
    double pg_loss;     /* clipped surrogate, token mean (GRPO) */
    double kl;          /* KL estimate to the reference, token mean (0 without) */
    double clip_frac;   /* tokens on a clipped branch / tokens (GRPO) */
    double ratio_mean;  /* rho = pi_theta / pi_behav, token mean (GRPO) */
    double ratio_std;   /* its standard deviation over tokens (GRPO) */
    double ratio_max;   /* (GRPO) */
    double ratio_min;   /* (GRPO) */
    double mismatch_kl; /* KL(pi_behav || pi_theta) per token, k3 estimate, before the update: the
                           sampler's log-probs against the trainer's recomputed ones (GRPO) */
    double entropy;     /* policy entropy at the training temperature, token mean */
    double grad_norm;   /* global gradient norm before clipping */
    double tokens;      /* completion tokens */
    double slots;       /* token slots the forward passes computed (rows x width, summed over the
                           micro-batches and ranks): the batch's prompt and completion tokens plus
                           padding, less shared */
    double shared;      /* prompt tokens a shared-prefix layout did not compute again (the
                           trainer's share_prefix): (n - 1) * P for each prompt of P tokens that n
                           sequences share in a pass */
    double lr;          /* the learning rate AdamW applied */
    int64_t sequences;
    int64_t version;     /* after the update */
    int64_t micro_batch; /* sequences per pass the step ran with (GRPO; 0: not said) */
    int64_t lowered;     /* times the worker halved micro_batch and retried the step after running
                            out of memory (workers/worker.c) */
} bt_trainer_stats;

/* ---- evaluation sums ------------------------------------------------------------------------ */
/*  BT_EVALUATOR_MAX_SAMPLES: config.h (eval.samples is checked against it). */
#define BT_EVALUATOR_LEN_BINS                                                                      \
    1024 /* response-length histogram; longer lengths land in the last                             \
          */

/*  Sums over a shard; add shards with bt_evaluator_sums_add.  Every field is a sum (or a max), so
    the result does not depend on how a dataset was split. */
#define BT_CHOICES_BINS 10            /* calibration bins of [0, 1] */
#define BT_CHOICES_FIXED 4294967296.0 /* 2^32: a probability's fixed-point unit */
#define BT_CHOICES_SUBJECTS 64        /* distinct "subject"s of one choices set */
/*  The choices fields, as the wire packs them. */
#define BT_CHOICES_SUMS (6 + 3 * BT_CHOICES_BINS + 3 * BT_CHOICES_SUBJECTS)

typedef struct bt_evaluator_sums {
    /* generate */
    int64_t examples;    /* held-out examples evaluated */
    int64_t samples;     /* completions per example (k) */
    int64_t completions; /* examples * samples */
    int64_t correct;     /* examples whose first completion is correct (greedy: accuracy) */
    int64_t maj_correct; /* examples whose majority answer over the k completions is correct */
    double reward_sum;   /* bt_reward_score over all completions */
    double reward_sumsq; /* of squares, for the std */
    double length_sum;   /* completion tokens (the EOS included) over all completions */
    int64_t truncated;   /* completions that reached max_new_tokens without EOS */
    int64_t correct_hist[BT_EVALUATOR_MAX_SAMPLES + 1]; /* [c]: examples with c of k correct */
    int64_t length_hist[BT_EVALUATOR_LEN_BINS];         /* [l]: completions of l tokens */
    int64_t robust_examples[BT_PERTURB_COUNT];          /* examples the perturbation applies to */
    int64_t robust_correct[BT_PERTURB_COUNT];           /* of those, first completion correct */
    /* perplexity */
    double nll_sum;     /* token negative log-likelihoods, in float64 */
    int64_t nll_tokens; /* tokens scored */
    int64_t texts;      /* texts scored */
    /* probes: filled by bt_evaluator_probes, never split */
    int64_t n_probes;
    double probe_nll[BT_EVAL_MAX_PROBES][2]; /* target probe: [0] = -log P(target | prompt);
                                                pair: NLL sums of better [0] and worse [1] */
    int64_t probe_tokens[BT_EVAL_MAX_PROBES][2];
    /* choices (choices.h): counts, and sums of probabilities in fixed point (x BT_CHOICES_FIXED,
       so that shards add up exactly) */
    int64_t mc_items, mc_correct, mc_correct_norm; /* items; right by argmax, by acc_norm's */
    int64_t mc_p_right_fx;                         /* P(the right choice) */
    int64_t mc_bin_n[BT_CHOICES_BINS];         /* items whose top probability falls in the bin */
    int64_t mc_bin_conf_fx[BT_CHOICES_BINS];   /* their top probabilities */
    int64_t mc_bin_correct[BT_CHOICES_BINS];   /* of those, right by argmax */
    int64_t mc_shuffled, mc_shuffled_correct;  /* shuffle_choices: items, right in the new order */
    int64_t mc_subject_n[BT_CHOICES_SUBJECTS]; /* [s]: items of the set's subject s (choices.h) */
    int64_t mc_subject_correct[BT_CHOICES_SUBJECTS];      /* of those, right by argmax */
    int64_t mc_subject_correct_norm[BT_CHOICES_SUBJECTS]; /* and by acc_norm's */
    /* episodes (a generate dataset with an environment or max_turns > 1; clean prompts only,
       robustness prompts not counted): every completion is an episode */
    int64_t episodes;           /* episodes run */
    int64_t turns_sum;          /* their model turns */
    int64_t tool_calls;         /* turns whose action held a call the environment recognized */
    int64_t tool_errors;        /* of those, calls that failed */
    int64_t tool_episodes;      /* episodes with at least one tool call */
    int64_t episode_tokens_sum; /* completion ids: model and observation tokens (the reset
                                   observation, part of the prompt, not counted) */
    int64_t model_tokens_sum;   /* of those, the model's (loss mask 1) */
    double env_return_sum;      /* the environment's turn rewards, summed */
    /* efficiency */
    double generated_tokens; /* tokens generated, robustness prompts included */
    double compute_s;        /* seconds the shards computed, summed */
    double peak_rss_mb;      /* the largest resident set of any evaluating process (a max) */
} bt_evaluator_sums;

/*  Empty sums for k samples per example. */
void bt_evaluator_sums_init(bt_evaluator_sums *s, int64_t samples);

/* ---- as wire messages ----------------------------------------------------------------------- */
/*  Fields version, group_size, n_prompts, temperature; tensors indices (P) I64, prompt_tokens
    (n, Pmax) I32, prompt_lens (n) I64, tokens (n, L) I32, logprobs (n, L) F32, lengths (n) I64,
    rewards (n) F64, correct (n) U8, finished (n) U8; and only where they differ from the
    single-turn default (so a single-turn batch's message is what it was before episodes):
    loss_mask (n, L) U8 when a token within a length is 0, turn (n, L) U8 and n_turns (n) I64
    when an episode has more than one turn, turn_rewards (n, BT_MAX_TURNS) F64 when
    has_turn_rewards.  A message without them reads as the default. */
bt_status bt_batch_to_msg(const bt_rollout_batch *b, bt_msg_t *msg);
/*  Fills *out (releasing what it held); BT_EFORMAT naming the first inconsistency. */
bt_status bt_batch_from_msg(const bt_msg_t *msg, bt_rollout_batch *out);
/*  Rows of parts[0..n) one after the other (same group_size and temperature); strides are the
    largest of the parts; version is the oldest.  When some part holds turn rewards the result
    does, a row of a part without them getting its reward as its last turn's (one turn's return is
    its reward: the same advantages).  Fills *out, releasing what it held. */
bt_status bt_batch_concat(const bt_rollout_batch *parts, int n, bt_rollout_batch *out);

/*  The groups g of in with keep[g] true, in order (DAPO dynamic sampling drops the groups whose
    rewards are all equal).  Fills *out, releasing what it held. */
bt_status bt_batch_keep_groups(const bt_rollout_batch *in, const bool *keep, bt_rollout_batch *out);

/*  Field version; one F32 or BF16 tensor per parameter under its name (from_msg refuses other
    dtypes).  Zero-copy: the frames sent are w's arrays, whose ownership passes to the message
    (w->data[i] become NULL, even on error). */
bt_status bt_weights_to_msg(bt_weights *w, bt_msg_t *msg);
bt_status bt_weights_from_msg(const bt_msg_t *msg, bt_weights *out);

/*  Fields version, stats.loss, stats.pg_loss, stats.kl, stats.clip_frac, stats.entropy,
    stats.grad_norm, stats.tokens, and stats.finite: false when one of them was NaN or infinite
    (that one is left out and reads back as NaN), so a diverged step still reports. */
bt_status bt_trainer_stats_to_msg(const bt_trainer_stats *s, bt_msg_t *msg);
bt_status bt_trainer_stats_from_msg(const bt_msg_t *msg, bt_trainer_stats *out);

/*  Fields examples, samples, completions, correct, reward_sum, length_sum, truncated; tensor
    correct_hist (samples + 1) I64; and only when episodes > 0 (so the sums of a single-turn
    evaluation make the message they made before episodes, and a message without them reads as
    no episodes): tensor episodes (7) I64 = episodes, turns_sum, tool_calls, tool_errors,
    tool_episodes, episode_tokens_sum, model_tokens_sum, and field env_return_sum. */
bt_status bt_sums_to_msg(const bt_evaluator_sums *s, bt_msg_t *msg);
bt_status bt_sums_from_msg(const bt_msg_t *msg, bt_evaluator_sums *out);

#ifdef __cplusplus
}
#endif
#endif
