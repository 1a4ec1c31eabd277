/*  test_resources.c — the resource figures of train lines (docs/architecture.md, "Resource
    figures") in real `baton run` processes, read back with a reader of its own and held against
    what the test measures itself:
    - every sft and train line has step_s, busy_rollout, busy_train, busy_eval, busy_weights,
      wait_slowest_s, cpu_s_ROLE and peak_rss_mb_ROLE; the fractions lie in [0, 1], busy_train,
      busy_rollout and busy_weights are > 0 on every train line (each step samples, trains and
      publishes), the wait for the slowest worker lies in [0, step_s] and, with two rollout
      workers splitting each step, is > 0 over the run; on the CPU the CUDA fields are absent;
    - the intervals are disjoint: their step_s add up to no more than the run's wall time as the
      test's own clock has it;
    - with --procs (each worker a process, the runs' children): the CPU seconds of every line add
      up to no more than getrusage(RUSAGE_CHILDREN) says the run's processes used, and the
      trainer's add up to at least what /proc/PID/stat said the trainer process had used by a
      moment in the run; its peak_rss_mb on the lines of later steps is at least the VmHWM
      /proc/PID/status showed then, within what the kernel's per-CPU RSS counters let two
      readings differ (1 MiB on 2 CPUs: s_rss_slack_kb).  There is no upper bound from the
      largest child's ru_maxrss: the kernel takes it at exit from the same approximate counters,
      and it lay 0.2 MiB below a reported peak here;
    - embedded (workers are threads of baton): the CPU of every line adds up to no more than the
      process used;
    - the two runs, with the resource fields removed as the reproducibility checks remove timing
      fields (tests/runs.h), write the same metrics.
    Before them, the parts on their own: the registry's busy and live worker-time on a clock the
    test sets, against sums done by hand, and the reports of a worker whose process restarted;
    the usage.* fields of a RESULT over a ZeroMQ socket, and a malformed one refused by name. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/registry.h"
#include "baton/spec.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"res\", \"seed\": 13, \"threads\": 1}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\","
    "  \"heldout_size\": 8},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 24, \"group_size\": 4, \"prompts_per_step\": 8,"
    "  \"max_new_tokens\": 3, \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 4, \"heldout_count\": 8},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

static const char *const s_roles[] = {"rollout", "trainer", "eval"};

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*  CPU seconds (user + system) of the reaped children so far; *maxrss_kb their largest peak. */
static double s_children_cpu(long *maxrss_kb) {
    struct rusage ru;
    CHECK(getrusage(RUSAGE_CHILDREN, &ru) == 0);
    if (maxrss_kb)
        *maxrss_kb = ru.ru_maxrss;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/*  Process pid's CPU seconds so far (/proc/PID/stat utime + stime), and its VmHWM in KiB
    (/proc/PID/status); false when it cannot be read. */
static bool s_proc_usage(pid_t pid, double *cpu_s, long *hwm_kb) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long utime = 0, stime = 0;
    bool ok = f && fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                          &stime) == 2;
    if (f)
        fclose(f);
    *cpu_s = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    *hwm_kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            *hwm_kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return ok && *hwm_kb > 0;
}

/*  How far two readings of one process's VmHWM may disagree: the kernel keeps each RSS counter
    (file, anon, shmem, swap entries) per CPU and reads it without summing the CPUs' shares, each
    under percpu_counter_batch = max(32, 2 x CPUs) pages; KiB. */
static double s_rss_slack_kb(void) {
    double cpus = (double)sysconf(_SC_NPROCESSORS_CONF), page_kb = sysconf(_SC_PAGESIZE) / 1024.0;
    return 4 * cpus * fmax(32, 2 * cpus) * page_kb;
}

/*  Sums over a run's sft and train lines, checked line by line as they are read. */
typedef struct {
    int lines, train_lines;
    double step_s, cpu_s[3], peak_max, wait_s;
    double trainer_peak_after; /* the least peak_rss_mb_trainer of train steps >= after_step */
    int after_step;
} s_sums;

