/*  test_lifetimes.c — runs that never mix, with real processes and signals:
    - `baton run --procs` killed with SIGKILL: its worker processes die with it (none is left to
      join the next run in that folder);
    - a worker of a killed `baton controller` that finds a new controller at the same endpoint is
      refused (it belongs to another run) and exits saying so, while the new run trains with its
      own workers;
    - a worker whose controller is gone and never comes back leaves by itself after
      workers.controller_timeout_ms;
    - a second worker under a name already in the run is refused, and says why;
    - a run whose workers do not all join fails after workers.join_timeout_s, naming the key. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <errno.h>
#include <signal.h>
#include <time.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"life\", \"seed\": 11},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 2, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 400, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.003},"
    " \"eval\": {\"every_steps\": 50, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 1000, \"controller_timeout_ms\": 1500}}";

/*  True when pid is gone or a zombie (dead, not yet reaped by its new parent). */
static bool s_dead(pid_t pid) {
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    bool zombie = fscanf(f, "%*d %*s %c", &state) == 1 && (state == 'Z' || state == 'X');
    fclose(f);
    return zombie;
}

/*  Waits (at most 20 s) until pid is dead; true when it is. */
static bool s_dies(pid_t pid) {
    for (int i = 0; i < 2000 && !s_dead(pid); i++)
        runs_sleep_ms(10);
    return s_dead(pid);
}

static void test_orphans(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/killed", s_tmp);
    const char *args[] = {"run", s_config, "--run-dir", dir, "--procs", NULL};
    pid_t run = runs_spawn(args);
    while (runs_train_steps(dir) < 3 && waitpid(run, NULL, WNOHANG) == 0)
        runs_sleep_ms(5);
    const char *names[] = {"trainer-0", "rollout-0", "eval-0"};
    pid_t workers[3];
    for (int i = 0; i < 3; i++) {
        workers[i] = runs_worker_pid(run, names[i]);
        CHECK(workers[i] > 0);
    }
    kill(run, SIGKILL);
    runs_wait(run);
    for (int i = 0; i < 3; i++)
        CHECK(workers[i] > 0 && s_dies(workers[i]));
}

/*  set: a --set override (NULL: none). */
static pid_t s_controller(const char *dir, const char *endpoint, const char *log, const char *set) {
    const char *args[] = {"controller",         s_config, "--bind", endpoint, "--run-dir", dir,
                          set ? "--set" : NULL, set,      NULL};
    return runs_spawn_in(NULL, args, log);
}

static pid_t s_worker(const char *endpoint, const char *role, const char *name, const char *log) {
    const char *args[] = {"worker", "--connect", endpoint,         "--role", role,
                          "--name", name,        "--join-timeout", "3",      NULL};
    return runs_spawn_in(NULL, args, log);
}

