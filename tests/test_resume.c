/*  test_resume.c — faults of a real `baton run` process: killed with SIGKILL at random steps and
    once in the middle of a checkpoint save, then resumed with --resume, it writes exactly the
    metrics of an uninterrupted run (timing fields aside); a flipped byte or a deleted file in the
    newest checkpoint makes the resume fall back to the previous one, with an event naming the
    reason; a NaN injected into an update rolls back at most 10 steps and the run finishes.  The
    runs have the tuner's plateau rule on: its learning-rate decisions reach AdamW at the next step
    and its state survives the kills; a KL penalty whose reference (the policy after SFT) a
    checkpoint must carry; and a dataset evaluated every 150 sampled tokens, whose trigger state
    a checkpoint carries too.  A resume refuses what it cannot continue (a state.json no run writes,
   a metrics.jsonl that lost its tail, another run's checkpoint, a changed config), is a no-op on a
    finished run, and a run stopped by SIGINT resumes to the same metrics. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/safetensors.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"r\", \"seed\": 3}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\","
    "  \"heldout_size\": 10, \"format_reward\": 0.5},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 16, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 16, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001, \"kl_coef\": 0.02},"
    " \"eval\": {\"every_steps\": 4, \"heldout_count\": 10, \"datasets\": [{\"name\": \"greedy\"},"
    "  {\"name\": \"sampled\", \"samples\": 4, \"temperature\": 1.0,"
    "  \"every_steps\": 0, \"every_tokens\": 150}]},"
    " \"checkpoint\": {\"full_every_steps\": 3, \"keep_last\": 3},"
    " \"tuner\": {\"lr_plateau\": {\"enabled\": true, \"dataset\": \"greedy\", \"patience\": 1,"
    "  \"factor\": 0.5, \"min_lr\": 1e-6}},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

/*  `baton run CONFIG --run-dir DIR [extra...]` (extra NULL-terminated or NULL). */
static pid_t s_start(const char *dir, const char *const *extra) {
    const char *args[16] = {"run", s_config, "--run-dir", dir};
    for (int i = 0, n = 4; extra && extra[i] && n < 15; i++)
        args[n++] = extra[i];
    return runs_spawn(args);
}

/*  Waits (polling) until the run has written train step >= step; false if it ended first. */
static bool s_wait_step(pid_t pid, const char *dir, int step) {
    while (runs_alive(pid))
        if (runs_last_step(dir, NULL) >= step)
            return true;
        else
            runs_sleep_ms(2);
    return false;
}

static char *s_events(const char *dir) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    bt_file_read(path, 1 << 24, &text, NULL);
    return text;
}

/*  Every line of b is in a and the other way round (as sorted text). */
static void s_check_same(const char *a, const char *b, const char *what) {
    bool same = a && b && strcmp(a, b) == 0;
    if (!same)
        fprintf(stderr, "%s: metrics differ\n--- uninterrupted\n%s--- resumed\n%s", what,
                a ? a : "(none)", b ? b : "(none)");
    CHECK(same);
}

static const char *const s_resume[] = {"--resume", NULL};
static char s_reference_dir[128]; /* the uninterrupted run */
static const char *const s_resume_slow[] = {"--resume", "--set", "debug.save_pause_ms=400", NULL};

