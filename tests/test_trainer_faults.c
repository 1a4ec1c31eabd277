/*  test_trainer_faults.c — the trainer's failure modes in whole runs of real processes, each
    against the same run undisturbed (metrics sorted, timing fields removed; the saved policy
    byte for byte):
    - the trainer process stopped (SIGSTOP) for 2.5 s four times with workers.expiry_ms 1000: it
      is expired while it holds a train job, rejoins, and is handed the job again; it answers from
      the update it already applied instead of applying it twice;
    - the controller process stopped for 8 s: on waking it does not expire the workers whose
      PINGs wait unread;
    - under `baton controller`, the trainer killed (SIGKILL) and a new `baton worker --role
      trainer` started: the newcomer is restored from the controller's snapshot and the lost
      steps are run again, so the run and its saved policy are the undisturbed run's;
    - with workers.standby_trainers 1 under --procs, the active trainer killed: the standby takes
      over the same way;
    - without a standby, the only trainer killed under --procs: the run stops by itself (exit 1)
      naming the role and how to resume. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <signal.h>
#include <time.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"tf\", \"seed\": 7},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 48, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.003, \"kl_coef\": 0.02},"
    " \"eval\": {\"every_steps\": 8, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 1000}}";

/*  Waits while run lives until dir has at least steps train lines; false when it ended first. */
static bool s_reach(pid_t run, const char *dir, int steps) {
    while (runs_train_steps(dir) < steps) {
        if (waitpid(run, NULL, WNOHANG) != 0)
            return false;
        runs_sleep_ms(5);
    }
    return true;
}

static pid_t s_start(const char *dir, const char *set, bool procs) {
    const char *args[] = {"run", s_config, "--run-dir", dir, "--set", set, procs ? "--procs" : NULL,
                          NULL};
    char log[160];
    snprintf(log, sizeof log, "%s.log", dir);
    return runs_spawn_in(NULL, args, log);
}

static char *s_file(const char *dir, const char *name) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t n = 0;
    return bt_file_read(path, 1 << 26, &text, &n) == BT_OK ? text : NULL;
}

static bool s_has(const char *dir, const char *file, const char *what) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return runs_file_has(path, what);
}

/*  The name in the first `trainer_active` event of dir's events.jsonl (into out). */
static void s_active_trainer(const char *dir, char *out, size_t cap) {
    char *text = s_file(dir, "events.jsonl");
    const char *key = "\"event\":\"trainer_active\"";
    const char *e = text ? strstr(text, key) : NULL;
    const char *w = e ? strstr(e, "\"worker\":\"") : NULL;
    snprintf(out, cap, "%.*s", w ? (int)strcspn(w + 10, "\"") : 0, w ? w + 10 : "");
    free(text);
}

static void test_paused_trainer(const char *ref) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/paused", s_tmp);
    pid_t run = s_start(dir, "run.log_every=1", true);
    int pauses = 0;
    for (int at = 6; at <= 36; at += 10) {
        if (!s_reach(run, dir, at))
            break;
        pid_t trainer = runs_worker_pid(run, "trainer-0");
        CHECK(trainer > 0);
        kill(trainer, SIGSTOP);
        runs_sleep_ms(2500); /* 2.5 x workers.expiry_ms: expired while it holds the train job */
        kill(trainer, SIGCONT);
        pauses += waitpid(run, NULL, WNOHANG) == 0;
    }
    CHECK(pauses == 4);
    CHECK(runs_wait(run) == 0);
    runs_check_same(ref, dir);
    /* it was expired and handed its job again, and never restored: it answered from memory */
    CHECK(s_has(dir, "events.jsonl", "\"event\":\"workers_expired\""));
    CHECK(s_has(dir, "events.jsonl", "\"event\":\"task_requeued\",\"time\""));
}

static void test_paused_controller(const char *ref) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/stalled", s_tmp);
    pid_t run = s_start(dir, "run.log_every=1", true);
    CHECK(s_reach(run, dir, 10));
    kill(run, SIGSTOP); /* Ctrl-Z, or a stalled VM: the workers PING on into the socket */
    runs_sleep_ms(8000);
    kill(run, SIGCONT);
    CHECK(runs_wait(run) == 0);
    runs_check_same(ref, dir);
    CHECK(s_has(dir, "events.jsonl", "\"event\":\"controller_stalled\""));
    char *events = s_file(dir, "events.jsonl");
    CHECK(events && !strstr(events, "workers_expired"));
    free(events);
}

