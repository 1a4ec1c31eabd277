/*  test_generate.c — the decode-slot engine (model/generate.c) against the reference that
    recomputes every sequence whole for every token (use_cache false, a full padded forward per
    step):
    - greedy: the same tokens (and log-probs to 1e-5) for a batch of GRPO-style groups (several
      sequences per prompt), prompts of one token, several stop tokens and per-sequence length
      limits, with one slot, three slots and a slot per sequence;
    - sampled: a sequence's tokens and log-probs do not depend on the slots, the batch order or the
      company it runs in (the same keyed draws), and equal the reference's;
    - each distinct prompt is prefilled once (prefill_tokens = the distinct prompts' tokens, all
      but the last);
    - continuous batching: with two slots, one long sequence and seven of one token run in the
      long one's steps (static batches of two would need three more), every step's work is a
      live sequence's token, and the KV memory is the slots' preallocation and the prefix store;
    - attention in runs: a prompt of 300 tokens beside three of 3 is read to its own length, the
      short ones to theirs (the columns read are those two runs', not four slots x the longest),
      and the tokens are the reference's;
    - a sliding window (Mistral's on every layer, Gemma 2's on even layers with its capped
      attention; 4 positions, shorter than most sequences): greedy and sampled generation with the
      cache equals the reference's, whose log-probs differ from the same weights' without the
      window. */
#define _DEFAULT_SOURCE
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/sample.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NP = 5, G = 3, B = NP * G, M = 10, NEVER = -7 };

static bt_model_config s_config(void) {
    bt_model_config c;
    bt_model_config_init(&c);
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 64;
    return c;
}

/*  The batch: NP prompts (lengths 1, 4, 7, 2, 9) of G sequences each, consecutive. */
static int32_t s_prompt[NP][9];
static const int64_t s_plen[NP] = {1, 4, 7, 2, 9};
static const int32_t *s_rows[B];
static int64_t s_lens[B];
static uint64_t s_keys[B];
static int64_t s_limits[B];

static void s_batch(void) {
    uint64_t x = 12345;
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < 9; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            s_prompt[p][i] = i == 0 ? 256 : (int32_t)(x >> 57); /* BOS, then bytes below 128 */
        }
    for (int b = 0; b < B; b++) {
        s_rows[b] = s_prompt[b / G];
        s_lens[b] = s_plen[b / G];
        s_keys[b] = bt_rng_key(99, (uint64_t)b);
        s_limits[b] = 1 + (b * 7) % M; /* 1 .. M */
    }
}

typedef struct s_opts {
    double temperature;
    int64_t slots;
    bool cache, limits, stops;
} s_opts;

static int32_t s_stop[2] = {-1, -1}; /* stop tokens: two the model samples greedily */

static bt_status s_gen(bt_model *m, const int32_t *const *rows, const int64_t *lens,
                       const uint64_t *keys, const int64_t *limits, int64_t n, s_opts o,
                       bt_generation *g) {
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = M;
    sc.temperature = o.temperature;
    sc.slots = o.slots;
    sc.use_cache = o.cache;
    sc.max_new_each = o.limits ? limits : NULL;
    if (o.stops) {
        sc.stops[0] = s_stop[0];
        sc.stops[1] = s_stop[1];
        sc.n_stops = 2;
    }
    bt_status st = bt_generate(m, rows, lens, n, &sc, o.temperature > 0 ? keys : NULL, g);
    if (st != BT_OK)
        fprintf(stderr, "bt_generate: %s\n", bt_last_error());
    return st;
}

/*  Sequence a of x and sequence b of y: the same length, tokens, finish, and log-probs within tol
    (0: bit for bit). */
static bool s_same(const bt_generation *x, int64_t a, const bt_generation *y, int64_t b,
                   double tol) {
    if (x->lengths[a] != y->lengths[b] || x->finish[a] != y->finish[b])
        return false;
    for (int64_t i = 0; i < x->lengths[a]; i++) {
        if (x->tokens[a * M + i] != y->tokens[b * M + i])
            return false;
        double d = fabs((double)x->logprobs[a * M + i] - (double)y->logprobs[b * M + i]);
        if (tol == 0 ? d != 0 : d > tol)
            return false;
    }
    return true;
}

