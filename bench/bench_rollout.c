/*  bench_rollout.c — rollout generation at realistic lengths (issue 18): 32 prompts of 64-256
    tokens, 8 samples each, response lengths from a log-normal (median 48, cap 512) enforced as
    per-sequence limits, greedy, on a Llama of hidden 512 with 8 layers (vocabulary 32,000), all
    fixed by seed so every implementation does identical work.  In one run:
    - the engine (bt_generate: shared prefill, continuous batching in `slots` slots, compaction),
      with a slot per sequence (as rollout workers run it; BENCH_SLOTS to change) and with 64;
    - the static path baton had before (each row prefilled on its own, padded to the longest
      prompt; every row decoded every step until the longest response ends), written here with the
      same cache primitives, so its cost is the algorithm's, not an implementation's: its host work
      per step is less than the old code's, which re-uploaded the whole id matrix;
    - the PyTorch-eager peer (bench/peer_torch.py, Debian's python3-torch on the same libtorch), on
      the same weights and lengths; its greedy tokens are checked against the engine's;
    - the GEMM peak (a 1024 x 2048 x 2048 float32 product) against which the decode steps' FLOP/s
      are put.
    Figures: useful tokens/s of each and their ratios, prefill tokens, peak KV-cache bytes, decode
    FLOP/s.  Prints JSON lines.  Environment: BATON_THREADS (default libtorch's), BATON_DEVICE
    (cpu), BENCH_PRECISION (bf16: the model's forward passes in bf16; the peer stays float32),
   BENCH_PROMPTS (32) and BENCH_CAP (512) to shrink the workload, BENCH_SLOTS (a slot per
   sequence), BENCH_PEER=0 to skip the peer. */
#define _POSIX_C_SOURCE 200809L

#include "baton/blas.h"
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { GROUP = 8, MIN_PROMPT = 64, MAX_PROMPT = 256, VOCAB = 32000 };

typedef struct s_work {
    int64_t n;            /* sequences */
    int32_t **prompts;    /* (n) rows; sequences of one group share a row */
    int64_t *prompt_lens; /* (n) */
    int64_t *limits;      /* (n) response lengths */
    int64_t cap, useful;  /* longest response allowed; sum of the limits */
} s_work;

static int64_t s_env(const char *name, int64_t def) {
    const char *v = getenv(name);
    return v && *v ? atoll(v) : def;
}

static void s_workload(s_work *w, int64_t n_prompts, int64_t cap) {
    w->n = n_prompts * GROUP;
    w->cap = cap;
    w->prompts = calloc((size_t)w->n, sizeof *w->prompts);
    w->prompt_lens = calloc((size_t)w->n, sizeof *w->prompt_lens);
    w->limits = calloc((size_t)w->n, sizeof *w->limits);
    uint64_t key = bt_rng_key(2026, 18);
    for (int64_t p = 0; p < n_prompts; p++) {
        int64_t len = MIN_PROMPT + (int64_t)(bt_rng_uniform(bt_rng_key(key, (uint64_t)p)) *
                                             (MAX_PROMPT - MIN_PROMPT + 1));
        int32_t *row = malloc((size_t)len * sizeof *row);
        for (int64_t i = 0; i < len; i++)
            row[i] = 3 + (int32_t)(bt_rng_uniform(bt_rng_key(bt_rng_key(key, 1000 + (uint64_t)p),
                                                             (uint64_t)i)) *
                                   (VOCAB - 3));
        for (int g = 0; g < GROUP; g++) {
            int64_t b = p * GROUP + g;
            w->prompts[b] = row;
            w->prompt_lens[b] = len;
            /* log-normal, median 48, sigma 1: exp(ln 48 + z), z standard normal by Box-Muller */
            double u1 = bt_rng_uniform(bt_rng_key(bt_rng_key(key, 2), (uint64_t)b));
            double u2 = bt_rng_uniform(bt_rng_key(bt_rng_key(key, 3), (uint64_t)b));
            double z = sqrt(-2 * log(u1)) * cos(2 * 3.14159265358979323846 * u2);
            int64_t r = (int64_t)llround(48.0 * exp(z));
            w->limits[b] = r < 1 ? 1 : r > cap ? cap : r;
            w->useful += w->limits[b];
        }
    }
}

