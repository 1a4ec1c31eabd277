/*  sample.c — token sampling and batched generation over left-padded prompts, with the KV cache or
    by recomputing the whole sequence for every token. */
#include "baton/sample.h"

#include "baton/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void bt_sample_config_init(bt_sample_config *cfg) {
    *cfg = (bt_sample_config){
        .max_new_tokens = 64, .temperature = 1.0, .top_k = 0, .top_p = 1.0, .use_cache = true};
}

static bt_status s_check_config(const bt_sample_config *cfg, bool have_draws) {
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
    bt_status st = s_check_config(cfg, u != NULL);
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
    bt_generation_init(g);
}

/*  The state of one bt_generate call. */
typedef struct s_run {
    bt_model *model;
    const bt_sample_config *cfg;
    bt_kv_cache *cache;   /* NULL without the cache */
    int64_t B, Tp;        /* rows, longest prompt */
    int64_t width;        /* Tp + max_new_tokens */
    int64_t *ids;         /* (B, width) host: left-padded prompts, then the tokens fed back */
    int64_t *mask;        /* (B, width) host: 1 = real token */
    bool *done;           /* (B) the row has sampled EOS */
    int64_t *step_ids;    /* (B) host copy of the tokens sampled in a step */
    float *step_lp;       /* (B) and of their log-probs */
    const uint64_t *keys; /* (B) each row's key; NULL when greedy */
    double *step_u;       /* (B) the uniforms of a step, from the keys */
    int32_t pad;
    int32_t stops[BT_SAMPLE_MAX_STOPS]; /* tokens that end a row */
    int n_stops;
} s_run;

static bool s_is_stop(const s_run *r, int64_t tok) {
    for (int i = 0; i < r->n_stops; i++)
        if (tok == r->stops[i])
            return true;
    return false;
}

/*  Columns [c0, c1) of the host ids and mask as (B, c1 - c0) tensors in ctx. */
static void s_columns(const s_run *r, bt_ctx *ctx, int64_t c0, int64_t c1, bt_tensor **ids,
                      bt_tensor **mask) {
    const int64_t shape[] = {r->B, r->width};
    bt_device dev = bt_model_device(r->model);
    *ids = bt_slice(ctx, bt_from_host(ctx, BT_I64, dev, 2, shape, r->ids), 1, c0, c1, 1);
    *mask = bt_slice(ctx, bt_from_host(ctx, BT_I64, dev, 2, shape, r->mask), 1, c0, c1, 1);
}

/*  Logits (B, V) for the token after the prompt and the s tokens sampled so far. */
static bt_tensor *s_next_logits(s_run *r, bt_ctx *ctx, int64_t s) {
    bt_tensor *ids = NULL, *mask = NULL;
    if (r->cache) { /* the prompts first, then the token sampled last */
        s_columns(r, ctx, s ? r->Tp + s - 1 : 0, r->Tp + s, &ids, &mask);
        return bt_model_forward_cached(r->model, r->cache, ctx, ids, mask);
    }
    s_columns(r, ctx, 0, r->Tp + s, &ids, &mask);
    bt_tensor *logits = bt_model_forward(r->model, ctx, ids, mask); /* (B, Tp + s, V) */
    const int64_t shape[] = {r->B, -1};
    return bt_reshape(ctx, bt_slice(ctx, logits, 1, r->Tp + s - 1, r->Tp + s, 1), 2, shape);
}

/*  Samples step s for every row, records it in out, and appends it to the host sequences (the pad,
    masked out, for rows already done).  *all_done tells whether every row has finished. */
static bt_status s_step(s_run *r, bt_ctx *ctx, int64_t s, bt_generation *out, bool *all_done) {
    bt_tensor *tokens = NULL, *logprobs = NULL;
    for (int64_t b = 0; r->keys && b < r->B; b++) /* row b's draw at step s: its key's alone */
        r->step_u[b] = bt_rng_uniform(bt_rng_key(r->keys[b], (uint64_t)s));
    bt_status st = bt_sample_next(ctx, s_next_logits(r, ctx, s), r->cfg, r->keys ? r->step_u : NULL,
                                  &tokens, &logprobs);
    const int64_t *tok = r->step_ids;
    const float *lp = r->step_lp;
    if (st == BT_OK)
        st = bt_to_host(tokens, r->step_ids, (size_t)r->B * sizeof *r->step_ids);
    if (st == BT_OK)
        st = bt_to_host(logprobs, r->step_lp, (size_t)r->B * sizeof *r->step_lp);
    *all_done = true;
    for (int64_t b = 0; b < r->B && st == BT_OK; b++) {
        int64_t col = b * r->width + r->Tp + s;
        r->ids[col] = r->done[b] ? r->pad : tok[b];
        r->mask[col] = !r->done[b];
        if (!r->done[b]) {
            out->tokens[b * out->max_new_tokens + s] = (int32_t)tok[b];
            out->logprobs[b * out->max_new_tokens + s] = lp[b];
            out->lengths[b] = s + 1;
            r->done[b] = s_is_stop(r, tok[b]);
            out->finish[b] = r->done[b] ? BT_FINISH_EOS : BT_FINISH_LENGTH;
        }
        *all_done = *all_done && r->done[b];
    }
    return st;
}

