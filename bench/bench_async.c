/*  bench_async.c — asynchronous vs synchronous RL on the demo model (configs/arith.json) with a
    reward service that takes 20 ms per batch (examples/reward_service.py --delay-ms 20).  Both
    modes start from the same SFT warm start (made once here) and run the same GRPO steps as
    `baton run --procs` with one compute thread per worker process, so rollout and trainer
    processes each own a core, as on separate devices.  Evaluation runs at the start and the end
    only: the demo's periodic evaluations would put two more busy processes on the same two cores,
    which measures this machine's core count, not the overlap.  Prints one JSON line per run (RL
    steps per second from the train lines' times, the final held-out accuracy) and a summary line
    with the ratio; target >= 1.3x at no worse accuracy.
    Environment: BATON_SOURCE_DIR (default "."), BATON_BIN (default ./build/baton),
    BATON_PYTHON (default /usr/bin/python3), BATON_BENCH_STEPS (default 100),
    BATON_BENCH_ETA (default 1), BATON_BENCH_REPEAT (default 1). */
#define _POSIX_C_SOURCE 200809L
#include "baton/blas.h"
#include "baton/fileio.h"
#include "baton/status.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *s_env(const char *key, const char *fallback) {
    const char *v = getenv(key);
    return v && *v ? v : fallback;
}

/*  RL steps per second between the first and the last train line, and the last held-out
    accuracy, from DIR/metrics.jsonl. */
static bt_status s_read(const char *dir, double *steps_per_s, double *accuracy) {
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    BT_TRY(bt_file_read(path, 1 << 26, &text, NULL));
    double t_first = NAN, t_last = NAN;
    int n = 0;
    *accuracy = NAN;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(j, "kind"));
        const char *ds = cJSON_GetStringValue(cJSON_GetObjectItem(j, "dataset"));
        double t = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "time"));
        if (kind && !strcmp(kind, "train")) {
            t_first = n++ ? t_first : t;
            t_last = t;
        } else if (kind && !strcmp(kind, "eval") && ds && !strcmp(ds, "heldout")) {
            *accuracy = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "accuracy"));
        }
        cJSON_Delete(j);
    }
    free(text);
    *steps_per_s = n > 1 ? (n - 1) / (t_last - t_first) : NAN;
    return n > 1 ? BT_OK : bt_fail(BT_EIO, "%s: fewer than 2 train lines", dir);
}

/*  configs/arith.json with evaluation at the start and the end only, written to path. */
static bt_status s_config(const char *src, const char *path) {
    char in[512], *text = NULL;
    snprintf(in, sizeof in, "%s/configs/arith.json", src);
    BT_TRY(bt_file_read(in, 1 << 20, &text, NULL));
    cJSON *cfg = cJSON_Parse(text), *eval = cJSON_GetObjectItem(cfg, "eval"), *ds;
    free(text);
    if (!eval)
        return bt_fail(BT_EFORMAT, "%s: no eval section", in);
    cJSON_ReplaceItemInObject(eval, "every_steps", cJSON_CreateNumber(0));
    cJSON_ArrayForEach(ds, cJSON_GetObjectItem(eval, "datasets")) {
        cJSON_DeleteItemFromObject(ds, "every_steps");
        cJSON_DeleteItemFromObject(ds, "every_seconds");
    }
    char *out = cJSON_Print(cfg);
    bt_status st = out ? bt_file_write(path, out, strlen(out)) : BT_ENOMEM;
    free(out);
    cJSON_Delete(cfg);
    return st;
}

static int s_shell(const char *cmd) {
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "bench_async: failed (%d): %s\n", rc, cmd);
    return rc;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    const char *src = s_env("BATON_SOURCE_DIR", "."), *bin = s_env("BATON_BIN", "./build/baton");
    const char *python = s_env("BATON_PYTHON", "/usr/bin/python3");
    int steps = atoi(s_env("BATON_BENCH_STEPS", "100")), eta = atoi(s_env("BATON_BENCH_ETA", "1"));
    int repeat = atoi(s_env("BATON_BENCH_REPEAT", "1"));
    char tmp[] = "/tmp/baton-bench-async-XXXXXX", endpoint[128], script[512], cmd[4096];
    if (!mkdtemp(tmp))
        return 1;
    snprintf(endpoint, sizeof endpoint, "ipc://%s/reward.ipc", tmp);
    snprintf(script, sizeof script, "%s/examples/reward_service.py", src);
    pid_t service = fork();
    if (service == 0) {
        execl(python, python, script, endpoint, "--delay-ms", "20", (char *)NULL);
        _exit(127);
    }
    char config[512];
    snprintf(config, sizeof config, "%s/arith-rl.json", tmp);
    if (s_config(src, config) != BT_OK) {
        fprintf(stderr, "bench_async: %s\n", bt_last_error());
        return 1;
    }
    /* the SFT warm start both modes start from */
    snprintf(cmd, sizeof cmd, "%s run %s --run-dir %s/sft --set grpo.steps=1 > %s/sft.log 2>&1",
             bin, config, tmp, tmp);
    int rc = s_shell(cmd);
    double sps[2] = {0, 0}, acc[2] = {0, 0};
    for (int r = 0; r < repeat && rc == 0; r++)
        for (int mode = 0; mode < 2 && rc == 0; mode++) {
            char dir[256];
            snprintf(dir, sizeof dir, "%s/%s-%d", tmp, mode ? "async" : "sync", r);
            snprintf(cmd, sizeof cmd,
                     "%s run %s --run-dir %s --procs --set run.threads=1 "
                     "--set sft.steps=0 --set model.path=%s/sft/model --set reward.service=%s "
                     "--set grpo.steps=%d --set grpo.max_staleness=%d > %s.log 2>&1",
                     bin, config, dir, tmp, endpoint, steps, mode ? eta : 0, dir);
            rc = s_shell(cmd);
            double s = NAN, a = NAN;
            if (rc == 0 && s_read(dir, &s, &a) != BT_OK) {
                fprintf(stderr, "bench_async: %s\n", bt_last_error());
                rc = 1;
            }
            if (rc != 0)
                break;
            sps[mode] += s / repeat;
            acc[mode] += a / repeat;
            printf("{\"bench\":\"async\",\"mode\":\"%s\",\"max_staleness\":%d,\"steps\":%d,"
                   "\"steps_per_s\":%.4f,\"final_accuracy\":%.4f}\n",
                   mode ? "async" : "sync", mode ? eta : 0, steps, s, a);
            fflush(stdout);
        }
    if (rc == 0)
        printf("{\"bench\":\"async\",\"summary\":true,\"speedup\":%.3f,\"sync_accuracy\":%.4f,"
               "\"async_accuracy\":%.4f,\"target_speedup\":1.3}\n",
               sps[1] / sps[0], acc[0], acc[1]);
    kill(service, SIGTERM);
    waitpid(service, NULL, 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (rc == 0)
        s_shell(cmd);
    return rc == 0 ? 0 : 1;
}
