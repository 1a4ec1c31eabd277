/*  test_recovery.c — the controller's recovery rules in real runs, each against an independent
    reading of an undisturbed run:
    - checkpoint.spike_factor: the first step whose |loss| exceeds factor x its running mean (the
      rule computed here from the reference run's train lines: a mean over the first 5 steps'
      |loss| kept as EMA 0.9) is rolled back, with an event naming the ratio;
    - a canary mismatch: a checkpoint whose state.json records another canary loss (MANIFEST made
      consistent again, so only the restore can tell) is refused on resume naming both losses;
    - a light checkpoint that falls due while a save is in flight is saved after it under its
      own step (a `checkpoint_deferred` event, then its save; or, superseded by a newer one while
      the writer was still busy, a `checkpoint_skipped` event), never dropped silently. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <xxhash.h>

static char s_tmp[64], s_config[128];

static const char s_json[] =
    "{\"run\": {\"name\": \"rec\", \"seed\": 13},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\","
    "  \"heldout_size\": 6, \"format_reward\": 0.5},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 24, \"group_size\": 8, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.01, \"kl_coef\": 0.05},"
    " \"eval\": {\"every_steps\": 8, \"heldout_count\": 6},"
    " \"checkpoint\": {\"full_every_steps\": 6, \"keep_last\": 5},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

static pid_t s_run(const char *dir, const char *const *extra, const char *log) {
    const char *args[16] = {"run", s_config, "--run-dir", dir};
    for (int i = 0, n = 4; extra && extra[i] && n < 15; i++)
        args[n++] = extra[i];
    return runs_spawn_in(NULL, args, log);
}

static char *s_read(const char *dir, const char *name) {
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return bt_file_read(path, 1 << 24, &text, NULL) == BT_OK ? text : NULL;
}

/*  |loss| of the reference's train lines, by step (1-based; out[0] unused); returns the steps. */
static int s_losses(const char *dir, double *out, int cap) {
    char *text = s_read(dir, "metrics.jsonl");
    int n = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const cJSON *kind = cJSON_GetObjectItem(j, "kind"), *step = cJSON_GetObjectItem(j, "step");
        const cJSON *loss = cJSON_GetObjectItem(j, "loss");
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "train") && cJSON_IsNumber(step) &&
            step->valueint < cap && cJSON_IsNumber(loss)) {
            out[step->valueint] = fabs(loss->valuedouble);
            n = step->valueint > n ? step->valueint : n;
        }
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

/*  docs/config.md's spike rule on the losses: the first step s >= 6 whose |loss| exceeds factor
    times the running mean of the steps before it (their mean as an EMA with weight 0.9 on the
    past, started at the first |loss|), or 0 when none does. */
static int s_first_spike(const double *a, int n, double factor, double *ratio) {
    double ema = 0;
    for (int s = 1; s <= n; s++) {
        if (s >= 6 && ema > 0 && a[s] > factor * ema) {
            *ratio = a[s] / ema;
            return s;
        }
        ema = s == 1 ? a[s] : 0.9 * ema + 0.1 * a[s];
    }
    return 0;
}

static void test_spike(const char *ref) {
    double loss[64] = {0}, ratio = 0;
    int n = s_losses(ref, loss, 64), spike = 0;
    CHECK(n == 24);
    double factor = 0;
    for (double f = 1000; f > 1.0 && !spike; f /= 1.25) { /* about the largest that fires */
        spike = s_first_spike(loss, n, f, &ratio);
        factor = f;
    }
    CHECK(spike > 0);
    fprintf(stderr, "spike_factor %.3f: the first spike is step %d (%.2f times the mean)\n", factor,
            spike, ratio);
    char dir[128], set[64];
    snprintf(dir, sizeof dir, "%s/spike", s_tmp);
    snprintf(set, sizeof set, "checkpoint.spike_factor=%.6f", factor);
    const char *extra[] = {"--set", set, NULL};
    char log[160];
    snprintf(log, sizeof log, "%s.log", dir);
    int rc = runs_wait(s_run(dir, extra, log));
    /* the KL term grows through the run, so the spike may come back after each rollback: the run
       either finishes or stops by the documented limit, 3 rollbacks to one snapshot */
    char *said = s_read(s_tmp, "spike.log");
    CHECK(rc == 0 || (rc == 1 && said && strstr(said, "after 3 rollbacks to step")));
    free(said);
    char *events = s_read(dir, "events.jsonl");
    const char *rb = events ? strstr(events, "\"event\":\"rollback\"") : NULL;
    CHECK(rb != NULL);
    if (rb) {
        const char *from = strstr(rb, "\"from_step\":");
        CHECK(from && atoi(from + 12) == spike);
        char why[96];
        snprintf(why, sizeof why, "is %.1f times its running mean", ratio);
        CHECK(strstr(rb, why) != NULL);
    }
    free(events);
}

