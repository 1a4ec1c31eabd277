/*  test_jobs.c — jobs that outlive their function, and messages from joined workers, against
    `baton controller` with real workers and scripted peers (real ZeroMQ sockets speaking the
    protocol, for the faults a real worker does not make):
    - a trainer whose every job fails: the run gives up after four attempts and exits 1 with the
      last failure's text, sanitised (never 139: no job outlives the function that queued it);
    - a rollout worker whose RESULT is malformed ({"task": N} without fields): that job's FAIL,
      the sender named and quarantined; the run finishes with the undisturbed run's metrics;
    - a second "trainer" that publishes WEIGHTS it was never asked for: refused, the run saves
      exactly the undisturbed run's policy;
    - an eval worker whose compute thread is stopped (ptrace) while its relay thread PINGs on:
      its job passes the deadline, it is quarantined, the shard goes to the other eval worker
      and the run finishes with the undisturbed run's metrics. */
#define _DEFAULT_SOURCE
#include "baton/config.h"
#include "baton/fileio.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/msg.h"
#include "baton/proto.h"
#include "baton/rollout.h"
#include "check.h"
#include "runs.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <time.h>
#include <zmq.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"jobs\", \"seed\": 3},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 30, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.003},"
    " \"eval\": {\"every_steps\": 5, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 2, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 1000, \"deadline_floor_ms\": 2000, \"deadline_factor\": 5}}";

/* ---- a scripted peer ------------------------------------------------------------------------ */

typedef enum { S_FAIL_ALL, S_MALFORMED_ONCE, S_UNASKED_WEIGHTS, S_OTHER_PROTO } s_mode;

typedef struct {
    char endpoint[160];
    const char *role, *name;
    s_mode mode;
    volatile bool stop;
    int tasks;         /* TASKs it received */
    bool joined;       /* it got WELCOME */
    char refused[256]; /* the reason of an INVALID {leave: true}, which ends it */
    pthread_t thread;
} s_peer;

static void s_peer_send(void *sock, bt_msg_t *m, const char *run) {
    bt_msg_set_run(m, run);
    bt_msg_send(&m, sock, NULL, 0);
}

static void *s_peer_main(void *arg) {
    s_peer *p = arg;
    void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(sock, p->endpoint);
    char run[256] = "";

    bt_msg_t *weights = NULL; /* S_UNASKED_WEIGHTS: a policy of its own, drawn from another seed */
    if (p->mode == S_UNASKED_WEIGHTS) {
        bt_config cfg;
        bt_model *m = NULL;
        bt_weights w;
        bt_weights_init(&w);
        if (bt_config_parse(s_json, "test", NULL, 0, &cfg) == BT_OK &&
            (m = bt_model_new(&cfg.model, bt_cpu(), 999)) != NULL &&
            bt_weights_export(m, 99, &w) == BT_OK && (weights = bt_msg_new(BT_MSG_WEIGHTS)))
            bt_weights_to_msg(&w, weights);
        bt_weights_release(&w);
        bt_model_destroy(&m);
    }
    double last_ping = 0, last_hello = -1;
    while (!p->stop) {
        if (!p->joined && bt_now() - last_hello > 0.5) { /* until WELCOME: the controller starts */
            last_hello = bt_now();
            bt_msg_t *hello = bt_msg_new(BT_MSG_HELLO);
            bt_msg_set_str(hello, "role", p->role);
            bt_msg_set_str(hello, "name", p->name);
            bt_msg_set_str(hello, "host", "localhost");
            bt_msg_set_int(hello, "pid", getpid());
            bt_msg_set_str(hello, "device", "cpu");
            bt_msg_set_int(hello, "threads", 1);
            bt_msg_set_int(hello, "proto",
                           p->mode == S_OTHER_PROTO ? BT_PROTO_VERSION + 98 : BT_PROTO_VERSION);
            if (bt_msg_send(&hello, sock, NULL, 0) != BT_OK)
                fprintf(stderr, "%s: HELLO not sent: %s\n", p->name, bt_last_error());
        }
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&item, 1, 20);
        if (p->joined && bt_now() - last_ping > 0.05) {
            last_ping = bt_now();
            s_peer_send(sock, bt_msg_new(BT_MSG_PING), run);
            if (weights && p->joined) { /* unasked: nobody gave it a job that publishes */
                bt_msg_t *copy = bt_msg_new(BT_MSG_WEIGHTS);
                bt_msg_set_int(copy, "version", 99);
                for (int i = 0; i < bt_msg_tensor_count(weights); i++)
                    bt_msg_add_tensor_shared(copy, weights, i);
                s_peer_send(sock, copy, run);
            }
        }
        bt_msg_t *m = NULL;
        if (!(item.revents & ZMQ_POLLIN) ||
            bt_msg_recv(sock, &m, NULL, NULL, ZMQ_DONTWAIT) != BT_OK || !m)
            continue;
        bt_msg_type type = bt_msg_type_of(m);
        if (type == BT_MSG_WELCOME) {
            snprintf(run, sizeof run, "%s", bt_msg_run(m));
            p->joined = true;
        } else if (type == BT_MSG_STOP) {
            p->stop = true;
        } else if (type == BT_MSG_INVALID) {
            bool leave = false;
            const char *reason = "";
            bt_msg_get_bool(m, "leave", &leave);
            bt_msg_get_str(m, "reason", 200, &reason);
            if (leave) {
                snprintf(p->refused, sizeof p->refused, "%s", reason);
                p->stop = true;
            }
        } else if (type == BT_MSG_TASK) {
            int64_t task = 0;
            bt_msg_get_int(m, "task", 0, BT_WIRE_INT_MAX, &task);
            p->tasks++;
            if (p->mode == S_FAIL_ALL) {
                bt_msg_t *fail = bt_msg_new(BT_MSG_FAIL);
                bt_msg_set_int(fail, "task", task);
                bt_msg_set_int(fail, "status", BT_EIO);
                bt_msg_set_str(fail, "error", "disk on fire\x1b[31m\r\nbaton: all good");
                s_peer_send(sock, fail, run);
            } else if (p->mode == S_MALFORMED_ONCE && p->tasks == 1) {
                bt_msg_t *res = bt_msg_new(BT_MSG_RESULT);
                bt_msg_set_int(res, "task", task);
                s_peer_send(sock, res, run);
            }
        }
        bt_msg_destroy(&m);
    }
    bt_msg_destroy(&weights);
    s_peer_send(sock, bt_msg_new(BT_MSG_BYE), run);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return NULL;
}

