/*  test_variant_data.c — variants that set data.*: two data mixtures compared side by side in one
    run, each writing exactly the metrics of a run of its own config alone (its sources, weights
    and per-source fields); and the SFT warm start run once for the variants whose warm starts
    are the same, each of them still writing exactly its solo run's metrics and leaving its solo
    run's policy, byte for byte. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

static char s_tmp[64];
static char s_even[128], s_heavy[128]; /* the solo configs of test_mixtures */

/*  The shared part of every config here: a tiny model, two eval-free seconds of work per run. */
static const char s_base[] =
    "\"run\": {\"name\": \"d\", \"seed\": 11},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"heldout_size\": 6,"
    "  \"format_reward\": 0.5},"
    " \"grpo\": {\"steps\": 6, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 3, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 2000}";

/*  Two arithmetic sources, the sums and the differences, with weights wa and wb. */
static void s_sources(char *out, size_t cap, double wa, double wb) {
    snprintf(out, cap,
             "[{\"name\": \"add\", \"operators\": \"+\", \"weight\": %g},"
             " {\"name\": \"sub\", \"operators\": \"-\", \"seed\": 5, \"weight\": %g}]",
             wa, wb);
}

static void s_write(const char *name, const char *text, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", s_tmp, name);
    CHECK_OK(bt_file_write(path, text, strlen(text)));
}

static int s_run(const char *config, const char *dir, const char *set) {
    const char *args[] = {"run", config, "--run-dir", dir, set ? "--set" : NULL, set, NULL};
    return runs_wait(runs_spawn(args));
}

/*  runs_metrics_of(dir, variant) equals the solo run's "main" lines. */
static void s_same_as_alone(const char *dir, const char *variant, const char *alone) {
    char *v = runs_metrics_of(dir, variant), *a = runs_metrics_of(alone, "main");
    CHECK(v && a && strcmp(v, a) == 0);
    if (v && a && strcmp(v, a) != 0)
        fprintf(stderr, "variant %s:\n%s\nalone:\n%s\n", variant, v, a);
    free(v);
    free(a);
}

/*  The events of kind `event` in dir's events.jsonl. */
static int s_count_events(const char *dir, const char *event, const char *with) {
    char path[256], *text = NULL, pat[96];
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    snprintf(pat, sizeof pat, "\"event\":\"%s\"", event);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    int n = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n"))
        n += strstr(l, pat) && (!with || strstr(l, with));
    free(text);
    return n;
}

/*  Two mixtures of the same two sources, 1:1 and 4:1, trained side by side. */
static void test_mixtures(void) {
    char text[8192], even[512], heavy[512], both[128], alone_even[128], alone_heavy[128];
    s_sources(even, sizeof even, 1, 1);
    s_sources(heavy, sizeof heavy, 4, 1);
    snprintf(text, sizeof text,
             "{%s, \"sft\": {\"steps\": 10, \"batch_size\": 8, \"lr\": 0.01},"
             " \"data\": {\"sources\": %s},"
             " \"variants\": [{\"name\": \"even\"},"
             " {\"name\": \"heavy\", \"set\": {\"data.sources\": %s}}]}",
             s_base, even, heavy);
    s_write("mix.json", text, both, sizeof both);
    snprintf(text, sizeof text,
             "{%s, \"sft\": {\"steps\": 10, \"batch_size\": 8, \"lr\": 0.01},"
             " \"data\": {\"sources\": %s}}",
             s_base, even);
    s_write("even.json", text, alone_even, sizeof alone_even);
    snprintf(s_even, sizeof s_even, "%s", alone_even);
    snprintf(text, sizeof text,
             "{%s, \"sft\": {\"steps\": 10, \"batch_size\": 8, \"lr\": 0.01},"
             " \"data\": {\"sources\": %s}}",
             s_base, heavy);
    s_write("heavy.json", text, alone_heavy, sizeof alone_heavy);
    snprintf(s_heavy, sizeof s_heavy, "%s", alone_heavy);
    char dir[128], d_even[128], d_heavy[128];
    snprintf(dir, sizeof dir, "%s/mix", s_tmp);
    snprintf(d_even, sizeof d_even, "%s/even", s_tmp);
    snprintf(d_heavy, sizeof d_heavy, "%s/heavy", s_tmp);
    CHECK(s_run(both, dir, NULL) == 0);
    CHECK(s_run(alone_even, d_even, NULL) == 0);
    CHECK(s_run(alone_heavy, d_heavy, NULL) == 0);
    s_same_as_alone(dir, "even", d_even);
    s_same_as_alone(dir, "heavy", d_heavy);
    char *v_even = runs_metrics_of(dir, "even"), *v_heavy = runs_metrics_of(dir, "heavy");
    CHECK(v_even && strstr(v_even, "\"weight.add\":1,") && strstr(v_even, "\"prompts.sub\":"));
    CHECK(v_heavy && strstr(v_heavy, "\"weight.add\":4,") && strstr(v_heavy, "\"weight.sub\":1"));
    CHECK(v_even && v_heavy && strcmp(v_even, v_heavy) != 0); /* the mixture mattered */
    free(v_even);
    free(v_heavy);
    CHECK(runs_train_steps(dir) == 12);
}

