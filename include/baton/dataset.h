/*  dataset.h — a line-oriented dataset file (JSONL) and an index of its records, built once by
    one pass over the mapped file that checks every line by the caller's rules, and saved for
    the next open, which maps it.
    Threading: read-only after bt_dataset_open, so any thread may call any function on it; the
    first pass over a large file runs on threads of its own, started and joined inside the open.
    Lifetime: one per file per task; it holds the file open until destroyed.

    A record is a line that holds something other than white space; the index holds the byte
    offset of every record (8 bytes each).  The first open reads the whole file once, checks every
    record with the caller's function and the line-length limit, and saves the index, written to a
    temporary file and renamed into place, to PATH.btidx beside the file; when that cannot be
    written, to $XDG_CACHE_HOME/baton (else ~/.cache/baton) under a name made from the file's
    absolute path; when neither can, the index stays in memory (an INFO line through bt_log says
    so) and the next open builds it again.

    A saved index is used only when its header matches the file as it is now (size, modification
    time to the nanosecond, inode and device), names the same rules and line limit, the index file
    has exactly the size its record count implies, and the header and the offsets hash to the
    values it holds (XXH3-64).  Anything else (a changed, appended or replaced file, other rules,
    a truncated or corrupt index) rebuilds it.  An index built less than 0.1 s after the file's
    last modification is not saved: a change within the same file-system timestamp tick would be
    invisible to that check.

    Memory: the index is mapped (or, when just built, held in memory).  The file is mapped only
    while the index is built, then unmapped; records are read with pread when asked for, so none
    of the file's pages count in this process's memory, and a file truncated while open gives an
    error for the records it lost, not a fault.  (Reading records through a mapping kept open
    cost up to 64 KiB of resident memory per record: the kernel maps the 16 pages around each
    page fault, MADV_RANDOM or not.) */
#ifndef BATON_DATASET_H
#define BATON_DATASET_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_dataset bt_dataset_t;

/*  Why line[0, len) (no newline, not NUL-terminated) is not a valid record: a static reason, or
    NULL when it is one.  scratch holds len + 1 bytes the function may use as it likes.  Called
    on several threads at once (each with its own scratch) when the file is large. */
typedef const char *(bt_dataset_check_fn)(const char *line, size_t len, char *scratch, void *user);

typedef struct bt_dataset_config {
    const char *path;           /* required */
    bt_dataset_check_fn *check; /* NULL: every record is valid */
    void *user;                 /* passed to check */
    uint32_t rules;    /* names what check accepts: an index saved under other rules is rebuilt */
    uint32_t line_max; /* longest line in bytes, newline excluded; 0: 1 MiB */
    int threads;       /* for the first pass over the file: 0 one per CPU (at most 8, and one per
                          MiB of file at most), 1 the calling thread only */
} bt_dataset_config;

/*  Maps cfg->path and its index, building and saving the index when there is no valid one.
    Errors: BT_EIO "PATH: cannot open: ..." (or cannot map, read); BT_EFORMAT "PATH:LINE: REASON"
    for the first invalid record (LINE counts every line from 1, blank ones included) or
    "PATH:LINE: line longer than N bytes"; BT_ENOMEM.  An empty file has 0 records.
    Caller owns *out; destroy with bt_dataset_destroy().  *out is NULL on error. */
bt_status bt_dataset_open(const bt_dataset_config *cfg, bt_dataset_t **out);

/*  NULL-safe and idempotent; sets *self_p to NULL. */
void bt_dataset_destroy(bt_dataset_t **self_p);

uint64_t bt_dataset_count(const bt_dataset_t *self);

/*  The file's path as given.  Borrowed: valid until destroy. */
const char *bt_dataset_path(const bt_dataset_t *self);

/*  Record i, newline excluded, read from the file now (pread): *out gets a NUL-terminated copy
    and *len its length.  Caller owns *out; free() it.  Requires i < bt_dataset_count(self).
    Errors: BT_ENOMEM; BT_EIO when the file was truncated since it was indexed.  *out is NULL on
    error. */
bt_status bt_dataset_record(const bt_dataset_t *self, uint64_t i, char **out, size_t *len);

/*  The index file in use ("" when the index is in memory only).  Borrowed: valid until destroy. */
const char *bt_dataset_index_path(const bt_dataset_t *self);

/*  Whether this open built the index (reading and checking the whole file) rather than using a
    saved one. */
bool bt_dataset_index_was_built(const bt_dataset_t *self);

#ifdef __cplusplus
}
#endif
#endif
