/*  test_variants.c — strategy variants in one run: two variants (the base and a learning rate 10x
    higher) share one worker pool and one run directory, every metrics line names its variant, and
    each variant's lines are exactly those of a run of its own config alone (the same seeds, its
    own policy, optimizer, evaluations); the variants advance in turn (equal steps), the run reports
    each one's share of the workers' compute, each leaves its policy in RUN_DIR/variants/NAME/model,
    and `baton report` gives each variant a row of the comparison table. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <sys/stat.h>

static char s_tmp[64], s_config[128], s_alone[128];

static const char s_base[] =
    "\"run\": {\"name\": \"v\", \"seed\": 7},"
    " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
    "  \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"max_position_embeddings\": 64},"
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6, \"format_reward\": 0.5},"
    " \"sft\": {\"steps\": 2, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 12, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 4, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 2000}";

static pid_t s_start(const char *config, const char *dir, const char *set) {
    const char *args[] = {"run", config, "--run-dir", dir, set ? "--set" : NULL, set, NULL};
    return runs_spawn(args);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_variants_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char text[4096];
    snprintf(s_config, sizeof s_config, "%s/variants.json", s_tmp);
    snprintf(text, sizeof text,
             "{%s, \"variants\": [{\"name\": \"base\"},"
             " {\"name\": \"hot\", \"set\": {\"grpo.lr\": 0.01}}]}",
             s_base);
    CHECK_OK(bt_file_write(s_config, text, strlen(text)));
    snprintf(s_alone, sizeof s_alone, "%s/alone.json", s_tmp);
    snprintf(text, sizeof text, "{%s}", s_base);
    CHECK_OK(bt_file_write(s_alone, text, strlen(text)));
    char both[128], base[128], hot[128];
    snprintf(both, sizeof both, "%s/both", s_tmp);
    snprintf(base, sizeof base, "%s/base", s_tmp);
    snprintf(hot, sizeof hot, "%s/hot", s_tmp);

    CHECK(runs_wait(s_start(s_config, both, NULL)) == 0);
    CHECK(runs_wait(s_start(s_alone, base, NULL)) == 0);
    CHECK(runs_wait(s_start(s_alone, hot, "grpo.lr=0.01")) == 0);
    char *v_base = runs_metrics_of(both, "base"), *v_hot = runs_metrics_of(both, "hot");
    char *a_base = runs_metrics_of(base, "main"), *a_hot = runs_metrics_of(hot, "main");
    CHECK(v_base && a_base && strcmp(v_base, a_base) == 0);
    CHECK(v_hot && a_hot && strcmp(v_hot, a_hot) == 0);
    CHECK(v_base && v_hot && strcmp(v_base, v_hot) != 0); /* the learning rate mattered */
    CHECK(runs_train_steps(both) == 24);                   /* 12 steps each */
    free(v_base);
    free(v_hot);
    free(a_base);
    free(a_hot);
    char *all = runs_metrics(both), *line = all;
    int unnamed = 0;
    for (char *l = all ? strtok(line, "\n") : NULL; l; l = strtok(NULL, "\n"))
        unnamed += !strstr(l, "\"variant\":\"base\"") && !strstr(l, "\"variant\":\"hot\"");
    CHECK(all && unnamed == 0);
    free(all);
    char path[256], *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", both);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    double share = 0;
    int shares = 0;
    for (const char *e = events ? strstr(events, "\"event\":\"variant_share\"") : NULL; e;
         e = strstr(e + 1, "\"event\":\"variant_share\"")) {
        double s = strtod(strstr(e, "\"share\":") + 8, NULL);
        CHECK(s > 0 && s < 1 && strstr(e, "\"steps\":12"));
        share += s;
        shares++;
    }
    CHECK(shares == 2 && share > 1 - 1e-9 && share < 1 + 1e-9); /* each its part of the pool */
    free(events);
    const char *report[] = {"report", both, NULL}; /* one table row per variant */
    CHECK(runs_wait(runs_spawn(report)) == 0);
    char *html = NULL;
    snprintf(path, sizeof path, "%s/report.html", both);
    CHECK_OK(bt_file_read(path, 1 << 24, &html, NULL));
    CHECK(html && strstr(html, "<tr><td>v / base</td>") && strstr(html, "<tr><td>v / hot</td>"));
    free(html);
    struct stat sb;
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/variants/%s/model/model.safetensors", both,
                 k ? "hot" : "base");
        CHECK(stat(path, &sb) == 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
