/*  rollout.c — sampling and scoring groups of completions; demonstrations for SFT; weights as
    host arrays. */
#include "baton/rollout.h"

#include "baton/rng.h"

#include <stdlib.h>
#include <string.h>

/* ---- prompts -------------------------------------------------------------------------------- */

/*  The examples of indices[0 .. n): each prompt encoded (BOS + bytes), its text and its answer,
    copied. */
typedef struct s_prompts {
    int64_t n;
    int64_t longest; /* longest encoded prompt */
    int32_t **ids;   /* (n) encoded prompts */
    int64_t *lens;   /* (n) */
    char **texts;    /* (n) prompt texts, for the scorer */
    char **answers;  /* (n) */
    char **columns;  /* (n) each record's other JSONL keys, or NULL (bt_source_example) */
} s_prompts;

static void s_prompts_release(s_prompts *p) {
    for (int64_t i = 0; i < p->n; i++) {
        if (p->ids)
            free(p->ids[i]);
        if (p->texts)
            free(p->texts[i]);
        if (p->answers)
            free(p->answers[i]);
        if (p->columns)
            free(p->columns[i]);
    }
    free(p->ids);
    free(p->lens);
    free(p->texts);
    free(p->answers);
    free(p->columns);
    memset(p, 0, sizeof *p);
}

static char *s_strdup(const char *s) {
    size_t len = strlen(s) + 1;
    char *d = malloc(len);
    if (d)
        memcpy(d, s, len);
    return d;
}

static bt_status s_prompts_load(s_prompts *p, const bt_tokenizer_t *tok, bt_source_t *task,
                                const uint64_t *indices, int64_t n) {
    memset(p, 0, sizeof *p);
    p->ids = calloc((size_t)n + 1, sizeof *p->ids);
    p->lens = calloc((size_t)n + 1, sizeof *p->lens);
    p->texts = calloc((size_t)n + 1, sizeof *p->texts);
    p->answers = calloc((size_t)n + 1, sizeof *p->answers);
    p->columns = calloc((size_t)n + 1, sizeof *p->columns);
    if (!p->ids || !p->lens || !p->texts || !p->answers || !p->columns) {
        s_prompts_release(p);
        return bt_fail(BT_ENOMEM, "rollout: out of memory");
    }
    p->n = n;
    bt_source_example ex;
    bt_source_example_init(&ex);
    bt_status st = BT_OK;
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        st = bt_source_train_example(task, BT_PROMPT_INDEX(indices[i]), &ex);
        if (st != BT_OK)
            break;
        size_t len = strlen(ex.prompt), n_ids = 0;
        p->ids[i] = malloc((len + 1) * sizeof *p->ids[i]);
        p->texts[i] = s_strdup(ex.prompt);
        p->answers[i] = s_strdup(ex.answer);
        p->columns[i] = ex.columns ? s_strdup(ex.columns) : NULL;
        if (!p->ids[i] || !p->texts[i] || !p->answers[i] || (ex.columns && !p->columns[i]))
            st = bt_fail(BT_ENOMEM, "rollout: out of memory");
        else
            st = bt_tokenizer_encode(tok, ex.prompt, len, true, p->ids[i], len + 1, &n_ids);
        p->lens[i] = (int64_t)n_ids;
        p->longest = p->lens[i] > p->longest ? p->lens[i] : p->longest;
    }
    bt_source_example_release(&ex);
    if (st != BT_OK)
        s_prompts_release(p);
    return st;
}

/* ---- sampling ------------------------------------------------------------------------------- */

void bt_rollout_config_init(bt_rollout_config *cfg) {
    cfg->group_size = 8;
    bt_sample_config_init(&cfg->sample);
    cfg->sample.max_new_tokens = 8;
    cfg->reward_service = NULL;
    cfg->env = NULL;
    bt_episode_config_init(&cfg->episode);
}

/*  Scores every completion of out with one bt_reward_score call (one request when there is a
    reward service): its ids decoded up to the EOS, or, for episodes (ep not NULL), the last
    model turn's text. */
