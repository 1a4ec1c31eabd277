/*  plan.c — `baton plan CONFIG`: the memory planner's figures (plan.h) per role, whether the run
    fits N devices of a given memory, and the largest grpo.micro_batch that does.  Reads the config
    and model.path's config.json only: no weights are loaded. */
#include "cli.h"

#include "baton/config.h"
#include "baton/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_SETS 64
#define S_GIB (1024.0 * 1024.0 * 1024.0)

static bool s_parse_int(const char *s, int64_t lo, int64_t *out) {
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (!s[0] || *end || v < lo)
        return false;
    *out = v;
    return true;
}

static void s_row(const char *role, int64_t count, const bt_plan_role *r, double unit,
                  double device) {
    printf("%-8s %3lld %9.2f %9.2f %9.2f %9.2f %9.2f %11.2f %9.2f%s\n", role, (long long)count,
           r->weights / unit, r->grads / unit, r->moments / unit, r->reference / unit,
           r->kv_cache / unit, r->activations / unit, r->total / unit,
           device <= 0          ? ""
           : r->total <= device ? "  fits"
                                : "  does not fit");
}

int bt_cli_plan(int argc, char **argv) {
    const char *path = NULL, *sets[S_MAX_SETS];
    int n_sets = 0;
    bt_plan_input in = {0};
    double gib = 0;
    int shard = -1; /* --shard: plans a stage the config does not (yet) take */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--gpus") == 0 && v) {
            if (!s_parse_int(v, 1, &in.gpus))
                return bt_cli_usage_error("plan: --gpus: expected an integer >= 1, got \"%s\"", v);
            i++;
        } else if (strcmp(a, "--gpu-mem") == 0 && v) {
            char *end = NULL;
            gib = strtod(v, &end);
            if (!v[0] || *end || !(gib > 0))
                return bt_cli_usage_error("plan: --gpu-mem: expected GiB > 0, got \"%s\"", v);
            i++;
        } else if (strcmp(a, "--micro-batch") == 0 && v) {
            if (!s_parse_int(v, 1, &in.micro_batch))
                return bt_cli_usage_error("plan: --micro-batch: expected an integer >= 1, got "
                                          "\"%s\"",
                                          v);
            i++;
        } else if (strcmp(a, "--prompt-len") == 0 && v) {
            if (!s_parse_int(v, 1, &in.prompt_len))
                return bt_cli_usage_error("plan: --prompt-len: expected an integer >= 1, got "
                                          "\"%s\"",
                                          v);
            i++;
        } else if (strcmp(a, "--shard") == 0 && v) {
            static const char *const names[] = {"none", "optimizer", "gradients", "parameters"};
            for (int k = 0; k < 4; k++)
                shard = strcmp(v, names[k]) == 0 ? k : shard;
            if (shard < 0)
                return bt_cli_usage_error("plan: --shard: expected none, optimizer, gradients or "
                                          "parameters, got \"%s\"",
                                          v);
            i++;
        } else if (strcmp(a, "--set") == 0 && v) {
            if (n_sets == S_MAX_SETS)
                return bt_cli_usage_error("plan: more than %d --set", S_MAX_SETS);
            sets[n_sets++] = v;
            i++;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            return bt_cli_usage_error("plan: unexpected argument \"%s\"", a);
        }
    }
    if (!path)
        return bt_cli_usage_error("plan: missing CONFIG");
    in.device_bytes = gib * S_GIB;
    bt_config cfg;
    if (bt_config_load(path, sets, n_sets, &cfg) != BT_OK) {
        fprintf(stderr, "baton: %s\n", bt_last_error());
        return 2;
    }
    if (shard >= 0)
        cfg.workers.shard = (bt_shard)shard;
    bt_model_config model = cfg.model;
    if (cfg.model_path[0]) {
        char json[BT_CONFIG_PATH_MAX + 16];
        snprintf(json, sizeof json, "%s/config.json", cfg.model_path);
        if (bt_model_config_load(json, &model) != BT_OK) {
            fprintf(stderr, "baton: %s\n", bt_last_error());
            return 2;
        }
    }
    bt_plan p;
    char err[256] = "";
    if (bt_plan_make(&cfg, &model, &in, &p, err, sizeof err) != BT_OK) {
        fprintf(stderr, "baton: %s: %s\n", path, err);
        return 2;
    }
    static const char *const shards[] = {"none", "optimizer", "gradients", "parameters"};
    printf("model: %.3fB parameters (%lld), %s, activation checkpointing %s\n",
           (double)p.params / 1e9, (long long)p.params,
           cfg.run.precision == BT_CONFIG_PRECISION_BF16 ? "bf16 autocast" : "float32",
           cfg.grpo.activation_checkpointing ? "layer" : "none");
    printf("trainer: %lld rank(s), workers.shard %s, micro-batch %lld sequences (%lld rows x %lld "
           "tokens), prompts up to %lld tokens\n",
           (long long)p.ranks, shards[cfg.workers.shard], (long long)p.micro_batch,
           (long long)p.rows, (long long)p.width, (long long)p.prompt_len);
    double unit = p.device_peak >= S_GIB ? S_GIB : 1024.0 * 1024.0;
    printf("%s per worker:\n%-8s %3s %9s %9s %9s %9s %9s %11s %9s\n", unit == S_GIB ? "GiB" : "MiB",
           "role", "n", "weights", "grads", "optimizer", "reference", "kv_cache", "activations",
           "total");
    s_row("trainer", p.ranks, &p.trainer, unit, in.device_bytes);
    if (cfg.workers.rollout > 0)
        s_row("rollout", cfg.workers.rollout, &p.rollout, unit, in.device_bytes);
    if (cfg.workers.eval > 0)
        s_row("eval", cfg.workers.eval, &p.eval, unit, in.device_bytes);
    printf("device peak: %.2f GiB", p.device_peak / S_GIB); /* always GiB, as --gpu-mem */
    if (!p.judged) {
        printf(" (--gpu-mem GiB judges the fit)\n");
        return 0;
    }
    printf(" of %.2f GiB on %lld device(s): %s\n", gib,
           (long long)(in.gpus > 0 ? in.gpus : p.ranks + cfg.workers.rollout + cfg.workers.eval),
           p.fits ? "fits" : "does not fit");
    if (p.max_micro_batch > 0)
        printf("largest grpo.micro_batch that fits: %lld\n", (long long)p.max_micro_batch);
    else
        printf("largest grpo.micro_batch that fits: none (micro-batch 1 does not fit)\n");
    return 0;
}
