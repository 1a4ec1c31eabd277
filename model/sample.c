/*  sample.c — token sampling: filters and keyed inverse-CDF draws; generation is generate.c's. */
#include "baton/sample.h"

#include "baton/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void bt_sample_config_init(bt_sample_config *cfg) {
    *cfg = (bt_sample_config){
        .max_new_tokens = 64, .temperature = 1.0, .top_k = 0, .top_p = 1.0, .use_cache = true};
}

bt_status bt_sample_check_config(const bt_sample_config *cfg, bool have_draws) {
    if (!(cfg->temperature >= 0) || !isfinite(cfg->temperature))
        return bt_fail(BT_EINVAL, "sampling: temperature: expected a number >= 0, got %g",
                       cfg->temperature);
    if (cfg->top_k < 0)
        return bt_fail(BT_EINVAL, "sampling: top_k: expected an integer >= 0, got %lld",
                       (long long)cfg->top_k);
    if (!(cfg->top_p > 0 && cfg->top_p <= 1))
        return bt_fail(BT_EINVAL, "sampling: top_p: expected a number in (0, 1], got %g",
                       cfg->top_p);
    if (cfg->vocab_limit < 0)
        return bt_fail(BT_EINVAL, "sampling: vocab_limit: expected an integer >= 0, got %lld",
                       (long long)cfg->vocab_limit);
    if (cfg->temperature > 0 && !have_draws)
        return bt_fail(BT_EINVAL, "sampling: temperature %g needs a key or uniform per row",
                       cfg->temperature);
    return BT_OK;
}

/*  Logits (B, V) with those below the k-th largest of their row set to -inf. */
static bt_tensor *s_top_k(bt_ctx *ctx, bt_tensor *z, int64_t k) {
    bt_tensor *values = NULL, *indices = NULL;
    if (bt_topk(ctx, z, k, 1, &values, &indices) != BT_OK)
        return NULL;
    bt_tensor *kth = bt_slice(ctx, values, 1, k - 1, k, 1); /* (B, 1) */
    return bt_masked_fill(ctx, z, bt_lt_scalar(ctx, bt_sub(ctx, z, kth), 0), -INFINITY);
}

/*  Logits (B, V) outside the nucleus set to -inf: a token is kept when the tokens more likely than
    it hold less than p of the mass, which keeps the smallest set of mass >= p (Holtzman et al.
    2020) and always the most likely token. */
static bt_tensor *s_top_p(bt_ctx *ctx, bt_tensor *z, double p) {
    bt_tensor *sorted = NULL, *order = NULL; /* (B, V) descending, and where each came from */
    if (bt_sort(ctx, z, 1, true, &sorted, &order) != BT_OK)
        return NULL;
    bt_tensor *probs = bt_softmax(ctx, sorted, 1);
    bt_tensor *before = bt_sub(ctx, bt_cumsum(ctx, probs, 1), probs); /* mass of likelier tokens */
    const int64_t shape[] = {bt_dim(z, 0), bt_dim(z, 1)};
    bt_tensor *none = bt_zeros(ctx, BT_BOOL, bt_device_of(z), 2, shape);
    bt_tensor *keep = bt_scatter(ctx, none, 1, order, bt_lt_scalar(ctx, before, p)); /* (B, V) */
    return bt_masked_fill(ctx, z, bt_logical_not(ctx, keep), -INFINITY);
}

bt_tensor *bt_sample_filter(bt_ctx *ctx, bt_tensor *logits, int64_t top_k, double top_p) {
    if (!logits)
        return NULL;
    if (bt_ndim(logits) != 2) {
        bt_fail(BT_EINVAL, "bt_sample_filter: logits must be (B, V)");
        return NULL;
    }
    bt_tensor *z = logits; /* (B, V) */
    if (top_k > 0 && top_k < bt_dim(logits, 1))
        z = s_top_k(ctx, z, top_k);
    if (top_p < 1)
        z = s_top_p(ctx, z, top_p);
    return z;
}

