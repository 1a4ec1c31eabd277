/*  jsonl.h — one JSON object being built, fields appended in order: a metrics or event line.
    Threading: a value owned by its caller; any thread.  Lifetime: a value struct with no heap
    parts (bt_jsonl_init, add fields, write line->buf; nothing to release).
    In core/, not beside the run log, because the tuner (rl/) writes its decisions' lines too. */
#ifndef BATON_JSONL_H
#define BATON_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  The longest line, its NUL included: an eval line of BT_EVAL_MAX_PROBES pair probes with the
    longest names fits (orchestrator/evals.c checks it at compile time). */
#define BT_JSONL_MAX (96 * 1024)

/*  One JSON object being built: fields are appended in order.  A value struct: bt_jsonl_init,
    add fields, then write it with bt_runlog_metric / bt_runlog_event. */
typedef struct bt_jsonl {
    char buf[BT_JSONL_MAX];
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

struct cJSON;
/*  A JSON value as an error message shows what it got: a number as its shortest exact text (an
    integer below 1e17 in full), a string quoted (cut after 40 bytes with "..."), true, false,
    null, "an array", "an object". */
void bt_jsonl_describe(const struct cJSON *v, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
