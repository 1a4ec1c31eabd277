/*  proto.h — the vocabulary of baton's protocol above the codec (msg.h): roles and job kinds as
    enums with their wire names, the fields each message type requires, and sending and receiving
    under those rules.  What each TASK and RESULT kind carries: spec.h (reference:
   docs/protocol.md). Threading: plain functions and constant tables.  Lifetime: names are static
   strings. */
#ifndef BATON_PROTO_H
#define BATON_PROTO_H

#include "baton/msg.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BT_PROTO_VERSION 1 /* HELLO.proto: the message set this build speaks */

/*  What a worker does.  Values appear in messages and logs: append only. */
typedef enum bt_role { BT_ROLE_ROLLOUT = 0, BT_ROLE_TRAINER = 1, BT_ROLE_EVAL = 2 } bt_role;
#define BT_ROLE_COUNT 3

/*  "rollout", "trainer", "eval"; "unknown" for a value outside the enum.  Static string. */
const char *bt_role_name(bt_role role);
/*  BT_EINVAL naming the text when it is not "rollout", "trainer" or "eval". */
bt_status bt_role_parse(const char *text, bt_role *out);

/*  What a job does; a TASK's "kind" is its name (bt_job_kind_name).  Append only. */
typedef enum bt_job_kind {
    BT_JOB_ROLLOUT = 0,
    BT_JOB_TRAIN = 1,
    BT_JOB_SFT = 2,
    BT_JOB_EVAL = 3,
    BT_JOB_RESTORE = 4,
    BT_JOB_SNAPSHOT = 5,
    BT_JOB_GROUP = 6,
    BT_JOB_KIND_COUNT
} bt_job_kind;

/*  "rollout", "train", "sft", "eval", "restore", "snapshot", "group"; "?" outside the enum. */
const char *bt_job_kind_name(bt_job_kind kind);
/*  False when text is not a job kind's name. */
bool bt_job_kind_parse(const char *text, bt_job_kind *out);
/*  The role whose workers run jobs of kind (asserted in the enum). */
bt_role bt_job_kind_role(bt_job_kind kind);

/*  BT_OK when m carries every field its type requires (docs/protocol.md, "Message types"):
    HELLO {role, name, host, pid, device, threads, proto}, WELCOME {worker, heartbeat_ms},
    TASK {task, kind, version}, RESULT {task}, FAIL {task, error}, WEIGHTS {version},
    INVALID {reason}; else BT_EFORMAT naming the field (bt_msg_check). */
bt_status bt_proto_check(const bt_msg_t *m);

/*  bt_msg_send() of a message that passes bt_proto_check(); one that does not is refused with its
    reason and nothing is sent.  Takes ownership of *msg_p and sets it to NULL, even on error. */
bt_status bt_proto_send(bt_msg_t **msg_p, void *socket, const void *peer_id, size_t peer_len);
/*  bt_msg_recv(), then bt_proto_check(): a message without its type's fields is BT_EFORMAT with
 *out NULL, as a malformed one (peer_id and *peer_len are set all the same). */
bt_status bt_proto_recv(void *socket, bt_msg_t **out, uint8_t *peer_id, size_t *peer_len,
                        int flags);

#ifdef __cplusplus
}
#endif
#endif