/*  The "time" of dir's SFT lines of variant, in order, as text: a shared warm start's lines are
    the leader's, copied. */
static char *s_sft_times(const char *dir, const char *variant) {
    char path[256], *text = NULL, pat[96];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(pat, sizeof pat, "\"variant\":\"%s\"", variant);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    char *out = calloc(1, text ? strlen(text) + 1 : 1);
    for (char *l = text ? strtok(text, "\n") : NULL; l && out; l = strtok(NULL, "\n"))
        if (strstr(l, "\"kind\":\"sft\"") && strstr(l, pat) && strstr(l, "\"time\":")) {
            const char *t = strstr(l, "\"time\":");
            strncat(out, t, strcspn(t, ","));
        }
    free(text);
    return out;
}

/*  Three variants, two of them with the same warm start (they differ in the GRPO learning rate
    and the mixture, which SFT does not read) and one with another SFT learning rate: the pair
    runs SFT once (the follower's `warm_start_shared` event; its SFT lines are the leader's,
    copied), and each of the three writes exactly the metrics of its config run alone and leaves
    the same policy, byte for byte. */
static void test_shared_warm_start(void) {
    char text[8192], heavy[512], config[128], dir[128];
    s_sources(heavy, sizeof heavy, 4, 1);
    char even[512];
    s_sources(even, sizeof even, 1, 1);
    snprintf(text, sizeof text,
             "{%s, \"sft\": {\"steps\": 10, \"batch_size\": 8, \"lr\": 0.01, \"eval_every\": 5},"
             " \"data\": {\"sources\": %s},"
             " \"variants\": [{\"name\": \"lead\"},"
             " {\"name\": \"follow\", \"set\": {\"grpo.lr\": 0.01, \"data.sources\": %s}},"
             " {\"name\": \"own\", \"set\": {\"sft.lr\": 0.02}}]}",
             s_base, even, heavy);
    s_write("warm.json", text, config, sizeof config);
    snprintf(dir, sizeof dir, "%s/warm", s_tmp);
    CHECK(s_run(config, dir, NULL) == 0);
    /* the solo runs: eval_every as in the run, each variant's keys over the base */
    char lead[128], follow[128], own[128];
    snprintf(lead, sizeof lead, "%s/lead", s_tmp);
    snprintf(follow, sizeof follow, "%s/follow", s_tmp);
    snprintf(own, sizeof own, "%s/own", s_tmp);
    const char *alone[3] = {lead, follow, own}, *names[3] = {"lead", "follow", "own"};
    char set_lead[] = "sft.eval_every=5";
    CHECK(s_run(s_even, lead, set_lead) == 0);
    char solo[128];
    char *heavy_json = NULL;
    CHECK_OK(bt_file_read(s_heavy, 1 << 20, &heavy_json, NULL));
    if (heavy_json) { /* heavy.json with the follower's GRPO learning rate */
        char *lr = strstr(heavy_json, "\"lr\": 0.001");
        CHECK(lr != NULL);
        if (lr)
            memcpy(lr, "\"lr\": 0.010", 11);
        s_write("follow.json", heavy_json, solo, sizeof solo);
        free(heavy_json);
        CHECK(s_run(solo, follow, set_lead) == 0);
    }
    snprintf(solo, sizeof solo, "%s", s_even);
    const char *own_sets[] = {"run",   solo,          "--run-dir", own, "--set", "sft.eval_every=5",
                              "--set", "sft.lr=0.02", NULL};
    CHECK(runs_wait(runs_spawn(own_sets)) == 0);
    for (int k = 0; k < 3; k++) {
        s_same_as_alone(dir, names[k], alone[k]);
        char a[256], b[256], *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        snprintf(a, sizeof a, "%s/variants/%s/model/model.safetensors", dir, names[k]);
        snprintf(b, sizeof b, "%s/model/model.safetensors", alone[k]);
        CHECK_OK(bt_file_read(a, 1 << 26, &x, &nx));
        CHECK_OK(bt_file_read(b, 1 << 26, &y, &ny));
        CHECK(x && y && nx == ny && memcmp(x, y, nx) == 0);
        free(x);
        free(y);
    }
    /* SFT ran once for the pair: the follower took the leader's, and its lines are copies */
    CHECK(s_count_events(dir, "warm_start_shared", NULL) == 1);
    CHECK(s_count_events(dir, "warm_start_shared", "\"variant\":\"follow\",\"from\":\"lead\"") ==
          1);
    char *t_lead = s_sft_times(dir, "lead"), *t_follow = s_sft_times(dir, "follow"),
         *t_own = s_sft_times(dir, "own");
    CHECK(t_lead && t_follow && t_own && t_lead[0] && strcmp(t_lead, t_follow) == 0);
    CHECK(t_lead && t_own && strcmp(t_lead, t_own) != 0);
    free(t_lead);
    free(t_follow);
    free(t_own);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_vdata_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_mixtures();
    test_shared_warm_start();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
