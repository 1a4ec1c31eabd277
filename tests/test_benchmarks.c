/*  test_benchmarks.c — configs/benchmarks.json, the example that evaluates benchmarks in a run of
    the demo model, works as shipped and gives the same numbers whatever the evaluation layout:
    the config (its steps cut short, nothing else changed) runs with two eval workers, whose
    shards are sized by measured speed, and with one; the metrics of the two runs are identical
    but for timing fields (the multiple-choice sums are fixed point, so a sharded acc, acc_norm,
    prob_right and ece equal the one-worker values exactly).  Every dataset's eval line appears at
    each evaluation with the fields its kind defines (docs/config.md), and `baton report` carries
    the multiple-choice, subject, contamination, accuracy and margin fields into its page. */
#define _DEFAULT_SOURCE
#include "check.h"
#include "runs.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static char s_tmp[64];

/*  configs/benchmarks.json with its run cut to a few steps, written to DIR/benchmarks.json. */
static void s_short_config(const char *out) {
    char *text = NULL;
    CHECK_OK(bt_file_read("configs/benchmarks.json", 1 << 20, &text, NULL));
    cJSON *c = cJSON_Parse(text ? text : "");
    CHECK(c != NULL);
    free(text);
    if (!c)
        return;
    cJSON *sft = cJSON_GetObjectItem(c, "sft"), *grpo = cJSON_GetObjectItem(c, "grpo");
    cJSON *eval = cJSON_GetObjectItem(c, "eval");
    cJSON_ReplaceItemInObject(sft, "steps", cJSON_CreateNumber(60));
    cJSON_ReplaceItemInObject(sft, "eval_every", cJSON_CreateNumber(30));
    cJSON_ReplaceItemInObject(grpo, "steps", cJSON_CreateNumber(4));
    cJSON_ReplaceItemInObject(grpo, "prompts_per_step", cJSON_CreateNumber(16));
    cJSON_ReplaceItemInObject(eval, "every_steps", cJSON_CreateNumber(2));
    cJSON_ReplaceItemInObject(eval, "heldout_count", cJSON_CreateNumber(50));
    const cJSON *d;
    cJSON_ArrayForEach(
        d, cJSON_GetObjectItem(eval, "datasets")) if (cJSON_GetObjectItem(d, "every_steps"))
        cJSON_ReplaceItemInObject((cJSON *)d, "every_steps", cJSON_CreateNumber(2));
    char *json = cJSON_Print(c);
    CHECK_OK(bt_file_write(out, json, strlen(json)));
    free(json);
    cJSON_Delete(c);
}

/*  The eval lines of DIR/metrics.jsonl for dataset (at RL steps), as parsed objects into out. */
static int s_eval_lines(const char *dir, const char *dataset, cJSON **out, int max) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return 0;
    int n = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(j, "kind"));
        const char *ds = cJSON_GetStringValue(cJSON_GetObjectItem(j, "dataset"));
        const char *phase = cJSON_GetStringValue(cJSON_GetObjectItem(j, "phase"));
        if (n < max && kind && ds && phase && !strcmp(kind, "eval") && !strcmp(ds, dataset) &&
            !strcmp(phase, "rl"))
            out[n++] = j;
        else
            cJSON_Delete(j);
    }
    free(text);
    return n;
}

/*  Every line of dataset has each of fields, a number in [lo, hi]; returns the lines. */
static int s_check_fields(const char *dir, const char *dataset, const char *const *fields,
                          double lo, double hi) {
    cJSON *lines[16];
    int n = s_eval_lines(dir, dataset, lines, 16);
    for (int i = 0; i < n; i++) {
        for (const char *const *f = fields; *f; f++) {
            const cJSON *v = cJSON_GetObjectItem(lines[i], *f);
            CHECK(cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi);
            if (!cJSON_IsNumber(v))
                fprintf(stderr, "%s: no %s at line %d\n", dataset, *f, i);
        }
        cJSON_Delete(lines[i]);
    }
    return n;
}

static int s_run(const char *config, const char *dir, int eval_workers) {
    char set[64];
    snprintf(set, sizeof set, "workers.eval=%d", eval_workers);
    const char *args[] = {"run", config, "--run-dir", dir, "--set", set, NULL};
    return runs_wait(runs_spawn(args));
}

