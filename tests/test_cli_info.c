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

/*  Every option a command's parser accepts (each "--word" string literal of its cli/ source
    file, read from the tree) is named by the help of that command, or of one of the commands
    the file serves (cli/run.c parses both run and controller). */
static void s_options_documented(const char *bin) {
    static const struct {
        const char *file, *commands[2];
    } files[] = {
        {"run.c", {"run", "controller"}}, {"eval.c", {"eval"}},     {"worker.c", {"worker"}},
        {"keygen.c", {"keygen"}},         {"info.c", {"info"}},     {"plan.c", {"plan"}},
        {"tokenize.c", {"tokenize"}},     {"export.c", {"export"}}, {"report.c", {"report"}},
    };
    const char *src = getenv("BATON_SOURCE_DIR");
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[PATH_MAX], cmd[PATH_MAX], help[16384] = "", *text = NULL;
        size_t used = 0;
        for (int c = 0; c < 2 && files[f].commands[c]; c++) {
            snprintf(cmd, sizeof cmd, "%s %s --help", bin, files[f].commands[c]);
            CHECK(runs_capture(cmd, help + used, sizeof help - used) == 0);
            used = strlen(help);
        }
        snprintf(path, sizeof path, "%s/cli/%s", src ? src : ".", files[f].file);
        CHECK_OK(bt_file_read(path, 1 << 20, &text, NULL));
        int found = 0;
        for (const char *p = text ? strstr(text, "\"--") : NULL; p; p = strstr(p + 1, "\"--")) {
            char option[64];
            size_t n = strspn(p + 1, "-abcdefghijklmnopqrstuvwxyz");
            if (n < 3 || n >= sizeof option || p[1 + n] != '"')
                continue;
            memcpy(option, p + 1, n);
            option[n] = '\0';
            found++;
            if (!strstr(help, option))
                fprintf(stderr, "cli/%s accepts %s, which `baton %s --help` does not name\n",
                        files[f].file, option, files[f].commands[0]);
            CHECK(strstr(help, option) != NULL);
        }
        CHECK(found > 0);
        free(text);
    }
}

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
    s_options_documented(bin);
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
