/*  evaluator.c — held-out evaluation in batches, as sums. */
#define _POSIX_C_SOURCE 200809L
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/metrics.h"
#include "baton/rng.h"
#include "baton/rollout.h"
#include "baton/sample.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void bt_evaluator_config_init(bt_evaluator_config *cfg) {
    cfg->start = 0;
    cfg->count = 200;
    cfg->samples = 1;
    cfg->temperature = 0.0;
    cfg->top_k = 0;
    cfg->top_p = 1.0;
    cfg->max_new_tokens = 8;
    cfg->batch = 256;
    cfg->robustness = false;
    cfg->reward_service = NULL;
    cfg->env = NULL;
    bt_episode_config_init(&cfg->episode);
}

bt_status bt_evaluator_sums_add(bt_evaluator_sums *total, const bt_evaluator_sums *part) {
    if (total->samples != part->samples)
        return bt_fail(BT_EINVAL, "evaluator: cannot add sums of %lld and %lld samples",
                       (long long)total->samples, (long long)part->samples);
    if (total->n_probes && part->n_probes)
        return bt_fail(BT_EINVAL, "evaluator: probes are never split, yet two shards hold them");
    total->examples += part->examples;
    total->completions += part->completions;
    total->correct += part->correct;
    total->maj_correct += part->maj_correct;
    total->reward_sum += part->reward_sum;
    total->reward_sumsq += part->reward_sumsq;
    total->length_sum += part->length_sum;
    total->truncated += part->truncated;
    for (int c = 0; c <= BT_EVALUATOR_MAX_SAMPLES; c++)
        total->correct_hist[c] += part->correct_hist[c];
    for (int l = 0; l < BT_EVALUATOR_LEN_BINS; l++)
        total->length_hist[l] += part->length_hist[l];
    for (int p = 0; p < BT_PERTURB_COUNT; p++) {
        total->robust_examples[p] += part->robust_examples[p];
        total->robust_correct[p] += part->robust_correct[p];
    }
    total->nll_sum += part->nll_sum;
    total->nll_tokens += part->nll_tokens;
    total->texts += part->texts;
    if (part->n_probes) {
        total->n_probes = part->n_probes;
        memcpy(total->probe_nll, part->probe_nll, sizeof total->probe_nll);
        memcpy(total->probe_tokens, part->probe_tokens, sizeof total->probe_tokens);
    }
    total->mc_items += part->mc_items;
    total->mc_correct += part->mc_correct;
    total->mc_correct_norm += part->mc_correct_norm;
    total->mc_p_right_fx += part->mc_p_right_fx;
    for (int b = 0; b < BT_CHOICES_BINS; b++) {
        total->mc_bin_n[b] += part->mc_bin_n[b];
        total->mc_bin_conf_fx[b] += part->mc_bin_conf_fx[b];
        total->mc_bin_correct[b] += part->mc_bin_correct[b];
    }
    total->mc_shuffled += part->mc_shuffled;
    total->mc_shuffled_correct += part->mc_shuffled_correct;
    for (int k = 0; k < BT_CHOICES_SUBJECTS; k++) {
        total->mc_subject_n[k] += part->mc_subject_n[k];
        total->mc_subject_correct[k] += part->mc_subject_correct[k];
        total->mc_subject_correct_norm[k] += part->mc_subject_correct_norm[k];
    }
    total->episodes += part->episodes;
    total->turns_sum += part->turns_sum;
    total->tool_calls += part->tool_calls;
    total->tool_errors += part->tool_errors;
    total->tool_episodes += part->tool_episodes;
    total->episode_tokens_sum += part->episode_tokens_sum;
    total->model_tokens_sum += part->model_tokens_sum;
    total->env_return_sum += part->env_return_sum;
    total->generated_tokens += part->generated_tokens;
    total->compute_s += part->compute_s;
    total->peak_rss_mb = fmax(total->peak_rss_mb, part->peak_rss_mb);
    return BT_OK;
}

double bt_evaluator_peak_rss_mb(void) {
    size_t peak;
    return bt_proc_memory(NULL, &peak) == BT_OK ? (double)peak / (1 << 20) : NAN;
}

static bt_status s_check_config(const bt_evaluator_config *cfg, const bt_source_t *task) {
    size_t held = bt_source_heldout_count(task);
    if (cfg->start > held || cfg->count > held - cfg->start)
        return bt_fail(BT_EINVAL, "evaluator: examples [%zu, %zu) exceed the %zu held-out ones",
                       cfg->start, cfg->start + cfg->count, held);
    if (cfg->samples < 1 || cfg->samples > BT_EVALUATOR_MAX_SAMPLES)
        return bt_fail(BT_EINVAL, "evaluator: samples must be in [1, %d], got %lld",
                       BT_EVALUATOR_MAX_SAMPLES, (long long)cfg->samples);
    if (cfg->samples > 1 && !(cfg->temperature > 0))
        return bt_fail(BT_EINVAL, "evaluator: %lld samples need a temperature > 0",
                       (long long)cfg->samples);
    if (cfg->batch < cfg->samples || cfg->max_new_tokens < 1)
        return bt_fail(BT_EINVAL,
                       "evaluator: need batch >= samples (%lld) and max_new_tokens >= 1, "
                       "got %lld and %lld",
                       (long long)cfg->samples, (long long)cfg->batch,
                       (long long)cfg->max_new_tokens);
    return BT_OK;
}

#define S_PURPOSE 0x6576616cULL /* "eval": the first field of every evaluation draw's key */

uint64_t bt_evaluator_key(uint64_t key, int perturb, uint64_t index, int64_t sample) {
    uint64_t pass = bt_rng_key(bt_rng_key(key, S_PURPOSE), (uint64_t)(perturb + 1));
    return bt_rng_key(bt_rng_key(pass, index), (uint64_t)sample);
}

/*  Scratch for one chunk of examples. */
typedef struct s_chunk {
    int64_t cap;           /* examples */
    int64_t k;             /* completions per example in this pass */
    int64_t stride;        /* bytes of a decoded completion's slot: max_new_tokens x the
                              longest token + 1 */
    int32_t **ids;         /* (cap) encoded prompts, one buffer each */
    int64_t *lens;         /* (cap) */
    uint64_t *index;       /* (cap) held-out index of each example */
    char **answers;        /* (cap) */
    char **prompts;        /* (cap) prompt texts, for the scorer */
    char **columns;        /* (cap) each record's other JSONL keys, or NULL (bt_source_example) */
    const int32_t **rows;  /* (cap * k) prompt of each sequence */
    int64_t *row_lens;     /* (cap * k) */
    uint64_t *keys;        /* (cap * k) each sequence's draws (bt_evaluator_key) */
    char *texts;           /* (cap * k, stride) decoded completions */
    bt_reward_item *items; /* (cap * k) what is scored */
    double *rewards;       /* (cap * k) */
    bool *right;           /* (cap * k) */
    char **votes;          /* (k) canonical answers of one example's completions */
} s_chunk;

