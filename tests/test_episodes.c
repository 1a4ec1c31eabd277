/*  test_episodes.c — multi-turn episodes (issue 21): the engine's turns (bt_generate_episodes)
    and the driver over an environment (bt_episodes_run), against the test's own computation.
    - The engine: 12 rows of up to 4 turns, answered by the test's own environment (observations
      of 0 to 3 ids, some episodes ended by it), turns ended by stop tokens, per-turn limits, the
      episode's width and the test's stop rule.  Every row equals the test's reference built turn
      by turn from bt_generate without a cache (use_cache false): each turn drawn from the prompt
      and every id before it with the turn's key, cut where the test's own scan says the turn
      ends; the ids exactly, the log-probs to 1e-5, loss mask / turn / n_turns / finish as the
      reference's bookkeeping says; and the turns the environment was given are the ids sampled.
      The same for greedy and sampled decoding, with 1, 3 and 12 slots and answers given at once
      or held back for several decode steps (the environment's latency): an episode does not
      depend on its slot, its company or when its answers come.
    - The driver: a C environment of the test's (bt_env_new) whose stop string ends turns and
      whose replies depend only on the episode's own actions.  Interleaved and synchronous turns
      give the same episodes; each observation's ids are the tokenizer's encoding of the chatml
      tool turn around the reply's text, once, with loss mask 0 (token in, token out); each
      action text is the decoding of its ids; rewards, tool counts and final texts are what the
      environment and the decoding say; an environment's failure fails the run with its
      message, and a reset that ends an episode is refused. */
#define _GNU_SOURCE
#include "baton/episodes.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/rollout.h"
#include "baton/sample.h"
#include "baton/source.h"
#include "baton/tokenizer.h"
#include "baton/trainer.h"
#include "check.h"
#include "grpo_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NP = 4, G = 3, B = NP * G, M = 4, W = 20, TURNS = 4 };

static bt_model_config s_config(void) {
    bt_model_config c;
    bt_model_config_init(&c);
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 64;
    return c;
}

static int32_t s_prompt[NP][6];
static const int64_t s_plen[NP] = {1, 4, 6, 3};
static const int32_t *s_rows[B];
static int64_t s_lens[B];
static uint64_t s_keys[B];
static int32_t s_stop = -1; /* a stop token the model samples now and then */

static void s_batch(void) {
    uint64_t x = 777;
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < 6; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            s_prompt[p][i] = i == 0 ? 256 : (int32_t)(x >> 57);
        }
    for (int b = 0; b < B; b++) {
        s_rows[b] = s_prompt[b / G];
        s_lens[b] = s_plen[b / G];
        s_keys[b] = bt_rng_key(4242, (uint64_t)b);
    }
}

/* ---- the test's environment and stop rule --------------------------------------------------- */

/*  The test's stop rule: a turn ends when it holds two ids or more and its newest is odd. */
static bool s_rule(const int32_t *ids, int64_t n) {
    return n >= 2 && ids[n - 1] % 2 == 1;
}

/*  Row r's answer to its turn t: done when (r + t) % 5 == 4, else an observation of (r + t) % 4
    ids, (r * 7 + t * 3 + j) % 100 + 3. */
static bool s_done(int64_t r, int64_t t) {
    return (r + t) % 5 == 4;
}
static int64_t s_obs(int64_t r, int64_t t, int32_t *ids) {
    int64_t n = (r + t) % 4;
    for (int64_t j = 0; j < n; j++)
        ids[j] = (int32_t)((r * 7 + t * 3 + j) % 100 + 3);
    return n;
}

typedef struct s_turn_rec {
    int64_t row, turn, at; /* at: the decode poll it may be answered from */
    bool last;
} s_turn_rec;

typedef struct s_env {
    int delay;        /* polls an answer is held back: row-dependent up to this */
    int64_t polls;    /* answers calls */
    s_turn_rec q[64]; /* ended turns awaiting their answers */
    int nq;
    int32_t seen[B][TURNS][W]; /* the ids each turn was given as */
    int64_t seen_n[B][TURNS];
    int32_t obs[64][4];
    bool bad; /* a turn ended twice, or a last one answered */
} s_env;

static bool s_turn_ends(void *user, int64_t row, const int32_t *ids, int64_t n) {
    (void)user;
    (void)row;
    return s_rule(ids, n);
}

