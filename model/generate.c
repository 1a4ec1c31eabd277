/*  generate.c — batched generation (sample.h): the decode-slot engine, and the reference that
    recomputes every sequence whole for every token.

    The engine (docs/architecture.md, "Generation"): sequences wait in a queue in batch order and
    run in a fixed pool of decode slots (bt_kv_cache, preallocated).  A prompt that several
    sequences share (a GRPO group, eval samples) is prefilled once into a prefix store and its keys
    and values copied into each of its sequences' slots when they are admitted; a prompt of one
    sequence is prefilled straight into its slot.  Prefill covers a prompt's tokens but the last,
    which is the slot's first decode input, so every step is the same: each live slot feeds one
    token and samples the next.  A slot whose sequence stops (a stop token, its length limit) takes
    the next queued sequence; once the queue is empty and half the slots are idle, the cache is
    compacted to the live ones.  Per step the host builds the slots' ids, positions and draws (one
    value each) and reads back the sampled ids and log-probs: nothing that grows with the
    sequences.  A sequence's draws are keyed by (its key, its step), and its computation is its
    own rows' (attention within its slot), so its tokens do not depend on its slot or its company.
 */
#include "baton/rng.h"
#include "baton/sample.h"

#include <stdlib.h>
#include <string.h>

#define S_PREFIX_MAX 64 /* shared prompts held for admission at once */

/* ---- what a call shares ------------------------------------------------------------------- */

typedef struct s_call {
    bt_model *model;
    const bt_sample_config *cfg;
    const int32_t *const *prompts;
    const int64_t *prompt_lens;
    int64_t B;
    const uint64_t *keys; /* (B) or NULL when greedy */
    int32_t pad;
    int32_t stops[BT_SAMPLE_MAX_STOPS];
    int n_stops;
    int64_t longest; /* prompt */
    int64_t width;   /* a row's ids: max_new_tokens, or an episode's width */
    /* episodes (bt_generate_episodes); ops NULL: one turn per row */
    const bt_turn_ops *ops;
    int64_t max_turns;
    int64_t lag; /* decode steps from a turn's end to its answer's use; 0: synchronous turns */
    int64_t *turn_start; /* (B) the column the row's current turn began at */
} s_call;

static bool s_is_stop(const s_call *c, int64_t tok) {
    for (int i = 0; i < c->n_stops; i++)
        if (tok == c->stops[i])
            return true;
    return false;
}

static int64_t s_limit(const s_call *c, int64_t b) {
    const int64_t *each = c->cfg->max_new_each;
    return each && each[b] < c->cfg->max_new_tokens ? each[b] : c->cfg->max_new_tokens;
}

/*  What a recorded token leaves its row to do. */
typedef enum s_next { S_GO, S_TURN, S_END } s_next;

/*  Records token (log-prob lp) as row b's next id (step s of its current turn) in out; sets
    out->finish[b] when the turn ends: S_TURN (its turn, a row of episodes), S_END (the row). */
static s_next s_record(const s_call *c, bt_generation *out, int64_t b, int64_t s, int64_t tok,
                       float lp) {
    int64_t col = c->ops ? c->turn_start[b] + s : s, W = out->max_new_tokens;
    out->tokens[b * W + col] = (int32_t)tok;
    out->logprobs[b * W + col] = lp;
    out->lengths[b] = col + 1;
    if (c->ops) {
        out->loss_mask[b * W + col] = 1;
        out->turn[b * W + col] = (uint8_t)out->n_turns[b];
    }
    if (s_is_stop(c, tok)) {
        out->finish[b] = BT_FINISH_EOS;
        return S_END;
    }
    out->finish[b] = BT_FINISH_LENGTH;
    if (col + 1 >= W)
        return S_END;
    if (s + 1 >= s_limit(c, b))
        return c->ops ? S_TURN : S_END;
    const int64_t start = c->ops ? c->turn_start[b] : 0;
    if (c->ops && c->ops->turn_ends &&
        c->ops->turn_ends(c->ops->user, b, out->tokens + b * W + start, col + 1 - start)) {
        out->finish[b] = BT_FINISH_STOP;
        return S_TURN;
    }
    return S_GO;
}

/*  The key of row b's draws in its current turn: keys[b] for the first (bt_generate's), then
    bt_rng_key(keys[b], turn). */
static uint64_t s_turn_key(const s_call *c, const bt_generation *out, int64_t b) {
    int64_t t = c->ops ? out->n_turns[b] : 0;
    return t == 0 ? c->keys[b] : bt_rng_key(c->keys[b], (uint64_t)t);
}

/* ---- the engine --------------------------------------------------------------------------- */

typedef struct s_prompt {
    int64_t first;   /* the first sequence with these tokens: its prompt row */
    int64_t users;   /* sequences with them */
    int64_t pending; /* of those, not yet admitted */
    int64_t prefix;  /* its prefix-store slot, or -1 */
} s_prompt;