static void s_peer_start(s_peer *p, const char *endpoint, const char *role, const char *name,
                         s_mode mode) {
    memset(p, 0, sizeof *p);
    snprintf(p->endpoint, sizeof p->endpoint, "%s", endpoint);
    p->role = role;
    p->name = name;
    p->mode = mode;
    pthread_create(&p->thread, NULL, s_peer_main, p);
}

static void s_peer_join(s_peer *p) {
    p->stop = true;
    pthread_join(p->thread, NULL);
}

/* ---- runs ----------------------------------------------------------------------------------- */

/*  The workers of the config: the ones a run of it needs. */
static const char *const s_all_roles[5][2] = {{"trainer", "trainer-0"},
                                              {"rollout", "rollout-0"},
                                              {"rollout", "rollout-1"},
                                              {"eval", "eval-0"},
                                              {"eval", "eval-1"}};

/*  `baton controller` on its own ipc endpoint, and real workers: n_roles of {role, name}. */
static pid_t s_controller(const char *dir, char *endpoint, size_t cap,
                          const char *const (*roles)[2], int n_roles, pid_t *workers,
                          const char *set) {
    char log[160];
    snprintf(endpoint, cap, "ipc://%s.ipc", dir);
    snprintf(log, sizeof log, "%s.log", dir);
    const char *args[] = {"controller", s_config, "--bind", endpoint,
                          "--run-dir",  dir,      "--set",  set ? set : "run.log_every=1",
                          NULL};
    pid_t ctl = runs_spawn_in(NULL, args, log);
    for (int i = 0; i < n_roles; i++) {
        const char *w[] = {"worker",    "--connect", endpoint,    "--role",
                           roles[i][0], "--name",    roles[i][1], NULL};
        workers[i] = runs_spawn_in(NULL, w, log);
    }
    return ctl;
}

static char *s_file(const char *path) {
    char *text = NULL;
    return bt_file_read(path, 1 << 26, &text, NULL) == BT_OK ? text : NULL;
}