static bt_status s_ended(void *user, int64_t row, int64_t turn, const int32_t *ids, int64_t n,
                         bt_finish_reason why, bool last) {
    (void)why;
    s_env *e = user;
    if (row < 0 || row >= B || turn < 0 || turn >= TURNS || e->seen_n[row][turn] != 0 || n < 1 ||
        n > W) {
        e->bad = true;
        return BT_OK;
    }
    memcpy(e->seen[row][turn], ids, (size_t)n * sizeof *ids);
    e->seen_n[row][turn] = n;
    if (!last)
        e->q[e->nq++] = (s_turn_rec){
            .row = row, .turn = turn, .at = e->polls + (row * 5 + turn) % (e->delay + 1)};
    return BT_OK;
}

static bt_status s_answers(void *user, bool wait, bt_turn_answer *out, int64_t cap, int64_t *n) {
    s_env *e = user;
    e->polls++;
    *n = 0;
    for (int i = 0; i < e->nq && *n < cap;) {
        s_turn_rec t = e->q[i];
        if (t.at > e->polls && !(wait && *n == 0 && i == 0)) {
            i++;
            continue;
        }
        int32_t *ids = e->obs[*n];
        out[*n] = (bt_turn_answer){.row = t.row, .ids = ids, .done = s_done(t.row, t.turn)};
        out[*n].n_ids = s_obs(t.row, t.turn, ids);
        (*n)++;
        memmove(e->q + i, e->q + i + 1, (size_t)(e->nq - i - 1) * sizeof *e->q);
        e->nq--;
    }
    return BT_OK;
}

/* ---- the reference: turn by turn, no cache -------------------------------------------------- */

typedef struct s_ref {
    int32_t tokens[W];
    float logprobs[W];
    uint8_t mask[W], turn[W];
    int64_t len, n_turns;
    bt_finish_reason finish;
    int64_t turn_start[TURNS], turn_len[TURNS];
} s_ref;

static bt_sample_config s_sample(double temperature, bool cache, int64_t slots) {
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = M;
    sc.temperature = temperature;
    sc.use_cache = cache;
    sc.slots = slots;
    if (s_stop >= 0) {
        sc.stops[0] = s_stop;
        sc.n_stops = 1;
    }
    return sc;
}

/*  Row b's episode by the reference: each turn a bt_generate (no cache) of the prompt and every
    id before, with the turn's key, run to its limit and cut by the test's own scan. */
static bt_status s_reference(bt_model *m, int64_t b, double temperature, s_ref *r) {
    memset(r, 0, sizeof *r);
    int32_t seq[64];
    int64_t plen = s_lens[b];
    memcpy(seq, s_rows[b], (size_t)plen * sizeof *seq);
    for (int64_t t = 0;; t++) {
        bt_sample_config sc = s_sample(temperature, false, 0);
        sc.max_new_tokens = M < W - r->len ? M : W - r->len;
        uint64_t key = t == 0 ? s_keys[b] : bt_rng_key(s_keys[b], (uint64_t)t);
        const int32_t *rows[1] = {seq};
        int64_t lens[1] = {plen + r->len};
        bt_generation g;
        bt_generation_init(&g);
        BT_TRY(bt_generate(m, rows, lens, 1, &sc, temperature > 0 ? &key : NULL, &g));
        int64_t n = 0;
        bt_finish_reason why = BT_FINISH_LENGTH;
        r->turn_start[t] = r->len;
        while (n < g.lengths[0]) {
            int32_t id = g.tokens[n];
            r->tokens[r->len] = id;
            r->logprobs[r->len] = g.logprobs[n];
            r->mask[r->len] = 1;
            r->turn[r->len] = (uint8_t)t;
            seq[plen + r->len] = id;
            r->len++;
            n++;
            if (id == s_stop) {
                why = BT_FINISH_EOS;
                break;
            }
            if (r->len < W && n < M && s_rule(r->tokens + r->turn_start[t], n)) {
                why = BT_FINISH_STOP;
                break;
            }
        }
        bt_generation_release(&g);
        r->turn_len[t] = n;
        r->finish = why;
        r->n_turns = t + 1;
        if (why == BT_FINISH_EOS || r->len >= W || t + 1 >= TURNS)
            return BT_OK;
        if (s_done(b, t)) {
            r->finish = BT_FINISH_DONE;
            return BT_OK;
        }
        int32_t obs[4];
        int64_t k = s_obs(b, t, obs);
        if (r->len + k >= W) { /* no room for a model id after it */
            r->finish = BT_FINISH_LENGTH;
            return BT_OK;
        }
        for (int64_t j = 0; j < k; j++) {
            r->tokens[r->len] = obs[j];
            r->turn[r->len] = (uint8_t)t;
            seq[plen + r->len] = obs[j];
            r->len++;
        }
    }
}