static bt_status s_set_example(s_chunk *c, const bt_tokenizer_t *tok, uint64_t key, int perturb,
                               int64_t i, uint64_t index, const char *prompt, const char *answer,
                               const char *columns) {
    size_t len = strlen(prompt), n_ids = 0;
    free(c->ids[i]);
    free(c->answers[i]);
    free(c->prompts[i]);
    free(c->columns[i]);
    c->ids[i] = malloc((len + 1) * sizeof *c->ids[i]);
    c->answers[i] = malloc(strlen(answer) + 1);
    c->prompts[i] = malloc(len + 1);
    c->columns[i] = columns ? malloc(strlen(columns) + 1) : NULL;
    if (!c->ids[i] || !c->answers[i] || !c->prompts[i] || (columns && !c->columns[i]))
        return bt_fail(BT_ENOMEM, "evaluator: out of memory");
    strcpy(c->answers[i], answer);
    strcpy(c->prompts[i], prompt);
    if (columns)
        strcpy(c->columns[i], columns);
    c->index[i] = index;
    BT_TRY(bt_tokenizer_encode(tok, prompt, len, true, c->ids[i], len + 1, &n_ids));
    c->lens[i] = (int64_t)n_ids;
    for (int64_t j = 0; j < c->k; j++) {
        c->rows[i * c->k + j] = c->ids[i];
        c->row_lens[i * c->k + j] = c->lens[i];
        c->keys[i * c->k + j] = bt_evaluator_key(key, perturb, index, j);
    }
    return BT_OK;
}

/*  The model's ids of row r of an episode generation (loss mask 1 within its length). */
static int64_t s_model_tokens(const bt_generation *g, int64_t r) {
    int64_t n = 0;
    for (int64_t t = 0; t < g->lengths[r]; t++)
        n += g->loss_mask[r * g->max_new_tokens + t] != 0;
    return n;
}

/*  The chunk's n completions as episodes over cfg->env (episodes.h): completion r resets with its
    draws' key as the episode's id (unique per evaluation: example, perturbation and sample) and
    its example's prompt, answer and columns; each turn is sc's. */
static bt_status s_run_episodes(bt_model *model, const bt_tokenizer_t *tok,
                                const bt_evaluator_config *cfg, const bt_sample_config *sc,
                                const s_chunk *c, int64_t n, bt_episodes *ep) {
    bt_env_reset_item *items = calloc((size_t)n + 1, sizeof *items);
    if (!items)
        return bt_fail(BT_ENOMEM, "evaluator: out of memory");
    for (int64_t r = 0; r < n; r++)
        items[r] = (bt_env_reset_item){.episode = c->keys[r],
                                       .prompt = c->prompts[r / c->k],
                                       .answer = c->answers[r / c->k],
                                       .columns = c->columns[r / c->k]};
    bt_status st =
        bt_episodes_run(model, tok, cfg->env, &cfg->episode, sc, (const int32_t *const *)c->rows,
                        c->row_lens, items, n, c->keys, ep);
    free(items);
    return st;
}

/*  Generates and scores examples [first, first + n) of the held-out set, clean (perturb < 0) or
    perturbed, into out.  Examples a perturbation does not apply to are skipped. */
static bt_status s_run_chunk(bt_model *model, const bt_tokenizer_t *tok, const bt_source_t *task,
                             const bt_evaluator_config *cfg, uint64_t key, size_t first, int64_t n,
                             int perturb, s_chunk *c, bt_evaluator_sums *out) {
    const int64_t k = c->k, M = cfg->max_new_tokens;
    bt_status st = BT_OK;
    int64_t m = 0; /* examples in this pass */
    char buf[1024];
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        st = bt_source_heldout_example(task, first + (size_t)i, &ex);
        if (st != BT_OK)
            break;
        const char *prompt = ex.prompt;
        if (perturb >= 0) {
            if (!bt_source_perturb(task, first + (size_t)i, (bt_source_perturbation)perturb, buf,
                                   sizeof buf))
                continue;
            prompt = buf;
        }
        st = s_set_example(c, tok, key, perturb, m++, first + (size_t)i, prompt, ex.answer,
                           ex.columns);
    }
    bt_source_example_release(&ex);
    if (m == 0 || st != BT_OK)
        return st;
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = M;
    sc.temperature = cfg->temperature;
    sc.top_k = cfg->top_k;
    sc.top_p = cfg->top_p;
    sc.n_stops = bt_tokenizer_stops(tok, sc.stops, BT_SAMPLE_MAX_STOPS);
    sc.vocab_limit = bt_tokenizer_vocab_size(tok); /* only ids the decoding below knows */
    const bool episodes = cfg->env || cfg->episode.max_turns > 1;
    bt_generation g;
    bt_generation_init(&g);
    bt_episodes ep;
    bt_episodes_init(&ep);
    if (episodes)
        st = s_run_episodes(model, tok, cfg, &sc, c, m * k, &ep);
    else
        st = bt_generate(model, (const int32_t *const *)c->rows, c->row_lens, m * k, &sc, c->keys,
                         &g);
    const bt_generation *gen = episodes ? &ep.g : &g;
    for (int64_t r = 0; r < m * k && st == BT_OK; r++) { /* decode all, then score all at once */
        size_t len = 0;
        const char *text = c->texts + r * c->stride;
        if (episodes) { /* the task scores the last model turn */
            text = ep.final_text[r];
            len = ep.final_len[r];
        } else {
            st = bt_tokenizer_decode(tok, g.tokens + r * M, (size_t)g.lengths[r],
                                     c->texts + r * c->stride, (size_t)c->stride, &len);
        }
        c->items[r] = (bt_reward_item){.index = c->index[r / k],
                                       .prompt = c->prompts[r / k],
                                       .answer = c->answers[r / k],
                                       .completion = text,
                                       .len = len,
                                       .columns = c->columns[r / k]};
    }
    const bt_episode_reward mode = cfg->episode.reward;
    if (st == BT_OK && !(episodes && mode == BT_EPISODE_REWARD_ENV)) {
        st = bt_reward_score(cfg->reward_service, task, "eval", c->items, m * k, c->rewards,
                             c->right);
    } else if (st == BT_OK) { /* env: the environment's return alone, no task score */
        memset(c->rewards, 0, (size_t)(m * k) * sizeof *c->rewards);
        memset(c->right, 0, (size_t)(m * k) * sizeof *c->right);
    }
    for (int64_t r = 0; episodes && r < m * k && st == BT_OK; r++)
        c->rewards[r] =
            bt_episode_reward_of(mode, c->rewards[r], c->right[r], ep.env_return[r], &c->right[r]);
    for (int64_t i = 0; i < m && st == BT_OK; i++) {
        int64_t n_correct = 0;
        const bool *right = c->right + i * k;
        for (int64_t j = 0; j < k; j++) {
            int64_t r = i * k + j;
            int64_t model_tokens = episodes ? s_model_tokens(gen, r) : gen->lengths[r];
            out->generated_tokens += (double)model_tokens;
            if (perturb >= 0) { /* robustness: the first completion's correctness only */
                out->robust_examples[perturb]++;
                out->robust_correct[perturb] += right[j];
                continue;
            }
            out->reward_sum += c->rewards[r];
            out->reward_sumsq += c->rewards[r] * c->rewards[r];
            out->length_sum += (double)model_tokens;
            out->length_hist[model_tokens < BT_EVALUATOR_LEN_BINS ? model_tokens
                                                                  : BT_EVALUATOR_LEN_BINS - 1]++;
            out->truncated += gen->finish[r] == BT_FINISH_LENGTH;
            if (episodes) {
                out->episodes++;
                out->turns_sum += gen->n_turns[r];
                out->tool_calls += ep.tool_calls[r];
                out->tool_errors += ep.tool_errors[r];
                out->tool_episodes += ep.tool_calls[r] > 0;
                out->episode_tokens_sum += gen->lengths[r];
                out->model_tokens_sum += model_tokens;
                out->env_return_sum += ep.env_return[r];
            }
            n_correct += right[j];
            if (j == 0)
                out->correct += right[j];
            size_t vn = bt_source_canonical_answer(task, c->items[r].completion, c->items[r].len,
                                                   c->votes[j], (size_t)M + 64);
            c->votes[j][vn] = '\0';
        }
        if (perturb >= 0)
            continue;
        const char *ballots[BT_EVALUATOR_MAX_SAMPLES];
        for (int64_t j = 0; j < k; j++)
            ballots[j] = c->votes[j][0] ? c->votes[j] : NULL;
        int winner = bt_majority_vote(ballots, (int)k); /* maj@k */
        out->maj_correct += winner >= 0 && right[winner];
        out->correct_hist[n_correct]++;
        out->examples++;
        out->completions += k;
    }
    bt_generation_release(&g);
    bt_episodes_release(&ep);
    return st;
}

