/*  msg.h — the codec of baton's messages: one ZeroMQ multipart message each, a JSON header frame
    followed by raw tensor frames; built, sent, received and checked here (reference:
    docs/protocol.md).  It knows frames, the header and the message types, never what a field means:
    the fields each type requires, roles and job kinds are proto/'s (proto.h).
    Threading: a message belongs to one thread at a time; a socket to the thread that uses it.
    Lifetime: from bt_msg_new() or bt_msg_recv() until bt_msg_send() or bt_msg_destroy().

    Frame 0 (UTF-8 JSON, one object, at most BT_WIRE_HEADER_MAX bytes):
      {"v": 1, "type": "TASK", "run": "arith", "id": 17,
       "f": {"task": 4, "kind": "rollout", "stats.loss": 0.25, ...},         (optional)
       "tensors": [{"name": "prompts", "dtype": "I64", "shape": [8]}, ...]}  (optional)
    Frames 1..n: the listed tensors in order, row-major little-endian, numel * element size bytes.
    Header fields live flat under "f"; dotted keys ("model.hidden_size") carry nested data.  A field
    value is a number, a boolean or a string.  Any other header key is refused, as is anything
    beyond the limits below (docs/protocol.md lists every check); the fields a type requires are
    checked against a table of rules (bt_msg_check) by the layer that owns them.  A ROUTER socket
    sees a routing-id frame before frame 0: bt_msg_recv() returns it as the peer id and
    bt_msg_send() takes one. */
#ifndef BATON_WIRE_H
#define BATON_WIRE_H

#include "baton/dtype.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_WIRE_VERSION 1            /* "v" of every header */
#define BT_WIRE_HEADER_MAX (1 << 20) /* bytes of frame 0 */
#define BT_WIRE_TENSORS_MAX 1024     /* tensors (frames after the header) per message */
#define BT_WIRE_FIELDS_MAX 256       /* entries of "f" */
#define BT_WIRE_STR_MAX 4096         /* bytes of any string value, "run" included */
#define BT_WIRE_NAME_MAX 128         /* bytes of a field key or tensor name: A-Z a-z 0-9 _ . - */
#define BT_WIRE_PEER_MAX 256         /* bytes of a ROUTER peer id buffer (ZeroMQ ids are <= 255) */
#define BT_WIRE_FRAME_MAX_DEFAULT ((size_t)1 << 30)
/*  Integers travel as JSON numbers: exact, and accepted, only up to 2^53 in magnitude.  The id,
    shapes and every integer field are bounded by it. */
#define BT_WIRE_INT_MAX INT64_C(9007199254740992)

/*  Values are stable (append only); the wire carries the names.  What each carries: proto.h. */
typedef enum bt_msg_type {
    BT_MSG_HELLO = 0,   /* worker -> controller: joining */
    BT_MSG_WELCOME = 1, /* controller -> worker: admitted */
    BT_MSG_PING = 2,    /* worker -> controller: heartbeat */
    BT_MSG_TASK = 3,    /* controller -> worker: a job */
    BT_MSG_RESULT = 4,  /* worker -> controller: a job's outcome */
    BT_MSG_FAIL = 5,    /* worker -> controller: a job's failure */
    BT_MSG_WEIGHTS = 6, /* either way: the parameters as tensors */
    BT_MSG_STOP = 7,    /* controller -> worker: finish and leave */
    BT_MSG_BYE = 8,     /* worker -> controller: leaving */
    BT_MSG_INVALID = 9  /* controller -> worker: refused; HELLO again */
} bt_msg_type;

/*  "HELLO", ...; "?" for a value outside the enum.  Static string. */
const char *bt_msg_type_name(bt_msg_type type);
/*  False when name is not a message type. */
bool bt_msg_type_parse(const char *name, bt_msg_type *out);

typedef struct bt_msg bt_msg_t;

/*  An empty message of the given type, run "" and id 0.  Caller owns the result (NULL when out of
    memory); hand it to bt_msg_send() or destroy it with bt_msg_destroy(). */
bt_msg_t *bt_msg_new(bt_msg_type type);
void bt_msg_destroy(bt_msg_t **self_p);

bt_msg_type bt_msg_type_of(const bt_msg_t *self);
int64_t bt_msg_id(const bt_msg_t *self);
/*  Borrowed: valid until the message is sent, destroyed or given another run. */
const char *bt_msg_run(const bt_msg_t *self);
/*  Who sent a received message, as the transport authenticated it: the user id the controller's
    ZAP handler gave the sender's CURVE key (security.h), or "" (plain sockets, built messages).
    Borrowed: valid while the message lives. */
