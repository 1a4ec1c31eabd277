/*  test_global_step.c — `global_step` on every line of metrics.jsonl: real `baton run` processes
    with SFT steps, then GRPO steps and evaluations.  Read back with a reader of its own (cJSON over
    the file, no baton code), every train and sft line's global_step is the count of that variant's
    train and sft lines up to it (strictly increasing, no gap, no repeat: a pandas pivot on it
    never mixes rows); every eval line's is that of the train or sft line of the step it
    evaluated.  A run killed with SIGKILL mid-run and resumed with --resume goes on without a gap
    or a repeat, and each checkpoint's state.json holds the count of the lines before its
    metrics_size.  A rollback's skipped steps keep their lines, and the count goes on over the
    steps run again.  A state.json whose global_step no run can have is refused by --resume, naming
    it.  With variants each counts its own: a variant with more SFT steps, and one that
    shares the base's warm start (its SFT lines copied from the base's). */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static char s_tmp[64];

#define S_BASE                                                                                     \
    "\"run\": {\"name\": \"g\", \"seed\": 11}," RUNS_MODEL_TINY                                    \
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\","                   \
    "  \"heldout_size\": 6},"                                                                      \
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"                                  \
    " \"grpo\": {\"steps\": 14, \"group_size\": 4, \"prompts_per_step\": 6,"                       \
    "  \"max_new_tokens\": 3, \"lr\": 0.001},"                                                     \
    " \"eval\": {\"every_steps\": 3, \"heldout_count\": 6},"                                       \
    " \"checkpoint\": {\"full_every_steps\": 2, \"keep_last\": 2},"                                \
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}"

static const char s_single[] = "{" S_BASE "}";
/*  base: 3 SFT steps; more_sft: 5 of its own; shared: base's warm start (only grpo.lr differs) */
static const char s_variants[] = "{" S_BASE ", \"variants\": [{\"name\": \"base\"},"
                                 " {\"name\": \"more_sft\", \"set\": {\"sft.steps\": 5}},"
                                 " {\"name\": \"shared\", \"set\": {\"grpo.lr\": 0.002}}]}";

#define S_MAX_VARIANTS 4

/*  What a variant's lines said, read by s_read. */
typedef struct {
    char name[32];
    int sft_lines, train_lines;
    int sft_at[64]; /* global_step of its sft line of step s (1-based), -1: none */
    int train_first[64], train_last[64]; /* of its train lines of step s (a rollback repeats) */
    bool ok;                             /* every check on it held */
} s_variant;

static s_variant *s_find(s_variant *v, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(v[i].name, name))
            return &v[i];
    if (*n >= S_MAX_VARIANTS)
        return NULL;
    s_variant *x = &v[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    memset(x->sft_at, -1, sizeof x->sft_at);
    memset(x->train_first, -1, sizeof x->train_first);
    memset(x->train_last, -1, sizeof x->train_last);
    x->ok = true;
    return x;
}

static double s_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/*  Reads the first `bytes` bytes of DIR/metrics.jsonl (all of it when < 0) in file order and
    checks each line's global_step against the count of its variant's train and sft lines so
    far (eval lines: that of the line of the step they evaluated); fills v (n of them).  Without
    repeats (no rollback) a train line of step s also has the SFT lines' count + s.  Returns the
    eval lines read. */
