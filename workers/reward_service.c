/*  reward_service.c — the reward service client: one JSON request per batch over a REQ socket that
    survives a lost reply (ZMQ_REQ_RELAXED + ZMQ_REQ_CORRELATE), and the reply checked as hostile
    input.  cJSON stays in this file: the reply is parsed, checked, copied out and deleted. */
#include "baton/reward_service.h"
#include "baton/jsonl.h"

#include "baton/buf.h"
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
#define S_REPLY_MAX (16 << 20) /* bytes; ZeroMQ drops a longer reply, which reads as a timeout */

struct bt_reward_service {
    void *ctx; /* its own ZeroMQ context */
    void *req;
    char endpoint[S_ENDPOINT_MAX];
    int64_t timeout_ms;
    int64_t retries;
};

bt_status bt_reward_service_new(const char *endpoint, int64_t timeout_ms, int64_t retries,
                                bt_reward_service_t **out) {
    BT_ASSERT(endpoint && out);
    *out = NULL;
    if (strlen(endpoint) >= S_ENDPOINT_MAX || timeout_ms < 1 || timeout_ms > INT32_MAX ||
        retries < 0)
        return bt_fail(BT_EINVAL,
                       "reward service: need an endpoint of at most %d bytes, timeout_ms >= 1 and "
                       "retries >= 0, got %zu bytes, %lld, %lld",
                       S_ENDPOINT_MAX - 1, strlen(endpoint), (long long)timeout_ms,
                       (long long)retries);
    bt_reward_service_t *self = calloc(1, sizeof *self);
    if (!self)
        return bt_fail(BT_ENOMEM, "reward service: out of memory");
    snprintf(self->endpoint, sizeof self->endpoint, "%s", endpoint);
    self->timeout_ms = timeout_ms;
    self->retries = retries;
    self->ctx = zmq_ctx_new();
    self->req = self->ctx ? zmq_socket(self->ctx, ZMQ_REQ) : NULL;
    int on = 1, linger = 0, send_ms = (int)timeout_ms;
    int64_t max_size = S_REPLY_MAX;
    bool ok = self->req && !zmq_setsockopt(self->req, ZMQ_REQ_RELAXED, &on, sizeof on) &&
              !zmq_setsockopt(self->req, ZMQ_REQ_CORRELATE, &on, sizeof on) &&
              !zmq_setsockopt(self->req, ZMQ_LINGER, &linger, sizeof linger) &&
              !zmq_setsockopt(self->req, ZMQ_SNDTIMEO, &send_ms, sizeof send_ms) &&
              !zmq_setsockopt(self->req, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size) &&
              !zmq_connect(self->req, endpoint);
    if (!ok) {
        bt_status st = bt_fail(BT_EIO, "reward service %s: cannot connect: %s", endpoint,
                               zmq_strerror(zmq_errno()));
        bt_reward_service_destroy(&self);
        return st;
    }
    *out = self;
    return BT_OK;
}

void bt_reward_service_destroy(bt_reward_service_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_reward_service_t *self = *self_p;
    if (self->req)
        zmq_close(self->req);
    if (self->ctx)
        zmq_ctx_term(self->ctx);
    free(self);
    *self_p = NULL;
}

/* ---- the request: JSON text written by hand, so that any completion bytes travel --------------
 */

/*  Completions as JSON strings: valid UTF-8 as it is, \n and \t short, other control characters
    escaped, and each byte that is not part of well-formed UTF-8 as U+FFFD. */
#define S_ESCAPE (BT_JSON_ESCAPE_NEWLINE | BT_JSON_ESCAPE_TAB | BT_JSON_ESCAPE_UTF8)

/*  {"version": 1, "kind": KIND, "items": [{"index", "prompt", "answer", "completion"[,
    "columns"]}, ...]}: columns, JSON object text from the dataset (bt_source_example), as it is */
static bt_status s_request(const char *kind, const bt_reward_item *items, int64_t n, bt_buf *b) {
    bt_buf_puts(b, "{\"version\":1,\"kind\":");
    bt_buf_json_string(b, kind, strlen(kind), S_ESCAPE);
    bt_buf_puts(b, ",\"items\":[");
    for (int64_t i = 0; i < n; i++) {
        bt_buf_printf(b, "%s{\"index\":%llu,\"prompt\":", i ? "," : "",
                      (unsigned long long)items[i].index);
        bt_buf_json_string(b, items[i].prompt, strlen(items[i].prompt), S_ESCAPE);
        bt_buf_puts(b, ",\"answer\":");
        bt_buf_json_string(b, items[i].answer, strlen(items[i].answer), S_ESCAPE);
        bt_buf_puts(b, ",\"completion\":");
        bt_buf_json_string(b, items[i].completion, items[i].len, S_ESCAPE);
        if (items[i].columns) {
            bt_buf_puts(b, ",\"columns\":");
            bt_buf_puts(b, items[i].columns);
        }
        bt_buf_puts(b, "}");
    }
    bt_buf_puts(b, "]}");
    return b->failed ? bt_fail(BT_ENOMEM, "reward service: out of memory") : BT_OK;
}

