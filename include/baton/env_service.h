/*  env_service.h — a client of an environment service: any program that answers, over ZeroMQ
    REQ/REP, one JSON request per batch of episodes, "reset" (episodes starting) and "step" (one
    model turn each), with their observations, rewards and ends (docs/protocol.md, "Environment
    service").  It is a bt_env (env.h), so the rollout's episode loop drives it as it drives the
    built-in tools.
    Threading: the environment belongs to the thread that made it (it owns a socket).
    Lifetime: one per rollout or eval worker, from its WELCOME config until the worker stops. */
#ifndef BATON_ENV_SERVICE_H
#define BATON_ENV_SERVICE_H

#include "baton/env.h"
#include "baton/security.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  The most stop strings a service may announce, and the longest one, in bytes. */
#define BT_ENV_SERVICE_STOP_MAX 16
#define BT_ENV_SERVICE_STOP_LEN 256

/*  An environment served at endpoint ("tcp://HOST:PORT" or "ipc://PATH"; its own ZeroMQ context,
    so not "inproc://").  Each request waits timeout_ms (>= 1) for its reply and is sent again, with
    the same request number, up to retries (>= 0) times when none comes; a reply to an abandoned
    attempt is dropped.  curve (copied; NULL for none): this client's key pair and the service's
    public key (server_key); a tcp:// endpoint without it is refused unless insecure.
    Sends the "hello" request at once and waits for its reply (timeout_ms, retries), which names
    the stop strings that end a model turn (bt_env_stop_strings): a service that is down or
    answers wrongly fails here, naming the endpoint, before any episode starts.
    Replies are checked as hostile input: errors (BT_EFORMAT, BT_EIO for no reply) name the
    endpoint and, for an item, its index and episode; the service's own "error" comes back as
    "the service says: ...".  The environment stays usable after an error.  Caller owns *out
    (NULL on error); destroy with bt_env_destroy(). */
bt_status bt_env_service_new(const char *endpoint, int64_t timeout_ms, int64_t retries,
                             const bt_curve_keys *curve, bool insecure, bt_env_t **out);

#ifdef __cplusplus
}
#endif
#endif