static bt_status s_score(bt_rollout_batch *out, const s_prompts *p, const bt_tokenizer_t *tok,
                         const bt_source_t *task, bt_reward_service_t *service,
                         const bt_episodes *ep) {
    const int64_t n = out->n, G = out->group_size;
    const int64_t stride =
        ep ? 1 : out->max_new_tokens * (int64_t)bt_tokenizer_max_token_bytes(tok) + 1;
    char *texts = malloc((size_t)(n * stride)); /* (n, stride) decoded completions */
    bt_reward_item *items = calloc((size_t)n + 1, sizeof *items);
    bt_status st = texts && items ? BT_OK : bt_fail(BT_ENOMEM, "rollout: out of memory");
    for (int64_t c = 0; c < n && st == BT_OK; c++) {
        size_t len = 0;
        const char *text = texts + c * stride;
        if (ep) {
            text = ep->final_text[c];
            len = ep->final_len[c];
        } else {
            st = bt_tokenizer_decode(tok, out->tokens + c * out->max_new_tokens,
                                     (size_t)out->lengths[c], texts + c * stride, (size_t)stride,
                                     &len);
        }
        items[c] = (bt_reward_item){.index = out->indices[c / G],
                                    .prompt = p->texts[c / G],
                                    .answer = p->answers[c / G],
                                    .completion = text,
                                    .len = len,
                                    .columns = p->columns[c / G]};
    }
    if (st == BT_OK)
        st = bt_reward_score(service, task, "rollout", items, n, out->rewards, out->correct);
    free(items);
    free(texts);
    return st;
}

#define S_PURPOSE 0x726f6c6c6f7574ULL /* "rollout": the first field of every rollout draw's key */

uint64_t bt_rollout_key(uint64_t seed, uint64_t prompt_id, int64_t sample) {
    uint64_t step = bt_rng_key(seed >> BT_JOB_SEED_BITS, S_PURPOSE); /* any job of the step */
    return bt_rng_key(bt_rng_key(step, prompt_id), (uint64_t)sample);
}

/*  The batch of g's n = n_prompts x G rows after prompts[c] (prompt_lens[c] ids each, padded to
    longest): ids, log-probs, lengths, finished (a stop token, or the environment's end) and, for
    episodes, their loss masks and turns. */
static bt_status s_fill(bt_rollout_batch *out, const bt_tokenizer_t *tok, const uint64_t *indices,
                        int64_t n_prompts, int64_t G, const int32_t *const *prompts,
                        const int64_t *prompt_lens, int64_t longest, const bt_generation *g) {
    const int64_t n = n_prompts * G, W = g->max_new_tokens;
    BT_TRY(bt_rollout_batch_alloc(out, n_prompts, G, longest, W));
    memcpy(out->indices, indices, (size_t)n_prompts * sizeof *indices);
    memcpy(out->tokens, g->tokens, (size_t)(n * W) * sizeof *out->tokens);
    memcpy(out->logprobs, g->logprobs, (size_t)(n * W) * sizeof *out->logprobs);
    memcpy(out->lengths, g->lengths, (size_t)n * sizeof *out->lengths);
    if (g->loss_mask) {
        memcpy(out->loss_mask, g->loss_mask, (size_t)(n * W) * sizeof *out->loss_mask);
        memcpy(out->turn, g->turn, (size_t)(n * W) * sizeof *out->turn);
        memcpy(out->n_turns, g->n_turns, (size_t)n * sizeof *out->n_turns);
    }
    for (int64_t c = 0; c < n; c++) {
        int32_t *dst = out->prompt_tokens + c * out->max_prompt_len;
        memcpy(dst, prompts[c], (size_t)prompt_lens[c] * sizeof *dst);
        for (int64_t t = prompt_lens[c]; t < out->max_prompt_len; t++)
            dst[t] = bt_tokenizer_pad(tok);
        out->prompt_lens[c] = prompt_lens[c];
        out->finished[c] = g->finish[c] == BT_FINISH_EOS || g->finish[c] == BT_FINISH_DONE;
    }
    return BT_OK;
}