static void test_engine(bt_model *m) {
    /* a stop token: one the model samples greedily somewhere */
    bt_sample_config sc = s_sample(0, false, 0);
    sc.max_new_tokens = 8;
    bt_generation free_run;
    bt_generation_init(&free_run);
    CHECK_OK(bt_generate(m, s_rows, s_lens, B, &sc, NULL, &free_run));
    if (free_run.tokens)
        s_stop = free_run.tokens[2 * 8 + 5];
    bt_generation_release(&free_run);
    int lengths = 0; /* rows ended by their width or an observation with no room after it */
    for (int sampled = 0; sampled < 2; sampled++) {
        double temp = sampled ? 1.0 : 0.0;
        static s_ref ref[B];
        int eos = 0, stop = 0, done = 0, length = 0, multi = 0, observed = 0;
        for (int64_t b = 0; b < B; b++) {
            CHECK_OK(s_reference(m, b, temp, &ref[b]));
            eos += ref[b].finish == BT_FINISH_EOS;
            done += ref[b].finish == BT_FINISH_DONE;
            length += ref[b].finish == BT_FINISH_LENGTH;
            multi += ref[b].n_turns > 1;
            for (int64_t t = 0; t < ref[b].n_turns; t++)
                stop += t + 1 < ref[b].n_turns && ref[b].turn_len[t] < M;
            for (int64_t j = 0; j < ref[b].len; j++)
                observed += !ref[b].mask[j];
        }
        printf("%s reference: %d rows end by EOS, %d by the environment, %d by length; %d take "
               "more than one turn, %d turns end at the stop rule, %d observation ids\n",
               sampled ? "sampled" : "greedy", eos, done, length, multi, stop, observed);
        CHECK(multi >= B / 2 && stop >= 2 && done >= 1 && observed >= 6);
        lengths += length;
        const int64_t slots[] = {1, 3, 0};
        for (int k = 0; k < 3; k++)
            for (int lag = 0; lag <= 2; lag += 2) {
                bt_generation at_once; /* answers given at once: the others equal it exactly */
                bt_generation_init(&at_once);
                for (int delay = 0; delay <= 3; delay += 3) {
                    static s_env env;
                    memset(&env, 0, sizeof env);
                    env.delay = delay;
                    bt_turn_ops ops = {.user = &env,
                                       .turn_ends = s_turn_ends,
                                       .ended = s_ended,
                                       .answers = s_answers};
                    bt_sample_config ec = s_sample(temp, true, slots[k]);
                    bt_generation g;
                    bt_generation_init(&g);
                    CHECK_OK(bt_generate_episodes(m, s_rows, s_lens, B, &ec,
                                                  sampled ? s_keys : NULL, TURNS, W, lag, &ops,
                                                  &g));
                    int same = 0, exact = 0;
                    double worst = 0;
                    for (int64_t b = 0; g.tokens && b < B; b++) {
                        const s_ref *r = &ref[b];
                        bool ok = g.lengths[b] == r->len && g.finish[b] == r->finish &&
                                  g.n_turns[b] == r->n_turns;
                        for (int64_t j = 0; ok && j < r->len; j++) {
                            ok = g.tokens[b * W + j] == r->tokens[j] &&
                                 g.loss_mask[b * W + j] == r->mask[j] &&
                                 g.turn[b * W + j] == r->turn[j];
                            double d = fabs((double)g.logprobs[b * W + j] - r->logprobs[j]);
                            worst = d > worst ? d : worst;
                        }
                        for (int64_t t = 0; ok && t < r->n_turns; t++) /* what the env got */
                            ok = env.seen_n[b][t] == r->turn_len[t] &&
                                 !memcmp(env.seen[b][t], r->tokens + r->turn_start[t],
                                         (size_t)r->turn_len[t] * sizeof(int32_t));
                        same += ok;
                        exact += delay > 0 && at_once.tokens &&
                                 !memcmp(g.tokens + b * W, at_once.tokens + b * W,
                                         W * sizeof(int32_t)) &&
                                 !memcmp(g.logprobs + b * W, at_once.logprobs + b * W,
                                         W * sizeof(float));
                    }
                    printf("  engine, slots %lld, %s, answers held up to %d polls: %d of %d "
                           "episodes as the reference (log-probs within %.1e)",
                           (long long)slots[k], lag ? "interleaved (lag 2)" : "synchronous", delay,
                           same, B, worst);
                    if (delay > 0)
                        printf(", %d bit for bit as with answers at once", exact);
                    printf("\n");
                    CHECK(same == B && worst <= 1e-5 && !env.bad && env.nq == 0);
                    CHECK(delay == 0 || exact == B);
                    if (delay == 0)
                        at_once = g;
                    else
                        bt_generation_release(&g);
                }
                bt_generation_release(&at_once);
            }
    }
    CHECK(lengths >= 1);
    /* the engine only; a bad width */
    bt_turn_ops ops = {.user = NULL, .ended = s_ended, .answers = s_answers};
    bt_generation g;
    bt_generation_init(&g);
    bt_sample_config ec = s_sample(0, false, 0);
    CHECK(bt_generate_episodes(m, s_rows, s_lens, B, &ec, NULL, TURNS, W, 0, &ops, &g) ==
          BT_EUNSUPPORTED);
    ec.use_cache = true;
    CHECK(bt_generate_episodes(m, s_rows, s_lens, B, &ec, NULL, TURNS, 0, 0, &ops, &g) ==
          BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "width");
}

