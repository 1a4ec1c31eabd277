/*  test_msg.c — messages over real ZeroMQ sockets: a ROUTER bound to inproc:// (the controller)
    and a DEALER connected to it (a worker), both in this thread.  Round trips of every type, bytes
    of every tensor exact, zero-copy sends, shared tensors, field errors, and hostile messages sent
    as raw frames, each rejected with its reason while the socket keeps working; the fuzz seed
    corpora, each file with its verdict. */
#define _POSIX_C_SOURCE 200809L
#include "baton/msg.h"
#include "baton/proto.h"
#include "baton/status.h"

#include "check.h"
#include "fuzz.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define WORKER_ID "worker-1"

static void *s_ctx, *s_router, *s_dealer;

static void s_open(void) {
    int linger = 0;
    s_ctx = zmq_ctx_new();
    s_router = zmq_socket(s_ctx, ZMQ_ROUTER);
    s_dealer = zmq_socket(s_ctx, ZMQ_DEALER);
    zmq_setsockopt(s_router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s_dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s_dealer, ZMQ_ROUTING_ID, WORKER_ID, strlen(WORKER_ID));
    CHECK(zmq_bind(s_router, "inproc://test-wire") == 0);
    CHECK(zmq_connect(s_dealer, "inproc://test-wire") == 0);
}

static void s_close(void) {
    zmq_close(s_dealer);
    zmq_close(s_router);
    zmq_ctx_term(s_ctx);
}

/*  Worker -> controller: sends m from the DEALER and receives it on the ROUTER, checking the peer.
 */
static bt_msg_t *s_up(bt_msg_t *m) {
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t peer_len = 0;
    bt_msg_t *got = NULL;
    CHECK_OK(bt_proto_send(&m, s_dealer, NULL, 0));
    CHECK(m == NULL);
    CHECK_OK(bt_proto_recv(s_router, &got, peer, &peer_len, 0));
    CHECK(peer_len == strlen(WORKER_ID) && memcmp(peer, WORKER_ID, peer_len) == 0);
    return got;
}

/*  Controller -> worker: sends m from the ROUTER to the worker and receives it on the DEALER. */
static bt_msg_t *s_down(bt_msg_t *m) {
    bt_msg_t *got = NULL;
    CHECK_OK(bt_proto_send(&m, s_router, WORKER_ID, strlen(WORKER_ID)));
    CHECK_OK(bt_proto_recv(s_dealer, &got, NULL, NULL, 0));
    return got;
}

/*  A message of the given type with its required fields. */
static bt_msg_t *s_valid(bt_msg_type type) {
    bt_msg_t *m = bt_msg_new(type);
    bt_msg_set_id(m, 7);
    CHECK_OK(bt_msg_set_run(m, "arith"));
    switch (type) {
    case BT_MSG_HELLO:
        CHECK_OK(bt_msg_set_str(m, "role", "rollout"));
        CHECK_OK(bt_msg_set_str(m, "name", "w0"));
        CHECK_OK(bt_msg_set_str(m, "host", "node-3"));
        CHECK_OK(bt_msg_set_int(m, "pid", 4242));
        CHECK_OK(bt_msg_set_str(m, "device", "cuda:1"));
        CHECK_OK(bt_msg_set_int(m, "threads", 8));
        CHECK_OK(bt_msg_set_int(m, "proto", BT_PROTO_VERSION));
        break;
    case BT_MSG_WELCOME:
        CHECK_OK(bt_msg_set_int(m, "worker", 3));
        CHECK_OK(bt_msg_set_int(m, "heartbeat_ms", 500));
        break;
    case BT_MSG_TASK:
        CHECK_OK(bt_msg_set_int(m, "task", 11));
        CHECK_OK(bt_msg_set_str(m, "kind", "rollout"));
        CHECK_OK(bt_msg_set_int(m, "version", 5));
        break;
    case BT_MSG_FAIL: CHECK_OK(bt_msg_set_str(m, "error", "out of memory")); /* fall through */
    case BT_MSG_RESULT: CHECK_OK(bt_msg_set_int(m, "task", 11)); break;
    case BT_MSG_WEIGHTS: CHECK_OK(bt_msg_set_int(m, "version", 6)); break;
    case BT_MSG_INVALID: CHECK_OK(bt_msg_set_str(m, "reason", "unknown peer")); break;
    default: break;
    }
    return m;
}

static bool s_is_upward(bt_msg_type type) {
    return type == BT_MSG_HELLO || type == BT_MSG_PING || type == BT_MSG_RESULT ||
           type == BT_MSG_FAIL || type == BT_MSG_BYE;
}

static void test_type_names(void) {
    for (int t = BT_MSG_HELLO; t <= BT_MSG_INVALID; t++) {
        bt_msg_type back;
        CHECK(bt_msg_type_parse(bt_msg_type_name((bt_msg_type)t), &back) && back == (bt_msg_type)t);
    }
    bt_msg_type out;
    CHECK(strcmp(bt_msg_type_name(BT_MSG_WEIGHTS), "WEIGHTS") == 0);
    CHECK(!bt_msg_type_parse("hello", &out) && !bt_msg_type_parse("", &out));
    CHECK(strcmp(bt_msg_type_name((bt_msg_type)42), "?") == 0);
}