/*  One turn per row: bt_generate, then the completions scored. */
static bt_status s_single(bt_model *model, const bt_tokenizer_t *tok, bt_source_t *task,
                          const s_prompts *p, const int32_t *const *rows, const int64_t *row_lens,
                          const uint64_t *keys, const bt_sample_config *sample,
                          const bt_rollout_config *cfg, const uint64_t *indices, int64_t n_prompts,
                          bt_rollout_batch *out) {
    const int64_t G = cfg->group_size, n = n_prompts * G;
    bt_generation g;
    bt_generation_init(&g);
    bt_status st = bt_generate(model, rows, row_lens, n, sample, keys, &g);
    if (st == BT_OK)
        st = s_fill(out, tok, indices, n_prompts, G, rows, row_lens, p->longest, &g);
    if (st == BT_OK)
        st = s_score(out, p, tok, task, cfg->reward_service, NULL);
    bt_generation_release(&g);
    return st;
}

/*  Multi-turn episodes (cfg->env, episodes.h) of the n = n_prompts x G rows: the batch holds
    each episode's prompt (its reset observation's ids appended), its ids with their loss mask
    and turns, and its reward by cfg->episode.reward; with turn_rewards each turn's too (the
    task's score counted in the last turn's). */
static bt_status s_episodes(bt_model *model, const bt_tokenizer_t *tok, bt_source_t *task,
                            const s_prompts *p, const int32_t *const *rows, const int64_t *row_lens,
                            const uint64_t *keys, const bt_sample_config *sample,
                            const bt_rollout_config *cfg, const uint64_t *indices,
                            int64_t n_prompts, bt_rollout_batch *out) {
    const int64_t G = cfg->group_size, n = n_prompts * G;
    bt_env_reset_item *items = calloc((size_t)n + 1, sizeof *items);
    if (!items)
        return bt_fail(BT_ENOMEM, "rollout: out of memory");
    for (int64_t c = 0; c < n; c++) /* an episode is named by its draws' key: unique per run */
        items[c] = (bt_env_reset_item){.episode = keys[c],
                                       .prompt = p->texts[c / G],
                                       .answer = p->answers[c / G],
                                       .columns = p->columns[c / G]};
    bt_episodes ep;
    bt_episodes_init(&ep);
    bt_status st = bt_episodes_run(model, tok, cfg->env, &cfg->episode, sample, rows, row_lens,
                                   items, n, keys, &ep);
    if (st == BT_OK)
        st = s_fill(out, tok, indices, n_prompts, G, (const int32_t *const *)ep.prompts,
                    ep.prompt_lens, ep.longest_prompt, &ep.g);
    const bt_episode_reward mode = cfg->episode.reward;
    if (st == BT_OK && mode != BT_EPISODE_REWARD_ENV)
        st = s_score(out, p, tok, task, cfg->reward_service, &ep);
    for (int64_t c = 0; c < n && st == BT_OK; c++) {
        double task_score = mode == BT_EPISODE_REWARD_ENV ? 0.0 : out->rewards[c];
        out->rewards[c] = bt_episode_reward_of(mode, task_score, out->correct[c], ep.env_return[c],
                                               &out->correct[c]);
        if (!cfg->episode.turn_rewards)
            continue;
        double *tr = out->turn_rewards + c * BT_MAX_TURNS;
        for (int64_t t = 0; t < out->n_turns[c]; t++)
            tr[t] = mode == BT_EPISODE_REWARD_FINAL ? 0.0 : ep.turn_rewards[c * BT_MAX_TURNS + t];
        tr[out->n_turns[c] - 1] += task_score;
    }
    if (st == BT_OK)
        out->has_turn_rewards = cfg->episode.turn_rewards;
    bt_episodes_release(&ep);
    free(items);
    return st;
}