const char *bt_msg_user(const bt_msg_t *self);
/*  id in [0, BT_WIRE_INT_MAX] (asserted). */
void bt_msg_set_id(bt_msg_t *self, int64_t id);
/*  BT_EINVAL when run is longer than BT_WIRE_STR_MAX bytes or not UTF-8. */
bt_status bt_msg_set_run(bt_msg_t *self, const char *run);

/* ---- header fields -------------------------------------------------------------------------- */
/*  Set or replace the field key.  BT_EINVAL when the key is not a valid name, the message already
    holds BT_WIRE_FIELDS_MAX fields, or the value cannot travel (an integer beyond +-2^53, a
    non-finite double, a string longer than BT_WIRE_STR_MAX bytes or not UTF-8); BT_ENOMEM. */
bt_status bt_msg_set_int(bt_msg_t *self, const char *key, int64_t value);
bt_status bt_msg_set_double(bt_msg_t *self, const char *key, double value);
bt_status bt_msg_set_bool(bt_msg_t *self, const char *key, bool value);
bt_status bt_msg_set_str(bt_msg_t *self, const char *key, const char *value);

bool bt_msg_has(const bt_msg_t *self, const char *key);
/*  Fields in the order they were set or received: keys 0 .. count-1.  Borrowed: valid until the
    message is sent or destroyed. */
int bt_msg_field_count(const bt_msg_t *self);
const char *bt_msg_field_key(const bt_msg_t *self, int i);

/*  Each getter returns BT_EFORMAT naming the type, the key and what was wrong when the field is
    missing or is not of the asked type and range, e.g.
    TASK: field 'version': expected an integer in [0, 9007199254740992], got "x"
    A number with a fraction is not an integer; integers are numbers for bt_msg_get_double(). */
bt_status bt_msg_get_int(const bt_msg_t *self, const char *key, int64_t min, int64_t max,
                         int64_t *out);
bt_status bt_msg_get_double(const bt_msg_t *self, const char *key, double min, double max,
                            double *out);
bt_status bt_msg_get_bool(const bt_msg_t *self, const char *key, bool *out);
/*  A string of at most maxlen bytes.  Borrowed: valid until the message is sent or destroyed. */
bt_status bt_msg_get_str(const bt_msg_t *self, const char *key, size_t maxlen, const char **out);

/* ---- required fields ------------------------------------------------------------------------ */
typedef enum bt_msg_rule_kind {
    BT_MSG_RULE_INT = 0,   /* an integer in [min, max] */
    BT_MSG_RULE_TEXT = 1,  /* a string of at most BT_WIRE_STR_MAX bytes */
    BT_MSG_RULE_ONE_OF = 2 /* a string among choices */
} bt_msg_rule_kind;

/*  A field every message of type must carry. */
typedef struct bt_msg_rule {
    bt_msg_type type;
    const char *key;
    bt_msg_rule_kind kind;
    int64_t min, max;           /* BT_MSG_RULE_INT */
    const char *const *choices; /* BT_MSG_RULE_ONE_OF: NULL-terminated */
} bt_msg_rule;

/*  BT_OK when self carries every field rules[0..n) asks of its type, each of its kind and range;
    else BT_EFORMAT as the getters word it, e.g.
    TASK: field 'kind': expected one of rollout, train, got "pretrain" */
bt_status bt_msg_check(const bt_msg_t *self, const bt_msg_rule *rules, int n);

/* ---- tensors -------------------------------------------------------------------------------- */
/*  One tensor of a message.  Borrowed: valid until the message is sent or destroyed. */
typedef struct bt_msg_tensor {
    const char *name;
    bt_dtype dtype;
    int ndim; /* 0 (a scalar) .. BT_MAX_DIMS */
    int64_t shape[BT_MAX_DIMS];
    size_t nbytes;    /* numel * element size */
    const void *data; /* nbytes bytes, not aligned for the dtype: read with memcpy */
} bt_msg_tensor;

/*  Called once ZeroMQ is done with a zero-copy buffer, possibly on another thread: after it was
    transmitted (tcp, ipc), or when the receiver destroys its message (inproc). */
typedef void(bt_msg_free_fn)(void *data, void *hint);

/*  Appends a tensor holding a copy of data (numel * element size bytes; NULL when that is 0).
    BT_EINVAL for a bad or repeated name, an unknown dtype, ndim outside 0..BT_MAX_DIMS, a negative
    dim, more than BT_WIRE_TENSORS_MAX tensors, or a size above bt_msg_frame_max(); BT_ENOMEM. */