static int s_count_same(const bt_generation *x, const bt_generation *y, double tol) {
    int n = 0;
    for (int64_t b = 0; b < B; b++)
        n += s_same(x, b, y, b, tol);
    return n;
}

static void test_greedy_and_sampled(bt_model *m) {
    bt_generation
        first; /* the stops: tokens greedy decoding writes (sequence 0's third, 5's 5th) */
    bt_generation_init(&first);
    CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, (s_opts){.cache = false}, &first));
    if (first.tokens) {
        s_stop[0] = first.tokens[0 * M + 2];
        s_stop[1] = first.tokens[5 * M + 4];
    }
    bt_generation_release(&first);
    for (int stops = 0; stops < 2; stops++)
        for (int limits = 0; limits < 2; limits++) {
            bt_generation ref, eng;
            bt_generation_init(&ref);
            bt_generation_init(&eng);
            s_opts o = {.cache = false, .limits = limits, .stops = stops};
            CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &ref));
            int64_t eos = 0;
            for (int64_t b = 0; b < B; b++)
                eos += ref.finish[b] == BT_FINISH_EOS;
            const int64_t slots[] = {1, 3, 0};
            for (int k = 0; k < 3; k++) {
                o = (s_opts){.cache = true, .slots = slots[k], .limits = limits, .stops = stops};
                CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &eng));
                int same = s_count_same(&ref, &eng, 1e-5);
                printf("greedy, stops %d, limits %d, slots %lld: %d of %d sequences as the "
                       "reference (%lld stopped by a stop token)\n",
                       stops, limits, (long long)slots[k], same, B, (long long)eos);
                CHECK(same == B);
            }
            if (stops)
                CHECK(eos > 0); /* the stops are exercised */
            bt_generation_release(&ref);
            bt_generation_release(&eng);
        }

    /* sampled: slots, order and company do not change a sequence */
    bt_generation ref, all, one, three, rev, some;
    bt_generation_init(&ref);
    bt_generation_init(&all);
    bt_generation_init(&one);
    bt_generation_init(&three);
    bt_generation_init(&rev);
    bt_generation_init(&some);
    s_opts o = {.temperature = 1.0, .cache = true, .limits = true};
    CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &all));
    o.slots = 1;
    CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &one));
    o.slots = 3;
    CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &three));
    const int32_t *rrows[B];
    int64_t rlens[B], rlim[B];
    uint64_t rkeys[B];
    for (int b = 0; b < B; b++) { /* reversed: groups no longer consecutive in admission order */
        rrows[b] = s_rows[B - 1 - b];
        rlens[b] = s_lens[B - 1 - b];
        rkeys[b] = s_keys[B - 1 - b];
        rlim[b] = s_limits[B - 1 - b];
    }
    o.slots = 4;
    CHECK_OK(s_gen(m, rrows, rlens, rkeys, rlim, B, o, &rev));
    o.slots = 0; /* sequences 4..8 alone */
    CHECK_OK(s_gen(m, s_rows + 4, s_lens + 4, s_keys + 4, s_limits + 4, 5, o, &some));
    o.cache = false;
    CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &ref));
    int vs_one = 0, vs_three = 0, vs_rev = 0, vs_some = 0, vs_ref = 0, distinct = 0;
    for (int64_t b = 0; b < B; b++) {
        vs_one += s_same(&all, b, &one, b, 1e-6);
        vs_three += s_same(&all, b, &three, b, 1e-6);
        vs_rev += s_same(&all, b, &rev, B - 1 - b, 1e-6);
        vs_ref += s_same(&all, b, &ref, b, 1e-5);
        distinct += b % G > 0 && !s_same(&all, b, &all, b - 1, 1e-6); /* siblings differ */
    }
    for (int64_t b = 0; b < 5; b++)
        vs_some += s_same(&all, 4 + b, &some, b, 1e-6);
    printf("sampled: slots 1 %d/%d, slots 3 %d/%d, reversed in 4 slots %d/%d, alone %d/5, "
           "reference %d/%d the same; %d of %d siblings differ\n",
           vs_one, B, vs_three, B, vs_rev, B, vs_some, vs_ref, B, distinct, B - NP);
    CHECK(vs_one == B && vs_three == B && vs_rev == B && vs_some == 5 && vs_ref == B);
    CHECK(distinct >= (B - NP) / 2); /* the keys make the samples of a prompt differ */
    bt_generation *gs[] = {&ref, &all, &one, &three, &rev, &some};
    for (int i = 0; i < 6; i++)
        bt_generation_release(gs[i]);
}

