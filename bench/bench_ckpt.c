/*  bench_ckpt.c — activation checkpointing (grpo.activation_checkpointing, issue 19 section 2):
    one training forward + backward (token log-probs of ROWS x LEN tokens, their sum backpropagated)
    with checkpointing "none" and "layer", on a model of hidden 512 with 8 layers (8 heads, SwiGLU
    2.6875 x hidden, vocab 259).  Peak memory is the process's: on the CPU the shim has no
    allocator statistics (bt_device_memory reads 0 there), so each mode runs in a child process of
    its own and reports VmHWM (peak RSS) after its passes minus VmRSS before the first, the model
    built: the activations and gradients a pass adds.  The step time is the best of PASSES.
    Prints one JSON line per mode, with the ratios to "none".
    Usage: bench_ckpt [ROWS LEN [PASSES]] (4 1024 2).  Threads: BATON_THREADS, else libtorch's. */
#define _POSIX_C_SOURCE 200809L

#include "baton/blas.h"
#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/tensor.h"
#include "bench_shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { S_HIDDEN = 512, S_LAYERS = 8 };

static void s_fail(const char *what) {
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, bt_last_error());
    exit(1);
}

/*  VmRSS (peak false) or VmHWM of this process, in bytes. */
static double s_status_bytes(bool peak) {
    size_t now, top;
    if (bt_proc_memory(&now, &top) != BT_OK)
        s_fail("memory");
    return (double)(peak ? top : now);
}

/*  One mode in this (child) process: writes the peak bytes added and the best pass's seconds. */
static void s_measure(bool checkpoint, int64_t rows, int64_t len, int passes, double out[2]) {
    if (bt_threads_from_env() != BT_OK)
        s_fail("environment");
    bt_model_config mc = bench_llama_shape(S_HIDDEN, S_LAYERS, 0, len);
    bt_model *m = bt_model_new(&mc, bt_cpu(), 7);
    if (!m)
        s_fail("model");
    bt_model_set_activation_checkpointing(m, checkpoint);
    int64_t *ids = malloc((size_t)(rows * len) * sizeof *ids);
    int64_t *mask = malloc((size_t)(rows * len) * sizeof *mask);
    if (!ids || !mask)
        s_fail("out of memory");
    uint64_t state = 19;
    for (int64_t i = 0; i < rows * len; i++) {
        ids[i] = (int64_t)(bt_rng_next(&state) % 256);
        mask[i] = 1;
    }
    const int64_t shape[] = {rows, len};
    bt_ctx *ctx = bt_ctx_new();
    double before = s_status_bytes(false), best = INFINITY;
    for (int p = 0; p < passes; p++) {
        double t0 = bt_now();
        bt_tensor *logp =
            bt_model_token_logprobs(m, ctx, bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ids),
                                    bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, mask), 1.0, NULL);
        if (bt_backward(bt_sum_all(ctx, logp)) != BT_OK)
            s_fail("pass");
        best = fmin(best, bt_now() - t0);
        bt_ctx_reset(ctx);
        bt_zero_grad(bt_model_params(m), bt_model_num_params(m));
    }
    out[0] = s_status_bytes(true) - before;
    out[1] = best;
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
    free(ids);
    free(mask);
}

int main(int argc, char **argv) {
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    int64_t rows = argc > 2 ? atoll(argv[1]) : 4, len = argc > 2 ? atoll(argv[2]) : 1024;
    int passes = argc > 3 ? atoi(argv[3]) : 2;
    if (rows < 1 || len < 2 || passes < 1) {
        fprintf(stderr, "usage: bench_ckpt [ROWS >= 1 LEN >= 2 [PASSES >= 1]]\n");
        return 2;
    }
    const char *const names[2] = {"none", "layer"};
    double r[2][2];
    for (int k = 0; k < 2; k++) { /* a process each: peak RSS only grows */
        int fd[2];
        if (pipe(fd) != 0)
            s_fail("pipe");
        pid_t pid = fork();
        if (pid < 0)
            s_fail("fork");
        if (pid == 0) {
            close(fd[0]);
            s_measure(k == 1, rows, len, passes, r[k]);
            _exit(write(fd[1], r[k], sizeof r[k]) == (ssize_t)sizeof r[k] ? 0 : 1);
        }
        close(fd[1]);
        int status = 0;
        bool ok = read(fd[0], r[k], sizeof r[k]) == (ssize_t)sizeof r[k];
        close(fd[0]);
        if (waitpid(pid, &status, 0) != pid || !ok || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            s_fail(names[k]);
    }
    for (int k = 0; k < 2; k++)
        printf("{\"bench\":\"ckpt\",\"activation_checkpointing\":\"%s\",\"hidden\":%d,"
               "\"layers\":%d,\"rows\":%lld,\"len\":%lld,\"tokens\":%lld,\"passes\":%d,"
               "\"peak_rss_delta_mib\":%.1f,\"step_s_best\":%.3f,\"memory_vs_none\":%.3f,"
               "\"time_vs_none\":%.3f}\n",
               names[k], S_HIDDEN, S_LAYERS, (long long)rows, (long long)len,
               (long long)(rows * len), passes, r[k][0] / (1 << 20), r[k][1], r[k][0] / r[0][0],
               r[k][1] / r[0][1]);
    return 0;
}
