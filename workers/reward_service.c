/*  reward_service.c — the reward service client: one JSON request per batch through the shared
    JSON service client (workers/service.c: the REQ socket, timeouts, resends, the reply's
    framing), and the reply's rewards checked as hostile input.  cJSON stays in workers/: the
    reply is parsed, checked, copied out and deleted. */
#include "baton/reward_service.h"

#include "baton/buf.h"
#include "baton/jsonl.h"
#include "baton/service.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bt_reward_service {
    bt_service_t *client; /* plain: reward.service has no CURVE keys (docs/protocol.md) */
};

bt_status bt_reward_service_new(const char *endpoint, int64_t timeout_ms, int64_t retries,
                                bt_reward_service_t **out) {
    BT_ASSERT(endpoint && out);
    *out = NULL;
    bt_reward_service_t *self = calloc(1, sizeof *self);
    if (!self)
        return bt_fail(BT_ENOMEM, "reward service: out of memory");
    bt_status st =
        bt_service_new("reward service", endpoint, timeout_ms, retries, NULL, true, &self->client);
    if (st != BT_OK) {
        free(self);
        return st;
    }
    *out = self;
    return BT_OK;
}

void bt_reward_service_destroy(bt_reward_service_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_service_destroy(&(*self_p)->client);
    free(*self_p);
    *self_p = NULL;
}

/* ---- the request: JSON text written by hand, so that any completion bytes travel ------------ */

/*  {"version": 1, "kind": KIND, "items": [{"index", "prompt", "answer", "completion"[,
    "columns"]}, ...]}: columns, JSON object text from the dataset (bt_source_example), as it is */
static void s_request(const char *kind, const bt_reward_item *items, int64_t n, bt_buf *b) {
    bt_buf_puts(b, "{\"version\":1,\"kind\":");
    bt_buf_json_string(b, kind, strlen(kind), BT_JSON_ESCAPE_PLAIN);
    bt_buf_puts(b, ",\"items\":[");
    for (int64_t i = 0; i < n; i++) {
        bt_buf_printf(b, "%s{\"index\":%llu", i ? "," : "", (unsigned long long)items[i].index);
        bt_service_put_string(b, "prompt", items[i].prompt, strlen(items[i].prompt));
        bt_service_put_string(b, "answer", items[i].answer, strlen(items[i].answer));
        bt_service_put_string(b, "completion", items[i].completion, items[i].len);
        if (items[i].columns) {
            bt_buf_puts(b, ",\"columns\":");
            bt_buf_puts(b, items[i].columns);
        }
        bt_buf_puts(b, "}");
    }
    bt_buf_puts(b, "]}");
}

/* ---- the reply ------------------------------------------------------------------------------- */

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
        *st = bt_service_bad_reply(self->client, "\"%s\": expected an array of %lld %s, got %s",
                                   key, (long long)n, many, got);
        return NULL;
    }
    if (cJSON_GetArraySize(arr) != n) {
        *st = bt_service_bad_reply(self->client, "\"%s\" has %d entries for %lld completions", key,
                                   cJSON_GetArraySize(arr), (long long)n);
        return NULL;
    }
    int64_t i = 0;
    for (const cJSON *v = arr->child; v; v = v->next, i++)
        if (!is(v) || (cJSON_IsNumber(v) && !isfinite(v->valuedouble))) {
            bt_jsonl_describe(v, got, sizeof got);
            *st = bt_service_bad_reply(self->client, "%s[%lld]: expected %s, got %s", key,
                                       (long long)i, one, got);
            return NULL;
        }
    return arr;
}

/*  Checks the reply object and copies its rewards (and correct flags) out. */
static bt_status s_check_reply(const bt_reward_service_t *self, const cJSON *root, int64_t n,
                               double *rewards, bool *correct) {
    bt_status st = BT_OK;
    const cJSON *arr = NULL, *flags = NULL;
    if ((arr = s_array(self, root, "rewards", n, cJSON_IsNumber, "a finite number", "numbers",
                       &st)) &&
        cJSON_HasObjectItem(root, "correct"))
        flags = s_array(self, root, "correct", n, cJSON_IsBool, "true or false", "booleans", &st);
    int64_t i = 0;
    for (const cJSON *v = st == BT_OK ? arr->child : NULL; v && st == BT_OK; v = v->next, i++)
        if (fabs(v->valuedouble) > BT_REWARD_MAX) {
            char value[BT_BUF_NUMBER_LEN];
            st = bt_service_bad_reply(self->client,
                                      "rewards[%lld] is %s, beyond the magnitude of %g a reward "
                                      "may have (BT_REWARD_MAX): scale the service's rewards",
                                      (long long)i, bt_buf_format_number(value, v->valuedouble, 1),
                                      BT_REWARD_MAX);
        }
    if (st != BT_OK)
        return st;
    i = 0;
    for (const cJSON *v = arr->child; v; v = v->next, i++) {
        rewards[i] = v->valuedouble;
        correct[i] = rewards[i] >= 1.0;
    }
    i = 0;
    for (const cJSON *v = flags ? flags->child : NULL; v; v = v->next, i++)
        correct[i] = cJSON_IsTrue(v);
    return BT_OK;
}

/*  Sends one request of kind for items[0..n) (n may be 0) and checks the reply into rewards and
    correct. */
static bt_status s_exchange(bt_reward_service_t *self, const char *kind,
                            const bt_reward_item *items, int64_t n, double *rewards,
                            bool *correct) {
    bt_buf request = {0};
    cJSON *root = NULL;
    s_request(kind, items, n, &request);
    bt_status st =
        bt_service_call(self->client, &request, "every reward must be a finite number", &root);
    if (st == BT_OK)
        st = s_check_reply(self, root, n, rewards, correct);
    cJSON_Delete(root);
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
    return bt_service_silent_at_start(st, "ping", "reward.service");
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