static bt_status s_check_prompts(const bt_model *model, const int32_t *const *prompts,
                                 const int64_t *prompt_lens, int64_t batch,
                                 const bt_sample_config *cfg, int64_t *longest) {
    const bt_model_config *mc = bt_model_get_config(model);
    if (batch < 1 || cfg->max_new_tokens < 1)
        return bt_fail(BT_EINVAL,
                       "bt_generate: need batch >= 1 and max_new_tokens >= 1, got %lld "
                       "and %lld",
                       (long long)batch, (long long)cfg->max_new_tokens);
    *longest = 0;
    for (int64_t b = 0; b < batch; b++) {
        if (prompt_lens[b] < 1)
            return bt_fail(BT_EINVAL, "bt_generate: prompt %lld is empty", (long long)b);
        for (int64_t i = 0; i < prompt_lens[b]; i++)
            if (prompts[b][i] < 0 || prompts[b][i] >= mc->vocab_size)
                return bt_fail(BT_ERANGE,
                               "bt_generate: prompt %lld: token %lld is %d, outside "
                               "the vocabulary [0, %lld)",
                               (long long)b, (long long)i, prompts[b][i],
                               (long long)mc->vocab_size);
        *longest = prompt_lens[b] > *longest ? prompt_lens[b] : *longest;
    }
    if (*longest + cfg->max_new_tokens > mc->max_position_embeddings)
        return bt_fail(BT_ERANGE,
                       "bt_generate: prompt of %lld tokens + max_new_tokens %lld "
                       "exceeds max_position_embeddings %lld",
                       (long long)*longest, (long long)cfg->max_new_tokens,
                       (long long)mc->max_position_embeddings);
    return BT_OK;
}

/*  Allocates out's arrays (pad, log-prob 0, length 0) and r's host buffers; left-pads the
    prompts into r's sequences. */
static bt_status s_setup(s_run *r, const int32_t *const *prompts, const int64_t *prompt_lens,
                         bt_generation *out) {
    size_t n = (size_t)(r->B * r->cfg->max_new_tokens), cells = (size_t)(r->B * r->width);
    out->batch = r->B;
    out->max_new_tokens = r->cfg->max_new_tokens;
    out->tokens = malloc(n * sizeof *out->tokens);
    out->logprobs = calloc(n, sizeof *out->logprobs);
    out->lengths = calloc((size_t)r->B, sizeof *out->lengths);
    out->finish = calloc((size_t)r->B, sizeof *out->finish);
    r->ids = malloc(cells * sizeof *r->ids);
    r->mask = calloc(cells, sizeof *r->mask);
    r->done = calloc((size_t)r->B, sizeof *r->done);
    r->step_ids = malloc((size_t)r->B * sizeof *r->step_ids);
    r->step_lp = malloc((size_t)r->B * sizeof *r->step_lp);
    r->step_u = malloc((size_t)r->B * sizeof *r->step_u);
    if (!out->tokens || !out->logprobs || !out->lengths || !out->finish || !r->ids || !r->mask ||
        !r->done || !r->step_ids || !r->step_lp || !r->step_u)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    for (size_t i = 0; i < n; i++)
        out->tokens[i] = r->pad;
    for (int64_t b = 0; b < r->B; b++) {
        int64_t start = r->Tp - prompt_lens[b]; /* left padding */
        for (int64_t c = 0; c < r->width; c++) {
            bool real = c >= start && c < r->Tp;
            r->ids[b * r->width + c] = real ? prompts[b][c - start] : r->pad;
            r->mask[b * r->width + c] = real;
        }
    }
    return BT_OK;
}

bt_status bt_generate(bt_model *model, const int32_t *const *prompts, const int64_t *prompt_lens,
                      int64_t batch, const bt_sample_config *cfg, const uint64_t *keys,
                      bt_generation *out) {
    BT_ASSERT(model && prompts && prompt_lens && cfg && out);
    bt_generation_release(out);
    const bt_model_config *mc = bt_model_get_config(model);
    s_run r = {.model = model, .cfg = cfg, .B = batch, .keys = keys};
    for (int i = 0; i < cfg->n_stops && i < BT_SAMPLE_MAX_STOPS; i++)
        r.stops[r.n_stops++] = cfg->stops[i];
    if (r.n_stops == 0 && mc->eos_token_id >= 0)
        r.stops[r.n_stops++] = (int32_t)mc->eos_token_id;
    r.pad = (int32_t)(mc->pad_token_id >= 0 ? mc->pad_token_id
                                            : (mc->eos_token_id >= 0 ? mc->eos_token_id : 0));
    bt_status st = s_check_config(cfg, keys != NULL);
    if (st == BT_OK)
        st = s_check_prompts(model, prompts, prompt_lens, batch, cfg, &r.Tp);
    r.width = r.Tp + cfg->max_new_tokens;
    if (st == BT_OK)
        st = s_setup(&r, prompts, prompt_lens, out);
    if (st == BT_OK && cfg->use_cache) {
        r.cache = bt_kv_cache_new(model, batch, r.width - 1);
        st = r.cache ? BT_OK : BT_ENOMEM;
    }
    bt_ctx *ctx = bt_ctx_new();
    if (st == BT_OK && !ctx)
        st = bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    bool grad = bt_set_grad_enabled(false);
    bool all_done = false;
    for (int64_t s = 0; s < cfg->max_new_tokens && !all_done && st == BT_OK; s++) {
        st = s_step(&r, ctx, s, out, &all_done);
        bt_ctx_reset(ctx);
    }
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&ctx);
    bt_kv_cache_destroy(&r.cache);
    free(r.ids);
    free(r.mask);
    free(r.done);
    free(r.step_ids);
    free(r.step_lp);
    free(r.step_u);
    if (st != BT_OK)
        bt_generation_release(out);
    return st;
}
