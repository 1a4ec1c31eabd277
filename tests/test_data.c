/*  test_data.c — a run drawing from three sources (two JSONL files, one with its own verifier, and
    the arithmetic stream) by weight: train lines report each source, each source has its own
    held-out eval lines, and every training record of every completed epoch of a JSONL source is
    trained exactly once (counted by record, through a task the test builds itself) — in an
    uninterrupted run, and in one killed twice with SIGKILL and resumed, the first time with twice
    the rollout workers, whose steps train exactly the same prompts. */
#define _DEFAULT_SOURCE
#include "baton/baton.h"
#include "baton/rollout.h"
#include "baton/source.h"

#include "check.h"
#include "runs.h"

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_STEPS 24
#define S_PER_STEP 6
#define S_MAX_IDS 2048 /* drawn indices of one source, dropped ones included */

static char s_tmp[64];

static const char s_json[] =
    "{\"run\": {\"name\": \"d\", \"seed\": 5},"
    RUNS_MODEL_TINY
    " \"task\": {\"digits\": 1},"
    " \"data\": {\"sources\": ["
    "  {\"name\": \"a\", \"kind\": \"jsonl\", \"path\": \"%s/a.jsonl\", \"weight\": 2},"
    "  {\"name\": \"b\", \"kind\": \"jsonl\", \"path\": \"%s/b.jsonl\", \"verifier\": \"numeric\"},"
    "  {\"name\": \"c\", \"kind\": \"arithmetic\", \"digits\": 1, \"heldout_size\": 10}]},"
    " \"grpo\": {\"steps\": 24, \"group_size\": 2, \"prompts_per_step\": 6, \"max_new_tokens\": 3},"
    " \"eval\": {\"every_steps\": 8, \"heldout_count\": 4},"
    " \"checkpoint\": {\"full_every_steps\": 5, \"full_every_epochs\": 1, \"keep_last\": 3},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50},"
    " \"debug\": {\"log_prompts\": true}}";

static void s_write_jsonl(const char *name, int n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", s_tmp, name);
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < n; i++)
        fprintf(f, "{\"prompt\": \"%d+%d=\", \"answer\": \"%d\"}\n", i % 10, i / 10,
                i % 10 + i / 10);
    if (f)
        fclose(f);
}

/*  The prompt ids each step trained: the last "trained" event of each step (a resumed run
    repeats the steps after its checkpoint, and the repeat is what counts). */
typedef struct {
    uint64_t ids[S_STEPS + 1][S_PER_STEP];
    uint64_t correct[S_STEPS + 1][S_PER_STEP]; /* correct samples of each group */
    int n[S_STEPS + 1];
    uint64_t dropped[S_STEPS + 1][256]; /* with data.curriculum: what each step's draws dropped */
    int n_dropped[S_STEPS + 1];
} s_trained;

static void s_read_trained(const char *dir, s_trained *t) {
    memset(t, 0, sizeof *t);
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 26, &text, NULL));
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *ev = cJSON_GetObjectItem(j, "event"), *step = cJSON_GetObjectItem(j, "step");
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "dropped") && cJSON_IsNumber(step) &&
            step->valueint >= 1 && step->valueint <= S_STEPS) {
            int s = step->valueint;
            t->n_dropped[s] = 0;
            const cJSON *id;
            cJSON_ArrayForEach(id, cJSON_GetObjectItem(j, "prompts")) {
                if (t->n_dropped[s] < 256)
                    t->dropped[s][t->n_dropped[s]] = (uint64_t)id->valuedouble;
                t->n_dropped[s]++;
            }
        }
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "trained") && cJSON_IsNumber(step) &&
            step->valueint >= 1 && step->valueint <= S_STEPS) {
            int s = step->valueint;
            t->n[s] = 0;
            const cJSON *id;
            cJSON_ArrayForEach(id, cJSON_GetObjectItem(j, "prompts")) {
                if (t->n[s] < S_PER_STEP)
                    t->ids[s][t->n[s]] = (uint64_t)id->valuedouble;
                t->n[s]++;
            }
            int k = 0;
            cJSON_ArrayForEach(id, cJSON_GetObjectItem(j, "correct")) {
                if (k < S_PER_STEP)
                    t->correct[s][k] = (uint64_t)id->valuedouble;
                k++;
            }
        }
        cJSON_Delete(j);
    }
    free(text);
}

