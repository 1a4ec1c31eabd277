/*  test_population_resume.c — a run with three variants and population-based training keeps
    checkpoints and resumes exactly: SIGKILLed at a random step, then in the middle of a save,
    then after the third PBT round (resumed from the checkpoint cut at that round, with the
    evaluations still running then), and resumed each time, it writes for every variant exactly
    the metrics of the uninterrupted run (sorted, timing fields removed) and the same decisions
    (pbt and pbt_explore events, with the explored learning rates, KL coefficients, temperatures
    and clips that the train lines then apply).  A checkpoint holds each policy's files in a
    folder of its name (a Hugging Face model folder each) beside population.json; a resume with
    another set of variants is refused before anything starts, and one from a checkpoint whose
    policies recorded different sizes of the logs before they are cut. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char s_tmp[64], s_config[128];
static const char *const s_names[] = {"cold", "base", "hot"};

static const char s_json[] =
    "{\"run\": {\"name\": \"p\", \"seed\": 5}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\","
    "  \"heldout_size\": 6, \"format_reward\": 0.5},"
    " \"sft\": {\"steps\": 20, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 18, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 4, \"heldout_count\": 6},"
    " \"checkpoint\": {\"full_every_steps\": 3, \"keep_last\": 3},"
    " \"pbt\": {\"enabled\": true, \"ready_steps\": 4, \"metric\": \"reward\","
    "  \"explore\": \"grpo.lr,grpo.kl_coef,grpo.temperature,grpo.clip_high\","
    "  \"kl_coef_min\": 0.001, \"kl_coef_max\": 0.1, \"temperature_min\": 0.7,"
    "  \"temperature_max\": 1.3, \"clip_high_min\": 0.2, \"clip_high_max\": 0.35},"
    " \"variants\": [{\"name\": \"cold\", \"set\": {\"grpo.lr\": 1e-6}}, {\"name\": \"base\"},"
    "  {\"name\": \"hot\", \"set\": {\"grpo.lr\": 0.03}}],"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

static pid_t s_start(const char *config, const char *dir, const char *const *extra) {
    const char *args[16] = {"run", config, "--run-dir", dir};
    for (int i = 0, n = 4; extra && extra[i] && n < 15; i++)
        args[n++] = extra[i];
    return runs_spawn(args);
}

/*  The fewest train steps any variant has written. */
static int s_least_step(const char *dir) {
    int least = 1 << 30;
    for (int k = 0; k < 3; k++) {
        int s = runs_last_step(dir, s_names[k]);
        least = s < least ? s : least;
    }
    return least;
}

static bool s_wait_step(pid_t pid, const char *dir, int step) {
    while (runs_alive(pid))
        if (s_least_step(dir) >= step)
            return true;
        else
            runs_sleep_ms(2);
    return false;
}

static void s_check_same(const char *a, const char *b, const char *what) {
    bool same = a && b && strcmp(a, b) == 0;
    if (!same)
        fprintf(stderr, "%s differ\n--- uninterrupted\n%s--- resumed\n%s", what, a ? a : "(none)",
                b ? b : "(none)");
    CHECK(same);
}

static bool s_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/*  How many evaluations variant's state.json in checkpoint folder lists as in flight when it was
    cut (-1 when it cannot be read). */
static int s_pending_evals(const char *folder, const char *variant) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/%s/state.json", folder, variant);
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK)
        return -1;
    cJSON *j = cJSON_Parse(text);
    int n = j ? cJSON_GetArraySize(cJSON_GetObjectItem(j, "pending_evals")) : -1;
    cJSON_Delete(j);
    free(text);
    return n;
}

/*  The checkpoint's layout: population.json, and each policy's model, optimizer and states in
    a folder of its name. */
static void test_layout(const char *ref) {
    int latest = runs_latest(ref);
    CHECK(latest == 18);
    const char *files[] = {"config.json", "model.safetensors", "optimizer.safetensors",
                           "state.json", "data.json"};
    char path[512];
    snprintf(path, sizeof path, "%s/ckpt/step-%08d/population.json", ref, latest);
    CHECK(s_exists(path));
    for (int k = 0; k < 3; k++)
        for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
            snprintf(path, sizeof path, "%s/ckpt/step-%08d/%s/%s", ref, latest, s_names[k],
                     files[f]);
            if (!s_exists(path))
                fprintf(stderr, "missing: %s\n", path);
            CHECK(s_exists(path));
        }
}

/*  The PBT rounds copied and explored (else this test would not show their decisions survive). */
static void test_decisions(const char *events) {
    CHECK_STR_CONTAINS(events, "\"event\":\"pbt\"");
    CHECK_STR_CONTAINS(events, "\"event\":\"pbt_explore\"");
    CHECK_STR_CONTAINS(events, "\"param\":\"grpo.clip_high\"");
}