static double s_field(const cJSON *o, const char *key, bool *present) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *present = v != NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/*  Reads DIR/metrics.jsonl with cJSON and checks every sft and train line's resource fields. */
static void s_read(const char *dir, s_sums *s) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    s->trainer_peak_after = INFINITY;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "kind"));
        bool train = kind && !strcmp(kind, "train"), present = true, all = true, ok = true;
        if (!train && !(kind && !strcmp(kind, "sft"))) {
            cJSON_Delete(j);
            continue;
        }
        s->lines++;
        s->train_lines += train;
        double step_s = s_field(j, "step_s", &present);
        all &= present;
        ok &= step_s > 0;
        s->step_s += step_s;
        const char *fractions[] = {"busy_rollout", "busy_train", "busy_eval", "busy_weights"};
        for (int k = 0; k < 4; k++) {
            double x = s_field(j, fractions[k], &present);
            all &= present;
            /* (an eval worker may not have joined by the first sft lines) */
            ok &= isnan(x) ? k == 2 && !train : x >= 0 && x <= 1;
            if (train && k != 2) /* each step samples, trains and publishes its weights */
                ok &= x > 0;
        }
        double wait = s_field(j, "wait_slowest_s", &present);
        all &= present;
        ok &= wait >= 0 && wait <= step_s;
        s->wait_s += wait;
        for (int r = 0; r < 3; r++) {
            char key[48];
            snprintf(key, sizeof key, "cpu_s_%s", s_roles[r]);
            double cpu = s_field(j, key, &present);
            all &= present;
            ok &= cpu >= 0;
            s->cpu_s[r] += cpu;
            if (train && r < 2) /* the rollouts and the update of the step ran */
                ok &= cpu > 0;
            snprintf(key, sizeof key, "peak_rss_mb_%s", s_roles[r]);
            double peak = s_field(j, key, &present);
            all &= present;
            /* a process with libtorch loaded and a model built holds well over 50 MiB; an eval
               worker may not have reported before the first lines */
            ok &= peak > 50 || (isnan(peak) && (r == 2 || !train));
            s->peak_max = fmax(s->peak_max, isnan(peak) ? 0 : peak);
            if (train && r == 1 && s_field(j, "step", &present) >= s->after_step)
                s->trainer_peak_after = fmin(s->trainer_peak_after, peak);
        }
        /* the CPU: no allocator figures */
        s_field(j, "cuda_allocated_mb", &present);
        ok &= !present;
        s_field(j, "cuda_reserved_mb", &present);
        ok &= !present;
        CHECK(all && ok);
        if (!all || !ok)
            fprintf(stderr, "%s: resource fields wrong on %s\n", dir, l);
        cJSON_Delete(j);
    }
    free(text);
}

static int32_t s_join(bt_registry_t *r, bt_role role, const char *peer, int64_t now) {
    return bt_registry_join(r, role, peer, (const uint8_t *)peer, strlen(peer), now);
}

/*  Rollout workers a (joins at 0) and b (joins at 200), a trainer t (joins at 0) on a clock the
    test moves: a holds a task over [100, 350) and one from 600 until it is lost at 2000 (silent
    since 700); b one over [300, 1000). */
