/*  test_eval_run.c — evaluation during a training run of the demo config (configs/arith.json,
    scaled down), with 2 eval workers and several datasets: eval lines for every dataset at exactly
    the configured trigger steps, each pinned to the policy version of its step; training steps
    keep being written while evaluations run; perplexity is the same with 1, 2 or 3 eval workers
    (shards) to 1e-12 relative; the run leaves its policy in RUN_DIR/model and a report. */
#define _DEFAULT_SOURCE
#include "baton/baton.h"
#include "baton/config.h"
#include "baton/fileio.h"
#include "baton/report.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { S_STEPS = 12, S_MAX_LINES = 512 };

static char s_tmp[64];

/*  The demo config with a small model, a short run and the evaluation under test. */
static char *s_config(int eval_workers, const char *eval) {
    char path[1024], *text = NULL;
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/configs/arith.json", src ? src : ".");
    CHECK_OK(bt_file_read(path, 1 << 20, &text, NULL));
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(root != NULL);
    if (!root)
        return NULL;
    const char *replace[][2] = {
        {"model", "{\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
                  " \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
                  " \"max_position_embeddings\": 96}"},
        {"sft", "{\"steps\": 10, \"batch_size\": 32, \"lr\": 0.003}"},
        {"eval", "{\"every_steps\": 3, \"heldout_count\": 200, \"max_new_tokens\": 32,"
                 " \"datasets\": [{\"name\": \"heldout\", \"robustness\": true},"
                 "  {\"name\": \"answers_ppl\", \"kind\": \"perplexity\", \"every_steps\": 4}],"
                 " \"probes\": [{\"name\": \"sum\", \"prompt\": \"12+7=\", \"target\": \"19\"},"
                 "  {\"name\": \"carry\", \"better\": \"58+67=125\", \"worse\": \"58+67=115\"}]}"},
    };
    for (size_t i = 0; i < sizeof replace / sizeof *replace; i++)
        cJSON_ReplaceItemInObject(root, replace[i][0], cJSON_Parse(replace[i][1]));
    cJSON *grpo = cJSON_GetObjectItem(root, "grpo"),
          *workers = cJSON_GetObjectItem(root, "workers");
    cJSON_ReplaceItemInObject(grpo, "steps", cJSON_CreateNumber(S_STEPS));
    cJSON_ReplaceItemInObject(grpo, "prompts_per_step", cJSON_CreateNumber(8));
    cJSON_ReplaceItemInObject(grpo, "group_size", cJSON_CreateNumber(4));
    cJSON_ReplaceItemInObject(grpo, "max_new_tokens", cJSON_CreateNumber(4));
    /* every step updates; a reward for answering with a bare number moves the policy */
    cJSON_ReplaceItemInObject(grpo, "dynamic_sampling", cJSON_CreateFalse());
    cJSON_AddNumberToObject(cJSON_GetObjectItem(root, "task"), "format_reward", 0.5);
    cJSON_ReplaceItemInObject(workers, "eval", cJSON_CreateNumber(eval_workers));
    if (eval)
        cJSON_ReplaceItemInObject(root, "eval", cJSON_Parse(eval));
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static void s_run(const char *dir, int eval_workers, const char *eval, bt_reward_fn *reward,
                  void *user, const char *set) {
    char *cfg = s_config(eval_workers, eval);
    bt_run_t *run = cfg ? bt_run_new(cfg, "arith.json (scaled)", &set, set ? 1 : 0) : NULL;
    free(cfg);
    CHECK(run != NULL);
    if (!run) {
        fprintf(stderr, "%s\n", bt_last_error());
        return;
    }
    bt_run_set_dir(run, dir);
    if (reward)
        bt_run_set_reward(run, reward, user);
    CHECK_OK(bt_run_start(run));
    bool done = false;
    for (int steps = 0; !done && steps < 100; steps++)
        CHECK_OK(bt_run_step(run, &done));
    CHECK(done);
    CHECK_OK(bt_run_finish(run));
    bt_run_destroy(&run);
}

/*  metrics.jsonl as parsed lines, in file order. */
static int s_lines(const char *dir, cJSON **lines) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    int n = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l && n < S_MAX_LINES; l = strtok(NULL, "\n"))
        lines[n++] = cJSON_Parse(l);
    free(text);
    return n;
}

