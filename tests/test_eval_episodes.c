/*  test_eval_episodes.c — generate evaluations of multi-turn episodes (issue 21, section 3):
    bt_evaluator_run over a small random model (byte tokenizer) and a JSONL task the test writes,
    with a C environment of the test's (bt_env_new) whose replies are known in advance.
    - First principles: example i says in its prompt that its episode takes t_i = 1 + i % 3
      turns; the environment ends it there, rewards 0.5 a turn, says a tool was called on each
      episode's second turn (and failed for even i), and answers "ok" in the template "[{obs}]".
      With turns that run to their token budget, every sum is known: turns = sum t_i, tool calls
      = episodes with t_i >= 2, errors = the even ones of those, model tokens = M x turns,
      episode tokens = model tokens + 4 x (turns - episodes), env return = 0.5 x turns; and the
      environment's own tally of the steps it answered agrees.
    - Scoring: accuracy, reward and the pass@k histogram equal the test's own scoring (the task's
      bt_source_score and the test's own rule) of the final texts of the episodes the test runs
      itself with bt_episodes_run and the evaluation's keys (bt_evaluator_key), greedy and with 2
      samples at temperature 1; task.env_reward "env" makes an episode right when its return is
      positive.
    - Shards ([0, 5) + [5, 9) added with bt_evaluator_sums_add) equal the whole, every field; the
      wire keeps every new field, a single-turn message carries no episodes tensor and reads back
      as no episodes, and inconsistent counts are refused; the eval metrics are the test's own
      ratios, and a single-turn evaluation has none of them.
    - Robustness prompts run as episodes too (the environment is reset for them) without adding
      to the episode sums.
    - bt_eval_suite_run with the suite's env and episode keys for the dataset gives the same
      sums (the way an eval worker runs a dataset).
    - The report charts the six new eval fields (eval lines as evals.c writes them, read back
      from the page's data).
    - The real calculator (bt_tools_env_new, calculator only): counts consistent (tool calls <=
      turns <= episodes + tool calls, errors <= calls, no env return: the tools never score). */
#define _GNU_SOURCE
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/jsonl.h"
#include "baton/messages.h"
#include "baton/msg.h"
#include "baton/report.h"
#include "baton/rng.h"
#include "baton/rollout.h"
#include "baton/source.h"
#include "baton/tools.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { N = 9, M = 6, TURNS = 3, MAX_EPISODES = 128 };
static const uint64_t S_KEY = 0x5eed;

static int s_turns_of(int i) {
    return 1 + i % 3;
}

/* ---- the test's environment ----------------------------------------------------------------- */

typedef struct s_env {
    int n;                     /* episodes reset */
    uint64_t id[MAX_EPISODES]; /* their ids */
    int want[MAX_EPISODES], odd[MAX_EPISODES], taken[MAX_EPISODES];
    bool done[MAX_EPISODES];  /* told done */
    int steps, calls, errors; /* the environment's own tally */
    double reward;
} s_env;

static int s_find(const s_env *e, uint64_t id) {
    for (int k = 0; k < e->n; k++)
        if (e->id[k] == id)
            return k;
    return -1;
}

static bt_status s_reset(void *user, const bt_env_reset_item *items, int64_t n, bt_env_reply *out) {
    s_env *e = user;
    for (int64_t i = 0; i < n; i++) {
        int t = 0, q = 0; /* "t=T qI: ..." anywhere: a perturbed prompt may add a sentence */
        const char *at = strstr(items[i].prompt, "t=");
        if (e->n == MAX_EPISODES || s_find(e, items[i].episode) >= 0 || !at ||
            sscanf(at, "t=%d q%d", &t, &q) != 2)
            return bt_fail(BT_EFORMAT, "test env: episode %llu reset twice or prompt \"%s\"",
                           (unsigned long long)items[i].episode, items[i].prompt);
        e->id[e->n] = items[i].episode;
        e->want[e->n] = t;
        e->odd[e->n] = q % 2;
        e->taken[e->n] = 0;
        e->done[e->n++] = false;
        out[i] = (bt_env_reply){.observation = "", .observation_len = 0};
    }
    return BT_OK;
}

