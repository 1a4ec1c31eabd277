/*  messages.c — payloads <-> wire messages; see messages.h. */
#include "baton/messages.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- batches -------------------------------------------------------------------------------- */

void bt_rollout_batch_init(bt_rollout_batch *b) {
    memset(b, 0, sizeof *b);
    b->version = -1;
}

void bt_rollout_batch_release(bt_rollout_batch *b) {
    if (!b)
        return;
    free(b->indices);
    free(b->prompt_tokens);
    free(b->prompt_lens);
    free(b->tokens);
    free(b->logprobs);
    free(b->lengths);
    free(b->rewards);
    free(b->correct);
    free(b->finished);
    free(b->loss_mask);
    free(b->turn);
    free(b->n_turns);
    free(b->turn_rewards);
    bt_rollout_batch_init(b);
}

bt_status bt_rollout_batch_alloc(bt_rollout_batch *b, int64_t n_prompts, int64_t group_size,
                                 int64_t max_prompt_len, int64_t max_new_tokens) {
    bt_rollout_batch_release(b);
    if (n_prompts < 0 || group_size < 1 || max_prompt_len < 1 || max_new_tokens < 1)
        return bt_fail(BT_EINVAL,
                       "rollout batch: need n_prompts >= 0 and group_size, max_prompt_len, "
                       "max_new_tokens >= 1, got %lld, %lld, %lld, %lld",
                       (long long)n_prompts, (long long)group_size, (long long)max_prompt_len,
                       (long long)max_new_tokens);
    size_t n = (size_t)(n_prompts * group_size), np = (size_t)n_prompts;
    b->n_prompts = n_prompts;
    b->group_size = group_size;
    b->n = (int64_t)n;
    b->max_prompt_len = max_prompt_len;
    b->max_new_tokens = max_new_tokens;
    /* calloc(0) may return NULL: allocate at least one element */
    b->indices = calloc(np + 1, sizeof *b->indices);
    b->prompt_tokens = calloc(n * (size_t)max_prompt_len + 1, sizeof *b->prompt_tokens);
    b->prompt_lens = calloc(n + 1, sizeof *b->prompt_lens);
    b->tokens = calloc(n * (size_t)max_new_tokens + 1, sizeof *b->tokens);
    b->logprobs = calloc(n * (size_t)max_new_tokens + 1, sizeof *b->logprobs);
    b->lengths = calloc(n + 1, sizeof *b->lengths);
    b->rewards = calloc(n + 1, sizeof *b->rewards);
    b->correct = calloc(n + 1, sizeof *b->correct);
    b->finished = calloc(n + 1, sizeof *b->finished);
    b->loss_mask = malloc(n * (size_t)max_new_tokens + 1);
    b->turn = calloc(n * (size_t)max_new_tokens + 1, sizeof *b->turn);
    b->n_turns = malloc((n + 1) * sizeof *b->n_turns);
    b->turn_rewards = calloc(n * BT_MAX_TURNS + 1, sizeof *b->turn_rewards);
    if (!b->indices || !b->prompt_tokens || !b->prompt_lens || !b->tokens || !b->logprobs ||
        !b->lengths || !b->rewards || !b->correct || !b->finished || !b->loss_mask || !b->turn ||
        !b->n_turns || !b->turn_rewards) {
        bt_rollout_batch_release(b);
        return bt_fail(BT_ENOMEM, "rollout batch: out of memory");
    }
    memset(b->loss_mask, 1, n * (size_t)max_new_tokens + 1); /* single-turn: every token trains */
    for (size_t i = 0; i <= n; i++)
        b->n_turns[i] = 1;
    return BT_OK;
}

/*  The batch's fields and tensors; flags holds correct (n) then finished (n) as bytes. */
static bt_status s_batch_put(const bt_rollout_batch *b, const uint8_t *flags, bt_msg_t *msg) {
    int64_t n = b->n, P = b->n_prompts;
    int64_t s_p[1] = {P}, s_n[1] = {n}, s_pt[2] = {n, b->max_prompt_len},
            s_t[2] = {n, b->max_new_tokens};
    BT_TRY(bt_msg_set_int(msg, "version", b->version < 0 ? 0 : b->version));
    BT_TRY(bt_msg_set_int(msg, "group_size", b->group_size));
    BT_TRY(bt_msg_set_int(msg, "n_prompts", P));
    BT_TRY(bt_msg_set_double(msg, "temperature", b->temperature));
    BT_TRY(bt_msg_add_tensor(msg, "indices", BT_I64, 1, s_p, b->indices));
    BT_TRY(bt_msg_add_tensor(msg, "prompt_tokens", BT_I32, 2, s_pt, b->prompt_tokens));
    BT_TRY(bt_msg_add_tensor(msg, "prompt_lens", BT_I64, 1, s_n, b->prompt_lens));
    BT_TRY(bt_msg_add_tensor(msg, "tokens", BT_I32, 2, s_t, b->tokens));
    BT_TRY(bt_msg_add_tensor(msg, "logprobs", BT_F32, 2, s_t, b->logprobs));
    BT_TRY(bt_msg_add_tensor(msg, "lengths", BT_I64, 1, s_n, b->lengths));
    BT_TRY(bt_msg_add_tensor(msg, "rewards", BT_F64, 1, s_n, b->rewards));
    BT_TRY(bt_msg_add_tensor(msg, "correct", BT_U8, 1, s_n, flags));
    BT_TRY(bt_msg_add_tensor(msg, "finished", BT_U8, 1, s_n, flags + n));
    /* the episodes' fields, where they differ from the single-turn default */
    bool masked = false, turns = false;
    for (int64_t c = 0; c < n; c++) {
        turns = turns || b->n_turns[c] != 1;
        for (int64_t j = 0; j < b->lengths[c] && !masked; j++)
            masked = b->loss_mask[c * b->max_new_tokens + j] == 0;
    }
    int64_t s_r[2] = {n, BT_MAX_TURNS};
    if (masked)
        BT_TRY(bt_msg_add_tensor(msg, "loss_mask", BT_U8, 2, s_t, b->loss_mask));
    if (turns) {
        BT_TRY(bt_msg_add_tensor(msg, "turn", BT_U8, 2, s_t, b->turn));
        BT_TRY(bt_msg_add_tensor(msg, "n_turns", BT_I64, 1, s_n, b->n_turns));
    }
    if (b->has_turn_rewards)
        BT_TRY(bt_msg_add_tensor(msg, "turn_rewards", BT_F64, 2, s_r, b->turn_rewards));
    return BT_OK;
}

