/*  episodes.c — multi-turn episodes over the engine's turns (episodes.h).

    The engine (bt_generate_episodes) tells this module when a row's turn ends (s_ended) and asks
    it for the environment's answers (s_answers).  An ended turn becomes a pending step; stepping
    decodes the turns, calls bt_env_step once for all of them, keeps each reply's reward and tool
    flags, and turns each observation into ids (the tool turn's text, tokenized once) for the
    engine to append.  With interleave a thread of its own steps whatever is pending whenever it
    is free, so the environment's latency overlaps the other rows' decoding; without, the engine's
    blocking call steps everything pending at once (synchronous turns). */
#define _GNU_SOURCE /* memmem */
#include "baton/episodes.h"

#include "baton/env_service.h"
#include "baton/sandbox.h"
#include "baton/source.h" /* bt_chat_observation */
#include "baton/tools.h"

#include <zmq.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bt_episode_config_init(bt_episode_config *cfg) {
    *cfg = (bt_episode_config){.max_turns = 1};
}

void bt_episodes_init(bt_episodes *e) {
    memset(e, 0, sizeof *e);
    bt_generation_init(&e->g);
}

void bt_episodes_release(bt_episodes *e) {
    if (!e)
        return;
    int64_t n = e->g.batch;
    for (int64_t i = 0; i < n; i++) {
        if (e->prompts)
            free(e->prompts[i]);
        if (e->final_text)
            free(e->final_text[i]);
    }
    bt_generation_release(&e->g);
    free(e->prompts);
    free(e->prompt_lens);
    free(e->turn_rewards);
    free(e->env_return);
    free(e->tool_calls);
    free(e->tool_errors);
    free(e->final_text);
    free(e->final_len);
    bt_episodes_init(e);
}

/* ---- a config's episodes ------------------------------------------------------------------ */

_Static_assert(BT_CONFIG_MAX_TURNS == BT_MAX_TURNS, "task.max_turns: BT_MAX_TURNS");
_Static_assert(BT_CONFIG_TEMPLATE_MAX == BT_EPISODE_TEMPLATE_MAX,
               "task.observation_template: BT_EPISODE_TEMPLATE_MAX");
_Static_assert(BT_EPISODE_REWARD_SUM == 0 && BT_EPISODE_REWARD_FINAL == 1 &&
                   BT_EPISODE_REWARD_ENV == 2,
               "task.env_reward's names (config.c) are bt_episode_reward's values");

/*  config.h's; defined here, where bt_episode_config (episodes.h) is known. */
void bt_config_episode(const bt_config *cfg, bt_episode_config *out) {
    bt_episode_config_init(out);
    out->max_turns = cfg->task.max_turns;
    out->max_episode_tokens = cfg->task.max_episode_tokens;
    out->interleave = cfg->task.interleave;
    out->reward = (bt_episode_reward)cfg->task.env_reward;
    out->turn_rewards = cfg->task.turn_rewards;
    out->chat_template = cfg->task.chat_template;
    out->observation_template = cfg->task.observation_template;
}

/*  The last error, prefixed with the key it came from (prefix "task.", name "env": "task.env:
    ..."), its status kept. */
static bt_status s_fail_key(const char *prefix, const char *name) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", bt_last_error());
    return bt_fail(bt_last_status(), "%s%s: %s", prefix, name, msg);
}

/*  The environment source k's config `one` names with task.env, into *out (NULL for none).  The
    built-in python tool runs in the code verifier's sandbox (python3 at its default path, the
    memory limit task.code_memory_mb) with the tools' own 2 s per call, and runs "pass" once now,
    as the code verifier does.  A service gets CURVE when task.env_server_key is set, with own
    (this worker's key pair, --key) when not NULL, else a fresh pair.  Errors name the key:
    "task.env" (or "data.sources[k].env") for a tool that cannot run, "...env_service" for a
    service that is not there or answers wrongly (its hello). */