typedef struct s_engine {
    s_call *c;
    bt_generation *out;
    int64_t U;           /* distinct prompts */
    int64_t *prompt_of;  /* (B) sequence -> distinct prompt */
    s_prompt *up;        /* (U) */
    bt_kv_cache *slots;  /* decode slots */
    int64_t S;           /* slots now (compaction lowers it) */
    int64_t *seq;        /* (S) sequence in the slot, -1: free */
    int64_t *step;       /* (S) tokens it has sampled */
    int64_t *input;      /* (S) the token it feeds next */
    bool *active;        /* (S) decoding */
    bool *waiting;       /* (S) holding a row of episodes that awaits the environment */
    int64_t *slot_of;    /* (B) episodes: the slot a row holds, -1: none */
    int64_t now;         /* episodes: decode steps so far (the interleaving's clock) */
    int64_t *due;        /* (S) the step a waiting slot's answer is used at */
    bool *answered;      /* (B) a waiting row's answer is in: its ids past the row's length */
    bool *ans_done;      /* (B) and whether it ends the episode */
    int64_t *ans_n;      /* (B) and its observation's ids */
    double *u;           /* (S) this step's draws */
    int64_t *tok;        /* (S) host copies of the sampled ids */
    float *lp;           /* (S) and log-probs */
    bt_kv_cache *prefix; /* shared prompts, NULL when none is shared */
    int64_t P;
    int64_t *prefix_prompt;   /* (P) the prompt a prefix slot holds, -1: free */
    int64_t next;             /* next sequence to admit */
    int64_t round;            /* admissions so far */
    int64_t *mark;            /* (U) the last admission a prompt is needed by */
    int64_t *pre_us, *pre_at; /* (P) scratch of a prefill into the prefix store */
} s_engine;

static uint64_t s_hash(const int32_t *ids, int64_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)ids[i]) * 1099511628211ULL;
    return h;
}

/*  Groups the sequences by prompt (equal lengths and tokens) into e->up. */
static bt_status s_distinct(s_engine *e) {
    const s_call *c = e->c;
    int64_t cap = 16;
    while (cap < 2 * c->B)
        cap *= 2;
    int64_t *table = malloc((size_t)cap * sizeof *table); /* distinct prompt, -1: empty */
    if (!table)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    for (int64_t i = 0; i < cap; i++)
        table[i] = -1;
    for (int64_t b = 0; b < c->B; b++) {
        int64_t n = c->prompt_lens[b];
        uint64_t at = s_hash(c->prompts[b], n) & (uint64_t)(cap - 1);
        for (;; at = (at + 1) & (uint64_t)(cap - 1)) {
            int64_t u = table[at];
            if (u < 0) { /* a new prompt */
                table[at] = u = e->U++;
                e->up[u] = (s_prompt){.first = b, .prefix = -1};
            } else {
                int64_t f = e->up[u].first;
                if (c->prompt_lens[f] != n ||
                    memcmp(c->prompts[f], c->prompts[b], (size_t)n * sizeof *c->prompts[b]))
                    continue;
            }
            e->prompt_of[b] = u;
            e->up[u].users++;
            e->up[u].pending++;
            break;
        }
    }
    free(table);
    return BT_OK;
}

/*  Prefills prompts us[0..n) (all but their last token) into cache slots at[0..n); a prompt of
    one token holds nothing before its first decode step. */
static bt_status s_prefill(s_engine *e, bt_ctx *ctx, bt_kv_cache *cache, const int64_t *us,
                           const int64_t *at, int64_t n) {
    const s_call *c = e->c;
    int64_t T = 0, rows = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = c->prompt_lens[e->up[us[i]].first] - 1;
        T = len > T ? len : T;
        if (len == 0)
            bt_kv_cache_clear(cache, at[i]);
    }
    if (T == 0)
        return BT_OK;
    int64_t *ids = malloc((size_t)(n * T + 2 * n) * sizeof *ids);
    if (!ids)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    int64_t *lens = ids + n * T, *slots = lens + n;
    for (int64_t i = 0; i < n; i++) {
        int64_t f = e->up[us[i]].first, len = c->prompt_lens[f] - 1;
        if (len == 0)
            continue;
        for (int64_t t = 0; t < T; t++)
            ids[rows * T + t] = t < len ? c->prompts[f][t] : c->pad;
        lens[rows] = len;
        slots[rows++] = at[i];
    }
    const int64_t shape[] = {rows, T};
    bt_tensor *t = bt_from_host(ctx, BT_I64, bt_model_device(c->model), 2, shape, ids);
    bt_status st = bt_model_prefill(c->model, cache, ctx, t, lens, slots) ? BT_OK : BT_ETORCH;
    free(ids);
    bt_ctx_reset(ctx);
    return st;
}

/*  A prefix slot for a prompt: a free one, else one whose prompt has no sequence left to admit,
    else (ahead false) any whose prompt this admission does not need: that prompt is prefilled
    again when its sequences come.  -1 when there is none. */