/*  Killed at a random step, then in the middle of a save, then at step 14; each time resumed. */
static void test_kill_and_resume(const char *reference) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/killed", s_tmp);
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    int k1 = 4 + rand() % 6; /* a random step in 4..9, after the step-3 checkpoint */
    fprintf(stderr, "killed at step %d (seed %u), then during a save, then at step 14\n", k1, seed);
    pid_t pid = s_start(dir, NULL);
    CHECK(s_wait_step(pid, dir, k1));
    while (runs_alive(pid) && runs_latest(dir) < 0) /* the step-3 checkpoint is being written */
        runs_sleep_ms(2);
    runs_kill(pid);
    int latest = runs_latest(dir);
    CHECK(latest >= 3);
    pid = s_start(dir, s_resume_slow); /* saves pause 0.4 s before they are verified */
    CHECK(runs_wait_saving(pid, dir, latest));
    runs_kill(pid);
    pid = s_start(dir, s_resume);
    CHECK(s_wait_step(pid, dir, 14));
    runs_kill(pid);
    pid = s_start(dir, s_resume);
    CHECK(runs_wait(pid) == 0);
    char *events = s_events(dir);
    CHECK_STR_CONTAINS(events, "\"event\":\"resumed\"");
    /* the half-written folder of the save that was cut short was found and removed */
    CHECK_STR_CONTAINS(events, ".tmp-step-");
    free(events);
    char *got = runs_metrics(dir);
    s_check_same(reference, got, "killed and resumed");
    free(got);
    /* events.jsonl is cut back to each checkpoint as metrics.jsonl is: the decisions of the steps
       after it, written before a kill, are not written twice */
    char *ref_events = runs_events(s_reference_dir), *got_events = runs_events(dir);
    bool same = ref_events && got_events && strcmp(ref_events, got_events) == 0;
    if (!same)
        fprintf(stderr, "killed and resumed: events differ\n--- uninterrupted\n%s--- resumed\n%s",
                ref_events ? ref_events : "(none)", got_events ? got_events : "(none)");
    CHECK(same);
    free(ref_events);
    free(got_events);
}

/*  The last line of events.jsonl that holds needle, or NULL.  Borrowed from events. */
static const char *s_last_event(const char *events, const char *needle) {
    const char *last = NULL;
    for (const char *p = events ? strstr(events, needle) : NULL; p; p = strstr(p + 1, needle))
        last = p;
    return last;
}

/*  Removes DIR/model: the run is then as one killed between its final evaluations and saving its
    policy, which a resume finishes (a run with its policy saved has nothing to resume). */
static void s_unfinish(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s/model", dir);
    CHECK(system(cmd) == 0);
}

/*  Corrupt the newest checkpoint, then the next: each resume falls back one, saying why. */
static void test_corrupt_fallback(const char *reference) {
    char dir[128], path[256], name[32], prev[32];
    snprintf(dir, sizeof dir, "%s/ref", s_tmp);
    s_unfinish(dir);
    /* (a full checkpoint due while the writer is busy is taken a step later: ask, not assume) */
    int newest = runs_latest(dir), before = runs_step_below(dir, newest);
    CHECK(newest > 0 && before > 0);
    snprintf(name, sizeof name, "step-%08d", newest);
    snprintf(prev, sizeof prev, "step-%08d", before);
    snprintf(path, sizeof path, "%s/ckpt/%s/model.safetensors", dir, name);
    char *bytes = NULL;
    size_t len = 0;
    CHECK_OK(bt_file_read(path, 1 << 26, &bytes, &len));
    if (bytes && len > 100) { /* one flipped bit in the tensor data */
        bytes[len - 7] ^= 0x10;
        CHECK_OK(bt_file_write(path, bytes, len));
    }
    free(bytes);
    CHECK(runs_wait(s_start(dir, s_resume)) == 0);
    char *events = s_events(dir);
    const char *rej = s_last_event(events, "\"event\":\"checkpoint_rejected\"");
    CHECK(rej && strstr(rej, name) && strstr(rej, "hash mismatch"));
    const char *res = s_last_event(events, "\"event\":\"resumed\"");
    CHECK(res && strstr(res, prev));
    free(events);
    char *got = runs_metrics(dir);
    s_check_same(reference, got, "resumed from the previous checkpoint");
    free(got);

    /* that resume saved checkpoints again; now delete a file from the newest */
    newest = runs_latest(dir);
    snprintf(name, sizeof name, "step-%08d", newest);
    snprintf(path, sizeof path, "%s/ckpt/%s/optimizer.safetensors", dir, name);
    CHECK(remove(path) == 0);
    s_unfinish(dir);
    CHECK(runs_wait(s_start(dir, s_resume)) == 0);
    events = s_events(dir);
    bool named = false; /* the newest is passed over, saying which file is missing */
    for (const char *l = events; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        size_t n = strcspn(l, "\n");
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
        named |= strstr(line, "checkpoint_rejected") && strstr(line, name) &&
                 strstr(line, "optimizer.safetensors") && strstr(line, "missing");
    }
    CHECK(named);
    free(events);
    got = runs_metrics(dir);
    s_check_same(reference, got, "resumed again");
    free(got);
}

