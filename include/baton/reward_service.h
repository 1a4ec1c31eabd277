/*  reward_service.h — a client of a reward service: any program that answers one JSON request per
    batch of completions over ZeroMQ REQ/REP with their rewards (docs/protocol.md, "Reward
    service"), and bt_reward_score, the one way rollout and eval workers score completions.
    Threading: a service client belongs to the thread that made it (it owns a socket).
    Lifetime: one per worker, from its WELCOME config until the worker stops. */
#ifndef BATON_REWARD_SERVICE_H
#define BATON_REWARD_SERVICE_H

#include "baton/source.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_reward_service bt_reward_service_t;

/*  The largest reward magnitude a service may send.  Beyond it a reward is refused: such values
    are a service's bug (a sentinel, an unscaled score) far more often than a scale, and they do
    harm silently: one of them makes its group's std so large that every other completion's
    advantage is about zero, and from about 1e154 the eval's float64 sum of squares overflows. */
#define BT_REWARD_MAX 1e6

/*  One completion to score.  Borrowed: the strings stay the caller's. */
typedef struct bt_reward_item {
    uint64_t index;         /* the prompt's index in its stream (training or held-out) */
    const char *prompt;     /* NUL-terminated */
    const char *answer;     /* NUL-terminated reference answer */
    const char *completion; /* len bytes, not NUL-terminated; any bytes */
    size_t len;
    const char *columns; /* NULL, or the example's other JSONL keys as a JSON object's text
                            (bt_source_example.columns), sent as the item's "columns" */
} bt_reward_item;

/*  A client of the service at endpoint ("tcp://HOST:PORT" or "ipc://PATH"; it has its own ZeroMQ
    context, so not "inproc://").  Each request waits timeout_ms (>= 1) for its reply and is sent
    again up to retries (>= 0) times when none comes; a reply to an abandoned attempt is dropped.
    Connecting does not wait for the service to be up (bt_reward_service_ping does).  BT_EIO
    naming the endpoint when ZeroMQ refuses it.  Caller owns *out (NULL on error): destroy with
    bt_reward_service_destroy(). */
bt_status bt_reward_service_new(const char *endpoint, int64_t timeout_ms, int64_t retries,
                                bt_reward_service_t **out);
/*  NULL-safe and idempotent; sets *self_p to NULL. */
void bt_reward_service_destroy(bt_reward_service_t **self_p);

/*  Asks the service whether it answers: a request of kind "ping" with no items, waited for as any
    request (timeout_ms, retries), whose reply must be a valid one for no items ({"rewards": []}).
    A worker pings as it starts, so a service that is down or misconfigured stops the run at once
    with the reason, not after a task's timeouts and re-queues.  Errors as
    bt_reward_service_score, the timeout one saying the service does not answer there. */
bt_status bt_reward_service_ping(bt_reward_service_t *self);

/*  Sends items[0..n) (n >= 1) as one request of the given kind ("rollout" or "eval") and fills
    rewards[0..n) and correct[0..n) from the reply: its "correct" array when it has one, else
    reward >= 1.  Errors name the endpoint and say what went wrong: BT_EIO when no reply came
    within the timeout and retries, BT_EFORMAT for a reply that is not what docs/protocol.md says
    (not one frame of JSON, NaN or Infinity where a number belongs, a count that differs from n,
    a reward that is not a finite number of magnitude at most BT_REWARD_MAX, a "correct" that is
    not booleans) or that carries the service's own "error".  The client stays
    usable after an error.  On error rewards and correct may hold anything. */
bt_status bt_reward_service_score(bt_reward_service_t *self, const char *kind,
                                  const bt_reward_item *items, int64_t n, double *rewards,
                                  bool *correct);

/*  Scores items[0..n): in one bt_reward_service_score request when service is not NULL, else each
    with bt_source_score (the task's verifier, or a host's reward function set on the task). */
bt_status bt_reward_score(bt_reward_service_t *service, const bt_source_t *task, const char *kind,
                          const bt_reward_item *items, int64_t n, double *rewards, bool *correct);

#ifdef __cplusplus
}
#endif
#endif
