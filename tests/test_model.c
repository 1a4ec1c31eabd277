/*  test_model.c — the decoder, its KV cache, sampling and model directories, each checked against
   an independent computation: unpadded single rows, a model with k/v heads duplicated by hand,
    log-softmax and argmax done on the host, hand-made logits, files written by hand. */
#define _POSIX_C_SOURCE 200809L

#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/safetensors.h"
#include "baton/sample.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { V = 259, PAD = 258 };

/*  A small model: hidden 32, 2 layers, 4 heads of 8, kv_heads key/value heads. */
static bt_model_config s_config(int64_t kv_heads) {
    bt_model_config c;
    bt_model_config_init(&c);
    c.hidden_size = 32;
    c.intermediate_size = 88;
    c.num_attention_heads = 4;
    c.num_key_value_heads = kv_heads;
    c.max_position_embeddings = 128;
    return c;
}

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;
static int32_t s_token(void) { /* a byte, from a fixed LCG */
    s_rng = s_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)(s_rng >> 56);
}

/*  Host (B, T) ids and mask of rows seqs[b] (lens[b] tokens), padded on the left or the right. */
static void s_pad(int B, int64_t T, const int32_t *const *seqs, const int64_t *lens, bool left,
                  int64_t *ids, int64_t *mask) {
    for (int b = 0; b < B; b++) {
        int64_t start = left ? T - lens[b] : 0;
        for (int64_t t = 0; t < T; t++) {
            bool real = t >= start && t < start + lens[b];
            ids[b * T + t] = real ? seqs[b][t - start] : PAD;
            mask[b * T + t] = real;
        }
    }
}

static bt_tensor *s_i64(bt_ctx *ctx, int64_t B, int64_t T, const int64_t *data) {
    const int64_t shape[] = {B, T};
    return bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, data);
}

/*  Host copy of an F32 tensor.  Caller owns the result; free() it. */
static float *s_host(const bt_tensor *t) {
    if (!t) {
        fprintf(stderr, "NULL tensor: %s\n", bt_last_error());
        return NULL;
    }
    size_t n = (size_t)bt_numel(t);
    float *out = malloc(n * sizeof *out);
    if (bt_to_host(t, out, n * sizeof *out) != BT_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/*  Logits (1, n, V) of one unpadded row, on the host. */
static float *s_row_logits(bt_model *m, bt_ctx *ctx, const int32_t *seq, int64_t n) {
    int64_t ids[256], mask[256];
    s_pad(1, n, &seq, &n, true, ids, mask);
    return s_host(bt_model_forward(m, ctx, s_i64(ctx, 1, n, ids), s_i64(ctx, 1, n, mask)));
}

static double s_max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/*  (a) The decode-slot cache: rows of a ragged batch prefilled into slots in another order (right
    padding), then one token per step through bt_model_decode, give the logits of the full padded
    forward and of every row run alone; a slot copied into another cache (a shared prompt) and a
    compacted cache go on giving the same logits; a slot that is not active is left as it was. */
static void test_cache_matches_full(void) {
    enum { B = 4, N = 6, TP = 7 };
    const int64_t prompt_lens[B] = {3, 7, 5, 1};
    const int64_t slot_of[B] = {2, 0, 3, 1}; /* row b lives in slot slot_of[b] */
    int32_t seq[B][TP + N];
    const int32_t *rows[B];
    int64_t lens[B];
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < TP + N; i++)
            seq[b][i] = s_token();
        rows[b] = seq[b];
        lens[b] = prompt_lens[b] + N;
    }
    bt_model_config cfg = s_config(2);
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 1);
    bt_ctx *ctx = bt_ctx_new();
    bt_kv_cache *cache = bt_kv_cache_new(m, B, TP + N);
    bt_kv_cache *other = bt_kv_cache_new(m, 3, TP + N);
    CHECK(m && cache && other);
    if (!m || !cache || !other)
        goto out;
    CHECK(bt_kv_cache_new(m, 1, cfg.max_position_embeddings + 1) == NULL);

    static float cached[N + 1][B * V]; /* step j: after the prompt and j more tokens, by row */
    int64_t ids[B * (TP + N)], mask[B * (TP + N)];
    s_pad(B, TP, rows, prompt_lens, false, ids, mask);
    float *l =
        s_host(bt_model_prefill(m, cache, ctx, s_i64(ctx, B, TP, ids), prompt_lens, slot_of));
    CHECK(l != NULL);
    if (l)
        memcpy(cached[0], l, sizeof cached[0]);
    free(l);
    for (int b = 0; b < B; b++)
        CHECK(bt_kv_cache_len(cache, slot_of[b]) == prompt_lens[b]);
    /* row 1 (slot 0) is also copied into slot 2 of another cache and decoded there */
    const int64_t to = 2;
    CHECK_OK(bt_kv_cache_copy(other, ctx, &to, 1, cache, slot_of[1]));
    CHECK(bt_kv_cache_len(other, 2) == prompt_lens[1]);
    double vs_copy = 0;
    for (int j = 1; j <= N; j++) {
        int64_t next[B], one[3] = {0, 0, seq[1][prompt_lens[1] + j - 1]};
        bool all[B] = {true, true, true, true}, only[3] = {false, false, true};
        for (int b = 0; b < B; b++)
            next[slot_of[b]] = seq[b][prompt_lens[b] + j - 1];
        if (j == N) { /* the last step: slots 0 and 3 (rows 1 and 2) kept, in the order 3, 0 */
            const int64_t keep[2] = {3, 0};
            CHECK_OK(bt_kv_cache_compact(cache, m, keep, 2));
            CHECK(bt_kv_cache_slots(cache) == 2 && bt_kv_cache_len(cache, 0) == lens[2] - 1);
            int64_t two[2] = {next[3], next[0]};
            l = s_host(bt_model_decode(m, cache, ctx, two, all)); /* checked with the others */
            if (l) {
                memcpy(&cached[j][2 * V], &l[0], V * sizeof *l);
                memcpy(&cached[j][1 * V], &l[V], V * sizeof *l);
                for (int b = 0; b < B; b += 3) /* rows 0 and 3 were not computed */
                    memset(&cached[j][b * V], 0, V * sizeof *l);
            }
        } else {
            l = s_host(bt_model_decode(m, cache, ctx, next, all));
            for (int b = 0; l && b < B; b++)
                memcpy(&cached[j][b * V], &l[slot_of[b] * V], V * sizeof *l);
        }
        CHECK(l != NULL);
        free(l);
        float *c = s_host(bt_model_decode(m, other, ctx, one, only));
        vs_copy = c ? fmax(vs_copy, s_max_diff(&c[2 * V], &cached[j][1 * V], V)) : 1;
        free(c);
        CHECK(bt_kv_cache_len(other, 0) == 0); /* inactive slots do not grow */
    }
    CHECK(vs_copy < 1e-5);

    s_pad(B, TP + N, rows, lens, true, ids, mask);
    float *full = s_host(bt_model_forward(m, ctx, s_i64(ctx, B, TP + N, ids),
                                          s_i64(ctx, B, TP + N, mask))); /* (B, TP + N, V) */
    CHECK(full != NULL);
    double vs_full = 0, vs_alone = 0;
    for (int b = 0; b < B && full; b++) {
        float *alone = s_row_logits(m, ctx, seq[b], lens[b]); /* (1, lens[b], V) */
        CHECK(alone != NULL);
        for (int j = 0; j <= N && alone; j++) {
            if (j == N && (b == 0 || b == 3))
                continue; /* compacted away */
            const float *c = &cached[j][b * V];
            vs_full =
                fmax(vs_full, s_max_diff(c, &full[((size_t)b * (TP + N) + TP - 1 + j) * V], V));
            vs_alone =
                fmax(vs_alone, s_max_diff(c, &alone[(size_t)(prompt_lens[b] - 1 + j) * V], V));
        }
        free(alone);
    }
    CHECK(vs_full < 1e-4);
    CHECK(vs_alone < 1e-4);
    printf("slot cache vs full forward: max |diff| %.3g, vs rows alone %.3g, copied slot %.3g\n",
           vs_full, vs_alone, vs_copy);
    free(full);
out:
    bt_kv_cache_destroy(&cache);
    bt_kv_cache_destroy(&other);
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
}

/*  (b) A padded batch, left or right, gives each row's unpadded logits at its real positions. */
static void test_padding(void) {
    enum { B = 4, T = 9 };
    const int64_t lens[B] = {4, 9, 1, 6};
    int32_t seq[B][T];
    const int32_t *rows[B];
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < T; i++)
            seq[b][i] = s_token();
        rows[b] = seq[b];
    }
    bt_model_config cfg = s_config(4);
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 2);
    bt_ctx *ctx = bt_ctx_new();
    CHECK(m != NULL);
    for (int left = 0; left < 2 && m; left++) {
        int64_t ids[B * T], mask[B * T];
        s_pad(B, T, rows, lens, left, ids, mask);
        float *batch = s_host(
            bt_model_forward(m, ctx, s_i64(ctx, B, T, ids), s_i64(ctx, B, T, mask))); /* (B,T,V) */
        CHECK(batch != NULL);
        double diff = 0;
        for (int b = 0; b < B && batch; b++) {
            float *alone = s_row_logits(m, ctx, seq[b], lens[b]);
            int64_t start = left ? T - lens[b] : 0;
            for (int64_t t = 0; t < lens[b] && alone; t++)
                diff = fmax(diff, s_max_diff(&batch[((size_t)b * T + start + t) * V],
                                             &alone[(size_t)t * V], V));
            free(alone);
        }
        CHECK(diff < 1e-5);
        printf("%s padding vs rows alone: max |diff| %.3g\n", left ? "left" : "right", diff);
        free(batch);
        bt_ctx_reset(ctx);
    }
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
}

/*  (b') Packed rows: sequences back to back, positions restarting at 0 and a block-diagonal mask
    give each sequence the logits and log-probs it has alone (an unpadded row of its own), and
    padding stays finite.  The comparison can fail: one segment for the whole row (the mask
    dropped) or positions the rotary embedding does not see (all 0) give other logits.  Positions
    that run on across the row give the same logits to float rounding: rotary attention depends on
    position differences only, within a segment the same. */
static void test_packing(void) {
    enum { B = 2, T = 16, S = 5 };
    const int64_t lens[S] = {5, 7, 3, 9, 4}, row_of[S] = {0, 0, 0, 1, 1}, col[S] = {0, 5, 12, 0, 9};
    int32_t seq[S][T];
    int64_t ids[B * T], seg[B * T] = {0}, pos[B * T] = {0}, one_seg[B * T] = {0},
                                run_on[B * T] = {0}, zeros[B * T] = {0};
    for (int64_t i = 0; i < B * T; i++)
        ids[i] = PAD;
    for (int s = 0; s < S; s++)
        for (int64_t t = 0; t < lens[s]; t++) {
            int64_t at = row_of[s] * T + col[s] + t;
            seq[s][t] = s_token();
            ids[at] = seq[s][t];
            seg[at] = col[s] + 1;
            pos[at] = t;
            one_seg[at] = 1;
            run_on[at] = col[s] + t;
        }
    bt_model_config cfg = s_config(2);
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 5);
    bt_ctx *ctx = bt_ctx_new();
    CHECK(m != NULL);
    bt_tensor *tids = s_i64(ctx, B, T, ids);
    const int64_t *segs[4] = {seg, one_seg, seg, seg}, *poss[4] = {pos, pos, zeros, run_on};
    double diff[4] = {0, 0, 0, 0}, lp_diff = 0;
    for (int k = 0; k < 4 && m; k++) {
        float *packed = s_host(bt_model_forward_packed(m, ctx, tids, s_i64(ctx, B, T, segs[k]),
                                                       s_i64(ctx, B, T, poss[k]))); /* (B,T,V) */
        CHECK(packed != NULL);
        for (int64_t i = 0; k == 0 && packed && i < (int64_t)B * T * V; i++)
            CHECK(isfinite(packed[i]));
        for (int s = 0; s < S && packed; s++) {
            float *alone = s_row_logits(m, ctx, seq[s], lens[s]);
            for (int64_t t = 0; t < lens[s] && alone; t++)
                diff[k] = fmax(diff[k], s_max_diff(&packed[(row_of[s] * T + col[s] + t) * V],
                                                   &alone[t * V], V));
            free(alone);
        }
        free(packed);
    }
    /* log-probs: element col+t of the packed row predicts token t+1 of the sequence */
    float *lp = s_host(bt_model_token_logprobs_packed(m, ctx, tids, s_i64(ctx, B, T, seg),
                                                      s_i64(ctx, B, T, pos), 0.7, NULL));
    CHECK(lp != NULL);
    for (int s = 0; s < S && lp; s++) {
        int64_t row_ids[T], ones[T];
        for (int64_t t = 0; t < lens[s]; t++) {
            row_ids[t] = seq[s][t];
            ones[t] = 1;
        }
        float *alone = s_host(bt_model_token_logprobs(m, ctx, s_i64(ctx, 1, lens[s], row_ids),
                                                      s_i64(ctx, 1, lens[s], ones), 0.7, NULL));
        for (int64_t t = 0; t + 1 < lens[s] && alone; t++)
            lp_diff = fmax(lp_diff,
                           fabs((double)lp[row_of[s] * (T - 1) + col[s] + t] - (double)alone[t]));
        free(alone);
    }
    free(lp);
    printf("packed rows vs sequences alone: max |diff| %.3g (log-probs %.3g); without the mask "
           "%.3g, positions all 0 %.3g, positions running on %.3g\n",
           diff[0], lp_diff, diff[1], diff[2], diff[3]);
    CHECK(diff[0] < 1e-5 && lp_diff < 1e-5);
    CHECK(diff[1] > 1e-4 && diff[2] > 1e-4); /* ten times the tolerance above, at least */
    CHECK(diff[3] < 1e-5);
    /* shapes are checked */
    CHECK(bt_model_forward_packed(m, ctx, tids, s_i64(ctx, B, T - 1, seg), s_i64(ctx, B, T, pos)) ==
          NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "bt_model_forward_packed");
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
}