static int64_t s_prefix_slot(s_engine *e, bool ahead) {
    int64_t spare = -1;
    for (int64_t p = 0; p < e->P; p++) {
        int64_t u = e->prefix_prompt[p];
        if (u < 0)
            return p;
        if (e->mark[u] == e->round)
            continue;
        if (e->up[u].pending == 0) {
            e->up[u].prefix = -1;
            e->prefix_prompt[p] = -1;
            return p;
        }
        spare = spare < 0 ? p : spare;
    }
    if (spare >= 0 && !ahead) {
        e->up[e->prefix_prompt[spare]].prefix = -1;
        e->prefix_prompt[spare] = -1;
    }
    return ahead ? -1 : spare;
}

/*  Makes every shared prompt of sequences [from, to) resident in the prefix store, with one
    prefill of those missing (and of the shared prompts queued next, while slots are free). */
static bt_status s_prefix_ready(s_engine *e, bt_ctx *ctx, int64_t from, int64_t to) {
    int64_t *us = e->pre_us, *at = e->pre_at, n = 0;
    e->round++;
    for (int64_t b = from; b < to; b++)
        e->mark[e->prompt_of[b]] = e->round;
    for (int64_t b = from; b < e->c->B && n < e->P; b++) {
        int64_t u = e->prompt_of[b];
        if (e->up[u].users < 2 || e->up[u].prefix >= 0)
            continue;
        int64_t p = s_prefix_slot(e, b >= to); /* ahead of need: a free or spent slot only */
        if (p < 0 && b >= to)
            break;
        BT_ASSERT(p >= 0); /* P >= one admission's shared prompts, which are kept */
        e->mark[u] = e->round;
        e->prefix_prompt[p] = u;
        e->up[u].prefix = p;
        us[n] = u;
        at[n++] = p;
        e->out->prefill_tokens += e->c->prompt_lens[e->up[u].first] - 1;
    }
    return n ? s_prefill(e, ctx, e->prefix, us, at, n) : BT_OK;
}

/*  Fills free slots with queued sequences: shared prompts copied from the prefix store, the others
    prefilled into their slots. */
static bt_status s_admit(s_engine *e, bt_ctx *ctx) {
    const s_call *c = e->c;
    int64_t from = e->next, n_new = 0;
    for (int64_t s = 0; s < e->S && e->next < c->B; s++)
        if (e->seq[s] < 0) {
            e->seq[s] = e->next++;
            n_new++;
        }
    if (n_new == 0)
        return BT_OK;
    if (e->prefix)
        BT_TRY(s_prefix_ready(e, ctx, from, e->next));
    int64_t *us = malloc((size_t)(2 * n_new) * sizeof *us), *at = us ? us + n_new : NULL, n = 0;
    if (!us)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    bt_status st = BT_OK;
    for (int64_t s = 0; s < e->S && st == BT_OK; s++) {
        int64_t b = e->seq[s];
        if (b < from || e->active[s])
            continue;
        s_prompt *p = &e->up[e->prompt_of[b]];
        if (p->users == 1) { /* its own prompt: prefilled below, with the others like it */
            us[n] = e->prompt_of[b];
            at[n++] = s;
            e->out->prefill_tokens += c->prompt_lens[b] - 1;
        } else {
            st = bt_kv_cache_copy(e->slots, ctx, &s, 1, e->prefix, p->prefix);
        }
        p->pending--;
        e->active[s] = true;
        e->step[s] = 0;
        if (e->slot_of)
            e->slot_of[b] = s;
        e->input[s] = c->prompts[b][c->prompt_lens[b] - 1];
    }
    bt_ctx_reset(ctx);
    if (st == BT_OK && n)
        st = s_prefill(e, ctx, e->slots, us, at, n);
    free(us);
    return st;
}

/*  With the queue empty and half the slots idle, keeps only the held ones (decoding, or awaiting
    the environment with their caches). */
static bt_status s_compact(s_engine *e) {
    int64_t held = 0;
    for (int64_t s = 0; s < e->S; s++)
        held += e->active[s] || e->waiting[s];
    if (e->next < e->c->B || held == 0 || 2 * held > e->S)
        return BT_OK;
    int64_t *keep = malloc((size_t)held * sizeof *keep), k = 0;
    if (!keep)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    for (int64_t s = 0; s < e->S; s++)
        if (e->active[s] || e->waiting[s])
            keep[k++] = s;
    bt_status st = bt_kv_cache_compact(e->slots, e->c->model, keep, held);
    for (int64_t i = 0; st == BT_OK && i < held; i++) { /* keep[i] >= i: move down in place */
        e->seq[i] = e->seq[keep[i]];
        e->step[i] = e->step[keep[i]];
        e->input[i] = e->input[keep[i]];
        e->active[i] = e->active[keep[i]];
        e->waiting[i] = e->waiting[keep[i]];
        if (e->due)
            e->due[i] = e->due[keep[i]];
        if (e->slot_of)
            e->slot_of[e->seq[i]] = i;
    }
    if (st == BT_OK)
        e->S = held;
    free(keep);
    return st;
}