static void test_registry_usage(void) {
    bt_registry_t *r = bt_registry_new(1000);
    int32_t a = s_join(r, BT_ROLE_ROLLOUT, "a", 0), t = s_join(r, BT_ROLE_TRAINER, "t", 0);
    int payload[3];
    int64_t task;
    int32_t w;
    bt_registry_add_task(r, BT_ROLE_ROLLOUT, &payload[0]);
    CHECK(bt_registry_next_assignment(r, 100, &task, &w) && w == a);
    int32_t b = s_join(r, BT_ROLE_ROLLOUT, "b", 200);
    bt_registry_add_task(r, BT_ROLE_ROLLOUT, &payload[1]);
    CHECK(bt_registry_next_assignment(r, 300, &task, &w) && w == b);
    int64_t b_task = task;
    bt_registry_touch(r, a, 350);
    CHECK(bt_registry_complete(r, 0, a));
    bt_registry_usage u;
    bt_registry_usage_of(r, BT_ROLE_ROLLOUT, &u);
    CHECK(u.busy_ms == 250 + 50 && u.live_ms == 350 + 150 && u.live == 2);
    bt_registry_add_task(r, BT_ROLE_ROLLOUT, &payload[2]);
    CHECK(bt_registry_next_assignment(r, 600, &task, &w) && w == a);
    bt_registry_touch(r, a, 700);
    bt_registry_touch(r, b, 1000);
    CHECK(bt_registry_complete(r, b_task, b));
    bt_registry_touch(r, b, 2000);
    CHECK(bt_registry_expire(r, 2000) == 2); /* a (silent since 700) and t (since 0) */
    bt_registry_usage_of(r, BT_ROLE_ROLLOUT, &u);
    CHECK(u.busy_ms == 250 + 1400 + 700 && u.live_ms == 2000 + 1800 && u.live == 1);
    bt_registry_usage_of(r, BT_ROLE_TRAINER, &u);
    CHECK(u.busy_ms == 0 && u.live_ms == 2000 && u.live == 0);
    CHECK(isnan(u.peak_rss_mb) && isnan(u.cuda_reserved_mb)); /* nothing reported */

    /* reports: running totals; what grew counts once; a total that fell is a new process */
    bt_usage x;
    bt_usage_init(&x);
    x.cpu_s = 2.0;
    x.weights_s = 0.5;
    x.peak_rss_mb = 300;
    bt_registry_report(r, b, &x);
    x.cpu_s = 3.5;
    x.peak_rss_mb = 320;
    bt_registry_report(r, b, &x);
    x.cpu_s = 1.0;     /* restarted */
    x.weights_s = NAN; /* not reported: kept */
    bt_registry_report(r, b, &x);
    bt_registry_usage_of(r, BT_ROLE_ROLLOUT, &u);
    CHECK(u.cpu_s == 2.0 + 1.5 + 1.0 && u.weights_s == 0.5 && u.peak_rss_mb == 320);
    CHECK(isnan(u.cuda_allocated_mb));
    bt_registry_usage_of(r, BT_ROLE_TRAINER, &u);
    CHECK(u.cpu_s == 0);
    (void)t;
    bt_registry_destroy(&r);
}

/*  usage.* over a ZeroMQ socket: what a worker writes is what the controller reads, absent
    figures NaN, and a malformed one is refused naming the field. */
