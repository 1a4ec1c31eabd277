/*  grpo.c — group advantages, the GRPO loss and its statistics, the SFT loss, LR schedules. */
#include "baton/grpo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- group advantages ----------------------------------------------------------------------- */

bool bt_grpo_group_has_zero_variance(const double *rewards, int64_t group_size) {
    for (int64_t i = 1; i < group_size; i++)
        if (rewards[i] != rewards[0])
            return false;
    return true;
}

/* GRPO (Shao et al. 2024): A = (r - mean) / (std + 1e-6), std unbiased as torch.std in TRL/verl;
   Dr. GRPO (Liu et al. 2025): A = r - mean. */
static void s_group_advantages(const double *r, int64_t n, bt_adv_norm norm, double *adv) {
    if (bt_grpo_group_has_zero_variance(r, n)) {
        memset(adv, 0, (size_t)n * sizeof *adv);
        return;
    }
    double mean = 0.0, ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        mean += r[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += (r[i] - mean) * (r[i] - mean);
    double scale = norm == BT_ADV_NORM_STD ? 1.0 / (sqrt(ss / (double)(n - 1)) + 1e-6) : 1.0;
    for (int64_t i = 0; i < n; i++)
        adv[i] = (r[i] - mean) * scale;
}

bt_status bt_grpo_advantages(const double *rewards, int64_t n_groups, int64_t group_size,
                             bt_adv_norm norm, double *adv_out) {
    if (n_groups < 0 || group_size < 1)
        return bt_fail(BT_EINVAL,
                       "grpo advantages: need n_groups >= 0 and group_size >= 1, got "
                       "%lld and %lld",
                       (long long)n_groups, (long long)group_size);
    if (norm != BT_ADV_NORM_STD && norm != BT_ADV_NORM_NONE)
        return bt_fail(BT_EINVAL, "grpo advantages: unknown normalisation %d", (int)norm);
    if (n_groups > 0 && (!rewards || !adv_out))
        return bt_fail(BT_EINVAL, "grpo advantages: NULL rewards or output");
    for (int64_t i = 0; i < n_groups * group_size; i++)
        if (!isfinite(rewards[i]))
            return bt_fail(BT_EINVAL, "grpo advantages: reward %lld is %g", (long long)i,
                           rewards[i]);
    for (int64_t g = 0; g < n_groups; g++)
        s_group_advantages(rewards + g * group_size, group_size, norm, adv_out + g * group_size);
    return BT_OK;
}

bt_status bt_grpo_turn_advantages(const double *turn_rewards, const int64_t *n_turns,
                                  int64_t n_groups, int64_t group_size, int64_t max_turns,
                                  double gamma, bt_adv_norm norm, double *adv_out) {
    if (n_groups < 0 || group_size < 1 || max_turns < 1)
        return bt_fail(BT_EINVAL,
                       "grpo turn advantages: need n_groups >= 0, group_size >= 1 and max_turns "
                       ">= 1, got %lld, %lld and %lld",
                       (long long)n_groups, (long long)group_size, (long long)max_turns);
    if (!(gamma >= 0.0 && gamma <= 1.0))
        return bt_fail(BT_EINVAL, "grpo.turn_gamma: expected a number in [0, 1], got %g", gamma);
    if (norm != BT_ADV_NORM_STD && norm != BT_ADV_NORM_NONE)
        return bt_fail(BT_EINVAL, "grpo turn advantages: unknown normalisation %d", (int)norm);
    if (n_groups > 0 && (!turn_rewards || !n_turns || !adv_out))
        return bt_fail(BT_EINVAL, "grpo turn advantages: NULL rewards, turns or output");
    int64_t n = n_groups * group_size;
    for (int64_t i = 0; i < n; i++) {
        if (n_turns[i] < 1 || n_turns[i] > max_turns)
            return bt_fail(BT_EINVAL,
                           "grpo turn advantages: episode %lld: n_turns %lld outside [1, %lld]",
                           (long long)i, (long long)n_turns[i], (long long)max_turns);
        for (int64_t t = 0; t < n_turns[i]; t++)
            if (!isfinite(turn_rewards[i * max_turns + t]))
                return bt_fail(BT_EINVAL, "grpo turn advantages: episode %lld turn %lld: reward %g",
                               (long long)i, (long long)t, turn_rewards[i * max_turns + t]);
    }
    double *g = malloc(sizeof *g * (size_t)(group_size * max_turns) + 1); /* a group's returns */
    if (!g)
        return bt_fail(BT_ENOMEM, "grpo turn advantages: out of memory");
    for (int64_t k = 0; k < n_groups; k++) {
        int64_t m = 0; /* returns of the group so far, packed */
        for (int64_t i = k * group_size; i < (k + 1) * group_size; i++) {
            double ret = 0.0; /* discounted return-to-go (Williams 1992): G_t = r_t + gamma G_t+1 */
            for (int64_t t = n_turns[i] - 1; t >= 0; t--) {
                ret = turn_rewards[i * max_turns + t] + gamma * ret;
                g[m + t] = ret;
            }
            m += n_turns[i];
        }
        s_group_advantages(g, m, norm, g); /* as the rewards of one group of m (GRPO) */
        m = 0;
        for (int64_t i = k * group_size; i < (k + 1) * group_size; i++) {
            for (int64_t t = 0; t < max_turns; t++)
                adv_out[i * max_turns + t] = t < n_turns[i] ? g[m + t] : 0.0;
            m += n_turns[i];
        }
    }
    free(g);
    return BT_OK;
}

/* ---- configuration -------------------------------------------------------------------------- */

bt_status bt_grpo_config_validate(const bt_grpo_config *cfg) {
    if (!(cfg->clip_low >= 0.0 && cfg->clip_low < 1.0))
        return bt_fail(BT_EINVAL, "grpo.clip_low: expected a number in [0, 1), got %g",
                       cfg->clip_low);
    if (!(cfg->clip_high >= 0.0 && isfinite(cfg->clip_high)))
        return bt_fail(BT_EINVAL, "grpo.clip_high: expected a number >= 0, got %g", cfg->clip_high);
    if (!(cfg->kl_coef >= 0.0 && isfinite(cfg->kl_coef)))
        return bt_fail(BT_EINVAL, "grpo.kl_coef: expected a number >= 0, got %g", cfg->kl_coef);
    if (!isfinite(cfg->entropy_coef))
        return bt_fail(BT_EINVAL, "grpo.entropy_coef: expected a finite number, got %g",
                       cfg->entropy_coef);
    if (cfg->kl_estimator != BT_KL_K1 && cfg->kl_estimator != BT_KL_K3)
        return bt_fail(BT_EINVAL, "grpo.kl_estimator: unknown value %d", (int)cfg->kl_estimator);
    if (cfg->loss_agg != BT_LOSS_AGG_TOKEN_MEAN && cfg->loss_agg != BT_LOSS_AGG_SEQ_MEAN &&
        cfg->loss_agg != BT_LOSS_AGG_TOKEN_SUM_NORM)
        return bt_fail(BT_EINVAL, "grpo.loss_agg: unknown value %d", (int)cfg->loss_agg);
    if (cfg->loss_agg == BT_LOSS_AGG_TOKEN_SUM_NORM && cfg->max_tokens < 1)
        return bt_fail(BT_EINVAL, "grpo.max_tokens: expected an integer >= 1, got %lld",
                       (long long)cfg->max_tokens);
    if (cfg->adv_norm != BT_ADV_NORM_STD && cfg->adv_norm != BT_ADV_NORM_NONE)
        return bt_fail(BT_EINVAL, "grpo.adv_norm: unknown value %d", (int)cfg->adv_norm);
    if (!(cfg->tis_cap >= 0.0 && isfinite(cfg->tis_cap)))
        return bt_fail(BT_EINVAL, "grpo.tis_cap: expected a number >= 0, got %g", cfg->tis_cap);
    if (cfg->tis_cap > 0 && cfg->decoupled)
        return bt_fail(BT_EINVAL,
                       "grpo.tis_cap: truncated importance sampling and the decoupled objective "
                       "(grpo.async_objective) both weight by the behaviour importance: set one");
    if (!(cfg->turn_gamma >= 0.0 && cfg->turn_gamma <= 1.0))
        return bt_fail(BT_EINVAL, "grpo.turn_gamma: expected a number in [0, 1], got %g",
                       cfg->turn_gamma);
    if (!(cfg->behav_weight_cap >= 0.0))
        return bt_fail(BT_EINVAL, "grpo.behav_weight_cap: expected a number >= 0, got %g",
                       cfg->behav_weight_cap);
    return BT_OK;
}

/* ---- loss ----------------------------------------------------------------------------------- */

void bt_grpo_stats_add(bt_grpo_stats *total, const bt_grpo_stats *part) {
    total->tokens += part->tokens;
    total->pg_loss_sum += part->pg_loss_sum;
    total->kl_sum += part->kl_sum;
    total->clip_low_tokens += part->clip_low_tokens;
    total->clip_high_tokens += part->clip_high_tokens;
    total->ratio_sum += part->ratio_sum;
    total->ratio_sumsq += part->ratio_sumsq;
    total->ratio_max = fmax(total->ratio_max, part->ratio_max);
    total->ratio_min = total->ratio_min == 0  ? part->ratio_min
                       : part->ratio_min == 0 ? total->ratio_min
                                              : fmin(total->ratio_min, part->ratio_min);
    total->mismatch_sum += part->mismatch_sum;
    total->entropy_sum += part->entropy_sum;
}

double bt_grpo_normaliser(const bt_grpo_config *cfg, const int64_t *completion_lengths,
                          int64_t n_seqs) {
    double tokens = 0.0;
    switch (cfg->loss_agg) {
    case BT_LOSS_AGG_TOKEN_MEAN:
        for (int64_t i = 0; i < n_seqs; i++)
            tokens += (double)completion_lengths[i];
        return tokens;
    case BT_LOSS_AGG_SEQ_MEAN: return n_seqs > 0 ? (double)n_seqs : 0.0;
    case BT_LOSS_AGG_TOKEN_SUM_NORM:
        return n_seqs > 0 ? (double)n_seqs * (double)cfg->max_tokens : 0.0;
    }
    return 0.0;
}

static bool s_has_shape(bt_tensor *t, int64_t b, int64_t n) {
    return bt_ndim(t) == 2 && bt_dim(t, 0) == b && bt_dim(t, 1) == n;
}

static bt_status s_check_loss_inputs(const bt_grpo_config *cfg, bt_tensor *logp,
                                     bt_tensor *const *same_shape, const char *const *names,
                                     int n_same, bt_tensor *adv, double normaliser) {
    bt_status st = bt_grpo_config_validate(cfg);
    if (st != BT_OK)
        return st;
    if (!(normaliser > 0.0 && isfinite(normaliser)))
        return bt_fail(BT_EINVAL, "grpo loss: normaliser must be > 0, got %g (empty batch?)",
                       normaliser);
    if (bt_ndim(logp) != 2 || bt_dim(logp, 0) < 1 || bt_dim(logp, 1) < 1)
        return bt_fail(BT_EINVAL, "grpo loss: logp must be a non-empty (B, T) tensor");
    int64_t b = bt_dim(logp, 0), n = bt_dim(logp, 1);
    for (int i = 0; i < n_same; i++)
        if (same_shape[i] && !s_has_shape(same_shape[i], b, n))
            return bt_fail(BT_EINVAL, "grpo loss: %s must have logp's shape (%lld, %lld)", names[i],
                           (long long)b, (long long)n);
    if (!(bt_ndim(adv) == 1 && bt_dim(adv, 0) == b) && !s_has_shape(adv, b, n))
        return bt_fail(BT_EINVAL, "grpo loss: adv must be (%lld) or (%lld, %lld)", (long long)b,
                       (long long)b, (long long)n);
    return BT_OK;
}

/* GRPO clipped surrogate (Shao et al. 2024) with DAPO clip-higher (Yu et al. 2025):
   -min(rho A, clamp(rho, 1 - eps_low, 1 + eps_high) A).  ratio (B, T), a (B, 1). */
static bt_tensor *s_clipped_pg(bt_ctx *ctx, const bt_grpo_config *cfg, bt_tensor *ratio,
                               bt_tensor *a) {
    bt_tensor *clamped = bt_clamp(ctx, ratio, 1.0 - cfg->clip_low, 1.0 + cfg->clip_high);
    return bt_neg(ctx, bt_minimum(ctx, bt_mul(ctx, ratio, a), bt_mul(ctx, clamped, a)));
}

/* KL estimators (Schulman 2020), r = p_ref / p: k1 = -log r, k3 = r - log r - 1.  (B, T) */
static bt_tensor *s_kl(bt_ctx *ctx, bt_kl_estimator est, bt_tensor *logp, bt_tensor *ref_logp,
                       bt_tensor *pad) {
    bt_tensor *log_r = bt_masked_fill(ctx, bt_sub(ctx, ref_logp, logp), pad, 0.0); /* (B, T) */
    if (est == BT_KL_K1)
        return bt_neg(ctx, log_r);
    return bt_add_scalar(ctx, bt_sub(ctx, bt_exp(ctx, log_r), log_r), -1.0);
}

/* (B, T): the mask, or for SEQ_MEAN the mask / len_i, so that each sequence weighs the same;
   len_i from seq_len (B, T), else the row's mask sum (B, 1). */
static bt_tensor *s_token_weights(bt_ctx *ctx, bt_loss_agg agg, bt_tensor *mask,
                                  bt_tensor *seq_len) {
    if (agg != BT_LOSS_AGG_SEQ_MEAN)
        return mask;
    bt_tensor *len = bt_clamp(ctx, seq_len ? seq_len : bt_sum(ctx, mask, 1, true), 1.0, INFINITY);
    return bt_div(ctx, mask, len);
}

static bt_tensor *s_as_1(bt_ctx *ctx, bt_tensor *t) {
    return bt_reshape(ctx, t, 1, (const int64_t[]){1});
}

/* sum(t * m) in float64, shape (1).  m (B, T) float64. */
static bt_tensor *s_masked_sum(bt_ctx *ctx, bt_tensor *t, bt_tensor *m) {
    return s_as_1(ctx, bt_sum_all(ctx, bt_mul(ctx, bt_to_dtype(ctx, t, BT_F64), m)));
}

/* Adds the micro-batch's sums to *stats with one host copy: clip counts from clip_ratio (the
   ratio the clip saw), ratio sums and the mismatch from log_ratio (log pi_theta / pi_behav, 0 on
   padding) in float64, where rho - 1 - log rho of a ratio near 1 keeps its digits.  kl and
   entropy may be NULL. */
static bt_status s_add_stats(bt_ctx *ctx, const bt_grpo_config *cfg, bt_tensor *clip_ratio,
                             bt_tensor *log_ratio, bt_tensor *a, bt_tensor *pg, bt_tensor *kl,
                             bt_tensor *entropy, bt_tensor *mask, bt_grpo_stats *stats) {
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *m = bt_to_dtype(ctx, mask, BT_F64); /* (B, T) */
    bt_tensor *zero = bt_zeros(ctx, BT_F64, bt_device_of(mask), 1, (const int64_t[]){1});
    bt_tensor *lr = bt_to_dtype(ctx, bt_detach(ctx, log_ratio), BT_F64);
    bt_tensor *ratio = bt_exp(ctx, lr); /* (B, T) float64 */
    bt_tensor *k3 = bt_sub(ctx, bt_add_scalar(ctx, ratio, -1.0), lr);
    bt_tensor *pad = bt_eq_scalar(ctx, mask, 0.0);
    bt_tensor *neg = bt_reshape(ctx, bt_masked_fill(ctx, bt_neg(ctx, ratio), pad, -INFINITY), 1,
                                (const int64_t[]){-1}); /* -rho, -inf on padding */
    bt_tensor *low =
        bt_logical_and(ctx, bt_lt_scalar(ctx, a, 0.0),
                       bt_lt_scalar(ctx, clip_ratio, 1.0 - cfg->clip_low)); /* (B, T) */
    bt_tensor *high = bt_logical_and(ctx, bt_gt_scalar(ctx, a, 0.0),
                                     bt_gt_scalar(ctx, clip_ratio, 1.0 + cfg->clip_high));
    bt_tensor *ratio_m = bt_mul(ctx, ratio, m);                           /* (B, T) */
    bt_tensor *flat = bt_reshape(ctx, ratio_m, 1, (const int64_t[]){-1}); /* (B * T) */
    bt_tensor *parts[11] = {s_as_1(ctx, bt_sum_all(ctx, m)),
                            s_masked_sum(ctx, pg, m),
                            kl ? s_masked_sum(ctx, kl, m) : zero,
                            s_masked_sum(ctx, low, m),
                            s_masked_sum(ctx, high, m),
                            s_as_1(ctx, bt_sum_all(ctx, ratio_m)),
                            s_as_1(ctx, bt_max(ctx, flat, 0, false)),
                            entropy ? s_masked_sum(ctx, entropy, m) : zero,
                            s_masked_sum(ctx, bt_mul(ctx, ratio, ratio), m),
                            s_as_1(ctx, bt_max(ctx, neg, 0, false)),
                            s_masked_sum(ctx, k3, m)};
    double v[11];
    bt_status st = bt_to_host(bt_cat(ctx, parts, 11, 0), v, sizeof v);
    bt_set_grad_enabled(grad);
    if (st != BT_OK)
        return st;
    bt_grpo_stats part = {.tokens = v[0],
                          .pg_loss_sum = v[1],
                          .kl_sum = v[2],
                          .clip_low_tokens = v[3],
                          .clip_high_tokens = v[4],
                          .ratio_sum = v[5],
                          .ratio_sumsq = v[8],
                          .ratio_max = v[6],
                          .ratio_min = v[0] > 0 ? -v[9] : 0,
                          .mismatch_sum = v[10],
                          .entropy_sum = v[7]};
    bt_grpo_stats_add(stats, &part);
    return BT_OK;
}

bt_tensor *bt_grpo_loss(bt_ctx *ctx, const bt_grpo_config *cfg, bt_tensor *logp,
                        bt_tensor *old_logp, bt_tensor *ref_logp, bt_tensor *adv, bt_tensor *mask,
                        bt_tensor *seq_len, bt_tensor *entropy, double normaliser,
                        bt_grpo_stats *stats) {
    BT_ASSERT(cfg);
    if (!logp || !old_logp || !adv || !mask)
        return NULL;
    bt_tensor *same[] = {old_logp, mask, ref_logp, entropy, seq_len};
    const char *names[] = {"old_logp", "mask", "ref_logp", "entropy", "seq_len"};
    if (s_check_loss_inputs(cfg, logp, same, names, 5, adv, normaliser) != BT_OK)
        return NULL;
    if (cfg->kl_coef != 0.0 && !ref_logp) {
        bt_fail(BT_EINVAL, "grpo loss: ref_logp is NULL but kl_coef is %g", cfg->kl_coef);
        return NULL;
    }
    /* Padding may hold any value: zero the log-ratios there so that exp() stays finite. */
    bt_tensor *pad = bt_eq_scalar(ctx, mask, 0.0);                      /* (B, T) */
    bt_tensor *a = bt_ndim(adv) == 1 ? bt_unsqueeze(ctx, adv, 1) : adv; /* (B, 1) or (B, T) */
    bt_tensor *log_ratio = bt_masked_fill(ctx, bt_sub(ctx, logp, old_logp), pad, 0.0);
    bt_tensor *ratio = bt_exp(ctx, log_ratio);
    bt_tensor *clip_ratio = ratio, *pg; /* (B, T) */
    if (cfg->decoupled || cfg->tis_cap > 0) {
        /* AReaL: clip against pi_prox, weight by pi_prox/pi_behav (dropped above the cap); TIS:
           the same weight truncated at its cap */
        bt_tensor *prox = bt_detach(ctx, logp);
        bt_tensor *w = bt_exp(ctx, bt_masked_fill(ctx, bt_sub(ctx, prox, old_logp), pad, 0.0));
        if (cfg->tis_cap > 0)
            w = bt_clamp(ctx, w, 0.0, cfg->tis_cap);
        else if (cfg->behav_weight_cap > 0)
            w = bt_masked_fill(ctx, w, bt_gt_scalar(ctx, w, cfg->behav_weight_cap), 0.0);
        clip_ratio = bt_exp(ctx, bt_masked_fill(ctx, bt_sub(ctx, logp, prox), pad, 0.0));
        pg = bt_mul(ctx, s_clipped_pg(ctx, cfg, clip_ratio, a), w);
    } else {
        pg = s_clipped_pg(ctx, cfg, ratio, a);
    }
    bt_tensor *per_token = pg; /* (B, T) */
    bt_tensor *kl = ref_logp ? s_kl(ctx, cfg->kl_estimator, logp, ref_logp, pad) : NULL;
    bt_tensor *ent = entropy ? bt_masked_fill(ctx, entropy, pad, 0.0) : NULL; /* (B, T) */
    if (cfg->kl_coef != 0.0)
        per_token = bt_add(ctx, per_token, bt_mul_scalar(ctx, kl, cfg->kl_coef));
    if (ent && cfg->entropy_coef != 0.0)
        per_token = bt_sub(ctx, per_token, bt_mul_scalar(ctx, ent, cfg->entropy_coef));
    bt_tensor *weighted =
        bt_mul(ctx, per_token, s_token_weights(ctx, cfg->loss_agg, mask, seq_len));
    bt_tensor *sum = bt_sum_all(ctx, bt_to_dtype(ctx, weighted, BT_F64));
    bt_tensor *loss = bt_mul_scalar(ctx, sum, 1.0 / normaliser);
    if (loss && stats &&
        s_add_stats(ctx, cfg, clip_ratio, log_ratio, a, pg, kl, ent, mask, stats) != BT_OK)
        return NULL;
    return loss;
}

bt_tensor *bt_sft_loss(bt_ctx *ctx, bt_tensor *logp, bt_tensor *mask, double normaliser) {
    if (!logp || !mask)
        return NULL;
    if (!(normaliser > 0.0 && isfinite(normaliser))) {
        bt_fail(BT_EINVAL, "sft loss: normaliser must be > 0, got %g", normaliser);
        return NULL;
    }
    if (bt_ndim(logp) != 2 || !s_has_shape(mask, bt_dim(logp, 0), bt_dim(logp, 1))) {
        bt_fail(BT_EINVAL, "sft loss: logp and mask must be (B, T) tensors of one shape");
        return NULL;
    }
    bt_tensor *pad = bt_eq_scalar(ctx, mask, 0.0);                          /* (B, T) */
    bt_tensor *ll = bt_mul(ctx, bt_masked_fill(ctx, logp, pad, 0.0), mask); /* (B, T) */
    return bt_mul_scalar(ctx, bt_sum_all(ctx, bt_to_dtype(ctx, ll, BT_F64)), -1.0 / normaliser);
}

/* ---- learning-rate schedules ---------------------------------------------------------------- */

static const double s_pi = 3.14159265358979323846;
static const char *const s_lr_names[] = {"constant", "warmup", "cosine", "wsd"};
enum { S_LR_KINDS = sizeof s_lr_names / sizeof s_lr_names[0] };

bt_status bt_lr_kind_parse(const char *name, bt_lr_kind *out) {
    for (int i = 0; name && i < S_LR_KINDS; i++) {
        if (strcmp(name, s_lr_names[i]) == 0) {
            *out = (bt_lr_kind)i;
            return BT_OK;
        }
    }
    return bt_fail(
        BT_EINVAL,
        "unknown learning-rate schedule \"%s\": expected constant, warmup, cosine or wsd",
        name ? name : "(null)");
}

const char *bt_lr_kind_name(bt_lr_kind kind) {
    return (unsigned)kind < S_LR_KINDS ? s_lr_names[kind] : "unknown";
}

bt_status bt_lr_schedule_validate(const bt_lr_schedule *s) {
    if ((unsigned)s->kind >= S_LR_KINDS)
        return bt_fail(BT_EINVAL, "lr schedule: unknown kind %d", (int)s->kind);
    if (!(s->lr >= 0.0 && isfinite(s->lr)) || !(s->min_lr >= 0.0 && s->min_lr <= s->lr))
        return bt_fail(BT_EINVAL, "lr schedule: need 0 <= min_lr <= lr, got min_lr %g, lr %g",
                       s->min_lr, s->lr);
    if (s->warmup_steps < 0)
        return bt_fail(BT_EINVAL, "lr schedule: warmup_steps must be >= 0, got %lld",
                       (long long)s->warmup_steps);
    if ((s->kind == BT_LR_COSINE || s->kind == BT_LR_WSD) && s->total_steps <= s->warmup_steps)
        return bt_fail(BT_EINVAL, "lr schedule: total_steps (%lld) must exceed warmup_steps (%lld)",
                       (long long)s->total_steps, (long long)s->warmup_steps);
    if (s->kind == BT_LR_WSD &&
        (s->decay_steps < 1 || s->decay_steps > s->total_steps - s->warmup_steps))
        return bt_fail(BT_EINVAL, "lr schedule: wsd decay_steps must be in [1, %lld], got %lld",
                       (long long)(s->total_steps - s->warmup_steps), (long long)s->decay_steps);
    return BT_OK;
}

/* Fraction of [start, start + len) covered at step, within [0, 1]. */
static double s_progress(int64_t step, int64_t start, int64_t len) {
    if (len <= 0)
        return 1.0;
    return fmin(1.0, fmax(0.0, (double)(step - start) / (double)len));
}

double bt_lr_at(const bt_lr_schedule *s, int64_t step) {
    if (s->kind == BT_LR_CONSTANT)
        return s->lr;
    if (step < s->warmup_steps)
        return s->lr * (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == BT_LR_COSINE) {
        /* cosine annealing (Loshchilov & Hutter 2017): min + (lr - min) (1 + cos(pi p)) / 2 */
        double p = s_progress(step, s->warmup_steps, s->total_steps - s->warmup_steps);
        return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(s_pi * p));
    }
    if (s->kind == BT_LR_WSD) {
        /* warmup-stable-decay (Hu et al. 2024, MiniCPM), linear decay over the last steps */
        double p = s_progress(step, s->total_steps - s->decay_steps, s->decay_steps);
        return s->lr + (s->min_lr - s->lr) * p;
    }
    return s->lr;
}