static void test_failing_trainer(void) {
    char dir[128], endpoint[192], log[160];
    snprintf(dir, sizeof dir, "%s/failing", s_tmp);
    snprintf(log, sizeof log, "%s.log", dir);
    const char *const roles[3][2] = {
        {"rollout", "rollout-0"}, {"rollout", "rollout-1"}, {"eval", "eval-0"}};
    pid_t workers[3];
    pid_t ctl = s_controller(dir, endpoint, sizeof endpoint, roles, 3, workers, "workers.eval=1");
    s_peer fake;
    s_peer_start(&fake, endpoint, "trainer", "fake-trainer", S_FAIL_ALL);
    int rc = runs_wait(ctl);
    s_peer_join(&fake);
    for (int i = 0; i < 3; i++)
        runs_wait(workers[i]);
    CHECK(rc == 1); /* its own exit, with the reason: not a signal (-1) */
    CHECK(fake.tasks == 4);
    CHECK(
        runs_file_has(log, "a sft job failed 4 times; the last time: fake-trainer: disk on fire"));
    char *text = s_file(log);
    CHECK(text && !strstr(text, "\x1b[31m") && !strstr(text, "\nbaton: all good"));
    CHECK(text && !strstr(text, ": \n")); /* no error line that ends empty */
    free(text);
}

static void test_malformed_result(const char *ref) {
    char dir[128], endpoint[192], events[160];
    snprintf(dir, sizeof dir, "%s/malformed", s_tmp);
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    const char *const roles[4][2] = {
        {"trainer", "trainer-0"}, {"rollout", "rollout-0"}, {"eval", "eval-0"}, {"eval", "eval-1"}};
    pid_t workers[4];
    pid_t ctl = s_controller(dir, endpoint, sizeof endpoint, roles, 4, workers, NULL);
    s_peer fake;
    s_peer_start(&fake, endpoint, "rollout", "fake-rollout", S_MALFORMED_ONCE);
    CHECK(runs_wait(ctl) == 0);
    s_peer_join(&fake);
    for (int i = 0; i < 4; i++)
        runs_wait(workers[i]);
    CHECK(fake.tasks == 1); /* quarantined after its one reply */
    runs_check_same(ref, dir);
    CHECK(runs_file_has(events, "\"event\":\"result_rejected\""));
    CHECK(runs_file_has(events, "\"worker\":\"fake-rollout\",\"kind\":\"rollout\""));
    CHECK(runs_file_has(events, "\"event\":\"worker_quarantined\",\"time\""));
    CHECK(runs_file_has(events, "\"rejected_results\":1,")); /* the counters, as the run stops */
}

static void test_unasked_weights(const char *ref) {
    char dir[128], endpoint[192], events[160];
    snprintf(dir, sizeof dir, "%s/weights", s_tmp);
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    pid_t workers[5];
    pid_t ctl = s_controller(dir, endpoint, sizeof endpoint, s_all_roles, 5, workers, NULL);
    while (runs_train_steps(dir) < 2 && waitpid(ctl, NULL, WNOHANG) == 0)
        runs_sleep_ms(5);
    s_peer fake; /* joins once trainer-0 holds the state: a standby that publishes anyway */
    s_peer_start(&fake, endpoint, "trainer", "fake-trainer", S_UNASKED_WEIGHTS);
    CHECK(runs_wait(ctl) == 0);
    s_peer_join(&fake);
    for (int i = 0; i < 5; i++)
        runs_wait(workers[i]);
    CHECK(fake.joined && fake.tasks == 0);
    runs_check_same(ref, dir);
    CHECK(runs_file_has(events, "\"event\":\"weights_refused\",\"time\""));
    CHECK(runs_file_has(events, "\"worker\":\"fake-trainer\",\"role\":\"trainer\""));
}