static bt_status s_step(void *user, const bt_env_step_item *items, int64_t n, bt_env_reply *out) {
    s_env *e = user;
    for (int64_t i = 0; i < n; i++) {
        int k = s_find(e, items[i].episode);
        if (k < 0 || e->done[k])
            return bt_fail(BT_EFORMAT, "test env: step of episode %llu not running",
                           (unsigned long long)items[i].episode);
        int turn = e->taken[k]++;
        bool call = turn == 1, error = call && !e->odd[k];
        e->done[k] = e->taken[k] >= e->want[k];
        e->steps++;
        e->calls += call;
        e->errors += error;
        e->reward += 0.5;
        out[i] = (bt_env_reply){.observation = "ok",
                                .observation_len = 2,
                                .reward = 0.5,
                                .done = e->done[k],
                                .tool_called = call,
                                .tool_error = error};
    }
    return BT_OK;
}

static void s_destroy(void *user) {
    free(user);
}

static const bt_env_ops s_ops = {.reset = s_reset, .step = s_step, .destroy = s_destroy};

static bt_env_t *s_env_new(s_env **state) {
    s_env *e = calloc(1, sizeof *e);
    bt_env_t *env = NULL;
    CHECK_OK(bt_env_new(&s_ops, e, &env));
    *state = e;
    return env;
}

/* ---- the task ------------------------------------------------------------------------------- */

/*  The test's own rule: right when the completion's last byte plus the example's answer is even
    (a random model's greedy text is much the same for every prompt: the answer splits them). */
static bool s_rule(const char *text, size_t len, const char *answer) {
    return len > 0 && ((unsigned char)text[len - 1] + (unsigned)atoi(answer)) % 2 == 0;
}

static double s_reward(const char *prompt, const char *completion, size_t len, const char *answer,
                       void *user) {
    (void)prompt, (void)user;
    return s_rule(completion, len, answer) ? 1.0 : 0.0;
}

static char s_path[64];

static bt_source_t *s_task(void) {
    snprintf(s_path, sizeof s_path, "/tmp/bt_eval_episodes_%d.jsonl", (int)getpid());
    FILE *f = fopen(s_path, "w");
    CHECK(f != NULL);
    if (!f)
        return NULL;
    for (int i = 0; i < N; i++)
        fprintf(f, "{\"prompt\": \"t=%d q%d: 3+%d=\", \"answer\": \"%d\"}\n", s_turns_of(i), i, i,
                3 + i);
    fclose(f);
    bt_source_jsonl_config jc = {.train_path = s_path, .heldout_path = s_path};
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_jsonl(&jc, &task));
    if (task)
        bt_source_set_reward_fn(task, s_reward, NULL);
    return task;
}

static void s_config(bt_evaluator_config *ec, bt_env_t *env) {
    bt_evaluator_config_init(ec);
    ec->count = N;
    ec->max_new_tokens = M;
    ec->env = env;
    ec->episode.max_turns = TURNS;
    ec->episode.max_episode_tokens = 64;
    ec->episode.observation_template = "[{observation}]";
}

/*  The test's own episodes of the evaluation: example i's prompt (BOS + its bytes), completion
    j's key bt_evaluator_key(S_KEY, -1, i, j), the evaluation's sampling; scored by the test. */
typedef struct s_own {
    int64_t correct, correct_hist[BT_EVALUATOR_MAX_SAMPLES + 1], eos;
    double reward_sum;
} s_own;