/*  The epoch source ("a", 34 training records) ends an epoch at the step whose draws take its
    count past 34, 68, ...: one epoch_end event there, and (with checkpoint.full_every_epochs 1
    the only checkpoints) one full checkpoint per epoch, at that step or, when the previous save
    was still in flight, a later one before the next epoch ends. */
static void s_check_epochs(const char *dir, const s_trained *t) {
    int want[8], n_want = 0, drawn = 0;
    for (int s = 1; s <= S_STEPS; s++) {
        int before = drawn;
        for (int i = 0; i < t->n[s] && i < S_PER_STEP; i++)
            drawn += BT_PROMPT_SOURCE(t->ids[s][i]) == 0;
        if (drawn / 34 > before / 34 && n_want < 8)
            want[n_want++] = s;
    }
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 26, &text, NULL));
    int got[8], n_got = 0, saved[64], n_saved = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
        int step = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "step"));
        if (ev && !strcmp(ev, "epoch_end") && n_got < 8) {
            CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "epoch")) == n_got + 1);
            got[n_got++] = step;
        }
        if (ev && !strcmp(ev, "checkpoint_saved") && n_saved < 64)
            saved[n_saved++] = step;
        cJSON_Delete(j);
    }
    free(text);
    fprintf(stderr, "epochs of a end at steps %d and %d\n", n_want > 0 ? want[0] : -1,
            n_want > 1 ? want[1] : -1);
    CHECK(n_want == 2 && n_got == n_want && n_saved == n_want);
    for (int e = 0; e < n_got && e < n_want; e++) {
        CHECK(got[e] == want[e]);
        bool ckpt = false;
        for (int k = 0; k < n_saved; k++)
            ckpt |= saved[k] >= want[e] && saved[k] < (e + 1 < n_want ? want[e + 1] : S_STEPS + 1);
        CHECK(ckpt);
    }
}

/*  Source `source`'s drawn indices (trained, or dropped by the curriculum) are 0 .. m-1, each
    once, and (checked through the records a task built here gives) each completed epoch drew
    every record once. */
static void s_check_once(const s_trained *t, int source, const char *file, const char *what) {
    int count[S_MAX_IDS] = {0}, m = 0;
    for (int s = 1; s <= S_STEPS; s++) {
        CHECK(t->n[s] == S_PER_STEP);
        for (int i = 0; i < t->n[s] && i < S_PER_STEP; i++)
            if (BT_PROMPT_SOURCE(t->ids[s][i]) == source) {
                uint64_t index = BT_PROMPT_INDEX(t->ids[s][i]);
                CHECK(index < S_MAX_IDS);
                if (index < S_MAX_IDS)
                    count[index]++;
                m++;
            }
        for (int i = 0; i < t->n_dropped[s] && i < 256; i++)
            if (BT_PROMPT_SOURCE(t->dropped[s][i]) == source) {
                uint64_t index = BT_PROMPT_INDEX(t->dropped[s][i]);
                if (index < S_MAX_IDS)
                    count[index]++;
                m++;
            }
    }
    bool once = true;
    for (int i = 0; i < m; i++)
        once &= count[i] == 1;
    if (!once)
        fprintf(stderr, "%s: source %d: its %d trained indices are not 0..%d once each\n", what,
                source, m, m - 1);
    CHECK(once && m > 0);
    char path[128];
    snprintf(path, sizeof path, "%s/%s", s_tmp, file);
    bt_source_jsonl_config jc = {.train_path = path, .verifier = BT_SOURCE_VERIFY_EXACT, .seed = 0};
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_jsonl(&jc, &task));
    if (!task)
        return;
    uint64_t n = bt_source_epoch_size(task);
    int per_record[64] = {0};
    for (uint64_t e = 0; (e + 1) * n <= (uint64_t)m; e++) { /* completed epochs */
        memset(per_record, 0, sizeof per_record);
        for (uint64_t i = e * n; i < (e + 1) * n; i++)
            per_record[bt_source_record(task, i)]++;
        for (uint64_t r = 0; r < n; r++)
            CHECK(per_record[r] == 1);
    }
    fprintf(stderr, "%s: source %d trained %d prompts, %llu epochs of %llu records complete\n",
            what, source, m, (unsigned long long)(m / n), (unsigned long long)n);
    bt_source_destroy(&task);
}