static void s_config_of(bt_sample_config *sc, const s_work *w, int64_t slots) {
    bt_sample_config_init(sc);
    sc->max_new_tokens = w->cap;
    sc->temperature = 0;
    sc->slots = slots;
    sc->max_new_each = w->limits;
    sc->stops[0] = -1; /* no stop token: each response runs to its length */
    sc->n_stops = 1;
}

/*  The static batch: every row prefilled alone (padded to the longest prompt: the old path's left
    padding computed as much), then all rows decoded every step until the longest is done.  Greedy
    tokens into out (n, cap).  Seconds, or -1. */
static double s_static(bt_model *m, const s_work *w, int32_t *out, size_t *kv_bytes) {
    int64_t n = w->n, Tp = 0;
    for (int64_t b = 0; b < n; b++)
        Tp = w->prompt_lens[b] > Tp ? w->prompt_lens[b] : Tp;
    bt_kv_cache *cache = bt_kv_cache_new(m, n, Tp + w->cap - 1);
    bt_ctx *ctx = bt_ctx_new();
    int64_t *ids = calloc((size_t)(n * (Tp - 1)), sizeof *ids), *lens = calloc((size_t)n, 8);
    int64_t *slots = calloc((size_t)n, 8), *input = calloc((size_t)n, 8);
    bool *active = calloc((size_t)n, sizeof *active);
    int64_t *tok = calloc((size_t)n, 8);
    float *lp = calloc((size_t)n, sizeof *lp);
    if (!cache || !ctx || !ids) {
        fprintf(stderr, "bench_rollout: static: %s\n", bt_last_error());
        return -1;
    }
    *kv_bytes = bt_kv_cache_bytes(cache);
    bt_sample_config sc;
    s_config_of(&sc, w, 0);
    double t0 = bt_now();
    for (int64_t b = 0; b < n; b++) {
        for (int64_t t = 0; t < Tp - 1; t++)
            ids[b * (Tp - 1) + t] = t < w->prompt_lens[b] - 1 ? w->prompts[b][t] : 0;
        lens[b] = w->prompt_lens[b] - 1;
        slots[b] = b;
        input[b] = w->prompts[b][w->prompt_lens[b] - 1];
        active[b] = true;
    }
    bool ok = true; /* prefilled 16 rows at a time: the activations of all at once do not fit */
    for (int64_t r = 0; ok && r < n; r += 16) {
        const int64_t shape[] = {n - r < 16 ? n - r : 16, Tp - 1};
        ok = bt_model_prefill(m, cache, ctx,
                              bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, &ids[r * (Tp - 1)]),
                              &lens[r], &slots[r]) != NULL;
        bt_ctx_reset(ctx);
    }
    for (int64_t s = 0; ok && s < w->cap; s++) {
        bt_tensor *tokens, *logprobs;
        ok = bt_sample_next(ctx, bt_model_decode(m, cache, ctx, input, active), &sc, NULL, &tokens,
                            &logprobs) == BT_OK &&
             bt_to_host(tokens, tok, (size_t)n * 8) == BT_OK &&
             bt_to_host(logprobs, lp, (size_t)n * sizeof *lp) == BT_OK;
        bool more = false;
        for (int64_t b = 0; ok && b < n; b++) { /* finished rows go on computing */
            if (s < w->limits[b])
                out[b * w->cap + s] = (int32_t)tok[b];
            input[b] = tok[b];
            more |= s + 1 < w->limits[b];
        }
        bt_ctx_reset(ctx);
        if (!more)
            break;
    }
    double t = bt_now() - t0;
    if (!ok)
        fprintf(stderr, "bench_rollout: static: %s\n", bt_last_error());
    bt_kv_cache_destroy(&cache);
    bt_ctx_destroy(&ctx);
    free(ids);
    free(lens);
    free(slots);
    free(input);
    free(active);
    free(tok);
    free(lp);
    return ok ? t : -1;
}