static void s_own_run(bt_model *m, const bt_tokenizer_t *tok, const bt_source_t *task,
                      const bt_evaluator_config *ec, s_own *own) {
    const int64_t k = ec->samples, n = N * k;
    *own = (s_own){0};
    int32_t ids[N][64];
    const int32_t *rows[N * BT_EVALUATOR_MAX_SAMPLES];
    int64_t lens[N * BT_EVALUATOR_MAX_SAMPLES];
    uint64_t keys[N * BT_EVALUATOR_MAX_SAMPLES];
    bt_env_reset_item items[N * BT_EVALUATOR_MAX_SAMPLES];
    bt_source_example ex[N];
    for (int i = 0; i < N; i++) {
        bt_source_example_init(&ex[i]);
        CHECK_OK(bt_source_heldout_example(task, (size_t)i, &ex[i]));
        size_t got = 0;
        CHECK_OK(
            bt_tokenizer_encode(tok, ex[i].prompt, strlen(ex[i].prompt), true, ids[i], 64, &got));
        for (int64_t j = 0; j < k; j++) {
            int64_t r = i * k + j;
            rows[r] = ids[i];
            lens[r] = (int64_t)got;
            keys[r] = bt_evaluator_key(S_KEY, -1, (uint64_t)i, j);
            items[r] = (bt_env_reset_item){.episode = keys[r],
                                           .prompt = ex[i].prompt,
                                           .answer = ex[i].answer,
                                           .columns = ex[i].columns};
        }
    }
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = M;
    sc.temperature = ec->temperature;
    sc.n_stops = bt_tokenizer_stops(tok, sc.stops, BT_SAMPLE_MAX_STOPS);
    sc.vocab_limit = bt_tokenizer_vocab_size(tok);
    s_env *state = NULL;
    bt_env_t *env = s_env_new(&state);
    bt_episodes ep;
    bt_episodes_init(&ep);
    CHECK_OK(bt_episodes_run(m, tok, env, &ec->episode, &sc, rows, lens, items, n, keys, &ep));
    for (int i = 0; ep.final_text && i < N; i++) {
        int64_t right = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t r = i * k + j;
            bt_reward_detail d;
            double score = bt_source_score(task, ex[i].prompt, ex[i].answer, ep.final_text[r],
                                           ep.final_len[r], &d);
            CHECK(d.correct == s_rule(ep.final_text[r], ep.final_len[r], ex[i].answer));
            own->reward_sum += score + ep.env_return[r];
            right += d.correct;
            if (j == 0)
                own->correct += d.correct;
            own->eos += ep.g.finish[r] == BT_FINISH_EOS;
        }
        own->correct_hist[right]++;
    }
    bt_episodes_release(&ep);
    bt_env_destroy(&env);
    for (int i = 0; i < N; i++)
        bt_source_example_release(&ex[i]);
}

