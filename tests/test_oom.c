/*  test_oom.c — a trainer that runs out of memory lowers its micro-batch by itself and the run
    goes on.  A real fault, no test double: `baton controller` with a rollout and a trainer `baton
    worker` process, the trainer's address space limited (RLIMIT_AS) to what it needs at start plus
    768 MiB, and a GRPO micro-batch of 32768 sequences whose activations need gigabytes.
    libtorch's CPU allocator then fails inside the trainer step; the trainer halves its
    micro-batch and retries the same batch until it fits (workers/worker.c), the controller logs a
    micro_batch_lowered event, and the run ends normally; its metrics are those of a run started
    with the lowered micro-batch.  (A step that fails at micro-batch 1 still stops the run with
    the hint, as before: the same path with nothing left to lower.) */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>

static const char s_json[] =
    "{\"run\": {\"name\": \"oom\", \"seed\": 1, \"threads\": 1},"
    " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
    "  \"num_attention_heads\": 2, \"max_position_embeddings\": 64},"
    " \"sft\": {\"steps\": 1, \"batch_size\": 8},"
    " \"grpo\": {\"steps\": 2, \"group_size\": 64, \"prompts_per_step\": 512,"
    "  \"max_new_tokens\": 4, \"micro_batch\": 32768},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 0, \"heartbeat_ms\": 50}}";

/*  VmPeak of process pid in bytes; 0 when it cannot be read (the process is gone). */
static size_t s_vm_peak(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmPeak: %zu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

/*  The address space a trainer worker of this build takes before its first task, on this
    machine (libtorch, OpenBLAS and ZeroMQ mapped): one that finds no controller, watched until
    it gives up. */
static size_t s_startup_size(const char *tmp) {
    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/nobody.ipc", tmp);
    const char *args[] = {"worker", "--connect", endpoint,         "--role", "trainer",
                          "--name", "probe",     "--join-timeout", "0.3",    NULL};
    pid_t pid = runs_spawn(args);
    size_t peak = 0;
    while (waitpid(pid, NULL, WNOHANG) == 0) {
        size_t now = s_vm_peak(pid);
        peak = now > peak ? now : peak;
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    return peak;
}

static int s_count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text ? strstr(text, what) : NULL; p; p = strstr(p + 1, what))
        n++;
    return n;
}

/*  Runs the controller and a rollout and a trainer worker on config in dir, the trainer's address
    space limited to limit bytes (0: none), extra the controller's --set (or NULL); returns the
    controller's exit code and checks both workers left with 0. */
static int s_run(const char *tmp, const char *config, const char *dir, const char *tag,
                 size_t limit, const char *extra) {
    char endpoint[128], ctl_log[160], logs[2][160];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.ipc", tmp, tag);
    snprintf(ctl_log, sizeof ctl_log, "%s/%s-controller.log", tmp, tag);
    snprintf(logs[0], sizeof logs[0], "%s/%s-rollout.log", tmp, tag);
    snprintf(logs[1], sizeof logs[1], "%s/%s-trainer.log", tmp, tag);
    const char *ctl_args[] = {"controller",           config, "--bind", endpoint, "--run-dir", dir,
                              extra ? "--set" : NULL, extra,  NULL};
    pid_t ctl = runs_spawn_in(NULL, ctl_args, ctl_log);
    const char *roles[2][2] = {{"rollout", "rollout-0"}, {"trainer", "trainer-0"}};
    pid_t workers[2];
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"worker",    "--connect", endpoint,    "--role",
                              roles[i][0], "--name",    roles[i][1], NULL};
        workers[i] = runs_spawn_limited(NULL, args, logs[i], i == 1 ? limit : 0);
    }
    int rc = runs_wait(ctl); /* the controller exits by itself (a signal would read -1) */
    for (int i = 0; i < 2; i++)
        CHECK(runs_wait(workers[i]) == 0); /* the trainer survived its failed steps; both left */
    return rc;
}

/*  The "micro_batch" of the last micro_batch_lowered event in events, or -1. */
static long s_lowered_to(const char *events) {
    long to = -1;
    for (const char *e = events; (e = strstr(e, "\"event\":\"micro_batch_lowered\"")); e++) {
        const char *m = strstr(e, "\"micro_batch\":");
        to = m ? strtol(m + strlen("\"micro_batch\":"), NULL, 10) : to;
    }
    return to;
}

/*  The statistics that are float rounding themselves at the policy the batch was sampled from
    (ratio = 1, advantages of mean 0): the spread of ratios about 1 (~1e-7), a KL of nearly equal
    log-probs (~1e-14), a loss of ~1e-12. */
