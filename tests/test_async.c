/*  test_async.c — asynchronous RL (grpo.max_staleness) in whole runs over worker processes.
    max_staleness 0 is exactly the synchronous algorithm (the same metrics as a run without the
    key).  With eta = 2 the rollouts of the next steps are sampled while a step trains: every batch
    is at most eta policy versions old and some are older than the policy being updated (the run
    really overlapped), the "staleness" field is only written in asynchronous mode, and every
    prompt of the run is trained exactly once, with either objective ("ppo", "decoupled"). */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"async\", \"seed\": 3},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6, \"format_reward\": 0.5},"
    " \"sft\": {\"steps\": 2, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 24, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.003},"
    " \"eval\": {\"every_steps\": 8, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 2000}, \"debug\": {\"log_prompts\": true}}";

static pid_t s_start(const char *dir, const char *set1, const char *set2) {
    const char *args[] = {"run",   s_config, "--run-dir", dir,  "--procs",
                          "--set", set1,     "--set",     set2, NULL};
    return runs_spawn(args);
}

/*  The "staleness" values of the run's train lines: how many there are, their maximum, and
    whether any was out of [0, eta]. */
static void s_staleness(const char *dir, int eta, int *lines, int *max, bool *out_of_range) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    *lines = *max = 0;
    *out_of_range = false;
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *kind = cJSON_GetObjectItem(j, "kind"),
                    *s = cJSON_GetObjectItem(j, "staleness");
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "train") && cJSON_IsNumber(s)) {
            (*lines)++;
            *max = s->valueint > *max ? s->valueint : *max;
            *out_of_range |= s->valueint < 0 || s->valueint > eta;
        }
        cJSON_Delete(j);
    }
    free(text);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_async_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/a.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char sync_dir[128], zero[128], ppo[128], dec[128];
    snprintf(sync_dir, sizeof sync_dir, "%s/sync", s_tmp);
    snprintf(zero, sizeof zero, "%s/zero", s_tmp);
    snprintf(ppo, sizeof ppo, "%s/ppo", s_tmp);
    snprintf(dec, sizeof dec, "%s/decoupled", s_tmp);

    CHECK(runs_wait(s_start(sync_dir, "run.name=async", "run.seed=3")) == 0);
    CHECK(runs_wait(s_start(zero, "grpo.max_staleness=0", "grpo.async_objective=decoupled")) == 0);
    char *a = runs_metrics(sync_dir), *b = runs_metrics(zero);
    CHECK(a && b && strcmp(a, b) == 0); /* eta = 0: the synchronous algorithm, whatever else */
    free(a);
    free(b);
    int lines, max;
    bool bad;
    s_staleness(sync_dir, 0, &lines, &max, &bad);
    CHECK(lines == 0); /* synchronous lines carry no staleness */
    /* SFT used stream indices [0, 16); GRPO trained 24 steps x 6 prompts after them, each once */
    CHECK(runs_trained_once(sync_dir, 16, 144));

    CHECK(runs_wait(s_start(ppo, "grpo.max_staleness=2", "grpo.async_objective=ppo")) == 0);
    CHECK(runs_wait(s_start(dec, "grpo.max_staleness=2", "grpo.async_objective=decoupled")) == 0);
    const char *async_dirs[2] = {ppo, dec};
    for (int i = 0; i < 2; i++) {
        s_staleness(async_dirs[i], 2, &lines, &max, &bad);
        CHECK(lines == 24 && !bad);
        CHECK(max >= 1); /* some batch was sampled by a policy older than the one it updated */
        CHECK(runs_trained_once(async_dirs[i], 16, 144));
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