static void s_chunk_free(s_chunk *c) {
    for (int64_t i = 0; i < c->cap; i++) {
        if (c->ids)
            free(c->ids[i]);
        if (c->answers)
            free(c->answers[i]);
        if (c->prompts)
            free(c->prompts[i]);
        if (c->columns)
            free(c->columns[i]);
    }
    for (int64_t j = 0; c->votes && j < BT_EVALUATOR_MAX_SAMPLES; j++)
        free(c->votes[j]);
    free(c->ids);
    free(c->lens);
    free(c->index);
    free(c->answers);
    free(c->prompts);
    free(c->columns);
    free(c->rows);
    free(c->row_lens);
    free(c->keys);
    free(c->texts);
    free(c->items);
    free(c->rewards);
    free(c->right);
    free(c->votes);
}

static bt_status s_chunk_alloc(s_chunk *c, int64_t cap, int64_t k, int64_t max_new,
                               const bt_tokenizer_t *tok) {
    *c = (s_chunk){
        .cap = cap, .k = k, .stride = max_new * (int64_t)bt_tokenizer_max_token_bytes(tok) + 1};
    c->ids = calloc((size_t)cap, sizeof *c->ids);
    c->lens = calloc((size_t)cap, sizeof *c->lens);
    c->index = calloc((size_t)cap, sizeof *c->index);
    c->answers = calloc((size_t)cap, sizeof *c->answers);
    c->prompts = calloc((size_t)cap, sizeof *c->prompts);
    c->columns = calloc((size_t)cap, sizeof *c->columns);
    c->rows = calloc((size_t)(cap * k), sizeof *c->rows);
    c->row_lens = calloc((size_t)(cap * k), sizeof *c->row_lens);
    c->keys = calloc((size_t)(cap * k), sizeof *c->keys);
    c->texts = malloc((size_t)(cap * k * c->stride));
    c->items = calloc((size_t)(cap * k), sizeof *c->items);
    c->rewards = calloc((size_t)(cap * k), sizeof *c->rewards);
    c->right = calloc((size_t)(cap * k), sizeof *c->right);
    c->votes = calloc(BT_EVALUATOR_MAX_SAMPLES, sizeof *c->votes);
    bool ok = c->ids && c->lens && c->index && c->answers && c->prompts && c->columns && c->rows &&
              c->row_lens && c->keys && c->texts && c->items && c->rewards && c->right && c->votes;
    for (int64_t j = 0; ok && j < k; j++)
        ok = (c->votes[j] = malloc((size_t)max_new + 64)) != NULL;
    return ok ? BT_OK : bt_fail(BT_ENOMEM, "evaluator: out of memory");
}

/*  One pass over the shard: clean with cfg->samples completions, or one perturbation with one. */
static bt_status s_run_pass(bt_model *model, const bt_tokenizer_t *tok, const bt_source_t *task,
                            const bt_evaluator_config *cfg, uint64_t key, int perturb,
                            bt_evaluator_sums *out) {
    const int64_t k = perturb < 0 ? cfg->samples : 1;
    int64_t per_chunk = cfg->batch / k; /* examples per bt_generate call */
    if (per_chunk > (int64_t)cfg->count)
        per_chunk = (int64_t)cfg->count;
    s_chunk c;
    bt_status st = s_chunk_alloc(&c, per_chunk, k, cfg->max_new_tokens, tok);
    for (size_t first = cfg->start; first < cfg->start + cfg->count && st == BT_OK;
         first += (size_t)per_chunk) {
        size_t left = cfg->start + cfg->count - first;
        int64_t n = left < (size_t)per_chunk ? (int64_t)left : per_chunk;
        st = s_run_chunk(model, tok, task, cfg, key, first, n, perturb, &c, out);
    }
    s_chunk_free(&c);
    return st;
}

bt_status bt_evaluator_run(bt_model *model, const bt_tokenizer_t *tok, const bt_source_t *task,
                           const bt_evaluator_config *cfg, uint64_t key, bt_evaluator_sums *out) {
    BT_ASSERT(model && tok && task && cfg && out);
    bt_evaluator_sums_init(out, cfg->samples);
    bt_status st = s_check_config(cfg, task);
    if (st != BT_OK || cfg->count == 0)
        return st;
    double t0 = bt_now();
    st = s_run_pass(model, tok, task, cfg, key, -1, out);
    for (int p = 0; cfg->robustness && p < BT_PERTURB_COUNT && st == BT_OK; p++)
        st = s_run_pass(model, tok, task, cfg, key, p, out);
    if (st != BT_OK) {
        bt_evaluator_sums_init(out, cfg->samples);
        return st;
    }
    out->compute_s = bt_now() - t0;
    out->peak_rss_mb = bt_evaluator_peak_rss_mb();
    return BT_OK;
}

/* ---- negative log-likelihood ----------------------------------------------------------------- */

/*  lp (n x (T - 1)) = log P(ids[:, t + 1] | ids[:, <= t]) of the padded rows ids (n x T) under
    mask, in one forward pass without autograd. */
static bt_status s_logprobs(bt_model *model, bt_ctx *ctx, const int64_t *ids, const int64_t *mask,
                            int64_t n, int64_t T, float *lp) {
    bt_device dev = bt_model_device(model);
    const int64_t shape[2] = {n, T};
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *tid = bt_from_host(ctx, BT_I64, dev, 2, shape, ids);
    bt_tensor *tmask = bt_from_host(ctx, BT_I64, dev, 2, shape, mask);
    bt_tensor *logp =
        tid && tmask ? bt_model_token_logprobs(model, ctx, tid, tmask, 1.0, NULL) : NULL;
    bt_set_grad_enabled(grad);
    return logp ? bt_to_host(logp, lp, (size_t)(n * (T - 1)) * sizeof *lp) : BT_ETORCH;
}