static double s_metric(const bt_evaluator_sums *s, const char *name) {
    bt_eval_metric mt[BT_EVAL_MAX_METRICS];
    int n = bt_evaluator_metrics(s, BT_EVAL_GENERATE, NULL, 0, NULL, mt, BT_EVAL_MAX_METRICS, NULL);
    for (int i = 0; i < n; i++)
        if (!strcmp(mt[i].name, name))
            return mt[i].value;
    return -12345.0; /* absent */
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void test_report(const bt_evaluator_sums *s);

static void test_known(bt_model *m, const bt_tokenizer_t *tok, const bt_source_t *task) {
    s_env *state = NULL;
    bt_env_t *env = s_env_new(&state);
    bt_evaluator_config ec;
    s_config(&ec, env);
    bt_evaluator_sums s;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &s));
    int64_t turns = 0, calls = 0, errors = 0;
    for (int i = 0; i < N; i++) {
        turns += s_turns_of(i);
        calls += s_turns_of(i) >= 2;
        errors += s_turns_of(i) >= 2 && i % 2 == 0;
    }
    int ended = 0; /* episodes the environment itself ended at their t_i */
    for (int k = 0; k < state->n; k++)
        ended += state->done[k] && state->taken[k] == state->want[k];
    printf("known: %lld episodes, %lld turns (want %lld; env answered %d steps, ended %d), %lld "
           "tool calls (want %lld), %lld errors (want %lld), %lld model / %lld episode tokens, "
           "env return %g, accuracy %lld/%lld\n",
           (long long)s.episodes, (long long)s.turns_sum, (long long)turns, state->steps, ended,
           (long long)s.tool_calls, (long long)calls, (long long)s.tool_errors, (long long)errors,
           (long long)s.model_tokens_sum, (long long)s.episode_tokens_sum, s.env_return_sum,
           (long long)s.correct, (long long)s.examples);
    CHECK(s.examples == N && s.completions == N && s.episodes == N && state->n == N);
    CHECK(ended == N);
    CHECK(s.turns_sum == turns && state->steps == turns);
    CHECK(s.tool_calls == calls && state->calls == calls && s.tool_episodes == calls);
    CHECK(s.tool_errors == errors && state->errors == errors);
    CHECK(s.model_tokens_sum == M * turns);
    CHECK(s.episode_tokens_sum == M * turns + 4 * (turns - N)); /* "[ok]" between turns */
    CHECK(s.env_return_sum == 0.5 * (double)turns && state->reward == s.env_return_sum);
    CHECK(s.length_sum == (double)(M * turns) && s.generated_tokens == (double)(M * turns));
    /* the eval line's ratios */
    CHECK(s_metric(&s, "turns_mean") == (double)turns / N);
    CHECK(s_metric(&s, "tool_call_rate") == (double)calls / (double)turns);
    CHECK(s_metric(&s, "tool_error_rate") == (double)errors / (double)calls);
    CHECK(s_metric(&s, "tool_episode_frac") == (double)calls / N);
    CHECK(s_metric(&s, "tokens_per_episode") == (double)(M * turns + 4 * (turns - N)) / N);
    CHECK(s_metric(&s, "env_return_mean") == 0.5 * (double)turns / N);
    /* scoring: the test's own episodes with the same keys, its own scoring */
    s_own own;
    s_own_run(m, tok, task, &ec, &own);
    printf("known: the test's own episodes: %lld of %d right, reward sum %g (evaluation: %lld, "
           "%g)\n",
           (long long)own.correct, N, own.reward_sum, (long long)s.correct, s.reward_sum);
    CHECK(own.eos == 0); /* every turn ran to its budget, as the counts above assume */
    CHECK(s.correct == own.correct && s.reward_sum == own.reward_sum);
    CHECK(s_metric(&s, "accuracy") == (double)own.correct / N);
    /* shards add up to the whole, every field */
    bt_evaluator_sums a, b;
    for (int part = 0; part < 2; part++) {
        s_env *st2 = NULL;
        bt_env_t *env2 = s_env_new(&st2);
        bt_evaluator_config sc;
        s_config(&sc, env2);
        sc.start = part ? 5 : 0;
        sc.count = part ? N - 5 : 5;
        CHECK_OK(bt_evaluator_run(m, tok, task, &sc, S_KEY, part ? &b : &a));
        bt_env_destroy(&env2);
    }
    CHECK_OK(bt_evaluator_sums_add(&a, &b));
    a.compute_s = s.compute_s;
    a.peak_rss_mb = s.peak_rss_mb;
    CHECK(!memcmp(&a, &s, sizeof s));
    CHECK(a.episodes == N && a.turns_sum == turns && a.tool_errors == errors);
    /* the wire keeps every field */
    bt_msg_t *msg = bt_msg_new(BT_MSG_RESULT);
    bt_evaluator_sums back;
    CHECK_OK(bt_sums_to_msg(&s, msg));
    CHECK_OK(bt_sums_from_msg(msg, &back));
    CHECK(!memcmp(&back, &s, sizeof s));
    CHECK(back.episodes == N && back.turns_sum == turns && back.tool_calls == calls &&
          back.tool_errors == errors && back.tool_episodes == calls &&
          back.episode_tokens_sum == s.episode_tokens_sum && back.model_tokens_sum == M * turns &&
          back.env_return_sum == 0.5 * (double)turns);
    bt_msg_destroy(&msg);
    /* inconsistent counts are refused, naming the tensor */
    bt_evaluator_sums bad = s;
    bad.tool_errors = bad.tool_calls + 1;
    msg = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_sums_to_msg(&bad, msg));
    CHECK(bt_sums_from_msg(msg, &back) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "tensor 'episodes'");
    bt_msg_destroy(&msg);
    bad = s;
    bad.turns_sum = (int64_t)BT_MAX_TURNS * N + 1;
    msg = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_sums_to_msg(&bad, msg));
    CHECK(bt_sums_from_msg(msg, &back) == BT_EFORMAT);
    bt_msg_destroy(&msg);
    bt_env_destroy(&env);
    /* through the eval suite, as an eval worker runs a dataset: its env and episode keys */
    bt_eval_dataset d = {
        .kind = BT_EVAL_GENERATE, .samples = 1, .max_new_tokens = M, .data_source = -1};
    snprintf(d.name, sizeof d.name, "tools");
    bt_source_jsonl_config jc = {0};
    bt_eval_suite suite;
    CHECK_OK(bt_eval_suite_load(&suite, &d, 1, NULL, 0, task, &jc));
    CHECK(suite.env[0] == NULL && suite.episode[0].max_turns == 1);
    env = s_env_new(&state);
    bt_evaluator_config sc;
    s_config(&sc, env);
    suite.env[0] = env;
    suite.episode[0] = sc.episode;
    bt_evaluator_sums via;
    CHECK_OK(bt_eval_suite_run(&suite, 0, m, tok, 0, N, false, S_KEY << BT_JOB_SEED_BITS, &via));
    via.compute_s = s.compute_s;
    via.peak_rss_mb = s.peak_rss_mb;
    CHECK(!memcmp(&via, &s, sizeof s) && state->steps == turns);
    bt_eval_suite_release(&suite);
    bt_env_destroy(&env);
    test_report(&s);
}