static void test_usage_wire(void) {
    bt_spec_result r;
    bt_spec_result_init(&r, BT_JOB_SNAPSHOT);
    r.task = 7;
    r.canary_loss = 1.25;
    r.trainer_version = 3;
    r.usage.cpu_s = 12.5;
    r.usage.peak_rss_mb = 800.25;
    bt_msg_t *sent = bt_msg_new(BT_MSG_RESULT), *m = NULL;
    CHECK_OK(bt_spec_result_to_msg(&r, sent));
    void *ctx = zmq_ctx_new(), *out = zmq_socket(ctx, ZMQ_PAIR), *in = zmq_socket(ctx, ZMQ_PAIR);
    CHECK(zmq_bind(in, "inproc://usage") == 0 && zmq_connect(out, "inproc://usage") == 0);
    CHECK_OK(bt_proto_send(&sent, out, NULL, 0));
    CHECK_OK(bt_proto_recv(in, &m, NULL, NULL, 0));
    CHECK(m != NULL);
    bt_spec_result back;
    CHECK_OK(bt_spec_result_from_msg(m, BT_JOB_SNAPSHOT, &back));
    CHECK(back.usage.cpu_s == 12.5 && back.usage.peak_rss_mb == 800.25);
    CHECK(isnan(back.usage.weights_s) && isnan(back.usage.cuda_allocated_mb));
    CHECK(!bt_msg_has(m, "usage.cuda_reserved_mb")); /* NaN: not written */
    bt_spec_result_release(&back);
    CHECK_OK(bt_msg_set_str(m, "usage.weights_s", "soon"));
    CHECK(bt_spec_result_from_msg(m, BT_JOB_SNAPSHOT, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "usage.weights_s");
    CHECK_OK(bt_msg_set_double(m, "usage.weights_s", -1));
    CHECK(bt_spec_result_from_msg(m, BT_JOB_SNAPSHOT, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "usage.weights_s");
    bt_msg_destroy(&m);
    bt_spec_result_release(&r);
    zmq_close(in);
    zmq_close(out);
    zmq_ctx_term(ctx);
}

int main(void) {
    test_registry_usage();
    test_usage_wire();
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_resources_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/res.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char procs[128], embedded[128];
    snprintf(procs, sizeof procs, "%s/procs", s_tmp);
    snprintf(embedded, sizeof embedded, "%s/embedded", s_tmp);

    /* --procs: the trainer process read from /proc once two train lines are out */
    double cpu0 = s_children_cpu(NULL), t0 = s_now();
    const char *args[] = {"run", s_config, "--run-dir", procs, "--procs", NULL};
    pid_t run = runs_spawn(args);
    while (runs_alive(run) && runs_train_steps(procs) < 2)
        runs_sleep_ms(2);
    pid_t trainer = runs_worker_pid(run, "trainer-0");
    double trainer_cpu = NAN;
    long trainer_hwm = -1;
    CHECK(trainer > 0 && s_proc_usage(trainer, &trainer_cpu, &trainer_hwm));
    /* the train job of every step from two after the lines out now was handed out after this
       reading, so its RESULT reports at least what was read */
    int after = runs_train_steps(procs) + 2;
    CHECK(runs_wait(run) == 0);
    double wall = s_now() - t0;
    long maxrss_kb = 0;
    double children = s_children_cpu(&maxrss_kb) - cpu0;
    s_sums s = {.after_step = after};
    s_read(procs, &s);
    CHECK(s.lines == 3 + 24 && s.train_lines == 24);
    CHECK(after <= 24); /* later steps were left to check */
    CHECK(s.wait_s >
          0); /* two rollout workers: the second RESULT of a step comes after the first */
    CHECK(s.step_s <= wall);
    double total = s.cpu_s[0] + s.cpu_s[1] + s.cpu_s[2];
    CHECK(total > 0 && total <= children);
    CHECK(s.cpu_s[1] >= trainer_cpu);
    CHECK(s.trainer_peak_after * 1024.0 >= (double)trainer_hwm - s_rss_slack_kb());
    fprintf(stderr,
            "procs: %d lines over %.2f s of %.2f s wall; CPU rollout %.3f trainer %.3f eval %.3f "
            "s (children %.3f s; trainer %.3f s at step %d); trainer peak >= %.1f MiB (VmHWM "
            "%.1f MiB then), largest %.1f MiB (ru_maxrss %.1f MiB)\n",
            s.lines, s.step_s, wall, s.cpu_s[0], s.cpu_s[1], s.cpu_s[2], children, trainer_cpu,
            after - 2, s.trainer_peak_after, trainer_hwm / 1024.0, s.peak_max, maxrss_kb / 1024.0);

    /* embedded: one process, the workers its threads */
    cpu0 = s_children_cpu(NULL);
    t0 = s_now();
    args[3] = embedded;
    args[4] = NULL;
    CHECK(runs_wait(runs_spawn(args)) == 0);
    wall = s_now() - t0;
    children = s_children_cpu(NULL) - cpu0;
    s_sums e = {.after_step = 1 << 30};
    s_read(embedded, &e);
    CHECK(e.lines == 3 + 24 && e.train_lines == 24);
    CHECK(e.step_s <= wall);
    total = e.cpu_s[0] + e.cpu_s[1] + e.cpu_s[2];
    CHECK(total > 0 && total <= children);
    fprintf(stderr, "embedded: CPU rollout %.3f trainer %.3f eval %.3f s (process %.3f s)\n",
            e.cpu_s[0], e.cpu_s[1], e.cpu_s[2], children);

    /* the resource fields are timing fields: the same seed compares equal without them */
    char *a = runs_metrics(procs), *b = runs_metrics(embedded);
    CHECK(a && b && strcmp(a, b) == 0);
    CHECK(a && !strstr(a, "busy_") && !strstr(a, "cpu_s_") && !strstr(a, "step_s"));
    free(a);
    free(b);

    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