/*  Items [0, n), n <= BT_EVALUATOR_NLL_CHUNK, in one padded forward pass. */
static bt_status s_nll_chunk(bt_model *model, const bt_tokenizer_t *tok, bt_ctx *ctx,
                             const bt_nll_item *items, int64_t n, double *nll, int64_t *tokens) {
    int32_t *enc[BT_EVALUATOR_NLL_CHUNK] = {0};
    int64_t ctx_len[BT_EVALUATOR_NLL_CHUNK], len[BT_EVALUATOR_NLL_CHUNK], T = 2;
    bt_status st = BT_OK;
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        size_t a = strlen(items[i].context), b = strlen(items[i].continuation), got = 0, more = 0;
        enc[i] = malloc((a + b + 2) * sizeof *enc[i]);
        if (!enc[i]) {
            st = bt_fail(BT_ENOMEM, "evaluator: out of memory");
            break;
        }
        st = bt_tokenizer_encode(tok, items[i].context, a, true, enc[i], a + 1, &got);
        if (st == BT_OK)
            st = bt_tokenizer_encode(tok, items[i].continuation, b, false, enc[i] + got, b, &more);
        if (st == BT_OK && more == 0)
            st = bt_fail(BT_EINVAL, "evaluator: an empty text to score");
        ctx_len[i] = (int64_t)got;
        len[i] = (int64_t)(got + more);
        if (items[i].eos)
            enc[i][len[i]++] = bt_tokenizer_eos(tok);
        T = len[i] > T ? len[i] : T;
    }
    int64_t *ids = st == BT_OK ? calloc((size_t)(n * T), sizeof *ids) : NULL;
    int64_t *mask = st == BT_OK ? calloc((size_t)(n * T), sizeof *mask) : NULL;
    float *lp = st == BT_OK ? malloc((size_t)(n * (T - 1)) * sizeof *lp) : NULL;
    if (st == BT_OK && (!ids || !mask || !lp))
        st = bt_fail(BT_ENOMEM, "evaluator: out of memory");
    for (int64_t i = 0; i < n && st == BT_OK; i++)
        for (int64_t t = 0; t < T; t++) {
            ids[i * T + t] = t < len[i] ? enc[i][t] : bt_tokenizer_pad(tok);
            mask[i * T + t] = t < len[i];
        }
    if (st == BT_OK)
        st = s_logprobs(model, ctx, ids, mask, n, T, lp);
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        double sum = 0.0; /* element t predicts token t + 1 */
        for (int64_t t = ctx_len[i] - 1; t < len[i] - 1; t++)
            sum -= (double)lp[i * (T - 1) + t];
        nll[i] = sum;
        tokens[i] = len[i] - ctx_len[i];
    }
    for (int64_t i = 0; i < n; i++)
        free(enc[i]);
    free(ids);
    free(mask);
    free(lp);
    return st;
}

bt_status bt_evaluator_nll(bt_model *model, const bt_tokenizer_t *tok, const bt_nll_item *items,
                           int64_t n, double *nll, int64_t *tokens) {
    BT_ASSERT(model && tok && (items || n == 0) && n >= 0);
    bt_ctx *ctx = bt_ctx_new();
    if (!ctx)
        return BT_ETORCH;
    bt_status st = BT_OK;
    for (int64_t first = 0; first < n && st == BT_OK; first += BT_EVALUATOR_NLL_CHUNK) {
        int64_t m = n - first < BT_EVALUATOR_NLL_CHUNK ? n - first : BT_EVALUATOR_NLL_CHUNK;
        st = s_nll_chunk(model, tok, ctx, items + first, m, nll + first, tokens + first);
        bt_ctx_reset(ctx);
    }
    bt_ctx_destroy(&ctx);
    return st;
}

/*  Scores items into out's perplexity sums. */
static bt_status s_perplexity(bt_model *model, const bt_tokenizer_t *tok, const bt_nll_item *items,
                              int64_t n, bt_evaluator_sums *out) {
    double *nll = malloc(sizeof *nll * (size_t)(n + 1));
    int64_t *tokens = malloc(sizeof *tokens * (size_t)(n + 1));
    double t0 = bt_now();
    bt_status st = nll && tokens ? bt_evaluator_nll(model, tok, items, n, nll, tokens)
                                 : bt_fail(BT_ENOMEM, "evaluator: out of memory");
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        out->nll_sum += nll[i];
        out->nll_tokens += tokens[i];
        out->texts++;
    }
    out->compute_s += bt_now() - t0;
    out->peak_rss_mb = bt_evaluator_peak_rss_mb();
    free(nll);
    free(tokens);
    return st;
}

bt_status bt_evaluator_perplexity_task(bt_model *model, const bt_tokenizer_t *tok,
                                       const bt_source_t *task, size_t start, size_t count,
                                       bt_evaluator_sums *out) {
    size_t held = bt_source_heldout_count(task);
    if (start > held || count > held - start)
        return bt_fail(BT_EINVAL, "evaluator: examples [%zu, %zu) exceed the %zu held-out ones",
                       start, start + count, held);
    bt_nll_item *items = calloc(count + 1, sizeof *items);
    bt_source_example *ex = calloc(count + 1, sizeof *ex);
    bt_status st = items && ex ? BT_OK : bt_fail(BT_ENOMEM, "evaluator: out of memory");
    for (size_t i = 0; i < count && st == BT_OK; i++) { /* calloc: initialised examples */
        st = bt_source_heldout_example(task, start + i, &ex[i]);
        items[i] =
            (bt_nll_item){.context = ex[i].prompt, .continuation = ex[i].answer, .eos = true};
    }
    if (st == BT_OK)
        st = s_perplexity(model, tok, items, (int64_t)count, out);
    for (size_t i = 0; ex && i < count; i++)
        bt_source_example_release(&ex[i]);
    free(items);
    free(ex);
    return st;
}

/*  One window of a rolling perplexity: its input is seq[start, start + len) of seq = BOS + the
    text's tokens, and its last pred positions are scored (each predicts the id after it). */
typedef struct s_window {
    int64_t start, len, pred;
} s_window;

/*  lm-evaluation-harness's rolling windows (utils.get_rolling_token_windows, with context_len =
    max_len - stride + 1) of a text of n tokens: the first window predicts its first
    min(max_len, n) tokens from BOS on; each next one predicts the next stride (or fewer, at the
    end) with the max_len ids before each as its input.  Writes them into out (room for
    n / stride + 2) and returns how many. */
static int64_t s_windows(int64_t n, int64_t max_len, int64_t stride, s_window *out) {
    int64_t k = 0, first = n < max_len ? n : max_len, predicted = first;
    out[k++] = (s_window){.start = 0, .len = first, .pred = first};
    while (predicted < n) {
        int64_t pred = n - predicted < stride ? n - predicted : stride, end = predicted + pred;
        out[k++] = (s_window){.start = end - max_len, .len = max_len, .pred = pred};
        predicted = end;
    }
    return k;
}

/*  The NLL of seq[1, n] (seq = BOS + a text's n tokens) by rolling windows of max_len ids, rows
    windows per forward pass; *nll summed in float64. */