static void test_single_turn(bt_model *m, const bt_tokenizer_t *tok, const bt_source_t *task) {
    bt_evaluator_config ec;
    bt_evaluator_config_init(&ec);
    ec.count = N;
    ec.max_new_tokens = M;
    bt_evaluator_sums s, back;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &s));
    CHECK(s.episodes == 0 && s.turns_sum == 0 && s.examples == N);
    CHECK(s_metric(&s, "turns_mean") == -12345.0 && s_metric(&s, "tool_call_rate") == -12345.0 &&
          s_metric(&s, "env_return_mean") == -12345.0);
    bt_msg_t *msg = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_sums_to_msg(&s, msg));
    bool has = false; /* the message a single-turn evaluation sent before episodes */
    for (int i = 0; i < bt_msg_tensor_count(msg); i++)
        has = has || !strcmp(bt_msg_tensor_at(msg, i).name, "episodes");
    CHECK(!has && !bt_msg_has(msg, "env_return_sum"));
    CHECK_OK(bt_sums_from_msg(msg, &back));
    CHECK(!memcmp(&back, &s, sizeof s));
    bt_msg_destroy(&msg);
    /* max_turns > 1 without an environment: the error names task.env */
    ec.episode.max_turns = 2;
    ec.episode.max_episode_tokens = 64;
    CHECK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &s) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "task.env");
}

static void test_sampled(bt_model *m, const bt_tokenizer_t *tok, const bt_source_t *task) {
    s_env *state = NULL;
    bt_env_t *env = s_env_new(&state);
    bt_evaluator_config ec;
    s_config(&ec, env);
    ec.samples = 2;
    ec.temperature = 1.0;
    bt_evaluator_sums s;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &s));
    s_own own;
    s_own_run(m, tok, task, &ec, &own);
    printf("sampled: %lld episodes of 2 samples, %lld turns (env: %d steps), correct_hist "
           "%lld/%lld/%lld (own %lld/%lld/%lld), %lld ended at EOS, pass@2 %.4f\n",
           (long long)s.episodes, (long long)s.turns_sum, state->steps,
           (long long)s.correct_hist[0], (long long)s.correct_hist[1], (long long)s.correct_hist[2],
           (long long)own.correct_hist[0], (long long)own.correct_hist[1],
           (long long)own.correct_hist[2], (long long)own.eos, s_metric(&s, "pass@2"));
    CHECK(s.episodes == 2 * N && state->n == 2 * N && s.turns_sum == state->steps);
    CHECK(s.tool_calls == state->calls && s.tool_errors == state->errors);
    CHECK(!memcmp(s.correct_hist, own.correct_hist, sizeof own.correct_hist));
    CHECK(s.correct == own.correct && s.reward_sum == own.reward_sum);
    double want = 0; /* unbiased pass@2 of 2 samples: the examples with any right */
    want = (double)(own.correct_hist[1] + own.correct_hist[2]) / N;
    CHECK(fabs(s_metric(&s, "pass@2") - want) < 1e-12);
    bt_env_destroy(&env);
}