/*  Every type travels its own direction with its required fields, id and run intact. */
static void test_every_type_round_trips(void) {
    for (int t = BT_MSG_HELLO; t <= BT_MSG_INVALID; t++) {
        bt_msg_type type = (bt_msg_type)t;
        bt_msg_t *got = s_is_upward(type) ? s_up(s_valid(type)) : s_down(s_valid(type));
        CHECK(got != NULL);
        if (!got)
            continue;
        CHECK(bt_msg_type_of(got) == type);
        CHECK(bt_msg_id(got) == 7 && strcmp(bt_msg_run(got), "arith") == 0);
        bt_msg_t *want = s_valid(type);
        CHECK(bt_msg_field_count(got) == bt_msg_field_count(want));
        bt_msg_destroy(&want);
        bt_msg_destroy(&got);
        CHECK(got == NULL);
    }
}

/*  HELLO from the worker, WELCOME back to the peer id the ROUTER saw; typed fields with dotted keys
    come back as set. */
static void test_hello_welcome_fields(void) {
    bt_msg_t *hello = s_valid(BT_MSG_HELLO);
    CHECK_OK(bt_msg_set_double(hello, "stats.loss", 0.1));
    CHECK_OK(bt_msg_set_bool(hello, "cuda", true));
    CHECK_OK(bt_msg_set_str(hello, "note", "grüße \"quoted\"\n"));
    CHECK_OK(bt_msg_set_str(hello, "path", "C:\\u0000")); /* a backslash, then u0000 */
    CHECK_OK(bt_msg_set_int(hello, "big", -BT_WIRE_INT_MAX));
    CHECK_OK(bt_msg_set_double(hello, "sum", 0.1 + 0.2)); /* 0.30000000000000004 */
    CHECK_OK(bt_msg_set_int(hello, "threads", 16));       /* replaces 8 */
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t peer_len = 0;
    bt_msg_t *got = NULL;
    CHECK_OK(bt_proto_send(&hello, s_dealer, NULL, 0));
    CHECK_OK(bt_proto_recv(s_router, &got, peer, &peer_len, 0));
    CHECK(peer_len == strlen(WORKER_ID) && memcmp(peer, WORKER_ID, peer_len) == 0);

    const char *s = NULL;
    int64_t i = 0;
    double d = 0;
    bool b = false;
    CHECK_OK(bt_msg_get_str(got, "role", 16, &s));
    CHECK(s && strcmp(s, "rollout") == 0);
    CHECK_OK(bt_msg_get_str(got, "note", 64, &s));
    CHECK(s && strcmp(s, "grüße \"quoted\"\n") == 0);
    CHECK_OK(bt_msg_get_str(got, "path", 64, &s));
    CHECK(s && strcmp(s, "C:\\u0000") == 0);
    CHECK_OK(bt_msg_get_int(got, "threads", 1, 4096, &i));
    CHECK(i == 16);
    CHECK_OK(bt_msg_get_int(got, "big", INT64_MIN, 0, &i));
    CHECK(i == -BT_WIRE_INT_MAX);
    CHECK_OK(bt_msg_get_double(got, "stats.loss", 0, 1, &d));
    CHECK(d == 0.1);
    CHECK_OK(bt_msg_get_double(got, "sum", 0, 1, &d));
    CHECK(d == 0.1 + 0.2);                                   /* doubles travel exactly */
    CHECK_OK(bt_msg_get_double(got, "threads", 0, 100, &d)); /* an integer is a number */
    CHECK(d == 16);
    CHECK_OK(bt_msg_get_bool(got, "cuda", &b));
    CHECK(b);
    CHECK(bt_msg_has(got, "host") && !bt_msg_has(got, "hots"));
    CHECK(bt_msg_field_count(got) == 13);
    CHECK(strcmp(bt_msg_field_key(got, 0), "role") == 0);
    CHECK(strcmp(bt_msg_field_key(got, 11), "big") == 0);
    bt_msg_destroy(&got);

    bt_msg_t *welcome = s_valid(BT_MSG_WELCOME);
    CHECK_OK(bt_msg_set_int(welcome, "model.hidden_size", 64));
    CHECK_OK(bt_proto_send(&welcome, s_router, peer, peer_len));
    CHECK_OK(bt_proto_recv(s_dealer, &got, NULL, NULL, 0));
    CHECK_OK(bt_msg_get_int(got, "model.hidden_size", 1, 1 << 20, &i));
    CHECK(i == 64);
    bt_msg_destroy(&got);
}

/*  A TRAIN task's tensors arrive byte for byte: I64, U8, F32, F64, BF16 bit patterns (NaN payload,
    subnormal, -0), an empty tensor and a scalar. */
