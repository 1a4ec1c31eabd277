/*  runlog.h — the run directory: the resolved config.json, metrics.jsonl and events.jsonl, one JSON
    object per line, each flushed as written.
    Threading: owned by the controller thread; bt_runlog_event may also be called from another
    thread (the ZAP handler's), each line written whole.  Lifetime: one per run. */
#ifndef BATON_RUNLOG_H
#define BATON_RUNLOG_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  One JSON object being built: fields are appended in order.  A value struct: bt_jsonl_init,
    add fields, then write it with bt_runlog_metric / bt_runlog_event. */
typedef struct bt_jsonl {
    char buf[4096];
    size_t len;
    bool overflow; /* a field did not fit: the line is refused when written */
} bt_jsonl;

void bt_jsonl_init(bt_jsonl *line);
void bt_jsonl_str(bt_jsonl *line, const char *key, const char *value);
void bt_jsonl_int(bt_jsonl *line, const char *key, int64_t value);
/*  An array of n unsigned integers. */
void bt_jsonl_uints(bt_jsonl *line, const char *key, const uint64_t *values, size_t n);
/*  An array of n strings. */
void bt_jsonl_strs(bt_jsonl *line, const char *key, const char *const *values, size_t n);
/*  The shortest text (9 to 17 significant digits) that reads back as exactly value; non-finite
    values are written as null. */
void bt_jsonl_num(bt_jsonl *line, const char *key, double value);
void bt_jsonl_bool(bt_jsonl *line, const char *key, bool value);

typedef struct bt_runlog bt_runlog_t;

/*  Creates dir (and its parents), writes dir/config.json from config_json and opens the two logs
    for appending.  Caller owns the result; destroy with bt_runlog_destroy().  NULL on failure with
    the reason (naming the path) in bt_last_error(). */
bt_runlog_t *bt_runlog_open(const char *dir, const char *config_json);
void bt_runlog_destroy(bt_runlog_t **self_p);
/*  Appends the line to metrics.jsonl / events.jsonl. */
bt_status bt_runlog_metric(bt_runlog_t *self, const bt_jsonl *line);
bt_status bt_runlog_event(bt_runlog_t *self, const bt_jsonl *line);
const char *bt_runlog_dir(const bt_runlog_t *self);
/*  Bytes of metrics.jsonl written so far (a checkpoint records it); -1 on error. */
int64_t bt_runlog_metrics_size(bt_runlog_t *self);
/*  Cuts metrics.jsonl back to size bytes: a resume drops the lines written after its checkpoint,
    which the resumed run writes again.  Never grows the file (BT_EINVAL when it holds fewer than
    size bytes, which ftruncate would pad with NUL bytes) and never cuts a line in two (BT_EINVAL
    when byte size - 1 is not a newline); the message says what to do. */
bt_status bt_runlog_truncate_metrics(bt_runlog_t *self, int64_t size);

/*  mkdir -p. */
bt_status bt_mkdirs(const char *path);

#ifdef __cplusplus
}
#endif
#endif
