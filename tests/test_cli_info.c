/*  test_cli_info.c — `baton info` reports the BLAS that libtorch really calls (OpenBLAS, as the
    Makefile installs it), the thread count it was given, and rejects bad input with exit code 2. */
#define _DEFAULT_SOURCE
#include "baton/tensor.h"
#include "check.h"
#include "runs.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/wait.h>

int main(void) {
    const char *bin = getenv("BATON_BIN");
    CHECK(bin != NULL);
    if (!bin)
        return check_exit();
    char cmd[PATH_MAX + 64], out[4096];

    snprintf(cmd, sizeof cmd, "BATON_THREADS=2 %s info --json", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "\"threads\":2,");
    char want[128];
    snprintf(want, sizeof want, "\"torch\":\"%s\"", bt_torch_version());
    CHECK_STR_CONTAINS(out, want);
    CHECK_STR_CONTAINS(out, "\"blas_vendor\":\"openblas\"");
    /* Independent check on Debian: the reported library is where the libblas.so.3 alternative
       points, i.e. what the dynamic linker gives libtorch. */
    char resolved[PATH_MAX];
    if (realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3", resolved)) {
        char field[PATH_MAX + 16];
        snprintf(field, sizeof field, "\"blas\":\"%s\"", resolved);
        CHECK_STR_CONTAINS(out, field);
    }

    snprintf(cmd, sizeof cmd, "%s info", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "blas         openblas");

    snprintf(cmd, sizeof cmd, "BATON_THREADS=zero %s info 2>&1", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "BATON_THREADS: expected an integer");
    snprintf(cmd, sizeof cmd, "%s frobnicate 2>&1", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "unknown command \"frobnicate\"");
    return check_exit();
}