bt_status bt_rollout_sample(bt_model *model, const bt_tokenizer_t *tok, bt_source_t *task,
                            const uint64_t *indices, int64_t n_prompts,
                            const bt_rollout_config *cfg, int64_t version, uint64_t seed,
                            bt_rollout_batch *out) {
    BT_ASSERT(model && tok && task && cfg && out && (indices || n_prompts == 0));
    bt_rollout_batch_release(out);
    if (n_prompts < 1 || cfg->group_size < 1)
        return bt_fail(BT_EINVAL,
                       "rollout: need n_prompts >= 1 and group_size >= 1, got %lld, %lld",
                       (long long)n_prompts, (long long)cfg->group_size);
    const int64_t G = cfg->group_size, n = n_prompts * G;
    s_prompts p;
    bt_status st = s_prompts_load(&p, tok, task, indices, n_prompts);
    if (st != BT_OK)
        return st;
    const int32_t **rows = calloc((size_t)n, sizeof *rows); /* (n) prompt of each completion */
    int64_t *row_lens = calloc((size_t)n, sizeof *row_lens);
    uint64_t *keys = calloc((size_t)n, sizeof *keys); /* (n) completion c's draws */
    if (!rows || !row_lens || !keys)
        st = bt_fail(BT_ENOMEM, "rollout: out of memory");
    for (int64_t c = 0; c < n && st == BT_OK; c++) {
        rows[c] = p.ids[c / G];
        row_lens[c] = p.lens[c / G];
        keys[c] = bt_rollout_key(seed, indices[c / G], c % G);
    }
    bt_sample_config sample = cfg->sample;
    /* completions end where the reward's decoding stops, and hold only ids it can decode */
    sample.n_stops = bt_tokenizer_stops(tok, sample.stops, BT_SAMPLE_MAX_STOPS);
    sample.vocab_limit = bt_tokenizer_vocab_size(tok);
    bool episodes = cfg->env || cfg->episode.max_turns > 1;
    if (st == BT_OK)
        st = (episodes ? s_episodes : s_single)(model, tok, task, &p, (const int32_t *const *)rows,
                                                row_lens, keys, &sample, cfg, indices, n_prompts,
                                                out);
    if (st == BT_OK) {
        out->version = version;
        out->temperature = cfg->sample.temperature;
    }
    if (st != BT_OK)
        bt_rollout_batch_release(out);
    free(keys);
    free(row_lens);
    free(rows);
    s_prompts_release(&p);
    return st;
}