/* ---- the driver over an environment --------------------------------------------------------- */

#define S_EPISODES 9

/*  The test's environment: the stop string "e" ends a turn; a step answers "saw N: <action>"
    (N the action's length) with reward 0.25 * its length, tool_called when the action holds "t",
    tool_error when it holds "tx", done when it holds "q"; a reset answers "go" for every
    episode but one ("" for it).  fail_at: the step call that fails (0: none); reset_done: a reset
    that ends an episode. */
typedef struct s_cenv {
    int steps, fail_at;
    int sleep_us; /* a step takes (steps % 3) x this */
    bool reset_done;
    char reply[S_EPISODES * 4][96];
    uint64_t last_episode[64];
    int seen;
    char actions[64][96];
    int32_t action_ids[64][W];
    int64_t n_action_ids[64];
    size_t action_lens[64];
} s_cenv;

static bt_status s_c_reset(void *user, const bt_env_reset_item *items, int64_t n,
                           bt_env_reply *out) {
    s_cenv *e = user;
    for (int64_t i = 0; i < n; i++)
        out[i] = (bt_env_reply){.observation = i == 3 ? "" : "go",
                                .observation_len = i == 3 ? 0 : 2,
                                .done = e->reset_done && i == 5};
    (void)items;
    return BT_OK;
}

static bt_status s_c_step(void *user, const bt_env_step_item *items, int64_t n, bt_env_reply *out) {
    s_cenv *e = user;
    if (++e->steps == e->fail_at)
        return bt_fail(BT_EIO, "test environment: step %d fails", e->steps);
    if (e->sleep_us)
        usleep((useconds_t)(e->sleep_us * (e->steps % 3)));
    for (int64_t i = 0; i < n; i++) {
        const bt_env_step_item *it = &items[i];
        char *r = e->reply[i % (S_EPISODES * 4)];
        int len =
            snprintf(r, 96, "saw %zu: %.*s", it->action_len, (int)it->action_len, it->action_text);
        bool t = memchr(it->action_text, 't', it->action_len) != NULL;
        out[i] =
            (bt_env_reply){.observation = r,
                           .observation_len = (size_t)(len < 95 ? len : 95),
                           .reward = 0.25 * (double)it->action_len,
                           .done = memchr(it->action_text, 'q', it->action_len) != NULL,
                           .tool_called = t,
                           .tool_error = t && memmem(it->action_text, it->action_len, "tx", 2)};
        if (e->seen < 64) { /* what the environment was given, for the test to check */
            memcpy(e->actions[e->seen], it->action_text, it->action_len);
            e->action_lens[e->seen] = it->action_len;
            memcpy(e->action_ids[e->seen], it->action_ids, (size_t)it->n_action_ids * 4);
            e->n_action_ids[e->seen] = it->n_action_ids;
            e->last_episode[e->seen++] = it->episode;
        }
    }
    return BT_OK;
}

static void s_c_destroy(void *user) {
    (void)user;
}

static const bt_env_ops s_cops = {
    .reset = s_c_reset, .step = s_c_step, .destroy = s_c_destroy, .stop_strings = "e\0"};