static const char *s_str(const cJSON *j, const char *key) {
    return cJSON_GetStringValue(cJSON_GetObjectItem(j, key));
}
static double s_num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/*  Eval lines of dataset at each step: steps[i] for i < n (sorted), one line each. */
static void s_check_steps(cJSON **lines, int n, const char *dataset, const int *want, int n_want) {
    int seen[S_STEPS + 1] = {0};
    for (int i = 0; i < n; i++)
        if (!strcmp(s_str(lines[i], "kind"), "eval") &&
            !strcmp(s_str(lines[i], "dataset"), dataset))
            seen[(int)s_num(lines[i], "step")]++;
    int expected[S_STEPS + 1] = {0};
    for (int i = 0; i < n_want; i++)
        expected[want[i]] = 1;
    for (int s = 0; s <= S_STEPS; s++)
        if (seen[s] != expected[s]) {
            fprintf(stderr, "dataset %s step %d: %d eval lines, want %d\n", dataset, s, seen[s],
                    expected[s]);
            CHECK(seen[s] == expected[s]);
        }
}

/*  The perplexity of answers_ppl at each step, NaN where none. */
static void s_perplexities(const char *dir, double *ppl) {
    cJSON *lines[S_MAX_LINES];
    int n = s_lines(dir, lines);
    for (int s = 0; s <= S_STEPS; s++)
        ppl[s] = NAN;
    for (int i = 0; i < n; i++) {
        const char *d = s_str(lines[i], "dataset");
        if (d && !strcmp(d, "answers_ppl"))
            ppl[(int)s_num(lines[i], "step")] = s_num(lines[i], "perplexity");
        cJSON_Delete(lines[i]);
    }
}

static void test_two_workers_three_datasets(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/two", s_tmp);
    s_run(dir, 2, NULL, NULL, NULL, NULL);
    cJSON *lines[S_MAX_LINES];
    int n = s_lines(dir, lines);
    /* the configured triggers: every 3 steps, every 4 for perplexity, probes inherit 3; plus the
       start and the last step */
    const int every3[] = {0, 3, 6, 9, 12}, every4[] = {0, 4, 8, 12};
    s_check_steps(lines, n, "heldout", every3, 5);
    s_check_steps(lines, n, "answers_ppl", every4, 4);
    s_check_steps(lines, n, "probes", every3, 5);
    /* pinned: an eval line's version is the policy version right after its step */
    double version_after[S_STEPS + 1] = {0};
    for (int i = 0; i < n; i++)
        if (!strcmp(s_str(lines[i], "kind"), "train"))
            version_after[(int)s_num(lines[i], "step")] = s_num(lines[i], "version");
    version_after[0] = version_after[1] - 1; /* RL starts where SFT ended */
    CHECK(version_after[0] == 10);
    int evals = 0, overtaken = 0, max_train_step = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *l = lines[i];
        if (!strcmp(s_str(l, "kind"), "train"))
            max_train_step = (int)s_num(l, "step");
        if (strcmp(s_str(l, "kind"), "eval") != 0)
            continue;
        evals++;
        int step = (int)s_num(l, "step");
        CHECK(s_num(l, "version") == version_after[step]);
        /* training went on while this evaluation ran: a later step was written before it */
        overtaken += max_train_step > step;
        const char *d = s_str(l, "dataset");
        if (!strcmp(d, "heldout")) {
            CHECK(s_num(l, "examples") == 200 && s_num(l, "shards") == 2);
            CHECK(s_num(l, "accuracy") >= 0 && s_num(l, "accuracy") <= 1);
            CHECK(s_num(l, "robust.spacing") >= 0 && s_num(l, "robust.order") >= 0 &&
                  s_num(l, "robust.distractor") >= 0);
            CHECK(s_num(l, "response_len_p50") <= s_num(l, "response_len_p90"));
            CHECK(s_num(l, "response_len_p90") <= 32 && s_num(l, "tokens_per_s") > 0);
            CHECK(s_num(l, "peak_rss_mb") > 0 && s_num(l, "eval_s") > 0);
        } else if (!strcmp(d, "answers_ppl")) {
            double ppl = s_num(l, "perplexity"), nll = s_num(l, "nll_per_token");
            CHECK_REL(ppl, exp(nll), 1e-9);
            CHECK(s_num(l, "texts") == 200 && s_num(l, "tokens") >= 600); /* >= 2 digits + EOS */
        } else {
            CHECK(!strcmp(d, "probes"));
            CHECK(s_num(l, "probe.sum.logp") < 0);
            double ok = s_num(l, "pair.carry.ok");
            CHECK(ok == 0 || ok == 1);
            CHECK(s_num(l, "pairs_accuracy") == ok);
        }
    }
    CHECK(evals == 5 + 4 + 5);
    CHECK(overtaken > 0);
    fprintf(stderr, "%d of %d eval lines were written after a later training step\n", overtaken,
            evals);
    for (int i = 0; i < n; i++)
        cJSON_Delete(lines[i]);
    /* the final policy, as a model directory */
    char path[256];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model/model.safetensors", dir);
    CHECK(stat(path, &sb) == 0 && sb.st_size > 0);
    snprintf(path, sizeof path, "%s/model/config.json", dir);
    CHECK(stat(path, &sb) == 0);
    /* and a report of it */
    const char *dirs[] = {dir};
    snprintf(path, sizeof path, "%s/report.html", dir);
    CHECK_OK(bt_report_write(dirs, 1, path, NAN));
    char *html = NULL;
    CHECK_OK(bt_file_read(path, 1 << 26, &html, NULL));
    /* the page's data carries the fields its charts draw (docs/architecture.md, "The report") */
    const char *fields[] = {"\"accuracy\":[", "\"perplexity\":[", "\"robust.", "\"probe.",
                            "\"reward_mean\":["};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        CHECK(html && strstr(html, fields[i]));
    free(html);
}