static void test_tensors_round_trip(void) {
    int64_t tokens[2][3] = {{1, -2, INT64_MAX}, {INT64_MIN, 0, 5}};           /* (B, T) */
    uint8_t mask[2][3] = {{1, 1, 0}, {0, 1, 1}};                              /* (B, T) */
    float old_logp[2][3] = {{-0.5f, -1e-30f, 0.0f}, {-3.25f, -1e30f, -0.0f}}; /* (B, T) */
    double adv[2] = {0.7071067811865476, -1e-300};                            /* (B) */
    uint16_t bf16[5] = {0x7fc1, 0x0001, 0x8000, 0x3f80, 0xff80};              /* (5) */
    int64_t shape_bt[2] = {2, 3}, shape_b[1] = {2}, shape_5[1] = {5}, shape_0[2] = {0, 4};
    int32_t scalar = -17;
    bt_msg_t *m = s_valid(BT_MSG_TASK);
    CHECK_OK(bt_msg_set_str(m, "kind", "train"));
    CHECK_OK(bt_msg_set_double(m, "lr", 1e-6));
    CHECK_OK(bt_msg_add_tensor(m, "tokens", BT_I64, 2, shape_bt, tokens));
    CHECK_OK(bt_msg_add_tensor(m, "mask", BT_U8, 2, shape_bt, mask));
    CHECK_OK(bt_msg_add_tensor(m, "old_logp", BT_F32, 2, shape_bt, old_logp));
    CHECK_OK(bt_msg_add_tensor(m, "adv", BT_F64, 1, shape_b, adv));
    CHECK_OK(bt_msg_add_tensor(m, "bf16", BT_BF16, 1, shape_5, bf16));
    CHECK_OK(bt_msg_add_tensor(m, "empty", BT_F32, 2, shape_0, NULL));
    CHECK_OK(bt_msg_add_tensor(m, "scalar", BT_I32, 0, NULL, &scalar));
    CHECK(bt_msg_tensor_count(m) == 7);
    bt_msg_t *got = s_down(m);
    CHECK(got != NULL);
    if (!got)
        return;
    bt_msg_tensor t;
    CHECK_OK(bt_msg_get_tensor(got, "tokens", BT_I64, 2, &t));
    CHECK(t.shape[0] == 2 && t.shape[1] == 3 && t.nbytes == sizeof tokens);
    CHECK(memcmp(t.data, tokens, sizeof tokens) == 0);
    CHECK_OK(bt_msg_get_tensor(got, "mask", BT_U8, 2, &t));
    CHECK(t.nbytes == sizeof mask && memcmp(t.data, mask, sizeof mask) == 0);
    CHECK_OK(bt_msg_get_tensor(got, "old_logp", BT_F32, 2, &t));
    CHECK(t.nbytes == sizeof old_logp && memcmp(t.data, old_logp, sizeof old_logp) == 0);
    CHECK_OK(bt_msg_get_tensor(got, "adv", BT_F64, 1, &t));
    CHECK(t.nbytes == sizeof adv && memcmp(t.data, adv, sizeof adv) == 0);
    CHECK_OK(bt_msg_get_tensor(got, "bf16", BT_BF16, 1, &t));
    CHECK(t.shape[0] == 5 && t.nbytes == sizeof bf16 && memcmp(t.data, bf16, sizeof bf16) == 0);
    CHECK_OK(bt_msg_get_tensor(got, "empty", BT_F32, 2, &t));
    CHECK(t.shape[0] == 0 && t.shape[1] == 4 && t.nbytes == 0);
    CHECK_OK(bt_msg_get_tensor(got, "scalar", BT_I32, 0, &t));
    int32_t back = 0;
    CHECK(t.nbytes == 4);
    memcpy(&back, t.data, sizeof back);
    CHECK(back == -17);
    bt_msg_tensor second = bt_msg_tensor_at(got, 1);
    CHECK(strcmp(second.name, "mask") == 0 && second.dtype == BT_U8 && second.ndim == 2);

    CHECK(bt_msg_get_tensor(got, "tokens", BT_F32, 2, &t) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "TASK: tensor 'tokens': expected F32 with 2 dims, got I64 with 2 dims");
    CHECK(bt_msg_get_tensor(got, "rewards", BT_F32, 1, &t) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: tensor 'rewards': missing");
    bt_msg_destroy(&got);
}

static int s_frees;
static void s_count_free(void *data, void *hint) {
    CHECK(hint == &s_frees);
    s_frees++;
    free(data);
}

/*  A zero-copy tensor is the sender's buffer itself: over inproc the receiver sees the very same
    pointer, and the free function runs once, when the receiver is done with it. */
static void test_zero_copy(void) {
    int64_t shape[1] = {1 << 18}; /* (N) F32: 1 MiB */
    float *buf = malloc((size_t)shape[0] * sizeof *buf);
    for (int64_t i = 0; i < shape[0]; i++)
        buf[i] = (float)i;
    s_frees = 0;
    bt_msg_t *m = s_valid(BT_MSG_WEIGHTS);
    CHECK_OK(bt_msg_add_tensor_zero_copy(m, "w", BT_F32, 1, shape, buf, s_count_free, &s_frees));
    bt_msg_t *got = s_down(m);
    bt_msg_tensor t;
    CHECK(got && bt_msg_get_tensor(got, "w", BT_F32, 1, &t) == BT_OK);
    CHECK(got && t.data == buf && t.nbytes == (size_t)shape[0] * sizeof *buf);
    CHECK(s_frees == 0);
    bt_msg_destroy(&got);
    CHECK(s_frees == 1);

    /* never sent: destroy frees it; refused: the buffer is freed at once */
    m = s_valid(BT_MSG_WEIGHTS);
    CHECK_OK(bt_msg_add_tensor_zero_copy(m, "w", BT_F32, 1, shape, malloc(1 << 20), s_count_free,
                                         &s_frees));
    CHECK(bt_msg_add_tensor_zero_copy(m, "w", BT_F32, 1, shape, malloc(1 << 20), s_count_free,
                                      &s_frees) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "WEIGHTS: tensor 'w' appears twice");
    CHECK(s_frees == 2);
    bt_msg_destroy(&m);
    CHECK(s_frees == 3);
    /* free_fn NULL: free() */
    m = s_valid(BT_MSG_WEIGHTS);
    CHECK_OK(bt_msg_add_tensor_zero_copy(m, "w", BT_F32, 1, shape, malloc(1 << 20), NULL, NULL));
    bt_msg_destroy(&m);
}

/*  A tensor shared from another message is its buffer, not a copy; the buffer is freed once,
    after the last message holding it, whichever order they go in. */
static void test_shared_tensors(void) {
    int64_t shape[1] = {1 << 18}; /* (N) F32: 1 MiB */
    float *buf = malloc((size_t)shape[0] * sizeof *buf);
    for (int64_t i = 0; i < shape[0]; i++)
        buf[i] = (float)i;
    s_frees = 0;
    bt_msg_t *src = s_valid(BT_MSG_WEIGHTS);
    CHECK_OK(bt_msg_add_tensor_zero_copy(src, "w", BT_F32, 1, shape, buf, s_count_free, &s_frees));
    bt_msg_t *a = s_valid(BT_MSG_WEIGHTS), *b = s_valid(BT_MSG_WEIGHTS);
    CHECK_OK(bt_msg_add_tensor_shared(a, src, 0));
    CHECK_OK(bt_msg_add_tensor_shared(b, src, 0));
    CHECK(bt_msg_add_tensor_shared(b, src, 0) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "WEIGHTS: tensor 'w' appears twice");
    bt_msg_tensor t = bt_msg_tensor_at(a, 0);
    CHECK(t.data == buf && t.nbytes == (size_t)shape[0] * sizeof *buf && t.shape[0] == shape[0]);
    bt_msg_destroy(&src);
    bt_msg_t *got = s_down(a);
    CHECK(got && bt_msg_tensor_at(got, 0).data == buf);
    bt_msg_destroy(&b);
    CHECK(s_frees == 0);
    bt_msg_destroy(&got);
    CHECK(s_frees == 1);
}

/*  Getters name the type, the key, what was expected and what came; setters refuse what cannot
    travel. */
static void test_field_errors(void) {
    bt_msg_t *m = bt_msg_new(BT_MSG_TASK);
    int64_t i;
    double d;
    bool b;
    const char *s;
    CHECK_OK(bt_msg_set_str(m, "version", "x"));
    CHECK(bt_msg_get_int(m, "version", 0, INT64_MAX, &i) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "TASK: field 'version': expected an integer in [0, 9007199254740992], "
                       "got \"x\"");
    CHECK(bt_msg_get_int(m, "task", 0, 10, &i) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'task': missing");
    CHECK_OK(bt_msg_set_double(m, "version", 2.5));
    CHECK(bt_msg_get_int(m, "version", 0, 10, &i) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "expected an integer in [0, 10], got 2.5");
    CHECK_OK(bt_msg_set_int(m, "version", 11));
    CHECK(bt_msg_get_int(m, "version", 0, 10, &i) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "got 11");
    CHECK(bt_msg_get_double(m, "version", 0, 1, &d) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "TASK: field 'version': expected a number in [0, 1], got 11");
    CHECK(bt_msg_get_bool(m, "version", &b) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "expected true or false, got 11");
    CHECK_OK(bt_msg_set_str(m, "kind", "rollout"));
    CHECK(bt_msg_get_str(m, "kind", 3, &s) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "expected a string of at most 3 bytes, got \"rollout\"");

    CHECK(bt_msg_set_int(m, "a", BT_WIRE_INT_MAX + 1) == BT_EINVAL);
    CHECK(bt_msg_set_double(m, "a", 1.0 / 0.0) == BT_EINVAL);
    CHECK(bt_msg_set_str(m, "a", "\xff") == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'a': a string that is not UTF-8");
    char *big = calloc(BT_WIRE_STR_MAX + 2, 1);
    memset(big, 'a', BT_WIRE_STR_MAX + 1);
    CHECK(bt_msg_set_str(m, "a", big) == BT_EINVAL);
    CHECK(bt_msg_set_run(m, big) == BT_EINVAL);
    big[BT_WIRE_STR_MAX] = '\0';
    CHECK_OK(bt_msg_set_str(m, "a", big));
    free(big);
    CHECK(bt_msg_set_int(m, "bad key", 1) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'bad key': not a valid key");
    CHECK(bt_msg_set_int(m, "", 1) == BT_EINVAL);
    CHECK(!bt_msg_has(m, "bad key") && !bt_msg_has(m, ""));
    char key[16];
    for (int k = bt_msg_field_count(m); k < BT_WIRE_FIELDS_MAX; k++) {
        snprintf(key, sizeof key, "k%d", k);
        CHECK_OK(bt_msg_set_bool(m, key, true));
    }
    CHECK(bt_msg_set_bool(m, "one.more", true) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: more than 256 fields");
    bt_msg_destroy(&m);

    int64_t shape[2] = {2, -1};
    m = bt_msg_new(BT_MSG_RESULT);
    CHECK(bt_msg_add_tensor(m, "x", BT_F32, 2, shape, NULL) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "RESULT: tensor 'x': dim 1 is -1");
    CHECK(bt_msg_add_tensor(m, "x", BT_F32, 9, shape, NULL) == BT_EINVAL);
    CHECK(bt_msg_add_tensor(m, "x", (bt_dtype)99, 0, NULL, NULL) == BT_EINVAL);
    CHECK(bt_msg_tensor_count(m) == 0);
    bt_msg_destroy(&m);
}

/*  The sender refuses what the receiver would reject, and sends nothing. */
static void test_send_refuses_incomplete(void) {
    bt_msg_t *m = s_valid(BT_MSG_TASK);
    CHECK_OK(bt_msg_set_str(m, "kind", "pretrain"));
    CHECK(bt_proto_send(&m, s_router, WORKER_ID, strlen(WORKER_ID)) == BT_EFORMAT);
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "TASK: field 'kind': expected one of rollout, train, sft, "
                                        "eval, restore, snapshot, group, got "
                                        "\"pretrain\"");
    m = bt_msg_new(BT_MSG_FAIL);
    CHECK(bt_proto_send(&m, s_dealer, NULL, 0) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "FAIL: field 'task': missing");

    bt_msg_t *got = NULL;
    CHECK_OK(bt_proto_recv(s_dealer, &got, NULL, NULL, ZMQ_DONTWAIT));
    CHECK(got == NULL); /* nothing was sent */
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t peer_len;
    CHECK_OK(bt_proto_recv(s_router, &got, peer, &peer_len, ZMQ_DONTWAIT));
    CHECK(got == NULL);
}

/*  Sends a raw multipart message from the worker: header, then n frames of the given sizes. */
static void s_send_raw(const char *header, size_t header_len, const size_t *sizes, int n) {
    static uint8_t zeros[4096];
    zmq_send(s_dealer, header, header_len, n ? ZMQ_SNDMORE : 0);
    for (int i = 0; i < n; i++)
        zmq_send(s_dealer, zeros, sizes[i], i + 1 < n ? ZMQ_SNDMORE : 0);
}

/*  The ROUTER rejects the message now queued, with a reason containing want and the worker's id,
    then receives a good PING: the socket keeps working. */
static void s_expect_rejected(const char *label, const char *want) {
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t peer_len = 0;
    bt_msg_t *got = NULL;
    bt_status rc = bt_proto_recv(s_router, &got, peer, &peer_len, 0);
    if (rc != BT_EFORMAT)
        fprintf(stderr, "case '%s': status %d (%s)\n", label, rc, bt_last_error());
    CHECK(rc == BT_EFORMAT && got == NULL);
    if (want)
        CHECK_STR_CONTAINS(bt_last_error(), want);
    CHECK(strchr(bt_last_error(), '\n') == NULL);
    CHECK(peer_len == strlen(WORKER_ID) && memcmp(peer, WORKER_ID, peer_len) == 0);
    bt_msg_t *ping = s_up(s_valid(BT_MSG_PING));
    CHECK(ping && bt_msg_type_of(ping) == BT_MSG_PING);
    bt_msg_destroy(&ping);
}

typedef struct bad_case {
    const char *label, *header, *want;
    int n_frames;
    size_t sizes[3];
} bad_case;

#define ENV "\"v\":1,\"run\":\"r\",\"id\":1"
static const bad_case s_bad[] = {
    {"bad JSON", "{\"v\":1,", "header: not valid JSON", 0, {0}},
    {"trailing bytes", "{" ENV ",\"type\":\"PING\"} x", "header: not valid JSON", 0, {0}},
    {"empty frame", "", "header: not valid JSON", 0, {0}},
    {"not an object", "[1,2,3]", "header: not a JSON object", 0, {0}},
    {"missing v", "{\"type\":\"PING\",\"run\":\"r\",\"id\":1}", "header: missing 'v'", 0, {0}},
    {"v=2", "{\"v\":2,\"type\":\"PING\",\"run\":\"r\",\"id\":1}", "header: 'v' is not 1", 0, {0}},
    {"v as string",
     "{\"v\":\"1\",\"type\":\"PING\",\"run\":\"r\",\"id\":1}",
     "'v' is not 1",
     0,
     {0}},
    {"unknown type",
     "{" ENV ",\"type\":\"PONG\"}",
     "header: 'type' is not a message type: \"PONG\"",
     0,
     {0}},
    {"type not a string", "{" ENV ",\"type\":3}", "'type' is not a message type", 0, {0}},
    {"unknown header key",
     "{" ENV ",\"type\":\"PING\",\"x\":1}",
     "header: unknown key 'x'",
     0,
     {0}},
    {"duplicate header key",
     "{" ENV ",\"type\":\"PING\",\"id\":2}",
     "header: key 'id' appears twice",
     0,
     {0}},
    {"negative id",
     "{\"v\":1,\"run\":\"r\",\"id\":-1,\"type\":\"PING\"}",
     "PING: 'id': expected an integer in [0, 9007199254740992]",
     0,
     {0}},
    {"fractional id", "{\"v\":1,\"run\":\"r\",\"id\":1.5,\"type\":\"PING\"}", "PING: 'id'", 0, {0}},
    {"run not a string",
     "{\"v\":1,\"run\":7,\"id\":1,\"type\":\"PING\"}",
     "PING: 'run': expected a string",
     0,
     {0}},
    {"missing required field",
     "{" ENV ",\"type\":\"TASK\",\"f\":{\"task\":1,\"kind\":\"eval\"}}",
     "TASK: field 'version': missing",
     0,
     {0}},
    {"mistyped required field",
     "{" ENV ",\"type\":\"TASK\",\"f\":{\"task\":1,\"kind\":\"eval\",\"version\":\"x\"}}",
     "TASK: field 'version': expected an integer in [0, 9007199254740992], got \"x\"",
     0,
     {0}},
    {"bad role",
     "{" ENV
     ",\"type\":\"HELLO\",\"f\":{\"role\":\"admin\",\"name\":\"n\",\"host\":\"h\",\"pid\":1,"
     "\"device\":\"cpu\",\"threads\":1,\"proto\":1}}",
     "HELLO: field 'role': expected one of rollout, trainer, eval, got \"admin\"",
     0,
     {0}},
    {"field null",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\":null}}",
     "PING: field 'a': expected a finite number, a boolean or a string",
     0,
     {0}},
    {"field array",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\":[1]}}",
     "field 'a': expected a finite",
     0,
     {0}},
    {"field infinite",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\":1e999}}",
     "field 'a': expected a finite",
     0,
     {0}},
    {"duplicate field",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\":1,\"a\":2}}",
     "PING: field 'a' appears twice",
     0,
     {0}},
    {"bad field key",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\\nb\":1}}",
     "PING: field 'a\\x0ab': not a valid key",
     0,
     {0}},
    {"f not an object",
     "{" ENV ",\"type\":\"PING\",\"f\":[]}",
     "PING: 'f': expected an object",
     0,
     {0}},
    {"too few frames",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"U8\","
     "\"shape\":[4]}]}",
     "PING: header lists 1 tensors but 0 tensor frames followed",
     0,
     {0}},
    {"too many frames",
     "{" ENV ",\"type\":\"PING\"}",
     "PING: header lists 0 tensors but 2 tensor frames followed",
     2,
     {4, 4}},
    {"shape does not match frame",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2,3]}]}",
     "PING: tensor 'a': shape and dtype F32 make 24 bytes, its frame holds 20",
     1,
     {20}},
    {"huge shape",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F64\","
     "\"shape\":[4294967296,4294967296,4294967296]}]}",
     "PING: tensor 'a': more than the frame limit",
     1,
     {8}},
    {"dim beyond 2^53",
     "{" ENV
     ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"U8\",\"shape\":[1e300]}]}",
     "PING: tensor 0: shape: expected at most 8 integers",
     1,
     {1}},
    {"negative dim",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"U8\",\"shape\":[-1]}]}",
     "tensor 0: shape",
     1,
     {0}},
    {"nine dims",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"U8\","
     "\"shape\":[1,1,1,1,1,1,1,1,1]}]}",
     "tensor 0: shape: expected at most 8",
     1,
     {1}},
    {"unknown dtype",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F8\",\"shape\":[1]}]}",
     "PING: tensor 0: unknown dtype \"F8\"",
     1,
     {1}},
    {"tensor extra key",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"U8\",\"shape\":[1],"
     "\"offset\":0}]}",
     "PING: tensor 0: unknown key 'offset'",
     1,
     {1}},
    {"tensor not an object",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[7]}",
     "PING: tensor 0: expected an object",
     1,
     {1}},
    {"duplicate tensor names",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"U8\",\"shape\":[1]},"
     "{\"name\":\"a\",\"dtype\":\"U8\",\"shape\":[1]}]}",
     "PING: tensor 'a' appears twice",
     2,
     {1, 1}},
    {"bad tensor name",
     "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"\",\"dtype\":\"U8\",\"shape\":[1]}]}",
     "PING: tensor '': not a valid name",
     1,
     {1}},
    {"non-UTF-8 bytes",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\":\"\xc3\x28\"}}",
     "header: not UTF-8 text",
     0,
     {0}},
    {"escaped surrogate",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\":\"\\udc00\"}}",
     "header: not valid JSON",
     0,
     {0}},
    {"NUL escape",
     "{" ENV ",\"type\":\"PING\",\"f\":{\"a\":\"x\\u0000y\"}}",
     "header: a string holds \\u0000",
     0,
     {0}},
    {"NUL byte", "{" ENV ",\"type\":\"PING\"}\0", "header: not UTF-8 text", 0, {0}},
};