static void test_driver(void) {
    bt_model_config mc = s_config();
    mc.max_position_embeddings = 512; /* room for observations in the chatml tool turn */
    bt_model *m = bt_model_new(&mc, bt_cpu(), 5);
    CHECK(m != NULL);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    CHECK(tok != NULL);
    int32_t prompts[S_EPISODES][8];
    const int32_t *rows[S_EPISODES];
    int64_t lens[S_EPISODES];
    uint64_t keys[S_EPISODES];
    bt_env_reset_item items[S_EPISODES];
    for (int i = 0; i < S_EPISODES; i++) {
        size_t n = 0;
        char text[16];
        snprintf(text, sizeof text, "q%d+%d=", i, 3 * i);
        CHECK_OK(bt_tokenizer_encode(tok, text, strlen(text), true, prompts[i], 8, &n));
        rows[i] = prompts[i];
        lens[i] = (int64_t)n;
        keys[i] = bt_rng_key(17, (uint64_t)i);
        items[i] = (bt_env_reset_item){.episode = 1000 + (uint64_t)i, .prompt = "p", .answer = "a"};
    }
    bt_episode_config ec;
    bt_episode_config_init(&ec);
    ec.max_turns = 3;
    ec.max_episode_tokens = 300;
    ec.chat_template = "chatml";
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = 8;
    sc.temperature = 1.0;
    sc.n_stops = bt_tokenizer_stops(tok, sc.stops, BT_SAMPLE_MAX_STOPS);
    sc.vocab_limit = 256; /* bytes only: every id decodes to one byte */
    /* synchronous turns; interleaved (lag 3) with an instant environment, and with one that
       takes 0 to 4 ms a step */
    bt_episodes runs[3];
    s_cenv *cenv[3];
    for (int il = 0; il < 3; il++) {
        cenv[il] = calloc(1, sizeof *cenv[il]);
        cenv[il]->sleep_us = il == 2 ? 2000 : 0;
        bt_env_t *env = NULL;
        CHECK_OK(bt_env_new(&s_cops, cenv[il], &env));
        ec.interleave = il > 0 ? 3 : 0;
        bt_episodes_init(&runs[il]);
        CHECK_OK(
            bt_episodes_run(m, tok, env, &ec, &sc, rows, lens, items, S_EPISODES, keys, &runs[il]));
        bt_env_destroy(&env);
    }
    bt_episodes *r = &runs[0];
    if (!r->g.tokens || !runs[1].g.tokens || !runs[2].g.tokens) {
        bt_tokenizer_destroy(&tok);
        bt_model_destroy(&m);
        return;
    }
    const int64_t WW = r->g.max_new_tokens;
    CHECK(WW == 300);
    /* interleaved and synchronous turns: the same episodes (log-probs to float rounding: other
       rows decode beside them); interleaved, bit for bit whatever the environment's speed */
    int same = 0, exact = 0;
    double worst = 0;
    for (int64_t b = 0; b < S_EPISODES; b++) {
        bool ok =
            r->g.lengths[b] == runs[1].g.lengths[b] && r->g.n_turns[b] == runs[1].g.n_turns[b] &&
            r->g.finish[b] == runs[1].g.finish[b] && r->env_return[b] == runs[1].env_return[b] &&
            r->tool_calls[b] == runs[1].tool_calls[b];
        for (int64_t j = 0; ok && j < r->g.lengths[b]; j++) {
            ok = r->g.tokens[b * WW + j] == runs[1].g.tokens[b * WW + j];
            double d = fabs((double)r->g.logprobs[b * WW + j] - runs[1].g.logprobs[b * WW + j]);
            worst = d > worst ? d : worst;
        }
        same += ok;
        exact += runs[1].g.lengths[b] == runs[2].g.lengths[b] &&
                 runs[1].env_return[b] == runs[2].env_return[b] &&
                 !memcmp(runs[1].g.tokens + b * WW, runs[2].g.tokens + b * WW,
                         (size_t)WW * sizeof(int32_t)) &&
                 !memcmp(runs[1].g.logprobs + b * WW, runs[2].g.logprobs + b * WW,
                         (size_t)WW * sizeof(float));
    }
    printf("driver: synchronous and interleaved turns agree on %d of %d episodes (log-probs within "
           "%.1e; %d and %d step calls); interleaved with a slow environment: %d bit for bit\n",
           same, S_EPISODES, worst, cenv[0]->steps, cenv[1]->steps, exact);
    CHECK(same == S_EPISODES && worst <= 1e-5 && exact == S_EPISODES);
    /* token in, token out: the rows are the prompt + reset ids, then turns and observations */
    int checked_obs = 0, turns = 0, rewarded = 0, stopped = 0;
    for (int64_t b = 0; b < S_EPISODES; b++) {
        int64_t want_plen = lens[b] + (b == 3 ? 0 : 2);
        CHECK(r->prompt_lens[b] == want_plen);
        CHECK(b == 3 || (r->prompts[b][lens[b]] == 'g' && r->prompts[b][lens[b] + 1] == 'o'));
        const int32_t *row = r->g.tokens + b * WW;
        const uint8_t *mask = r->g.loss_mask + b * WW;
        double want_return = 0;
        int64_t want_tools = 0, want_errors = 0;
        int64_t j = 0;
        for (int64_t t = 0; t < r->g.n_turns[b]; t++) {
            char action[64];
            int64_t a = 0;
            while (j < r->g.lengths[b] && mask[j] && r->g.turn[b * WW + j] == t)
                action[a++] = (char)row[j++];
            turns++;
            const char *e = memchr(action, 'e', (size_t)a); /* the stop string ends a turn */
            CHECK(!e || e == action + a - 1);
            stopped += e != NULL;
            int eos = a > 0 && row[j - 1] == bt_tokenizer_eos(tok);
            int64_t alen = a - eos; /* the action's bytes: decoding stops at the EOS */
            want_return += 0.25 * (double)alen;
            bool tool = memchr(action, 't', (size_t)alen) != NULL;
            want_tools += tool;
            want_errors += tool && memmem(action, (size_t)alen, "tx", 2);
            if (j >= r->g.lengths[b])
                break;
            /* an observation: exactly the chatml tool turn around "saw N: ACTION" */
            char want[256];
            int wl = snprintf(want, sizeof want,
                              "<|im_end|>\n<|im_start|>tool\nsaw %lld: %.*s<|im_end|>\n"
                              "<|im_start|>assistant\n",
                              (long long)alen, (int)alen, action);
            bool ok = true;
            for (int k = 0; k < wl; k++, j++)
                ok = ok && j < r->g.lengths[b] && !mask[j] && row[j] == (uint8_t)want[k] &&
                     r->g.turn[b * WW + j] == t && r->g.logprobs[b * WW + j] == 0;
            CHECK(ok);
            checked_obs += ok;
        }
        CHECK(j == r->g.lengths[b]);
        CHECK(fabs(r->env_return[b] - want_return) < 1e-12);
        CHECK(r->tool_calls[b] == want_tools && r->tool_errors[b] == want_errors);
        rewarded += want_return > 0;
    }
    /* every action text the environment saw is its ids decoded */
    int decoded = 0;
    for (int i = 0; i < cenv[0]->seen; i++) {
        char text[96];
        size_t len = 0;
        CHECK_OK(bt_tokenizer_decode(tok, cenv[0]->action_ids[i], (size_t)cenv[0]->n_action_ids[i],
                                     text, sizeof text, &len));
        decoded += len == cenv[0]->action_lens[i] && !memcmp(text, cenv[0]->actions[i], len);
    }
    printf("driver: %d model turns (%d ended by the stop string), %d observations as the chatml "
           "tool turn of the reply, %d of %d actions the decoding of their ids\n",
           turns, stopped, checked_obs, decoded, cenv[0]->seen);
    CHECK(checked_obs >= 4 && turns > S_EPISODES && decoded == cenv[0]->seen && rewarded > 0 &&
          stopped >= 1);
    for (int il = 0; il < 3; il++) {
        bt_episodes_release(&runs[il]);
        free(cenv[il]);
    }
    /* failures: a step that fails, a reset that ends an episode */
    for (int il = 0; il < 2; il++) {
        s_cenv *e = calloc(1, sizeof *e);
        e->fail_at = 2;
        bt_env_t *env = NULL;
        CHECK_OK(bt_env_new(&s_cops, e, &env));
        ec.interleave = il == 1 ? 2 : 0;
        bt_episodes out;
        bt_episodes_init(&out);
        CHECK(bt_episodes_run(m, tok, env, &ec, &sc, rows, lens, items, S_EPISODES, keys, &out) ==
              BT_EIO);
        CHECK_STR_CONTAINS(bt_last_error(), "step 2 fails");
        CHECK(out.g.tokens == NULL);
        e->reset_done = true;
        CHECK(bt_episodes_run(m, tok, env, &ec, &sc, rows, lens, items, S_EPISODES, keys, &out) ==
              BT_EFORMAT);
        CHECK_STR_CONTAINS(bt_last_error(), "episode 1005 ended at its reset");
        bt_env_destroy(&env);
        free(e);
    }
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
}