static bt_status s_env_new(const bt_curve_keys *own, const bt_config *cfg, const bt_config *one,
                           int k, bt_env_t **out) {
    *out = NULL;
    char key[64];
    if (cfg->data.n_sources > 0)
        snprintf(key, sizeof key, "data.sources[%d].", k);
    else
        snprintf(key, sizeof key, "task.");
    switch (one->task.env) {
    case BT_CONFIG_ENV_NONE: return BT_OK;
    case BT_CONFIG_ENV_CALCULATOR:
    case BT_CONFIG_ENV_PYTHON:
    case BT_CONFIG_ENV_TOOLS: {
        bt_tools_config tc;
        bt_tools_config_init(&tc);
        tc.calculator = one->task.env != BT_CONFIG_ENV_PYTHON;
        tc.python = one->task.env != BT_CONFIG_ENV_CALCULATOR;
        tc.python_sandbox.memory_bytes = (size_t)one->task.code_memory_mb << 20;
        if (bt_tools_env_new(&tc, out) != BT_OK)
            return s_fail_key(key, "env");
        if (tc.python) { /* as the code verifier does: a sandbox that cannot run fails now */
            bt_sandbox_result r;
            bt_status st = bt_sandbox_run(&tc.python_sandbox, "pass\n", 5, &r);
            if (st == BT_OK && r.verdict != BT_SANDBOX_PASS)
                st = bt_fail(BT_EIO, "sandbox: /usr/bin/python3 cannot run \"pass\" (%s): %.200s",
                             bt_sandbox_verdict_name(r.verdict), r.head);
            if (st != BT_OK) {
                bt_env_destroy(out);
                return s_fail_key(key, "env");
            }
        }
        return BT_OK;
    }
    case BT_CONFIG_ENV_SERVICE: {
        bt_curve_keys keys;
        memset(&keys, 0, sizeof keys);
        if (one->task.env_server_key[0]) {
            if (bt_curve_available() != BT_OK)
                return s_fail_key(key, "env_server_key");
            if (own) {
                memcpy(keys.public_key, own->public_key, sizeof keys.public_key);
                memcpy(keys.secret_key, own->secret_key, sizeof keys.secret_key);
            } else if (zmq_curve_keypair(keys.public_key, keys.secret_key) != 0) {
                return bt_fail(BT_EIO, "%senv_server_key: no CURVE key pair: %s", key,
                               zmq_strerror(zmq_errno()));
            }
            memcpy(keys.server_key, one->task.env_server_key, sizeof keys.server_key);
        }
        if (bt_env_service_new(one->task.env_service, one->task.env_timeout_ms,
                               one->task.env_retries, one->task.env_server_key[0] ? &keys : NULL,
                               one->task.env_insecure, out) != BT_OK)
            return s_fail_key(key, "env_service");
        return BT_OK;
    }
    }
    return bt_fail(BT_EINVAL, "%senv: unknown kind %d", key, (int)one->task.env);
}

bt_status bt_episode_source_new(const bt_curve_keys *own, const bt_config *cfg, int k,
                                bt_episode_source *out) {
    memset(out, 0, sizeof *out);
    bt_episode_config_init(&out->episode);
    bt_config *one = malloc(sizeof *one);
    if (!one)
        return bt_fail(BT_ENOMEM, "episodes: out of memory");
    bt_status st = bt_config_source(cfg, k, one);
    if (st == BT_OK)
        st = s_env_new(own, cfg, one, k, &out->env);
    if (st == BT_OK) {
        snprintf(out->chat_template, sizeof out->chat_template, "%s", one->task.chat_template);
        snprintf(out->observation_template, sizeof out->observation_template, "%s",
                 one->task.observation_template);
        bt_config_episode(one, &out->episode);
        out->episode.chat_template = out->chat_template;
        out->episode.observation_template = out->observation_template;
    }
    free(one);
    return st;
}

void bt_episode_source_release(bt_episode_source *s) {
    if (s)
        bt_env_destroy(&s->env);
}

/* ---- the turns between engine and environment ---------------------------------------------- */

#define S_STOPS_MAX 16

