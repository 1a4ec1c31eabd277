/*  grpo.h — the GRPO math: group advantages, the clipped-ratio loss with KL and entropy terms,
    the supervised warm-start loss, and learning-rate schedules; no sockets.
    Threading: pure functions; tensors follow tensor.h (one thread per context).  Lifetime: results
    are tensors in the caller's context or plain values; nothing to create or destroy. */
#ifndef BATON_GRPO_H
#define BATON_GRPO_H

#include "baton/status.h"
#include "baton/tensor.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- group advantages ----------------------------------------------------------------------- */
/*  Values appear in configs and logs: append only. */
typedef enum bt_adv_norm {
    BT_ADV_NORM_STD = 0, /* GRPO (Shao et al. 2024): (r - mean) / (std + 1e-6) */
    BT_ADV_NORM_NONE = 1 /* Dr. GRPO (Liu et al. 2025): r - mean */
} bt_adv_norm;

/*  rewards and adv_out hold n_groups groups of group_size consecutive rewards, in float64.
    A_i = r_i - mean(group); with BT_ADV_NORM_STD divided by (std + 1e-6), where std is the
    unbiased (n - 1) sample standard deviation of the group, as TRL and verl compute it
    (torch.std).  A group of one reward, or of equal rewards, gets zero advantages, never NaN.
    adv_out may alias rewards.  Returns BT_EINVAL for n_groups < 0, group_size < 1 or NULL arrays
    (NULL is allowed when n_groups == 0). */
bt_status bt_grpo_advantages(const double *rewards, int64_t n_groups, int64_t group_size,
                             bt_adv_norm norm, double *adv_out);
/*  Per-turn advantages of multi-turn episodes (grpo.turn_gamma).  Episode i of a group took
    n_turns[i] model turns with rewards turn_rewards[i * max_turns + t]; each turn's discounted
    return-to-go (REINFORCE's return, Williams 1992) is
      G_it = r_it + gamma * G_i,t+1,   G_i,n_i = 0,
    and the group's returns, all the turns of all its episodes together, are normalised as
    bt_grpo_advantages normalises rewards: A_it = G_it - mean, divided by (std + 1e-6) with
    BT_ADV_NORM_STD (std unbiased over the group's sum of n_i returns; a group whose returns are
    all equal gets zeros).  One turn per episode gives bt_grpo_advantages of the rewards, whatever
    gamma.  adv_out (n_groups * group_size, max_turns) receives A_it, 0 past n_turns[i].
    BT_EINVAL for sizes out of range, gamma outside [0, 1], n_turns outside [1, max_turns] or a
    reward that is not finite (named). */
bt_status bt_grpo_turn_advantages(const double *turn_rewards, const int64_t *n_turns,
                                  int64_t n_groups, int64_t group_size, int64_t max_turns,
                                  double gamma, bt_adv_norm norm, double *adv_out);
/*  True when all group_size rewards are equal, so every advantage is zero: the groups DAPO's
    dynamic sampling drops (Yu et al. 2025). */
bool bt_grpo_group_has_zero_variance(const double *rewards, int64_t group_size);

/* ---- loss configuration --------------------------------------------------------------------- */
typedef enum bt_kl_estimator {
    BT_KL_K1 = 0, /* -log r, r = p_ref / p (Schulman 2020) */
    BT_KL_K3 = 1  /* r - log r - 1: non-negative, low variance (Schulman 2020) */
} bt_kl_estimator;

/*  How token losses become one number.  Every mode divides by a constant of the whole batch
    (bt_grpo_normaliser), so the sum of micro-batch losses equals the full-batch loss. */
typedef enum bt_loss_agg {
    BT_LOSS_AGG_TOKEN_MEAN = 0,    /* sum over tokens / total tokens (DAPO) */
    BT_LOSS_AGG_SEQ_MEAN = 1,      /* mean over sequences of each sequence's token mean (GRPO) */
    BT_LOSS_AGG_TOKEN_SUM_NORM = 2 /* sum over tokens / (n_seqs * max_tokens) (Dr. GRPO) */
} bt_loss_agg;

/*  The grpo.* keys of the loss (bt_config_grpo fills it from a config; the defaults are written
    once, in config/config.c's key table).  No library default: a caller states every field. */
