/*  test_cli_eval.c — `baton eval`: every mode on two tiny saved models, the results JSON checked
    against direct evaluator calls, the cache, the regression gate and the exit codes. */
#define _DEFAULT_SOURCE
#include "check.h"

#include "baton/config.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/harness.h"
#include "baton/model.h"
#include "baton/tokenizer.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char s_tmp[64];
static char s_out[1 << 16]; /* stdout and stderr of the last run */

static const char s_config[] =
    "{\"run\": {\"seed\": 1},"
    " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
    "   \"num_attention_heads\": 2, \"max_position_embeddings\": 128},"
    " \"task\": {\"digits\": 2, \"heldout_size\": 60}, \"grpo\": {\"max_new_tokens\": 4},"
    " \"eval\": {\"heldout_count\": 60, \"datasets\": ["
    "   {\"name\": \"greedy\", \"count\": 60, \"robustness\": true},"
    "   {\"name\": \"sampled\", \"samples\": 4, \"temperature\": 1.0, \"count\": 20},"
    "   {\"name\": \"ppl\", \"kind\": \"perplexity\"},"
    "   {\"name\": \"probes\", \"kind\": \"probes\"}],"
    "  \"probes\": [{\"name\": \"two\", \"prompt\": \"2+2=\", \"target\": \"4\"},"
    "             {\"name\": \"order\", \"better\": \"12+30=42\", \"worse\": \"12+30=24\"}]}}";

static void s_path(const char *rel, char *buf) {
    snprintf(buf, PATH_MAX, "%s/%s", s_tmp, rel);
}

/*  Runs `baton ARGS` in the temporary directory; returns its exit code. */
static int s_baton(const char *args) {
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>&1", s_tmp, getenv("BATON_BIN"), args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(s_out, 1, sizeof s_out - 1, p) : 0;
    s_out[n] = '\0';
    int st = p ? pclose(p) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int s_eval(const char *args) {
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof cmd, "eval %s", args);
    return s_baton(cmd);
}

static cJSON *s_load(const char *rel) {
    char path[PATH_MAX], *text = NULL;
    s_path(rel, path);
    if (bt_file_read(path, SIZE_MAX, &text, NULL) != BT_OK)
        return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

static void s_save(const char *rel, const cJSON *j) {
    char path[PATH_MAX], *text = cJSON_Print(j);
    s_path(rel, path);
    CHECK_OK(bt_file_write(path, text, strlen(text)));
    cJSON_free(text);
}

static void s_save_model(const bt_model_config *mc, uint64_t seed, const char *rel) {
    char path[PATH_MAX];
    s_path(rel, path);
    bt_model *m = bt_model_new(mc, bt_cpu(), seed);
    CHECK(m != NULL);
    CHECK_OK(bt_model_save(m, NULL, path));
    bt_model_destroy(&m);
}

static const cJSON *s_model(const cJSON *root, int k) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "models"), k);
}

static cJSON *s_get(const cJSON *results, const char *dataset, const char *metric) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(results, dataset),
                                            metric);
}

/*  results[dataset][metric] of model k, or NaN. */
static double s_value(const cJSON *root, int k, const char *dataset, const char *metric) {
    const cJSON *v =
        s_get(cJSON_GetObjectItemCaseSensitive(s_model(root, k), "results"), dataset, metric);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/*  object[key] as a string, "" when it is not one. */
static const char *s_str(const cJSON *object, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(object, key));
    return s ? s : "";
}

static int s_cached(const cJSON *root, int k) {
    return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s_model(root, k), "cached"));
}

/*  Every metric of model k equal, bit for bit (null for null), in both files. */
static bool s_same_results(const cJSON *a, const cJSON *b, int k) {
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(s_model(a, k), "results"), *ds, *v;
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(s_model(b, k), "results");
    int n = 0;
    cJSON_ArrayForEach(ds, ra) {
        cJSON_ArrayForEach(v, ds) {
            const cJSON *w = s_get(rb, ds->string, v->string);
            bool same = cJSON_IsNull(v) ? cJSON_IsNull(w)
                                        : cJSON_IsNumber(w) && w->valuedouble == v->valuedouble;
            if (!same)
                return false;
            n++;
        }
    }
    return n > 0;
}

