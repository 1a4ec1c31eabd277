/*  test_procs.c — `baton run --procs`: every worker a `baton worker` process over ipc://.  The run
    writes the same metrics as the embedded one (threads over inproc), and a rollout worker process
    killed with SIGKILL in the middle of the run costs nothing: its task is re-queued, the run
    finishes with the metrics of the undisturbed run, and no worker process is left behind.
    `baton controller --bind` with workers started separately writes them too. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"p\", \"seed\": 5},"
    " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
    "  \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"max_position_embeddings\": 64},"
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 30, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 5, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 400}, \"debug\": {\"log_prompts\": true}}";

/*  `baton run CONFIG --run-dir DIR [--procs]`. */
static pid_t s_start(const char *dir, bool procs) {
    const char *args[] = {"run", s_config, "--run-dir", dir, procs ? "--procs" : NULL, NULL};
    return runs_spawn(args);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_procs_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/p.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char threads[128], procs[128], killed[128];
    snprintf(threads, sizeof threads, "%s/threads", s_tmp);
    snprintf(procs, sizeof procs, "%s/procs", s_tmp);
    snprintf(killed, sizeof killed, "%s/killed", s_tmp);

    CHECK(runs_wait(s_start(threads, false)) == 0);
    CHECK(runs_wait(s_start(procs, true)) == 0);
    char *a = runs_metrics(threads), *b = runs_metrics(procs);
    CHECK(a && b && strcmp(a, b) == 0); /* processes or threads: the same run */

    pid_t run = s_start(killed, true);
    while (waitpid(run, NULL, WNOHANG) == 0 && runs_train_steps(killed) < 3)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    pid_t victim = runs_worker_pid(run, "rollout-1");
    CHECK(victim > 0);
    if (victim > 0)
        kill(victim, SIGKILL);
    CHECK(runs_wait(run) == 0);
    char *c = runs_metrics(killed);
    CHECK(a && c && strcmp(a, c) == 0);
    char path[256], *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", killed);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    CHECK_STR_CONTAINS(events, "workers_expired");
    /* SFT used stream indices [0, 24); GRPO trained 30 steps x 6 prompts after them, each once */
    CHECK(runs_trained_once(killed, 24, 180));
    free(events);
    CHECK(runs_worker_pid(run, "rollout-0") == 0 && runs_worker_pid(run, "trainer-0") == 0);
    /* a controller with no workers of its own; four `baton worker` processes join it */
    char ctl_dir[128], endpoint[192];
    snprintf(ctl_dir, sizeof ctl_dir, "%s/controller", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/ctl.ipc", s_tmp);
    const char *ctl_args[] = {"controller", s_config, "--bind", endpoint,
                              "--run-dir",  ctl_dir,  NULL};
    pid_t ctl = runs_spawn(ctl_args);
    const char *roles[4][2] = {{"trainer", "trainer-0"},
                               {"rollout", "rollout-0"},
                               {"rollout", "rollout-1"},
                               {"eval", "eval-0"}};
    pid_t workers[4];
    for (int i = 0; i < 4; i++) {
        const char *args[] = {"worker",    "--connect", endpoint,    "--role",
                              roles[i][0], "--name",    roles[i][1], NULL};
        workers[i] = runs_spawn(args);
    }
    CHECK(runs_wait(ctl) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(runs_wait(workers[i]) == 0); /* each left on STOP */
    char *d = runs_metrics(ctl_dir);
    CHECK(a && d && strcmp(a, d) == 0);
    free(a);
    free(b);
    free(c);
    free(d);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