/* ---- a rollout of episodes, and the trainer reading it ------------------------------------- */

/*  bt_rollout_sample with an environment: the batch holds each episode's prompt (its reset ids
    appended) and ids as bt_episodes_run gives them with the rollout's keys; its reward is, by
    task.env_reward, the task's score of the last model turn as the test decodes it, the
    environment's return, or both; per-turn rewards put the task's score in the last turn.
    Through the wire and into the trainer: the message gives back every id, mask and turn, and the
    trainer's log-probs of the model's ids (recomputed over the whole episode) are the behaviour
    log-probs to within the KL mismatch of float32 rounding, while the observations are not
    counted: token in, token out, nothing re-tokenized. */
static void test_rollout(void) {
    bt_model_config mc = s_config();
    mc.max_position_embeddings = 512;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 9);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    bt_source_arith_config tc;
    bt_source_arith_config_init(&tc);
    tc.seed = 3;
    tc.digits = 1;
    tc.heldout_size = 10;
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_arith(&tc, &task));
    CHECK(m && tok && task);
    if (!m || !tok || !task)
        return;
    const uint64_t idx[4] = {0, 1, 2, 5};
    bt_rollout_config rc;
    bt_rollout_config_init(&rc);
    rc.group_size = 3;
    rc.sample.temperature = 1.0;
    rc.sample.max_new_tokens = 8;
    rc.episode.max_turns = 3;
    rc.episode.max_episode_tokens = 200;
    rc.episode.turn_rewards = true;
    const bt_episode_reward modes[3] = {BT_EPISODE_REWARD_SUM, BT_EPISODE_REWARD_FINAL,
                                        BT_EPISODE_REWARD_ENV};
    bt_rollout_batch b[3];
    for (int k = 0; k < 3; k++) {
        s_cenv *e = calloc(1, sizeof *e);
        CHECK_OK(bt_env_new(&s_cops, e, &rc.env));
        rc.episode.reward = modes[k];
        bt_rollout_batch_init(&b[k]);
        CHECK_OK(bt_rollout_sample(m, tok, task, idx, 4, &rc, 5, 77, &b[k]));
        bt_env_destroy(&rc.env);
        free(e);
    }
    /* the episodes themselves, run by the test with the rollout's keys and prompts */
    const int64_t n = 12;
    int32_t prompts[4][32];
    const int32_t *rows[12];
    int64_t lens[12];
    uint64_t keys[12];
    bt_env_reset_item items[12];
    bt_source_example ex[4];
    for (int p = 0; p < 4; p++) {
        bt_source_example_init(&ex[p]);
        CHECK_OK(bt_source_train_example(task, idx[p], &ex[p]));
        size_t got = 0;
        CHECK_OK(bt_tokenizer_encode(tok, ex[p].prompt, strlen(ex[p].prompt), true, prompts[p], 32,
                                     &got));
        for (int j = 0; j < 3; j++) {
            rows[p * 3 + j] = prompts[p];
            lens[p * 3 + j] = (int64_t)got;
            keys[p * 3 + j] = bt_rollout_key(77, idx[p], j);
            items[p * 3 + j] = (bt_env_reset_item){
                .episode = keys[p * 3 + j], .prompt = ex[p].prompt, .answer = ex[p].answer};
        }
    }
    bt_sample_config sc = rc.sample;
    sc.n_stops = bt_tokenizer_stops(tok, sc.stops, BT_SAMPLE_MAX_STOPS);
    sc.vocab_limit = bt_tokenizer_vocab_size(tok);
    s_cenv *e = calloc(1, sizeof *e);
    bt_env_t *env = NULL;
    CHECK_OK(bt_env_new(&s_cops, e, &env));
    bt_episodes ep;
    bt_episodes_init(&ep);
    CHECK_OK(bt_episodes_run(m, tok, env, &rc.episode, &sc, rows, lens, items, n, keys, &ep));
    bt_env_destroy(&env);
    free(e);
    const int64_t L = ep.g.max_new_tokens;
    int same = 0, multi = 0, scored = 0;
    for (int64_t c = 0; ep.g.tokens && c < n; c++) {
        const bt_rollout_batch *x = &b[0];
        bool ok = x->max_new_tokens == L && x->lengths[c] == ep.g.lengths[c] &&
                  x->n_turns[c] == ep.g.n_turns[c] && x->prompt_lens[c] == ep.prompt_lens[c] &&
                  !memcmp(x->prompt_tokens + c * x->max_prompt_len, ep.prompts[c],
                          (size_t)ep.prompt_lens[c] * sizeof(int32_t));
        for (int64_t j = 0; ok && j < ep.g.lengths[c]; j++)
            ok = x->tokens[c * L + j] == ep.g.tokens[c * L + j] &&
                 x->loss_mask[c * L + j] == ep.g.loss_mask[c * L + j] &&
                 x->turn[c * L + j] == ep.g.turn[c * L + j] &&
                 x->logprobs[c * L + j] == ep.g.logprobs[c * L + j];
        multi += ep.g.n_turns[c] > 1;
        /* the task's score of the last model turn, decoded by the test */
        char last[64];
        int64_t k = 0;
        for (int64_t j = 0; j < ep.g.lengths[c]; j++)
            if (ep.g.loss_mask[c * L + j] && ep.g.turn[c * L + j] == ep.g.n_turns[c] - 1 &&
                ep.g.tokens[c * L + j] < 256)
                last[k++] = (char)ep.g.tokens[c * L + j];
        last[k] = 0;
        bt_reward_detail d;
        double score =
            bt_source_score(task, ex[c / 3].prompt, ex[c / 3].answer, last, (size_t)k, &d);
        scored += score != 0;
        ok = ok && fabs(b[0].rewards[c] - (score + ep.env_return[c])) < 1e-12 &&
             fabs(b[1].rewards[c] - score) < 1e-12 &&
             fabs(b[2].rewards[c] - ep.env_return[c]) < 1e-12 &&
             b[2].correct[c] == (ep.env_return[c] > 0) && b[1].correct[c] == d.correct;
        for (int64_t t = 0; ok && t < ep.g.n_turns[c]; t++) /* per turn: the score in the last */
            ok = fabs(b[0].turn_rewards[c * BT_MAX_TURNS + t] -
                      (ep.turn_rewards[c * BT_MAX_TURNS + t] +
                       (t == ep.g.n_turns[c] - 1 ? score : 0.0))) < 1e-12;
        ok = ok && b[0].has_turn_rewards;
        same += ok;
    }
    printf("rollout: %d of %lld rows are the episodes with their rewards by mode (%d of several "
           "turns, %d scored by the task)\n",
           same, (long long)n, multi, scored);
    CHECK(same == n && multi >= 3);
    /* the wire, then the trainer */
    bt_msg_t *msg = bt_msg_new(BT_MSG_RESULT);
    bt_rollout_batch back;
    bt_rollout_batch_init(&back);
    CHECK_OK(bt_batch_to_msg(&b[0], msg));
    CHECK_OK(bt_batch_from_msg(msg, &back));
    bool wire = back.n == n && back.max_new_tokens == L && back.has_turn_rewards;
    for (int64_t c = 0; wire && c < n; c++)
        wire = back.lengths[c] == b[0].lengths[c] && back.n_turns[c] == b[0].n_turns[c] &&
               !memcmp(back.tokens + c * L, b[0].tokens + c * L, (size_t)L * sizeof(int32_t)) &&
               !memcmp(back.loss_mask + c * L, b[0].loss_mask + c * L, (size_t)b[0].lengths[c]) &&
               !memcmp(back.turn + c * L, b[0].turn + c * L, (size_t)b[0].lengths[c]);
    CHECK(wire);
    bt_msg_destroy(&msg);
    int64_t model_tokens = 0;
    for (int64_t c = 0; c < n; c++)
        for (int64_t j = 0; j < back.lengths[c]; j++)
            model_tokens += back.loss_mask[c * L + j];
    bt_model *copy = bt_model_new(&mc, bt_cpu(), 1);
    CHECK_OK(bt_weights_copy(copy, m));
    bt_trainer_config tcfg;
    bt_trainer_config_init(&tcfg);
    bt_trainer_t *tr = bt_trainer_new(&copy, &tcfg);
    CHECK(tr != NULL);
    double adv[12 * BT_MAX_TURNS] = {0};
    bt_grpo_config gc = bt_test_grpo_config();
    gc.kl_coef = 0.0;
    bt_trainer_stats st;
    if (tr)
        CHECK_OK(bt_trainer_grpo_step(tr, &back, adv, 0.0, &gc, &st));
    printf("trainer: %g model tokens trained of %lld (the observations' not counted), mismatch KL "
           "%.2e, ratio in [%.6f, %.6f]\n",
           st.tokens, (long long)model_tokens, st.mismatch_kl, st.ratio_min, st.ratio_max);
    CHECK(st.tokens == (double)model_tokens && st.mismatch_kl < 1e-6);
    CHECK(fabs(st.ratio_min - 1) < 1e-4 && fabs(st.ratio_max - 1) < 1e-4);
    bt_trainer_destroy(&tr);
    bt_rollout_batch_release(&back);
    for (int k = 0; k < 3; k++)
        bt_rollout_batch_release(&b[k]);
    for (int p = 0; p < 4; p++)
        bt_source_example_release(&ex[p]);
    bt_episodes_release(&ep);
    bt_source_destroy(&task);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
}

int main(void) {
    s_batch();
    bt_model_config cfg = s_config();
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 21);
    CHECK(m != NULL);
    if (!m)
        return check_exit();
    test_engine(m);
    test_driver();
    test_rollout();
    bt_model_destroy(&m);
    return check_exit();
}