/*  The full run against direct evaluator calls on the same saved model. */
static void s_check_full(const bt_config *cfg) {
    CHECK(s_eval("model_a --config cfg.json --out full.json") == 0);
    CHECK_STR_CONTAINS(s_out, "accuracy");
    CHECK_STR_CONTAINS(s_out, "\u00b1");
    cJSON *r = s_load("full.json");
    CHECK(r != NULL);
    CHECK(!strcmp(s_str(r, "mode"), "full"));
    CHECK(cJSON_IsNumber(s_get(cJSON_GetObjectItemCaseSensitive(r, "config"), "run", "seed")));
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(r, "results");
    CHECK(cJSON_GetArraySize(results) == 4);
    CHECK(strlen(s_str(s_model(r, 0), "hash")) == 16);
    CHECK(s_cached(r, 0) == 0);
    CHECK(s_value(r, 0, "greedy", "examples") == 60);
    CHECK(cJSON_IsNumber(s_get(results, "greedy", "robust.spacing")));
    CHECK(s_value(r, 0, "ppl", "texts") == 60);
    double p1 = s_value(r, 0, "sampled", "pass@1"), p4 = s_value(r, 0, "sampled", "pass@4");
    CHECK(p4 >= 0 && p4 <= 1 && p4 >= p1);

    char dir[PATH_MAX];
    s_path("model_a", dir);
    bt_model *m = bt_model_load(dir, bt_cpu());
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    bt_source_arith_config ac;
    bt_config_task_arith(cfg, &ac);
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_arith(&ac, &task));
    bt_evaluator_sums s;
    bt_evaluator_sums_init(&s, 1);
    CHECK_OK(bt_evaluator_perplexity_task(m, tok, task, 0, 60, &s));
    CHECK_REL(s_value(r, 0, "ppl", "perplexity"), exp(s.nll_sum / (double)s.nll_tokens), 1e-9);
    CHECK(s_value(r, 0, "ppl", "tokens") == (double)s.nll_tokens);
    /* probes: log P("4" | "2+2="), and the pair ordered by NLL per token */
    bt_nll_item items[3] = {{"2+2=", "4", false}, {"", "12+30=42", false}, {"", "12+30=24", false}};
    double nll[3];
    int64_t ntok[3];
    CHECK_OK(bt_evaluator_nll(m, tok, items, 3, nll, ntok));
    CHECK_REL(s_value(r, 0, "probes", "probe.two.logp"), -nll[0], 1e-5);
    CHECK(s_value(r, 0, "probes", "pair.order.ok") == (nll[1] / ntok[1] < nll[2] / ntok[2]));
    /* both perplexities and their log-ratio margin, positive when the pair is ordered right */
    CHECK_REL(s_value(r, 0, "probes", "pair.order.better_ppl"), exp(nll[1] / ntok[1]), 1e-5);
    CHECK_REL(s_value(r, 0, "probes", "pair.order.worse_ppl"), exp(nll[2] / ntok[2]), 1e-5);
    CHECK_REL(s_value(r, 0, "probes", "pair.order.margin"), nll[2] / ntok[2] - nll[1] / ntok[1],
              1e-5);
    bt_source_destroy(&task);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    cJSON_Delete(r);
}

/*  The API in-process: quick mode evaluates the first min(count, 50) items of each dataset. */
static void s_check_quick(const bt_config *cfg) {
    char dir[PATH_MAX];
    s_path("model_a", dir);
    const char *models[] = {dir};
    bt_harness_options opt;
    bt_harness_options_init(&opt);
    CHECK_OK(bt_harness_mode_parse("quick", &opt.mode));
    CHECK(bt_harness_mode_parse("fast", &opt.mode) == BT_EINVAL);
    bt_harness_result *r = NULL;
    CHECK_OK(bt_harness_run(cfg, models, 1, &opt, &r));
    const bt_harness_dataset *ds = r ? r->models[0].datasets : NULL;
    CHECK(ds && !strcmp(ds[0].name, "greedy") && ds[0].metrics[0].value == 50); /* min(60, 50) */
    CHECK(ds && !strcmp(ds[1].name, "sampled") && ds[1].metrics[0].value == 20);
    CHECK(ds && !strcmp(ds[2].name, "ppl") && ds[2].metrics[0].value == 50); /* texts */
    CHECK(ds && !strcmp(ds[3].metrics[0].name, "probe.two.logp"));           /* all probes */
    bt_harness_result_destroy(&r);
    bt_harness_result_destroy(&r);
    CHECK(r == NULL);
}

