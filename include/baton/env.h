/*  env.h — an environment of multi-turn episodes: what answers the policy between its turns (a
    tool, a game, a user simulator).  One interface for the built-in tools (data/tools.c:
    calculator, python) and the environment service client (workers/env_service.c), so the
    rollout's episode loop never knows which it talks to.  Batched: one call advances every
    episode of a rollout job that is waiting for the environment.
    Threading: an environment belongs to the thread that made it.
    Lifetime: one per rollout or eval worker, from its WELCOME config until the worker stops. */
#ifndef BATON_ENV_H
#define BATON_ENV_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  The longest observation an environment may return for one turn, in bytes; beyond it a reply
    is refused (a service) or cut (a built-in tool's output, which then says so). */
#define BT_ENV_OBSERVATION_MAX 65536

/*  An episode starting.  Borrowed: the strings stay the caller's. */
typedef struct bt_env_reset_item {
    uint64_t episode;    /* unique within the rollout job: (prompt id, sample) keyed */
    const char *prompt;  /* NUL-terminated, as the task gives it (no BOS) */
    const char *answer;  /* NUL-terminated reference answer */
    const char *columns; /* NULL, or the example's other JSONL keys as a JSON object's text */
} bt_env_reset_item;

/*  One model turn of an episode, given to the environment.  Borrowed. */
typedef struct bt_env_step_item {
    uint64_t episode;
    const char *action_text; /* action_len bytes: the turn decoded, up to and including the stop
                                string that ended it (the tool call's closing tag); any bytes */
    size_t action_len;
    const int32_t *action_ids; /* (n_action_ids) the turn's token ids as sampled */
    int64_t n_action_ids;
} bt_env_step_item;

/*  What the environment answers for one episode.  observation is owned by the environment and
    valid until its next call (reset, step or destroy). */
typedef struct bt_env_reply {
    const char *observation; /* observation_len bytes ("" for none), appended to the episode as
                                the environment's turn (tokenized once, never re-tokenized) */
    size_t observation_len;
    double reward;    /* this turn's reward (0 when the environment gives only a final one) */
    bool done;        /* the episode ends here: no more model turns */
    bool tool_called; /* the action held a tool call the environment recognized */
    bool tool_error;  /* ... and that call failed (a malformed expression, code that raised) */
} bt_env_reply;

typedef struct bt_env bt_env_t;

/*  The operations behind an environment; user is the implementation's state. */
typedef struct bt_env_ops {
    /*  Starts n episodes; fills out[0..n).  A reset's reply may carry an observation (shown to
        the model before its first turn, after the prompt) and done (an episode over before it
        began: no model turn). */
    bt_status (*reset)(void *user, const bt_env_reset_item *items, int64_t n, bt_env_reply *out);
    /*  Advances n episodes by one model turn each; fills out[0..n). */
    bt_status (*step)(void *user, const bt_env_step_item *items, int64_t n, bt_env_reply *out);
    /*  Frees user. */
    void (*destroy)(void *user);
    /*  The text that ends a model turn without ending the episode (a tool call's closing tag,
        "</calc>"), NUL-separated, ending with an empty string; NULL: none (each turn runs to
        EOS or its token budget). */
    const char *stop_strings;
} bt_env_ops;

/*  An environment over ops and user (taking ownership of user: ops->destroy frees it, even when
    this fails).  Caller owns *out; destroy with bt_env_destroy(). */
bt_status bt_env_new(const bt_env_ops *ops, void *user, bt_env_t **out);
/*  NULL-safe and idempotent; sets *self_p to NULL. */
void bt_env_destroy(bt_env_t **self_p);
/*  ops->reset / ops->step, with every reply checked: observation_len <= BT_ENV_OBSERVATION_MAX,
    reward finite.  BT_EFORMAT naming the episode otherwise. */
bt_status bt_env_reset(bt_env_t *self, const bt_env_reset_item *items, int64_t n,
                       bt_env_reply *out);
bt_status bt_env_step(bt_env_t *self, const bt_env_step_item *items, int64_t n, bt_env_reply *out);
/*  ops->stop_strings (NULL for none). */
const char *bt_env_stop_strings(const bt_env_t *self);

#ifdef __cplusplus
}
#endif
#endif
