/*  registry.h — the controller's table of workers and of the tasks it hands them.
    Threading: owned by the controller thread.  Lifetime: one per run.

    A task is QUEUED until assigned to a live worker of its role, then ASSIGNED until that worker
    reports it done (DONE) or is lost, which puts it back in the queue.  A result from a worker that
    no longer holds the task (it was re-queued after expiry, or already done) is refused, so no
    task is ever counted twice. */
#ifndef BATON_REGISTRY_H
#define BATON_REGISTRY_H

#include "baton/proto.h" /* bt_role */
#include "baton/spec.h"  /* bt_usage */
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bt_worker_state {
    BT_WORKER_IDLE = 0,
    BT_WORKER_BUSY = 1,
    BT_WORKER_LOST = 2
} bt_worker_state;
typedef enum bt_source_state {
    BT_TASK_QUEUED = 0,
    BT_TASK_ASSIGNED = 1,
    BT_TASK_DONE = 2,
    BT_TASK_CANCELLED = 3 /* never handed out again; a result for it is refused */
} bt_source_state;

#define BT_PEER_MAX 256

typedef struct bt_worker_info {
    int32_t id; /* registry index, stable for the run */
    bt_role role;
    char name[64];
    uint8_t peer[BT_PEER_MAX]; /* ZeroMQ routing id */
    size_t peer_len;
    bt_worker_state state;
    int64_t last_seen_ms;
    int64_t task;        /* the task it holds, -1 when none */
    int64_t done;        /* tasks it completed */
    bool quarantined;    /* it held a task past its deadline: it gets no more tasks this run */
    int64_t incarnation; /* bumped when the entry is reclaimed for another worker */
    /* resource figures (bt_registry_usage_of) */
    int64_t busy_since_ms; /* while BUSY: when it took the task */
    int64_t live_since_ms; /* while not LOST: when it joined */
    bt_usage usage;        /* the last its RESULTs reported; NaN: none yet */
} bt_worker_info;

/*  What the workers of one role did over the run so far, up to the registry's clock (the latest
    now_ms any call gave it): running totals, which a reader differences between two readings,
    and levels.  Busy time is from a task's hand-out to its RESULT or FAIL (or the worker's
    loss), so busy_ms <= live_ms always, and over any two readings too. */
typedef struct bt_registry_usage {
    int64_t busy_ms;  /* worker-milliseconds holding a task */
    int64_t live_ms;  /* worker-milliseconds joined and not lost */
    double cpu_s;     /* CPU seconds, from the workers' reports (bt_registry_report) */
    double weights_s; /* seconds spent on WEIGHTS, from the same */
    int32_t live;     /* workers not lost now */
    /* the largest figure a live worker of the role last reported; NaN: none reported */
    double peak_rss_mb, cuda_allocated_mb, cuda_reserved_mb;
} bt_registry_usage;

typedef struct bt_registry bt_registry_t;

/*  Caller owns the result; destroy with bt_registry_destroy(). */
bt_registry_t *bt_registry_new(int64_t expiry_ms);
void bt_registry_destroy(bt_registry_t **self_p);

/*  Adds a worker (or revives the one with the same peer id, keeping its id) as IDLE, seen at
    now_ms; returns its id, or -1: BT_EINVAL when another live worker has that name, BT_ERANGE
    when the table is full of workers that are not lost (a lost entry that holds no task is
    reclaimed for a newcomer when the table is full; its incarnation is bumped). */
int32_t bt_registry_join(bt_registry_t *self, bt_role role, const char *name, const uint8_t *peer,
                         size_t peer_len, int64_t now_ms);
/*  The live worker with this peer id, or NULL.  Borrowed: valid until the next join. */
bt_worker_info *bt_registry_find_peer(bt_registry_t *self, const uint8_t *peer, size_t peer_len);
bt_worker_info *bt_registry_worker(bt_registry_t *self, int32_t id);
int32_t bt_registry_worker_count(const bt_registry_t *self);
/*  Live (not LOST) workers of a role that may take tasks (not quarantined). */
int32_t bt_registry_live(const bt_registry_t *self, bt_role role);
void bt_registry_touch(bt_registry_t *self, int32_t worker, int64_t now_ms);
/*  Every live worker seen at now_ms: the controller itself was not running (stopped, or a long
    save), so its workers' silence is no evidence against them. */