/*  Two saved models and the config's own version-0 model (run.seed 1: model_a's weights). */
static void s_check_compare(void) {
    CHECK(s_eval("model_a --config cfg.json --mode compare") == 2);
    CHECK(s_eval("model_a model_b init --config cfg.json --mode compare --out cmp.json") == 0);
    CHECK_STR_CONTAINS(s_out, "model_a");
    CHECK_STR_CONTAINS(s_out, "model_b");
    cJSON *r = s_load("cmp.json"), *full = s_load("full.json");
    const char *ha = s_str(s_model(r, 0), "hash"), *hb = s_str(s_model(r, 1), "hash");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "models")) == 3);
    CHECK(strlen(ha) == 16 && strcmp(ha, hb) != 0);
    CHECK(s_value(r, 0, "ppl", "perplexity") != s_value(r, 1, "ppl", "perplexity"));
    CHECK(s_value(r, 2, "ppl", "perplexity") == s_value(r, 0, "ppl", "perplexity"));
    /* repeated runs give the same numbers, sampled ones included */
    CHECK(s_value(r, 0, "sampled", "pass@4") == s_value(full, 0, "sampled", "pass@4"));
    CHECK(s_value(r, 0, "greedy", "accuracy") == s_value(full, 0, "greedy", "accuracy"));
    cJSON_Delete(r);
    cJSON_Delete(full);
}

/*  `baton eval init` gives the numbers of a training run's step-0 evaluation (one eval worker):
    every field of its eval lines but the two that measure the machine. */
static void s_check_training_run(void) {
    CHECK(s_baton("run cfg.json --run-dir run --set grpo.steps=1 --set grpo.group_size=2"
                  " --set grpo.prompts_per_step=2") == 0);
    cJSON *cmp = s_load("cmp.json");
    char path[PATH_MAX], *text = NULL;
    s_path("run/metrics.jsonl", path);
    CHECK_OK(bt_file_read(path, SIZE_MAX, &text, NULL));
    int lines = 0, compared = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *l = cJSON_Parse(line);
        const cJSON *v;
        const char *ds = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "dataset"));
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(l, "step");
        const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "phase"));
        bool start =
            ds && cJSON_IsNumber(step) && step->valuedouble == 0 && phase && !strcmp(phase, "rl");
        lines += start;
        const cJSON *results = cJSON_GetObjectItemCaseSensitive(s_model(cmp, 2), "results");
        const cJSON *mine = start ? cJSON_GetObjectItemCaseSensitive(results, ds) : NULL;
        cJSON_ArrayForEach(v, mine) {
            if (strcmp(v->string, "tokens_per_s") && strcmp(v->string, "peak_rss_mb")) {
                const cJSON *w = cJSON_GetObjectItemCaseSensitive(l, v->string);
                CHECK(cJSON_IsNumber(w) ? w->valuedouble == v->valuedouble : cJSON_IsNull(v));
                compared++;
            }
        }
        cJSON_Delete(l);
    }
    CHECK(lines == 4 && compared > 30);
    free(text);
    cJSON_Delete(cmp);
}

/*  Two incremental runs of the command, then one of the API after model_b got new weights.
    Returns that last result (caller owns). */
