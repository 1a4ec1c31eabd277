/*  worker.h — one worker loop for every role.  The calling thread talks to the controller (HELLO,
    WELCOME, PING every heartbeat, relaying TASK/WEIGHTS in and RESULT/FAIL/WEIGHTS out); a compute
    thread it starts owns the model and runs the tasks, so a long task never silences heartbeats.
    Threading: bt_worker_run blocks its thread until STOP.  Lifetime: everything it makes is gone
    when it returns. */
#ifndef BATON_WORKER_H
#define BATON_WORKER_H

#include "baton/proto.h"
#include "baton/security.h"
#include "baton/source.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*  What a worker did, for its exit line and for tests. */
typedef struct bt_worker_stats {
    int64_t joins;           /* WELCOMEs: 1, plus one per rejoin after the controller forgot it */
    int64_t tasks;           /* TASKs handed to it */
    int64_t tasks_last_join; /* of them, since its last WELCOME */
    char device[16];         /* where its models lived: "cpu", "cuda:N" */
    size_t device_peak;      /* CUDA: the most bytes its tensors held at once; 0 on the CPU */
} bt_worker_stats;

typedef struct bt_worker_options {
    void *zmq_ctx;        /* borrowed ZeroMQ context */
    const char *endpoint; /* the controller's ROUTER endpoint */
    bt_role role;
    const char *name;        /* shown in logs and events */
    const char *device;      /* "cpu", "cuda:N": overrides the config's run.device; NULL: not */
    int64_t join_timeout_ms; /* give up when no WELCOME comes (0: 30 s) */
    bt_reward_fn *reward;    /* a host's reward instead of the task's verifier, or NULL */
    void *reward_user;
    const bt_curve_keys *curve; /* CURVE: own key pair and the controller's public key; NULL:
                                   plain (ipc://, inproc://, or tcp:// --insecure) */
    bt_worker_stats *stats;     /* filled in when bt_worker_run returns, or NULL */
} bt_worker_options;

/*  Joins the controller and serves tasks until STOP (BT_OK).  BT_EIO when the controller cannot be
    reached; other errors when the compute state cannot be built from the WELCOME config. */
bt_status bt_worker_run(const bt_worker_options *opt);

#ifdef __cplusplus
}
#endif
#endif