/*  Slot s's row is over: the slot is free for the next. */
static void s_free_slot(s_engine *e, int64_t s) {
    if (e->slot_of)
        e->slot_of[e->seq[s]] = -1;
    e->active[s] = false;
    e->waiting[s] = false;
    e->seq[s] = -1;
    bt_kv_cache_clear(e->slots, s);
}

/*  Row b of slot s ended its turn (S_TURN) or itself (S_END): the environment hears of it, and
    the row waits for its answer unless this was its last turn. */
static bt_status s_turn_over(s_engine *e, int64_t s, s_next next) {
    const s_call *c = e->c;
    bt_generation *out = e->out;
    int64_t b = e->seq[s], t = out->n_turns[b], start = c->turn_start[b];
    bool last = next == S_END || t + 1 >= c->max_turns;
    bt_status st = c->ops->ended(c->ops->user, b, t, out->tokens + b * out->max_new_tokens + start,
                                 out->lengths[b] - start, out->finish[b], last);
    if (last) {
        out->n_turns[b] = t + 1;
        s_free_slot(e, s);
    } else {
        e->active[s] = false;
        e->waiting[s] = true; /* input[s], its newest id, is fed with the observation */
        e->due[s] = e->now + c->lag;
        e->answered[b] = false;
    }
    return st;
}

/*  One decode step of every live slot; finished sequences free their slots. */
static bt_status s_decode(s_engine *e, bt_ctx *ctx) {
    const s_call *c = e->c;
    bt_tensor *logits = bt_model_decode(c->model, e->slots, ctx, e->input, e->active);
    if (!logits)
        return BT_ETORCH;
    for (int64_t s = 0; s < e->S; s++)
        e->u[s] =
            c->keys && e->active[s]
                ? bt_rng_uniform(bt_rng_key(s_turn_key(c, e->out, e->seq[s]), (uint64_t)e->step[s]))
                : 0.5;
    bt_tensor *tokens = NULL, *logprobs = NULL;
    BT_TRY(bt_sample_next(ctx, logits, c->cfg, c->keys ? e->u : NULL, &tokens, &logprobs));
    BT_TRY(bt_to_host(tokens, e->tok, (size_t)e->S * sizeof *e->tok));
    BT_TRY(bt_to_host(logprobs, e->lp, (size_t)e->S * sizeof *e->lp));
    e->out->decode_steps++;
    bt_status st = BT_OK;
    for (int64_t s = 0; s < e->S && st == BT_OK; s++) {
        if (!e->active[s])
            continue;
        e->out->slot_steps++;
        s_next next = s_record(c, e->out, e->seq[s], e->step[s], e->tok[s], e->lp[s]);
        e->input[s] = e->tok[s];
        e->step[s]++;
        if (next != S_GO && c->ops)
            st = s_turn_over(e, s, next);
        else if (next != S_GO)
            s_free_slot(e, s);
    }
    return st;
}

/*  Observations of n rows (rows[i] in slot slots[i], its observation the n_ids[i] ids at the
    row's end) fed to their caches: the turn's newest id and each observation's ids but the last,
    which is the slot's next decode input, in one bt_model_extend call per length. */
static bt_status s_feed(s_engine *e, bt_ctx *ctx, const int64_t *rows, const int64_t *slots,
                        const int64_t *n_ids, int64_t n) {
    const s_call *c = e->c;
    const bt_generation *out = e->out;
    const int64_t W = out->max_new_tokens;
    int64_t longest = 0;
    for (int64_t i = 0; i < n; i++)
        longest = n_ids[i] > longest ? n_ids[i] : longest;
    int64_t *ids = malloc((size_t)(n * longest + n + 1) * sizeof *ids), *at = ids + n * longest;
    if (!ids)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    bt_status st = BT_OK;
    for (int64_t T = 1; T <= longest && st == BT_OK; T++) { /* T fed ids: n_ids of them */
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++) {
            if (n_ids[i] != T)
                continue;
            const int32_t *obs = out->tokens + rows[i] * W + out->lengths[rows[i]] - T;
            ids[k * T] = e->input[slots[i]]; /* the turn's newest id, not yet fed */
            for (int64_t t = 1; t < T; t++)
                ids[k * T + t] = obs[t - 1];
            at[k++] = slots[i];
        }
        if (k == 0)
            continue;
        const int64_t shape[] = {k, T};
        bt_tensor *t = bt_from_host(ctx, BT_I64, bt_model_device(c->model), 2, shape, ids);
        st = bt_model_extend(c->model, e->slots, ctx, t, at) ? BT_OK : BT_ETORCH;
        e->out->prefill_tokens += k * T;
        bt_ctx_reset(ctx);
    }
    for (int64_t i = 0; i < n && st == BT_OK; i++) /* an observation's last id decodes next */
        e->input[slots[i]] = out->tokens[rows[i] * W + out->lengths[rows[i]] - 1];
    free(ids);
    return st;
}

/*  Takes the environment's answers (waiting for one when wait): each is kept with its row (its
    observation's ids past the row's length, where they fit) until the row's due step. */