/*  (b'') Shared prefixes: row 0 holds a prompt of 6 tokens with responses of 4, 3 and 5 tokens,
    then a plain sequence of 5; row 1 a prompt of 3 with responses of 2 and 6, then padding.  Each
    response's logits, log-probs and entropies equal those of prompt ++ response alone, its first
    token read from the prompt's last output row (element r-1 of a response at column r).  Without
    the prefix marking, or with response positions restarting at 0, they do not.  Changing one
    token of one response leaves every other sequence's log-probs as they were. */
typedef struct s_share_layout {
    int64_t row, col, prompt_col, P, L; /* a response of L at col after a prompt of P at prompt_col;
                                           P = 0: a plain sequence of L at col */
} s_share_layout;

static void s_share_fill(const s_share_layout *sq, int n, int32_t (*tok)[16], int64_t T,
                         int64_t *ids, int64_t *seg, int64_t *pre, int64_t *pos, int64_t *run_pos) {
    for (int i = 0; i < n; i++) {
        const s_share_layout *s = &sq[i];
        for (int64_t t = 0; t < s->P + s->L; t++) { /* the prompt again for each: the same ids */
            int64_t at = s->row * T + (t < s->P ? s->prompt_col + t : s->col + t - s->P);
            ids[at] = tok[i][t];
            seg[at] = (t < s->P ? s->prompt_col : s->col) + 1;
            pre[at] = t < s->P || s->P == 0 ? 0 : s->prompt_col + 1;
            pos[at] = t;
            run_pos[at] = t < s->P || s->P == 0 ? t : t - s->P; /* restarting: wrong */
        }
    }
}

static void test_shared_prefix(void) {
    enum { B = 2, T = 24, S = 6 };
    const s_share_layout sq[S] = {{0, 6, 0, 6, 4},  {0, 10, 0, 6, 3}, {0, 13, 0, 6, 5},
                                  {0, 18, 0, 0, 5}, {1, 3, 0, 3, 2},  {1, 5, 0, 3, 6}};
    int32_t tok[S][16]; /* prompt ++ response, the prompt shared within a row's group */
    for (int i = 0; i < S; i++)
        for (int64_t t = 0; t < sq[i].P + sq[i].L; t++)
            tok[i][t] = t < sq[i].P && i > 0 && sq[i - 1].P == sq[i].P && sq[i].P > 0
                            ? tok[i - 1][t]
                            : s_token();
    int64_t ids[B * T], seg[B * T] = {0}, pre[B * T] = {0}, pos[B * T] = {0}, run_pos[B * T] = {0};
    int64_t zeros[B * T] = {0};
    for (int i = 0; i < B * T; i++)
        ids[i] = PAD;
    s_share_fill(sq, S, tok, T, ids, seg, pre, pos, run_pos);
    bt_model_config cfg = s_config(2);
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 6);
    bt_ctx *ctx = bt_ctx_new();
    CHECK(m != NULL);
    bt_tensor *tids = s_i64(ctx, B, T, ids), *tseg = s_i64(ctx, B, T, seg);
    /* logits: the marked layout, then without the marking, then with restarting positions */
    const int64_t *pres[3] = {pre, zeros, pre}, *poss[3] = {pos, pos, run_pos};
    double diff[3] = {0, 0, 0};
    for (int k = 0; k < 3 && m; k++) {
        float *shared =
            s_host(bt_model_forward_shared(m, ctx, tids, tseg, s_i64(ctx, B, T, pres[k]),
                                           s_i64(ctx, B, T, poss[k]))); /* (B,T,V) */
        CHECK(shared != NULL);
        for (int i = 0; i < S && shared; i++) {
            const s_share_layout *s = &sq[i];
            float *alone = s_row_logits(m, ctx, tok[i], s->P + s->L);
            for (int64_t t = 0; t < s->P + s->L && alone; t++) {
                int64_t col = t < s->P ? s->prompt_col + t : s->col + t - s->P;
                diff[k] =
                    fmax(diff[k], s_max_diff(&shared[(s->row * T + col) * V], &alone[t * V], V));
            }
            free(alone);
        }
        free(shared);
    }
    /* log-probs and entropies at temperature 0.7, and the same after one token changes */
    float *lp[2] = {NULL, NULL}, *en = NULL;
    double lp_diff = 0, en_diff = 0;
    for (int k = 0; k < 2 && m; k++) {
        bt_tensor *ent = NULL;
        lp[k] = s_host(bt_model_token_logprobs_shared(m, ctx, s_i64(ctx, B, T, ids), tseg,
                                                      s_i64(ctx, B, T, pre), s_i64(ctx, B, T, pos),
                                                      0.7, k == 0 ? &ent : NULL));
        CHECK(lp[k] != NULL);
        if (k == 0)
            en = s_host(ent);
        ids[0 * T + 10 + 1] = (ids[0 * T + 10 + 1] + 1) % 256; /* token 1 of the second response */
    }
    for (int i = 0; i < S && lp[0] && en; i++) {
        const s_share_layout *s = &sq[i];
        int64_t n = s->P + s->L, row_ids[16], ones[16];
        for (int64_t t = 0; t < n; t++) {
            row_ids[t] = tok[i][t];
            ones[t] = 1;
        }
        bt_tensor *ent = NULL;
        float *alone = s_host(bt_model_token_logprobs(m, ctx, s_i64(ctx, 1, n, row_ids),
                                                      s_i64(ctx, 1, n, ones), 0.7, &ent));
        float *alone_en = s_host(ent);
        for (int64_t t = 0; t + 1 < n && alone && alone_en; t++) { /* element t predicts t+1 */
            int64_t col = t + 1 < s->P ? s->prompt_col + t : s->col + t - s->P;
            int64_t e = s->row * (T - 1) + col;
            lp_diff = fmax(lp_diff, fabs((double)lp[0][e] - alone[t]));
            en_diff = fmax(en_diff, fabs((double)en[e] - alone_en[t]));
        }
        free(alone);
        free(alone_en);
    }
    /* the change: only the second response's elements from the changed token on may move */
    int moved = 0, others_changed = 0;
    for (int64_t e = 0; e < B * (T - 1) && lp[0] && lp[1]; e++) {
        bool own = e >= 10 && e < 10 + 3 - 1; /* elements 10..11 predict its tokens 1 and 2 */
        if (own)
            moved += lp[0][e] != lp[1][e];
        else
            others_changed += lp[0][e] != lp[1][e];
    }
    printf("shared prefixes vs each sequence alone: max |diff| %.3g (log-probs %.3g, entropies "
           "%.3g); without the prefix marking %.3g, positions restarting %.3g; one token changed: "
           "%d of its 2 log-probs moved, %d elsewhere\n",
           diff[0], lp_diff, en_diff, diff[1], diff[2], moved, others_changed);
    CHECK(diff[0] < 1e-5 && lp_diff < 1e-5 && en_diff < 1e-5);
    CHECK(diff[1] > 1e-4 && diff[2] > 1e-4); /* ten times the tolerance above, at least */
    CHECK(moved == 2 && others_changed == 0);
    /* shapes are checked */
    CHECK(bt_model_forward_shared(m, ctx, tids, tseg, s_i64(ctx, B, T - 1, pre),
                                  s_i64(ctx, B, T, pos)) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "bt_model_forward_shared");
    free(lp[0]);
    free(lp[1]);
    free(en);
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
}

/*  Copies src's parameter into dst's (same name), repeating each block of head_rows rows n_rep
    times (kv head j serves query heads j*n_rep .. j*n_rep + n_rep - 1); n_rep 1 copies as is. */
static void s_copy_repeated(bt_model *dst, bt_tensor *src, const char *name, int64_t n_rep,
                            int64_t head_rows) {
    float *s = s_host(src);
    int64_t numel = bt_numel(src), block = n_rep > 1 ? head_rows * bt_dim(src, 1) : numel;
    float *out = malloc((size_t)(numel * n_rep) * sizeof *out);
    for (int64_t h = 0; h < numel / block * n_rep; h++)
        memcpy(&out[h * block], &s[(h / n_rep) * block], (size_t)block * sizeof *out);
    bt_ctx *ctx = bt_ctx_new();
    bt_tensor *d = bt_model_find_param(dst, name);
    const int64_t shape[] = {bt_dim(d, 0), bt_dim(d, 1)};
    CHECK(bt_numel(d) == numel * n_rep);
    CHECK_OK(bt_copy_(d, bt_from_host(ctx, BT_F32, bt_cpu(), bt_ndim(d), shape, out)));
    bt_ctx_destroy(&ctx);
    free(s);
    free(out);
}

/*  (c) Grouped-query attention equals full multi-head attention with the k/v heads duplicated. */
static void test_gqa(void) {
    enum { B = 2, T = 6 };
    bt_model_config gcfg = s_config(2), mcfg = s_config(4);
    bt_model *gqa = bt_model_new(&gcfg, bt_cpu(), 3), *mha = bt_model_new(&mcfg, bt_cpu(), 99);
    CHECK(gqa && mha);
    if (!gqa || !mha)
        goto out;
    bool grad = bt_set_grad_enabled(false);
    for (int i = 0; i < bt_model_num_params(gqa); i++) {
        const char *name = bt_model_param_name(gqa, i);
        bool kv = strstr(name, "k_proj") || strstr(name, "v_proj");
        s_copy_repeated(mha, bt_model_params(gqa)[i], name, kv ? 2 : 1, 8);
    }
    bt_set_grad_enabled(grad);
    int32_t seq[B][T];
    const int32_t *rows[B] = {seq[0], seq[1]};
    const int64_t lens[B] = {6, 4};
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            seq[b][i] = s_token();
    int64_t ids[B * T], mask[B * T];
    s_pad(B, T, rows, lens, true, ids, mask);
    bt_ctx *ctx = bt_ctx_new();
    float *a = s_host(bt_model_forward(gqa, ctx, s_i64(ctx, B, T, ids), s_i64(ctx, B, T, mask)));
    float *b = s_host(bt_model_forward(mha, ctx, s_i64(ctx, B, T, ids), s_i64(ctx, B, T, mask)));
    CHECK(a && b);
    if (a && b) {
        double d = s_max_diff(a, b, (size_t)B * T * V);
        CHECK(d < 1e-5);
        printf("GQA vs duplicated-head MHA: max |diff| %.3g\n", d);
    }
    free(a);
    free(b);
    bt_ctx_destroy(&ctx);
out:
    bt_model_destroy(&gqa);
    bt_model_destroy(&mha);
}

/*  (d) Token log-probs and entropies equal log_softmax(logits / temperature) done on the host. */
static void test_token_logprobs(void) {
    enum { B = 3, T = 7 };
    int32_t seq[B][T];
    const int32_t *rows[B] = {seq[0], seq[1], seq[2]};
    const int64_t lens[B] = {7, 5, 2};
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            seq[b][i] = s_token();
    int64_t ids[B * T], mask[B * T];
    s_pad(B, T, rows, lens, false, ids, mask);
    bt_model_config cfg = s_config(2);
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 4);
    bt_ctx *ctx = bt_ctx_new();
    CHECK(m != NULL);
    const double temps[] = {1.0, 0.7};
    for (int k = 0; k < 2 && m; k++) {
        bt_tensor *ent = NULL;
        bt_tensor *idt = s_i64(ctx, B, T, ids), *mt = s_i64(ctx, B, T, mask);
        float *lp = s_host(bt_model_token_logprobs(m, ctx, idt, mt, temps[k], &ent));
        float *en = s_host(ent);
        float *logits = s_host(bt_model_forward(m, ctx, idt, mt)); /* (B, T, V) */
        CHECK(lp && en && logits);
        CHECK(bt_dim(ent, 0) == B && bt_dim(ent, 1) == T - 1);
        double dlp = 0, den = 0;
        for (int b = 0; b < B && lp && en && logits; b++)
            for (int t = 0; t < T - 1; t++) {
                const float *z = &logits[((size_t)b * T + t) * V];
                double mx = -DBL_MAX, sum = 0, h = 0;
                for (int v = 0; v < V; v++)
                    mx = fmax(mx, z[v] / temps[k]);
                for (int v = 0; v < V; v++)
                    sum += exp(z[v] / temps[k] - mx);
                for (int v = 0; v < V; v++) {
                    double logp = z[v] / temps[k] - mx - log(sum);
                    h -= exp(logp) * logp;
                }
                double want = z[ids[b * T + t + 1]] / temps[k] - mx - log(sum);
                dlp = fmax(dlp, fabs(lp[b * (T - 1) + t] - want));
                den = fmax(den, fabs(en[b * (T - 1) + t] - h));
            }
        CHECK(dlp < 1e-5);
        CHECK(den < 1e-5);
        printf("token log-probs at temperature %.1f: max |diff| %.3g, entropy %.3g\n", temps[k],
               dlp, den);
        free(lp);
        free(en);
        free(logits);
        bt_ctx_reset(ctx);
    }
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
}