/*  Rewrites dir/MANIFEST's line for name with the file's current size and XXH3-64. */
static void s_remanifest(const char *dir, const char *name) {
    char *manifest = s_read(dir, "MANIFEST"), *file = NULL, path[512];
    size_t size = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_OK(bt_file_read(path, 1 << 24, &file, &size));
    char out[1 << 14] = "";
    for (char *l = manifest ? strtok(manifest, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        const char *fname = strrchr(l, ' ');
        if (fname && !strcmp(fname + 1, name))
            snprintf(out + strlen(out), sizeof out - strlen(out), "%016llx %zu %s\n",
                     (unsigned long long)XXH3_64bits(file, size), size, name);
        else
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s\n", l);
    }
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    CHECK_OK(bt_file_write(path, out, strlen(out)));
    free(manifest);
    free(file);
}

static void test_canary(const char *ref) {
    char dir[128], ckpt[256], cmd[512], log[160];
    snprintf(dir, sizeof dir, "%s/canary", s_tmp);
    snprintf(log, sizeof log, "%s.log", dir);
    snprintf(cmd, sizeof cmd, "cp -r %s %s && rm -rf %s/model", ref, dir, dir);
    CHECK(system(cmd) == 0);
    /* the newest checkpoint (step 18 when every save kept up; a full checkpoint due while the
       writer is still busy is owed to a later step, so on a loaded machine it may be another) */
    char ckdir[200], *latest = NULL;
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);
    latest = s_read(ckdir, "LATEST");
    CHECK(latest != NULL);
    if (!latest)
        return;
    latest[strcspn(latest, "\n")] = '\0';
    snprintf(ckpt, sizeof ckpt, "%s/ckpt/%s", dir, latest);
    char *state = s_read(ckpt, "state.json");
    const char *at = state ? strstr(state, "\"canary_loss\":") : NULL;
    CHECK(at != NULL);
    if (!at)
        return;
    const char *num = at + 14 + strspn(at + 14, " \t");
    double canary = strtod(num, NULL), wrong = canary * 1.001;
    size_t end = (size_t)(num - state) + strspn(num, "0123456789.eE+-");
    char edited[1 << 16];
    snprintf(edited, sizeof edited, "%.*s%.17g%s", (int)(num - state), state, wrong, state + end);
    snprintf(cmd, sizeof cmd, "%s/state.json", ckpt);
    CHECK_OK(bt_file_write(cmd, edited, strlen(edited)));
    s_remanifest(ckpt, "state.json");
    snprintf(cmd, sizeof cmd, "printf '%s\\n' > %s/ckpt/LATEST", latest, dir);
    CHECK(system(cmd) == 0);
    free(latest);
    const char *extra[] = {"--resume", NULL};
    CHECK(runs_wait(s_run(dir, extra, log)) == 1);
    char *said = s_read(s_tmp, "canary.log"), want[160];
    CHECK_STR_CONTAINS(said, "the restored trainer's canary loss is");
    snprintf(want, sizeof want, "the checkpoint recorded %.17g", wrong);
    CHECK_STR_CONTAINS(said, want);
    free(said);
    free(state);
}

static void test_light_deferred(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/light", s_tmp);
    const char *extra[] = {"--set", "checkpoint.light_every_steps=1", "--set",
                           "debug.save_pause_ms=300", NULL};
    CHECK(runs_wait(s_run(dir, extra, NULL)) == 0);
    char *events = s_read(dir, "events.jsonl");
    int deferred = 0, saved = 0, skipped = 0;
    for (const char *d = events ? strstr(events, "\"event\":\"checkpoint_deferred\"") : NULL; d;
         d = strstr(d + 1, "\"event\":\"checkpoint_deferred\"")) {
        int step = atoi(strstr(d, "\"step\":") + 7);
        deferred++;
        /* saved later under its own step (the policy of that step, copied when it fell due), or
           superseded by a newer one while the writer was still busy, which an event says */
        char want[96], gone[96];
        snprintf(want, sizeof want, "\"event\":\"checkpoint_saved\",\"time\"");
        snprintf(gone, sizeof gone, "\"kind\":\"light\",\"step\":%d,\"superseded_by\"", step);
        bool found = false;
        for (const char *s = strstr(d, want); s && !found; s = strstr(s + 1, want)) {
            char label[64];
            snprintf(label, sizeof label, "\"step\":%d,\"kind\":\"light\"", step);
            found = !strncmp(strstr(s, "\"step\":"), label, strlen(label));
        }
        saved += found;
        skipped += !found && strstr(d, gone) != NULL;
    }
    CHECK(deferred > 0); /* the 300 ms saves overlapped due light checkpoints */
    CHECK(saved > 0 && saved + skipped == deferred);
    free(events);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_recovery_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/rec.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char ref[128];
    snprintf(ref, sizeof ref, "%s/ref", s_tmp);
    CHECK(runs_wait(s_run(ref, NULL, NULL)) == 0);
    test_spike(ref);
    test_canary(ref);
    test_light_deferred();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0 && !getenv("BATON_KEEP"))
        CHECK(system(cmd) == 0);
    return check_exit();
}
