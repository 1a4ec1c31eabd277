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
    "{\"run\": {\"name\": \"dp\", \"seed\": 5},"
    " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
    "  \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"max_position_embeddings\": 64},"
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 30, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.003, \"kl_coef\": 0.02},"
    " \"eval\": {\"every_steps\": 10, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 2000}}";

/*  The run's "train" lines, in step order. */
static cJSON *s_train_lines(const char *dir) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    cJSON *out = cJSON_CreateArray();
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return out;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        cJSON *kind = cJSON_GetObjectItem(j, "kind");
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "train"))
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

/*  Every step 1..steps once, in order, with the reference run's statistics: |a - b| <= 1e-5 (1 +
    |a|) (near-zero losses are sums that cancel, so the tolerance is absolute there). */
static void s_check_same_run(const char *ref_dir, const char *dir, int steps) {
    cJSON *a = s_train_lines(ref_dir), *b = s_train_lines(dir);
    CHECK(cJSON_GetArraySize(a) == steps && cJSON_GetArraySize(b) == steps);
    static const char *const keys[] = {"loss",      "kl",          "entropy",
                                       "grad_norm", "reward_mean", "version"};
    for (int i = 0; i < cJSON_GetArraySize(a) && i < cJSON_GetArraySize(b); i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i), *y = cJSON_GetArrayItem(b, i);
        CHECK(s_num(y, "step") == i + 1);
        for (int k = 0; k < 6; k++) {
            double u = s_num(x, keys[k]), v = s_num(y, keys[k]);
            if (!(fabs(u - v) <= 1e-5 * (1 + fabs(u)))) {
                fprintf(stderr, "%s step %d %s: %.17g vs %.17g\n", dir, i + 1, keys[k], u, v);
                CHECK(fabs(u - v) <= 1e-5 * (1 + fabs(u)));
            }
        }
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
}

static pid_t s_start(const char *dir, const char *trainers, bool procs) {
    const char *args[] = {
        "run", s_config, "--run-dir", dir, "--set", trainers, procs ? "--procs" : NULL, NULL};
    char log[160]; /* the run's and its worker processes' output, shown when a check fails */
    snprintf(log, sizeof log, "%s.log", dir);
    return runs_spawn_in(NULL, args, log);
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
    while (waitpid(run, NULL, WNOHANG) == 0 && runs_train_steps(elastic) < 3)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    pid_t victim = runs_worker_pid(run, "trainer-1");
    CHECK(victim > 0);
    if (victim > 0)
        kill(victim, SIGKILL);
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

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