static bt_status s_collect(s_engine *e, bool wait) {
    const s_call *c = e->c;
    bt_generation *out = e->out;
    const int64_t W = out->max_new_tokens;
    int64_t waiting = 0;
    for (int64_t s = 0; s < e->S; s++)
        waiting += e->waiting[s];
    if (waiting == 0)
        return BT_OK;
    bt_turn_answer *got = malloc((size_t)waiting * sizeof *got);
    int64_t n = 0;
    bt_status st = got ? c->ops->answers(c->ops->user, wait, got, waiting, &n)
                       : bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    if (st == BT_OK && (n < 0 || n > waiting || (wait && n == 0)))
        st = bt_fail(BT_ESTATE, "bt_generate_episodes: %lld answers for %lld waiting rows%s",
                     (long long)n, (long long)waiting, wait ? " (asked to wait for one)" : "");
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        int64_t b = got[i].row, s = b >= 0 && b < c->B ? e->slot_of[b] : -1;
        if (s < 0 || !e->waiting[s] || e->answered[b]) {
            st = bt_fail(BT_ESTATE,
                         "bt_generate_episodes: an answer for row %lld, which does not "
                         "await one",
                         (long long)b);
            break;
        }
        int64_t len = out->lengths[b], n_obs = got[i].n_ids < 0 ? 0 : got[i].n_ids;
        e->answered[b] = true;
        e->ans_done[b] = got[i].done;
        e->ans_n[b] = n_obs;
        for (int64_t j = 0; !got[i].done && len + n_obs < W && j < n_obs; j++)
            out->tokens[b * W + len + j] = got[i].ids[j];
    }
    free(got);
    return st;
}

/*  The waiting rows whose answers are due (synchronous turns: all of them once none decodes;
    interleaved: those whose turn ended lag steps ago), waiting for their answers: each ends
    (done, or no room left for a model id) or gets its observation and starts its next turn, in
    slot order.  Which rows and when depend on the decode steps alone, never on when the
    environment answered, so the run is the same however fast it is. */
static bt_status s_due(s_engine *e, bt_ctx *ctx) {
    const s_call *c = e->c;
    bt_generation *out = e->out;
    const int64_t W = out->max_new_tokens;
    int64_t live = 0, waiting = 0, n = 0, fed = 0;
    for (int64_t s = 0; s < e->S; s++) {
        live += e->active[s];
        waiting += e->waiting[s];
    }
    if (waiting == 0) /* nothing to do: the usual decode step allocates nothing here */
        return BT_OK;
    int64_t *rows = malloc((size_t)(3 * e->S) * sizeof *rows), *slots = rows + e->S,
            *n_ids = slots + e->S;
    if (!rows)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    for (int64_t s = 0; s < e->S; s++)
        if (e->waiting[s] && (c->lag == 0 ? live == 0 : e->due[s] <= e->now))
            slots[n++] = s;
    bt_status st = BT_OK;
    for (bool missing = true; missing && st == BT_OK;) { /* the due answers, all of them */
        missing = false;
        for (int64_t i = 0; i < n && !missing; i++)
            missing = !e->answered[e->seq[slots[i]]];
        if (missing)
            st = s_collect(e, true);
    }
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        int64_t s = slots[i], b = e->seq[s], len = out->lengths[b], n_obs = e->ans_n[b];
        if (e->ans_done[b] || len + n_obs >= W) { /* over: no room for a model id */
            out->finish[b] = e->ans_done[b] ? BT_FINISH_DONE : BT_FINISH_LENGTH;
            out->n_turns[b]++;
            s_free_slot(e, s);
            continue;
        }
        for (int64_t j = len; j < len + n_obs; j++) { /* the ids s_collect put there */
            out->logprobs[b * W + j] = 0;
            out->loss_mask[b * W + j] = 0;
            out->turn[b * W + j] = (uint8_t)out->n_turns[b];
        }
        out->lengths[b] = len + n_obs;
        out->n_turns[b]++;
        c->turn_start[b] = len + n_obs;
        e->step[s] = 0;
        e->waiting[s] = false;
        e->active[s] = true;
        rows[fed] = b;
        slots[fed] = s;
        n_ids[fed++] = n_obs;
    }
    if (st == BT_OK && fed)
        st = s_feed(e, ctx, rows, slots, n_ids, fed);
    free(rows);
    return st;
}

static void s_engine_release(s_engine *e) {
    bt_kv_cache_destroy(&e->slots);
    bt_kv_cache_destroy(&e->prefix);
    free(e->prompt_of);
    free(e->up);
    free(e->seq);
    free(e->step);
    free(e->input);
    free(e->active);
    free(e->waiting);
    free(e->slot_of);
    free(e->due);
    free(e->answered);
    free(e->ans_done);
    free(e->ans_n);
    free(e->u);
    free(e->tok);
    free(e->lp);
    free(e->prefix_prompt);
    free(e->mark);
    free(e->pre_us);
    free(e->pre_at);
}