/*  (e) top-k / top-p keep exactly the expected tokens of hand-made rows. */
static void test_filter(void) {
    const float p[2][5] = {{0.05f, 0.5f, 0.1f, 0.2f, 0.15f}, {0.2f, 0.15f, 0.05f, 0.1f, 0.5f}};
    float z[10];
    for (int i = 0; i < 10; i++)
        z[i] = logf(p[i / 5][i % 5]);
    const struct {
        int64_t k;
        double p;
        float min_kept; /* a token is kept iff its probability is >= this */
    } cases[] = {
        {0, 0.75, 0.15f}, /* 0.5 + 0.2 < 0.75 <= 0.5 + 0.2 + 0.15 */
        {0, 0.3, 0.5f},   {0, 0.9, 0.1f},
        {2, 1.0, 0.2f},   {3, 0.55, 0.5f}, /* top-3 renormalised: 0.5 / 0.85 = 0.59 >= 0.55 */
        {1, 1.0, 0.5f},   {0, 1.0, 0.0f},
    };
    bt_ctx *ctx = bt_ctx_new();
    const int64_t shape[] = {2, 5};
    bt_tensor *logits = bt_from_host(ctx, BT_F32, bt_cpu(), 2, shape, z);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *f = s_host(bt_sample_filter(ctx, logits, cases[c].k, cases[c].p));
        CHECK(f != NULL);
        for (int i = 0; i < 10 && f; i++) {
            bool kept = p[i / 5][i % 5] >= cases[c].min_kept;
            if (kept != (f[i] == z[i]) || kept == isinf(f[i])) {
                fprintf(stderr, "filter case %zu (top_k %lld, top_p %g): token %d %s\n", c,
                        (long long)cases[c].k, cases[c].p, i, kept ? "dropped" : "kept");
                CHECK(0);
            }
        }
        free(f);
    }
    printf("top-k/top-p filter: %zu hand-made cases\n", sizeof cases / sizeof cases[0]);
    bt_ctx_destroy(&ctx);
}

enum { GB = 4, GNEW = 12 };
static const int64_t s_prompt_lens[GB] = {5, 2, 8, 3};
static int32_t s_prompts[GB][8];
static const int32_t *s_prompt_rows[GB] = {s_prompts[0], s_prompts[1], s_prompts[2], s_prompts[3]};

static int32_t s_stops[2]; /* the stops s_run passes (s_n_stops of them; 0: the model's EOS) */
static int s_n_stops;

static bt_status s_run(bt_model *m, double temp, int64_t top_k, double top_p, bool cache,
                       uint64_t seed, bt_generation *g) {
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.n_stops = s_n_stops;
    memcpy(sc.stops, s_stops, sizeof s_stops);
    sc.max_new_tokens = GNEW;
    sc.temperature = temp;
    sc.top_k = top_k;
    sc.top_p = top_p;
    sc.use_cache = cache;
    uint64_t keys[GB];
    for (int r = 0; r < GB; r++)
        keys[r] = bt_rng_key(seed, (uint64_t)r);
    bt_status st = bt_generate(m, s_prompt_rows, s_prompt_lens, GB, &sc, keys, g);
    if (st != BT_OK)
        fprintf(stderr, "bt_generate: %s\n", bt_last_error());
    return st;
}

/*  Whether v occurs among a[0 .. n). */
static bool s_contains(const int32_t *a, int64_t n, int32_t v) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] == v)
            return true;
    return false;
}

static bool s_same_tokens(const bt_generation *a, const bt_generation *b) {
    return memcmp(a->tokens, b->tokens, GB * GNEW * sizeof *a->tokens) == 0 &&
           memcmp(a->lengths, b->lengths, GB * sizeof *a->lengths) == 0;
}

/*  Greedy tokens are the argmax of a full forward over prompt + tokens so far, and their log-probs
    its log_softmax. */
static void s_check_greedy(bt_model *m, const bt_generation *g) {
    bt_ctx *ctx = bt_ctx_new();
    double dlp = 0;
    for (int b = 0; b < GB; b++) {
        int32_t seq[8 + GNEW];
        int64_t n = s_prompt_lens[b], len = g->lengths[b];
        memcpy(seq, s_prompts[b], (size_t)n * sizeof *seq);
        memcpy(seq + n, &g->tokens[b * GNEW], (size_t)len * sizeof *seq);
        float *logits = s_row_logits(m, ctx, seq, n + len); /* (1, n + len, V) */
        CHECK(logits != NULL);
        for (int64_t i = 0; i < len && logits; i++) {
            const float *z = &logits[(n - 1 + i) * V];
            double mx = -DBL_MAX, sum = 0;
            for (int v = 0; v < V; v++)
                mx = fmax(mx, z[v]);
            for (int v = 0; v < V; v++)
                sum += exp(z[v] - mx);
            int32_t tok = g->tokens[b * GNEW + i];
            CHECK(z[tok] >= mx - 1e-6); /* the argmax, up to a float tie */
            dlp = fmax(dlp, fabs(g->logprobs[b * GNEW + i] - (z[tok] - mx - log(sum))));
        }
        free(logits);
        bt_ctx_reset(ctx);
    }
    CHECK(dlp < 1e-4);
    bt_ctx_destroy(&ctx);
}

/*  The log-prob recorded for each sampled token is what the trainer recomputes: token log-probs of
    prompt + completion, right-padded, at the sampling temperature (before top-k/top-p). */
static void s_check_recompute(bt_model *m, const bt_generation *g, double temperature) {
    enum { T = 8 + GNEW };
    int32_t seq[GB][T];
    const int32_t *rows[GB];
    int64_t lens[GB], ids[GB * T], mask[GB * T];
    for (int b = 0; b < GB; b++) {
        memcpy(seq[b], s_prompts[b], (size_t)s_prompt_lens[b] * sizeof **seq);
        memcpy(seq[b] + s_prompt_lens[b], &g->tokens[b * GNEW],
               (size_t)g->lengths[b] * sizeof **seq);
        lens[b] = s_prompt_lens[b] + g->lengths[b];
        rows[b] = seq[b];
    }
    s_pad(GB, T, rows, lens, false, ids, mask);
    bt_ctx *ctx = bt_ctx_new();
    float *lp = s_host(bt_model_token_logprobs(m, ctx, s_i64(ctx, GB, T, ids),
                                               s_i64(ctx, GB, T, mask), temperature, NULL));
    CHECK(lp != NULL);
    double d = 0;
    for (int b = 0; b < GB && lp; b++)
        for (int64_t i = 0; i < g->lengths[b]; i++)
            d = fmax(d,
                     fabs(lp[b * (T - 1) + s_prompt_lens[b] - 1 + i] - g->logprobs[b * GNEW + i]));
    CHECK(d < 1e-4);
    printf("sampled log-probs vs trainer recomputation at temperature %.1f: max |diff| %.3g\n",
           temperature, d);
    free(lp);
    bt_ctx_destroy(&ctx);
}

/*  (e) Sampling: reproducible from the seed, greedy = argmax of the full forward with and without
    the cache, top-k 1 = greedy, EOS ends a row and its length is reported. */
static void test_generate(void) {
    for (int b = 0; b < GB; b++)
        for (int i = 0; i < 8; i++)
            s_prompts[b][i] = s_token();
    bt_model_config cfg = s_config(2);
    cfg.eos_token_id = -1; /* no row stops early here */
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 5);
    CHECK(m != NULL);
    if (!m)
        return;
    bt_generation a, b, greedy, nocache;
    bt_generation_init(&a);
    bt_generation_init(&b);
    bt_generation_init(&greedy);
    bt_generation_init(&nocache);

    CHECK_OK(s_run(m, 1.0, 50, 0.9, true, 11, &a));
    CHECK_OK(s_run(m, 1.0, 50, 0.9, true, 11, &b));
    CHECK(a.tokens && b.tokens && s_same_tokens(&a, &b));
    CHECK(a.logprobs && b.logprobs &&
          memcmp(a.logprobs, b.logprobs, GB * GNEW * sizeof *a.logprobs) == 0);
    CHECK_OK(s_run(m, 1.0, 50, 0.9, true, 12, &b));
    CHECK(b.tokens && !s_same_tokens(&a, &b));
    CHECK_OK(s_run(m, 0.8, 5, 0.7, true, 14, &b));
    if (b.tokens)
        s_check_recompute(m, &b, 0.8);

    CHECK_OK(s_run(m, 0.0, 0, 1.0, true, 0, &greedy));
    CHECK_OK(s_run(m, 0.0, 0, 1.0, false, 0, &nocache));
    for (int r = 0; r < GB && greedy.tokens; r++) {
        CHECK(greedy.lengths[r] == GNEW);
        CHECK(greedy.finish[r] == BT_FINISH_LENGTH);
    }
    if (greedy.tokens && nocache.tokens) {
        s_check_greedy(m, &greedy);
        s_check_greedy(m, &nocache);
        CHECK(s_same_tokens(&greedy, &nocache));
        CHECK(s_max_diff(greedy.logprobs, nocache.logprobs, GB * GNEW) < 1e-4);
    }
    CHECK_OK(s_run(m, 1.0, 1, 1.0, true, 13, &a));
    CHECK(a.tokens && greedy.tokens && s_same_tokens(&a, &greedy));

    /* EOS: the same weights with eos_token_id = row 0's first greedy token not seen before */
    int64_t k = 1;
    while (greedy.tokens && k < GNEW - 1 && s_contains(greedy.tokens, k, greedy.tokens[k]))
        k++;
    int32_t eos = greedy.tokens ? greedy.tokens[k] : 0;
    cfg.eos_token_id = eos;
    bt_model *me = bt_model_new(&cfg, bt_cpu(), 5);
    CHECK(me != NULL);
    for (int cache = 0; cache < 2 && me && greedy.tokens; cache++) {
        CHECK_OK(s_run(me, 0.0, 0, 1.0, cache, 0, &b));
        if (!b.tokens)
            continue;
        CHECK(b.lengths[0] == k + 1);
        CHECK(b.finish[0] == BT_FINISH_EOS);
        CHECK(b.tokens[k] == eos);
        CHECK(memcmp(b.tokens, greedy.tokens, (size_t)(k + 1) * sizeof *b.tokens) == 0);
        for (int64_t i = k + 1; i < GNEW; i++)
            CHECK(b.tokens[i] == PAD && b.logprobs[i] == 0.0f);
        for (int r = 1; r < GB; r++) { /* rows that never sample eos are unchanged */
            if (!s_contains(&greedy.tokens[r * GNEW], GNEW, eos))
                CHECK(b.lengths[r] == GNEW && b.finish[r] == BT_FINISH_LENGTH &&
                      memcmp(&b.tokens[r * GNEW], &greedy.tokens[r * GNEW],
                             GNEW * sizeof *b.tokens) == 0);
        }
    }
    /* the caller's stop tokens instead of the model's EOS: a token no row samples and row 0's
       token at k (an instruct model's end of turn and end of text): the same stop */
    int32_t never = 0;
    while (greedy.tokens && s_contains(greedy.tokens, GB * GNEW, never))
        never++;
    s_stops[0] = never;
    s_stops[1] = eos;
    s_n_stops = 2;
    CHECK_OK(s_run(m, 0.0, 0, 1.0, true, 0, &b)); /* m: a model without eos_token_id */
    CHECK(b.tokens && greedy.tokens && b.lengths[0] == k + 1 && b.finish[0] == BT_FINISH_EOS);
    s_n_stops = 0;
    printf("generate: greedy rows of %d tokens, row 0 stops at EOS after %lld\n", GNEW,
           (long long)k + 1);
    bt_generation_release(&a);
    bt_generation_release(&b);
    bt_generation_release(&greedy);
    bt_generation_release(&nocache);
    bt_model_destroy(&me);
    bt_model_destroy(&m);
}

