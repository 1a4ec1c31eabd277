/*  env_service.c — the environment service client: reset and step requests written by hand (any
    action bytes travel), sent through the shared JSON service client (workers/service.c: REQ
    socket, timeouts, resends, the reply's framing), and each reply item checked as hostile input
    before any of it is used.  cJSON stays in workers/: parsed, checked, copied out, deleted. */
#include "baton/env_service.h"

#include "baton/buf.h"
#include "baton/jsonl.h"
#include "baton/reward_service.h"
#include "baton/service.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_WHAT "environment service"

typedef struct s_env_service {
    bt_service_t *client;
    uint64_t request; /* the last request's number; a resend keeps it */
    bt_buf obs;       /* the last call's observations, each NUL-terminated, in item order */
    /* the stop strings of the hello reply, NUL-separated, ending with an empty string */
    char stop[BT_ENV_SERVICE_STOP_MAX * (BT_ENV_SERVICE_STOP_LEN + 1) + 1];
    bool has_stop;
} s_env_service;

static void s_destroy(void *user) {
    s_env_service *self = user;
    if (!self)
        return;
    bt_service_destroy(&self->client);
    bt_buf_release(&self->obs);
    free(self);
}

/* ---- requests -------------------------------------------------------------------------------- */

static void s_head(s_env_service *self, const char *kind, bt_buf *b) {
    bt_buf_printf(b, "{\"version\":1,\"kind\":\"%s\",\"request\":%llu,\"items\":[", kind,
                  (unsigned long long)++self->request);
}

static void s_reset_request(s_env_service *self, const bt_env_reset_item *items, int64_t n,
                            bt_buf *b) {
    s_head(self, "reset", b);
    for (int64_t i = 0; i < n; i++) {
        bt_buf_printf(b, "%s{\"episode\":%llu", i ? "," : "", (unsigned long long)items[i].episode);
        bt_service_put_string(b, "prompt", items[i].prompt, strlen(items[i].prompt));
        bt_service_put_string(b, "answer", items[i].answer, strlen(items[i].answer));
        bt_buf_puts(b, ",\"columns\":");
        bt_buf_puts(b, items[i].columns ? items[i].columns : "{}");
        bt_buf_puts(b, "}");
    }
    bt_buf_puts(b, "]}");
}

static void s_step_request(s_env_service *self, const bt_env_step_item *items, int64_t n,
                           bt_buf *b) {
    s_head(self, "step", b);
    for (int64_t i = 0; i < n; i++) {
        bt_buf_printf(b, "%s{\"episode\":%llu", i ? "," : "", (unsigned long long)items[i].episode);
        bt_service_put_string(b, "action_text", items[i].action_text, items[i].action_len);
        bt_buf_puts(b, ",\"action_ids\":[");
        for (int64_t k = 0; k < items[i].n_action_ids; k++)
            bt_buf_printf(b, "%s%d", k ? "," : "", (int)items[i].action_ids[k]);
        bt_buf_puts(b, "]}");
    }
    bt_buf_puts(b, "]}");
}

/* ---- replies --------------------------------------------------------------------------------- */

/*  Item i's key as type is() (NULL when absent and optional), or *st set naming the item. */
static const cJSON *s_key(const s_env_service *self, const cJSON *item, int64_t i, uint64_t e,
                          const char *key, cJSON_bool (*is)(const cJSON *), const char *type,
                          bool required, bt_status *st) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, key);
    if (!v && !required)
        return NULL;
    char got[64] = "nothing";
    if (!v || !is(v) || (cJSON_IsNumber(v) && !isfinite(v->valuedouble))) {
        if (v)
            bt_jsonl_describe(v, got, sizeof got);
        *st = bt_service_bad_reply(self->client,
                                   "items[%lld] (episode %llu): \"%s\": expected %s, got %s",
                                   (long long)i, (unsigned long long)e, key, type, got);
        return NULL;
    }
    return v;
}

/*  Checks item i (episode e) of a reply and copies it into *out (observation: appended to
    self->obs, pointed at once every item is in and the buffer has stopped moving). */