static bool s_is_noise(const char *key) {
    static const char *const noise[] = {"ratio_std", "ratio_min", "ratio_max", "mismatch_kl",
                                        "loss"};
    for (size_t i = 0; i < sizeof noise / sizeof *noise; i++)
        if (strcmp(key, noise[i]) == 0)
            return true;
    return false;
}

/*  Two runs' metrics (runs_metrics: sorted lines) hold the same lines with the same fields, every
    number equal to float rounding (relative 1e-6; the noise statistics also within 1e-6 of each
    other), but "padding": the share of slots a layout computes, which the micro-batch decides. */
static bool s_same_metrics(char *a, char *b) {
    char *sa = NULL, *sb = NULL;
    bool same = true;
    for (char *la = strtok_r(a, "\n", &sa), *lb = strtok_r(b, "\n", &sb); same && (la || lb);
         la = strtok_r(NULL, "\n", &sa), lb = strtok_r(NULL, "\n", &sb)) {
        cJSON *ja = la ? cJSON_Parse(la) : NULL, *jb = lb ? cJSON_Parse(lb) : NULL;
        same = ja && jb && cJSON_GetArraySize(ja) == cJSON_GetArraySize(jb);
        for (cJSON *x = ja ? ja->child : NULL; same && x; x = x->next) {
            cJSON *y = cJSON_GetObjectItemCaseSensitive(jb, x->string);
            if (!y || strcmp(x->string, "padding") == 0)
                same = y != NULL;
            else if (cJSON_IsNumber(x) && cJSON_IsNumber(y))
                same = fabs(x->valuedouble - y->valuedouble) <=
                       1e-6 * fmax(fabs(x->valuedouble), fabs(y->valuedouble)) +
                           (s_is_noise(x->string) ? 1e-6 : 1e-12);
            else
                same = cJSON_Compare(x, y, true);
            if (!same)
                fprintf(stderr, "metrics differ at %s:\n  %s\n  %s\n", x->string, la, lb);
        }
        cJSON_Delete(ja);
        cJSON_Delete(jb);
    }
    return same;
}

int main(void) {
    char tmp[64] = "/tmp/baton_oom_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char config[128], dir[128], small_dir[128], path[192];
    snprintf(config, sizeof config, "%s/oom.json", tmp);
    snprintf(dir, sizeof dir, "%s/run", tmp);
    snprintf(small_dir, sizeof small_dir, "%s/run-small", tmp);
    CHECK_OK(bt_file_write(config, s_json, strlen(s_json)));

    size_t startup = s_startup_size(tmp), limit = startup + ((size_t)768 << 20);
    CHECK(startup > 0);
    printf("trainer worker at start: %zu MiB of address space; limit %zu MiB\n", startup >> 20,
           limit >> 20);

    /* the limited run: the first GRPO step runs out of memory, is retried with half the
       micro-batch until it fits, and the run goes on to its end with that micro-batch */
    CHECK(s_run(tmp, config, dir, "limited", limit, NULL) == 0);
    char *events = NULL, *trainer = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &events, NULL));
    CHECK(s_count(events, "\"event\":\"micro_batch_lowered\"") >= 1);
    CHECK(s_count(events, "\"event\":\"task_failed\"") == 0);
    CHECK_STR_CONTAINS(events, "\"step\":1,\"from\":32768,");
    CHECK_STR_CONTAINS(events, "\"reason\":\"out of memory\"");
    long lowered = s_lowered_to(events);
    CHECK(lowered >= 1 && lowered < 32768);
    CHECK(runs_train_steps(dir) == 2);
    snprintf(path, sizeof path, "%s/limited-trainer.log", tmp);
    CHECK_OK(bt_file_read(path, 1 << 20, &trainer, NULL));
    CHECK_STR_CONTAINS(trainer, "out of memory with grpo.micro_batch 32768: retrying with 16384");
    printf("micro-batch lowered from 32768 to %ld (%d events)\n", lowered,
           s_count(events, "\"event\":\"micro_batch_lowered\""));

    /* a run started with the last lowered micro-batch, unlimited, trains the same: nothing lost,
       nothing trained twice */
    char set[64];
    snprintf(set, sizeof set, "grpo.micro_batch=%ld", lowered);
    CHECK(s_run(tmp, config, small_dir, "small", 0, set) == 0);
    char *a = runs_metrics(dir), *b = runs_metrics(small_dir);
    CHECK(runs_train_steps(small_dir) == 2);
    CHECK(a && b && s_same_metrics(a, b));
    free(a);
    free(b);
    free(events);
    free(trainer);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
