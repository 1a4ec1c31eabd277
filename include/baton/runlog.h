/*  runlog.h — the run directory: the resolved config.json, metrics.jsonl and events.jsonl, one JSON
    object per line, each flushed as written.
    Threading: owned by the controller thread; bt_runlog_event may also be called from another
    thread (the ZAP handler's), each line written whole.  Lifetime: one per run. */
#ifndef BATON_RUNLOG_H
#define BATON_RUNLOG_H

#include "baton/jsonl.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_runlog bt_runlog_t;

/*  Something that follows the logs as they are written (the TensorBoard writer, the Prometheus
    endpoint): line is called with each line appended to metrics.jsonl (metric true) or
    events.jsonl, its JSON text without the newline, after it is written; rewound is called after
    either file was cut back (a resume, a trainer restored), when the lines after the cut will come
    again: a sink that keeps history rebuilds it from the files in dir.  Calls are serialized (one
    at a time, whichever thread writes) and must not write to the log.  user is borrowed: valid
    until bt_runlog_destroy. */
typedef struct bt_runlog_sink {
    void (*line)(void *user, bool metric, const char *json, size_t len);
    void (*rewound)(void *user, const char *dir);
    void *user;
} bt_runlog_sink;

/*  Creates dir (and its parents), writes dir/config.json from config_json and opens the two logs
    for appending.  Caller owns the result; destroy with bt_runlog_destroy().  NULL on failure with
    the reason (naming the path) in bt_last_error(). */
bt_runlog_t *bt_runlog_open(const char *dir, const char *config_json);
void bt_runlog_destroy(bt_runlog_t **self_p);
/*  Appends the line to metrics.jsonl / events.jsonl. */
bt_status bt_runlog_metric(bt_runlog_t *self, const bt_jsonl *line);
bt_status bt_runlog_event(bt_runlog_t *self, const bt_jsonl *line);
const char *bt_runlog_dir(const bt_runlog_t *self);
/*  Adds a sink (at most BT_RUNLOG_MAX_SINKS, BT_ERANGE beyond); lines already written are not
    replayed.  Sinks are added before any other thread writes a line. */
#define BT_RUNLOG_MAX_SINKS 4
bt_status bt_runlog_add_sink(bt_runlog_t *self, bt_runlog_sink sink);
/*  Bytes of metrics.jsonl written so far (a checkpoint records it); -1 on error. */
int64_t bt_runlog_metrics_size(bt_runlog_t *self);
/*  Cuts metrics.jsonl back to size bytes: a resume drops the lines written after its checkpoint,
    which the resumed run writes again.  Never grows the file (BT_EINVAL when it holds fewer than
    size bytes, which ftruncate would pad with NUL bytes) and never cuts a line in two (BT_EINVAL
    when byte size - 1 is not a newline); the message says what to do. */
bt_status bt_runlog_truncate_metrics(bt_runlog_t *self, int64_t size);
/*  Removes the lines of metrics.jsonl after byte size that name variant (`"variant":"NAME"`),
    keeping the others in their order: one policy of a run with variants goes back to a snapshot
    and writes its lines of the steps since again while the others' stay.  Errors as
    bt_runlog_truncate_metrics. */
bt_status bt_runlog_drop_metrics(bt_runlog_t *self, int64_t size, const char *variant);
/*  The same for events.jsonl: a resume cuts it back to the checkpoint too, so the events of the
    steps after it, written before the run stopped, are not written twice.  Only what earlier
    invocations wrote is cut: this one's events so far (workers joining, checkpoints passed over)
    move down to the new end.  A size beyond what the file held when this invocation opened it is
    refused. */
int64_t bt_runlog_events_size(bt_runlog_t *self);
bt_status bt_runlog_truncate_events(bt_runlog_t *self, int64_t size);

/*  mkdir -p. */
bt_status bt_mkdirs(const char *path);

#ifdef __cplusplus
}
#endif
#endif