/*  The tuner's plateau rule halved the learning rate after evaluations without improvement:
    each decision made at step S is an event with the values before and after, step S trained at
    the value before and step S + 1 at the value after, as AdamW reports it.  (That the tuner's
    state survives a kill and a resume is test_kill_and_resume's: the resumed metrics, learning
    rates included, equal these.) */
static void test_tuner_decisions(const char *dir) {
    char *events = s_events(dir), path[256], *metrics = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &metrics, NULL));
    int decisions = 0, applied = 0;
    for (const char *e = events ? strstr(events, "\"event\":\"tuner\"") : NULL; e && metrics;
         e = strstr(e + 1, "\"event\":\"tuner\"")) {
        decisions++;
        CHECK(strstr(e, "\"rule\":\"lr_plateau\"") && strstr(e, "\"param\":\"lr\""));
        int step = atoi(strstr(e, "\"step\":") + 7);
        double before = strtod(strstr(e, "\"before\":") + 9, NULL);
        double after = strtod(strstr(e, "\"after\":") + 8, NULL);
        CHECK_REL(after, 0.5 * before, 1e-12);
        if (step >= 1 && step < 16) {
            CHECK_REL(runs_train_lr(metrics, "main", step), before, 1e-12);
            CHECK_REL(runs_train_lr(metrics, "main", step + 1), after, 1e-12);
            applied++;
        }
    }
    CHECK(decisions >= 2 && applied >= 1);
    /* the KL reference is the policy RL starts from (after SFT): the first step's KL is that of a
       policy to itself, 0 to float rounding (to the pre-SFT model it was several nats) */
    const char *first = metrics ? strstr(metrics, "{\"kind\":\"train\",\"step\":1,") : NULL;
    const char *kl = first ? strstr(first, "\"kl\":") : NULL;
    CHECK(kl && fabs(strtod(kl + 5, NULL)) < 1e-6);
    free(events);
    free(metrics);
}

/*  A NaN update at step 7: back to the snapshot of step 6 (every full checkpoint is one), that
    batch skipped, the run finishes with finite losses. */
static void test_nan_rollback(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/nan", s_tmp);
    const char *const set[] = {"--set", "debug.inject_nan_at_step=7", "--set",
                               "checkpoint.light_every_steps=2", NULL};
    CHECK(runs_wait(s_start(dir, set)) == 0);
    char *events = s_events(dir);
    const char *rb = events ? strstr(events, "\"event\":\"rollback\"") : NULL;
    CHECK(rb != NULL);
    if (rb) {
        int from = atoi(strstr(rb, "\"from_step\":") + 12);
        int to = atoi(strstr(rb, "\"to_step\":") + 10);
        CHECK(from == 7 && to >= from - 10 && to < from);
        CHECK(strstr(rb, "non-finite") != NULL);
    }
    free(events);
    CHECK(runs_last_step(dir, NULL) == 16);
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    /* every training line is finite */
    const char *after = text ? strstr(text, "\"loss\":null") : NULL;
    int nulls = 0;
    for (const char *p = after; p; p = strstr(p + 1, "\"loss\":null"))
        nulls++;
    CHECK(nulls == 0); /* the diverged step writes an event, not a training line */
    free(text);
    /* light checkpoints were written beside the full ones: model folders, never LATEST */
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    DIR *d = opendir(ckpt);
    int light = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        char manifest[1024], *m = NULL;
        snprintf(manifest, sizeof manifest, "%s/%s/MANIFEST", ckpt, e->d_name);
        if (strncmp(e->d_name, "step-", 5) || bt_file_read(manifest, 1 << 16, &m, NULL) != BT_OK)
            continue;
        if (!strncmp(m, "kind light", 10)) {
            light++;
            char folder[1024];
            snprintf(folder, sizeof folder, "%s/%s", ckpt, e->d_name);
            bt_model *model = bt_model_load(folder, bt_cpu());
            CHECK(model != NULL);
            bt_model_destroy(&model);
            CHECK(atoi(e->d_name + 5) % 2 == 0);
        }
        free(m);
    }
    if (d)
        closedir(d);
    CHECK(light >= 1);
    char latest[1024], *m = NULL; /* LATEST names a full one */
    snprintf(latest, sizeof latest, "%s/step-%08d/MANIFEST", ckpt, runs_latest(dir));
    CHECK_OK(bt_file_read(latest, 1 << 16, &m, NULL));
    CHECK(m && !strncmp(m, "kind full", 9));
    free(m);
}