static void test_work(bt_model *m) {
    const bt_model_config *mc = bt_model_get_config(m);
    bt_generation g;
    bt_generation_init(&g);
    /* prefill: each distinct prompt once, all but its last token */
    s_opts o = {.temperature = 1.0, .cache = true, .slots = 4};
    CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &g));
    int64_t distinct = 0, all = 0, longest = 0, tokens = 0;
    for (int p = 0; p < NP; p++) {
        distinct += s_plen[p] - 1;
        longest = s_plen[p] > longest ? s_plen[p] : longest;
    }
    for (int b = 0; b < B; b++) {
        all += s_lens[b];
        tokens += g.lengths[b];
    }
    printf("prefill: %lld prompt tokens computed for %lld in the batch (reference: %lld)\n",
           (long long)g.prefill_tokens, (long long)all, (long long)(B * longest));
    CHECK(g.prefill_tokens == distinct);
    CHECK(g.slot_steps == tokens); /* every token computed is a live sequence's */
    /* 4 slots of longest + M - 1 columns, and a prefix store of the 5 shared prompts' longest,
       each column 2 x layers x Hkv x D floats */
    size_t per = 2 * (size_t)mc->num_hidden_layers * (size_t)mc->num_key_value_heads *
                 (size_t)bt_model_head_dim(mc) * sizeof(float);
    size_t want = 4 * (size_t)(longest + M - 1) * per + NP * (size_t)longest * per;
    printf("peak KV cache: %zu bytes (4 slots and %d prefix slots: %zu)\n", g.peak_kv_bytes, NP,
           want);
    CHECK(g.peak_kv_bytes == want);

    /* continuous batching: one sequence of 8 tokens and seven of 1 in two slots take 8 steps */
    const int32_t *rows[8];
    int64_t lens[8], limits[8] = {8, 1, 1, 1, 1, 1, 1, 1};
    uint64_t keys[8];
    int32_t distinct_prompts[8][2];
    for (int b = 0; b < 8; b++) {
        distinct_prompts[b][0] = 256;
        distinct_prompts[b][1] = 10 + b;
        rows[b] = distinct_prompts[b];
        lens[b] = 2;
        keys[b] = bt_rng_key(5, (uint64_t)b);
    }
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = 8;
    sc.slots = 2;
    sc.max_new_each = limits;
    sc.stops[0] = NEVER; /* no stop: every sequence runs to its limit */
    sc.n_stops = 1;
    CHECK_OK(bt_generate(m, rows, lens, 8, &sc, keys, &g));
    printf("continuous batching: %lld decode steps, %lld tokens, in 2 slots\n",
           (long long)g.decode_steps, (long long)g.slot_steps);
    CHECK(g.decode_steps == 8 && g.slot_steps == 15);
    for (int b = 0; b < 8; b++)
        CHECK(g.lengths[b] == limits[b] && g.finish[b] == BT_FINISH_LENGTH);
    sc.slots = -1;
    CHECK(bt_generate(m, rows, lens, 8, &sc, keys, &g) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "slots");
    sc.slots = 2;
    limits[3] = 0;
    CHECK(bt_generate(m, rows, lens, 8, &sc, keys, &g) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "sequence 3: length limit 0");
    bt_generation_release(&g);
}