static int s_read(const char *dir, int64_t bytes, bool repeats, s_variant *v, int *n) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    *n = 0;
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    if (!text)
        return 0;
    if (bytes >= 0 && (size_t)bytes <= strlen(text))
        text[bytes] = '\0';
    int evals = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        CHECK(j != NULL);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "kind"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "variant"));
        s_variant *x = name ? s_find(v, n, name) : NULL;
        double g = s_num(j, "global_step"), step = s_num(j, "step");
        CHECK(kind && x && isfinite(g) && g == floor(g)); /* on every line */
        if (!kind || !x) {
            cJSON_Delete(j);
            continue;
        }
        bool ok = true;
        if (!strcmp(kind, "sft") || !strcmp(kind, "train")) {
            bool sft = kind[0] == 's';
            if (sft)
                x->sft_lines++;
            else
                x->train_lines++;
            int want = x->sft_lines + x->train_lines; /* this line included */
            ok = g == want;
            if (sft && step >= 1 && step < 64)
                x->sft_at[(int)step] = (int)g;
            if (!sft && step >= 1 && step < 64) {
                int *first = &x->train_first[(int)step];
                *first = *first < 0 ? (int)g : *first;
                x->train_last[(int)step] = (int)g;
            }
            if (!sft && !repeats) /* RL step s follows every SFT line */
                ok &= g == x->sft_lines + step;
        } else if (!strcmp(kind, "eval")) {
            const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "phase"));
            evals++;
            if (phase && !strcmp(phase, "sft")) /* an SFT early-stop check: its step's line */
                ok = step >= 1 && step < 64 && g == x->sft_at[(int)step];
            else if (step == 0) /* the weights SFT left */
                ok = g == x->sft_lines;
            else /* the weights of a train line of step s written before */
                ok = step < 64 && (g == x->train_first[(int)step] || g == x->train_last[(int)step]);
        }
        if (!ok)
            fprintf(stderr, "%s: global_step %g is wrong on %s\n", dir, g, l);
        x->ok &= ok;
        cJSON_Delete(j);
    }
    free(text);
    return evals;
}

/*  Checks a finished run in dir: variant names[i] wrote sft[i] SFT lines and `steps` train
    lines, each global_step right (repeats: a rollback ran steps again). */
static void s_check_run(const char *dir, const char *const *names, const int *sft, int n_names,
                        int steps, bool repeats) {
    s_variant v[S_MAX_VARIANTS];
    int n = 0;
    CHECK(s_read(dir, -1, repeats, v, &n) > 0);
    CHECK(n == n_names);
    for (int i = 0; i < n_names; i++) {
        int n1 = n;
        s_variant *x = s_find(v, &n1, names[i]);
        CHECK(n1 == n); /* it was there */
        if (!x)
            continue;
        CHECK(x->ok);
        CHECK(x->sft_lines == sft[i]);
        CHECK(x->train_lines == steps);
        if (x->sft_lines != sft[i] || x->train_lines != steps)
            fprintf(stderr, "%s: variant %s: %d sft and %d train lines\n", dir, names[i],
                    x->sft_lines, x->train_lines);
    }
}

/*  state.json's field, as a number (NaN when absent). */
static double s_state_field(const char *path, const char *key) {
    char *text = NULL;
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK)
        return NAN;
    cJSON *j = cJSON_Parse(text);
    double x = s_num(j, key);
    cJSON_Delete(j);
    free(text);
    return x;
}

/*  Every checkpoint's state.json (a variant's in its folder NAME/ when names are given) holds as
    global_step the count of that variant's train and sft lines in the metrics.jsonl bytes it
    keeps (metrics_size). */
static void s_check_checkpoints(const char *dir, const char *const *names, int n_names) {
    char ckpt[256];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    DIR *d = opendir(ckpt);
    int checked = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        if (strncmp(e->d_name, "step-", 5) != 0)
            continue;
        for (int i = 0; i < (n_names ? n_names : 1); i++) {
            char state[1024];
            if (n_names)
                snprintf(state, sizeof state, "%s/%s/%s/state.json", ckpt, e->d_name, names[i]);
            else
                snprintf(state, sizeof state, "%s/%s/state.json", ckpt, e->d_name);
            double g = s_state_field(state, "global_step");
            double size = s_state_field(state, "metrics_size");
            s_variant v[S_MAX_VARIANTS];
            int n = 0;
            s_read(dir, (int64_t)size, false, v, &n);
            s_variant *x = s_find(v, &n, n_names ? names[i] : "main");
            CHECK(x && g == x->sft_lines + x->train_lines);
            if (x && g != x->sft_lines + x->train_lines)
                fprintf(stderr, "%s: global_step %g, %d lines before it\n", state, g,
                        x->sft_lines + x->train_lines);
            checked++;
        }
    }
    if (d)
        closedir(d);
    CHECK(checked > 0);
}