typedef struct s_step { /* an ended turn, to be stepped */
    int64_t row, turn;
    int32_t *ids;
    int64_t n;
    bool last;
} s_step;

typedef struct s_answer { /* a stepped turn's answer, for the engine */
    int64_t row;
    int32_t *ids;
    int64_t n;
    bool done;
} s_answer;

typedef struct s_run {
    const bt_tokenizer_t *tok;
    bt_env_t *env;
    const bt_episode_config *cfg;
    const bt_env_reset_item *items;
    bt_episodes *out;
    /* stop strings */
    const char *stops[S_STOPS_MAX];
    size_t stop_lens[S_STOPS_MAX];
    int n_stops;
    size_t stop_longest;
    char *tail; /* turn_ends' scratch: the newest ids decoded */
    size_t tail_cap;
    /* pending steps and answers, under mu with interleave */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    s_step *pending;
    int64_t n_pending, cap_pending;
    int64_t n_awaiting; /* of the pending steps, those whose answer the engine awaits */
    bool kick;          /* the engine asked for the pending steps (its poll between steps) */
    s_answer *ready;
    int64_t n_ready, cap_ready;
    s_answer *handed; /* given to the engine by the last answers call: freed at the next */
    int64_t n_handed;
    bool closing;
    bt_status error; /* the stepping's failure, with its message */
    char message[512];
    bool threaded;
    pthread_t thread;
} s_run;

/*  Whether the turn's newest id completes one of the stop strings: the newest ids, enough to hold
    the longest stop string, decoded and searched. */
static bool s_turn_ends(void *user, int64_t row, const int32_t *ids, int64_t n) {
    (void)row;
    s_run *r = user;
    if (r->n_stops == 0)
        return false;
    int64_t k = (int64_t)r->stop_longest + 4; /* ids of at least one byte each, and a margin */
    k = k < n ? k : n;
    size_t len = 0;
    if (bt_tokenizer_decode(r->tok, ids + n - k, (size_t)k, r->tail, r->tail_cap, &len) != BT_OK)
        return false;  /* an id the tokenizer cannot decode holds no stop string */
    size_t newest = 0; /* bytes of the newest id */
    char one[512];
    if (bt_tokenizer_decode(r->tok, ids + n - 1, 1, one, sizeof one, &newest) != BT_OK)
        newest = len;
    for (int i = 0; i < r->n_stops; i++) {
        /* an occurrence ending within the newest id's bytes: it was not there a token ago */
        size_t from = len >= newest + r->stop_lens[i] ? len - newest - r->stop_lens[i] + 1 : 0;
        if (from < len && memmem(r->tail + from, len - from, r->stops[i], r->stop_lens[i]))
            return true;
    }
    return false;
}

/*  The growth of a queue of elements of size each to hold one more. */
static bt_status s_grow(void **items, int64_t *cap, int64_t n, size_t each) {
    if (n < *cap)
        return BT_OK;
    int64_t want = *cap ? 2 * *cap : 16;
    void *p = realloc(*items, (size_t)want * each);
    if (!p)
        return bt_fail(BT_ENOMEM, "episodes: out of memory");
    *items = p;
    *cap = want;
    return BT_OK;
}

/*  Steps the turns steps[0..n) with one bt_env_step call; records their rewards and flags, and
    appends the answers of those that await one to r->ready (under the lock when threaded).
    Frees the steps' ids. */