/*  (e) Inverse-CDF draws against a float64 host computation of softmax(z / T): at chosen uniforms
    the token is the first id whose cumulative probability reaches u, with the log-prob of the
    unfiltered distribution; over 20,000 keyed uniforms the frequencies under top-k 4 are those of
    the renormalised top 4 (within 5 sigma) and the others never appear; with vocab_limit 4 the
    ids beyond it are never drawn nor chosen greedily although their logits are the largest; NaN
    logits are refused. */
static void test_sample_draws(void) {
    enum { W = 6, N = 20000 };
    const float z[W] = {0.3f, -1.0f, 2.0f, 1.1f, 0.0f, -0.4f};
    const double T = 0.7;
    double p[W], cdf[W], total = 0;
    for (int j = 0; j < W; j++)
        total += p[j] = exp(z[j] / T);
    for (int j = 0; j < W; j++) {
        p[j] /= total;
        cdf[j] = (j ? cdf[j - 1] : 0) + p[j];
    }
    bt_ctx *ctx = bt_ctx_new();
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.temperature = T;
    /* chosen uniforms: just below, inside and just above each id's interval */
    double u[3 * W];
    int64_t want[3 * W], got[3 * W];
    float *rows = malloc(sizeof *rows * N * W), lp[3 * W];
    for (int r = 0; r < N; r++)
        memcpy(rows + r * W, z, sizeof z);
    for (int j = 0; j < W; j++) {
        double lo = j ? cdf[j - 1] : 0;
        u[3 * j] = fmax(lo - 1e-4, 1e-9); /* the id before (or id 0) */
        u[3 * j + 1] = (lo + cdf[j]) / 2;
        u[3 * j + 2] = fmin(cdf[j] + 1e-4, 1 - 1e-9); /* the id after (or the last) */
        want[3 * j] = j ? j - 1 : 0;
        want[3 * j + 1] = j;
        want[3 * j + 2] = j + 1 < W ? j + 1 : W - 1;
    }
    const int64_t few[] = {3 * W, W}, many[] = {N, W};
    bt_tensor *tokens = NULL, *logprobs = NULL;
    CHECK_OK(bt_sample_next(ctx, bt_from_host(ctx, BT_F32, bt_cpu(), 2, few, rows), &sc, u, &tokens,
                            &logprobs));
    CHECK_OK(bt_to_host(tokens, got, sizeof got));
    CHECK_OK(bt_to_host(logprobs, lp, sizeof lp));
    for (int r = 0; r < 3 * W; r++) {
        CHECK(got[r] == want[r]);
        CHECK_NEAR(lp[r], log(p[want[r]]), 1e-5);
    }
    /* frequencies under top-k 4: ids 2, 3, 0, 4 renormalised */
    double *uu = malloc(sizeof *uu * N), top = p[0] + p[2] + p[3] + p[4];
    int64_t *drawn = malloc(sizeof *drawn * N), counts[W] = {0};
    for (int i = 0; i < N; i++)
        uu[i] = bt_rng_uniform(bt_rng_key(99, (uint64_t)i));
    sc.top_k = 4;
    CHECK_OK(bt_sample_next(ctx, bt_from_host(ctx, BT_F32, bt_cpu(), 2, many, rows), &sc, uu,
                            &tokens, &logprobs));
    CHECK_OK(bt_to_host(tokens, drawn, sizeof *drawn * N));
    for (int i = 0; i < N; i++)
        counts[drawn[i] >= 0 && drawn[i] < W ? drawn[i] : 0] += drawn[i] >= 0 && drawn[i] < W;
    for (int j = 0; j < W; j++) {
        double q = j == 1 || j == 5 ? 0 : p[j] / top;
        CHECK(fabs((double)counts[j] - N * q) <= 5 * sqrt(N * q * (1 - q)) + (q == 0 ? 0 : 1));
    }
    CHECK(counts[0] + counts[2] + counts[3] + counts[4] == N);
    /* a padded vocabulary: ids 4 and 5 have the largest logits, but vocab_limit is 4 */
    for (int r = 0; r < N; r++)
        rows[r * W + 4] = rows[r * W + 5] = 40.0f;
    sc.top_k = 0;
    sc.vocab_limit = 4;
    CHECK_OK(bt_sample_next(ctx, bt_from_host(ctx, BT_F32, bt_cpu(), 2, many, rows), &sc, uu,
                            &tokens, &logprobs));
    CHECK_OK(bt_to_host(tokens, drawn, sizeof *drawn * N));
    int64_t padded = 0;
    for (int i = 0; i < N; i++)
        padded += drawn[i] >= 4;
    CHECK(padded == 0);
    for (int k = 0; k <= 3; k += 3) { /* greedy, and top-k 3 at temperature 1 */
        sc.temperature = k ? 1.0 : 0.0;
        sc.top_k = k;
        CHECK_OK(bt_sample_next(ctx, bt_from_host(ctx, BT_F32, bt_cpu(), 2, few, rows), &sc, u,
                                &tokens, &logprobs));
        CHECK_OK(bt_to_host(tokens, got, sizeof got));
        for (int r = 0; r < 3 * W; r++)
            CHECK(k ? got[r] != 1 && got[r] < 4 : got[r] == 2);
    }
    /* NaN logits: refused, not drawn from */
    rows[0] = NAN;
    sc.temperature = 1.0;
    CHECK(bt_sample_next(ctx, bt_from_host(ctx, BT_F32, bt_cpu(), 2, few, rows), &sc, u, &tokens,
                         &logprobs) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "row 0's logits hold NaN or inf");
    printf("inverse-CDF draws: %d chosen uniforms exact, %d keyed draws within 5 sigma\n", 3 * W,
           N);
    free(rows);
    free(uu);
    free(drawn);
    bt_ctx_destroy(&ctx);
}

/*  (e) A row's tokens depend on its prompt and its key alone: rows generated again in another
    batch (other companions, another order, another padding width) come out the same. */
static void test_generate_keyed(void) {
    for (int b = 0; b < GB; b++)
        for (int i = 0; i < 8; i++)
            s_prompts[b][i] = s_token();
    bt_model_config cfg = s_config(2);
    cfg.eos_token_id = -1;
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 8);
    CHECK(m != NULL);
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = GNEW;
    sc.temperature = 1.0;
    uint64_t keys[GB];
    for (int r = 0; r < GB; r++)
        keys[r] = bt_rng_key(31, (uint64_t)r);
    bt_generation all, some;
    bt_generation_init(&all);
    bt_generation_init(&some);
    CHECK_OK(bt_generate(m, s_prompt_rows, s_prompt_lens, GB, &sc, keys, &all));
    /* rows 2 and 0, in that order, beside a longer prompt of another key */
    int32_t longer[12];
    for (int i = 0; i < 12; i++)
        longer[i] = s_token();
    const int32_t *rows[3] = {s_prompts[2], longer, s_prompts[0]};
    const int64_t lens[3] = {s_prompt_lens[2], 12, s_prompt_lens[0]};
    const uint64_t other[3] = {keys[2], 7, keys[0]};
    CHECK_OK(bt_generate(m, rows, lens, 3, &sc, other, &some));
    if (all.tokens && some.tokens) {
        CHECK(memcmp(&all.tokens[2 * GNEW], &some.tokens[0], GNEW * sizeof *all.tokens) == 0);
        CHECK(memcmp(&all.tokens[0], &some.tokens[2 * GNEW], GNEW * sizeof *all.tokens) == 0);
        CHECK(s_max_diff(&all.logprobs[2 * GNEW], &some.logprobs[0], GNEW) < 1e-5);
        CHECK(memcmp(&all.tokens[0], &all.tokens[2 * GNEW], GNEW * sizeof *all.tokens) != 0);
    }
    /* the same prompt under two keys: two completions */
    const int32_t *twice[2] = {s_prompts[1], s_prompts[1]};
    const int64_t twice_lens[2] = {s_prompt_lens[1], s_prompt_lens[1]};
    CHECK_OK(bt_generate(m, twice, twice_lens, 2, &sc, keys, &some));
    CHECK(some.tokens && memcmp(&some.tokens[0], &some.tokens[GNEW], GNEW * sizeof *some.tokens));
    CHECK(bt_generate(m, twice, twice_lens, 2, &sc, NULL, &some) == BT_EINVAL); /* no keys */
    bt_generation_release(&all);
    bt_generation_release(&some);
    bt_model_destroy(&m);
}

static void s_remove_dir(const char *dir) {
    const char *files[] = {"config.json",
                           "model.safetensors",
                           "tokenizer_config.json",
                           "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"};
    char path[256];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static uint16_t s_bf16(float f) { /* truncation: exact to read back */
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
}

/*  Writes dir/model.safetensors by hand from m's parameters: without skip, with bad_shape's first
    dimension halved, as F32 or as BF16. */
static void s_write_weights(const bt_model *m, const char *dir, const char *skip,
                            const char *bad_shape, bool bf16) {
    int n = bt_model_num_params(m), w = 0;
    bt_st_tensor ts[64];
    void *bufs[64];
    for (int i = 0; i < n; i++) {
        bt_tensor *p = bt_model_params(m)[i];
        const char *name = bt_model_param_name(m, i);
        float *f = s_host(p);
        size_t numel = (size_t)bt_numel(p);
        bufs[i] = f;
        if (bf16) {
            uint16_t *h = malloc(numel * sizeof *h);
            for (size_t j = 0; j < numel; j++)
                h[j] = s_bf16(f[j]);
            free(f);
            bufs[i] = h;
        }
        if (skip && strcmp(name, skip) == 0)
            continue;
        ts[w] = (bt_st_tensor){
            .name = name, .dtype = bf16 ? BT_BF16 : BT_F32, .ndim = bt_ndim(p), .data = bufs[i]};
        for (int d = 0; d < ts[w].ndim; d++)
            ts[w].shape[d] = bt_dim(p, d);
        if (bad_shape && strcmp(name, bad_shape) == 0)
            ts[w].shape[0] /= 2;
        w++;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(bt_safetensors_write(path, ts, w, NULL, 0));
    for (int i = 0; i < n; i++)
        free(bufs[i]);
}

/*  Bytes of the file dir/model.safetensors, and of its tensor data alone (*data). */
static long s_weights_size(const char *dir, size_t *data) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st));
    *data = 0;
    for (int i = 0; st && i < bt_safetensors_count(st); i++)
        *data += bt_safetensors_entry(st, i)->nbytes;
    bt_safetensors_destroy(&st);
    FILE *f = fopen(path, "rb");
    long n = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (f)
        fclose(f);
    return n;
}

/*  Every stored tensor of dir/model.safetensors is of dtype. */
static bool s_stored_as(const char *dir, bt_dtype dtype) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st));
    bool all = st != NULL;
    for (int i = 0; st && i < bt_safetensors_count(st); i++)
        all = all && bt_safetensors_entry(st, i)->dtype == dtype;
    bt_safetensors_destroy(&st);
    return all;
}

/*  (f2) model.save_dtype's ground: a model saves in the dtype it was loaded from, so a bf16
    checkpoint saves as bf16, half the float32 file's tensor bytes, and reloads to the same
    values; a float32 model saved as bf16 holds its weights rounded to nearest even; float16 reads
    back within float16's rounding; another dtype is refused. */
