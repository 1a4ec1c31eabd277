/*  test_launch.c — the launch examples run as written:
    - examples/slurm/baton.sbatch, run as Slurm runs a batch script (on the first node, with
      SLURM_JOB_ID, SLURM_JOB_NODELIST and SLURM_SUBMIT_DIR set), trains a whole run over tcp://
      with the CURVE keys it makes for the job: every worker it starts joins under its own name,
      none is refused, the keys are gone when the job ends.  Slurm itself cannot run here, so
      `srun` and `scontrol` are stand-ins on PATH that do what the script asks of them: srun
      --ntasks=N starts N copies of the command with SLURM_PROCID 0..N-1 and waits for them;
      scontrol show hostnames prints the node list a name a line;
    - examples/k8s/: the manifests hang together (tests/ref/k8s_check.py reads them with
      python3-yaml: the Service selects the controller's pod and reaches its --bind port, each
      worker StatefulSet connects to the Service with the key of its role, every key file a
      command names is in the Secret), and the commands the containers run, with their mounts
      moved under a temporary root, train a run the same way.
    Without python3-yaml the k8s part is skipped and the test exits 77 (ctest: SKIP) once the
    Slurm part has passed. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <sys/stat.h>

static char s_tmp[64];

static const char s_json[] =
    "{\"run\": {\"name\": \"launch\", \"seed\": 5},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 2, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 4, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.003},"
    " \"eval\": {\"every_steps\": 2, \"heldout_count\": 6},"
    " \"workers\": {\"heartbeat_ms\": 50, \"expiry_ms\": 2000}}";

static const char s_srun[] =
    "#!/bin/bash\n"
    "# srun stand-in: --ntasks=N copies of the command, SLURM_PROCID 0..N-1; other options ignored\n"
    "n=1\n"
    "while [ $# -gt 0 ]; do case \"$1\" in --ntasks=*) n=${1#--ntasks=}; shift;;\n"
    "  -n) n=$2; shift 2;; --*) shift;; *) break;; esac; done\n"
    "pids=()\n"
    "for ((i = 0; i < n; i++)); do SLURM_PROCID=$i \"$@\" & pids+=($!); done\n"
    "rc=0; for p in \"${pids[@]}\"; do wait $p || rc=$?; done; exit $rc\n";

static const char s_scontrol[] =
    "#!/bin/bash\n"
    "# scontrol stand-in: `scontrol show hostnames LIST` for a comma-separated LIST\n"
    "[ \"$1 $2\" = \"show hostnames\" ] || exit 1\n"
    "tr , '\\n' <<<\"$3\"\n";

static void s_write_exec(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_OK(bt_file_write(path, text, strlen(text)));
    CHECK(chmod(path, 0755) == 0);
}

/*  The run in dir trained every step and every worker joined, none refused. */
static void s_check_run(const char *dir, const char *const *names, int n_names) {
    int steps = runs_train_steps(dir);
    if (steps != 4)
        fprintf(stderr, "%s: %d train lines, want 4\n", dir, steps);
    CHECK(steps == 4); /* grpo.steps */
    char path[256], *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    if (!events)
        return;
    for (int i = 0; i < n_names; i++) { /* a worker_joined line naming it */
        char want[128];
        snprintf(want, sizeof want, "\"worker\":\"%s\"}", names[i]);
        bool joined = false;
        for (const char *l = events; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
            const char *end = strchr(l, '\n'), *hit = strstr(l, want);
            const char *kind = strstr(l, "\"event\":\"worker_joined\"");
            joined |= hit && kind && (!end || (hit < end && kind < end));
        }
        if (!joined)
            fprintf(stderr, "%s: no worker_joined event for %s\n", dir, names[i]);
        CHECK(joined);
    }
    CHECK(strstr(events, "worker_refused") == NULL);
    free(events);
}

