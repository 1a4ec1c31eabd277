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

#include <math.h>
#include <sys/stat.h>

static char s_tmp[64], s_config[128], s_alone[128];

static const char s_base[] =
    "\"run\": {\"name\": \"v\", \"seed\": 7},"
    RUNS_MODEL_TINY
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

/*  Population-based training over four variants (learning rates 1e-6 to 0.03), ranked by reward
    every 4 steps: each copy is a `pbt` event in which the bottom variant copies one that did
    better (the restore checks the copied state by its canary loss, or the run fails), and then
    trains at the explored rate: the top one's x0.8 or x1.2 within [lr_min, lr_max], or a draw in
    that range; its next train line applies exactly that rate.  The report draws the lineage.
    20 SFT steps, so that completions earn rewards from the first ranking on and the variants'
    rewards differ (after 2, whether any of a near-uniform policy's completions earns a reward in
    12 steps is a matter of the draws). */
static void test_pbt(void) {
    char config[128], dir[128], text[4096];
    snprintf(config, sizeof config, "%s/pbt.json", s_tmp);
    snprintf(
        text, sizeof text,
        "{%s, \"pbt\": {\"enabled\": true, \"ready_steps\": 4, \"metric\": \"reward\","
        " \"explore\": \"grpo.lr,grpo.kl_coef,grpo.temperature,grpo.clip_high\","
        " \"kl_coef_min\": 0.001, \"kl_coef_max\": 0.1, \"temperature_min\": 0.7,"
        " \"temperature_max\": 1.3, \"clip_high_min\": 0.2, \"clip_high_max\": 0.35},"
        " \"variants\": [{\"name\": \"cold\", \"set\": {\"grpo.lr\": 1e-6}}, {\"name\": \"base\"},"
        " {\"name\": \"hot\", \"set\": {\"grpo.lr\": 0.03}},"
        " {\"name\": \"warm\", \"set\": {\"grpo.lr\": 0.003}}]}",
        s_base);
    CHECK_OK(bt_file_write(config, text, strlen(text)));
    snprintf(dir, sizeof dir, "%s/pbt", s_tmp);
    CHECK(runs_wait(s_start(config, dir, "sft.steps=20")) == 0);
    CHECK(runs_train_steps(dir) == 48);
    char path[256], *events = NULL, *metrics = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &metrics, NULL));
    int copies = 0, explored = 0;
    for (char *l = events ? strtok(events, "\n") : NULL; l && metrics; l = strtok(NULL, "\n")) {
        cJSON *e = cJSON_Parse(l);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(e, "event"));
        if (kind && !strcmp(kind, "pbt")) {
            int step = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "step"));
            double reward = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "reward"));
            double from_reward = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "from_reward"));
            double from_lr = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "from_lr"));
            double lr = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "lr_after"));
            const char *how = cJSON_GetStringValue(cJSON_GetObjectItem(e, "explore"));
            const char *variant = cJSON_GetStringValue(cJSON_GetObjectItem(e, "variant"));
            CHECK(step % 4 == 0 && step < 12 && from_reward > reward);
            CHECK(lr >= 1e-6 && lr <= 1e-2);
            if (how && !strcmp(how, "x0.8"))
                CHECK_REL(lr, fmin(fmax(from_lr * 0.8, 1e-6), 1e-2), 1e-12);
            else if (how && !strcmp(how, "x1.2"))
                CHECK_REL(lr, fmin(fmax(from_lr * 1.2, 1e-6), 1e-2), 1e-12);
            else
                CHECK(how && !strcmp(how, "resample"));
            CHECK_REL(runs_train_lr(metrics, variant, step + 1), lr, 1e-12);
            copies++;
        }
        if (kind && !strcmp(kind, "pbt_explore")) { /* the other keys of pbt.explore */
            int step = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "step"));
            const char *param = cJSON_GetStringValue(cJSON_GetObjectItem(e, "param"));
            const char *how = cJSON_GetStringValue(cJSON_GetObjectItem(e, "explore"));
            const char *variant = cJSON_GetStringValue(cJSON_GetObjectItem(e, "variant"));
            double from = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "from_value"));
            double after = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "after"));
            double lo = 0.001, hi = 0.1;
            const char *field = "kl_coef";
            if (param && !strcmp(param, "grpo.temperature"))
                lo = 0.7, hi = 1.3, field = "temperature";
            else if (param && !strcmp(param, "grpo.clip_high"))
                lo = 0.2, hi = 0.35, field = "clip_high";
            else
                CHECK(param && !strcmp(param, "grpo.kl_coef"));
            CHECK(after >= lo && after <= hi);
            if (how && !strcmp(how, "x0.8"))
                CHECK_REL(after, fmin(fmax(from * 0.8, lo), hi), 1e-12);
            else if (how && !strcmp(how, "x1.2"))
                CHECK_REL(after, fmin(fmax(from * 1.2, lo), hi), 1e-12);
            else
                CHECK(how && !strcmp(how, "resample"));
            /* the bottom variant's next step samples and trains with it */
            CHECK_REL(runs_train_value(metrics, variant, step + 1, field), after, 1e-12);
            explored++;
        }
        cJSON_Delete(e);
    }
    CHECK(copies >= 1);
    CHECK(explored == 3 * copies); /* every copy explores the three other keys */
    free(events);
    free(metrics);
    const char *report[] = {"report", dir, NULL};
    CHECK(runs_wait(runs_spawn(report)) == 0);
    char *html = NULL;
    snprintf(path, sizeof path, "%s/report.html", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &html, NULL));
    CHECK(html && strstr(html, "<table class=\"lineage\">"));
    free(html);
}

