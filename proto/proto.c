/*  proto.c — roles, job kinds and the fields each message type requires; see proto.h. */
#include "baton/proto.h"

#include <string.h>

/* ---- roles and job kinds -------------------------------------------------------------------- */

static const char *const s_role_names[BT_ROLE_COUNT + 1] = {
    [BT_ROLE_ROLLOUT] = "rollout", [BT_ROLE_TRAINER] = "trainer", [BT_ROLE_EVAL] = "eval", NULL};

const char *bt_role_name(bt_role role) {
    return (unsigned)role < BT_ROLE_COUNT ? s_role_names[role] : "unknown";
}

bt_status bt_role_parse(const char *text, bt_role *out) {
    for (int r = 0; r < BT_ROLE_COUNT; r++)
        if (text && strcmp(text, s_role_names[r]) == 0) {
            *out = (bt_role)r;
            return BT_OK;
        }
    return bt_fail(BT_EINVAL, "role: expected \"rollout\", \"trainer\" or \"eval\", got \"%s\"",
                   text ? text : "(null)");
}

static const char *const s_kind_names[BT_JOB_KIND_COUNT + 1] = {
    [BT_JOB_ROLLOUT] = "rollout", [BT_JOB_TRAIN] = "train",     [BT_JOB_SFT] = "sft",
    [BT_JOB_EVAL] = "eval",       [BT_JOB_RESTORE] = "restore", [BT_JOB_SNAPSHOT] = "snapshot",
    [BT_JOB_GROUP] = "group",     [BT_JOB_KIND_COUNT] = NULL};

const char *bt_job_kind_name(bt_job_kind kind) {
    return (unsigned)kind < BT_JOB_KIND_COUNT ? s_kind_names[kind] : "?";
}

bool bt_job_kind_parse(const char *text, bt_job_kind *out) {
    for (int k = 0; k < BT_JOB_KIND_COUNT; k++)
        if (text && strcmp(text, s_kind_names[k]) == 0) {
            *out = (bt_job_kind)k;
            return true;
        }
    return false;
}

bt_role bt_job_kind_role(bt_job_kind kind) {
    switch (kind) {
    case BT_JOB_ROLLOUT: return BT_ROLE_ROLLOUT;
    case BT_JOB_EVAL: return BT_ROLE_EVAL;
    case BT_JOB_TRAIN:
    case BT_JOB_SFT:
    case BT_JOB_RESTORE:
    case BT_JOB_SNAPSHOT:
    case BT_JOB_GROUP: return BT_ROLE_TRAINER;
    case BT_JOB_KIND_COUNT: break;
    }
    BT_ASSERT(!"a job kind");
    return BT_ROLE_TRAINER;
}

/* ---- required fields per message type ------------------------------------------------------- */

static const bt_msg_rule s_rules[] = {
    {BT_MSG_HELLO, "role", BT_MSG_RULE_ONE_OF, 0, 0, s_role_names},
    {BT_MSG_HELLO, "name", BT_MSG_RULE_TEXT, 0, 0, NULL},
    {BT_MSG_HELLO, "host", BT_MSG_RULE_TEXT, 0, 0, NULL},
    {BT_MSG_HELLO, "pid", BT_MSG_RULE_INT, 1, INT32_MAX, NULL},
    {BT_MSG_HELLO, "device", BT_MSG_RULE_TEXT, 0, 0, NULL},
    {BT_MSG_HELLO, "threads", BT_MSG_RULE_INT, 1, 4096, NULL},
    {BT_MSG_HELLO, "proto", BT_MSG_RULE_INT, 1, INT32_MAX, NULL},
    {BT_MSG_WELCOME, "worker", BT_MSG_RULE_INT, 0, INT32_MAX, NULL},
    {BT_MSG_WELCOME, "heartbeat_ms", BT_MSG_RULE_INT, 1, 3600000, NULL},
    {BT_MSG_TASK, "task", BT_MSG_RULE_INT, 0, BT_WIRE_INT_MAX, NULL},
    {BT_MSG_TASK, "kind", BT_MSG_RULE_ONE_OF, 0, 0, s_kind_names},
    {BT_MSG_TASK, "version", BT_MSG_RULE_INT, 0, BT_WIRE_INT_MAX, NULL},
    {BT_MSG_RESULT, "task", BT_MSG_RULE_INT, 0, BT_WIRE_INT_MAX, NULL},
    {BT_MSG_FAIL, "task", BT_MSG_RULE_INT, 0, BT_WIRE_INT_MAX, NULL},
    {BT_MSG_FAIL, "error", BT_MSG_RULE_TEXT, 0, 0, NULL},
    {BT_MSG_WEIGHTS, "version", BT_MSG_RULE_INT, 0, BT_WIRE_INT_MAX, NULL},
    {BT_MSG_INVALID, "reason", BT_MSG_RULE_TEXT, 0, 0, NULL},
};

bt_status bt_proto_check(const bt_msg_t *m) {
    return bt_msg_check(m, s_rules, (int)(sizeof s_rules / sizeof s_rules[0]));
}

bt_status bt_proto_send(bt_msg_t **msg_p, void *socket, const void *peer_id, size_t peer_len) {
    BT_ASSERT(msg_p && *msg_p);
    bt_status rc = bt_proto_check(*msg_p);
    if (rc != BT_OK) {
        bt_msg_destroy(msg_p);
        return rc;
    }
    return bt_msg_send(msg_p, socket, peer_id, peer_len);
}

bt_status bt_proto_recv(void *socket, bt_msg_t **out, uint8_t *peer_id, size_t *peer_len,
                        int flags) {
    bt_status rc = bt_msg_recv(socket, out, peer_id, peer_len, flags);
    if (rc == BT_OK && *out && (rc = bt_proto_check(*out)) != BT_OK)
        bt_msg_destroy(out);
    return rc;
}