typedef struct bt_grpo_config {
    double clip_low;  /* eps_low: ratio floor 1 - clip_low when A < 0 */
    double clip_high; /* eps_high: ratio cap 1 + clip_high when A > 0 (DAPO) */
    double kl_coef;   /* beta, weight of the KL to the reference policy */
    bt_kl_estimator kl_estimator;
    double entropy_coef; /* weight of the entropy bonus */
    bt_loss_agg loss_agg;
    int64_t max_tokens; /* Dr. GRPO's constant per-sequence normaliser (token_sum_norm: >= 1) */
    bt_adv_norm adv_norm;
    /* AReaL's decoupled objective (Fu et al. 2025) for batches sampled by older policies: the
       clipped ratio is taken against the proximal policy and the surrogate is weighted by the
       behaviour importance w = pi_prox / pi_behav.  baton makes one optimizer update per batch,
       so the proximal policy is the policy being updated: pi_prox = stop_grad(pi_theta). */
    bool decoupled;
    double behav_weight_cap; /* decoupled: tokens with w > cap leave the loss; 0: no cap */
    /* Truncated importance sampling (TIS, as verl and TRL apply it) for a sampler whose log-probs
       differ from the trainer's (another engine, bf16, a GPU kernel): the surrogate of each token
       is weighted by w = min(pi_theta / pi_behav, tis_cap) in value, with the ratio clipped
       against stop_grad(pi_theta), so w = 1 gives the standard loss and its gradients.  0: off.
       Not with decoupled (both reweight by the behaviour importance). */
    double tis_cap;
    /* Per-turn advantages (bt_grpo_turn_advantages): the discount of later turns' rewards in a
       turn's return, in [0, 1]; read by the advantage computation only, never by the loss. */
    double turn_gamma;
} bt_grpo_config;

/*  BT_EINVAL with a message naming the field when a value is out of range. */
bt_status bt_grpo_config_validate(const bt_grpo_config *cfg);

/* ---- loss ----------------------------------------------------------------------------------- */
/*  Sums over the tokens of the micro-batches seen so far.  A zeroed struct is empty;
    bt_grpo_loss adds into it. */
typedef struct bt_grpo_stats {
    double tokens;           /* completion tokens (sum of the mask) */
    double pg_loss_sum;      /* clipped surrogate loss, summed over tokens */
    double kl_sum;           /* KL estimate of cfg->kl_estimator; 0 without ref_logp */
    double clip_low_tokens;  /* A < 0 and rho < 1 - clip_low: the clipped branch is active */
    double clip_high_tokens; /* A > 0 and rho > 1 + clip_high: the clipped branch is active */
    double ratio_sum;        /* rho, summed over tokens */
    double ratio_sumsq;      /* rho^2, summed over tokens */
    double ratio_max;        /* largest rho of any token (0 when there is none) */
    double ratio_min;        /* smallest rho of any token (0 when there is none) */
    double mismatch_sum;     /* rho - 1 - log rho (k3 of KL(pi_behav || pi_theta)), in float64 */
    double entropy_sum;      /* 0 without an entropy tensor */
} bt_grpo_stats;

/*  Adds part's sums into total; ratio_max takes the larger, ratio_min the smaller. */
void bt_grpo_stats_add(bt_grpo_stats *total, const bt_grpo_stats *part);

/*  The loss divisor of a whole batch (all micro-batches, all ranks): total tokens for TOKEN_MEAN,
    n_seqs for SEQ_MEAN, n_seqs * max_tokens for TOKEN_SUM_NORM.  0 for an empty batch.
    completion_lengths are the tokens that train (the mask's sum per sequence: a multi-turn
    episode's model tokens). */
double bt_grpo_normaliser(const bt_grpo_config *cfg, const int64_t *completion_lengths,
                          int64_t n_seqs);

/*  The GRPO loss of one micro-batch, a float64 scalar in ctx; summed over the micro-batches of a
    batch (with the batch's normaliser) it is the full-batch loss, and so are its gradients.
    Per token, with rho = exp(logp - old_logp) and A the sequence's advantage:
      loss_t = -min(rho A, clamp(rho, 1 - clip_low, 1 + clip_high) A)
               + kl_coef * kl_t - entropy_coef * entropy_t
    With cfg->decoupled, rho = exp(logp - stop_grad(logp)) (1 in value, gradient of logp) and the
    surrogate term is multiplied by w = exp(stop_grad(logp) - old_logp) [w <= behav_weight_cap]:
    on a batch the policy itself sampled (w = 1) it is the standard loss with its gradients.
    With cfg->tis_cap > 0 the same, with w = min(exp(stop_grad(logp) - old_logp), tis_cap).
    Statistics keep their meaning: ratio_* and mismatch_sum describe pi_theta / pi_behav, clip_*
    the clip.
    summed over tokens where mask is 1 (SEQ_MEAN weights sequence i's tokens by 1 / len_i, len_i
    its completion tokens), divided by normaliser.  A row is one sequence, or several back to back
    (packed rows): then adv and seq_len give each token its own sequence's values.
      logp     (B, T) current policy log-probs of the sampled tokens, with grad
      old_logp (B, T) behaviour log-probs (no grad)
      ref_logp (B, T) reference log-probs; may be NULL when kl_coef == 0 (then kl_sum stays 0)
      adv      (B) advantages per row, or (B, T) per token
      mask     (B, T) 1.0 for the completion tokens the policy sampled, 0.0 elsewhere (padding,
               prompts, an episode's environment tokens): there the inputs may be garbage, and
               nothing there reaches the loss, its gradients or the statistics
      seq_len  (B, T) len_i of each token's sequence, its mask sum (read by SEQ_MEAN only), or
               NULL: each row is one sequence and len_i is its mask sum
      entropy  (B, T) per-token policy entropy, with grad, or NULL
    stats, when not NULL, receives this micro-batch's sums (bt_grpo_stats_add).  Returns NULL on
    failure (bad shapes, normaliser <= 0, a NULL input): the message is in bt_last_error(). */