static bt_status s_item(s_env_service *self, const cJSON *item, int64_t i, uint64_t e, bool step,
                        bt_env_reply *out) {
    bt_status st = BT_OK;
    char got[64];
    if (!cJSON_IsObject(item)) {
        bt_jsonl_describe(item, got, sizeof got);
        return bt_service_bad_reply(self->client,
                                    "items[%lld] (episode %llu): expected an "
                                    "object, got %s",
                                    (long long)i, (unsigned long long)e, got);
    }
    const cJSON *ep = s_key(self, item, i, e, "episode", cJSON_IsNumber, "an integer", false, &st);
    if (ep && ep->valuedouble != (double)e)
        return bt_service_bad_reply(self->client,
                                    "items[%lld]: episode %s is not the episode asked there "
                                    "(%llu)",
                                    (long long)i, bt_buf_format_number(got, ep->valuedouble, 17),
                                    (unsigned long long)e);
    const cJSON *obs =
        st == BT_OK ? s_key(self, item, i, e, "observation", cJSON_IsString, "a string", true, &st)
                    : NULL;
    const cJSON *done =
        st == BT_OK ? s_key(self, item, i, e, "done", cJSON_IsBool, "true or false", true, &st)
                    : NULL;
    const cJSON *reward = st == BT_OK && step ? s_key(self, item, i, e, "reward", cJSON_IsNumber,
                                                      "a finite number", true, &st)
                                              : NULL;
    const cJSON *info = st == BT_OK && step ? s_key(self, item, i, e, "info", cJSON_IsObject,
                                                    "an object", false, &st)
                                            : NULL;
    const cJSON *called =
        info ? s_key(self, info, i, e, "tool_called", cJSON_IsBool, "true or false", false, &st)
             : NULL;
    const cJSON *failed = info && st == BT_OK ? s_key(self, info, i, e, "tool_error", cJSON_IsBool,
                                                      "true or false", false, &st)
                                              : NULL;
    if (st != BT_OK)
        return st;
    size_t len = strlen(obs->valuestring);
    if (len > BT_ENV_OBSERVATION_MAX)
        return bt_service_bad_reply(self->client,
                                    "items[%lld] (episode %llu): an observation of %zu bytes, "
                                    "beyond the %d an observation may have "
                                    "(BT_ENV_OBSERVATION_MAX)",
                                    (long long)i, (unsigned long long)e, len,
                                    BT_ENV_OBSERVATION_MAX);
    if (reward && fabs(reward->valuedouble) > BT_REWARD_MAX)
        return bt_service_bad_reply(self->client,
                                    "items[%lld] (episode %llu): reward %s is beyond the "
                                    "magnitude of %g a reward may have (BT_REWARD_MAX)",
                                    (long long)i, (unsigned long long)e,
                                    bt_buf_format_number(got, reward->valuedouble, 1),
                                    BT_REWARD_MAX);
    bt_buf_put(&self->obs, obs->valuestring, len + 1);
    *out = (bt_env_reply){.observation_len = len,
                          .reward = reward ? reward->valuedouble : 0.0,
                          .done = cJSON_IsTrue(done),
                          .tool_called = cJSON_IsTrue(called),
                          .tool_error = cJSON_IsTrue(failed)};
    return BT_OK;
}

/*  Sends request (released here) and checks its reply's n items (episodes: the i-th at
    episodes + i * stride) into out[0..n). */
static bt_status s_call(s_env_service *self, bt_buf *request, const uint64_t *episodes,
                        size_t stride, int64_t n, bool step, bt_env_reply *out) {
    cJSON *root = NULL;
    bt_status st =
        bt_service_call(self->client, request, "every reward must be a finite number", &root);
    bt_buf_release(request);
    const cJSON *items = st == BT_OK ? cJSON_GetObjectItemCaseSensitive(root, "items") : NULL;
    char got[64] = "nothing";
    if (st == BT_OK && !cJSON_IsArray(items)) {
        if (items)
            bt_jsonl_describe(items, got, sizeof got);
        st = bt_service_bad_reply(self->client,
                                  "\"items\": expected an array of %lld objects, got %s",
                                  (long long)n, got);
    } else if (st == BT_OK && cJSON_GetArraySize(items) != n) {
        st = bt_service_bad_reply(self->client, "\"items\" has %d entries for %lld episodes",
                                  cJSON_GetArraySize(items), (long long)n);
    }
    if (self->obs.failed) /* a failed buffer is released: that empties it */
        bt_buf_release(&self->obs);
    bt_buf_truncate(&self->obs, 0);
    int64_t i = 0;
    for (const cJSON *v = st == BT_OK ? items->child : NULL; v && st == BT_OK; v = v->next, i++) {
        uint64_t e = *(const uint64_t *)((const char *)episodes + (size_t)i * stride);
        st = s_item(self, v, i, e, step, &out[i]);
    }
    if (st == BT_OK && self->obs.failed)
        st = bt_fail(BT_ENOMEM, S_WHAT ": out of memory");
    const char *p = self->obs.data; /* each observation follows the last one's NUL */
    for (i = 0; st == BT_OK && i < n; i++) {
        out[i].observation = p;
        p += out[i].observation_len + 1;
    }
    cJSON_Delete(root);
    return st;
}