static bt_status s_nll_rolling(bt_model *model, bt_ctx *ctx, const int32_t *seq, int64_t n,
                               int64_t max_len, int64_t stride, int64_t pad, double *nll) {
    s_window *w = malloc(sizeof *w * (size_t)(n / stride + 2));
    int64_t T = max_len + 1, rows = BT_EVALUATOR_NLL_CHUNK; /* the input and its last target */
    int64_t *ids = calloc((size_t)(rows * T), sizeof *ids), *mask = calloc((size_t)(rows * T), 8);
    float *lp = malloc(sizeof *lp * (size_t)(rows * max_len));
    bt_status st = w && ids && mask && lp ? BT_OK : bt_fail(BT_ENOMEM, "evaluator: out of memory");
    int64_t k = st == BT_OK ? s_windows(n, max_len, stride, w) : 0;
    *nll = 0.0;
    for (int64_t first = 0; first < k && st == BT_OK; first += rows) {
        int64_t m = k - first < rows ? k - first : rows;
        for (int64_t r = 0; r < m; r++)
            for (int64_t t = 0; t < T; t++) {
                bool in = t <= w[first + r].len; /* the window's ids and the target after them */
                ids[r * T + t] = in ? seq[w[first + r].start + t] : pad;
                mask[r * T + t] = in;
            }
        st = s_logprobs(model, ctx, ids, mask, m, T, lp); /* element t predicts id t + 1 */
        for (int64_t r = 0; r < m && st == BT_OK; r++)
            for (int64_t t = w[first + r].len - w[first + r].pred; t < w[first + r].len; t++)
                *nll -= (double)lp[r * max_len + t];
        bt_ctx_reset(ctx);
    }
    free(w);
    free(ids);
    free(mask);
    free(lp);
    return st;
}

/*  Text i's ids (BOS + its tokens) into *seq (caller frees) and its token count into *n. */
static bt_status s_encode_text(const bt_tokenizer_t *tok, const char *text, int32_t **seq,
                               int64_t *n) {
    size_t len = strlen(text), got = 0;
    *seq = malloc((len + 2) * sizeof **seq);
    if (!*seq)
        return bt_fail(BT_ENOMEM, "evaluator: out of memory");
    bt_status st = bt_tokenizer_encode(tok, text, len, true, *seq, len + 1, &got);
    *n = (int64_t)got - 1;
    return st == BT_OK && *n < 1 ? bt_fail(BT_EINVAL, "evaluator: an empty text to score") : st;
}

bt_status bt_evaluator_perplexity_texts(bt_model *model, const bt_tokenizer_t *tok,
                                        const char *const *texts, size_t start, size_t count,
                                        int64_t stride, bt_evaluator_sums *out) {
    int64_t max_len = bt_model_get_config(model)->max_position_embeddings;
    stride = stride > 0 && stride < max_len ? stride : max_len;
    bt_nll_item *items = calloc(BT_EVALUATOR_NLL_CHUNK, sizeof *items);
    bt_ctx *ctx = bt_ctx_new();
    bt_status st = items && ctx ? BT_OK : bt_fail(BT_ENOMEM, "evaluator: out of memory");
    /* texts that fit in one window go in chunks of the indices' multiples of the chunk size (so a
       shard computes each as a single pass does), the longer ones by rolling windows */
    for (size_t at = start; at < start + count && st == BT_OK;) {
        size_t end = (at / BT_EVALUATOR_NLL_CHUNK + 1) * BT_EVALUATOR_NLL_CHUNK;
        end = end < start + count ? end : start + count;
        int64_t n_items = 0;
        for (; at < end && st == BT_OK; at++) {
            int32_t *seq = NULL;
            int64_t n = 0;
            st = s_encode_text(tok, texts[at], &seq, &n);
            if (st == BT_OK && n <= max_len) {
                items[n_items++] = (bt_nll_item){.context = "", .continuation = texts[at]};
            } else if (st == BT_OK) {
                double sum = 0.0, t0 = bt_now();
                st =
                    s_nll_rolling(model, ctx, seq, n, max_len, stride, bt_tokenizer_pad(tok), &sum);
                out->nll_sum += sum;
                out->nll_tokens += n;
                out->texts++;
                out->compute_s += bt_now() - t0;
            }
            free(seq);
        }
        if (st == BT_OK && n_items > 0)
            st = s_perplexity(model, tok, items, n_items, out);
    }
    out->peak_rss_mb = bt_evaluator_peak_rss_mb();
    bt_ctx_destroy(&ctx);
    free(items);
    return st;
}

bt_status bt_evaluator_probes(bt_model *model, const bt_tokenizer_t *tok,
                              const bt_eval_probe *probes, int64_t n, bt_evaluator_sums *out) {
    if (n < 0 || n > BT_EVAL_MAX_PROBES)
        return bt_fail(BT_EINVAL, "evaluator: %lld probes (at most %d)", (long long)n,
                       BT_EVAL_MAX_PROBES);
    bt_nll_item items[2 * BT_EVAL_MAX_PROBES] = {{0}};
    double nll[2 * BT_EVAL_MAX_PROBES];
    int64_t tokens[2 * BT_EVAL_MAX_PROBES];
    for (int64_t i = 0; i < n; i++) {
        const bt_eval_probe *p = &probes[i];
        bool pair = p->better[0] != '\0';
        items[2 * i] = (bt_nll_item){.context = pair ? "" : p->prompt,
                                     .continuation = pair ? p->better : p->target};
        items[2 * i + 1] =
            (bt_nll_item){.context = "", .continuation = pair ? p->worse : p->target};
    }
    double t0 = bt_now();
    BT_TRY(bt_evaluator_nll(model, tok, items, 2 * n, nll, tokens));
    out->n_probes = n;
    for (int64_t i = 0; i < n; i++) {
        bool pair = probes[i].better[0] != '\0';
        out->probe_nll[i][0] = nll[2 * i];
        out->probe_tokens[i][0] = tokens[2 * i];
        out->probe_nll[i][1] = pair ? nll[2 * i + 1] : 0.0;
        out->probe_tokens[i][1] = pair ? tokens[2 * i + 1] : 0;
    }
    out->compute_s += bt_now() - t0;
    out->peak_rss_mb = bt_evaluator_peak_rss_mb();
    return BT_OK;
}

/* ---- texts ------------------------------------------------------------------------------------
 */

bt_status bt_texts_load(const char *path, char ***texts_out, size_t *n_out) {
    *texts_out = NULL;
    *n_out = 0;
    char *data = NULL;
    size_t len = 0;
    BT_TRY(bt_file_read(path, (size_t)1 << 30, &data, &len));
    size_t cap = 0, n = 0, line_no = 0;
    char **texts = NULL, *at = data, *line;
    bt_status st = BT_OK;
    while (st == BT_OK && (line = bt_text_next_line(&at, &line_no))) {
        cJSON *root = cJSON_Parse(line);
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "text"));
        if (!text || !text[0])
            st = bt_fail(BT_EFORMAT, "%s:%zu: expected an object with a non-empty string \"text\"",
                         path, line_no);
        if (st == BT_OK && n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(texts, cap * sizeof *texts);
            st = grown ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", path);
            texts = grown ? grown : texts;
        }
        if (st == BT_OK && !(texts[n++] = strdup(text)))
            st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
        cJSON_Delete(root);
    }
    free(data);
    if (st == BT_OK && n == 0)
        st = bt_fail(BT_EFORMAT, "%s: no texts", path);
    if (st != BT_OK) {
        bt_texts_free(&texts, n);
        return st;
    }
    *texts_out = texts;
    *n_out = n;
    return BT_OK;
}