static void test_slurm(const char *bin, const char *src, const char *config) {
    char stubs[128], submit[128], run_dir[160], cmd[2048], out[8192];
    snprintf(stubs, sizeof stubs, "%s/bin", s_tmp);
    snprintf(submit, sizeof submit, "%s/submit", s_tmp);
    snprintf(run_dir, sizeof run_dir, "%s/runs/slurm", s_tmp);
    CHECK(mkdir(stubs, 0755) == 0 && mkdir(submit, 0755) == 0);
    s_write_exec(stubs, "srun", s_srun);
    s_write_exec(stubs, "scontrol", s_scontrol);
    int port = runs_free_port(NULL);
    snprintf(cmd, sizeof cmd,
             "cd %s && PATH=%s:$PATH BATON=%s SLURM_JOB_ID=4242 SLURM_JOB_NAME=baton "
             "SLURM_JOB_NODELIST=127.0.0.1,127.0.0.1 SLURM_SUBMIT_DIR=%s PORT=%d ROLLOUT=2 "
             "TRAINER=1 EVAL=1 JOIN_TIMEOUT=120 RUN_DIR=%s bash %s/examples/slurm/baton.sbatch %s "
             "2>&1",
             submit, stubs, bin, submit, port, run_dir, src, config);
    int rc = runs_capture(cmd, out, sizeof out);
    if (rc != 0)
        fprintf(stderr, "baton.sbatch said:\n%s\n", out);
    CHECK(rc == 0);
    const char *names[] = {"trainer-0", "rollout-0", "rollout-1", "eval-0"};
    s_check_run(run_dir, names, 4);
    /* the job's keys are removed with it */
    char keys[192];
    snprintf(keys, sizeof keys, "%s/.baton-keys-4242", submit);
    struct stat st;
    CHECK(stat(keys, &st) != 0);
    /* the script's --set reached the run: its resolved config holds the join timeout */
    char path[256], *resolved = NULL;
    snprintf(path, sizeof path, "%s/config.json", run_dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &resolved, NULL));
    CHECK(resolved && strstr(resolved, "\"join_timeout_s\":\t120"));
    free(resolved);
}

/*  False when it could not run (no python3-yaml). */
static bool test_k8s(const char *bin, const char *src, const char *config) {
    char cmd[2048], out[16384], root[128];
    if (system("python3 -c 'import yaml' 2>/dev/null") != 0) {
        printf("SKIP k8s: python3-yaml is not installed\n");
        return false;
    }
    snprintf(root, sizeof root, "%s/k8s", s_tmp);
    int port = runs_free_port(NULL);
    snprintf(cmd, sizeof cmd,
             "python3 %s/tests/ref/k8s_check.py %s/examples/k8s %s %s %s %d 2>&1", src, src, bin,
             config, root, port);
    int rc = runs_capture(cmd, out, sizeof out);
    if (rc != 0)
        fprintf(stderr, "k8s_check.py said:\n%s\n", out);
    CHECK(rc == 0);
    char run_dir[192] = "";
    const char *said = strstr(out, "run_dir=");
    CHECK(said != NULL);
    if (said)
        sscanf(said + 8, "%191s", run_dir);
    const char *names[] = {"baton-trainer-0", "baton-rollout-0", "baton-rollout-1",
                           "baton-eval-0"};
    s_check_run(run_dir, names, 4);
    return true;
}

int main(void) {
    const char *bin = getenv("BATON_BIN"), *src = getenv("BATON_SOURCE_DIR");
    if (!bin || !src) {
        fprintf(stderr, "test_launch: run it through ctest (BATON_BIN, BATON_SOURCE_DIR)\n");
        return 1;
    }
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_launch_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char config[128];
    snprintf(config, sizeof config, "%s/launch.json", s_tmp);
    CHECK_OK(bt_file_write(config, s_json, strlen(s_json)));
    test_slurm(bin, src, config);
    bool k8s = test_k8s(bin, src, config);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0 && !getenv("BATON_KEEP"))
        CHECK(system(cmd) == 0);
    return check_exit() == 0 && !k8s ? 77 : check_exit();
}
