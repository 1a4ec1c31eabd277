/*  service.h — the one client of a JSON service over ZeroMQ REQ (the reward service, the
    environment service): a relaxed, correlated REQ socket (CURVE on tcp://), one frame of JSON
    per request, a per-attempt timeout with resends, a late reply to an abandoned attempt dropped,
    and the reply's framing checked as hostile input (one frame, UTF-8, one JSON object with
    nothing after it, NaN/Infinity named, the service's own "error" returned as the error).
    What the reply must hold is the caller's to check; every error names the service and its
    endpoint ("reward service ipc:///tmp/r.ipc: reply: ...").
    Threading: a client belongs to the thread that made it (it owns a socket and a context).
    Lifetime: one per worker, from its WELCOME config until the worker stops. */
#ifndef BATON_SERVICE_H
#define BATON_SERVICE_H

#include "baton/buf.h"
#include "baton/security.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;
typedef struct bt_service bt_service_t;

/*  A client of the service at endpoint ("tcp://HOST:PORT" or "ipc://PATH"; its own ZeroMQ
    context, so not "inproc://"), named what in errors ("reward service").  curve (copied; NULL
    for none): the client's key pair and the service's public key (server_key), making the socket
    a CURVE client.  A tcp:// endpoint without curve is refused unless insecure, as baton's worker
    sockets are (docs/protocol.md, "Sockets and framing").  timeout_ms >= 1, retries >= 0.
    Connecting does not wait for the service.  Caller owns *out (NULL on error); destroy with
    bt_service_destroy(). */
bt_status bt_service_new(const char *what, const char *endpoint, int64_t timeout_ms,
                         int64_t retries, const bt_curve_keys *curve, bool insecure,
                         bt_service_t **out);
/*  NULL-safe and idempotent; sets *self_p to NULL. */
void bt_service_destroy(bt_service_t **self_p);
/*  Borrowed: valid until bt_service_destroy. */
const char *bt_service_endpoint(const bt_service_t *self);

/*  Sends request's bytes and waits timeout_ms for the reply, sending it again up to retries times
    when none comes.  BT_OK with *root the reply, a JSON object (caller owns it: cJSON_Delete; the
    cJSON stays in the workers/ module that asked); BT_ENOMEM, sending nothing, when request
    failed (a write to it was dropped); BT_EIO when no reply came ("no reply within 300 ms (2
    attempts)") or ZeroMQ failed; BT_EFORMAT for a reply of several frames, not UTF-8,
    not one JSON object, NaN or Infinity where a number belongs (what_number says what each
    number must be: "every reward must be a finite number"), or carrying a string "error" ("the
    service says: ...").  The client stays usable after an error. */
bt_status bt_service_call(bt_service_t *self, const bt_buf *request, const char *what_number,
                          struct cJSON **root);

/*  BT_EFORMAT with "WHAT ENDPOINT: reply: " and the formatted text: the caller's verdict on a
    reply. */
bt_status bt_service_bad_reply(const bt_service_t *self, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/*  Appends ,"key": and s[0, len) as a JSON string, as requests carry text: valid UTF-8 as it is,
    \n and \t short, other control characters escaped, each byte that is not part of well-formed
    UTF-8 as U+FFFD (b->failed says when it did not fit). */
void bt_service_put_string(bt_buf *b, const char *key, const char *s, size_t len);

/*  st, or, when it is bt_service_call's "no reply" error for the first request a worker sends
    (named request: "ping"), that error followed by what it means: "... to the ping a worker sends
    as it starts: no service answers there (start it before the run, or fix FIX)". */
bt_status bt_service_silent_at_start(bt_status st, const char *request, const char *fix);

#ifdef __cplusplus
}
#endif
#endif