void bt_texts_free(char ***texts_p, size_t n) {
    if (!texts_p || !*texts_p)
        return;
    for (size_t i = 0; i < n; i++)
        free((*texts_p)[i]);
    free(*texts_p);
    *texts_p = NULL;
}

/* ---- named metrics ----------------------------------------------------------------------------
 */

typedef struct s_metrics {
    bt_eval_metric *out;
    int n, max;
} s_metrics;

static void s_put(s_metrics *m, const char *name, double value) {
    if (m->n < m->max) {
        snprintf(m->out[m->n].name, sizeof m->out[m->n].name, "%s", name);
        m->out[m->n++].value = value;
    }
}

/*  Returns accuracy, the primary metric. */
static double s_metrics_generate(s_metrics *m, const bt_evaluator_sums *s) {
    double acc = s->examples ? (double)s->correct / (double)s->examples : NAN;
    double comp = s->completions ? (double)s->completions : NAN, std = NAN, se = NAN;
    char key[48];
    s_put(m, "examples", (double)s->examples);
    s_put(m, "accuracy", acc);
    bt_mean_std((double)s->correct, (double)s->correct, s->examples, NULL, NULL, &se);
    s_put(m, "accuracy_stderr", se);
    if (s->samples > 1) { /* unbiased pass@k (Chen et al. 2021) at k = 1 and k = samples */
        const int64_t k = s->samples;
        s_put(m, "pass@1", bt_pass_at_k_hist(s->correct_hist, k, 1));
        s_put(m, "pass@1_stderr", bt_pass_at_k_hist_stderr(s->correct_hist, k, 1));
        snprintf(key, sizeof key, "pass@%lld", (long long)k);
        s_put(m, key, bt_pass_at_k_hist(s->correct_hist, k, k));
        snprintf(key, sizeof key, "pass@%lld_stderr", (long long)k);
        s_put(m, key, bt_pass_at_k_hist_stderr(s->correct_hist, k, k));
        snprintf(key, sizeof key, "maj@%lld", (long long)k);
        s_put(m, key, s->examples ? (double)s->maj_correct / (double)s->examples : NAN);
    }
    bt_mean_std(s->reward_sum, s->reward_sumsq, s->completions, NULL, &std, NULL);
    s_put(m, "reward_mean", s->reward_sum / comp);
    s_put(m, "reward_std", std);
    s_put(m, "response_len_mean", s->length_sum / comp);
    int64_t p50 = bt_hist_quantile(s->length_hist, BT_EVALUATOR_LEN_BINS, 0.5);
    int64_t p90 = bt_hist_quantile(s->length_hist, BT_EVALUATOR_LEN_BINS, 0.9);
    s_put(m, "response_len_p50", p50 < 0 ? NAN : (double)p50);
    s_put(m, "response_len_p90", p90 < 0 ? NAN : (double)p90);
    s_put(m, "truncated_frac", (double)s->truncated / comp);
    if (s->episodes > 0) { /* a dataset of episodes: its turns, tools and tokens */
        double eps = (double)s->episodes, turns = (double)s->turns_sum;
        s_put(m, "turns_mean", turns / eps);
        s_put(m, "tool_call_rate", (double)s->tool_calls / turns);
        s_put(m, "tool_error_rate",
              s->tool_calls ? (double)s->tool_errors / (double)s->tool_calls : NAN);
        s_put(m, "tool_episode_frac", (double)s->tool_episodes / eps);
        s_put(m, "tokens_per_episode", (double)s->episode_tokens_sum / eps);
        s_put(m, "env_return_mean", s->env_return_sum / eps);
    }
    for (int p = 0; p < BT_PERTURB_COUNT; p++) {
        if (!s->robust_examples[p])
            continue;
        snprintf(key, sizeof key, "robust.%s",
                 bt_source_perturbation_name((bt_source_perturbation)p));
        s_put(m, key, (double)s->robust_correct[p] / (double)s->robust_examples[p]);
    }
    return acc;
}

/*  Perplexity exp(sum NLL / sum tokens), both sums in float64 over every shard.  Returns minus
    the NLL per token (higher is better). */
static double s_metrics_perplexity(s_metrics *m, const bt_evaluator_sums *s) {
    double nll = s->nll_tokens ? s->nll_sum / (double)s->nll_tokens : NAN;
    s_put(m, "texts", (double)s->texts);
    s_put(m, "tokens", (double)s->nll_tokens);
    s_put(m, "nll_per_token", nll);
    s_put(m, "perplexity", exp(nll));
    return -nll;
}

/*  Returns the fraction of pairs ordered right, or the mean log-prob when there are no pairs. */
static double s_metrics_probes(s_metrics *m, const bt_evaluator_sums *s,
                               const bt_eval_probe *probes, int64_t n_probes) {
    double right = 0, logp = 0;
    int pairs = 0, targets = 0;
    char key[64];
    for (int64_t i = 0; i < s->n_probes && i < n_probes; i++) {
        const bt_eval_probe *p = &probes[i];
        if (p->better[0]) { /* PPL(better) < PPL(worse) <=> mean NLL(better) < mean NLL(worse) */
            double b = s->probe_nll[i][0] / (double)s->probe_tokens[i][0];
            double w = s->probe_nll[i][1] / (double)s->probe_tokens[i][1];
            snprintf(key, sizeof key, "pair.%s.ok", p->name);
            s_put(m, key, b < w);
            snprintf(key, sizeof key, "pair.%s.better_ppl", p->name);
            s_put(m, key, exp(b));
            snprintf(key, sizeof key, "pair.%s.worse_ppl", p->name);
            s_put(m, key, exp(w));
            snprintf(key, sizeof key, "pair.%s.margin",
                     p->name); /* log(PPL(worse) / PPL(better)) */
            s_put(m, key, w - b);
            right += b < w;
            pairs++;
        } else {
            snprintf(key, sizeof key, "probe.%s.logp", p->name);
            s_put(m, key, -s->probe_nll[i][0]);
            logp -= s->probe_nll[i][0];
            targets++;
        }
    }
    if (pairs)
        s_put(m, "pairs_accuracy", right / pairs);
    return pairs ? right / pairs : targets ? logp / targets : NAN;
}

/*  acc and acc_norm with their standard errors (the sample standard deviation over items, as
    lm-evaluation-harness's mean_stderr), the mean probability of the right choice, the expected
    calibration error over the bins of the top probability, and acc and acc_norm of each subject
    of set (NULL: none) that has items.  Returns acc. */