static void test_malformed_rejected(void) {
    int n = (int)(sizeof s_bad / sizeof s_bad[0]);
    for (int i = 0; i < n; i++) {
        const bad_case *c = &s_bad[i];
        size_t len = strlen(c->header) + (strcmp(c->label, "NUL byte") == 0);
        s_send_raw(c->header, len, c->sizes, c->n_frames);
        s_expect_rejected(c->label, c->want);
    }
}

/*  Cases whose header is built: over BT_WIRE_HEADER_MAX, too many tensors, a frame above the frame
 * limit. */
static void test_limits_rejected(void) {
    char *big = malloc(BT_WIRE_HEADER_MAX + 64);
    int len = snprintf(big, 64, "{" ENV ",\"type\":\"PING\"}");
    memset(big + len, ' ', BT_WIRE_HEADER_MAX + 1 - (size_t)len);
    s_send_raw(big, BT_WIRE_HEADER_MAX + 1, NULL, 0);
    char want[96];
    snprintf(want, sizeof want, "header: %d bytes, more than %d", BT_WIRE_HEADER_MAX + 1,
             BT_WIRE_HEADER_MAX);
    s_expect_rejected("header above the limit", want);
    s_send_raw(big, BT_WIRE_HEADER_MAX, NULL, 0); /* whitespace up to the limit is fine */
    bt_msg_t *got = NULL;
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t peer_len;
    CHECK_OK(bt_proto_recv(s_router, &got, peer, &peer_len, 0));
    bt_msg_destroy(&got);

    int n = BT_WIRE_TENSORS_MAX + 1;
    size_t used = (size_t)snprintf(big, 64, "{" ENV ",\"type\":\"PING\",\"tensors\":[");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(
            big + used, 64, "%s{\"name\":\"t%d\",\"dtype\":\"U8\",\"shape\":[1]}", i ? "," : "", i);
    snprintf(big + used, 8, "]}");
    size_t sizes[BT_WIRE_TENSORS_MAX + 1];
    for (int i = 0; i < n; i++)
        sizes[i] = 1;
    s_send_raw(big, strlen(big), sizes, n);
    snprintf(want, sizeof want, "PING: %d tensors, more than %d", BT_WIRE_TENSORS_MAX + 1,
             BT_WIRE_TENSORS_MAX);
    s_expect_rejected("too many tensors", want);
    free(big);

    bt_msg_set_frame_max(16);
    const char *h = "{" ENV ",\"type\":\"PING\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\","
                    "\"shape\":[8]}]}";
    size_t size = 32;
    s_send_raw(h, strlen(h), &size, 1);
    s_expect_rejected("frame above the limit", "PING: tensor 'a': more than the frame limit of 16");
    int64_t shape[1] = {8};
    float data[8] = {0};
    bt_msg_t *m = bt_msg_new(BT_MSG_PING);
    CHECK(bt_msg_add_tensor(m, "a", BT_F32, 1, shape, data) == BT_EINVAL);
    bt_msg_destroy(&m);
    bt_msg_set_frame_max(BT_WIRE_FRAME_MAX_DEFAULT);
    CHECK(bt_msg_frame_max() == BT_WIRE_FRAME_MAX_DEFAULT);
}