static bt_status s_engine_run(s_call *c, bt_generation *out) {
    int64_t B = c->B, S = c->cfg->slots > 0 && c->cfg->slots < B ? c->cfg->slots : B;
    s_engine e = {.c = c, .out = out, .S = S};
    e.prompt_of = malloc((size_t)B * sizeof *e.prompt_of);
    e.up = malloc((size_t)B * sizeof *e.up);
    e.seq = malloc((size_t)S * sizeof *e.seq);
    e.step = calloc((size_t)S, sizeof *e.step);
    e.input = calloc((size_t)S, sizeof *e.input);
    e.active = calloc((size_t)S, sizeof *e.active);
    e.waiting = calloc((size_t)S, sizeof *e.waiting);
    e.slot_of = c->ops ? malloc((size_t)B * sizeof *e.slot_of) : NULL;
    e.due = c->ops ? calloc((size_t)S, sizeof *e.due) : NULL;
    e.answered = c->ops ? calloc((size_t)B, sizeof *e.answered) : NULL;
    e.ans_done = c->ops ? calloc((size_t)B, sizeof *e.ans_done) : NULL;
    e.ans_n = c->ops ? calloc((size_t)B, sizeof *e.ans_n) : NULL;
    e.u = calloc((size_t)S, sizeof *e.u);
    e.tok = calloc((size_t)S, sizeof *e.tok);
    e.lp = calloc((size_t)S, sizeof *e.lp);
    e.mark = calloc((size_t)B, sizeof *e.mark);
    bt_ctx *ctx = bt_ctx_new();
    bt_status st =
        e.prompt_of && e.up && e.seq && e.step && e.input && e.active && e.waiting &&
                (!c->ops || (e.slot_of && e.due && e.answered && e.ans_done && e.ans_n)) && e.u &&
                e.tok && e.lp && e.mark && ctx
            ? s_distinct(&e)
            : bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    for (int64_t s = 0; st == BT_OK && s < S; s++)
        e.seq[s] = -1;
    for (int64_t b = 0; st == BT_OK && c->ops && b < B; b++)
        e.slot_of[b] = -1;
    int64_t width = c->longest + c->width - 1, shared = 0;
    for (int64_t u = 0; u < e.U; u++)
        shared += e.up[u].users > 1;
    if (st == BT_OK) {
        e.slots = bt_kv_cache_new(c->model, S, width);
        st = e.slots ? BT_OK : BT_ENOMEM;
    }
    if (st == BT_OK && shared > 0) {
        /* S_PREFIX_MAX, but never fewer than one admission's shared prompts (min(S, shared)) */
        int64_t most = shared < S_PREFIX_MAX ? shared : S_PREFIX_MAX,
                need = S < shared ? S : shared;
        e.P = most > need ? most : need;
        e.prefix = bt_kv_cache_new(c->model, e.P, c->longest);
        e.prefix_prompt = malloc((size_t)e.P * sizeof *e.prefix_prompt);
        e.pre_us = malloc((size_t)e.P * sizeof *e.pre_us);
        e.pre_at = malloc((size_t)e.P * sizeof *e.pre_at);
        st = e.prefix && e.prefix_prompt && e.pre_us && e.pre_at
                 ? BT_OK
                 : bt_fail(BT_ENOMEM, "bt_generate: out of memory");
        for (int64_t p = 0; st == BT_OK && p < e.P; p++)
            e.prefix_prompt[p] = -1;
    }
    if (st == BT_OK) /* preallocated, and compaction only shrinks it: the peak is now */
        out->peak_kv_bytes =
            bt_kv_cache_bytes(e.slots) + (e.prefix ? bt_kv_cache_bytes(e.prefix) : 0);
    while (st == BT_OK) {
        st = s_admit(&e, ctx);
        if (st == BT_OK && c->ops)
            st = s_collect(&e, false);
        if (st == BT_OK && c->ops)
            st = s_due(&e, ctx);
        if (st == BT_OK && c->ops) /* the slots of episodes that just ended */
            st = s_admit(&e, ctx);
        int64_t live = 0, next = INT64_MAX;
        for (int64_t s = 0; s < e.S; s++) {
            live += e.active[s];
            if (e.waiting[s] && e.due[s] < next)
                next = e.due[s];
        }
        if (st == BT_OK && live == 0 && next != INT64_MAX) { /* all wait: to the first due */
            e.now = next > e.now ? next : e.now;
            continue;
        }
        if (st != BT_OK || live == 0)
            break;
        st = s_compact(&e);
        if (st == BT_OK)
            st = s_decode(&e, ctx);
        e.now++;
        bt_ctx_reset(ctx);
    }
    if (e.slots)
        out->columns_read = bt_kv_cache_columns_read(e.slots);
    bt_ctx_destroy(&ctx);
    s_engine_release(&e);
    return st;
}

/* ---- the reference: the whole sequence recomputed for every token ---------------------------- */

