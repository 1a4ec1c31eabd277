/*  bench_generate.c — batched greedy generation with the KV cache against recomputing the whole
    sequence for every token, on a hidden-256 Llama (4 layers, 8 heads, 4 kv heads); then sampled
    generation (temperature 1) with the cache, and one sampling step alone on logits of a
    Qwen-sized vocabulary (151,936), the sampler's own cost, against PyTorch eager's
    at::multinomial on the same logits (ratio < 1: baton's is faster).  Prints two JSON lines.
    Environment: BATON_THREADS (default: libtorch's), BATON_DEVICE (default cpu). */
#define _POSIX_C_SOURCE 200809L

#include "baton/blas.h"
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 64, NEW_TOKENS = 64, MIN_PROMPT = 16, MAX_PROMPT = 32, BIG_VOCAB = 151936 };

/*  Seconds for one bt_generate of max_new tokens per row; negative on failure. */
static double s_time(bt_model *m, const int32_t *const *prompts, const int64_t *lens,
                     int64_t max_new, bool use_cache, bt_generation *out) {
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = max_new;
    sc.temperature = 0; /* greedy: both paths must produce the same tokens */
    sc.use_cache = use_cache;
    double t0 = bt_now();
    if (bt_generate(m, prompts, lens, BATCH, &sc, NULL, out) != BT_OK) {
        fprintf(stderr, "bench_generate: %s\n", bt_last_error());
        return -1;
    }
    return bt_now() - t0;
}

/*  Best of 3 sampled generations (temperature 1, the cache); negative on failure. */
static double s_time_sampled(bt_model *m, const int32_t *const *prompts, const int64_t *lens,
                             bt_generation *out) {
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = NEW_TOKENS;
    uint64_t keys[BATCH];
    for (int b = 0; b < BATCH; b++)
        keys[b] = bt_rng_key(7, (uint64_t)b);
    double best = -1;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bt_now();
        bt_status st = bt_generate(m, prompts, lens, BATCH, &sc, keys, out);
        double t = bt_now() - t0;
        if (st != BT_OK) {
            fprintf(stderr, "bench_generate: %s\n", bt_last_error());
            return -1;
        }
        best = best < 0 || t < best ? t : best;
    }
    return best;
}

/*  One sampling step on (BATCH, BIG_VOCAB) logits at temperature 1, no filter, best of 10 in
    seconds, interleaved: bt_sample_next (keyed inverse-CDF draws) into *keyed, and PyTorch
    eager's one-generator draw (at::multinomial of the softmax, then the log-prob gather: the
    sampler baton had before keyed draws) into *peer.  False on failure. */