bt_status bt_rollout_demonstrations(const bt_tokenizer_t *tok, bt_source_t *task,
                                    const uint64_t *indices, int64_t n, bt_rollout_batch *out) {
    BT_ASSERT(tok && task && out && (indices || n == 0));
    bt_rollout_batch_release(out);
    if (n < 1)
        return bt_fail(BT_EINVAL, "demonstrations: need n >= 1, got %lld", (long long)n);
    /* each example once: its prompt, and its demonstration (bt_source_example.demo) or its
       answer as one model turn */
    bt_source_example *ex = calloc((size_t)n, sizeof *ex);
    bt_status st = ex ? BT_OK : bt_fail(BT_ENOMEM, "demonstrations: out of memory");
    int64_t longest = 0, longest_prompt = 0; /* bytes + EOS (+ BOS): no text has more ids */
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        st = bt_source_train_example(task, BT_PROMPT_INDEX(indices[i]), &ex[i]);
        if (st != BT_OK)
            break;
        int64_t len = 1, plen = (int64_t)strlen(ex[i].prompt) + 1;
        for (int k = 0; k < ex[i].n_demo; k++)
            len += (int64_t)ex[i].demo[k].len;
        if (!ex[i].demo)
            len += (int64_t)strlen(ex[i].answer);
        if ((ex[i].n_demo + 1) / 2 > BT_MAX_TURNS)
            st = bt_fail(BT_EINVAL, "demonstrations: prompt %llu has %d model turns, at most %d",
                         (unsigned long long)BT_PROMPT_INDEX(indices[i]), (ex[i].n_demo + 1) / 2,
                         BT_MAX_TURNS);
        longest = len > longest ? len : longest;
        longest_prompt = plen > longest_prompt ? plen : longest_prompt;
    }
    if (st == BT_OK)
        st = bt_rollout_batch_alloc(out, n, 1, longest_prompt, longest);
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        out->indices[i] = indices[i];
        size_t n_ids = 0;
        st = bt_tokenizer_encode(tok, ex[i].prompt, strlen(ex[i].prompt), true,
                                 out->prompt_tokens + i * out->max_prompt_len,
                                 (size_t)out->max_prompt_len, &n_ids);
        out->prompt_lens[i] = (int64_t)n_ids;
        bt_source_turn answer = {.text = ex[i].answer, .len = strlen(ex[i].answer)};
        const bt_source_turn *parts = ex[i].demo ? ex[i].demo : &answer;
        int n_parts = ex[i].demo ? ex[i].n_demo : 1;
        int32_t *dst = out->tokens + i * out->max_new_tokens;
        uint8_t *mask = out->loss_mask + i * out->max_new_tokens;
        uint8_t *turn = out->turn + i * out->max_new_tokens;
        size_t at = 0;
        /* each part tokenized on its own, as a rollout appends an observation (token in,
           token out); model turns train (mask 1), observations do not (mask 0, the turn they
           answer) */
        for (int k = 0; k < n_parts && st == BT_OK; k++) {
            st = bt_tokenizer_encode(tok, parts[k].text, parts[k].len, false, dst + at,
                                     (size_t)longest - at, &n_ids);
            for (size_t j = at; st == BT_OK && j < at + n_ids; j++) {
                mask[j] = !parts[k].observation;
                turn[j] = (uint8_t)(k / 2);
            }
            at += st == BT_OK ? n_ids : 0;
        }
        if (st != BT_OK)
            break;
        dst[at] = bt_tokenizer_eos(tok);
        mask[at] = 1;
        turn[at] = (uint8_t)((n_parts - 1) / 2);
        out->lengths[i] = (int64_t)at + 1;
        out->n_turns[i] = (n_parts + 1) / 2;
        out->rewards[i] = 1.0;
        out->correct[i] = true;
        out->finished[i] = true;
    }
    for (int64_t i = 0; ex && i < n; i++)
        bt_source_example_release(&ex[i]);
    free(ex);
    if (st != BT_OK)
        bt_rollout_batch_release(out);
    return st;
}

/* ---- weights -------------------------------------------------------------------------------- */

bt_status bt_weights_export(const bt_model *model, int64_t version, bt_weights *out) {
    BT_ASSERT(model && out);
    bt_weights_release(out);
    int n = bt_model_num_params(model);
    bt_tensor *const *params = bt_model_params(model);
    out->names = calloc((size_t)n, sizeof *out->names);
    out->ndim = calloc((size_t)n, sizeof *out->ndim);
    out->shape = calloc((size_t)n, sizeof *out->shape);
    out->numel = calloc((size_t)n, sizeof *out->numel);
    out->dtype = calloc((size_t)n, sizeof *out->dtype);
    out->data = calloc((size_t)n, sizeof *out->data);
    bt_ctx *tmp = bt_ctx_new();
    if (!out->names || !out->ndim || !out->shape || !out->numel || !out->dtype || !out->data ||
        !tmp) {
        bt_ctx_destroy(&tmp);
        bt_weights_release(out);
        return bt_fail(BT_ENOMEM, "weights export: out of memory");
    }
    out->n = n;
    out->version = version;
    bool grad = bt_set_grad_enabled(false);
    bt_status st = BT_OK;
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_tensor *p = params[i];
        if (bt_dtype_of(p) != BT_F32) {
            st = bt_fail(BT_EUNSUPPORTED, "weights export: %s is %s, expected float32",
                         bt_model_param_name(model, i), bt_dtype_name(bt_dtype_of(p)));
            break;
        }
        out->names[i] = s_strdup(bt_model_param_name(model, i));
        out->ndim[i] = bt_ndim(p);
        for (int d = 0; d < out->ndim[i]; d++)
            out->shape[i][d] = bt_dim(p, d);
        out->numel[i] = bt_numel(p);
        /* what the forward reads: autocast casts a matrix-product weight to bf16 (round to
           nearest even, as torch's .to()), so it travels cast; the rest as float32 */
        bool cast = bt_model_precision(model) == BT_BF16 && bt_model_param_is_matmul(model, i);
        out->dtype[i] = cast ? BT_BF16 : BT_F32;
        size_t nbytes = (size_t)out->numel[i] * bt_dtype_size(out->dtype[i]);
        out->data[i] = malloc(nbytes + 1);
        if (!out->names[i] || !out->data[i])
            st = bt_fail(BT_ENOMEM, "weights export: out of memory");
        else
            st = bt_to_host(cast ? bt_to_dtype(tmp, p, BT_BF16) : p, out->data[i], nbytes);
        bt_ctx_reset(tmp);
    }
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&tmp);
    if (st != BT_OK)
        bt_weights_release(out);
    return st;
}