/* ---- the exchange ---------------------------------------------------------------------------- */

/*  Waits up to timeout_ms for the reply to the last request: BT_OK with *reply filled (one frame);
    BT_EIO with *timed_out set when none came; BT_EFORMAT for a reply of several frames. */
static bt_status s_await(bt_reward_service_t *self, zmq_msg_t *reply, bool *timed_out) {
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
            return bt_fail(BT_EIO, "reward service %s: poll failed: %s", self->endpoint,
                           zmq_strerror(zmq_errno()));
        if (rc <= 0)
            continue;
        /* REQ_CORRELATE: a late reply to an abandoned attempt is dropped here (EAGAIN) */
        if (zmq_msg_recv(reply, self->req, ZMQ_DONTWAIT) < 0) {
            if (zmq_errno() == EAGAIN || zmq_errno() == EINTR)
                continue;
            return bt_fail(BT_EIO, "reward service %s: receive failed: %s", self->endpoint,
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
            return bt_fail(BT_EFORMAT, "reward service %s: reply: %d frames, expected 1",
                           self->endpoint, frames);
        return BT_OK;
    }
}

static bt_status s_bad_reply(const bt_reward_service_t *self, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static bt_status s_bad_reply(const bt_reward_service_t *self, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return bt_fail(BT_EFORMAT, "reward service %s: reply: %s", self->endpoint, what);
}

/*  The array root[key] of n entries, each passing is() (numbers: finite); NULL, with *st set,
    when it is not.  one and many name an entry's kind: "a number", "numbers". */
static const cJSON *s_array(const bt_reward_service_t *self, const cJSON *root, const char *key,
                            int64_t n, cJSON_bool (*is)(const cJSON *), const char *one,
                            const char *many, bt_status *st) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, key);
    char got[64] = "nothing";
    if (!cJSON_IsArray(arr)) {
        if (arr)
            bt_jsonl_describe(arr, got, sizeof got);
        *st = s_bad_reply(self, "\"%s\": expected an array of %lld %s, got %s", key, (long long)n,
                          many, got);
        return NULL;
    }
    if (cJSON_GetArraySize(arr) != n) {
        *st = s_bad_reply(self, "\"%s\" has %d entries for %lld completions", key,
                          cJSON_GetArraySize(arr), (long long)n);
        return NULL;
    }
    int64_t i = 0;
    for (const cJSON *v = arr->child; v; v = v->next, i++)
        if (!is(v) || (cJSON_IsNumber(v) && !isfinite(v->valuedouble))) {
            bt_jsonl_describe(v, got, sizeof got);
            *st = s_bad_reply(self, "%s[%lld]: expected %s, got %s", key, (long long)i, one, got);
            return NULL;
        }
    return arr;
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

/*  Checks the reply text and copies its rewards (and correct flags) out. */
static bt_status s_parse_reply(const bt_reward_service_t *self, const char *text, size_t len,
                               int64_t n, double *rewards, bool *correct) {
    if (memchr(text, '\0', len) || !bt_utf8_is_valid((const uint8_t *)text, len))
        return s_bad_reply(self, "not UTF-8 text");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    while (root && end < text + len && strchr(" \t\r\n", *end))
        end++;
    const char *odd = !root && end ? s_non_finite(end, (size_t)(text + len - end)) : NULL;
    if (odd) /* what Python's json.dumps writes for float("nan") and float("inf") */
        return s_bad_reply(self,
                           "%s at byte %zu is not a JSON number: every reward must be a finite "
                           "number",
                           odd, (size_t)(end - text));
    if (!root || end != text + len) {
        cJSON_Delete(root);
        return s_bad_reply(self, "not valid JSON");
    }
    bt_status st = BT_OK;
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *arr = NULL, *flags = NULL;
    char got[64];
    if (!cJSON_IsObject(root)) {
        bt_jsonl_describe(root, got, sizeof got);
        st = s_bad_reply(self, "expected a JSON object, got %s", got);
    } else if (cJSON_IsString(error)) {
        st = bt_fail(BT_EFORMAT, "reward service %s: the service says: %.300s", self->endpoint,
                     error->valuestring);
    } else if ((arr = s_array(self, root, "rewards", n, cJSON_IsNumber, "a finite number",
                              "numbers", &st)) &&
               cJSON_HasObjectItem(root, "correct")) {
        flags = s_array(self, root, "correct", n, cJSON_IsBool, "true or false", "booleans", &st);
    }
    int64_t i = 0;
    for (const cJSON *v = st == BT_OK ? arr->child : NULL; v && st == BT_OK; v = v->next, i++)
        if (fabs(v->valuedouble) > BT_REWARD_MAX) {
            char value[32]; /* the shortest text that reads back as the value */
            snprintf(value, sizeof value, "%.15g", v->valuedouble);
            if (strtod(value, NULL) != v->valuedouble)
                snprintf(value, sizeof value, "%.17g", v->valuedouble);
            st = s_bad_reply(self,
                             "rewards[%lld] is %s, beyond the magnitude of %g a reward may have "
                             "(BT_REWARD_MAX): scale the service's rewards",
                             (long long)i, value, BT_REWARD_MAX);
        }
    if (st == BT_OK) {
        i = 0;
        for (const cJSON *v = arr->child; v; v = v->next, i++) {
            rewards[i] = v->valuedouble;
            correct[i] = rewards[i] >= 1.0;
        }
        i = 0;
        for (const cJSON *v = flags ? flags->child : NULL; v; v = v->next, i++)
            correct[i] = cJSON_IsTrue(v);
    }
    cJSON_Delete(root);
    return st;
}

/*  Sends one request of kind for items[0..n) (n may be 0) and checks the reply into rewards and
    correct. */
static bt_status s_exchange(bt_reward_service_t *self, const char *kind,
                            const bt_reward_item *items, int64_t n, double *rewards,
                            bool *correct) {
    bt_buf request = {0};
    bt_status st = s_request(kind, items, n, &request);
    zmq_msg_t reply;
    zmq_msg_init(&reply);
    bool timed_out = true;
    int64_t attempt = 0;
    for (; st == BT_OK && timed_out && attempt <= self->retries; attempt++) {
        if (zmq_send(self->req, request.data, request.len, 0) < 0) {
            st = bt_fail(BT_EIO, "reward service %s: cannot send the request: %s", self->endpoint,
                         zmq_strerror(zmq_errno()));
            break;
        }
        st = s_await(self, &reply, &timed_out);
        if (timed_out)
            st = BT_OK;
    }
    if (st == BT_OK && timed_out)
        st = bt_fail(BT_EIO, "reward service %s: no reply within %lld ms (%lld attempt%s)",
                     self->endpoint, (long long)self->timeout_ms, (long long)attempt,
                     attempt == 1 ? "" : "s");
    if (st == BT_OK)
        st = s_parse_reply(self, zmq_msg_data(&reply), zmq_msg_size(&reply), n, rewards, correct);
    zmq_msg_close(&reply);
    bt_buf_release(&request);
    return st;
}

bt_status bt_reward_service_score(bt_reward_service_t *self, const char *kind,
                                  const bt_reward_item *items, int64_t n, double *rewards,
                                  bool *correct) {
    BT_ASSERT(self && kind && (items || n == 0) && n >= 0);
    if (n == 0)
        return BT_OK;
    return s_exchange(self, kind, items, n, rewards, correct);
}

bt_status bt_reward_service_ping(bt_reward_service_t *self) {
    BT_ASSERT(self);
    double none = 0;
    bool no = false;
    bt_status st = s_exchange(self, "ping", NULL, 0, &none, &no);
    if (st == BT_EIO && strstr(bt_last_error(), ": no reply within ")) {
        char why[768];
        snprintf(why, sizeof why, "%s", bt_last_error());
        st = bt_fail(BT_EIO,
                     "%s to the ping a worker sends as it starts: no service answers there "
                     "(start it before the run, or fix reward.service)",
                     why);
    }
    return st;
}

bt_status bt_reward_score(bt_reward_service_t *service, const bt_source_t *task, const char *kind,
                          const bt_reward_item *items, int64_t n, double *rewards, bool *correct) {
    if (service)
        return bt_reward_service_score(service, kind, items, n, rewards, correct);
    for (int64_t i = 0; i < n; i++) {
        bt_reward_detail d;
        rewards[i] = bt_source_score(task, items[i].prompt, items[i].answer, items[i].completion,
                                     items[i].len, &d);
        correct[i] = d.correct;
    }
    return BT_OK;
}
