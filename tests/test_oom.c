/*  test_oom.c — a trainer that runs out of memory stops the run cleanly, at once, with a message
    that says what to change.  A real fault, no test double: `baton controller` with a rollout and
    a trainer `baton worker` process, the trainer's address space limited (RLIMIT_AS) to what it
    needs at start plus 768 MiB, and a GRPO micro-batch of 32768 sequences whose activations need
    gigabytes.  libtorch's CPU allocator then fails inside the trainer step; the trainer reports
    the task failed with status BT_ENOMEM and the hint; the controller logs it, does not retry (the
    same task needs the same memory), sends STOP and exits 1 by itself; both workers leave on STOP
    with exit 0. */
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

int main(void) {
    char tmp[64] = "/tmp/baton_oom_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char config[128], endpoint[128], dir[128], ctl_log[128], logs[2][128];
    snprintf(config, sizeof config, "%s/oom.json", tmp);
    snprintf(endpoint, sizeof endpoint, "ipc://%s/ctl.ipc", tmp);
    snprintf(dir, sizeof dir, "%s/run", tmp);
    snprintf(ctl_log, sizeof ctl_log, "%s/controller.log", tmp);
    snprintf(logs[0], sizeof logs[0], "%s/rollout.log", tmp);
    snprintf(logs[1], sizeof logs[1], "%s/trainer.log", tmp);
    CHECK_OK(bt_file_write(config, s_json, strlen(s_json)));

    size_t startup = s_startup_size(tmp), limit = startup + ((size_t)768 << 20);
    CHECK(startup > 0);
    printf("trainer worker at start: %zu MiB of address space; limit %zu MiB\n", startup >> 20,
           limit >> 20);

    const char *ctl_args[] = {"controller", config, "--bind", endpoint, "--run-dir", dir, NULL};
    pid_t ctl = runs_spawn_in(NULL, ctl_args, ctl_log);
    const char *roles[2][2] = {{"rollout", "rollout-0"}, {"trainer", "trainer-0"}};
    pid_t workers[2];
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"worker",    "--connect", endpoint,    "--role",
                              roles[i][0], "--name",    roles[i][1], NULL};
        workers[i] = runs_spawn_limited(NULL, args, logs[i], i == 1 ? limit : 0);
    }
    /* the controller exits by itself (a signal would read -1), with the run's failure */
    CHECK(runs_wait(ctl) == 1);
    for (int i = 0; i < 2; i++)
        CHECK(runs_wait(workers[i]) == 0); /* the trainer survived its failed step; both left */

    char *out = NULL, *events = NULL, *metrics = NULL, *trainer = NULL, path[192];
    CHECK_OK(bt_file_read(ctl_log, 1 << 20, &out, NULL));
    CHECK_STR_CONTAINS(out, "baton: run failed: trainer-0: out of memory on cpu in the trainer "
                            "step (tried to allocate ");
    CHECK_STR_CONTAINS(out, " bytes); lower grpo.micro_batch (now 32768) or grpo.max_new_tokens "
                            "(now 4)");
    printf("%s", out ? strstr(out, "baton: run failed") : "");
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &events, NULL));
    CHECK(s_count(events, "\"event\":\"task_failed\"") == 1); /* no retry */
    CHECK(s_count(events, "\"event\":\"task_requeued\"") == 0);
    CHECK_STR_CONTAINS(events, "\"event\":\"run_stopped\"");
    CHECK_STR_CONTAINS(events, "\"reason\":\"out of memory\",\"worker\":\"trainer-0\"");
    /* the run went on normally up to the failed step: the SFT step is in, no GRPO step */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &metrics, NULL));
    CHECK_STR_CONTAINS(metrics, "{\"kind\":\"sft\",\"step\":1,");
    CHECK(runs_train_steps(dir) == 0);
    CHECK_OK(bt_file_read(logs[1], 1 << 20, &trainer, NULL));
    CHECK_STR_CONTAINS(trainer, "worker trainer-0: 3 tasks, 1 join"); /* sft, snapshot, train */
    free(out);
    free(events);
    free(metrics);
    free(trainer);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