static void test_env_reward_and_robustness(bt_model *m, const bt_tokenizer_t *tok,
                                           const bt_source_t *task) {
    s_env *state = NULL;
    bt_env_t *env = s_env_new(&state);
    bt_evaluator_config ec;
    s_config(&ec, env);
    ec.episode.reward = BT_EPISODE_REWARD_ENV; /* right when the return is positive: all */
    bt_evaluator_sums s;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &s));
    CHECK(s.correct == N && s.reward_sum == s.env_return_sum && s.env_return_sum > 0);
    bt_env_destroy(&env);
    /* robustness: perturbed prompts run as episodes (the environment resets them) and leave the
       episode sums to the clean ones */
    env = s_env_new(&state);
    s_config(&ec, env);
    ec.robustness = true;
    bt_evaluator_sums r, clean;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &r));
    int64_t robust = 0;
    for (int p = 0; p < BT_PERTURB_COUNT; p++)
        robust += r.robust_examples[p];
    printf("robustness: %lld perturbed episodes besides %lld clean ones; the environment reset "
           "%d\n",
           (long long)robust, (long long)r.episodes, state->n);
    CHECK(state->n == N + robust && r.episodes == N);
    bt_env_destroy(&env);
    env = s_env_new(&state);
    s_config(&ec, env);
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &clean));
    CHECK(r.turns_sum == clean.turns_sum && r.tool_calls == clean.tool_calls &&
          r.episode_tokens_sum == clean.episode_tokens_sum && r.correct == clean.correct);
    bt_env_destroy(&env);
}

static void test_calculator(bt_model *m, const bt_tokenizer_t *tok, const bt_source_t *task) {
    bt_tools_config tc;
    bt_tools_config_init(&tc);
    tc.python = false;
    bt_env_t *env = NULL;
    CHECK_OK(bt_tools_env_new(&tc, &env));
    if (!env)
        return;
    bt_evaluator_config ec;
    s_config(&ec, env);
    ec.samples = 4;
    ec.temperature = 1.0;
    ec.max_new_tokens = 12;
    ec.episode.max_episode_tokens = 120;
    ec.episode.observation_template = NULL;
    bt_evaluator_sums s;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, S_KEY, &s));
    printf("calculator: %lld episodes, %lld turns, %lld tool calls (%lld failed, in %lld "
           "episodes), %lld model of %lld tokens, env return %g\n",
           (long long)s.episodes, (long long)s.turns_sum, (long long)s.tool_calls,
           (long long)s.tool_errors, (long long)s.tool_episodes, (long long)s.model_tokens_sum,
           (long long)s.episode_tokens_sum, s.env_return_sum);
    CHECK(s.episodes == 4 * N);
    CHECK(s.turns_sum >= s.episodes && s.turns_sum <= s.episodes + s.tool_calls);
    CHECK(s.tool_calls <= s.turns_sum && s.tool_errors <= s.tool_calls);
    CHECK(s.tool_episodes <= s.tool_calls && s.tool_episodes <= s.episodes);
    CHECK(s.model_tokens_sum <= s.episode_tokens_sum && s.model_tokens_sum > 0);
    CHECK(s.env_return_sum == 0.0);
    double rate = s_metric(&s, "tool_call_rate");
    CHECK(rate >= 0 && rate <= 1);
    CHECK(s.tool_calls > 0 || isnan(s_metric(&s, "tool_error_rate")));
    /* what an episode costs against a single turn of the same budget (printed, not asserted) */
    bt_evaluator_config single;
    bt_evaluator_config_init(&single);
    single.count = N;
    single.samples = 4;
    single.temperature = 1.0;
    single.max_new_tokens = 12;
    bt_evaluator_sums one;
    CHECK_OK(bt_evaluator_run(m, tok, task, &single, S_KEY, &one));
    printf("calculator: %.1f ms for its %lld episodes (%.0f model tokens/s), single-turn %.1f ms "
           "(%.0f tokens/s)\n",
           1e3 * s.compute_s, (long long)s.episodes, s_metric(&s, "tokens_per_s"),
           1e3 * one.compute_s, s_metric(&one, "tokens_per_s"));
    bt_env_destroy(&env);
}

