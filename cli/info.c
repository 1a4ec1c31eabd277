/*  info.c — `baton info`: what this build runs on (libtorch, the BLAS it really calls, threads,
    CUDA and NCCL), as text or one JSON line. */
#define _GNU_SOURCE
#include "cli.h"

#include "baton/tensor.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char blas_path[PATH_MAX]; /* the library whose sgemm_ a call from libtorch resolves to */
    const char *blas_vendor;  /* "openblas", "reference", "mkl", "blis" or "unknown" */
    char blas_config[256];    /* openblas_get_config() where available */
    bool cuda_compiled, cuda_usable, nccl_compiled, nccl_usable;
    int cuda_devices, threads;
} info_t;

static void s_find_blas(info_t *info) {
    /* Symbols resolve in load order, so the library providing sgemm_ to the process is the one
       libtorch's BLAS calls reach. */
    Dl_info dl;
    void *sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
    info->blas_vendor = "unknown";
    snprintf(info->blas_path, sizeof info->blas_path, "(none)");
    if (!sgemm || !dladdr(sgemm, &dl) || !dl.dli_fname)
        return;
    if (!realpath(dl.dli_fname, info->blas_path))
        snprintf(info->blas_path, sizeof info->blas_path, "%s", dl.dli_fname);
    const char *p = info->blas_path;
    if (strstr(p, "openblas"))
        info->blas_vendor = "openblas";
    else if (strstr(p, "mkl"))
        info->blas_vendor = "mkl";
    else if (strstr(p, "blis"))
        info->blas_vendor = "blis";
    else if (strstr(p, "/blas/") || strstr(p, "libblas.so"))
        info->blas_vendor = "reference";
    const char *(*config)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_config");
    if (config && strcmp(info->blas_vendor, "openblas") == 0)
        snprintf(info->blas_config, sizeof info->blas_config, "%s", config());
}

static void s_collect(info_t *info) {
    memset(info, 0, sizeof *info);
    s_find_blas(info);
    info->threads = bt_get_num_threads();
    info->cuda_compiled = bt_torch_has_cuda();
    info->cuda_usable = bt_cuda_is_available();
    info->cuda_devices = bt_cuda_device_count();
#ifdef BATON_HAVE_NCCL
    info->nccl_compiled = true;
    void *nccl = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
    info->nccl_usable = nccl != NULL && info->cuda_usable;
    if (nccl)
        dlclose(nccl);
#endif
}

int bt_cli_info(int argc, char **argv) {
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else
            return bt_cli_usage_error("info: unknown argument \"%s\" (expected --json)", argv[i]);
    }
    info_t in;
    s_collect(&in);
    const char *yn[2] = {"no", "yes"};
    if (json) {
        printf("{\"baton\":\"%s\",\"torch\":\"%s\",\"blas\":\"%s\",\"blas_vendor\":\"%s\","
               "\"blas_config\":\"%s\",\"threads\":%d,\"cuda_compiled\":%s,\"cuda_usable\":%s,"
               "\"cuda_devices\":%d,\"nccl_compiled\":%s,\"nccl_usable\":%s}\n",
               BT_VERSION, bt_torch_version(), in.blas_path, in.blas_vendor, in.blas_config,
               in.threads, in.cuda_compiled ? "true" : "false", in.cuda_usable ? "true" : "false",
               in.cuda_devices, in.nccl_compiled ? "true" : "false",
               in.nccl_usable ? "true" : "false");
    } else {
        printf("baton        %s\n", BT_VERSION);
        printf("libtorch     %s\n", bt_torch_version());
        printf("blas         %s (%s)\n", in.blas_vendor, in.blas_path);
        if (in.blas_config[0])
            printf("blas config  %s\n", in.blas_config);
        printf("threads      %d intra-op\n", in.threads);
        printf("cuda         compiled: %s, usable: %s, devices: %d\n", yn[in.cuda_compiled],
               yn[in.cuda_usable], in.cuda_devices);
        printf("nccl         compiled: %s, usable: %s\n", yn[in.nccl_compiled], yn[in.nccl_usable]);
    }
    if (strcmp(in.blas_vendor, "reference") == 0)
        fprintf(stderr, "warning: libtorch calls the reference BLAS (%s), about 20x slower than "
                        "OpenBLAS; install libopenblas0-pthread\n", in.blas_path);
    return 0;
}