static bt_status s_step_all(s_run *r, s_step *steps, int64_t n) {
    const size_t per = bt_tokenizer_max_token_bytes(r->tok);
    bt_env_step_item *items = calloc((size_t)n + 1, sizeof *items);
    bt_env_reply *replies = calloc((size_t)n + 1, sizeof *replies);
    char **texts = calloc((size_t)n + 1, sizeof *texts);
    bt_status st =
        items && replies && texts ? BT_OK : bt_fail(BT_ENOMEM, "episodes: out of memory");
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        size_t cap = (size_t)steps[i].n * per + 1, len = 0;
        texts[i] = malloc(cap);
        st = texts[i] ? bt_tokenizer_decode(r->tok, steps[i].ids, (size_t)steps[i].n, texts[i], cap,
                                            &len)
                      : bt_fail(BT_ENOMEM, "episodes: out of memory");
        items[i] = (bt_env_step_item){.episode = r->items[steps[i].row].episode,
                                      .action_text = texts[i],
                                      .action_len = len,
                                      .action_ids = steps[i].ids,
                                      .n_action_ids = steps[i].n};
    }
    double t0 = bt_now();
    if (st == BT_OK)
        st = bt_env_step(r->env, items, n, replies);
    bt_episodes *out = r->out;
    out->env_steps++;
    out->env_s += bt_now() - t0;
    s_answer *made = calloc((size_t)n + 1, sizeof *made);
    int64_t n_made = 0;
    if (st == BT_OK && !made)
        st = bt_fail(BT_ENOMEM, "episodes: out of memory");
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        const bt_env_reply *rep = &replies[i];
        int64_t b = steps[i].row;
        out->turn_rewards[b * BT_MAX_TURNS + steps[i].turn] = rep->reward;
        out->env_return[b] += rep->reward;
        out->tool_calls[b] += rep->tool_called;
        out->tool_errors[b] += rep->tool_called && rep->tool_error;
        if (steps[i].last)
            continue;
        s_answer *a = &made[n_made++];
        *a = (s_answer){.row = b, .done = rep->done};
        if (rep->done)
            continue;
        char *text = NULL;
        size_t len = 0, n_ids = 0;
        st = bt_chat_observation(r->cfg->chat_template, r->cfg->observation_template,
                                 rep->observation, rep->observation_len, &text, &len);
        a->ids = st == BT_OK ? malloc((len + 2) * sizeof *a->ids) : NULL;
        if (st == BT_OK && !a->ids)
            st = bt_fail(BT_ENOMEM, "episodes: out of memory");
        if (st == BT_OK)
            st = bt_tokenizer_encode(r->tok, text, len, false, a->ids, len + 2, &n_ids);
        a->n = (int64_t)n_ids;
        free(text);
    }
    if (st == BT_OK && r->threaded)
        pthread_mutex_lock(&r->mu);
    for (int64_t i = 0; i < n_made && st == BT_OK; i++) {
        st = s_grow((void **)&r->ready, &r->cap_ready, r->n_ready, sizeof *r->ready);
        if (st == BT_OK) {
            r->ready[r->n_ready++] = made[i];
            made[i].ids = NULL;
        }
    }
    if (st == BT_OK && r->threaded) {
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    for (int64_t i = 0; made && i < n_made; i++)
        free(made[i].ids);
    for (int64_t i = 0; i < n; i++) {
        free(steps[i].ids);
        if (texts)
            free(texts[i]);
    }
    free(made);
    free(texts);
    free(replies);
    free(items);
    return st;
}

/*  Takes every pending step (the caller holds the lock when threaded) into *steps. */
static int64_t s_take(s_run *r, s_step **steps) {
    *steps = r->pending;
    int64_t n = r->n_pending;
    r->pending = NULL;
    r->n_pending = r->cap_pending = r->n_awaiting = 0;
    r->kick = false;
    return n;
}

/*  The stepping thread: what is pending, in one call, once the engine has asked for it (its poll
    between decode steps hands over the turns that ended in the step: one call per step at most)
    and some of it awaits an answer; the last turns ride along, or go at the end. */
