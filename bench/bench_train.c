/*  bench_train.c — one GRPO policy-update step (forward, loss, backward, clip, AdamW) of a Llama
    model at hidden 512 on 4096 tokens, as FLOP/s (6 x matmul params x tokens) beside the float32
    GEMM peak libtorch reaches on this machine, measured in the same run.  Prints JSON lines.
    Threads: BATON_THREADS, else libtorch's default. */
#define _POSIX_C_SOURCE 200809L
#include "../tests/grpo_reference.h"
#include "baton/blas.h"
#include "baton/grpo.h"
#include "baton/model.h"
#include "baton/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*  The GRPO settings these benchmarks were written against, stated here rather than taken from a
    library default (a config's are in config/config.c's key table): GRPO's kl_coef 0.04 with k3,
    DAPO's clip-higher, token-mean aggregation, Dr. GRPO's max_tokens 1024 for token_sum_norm. */

static void s_die(const char *what) {
    fprintf(stderr, "bench_train: %s: %s\n", what, bt_last_error());
    exit(1);
}

/*  Best FLOP/s of an n x n x n float32 matmul over reps runs. */
static double s_gemm_peak(int64_t n, int reps) {
    bt_ctx *c = bt_ctx_new();
    bt_gen *g = bt_gen_new(1, bt_cpu());
    int64_t shape[2] = {n, n};
    bt_tensor *a = bt_randn(c, g, BT_F32, 2, shape), *b = bt_randn(c, g, BT_F32, 2, shape);
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        bt_ctx *tmp = bt_ctx_new();
        double t0 = bt_now();
        if (!bt_matmul(tmp, a, b))
            s_die("gemm");
        double dt = bt_now() - t0;
        if (r > 0 && dt < best) /* the first run warms up */
            best = dt;
        bt_ctx_destroy(&tmp);
    }
    bt_gen_destroy(&g);
    bt_ctx_destroy(&c);
    return 2.0 * (double)n * (double)n * (double)n / best;
}

/*  Elements of the weights that take part in matmuls (not embeddings or norms). */
static double s_matmul_params(const bt_model *m) {
    double p = 0;
    for (int i = 0; i < bt_model_num_params(m); i++) {
        bt_tensor *t = bt_model_params(m)[i];
        const char *name = bt_model_param_name(m, i);
        if (bt_ndim(t) == 2 && !strstr(name, "embed_tokens"))
            p += (double)bt_numel(t);
    }
    const bt_model_config *cfg = bt_model_get_config(m);
    if (cfg->tie_word_embeddings)
        p += (double)(cfg->vocab_size * cfg->hidden_size);
    return p;
}

/*  One policy update: forward, GRPO loss, backward, clip, AdamW.  Returns its wall time. */
static double s_train_step(bt_model *m, bt_adamw *opt, const bt_grpo_config *gc, bt_tensor *ids,
                           bt_tensor *mask, bt_tensor *old, bt_tensor *adv, bt_tensor *lmask,
                           double norm) {
    bt_ctx *c = bt_ctx_new();
    double t0 = bt_now();
    bt_grpo_stats st = {0};
    bt_tensor *logp = bt_model_token_logprobs(m, c, ids, mask, 1.0, NULL);
    bt_tensor *loss = bt_grpo_loss(c, gc, logp, old, NULL, adv, lmask, NULL, NULL, norm, &st);
    if (!loss || bt_backward(loss) != BT_OK)
        s_die("step");
    double gnorm = 0;
    if (bt_clip_grad_norm(bt_model_params(m), bt_model_num_params(m), 1.0, &gnorm) != BT_OK ||
        bt_adamw_step(opt, 1e-4) != BT_OK)
        s_die("update");
    bt_zero_grad(bt_model_params(m), bt_model_num_params(m));
    bt_ctx_destroy(&c);
    return bt_now() - t0;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    if (bt_threads_from_env() != BT_OK)
        s_die("environment");
    int threads = bt_get_num_threads();

    bt_model_config cfg;
    bt_model_config_init(&cfg);
    cfg.hidden_size = 512;
    cfg.intermediate_size = 1408;
    cfg.num_hidden_layers = 4;
    cfg.num_attention_heads = 8;
    cfg.num_key_value_heads = 4;
    const int64_t B = 16, T = 257; /* 16 x 256 predicted tokens = 4096 tokens per step */
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 7);
    if (!m)
        s_die("model");
    bt_adamw *opt = bt_adamw_new(bt_model_params(m), bt_model_num_params(m), bt_adamw_defaults());
    bt_gen *g = bt_gen_new(3, bt_cpu());
    bt_ctx *data = bt_ctx_new();

    /* a batch of random token ids, all real, advantages +-1 */
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(B * T));
    double *adv = malloc(sizeof(double) * (size_t)B);
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)B);
    for (int64_t i = 0; i < B * T; i++)
        ids[i] = (i * 2654435761u) % 256;
    for (int64_t b = 0; b < B; b++) {
        adv[b] = (b % 2) ? 1.0 : -1.0;
        lens[b] = T - 1;
    }
    int64_t sh[2] = {B, T}, shm[2] = {B, T - 1}, sb[1] = {B};
    bt_tensor *tid = bt_from_host(data, BT_I64, bt_cpu(), 2, sh, ids);
    bt_tensor *mask = bt_full(data, BT_I64, bt_cpu(), 2, sh, 1);
    bt_tensor *lmask = bt_full(data, BT_F32, bt_cpu(), 2, shm, 1);
    bt_tensor *tadv = bt_to_dtype(data, bt_from_host(data, BT_F64, bt_cpu(), 1, sb, adv), BT_F32);
    bt_grpo_config gc = bt_test_grpo_config();
    gc.kl_coef = 0.0;
    double norm = bt_grpo_normaliser(&gc, lens, B);

    /* old log-probs: the behaviour policy is the current one (ratio 1 at the first step) */
    bool prev = bt_set_grad_enabled(false);
    bt_tensor *old = bt_model_token_logprobs(m, data, tid, mask, 1.0, NULL);
    bt_set_grad_enabled(prev);
    if (!old)
        s_die("old logprobs");

    /* Steps and GEMM peaks alternate, so both see the same machine load (it is shared). */
    const int rounds = 4;
    double best = 1e30, total = 0, peak = 0;
    for (int s = 0; s < rounds + 1; s++) {
        double dt = s_train_step(m, opt, &gc, tid, mask, old, tadv, lmask, norm);
        double gp = s_gemm_peak(1024, 3);
        if (gp > peak)
            peak = gp;
        if (s == 0) /* warm-up */
            continue;
        total += dt;
        if (dt < best)
            best = dt;
    }
    double params = s_matmul_params(m), tokens = (double)(B * (T - 1));
    double flops = 6.0 * params * tokens / best;
    printf("{\"bench\":\"train_step\",\"threads\":%d,\"hidden\":%lld,\"layers\":%lld,"
           "\"matmul_params\":%.0f,\"tokens\":%.0f,\"step_s_best\":%.4f,\"step_s_mean\":%.4f,"
           "\"flops\":%.4g,\"gemm_peak_flops\":%.4g,\"ratio\":%.3f}\n",
           threads, (long long)cfg.hidden_size, (long long)cfg.num_hidden_layers, params, tokens,
           best, total / rounds, flops, peak, flops / peak);
    free(ids);
    free(adv);
    free(lens);
    bt_ctx_destroy(&data);
    bt_gen_destroy(&g);
    bt_adamw_destroy(&opt);
    bt_model_destroy(&m);
    return 0;
}