bt_status bt_msg_add_tensor(bt_msg_t *self, const char *name, bt_dtype dtype, int ndim,
                            const int64_t *shape, const void *data);
/*  As bt_msg_add_tensor(), without copying: the frame sent is data itself.  Takes ownership of
    data, even on error: free_fn(data, hint) runs exactly once when nothing needs the buffer any
    more (free_fn NULL: free()). */
bt_status bt_msg_add_tensor_zero_copy(bt_msg_t *self, const char *name, bt_dtype dtype, int ndim,
                                      const int64_t *shape, void *data, bt_msg_free_fn *free_fn,
                                      void *hint);
/*  Appends tensor i of src (asserted in [0, count)) without copying: both messages hold the same
    buffer, and ZeroMQ frees it when the last holder (message, send in flight, receiver) is done.
    So a received message can be forwarded to many peers for the cost of one; src may be sent or
    destroyed first.  The bytes are read-only to every holder.  Errors as bt_msg_add_tensor(). */
bt_status bt_msg_add_tensor_shared(bt_msg_t *self, const bt_msg_t *src, int i);
int bt_msg_tensor_count(const bt_msg_t *self);
/*  Tensor i in [0, count) (asserted), in the order added or received. */
bt_msg_tensor bt_msg_tensor_at(const bt_msg_t *self, int i);
/*  The tensor called name, which must have the given dtype and ndim; else BT_EFORMAT, e.g.
    RESULT: tensor 'tokens': expected I64 with 2 dims, got F32 with 1 dims */
bt_status bt_msg_get_tensor(const bt_msg_t *self, const char *name, bt_dtype dtype, int ndim,
                            bt_msg_tensor *out);

/*  Largest tensor frame sent or accepted, in bytes (default BT_WIRE_FRAME_MAX_DEFAULT).
    Process-wide: set it before starting threads. */
void bt_msg_set_frame_max(size_t bytes);
size_t bt_msg_frame_max(void);

/* ---- sockets -------------------------------------------------------------------------------- */
/*  Sends *msg_p on a DEALER socket (peer_id NULL) or to peer_id on a ROUTER socket (asserted).
    Takes ownership of *msg_p and sets it to NULL, even on error.  Refuses, with BT_EFORMAT and
    nothing sent, a header above BT_WIRE_HEADER_MAX bytes; BT_EIO when ZeroMQ fails; BT_ENOMEM.
    (bt_proto_send() also refuses what the receiver's rules would reject.)  Blocks while the
    socket is at its high-water mark; retries when a signal interrupts.  A ROUTER drops a message
    for an unknown peer silently, unless ZMQ_ROUTER_MANDATORY is set (then BT_EIO). */
bt_status bt_msg_send(bt_msg_t **msg_p, void *socket, const void *peer_id, size_t peer_len);

/*  Receives one whole multipart message from a DEALER socket (peer_id and peer_len NULL) or a
    ROUTER socket (peer_id: BT_WIRE_PEER_MAX bytes, asserted).  flags go to the first zmq_msg_recv
    (ZMQ_DONTWAIT).  Every frame of the message is read, even when it is rejected.
      BT_OK, *out set: caller owns *out; its tensors point into the received frames (no copy).
      BT_OK, *out NULL: no message (ZMQ_DONTWAIT found none, or a signal interrupted the wait).
      BT_EFORMAT, *out NULL: the message was malformed; bt_last_error() holds a one-line reason.
    The required fields of its type are not checked here (bt_proto_recv() checks them).
      BT_EIO: ZeroMQ failed (the context was terminated, ...); BT_ENOMEM.
    On a ROUTER *peer_len and peer_id are set whenever a message was read, rejected or not. */
bt_status bt_msg_recv(void *socket, bt_msg_t **out, uint8_t *peer_id, size_t *peer_len, int flags);

/*  Judges a message held in memory by the decoder bt_msg_recv() runs on what it reads: n frames
    after any routing id, frames[0] the header, frames[1..n-1] the tensors, sizes[i] bytes each
    (a frame of size 0 may be NULL).  For fuzzing and for captured messages.
      BT_OK: caller owns *out; its tensors point into the frames, which are borrowed: keep them
      alive and unchanged until *out is destroyed.
      BT_EFORMAT, *out NULL: malformed (n 0 included); bt_last_error() holds a one-line reason.
      BT_ENOMEM. */
bt_status bt_msg_decode(const void *const *frames, const size_t *sizes, size_t n, bt_msg_t **out);

#ifdef __cplusplus
}
#endif
#endif