static void test_stale_worker(void) {
    char a[128], b[128], endpoint[192], log_a[160], log_b[160], log_w[160];
    snprintf(a, sizeof a, "%s/first", s_tmp);
    snprintf(b, sizeof b, "%s/second", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/shared.ipc", s_tmp);
    snprintf(log_a, sizeof log_a, "%s.log", a);
    snprintf(log_b, sizeof log_b, "%s.log", b);
    snprintf(log_w, sizeof log_w, "%s/stale.log", s_tmp);
    /* long enough that the stale worker is still there when the second run starts */
    const char *patient = "workers.controller_timeout_ms=30000";
    pid_t ctl = s_controller(a, endpoint, log_a, patient);
    pid_t t = s_worker(endpoint, "trainer", "trainer-0", log_a);
    pid_t r = s_worker(endpoint, "rollout", "rollout-0", log_a);
    pid_t stale = s_worker(endpoint, "eval", "eval-0", log_w);
    while (runs_train_steps(a) < 3 && waitpid(ctl, NULL, WNOHANG) == 0)
        runs_sleep_ms(5);
    kill(ctl, SIGKILL);
    runs_wait(ctl);
    /* a new run on the same endpoint, with workers of its own */
    ctl = s_controller(b, endpoint, log_b, patient);
    pid_t fresh[3] = {s_worker(endpoint, "trainer", "trainer-0", log_b),
                      s_worker(endpoint, "rollout", "rollout-0", log_b),
                      s_worker(endpoint, "eval", "eval-0", log_b)};
    CHECK(runs_wait(stale) != 0); /* refused: it exits by itself, non-zero */
    CHECK(runs_file_has(log_w, "refused this worker: this worker belongs to run life-"));
    /* the first run's other workers are refused the same way */
    CHECK(runs_wait(t) != 0 && runs_wait(r) != 0);
    kill(ctl, SIGKILL); /* the second run has shown what it had to */
    runs_wait(ctl);
    for (int i = 0; i < 3; i++) {
        kill(fresh[i], SIGKILL);
        runs_wait(fresh[i]);
    }
}

static void test_silent_controller(void) {
    char dir[128], endpoint[192], log[160], log_w[160];
    snprintf(dir, sizeof dir, "%s/silent", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/silent.ipc", s_tmp);
    snprintf(log, sizeof log, "%s.log", dir);
    snprintf(log_w, sizeof log_w, "%s/silent-worker.log", s_tmp);
    pid_t ctl = s_controller(dir, endpoint, log, NULL);
    pid_t t = s_worker(endpoint, "trainer", "trainer-0", log);
    pid_t r = s_worker(endpoint, "rollout", "rollout-0", log);
    pid_t e = s_worker(endpoint, "eval", "eval-0", log_w);
    while (runs_train_steps(dir) < 3 && waitpid(ctl, NULL, WNOHANG) == 0)
        runs_sleep_ms(5);
    kill(ctl, SIGKILL);
    runs_wait(ctl);
    CHECK(runs_wait(e) != 0);
    CHECK(runs_file_has(log_w, "no word from the controller"));
    runs_wait(t);
    runs_wait(r);
}

static void test_duplicate_name(void) {
    char dir[128], endpoint[192], log[160], log_w[160];
    snprintf(dir, sizeof dir, "%s/dup", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/dup.ipc", s_tmp);
    snprintf(log, sizeof log, "%s.log", dir);
    snprintf(log_w, sizeof log_w, "%s/dup-worker.log", s_tmp);
    pid_t ctl = s_controller(dir, endpoint, log, NULL);
    pid_t w[3] = {s_worker(endpoint, "trainer", "trainer-0", log),
                  s_worker(endpoint, "rollout", "rollout-0", log),
                  s_worker(endpoint, "eval", "eval-0", log)};
    while (runs_train_steps(dir) < 3 && waitpid(ctl, NULL, WNOHANG) == 0)
        runs_sleep_ms(5);
    pid_t twin = s_worker(endpoint, "rollout", "rollout-0", log_w);
    CHECK(runs_wait(twin) != 0);
    CHECK(runs_file_has(log_w, "a worker named \"rollout-0\" is already in the run"));
    kill(ctl, SIGKILL);
    runs_wait(ctl);
    for (int i = 0; i < 3; i++)
        runs_wait(w[i]);
}

/*  Two of the three roles join; the run waits workers.join_timeout_s (2 s here, not the default
    60 s) for the evaluator, then fails saying which key bounds the wait. */
static void test_join_timeout(void) {
    char dir[128], endpoint[192], log[160];
    snprintf(dir, sizeof dir, "%s/join", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/join.ipc", s_tmp);
    snprintf(log, sizeof log, "%s.log", dir);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t ctl = s_controller(dir, endpoint, log, "workers.join_timeout_s=2");
    pid_t w[2] = {s_worker(endpoint, "trainer", "trainer-0", log),
                  s_worker(endpoint, "rollout", "rollout-0", log)};
    CHECK(runs_wait(ctl) != 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(runs_file_has(log, "workers did not join within 2 s (workers.join_timeout_s)"));
    CHECK(t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) * 1e-9 >= 2.0); /* it did wait */
    CHECK(runs_train_steps(dir) == 0);
    for (int i = 0; i < 2; i++) {
        kill(w[i], SIGKILL);
        runs_wait(w[i]);
    }
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_life_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/life.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    test_orphans();
    test_stale_worker();
    test_silent_controller();
    test_duplicate_name();
    test_join_timeout();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0 && !getenv("BATON_KEEP"))
        CHECK(system(cmd) == 0);
    return check_exit();
}