/*  Sends each file of tests/corpus/NAME, the frames of one message in the layout of tests/fuzz.h,
    from the worker; the controller must accept every one (valid) or reject every one. */
static void s_replay_corpus(const char *name, bool valid) {
    const char *src = getenv("BATON_SOURCE_DIR");
    char dir[1024], path[1400];
    snprintf(dir, sizeof dir, "%s/tests/corpus/%s", src ? src : ".", name);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int files = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        static uint8_t buf[BT_WIRE_HEADER_MAX + 2];
        size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        const void *frames[8];
        size_t sizes[8];
        size_t n = s_wire_split(buf, len, frames, sizes, 8);
        for (size_t i = 0; i < n; i++)
            zmq_send(s_dealer, frames[i], sizes[i], i + 1 < n ? ZMQ_SNDMORE : 0);
        if (valid) {
            bt_msg_t *got = NULL;
            uint8_t peer[BT_WIRE_PEER_MAX];
            size_t peer_len;
            bt_status rc = bt_proto_recv(s_router, &got, peer, &peer_len, 0);
            if (rc != BT_OK)
                fprintf(stderr, "%s/%s: %s\n", name, e->d_name, bt_last_error());
            CHECK(rc == BT_OK && got && bt_msg_tensor_count(got) == (int)n - 1);
            bt_msg_destroy(&got);
        } else {
            s_expect_rejected(e->d_name, NULL);
        }
        files++;
    }
    if (d)
        closedir(d);
    CHECK(files >= 5);
}