static double s_metrics_choices(s_metrics *m, const bt_evaluator_sums *s,
                                const bt_choice_set *set) {
    double n = (double)s->mc_items, acc = s->mc_correct / n, norm = s->mc_correct_norm / n;
    double ece = 0;
    for (int b = 0; b < BT_CHOICES_BINS; b++)
        ece += fabs(s->mc_bin_conf_fx[b] / BT_CHOICES_FIXED - (double)s->mc_bin_correct[b]);
    s_put(m, "items", n);
    s_put(m, "acc", n > 0 ? acc : NAN);
    s_put(m, "acc_stderr", n > 1 ? sqrt(acc * (1 - acc) / (n - 1)) : NAN);
    s_put(m, "acc_norm", n > 0 ? norm : NAN);
    s_put(m, "acc_norm_stderr", n > 1 ? sqrt(norm * (1 - norm) / (n - 1)) : NAN);
    s_put(m, "prob_right", n > 0 ? s->mc_p_right_fx / BT_CHOICES_FIXED / n : NAN);
    s_put(m, "ece", n > 0 ? ece / n : NAN);
    if (s->mc_shuffled > 0) { /* a memorised order loses accuracy when the order changes */
        double shuffled = (double)s->mc_shuffled_correct / (double)s->mc_shuffled;
        s_put(m, "acc_shuffled", shuffled);
        s_put(m, "contamination_gap", acc - shuffled);
    }
    char key[64];
    for (int k = 0; set && k < bt_choices_subjects(set) && k < BT_CHOICES_SUBJECTS; k++) {
        double items = (double)s->mc_subject_n[k];
        if (items == 0)
            continue;
        const char *name = bt_choices_subject_name(set, k);
        snprintf(key, sizeof key, "subject.%s.items", name);
        s_put(m, key, items);
        snprintf(key, sizeof key, "subject.%s.acc", name);
        s_put(m, key, (double)s->mc_subject_correct[k] / items);
        snprintf(key, sizeof key, "subject.%s.acc_norm", name);
        s_put(m, key, (double)s->mc_subject_correct_norm[k] / items);
    }
    return n > 0 ? acc : NAN;
}

int bt_evaluator_metrics(const bt_evaluator_sums *s, bt_eval_kind kind, const bt_eval_probe *probes,
                         int64_t n_probes, const bt_choice_set *choices, bt_eval_metric *out,
                         int max, double *primary) {
    s_metrics m = {out, 0, max};
    double p = kind == BT_EVAL_GENERATE     ? s_metrics_generate(&m, s)
               : kind == BT_EVAL_PERPLEXITY ? s_metrics_perplexity(&m, s)
               : kind == BT_EVAL_CHOICES    ? s_metrics_choices(&m, s, choices)
                                            : s_metrics_probes(&m, s, probes, n_probes);
    double tokens = s->generated_tokens + (double)s->nll_tokens; /* generated or scored */
    for (int64_t i = 0; i < s->n_probes; i++)
        tokens += (double)(s->probe_tokens[i][0] + s->probe_tokens[i][1]);
    s_put(&m, "tokens_per_s", s->compute_s > 0 ? tokens / s->compute_s : NAN);
    s_put(&m, "peak_rss_mb", s->peak_rss_mb);
    if (primary)
        *primary = p;
    return m.n;
}

/* ---- a run's evaluation suite -----------------------------------------------------------------
 */

/*  The probes with their prompts in the chat template, into s->own_probes (target probes only:
    a pair's texts are scored as they are). */
static bt_status s_template_probes(bt_eval_suite *s, const bt_source_jsonl_config *own) {
    if (!own->chat_template || !own->chat_template[0] || s->n_probes == 0)
        return BT_OK;
    s->own_probes = calloc((size_t)s->n_probes, sizeof *s->own_probes);
    if (!s->own_probes)
        return bt_fail(BT_ENOMEM, "evaluator: out of memory");
    for (int64_t i = 0; i < s->n_probes; i++) {
        s->own_probes[i] = s->probes[i];
        if (s->probes[i].better[0])
            continue;
        char *text = NULL;
        BT_TRY(bt_chat_apply(own->chat_template, own->system_prompt, s->probes[i].prompt, &text));
        size_t len = strlen(text);
        if (len < sizeof s->own_probes[i].prompt)
            memcpy(s->own_probes[i].prompt, text, len + 1);
        free(text);
        if (len >= sizeof s->own_probes[i].prompt)
            return bt_fail(BT_EINVAL,
                           "probe \"%s\": prompt: %zu bytes in the chat template, more than the "
                           "%d a probe holds",
                           s->probes[i].name, len, BT_EVAL_PROBE_MAX - 1);
    }
    s->probes = s->own_probes;
    return BT_OK;
}

/*  The JSONL task of a dataset's file: own's, with the dataset's verifier when it has one. */
static bt_source_jsonl_config s_dataset_jsonl(const bt_source_jsonl_config *own,
                                              const bt_eval_dataset *d, const char *path) {
    bt_source_jsonl_config j = *own;
    j.train_path = j.heldout_path = path;
    if (d->verifier)
        j.verifier = (bt_source_verifier)(d->verifier - 1);
    return j;
}

bt_status bt_eval_suite_load(bt_eval_suite *s, const bt_eval_dataset *datasets, int n_datasets,
                             const bt_eval_probe *probes, int64_t n_probes, const bt_source_t *task,
                             const bt_source_jsonl_config *own) {
    BT_ASSERT(n_datasets >= 0 && n_datasets <= BT_EVAL_MAX_DATASETS);
    *s = (bt_eval_suite){.datasets = datasets,
                         .n_datasets = n_datasets,
                         .probes = probes,
                         .n_probes = n_probes,
                         .listed = probes,
                         .task = task};
    for (int i = 0; i < BT_EVAL_MAX_DATASETS; i++)
        bt_episode_config_init(&s->episode[i]);
    bt_status st = s_template_probes(s, own);
    for (int i = 0; i < n_datasets && st == BT_OK; i++) {
        const bt_eval_dataset *d = &datasets[i];
        if (!d->source[0] || d->kind == BT_EVAL_PROBES || d->data_source >= 0)
            continue; /* a data source's task is the caller's to set (bt_config_eval_suite) */
        if (d->kind == BT_EVAL_PERPLEXITY) {
            st = bt_texts_load(d->source, &s->texts[i], &s->n_texts[i]);
        } else if (d->kind == BT_EVAL_CHOICES) {
            st = bt_choices_load(d->source, &s->choices[i]);
            if (st == BT_OK) /* like a generate dataset's own source */
                st = bt_choices_set_chat(s->choices[i], own->chat_template, own->system_prompt);
        } else {
            bt_source_jsonl_config j = s_dataset_jsonl(own, d, d->source);
            st = bt_source_new_jsonl(&j, &s->own_task[i]);
        }
    }
    if (st != BT_OK)
        bt_eval_suite_release(s);
    return st;
}

void bt_eval_suite_release(bt_eval_suite *s) {
    free(s->own_probes);
    s->own_probes = NULL;
    free(s->own_listed);
    s->own_listed = NULL;
    for (int i = 0; i < BT_EVAL_MAX_DATASETS; i++) {
        bt_source_destroy(&s->own_task[i]);
        bt_source_destroy(&s->fewshot_pool[i]);
        bt_choices_free(&s->choices[i]);
        bt_choices_free(&s->choices_pool[i]);
        bt_texts_free(&s->texts[i], s->n_texts[i]);
        s->n_texts[i] = 0;
    }
}