/*  Best GEMM rate of (1024 x 2048) @ (2048 x 2048) float32, in FLOP/s. */
static double s_gemm_peak(bt_device device) {
    bt_ctx *ctx = bt_ctx_new();
    bt_gen *gen = bt_gen_new(1, device);
    const int64_t sa[] = {1024, 2048}, sb[] = {2048, 2048};
    bt_tensor *a = bt_randn(ctx, gen, BT_F32, 2, sa), *b = bt_randn(ctx, gen, BT_F32, 2, sb);
    double best = 1e30, x;
    for (int r = 0; r < 5; r++) {
        double t0 = bt_now();
        bt_tensor *c = bt_matmul(ctx, a, b);
        if (!c || bt_item(bt_slice(ctx, bt_slice(ctx, c, 0, 0, 1, 1), 1, 0, 1, 1), &x) != BT_OK)
            break;
        double t = bt_now() - t0;
        best = t < best ? t : best;
    }
    bt_gen_destroy(&gen);
    bt_ctx_destroy(&ctx);
    return 2.0 * 1024 * 2048 * 2048 / best;
}

/*  FLOPs of the decode steps of out: per token 2 x the matrices' parameters, plus attention's
    4 x layers x hidden x the keys it reads. */
static double s_decode_flops(const bt_model_config *c, const s_work *w) {
    double C = (double)c->hidden_size, I = (double)c->intermediate_size,
           L = (double)c->num_hidden_layers;
    double kv = C * (double)c->num_key_value_heads / (double)c->num_attention_heads;
    double per_token = 2 * (L * (2 * C * C + 2 * C * kv + 3 * C * I) + C * (double)c->vocab_size);
    double flops = 0;
    for (int64_t b = 0; b < w->n; b++)
        for (int64_t s = 0; s < w->limits[b]; s++)
            flops += per_token + 4 * L * C * (double)(w->prompt_lens[b] + s);
    return flops;
}

/*  The key/value columns the workload's decode steps must read: at step s a sequence of prompt
    length P attends to P + s columns. */
static int64_t s_columns_needed(const s_work *w) {
    int64_t n = 0;
    for (int64_t b = 0; b < w->n; b++)
        n += w->limits[b] * w->prompt_lens[b] + w->limits[b] * (w->limits[b] - 1) / 2;
    return n;
}

/*  Runs the peer on dir's weights and the workload; its JSON line into buf. */
static bool s_peer(const char *dir, const s_work *w, char *buf, size_t cap) {
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "%s/workload.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fprintf(f, "{\"prompts\": [");
    for (int64_t b = 0; b < w->n; b++) {
        fprintf(f, "%s[", b ? "," : "");
        for (int64_t i = 0; i < w->prompt_lens[b]; i++)
            fprintf(f, "%s%d", i ? "," : "", w->prompts[b][i]);
        fprintf(f, "]");
    }
    fprintf(f, "], \"lengths\": [");
    for (int64_t b = 0; b < w->n; b++)
        fprintf(f, "%s%lld", b ? "," : "", (long long)w->limits[b]);
    fprintf(f, "]}\n");
    fclose(f);
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, /* OpenBLAS's pool as baton's: python sizes only ATen's */
             "OPENBLAS_NUM_THREADS=%d /usr/bin/python3 %s/bench/peer_torch.py %s %s %d",
             bt_get_num_threads(), src ? src : ".", dir, path, bt_get_num_threads());
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(buf, 1, cap - 1, p) : 0;
    buf[n] = '\0';
    return p && pclose(p) == 0 && n > 0;
}

