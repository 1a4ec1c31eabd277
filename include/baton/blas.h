/*  blas.h — the kernel OpenBLAS runs, and the fix for a CPU it does not recognise.  OpenBLAS
    (DYNAMIC_ARCH) picks its GEMM kernel by cpuid when the library loads; a CPU newer than the
    build (0.3.21 on a Cooper Lake Xeon) gets the generic Prescott kernel, about 8x slower than its
    AVX-512 one (bench/RESULTS.md).  OPENBLAS_CORETYPE overrides the choice, but only before the
    library loads, so baton re-executes itself with it set.
    Threading: call before any other thread starts.  Lifetime: nothing to create or destroy. */
#ifndef BATON_BLAS_H
#define BATON_BLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/*  The kernel OpenBLAS chose ("Prescott", "SkylakeX", ...), or NULL when the process's BLAS is
    not OpenBLAS.  Static string. */
const char *bt_blas_openblas_core(void);

/*  The OPENBLAS_CORETYPE due when OpenBLAS chose a kernel below what the CPU runs: "SkylakeX" for
    a CPU with AVX-512 (F, BW, DQ, VL) and a kernel without, "Haswell" for one with AVX2 and FMA and
    a kernel without; NULL when nothing is due (OPENBLAS_CORETYPE set, BATON_BLAS_KEEP set, not
    OpenBLAS, or its kernel already fits).  Static string. */
const char *bt_blas_better_core(void);

/*  When a better kernel is due: sets OPENBLAS_CORETYPE and re-executes /proc/self/exe with argv
    (same pid, environment and limits).  Returns when nothing is due, or when the exec failed. */
void bt_blas_reexec(char **argv);

#ifdef __cplusplus
}
#endif
#endif
