/*  fuzz_wire.c — libFuzzer target for the wire decoder.  An input is the frames of one message in
    the layout of tests/fuzz.h (s_wire_split), judged by bt_msg_decode(): the decoder bt_msg_recv()
    runs on what it reads from a socket.  Properties, each checked with BT_ASSERT (an abort is a
    crash to libFuzzer):
      - the answer is BT_OK with a message or BT_EFORMAT without one and a one-line reason;
      - an accepted message reads back consistently: every field has exactly one kind, every
        tensor's frame holds numel * element size bytes and is found again by its name;
      - an accepted message goes through bt_msg_send() and bt_msg_recv() (an inproc PAIR) and
        arrives equal to a second decoding of the same input.
    Built with clang -fsanitize=fuzzer (CMake option BATON_FUZZ); tests/fuzz_replay.c runs it on
    its corpora as an ordinary test with any compiler. */
#include "baton/dtype.h"
#include "baton/msg.h"
#include "baton/status.h"

#include "fuzz.h"

#include <float.h>
#include <stdint.h>
#include <string.h>
#include <zmq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*  A PAIR of inproc sockets for the round trip, opened at the first input and kept. */
static void *s_tx, *s_rx;

static void s_open_pair(void) {
    void *ctx = zmq_ctx_new();
    s_tx = zmq_socket(ctx, ZMQ_PAIR);
    s_rx = zmq_socket(ctx, ZMQ_PAIR);
    BT_ASSERT(zmq_bind(s_rx, "inproc://fuzz-wire") == 0);
    BT_ASSERT(zmq_connect(s_tx, "inproc://fuzz-wire") == 0);
}

typedef enum s_kind { S_STR, S_BOOL, S_NUM } s_kind;

/*  The kind of field key, asserting that exactly one getter accepts it; its value in *str, *flag
    or *num. */
static s_kind s_field(const bt_msg_t *m, const char *key, const char **str, bool *flag,
                      double *num) {
    bool is_str = bt_msg_get_str(m, key, SIZE_MAX, str) == BT_OK;
    bool is_bool = bt_msg_get_bool(m, key, flag) == BT_OK;
    bool is_num = bt_msg_get_double(m, key, -DBL_MAX, DBL_MAX, num) == BT_OK;
    BT_ASSERT(is_str + is_bool + is_num == 1);
    return is_str ? S_STR : is_bool ? S_BOOL : S_NUM;
}

/*  An accepted message reads back consistently. */
static void s_check_accepted(const bt_msg_t *m) {
    BT_ASSERT(strcmp(bt_msg_type_name(bt_msg_type_of(m)), "?") != 0);
    BT_ASSERT(bt_msg_id(m) >= 0 && bt_msg_id(m) <= BT_WIRE_INT_MAX);
    BT_ASSERT(strlen(bt_msg_run(m)) <= BT_WIRE_STR_MAX);
    for (int i = 0; i < bt_msg_field_count(m); i++) {
        const char *key = bt_msg_field_key(m, i), *str;
        bool flag;
        double num;
        BT_ASSERT(bt_msg_has(m, key));
        s_field(m, key, &str, &flag, &num);
    }
    for (int i = 0; i < bt_msg_tensor_count(m); i++) {
        bt_msg_tensor t = bt_msg_tensor_at(m, i), again;
        size_t numel = 1;
        for (int d = 0; d < t.ndim; d++)
            numel *= (size_t)t.shape[d];
        BT_ASSERT(t.nbytes == numel * bt_dtype_size(t.dtype));
        BT_ASSERT(bt_msg_get_tensor(m, t.name, t.dtype, t.ndim, &again) == BT_OK);
        BT_ASSERT(again.data == t.data && again.nbytes == t.nbytes);
    }
}

/*  a and b hold the same type, id, run, fields (in order) and tensors (bytes included). */
static void s_check_same(const bt_msg_t *a, const bt_msg_t *b) {
    BT_ASSERT(bt_msg_type_of(a) == bt_msg_type_of(b) && bt_msg_id(a) == bt_msg_id(b));
    BT_ASSERT(strcmp(bt_msg_run(a), bt_msg_run(b)) == 0);
    BT_ASSERT(bt_msg_field_count(a) == bt_msg_field_count(b));
    for (int i = 0; i < bt_msg_field_count(a); i++) {
        const char *key = bt_msg_field_key(a, i), *sa, *sb;
        bool fa, fb;
        double na, nb;
        BT_ASSERT(strcmp(key, bt_msg_field_key(b, i)) == 0);
        s_kind kind = s_field(a, key, &sa, &fa, &na);
        BT_ASSERT(s_field(b, key, &sb, &fb, &nb) == kind);
        BT_ASSERT(kind == S_STR ? strcmp(sa, sb) == 0 : kind == S_BOOL ? fa == fb : na == nb);
    }
    BT_ASSERT(bt_msg_tensor_count(a) == bt_msg_tensor_count(b));
    for (int i = 0; i < bt_msg_tensor_count(a); i++) {
        bt_msg_tensor ta = bt_msg_tensor_at(a, i), tb = bt_msg_tensor_at(b, i);
        BT_ASSERT(strcmp(ta.name, tb.name) == 0 && ta.dtype == tb.dtype && ta.ndim == tb.ndim);
        BT_ASSERT(memcmp(ta.shape, tb.shape, sizeof ta.shape) == 0 && ta.nbytes == tb.nbytes);
        BT_ASSERT(ta.nbytes == 0 || memcmp(ta.data, tb.data, ta.nbytes) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const void *frames[2 + BT_WIRE_TENSORS_MAX]; /* one frame more than a message may have */
    size_t sizes[2 + BT_WIRE_TENSORS_MAX];
    size_t n = s_wire_split(data, size, frames, sizes, 2 + BT_WIRE_TENSORS_MAX);
    bt_msg_t *m = NULL, *again = NULL, *back = NULL;
    bt_status rc = bt_msg_decode(frames, sizes, n, &m);
    BT_ASSERT(rc == BT_OK || rc == BT_EFORMAT);
    BT_ASSERT((rc == BT_OK) == (m != NULL));
    if (rc != BT_OK) {
        BT_ASSERT(bt_last_error()[0] != '\0' && strchr(bt_last_error(), '\n') == NULL);
        return 0;
    }
    s_check_accepted(m);
    /* Numbers re-encode in full ("5e-324" becomes "4.94065645841247e-324"): below a quarter of
       the header limit the encoded header always fits. */
    if (sizes[0] > BT_WIRE_HEADER_MAX / 4) {
        bt_msg_destroy(&m);
        return 0;
    }
    if (!s_tx)
        s_open_pair();
    BT_ASSERT(bt_msg_decode(frames, sizes, n, &again) == BT_OK);
    BT_ASSERT(bt_msg_send(&m, s_tx, NULL, 0) == BT_OK);
    BT_ASSERT(bt_msg_recv(s_rx, &back, NULL, NULL, 0) == BT_OK && back);
    s_check_same(again, back);
    bt_msg_destroy(&again);
    bt_msg_destroy(&back);
    return 0;
}
