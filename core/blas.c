/*  blas.c — OpenBLAS's kernel choice and its fix; see blas.h. */
#define _GNU_SOURCE
#include "baton/blas.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *bt_blas_openblas_core(void) {
    const char *(*corename)(void) =
        (const char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    return corename ? corename() : NULL;
}

static bool s_one_of(const char *name, const char *const *names) {
    for (; *names; names++)
        if (strcasecmp(name, *names) == 0)
            return true;
    return false;
}

const char *bt_blas_better_core(void) {
    const char *core = bt_blas_openblas_core();
    if (!core || getenv("OPENBLAS_CORETYPE") || getenv("BATON_BLAS_KEEP"))
        return NULL;
#if defined(__x86_64__)
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2[] = {"Haswell",        "Zen", "SkylakeX", "Cooperlake",
                                       "SapphireRapids", NULL};
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return s_one_of(core, avx512) ? NULL : "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return s_one_of(core, avx2) ? NULL : "Haswell";
#endif
    return NULL;
}

void bt_blas_reexec(char **argv) {
    const char *better = bt_blas_better_core();
    if (!better || setenv("OPENBLAS_CORETYPE", better, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* the exec failed: run on as loaded */
}
