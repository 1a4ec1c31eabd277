/*  controller.h — the controller: one thread, a zmq_poll loop over its ROUTER socket, the worker
    registry, and the GRPO schedule (SFT warm start, then rollout -> advantages -> train -> publish
    weights -> evaluate), writing metrics.jsonl and events.jsonl.
    Threading: every call on the controller thread.  Lifetime: one per run. */
#ifndef BATON_CONTROLLER_H
#define BATON_CONTROLLER_H

#include "baton/baton.h"
#include "baton/config.h"
#include "baton/prometheus.h"
#include "baton/registry.h"
#include "baton/runlog.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  bt_progress, bt_progress_fn, bt_controller_stats: baton.h (the embedding API returns them). */

typedef struct bt_controller bt_controller_t;

/*  The launcher's answer to "can a worker of this role still join?": false when every worker
    process of the role it started has exited (under --procs), so waiting for one is pointless;
    why then says what happened ("trainer-0 (pid 123) was killed by signal 9"). */
typedef bool(bt_controller_gone_fn)(bt_role role, char *why, size_t cap, void *user);

/*  Binds a ROUTER socket at endpoint in zmq_ctx and makes one policy per config *cfgs[0..n)
    (the strategy variants of a run; one without variants): they share the socket, registry,
    worker pool and run log; tasks and WEIGHTS carry the variant's index.  cfgs, config_json and
    log are borrowed and must outlive the controller.  Caller owns the result; destroy with
    bt_controller_destroy(). */
bt_controller_t *bt_controller_new(void *zmq_ctx, const char *endpoint,
                                   const bt_config *const *cfgs, int n, const char *config_json,
                                   bt_runlog_t *log);
void bt_controller_destroy(bt_controller_t **self_p);
void bt_controller_set_progress(bt_controller_t *self, bt_progress_fn *fn, void *user);
/*  The launcher's check whether workers of a role can still come (NULL: they always can, as under
    `baton controller`, where a worker may be restarted by hand). */
void bt_controller_set_gone(bt_controller_t *self, bt_controller_gone_fn *fn, void *user);

/*  The Prometheus endpoint the loop feeds (worker counts, queued jobs each turn; WEIGHTS bytes as
    they are sent).  Borrowed: must outlive the controller. */
void bt_controller_set_prometheus(bt_controller_t *self, bt_prometheus_t *prom);

/*  Before bt_controller_start: continue from a checkpoint instead of starting afresh.  folder ""
    or NULL: the newest verified one under the run directory (corrupt ones are skipped, each an
    event with its reason); else that checkpoint folder, which must verify. */
void bt_controller_set_resume(bt_controller_t *self, const char *folder);
/*  Runs the loop until the configured workers have joined and every policy has made its SFT
    warm start and step-0 evaluations (or, with bt_controller_set_resume, restored the
    checkpoint). */
bt_status bt_controller_start(bt_controller_t *self);
/*  Runs the loop until a policy has finished one more GRPO step (with its evaluations and
    checkpoints due) or every policy is done; *done is set then.  A policy's last step saves its
    policy (RUN_DIR/model, or RUN_DIR/variants/NAME/model), as model.path and `baton eval` read. */
bt_status bt_controller_step(bt_controller_t *self, bool *done);
/*  Sends STOP to every worker and waits (bounded) for their BYE. */
bt_status bt_controller_stop(bt_controller_t *self);
bt_controller_stats bt_controller_get_stats(const bt_controller_t *self);
/*  Where the run stands now (its first policy): the last step's mean reward, the last
    evaluation's accuracy. */
bt_progress bt_controller_progress(const bt_controller_t *self);

#ifdef __cplusplus
}
#endif
#endif