static bool s_time_sampler(bt_device device, double *keyed, double *peer) {
    bt_ctx *ctx = bt_ctx_new(), *step = bt_ctx_new();
    bt_gen *gen = bt_gen_new(3, device);
    const int64_t shape[] = {BATCH, BIG_VOCAB};
    bt_tensor *logits =
        ctx && gen ? bt_mul_scalar(ctx, bt_randn(ctx, gen, BT_F32, 2, shape), 3.0) : NULL;
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    bool ok = logits != NULL;
    *keyed = *peer = 1e30;
    int64_t tok[BATCH];
    double u[BATCH];
    for (int rep = 0; rep < 20 && ok; rep++) {
        bt_tensor *tokens = NULL, *logprobs = NULL;
        for (int b = 0; b < BATCH; b++)
            u[b] = bt_rng_uniform(bt_rng_key((uint64_t)rep, (uint64_t)b));
        double t0 = bt_now();
        bt_status st;
        if (rep % 2 == 0) {
            st = bt_sample_next(step, logits, &sc, u, &tokens, &logprobs);
        } else {
            bt_tensor *z = bt_mul_scalar(step, logits, 1.0); /* (B, V) */
            tokens = bt_multinomial(step, gen, bt_softmax(step, z, 1));
            logprobs = bt_gather(step, bt_log_softmax(step, z, 1), 1, tokens);
            st = tokens && logprobs ? BT_OK : BT_ETORCH;
        }
        if (st == BT_OK) /* the host copy waits for the device */
            st = bt_to_host(tokens, tok, sizeof tok);
        double t = bt_now() - t0, *best = rep % 2 == 0 ? keyed : peer;
        *best = t < *best ? t : *best;
        ok = st == BT_OK;
        bt_ctx_reset(step);
    }
    if (!ok)
        fprintf(stderr, "bench_generate: sampler: %s\n", bt_last_error());
    bt_gen_destroy(&gen);
    bt_ctx_destroy(&step);
    bt_ctx_destroy(&ctx);
    return ok;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    const char *env_device = getenv("BATON_DEVICE");
    if (bt_threads_from_env() != BT_OK) {
        fprintf(stderr, "bench_generate: %s\n", bt_last_error());
        return 1;
    }
    bt_device device = bt_cpu();
    if (env_device && bt_device_parse(env_device, &device) != BT_OK) {
        fprintf(stderr, "bench_generate: BATON_DEVICE: %s\n", bt_last_error());
        return 1;
    }

    bt_model_config cfg;
    bt_model_config_init(&cfg);
    cfg.hidden_size = 256;
    cfg.intermediate_size = 704;
    cfg.num_hidden_layers = 4;
    cfg.num_attention_heads = 8;
    cfg.num_key_value_heads = 4;
    cfg.eos_token_id = -1; /* every row generates NEW_TOKENS tokens */
    bt_model *m = bt_model_new(&cfg, device, 1);
    if (!m) {
        fprintf(stderr, "bench_generate: %s\n", bt_last_error());
        return 1;
    }

    static int32_t tokens[BATCH][MAX_PROMPT];
    const int32_t *prompts[BATCH];
    int64_t lens[BATCH];
    uint64_t rng = 42;
    for (int b = 0; b < BATCH; b++) {
        lens[b] = MIN_PROMPT + (b * 7) % (MAX_PROMPT - MIN_PROMPT + 1);
        for (int i = 0; i < MAX_PROMPT; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tokens[b][i] = (int32_t)(rng >> 56);
        }
        prompts[b] = tokens[b];
    }

    bt_generation cached, full;
    bt_generation_init(&cached);
    bt_generation_init(&full);
    double warm_c = s_time(m, prompts, lens, 4, true, &cached);
    double warm_n = s_time(m, prompts, lens, 4, false, &full);
    double cache_s = s_time(m, prompts, lens, NEW_TOKENS, true, &cached);
    double nocache_s = s_time(m, prompts, lens, NEW_TOKENS, false, &full);
    int rc = warm_c < 0 || warm_n < 0 || cache_s < 0 || nocache_s < 0;
    if (!rc) {
        bool match = memcmp(cached.tokens, full.tokens,
                            (size_t)BATCH * NEW_TOKENS * sizeof *cached.tokens) == 0;
        char dev[32];
        bt_device_format(device, dev, sizeof dev);
        printf("{\"bench\":\"generate\",\"device\":\"%s\",\"threads\":%d,\"batch\":%d,"
               "\"new_tokens\":%d,\"cache_s\":%.4f,\"nocache_s\":%.4f,\"speedup\":%.2f,"
               "\"cache_tokens_per_s\":%.1f,\"nocache_tokens_per_s\":%.1f,\"tokens_match\":%s}\n",
               dev, bt_get_num_threads(), BATCH, NEW_TOKENS, cache_s, nocache_s,
               nocache_s / cache_s, BATCH * NEW_TOKENS / cache_s, BATCH * NEW_TOKENS / nocache_s,
               match ? "true" : "false");
    }
    double sampled_s = rc ? -1 : s_time_sampled(m, prompts, lens, &full), sampler_s, peer_s;
    rc = rc || sampled_s < 0 || !s_time_sampler(device, &sampler_s, &peer_s);
    if (!rc) {
        char dev[32];
        bt_device_format(device, dev, sizeof dev);
        printf("{\"bench\":\"sample\",\"device\":\"%s\",\"threads\":%d,\"batch\":%d,"
               "\"new_tokens\":%d,\"sampled_s\":%.4f,\"sampled_tokens_per_s\":%.1f,"
               "\"vocab\":%d,\"sampler_ms\":%.3f,\"multinomial_ms\":%.3f,\"ratio\":%.2f}\n",
               dev, bt_get_num_threads(), BATCH, NEW_TOKENS, sampled_s,
               BATCH * NEW_TOKENS / sampled_s, BIG_VOCAB, sampler_s * 1000.0, peer_s * 1000.0,
               sampler_s / peer_s);
    }
    bt_generation_release(&cached);
    bt_generation_release(&full);
    bt_model_destroy(&m);
    return rc;
}