/*  Left-padded rows (B, width) on the host: the prompts, then the tokens sampled. */
static bt_status s_reference_run(s_call *c, bt_generation *out) {
    int64_t B = c->B, M = c->cfg->max_new_tokens, Tp = c->longest, width = Tp + M;
    int64_t *ids = malloc((size_t)(B * width) * sizeof *ids);
    int64_t *mask = calloc((size_t)(B * width), sizeof *mask);
    bool *done = calloc((size_t)B, sizeof *done);
    double *u = calloc((size_t)B, sizeof *u);
    int64_t *tok = malloc((size_t)B * sizeof *tok);
    float *lp = malloc((size_t)B * sizeof *lp);
    bt_ctx *ctx = bt_ctx_new();
    bt_status st = ids && mask && done && u && tok && lp && ctx
                       ? BT_OK
                       : bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    for (int64_t b = 0; st == BT_OK && b < B; b++) {
        int64_t start = Tp - c->prompt_lens[b];
        for (int64_t t = 0; t < width; t++) {
            bool real = t >= start && t < Tp;
            ids[b * width + t] = real ? c->prompts[b][t - start] : c->pad;
            mask[b * width + t] = real;
        }
    }
    const int64_t shape[] = {B, width}, last[] = {B, -1};
    bt_device dev = bt_model_device(c->model);
    bool all_done = false;
    for (int64_t s = 0; s < M && !all_done && st == BT_OK; s++) {
        bt_tensor *t_ids =
            bt_slice(ctx, bt_from_host(ctx, BT_I64, dev, 2, shape, ids), 1, 0, Tp + s, 1);
        bt_tensor *t_mask =
            bt_slice(ctx, bt_from_host(ctx, BT_I64, dev, 2, shape, mask), 1, 0, Tp + s, 1);
        bt_tensor *logits = bt_model_forward(c->model, ctx, t_ids, t_mask); /* (B, Tp + s, V) */
        logits = bt_reshape(ctx, bt_slice(ctx, logits, 1, Tp + s - 1, Tp + s, 1), 2, last);
        for (int64_t b = 0; c->keys && b < B; b++)
            u[b] = bt_rng_uniform(bt_rng_key(c->keys[b], (uint64_t)s));
        bt_tensor *tokens = NULL, *logprobs = NULL;
        st = bt_sample_next(ctx, logits, c->cfg, c->keys ? u : NULL, &tokens, &logprobs);
        if (st == BT_OK)
            st = bt_to_host(tokens, tok, (size_t)B * sizeof *tok);
        if (st == BT_OK)
            st = bt_to_host(logprobs, lp, (size_t)B * sizeof *lp);
        all_done = true;
        for (int64_t b = 0; b < B && st == BT_OK; b++) {
            int64_t col = b * width + Tp + s;
            ids[col] = done[b] ? c->pad : tok[b];
            mask[col] = !done[b];
            if (!done[b])
                done[b] = s_record(c, out, b, s, tok[b], lp[b]) != S_GO;
            all_done = all_done && done[b];
        }
        out->decode_steps++;
        out->slot_steps += B;
        bt_ctx_reset(ctx);
    }
    out->prefill_tokens = B * Tp;
    bt_ctx_destroy(&ctx);
    free(ids);
    free(mask);
    free(done);
    free(u);
    free(tok);
    free(lp);
    return st;
}

/* ---- bt_generate ------------------------------------------------------------------------------
 */

static bt_status s_check_prompts(const s_call *c, int64_t *longest) {
    const bt_model_config *mc = bt_model_get_config(c->model);
    const bt_sample_config *cfg = c->cfg;
    if (c->B < 1 || cfg->max_new_tokens < 1)
        return bt_fail(BT_EINVAL,
                       "bt_generate: need batch >= 1 and max_new_tokens >= 1, got %lld "
                       "and %lld",
                       (long long)c->B, (long long)cfg->max_new_tokens);
    if (cfg->slots < 0)
        return bt_fail(BT_EINVAL, "bt_generate: slots: expected an integer >= 0, got %lld",
                       (long long)cfg->slots);
    *longest = 0;
    for (int64_t b = 0; b < c->B; b++) {
        if (c->prompt_lens[b] < 1)
            return bt_fail(BT_EINVAL, "bt_generate: prompt %lld is empty", (long long)b);
        if (cfg->max_new_each && cfg->max_new_each[b] < 1)
            return bt_fail(BT_EINVAL, "bt_generate: sequence %lld: length limit %lld < 1",
                           (long long)b, (long long)cfg->max_new_each[b]);
        for (int64_t i = 0; i < c->prompt_lens[b]; i++)
            if (c->prompts[b][i] < 0 || c->prompts[b][i] >= mc->vocab_size)
                return bt_fail(BT_ERANGE,
                               "bt_generate: prompt %lld: token %lld is %d, outside "
                               "the vocabulary [0, %lld)",
                               (long long)b, (long long)i, c->prompts[b][i],
                               (long long)mc->vocab_size);
        *longest = c->prompt_lens[b] > *longest ? c->prompt_lens[b] : *longest;
    }
    if (*longest + c->width > mc->max_position_embeddings)
        return bt_fail(BT_ERANGE,
                       "bt_generate: prompt of %lld tokens + %s %lld exceeds "
                       "max_position_embeddings %lld",
                       (long long)*longest,
                       c->ops ? "(with its reset observation) an episode's width "
                                "(task.max_episode_tokens)"
                              : "max_new_tokens",
                       (long long)c->width, (long long)mc->max_position_embeddings);
    return BT_OK;
}

