/*  service.c — the JSON service client shared by the reward and environment services: one JSON
    request per call over a REQ socket that survives a lost reply (ZMQ_REQ_RELAXED +
    ZMQ_REQ_CORRELATE), and the reply's framing checked as hostile input.  The parsed reply goes
    back to the workers/ module that asked, which checks its keys, copies them out and deletes it.
 */
#include "baton/service.h"

#include "baton/dtype.h"
#include "baton/jsonl.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define S_ENDPOINT_MAX 1024
#define S_WHAT_MAX 64
#define S_REPLY_MAX (16 << 20) /* bytes; ZeroMQ drops a longer reply, which reads as a timeout */

struct bt_service {
    void *ctx; /* its own ZeroMQ context */
    void *req;
    char what[S_WHAT_MAX];
    char endpoint[S_ENDPOINT_MAX];
    int64_t timeout_ms;
    int64_t retries;
};

bt_status bt_service_new(const char *what, const char *endpoint, int64_t timeout_ms,
                         int64_t retries, const bt_curve_keys *curve, bool insecure,
                         bt_service_t **out) {
    BT_ASSERT(what && endpoint && out && strlen(what) < S_WHAT_MAX);
    *out = NULL;
    if (strlen(endpoint) >= S_ENDPOINT_MAX || timeout_ms < 1 || timeout_ms > INT32_MAX ||
        retries < 0)
        return bt_fail(BT_EINVAL,
                       "%s: need an endpoint of at most %d bytes, timeout_ms >= 1 and "
                       "retries >= 0, got %zu bytes, %lld, %lld",
                       what, S_ENDPOINT_MAX - 1, strlen(endpoint), (long long)timeout_ms,
                       (long long)retries);
    if (!curve && !insecure && !strncmp(endpoint, "tcp://", 6))
        return bt_fail(BT_EINVAL,
                       "%s %s: a tcp:// endpoint needs CURVE keys (the service's public key and "
                       "this client's key pair, from `baton keygen`) or, on a trusted network, "
                       "an explicit insecure connection",
                       what, endpoint);
    bt_service_t *self = calloc(1, sizeof *self);
    if (!self)
        return bt_fail(BT_ENOMEM, "%s: out of memory", what);
    snprintf(self->what, sizeof self->what, "%s", what);
    snprintf(self->endpoint, sizeof self->endpoint, "%s", endpoint);
    self->timeout_ms = timeout_ms;
    self->retries = retries;
    self->ctx = zmq_ctx_new();
    self->req = self->ctx ? zmq_socket(self->ctx, ZMQ_REQ) : NULL;
    if (self->req && curve) {
        bt_status st = bt_curve_client(self->req, curve);
        if (st != BT_OK) {
            st = bt_fail(st, "%s %s: %s", what, endpoint, bt_last_error());
            bt_service_destroy(&self);
            return st;
        }
    }
    int on = 1, linger = 0, send_ms = (int)timeout_ms;
    int64_t max_size = S_REPLY_MAX;
    bool ok = self->req && !zmq_setsockopt(self->req, ZMQ_REQ_RELAXED, &on, sizeof on) &&
              !zmq_setsockopt(self->req, ZMQ_REQ_CORRELATE, &on, sizeof on) &&
              !zmq_setsockopt(self->req, ZMQ_LINGER, &linger, sizeof linger) &&
              !zmq_setsockopt(self->req, ZMQ_SNDTIMEO, &send_ms, sizeof send_ms) &&
              !zmq_setsockopt(self->req, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size) &&
              !zmq_connect(self->req, endpoint);
    if (!ok) {
        bt_status st =
            bt_fail(BT_EIO, "%s %s: cannot connect: %s", what, endpoint, zmq_strerror(zmq_errno()));
        bt_service_destroy(&self);
        return st;
    }
    *out = self;
    return BT_OK;
}

void bt_service_destroy(bt_service_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_service_t *self = *self_p;
    if (self->req)
        zmq_close(self->req);
    if (self->ctx)
        zmq_ctx_term(self->ctx);
    free(self);
    *self_p = NULL;
}

const char *bt_service_endpoint(const bt_service_t *self) {
    return self->endpoint;
}

bt_status bt_service_bad_reply(const bt_service_t *self, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return bt_fail(BT_EFORMAT, "%s %s: reply: %s", self->what, self->endpoint, what);
}

/*  Waits up to timeout_ms for the reply to the last request: BT_OK with *reply filled (one frame);
    BT_EIO with *timed_out set when none came; BT_EFORMAT for a reply of several frames. */