/*  The report charts the new eval fields: eval lines written as orchestrator/evals.c writes them
    (every metric of bt_evaluator_metrics a number, NaN as null) into a run directory's
    metrics.jsonl, read back from the page's data (the JSON in <script id="baton-data">). */
static void test_report(const bt_evaluator_sums *s) {
    char dir[64], path[128];
    snprintf(dir, sizeof dir, "/tmp/bt_eval_episodes_run_%d", (int)getpid());
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_OK(bt_file_write(path, "{}", 2));
    bt_eval_metric mt[BT_EVAL_MAX_METRICS];
    int n = bt_evaluator_metrics(s, BT_EVAL_GENERATE, NULL, 0, NULL, mt, BT_EVAL_MAX_METRICS, NULL);
    static char text[4 * BT_JSONL_MAX];
    text[0] = '\0';
    static bt_jsonl line;
    for (int step = 1; step <= 2; step++) {
        bt_jsonl_init(&line);
        bt_jsonl_str(&line, "kind", "eval");
        bt_jsonl_int(&line, "step", step);
        bt_jsonl_str(&line, "variant", "main");
        bt_jsonl_str(&line, "dataset", "tools");
        for (int i = 0; i < n; i++)
            bt_jsonl_num(&line, mt[i].name, mt[i].value);
        strncat(text, line.buf, sizeof text - strlen(text) - 3);
        strcat(text, "}\n"); /* as bt_runlog_metric closes it */
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_write(path, text, strlen(text)));
    char out[160], *html = NULL;
    snprintf(out, sizeof out, "%s/report.html", dir);
    const char *dirs[1] = {dir};
    CHECK_OK(bt_report_write(dirs, 1, out, NAN));
    CHECK_OK(bt_file_read(out, 1 << 26, &html, NULL));
    const char *tag = "<script id=\"baton-data\" type=\"application/json\">";
    const char *a = html ? strstr(html, tag) : NULL, *z = a ? strstr(a, "</script>") : NULL;
    CHECK(z != NULL);
    char *data = z ? strndup(a + strlen(tag), (size_t)(z - a - strlen(tag))) : NULL;
    cJSON *blob = data ? cJSON_Parse(data) : NULL;
    const cJSON *cols = NULL;
    const cJSON *streams = cJSON_GetObjectItem(blob, "streams");
    for (const cJSON *st = streams ? streams->child : NULL; st; st = st->next)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(st, "group")), "eval/tools"))
            cols = cJSON_GetObjectItem(st, "cols");
    const char *fields[] = {"turns_mean",        "tool_call_rate",     "tool_error_rate",
                            "tool_episode_frac", "tokens_per_episode", "env_return_mean"};
    int charted = 0;
    for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
        const cJSON *col = cJSON_GetObjectItem(cols, fields[f]);
        const cJSON *v = cJSON_GetArrayItem(col, 1);
        bool ok = cJSON_GetArraySize(col) == 2 && cJSON_IsNumber(v) &&
                  v->valuedouble == s_metric(s, fields[f]);
        CHECK(ok);
        charted += ok;
    }
    printf("report: %d of 6 episode fields charted under eval/tools with their values\n", charted);
    cJSON_Delete(blob);
    free(data);
    free(html);
    CHECK_OK(bt_rmtree(dir));
}

int main(void) {
    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.hidden_size = 32;
    mc.intermediate_size = 64;
    mc.num_hidden_layers = 2;
    mc.num_attention_heads = 4;
    mc.num_key_value_heads = 2;
    mc.max_position_embeddings = 256;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 11);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    bt_source_t *task = s_task();
    CHECK(m && tok && task);
    if (m && tok && task) {
        test_known(m, tok, task);
        test_single_turn(m, tok, task);
        test_sampled(m, tok, task);
        test_env_reward_and_robustness(m, tok, task);
        test_calculator(m, tok, task);
    }
    bt_source_destroy(&task);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    unlink(s_path);
    return check_exit();
}