static void test_save_dtype(void) {
    char dir[] = "/tmp/bt_model_XXXXXX", out[] = "/tmp/bt_model_XXXXXX";
    CHECK(mkdtemp(dir) != NULL && mkdtemp(out) != NULL);
    bt_model_config cfg = s_config(2);
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 6);
    CHECK(bt_model_save_dtype(m) == BT_F32);
    CHECK_OK(bt_model_save(m, NULL, out));
    size_t data32 = 0, data16 = 0;
    long size32 = s_weights_size(out, &data32);
    CHECK(s_stored_as(out, BT_F32));

    /* a bf16 checkpoint (written by hand) loads as float32 and saves back as bf16 */
    CHECK_OK(bt_model_save(m, NULL, dir));
    s_write_weights(m, dir, NULL, NULL, true);
    bt_dtype stored = BT_F32;
    CHECK_OK(bt_model_stored_dtype(dir, &stored));
    CHECK(stored == BT_BF16);
    bt_model *bf = bt_model_load(dir, bt_cpu());
    CHECK(bf && bt_model_save_dtype(bf) == BT_BF16);
    CHECK(bf && bt_dtype_of(bt_model_params(bf)[0]) == BT_F32);
    CHECK_OK(bt_model_save(bf, NULL, out));
    long size16 = s_weights_size(out, &data16);
    printf("model.safetensors of the test model: float32 %ld bytes, bf16 %ld bytes\n", size32,
           size16);
    CHECK(s_stored_as(out, BT_BF16) && data16 * 2 == data32 && size16 < size32 / 2 + 4096);
    bt_model *back = bt_model_load(out, bt_cpu());
    CHECK(back && bt_model_save_dtype(back) == BT_BF16);
    for (int i = 0; back && bf && i < bt_model_num_params(bf); i++) {
        float *want = s_host(bt_model_params(bf)[i]), *got = s_host(bt_model_params(back)[i]);
        CHECK(want && got &&
              !memcmp(want, got, (size_t)bt_numel(bt_model_params(bf)[i]) * sizeof *want));
        free(want);
        free(got);
    }
    bt_model_destroy(&back);
    bt_model_destroy(&bf);

    /* a float32 model saved as bf16: round to nearest even, from the bits */
    CHECK_OK(bt_model_set_save_dtype(m, BT_BF16));
    CHECK_OK(bt_model_save(m, NULL, out));
    back = bt_model_load(out, bt_cpu());
    for (int i = 0; back && i < bt_model_num_params(m); i++) {
        float *want = s_host(bt_model_params(m)[i]), *got = s_host(bt_model_params(back)[i]);
        bool exact = want && got;
        for (int64_t j = 0; exact && j < bt_numel(bt_model_params(m)[i]); j++) {
            uint32_t bits;
            memcpy(&bits, &want[j], sizeof bits);
            bits = ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            exact = got[j] == f;
        }
        CHECK(exact);
        free(want);
        free(got);
    }
    bt_model_destroy(&back);

    /* float16: 11 significant bits, subnormal below 2^-14 */
    CHECK_OK(bt_model_set_save_dtype(m, BT_F16));
    CHECK_OK(bt_model_save(m, NULL, out));
    CHECK(s_stored_as(out, BT_F16));
    back = bt_model_load(out, bt_cpu());
    CHECK(back && bt_model_save_dtype(back) == BT_F16);
    for (int i = 0; back && i < bt_model_num_params(m); i++) {
        float *want = s_host(bt_model_params(m)[i]), *got = s_host(bt_model_params(back)[i]);
        bool close = want && got;
        for (int64_t j = 0; close && j < bt_numel(bt_model_params(m)[i]); j++)
            close = fabs((double)got[j] - want[j]) <= ldexp(fabs(want[j]), -11) + ldexp(1, -25);
        CHECK(close);
        free(want);
        free(got);
    }
    bt_model_destroy(&back);
    CHECK(bt_model_set_save_dtype(m, BT_I64) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "expected F32, BF16 or F16, got int64");
    bt_model_destroy(&m);
    bt_rmtree(dir);
    bt_rmtree(out);
}

/*  Logits of a fixed padded batch, on the host. */
static float *s_probe(bt_model *m, bt_ctx *ctx) {
    enum { B = 2, T = 5 };
    const int64_t ids[B * T] = {PAD, PAD, 72, 105, 33, 256, 1, 2, 3, 4};
    const int64_t mask[B * T] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    return s_host(bt_model_forward(m, ctx, s_i64(ctx, B, T, ids), s_i64(ctx, B, T, mask)));
}

/*  (f) A saved directory loads back to bit-identical logits; BF16 weights convert exactly; a
    missing tensor, a wrong shape or a bad config is reported by name. */
static void test_save_load(void) {
    char dir[] = "/tmp/bt_model_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    bt_ctx *ctx = bt_ctx_new();
    for (int tied = 0; tied < 2; tied++) {
        bt_model_config cfg = s_config(2);
        cfg.tie_word_embeddings = tied;
        bt_model *m = bt_model_new(&cfg, bt_cpu(), 6);
        CHECK_OK(bt_model_save(m, NULL, dir));
        bt_model *back = bt_model_load(dir, bt_cpu());
        CHECK(back != NULL);
        if (!back) {
            fprintf(stderr, "bt_model_load: %s\n", bt_last_error());
            bt_model_destroy(&m);
            continue;
        }
        char *a = bt_model_config_to_json(bt_model_get_config(m));
        char *b = bt_model_config_to_json(bt_model_get_config(back));
        CHECK(a && b && strcmp(a, b) == 0);
        free(a);
        free(b);
        CHECK(bt_model_num_params(back) == bt_model_num_params(m));
        float *la = s_probe(m, ctx), *lb = s_probe(back, ctx);
        CHECK(la && lb && memcmp(la, lb, 2 * 5 * V * sizeof *la) == 0);
        free(la);
        free(lb);
        bt_model_destroy(&back);

        s_write_weights(m, dir, NULL, NULL, true);
        back = bt_model_load(dir, bt_cpu());
        CHECK(back != NULL);
        for (int i = 0; back && i < bt_model_num_params(m); i++) {
            float *want = s_host(bt_model_params(m)[i]), *got = s_host(bt_model_params(back)[i]);
            bool exact = want && got;
            for (int64_t j = 0; exact && j < bt_numel(bt_model_params(m)[i]); j++) {
                uint32_t bits = (uint32_t)s_bf16(want[j]) << 16;
                float f;
                memcpy(&f, &bits, sizeof f);
                exact = got[j] == f;
            }
            CHECK(exact);
            free(want);
            free(got);
        }
        bt_model_destroy(&back);

        s_write_weights(m, dir, "model.layers.1.mlp.up_proj.weight", NULL, false);
        CHECK(bt_model_load(dir, bt_cpu()) == NULL);
        CHECK_STR_CONTAINS(bt_last_error(), "missing tensor model.layers.1.mlp.up_proj.weight");

        s_write_weights(m, dir, NULL, "model.norm.weight", false);
        CHECK(bt_model_load(dir, bt_cpu()) == NULL);
        CHECK_STR_CONTAINS(bt_last_error(), "model.norm.weight: expected shape (32), got (16)");
        bt_model_destroy(&m);
        bt_ctx_reset(ctx);
    }

    bt_model_config bad = s_config(3);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_OK(bt_model_config_save(&bad, path));
    CHECK(bt_model_load(dir, bt_cpu()) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "config.json: num_key_value_heads: expected an integer "
                                        "dividing num_attention_heads (4), got 3");
    bt_model_config c;
    CHECK(bt_model_config_parse("{\"vocab_size\": 259, \"hidden_size\": \"big\"}", "config.json",
                                &c) != BT_OK);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "config.json: hidden_size: expected an integer, got \"big\"");
    CHECK(bt_model_config_parse("{\"vocab_size\": 259}", "config.json", &c) != BT_OK);
    CHECK_STR_CONTAINS(bt_last_error(), "hidden_size: expected an integer, got nothing");
    /* a Hugging Face Llama config: defaults filled in, eos list, rope_scaling null */
    CHECK_OK(bt_model_config_parse(
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"vocab_size\": 32000, \"hidden_size\": 2048, \"intermediate_size\": 5632, "
        "\"num_hidden_layers\": 22, \"num_attention_heads\": 32, \"num_key_value_heads\": 4, "
        "\"rope_scaling\": null, \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, "
        "\"eos_token_id\": [2, 7]}",
        "config.json", &c));
    CHECK(c.num_key_value_heads == 4 && c.eos_token_id == 2 && c.pad_token_id == -1);
    CHECK(c.rms_norm_eps == 1e-6 && c.rope_theta == 10000.0 && !c.tie_word_embeddings);
    CHECK(
        bt_model_config_parse("{\"model_type\": \"llama\", \"vocab_size\": 8, \"hidden_size\": 8, "
                              "\"intermediate_size\": 8, \"num_hidden_layers\": 1, "
                              "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"yarn\"}}",
                              "config.json", &c) != BT_OK);
    CHECK_STR_CONTAINS(bt_last_error(), "rope_scaling");
    printf("save/load: untied and tied round trips, BF16 weights, 6 named errors\n");
    bt_ctx_destroy(&ctx);
    s_remove_dir(dir);
}

/*  A Hugging Face sharded folder: the saved weights split over two shard files named by
    model.safetensors.index.json (its weight_map) load to the same parameters; a tensor in no shard
    and a shard name outside the folder are errors that name them. */
