/*  eval.c — `baton eval MODEL [MODEL...] --config CONFIG [--mode M] [--out PATH] [--cache DIR]
    [--baseline FILE [--max-drop X]] [--set key.path=value ...]`: offline evaluation. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_MAX_SETS = 256 };

typedef struct {
    const char *config, *out, *baseline, *max_drop;
    bt_harness_options opt;
    const char **models; /* [argc] */
    int n_models;
    const char *sets[S_MAX_SETS];
    int n_sets;
} s_args;

/*  Where the value of flag f goes; NULL when f takes no value. */
static const char **s_slot(s_args *a, const char *f, const char **mode) {
    if (!strcmp(f, "--set") && a->n_sets < S_MAX_SETS)
        return &a->sets[a->n_sets++];
    return !strcmp(f, "--config")     ? &a->config
           : !strcmp(f, "--out")      ? &a->out
           : !strcmp(f, "--cache")    ? &a->opt.cache_dir
           : !strcmp(f, "--baseline") ? &a->baseline
           : !strcmp(f, "--max-drop") ? &a->max_drop
           : !strcmp(f, "--mode")     ? mode
                                      : NULL;
}

/*  Returns 0, or the usage error's exit code. */
static int s_parse(int argc, char **argv, s_args *a) {
    const char *mode = NULL;
    for (int i = 0; i < argc; i++) {
        const char **slot = s_slot(a, argv[i], &mode);
        if (slot && i + 1 == argc)
            return bt_cli_usage_error("eval: %s needs a value", argv[i]);
        else if (slot)
            *slot = argv[++i];
        else if (argv[i][0] == '-')
            return bt_cli_usage_error("eval: unexpected argument \"%s\"", argv[i]);
        else
            a->models[a->n_models++] = argv[i];
    }
    if (mode && bt_harness_mode_parse(mode, &a->opt.mode) != BT_OK)
        return bt_cli_usage_error("eval: %s", bt_last_error());
    if (!a->n_models)
        return bt_cli_usage_error("eval: missing MODEL (a model directory or \"init\")");
    if (!a->config)
        return bt_cli_usage_error("eval: missing --config CONFIG");
    if (a->opt.mode == BT_HARNESS_COMPARE && a->n_models < 2)
        return bt_cli_usage_error("eval: --mode compare needs two models or more, got %d",
                                  a->n_models);
    if (a->max_drop && !a->baseline)
        return bt_cli_usage_error("eval: --max-drop needs --baseline");
    return 0;
}

/*  --max-drop X: a finite number >= 0 (default 0.02). */
static int s_max_drop(const char *text, double *out) {
    char *end = NULL;
    *out = text ? strtod(text, &end) : 0.02;
    if (text && (end == text || *end || !isfinite(*out) || *out < 0))
        return bt_cli_usage_error("eval: --max-drop %s: expected a number >= 0", text);
    return 0;
}

static void s_report_cached(const bt_harness_result *r) {
    for (int k = 0; k < r->n_models; k++)
        for (int i = 0; i < r->cfg.eval.n_datasets; i++)
            if (r->models[k].datasets[i].cached)
                fprintf(stderr, "baton: eval: cached: %s %s\n", r->models[k].path,
                        r->models[k].datasets[i].name);
}

/*  Returns the exit code: 0 no regression, 1 regressions or an unreadable baseline. */
static int s_gate(const bt_harness_result *r, const char *baseline, double max_drop) {
    int regressions = 0;
    printf("\n");
    if (bt_harness_gate(r, baseline, max_drop, stdout, &regressions) != BT_OK) {
        fprintf(stderr, "baton: eval: %s\n", bt_last_error());
        return 1;
    }
    if (regressions)
        fprintf(stderr, "baton: eval: %d regression%s against %s (max drop %g): DROP\n",
                regressions, regressions == 1 ? "" : "s", baseline, max_drop);
    else
        fprintf(stderr, "baton: eval: no regression against %s (max drop %g)\n", baseline,
                max_drop);
    return regressions ? 1 : 0;
}

static int s_eval(const s_args *a, double max_drop) {
    bt_config cfg;
    if (bt_config_load(a->config, a->sets, a->n_sets, &cfg) != BT_OK ||
        bt_config_check_files(&cfg, a->config) != BT_OK) {
        fprintf(stderr, "baton: %s\n", bt_last_error());
        return 2;
    }
    bt_harness_result *r = NULL;
    if (bt_harness_run(&cfg, a->models, a->n_models, &a->opt, &r) != BT_OK) {
        fprintf(stderr, "baton: eval: %s\n", bt_last_error());
        return 1;
    }
    s_report_cached(r);
    bt_harness_print(r, stdout);
    int rc = 0;
    if (a->out && bt_harness_write_json(r, a->out) != BT_OK) {
        fprintf(stderr, "baton: eval: %s\n", bt_last_error());
        rc = 1;
    } else if (a->out) {
        fprintf(stderr, "baton: eval: wrote %s\n", a->out);
    }
    if (rc == 0 && a->baseline)
        rc = s_gate(r, a->baseline, max_drop);
    fflush(stdout);
    bt_harness_result_destroy(&r);
    return rc;
}

int bt_cli_eval(int argc, char **argv) {
    s_args a = {.models = calloc((size_t)argc + 1, sizeof(const char *))};
    if (!a.models) {
        fprintf(stderr, "baton: eval: out of memory\n");
        return 1;
    }
    bt_harness_options_init(&a.opt);
    double max_drop = 0;
    int rc = s_parse(argc, argv, &a);
    if (rc == 0)
        rc = s_max_drop(a.max_drop, &max_drop);
    if (rc == 0)
        rc = s_eval(&a, max_drop);
    free(a.models);
    return rc;
}