static void *s_stepper(void *arg) {
    s_run *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!(r->kick && r->n_awaiting > 0) && !r->closing && r->error == BT_OK)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->error != BT_OK || (r->n_pending == 0 && r->closing))
            break;
        s_step *steps = NULL;
        int64_t n = s_take(r, &steps);
        pthread_mutex_unlock(&r->mu);
        bt_status st = s_step_all(r, steps, n);
        free(steps);
        pthread_mutex_lock(&r->mu);
        if (st != BT_OK) {
            r->error = st;
            snprintf(r->message, sizeof r->message, "%s", bt_last_error());
            pthread_cond_broadcast(&r->cv);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static bt_status s_ended(void *user, int64_t row, int64_t turn, const int32_t *ids, int64_t n,
                         bt_finish_reason why, bool last) {
    (void)why;
    s_run *r = user;
    s_step step = {.row = row, .turn = turn, .n = n, .last = last};
    step.ids = malloc((size_t)(n + 1) * sizeof *step.ids);
    if (!step.ids)
        return bt_fail(BT_ENOMEM, "episodes: out of memory");
    memcpy(step.ids, ids, (size_t)n * sizeof *ids);
    if (r->threaded)
        pthread_mutex_lock(&r->mu);
    bt_status st = r->error != BT_OK ? bt_fail(r->error, "%s", r->message)
                                     : s_grow((void **)&r->pending, &r->cap_pending, r->n_pending,
                                              sizeof *r->pending);
    if (st == BT_OK) { /* queued: the engine's next poll hands it to the thread */
        r->pending[r->n_pending++] = step;
        r->n_awaiting += !last;
        step.ids = NULL;
    }
    if (r->threaded)
        pthread_mutex_unlock(&r->mu);
    free(step.ids);
    return st;
}

static void s_free_handed(s_run *r) {
    for (int64_t i = 0; i < r->n_handed; i++)
        free(r->handed[i].ids);
    free(r->handed);
    r->handed = NULL;
    r->n_handed = 0;
}

static bt_status s_answers(void *user, bool wait, bt_turn_answer *out, int64_t cap, int64_t *n) {
    s_run *r = user;
    s_free_handed(r);
    *n = 0;
    double t0 = bt_now();
    bt_status st = BT_OK;
    if (!r->threaded && wait) { /* synchronous turns: every pending turn at once */
        s_step *steps = NULL;
        int64_t k = s_take(r, &steps);
        st = s_step_all(r, steps, k);
        free(steps);
    }
    if (r->threaded) {
        pthread_mutex_lock(&r->mu);
        if (r->n_awaiting > 0) { /* the turns that ended since the last poll: step them */
            r->kick = true;
            pthread_cond_broadcast(&r->cv);
        }
        while (wait && r->n_ready == 0 && r->error == BT_OK)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->error != BT_OK)
            st = bt_fail(r->error, "%s", r->message);
    }
    if (wait)
        r->out->waited_s += bt_now() - t0;
    int64_t k = st == BT_OK ? (r->n_ready < cap ? r->n_ready : cap) : 0;
    if (k > 0) {
        r->handed = malloc((size_t)k * sizeof *r->handed);
        if (!r->handed)
            st = bt_fail(BT_ENOMEM, "episodes: out of memory");
    }
    if (st == BT_OK && k > 0) {
        memcpy(r->handed, r->ready, (size_t)k * sizeof *r->ready);
        memmove(r->ready, r->ready + k, (size_t)(r->n_ready - k) * sizeof *r->ready);
        r->n_ready -= k;
        r->n_handed = k;
        for (int64_t i = 0; i < k; i++)
            out[i] = (bt_turn_answer){.row = r->handed[i].row,
                                      .ids = r->handed[i].ids,
                                      .n_ids = r->handed[i].n,
                                      .done = r->handed[i].done};
        *n = k;
    }
    if (r->threaded)
        pthread_mutex_unlock(&r->mu);
    return st;
}

/*  Every step still pending (the last turns') stepped, the thread joined. */
static bt_status s_finish(s_run *r, bt_status st) {
    if (r->threaded) {
        pthread_mutex_lock(&r->mu);
        r->closing = true;
        if (st != BT_OK && r->error == BT_OK)
            r->error = st; /* the engine failed: nothing more to step */
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
        r->threaded = false;
        if (st == BT_OK && r->error != BT_OK)
            st = bt_fail(r->error, "%s", r->message);
    }
    if (st == BT_OK && r->n_pending > 0) {
        s_step *steps = NULL;
        int64_t k = s_take(r, &steps);
        st = s_step_all(r, steps, k);
        free(steps);
    }
    for (int64_t i = 0; i < r->n_pending; i++)
        free(r->pending[i].ids);
    free(r->pending);
    for (int64_t i = 0; i < r->n_ready; i++)
        free(r->ready[i].ids);
    free(r->ready);
    s_free_handed(r);
    return st;
}

