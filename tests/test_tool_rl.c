/*  test_tool_rl.c — issue 21's acceptance run: a task with a known optimum, where only the
    calculator gives the right answer.  Prompts "A*B=" (A three digits, B two) whose products the
    demo-sized model cannot learn in the run; SFT on demonstrations (task.demonstration_key) of
    which about a third are the tool episode ["<calc>A*B</calc>", "<result>P</result>", "P"] and
    the rest the direct answer "P"; then GRPO with task.env "calculator", task.max_turns 2.  The
    optimum is to call the tool every time.  The test writes its own JSONL (products computed
    here), runs baton, and reads the train lines of metrics.jsonl itself: the episode success
    rate (reward_mean: with env_reward "sum" and the calculator's zero turn rewards, the fraction
    of episodes whose last turn is the product) and the tool-call rate (turns_mean - 1 at
    max_turns 2: a turn without a call ends an episode) of the first RL steps, sampled from the
    policy SFT left, against the last ones.  Asserted: success rises from below 0.4 to above 0.45
    (by more than 0.25), and the tool-call rate rises with it, from below 0.6 to above 0.75 (by
    more than 0.25).  The held-out evaluations of the RL phase's start and end (50 examples,
    greedy episodes) say the same: accuracy above 0.7 at the end and up by more than 0.2, the
    share of episodes calling the tool above 0.85 and up by more than 0.2 (the committed seed:
    0.46 -> 0.92 and 0.56 -> 1.00).  Figures of the committed seed: docs/architecture.md. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/rng.h"
#include "check.h"
#include "runs.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char s_tmp[64];

#define S_TRAIN 3000
#define S_HELDOUT 50
#define S_RL_STEPS 15
#define S_WINDOW 3 /* steps averaged at each end */

/*  n records "A*B=" -> A*B, a fraction 0.35 demonstrated through the calculator, into path. */
static void s_write_jsonl(const char *path, int n, uint64_t seed) {
    uint64_t rng = seed;
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    for (int i = 0; i < n; i++) {
        long a = 100 + (long)(bt_rng_next(&rng) % 900), b = 10 + (long)(bt_rng_next(&rng) % 90);
        long p = a * b;
        bool tool = bt_rng_next(&rng) % 100 < 35;
        fprintf(f, "{\"prompt\": \"%ld*%ld=\", \"answer\": \"%ld\", \"demo\": ", a, b, p);
        if (tool)
            fprintf(f, "[\"<calc>%ld*%ld</calc>\", \"<result>%ld</result>\", \"%ld\"]}\n", a, b, p,
                    p);
        else
            fprintf(f, "\"%ld\"}\n", p);
    }
    fclose(f);
}

/*  The RL train lines' reward_mean and turns_mean by step (1-based, at most S_RL_STEPS). */
static int s_read_train(const char *dir, double *reward, double *turns) {
    char path[160], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    int seen = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const cJSON *kind = cJSON_GetObjectItem(j, "kind"), *step = cJSON_GetObjectItem(j, "step"),
                    *r = cJSON_GetObjectItem(j, "reward_mean"),
                    *t = cJSON_GetObjectItem(j, "turns_mean");
        /* SFT's train lines have no turns_mean: only RL steps count */
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "train") && cJSON_IsNumber(step) &&
            cJSON_IsNumber(r) && cJSON_IsNumber(t) && step->valueint >= 1 &&
            step->valueint <= S_RL_STEPS) {
            reward[step->valueint - 1] = r->valuedouble;
            turns[step->valueint - 1] = t->valuedouble;
            seen++;
        }
        cJSON_Delete(j);
    }
    free(text);
    return seen;
}

/*  The held-out evaluation of the RL phase at `step` (0: its start, S_RL_STEPS: its end): greedy
    episodes' accuracy and the share of them that called the tool; false when there is none. */
static bool s_read_eval(const char *dir, int step, double *accuracy, double *tool_episodes) {
    char path[160], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &text, NULL));
    bool found = false;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const cJSON *kind = cJSON_GetObjectItem(j, "kind"),
                    *phase = cJSON_GetObjectItem(j, "phase"), *at = cJSON_GetObjectItem(j, "step"),
                    *a = cJSON_GetObjectItem(j, "accuracy"),
                    *t = cJSON_GetObjectItem(j, "tool_episode_frac");
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "eval") && cJSON_IsString(phase) &&
            !strcmp(phase->valuestring, "rl") && cJSON_IsNumber(at) && at->valueint == step &&
            cJSON_IsNumber(a) && cJSON_IsNumber(t)) {
            *accuracy = a->valuedouble;
            *tool_episodes = t->valuedouble;
            found = true;
        }
        cJSON_Delete(j);
    }
    free(text);
    return found;
}