/*  Dataset i's few-shot prompts, exemplars drawn from run.seed: a generate dataset's own source
    (the run's first, when it evaluates the task's held-out set: the run's task is shared with
    training) gets them from fewshot_source (loaded here, scored like its own source) or its other
    items; a choices dataset's set from fewshot_source (a choices file, loaded here) or its other
    items. */
static bt_status s_fewshot(bt_eval_suite *s, const bt_config *cfg, int i,
                           const bt_source_jsonl_config *own) {
    const bt_eval_dataset *d = &cfg->eval.datasets[i];
    bt_status st;
    if (d->kind == BT_EVAL_CHOICES) {
        if (d->fewshot_source[0])
            BT_TRY(bt_choices_load(d->fewshot_source, &s->choices_pool[i]));
        bt_choices_fewshot f = {.k = d->num_fewshot,
                                .separator = d->fewshot_separator,
                                .pool = s->choices_pool[i],
                                .seed = (uint64_t)cfg->run.seed};
        st = bt_choices_set_fewshot(s->choices[i], &f);
    } else {
        if (!s->own_task[i])
            BT_TRY(bt_config_new_source(cfg, 0, &s->own_task[i], NULL));
        if (d->fewshot_source[0]) {
            bt_source_jsonl_config j = s_dataset_jsonl(own, d, d->fewshot_source);
            BT_TRY(bt_source_new_jsonl(&j, &s->fewshot_pool[i]));
        }
        bt_source_fewshot f = {.k = d->num_fewshot,
                               .separator = d->fewshot_separator,
                               .delimiter = d->fewshot_delimiter,
                               .pool = s->fewshot_pool[i],
                               .seed = (uint64_t)cfg->run.seed};
        st = bt_source_set_fewshot(s->own_task[i], &f);
    }
    if (st == BT_OK)
        return st;
    char why[512];
    snprintf(why, sizeof why, "%s", bt_last_error());
    return bt_fail(st, "eval.datasets[%d].%s", i, why);
}

bt_status bt_config_eval_suite(const bt_config *cfg, const bt_source_t *task, bt_eval_suite *out) {
    bt_source_jsonl_config own;
    bt_config_task_jsonl(cfg, &own); /* its verifier, seed, template and code limits */
    own.train_path = own.heldout_path = NULL;
    bt_eval_probe *probes = NULL; /* eval.probes and the probes_source file's */
    int64_t n_probes = 0;
    BT_TRY(bt_config_probes(cfg, &probes, &n_probes));
    bt_status st = bt_eval_suite_load(out, cfg->eval.datasets, cfg->eval.n_datasets, probes,
                                      n_probes, task, &own);
    if (st != BT_OK) {
        free(probes);
        return st;
    }
    out->own_listed = probes;
    for (int i = 0; i < cfg->eval.n_datasets && st == BT_OK; i++)
        if (cfg->eval.datasets[i].data_source >= 0)
            st = bt_config_new_source(cfg, cfg->eval.datasets[i].data_source, &out->own_task[i],
                                      NULL);
    for (int i = 0; i < cfg->eval.n_datasets && st == BT_OK; i++)
        if (cfg->eval.datasets[i].num_fewshot > 0)
            st = s_fewshot(out, cfg, i, &own);
    if (st != BT_OK)
        bt_eval_suite_release(out);
    return st;
}

void bt_eval_suite_set_episodes(bt_eval_suite *s, const bt_episode_source *sources, int n) {
    for (int i = 0; i < s->n_datasets; i++) {
        int k = s->datasets[i].data_source;
        k = k >= 0 && k < n ? k : 0;
        s->env[i] = sources[k].env;
        s->episode[i] = sources[k].episode;
    }
}

void bt_eval_suite_set_reward_fn(bt_eval_suite *s, bt_reward_fn *fn, void *user) {
    for (int i = 0; i < BT_EVAL_MAX_DATASETS; i++)
        if (s->own_task[i])
            bt_source_set_reward_fn(s->own_task[i], fn, user);
}

size_t bt_eval_suite_size(const bt_eval_suite *s, int i) {
    BT_ASSERT(i >= 0 && i < s->n_datasets);
    const bt_eval_dataset *d = &s->datasets[i];
    size_t size = d->kind == BT_EVAL_PROBES ? (size_t)s->n_probes
                  : s->choices[i]           ? bt_choices_count(s->choices[i])
                  : s->texts[i]             ? s->n_texts[i]
                  : s->own_task[i]          ? bt_source_heldout_count(s->own_task[i])
                                            : bt_source_heldout_count(s->task);
    return d->count > 0 && (size_t)d->count < size ? (size_t)d->count : size;
}

int bt_eval_suite_metrics(const bt_eval_suite *s, int i, const bt_evaluator_sums *sums,
                          bt_eval_metric *out, int max, double *primary) {
    BT_ASSERT(i >= 0 && i < s->n_datasets);
    return bt_evaluator_metrics(sums, s->datasets[i].kind, s->probes, s->n_probes, s->choices[i],
                                out, max, primary);
}

bt_status bt_eval_suite_run(const bt_eval_suite *s, int i, bt_model *model,
                            const bt_tokenizer_t *tok, size_t start, size_t count, bool robustness,
                            uint64_t seed, bt_evaluator_sums *out) {
    BT_ASSERT(i >= 0 && i < s->n_datasets);
    const bt_eval_dataset *d = &s->datasets[i];
    bt_evaluator_sums_init(out, d->samples);
    if (d->kind == BT_EVAL_PROBES)
        return bt_evaluator_probes(model, tok, s->probes, s->n_probes, out);
    if (d->kind == BT_EVAL_CHOICES)
        return bt_choices_run(s->choices[i], model, tok,
                              &(bt_choices_options){.delimiter = d->fewshot_delimiter,
                                                    .letters = d->choices_letters,
                                                    .shuffle = d->shuffle_choices,
                                                    .seed = seed >> BT_JOB_SEED_BITS},
                              start, count, out);
    if (d->kind == BT_EVAL_PERPLEXITY && s->texts[i]) {
        if (start > s->n_texts[i] || count > s->n_texts[i] - start)
            return bt_fail(BT_EINVAL, "evaluator: texts [%zu, %zu) exceed the %zu of %s", start,
                           start + count, s->n_texts[i], d->source);
        return bt_evaluator_perplexity_texts(model, tok, (const char *const *)s->texts[i], start,
                                             count, d->stride, out);
    }
    if (d->kind == BT_EVAL_PERPLEXITY)
        return bt_evaluator_perplexity_task(model, tok, s->task, start, count, out);
    bt_evaluator_config ec;
    bt_evaluator_config_init(&ec);
    ec.start = start;
    ec.count = count;
    ec.samples = d->samples;
    ec.temperature = d->temperature;
    ec.max_new_tokens = d->max_new_tokens;
    ec.robustness = robustness;
    ec.reward_service = d->verifier ? NULL : s->reward_service; /* its own verifier scores */
    ec.env = s->env[i];
    ec.episode = s->episode[i];
    if (ec.batch < d->samples)
        ec.batch = d->samples;
    return bt_evaluator_run(model, tok, s->own_task[i] ? s->own_task[i] : s->task, &ec,
                            seed >> BT_JOB_SEED_BITS, out);
}