static bt_status s_reset(void *user, const bt_env_reset_item *items, int64_t n, bt_env_reply *out) {
    bt_buf request = {0};
    s_reset_request(user, items, n, &request);
    return s_call(user, &request, &items[0].episode, sizeof *items, n, false, out);
}

static bt_status s_step(void *user, const bt_env_step_item *items, int64_t n, bt_env_reply *out) {
    bt_buf request = {0};
    s_step_request(user, items, n, &request);
    return s_call(user, &request, &items[0].episode, sizeof *items, n, true, out);
}

/* ---- hello: the stop strings ----------------------------------------------------------------- */

/*  The hello reply's "stop" (absent or []: none) into self->stop. */
static bt_status s_stop_strings(s_env_service *self, const cJSON *root) {
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    char got[64];
    if (!stop)
        return BT_OK;
    if (!cJSON_IsArray(stop) || cJSON_GetArraySize(stop) > BT_ENV_SERVICE_STOP_MAX) {
        bt_jsonl_describe(stop, got, sizeof got);
        return bt_service_bad_reply(self->client,
                                    "\"stop\": expected an array of at most %d strings, got %s",
                                    BT_ENV_SERVICE_STOP_MAX, got);
    }
    size_t at = 0;
    int i = 0;
    for (const cJSON *v = stop->child; v; v = v->next, i++) {
        size_t len = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
        if (!cJSON_IsString(v) || len == 0 || len > BT_ENV_SERVICE_STOP_LEN) {
            bt_jsonl_describe(v, got, sizeof got);
            return bt_service_bad_reply(self->client,
                                        "stop[%d]: expected a string of 1 to %d bytes, got %s", i,
                                        BT_ENV_SERVICE_STOP_LEN, got);
        }
        memcpy(self->stop + at, v->valuestring, len + 1);
        at += len + 1;
    }
    self->stop[at] = '\0';
    self->has_stop = at > 0;
    return BT_OK;
}

static bt_status s_hello(s_env_service *self) {
    bt_buf request = {0};
    s_head(self, "hello", &request);
    bt_buf_puts(&request, "]}");
    cJSON *root = NULL;
    bt_status st = bt_service_call(self->client, &request, "every number must be finite", &root);
    bt_buf_release(&request);
    const cJSON *items = st == BT_OK ? cJSON_GetObjectItemCaseSensitive(root, "items") : NULL;
    if (st == BT_OK && items && (!cJSON_IsArray(items) || cJSON_GetArraySize(items) != 0)) {
        char got[64];
        bt_jsonl_describe(items, got, sizeof got);
        st = bt_service_bad_reply(self->client, "\"items\": expected [] for a hello, got %s", got);
    }
    if (st == BT_OK)
        st = s_stop_strings(self, root);
    cJSON_Delete(root);
    return bt_service_silent_at_start(st, "hello", "the environment service's endpoint");
}

bt_status bt_env_service_new(const char *endpoint, int64_t timeout_ms, int64_t retries,
                             const bt_curve_keys *curve, bool insecure, bt_env_t **out) {
    BT_ASSERT(endpoint && out);
    *out = NULL;
    s_env_service *self = calloc(1, sizeof *self);
    if (!self)
        return bt_fail(BT_ENOMEM, S_WHAT ": out of memory");
    bt_status st =
        bt_service_new(S_WHAT, endpoint, timeout_ms, retries, curve, insecure, &self->client);
    if (st == BT_OK)
        st = s_hello(self);
    if (st != BT_OK) {
        s_destroy(self);
        return st;
    }
    bt_env_ops ops = {.reset = s_reset,
                      .step = s_step,
                      .destroy = s_destroy,
                      .stop_strings = self->has_stop ? self->stop : NULL};
    return bt_env_new(&ops, self, out);
}