static void test_kill_and_resume(const char *ref) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/killed", s_tmp);
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    int k1 = 4 + rand() % 5; /* a random step in 4..8, after the step-3 checkpoint and 10 steps
                                 before the last, so a loaded machine cannot finish first */
    fprintf(stderr, "killed at step %d (seed %u), then during a save, then at step 13\n", k1, seed);
    const char *const resume[] = {"--resume", NULL};
    const char *const slow[] = {"--resume", "--set", "debug.save_pause_ms=400", NULL};
    pid_t pid = s_start(s_config, dir, NULL);
    CHECK(s_wait_step(pid, dir, k1));
    while (runs_alive(pid) && runs_latest(dir) < 0)
        runs_sleep_ms(2);
    runs_kill(pid);
    int latest = runs_latest(dir);
    CHECK(latest >= 3);
    pid = s_start(s_config, dir, slow); /* saves pause 0.4 s before they are verified */
    CHECK(runs_wait_saving(pid, dir, latest));
    runs_kill(pid);
    pid = s_start(s_config, dir, resume);
    CHECK(s_wait_step(pid, dir, 13));                /* past the step-12 round */
    while (runs_alive(pid) && runs_latest(dir) < 12) /* its checkpoint is saved in the background */
        runs_sleep_ms(2);
    runs_kill(pid);
    /* from the checkpoint cut at the round by name, whichever is the latest: cut while the
       step-12 evaluations of some variants may still run (state.json then lists them), it is the
       one whose resume must run both again.  A full checkpoint due while the writer is busy is
       taken a step later: the one of step 12, or 13 */
    int cut = runs_step_below(dir, 14);
    CHECK(cut >= 12);
    char folder[192];
    snprintf(folder, sizeof folder, "%s/ckpt/step-%08d", dir, cut);
    fprintf(stderr, "step-%d checkpoint: pending evaluations of", cut);
    for (int k = 0; k < 3; k++)
        fprintf(stderr, " %s: %d", s_names[k], s_pending_evals(folder, s_names[k]));
    fprintf(stderr, "\n");
    const char *const from_cut[] = {"--resume", folder, NULL};
    pid = s_start(s_config, dir, from_cut);
    CHECK(runs_wait(pid) == 0);
    for (int k = 0; k < 3; k++) {
        char *a = runs_metrics_of(ref, s_names[k]), *b = runs_metrics_of(dir, s_names[k]);
        char what[64];
        snprintf(what, sizeof what, "variant %s: metrics", s_names[k]);
        s_check_same(a, b, what);
        free(a);
        free(b);
    }
    char *a = runs_events(ref), *b = runs_events(dir);
    s_check_same(a, b, "events");
    free(a);
    free(b);
}

/*  A resume with another set of variants names what differs and leaves the run as it was. */
static void test_other_variants(const char *ref) {
    char config[128], text[sizeof s_json + 64], dir[128], cmd[512];
    snprintf(config, sizeof config, "%s/two.json", s_tmp);
    snprintf(text, sizeof text, "%s", s_json);
    char *hot = strstr(text, ",  {\"name\": \"hot\""); /* cold and base only */
    CHECK(hot != NULL);
    if (!hot)
        return;
    snprintf(hot, sizeof text - (size_t)(hot - text), "%s",
             "],"
             " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}");
    CHECK_OK(bt_file_write(config, text, strlen(text)));
    snprintf(dir, sizeof dir, "%s/copy", s_tmp);
    snprintf(cmd, sizeof cmd, "cp -r %s %s", ref, dir);
    CHECK(system(cmd) == 0);
    char *before = runs_metrics(dir);
    const char *const resume[] = {"--resume", NULL};
    CHECK(runs_wait(s_start(config, dir, resume)) == 2);
    char *after = runs_metrics(dir);
    s_check_same(before, after, "metrics of a refused resume");
    free(before);
    free(after);
}

/*  A checkpoint whose policies' state.json files hold different sizes of metrics.jsonl (a resume
    cuts it once, for all of them) fails the resume before the logs are cut, naming the file and
    both sizes, and metrics.jsonl is left as it was. */
static void test_sizes_disagree(const char *ref) {
    char dir[128], folder[192], path[256], to[96], want[256], cmd[512], out[4096], *text = NULL;
    snprintf(dir, sizeof dir, "%s/sizes", s_tmp);
    snprintf(cmd, sizeof cmd, "cp -r %s %s && rm -rf %s/model", ref, dir, dir); /* unfinished */
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    long first_line = text && strchr(text, '\n') ? (long)(strchr(text, '\n') - text) + 1 : 0;
    free(text);
    char *before = runs_metrics(dir);
    snprintf(folder, sizeof folder, "%s/ckpt/step-%08d", dir, runs_latest(dir));
    snprintf(to, sizeof to, "\"metrics_size\":\t%ld,\"was\":\t", first_line);
    runs_edit_state(folder, "hot/state.json", "\"metrics_size\":\t", to);
    const char *bin = getenv("BATON_BIN") ? getenv("BATON_BIN") : "./baton";
    snprintf(cmd, sizeof cmd, "%s run %s --run-dir %s --resume 2>&1", bin, s_config, dir);
    CHECK(runs_capture(cmd, out, sizeof out) == 1); /* found once the policies read their state */
    snprintf(want, sizeof want, "hot/state.json: metrics_size %ld and events_size", first_line);
    CHECK_STR_CONTAINS(out, want);
    CHECK_STR_CONTAINS(out, "the policies of one checkpoint share one size of each log");
    char *after = runs_metrics(dir);
    s_check_same(before, after, "metrics of a refused resume");
    free(before);
    free(after);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_popres_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_config, sizeof s_config, "%s/p.json", s_tmp);
    CHECK_OK(bt_file_write(s_config, s_json, strlen(s_json)));
    char ref[128];
    snprintf(ref, sizeof ref, "%s/ref", s_tmp);
    CHECK(runs_wait(s_start(s_config, ref, NULL)) == 0); /* the uninterrupted run */
    CHECK(s_least_step(ref) == 18);
    char *events = runs_events(ref);
    test_decisions(events ? events : "");
    free(events);
    test_layout(ref);
    test_other_variants(ref);
    test_sizes_disagree(ref);
    test_kill_and_resume(ref);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