/*  The highest train step in DIR/metrics.jsonl (read as text: the run may be writing a line). */
static int s_last_step(const char *dir) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return 0;
    int best = 0;
    const char *key = "{\"kind\":\"train\",\"step\":";
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        int step = atoi(p + strlen(key));
        best = step > best ? step : best;
    }
    free(text);
    return best;
}

/*  Starts `baton run CONFIG --run-dir DIR [extra ...]` (extra NULL-terminated, at most 8). */
static pid_t s_start(const char *config, const char *dir, const char *const *extra) {
    const char *args[14] = {"run", config, "--run-dir", dir};
    for (int i = 0, n = 4; extra && extra[i] && n < 13; i++)
        args[n++] = extra[i];
    char log[160];
    snprintf(log, sizeof log, "%s.log", dir);
    return runs_spawn_in(NULL, args, log);
}

/*  SIGKILL once the run has written train step `step` and a checkpoint after step `after` is
    verified (saves run in the background); the last step written by then. */
static int s_kill_at(pid_t pid, const char *dir, int step, int after) {
    char latest[256];
    snprintf(latest, sizeof latest, "%s/ckpt/LATEST", dir);
    for (;;) {
        char *text = NULL;
        int saved = bt_file_read(latest, 256, &text, NULL) == BT_OK ? atoi(text + 5) : -1;
        free(text);
        if (waitpid(pid, NULL, WNOHANG) != 0 || (s_last_step(dir) >= step && saved > after))
            break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return s_last_step(dir);
}

/*  The host's reward: prompts of source "ma" ("A<n>") are always right, of "mb" never. */
static double s_reward(const char *prompt, const char *completion, size_t len, const char *answer,
                       void *user) {
    (void)completion, (void)len, (void)answer, (void)user;
    return prompt[0] == 'A' ? 1.0 : 0.0;
}

/*  The tuner's mixture rule steers the draws: "mb" lags, so its weight grows each window by
    exp(rate * 0.5) up to max_weight (tuner events name the source), the train lines show the
    weights that drew each step, and the later steps draw "mb" as often as those weights say. */
static void test_mixture_rule(void) {
    char path[256], json[2048], dir[160];
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/m%c.jsonl", s_tmp, "ab"[k]);
        FILE *f = fopen(path, "w");
        for (int i = 0; f && i < 40; i++)
            fprintf(f, "{\"prompt\": \"%c%d\", \"answer\": \"x\"}\n", "AB"[k], i);
        if (f)
            fclose(f);
    }
    snprintf(
        json, sizeof json,
        "{\"run\": {\"name\": \"m\", \"seed\": 2},"
        " \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
        "  \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"max_position_embeddings\": "
        "64},"
        " \"data\": {\"sources\": [{\"name\": \"ma\", \"kind\": \"jsonl\", \"path\": "
        "\"%s/ma.jsonl\"},"
        "  {\"name\": \"mb\", \"kind\": \"jsonl\", \"path\": \"%s/mb.jsonl\"}]},"
        " \"grpo\": {\"steps\": 12, \"group_size\": 2, \"prompts_per_step\": 6, "
        "\"max_new_tokens\": 2},"
        " \"eval\": {\"every_steps\": 0, \"heldout_count\": 2},"
        " \"tuner\": {\"mixture\": {\"enabled\": true, \"every_steps\": 2, \"rate\": 1,"
        "  \"min_weight\": 0.2, \"max_weight\": 3}},"
        " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1},"
        " \"debug\": {\"log_prompts\": true}}",
        s_tmp, s_tmp);
    snprintf(dir, sizeof dir, "%s/mixture", s_tmp);
    bt_run_t *run = bt_run_new(json, "mixture.json", NULL, 0);
    CHECK(run != NULL);
    if (!run) {
        fprintf(stderr, "%s\n", bt_last_error());
        return;
    }
    bt_run_set_dir(run, dir);
    bt_run_set_reward(run, s_reward, NULL);
    CHECK_OK(bt_run_start(run));
    bool done = false;
    for (int steps = 0; !done && steps < 50; steps++)
        CHECK_OK(bt_run_step(run, &done));
    CHECK_OK(bt_run_finish(run));
    bt_run_destroy(&run);

    /* the weights by hand: each window "ma" has accuracy 1, "mb" 0, mean 0.5 */
    double wa = 1, wb = 1, want_a[13], want_b[13];
    for (int s = 1; s <= 12; s++) {
        want_a[s] = wa, want_b[s] = wb; /* what drew step s */
        if (s % 2 == 0) {
            wa = fmax(0.2, wa * exp(-0.5));
            wb = fmin(3.0, wb * exp(0.5));
        }
    }
    char *metrics = runs_metrics(dir);
    int lines = 0;
    for (char *line = metrics ? strtok(metrics, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *kind = cJSON_GetObjectItem(j, "kind");
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "train")) {
            int s = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "step"));
            CHECK_NEAR(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "weight.ma")), want_a[s], 1e-12);
            CHECK_NEAR(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "weight.mb")), want_b[s], 1e-12);
            CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "accuracy.ma")) == 1.0 ||
                  cJSON_GetNumberValue(cJSON_GetObjectItem(j, "prompts.ma")) == 0);
            lines++;
        }
        cJSON_Delete(j);
    }
    CHECK(lines == 12);
    free(metrics);
    /* the decisions are events naming the source */
    char *events = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    CHECK(events && strstr(events, "\"rule\":\"mixture\"") &&
          strstr(events, "\"param\":\"weight\"") && strstr(events, "\"source\":\"mb\""));
    free(events);
    /* steps 7..12 were drawn at weights 0.223 : 3 (from step 7 on): mb's share is 0.93 */
    s_trained t;
    s_read_trained(dir, &t);
    int b = 0, n = 0;
    for (int s = 7; s <= 12; s++)
        for (int i = 0; i < t.n[s] && i < S_PER_STEP; i++, n++)
            b += BT_PROMPT_SOURCE(t.ids[s][i]) == 1;
    double p = want_b[7] / (want_a[7] + want_b[7]);
    CHECK(n == 36);
    CHECK_NEAR(b, n * p, 4 * sqrt(n * p * (1 - p)));
    fprintf(stderr, "mixture: steps 7-12 drew %d of %d from mb (expected %.1f)\n", b, n, n * p);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_data_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    s_write_jsonl("a.jsonl", 37); /* 34 training records (10, 20, 30 held out) */
    s_write_jsonl("b.jsonl", 23); /* 21 training records */
    char config[128], text[4096], ref[128], killed[128];
    snprintf(config, sizeof config, "%s/data.json", s_tmp);
    snprintf(text, sizeof text, s_json, s_tmp, s_tmp);
    FILE *f = fopen(config, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    snprintf(ref, sizeof ref, "%s/ref", s_tmp);
    snprintf(killed, sizeof killed, "%s/killed", s_tmp);

    /* uninterrupted */
    CHECK(runs_wait(s_start(config, ref, NULL)) == 0);
    s_trained a, b;
    s_read_trained(ref, &a);
    /* draws follow the weights 2:1:1 (each count within 4 binomial sigmas of 144 p) */
    int per_source[3] = {0};
    for (int s = 1; s <= S_STEPS; s++)
        for (int i = 0; i < a.n[s] && i < S_PER_STEP; i++)
            per_source[BT_PROMPT_SOURCE(a.ids[s][i]) % 3]++;
    const double p[3] = {0.5, 0.25, 0.25}, N = S_STEPS * S_PER_STEP;
    for (int k = 0; k < 3; k++)
        CHECK_NEAR(per_source[k], N * p[k], 4 * sqrt(N * p[k] * (1 - p[k])));
    s_check_once(&a, 0, "a.jsonl", "uninterrupted");
    s_check_once(&a, 1, "b.jsonl", "uninterrupted");
    char *metrics = runs_metrics(ref);
    CHECK(metrics != NULL);
    if (metrics) {
        int trains = 0, evals[3] = {0};
        for (char *line = strtok(metrics, "\n"); line; line = strtok(NULL, "\n")) {
            cJSON *j = cJSON_Parse(line);
            const cJSON *kind = cJSON_GetObjectItem(j, "kind");
            if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "train")) {
                trains++;
                double n = 0;
                for (const char *s = "abc"; *s; s++) {
                    char key[32];
                    snprintf(key, sizeof key, "prompts.%c", *s);
                    n += cJSON_GetNumberValue(cJSON_GetObjectItem(j, key));
                    snprintf(key, sizeof key, "accuracy.%c", *s);
                    CHECK(cJSON_GetObjectItem(j, key) != NULL);
                }
                CHECK(n == S_PER_STEP);
                double pad = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "padding"));
                CHECK(pad >= 0 && pad < 1); /* bucketed rows: some padding, never all */
            }
            const cJSON *src = cJSON_GetObjectItem(j, "source");
            if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "eval") && cJSON_IsString(src))
                evals[src->valuestring[0] - 'a' < 3 ? src->valuestring[0] - 'a' : 0]++;
            cJSON_Delete(j);
        }
        CHECK(trains == S_STEPS);
        CHECK(evals[0] > 0 && evals[1] > 0 && evals[2] > 0); /* each source's held-out set */
        free(metrics);
    }

    /* epochs: events and checkpoints at their ends */
    char epochs[128];
    snprintf(epochs, sizeof epochs, "%s/epochs", s_tmp);
    CHECK(runs_wait(s_start(config, epochs,
                            (const char *[]){"--set", "checkpoint.full_every_steps=0", NULL})) ==
          0);
    s_trained e;
    s_read_trained(epochs, &e);
    s_check_epochs(epochs, &e);

    /* killed at step 9, resumed with 2 rollout workers, killed at 17, resumed with 1; the killed
       runs go on to step 60 (the learning rate is constant, so their first 24 steps are the
       reference's), so the kills come before their end however slow this machine is */
    const char *const longer[] = {"--set", "grpo.steps=60", NULL};
    const char *const more_workers[] = {"--resume", "--set",         "workers.rollout=2",
                                        "--set",    "grpo.steps=60", NULL};
    const char *const resume[] = {"--resume", "--set", "grpo.steps=60", NULL};
    int k1 = s_kill_at(s_start(config, killed, longer), killed, 9, 0);
    int k2 = s_kill_at(s_start(config, killed, more_workers), killed, 17, k1 - k1 % 5);
    fprintf(stderr, "killed after step %d, then after step %d\n", k1, k2);
    CHECK(k1 < 60 && k2 < 60); /* both kills came before the end */
    CHECK(runs_wait(s_start(config, killed, resume)) == 0);
    s_read_trained(killed, &b);
    s_check_once(&b, 0, "a.jsonl", "killed twice");
    s_check_once(&b, 1, "b.jsonl", "killed twice");
    bool same = true;
    for (int s = 1; s <= S_STEPS; s++) {
        /* the same prompts, whatever the sharding over rollout workers */
        for (int i = 0; i < S_PER_STEP; i++) {
            bool found = false;
            for (int j = 0; j < S_PER_STEP; j++)
                found |= a.ids[s][i] == b.ids[s][j];
            same &= found && a.n[s] == b.n[s];
        }
    }
    CHECK(same);

    /* the curriculum (window 1): a JSONL record whose group failed every sample is dropped when
       drawn in a later step (never trained again), and the epochs still move on */
    char curr[128];
    snprintf(curr, sizeof curr, "%s/curriculum", s_tmp);
    CHECK(runs_wait(s_start(config, curr,
                            (const char *[]){"--set", "data.curriculum.window=1", NULL})) == 0);
    s_trained c;
    s_read_trained(curr, &c);
    s_check_once(&c, 0, "a.jsonl", "curriculum");
    s_check_once(&c, 1, "b.jsonl", "curriculum");
    int n_dropped = 0, failed_at[64] = {0};
    bt_source_jsonl_config jc = {.train_path = NULL, .seed = 0};
    char path[128];
    snprintf(path, sizeof path, "%s/b.jsonl", s_tmp);
    jc.train_path = path;
    bt_source_t *tb = NULL;
    CHECK_OK(bt_source_new_jsonl(&jc, &tb));
    bool kept_out = true;
    for (int s = 1; s <= S_STEPS && tb; s++) {
        n_dropped += c.n_dropped[s];
        for (int i = 0; i < c.n[s] && i < S_PER_STEP; i++) {
            if (BT_PROMPT_SOURCE(c.ids[s][i]) != 1)
                continue;
            uint64_t r = bt_source_record(tb, BT_PROMPT_INDEX(c.ids[s][i]));
            if (failed_at[r] && failed_at[r] < s) {
                fprintf(stderr, "record %llu of b failed at step %d, trained again at step %d\n",
                        (unsigned long long)r, failed_at[r], s);
                kept_out = false;
            }
            if (c.correct[s][i] == 0 && !failed_at[r])
                failed_at[r] = s;
        }
    }
    fprintf(stderr, "curriculum: %d prompts dropped\n", n_dropped);
    CHECK(n_dropped > 0 && kept_out);
    bt_source_destroy(&tb);
    /* killed and resumed, the curriculum's streaks come back with the checkpoint: the same
       prompts are trained and dropped at every step */
    char curr_killed[128];
    snprintf(curr_killed, sizeof curr_killed, "%s/curriculum_killed", s_tmp);
    const char *const curr_longer[] = {"--set", "data.curriculum.window=1", "--set",
                                       "grpo.steps=60", NULL};
    const char *const curr_resume[] = {"--resume", "--set",         "data.curriculum.window=1",
                                       "--set",    "grpo.steps=60", NULL};
    CHECK(s_kill_at(s_start(config, curr_killed, curr_longer), curr_killed, 10, 4) < 60);
    CHECK(runs_wait(s_start(config, curr_killed, curr_resume)) == 0);
    s_trained ck;
    s_read_trained(curr_killed, &ck);
    bool same_curriculum = true;
    for (int s = 1; s <= S_STEPS; s++) {
        same_curriculum &= ck.n[s] == c.n[s] && ck.n_dropped[s] == c.n_dropped[s];
        for (int i = 0; i < c.n[s] && i < S_PER_STEP; i++)
            same_curriculum &= ck.ids[s][i] == c.ids[s][i];
        for (int i = 0; i < c.n_dropped[s] && i < 256; i++)
            same_curriculum &= ck.dropped[s][i] == c.dropped[s][i];
    }
    CHECK(same_curriculum);

    test_mixture_rule();

    if (s_check_failures) { /* the runs' own output says why */
        snprintf(text, sizeof text, "tail -n 5 %s/*.log >&2", s_tmp);
        CHECK(system(text) == 0);
    }
    snprintf(text, sizeof text, "rm -rf %s", s_tmp);
    CHECK(system(text) == 0);
    return check_exit();
}
