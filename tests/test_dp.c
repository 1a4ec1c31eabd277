/*  test_dp.c — data-parallel trainer ranks in whole runs.  Two ranks (threads, Gloo over loopback)
    train the same run as one trainer: every step's loss, entropy, gradient norm, reward and version
    agree (to float rounding of the summed gradients).  Elastic: in a run of three trainer
    processes, one killed with SIGKILL after a few steps breaks the group; the two survivors
    re-form it from their last step's weights, split the same global batches, and the run finishes
    with every step trained exactly once and the undisturbed run's statistics. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <math.h>
#include <signal.h>
#include <time.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"dp\", \"seed\": 5}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 30, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.003, \"kl_coef\": 0.02},"
    " \"eval\": {\"every_steps\": 10, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 2000}}";

/*  The run's "train" lines of variant (NULL: any), in step order. */
static cJSON *s_variant_lines(const char *dir, const char *variant) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    cJSON *out = cJSON_CreateArray();
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return out;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cJSON *kind = cJSON_GetObjectItem(j, "kind");
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(j, "variant"));
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "train") &&
            (!variant || (v && !strcmp(v, variant))))
            cJSON_AddItemToArray(out, j);
        else
            cJSON_Delete(j);
    }
    free(text);
    return out;
}

static double s_num(const cJSON *line, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(line, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/*  Every step 1..steps of variant (NULL: the run's one) once, in order, with the reference run's
    statistics: |a - b| <= tol (1 + |a|) (near-zero losses are sums that cancel, so the tolerance
    is absolute there). */
static void s_check_same_variant(const char *ref_dir, const char *dir, const char *variant,
                                 int steps, double tol) {
    cJSON *a = s_variant_lines(ref_dir, variant), *b = s_variant_lines(dir, variant);
    CHECK(cJSON_GetArraySize(a) == steps && cJSON_GetArraySize(b) == steps);
    static const char *const keys[] = {"loss",      "kl",          "entropy",
                                       "grad_norm", "reward_mean", "version"};
    for (int i = 0; i < cJSON_GetArraySize(a) && i < cJSON_GetArraySize(b); i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i), *y = cJSON_GetArrayItem(b, i);
        CHECK(s_num(y, "step") == i + 1);
        for (int k = 0; k < 6; k++) {
            double u = s_num(x, keys[k]), v = s_num(y, keys[k]);
            if (!(fabs(u - v) <= tol * (1 + fabs(u)))) {
                fprintf(stderr, "%s %s step %d %s: %.17g vs %.17g\n", dir, variant ? variant : "",
                        i + 1, keys[k], u, v);
                CHECK(fabs(u - v) <= tol * (1 + fabs(u)));
            }
        }
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static void s_check_same_run(const char *ref_dir, const char *dir, int steps) {
    s_check_same_variant(ref_dir, dir, NULL, steps, 1e-5);
}

/*  `baton run config` in dir with --set trainers and the arguments extra (NULL-terminated, up to
    eight; NULL: none), in worker processes with procs. */
static pid_t s_start_with(const char *config, const char *dir, const char *trainers, bool procs,
                          const char *const *extra) {
    const char *args[16] = {"run", config, "--run-dir", dir, "--set", trainers};
    int n = 6;
    for (int k = 0; extra && extra[k] && k < 8; k++)
        args[n++] = extra[k];
    args[n++] = procs ? "--procs" : NULL;
    char log[160]; /* the run's and its worker processes' output, shown when a check fails */
    snprintf(log, sizeof log, "%s.log", dir);
    return runs_spawn_in(NULL, args, log);
}

static pid_t s_start_config(const char *config, const char *dir, const char *trainers, bool procs) {
    return s_start_with(config, dir, trainers, procs, NULL);
}

/*  SIGKILLs the run's trainer-1 process once dir's metrics hold `lines` train lines. */
static void s_kill_trainer_after(pid_t run, const char *dir, int lines) {
    while (waitpid(run, NULL, WNOHANG) == 0 && runs_train_steps(dir) < lines)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    pid_t victim = runs_worker_pid(run, "trainer-1");
    CHECK(victim > 0);
    if (victim > 0)
        kill(victim, SIGKILL);
}

static pid_t s_start(const char *dir, const char *trainers, bool procs) {
    return s_start_config(s_config, dir, trainers, procs);
}

/*  Two variants, each with a data-parallel group of its own over the same trainer processes: each
    variant's updates equal those it makes with one trainer (to 1e-6), and a trainer killed mid-run
    breaks both groups, which re-form on the survivors, each by itself, while the run goes on. */
static void test_variants(void) {
    char config[160], one[160], group[160];
    snprintf(config, sizeof config, "%s/variants.json", s_tmp);
    snprintf(one, sizeof one, "%s/variants-one", s_tmp);
    snprintf(group, sizeof group, "%s/variants-group", s_tmp);
    char json[sizeof s_json + 256];
    snprintf(json, sizeof json,
             "%.*s, \"variants\": [{\"name\": \"a\"}, {\"name\": \"b\", "
             "\"set\": {\"grpo.lr\": 0.001, \"grpo.kl_coef\": 0.05}}]}",
             (int)strlen(s_json) - 1, s_json);
    CHECK_OK(bt_file_write(config, json, strlen(json)));
    CHECK(runs_wait(s_start_config(config, one, "workers.trainer=1", false)) == 0);
    pid_t run = s_start_config(config, group, "workers.trainer=3", true);
    s_kill_trainer_after(run, group, 6);
    CHECK(runs_wait(run) == 0);
    s_check_same_variant(one, group, "a", 30, 1e-6);
    s_check_same_variant(one, group, "b", 30, 1e-6);
    char path[256], *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", group);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    for (int k = 0; k < 2; k++) { /* each variant's group: formed of 3, broken, re-formed of 2 */
        char formed[96], reformed[96], broken[96];
        const char *name = k ? "b" : "a";
        snprintf(formed, sizeof formed, "\"variant\":\"%s\",\"generation\":1,\"world\":3", name);
        snprintf(reformed, sizeof reformed, "\"variant\":\"%s\",\"generation\":2,\"world\":2",
                 name);
        snprintf(broken, sizeof broken, "\"event\":\"trainer_group_broken\"");
        CHECK(events && strstr(events, formed) && strstr(events, reformed) &&
              strstr(events, broken));
    }
    if (check_exit() != 0)
        fprintf(stderr, "events.jsonl of the variants run:\n%s\n", events ? events : "(none)");
    free(events);
}

/*  The events.jsonl of dir (caller frees). */
static char *s_events(const char *dir) {
    char path[256], *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    return events;
}

/*  The events of a sharded run whose group of three lost a rank: broken, re-formed of two,
    restored from the snapshot. */
static void s_check_restored(const char *dir) {
    char *events = s_events(dir);
    bool restored = events && strstr(events, "\"event\":\"trainer_group_broken\"") &&
                    strstr(events, "\"generation\":2,\"world\":2") &&
                    strstr(events, "\"event\":\"trainer_restored\"");
    if (!restored)
        fprintf(stderr, "events.jsonl of %s:\n%s\n", dir, events ? events : "");
    CHECK(restored);
    free(events);
}

/*  workers.shard: three trainer processes with sharded gradients and optimizer state, and three
    with sharded weights too, train the run one trainer trains (1e-5).  One killed mid-run breaks
    the group; the survivors' shards are not the whole state, so the group of two is restored
    from the snapshot, and the run finishes with every step once and the same statistics.  A run
    of four sharded ranks stopped after its checkpoint of step 10 resumes on four, on two and on
    one trainer, and on two with sharded weights, each finishing as the uninterrupted run does. */
static void test_sharded(const char *one) {
    static const char *const shard[] = {"--set", "workers.shard=gradients", NULL};
    char dir[160];
    snprintf(dir, sizeof dir, "%s/sharded-elastic", s_tmp);
    pid_t run = s_start_with(s_config, dir, "workers.trainer=3", true, shard);
    s_kill_trainer_after(run, dir, 4);
    CHECK(runs_wait(run) == 0);
    s_check_same_run(one, dir, 30);
    s_check_restored(dir);
    /* sharded weights too: gathered a layer at a time, the KL reference frozen from them */
    static const char *const params[] = {"--set", "workers.shard=parameters", NULL};
    snprintf(dir, sizeof dir, "%s/sharded-params", s_tmp);
    run = s_start_with(s_config, dir, "workers.trainer=3", true, params);
    s_kill_trainer_after(run, dir, 4);
    CHECK(runs_wait(run) == 0);
    s_check_same_run(one, dir, 30);
    s_check_restored(dir);

    char whole[160];
    snprintf(whole, sizeof whole, "%s/sharded-4", s_tmp);
    static const char *const four[] = {"--set", "workers.shard=gradients", "--set",
                                       "checkpoint.full_every_steps=10", NULL};
    CHECK(runs_wait(s_start_with(s_config, whole, "workers.trainer=4", true, four)) == 0);
    s_check_same_run(one, whole, 30);
    static const char *const trainers[4] = {"workers.trainer=4", "workers.trainer=2",
                                            "workers.trainer=1", "workers.trainer=2"};
    static const char *const shards[4] = {"workers.shard=gradients", "workers.shard=optimizer",
                                          "workers.shard=none", "workers.shard=parameters"};
    for (int k = 0; k < 4; k++) {
        snprintf(dir, sizeof dir, "%s/sharded-resume-%d", s_tmp, k);
        static const char *const stop[] = {
            "--set", "workers.shard=gradients", "--set", "checkpoint.full_every_steps=10",
            "--set", "grpo.steps=10",           NULL};
        CHECK(runs_wait(s_start_with(s_config, dir, "workers.trainer=4", true, stop)) == 0);
        const char *more[] = {"--set", shards[k], "--set", "grpo.steps=30", "--resume", NULL};
        CHECK(runs_wait(s_start_with(s_config, dir, trainers[k], true, more)) == 0);
        if (k == 0)
            s_check_same_variant(whole, dir, NULL, 30, 0.0); /* the same ranks: bit for bit */
        else
            s_check_same_run(whole, dir, 30);
    }
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_dp_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/dp.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char one[128], two[128], elastic[128];
    snprintf(one, sizeof one, "%s/one", s_tmp);
    snprintf(two, sizeof two, "%s/two", s_tmp);
    snprintf(elastic, sizeof elastic, "%s/elastic", s_tmp);

    CHECK(runs_wait(s_start(one, "workers.trainer=1", false)) == 0);
    CHECK(runs_wait(s_start(two, "workers.trainer=2", false)) == 0);
    s_check_same_run(one, two, 30);

    pid_t run = s_start(elastic, "workers.trainer=3", true);
    s_kill_trainer_after(run, elastic, 3);
    CHECK(runs_wait(run) == 0);
    s_check_same_run(one, elastic, 30);
    char path[256], *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", elastic);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    bool reformed = events && strstr(events, "\"event\":\"trainer_group_broken\"") &&
                    strstr(events, "\"generation\":1,\"world\":3") &&
                    strstr(events, "\"generation\":2,\"world\":2");
    if (!reformed) { /* what happened instead */
        fprintf(stderr, "events.jsonl of the elastic run:\n%s\n", events ? events : "(none)");
        char cmd[256];
        snprintf(cmd, sizeof cmd, "grep -v '^rl \\|^sft \\|^join ' %s.log >&2", elastic);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log of the elastic run)\n");
    }
    CHECK(reformed);
    free(events);
    CHECK(runs_worker_pid(run, "trainer-0") == 0 && runs_worker_pid(run, "trainer-2") == 0);
    test_variants();
    test_sharded(one);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