/*  Perplexity sums are float64 over fixed 16-text batches, so the shard count does not matter. */
static void test_perplexity_across_shards(void) {
    double ppl[3][S_STEPS + 1];
    for (int w = 1; w <= 3; w += 2) {
        char dir[128];
        snprintf(dir, sizeof dir, "%s/w%d", s_tmp, w);
        s_run(dir, w, NULL, NULL, NULL, NULL);
        s_perplexities(dir, ppl[w - 1]);
    }
    char dir[128];
    snprintf(dir, sizeof dir, "%s/two", s_tmp);
    s_perplexities(dir, ppl[1]);
    int compared = 0;
    for (int s = 0; s <= S_STEPS; s++) {
        if (isnan(ppl[0][s]))
            continue;
        CHECK_REL(ppl[0][s], ppl[1][s], 1e-12);
        CHECK_REL(ppl[0][s], ppl[2][s], 1e-12);
        compared++;
    }
    CHECK(compared == 4);
    CHECK(ppl[0][0] != ppl[0][12]); /* the policy changed between them */
}

/*  Scaling-law predictions in a run: a perplexity dataset evaluated every step; from the 4th
    held-out loss on, each evaluation fits the law and predicts the loss at the last step (a
    `scaling_prediction` event), and the last step's evaluation settles every prediction: a
    `scaling_error` event each, whose error is (predicted - measured) / measured with the loss
    the eval line reports. */
