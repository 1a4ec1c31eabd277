/*  bench_logits.c — the logits of a model folder for one sequence of token ids, as baton computes
    them on a device: the probe bench/gpu_check.sh compares with the transformers package's (and
    tests/ref/llama_ref.py's on CPU).  Prints one JSON line:
      {"bench":"logits","device":"cuda:0","model":DIR,"seconds":S,"logits":[[...], ...]}
    Usage: bench_logits MODEL_DIR DEVICE ID [ID ...] */
#define _POSIX_C_SOURCE 200809L
#include "baton/blas.h"
#include "baton/model.h"
#include "baton/tensor.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    if (argc < 4) {
        fprintf(stderr, "usage: bench_logits MODEL_DIR DEVICE ID [ID ...]\n");
        return 2;
    }
    bt_device dev;
    if (bt_device_parse(argv[2], &dev) != BT_OK) {
        fprintf(stderr, "bench_logits: %s\n", bt_last_error());
        return 2;
    }
    int64_t T = argc - 3, shape[2] = {1, T};
    int64_t *ids = malloc(sizeof *ids * (size_t)T), *ones = malloc(sizeof *ones * (size_t)T);
    for (int64_t t = 0; ids && ones && t < T; t++) {
        ids[t] = strtoll(argv[3 + t], NULL, 10);
        ones[t] = 1;
    }
    double t0 = bt_now();
    bt_model *m = ids && ones ? bt_model_load(argv[1], dev) : NULL;
    bt_ctx *ctx = bt_ctx_new();
    bt_tensor *logits = m ? bt_model_forward(m, ctx, bt_from_host(ctx, BT_I64, dev, 2, shape, ids),
                                             bt_from_host(ctx, BT_I64, dev, 2, shape, ones))
                          : NULL;
    int64_t V = m ? bt_model_get_config(m)->vocab_size : 0;
    float *host = logits ? malloc(sizeof *host * (size_t)(T * V)) : NULL;
    bt_tensor *cpu = host ? bt_to_device(ctx, bt_to_dtype(ctx, logits, BT_F32), bt_cpu()) : NULL;
    if (!cpu || bt_to_host(cpu, host, sizeof *host * (size_t)(T * V)) != BT_OK) {
        fprintf(stderr, "bench_logits: %s\n", bt_last_error());
        return 1;
    }
    printf("{\"bench\":\"logits\",\"device\":\"%s\",\"model\":\"%s\",\"seconds\":%.6f,\"logits\":[",
           argv[2], argv[1], bt_now() - t0);
    for (int64_t t = 0; t < T; t++) {
        printf(t ? ",[" : "[");
        for (int64_t v = 0; v < V; v++)
            printf(v ? ",%.9g" : "%.9g", host[t * V + v]);
        printf("]");
    }
    printf("]}\n");
    free(host);
    free(ids);
    free(ones);
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
    return 0;
}