double bt_episode_reward_of(bt_episode_reward mode, double task_score, bool task_right,
                            double env_return, bool *right) {
    if (right)
        *right = mode == BT_EPISODE_REWARD_ENV ? env_return > 0 : task_right;
    return mode == BT_EPISODE_REWARD_ENV     ? env_return
           : mode == BT_EPISODE_REWARD_FINAL ? task_score
                                             : task_score + env_return;
}

/* ---- bt_episodes_run ----------------------------------------------------------------------- */

static bt_status s_check(const bt_episode_config *cfg, const bt_env_t *env) {
    if (cfg->max_turns < 1 || cfg->max_turns > BT_MAX_TURNS)
        return bt_fail(BT_EINVAL, "task.max_turns: expected an integer in [1, %d], got %lld",
                       BT_MAX_TURNS, (long long)cfg->max_turns);
    if (cfg->max_episode_tokens < 1)
        return bt_fail(BT_EINVAL, "task.max_episode_tokens: expected an integer >= 1, got %lld",
                       (long long)cfg->max_episode_tokens);
    if (!env)
        return bt_fail(BT_EINVAL, "episodes: no environment (task.env)");
    return BT_OK;
}

/*  The prompts with their reset observations appended. */
static bt_status s_reset(s_run *r, const int32_t *const *prompts, const int64_t *prompt_lens,
                         int64_t n) {
    bt_episodes *out = r->out;
    bt_env_reply *replies = calloc((size_t)n + 1, sizeof *replies);
    bt_status st = replies ? bt_env_reset(r->env, r->items, n, replies)
                           : bt_fail(BT_ENOMEM, "episodes: out of memory");
    for (int64_t i = 0; i < n && st == BT_OK; i++) {
        if (replies[i].done) {
            st = bt_fail(BT_EFORMAT,
                         "environment: episode %llu ended at its reset: an episode needs a model "
                         "turn",
                         (unsigned long long)r->items[i].episode);
            break;
        }
        size_t len = replies[i].observation_len, n_ids = 0;
        out->prompts[i] = malloc(((size_t)prompt_lens[i] + len + 2) * sizeof *out->prompts[i]);
        if (!out->prompts[i]) {
            st = bt_fail(BT_ENOMEM, "episodes: out of memory");
            break;
        }
        memcpy(out->prompts[i], prompts[i], (size_t)prompt_lens[i] * sizeof *prompts[i]);
        if (len > 0)
            st = bt_tokenizer_encode(r->tok, replies[i].observation, len, false,
                                     out->prompts[i] + prompt_lens[i], len + 2, &n_ids);
        out->prompt_lens[i] = prompt_lens[i] + (int64_t)n_ids;
        if (out->prompt_lens[i] > out->longest_prompt)
            out->longest_prompt = out->prompt_lens[i];
    }
    free(replies);
    return st;
}

/*  The last model turn of each episode, decoded. */
static bt_status s_final_texts(bt_episodes *out, const bt_tokenizer_t *tok) {
    const bt_generation *g = &out->g;
    const int64_t W = g->max_new_tokens;
    const size_t per = bt_tokenizer_max_token_bytes(tok);
    int32_t *ids = malloc((size_t)W * sizeof *ids + 1);
    bt_status st = ids ? BT_OK : bt_fail(BT_ENOMEM, "episodes: out of memory");
    for (int64_t b = 0; b < g->batch && st == BT_OK; b++) {
        int64_t k = 0, last = g->n_turns[b] - 1;
        for (int64_t j = 0; j < g->lengths[b]; j++)
            if (g->loss_mask[b * W + j] && g->turn[b * W + j] == last)
                ids[k++] = g->tokens[b * W + j];
        size_t cap = (size_t)k * per + 1;
        out->final_text[b] = malloc(cap);
        st = out->final_text[b] ? bt_tokenizer_decode(tok, ids, (size_t)k, out->final_text[b], cap,
                                                      &out->final_len[b])
                                : bt_fail(BT_ENOMEM, "episodes: out of memory");
    }
    free(ids);
    return st;
}

