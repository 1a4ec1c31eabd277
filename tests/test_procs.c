/*  test_procs.c — `baton run --procs`: every worker a `baton worker` process over ipc://.  The run
    writes the same metrics as the embedded one (threads over inproc), and a rollout worker process
    killed with SIGKILL in the middle of the run costs nothing: its task is re-queued, the run
    finishes with the metrics of the undisturbed run, every prompt trained once, and no worker
    process is left behind; so does an eval worker process killed while it computes a shard.
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
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 30, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 5, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 400}, \"debug\": {\"log_prompts\": true}}";

/*  True when a thread of process pid is running (state R): a worker computing a task. */
static bool s_computing(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    bool running = false;
    for (struct dirent *e = d ? readdir(d) : NULL; e && !running; e = readdir(d)) {
        char stat[320], state = 0;
        snprintf(stat, sizeof stat, "/proc/%d/task/%s/stat", pid, e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(stat, "r") : NULL;
        running = f && fscanf(f, "%*d %*s %c", &state) == 1 && state == 'R';
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return running;
}

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

    /* an eval worker process killed with SIGKILL while it computes a shard (evaluations of 1000
       greedy examples every step keep both eval workers busy): the shard is re-queued to the
       other one, the steps go on, and every evaluation is complete and as in the undisturbed run
       (greedy evaluation does not depend on the split) */
    char eval_ref[128], eval_killed[128];
    snprintf(eval_ref, sizeof eval_ref, "%s/eval-ref", s_tmp);
    snprintf(eval_killed, sizeof eval_killed, "%s/eval-killed", s_tmp);
    const char *eval_args[] = {"run",
                               s_config,
                               "--run-dir",
                               eval_ref,
                               "--procs",
                               "--set",
                               "workers.eval=2",
                               "--set",
                               "task.digits=2",
                               "--set",
                               "task.heldout_size=1000",
                               "--set",
                               "eval.heldout_count=1000",
                               "--set",
                               "eval.every_steps=1",
                               NULL};
    CHECK(runs_wait(runs_spawn(eval_args)) == 0);
    eval_args[3] = eval_killed;
    run = runs_spawn(eval_args);
    while (waitpid(run, NULL, WNOHANG) == 0 && runs_train_steps(eval_killed) < 3)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    victim = runs_worker_pid(run, "eval-1");
    for (int i = 0; victim > 0 && i < 2000 && !s_computing(victim); i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK(victim > 0);
    if (victim > 0)
        kill(victim, SIGKILL);
    CHECK(runs_wait(run) == 0);
    char *e_ref = runs_metrics(eval_ref), *e_killed = runs_metrics(eval_killed);
    CHECK(e_ref && e_killed && strcmp(e_ref, e_killed) == 0);
    CHECK(e_ref && strstr(e_ref, "\"examples\":1000")); /* complete evaluations */
    free(e_ref);
    free(e_killed);
    snprintf(path, sizeof path, "%s/events.jsonl", eval_killed);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    CHECK_STR_CONTAINS(events, "\"event\":\"task_requeued\",");
    CHECK_STR_CONTAINS(events, "\"kind\":\"eval\",");
    free(events);

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
