/*  tensorboard.h — TensorBoard event files of a run (run.tensorboard): a run log sink that turns
    each metrics.jsonl line into scalars and each events.jsonl line into a text, under
    RUN_DIR/tb/<variant>/ (lines that name no variant: RUN_DIR/tb/ itself).
    Threading: called by the run log, one call at a time, from whichever thread wrote the line.
    Lifetime: one per run; outlives the run log it is added to. */
#ifndef BATON_TENSORBOARD_H
#define BATON_TENSORBOARD_H

#include "baton/runlog.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_tensorboard bt_tensorboard_t;

/*  A writer for the run directory run_dir; it writes nothing until the first line comes, when it
    starts new event files holding everything metrics.jsonl and events.jsonl hold (a resumed run's
    earlier lines too).  Caller owns the result; destroy with bt_tensorboard_destroy() after the
    run log it was added to.  NULL with the reason in bt_last_error() (out of memory, a path too
    long). */
bt_tensorboard_t *bt_tensorboard_new(const char *run_dir);
void bt_tensorboard_destroy(bt_tensorboard_t **self_p);
/*  The sink to hand to bt_runlog_add_sink.  Borrowed: self is valid until destroyed. */
bt_runlog_sink bt_tensorboard_sink(bt_tensorboard_t *self);

#ifdef __cplusplus
}
#endif
#endif