bt_tensor *bt_grpo_loss(bt_ctx *ctx, const bt_grpo_config *cfg, bt_tensor *logp,
                        bt_tensor *old_logp, bt_tensor *ref_logp, bt_tensor *adv, bt_tensor *mask,
                        bt_tensor *seq_len, bt_tensor *entropy, double normaliser,
                        bt_grpo_stats *stats);

/*  Supervised warm start: -sum(logp * mask) / normaliser, a float64 scalar in ctx.
    logp (B, T), mask (B, T).  NULL on failure. */
bt_tensor *bt_sft_loss(bt_ctx *ctx, bt_tensor *logp, bt_tensor *mask, double normaliser);

/*  How a batch's sequences become micro-batches (forward/backward passes).  Values appear in
    configs (grpo.batching): append only. */
typedef enum bt_batching {
    BT_BATCHING_PAD = 0,    /* "pad": micro_batch sequences in batch order, one per row, padded
                               to the micro-batch's longest */
    BT_BATCHING_BUCKET = 1, /* "bucket": the same after sorting by length, longest first, so each
                               micro-batch holds sequences of about one length */
    BT_BATCHING_PACK = 2    /* "pack": sequences back to back (first-fit decreasing) in rows as
                               wide as the longest sequence; a micro-batch holds micro_batch rows,
                               or pack_tokens / that width (at least 1) when pack_tokens > 0 */
} bt_batching;

/*  How data-parallel trainer ranks split the training state (workers.shard; ZeRO stages 1-3).
    Values appear in configs: append only. */
typedef enum bt_shard {
    BT_SHARD_NONE = 0,      /* "none": every rank holds everything (replicated) */
    BT_SHARD_OPTIMIZER = 1, /* "optimizer": AdamW's moments split across the ranks (ZeRO-1) */
    BT_SHARD_GRADIENTS = 2, /* "gradients": and the gradients, reduce-scattered (ZeRO-2) */
    BT_SHARD_PARAMETERS = 3 /* "parameters": and the weights, gathered per layer (ZeRO-3) */
} bt_shard;

/* ---- learning-rate schedules ---------------------------------------------------------------- */
/*  Values appear in configs and logs: append only. */
typedef enum bt_lr_kind {
    BT_LR_CONSTANT = 0,      /* "constant": lr at every step */
    BT_LR_WARMUP_LINEAR = 1, /* "warmup": linear warmup, then lr */
    BT_LR_COSINE = 2,        /* "cosine": warmup, then cosine decay to min_lr at total_steps */
    BT_LR_WSD = 3            /* "wsd": warmup, stable at lr, linear decay over the last
                                decay_steps to min_lr at total_steps */
} bt_lr_kind;

/*  Steps count optimizer updates from 0.  Warmup: step s < warmup_steps uses
    lr * (s + 1) / warmup_steps, so the first update is not wasted at zero. */
typedef struct bt_lr_schedule {
    bt_lr_kind kind;
    double lr;
    double min_lr;        /* COSINE and WSD end here */
    int64_t warmup_steps; /* 0: none */
    int64_t total_steps;  /* COSINE and WSD reach min_lr here and stay */
    int64_t decay_steps;  /* WSD only */
} bt_lr_schedule;

/*  BT_EINVAL with a message when steps or rates are inconsistent. */
bt_status bt_lr_schedule_validate(const bt_lr_schedule *s);
/*  The learning rate of update step (s must pass bt_lr_schedule_validate). */
double bt_lr_at(const bt_lr_schedule *s, int64_t step);
/*  "constant", "warmup", "cosine", "wsd".  BT_EINVAL, listing the valid names, for others. */
bt_status bt_lr_kind_parse(const char *name, bt_lr_kind *out);
/*  Static string; "unknown" out of range. */
const char *bt_lr_kind_name(bt_lr_kind kind);

#ifdef __cplusplus
}
#endif
#endif