bt_status bt_episodes_run(bt_model *model, const bt_tokenizer_t *tok, bt_env_t *env,
                          const bt_episode_config *cfg, const bt_sample_config *sample,
                          const int32_t *const *prompts, const int64_t *prompt_lens,
                          const bt_env_reset_item *items, int64_t n, const uint64_t *keys,
                          bt_episodes *out) {
    BT_ASSERT(model && tok && cfg && sample && out && (n == 0 || (prompts && items)));
    bt_episodes_release(out);
    BT_TRY(s_check(cfg, env));
    s_run r = {.tok = tok, .env = env, .cfg = cfg, .items = items, .out = out};
    out->prompts = calloc((size_t)n + 1, sizeof *out->prompts);
    out->prompt_lens = calloc((size_t)n + 1, sizeof *out->prompt_lens);
    out->turn_rewards = calloc((size_t)(n * BT_MAX_TURNS) + 1, sizeof *out->turn_rewards);
    out->env_return = calloc((size_t)n + 1, sizeof *out->env_return);
    out->tool_calls = calloc((size_t)n + 1, sizeof *out->tool_calls);
    out->tool_errors = calloc((size_t)n + 1, sizeof *out->tool_errors);
    out->final_text = calloc((size_t)n + 1, sizeof *out->final_text);
    out->final_len = calloc((size_t)n + 1, sizeof *out->final_len);
    bt_status st = out->prompts && out->prompt_lens && out->turn_rewards && out->env_return &&
                           out->tool_calls && out->tool_errors && out->final_text && out->final_len
                       ? BT_OK
                       : bt_fail(BT_ENOMEM, "episodes: out of memory");
    out->g.batch = n; /* what bt_episodes_release frees, even before the engine fills g */
    for (const char *s = bt_env_stop_strings(env); st == BT_OK && s && *s; s += strlen(s) + 1) {
        if (r.n_stops == S_STOPS_MAX) {
            st = bt_fail(BT_EINVAL, "environment: more than %d stop strings", S_STOPS_MAX);
            break;
        }
        r.stops[r.n_stops] = s;
        r.stop_lens[r.n_stops] = strlen(s);
        if (r.stop_lens[r.n_stops] > r.stop_longest)
            r.stop_longest = r.stop_lens[r.n_stops];
        r.n_stops++;
    }
    r.tail_cap = (r.stop_longest + 4) * bt_tokenizer_max_token_bytes(tok) + 1;
    r.tail = malloc(r.tail_cap);
    if (st == BT_OK && !r.tail)
        st = bt_fail(BT_ENOMEM, "episodes: out of memory");
    if (st == BT_OK)
        st = s_reset(&r, prompts, prompt_lens, n);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    if (st == BT_OK && cfg->interleave > 0) {
        if (pthread_create(&r.thread, NULL, s_stepper, &r) != 0)
            st = bt_fail(BT_EIO, "episodes: cannot start the environment's thread");
        else
            r.threaded = true;
    }
    const bt_turn_ops ops = {
        .user = &r, .turn_ends = s_turn_ends, .ended = s_ended, .answers = s_answers};
    bt_generation g;
    bt_generation_init(&g);
    if (st == BT_OK)
        st = bt_generate_episodes(model, (const int32_t *const *)out->prompts, out->prompt_lens, n,
                                  sample, keys, cfg->max_turns, cfg->max_episode_tokens,
                                  cfg->interleave, &ops, &g);
    st = s_finish(&r, st);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    free(r.tail);
    if (st == BT_OK) {
        out->g = g;
        st = s_final_texts(out, tok);
    } else {
        bt_generation_release(&g);
    }
    if (st != BT_OK)
        bt_episodes_release(out);
    return st;
}