/*  `baton run CONFIG --run-dir DIR ARGS 2>&1` into out; its exit status. */
static int s_cli(const char *dir, const char *args, char *out, size_t cap) {
    char cmd[1024];
    const char *bin = getenv("BATON_BIN") ? getenv("BATON_BIN") : "./baton";
    snprintf(cmd, sizeof cmd, "%s run %s --run-dir %s %s 2>&1", bin, s_config, dir, args);
    return runs_capture(cmd, out, cap);
}

/*  A copy of run directory from at to (cp -a). */
static void s_copy(const char *from, const char *to) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -a %s %s", to, from, to);
    CHECK(system(cmd) == 0);
}

static int64_t s_size(const char *dir, const char *name) {
    char path[256];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/*  --resume trusts nothing it reads: a state.json whose metrics_size is beyond the metrics.jsonl
    there (2^40 made a 1 TiB sparse file), a metrics.jsonl whose tail was lost, a checkpoint of
    another run directory, a config that changed where it may not: each is refused before anything
    starts (exit 2), saying what is wrong and what to do, and no file grows.  A config that changed
    only where it may (grpo.steps, workers.*) resumes, with a config_changed event. */
static void test_resume_checks(const char *ref) {
    char dir[128], other[128], out[8192], folder[256];
    snprintf(dir, sizeof dir, "%s/checked", s_tmp);
    snprintf(other, sizeof other, "%s/other", s_tmp);
    s_copy(ref, dir);
    s_unfinish(dir); /* a finished run has nothing to resume */
    snprintf(folder, sizeof folder, "%s/ckpt/step-%08d", dir, runs_latest(dir));
    int64_t metrics = s_size(dir, "metrics.jsonl");

    runs_edit_state(folder, "state.json", "\"metrics_size\":\t",
                    "\"metrics_size\":\t1099511627776,\"was\":\t");
    CHECK(s_cli(dir, "--resume", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "metrics_size: the checkpoint was taken when metrics.jsonl held "
                            "1099511627776 bytes");
    CHECK_STR_CONTAINS(out, "--overwrite");
    CHECK(s_size(dir, "metrics.jsonl") == metrics); /* not grown, no sparse file */
    runs_edit_state(folder, "state.json", "\"metrics_size\":\t1099511627776,\"was\":\t",
                    "\"metrics_size\":\t");
    runs_edit_state(folder, "state.json", "\"version\":\t", "\"version\":\t-1,\"was\":\t");
    CHECK(s_cli(dir, "--resume", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "state.json.version: expected an integer in [0, 9007199254740992], "
                            "got -1");
    runs_edit_state(folder, "state.json", "\"version\":\t-1,\"was\":\t", "\"version\":\t");

    /* the tail of metrics.jsonl lost in a crash: the checkpoint's lines are not all there */
    CHECK(truncate(strcat(strcpy(out, dir), "/metrics.jsonl"), 100) == 0);
    CHECK(s_cli(dir, "--resume", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "and it holds 100: its tail was lost");
    CHECK(s_size(dir, "metrics.jsonl") == 100);

    /* another run directory's checkpoint */
    s_copy(ref, other);
    s_unfinish(other);
    char args[512];
    snprintf(args, sizeof args, "--resume %s", folder);
    CHECK(s_cli(other, args, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "not a checkpoint of");
    /* a key that may not change on resume, named with its two values */
    CHECK(s_cli(other, "--resume --set grpo.lr=0.002 --set workers.eval=2", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "the config differs from");
    CHECK_STR_CONTAINS(out, "grpo.lr (0.001 -> 0.002)");
    CHECK(strstr(out, "workers.eval (") == NULL); /* that one may change */
    char *events = s_events(other);
    CHECK(events && !strstr(events, "config_changed"));
    free(events);
    /* keys that may change: the run goes on to the new grpo.steps, and says what changed */
    CHECK(s_cli(other, "--resume --set grpo.steps=18 --set workers.eval=2", out, sizeof out) == 0);
    CHECK(runs_last_step(other, NULL) == 18);
    events = s_events(other);
    CHECK_STR_CONTAINS(events, "{\"event\":\"config_changed\",\"time\":0,\"keys\":[\"grpo.steps\","
                               "\"workers.eval\"],\"from\":[\"16\",\"1\"],\"to\":[\"18\",\"2\"]}");
    free(events);
}

/*  --resume of a run that finished (its final evaluations and model/ written) is a no-op that says
    so: exit 0, and every file of the run directory is as it was, byte for byte (it used to cut
    metrics.jsonl back to the last checkpoint, deleting the final evaluation lines, and train the
    last steps again). */
static void test_finished_resume(const char *dir) {
    const char *files[] = {
        "metrics.jsonl",           "events.jsonl",     "config.json", "ckpt/LATEST",
        "model/model.safetensors", "model/config.json"};
    enum { N = sizeof files / sizeof files[0] };
    char *before[N], path[256], out[4096];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        before[i] = NULL;
        CHECK_OK(bt_file_read(path, 1 << 26, &before[i], &len[i]));
    }
    CHECK(before[0] && strstr(before[0], "\"step\":16,\"variant\":\"main\"") != NULL);
    CHECK(s_cli(dir, "--resume", out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "the run finished already (step 16 of 16");
    CHECK_STR_CONTAINS(out, "nothing to resume");
    CHECK(s_cli(dir, "--resume --procs", out, sizeof out) == 0);
    for (int i = 0; i < N; i++) {
        char *after = NULL;
        size_t n = 0;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        CHECK_OK(bt_file_read(path, 1 << 26, &after, &n));
        bool same = before[i] && after && n == len[i] && memcmp(before[i], after, n) == 0;
        if (!same)
            fprintf(stderr, "%s changed on the resume of a finished run\n", files[i]);
        CHECK(same);
        free(after);
        free(before[i]);
    }
}

/*  `baton worker` processes, whatever their parent now, that connect to DIR's controller. */
static int s_workers_of(const char *dir) {
    char real[256], endpoint[300];
    if (!realpath(dir, real))
        return 0;
    snprintf(endpoint, sizeof endpoint, "ipc://%s/controller.ipc", real);
    DIR *d = opendir("/proc");
    int n = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        char path[300], buf[4096];
        if (atoi(e->d_name) <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        bool worker = false, ours = false;
        for (size_t i = 0; i < len; i += strlen(buf + i) + 1) { /* NUL-separated arguments */
            buf[len] = '\0';
            worker |= !strcmp(buf + i, "worker");
            ours |= !strcmp(buf + i, endpoint);
        }
        n += worker && ours;
    }
    if (d)
        closedir(d);
    return n;
}

/*  SIGINT to a real `baton run --procs`: it stops after the step in progress, stops its worker
    processes (none is left), says how to continue and exits 130; `--resume` from there writes the
    metrics of the uninterrupted run.  A second SIGINT kills it at once, and its workers with it. */
static void test_signal(const char *reference) {
    char dir[128], log[160], *text = NULL;
    snprintf(dir, sizeof dir, "%s/signalled", s_tmp);
    snprintf(log, sizeof log, "%s/signalled.log", s_tmp);
    const char *args[] = {"run", s_config, "--run-dir", dir, "--procs", NULL};
    pid_t pid = runs_spawn_in(NULL, args, log);
    CHECK(s_wait_step(pid, dir, 5)); /* of 16: after the step-3 checkpoint */
    while (runs_alive(pid) && runs_latest(dir) < 3)
        runs_sleep_ms(2);
    CHECK(s_workers_of(dir) == 3);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130);
    CHECK(s_workers_of(dir) == 0);
    CHECK_OK(bt_file_read(log, 1 << 20, &text, NULL));
    CHECK_STR_CONTAINS(text, "baton: stopped by SIGINT after step ");
    CHECK_STR_CONTAINS(text, "continue it from its last checkpoint with: baton run ");
    CHECK_STR_CONTAINS(text, " --procs --resume\n");
    free(text);
    text = NULL;
    int stopped = runs_last_step(dir, NULL);
    CHECK(stopped >= 5 && stopped < 16);
    const char *again[] = {"run", s_config, "--run-dir", dir, "--procs", "--resume", NULL};
    CHECK(runs_wait(runs_spawn(again)) == 0);
    char *got = runs_metrics(dir);
    s_check_same(reference, got, "stopped by SIGINT and resumed");
    free(got);

    /* twice: killed at once by the second, and no worker outlives it.  The first lands while the
       workers join (seconds, with processes), so the second comes before a clean stop; it is sent
       once the first was seen (two pending SIGINTs would be one) */
    snprintf(dir, sizeof dir, "%s/signalled_twice", s_tmp);
    snprintf(log, sizeof log, "%s/signalled_twice.log", s_tmp);
    pid = runs_spawn_in(NULL, args, log);
    for (bool joining = false; !joining && runs_alive(pid); runs_sleep_ms(2)) {
        joining = bt_file_read(log, 1 << 20, &text, NULL) == BT_OK && strstr(text, "join step");
        free(text);
        text = NULL;
    }
    kill(pid, SIGINT);
    for (bool seen = false; !seen && runs_alive(pid); runs_sleep_ms(2)) {
        seen = bt_file_read(log, 1 << 20, &text, NULL) == BT_OK &&
               strstr(text, "stopping after the current step");
        free(text);
        text = NULL;
    }
    kill(pid, SIGINT);
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
    for (int i = 0; i < 1000 && s_workers_of(dir) > 0; i++)
        runs_sleep_ms(2); /* each dies of its parent's death (PR_SET_PDEATHSIG), a moment later */
    CHECK(s_workers_of(dir) == 0);
}

/*  Tensor bytes of folder/name, and its entries into *st (caller destroys). */
static size_t s_open_tensors(const char *folder, const char *name, bt_safetensors_t **st) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    CHECK_OK(bt_safetensors_open(path, st));
    size_t n = 0;
    for (int i = 0; *st && i < bt_safetensors_count(*st); i++)
        n += bt_safetensors_entry(*st, i)->nbytes;
    return n;
}

/*  model.save_dtype bf16 on a float32 model, killed after a checkpoint and resumed: the resume,
    which must take its weights from the float32 masters and not from the rounded model file,
    writes the metrics of the uninterrupted float32 run (the save dtype changes no training); the
    newest checkpoint's model.safetensors is bfloat16 (half the float32 run's tensor bytes), each
    value its float32 master rounded to nearest even; the masters are in optimizer.safetensors
    (param.NAME), equal to the float32 run's policy at that step bit for bit. */
static void test_bf16_save_resume(const char *reference) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/bf16-save", s_tmp);
    const char *const start[] = {"--set", "model.save_dtype=bf16", NULL};
    const char *const resume[] = {"--resume", "--set", "model.save_dtype=bf16", NULL};
    pid_t pid = s_start(dir, start);
    CHECK(s_wait_step(pid, dir, 5));
    while (runs_alive(pid) && runs_latest(dir) < 3)
        runs_sleep_ms(2);
    runs_kill(pid);
    CHECK(runs_latest(dir) >= 3);
    CHECK(runs_wait(s_start(dir, resume)) == 0);
    char *got = runs_metrics(dir);
    s_check_same(reference, got, "bf16 save dtype, killed and resumed");
    free(got);

    /* the float32 weights of the step of this run's newest checkpoint: which steps have
       checkpoints depends on the writer's speed (one due while it is busy is taken a step later),
       so the float32 run is asked for that step rather than assumed to have one there: a copy of
       it resumed from its newest checkpoint up to that step, with grpo.steps that step (the
       schedule is constant: its steps train as they did), saves their policy as model/ */
    int latest = runs_latest(dir);
    char mine[256], theirs[256], from[300], steps[48];
    snprintf(theirs, sizeof theirs, "%s/f32-upto", s_tmp);
    s_copy(s_reference_dir, theirs);
    s_unfinish(theirs);
    int before = runs_step_below(theirs, latest + 1);
    CHECK(latest > 0 && before > 0);
    snprintf(from, sizeof from, "%s/ckpt/step-%08d", theirs, before);
    snprintf(steps, sizeof steps, "grpo.steps=%d", latest);
    const char *const upto[] = {"--resume", from, "--set", steps, NULL};
    CHECK(runs_wait(s_start(theirs, upto)) == 0);
    snprintf(mine, sizeof mine, "%s/ckpt/step-%08d", dir, latest);
    strcat(theirs, "/model");
    bt_safetensors_t *model = NULL, *opt = NULL, *ref = NULL;
    size_t b16 = s_open_tensors(mine, "model.safetensors", &model);
    size_t b32 = s_open_tensors(theirs, "model.safetensors", &ref);
    s_open_tensors(mine, "optimizer.safetensors", &opt);
    printf("checkpoint step %d: model.safetensors %lld bytes as bf16, %lld as float32 (tensors "
           "%zu and %zu bytes)\n",
           latest, (long long)s_size(mine, "model.safetensors"),
           (long long)s_size(theirs, "model.safetensors"), b16, b32);
    CHECK(b16 > 0 && b16 * 2 == b32);
    int n = model ? bt_safetensors_count(model) : 0, exact = 0;
    for (int i = 0; opt && ref && i < n; i++) {
        const bt_st_entry *e = bt_safetensors_entry(model, i);
        char name[160];
        snprintf(name, sizeof name, "param.%s", e->name);
        const bt_st_entry *m = bt_safetensors_find(opt, name),
                          *r = bt_safetensors_find(ref, e->name);
        bool ok = e->dtype == BT_BF16 && m && m->dtype == BT_F32 && m->nbytes == 2 * e->nbytes &&
                  r && r->nbytes == m->nbytes && !memcmp(r->data, m->data, m->nbytes);
        for (size_t k = 0; ok && k < e->nbytes / 2; k++) {
            uint32_t bits;
            uint16_t h;
            memcpy(&bits, (const char *)m->data + 4 * k, 4);
            memcpy(&h, (const char *)e->data + 2 * k, 2);
            ok = h == (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        }
        exact += ok;
    }
    CHECK(n > 0 && exact == n);
    bt_safetensors_destroy(&model);
    bt_safetensors_destroy(&opt);
    bt_safetensors_destroy(&ref);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_resume_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/r.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char *ref = s_reference_dir;
    snprintf(ref, sizeof s_reference_dir, "%s/ref", s_tmp);
    CHECK(runs_wait(s_start(ref, NULL)) == 0); /* the uninterrupted run */
    char *reference = runs_metrics(ref);
    CHECK(reference && runs_last_step(ref, NULL) == 16);
    /* the sampled dataset is evaluated every 150 completion tokens: its trigger state (the
       multiple it last fired for) is in each checkpoint, so the resumed runs fire where this did */
    CHECK_STR_CONTAINS(reference, "\"dataset\":\"sampled\",\"trigger\":\"tokens\"");
    test_tuner_decisions(ref);
    test_resume_checks(ref);
    test_finished_resume(ref);
    test_signal(reference);
    test_kill_and_resume(reference);
    test_bf16_save_resume(reference);
    test_corrupt_fallback(reference);
    test_nan_rollback();
    free(reference);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