static void test_sharded(void) {
    char dir[] = "/tmp/bt_shards_XXXXXX", path[512];
    CHECK(mkdtemp(dir) != NULL);
    bt_model_config cfg = s_config(2);
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 11);
    CHECK_OK(bt_model_save(m, NULL, dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bt_safetensors_t *all = NULL;
    CHECK_OK(bt_safetensors_open(path, &all));
    int n = all ? bt_safetensors_count(all) : 0, half = n / 2;
    bt_st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    char index[8192] = "{\"metadata\": {}, \"weight_map\": {";
    for (int i = 0; i < n; i++) {
        const bt_st_entry *e = bt_safetensors_entry(all, i);
        ts[i] =
            (bt_st_tensor){.name = e->name, .dtype = e->dtype, .ndim = e->ndim, .data = e->data};
        memcpy(ts[i].shape, e->shape, sizeof ts[i].shape);
        snprintf(index + strlen(index), sizeof index - strlen(index), "%s\"%s\": \"%s\"",
                 i ? ", " : "", e->name,
                 i < half ? "model-00001-of-00002.safetensors"
                          : "model-00002-of-00002.safetensors");
    }
    strcat(index, "}}");
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    CHECK_OK(bt_safetensors_write(path, ts, half, NULL, 0));
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK_OK(bt_safetensors_write(path, ts + half, n - half, NULL, 0));
    bt_safetensors_destroy(&all);
    free(ts);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(remove(path) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK_OK(bt_file_write(path, index, strlen(index)));
    bt_model *back = bt_model_load(dir, bt_cpu());
    CHECK(back != NULL);
    for (int i = 0; back && i < bt_model_num_params(m); i++) {
        float *want = s_host(bt_model_params(m)[i]), *got = s_host(bt_model_params(back)[i]);
        CHECK(want && got &&
              memcmp(want, got, (size_t)bt_numel(bt_model_params(m)[i]) * sizeof *want) == 0);
        free(want);
        free(got);
    }
    bt_model_destroy(&back);
    /* the second shard gone from the map (every tensor claimed by the first): its tensors are
       missing, named with the index */
    for (char *p = strstr(index, "model-00002"); p; p = strstr(p, "model-00002"))
        memcpy(p, "model-00001", 11);
    CHECK_OK(bt_file_write(path, index, strlen(index)));
    CHECK(bt_model_load(dir, bt_cpu()) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "model.safetensors.index.json: missing tensor");
    const char *escape = "{\"weight_map\": {\"lm_head.weight\": \"../model.safetensors\"}}";
    CHECK_OK(bt_file_write(path, escape, strlen(escape)));
    CHECK(bt_model_load(dir, bt_cpu()) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "expected a shard file name in the folder");
    bt_model_destroy(&m);
    s_remove_dir(dir);
}

/*  The logits of ids (n) by tests/ref/llama_ref.py on the model folder dir, into out (n x V);
    false when the reference did not answer. */
static bool s_ref_logits(const char *dir, const int64_t *ids, int n, int64_t V, double *out) {
    const char *src = getenv("BATON_SOURCE_DIR");
    char cmd[1024];
    int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/llama_ref.py %s",
                       src ? src : ".", dir);
    for (int i = 0; i < n; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %lld", (long long)ids[i]);
    FILE *p = popen(cmd, "r");
    static char text[1 << 21];
    size_t got = p ? fread(text, 1, sizeof text - 1, p) : 0;
    text[got] = '\0';
    if (p)
        pclose(p);
    cJSON *rows = cJSON_Parse(text);
    bool ok = cJSON_GetArraySize(rows) == n;
    for (int t = 0; ok && t < n; t++) {
        const cJSON *row = cJSON_GetArrayItem(rows, t);
        ok = cJSON_GetArraySize(row) == V;
        for (int64_t v = 0; ok && v < V; v++)
            out[t * V + v] = cJSON_GetArrayItem(row, (int)v)->valuedouble;
    }
    cJSON_Delete(rows);
    return ok;
}

/*  Logits against an independent float64 numpy forward pass written from the Hugging Face modelling
    definitions (tests/ref/llama_ref.py): a Llama model, a Qwen2 one (q/k/v biases), a Qwen3 one
    (head_dim 16 with hidden 32 and 4 heads, q/k norms), a Mistral one (a sliding window of 3 over
    six tokens), a Gemma one (embeddings times sqrt(32), norms by 1 + weight, gelu-tanh, head_dim
    16, tied head) and a Gemma 2 one (besides: output norms, query_pre_attn_scalar 24, capped
    scores and logits, the window of 3 on layer 0 only), every norm weight and bias random,
    grouped-query attention, six tokens; max |diff| < 1e-4.  Each saved folder names its
    architecture and loads back to the same config and the same logits, bit for bit.  Gemma 2's
    scalar, each cap and the window each move the reference's logits by far more than that. */
static void test_reference_logits(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "test_model: /usr/bin/python3 missing, reference logits not checked\n");
        return;
    }
    bt_ctx *ctx = bt_ctx_new();
    bt_gen *gen = bt_gen_new(17, bt_cpu());
    const int64_t ids[6] = {256, 49, 43, 55, 61, 3}, ones[6] = {1, 1, 1, 1, 1, 1};
    for (int qwen = 0; qwen < 6; qwen++) { /* Llama, Qwen2, Qwen3, Mistral, Gemma, Gemma 2 */
        char dir[] = "/tmp/bt_ref_XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        bt_model_config cfg = s_config(2);
        cfg.num_hidden_layers = 2;
        cfg.qkv_bias = qwen == 1;
        cfg.qk_norm = qwen == 2;
        cfg.mistral = qwen == 3;
        cfg.sliding_window = qwen == 3 || qwen == 5 ? 3 : 0;
        cfg.gemma = qwen == 4 ? 1 : qwen == 5 ? 2 : 0;
        cfg.tie_word_embeddings = cfg.gemma > 0;
        cfg.head_dim = qwen == 2 || cfg.gemma ? 16 : 0;
        if (qwen == 5) { /* caps the random model's scores (~0.05) and logits (~0.2) reach */
            cfg.query_pre_attn_scalar = 24;
            cfg.attn_logit_softcapping = 0.05;
            cfg.final_logit_softcapping = 0.1;
        }
        bt_model *m = bt_model_new(&cfg, bt_cpu(), 23);
        for (int i = 0; i < bt_model_num_params(m); i++) { /* vectors random too */
            bt_tensor *t = bt_model_params(m)[i];
            if (bt_ndim(t) != 1)
                continue;
            int64_t n = bt_numel(t);
            bt_tensor *r =
                bt_add_scalar(ctx, bt_mul_scalar(ctx, bt_randn(ctx, gen, BT_F32, 1, &n), 0.3),
                              strstr(bt_model_param_name(m, i), ".bias") || cfg.gemma ? 0.0 : 1.0);
            bool grad = bt_set_grad_enabled(false);
            CHECK_OK(bt_copy_(t, r));
            bt_set_grad_enabled(grad);
        }
        CHECK_OK(bt_model_save(m, NULL, dir));
        float *got =
            s_host(bt_model_forward(m, ctx, s_i64(ctx, 1, 6, ids), s_i64(ctx, 1, 6, ones)));
        double want[6 * V];
        CHECK(s_ref_logits(dir, ids, 6, V, want));
        double worst = 0;
        for (int i = 0; got && i < 6 * V; i++)
            worst = fmax(worst, fabs(want[i] - got[i]));
        free(got);
        const char *family[] = {"Llama", "Qwen2", "Qwen3", "Mistral", "Gemma", "Gemma 2"};
        printf("reference logits (%s): max |diff| %.3g\n", family[qwen], worst);
        CHECK(worst < 1e-4);
        char config[512], *text2 = NULL;
        snprintf(config, sizeof config, "%s/config.json", dir);
        CHECK_OK(bt_file_read(config, 1 << 20, &text2, NULL));
        const char *arch[] = {"\"LlamaForCausalLM\"", "\"Qwen2ForCausalLM\"",
                              "\"Qwen3ForCausalLM\"", "\"MistralForCausalLM\"",
                              "\"GemmaForCausalLM\"", "\"Gemma2ForCausalLM\""};
        CHECK(text2 && strstr(text2, arch[qwen]));
        free(text2);
        bt_model *back = bt_model_load(dir, bt_cpu()); /* the biases come back too */
        const bt_model_config *bc = back ? bt_model_get_config(back) : NULL;
        CHECK(bc && bc->qkv_bias == (qwen == 1) && bc->qk_norm == (qwen == 2) &&
              bc->mistral == (qwen == 3) && bc->sliding_window == cfg.sliding_window &&
              bc->gemma == cfg.gemma && bc->tie_word_embeddings == cfg.tie_word_embeddings &&
              bc->query_pre_attn_scalar == cfg.query_pre_attn_scalar &&
              bc->attn_logit_softcapping == cfg.attn_logit_softcapping &&
              bc->final_logit_softcapping == cfg.final_logit_softcapping &&
              bt_model_head_dim(bc) == (qwen == 2 || cfg.gemma ? 16 : 8) &&
              bt_model_num_params(back) == bt_model_num_params(m));
        float *again =
            back
                ? s_host(bt_model_forward(back, ctx, s_i64(ctx, 1, 6, ids), s_i64(ctx, 1, 6, ones)))
                : NULL;
        got = s_host(bt_model_forward(m, ctx, s_i64(ctx, 1, 6, ids), s_i64(ctx, 1, 6, ones)));
        CHECK(again && got && memcmp(again, got, sizeof *got * 6 * V) == 0);
        free(again);
        for (int off = 0; qwen == 5 && off < 4; off++) { /* each Gemma 2 switch takes effect */
            bt_model_config alt = cfg;
            alt.query_pre_attn_scalar = off == 0 ? 0 : alt.query_pre_attn_scalar; /* head_dim */
            alt.attn_logit_softcapping = off == 1 ? 0 : alt.attn_logit_softcapping;
            alt.final_logit_softcapping = off == 2 ? 0 : alt.final_logit_softcapping;
            alt.sliding_window = off == 3 ? 0 : alt.sliding_window;
            double other[6 * V], moved = 0;
            CHECK_OK(bt_model_config_save(&alt, config));
            CHECK(s_ref_logits(dir, ids, 6, V, other));
            for (int i = 0; got && i < 6 * V; i++)
                moved = fmax(moved, fabs(other[i] - got[i]));
            const char *what[] = {"query_pre_attn_scalar", "attn_logit_softcapping",
                                  "final_logit_softcapping", "sliding_window"};
            printf("  without Gemma 2's %s: %.3g from its logits\n", what[off], moved);
            CHECK(moved > 100 * worst && moved > 1e-5);
        }
        free(got);
        bt_model_destroy(&back);
        bt_model_destroy(&m);
        bt_ctx_reset(ctx);
        s_remove_dir(dir);
    }
    bt_gen_destroy(&gen);
    bt_ctx_destroy(&ctx);
}

/*  max |want - got| over n values. */
static double s_worst(const double *want, const float *got, int64_t n) {
    double worst = got ? 0 : INFINITY;
    for (int64_t i = 0; got && i < n; i++)
        worst = fmax(worst, fabs(want[i] - got[i]));
    return worst;
}

/*  Mistral's sliding window (3 positions) on every path, against llama_ref.py's float64 logits of
    each sequence alone: a plain forward of 10 tokens (whose logits differ from the same weights
    without the window: it took effect), a left-padded row, a packed row of two sequences, a shared
    prefix with two responses (the second sits after the first, so its columns are further from the
    prompt than its positions: the window goes by position), and prefill then KV-cached decode.
    Each max |diff| < 1e-4. */
static void test_sliding_window(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "test_model: /usr/bin/python3 missing, sliding window not checked\n");
        return;
    }
    enum { TA = 10, TB = 7, P = 5, R2 = 4 };
    const int64_t a[TA] = {256, 49, 43, 55, 61, 3, 200, 17, 90, 33};
    const int64_t b[TB] = {256, 120, 7, 64, 99, 12, 45};
    int64_t pb[P + R2]; /* the prompt a[0..P) then the second response b[1..1+R2) */
    for (int t = 0; t < P + R2; t++)
        pb[t] = t < P ? a[t] : b[1 + t - P];
    char dir[] = "/tmp/bt_window_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    bt_ctx *ctx = bt_ctx_new();
    bt_model_config cfg = s_config(2);
    cfg.mistral = true;
    cfg.sliding_window = 3;
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 31);
    cfg.sliding_window = 0;
    bt_model *full = bt_model_new(&cfg, bt_cpu(), 31); /* the same weights, no window */
    CHECK_OK(bt_model_save(m, NULL, dir));
    static double ra[TA * V], rb[TB * V], rpb[(P + R2) * V];
    CHECK(s_ref_logits(dir, a, TA, V, ra) && s_ref_logits(dir, b, TB, V, rb) &&
          s_ref_logits(dir, pb, P + R2, V, rpb));

    /* plain */
    int64_t ones[TA + TB];
    for (int t = 0; t < TA + TB; t++)
        ones[t] = 1;
    float *got = s_host(bt_model_forward(m, ctx, s_i64(ctx, 1, TA, a), s_i64(ctx, 1, TA, ones)));
    float *base =
        s_host(bt_model_forward(full, ctx, s_i64(ctx, 1, TA, a), s_i64(ctx, 1, TA, ones)));
    double plain = s_worst(ra, got, TA * V), moved = 0;
    for (int i = 0; got && base && i < TA * V; i++)
        moved = fmax(moved, fabs((double)got[i] - base[i]));
    free(got);
    free(base);

    /* left padding: row 1 is b after TA - TB pads */
    int64_t ids[2 * TA], mask[2 * TA];
    for (int t = 0; t < TA; t++) {
        ids[t] = a[t];
        mask[t] = 1;
        ids[TA + t] = t < TA - TB ? PAD : b[t - (TA - TB)];
        mask[TA + t] = t >= TA - TB;
    }
    got = s_host(bt_model_forward(m, ctx, s_i64(ctx, 2, TA, ids), s_i64(ctx, 2, TA, mask)));
    double padded = fmax(s_worst(ra, got, TA * V),
                         got ? s_worst(rb, got + (TA + TA - TB) * V, TB * V) : INFINITY);
    free(got);

    /* packed: a then b in one row */
    int64_t row[TA + TB], seg[TA + TB], pos[TA + TB];
    for (int t = 0; t < TA + TB; t++) {
        row[t] = t < TA ? a[t] : b[t - TA];
        seg[t] = t < TA ? 1 : TA + 1;
        pos[t] = t < TA ? t : t - TA;
    }
    got = s_host(bt_model_forward_packed(m, ctx, s_i64(ctx, 1, TA + TB, row),
                                         s_i64(ctx, 1, TA + TB, seg), s_i64(ctx, 1, TA + TB, pos)));
    double packed =
        fmax(s_worst(ra, got, TA * V), got ? s_worst(rb, got + TA * V, TB * V) : INFINITY);
    free(got);

    /* shared prefix: prompt a[0..P), responses a[P..TA) and b[1..1+R2), both at positions P.. */
    enum { TS = TA + R2 };
    int64_t sid[TS], sseg[TS], spre[TS], spos[TS];
    for (int t = 0; t < TS; t++) {
        sid[t] = t < TA ? a[t] : b[1 + t - TA];
        sseg[t] = t < P ? 1 : t < TA ? P + 1 : TA + 1;
        spre[t] = t < P ? 0 : 1;
        spos[t] = t < TA ? t : P + t - TA;
    }
    got = s_host(bt_model_forward_shared(m, ctx, s_i64(ctx, 1, TS, sid), s_i64(ctx, 1, TS, sseg),
                                         s_i64(ctx, 1, TS, spre), s_i64(ctx, 1, TS, spos)));
    double shared =
        fmax(s_worst(ra, got, TA * V), got ? s_worst(rpb + P * V, got + TA * V, R2 * V) : INFINITY);
    free(got);

    /* prefill 4 tokens, then decode the other 6 one by one */
    bt_kv_cache *cache = bt_kv_cache_new(m, 1, 16);
    int64_t plen = 4, slot = 0;
    bool on = true;
    got = s_host(bt_model_prefill(m, cache, ctx, s_i64(ctx, 1, plen, a), &plen, &slot));
    double cached = s_worst(ra + (plen - 1) * V, got, V);
    for (int64_t t = plen; t < TA; t++) {
        free(got);
        got = s_host(bt_model_decode(m, cache, ctx, &a[t], &on));
        cached = fmax(cached, s_worst(ra + t * V, got, V));
    }
    free(got);
    bt_kv_cache_destroy(&cache);
    printf("sliding window 3: max |diff| plain %.3g (%.3g from no window), padded %.3g, packed "
           "%.3g, shared prefix %.3g, prefill + decode %.3g\n",
           plain, moved, padded, packed, shared, cached);
    CHECK(plain < 1e-4 && moved > 100 * plain && moved > 1e-5);
    CHECK(padded < 1e-4 && packed < 1e-4 && shared < 1e-4 && cached < 1e-4);

    /* config.json: null is no window; a window on another model_type is refused */
    bt_model_config c;
    const char *base_json = "{\"vocab_size\": 8, \"hidden_size\": 8, \"intermediate_size\": 8, "
                            "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, %s}";
    char json[512];
    snprintf(json, sizeof json, base_json, "\"model_type\": \"mistral\", \"sliding_window\": null");
    CHECK_OK(bt_model_config_parse(json, "c.json", &c));
    CHECK(c.mistral && c.sliding_window == 0);
    char *text = bt_model_config_to_json(&c);
    CHECK(text && strstr(text, "\"mistral\"") && strstr(text, "\"sliding_window\":\tnull"));
    free(text);
    snprintf(json, sizeof json, base_json, "\"model_type\": \"mistral\"");
    CHECK_OK(bt_model_config_parse(json, "c.json", &c));
    CHECK(c.sliding_window == 4096); /* MistralConfig's default */
    snprintf(json, sizeof json, base_json, "\"model_type\": \"mistral\", \"sliding_window\": 0");
    CHECK(bt_model_config_parse(json, "c.json", &c) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "c.json: sliding_window: expected a positive integer");
    snprintf(json, sizeof json, base_json,
             "\"model_type\": \"qwen2\", \"sliding_window\": 4, \"use_sliding_window\": true");
    CHECK(bt_model_config_parse(json, "c.json", &c) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "c.json: use_sliding_window: expected false or null");
    snprintf(json, sizeof json, base_json,
             "\"model_type\": \"qwen2\", \"sliding_window\": 4, \"use_sliding_window\": false");
    CHECK_OK(bt_model_config_parse(json, "c.json", &c));
    CHECK(c.sliding_window == 0 && c.qkv_bias);
    bt_model_destroy(&m);
    bt_model_destroy(&full);
    bt_ctx_destroy(&ctx);
    s_remove_dir(dir);
}