/*  out's arrays: the pad id, log-prob 0, length 0; episodes: loss mask 0, turn 0, no turns. */
static bt_status s_alloc(const s_call *c, bt_generation *out) {
    size_t n = (size_t)(c->B * c->width);
    out->batch = c->B;
    out->max_new_tokens = c->width;
    out->tokens = malloc(n * sizeof *out->tokens);
    out->logprobs = calloc(n, sizeof *out->logprobs);
    out->lengths = calloc((size_t)c->B, sizeof *out->lengths);
    out->finish = calloc((size_t)c->B, sizeof *out->finish);
    if (c->ops) {
        out->loss_mask = calloc(n, sizeof *out->loss_mask);
        out->turn = calloc(n, sizeof *out->turn);
        out->n_turns = calloc((size_t)c->B, sizeof *out->n_turns);
    }
    if (!out->tokens || !out->logprobs || !out->lengths || !out->finish ||
        (c->ops && (!out->loss_mask || !out->turn || !out->n_turns)))
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    for (size_t i = 0; i < n; i++)
        out->tokens[i] = c->pad;
    return BT_OK;
}

/*  The call's shared parts; runs it (the engine, or the reference without a cache). */
static bt_status s_generate(s_call *c, bt_generation *out) {
    const bt_model_config *mc = bt_model_get_config(c->model);
    const bt_sample_config *cfg = c->cfg;
    for (int i = 0; i < cfg->n_stops && i < BT_SAMPLE_MAX_STOPS; i++)
        c->stops[c->n_stops++] = cfg->stops[i];
    if (c->n_stops == 0 && mc->eos_token_id >= 0)
        c->stops[c->n_stops++] = (int32_t)mc->eos_token_id;
    c->pad = (int32_t)(mc->pad_token_id >= 0 ? mc->pad_token_id
                                             : (mc->eos_token_id >= 0 ? mc->eos_token_id : 0));
    bt_status st = bt_sample_check_config(cfg, c->keys != NULL);
    if (st == BT_OK)
        st = s_check_prompts(c, &c->longest);
    if (st == BT_OK)
        st = s_alloc(c, out);
    bool grad = bt_set_grad_enabled(false);
    if (st == BT_OK)
        st = cfg->use_cache ? s_engine_run(c, out) : s_reference_run(c, out);
    bt_set_grad_enabled(grad);
    if (st != BT_OK)
        bt_generation_release(out);
    return st;
}

bt_status bt_generate(bt_model *model, const int32_t *const *prompts, const int64_t *prompt_lens,
                      int64_t batch, const bt_sample_config *cfg, const uint64_t *keys,
                      bt_generation *out) {
    BT_ASSERT(model && prompts && prompt_lens && cfg && out);
    bt_generation_release(out);
    s_call c = {.model = model,
                .cfg = cfg,
                .prompts = prompts,
                .prompt_lens = prompt_lens,
                .B = batch,
                .keys = keys,
                .width = cfg->max_new_tokens};
    return s_generate(&c, out);
}

bt_status bt_generate_episodes(bt_model *model, const int32_t *const *prompts,
                               const int64_t *prompt_lens, int64_t batch,
                               const bt_sample_config *cfg, const uint64_t *keys, int64_t max_turns,
                               int64_t width, int64_t lag, const bt_turn_ops *ops,
                               bt_generation *out) {
    BT_ASSERT(model && prompts && prompt_lens && cfg && ops && ops->ended && ops->answers && out);
    bt_generation_release(out);
    if (!cfg->use_cache)
        return bt_fail(BT_EUNSUPPORTED, "bt_generate_episodes: episodes run in the engine only "
                                        "(use_cache)");
    if (max_turns < 1 || max_turns > 255)
        return bt_fail(BT_EINVAL, "bt_generate_episodes: max_turns: expected 1 .. 255, got %lld",
                       (long long)max_turns);
    if (lag < 0)
        return bt_fail(BT_EINVAL, "bt_generate_episodes: lag: expected an integer >= 0, got %lld",
                       (long long)lag);
    if (width < 1)
        return bt_fail(BT_EINVAL, "bt_generate_episodes: width: expected an integer >= 1, got %lld",
                       (long long)width);
    int64_t *turn_start = batch > 0 ? calloc((size_t)batch, sizeof *turn_start) : NULL;
    if (batch > 0 && !turn_start)
        return bt_fail(BT_ENOMEM, "bt_generate: out of memory");
    s_call c = {.model = model,
                .cfg = cfg,
                .prompts = prompts,
                .prompt_lens = prompt_lens,
                .B = batch,
                .keys = keys,
                .width = width,
                .ops = ops,
                .max_turns = max_turns,
                .lag = lag,
                .turn_start = turn_start};
    bt_status st = s_generate(&c, out);
    free(turn_start);
    return st;
}