static void test_restarted_trainer(const char *ref) {
    char dir[128], endpoint[160], log[160];
    snprintf(dir, sizeof dir, "%s/restarted", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/restarted.ipc", s_tmp);
    snprintf(log, sizeof log, "%s.log", dir);
    const char *ctl_args[] = {"controller", s_config, "--bind", endpoint, "--run-dir", dir, NULL};
    pid_t ctl = runs_spawn_in(NULL, ctl_args, log);
    const char *names[4][2] = {{"trainer", "trainer-0"},
                               {"rollout", "rollout-0"},
                               {"rollout", "rollout-1"},
                               {"eval", "eval-0"}};
    pid_t workers[5];
    for (int i = 0; i < 4; i++) {
        const char *args[] = {"worker",    "--connect", endpoint,    "--role",
                              names[i][0], "--name",    names[i][1], NULL};
        workers[i] = runs_spawn_in(NULL, args, log);
    }
    CHECK(s_reach(ctl, dir, 29));
    kill(workers[0], SIGKILL);
    runs_wait(workers[0]);
    /* a new trainer process under the same name: it knows nothing of the run */
    const char *args[] = {"worker",  "--connect", endpoint,    "--role",
                          "trainer", "--name",    "trainer-0", NULL};
    workers[4] = runs_spawn_in(NULL, args, log);
    CHECK(runs_wait(ctl) == 0);
    for (int i = 1; i < 5; i++)
        CHECK(runs_wait(workers[i]) == 0);
    runs_check_same(ref, dir);
    CHECK(s_has(dir, "events.jsonl", "\"event\":\"trainer_restored\",\"time\""));
    CHECK(s_has(dir, "events.jsonl", "\"from\":\"snapshot\""));
}

static void test_standby(const char *ref) {
    char dir[128], active[64];
    snprintf(dir, sizeof dir, "%s/standby", s_tmp);
    pid_t run = s_start(dir, "workers.standby_trainers=1", true);
    CHECK(s_reach(run, dir, 17));
    s_active_trainer(dir, active, sizeof active);
    pid_t victim = runs_worker_pid(run, active);
    CHECK(victim > 0);
    if (victim > 0)
        kill(victim, SIGKILL);
    CHECK(runs_wait(run) == 0);
    runs_check_same(ref, dir);
    CHECK(s_has(dir, "events.jsonl", "\"event\":\"trainer_replaced\""));
    CHECK(s_has(dir, "events.jsonl", "\"event\":\"trainer_restored\""));
}

static void test_only_trainer_lost(void) {
    char dir[128], log[160];
    snprintf(dir, sizeof dir, "%s/alone", s_tmp);
    snprintf(log, sizeof log, "%s.log", dir);
    pid_t run = s_start(dir, "run.log_every=1", true);
    CHECK(s_reach(run, dir, 5));
    pid_t victim = runs_worker_pid(run, "trainer-0");
    CHECK(victim > 0);
    if (victim > 0)
        kill(victim, SIGKILL);
    CHECK(runs_wait(run) == 1);
    CHECK(s_has(s_tmp, "alone.log", "no trainer worker is left (trainer-0"));
    CHECK(s_has(s_tmp, "alone.log", "killed by signal 9"));
    CHECK(s_has(s_tmp, "alone.log", "--resume"));
    CHECK(s_has(s_tmp, "alone.log", "workers.standby_trainers"));
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_tfaults_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/tf.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char ref[128];
    snprintf(ref, sizeof ref, "%s/ref", s_tmp);
    CHECK(runs_wait(s_start(ref, "run.log_every=1", false)) == 0);

    test_paused_trainer(ref);
    test_paused_controller(ref);
    test_restarted_trainer(ref);
    test_standby(ref);
    test_only_trainer_lost();

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0 && !getenv("BATON_KEEP"))
        CHECK(system(cmd) == 0);
    return check_exit();
}