/*  Gemma's config.json: its defaults (tied head, head_dim 256) and its activation, read from
    hidden_activation before hidden_act; an exact or unknown gelu is refused by name.  Gemma 2's
    defaults, and a layer_types other than its alternating one refused. */
static void test_gemma_config(void) {
    const char *base_json = "{\"model_type\": \"gemma\", \"vocab_size\": 8, \"hidden_size\": "
                            "8, \"intermediate_size\": 8, \"num_hidden_layers\": 1, "
                            "\"num_attention_heads\": 2%s}";
    char json[512];
    bt_model_config c;
    snprintf(json, sizeof json, base_json,
             ", \"hidden_act\": \"gelu\", \"hidden_activation\": \"gelu_pytorch_tanh\"");
    CHECK_OK(bt_model_config_parse(json, "c.json", &c));
    CHECK(c.gemma && c.tie_word_embeddings && bt_model_head_dim(&c) == 256 &&
          c.max_position_embeddings == 8192);
    snprintf(json, sizeof json, base_json, ", \"hidden_act\": \"gelu\"");
    CHECK(bt_model_config_parse(json, "c.json", &c) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "c.json: hidden_act: expected \"gelu_pytorch_tanh\", got \"gelu\"");
    snprintf(json, sizeof json, base_json, ", \"hidden_activation\": \"silu\"");
    CHECK(bt_model_config_parse(json, "c.json", &c) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "c.json: hidden_activation: expected");
    CHECK(bt_model_config_parse("{\"model_type\": \"gemma3\"}", "c.json", &c) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "c.json: model_type: expected");
    /* Gemma 2: Gemma2Config's defaults, null caps as none, layer_types only alternating */
    const char *g2 = "{\"model_type\": \"gemma2\", \"vocab_size\": 8, \"hidden_size\": 8, "
                     "\"intermediate_size\": 8, \"num_hidden_layers\": 2, "
                     "\"num_attention_heads\": 2%s}";
    snprintf(json, sizeof json, g2, "");
    CHECK_OK(bt_model_config_parse(json, "c.json", &c));
    CHECK(c.gemma == 2 && c.tie_word_embeddings && c.sliding_window == 4096 &&
          c.query_pre_attn_scalar == 256 && c.attn_logit_softcapping == 50 &&
          c.final_logit_softcapping == 30);
    snprintf(json, sizeof json, g2,
             ", \"attn_logit_softcapping\": null, \"final_logit_softcapping\": null, "
             "\"sliding_window\": null, \"layer_types\": [\"sliding_attention\", "
             "\"full_attention\"]");
    CHECK_OK(bt_model_config_parse(json, "c.json", &c));
    CHECK(c.attn_logit_softcapping == 0 && c.final_logit_softcapping == 0 && c.sliding_window == 0);
    snprintf(json, sizeof json, g2, ", \"layer_types\": [\"full_attention\", \"full_attention\"]");
    CHECK(bt_model_config_parse(json, "c.json", &c) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "c.json: layer_types[0]: expected \"sliding_attention\"");
}

/*  config.json's rope_scaling, each kind Hugging Face models ship, against llama_ref.py's
    float64 rotary scalings (written from transformers' modeling_rope_utils): a model with a
    context of 8 positions run on 12 tokens (past it, where dynamic and yarn differ from plain
    rope), max |diff| of the logits < 1e-4; each kind's logits differ from the unscaled model's
    (the scaling took effect), the saved config.json reads back the same rope_scaling, and what
    no kind takes is refused by name. */
static void test_rope_scaling(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "test_model: /usr/bin/python3 missing, rope scaling not checked\n");
        return;
    }
    const char *kinds[] = {
        "{\"rope_type\": \"linear\", \"factor\": 2.0}", "{\"type\": \"dynamic\", \"factor\": 2.0}",
        "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 8}",
        "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
        " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8}"};
    enum { T = 12 };
    const int64_t ids[T] = {256, 49, 43, 55, 61, 3, 200, 17, 90, 33, 120, 7},
                  ones[T] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    bt_ctx *ctx = bt_ctx_new();
    bt_model_config cfg = s_config(2);
    cfg.max_position_embeddings = 8;
    cfg.head_dim = 16; /* 8 frequencies: yarn's ramp and llama3's band both fall inside */
    cfg.num_attention_heads = 2;
    cfg.num_key_value_heads = 1;
    cfg.rope_theta = 500.0;
    bt_model *plain = bt_model_new(&cfg, bt_cpu(), 29);
    float *base =
        s_host(bt_model_forward(plain, ctx, s_i64(ctx, 1, T, ids), s_i64(ctx, 1, T, ones)));
    double *want = malloc(sizeof *want * T * V);
    for (int k = 0; k < 4; k++) {
        char dir[] = "/tmp/bt_rope_XXXXXX", json[1024];
        CHECK(mkdtemp(dir) != NULL);
        snprintf(json, sizeof json,
                 "{\"vocab_size\": %d, \"hidden_size\": 32, \"intermediate_size\": 88,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 2,"
                 " \"num_key_value_heads\": 1, \"head_dim\": 16, \"rope_theta\": 500,"
                 " \"max_position_embeddings\": 8, \"rope_scaling\": %s}",
                 V, kinds[k]);
        bt_model_config scaled;
        CHECK_OK(bt_model_config_parse(json, "c.json", &scaled));
        bt_model *m = bt_model_new(&scaled, bt_cpu(), 29); /* plain's weights */
        CHECK_OK(bt_model_save(m, NULL, dir));
        float *got =
            s_host(bt_model_forward(m, ctx, s_i64(ctx, 1, T, ids), s_i64(ctx, 1, T, ones)));
        CHECK(got && s_ref_logits(dir, ids, T, V, want));
        double worst = 0, moved = 0;
        for (int i = 0; got && i < T * V; i++) {
            worst = fmax(worst, fabs(want[i] - got[i]));
            moved = fmax(moved, fabs((double)got[i] - base[i]));
        }
        printf("rope_scaling %s: max |diff| %.3g against the reference, %.3g from plain rope\n",
               kinds[k], worst, moved);
        CHECK(worst < 1e-4 && moved > 100 * worst && moved > 1e-5); /* the scaling shows */
        bt_model *back = bt_model_load(dir, bt_cpu());
        CHECK(back && memcmp(&bt_model_get_config(back)->rope_scaling, &scaled.rope_scaling,
                             sizeof scaled.rope_scaling) == 0);
        bt_model_destroy(&back);
        free(got);
        bt_model_destroy(&m);
        bt_ctx_reset(ctx);
        s_remove_dir(dir);
    }
    const struct {
        const char *scaling, *error;
    } bad[] = {
        {"{\"rope_type\": \"longrope\", \"factor\": 2}",
         "c.json: rope_scaling.rope_type: expected one of default, linear, dynamic, yarn, llama3, "
         "got \"longrope\""},
        {"{\"rope_type\": \"yarn\", \"factor\": 4, \"mscale\": 1}",
         "c.json: rope_scaling.mscale: not a key of rope_type yarn"},
        {"{\"rope_type\": \"linear\"}",
         "c.json: rope_scaling.factor: expected a positive number, got nothing"},
        {"{\"rope_type\": \"llama3\", \"factor\": 8, \"original_max_position_embeddings\": 8,"
         " \"low_freq_factor\": 1}",
         "c.json: rope_scaling.high_freq_factor: expected a positive number, got nothing"},
        {"{\"type\": \"dynamic\", \"factor\": 0}",
         "c.json: rope_scaling.factor: expected a positive number, got 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"vocab_size\": 8, \"hidden_size\": 8, \"intermediate_size\": 8,"
                 " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"rope_scaling\": %s}",
                 bad[i].scaling);
        bt_model_config c;
        CHECK(bt_model_config_parse(json, "c.json", &c) == BT_EINVAL);
        CHECK_STR_CONTAINS(bt_last_error(), bad[i].error);
    }
    free(want);
    free(base);
    bt_model_destroy(&plain);
    bt_ctx_destroy(&ctx);
}

/*  ||a - b|| / ||b|| over n values. */
static double s_rel_norm(const float *a, const float *b, size_t n) {
    double d2 = 0, b2 = 0;
    for (size_t i = 0; i < n; i++) {
        d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        b2 += (double)b[i] * b[i];
    }
    return sqrt(d2 / b2);
}

/*  (j) run.precision bf16 on the demo model (bt_model_config_init's): the forward runs under
    autocast, so its logits differ from float32's, by no more than bfloat16 rounding explains.

    The bound.  bfloat16 keeps 8 significant bits: rounding to it errs by at most u = 2^-9
    relative.  A product under autocast rounds both inputs and its output, 3u to first order
    (float32 accumulation adds about 2^-24 per term, nothing beside that).  A logit passes through
    13 products in sequence: per layer q/k/v, Q K^T, softmax V and o_proj in attention, gate/up and
    down in the MLP, times 2 layers, then lm_head.  The residual stream, the norms and the
    softmax statistics stay float32, and the branches (weights of scale 0.02) damp rather than
    amplify what they add, so relative errors add up to at most 13 * 3u = 39 * 2^-9 = 0.076 of the
    logits' norm.  float32 alone would differ by about 2^-24 per operation, so a difference above
    2^-12 (2.4e-4) proves the bfloat16 path ran.  The log-probs move by at most twice the largest
    logit change (log p = z - logsumexp(z)); the KV-cache decode keeps keys and values in bfloat16,
    exactly as autocast casts them for the full forward, and matches it within the same bound.
    The same for Gemma 2 (gemma 2): its capped attention (outside the fused kernel) and capped
    logits under autocast, the window on layer 0; tanh's slope is at most 1, so the caps add no
    error of their own. */
static void test_bf16(int gemma) {
    enum { B = 3, T = 12, N = 4 };
    bt_model_config cfg;
    bt_model_config_init(&cfg);
    if (gemma == 2) {
        cfg.gemma = 2;
        cfg.tie_word_embeddings = true;
        cfg.sliding_window = 4;
        cfg.attn_logit_softcapping = 0.05;
        cfg.final_logit_softcapping = 0.5;
    }
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 3);
    bt_ctx *ctx = bt_ctx_new();
    int32_t seq[B][T];
    const int32_t *rows[B];
    const int64_t lens[B] = {T, T - 3, T - 5};
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            seq[b][t] = s_token();
        rows[b] = seq[b];
    }
    int64_t ids[B * T], mask[B * T];
    s_pad(B, T, rows, lens, false, ids, mask);
    bt_tensor *tid = s_i64(ctx, B, T, ids), *tmask = s_i64(ctx, B, T, mask);
    CHECK(bt_model_precision(m) == BT_F32);
    float *f32 = s_host(bt_model_forward(m, ctx, tid, tmask));
    float *lp32 = s_host(bt_model_token_logprobs(m, ctx, tid, tmask, 1.0, NULL));
    CHECK(bt_model_set_precision(m, BT_F16) == BT_EINVAL); /* not for training: no loss scaling */
    CHECK_OK(bt_model_set_precision(m, BT_BF16));
    CHECK(bt_model_precision(m) == BT_BF16);
    bt_tensor *logits = bt_model_forward(m, ctx, tid, tmask);
    CHECK(logits && bt_dtype_of(logits) == BT_F32);
    float *bf = s_host(logits);
    bt_tensor *logp = bt_model_token_logprobs(m, ctx, tid, tmask, 1.0, NULL);
    CHECK(logp && bt_dtype_of(logp) == BT_F32);
    float *lpbf = s_host(logp);
    CHECK(f32 && lp32 && bf && lpbf);
    if (f32 && lp32 && bf && lpbf) {
        size_t n = (size_t)B * T * V;
        double rel = s_rel_norm(bf, f32, n), worst = s_max_diff(bf, f32, n);
        double lp_worst = s_max_diff(lpbf, lp32, (size_t)B * (T - 1));
        printf("bf16 vs float32 logits%s: relative %.3g (bound %.3g), max |diff| %.3g; "
               "log-probs max |diff| %.3g\n",
               gemma ? " (Gemma 2)" : "", rel, 39 * 0x1p-9, worst, lp_worst);
        CHECK(rel > 0x1p-12);
        CHECK(rel <= 39 * 0x1p-9);
        CHECK(lp_worst <= 2 * worst + 1e-6);
    }
    for (int i = 0; i < bt_model_num_params(m); i++)
        CHECK(bt_dtype_of(bt_model_params(m)[i]) == BT_F32);

    /* the cached decode of row 0 (prefill T - N tokens, then one at a time) against the full bf16
       forward of that row */
    bt_kv_cache *cache = bt_kv_cache_new(m, 1, T);
    float *full = s_row_logits(m, ctx, seq[0], T); /* (1, T, V) */
    double cache_rel = 0;
    int64_t pre[T], plen = T - N, slot = 0;
    bool on = true;
    for (int t = 0; t < T; t++)
        pre[t] = seq[0][t];
    float *l = s_host(bt_model_prefill(m, cache, ctx, s_i64(ctx, 1, T - N, pre), &plen, &slot));
    for (int j = 0; l && full && j <= N; j++) {
        cache_rel = fmax(cache_rel, s_rel_norm(l, &full[(size_t)(T - N - 1 + j) * V], V));
        free(l);
        l = j < N ? s_host(bt_model_decode(m, cache, ctx, &pre[T - N + j], &on)) : NULL;
    }
    free(l);
    CHECK(full != NULL);
    CHECK(cache_rel <= 39 * 0x1p-9);
    printf("bf16 KV-cache decode vs full bf16 forward%s: relative %.3g\n",
           gemma ? " (Gemma 2)" : "", cache_rel);
    free(full);
    free(f32);
    free(lp32);
    free(bf);
    free(lpbf);
    bt_kv_cache_destroy(&cache);
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
}