/*  Scaling-law early stopping: a variant whose learning rate (1e-7) leaves its held-out loss where
    it started is predicted worse than the base by more than the margin once both have four
    evaluations, and stops there (a `variant_stopped` event with both predictions); the base
    trains to the end. */
static void test_early_stop(void) {
    char config[128], dir[128], text[4096];
    snprintf(config, sizeof config, "%s/stop.json", s_tmp);
    snprintf(text, sizeof text,
             "{%s, \"scaling\": {\"enabled\": true, \"stop_margin\": 0.001},"
             " \"variants\": [{\"name\": \"base\", \"set\": {\"grpo.lr\": 0.003}},"
             " {\"name\": \"cold\", \"set\": {\"grpo.lr\": 1e-7}}]}",
             s_base);
    /* a perplexity dataset evaluated every step is what the law is fitted to */
    char *eval = strstr(text, "\"eval\": {\"every_steps\": 4, \"heldout_count\": 6}");
    CHECK(eval != NULL);
    if (!eval)
        return;
    const char *ppl = "\"eval\": {\"every_steps\": 1, \"heldout_count\": 6, \"datasets\":"
                      " [{\"name\": \"ppl\", \"kind\": \"perplexity\"}]}";
    char rest[4096];
    snprintf(rest, sizeof rest, "%s",
             eval + strlen("\"eval\": {\"every_steps\": 4, \"heldout_count\": 6}"));
    snprintf(eval, sizeof text - (size_t)(eval - text), "%s%s", ppl, rest);
    CHECK_OK(bt_file_write(config, text, strlen(text)));
    snprintf(dir, sizeof dir, "%s/stop", s_tmp);
    CHECK(runs_wait(s_start(config, dir, NULL)) == 0);
    char path[256], *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    const char *e = events ? strstr(events, "\"event\":\"variant_stopped\"") : NULL;
    CHECK(e && strstr(e, "\"variant\":\"cold\""));
    int stopped_at = e ? atoi(strstr(e, "\"step\":") + 7) : -1;
    double predicted = e ? strtod(strstr(e, "\"predicted\":") + 12, NULL) : NAN;
    double best = e ? strtod(strstr(e, "\"best_predicted\":") + 17, NULL) : NAN;
    CHECK(predicted > best * 1.001 && stopped_at >= 4 && stopped_at < 12);
    free(events);
    char *cold = runs_metrics_of(dir, "cold"), *base = runs_metrics_of(dir, "base");
    int cold_steps = 0, base_steps = 0;
    for (const char *p = cold; p && (p = strstr(p, "\"kind\":\"train\"")); p++)
        cold_steps++;
    for (const char *p = base; p && (p = strstr(p, "\"kind\":\"train\"")); p++)
        base_steps++;
    CHECK(cold_steps == stopped_at && base_steps == 12);
    free(cold);
    free(base);
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
    CHECK(runs_train_steps(both) == 24);                  /* 12 steps each */
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
    test_pbt();
    test_early_stop();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