static bt_status s_await(bt_service_t *self, zmq_msg_t *reply, bool *timed_out) {
    *timed_out = false;
    double deadline = bt_now() + (double)self->timeout_ms / 1000.0;
    for (;;) {
        double left_ms = (deadline - bt_now()) * 1000.0;
        if (left_ms <= 0) {
            *timed_out = true;
            return BT_EIO;
        }
        zmq_pollitem_t item = {self->req, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&item, 1, (long)ceil(left_ms));
        if (rc < 0 && zmq_errno() != EINTR)
            return bt_fail(BT_EIO, "%s %s: poll failed: %s", self->what, self->endpoint,
                           zmq_strerror(zmq_errno()));
        if (rc <= 0)
            continue;
        /* REQ_CORRELATE: a late reply to an abandoned attempt is dropped here (EAGAIN) */
        if (zmq_msg_recv(reply, self->req, ZMQ_DONTWAIT) < 0) {
            if (zmq_errno() == EAGAIN || zmq_errno() == EINTR)
                continue;
            return bt_fail(BT_EIO, "%s %s: receive failed: %s", self->what, self->endpoint,
                           zmq_strerror(zmq_errno()));
        }
        int frames = 1;
        while (zmq_msg_more(reply)) { /* read every frame, so none is left for the next reply */
            frames++;
            zmq_msg_close(reply);
            zmq_msg_init(reply);
            if (zmq_msg_recv(reply, self->req, 0) < 0)
                break;
        }
        if (frames != 1)
            return bt_service_bad_reply(self, "%d frames, expected 1", frames);
        return BT_OK;
    }
}

/*  "NaN", "Infinity" or "-Infinity" (any case, or "nan", "inf") when the n bytes at p start one,
    else NULL: where cJSON gave up on a reply, the non-JSON numbers a service may well send. */
static const char *s_non_finite(const char *p, size_t n) {
    const char *names[] = {"NaN", "-NaN", "Infinity", "-Infinity", "inf", "-inf"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        size_t len = strlen(names[k]);
        bool same = n >= len;
        for (size_t i = 0; same && i < len; i++)
            same = tolower((unsigned char)p[i]) == tolower((unsigned char)names[k][i]);
        if (same)
            return names[k][0] == '-' ? (names[k][1] == 'N' ? "-NaN" : "-Infinity")
                                      : (names[k][0] == 'N' ? "NaN" : "Infinity");
    }
    return NULL;
}

/*  The reply text as a JSON object without "error", into *root. */
static bt_status s_parse(const bt_service_t *self, const char *text, size_t len,
                         const char *what_number, cJSON **root) {
    if (memchr(text, '\0', len) || !bt_utf8_is_valid((const uint8_t *)text, len))
        return bt_service_bad_reply(self, "not UTF-8 text");
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    while (j && end < text + len && strchr(" \t\r\n", *end))
        end++;
    const char *odd = !j && end ? s_non_finite(end, (size_t)(text + len - end)) : NULL;
    if (odd) /* what Python's json.dumps writes for float("nan") and float("inf") */
        return bt_service_bad_reply(self, "%s at byte %zu is not a JSON number: %s", odd,
                                    (size_t)(end - text), what_number);
    if (!j || end != text + len) {
        cJSON_Delete(j);
        return bt_service_bad_reply(self, "not valid JSON");
    }
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(j, "error");
    char got[64];
    bt_status st = BT_OK;
    if (!cJSON_IsObject(j)) {
        bt_jsonl_describe(j, got, sizeof got);
        st = bt_service_bad_reply(self, "expected a JSON object, got %s", got);
    } else if (cJSON_IsString(error)) {
        st = bt_fail(BT_EFORMAT, "%s %s: the service says: %.300s", self->what, self->endpoint,
                     error->valuestring);
    }
    if (st != BT_OK)
        cJSON_Delete(j);
    else
        *root = j;
    return st;
}

bt_status bt_service_call(bt_service_t *self, const bt_buf *request, const char *what_number,
                          cJSON **root) {
    BT_ASSERT(self && request && what_number && root);
    *root = NULL;
    if (request->failed)
        return bt_fail(BT_ENOMEM, "%s: out of memory", self->what);
    zmq_msg_t reply;
    zmq_msg_init(&reply);
    bt_status st = BT_OK;
    bool timed_out = true;
    int64_t attempt = 0;
    for (; st == BT_OK && timed_out && attempt <= self->retries; attempt++) {
        if (zmq_send(self->req, request->data, request->len, 0) < 0) {
            st = bt_fail(BT_EIO, "%s %s: cannot send the request: %s", self->what, self->endpoint,
                         zmq_strerror(zmq_errno()));
            break;
        }
        st = s_await(self, &reply, &timed_out);
        if (timed_out)
            st = BT_OK;
    }
    if (st == BT_OK && timed_out)
        st = bt_fail(BT_EIO, "%s %s: no reply within %lld ms (%lld attempt%s)", self->what,
                     self->endpoint, (long long)self->timeout_ms, (long long)attempt,
                     attempt == 1 ? "" : "s");
    if (st == BT_OK)
        st = s_parse(self, zmq_msg_data(&reply), zmq_msg_size(&reply), what_number, root);
    zmq_msg_close(&reply);
    return st;
}

bt_status bt_service_silent_at_start(bt_status st, const char *request, const char *fix) {
    if (st != BT_EIO || !strstr(bt_last_error(), ": no reply within "))
        return st;
    char why[768];
    snprintf(why, sizeof why, "%s", bt_last_error());
    return bt_fail(BT_EIO,
                   "%s to the %s a worker sends as it starts: no service answers there (start it "
                   "before the run, or fix %s)",
                   why, request, fix);
}

void bt_service_put_string(bt_buf *b, const char *key, const char *s, size_t len) {
    bt_buf_printf(b, ",\"%s\":", key);
    bt_buf_json_string(b, s, len,
                       BT_JSON_ESCAPE_NEWLINE | BT_JSON_ESCAPE_TAB | BT_JSON_ESCAPE_UTF8);
}