bt_status bt_batch_to_msg(const bt_rollout_batch *b, bt_msg_t *msg) {
    uint8_t *flags = malloc((size_t)(2 * b->n + 1));
    if (!flags)
        return bt_fail(BT_ENOMEM, "batch message: out of memory");
    for (int64_t i = 0; i < b->n; i++) {
        flags[i] = b->correct[i];
        flags[b->n + i] = b->finished[i];
    }
    bt_status st = s_batch_put(b, flags, msg);
    free(flags);
    return st;
}

/*  tensor name of dtype with the given shape (ndim 1 or 2); BT_EFORMAT otherwise. */
static bt_status s_get(const bt_msg_t *msg, const char *name, bt_dtype dtype, int64_t d0,
                       int64_t d1, bt_msg_tensor *t) {
    BT_TRY(bt_msg_get_tensor(msg, name, dtype, d1 < 0 ? 1 : 2, t));
    if (t->shape[0] != d0 || (d1 >= 0 && t->shape[1] != d1))
        return bt_fail(BT_EFORMAT, "%s: tensor '%s': shape does not match the batch (%lld rows)",
                       bt_msg_type_name(bt_msg_type_of(msg)), name, (long long)d0);
    return BT_OK;
}

static bt_status s_check_lengths(const bt_msg_t *msg, const char *name, const int64_t *v, int64_t n,
                                 int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; i++)
        if (v[i] < lo || v[i] > hi)
            return bt_fail(BT_EFORMAT, "%s: tensor '%s': row %lld holds %lld, outside [%lld, %lld]",
                           bt_msg_type_name(bt_msg_type_of(msg)), name, (long long)i,
                           (long long)v[i], (long long)lo, (long long)hi);
    return BT_OK;
}

static bool s_has_tensor(const bt_msg_t *msg, const char *name) {
    for (int i = 0; i < bt_msg_tensor_count(msg); i++)
        if (!strcmp(bt_msg_tensor_at(msg, i).name, name))
            return true;
    return false;
}

/*  The episodes' tensors of msg into out (allocated, holding the defaults), each checked:
    n_turns in [1, BT_MAX_TURNS], every token's turn below its episode's n_turns, turn rewards
    finite.  loss_mask reads as 0 or 1. */
static bt_status s_get_episodes(const bt_msg_t *msg, bt_rollout_batch *out) {
    int64_t n = out->n, L = out->max_new_tokens;
    bt_msg_tensor t;
    const char *type = bt_msg_type_name(bt_msg_type_of(msg));
    if (s_has_tensor(msg, "loss_mask")) {
        BT_TRY(s_get(msg, "loss_mask", BT_U8, n, L, &t));
        const uint8_t *m = t.data;
        for (int64_t i = 0; i < n * L; i++)
            out->loss_mask[i] = m[i] != 0;
    }
    if (s_has_tensor(msg, "turn") || s_has_tensor(msg, "n_turns")) {
        BT_TRY(s_get(msg, "turn", BT_U8, n, L, &t));
        memcpy(out->turn, t.data, t.nbytes);
        BT_TRY(s_get(msg, "n_turns", BT_I64, n, -1, &t));
        memcpy(out->n_turns, t.data, t.nbytes);
        BT_TRY(s_check_lengths(msg, "n_turns", out->n_turns, n, 1, BT_MAX_TURNS));
        for (int64_t c = 0; c < n; c++)
            for (int64_t j = 0; j < out->lengths[c]; j++)
                if (out->turn[c * L + j] >= out->n_turns[c])
                    return bt_fail(BT_EFORMAT,
                                   "%s: tensor 'turn': row %lld, token %lld: turn %d of an episode "
                                   "of %lld turns",
                                   type, (long long)c, (long long)j, out->turn[c * L + j],
                                   (long long)out->n_turns[c]);
    }
    if (s_has_tensor(msg, "turn_rewards")) {
        BT_TRY(s_get(msg, "turn_rewards", BT_F64, n, BT_MAX_TURNS, &t));
        memcpy(out->turn_rewards, t.data, t.nbytes);
        for (int64_t i = 0; i < n * BT_MAX_TURNS; i++)
            if (!isfinite(out->turn_rewards[i]))
                return bt_fail(BT_EFORMAT, "%s: tensor 'turn_rewards': row %lld holds %g", type,
                               (long long)(i / BT_MAX_TURNS), out->turn_rewards[i]);
        out->has_turn_rewards = true;
    }
    return BT_OK;
}