/*  How many sequences of the peer's "tokens" equal the engine's. */
static int64_t s_peer_matches(const char *json, const bt_generation *g, const s_work *w) {
    const char *at = strstr(json, "\"tokens\": [");
    int64_t same = 0;
    if (!at)
        return -1;
    at += strlen("\"tokens\": [");
    for (int64_t b = 0; b < w->n; b++) {
        at = strchr(at, '[');
        if (!at)
            return -1;
        at++;
        bool eq = true;
        for (int64_t s = 0; s < w->limits[b]; s++) {
            char *end;
            long v = strtol(at, &end, 10);
            eq = eq && v == g->tokens[b * w->cap + s];
            at = end + (*end == ',');
        }
        same += eq;
    }
    return same;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    if (bt_threads_from_env() != BT_OK) {
        fprintf(stderr, "bench_rollout: %s\n", bt_last_error());
        return 1;
    }
    bt_device device = bt_cpu();
    const char *env_device = getenv("BATON_DEVICE");
    if (env_device && bt_device_parse(env_device, &device) != BT_OK) {
        fprintf(stderr, "bench_rollout: BATON_DEVICE: %s\n", bt_last_error());
        return 1;
    }
    s_work w = {0};
    s_workload(&w, s_env("BENCH_PROMPTS", 32), s_env("BENCH_CAP", 512));
    bt_model_config cfg;
    bt_model_config_init(&cfg);
    cfg.vocab_size = VOCAB;
    cfg.hidden_size = 512;
    cfg.intermediate_size = 1408;
    cfg.num_hidden_layers = 8;
    cfg.num_attention_heads = 8;
    cfg.num_key_value_heads = 8;
    cfg.max_position_embeddings = MAX_PROMPT + w.cap;
    cfg.bos_token_id = 1;
    cfg.eos_token_id = 2;
    cfg.pad_token_id = 0;
    bt_model *m = bt_model_new(&cfg, device, 18);
    const char *precision = getenv("BENCH_PRECISION"); /* "bf16": autocast forward passes */
    if (m && precision && strcmp(precision, "bf16") == 0 &&
        bt_model_set_precision(m, BT_BF16) != BT_OK)
        bt_model_destroy(&m);
    if (!m) {
        fprintf(stderr, "bench_rollout: %s\n", bt_last_error());
        return 1;
    }
    double peak = s_gemm_peak(device), flops = s_decode_flops(&cfg, &w);
    char dev[32];
    bt_device_format(device, dev, sizeof dev);
    printf("{\"bench\":\"rollout_workload\",\"device\":\"%s\",\"threads\":%d,\"sequences\":%lld,"
           "\"group\":%d,\"useful_tokens\":%lld,\"cap\":%lld,\"gemm_peak_gflops\":%.1f}\n",
           dev, bt_get_num_threads(), (long long)w.n, GROUP, (long long)w.useful, (long long)w.cap,
           peak / 1e9);
    fflush(stdout);

    bt_generation g, g64;
    bt_generation_init(&g);
    bt_generation_init(&g64);
    bt_sample_config sc;
    int32_t *const *rows = w.prompts;
    int64_t wide = s_env("BENCH_SLOTS", w.n); /* default a slot per sequence, as rollouts run */
    s_config_of(&sc, &w, wide);
    double t0 = bt_now();
    bt_status st = bt_generate(m, (const int32_t *const *)rows, w.prompt_lens, w.n, &sc, NULL, &g);
    double engine_s = bt_now() - t0;
    s_config_of(&sc, &w, 64);
    t0 = bt_now();
    if (st == BT_OK)
        st = bt_generate(m, (const int32_t *const *)rows, w.prompt_lens, w.n, &sc, NULL, &g64);
    double engine64_s = bt_now() - t0;
    if (st != BT_OK) {
        fprintf(stderr, "bench_rollout: %s\n", bt_last_error());
        return 1;
    }
    int32_t *static_tokens = calloc((size_t)(w.n * w.cap), sizeof *static_tokens);
    size_t static_kv = 0;
    double static_s = s_static(m, &w, static_tokens, &static_kv);
    int64_t same_static = 0, same_64 = 0, static_prefill = 0, Tp = 0;
    for (int64_t b = 0; b < w.n; b++) {
        same_static += !memcmp(&static_tokens[b * w.cap], &g.tokens[b * w.cap],
                               (size_t)w.limits[b] * sizeof *static_tokens);
        same_64 += !memcmp(&g64.tokens[b * w.cap], &g.tokens[b * w.cap],
                           (size_t)w.limits[b] * sizeof *g.tokens);
        Tp = w.prompt_lens[b] > Tp ? w.prompt_lens[b] : Tp;
    }
    static_prefill = w.n * (Tp - 1);
    printf("{\"bench\":\"rollout_engine\",\"slots\":%lld,\"seconds\":%.3f,"
           "\"useful_tokens_per_s\":%.1f,\"prefill_tokens\":%lld,\"decode_steps\":%lld,"
           "\"peak_kv_mb\":%.1f,\"decode_gflops\":%.2f,\"of_gemm_peak\":%.3f,"
           "\"columns_read\":%lld,\"columns_needed\":%lld}\n",
           (long long)wide, engine_s, w.useful / engine_s, (long long)g.prefill_tokens,
           (long long)g.decode_steps, g.peak_kv_bytes / 1048576.0, flops / engine_s / 1e9,
           flops / engine_s / peak, (long long)g.columns_read, (long long)s_columns_needed(&w));
    printf("{\"bench\":\"rollout_engine\",\"slots\":64,\"seconds\":%.3f,"
           "\"useful_tokens_per_s\":%.1f,\"prefill_tokens\":%lld,\"decode_steps\":%lld,"
           "\"peak_kv_mb\":%.1f,\"same_tokens\":%lld}\n",
           engine64_s, w.useful / engine64_s, (long long)g64.prefill_tokens,
           (long long)g64.decode_steps, g64.peak_kv_bytes / 1048576.0, (long long)same_64);
    if (static_s > 0)
        printf("{\"bench\":\"rollout_static\",\"seconds\":%.3f,\"useful_tokens_per_s\":%.1f,"
               "\"prefill_tokens\":%lld,\"kv_mb\":%.1f,\"same_tokens\":%lld,"
               "\"engine_speedup\":%.2f,\"engine64_speedup\":%.2f}\n",
               static_s, w.useful / static_s, (long long)static_prefill, static_kv / 1048576.0,
               (long long)same_static, static_s / engine_s, static_s / engine64_s);
    fflush(stdout);
    if (s_env("BENCH_PEER", 1)) {
        char dir[] = "/tmp/bench_rollout_XXXXXX";
        static char json[1 << 24];
        if (mkdtemp(dir) && bt_model_save(m, NULL, dir) == BT_OK &&
            s_peer(dir, &w, json, sizeof json)) {
            const char *tps = strstr(json, "\"useful_tokens_per_s\": ");
            double peer_tps = tps ? strtod(tps + strlen("\"useful_tokens_per_s\": "), NULL) : NAN;
            printf(
                "{\"bench\":\"rollout_peer\",\"peer\":\"torch_eager\",\"useful_tokens_per_s\":%.1f,"
                "\"same_tokens\":%lld,\"engine_ratio\":%.2f,\"engine64_ratio\":%.2f}\n",
                peer_tps, (long long)s_peer_matches(json, &g, &w), w.useful / engine_s / peer_tps,
                w.useful / engine64_s / peer_tps);
        } else {
            fprintf(stderr, "bench_rollout: the peer did not run (python3-torch?)\n");
        }
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_rollout: could not remove %s\n", dir);
    }
    bt_generation_release(&g);
    bt_generation_release(&g64);
    free(static_tokens);
    bt_model_destroy(&m);
    return 0;
}