static double s_mean(const double *x, int lo, int hi) {
    double s = 0;
    for (int i = lo; i < hi; i++)
        s += x[i];
    return s / (hi - lo);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_toolrl_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char train[128], heldout[128], config[128], dir[128], log[160];
    snprintf(train, sizeof train, "%s/train.jsonl", s_tmp);
    snprintf(heldout, sizeof heldout, "%s/heldout.jsonl", s_tmp);
    snprintf(config, sizeof config, "%s/calc.json", s_tmp);
    snprintf(dir, sizeof dir, "%s/run", s_tmp);
    snprintf(log, sizeof log, "%s/run.log", s_tmp);
    s_write_jsonl(train, S_TRAIN, 11);
    s_write_jsonl(heldout, S_HELDOUT, 12);
    /* configs/calc_tools.json's model and task, shortened: SFT long enough to learn both formats
       (the tool's copy included), RL just long enough to show the rise */
    char json[4096];
    snprintf(json, sizeof json,
             "{\"run\": {\"name\": \"calc\", \"seed\": 1, \"log_every\": 5},"
             " \"model\": {\"vocab_size\": 259, \"hidden_size\": 128, \"intermediate_size\": 352,"
             "  \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
             "  \"max_position_embeddings\": 64},"
             " \"task\": {\"kind\": \"jsonl\", \"train\": \"%s\", \"eval\": \"%s\","
             "  \"verifier\": \"exact\", \"demonstration_key\": \"demo\", \"env\": \"calculator\","
             "  \"max_turns\": 2, \"max_episode_tokens\": 48},"
             " \"sft\": {\"steps\": 200, \"batch_size\": 64, \"lr\": 0.001, \"warmup_steps\": 20,"
             "  \"eval_every\": 0},"
             " \"grpo\": {\"steps\": %d, \"group_size\": 8, \"prompts_per_step\": 32,"
             "  \"temperature\": 1.0, \"max_new_tokens\": 20, \"lr\": 0.0005, \"kl_coef\": 0.0,"
             "  \"dynamic_sampling\": true, \"micro_batch\": 256, \"weight_decay\": 0.0},"
             " \"eval\": {\"every_steps\": 1000, \"heldout_count\": %d},"
             " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1}}",
             train, heldout, S_RL_STEPS, S_HELDOUT);
    CHECK_OK(bt_file_write(config, json, strlen(json)));
    const char *args[] = {"run", config, "--run-dir", dir, NULL};
    int rc = runs_wait(runs_spawn_in(NULL, args, log));
    CHECK(rc == 0);
    if (rc != 0) {
        char *text = NULL;
        if (bt_file_read(log, 1 << 20, &text, NULL) == BT_OK)
            fprintf(stderr, "%s\n", text);
        free(text);
    }
    double reward[S_RL_STEPS] = {0}, turns[S_RL_STEPS] = {0};
    CHECK(s_read_train(dir, reward, turns) == S_RL_STEPS);
    double r0 = s_mean(reward, 0, S_WINDOW), r1 = s_mean(reward, S_RL_STEPS - S_WINDOW, S_RL_STEPS);
    double t0 = s_mean(turns, 0, S_WINDOW) - 1,
           t1 = s_mean(turns, S_RL_STEPS - S_WINDOW, S_RL_STEPS) - 1;
    fprintf(stderr,
            "episode success %.3f -> %.3f, tool-call rate %.3f -> %.3f (RL steps 1-%d vs %d-%d)\n",
            r0, r1, t0, t1, S_WINDOW, S_RL_STEPS - S_WINDOW + 1, S_RL_STEPS);
    double a0 = NAN, a1 = NAN, e0 = NAN, e1 = NAN;
    CHECK(s_read_eval(dir, 0, &a0, &e0) && s_read_eval(dir, S_RL_STEPS, &a1, &e1));
    fprintf(stderr,
            "held-out greedy episodes: accuracy %.3f -> %.3f, episodes calling the tool %.3f -> "
            "%.3f (RL step 0 vs %d)\n",
            a0, a1, e0, e1, S_RL_STEPS);
    CHECK(r0 < 0.4);
    CHECK(r1 > 0.45);
    CHECK(r1 - r0 > 0.25);
    CHECK(t0 < 0.6);
    CHECK(t1 > 0.75);
    CHECK(t1 - t0 > 0.25);
    /* held out, greedy: the RL phase's first and last evaluations */
    CHECK(a1 > 0.7 && a1 - a0 > 0.2);
    CHECK(e1 > 0.85 && e1 - e0 > 0.2);
    runs_cleanup(s_tmp);
    return check_exit();
}