bt_status bt_batch_from_msg(const bt_msg_t *msg, bt_rollout_batch *out) {
    int64_t version, G, P;
    double temperature;
    bt_msg_tensor ix, pt, pl, tk, lp, ln, rw, co, fi;
    BT_TRY(bt_msg_get_int(msg, "version", 0, BT_WIRE_INT_MAX, &version));
    BT_TRY(bt_msg_get_int(msg, "group_size", 1, 1 << 20, &G));
    BT_TRY(bt_msg_get_int(msg, "n_prompts", 0, 1 << 20, &P));
    BT_TRY(bt_msg_get_double(msg, "temperature", 0, 1e6, &temperature));
    BT_TRY(bt_msg_get_tensor(msg, "prompt_tokens", BT_I32, 2, &pt));
    BT_TRY(bt_msg_get_tensor(msg, "tokens", BT_I32, 2, &tk));
    int64_t n = P * G, Pmax = pt.shape[1], L = tk.shape[1];
    BT_TRY(s_get(msg, "indices", BT_I64, P, -1, &ix));
    BT_TRY(s_get(msg, "prompt_tokens", BT_I32, n, Pmax, &pt));
    BT_TRY(s_get(msg, "prompt_lens", BT_I64, n, -1, &pl));
    BT_TRY(s_get(msg, "tokens", BT_I32, n, L, &tk));
    BT_TRY(s_get(msg, "logprobs", BT_F32, n, L, &lp));
    BT_TRY(s_get(msg, "lengths", BT_I64, n, -1, &ln));
    BT_TRY(s_get(msg, "rewards", BT_F64, n, -1, &rw));
    BT_TRY(s_get(msg, "correct", BT_U8, n, -1, &co));
    BT_TRY(s_get(msg, "finished", BT_U8, n, -1, &fi));
    BT_TRY(bt_rollout_batch_alloc(out, P, G, Pmax < 1 ? 1 : Pmax, L < 1 ? 1 : L));
    out->version = version;
    out->temperature = temperature;
    memcpy(out->indices, ix.data, ix.nbytes);
    memcpy(out->prompt_tokens, pt.data, pt.nbytes);
    memcpy(out->prompt_lens, pl.data, pl.nbytes);
    memcpy(out->tokens, tk.data, tk.nbytes);
    memcpy(out->logprobs, lp.data, lp.nbytes);
    memcpy(out->lengths, ln.data, ln.nbytes);
    memcpy(out->rewards, rw.data, rw.nbytes);
    const uint8_t *c = co.data, *f = fi.data;
    for (int64_t i = 0; i < n; i++) {
        out->correct[i] = c[i] != 0;
        out->finished[i] = f[i] != 0;
    }
    bt_status st = s_check_lengths(msg, "prompt_lens", out->prompt_lens, n, 1, Pmax);
    if (st == BT_OK)
        st = s_check_lengths(msg, "lengths", out->lengths, n, 0, L);
    if (st == BT_OK)
        st = s_get_episodes(msg, out);
    if (st != BT_OK)
        bt_rollout_batch_release(out);
    return st;
}

/*  Row r of in into row o of out, whose strides are at least in's. */
static void s_row_copy(bt_rollout_batch *out, int64_t o, const bt_rollout_batch *in, int64_t r) {
    int64_t Pm = in->max_prompt_len, L = in->max_new_tokens, oL = out->max_new_tokens;
    memcpy(out->prompt_tokens + o * out->max_prompt_len, in->prompt_tokens + r * Pm,
           sizeof(int32_t) * (size_t)Pm);
    memcpy(out->tokens + o * oL, in->tokens + r * L, sizeof(int32_t) * (size_t)L);
    memcpy(out->logprobs + o * oL, in->logprobs + r * L, sizeof(float) * (size_t)L);
    memcpy(out->loss_mask + o * oL, in->loss_mask + r * L, (size_t)L);
    memcpy(out->turn + o * oL, in->turn + r * L, (size_t)L);
    memcpy(out->turn_rewards + o * BT_MAX_TURNS, in->turn_rewards + r * BT_MAX_TURNS,
           sizeof(double) * BT_MAX_TURNS);
    out->prompt_lens[o] = in->prompt_lens[r];
    out->lengths[o] = in->lengths[r];
    out->rewards[o] = in->rewards[r];
    out->correct[o] = in->correct[r];
    out->finished[o] = in->finished[r];
    out->n_turns[o] = in->n_turns[r];
}