/*  (k) bt_model_extend, the multi-turn append: 5 slots of different lengths (prefill, then 2
    decode steps); slots 3 and 1 extended together by 5 tokens, slot 0 by 1; then a decode step
    on every slot.  The reference is independent of the cache: bt_model_forward of each slot's
    whole sequence (prompt, decoded tokens, appended tokens) alone.  Checked: the extend's logits
    at each row's last token and the next decode step's equal the reference's at those positions;
    the slots not extended decode as they do in a copy of the cache made before the extends (their
    columns untouched); a slot that would pass max_len (alone, or beside one that fits) gives
    BT_ERANGE and changes nothing (lengths, and a decode step after still matching the
    reference); an extend to exactly max_len works.
    Tolerances.  float32: max |diff| < 1e-5: the cached path and the full forward do the same
    float32 operations in other groupings (keys gathered, matrix products of other shapes), each
    rounding at 2^-24 relative of values of order 1, which after two layers comes to about 1e-7
    (measured 0.6-1.5e-7); 1e-5 leaves a margin of 50 for other CPUs' kernels and is far below any
    logic error (a key missing or extra moves the logits by 1e-3 or more: see the window's
    "moved").  bf16: ||diff|| / ||ref|| per row <= 39 * 2^-9, test_bf16's bound for the bfloat16
    cache against the full bf16 forward (measured 0.002-0.005).
    kind: 0 Llama (grouped-query), 1 Mistral's window of 3, 2 Gemma 2 (window 4 on layer 0, capped
    scores and logits), 3 Qwen3 q/k norms with LoRA adapters (B drawn nonzero, so they count),
    4 bf16. */
static double s_extend_err(bt_model *m, bt_ctx *ctx, const int32_t *seq, int64_t n,
                           const float *got, bool rel, bt_model *plain, double *moved) {
    float *full = s_row_logits(m, ctx, seq, n); /* (1, n, V) */
    if (!full || !got) {
        free(full);
        return INFINITY;
    }
    const float *want = &full[(size_t)(n - 1) * V];
    double err = rel ? s_rel_norm(got, want, V) : s_max_diff(got, want, V);
    if (plain) { /* the same weights without the window: how much the window changes them */
        float *other = s_row_logits(plain, ctx, seq, n);
        *moved = other ? fmin(*moved, s_max_diff(&other[(size_t)(n - 1) * V], want, V)) : 0;
        free(other);
    }
    free(full);
    return err;
}

static void test_extend(int kind) {
    enum { S = 5, ML = 16, TP = 6 };
    static const char *const names[] = {"llama", "mistral window 3", "gemma 2", "qwen3 + LoRA",
                                        "bf16"};
    const int64_t plen[S] = {3, 6, 2, 5, 4};
    bt_model_config cfg = s_config(2);
    if (kind == 1) {
        cfg.mistral = true;
        cfg.sliding_window = 3;
    } else if (kind == 2) {
        cfg.gemma = 2;
        cfg.tie_word_embeddings = true;
        cfg.sliding_window = 4;
        cfg.attn_logit_softcapping = 0.05; /* small enough to bend the small scores */
        cfg.final_logit_softcapping = 0.5;
    } else if (kind == 3) {
        cfg.qk_norm = true;
    }
    bool rel = kind == 4;
    double tol = rel ? 39 * 0x1p-9 : 1e-5;
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 37), *plain = NULL;
    if (cfg.sliding_window > 0) {
        cfg.sliding_window = 0;
        plain = bt_model_new(&cfg, bt_cpu(), 37);
    }
    bt_ctx *ctx = bt_ctx_new();
    CHECK(m != NULL);
    if (!m)
        goto out;
    if (kind == 3) {
        bt_lora_config lc;
        bt_lora_config_init(&lc);
        lc.rank = 4;
        CHECK_OK(bt_model_add_lora(m, &lc, 5));
        bt_gen *gen = bt_gen_new(11, bt_cpu());
        bool grad = bt_set_grad_enabled(false);
        for (int i = 0; i < bt_model_num_params(m); i++) {
            bt_tensor *w = bt_model_params(m)[i];
            if (strstr(bt_model_param_name(m, i), "lora_B")) {
                const int64_t shape[] = {bt_dim(w, 0), bt_dim(w, 1)};
                CHECK_OK(
                    bt_copy_(w, bt_mul_scalar(ctx, bt_randn(ctx, gen, BT_F32, 2, shape), 0.05)));
            }
        }
        bt_set_grad_enabled(grad);
        bt_gen_destroy(&gen);
    } else if (kind == 4) {
        CHECK_OK(bt_model_set_precision(m, BT_BF16));
    }
    bt_kv_cache *cache = bt_kv_cache_new(m, S, ML), *before = bt_kv_cache_new(m, S, ML);
    CHECK(cache && before);
    int32_t seq[S][ML + 4];
    const int32_t *rows[S];
    int64_t len[S], ids[S * (ML + 4)], mask[S * TP], next[S];
    bool all[S] = {true, true, true, true, true};
    for (int s = 0; s < S; s++) {
        for (int t = 0; t < ML + 4; t++)
            seq[s][t] = s_token();
        rows[s] = seq[s];
        len[s] = plen[s];
    }
    const int64_t order[S] = {0, 1, 2, 3, 4};
    s_pad(S, TP, rows, plen, false, ids, mask);
    free(s_host(bt_model_prefill(m, cache, ctx, s_i64(ctx, S, TP, ids), plen, order)));
    double pre = 0, ext = 0, dec = 0, same = 0, after = 0, full_len = 0, moved = INFINITY;
    for (int j = 0; j < 2; j++) { /* two decode steps: lengths 5, 8, 4, 7, 6 */
        for (int s = 0; s < S; s++)
            next[s] = seq[s][len[s]++];
        float *l = s_host(bt_model_decode(m, cache, ctx, next, all));
        for (int s = 0; s < S; s++)
            pre = fmax(pre,
                       s_extend_err(m, ctx, seq[s], len[s], l ? &l[s * V] : NULL, rel, NULL, NULL));
        free(l);
    }
    for (int64_t s = 0; s < S; s++)
        CHECK_OK(bt_kv_cache_copy(before, ctx, &s, 1, cache, s));

    /* slots 3 and 1 by 5 tokens in one call, then slot 0 by 1 */
    const struct { int64_t n, T, slots[2]; } calls[] = {{2, 5, {3, 1}}, {1, 1, {0, 0}}};
    for (int c = 0; c < 2; c++) {
        int64_t n = calls[c].n, T = calls[c].T;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < T; t++)
                ids[i * T + t] = seq[calls[c].slots[i]][len[calls[c].slots[i]] + t];
        float *l = s_host(bt_model_extend(m, cache, ctx, s_i64(ctx, n, T, ids), calls[c].slots));
        for (int64_t i = 0; i < n; i++) {
            int64_t s = calls[c].slots[i];
            len[s] += T;
            CHECK(bt_kv_cache_len(cache, s) == len[s]);
            ext = fmax(ext, s_extend_err(m, ctx, seq[s], len[s], l ? &l[i * V] : NULL, rel, plain,
                                         &moved));
        }
        free(l);
    }
    for (int s = 0; s < S; s++)
        next[s] = seq[s][len[s]];
    float *l = s_host(bt_model_decode(m, cache, ctx, next, all));
    float *b = s_host(bt_model_decode(m, before, ctx, next, all));
    for (int s = 0; s < S; s++) {
        len[s]++;
        dec =
            fmax(dec, s_extend_err(m, ctx, seq[s], len[s], l ? &l[s * V] : NULL, rel, NULL, NULL));
        if (s == 2 || s == 4) /* not extended: as in the copy made before */
            same = l && b ? fmax(same, s_max_diff(&l[s * V], &b[s * V], V)) : INFINITY;
    }
    free(l);
    free(b);

    /* overflow: slot 1 holds 14 of 16 columns; 3 more do not fit, alone or beside slot 4 */
    const int64_t one[1] = {1}, two[2] = {4, 1};
    for (int t = 0; t < 6; t++)
        ids[t] = seq[t < 3 ? 4 : 1][len[t < 3 ? 4 : 1] + t % 3];
    CHECK(bt_model_extend(m, cache, ctx, s_i64(ctx, 1, 3, ids + 3), one) == NULL);
    CHECK(bt_last_status() == BT_ERANGE);
    CHECK_STR_CONTAINS(bt_last_error(), "slot 1 holds 14 tokens: 3 more do not fit 16 columns");
    CHECK(bt_model_extend(m, cache, ctx, s_i64(ctx, 2, 3, ids), two) == NULL);
    CHECK(bt_last_status() == BT_ERANGE);
    if (kind == 0) { /* bad slots, named */
        const int64_t twice[2] = {4, 4}, beyond[1] = {S};
        CHECK(bt_model_extend(m, cache, ctx, s_i64(ctx, 2, 3, ids), twice) == NULL);
        CHECK(bt_last_status() == BT_EINVAL);
        CHECK_STR_CONTAINS(bt_last_error(), "slots[1]: expected distinct slots, got slot 4 again");
        CHECK(bt_model_extend(m, cache, ctx, s_i64(ctx, 1, 3, ids), beyond) == NULL);
        CHECK_STR_CONTAINS(bt_last_error(), "slots[0]: expected a slot in [0, 5), got 5");
    }
    for (int s = 0; s < S; s++)
        CHECK(bt_kv_cache_len(cache, s) == len[s]);
    for (int s = 0; s < S; s++)
        next[s] = seq[s][len[s]];
    l = s_host(bt_model_decode(m, cache, ctx, next, all)); /* unchanged: still the reference */
    for (int s = 0; s < S; s++) {
        len[s]++;
        after = fmax(after,
                     s_extend_err(m, ctx, seq[s], len[s], l ? &l[s * V] : NULL, rel, NULL, NULL));
    }
    free(l);
    /* slot 1 now holds 15: 1 more fills it exactly */
    ids[0] = seq[1][len[1]];
    l = s_host(bt_model_extend(m, cache, ctx, s_i64(ctx, 1, 1, ids), one));
    len[1]++;
    full_len = s_extend_err(m, ctx, seq[1], len[1], l, rel, NULL, NULL);
    CHECK(bt_kv_cache_len(cache, 1) == ML);
    free(l);

    printf("extend (%s): %s vs full forward: extended rows %.3g, next decode %.3g, after a "
           "refused extend %.3g, to max_len %.3g (prefill + decode before: %.3g); slots not "
           "extended vs a copy of the cache %.3g; window moves the logits by >= %.3g\n",
           names[kind], rel ? "relative" : "max |diff|", ext, dec, after, full_len, pre, same,
           plain ? moved : 0.0);
    CHECK(ext <= tol && dec <= tol && after <= tol && full_len <= tol && pre <= tol);
    CHECK(same <= 1e-5);
    if (plain)
        CHECK(moved > 10 * tol);
    bt_kv_cache_destroy(&cache);
    bt_kv_cache_destroy(&before);
out:
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
    bt_model_destroy(&plain);
}

int main(void) {
    test_cache_matches_full();
    test_padding();
    test_packing();
    test_shared_prefix();
    test_gqa();
    test_token_logprobs();
    test_filter();
    test_generate();
    test_sample_draws();
    test_generate_keyed();
    test_save_load();
    test_save_dtype();
    test_sharded();
    test_reference_logits();
    test_sliding_window();
    test_gemma_config();
    test_rope_scaling();
    test_bf16(0);
    test_bf16(2);
    for (int kind = 0; kind < 5; kind++)
        test_extend(kind);
    return check_exit();
}