static bt_harness_result *s_check_incremental(const bt_config *cfg) {
    const char *args = "model_a model_b --config cfg.json --mode incremental --cache cache";
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s --out inc1.json", args);
    CHECK(s_eval(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s --out inc2.json", args);
    CHECK(s_eval(cmd) == 0);
    CHECK_STR_CONTAINS(s_out, "cached: model_b ppl");
    cJSON *a = s_load("inc1.json"), *b = s_load("inc2.json"), *full = s_load("full.json");
    CHECK(s_cached(a, 0) == 0 && s_cached(a, 1) == 0);
    CHECK(s_cached(b, 0) == 4 && s_cached(b, 1) == 4);
    CHECK(s_same_results(a, b, 0) && s_same_results(a, b, 1));
    CHECK(s_value(a, 0, "ppl", "perplexity") == s_value(full, 0, "ppl", "perplexity"));
    /* new weights in the same directory: that model's pairs are evaluated again */
    s_save_model(&cfg->model, 3, "model_b");
    char dir_a[PATH_MAX], dir_b[PATH_MAX], cache[PATH_MAX];
    s_path("model_a", dir_a);
    s_path("model_b", dir_b);
    s_path("cache", cache);
    const char *models[] = {dir_a, dir_b};
    bt_harness_options opt = {.mode = BT_HARNESS_INCREMENTAL, .cache_dir = cache};
    bt_harness_result *r = NULL;
    CHECK_OK(bt_harness_run(cfg, models, 2, &opt, &r));
    for (int i = 0; r && i < 4; i++)
        CHECK(r->models[0].datasets[i].cached && !r->models[1].datasets[i].cached);
    const bt_eval_metric *ppl = r ? &r->models[1].datasets[2].metrics[3] : NULL;
    CHECK(ppl && !strcmp(ppl->name, "perplexity"));
    CHECK(ppl && ppl->value != s_value(b, 1, "ppl", "perplexity"));
    /* a dataset prompted otherwise (one few-shot exemplar) is evaluated again, the others not */
    bt_config *fewshot = malloc(sizeof *fewshot);
    *fewshot = *cfg;
    fewshot->eval.datasets[0].num_fewshot = 1;
    bt_harness_result *again = NULL;
    CHECK_OK(bt_harness_run(fewshot, models, 1, &opt, &again));
    for (int i = 0; again && i < 4; i++)
        CHECK(again->models[0].datasets[i].cached == (i != 0));
    bt_harness_result_destroy(&again);
    free(fewshot);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(full);
    return r;
}

/*  A copy of full.json with results[dataset][metric] multiplied by scale and shifted by add; a
    dataset the results lack gets {"accuracy": 0.1}. */
static void s_baseline(const char *rel, const char *dataset, const char *metric, double scale,
                       double add) {
    cJSON *r = s_load("full.json");
    cJSON *v = s_get(cJSON_GetObjectItemCaseSensitive(r, "results"), dataset, metric);
    if (v)
        cJSON_SetNumberValue(v, v->valuedouble * scale + add);
    else
        cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(r, "results"), dataset,
                              cJSON_Parse("{\"accuracy\": 0.1}"));
    s_save(rel, r);
    cJSON_Delete(r);
}

/*  Regressions of r's first model against the baseline file rel; the table lands in table. */
static int s_gate(const bt_harness_result *r, const char *rel, double max_drop, char *table,
                  size_t cap) {
    char path[PATH_MAX];
    s_path(rel, path);
    FILE *f = fmemopen(table, cap, "w");
    int regressions = -1;
    CHECK_OK(bt_harness_gate(r, path, max_drop, f, &regressions));
    fclose(f);
    return regressions;
}

/*  The command's exit codes, then the gate's verdicts through the API. */
static void s_check_gate(const bt_harness_result *r) {
    const char *args = "model_a --config cfg.json --mode incremental --cache cache --baseline";
    char cmd[256], table[1 << 14];
    s_baseline("acc.json", "greedy", "accuracy", 1, 0.5);
    s_baseline("ppl.json", "ppl", "perplexity", 0.5, 0);
    s_baseline("gone.json", "gone", "accuracy", 1, 0);
    snprintf(cmd, sizeof cmd, "%s full.json", args);
    CHECK(s_eval(cmd) == 0);
    CHECK_STR_CONTAINS(s_out, "no regression");
    snprintf(cmd, sizeof cmd, "%s acc.json", args);
    CHECK(s_eval(cmd) == 1);
    CHECK_STR_CONTAINS(s_out, "DROP");
    snprintf(cmd, sizeof cmd, "%s nothere.json", args);
    CHECK(s_eval(cmd) == 1);
    CHECK_STR_CONTAINS(s_out, "nothere.json");
    CHECK(s_gate(r, "full.json", 0, table, sizeof table) == 0);
    CHECK_STR_CONTAINS(table, "ok");
    CHECK(s_gate(r, "acc.json", 0.02, table, sizeof table) == 1);
    CHECK_STR_CONTAINS(table, "DROP");
    CHECK(s_gate(r, "acc.json", 1, table, sizeof table) == 0);
    CHECK(s_gate(r, "ppl.json", 0.02, table, sizeof table) == 1); /* +100% */
    CHECK(s_gate(r, "ppl.json", 1.5, table, sizeof table) == 0);
    CHECK(s_gate(r, "gone.json", 0.02, table, sizeof table) == 1);
    CHECK_STR_CONTAINS(table, "missing");
}

static void s_check_errors(void) {
    const struct {
        const char *args, *message;
        int rc;
    } bad[] = {
        {"--config cfg.json", "missing MODEL", 2},
        {"model_a", "missing --config", 2},
        {"model_a --config cfg.json --frob", "unexpected argument \"--frob\"", 2},
        {"model_a --config cfg.json --baseline full.json --max-drop -1", "--max-drop -1", 2},
        {"no_model --config cfg.json", "no_model", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(s_eval(bad[i].args) == bad[i].rc);
        CHECK_STR_CONTAINS(s_out, bad[i].message);
    }
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_eval_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char path[PATH_MAX];
    s_path("cfg.json", path);
    CHECK_OK(bt_file_write(path, s_config, strlen(s_config)));
    bt_config cfg;
    CHECK_OK(bt_config_load(path, NULL, 0, &cfg));
    s_save_model(&cfg.model, 1, "model_a");
    s_save_model(&cfg.model, 2, "model_b");
    s_check_errors();
    s_check_full(&cfg);
    s_check_quick(&cfg);
    s_check_compare();
    s_check_training_run();
    bt_harness_result *r = s_check_incremental(&cfg);
    s_check_gate(r);
    bt_harness_result_destroy(&r);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
