/*  report.c — `baton report RUN_DIR [RUN_DIR...] [--out PATH] [--target ACCURACY]`: one
    self-contained HTML file comparing the runs. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/report.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bt_cli_report(int argc, char **argv) {
    const char *out = NULL;
    double target = NAN;
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    int n = 0;
    if (!dirs) {
        fprintf(stderr, "baton: report: out of memory\n");
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc && !out)
            out = argv[++i];
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) {
            char *end = NULL;
            target = strtod(argv[++i], &end);
            if (!end || *end || !(target >= 0 && target <= 1)) {
                free(dirs);
                return bt_cli_usage_error("report: --target: expected an accuracy in [0, 1], "
                                          "got \"%s\"",
                                          argv[i]);
            }
        } else if (argv[i][0] == '-') {
            free(dirs);
            return bt_cli_usage_error("report: unexpected argument \"%s\"", argv[i]);
        } else
            dirs[n++] = argv[i];
    }
    if (!n) {
        free(dirs);
        return bt_cli_usage_error("report: missing RUN_DIR");
    }
    char path[PATH_MAX];
    if (!out && n == 1 && snprintf(path, sizeof path, "%s/report.html", dirs[0]) < PATH_MAX)
        out = path;
    else if (!out)
        out = "report.html";
    bt_status st = bt_report_write(dirs, n, out, target);
    for (int i = 0; i < n && st == BT_OK; i++) { /* which build and command made each run */
        char *who = NULL;
        st = bt_report_identity(dirs[i], &who);
        if (who)
            fputs(who, stdout);
        free(who);
    }
    free(dirs);
    if (st != BT_OK) {
        fprintf(stderr, "baton: %s\n", bt_last_error());
        return 1;
    }
    printf("wrote %s\n", out);
    return 0;
}