/*  Runs config in dir, killed with SIGKILL once it wrote train step 7 with a checkpoint behind
    it, then resumed to the end. */
static void s_run_killed(const char *config, const char *dir) {
    const char *args[] = {"run", config, "--run-dir", dir, NULL, NULL};
    pid_t pid = runs_spawn(args);
    while (runs_alive(pid) && (runs_last_step(dir, NULL) < 7 || runs_latest(dir) < 4))
        runs_sleep_ms(2);
    CHECK(runs_alive(pid)); /* killed before it finished */
    runs_kill(pid);
    args[4] = "--resume";
    CHECK(runs_wait(runs_spawn(args)) == 0);
    char path[256];
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK(runs_file_has(path, "\"event\":\"resumed\""));
}

/*  The newest checkpoint's global_step set to text (a resume is then refused before anything
    starts, exit 2, saying which field and what it got), then put back. */
static void s_check_refused(const char *config, const char *dir, const char *text,
                            const char *want) {
    char folder[256], to[64], cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s/model", dir); /* a finished run has nothing to resume */
    CHECK(system(cmd) == 0);
    snprintf(folder, sizeof folder, "%s/ckpt/step-%08d", dir, runs_latest(dir));
    snprintf(to, sizeof to, "\"global_step\":\t%s,\"was\":\t", text);
    runs_edit_state(folder, "state.json", "\"global_step\":\t", to);
    const char *bin = getenv("BATON_BIN") ? getenv("BATON_BIN") : "./baton";
    snprintf(cmd, sizeof cmd, "%s run %s --run-dir %s --resume 2>&1", bin, config, dir);
    CHECK(runs_capture(cmd, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, want);
    runs_edit_state(folder, "state.json", to, "\"global_step\":\t");
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_global_step_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char single[128], variants[128], dir[128];
    snprintf(single, sizeof single, "%s/single.json", s_tmp);
    snprintf(variants, sizeof variants, "%s/variants.json", s_tmp);
    CHECK_OK(bt_file_write(single, s_single, strlen(s_single)));
    CHECK_OK(bt_file_write(variants, s_variants, strlen(s_variants)));

    /* one policy: 3 SFT lines then 14 train lines, global_step 1..17, killed and resumed */
    const char *main_name[] = {"main"};
    const int main_sft[] = {3};
    snprintf(dir, sizeof dir, "%s/single", s_tmp);
    s_run_killed(single, dir);
    s_check_run(dir, main_name, main_sft, 1, 14, false);
    s_check_checkpoints(dir, NULL, 0);
    s_check_refused(single, dir, "-3",
                    "state.json.global_step: expected an integer in [0, 9007199254740992], got -3");
    s_check_refused(single, dir, "\"17\"",
                    "state.json.global_step: expected an integer in [0, "
                    "9007199254740992], got a value that is not a number");

    /* a NaN update at step 6 rolls back to the snapshot after SFT (no checkpoints: snapshots
       every 10 steps): the lines of steps 1-5 stay, the steps run again, and global_step counts
       on over them, 3 SFT + 5 + 14 train lines */
    snprintf(dir, sizeof dir, "%s/rollback", s_tmp);
    const char *rollback[] = {"run",       single,
                              "--run-dir", dir,
                              "--set",     "debug.inject_nan_at_step=6",
                              "--set",     "checkpoint.full_every_steps=0",
                              NULL};
    CHECK(runs_wait(runs_spawn(rollback)) == 0);
    char events[256];
    snprintf(events, sizeof events, "%s/events.jsonl", dir);
    CHECK(runs_file_has(events, "\"event\":\"rollback\",\"time\""));
    CHECK(runs_file_has(events, "\"to_step\":0,"));
    s_check_run(dir, main_name, main_sft, 1, 5 + 14, true);

    /* variants, each counting its own; killed and resumed too */
    const char *names[] = {"base", "more_sft", "shared"};
    const int sft[] = {3, 5, 3};
    snprintf(dir, sizeof dir, "%s/variants", s_tmp);
    s_run_killed(variants, dir);
    s_check_run(dir, names, sft, 3, 14, false);
    s_check_checkpoints(dir, names, 3);

    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