static void test_scaling_predictions(void) {
    char dir[128], path[256], *events = NULL;
    snprintf(dir, sizeof dir, "%s/scaling", s_tmp);
    s_run(dir, 1,
          "{\"every_steps\": 1, \"heldout_count\": 20,"
          " \"datasets\": [{\"name\": \"ppl\", \"kind\": \"perplexity\"}]}",
          NULL, NULL, "scaling.enabled=true");
    cJSON *lines[S_MAX_LINES];
    int n = s_lines(dir, lines);
    double final_nll = NAN;
    for (int i = 0; i < n; i++)
        if (!strcmp(s_str(lines[i], "kind"), "eval") && s_num(lines[i], "step") == S_STEPS)
            final_nll = s_num(lines[i], "nll_per_token");
    for (int i = 0; i < n; i++)
        cJSON_Delete(lines[i]);
    CHECK(isfinite(final_nll));
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    int predictions = 0, settled = 0;
    double predicted[S_STEPS + 1];
    for (char *l = events ? strtok(events, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *e = cJSON_Parse(l);
        const char *kind = s_str(e, "event");
        if (kind && !strcmp(kind, "scaling_prediction")) {
            int step = (int)s_num(e, "step");
            CHECK(step == 4 + predictions && s_num(e, "points") == step);
            CHECK(s_num(e, "target") == S_STEPS && isfinite(s_num(e, "predicted")));
            CHECK(s_num(e, "L0") >= 0 && s_num(e, "A") >= 0 && s_num(e, "C") >= 0);
            predicted[step] = s_num(e, "predicted");
            predictions++;
        } else if (kind && !strcmp(kind, "scaling_error")) {
            int made = (int)s_num(e, "made_at");
            CHECK(made >= 4 && made < S_STEPS && s_num(e, "measured") == final_nll);
            CHECK(s_num(e, "predicted") == predicted[made]);
            CHECK_REL(s_num(e, "error"), (predicted[made] - final_nll) / final_nll, 1e-12);
            settled++;
        }
        cJSON_Delete(e);
    }
    CHECK(predictions == S_STEPS - 4 && settled == predictions);
    free(events);
}

/*  Adaptive triggers in a run: the accuracy of a policy that cannot add yet stays flat, so the
    interval doubles (a plateau), written as events with their reason; training never waits. */
static void test_adaptive(void) {
    char dir[128], path[256], *events = NULL;
    snprintf(dir, sizeof dir, "%s/adaptive", s_tmp);
    /* one greedy dataset every 2 steps, adapting */
    s_run(dir, 1,
          "{\"every_steps\": 2, \"heldout_count\": 50, \"adaptive\": true,"
          " \"adaptive_ceiling\": 8}",
          NULL, NULL, NULL);
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    int doubled = 0;
    for (char *l = events ? strtok(events, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *e = cJSON_Parse(l);
        const char *kind = s_str(e, "event");
        if (kind && !strcmp(kind, "eval_interval")) {
            CHECK(!strcmp(s_str(e, "dataset"), "heldout"));
            const char *reason = s_str(e, "reason");
            CHECK(reason && strstr(reason, "plateau"));
            CHECK(s_num(e, "new") == 2 * s_num(e, "old") && s_num(e, "new") <= 8);
            doubled++;
        }
        cJSON_Delete(e);
    }
    free(events);
    CHECK(doubled >= 1);
    cJSON *lines[S_MAX_LINES];
    int n = s_lines(dir, lines), evals = 0, trains = 0;
    for (int i = 0; i < n; i++) {
        evals += !strcmp(s_str(lines[i], "kind"), "eval");
        trains += !strcmp(s_str(lines[i], "kind"), "train");
        cJSON_Delete(lines[i]);
    }
    CHECK(trains == S_STEPS);
    CHECK(evals >= 2 && evals < 1 + S_STEPS / 2 + 1); /* fewer than fixed every-2 would give */
}

/*  A host reward function that is slow on one eval worker's thread: the first eval thread to
    call is fast, any other sleeps 2 ms per completion (a slow reward service). */
typedef struct {
    pthread_mutex_t lock;
    bt_source_t *task; /* tells held-out (evaluation) prompts from training ones */
    pthread_t fast;
    bool have_fast;
} s_slow;

static double s_slow_reward(const char *prompt, const char *completion, size_t len,
                            const char *answer, void *user) {
    (void)completion;
    (void)len;
    (void)answer;
    s_slow *s = user;
    bool heldout = false;
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (size_t i = 0; i < bt_source_heldout_count(s->task) && !heldout; i++)
        heldout =
            bt_source_heldout_example(s->task, i, &ex) == BT_OK && strcmp(ex.prompt, prompt) == 0;
    bt_source_example_release(&ex);
    if (!heldout)
        return 0.0;
    pthread_mutex_lock(&s->lock);
    if (!s->have_fast) {
        s->fast = pthread_self();
        s->have_fast = true;
    }
    bool slow = !pthread_equal(s->fast, pthread_self());
    pthread_mutex_unlock(&s->lock);
    if (slow)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    return 0.0;
}

/*  After the first evaluation has measured both eval workers, the slow one gets the smaller
    shard, so it does not hold the evaluation back. */
static void test_slow_worker(void) {
    s_slow slow = {.lock = PTHREAD_MUTEX_INITIALIZER};
    bt_source_arith_config tc; /* the demo's task */
    bt_source_arith_config_init(&tc);
    tc.digits = 2;
    tc.operators = "+";
    tc.heldout_size = 200;
    CHECK_OK(bt_source_new_arith(&tc, &slow.task));
    char dir[128];
    snprintf(dir, sizeof dir, "%s/slow", s_tmp);
    s_run(dir, 2, "{\"every_steps\": 10, \"heldout_count\": 200, \"max_new_tokens\": 4}",
          s_slow_reward, &slow, "grpo.steps=40");
    cJSON *lines[S_MAX_LINES];
    int n = s_lines(dir, lines), evals = 0, measured = 0;
    double first_done = INFINITY; /* when the first evaluation, which measured both, finished */
    for (int i = 0; i < n; i++) {
        const cJSON *l = lines[i];
        if (strcmp(s_str(l, "kind"), "eval") != 0)
            continue;
        long a = 0, b = 0;
        CHECK(sscanf(s_str(l, "shard_items"), "%ld,%ld", &a, &b) == 2 && a + b == 200);
        double started = s_num(l, "time") - s_num(l, "eval_s");
        if (s_num(l, "step") == 0) {
            CHECK(a == 100 && b == 100); /* nothing measured yet: an even split */
            first_done = s_num(l, "time");
        } else if (started > first_done) { /* speeds known: the slow worker gets less */
            CHECK((a > b ? a : b) >= 140);
            measured++;
        }
        evals++;
    }
    for (int i = 0; i < n; i++)
        cJSON_Delete(lines[i]);
    CHECK(evals == 5); /* steps 0, 10, 20, 30, 40 */
    CHECK(measured >= 2);
    bt_source_destroy(&slow.task);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_eval_run_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_two_workers_three_datasets();
    test_perplexity_across_shards();
    test_adaptive();
    test_scaling_predictions();
    test_slow_worker();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