static void test_runs(void) {
    bt_model_config cfg = s_config();
    cfg.max_position_embeddings = 320;
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 22);
    CHECK(m != NULL);
    if (!m)
        return;
    enum { N = 4, LONG = 300, SHORT = 3, STEPS = 5 };
    int32_t long_prompt[LONG], short_prompts[N - 1][SHORT];
    for (int i = 0; i < LONG; i++)
        long_prompt[i] = i == 0 ? 256 : 1 + (i * 37) % 127;
    const int32_t *rows[N] = {long_prompt};
    int64_t lens[N] = {LONG};
    for (int b = 0; b < N; b++) {
        if (b > 0) {
            for (int i = 0; i < SHORT; i++)
                short_prompts[b - 1][i] = i == 0 ? 256 : 40 + 9 * b + i;
            rows[b] = short_prompts[b - 1];
            lens[b] = SHORT;
        }
    }
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = STEPS;
    sc.temperature = 0;
    sc.stops[0] = NEVER;
    sc.n_stops = 1;
    bt_generation eng, ref;
    bt_generation_init(&eng);
    bt_generation_init(&ref);
    CHECK_OK(bt_generate(m, rows, lens, N, &sc, NULL, &eng));
    sc.use_cache = false;
    CHECK_OK(bt_generate(m, rows, lens, N, &sc, NULL, &ref));
    /* step s: the long slot attends to LONG + s columns (its prompt but the last, the s tokens
       since, the new one), each short one to SHORT + s */
    int64_t runs = 0, one_run = 0;
    for (int64_t s = 0; s < STEPS; s++) {
        runs += (LONG + s) + (N - 1) * (SHORT + s);
        one_run += N * (LONG + s);
    }
    int same = 0;
    for (int64_t b = 0; b < N; b++)
        same += eng.lengths[b] == STEPS &&
                !memcmp(&eng.tokens[b * STEPS], &ref.tokens[b * STEPS], STEPS * sizeof(int32_t));
    printf("attention in runs: %lld columns read (two runs: %lld; one run to the longest: %lld); "
           "%d of %d sequences as the reference\n",
           (long long)eng.columns_read, (long long)runs, (long long)one_run, same, N);
    CHECK(eng.columns_read == runs && runs < one_run / 3);
    CHECK(same == N);
    bt_generation_release(&eng);
    bt_generation_release(&ref);
    bt_model_destroy(&m);
}

/*  The sliding window in the cached decode (Mistral: gemma 0; Gemma 2: gemma 2): each sequence,
    greedy with 1, 3 and a slot per sequence and sampled, as the reference (full padded forwards,
    the window by position there, checked against llama_ref.py in test_model) makes it. */
static void test_sliding_window(int gemma) {
    bt_model_config cfg = s_config();
    cfg.mistral = gemma == 0;
    cfg.gemma = gemma;
    cfg.tie_word_embeddings = gemma > 0;
    if (gemma == 2) { /* caps the random model's scores and logits reach */
        cfg.query_pre_attn_scalar = 12;
        cfg.attn_logit_softcapping = 0.05;
        cfg.final_logit_softcapping = 0.5;
    }
    cfg.sliding_window = 4; /* prompts of 1..9 tokens and 10 new ones: most sequences outgrow it */
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 21);
    cfg.sliding_window = 0;
    bt_model *full = bt_model_new(&cfg, bt_cpu(), 21); /* the same weights, no window */
    CHECK(m && full);
    if (!m || !full)
        return;
    bt_generation ref, eng, wide;
    bt_generation_init(&ref);
    bt_generation_init(&eng);
    bt_generation_init(&wide);
    for (int sampled = 0; sampled < 2; sampled++) {
        s_opts o = {.temperature = sampled, .cache = false, .limits = true};
        CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &ref));
        CHECK_OK(s_gen(full, s_rows, s_lens, s_keys, s_limits, B, o, &wide));
        int differ = B - s_count_same(&ref, &wide, 1e-5);
        const int64_t slots[] = {1, 3, 0};
        for (int k = 0; k < 3; k++) {
            o.cache = true;
            o.slots = slots[k];
            CHECK_OK(s_gen(m, s_rows, s_lens, s_keys, s_limits, B, o, &eng));
            int same = s_count_same(&ref, &eng, 1e-5);
            printf("sliding window 4 (%s), %s, slots %lld: %d of %d sequences as the reference "
                   "(%d differ from no window)\n",
                   gemma ? "Gemma 2" : "Mistral", sampled ? "sampled" : "greedy",
                   (long long)slots[k], same, B, differ);
            CHECK(same == B);
        }
        CHECK(differ > B / 2);
    }
    bt_generation_release(&ref);
    bt_generation_release(&eng);
    bt_generation_release(&wide);
    bt_model_destroy(&m);
    bt_model_destroy(&full);
}

int main(void) {
    s_batch();
    bt_model_config cfg = s_config();
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 21);
    CHECK(m != NULL);
    if (!m)
        return check_exit();
    test_greedy_and_sampled(m);
    test_work(m);
    test_runs();
    test_sliding_window(0);
    test_sliding_window(2);
    bt_model_destroy(&m);
    return check_exit();
}
