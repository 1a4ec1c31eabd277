/*  test_cli_info.c — `baton info` reports the BLAS that libtorch really calls (OpenBLAS, as the
    Makefile installs it), the thread count it was given, and rejects bad input with exit code 2;
    `baton --version` names the release and the git revision, `baton COMMAND --help` each
    command's usage with every option. */
#define _DEFAULT_SOURCE
#include "baton/tensor.h"
#include "check.h"
#include "runs.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
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

    /* --version: the release and the revision the tree is at (git's own answer, when the
       sources are a git checkout) */
    snprintf(cmd, sizeof cmd, "%s --version", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "baton 0.1.0 (git ");
    snprintf(want, sizeof want, "libtorch %s", bt_torch_version());
    CHECK_STR_CONTAINS(out, want);
    const char *src = getenv("BATON_SOURCE_DIR");
    char rev[64] = "";
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short=12 HEAD 2>/dev/null",
             src ? src : "..");
    if (runs_capture(cmd, rev, sizeof rev) == 0 && rev[0]) {
        rev[strcspn(rev, "\n")] = 0;
        snprintf(want, sizeof want, "(git %s)", rev);
        CHECK_STR_CONTAINS(out, want);
    }
    /* COMMAND --help: that command's usage, every option named, nothing run (exit 0) */
    static const struct {
        const char *command, *options[6];
    } helps[] = {
        {"run", {"--run-dir", "--procs", "--resume", "--overwrite", "--set", NULL}},
        {"eval", {"--config", "--mode", "--out", "--cache", "--baseline", "--max-drop"}},
        {"controller", {"--bind", "--key", "--allow", "--insecure", "--run-dir", "--resume"}},
        {"worker", {"--connect", "--role", "--name", "--server-key", "--join-timeout", NULL}},
        {"keygen", {"--name", NULL}},
        {"info", {"--json", NULL}},
        {"plan", {"--gpus", "--gpu-mem", "--micro-batch", "--prompt-len", "--shard", "--set"}},
        {"tokenize", {"--tokenizer", "--decode", "--json", "--bos", NULL}},
        {"export", {"--merge", NULL}},
        {"report", {"--out", NULL}},
    };
    for (size_t k = 0; k < sizeof helps / sizeof helps[0]; k++) {
        snprintf(cmd, sizeof cmd, "%s %s configs/none.json --help", bin, helps[k].command);
        CHECK(runs_capture(cmd, out, sizeof out) == 0);
        snprintf(want, sizeof want, "usage: baton %s", helps[k].command);
        CHECK(strncmp(out, want, strlen(want)) == 0);
        for (int o = 0; o < 6 && helps[k].options[o]; o++)
            CHECK_STR_CONTAINS(out, helps[k].options[o]);
    }
    snprintf(cmd, sizeof cmd, "%s --help", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    for (size_t k = 0; k < sizeof helps / sizeof helps[0]; k++) {
        snprintf(want, sizeof want, "\n  %s ", helps[k].command);
        CHECK_STR_CONTAINS(out, want);
    }

    snprintf(cmd, sizeof cmd, "BATON_THREADS=zero %s info 2>&1", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "BATON_THREADS: expected an integer");
    snprintf(cmd, sizeof cmd, "%s frobnicate 2>&1", bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "unknown command \"frobnicate\"");
    return check_exit();
}