/*  Each file of tests/corpus/wire must be rejected, each of tests/corpus/wire-valid accepted;
    both folders seed the fuzz target (tests/fuzz_wire.c). */
static void test_corpus(void) {
    s_replay_corpus("wire", false);
    s_replay_corpus("wire-valid", true);
}

/*  The raw frames of a valid TASK with two tensors, as bt_proto_send() writes them. */
static size_t s_capture(char *header, size_t cap, size_t *sizes) {
    bt_msg_t *m = s_valid(BT_MSG_TASK);
    int64_t shape[2] = {2, 3};
    int64_t tokens[6] = {1, 2, 3, 4, 5, 6};
    CHECK_OK(bt_msg_set_double(m, "temperature", 0.7));
    CHECK_OK(bt_msg_set_bool(m, "greedy", false));
    CHECK_OK(bt_msg_add_tensor(m, "tokens", BT_I64, 2, shape, tokens));
    CHECK_OK(bt_msg_add_tensor(m, "mask", BT_U8, 2, shape, tokens));
    CHECK_OK(bt_proto_send(&m, s_dealer, NULL, 0));
    char id[BT_WIRE_PEER_MAX];
    CHECK(zmq_recv(s_router, id, sizeof id, 0) == (int)strlen(WORKER_ID));
    int len = zmq_recv(s_router, header, cap, 0);
    CHECK(len > 0 && (size_t)len < cap);
    for (int i = 0; i < 2; i++)
        sizes[i] = (size_t)zmq_recv(s_router, id, sizeof id, 0);
    CHECK(sizes[0] == 48 && sizes[1] == 6);
    const char *start = "{\"v\":1,\"type\":\"TASK\",\"run\":\"arith\",\"id\":7,\"f\":{";
    CHECK(len > 0 && strncmp(header, start, strlen(start)) == 0);
    header[len > 0 ? len : 0] = '\0';
    CHECK(strstr(header, "\"temperature\":0.7,") != NULL); /* the fewest digits that read back */
    return len > 0 ? (size_t)len : 0;
}