/*  The thread of process pid named name (prctl PR_SET_NAME), or 0. */
static pid_t s_thread_of(pid_t pid, const char *name) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    pid_t found = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e && !found; e = readdir(d)) {
        char comm[320], text[64] = "";
        snprintf(comm, sizeof comm, "/proc/%d/task/%s/comm", pid, e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(comm, "r") : NULL;
        if (f && fgets(text, sizeof text, f) && !strncmp(text, name, strlen(name)))
            found = (pid_t)atoi(e->d_name);
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return found;
}

static void test_wedged_worker(const char *ref) {
    char dir[128], endpoint[192], events[160];
    snprintf(dir, sizeof dir, "%s/wedged", s_tmp);
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    pid_t workers[5];
    pid_t ctl = s_controller(dir, endpoint, sizeof endpoint, s_all_roles, 5, workers, NULL);
    while (runs_train_steps(dir) < 6 && waitpid(ctl, NULL, WNOHANG) == 0)
        runs_sleep_ms(5);
    /* eval-1's compute thread stops (as a deadlock would stop it); its relay thread PINGs on */
    pid_t compute = s_thread_of(workers[4], "bt-compute");
    CHECK(compute > 0);
    bool stopped = compute > 0 && ptrace(PTRACE_SEIZE, compute, NULL, NULL) == 0 &&
                   ptrace(PTRACE_INTERRUPT, compute, NULL, NULL) == 0;
    CHECK(stopped);
    while (stopped && waitpid(ctl, NULL, WNOHANG) == 0) {
        char *text = s_file(events);
        bool quarantined = text && strstr(text, "\"event\":\"worker_quarantined\"");
        free(text);
        if (quarantined)
            break;
        runs_sleep_ms(20);
    }
    if (stopped) /* it may go on now: its late result is refused */
        ptrace(PTRACE_DETACH, compute, NULL, NULL);
    CHECK(runs_wait(ctl) == 0);
    for (int i = 0; i < 5; i++)
        runs_wait(workers[i]);
    runs_check_same(ref, dir);
    CHECK(runs_file_has(events, "\"event\":\"worker_quarantined\",\"time\""));
    CHECK(runs_file_has(events, "\"worker\":\"eval-1\",\"kind\":\"eval\""));
}

/*  A failure no retry mends (a JSONL prompt longer than the context, which the config cannot
    measure): the run stops at the first FAIL with the worker's words, and a HELLO of another
    protocol is told to leave. */
static void test_deterministic_failure(void) {
    char dir[128], data[160], log[160], endpoint[192];
    snprintf(dir, sizeof dir, "%s/long", s_tmp);
    snprintf(data, sizeof data, "%s/long.jsonl", s_tmp);
    snprintf(log, sizeof log, "%s/long.log", s_tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/long.ipc", s_tmp);
    char line[1024], text[1024 * 20] = "";
    for (int i = 0; i < 20; i++) {
        snprintf(line, sizeof line, "{\"prompt\": \"what is %s1?\", \"answer\": \"201\"}\n",
                 "1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+");
        strcat(text, line);
    }
    CHECK_OK(bt_file_write(data, text, strlen(text)));
    char train[200], eval[200];
    snprintf(train, sizeof train, "task.train=%s", data);
    snprintf(eval, sizeof eval, "task.eval=%s", data);
    const char *args[] = {"controller", s_config,
                          "--bind",     endpoint,
                          "--run-dir",  dir,
                          "--set",      "task.kind=jsonl",
                          "--set",      train,
                          "--set",      eval,
                          "--set",      "workers.eval=1",
                          "--set",      "workers.rollout=1",
                          NULL};
    pid_t ctl = runs_spawn_in(NULL, args, log);
    /* first, while the controller waits for its workers: a HELLO of another protocol */
    s_peer alien;
    s_peer_start(&alien, endpoint, "rollout", "alien", S_OTHER_PROTO);
    for (int i = 0; i < 2000 && !alien.stop && waitpid(ctl, NULL, WNOHANG) == 0; i++)
        runs_sleep_ms(10);
    s_peer_join(&alien);
    const char *roles[3][2] = {
        {"trainer", "trainer-0"}, {"rollout", "rollout-0"}, {"eval", "eval-0"}};
    pid_t workers[3];
    for (int i = 0; i < 3; i++) {
        const char *w[] = {"worker",    "--connect", endpoint,    "--role",
                           roles[i][0], "--name",    roles[i][1], NULL};
        workers[i] = runs_spawn_in(NULL, w, log);
    }
    int rc = runs_wait(ctl);
    for (int i = 0; i < 3; i++)
        runs_wait(workers[i]);
    CHECK(rc == 1);
    CHECK(runs_file_has(log, "exceed max_position_embeddings 64") ||
          runs_file_has(log, "exceeds max_position_embeddings 64"));
    char events[192];
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    char *ev = s_file(events);
    int failed = 0;
    for (const char *e = ev ? strstr(ev, "\"event\":\"task_failed\"") : NULL; e;
         e = strstr(e + 1, "\"event\":\"task_failed\""))
        failed++;
    CHECK(failed == 1); /* not retried */
    free(ev);
    CHECK_STR_CONTAINS(alien.refused, "this controller speaks protocol 1, the worker 99");
    CHECK(!alien.joined);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_jobs_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/jobs.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char ref[128];
    snprintf(ref, sizeof ref, "%s/ref", s_tmp);
    const char *args[] = {"run", s_config, "--run-dir", ref, NULL};
    CHECK(runs_wait(runs_spawn(args)) == 0);

    test_failing_trainer();
    test_malformed_result(ref);
    test_unasked_weights(ref);
    test_wedged_worker(ref);
    test_deterministic_failure();

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0 && !getenv("BATON_KEEP"))
        CHECK(system(cmd) == 0);
    return check_exit();
}
