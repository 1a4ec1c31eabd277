/*  controller.h — the controller: one thread, a zmq_poll loop over its ROUTER socket, the worker
    registry, and the GRPO schedule (SFT warm start, then rollout -> advantages -> train -> publish
    weights -> evaluate), writing metrics.jsonl and events.jsonl.
    Threading: every call on the controller thread.  Lifetime: one per run. */
#ifndef BATON_CONTROLLER_H
#define BATON_CONTROLLER_H

#include "baton/baton.h"
#include "baton/config.h"
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

/*  Binds a ROUTER socket at endpoint in zmq_ctx.  cfg, config_json and log are borrowed and must
    outlive the controller.  Caller owns the result; destroy with bt_controller_destroy(). */
bt_controller_t *bt_controller_new(void *zmq_ctx, const char *endpoint, const bt_run_config *cfg,
                                   const char *config_json, bt_runlog_t *log);
/*  The controller of strategy variant k (> 0) of a run: cfg is that variant's config (borrowed).
    It shares first's socket, registry, worker pool and run log; tasks and WEIGHTS carry the
    variant's index.  Destroy the variants before first, which owns what they share. */
bt_controller_t *bt_controller_new_variant(bt_controller_t *first, const bt_run_config *cfg, int k);
void bt_controller_destroy(bt_controller_t **self_p);
/*  "main", or the variant's name. */
const char *bt_controller_variant_name(const bt_controller_t *self);
/*  The peak learning rate the next step trains with (the tuner's, grpo.lr unless it changed). */
double bt_controller_lr(const bt_controller_t *self);
/*  The latest scaling-law prediction of the held-out loss at the last step (scaling.*); NaN
    before the first fit. */
double bt_controller_predicted_loss(const bt_controller_t *self);
/*  Records that the run stops training this variant early (a `variant_stopped` event with its
    prediction, the best one and the margin); the caller stops stepping it. */
bt_status bt_controller_stop_variant(bt_controller_t *self, double predicted, double best,
                                     double margin);
/*  Waits until every evaluation started so far has finished and been written. */
bt_status bt_controller_wait_evals(bt_controller_t *self);
/*  Population-based training's exploit and explore (Jaderberg et al. 2017): variant self's trainer
    takes top's whole state (weights, AdamW moments, KL reference; checked by the canary loss) and
    top's KL coefficient and temperature, then trains at peak learning rate lr; how ("x0.8",
    "x1.2", "resample") is recorded in a `pbt` event with both variants' accuracies and rates. */
bt_status bt_controller_pbt_exploit(bt_controller_t *self, bt_controller_t *top, double lr,
                                    const char *how);
void bt_controller_set_progress(bt_controller_t *self, bt_progress_fn *fn, void *user);
/*  The launcher's check whether workers of a role can still come (NULL: they always can, as under
    `baton controller`, where a worker may be restarted by hand). */
void bt_controller_set_gone(bt_controller_t *self, bt_controller_gone_fn *fn, void *user);
/*  This invocation's run id (run.name and a random suffix): WELCOME gives it to each worker,
    which stamps its messages with it; messages of another run are refused. */
const char *bt_controller_run_id(const bt_controller_t *self);

/*  Before bt_controller_start: continue from a checkpoint instead of starting afresh.  folder ""
    or NULL: the newest verified one under the run directory (corrupt ones are skipped, each an
    event with its reason); else that checkpoint folder, which must verify. */
void bt_controller_set_resume(bt_controller_t *self, const char *folder);
/*  Waits for the configured workers, then runs the SFT warm start and the step-0 evaluation, or
    with bt_controller_set_resume restores the checkpoint. */
bt_status bt_controller_start(bt_controller_t *self);
/*  One GRPO step (and its evaluation when due); *done is set after the last step. */
bt_status bt_controller_step(bt_controller_t *self, bool *done);
/*  Writes the latest published policy (version 0 before any) to dir as a model directory
    (config.json, model.safetensors, tokenizer files; bt_model_save), which `baton eval` and
    model.path read.  The last GRPO step writes RUN_DIR/model this way. */
bt_status bt_controller_save_policy(bt_controller_t *self, const char *dir);
/*  Sends STOP to every worker and waits (bounded) for their BYE. */
bt_status bt_controller_stop(bt_controller_t *self);
bt_controller_stats bt_controller_get_stats(const bt_controller_t *self);
/*  Where the run stands now: the last step's mean reward, the last evaluation's accuracy. */
bt_progress bt_controller_progress(const bt_controller_t *self);
/*  The policy version the trainer last published. */
int64_t bt_controller_version(const bt_controller_t *self);

#ifdef __cplusplus
}
#endif
#endif