void bt_registry_touch_all(bt_registry_t *self, int64_t now_ms);
/*  Takes a task back from a worker that held it past its deadline: the task is re-queued and the
    worker gets no further task; a result it sends later is refused. */
void bt_registry_quarantine(bt_registry_t *self, int32_t worker);
/*  Marks a worker LOST (BYE, or expiry) and re-queues its task. */
void bt_registry_remove(bt_registry_t *self, int32_t worker);
/*  Marks workers silent for longer than expiry_ms as LOST and re-queues their tasks; returns how
    many were lost. */
int bt_registry_expire(bt_registry_t *self, int64_t now_ms);

/*  Queues a task for a role; returns its id (dense, from 0).  user is the caller's payload. */
int64_t bt_registry_add_task(bt_registry_t *self, bt_role role, void *user);
/*  Like bt_registry_add_task, but the task waits for that worker while it is live; once the worker
    is lost any worker of the role may take it. */
int64_t bt_registry_add_task_for(bt_registry_t *self, bt_role role, int32_t worker, void *user);
/*  Like bt_registry_add_task_for, but only that worker may ever take it (a data-parallel rank's
    share): once the worker is lost the task waits until cancelled. */
int64_t bt_registry_add_task_only(bt_registry_t *self, bt_role role, int32_t worker, void *user);
/*  Cancels a task that is not DONE: it is never handed out again; a worker holding it stays busy
    until it reports, and that report is refused (bt_registry_complete and _fail return false). */
void bt_registry_cancel(bt_registry_t *self, int64_t task);
/*  Cancels every task that is not DONE (the run is over: nothing is handed out again). */
void bt_registry_cancel_pending(bt_registry_t *self);
/*  Tasks of a role waiting to be handed out. */
int64_t bt_registry_queued(const bt_registry_t *self, bt_role role);
bt_source_state bt_registry_task_state(const bt_registry_t *self, int64_t task);
void *bt_registry_task_user(const bt_registry_t *self, int64_t task);
/*  Times a task was handed out (a re-queued task is handed out again). */
int32_t bt_registry_task_attempts(const bt_registry_t *self, int64_t task);
/*  When the task was last handed out (now_ms of bt_registry_next_assignment). */
int64_t bt_registry_task_assigned_ms(const bt_registry_t *self, int64_t task);
/*  The worker holding the task while it is ASSIGNED (or CANCELLED and not yet reported); -1 when
    none. */
int32_t bt_registry_task_worker(const bt_registry_t *self, int64_t task);
/*  Pairs the oldest queued task of some role with an idle live worker of that role, marks both
    busy at now_ms and returns true; false when no pair exists. */
bool bt_registry_next_assignment(bt_registry_t *self, int64_t now_ms, int64_t *task,
                                 int32_t *worker);
/*  The worker reports the task done: true when it held it (the task becomes DONE, the worker
    IDLE); false for a late or duplicate result, which the caller drops and counts. */
bool bt_registry_complete(bt_registry_t *self, int64_t task, int32_t worker);
/*  The worker reports failure: the task goes back to the queue, the worker is IDLE. */
bool bt_registry_fail(bt_registry_t *self, int64_t task, int32_t worker);
/*  Tasks neither DONE nor CANCELLED. */
int64_t bt_registry_pending(const bt_registry_t *self);

/*  A worker's RESULT said what it used so far (running totals since it started): what grew since
    its last report is added to its role's totals (a total that fell is a new process: all of it
    counts).  NaN figures are left as they were. */
void bt_registry_report(bt_registry_t *self, int32_t worker, const bt_usage *u);
/*  The role's figures now (see bt_registry_usage). */
void bt_registry_usage_of(const bt_registry_t *self, bt_role role, bt_registry_usage *out);

#ifdef __cplusplus
}
#endif
#endif