int main(void) {
    const char *src = getenv("BATON_SOURCE_DIR");
    if (!src || !getenv("BATON_BIN")) {
        fprintf(stderr, "test_benchmarks: set BATON_SOURCE_DIR and BATON_BIN (ctest does)\n");
        return 1;
    }
    CHECK(chdir(src) == 0); /* the config names its files from the source tree */
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_benchmarks_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char config[128], two[128], one[128];
    snprintf(config, sizeof config, "%s/benchmarks.json", s_tmp);
    snprintf(two, sizeof two, "%s/two", s_tmp);
    snprintf(one, sizeof one, "%s/one", s_tmp);
    s_short_config(config);
    CHECK(s_run(config, two, 2) == 0);
    CHECK(s_run(config, one, 1) == 0);

    /* the same numbers whatever the layout of the evaluation */
    char *a = runs_metrics_of(two, NULL), *b = runs_metrics_of(one, NULL);
    CHECK(a && b && strcmp(a, b) == 0);
    if (a && b && strcmp(a, b))
        fprintf(stderr, "two eval workers:\n%s\none:\n%s\n", a, b);
    free(a);
    free(b);

    /* each dataset at steps 0, 2 and 4, with its kind's fields */
    const char *choices[] = {"items",           "acc",        "acc_stderr", "acc_norm",
                             "acc_norm_stderr", "prob_right", "ece",        NULL};
    const char *shuffled[] = {"acc_shuffled", NULL};
    const char *gap[] = {"contamination_gap", NULL};
    const char *generate[] = {"examples", "accuracy", "response_len_mean", NULL};
    const char *sampled[] = {"pass@1", "pass@4", NULL};
    const char *subjects[] = {"subject.carry.items",    "subject.carry.acc",
                              "subject.carry.acc_norm", "subject.no_carry.items",
                              "subject.no_carry.acc",   NULL};
    CHECK(s_check_fields(two, "arith_mc", choices, 0, 24) == 3);
    CHECK(s_check_fields(two, "arith_mc", subjects, 0, 12) == 3);
    CHECK(s_check_fields(two, "arith_mmlu", choices, 0, 16) == 3);
    CHECK(s_check_fields(two, "arith_mmlu", shuffled, 0, 1) == 3);
    CHECK(s_check_fields(two, "arith_mmlu", gap, -1, 1) == 3);
    CHECK(s_check_fields(two, "gsm_style", generate, 0, 20) == 3);
    CHECK(s_check_fields(two, "humaneval_tiny", generate, 0, 24) == 3);
    CHECK(s_check_fields(two, "humaneval_tiny", sampled, 0, 1) == 3);
    cJSON *lines[4];
    int n = s_eval_lines(two, "arith_mc", lines, 4);
    for (int i = 0; i < n; i++) {
        CHECK(cJSON_GetObjectItem(lines[i], "items")->valuedouble == 24);
        CHECK(cJSON_GetObjectItem(lines[i], "subject.carry.items")->valuedouble == 12);
        cJSON_Delete(lines[i]);
    }
    n = s_eval_lines(two, "humaneval_tiny", lines, 4);
    for (int i = 0; i < n; i++) {
        CHECK(cJSON_GetObjectItem(lines[i], "examples")->valuedouble == 6);
        cJSON_Delete(lines[i]);
    }

    /* the report draws them */
    char cmd[512], out[4096], path[PATH_MAX], *html = NULL;
    snprintf(cmd, sizeof cmd, "%s report %s 2>&1", getenv("BATON_BIN"), two);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    snprintf(path, sizeof path, "%s/report.html", two);
    CHECK_OK(bt_file_read(path, 1 << 24, &html, NULL));
    /* the page's data (docs/architecture.md, "The report"): a group per dataset, every numeric
       field of its lines a column the page charts */
    const char *charts[] = {"\"group\":\"eval/arith_mmlu\"",
                            "\"acc_norm\":[",
                            "\"contamination_gap\":[",
                            "\"group\":\"eval/arith_mc\"",
                            "\"subject.carry.acc\":[",
                            "\"accuracy\":[",
                            ".margin\":[",
                            "\"group\":\"eval/humaneval_tiny\"",
                            "\"group\":\"eval/gsm_style\"",
                            NULL};
    for (const char *const *c = charts; html && *c; c++) {
        CHECK(strstr(html, *c) != NULL);
        if (!strstr(html, *c))
            fprintf(stderr, "report: no %s\n", *c);
    }
    free(html);
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