/*  Inverse-CDF draws: for each row of probs (B, n) the first id whose cumulative probability
    (float64, id order) reaches u[b] times the row's total, (B, 1) BT_I64.  A zero-probability id
    is never drawn: u > 0 and the comparison is strict, so its cumulative sum equals its
    predecessor's and lies below the threshold. */
static bt_tensor *s_draw(bt_ctx *ctx, bt_tensor *probs, const double *u, bt_status *st) {
    if (!probs) {
        *st = BT_ETORCH;
        return NULL;
    }
    const int64_t B = bt_dim(probs, 0), n = bt_dim(probs, 1), ushape[] = {B, 1};
    bt_tensor *cdf = bt_cumsum(ctx, bt_to_dtype(ctx, probs, BT_F64), 1);       /* (B, n) */
    bt_tensor *total = bt_contiguous(ctx, bt_slice(ctx, cdf, 1, n - 1, n, 1)); /* (B, 1) */
    double *host = malloc((size_t)B * sizeof *host);
    *st = !host   ? bt_fail(BT_ENOMEM, "sampling: out of memory")
          : total ? bt_to_host(total, host, (size_t)B * sizeof *host)
                  : BT_ETORCH;
    for (int64_t b = 0; b < B && *st == BT_OK; b++)
        if (!(host[b] > 0) || !isfinite(host[b]))
            *st = bt_fail(BT_EINVAL, "sampling: row %lld's logits hold NaN or inf", (long long)b);
    free(host);
    if (*st != BT_OK)
        return NULL;
    bt_tensor *threshold =
        bt_mul(ctx, bt_from_host(ctx, BT_F64, bt_device_of(probs), 2, ushape, u), total);
    bt_tensor *below = bt_lt_scalar(ctx, bt_sub(ctx, cdf, threshold), 0); /* (B, n) */
    return bt_to_dtype(ctx, bt_sum(ctx, below, 1, true), BT_I64);
}

bt_status bt_sample_next(bt_ctx *ctx, bt_tensor *logits, const bt_sample_config *cfg,
                         const double *u, bt_tensor **tokens, bt_tensor **logprobs) {
    *tokens = *logprobs = NULL;
    bt_status st = bt_sample_check_config(cfg, u != NULL);
    if (st != BT_OK)
        return st;
    if (!logits || bt_ndim(logits) != 2)
        return logits ? bt_fail(BT_EINVAL, "bt_sample_next: logits must be (B, V)") : BT_EINVAL;
    const int64_t shape[] = {bt_dim(logits, 0)}, V = bt_dim(logits, 1);
    bool greedy = cfg->temperature == 0;
    bt_tensor *z = bt_mul_scalar(ctx, logits, greedy ? 1.0 : 1.0 / cfg->temperature); /* (B, V) */
    bt_tensor *usable = cfg->vocab_limit > 0 && cfg->vocab_limit < V
                            ? bt_slice(ctx, z, 1, 0, cfg->vocab_limit, 1) /* (B, vocab_limit) */
                            : z;
    bt_tensor *next; /* (B, 1) */
    if (greedy)
        next = bt_argmax(ctx, usable, 1, true);
    else
        next = s_draw(
            ctx, bt_softmax(ctx, bt_sample_filter(ctx, usable, cfg->top_k, cfg->top_p), 1), u, &st);
    if (st != BT_OK)
        return st;
    bt_tensor *logp = bt_gather(ctx, bt_log_softmax(ctx, z, 1), 1, next); /* (B, 1) */
    *tokens = bt_reshape(ctx, next, 1, shape);
    *logprobs = bt_reshape(ctx, logp, 1, shape);
    return *tokens && *logprobs ? BT_OK : BT_ETORCH;
}

void bt_generation_init(bt_generation *g) {
    memset(g, 0, sizeof *g);
}

void bt_generation_release(bt_generation *g) {
    free(g->tokens);
    free(g->logprobs);
    free(g->lengths);
    free(g->finish);
    free(g->loss_mask);
    free(g->turn);
    free(g->n_turns);
    bt_generation_init(g);
}