/*  Thousands of random edits of a valid header: each is received whole, accepted or rejected with
    BT_EFORMAT, never crashes, and the socket keeps working. */
static void test_random_mutations(void) {
    char valid[2048], buf[4096];
    size_t sizes[2];
    size_t valid_len = s_capture(valid, sizeof valid, sizes);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = valid_len;
        memcpy(buf, valid, len);
        for (int k = 1 + (int)(s_rand() % 4); k > 0; k--)
            s_mutate(buf, &len, sizeof buf);
        s_send_raw(buf, len, sizes, (int)(s_rand() % 3));
        uint8_t peer[BT_WIRE_PEER_MAX];
        size_t peer_len;
        bt_msg_t *got = NULL;
        bt_status rc = bt_proto_recv(s_router, &got, peer, &peer_len, 0);
        CHECK(rc == BT_OK || rc == BT_EFORMAT);
        CHECK((rc == BT_OK) == (got != NULL));
        accepted += got != NULL;
        rejected += rc == BT_EFORMAT;
        bt_msg_destroy(&got);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("mutations: %d accepted, %d rejected in %.3f s\n", accepted, rejected, secs);
    CHECK(rejected > 10000 && accepted > 0);
    CHECK(secs < 2.0);
    s_send_raw(valid, valid_len, sizes, 2);
    bt_msg_t *got = NULL;
    uint8_t peer[BT_WIRE_PEER_MAX];
    size_t peer_len;
    CHECK_OK(bt_proto_recv(s_router, &got, peer, &peer_len, 0));
    bt_msg_destroy(&got);
}

int main(void) {
    s_open();
    test_type_names();
    test_every_type_round_trips();
    test_hello_welcome_fields();
    test_tensors_round_trip();
    test_zero_copy();
    test_shared_tensors();
    test_field_errors();
    test_send_refuses_incomplete();
    test_malformed_rejected();
    test_limits_rejected();
    test_corpus();
    test_random_mutations();
    s_close();
    return check_exit();
}