bt_status bt_batch_concat(const bt_rollout_batch *parts, int n, bt_rollout_batch *out) {
    int64_t P = 0, Pmax = 1, L = 1, version = INT64_MAX;
    bool per_turn = false;
    for (int i = 0; i < n; i++) {
        if (parts[i].group_size != parts[0].group_size ||
            parts[i].temperature != parts[0].temperature)
            return bt_fail(BT_EINVAL, "batch concat: parts differ in group size or temperature");
        per_turn = per_turn || parts[i].has_turn_rewards;
        P += parts[i].n_prompts;
        Pmax = parts[i].max_prompt_len > Pmax ? parts[i].max_prompt_len : Pmax;
        L = parts[i].max_new_tokens > L ? parts[i].max_new_tokens : L;
        version = parts[i].version < version ? parts[i].version : version;
    }
    BT_TRY(bt_rollout_batch_alloc(out, P, n ? parts[0].group_size : 1, Pmax, L));
    out->version = n ? version : -1;
    out->temperature = n ? parts[0].temperature : 0;
    out->has_turn_rewards = per_turn;
    int64_t p0 = 0, r0 = 0;
    for (int i = 0; i < n; i++) {
        const bt_rollout_batch *b = &parts[i];
        memcpy(out->indices + p0, b->indices, sizeof *b->indices * (size_t)b->n_prompts);
        for (int64_t r = 0; r < b->n; r++) {
            s_row_copy(out, r0 + r, b, r);
            if (per_turn && !b->has_turn_rewards) { /* its reward, as its last turn's */
                double *tr = out->turn_rewards + (r0 + r) * BT_MAX_TURNS;
                memset(tr, 0, sizeof(double) * BT_MAX_TURNS);
                tr[b->n_turns[r] - 1] = b->rewards[r];
            }
        }
        p0 += b->n_prompts;
        r0 += b->n;
    }
    return BT_OK;
}