/*  True when parameter p has the shape ndim, shape. */
static bool s_same_shape(bt_tensor *p, int ndim, const int64_t *shape) {
    if (bt_ndim(p) != ndim)
        return false;
    for (int d = 0; d < ndim; d++)
        if (bt_dim(p, d) != shape[d])
            return false;
    return true;
}

bt_status bt_weights_load(bt_model *model, const bt_weights *w) {
    BT_ASSERT(model && w);
    if (w->n != bt_model_num_params(model))
        return bt_fail(BT_EINVAL, "weights load: %d tensors given, the model has %d", w->n,
                       bt_model_num_params(model));
    bt_ctx *ctx = bt_ctx_new();
    if (!ctx)
        return bt_fail(BT_ENOMEM, "weights load: out of memory");
    bool grad = bt_set_grad_enabled(false);
    bt_status st = BT_OK;
    for (int i = 0; i < w->n && st == BT_OK; i++) {
        bt_tensor *p = bt_model_find_param(model, w->names[i]);
        if (!p) {
            st = bt_fail(BT_EINVAL, "weights load: the model has no parameter %s", w->names[i]);
            break;
        }
        if (w->ndim[i] < 0 || w->ndim[i] > BT_MAX_DIMS ||
            !s_same_shape(p, w->ndim[i], w->shape[i])) {
            st =
                bt_fail(BT_EINVAL, "weights load: %s: shape differs from the model's", w->names[i]);
            break;
        }
        if (w->dtype[i] != BT_F32 && w->dtype[i] != BT_BF16) {
            st = bt_fail(BT_EINVAL, "weights load: %s: expected F32 or BF16, got %s", w->names[i],
                         bt_dtype_name(w->dtype[i]));
            break;
        }
        /* a BF16 tensor becomes its exact float32 value */
        st = bt_copy_(p, bt_from_host(ctx, w->dtype[i], bt_model_device(model), w->ndim[i],
                                      w->shape[i], w->data[i]));
        bt_ctx_reset(ctx);
    }
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&ctx);
    return st;
}

bt_status bt_weights_copy(bt_model *dst, const bt_model *src) {
    BT_ASSERT(dst && src);
    int n = bt_model_num_params(src);
    if (n != bt_model_num_params(dst))
        return bt_fail(BT_EINVAL, "weights copy: the models have %d and %d parameters", n,
                       bt_model_num_params(dst));
    bool grad = bt_set_grad_enabled(false);
    bt_status st = BT_OK;
    for (int i = 0; i < n && st == BT_OK; i++) {
        bt_tensor *s = bt_model_params(src)[i], *d = bt_model_params(dst)[i];
        int64_t shape[BT_MAX_DIMS];
        for (int k = 0; k < bt_ndim(s); k++)
            shape[k] = bt_dim(s, k);
        if (!s_same_shape(d, bt_ndim(s), shape))
            st = bt_fail(BT_EINVAL, "weights copy: %s: shapes differ", bt_model_param_name(src, i));
        else
            st = bt_copy_(d, s);
    }
    bt_set_grad_enabled(grad);
    return st;
}