bt_status bt_batch_keep_groups(const bt_rollout_batch *in, const bool *keep,
                               bt_rollout_batch *out) {
    int64_t G = in->group_size, kept = 0;
    for (int64_t g = 0; g < in->n_prompts; g++)
        kept += keep[g];
    BT_TRY(bt_rollout_batch_alloc(out, kept, G, in->max_prompt_len, in->max_new_tokens));
    out->version = in->version;
    out->temperature = in->temperature;
    out->has_turn_rewards = in->has_turn_rewards;
    int64_t o = 0;
    for (int64_t g = 0; g < in->n_prompts; g++) {
        if (!keep[g])
            continue;
        out->indices[o] = in->indices[g];
        for (int64_t j = 0; j < G; j++)
            s_row_copy(out, o * G + j, in, g * G + j);
        o++;
    }
    return BT_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

void bt_weights_init(bt_weights *w) {
    memset(w, 0, sizeof *w);
    w->version = -1;
}

void bt_weights_release(bt_weights *w) {
    if (!w)
        return;
    for (int i = 0; i < w->n; i++) {
        if (w->names)
            free(w->names[i]);
        if (w->data)
            free(w->data[i]);
    }
    free(w->names);
    free(w->ndim);
    free(w->shape);
    free(w->numel);
    free(w->dtype);
    free(w->data);
    bt_weights_init(w);
}

bt_status bt_weights_to_msg(bt_weights *w, bt_msg_t *msg) {
    bt_status st = bt_msg_set_int(msg, "version", w->version);
    for (int i = 0; i < w->n; i++) {
        void *data = w->data[i];
        w->data[i] = NULL;
        if (st == BT_OK)
            st = bt_msg_add_tensor_zero_copy(msg, w->names[i], w->dtype[i], w->ndim[i], w->shape[i],
                                             data, NULL, NULL);
        else
            free(data);
    }
    return st;
}

bt_status bt_weights_from_msg(const bt_msg_t *msg, bt_weights *out) {
    bt_weights_release(out);
    int64_t version;
    BT_TRY(bt_msg_get_int(msg, "version", 0, BT_WIRE_INT_MAX, &version));
    int n = bt_msg_tensor_count(msg);
    out->version = version;
    out->names = calloc((size_t)n + 1, sizeof *out->names);
    out->ndim = calloc((size_t)n + 1, sizeof *out->ndim);
    out->shape = calloc((size_t)n + 1, sizeof *out->shape);
    out->numel = calloc((size_t)n + 1, sizeof *out->numel);
    out->dtype = calloc((size_t)n + 1, sizeof *out->dtype);
    out->data = calloc((size_t)n + 1, sizeof *out->data);
    if (!out->names || !out->ndim || !out->shape || !out->numel || !out->dtype || !out->data) {
        bt_weights_release(out);
        return bt_fail(BT_ENOMEM, "weights message: out of memory");
    }
    for (int i = 0; i < n; i++, out->n = i) {
        bt_msg_tensor t = bt_msg_tensor_at(msg, i);
        if (t.dtype != BT_F32 && t.dtype != BT_BF16) {
            bt_weights_release(out);
            return bt_fail(BT_EFORMAT, "WEIGHTS: tensor '%s': expected F32 or BF16, got %s", t.name,
                           bt_dtype_code(t.dtype));
        }
        out->names[i] = malloc(strlen(t.name) + 1);
        out->data[i] = malloc(t.nbytes + 1);
        if (!out->names[i] || !out->data[i]) {
            free(out->names[i]);
            free(out->data[i]);
            bt_weights_release(out);
            return bt_fail(BT_ENOMEM, "weights message: out of memory");
        }
        strcpy(out->names[i], t.name);
        memcpy(out->data[i], t.data, t.nbytes);
        out->ndim[i] = t.ndim;
        memcpy(out->shape[i], t.shape, sizeof t.shape);
        out->dtype[i] = t.dtype;
        out->numel[i] = (int64_t)(t.nbytes / bt_dtype_size(t.dtype));
    }
    out->n = n;
    return BT_OK;
}

/* ---- trainer statistics ---------------------------------------------------------------------- */

/*  A non-finite statistic (a NaN loss, an infinite gradient norm) is left out and counted. */
static bt_status s_set_stat(bt_msg_t *msg, const char *key, double value, int *nonfinite) {
    if (isfinite(value))
        return bt_msg_set_double(msg, key, value);
    (*nonfinite)++;
    return BT_OK;
}

static bt_status s_get_stat(const bt_msg_t *msg, const char *key, double lo, double hi, bool finite,
                            double *out) {
    *out = NAN;
    if (finite || bt_msg_has(msg, key))
        return bt_msg_get_double(msg, key, lo, hi, out);
    return BT_OK;
}

bt_status bt_trainer_stats_to_msg(const bt_trainer_stats *s, bt_msg_t *msg) {
    int bad = 0;
    BT_TRY(s_set_stat(msg, "stats.loss", s->loss, &bad));
    BT_TRY(s_set_stat(msg, "stats.pg_loss", s->pg_loss, &bad));
    BT_TRY(s_set_stat(msg, "stats.kl", s->kl, &bad));
    BT_TRY(s_set_stat(msg, "stats.clip_frac", s->clip_frac, &bad));
    BT_TRY(s_set_stat(msg, "stats.mismatch_kl", s->mismatch_kl, &bad));
    BT_TRY(s_set_stat(msg, "stats.ratio_std", s->ratio_std, &bad));
    BT_TRY(s_set_stat(msg, "stats.ratio_min", s->ratio_min, &bad));
    BT_TRY(s_set_stat(msg, "stats.ratio_max", s->ratio_max, &bad));
    BT_TRY(s_set_stat(msg, "stats.entropy", s->entropy, &bad));
    BT_TRY(s_set_stat(msg, "stats.grad_norm", s->grad_norm, &bad));
    BT_TRY(s_set_stat(msg, "stats.tokens", s->tokens, &bad));
    BT_TRY(s_set_stat(msg, "stats.slots", s->slots, &bad));
    BT_TRY(s_set_stat(msg, "stats.shared", s->shared, &bad));
    BT_TRY(bt_msg_set_double(msg, "stats.lr", s->lr));
    BT_TRY(bt_msg_set_int(msg, "stats.sequences", s->sequences));
    BT_TRY(bt_msg_set_bool(msg, "stats.finite", bad == 0));
    BT_TRY(bt_msg_set_int(msg, "stats.micro_batch", s->micro_batch));
    BT_TRY(bt_msg_set_int(msg, "stats.lowered", s->lowered));
    return bt_msg_set_int(msg, "version", s->version);
}

bt_status bt_trainer_stats_from_msg(const bt_msg_t *msg, bt_trainer_stats *out) {
    const double big = 1e300;
    bool f;
    memset(out, 0, sizeof *out);
    BT_TRY(bt_msg_get_bool(msg, "stats.finite", &f));
    BT_TRY(s_get_stat(msg, "stats.loss", -big, big, f, &out->loss));
    BT_TRY(s_get_stat(msg, "stats.pg_loss", -big, big, f, &out->pg_loss));
    BT_TRY(s_get_stat(msg, "stats.kl", -big, big, f, &out->kl));
    BT_TRY(s_get_stat(msg, "stats.clip_frac", 0, 1, f, &out->clip_frac));
    BT_TRY(s_get_stat(msg, "stats.mismatch_kl", 0, big, f, &out->mismatch_kl));
    BT_TRY(s_get_stat(msg, "stats.ratio_std", 0, big, f, &out->ratio_std));
    BT_TRY(s_get_stat(msg, "stats.ratio_min", 0, big, f, &out->ratio_min));
    BT_TRY(s_get_stat(msg, "stats.ratio_max", 0, big, f, &out->ratio_max));
    BT_TRY(s_get_stat(msg, "stats.entropy", -big, big, f, &out->entropy));
    BT_TRY(s_get_stat(msg, "stats.grad_norm", 0, big, f, &out->grad_norm));
    BT_TRY(s_get_stat(msg, "stats.tokens", 0, big, f, &out->tokens));
    BT_TRY(s_get_stat(msg, "stats.slots", 0, big, f, &out->slots));
    BT_TRY(s_get_stat(msg, "stats.shared", 0, big, f, &out->shared));
    BT_TRY(bt_msg_get_double(msg, "stats.lr", 0, 1e3, &out->lr));
    BT_TRY(bt_msg_get_int(msg, "stats.sequences", 0, BT_WIRE_INT_MAX, &out->sequences));
    if (bt_msg_has(msg, "stats.micro_batch"))
        BT_TRY(bt_msg_get_int(msg, "stats.micro_batch", 0, BT_WIRE_INT_MAX, &out->micro_batch));
    if (bt_msg_has(msg, "stats.lowered"))
        BT_TRY(bt_msg_get_int(msg, "stats.lowered", 0, 64, &out->lowered));
    return bt_msg_get_int(msg, "version", 0, BT_WIRE_INT_MAX, &out->version);
}

/* ---- evaluation sums ------------------------------------------------------------------------ */

/*  The choices sums as one array: items, correct, correct_norm, p_right, then the bins' counts,
    confidences and correct counts, the shuffled pass's items and correct count, then the
    subjects' items, correct and correct_norm counts. */
static void s_choices_pack(const bt_evaluator_sums *s, int64_t *v) {
    v[0] = s->mc_items;
    v[1] = s->mc_correct;
    v[2] = s->mc_correct_norm;
    v[3] = s->mc_p_right_fx;
    for (int b = 0; b < BT_CHOICES_BINS; b++) {
        v[4 + b] = s->mc_bin_n[b];
        v[4 + BT_CHOICES_BINS + b] = s->mc_bin_conf_fx[b];
        v[4 + 2 * BT_CHOICES_BINS + b] = s->mc_bin_correct[b];
    }
    v[4 + 3 * BT_CHOICES_BINS] = s->mc_shuffled;
    v[5 + 3 * BT_CHOICES_BINS] = s->mc_shuffled_correct;
    int64_t *subj = v + 6 + 3 * BT_CHOICES_BINS;
    for (int k = 0; k < BT_CHOICES_SUBJECTS; k++) {
        subj[k] = s->mc_subject_n[k];
        subj[BT_CHOICES_SUBJECTS + k] = s->mc_subject_correct[k];
        subj[2 * BT_CHOICES_SUBJECTS + k] = s->mc_subject_correct_norm[k];
    }
}

/*  The inverse, checking what no evaluation can hold: negative counts, more right than items,
    probabilities above one per item, more items in the subjects than in all. */
static bt_status s_choices_unpack(const int64_t *v, bt_evaluator_sums *s) {
    int64_t n = v[0], fx = (int64_t)BT_CHOICES_FIXED, binned = 0;
    bool ok = n >= 0 && n <= BT_WIRE_INT_MAX / fx && v[1] >= 0 && v[1] <= n && v[2] >= 0 &&
              v[2] <= n && v[3] >= 0 && v[3] <= n * fx;
    for (int b = 0; ok && b < BT_CHOICES_BINS; b++) {
        int64_t bn = v[4 + b], conf = v[4 + BT_CHOICES_BINS + b],
                right = v[4 + 2 * BT_CHOICES_BINS + b];
        ok = bn >= 0 && bn <= n && conf >= 0 && conf <= bn * fx && right >= 0 && right <= bn;
        binned += ok ? bn : 0;
    }
    int64_t shuffled = v[4 + 3 * BT_CHOICES_BINS], shuffled_right = v[5 + 3 * BT_CHOICES_BINS];
    ok =
        ok && (shuffled == 0 || shuffled == n) && shuffled_right >= 0 && shuffled_right <= shuffled;
    const int64_t *subj = v + 6 + 3 * BT_CHOICES_BINS;
    int64_t in_subjects = 0;
    for (int k = 0; ok && k < BT_CHOICES_SUBJECTS; k++) {
        int64_t sn = subj[k], right = subj[BT_CHOICES_SUBJECTS + k],
                right_norm = subj[2 * BT_CHOICES_SUBJECTS + k];
        ok = sn >= 0 && sn <= n && right >= 0 && right <= sn && right_norm >= 0 && right_norm <= sn;
        in_subjects += ok ? sn : 0;
    }
    if (!ok || binned != n || in_subjects > n)
        return bt_fail(BT_EFORMAT, "RESULT: choices: counts no evaluation can have");
    s->mc_shuffled = shuffled;
    s->mc_shuffled_correct = shuffled_right;
    s->mc_items = n;
    s->mc_correct = v[1];
    s->mc_correct_norm = v[2];
    s->mc_p_right_fx = v[3];
    for (int b = 0; b < BT_CHOICES_BINS; b++) {
        s->mc_bin_n[b] = v[4 + b];
        s->mc_bin_conf_fx[b] = v[4 + BT_CHOICES_BINS + b];
        s->mc_bin_correct[b] = v[4 + 2 * BT_CHOICES_BINS + b];
    }
    for (int k = 0; k < BT_CHOICES_SUBJECTS; k++) {
        s->mc_subject_n[k] = subj[k];
        s->mc_subject_correct[k] = subj[BT_CHOICES_SUBJECTS + k];
        s->mc_subject_correct_norm[k] = subj[2 * BT_CHOICES_SUBJECTS + k];
    }
    return BT_OK;
}

#define S_EPISODE_SUMS 7 /* the episodes tensor: its counts in the order of the struct */

static void s_episodes_pack(const bt_evaluator_sums *s, int64_t *v) {
    const int64_t f[S_EPISODE_SUMS] = {s->episodes,        s->turns_sum,     s->tool_calls,
                                       s->tool_errors,     s->tool_episodes, s->episode_tokens_sum,
                                       s->model_tokens_sum};
    memcpy(v, f, sizeof f);
}

/*  The inverse, checking what no evaluation can hold: a negative count, an episode of no turn or
    more than BT_MAX_TURNS, more calls than turns, errors than calls, episodes with a call than
    episodes or calls, model tokens than tokens. */
static bt_status s_episodes_unpack(const int64_t *v, bt_evaluator_sums *s) {
    for (int i = 0; i < S_EPISODE_SUMS; i++)
        if (v[i] < 0 || v[i] > BT_WIRE_INT_MAX)
            return bt_fail(BT_EFORMAT, "RESULT: tensor 'episodes': element %d holds %lld", i,
                           (long long)v[i]);
    if (v[1] < v[0] || v[1] > v[0] * BT_MAX_TURNS || v[2] > v[1] || v[3] > v[2] || v[4] > v[0] ||
        v[4] > v[2] || (v[4] == 0) != (v[2] == 0) || v[6] > v[5])
        return bt_fail(BT_EFORMAT,
                       "RESULT: tensor 'episodes': %lld episodes of %lld turns, %lld tool calls "
                       "(%lld failed) in %lld episodes, %lld model tokens of %lld: inconsistent",
                       (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3],
                       (long long)v[4], (long long)v[6], (long long)v[5]);
    s->episodes = v[0];
    s->turns_sum = v[1];
    s->tool_calls = v[2];
    s->tool_errors = v[3];
    s->tool_episodes = v[4];
    s->episode_tokens_sum = v[5];
    s->model_tokens_sum = v[6];
    return BT_OK;
}

bt_status bt_sums_to_msg(const bt_evaluator_sums *s, bt_msg_t *msg) {
    int64_t k1[1] = {s->samples + 1}, bins[1] = {BT_EVALUATOR_LEN_BINS};
    int64_t rob[2] = {2, BT_PERTURB_COUNT}, probes[2] = {s->n_probes, 2};
    int64_t robust[2][BT_PERTURB_COUNT];
    memcpy(robust[0], s->robust_examples, sizeof robust[0]);
    memcpy(robust[1], s->robust_correct, sizeof robust[1]);
    BT_TRY(bt_msg_set_int(msg, "examples", s->examples));
    BT_TRY(bt_msg_set_int(msg, "samples", s->samples));
    BT_TRY(bt_msg_set_int(msg, "completions", s->completions));
    BT_TRY(bt_msg_set_int(msg, "correct", s->correct));
    BT_TRY(bt_msg_set_int(msg, "maj_correct", s->maj_correct));
    BT_TRY(bt_msg_set_double(msg, "reward_sum", s->reward_sum));
    BT_TRY(bt_msg_set_double(msg, "reward_sumsq", s->reward_sumsq));
    BT_TRY(bt_msg_set_double(msg, "length_sum", s->length_sum));
    BT_TRY(bt_msg_set_int(msg, "truncated", s->truncated));
    BT_TRY(bt_msg_set_double(msg, "nll_sum", s->nll_sum));
    BT_TRY(bt_msg_set_int(msg, "nll_tokens", s->nll_tokens));
    BT_TRY(bt_msg_set_int(msg, "texts", s->texts));
    BT_TRY(bt_msg_set_int(msg, "n_probes", s->n_probes));
    BT_TRY(bt_msg_set_double(msg, "generated_tokens", s->generated_tokens));
    BT_TRY(bt_msg_set_double(msg, "eval_compute_s", s->compute_s));
    BT_TRY(bt_msg_set_double(msg, "peak_rss_mb", isfinite(s->peak_rss_mb) ? s->peak_rss_mb : 0));
    BT_TRY(bt_msg_add_tensor(msg, "correct_hist", BT_I64, 1, k1, s->correct_hist));
    BT_TRY(bt_msg_add_tensor(msg, "length_hist", BT_I64, 1, bins, s->length_hist));
    BT_TRY(bt_msg_add_tensor(msg, "robust", BT_I64, 2, rob, robust));
    int64_t mc[BT_CHOICES_SUMS], mc_shape[1] = {BT_CHOICES_SUMS};
    s_choices_pack(s, mc);
    BT_TRY(bt_msg_add_tensor(msg, "choices", BT_I64, 1, mc_shape, mc));
    if (s->episodes) {
        int64_t ep[S_EPISODE_SUMS], ep_shape[1] = {S_EPISODE_SUMS};
        s_episodes_pack(s, ep);
        BT_TRY(bt_msg_add_tensor(msg, "episodes", BT_I64, 1, ep_shape, ep));
        BT_TRY(bt_msg_set_double(msg, "env_return_sum", s->env_return_sum));
    }
    if (s->n_probes) {
        BT_TRY(bt_msg_add_tensor(msg, "probe_nll", BT_F64, 2, probes, s->probe_nll));
        BT_TRY(bt_msg_add_tensor(msg, "probe_tokens", BT_I64, 2, probes, s->probe_tokens));
    }
    return BT_OK;
}

bt_status bt_sums_from_msg(const bt_msg_t *msg, bt_evaluator_sums *out) {
    int64_t k;
    BT_TRY(bt_msg_get_int(msg, "samples", 1, BT_EVALUATOR_MAX_SAMPLES, &k));
    bt_evaluator_sums_init(out, k);
    const int64_t max = BT_WIRE_INT_MAX;
    const double big = 1e300;
    BT_TRY(bt_msg_get_int(msg, "examples", 0, max, &out->examples));
    BT_TRY(bt_msg_get_int(msg, "completions", 0, max, &out->completions));
    BT_TRY(bt_msg_get_int(msg, "correct", 0, out->examples, &out->correct));
    BT_TRY(bt_msg_get_int(msg, "maj_correct", 0, out->examples, &out->maj_correct));
    BT_TRY(bt_msg_get_double(msg, "reward_sum", -big, big, &out->reward_sum));
    BT_TRY(bt_msg_get_double(msg, "reward_sumsq", 0, big, &out->reward_sumsq));
    BT_TRY(bt_msg_get_double(msg, "length_sum", 0, big, &out->length_sum));
    BT_TRY(bt_msg_get_int(msg, "truncated", 0, out->completions, &out->truncated));
    BT_TRY(bt_msg_get_double(msg, "nll_sum", 0, big, &out->nll_sum));
    BT_TRY(bt_msg_get_int(msg, "nll_tokens", 0, max, &out->nll_tokens));
    BT_TRY(bt_msg_get_int(msg, "texts", 0, max, &out->texts));
    BT_TRY(bt_msg_get_int(msg, "n_probes", 0, BT_EVAL_MAX_PROBES, &out->n_probes));
    BT_TRY(bt_msg_get_double(msg, "generated_tokens", 0, big, &out->generated_tokens));
    BT_TRY(bt_msg_get_double(msg, "eval_compute_s", 0, big, &out->compute_s));
    BT_TRY(bt_msg_get_double(msg, "peak_rss_mb", 0, big, &out->peak_rss_mb));
    bt_msg_tensor h, l, r;
    BT_TRY(s_get(msg, "correct_hist", BT_I64, k + 1, -1, &h));
    BT_TRY(s_check_lengths(msg, "correct_hist", h.data, k + 1, 0, out->examples));
    memcpy(out->correct_hist, h.data, h.nbytes);
    BT_TRY(s_get(msg, "length_hist", BT_I64, BT_EVALUATOR_LEN_BINS, -1, &l));
    BT_TRY(s_check_lengths(msg, "length_hist", l.data, BT_EVALUATOR_LEN_BINS, 0, out->completions));
    memcpy(out->length_hist, l.data, l.nbytes);
    BT_TRY(s_get(msg, "robust", BT_I64, 2, BT_PERTURB_COUNT, &r));
    BT_TRY(s_check_lengths(msg, "robust", r.data, 2 * BT_PERTURB_COUNT, 0, out->examples));
    memcpy(out->robust_examples, r.data, sizeof out->robust_examples);
    memcpy(out->robust_correct, (const int64_t *)r.data + BT_PERTURB_COUNT,
           sizeof out->robust_correct);
    for (int p = 0; p < BT_PERTURB_COUNT; p++)
        if (out->robust_correct[p] > out->robust_examples[p])
            return bt_fail(BT_EFORMAT, "RESULT: robust: more correct than evaluated");
    bt_msg_tensor mc;
    BT_TRY(s_get(msg, "choices", BT_I64, BT_CHOICES_SUMS, -1, &mc));
    BT_TRY(s_choices_unpack(mc.data, out));
    if (s_has_tensor(msg, "episodes")) {
        bt_msg_tensor ep;
        BT_TRY(s_get(msg, "episodes", BT_I64, S_EPISODE_SUMS, -1, &ep));
        BT_TRY(s_episodes_unpack(ep.data, out));
        BT_TRY(bt_msg_get_double(msg, "env_return_sum", -big, big, &out->env_return_sum));
    }
    if (out->n_probes) {
        bt_msg_tensor pn, pt;
        BT_TRY(s_get(msg, "probe_nll", BT_F64, out->n_probes, 2, &pn));
        BT_TRY(s_get(msg, "probe_tokens", BT_I64, out->n_probes, 2, &pt));
        BT_TRY(s_check_lengths(msg, "probe_tokens", pt.data, 2 * out->n_probes, 0, 1 << 20));
        memcpy(out->probe_nll, pn.data, pn.nbytes);
        memcpy(out->probe_tokens, pt.data, pt.nbytes);
        for (int64_t i = 0; i < out->n_probes; i++)
            if (!(out->probe_nll[i][0] >= 0 && out->probe_nll[i][1] >= 0 &&
                  out->probe_nll[i][0] < big && out->probe_nll[i][1] < big))
                return bt_fail(BT_EFORMAT, "RESULT: probe_nll: not a finite NLL");
    }
    return BT_OK;
}

/* ---- trainer state ----------------------------------------------------------------------------
 */

void bt_evaluator_sums_init(bt_evaluator_sums *s, int64_t samples) {
    memset(s, 0, sizeof *s);
    s->samples = samples;
}
