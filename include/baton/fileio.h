/*  fileio.h — whole-file reads and durable writes (fflush + fsync, nothing left behind on failure).
    Threading: plain functions; any thread, no shared state beyond the per-thread last error.
    Lifetime: stateless; what a read returns belongs to the caller. */
#ifndef BATON_FILEIO_H
#define BATON_FILEIO_H

#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Reads the regular file at path, of at most max bytes (SIZE_MAX: no limit), into *out with a NUL
    after the last byte; *len gets the byte count without that NUL (len may be NULL).  Caller owns
    the result; free() it.  Errors: BT_EIO (cannot open, not a regular file, read failed),
    BT_EFORMAT (larger than max bytes), BT_ENOMEM; each names path, and *out is left alone. */
bt_status bt_file_read(const char *path, size_t max, char **out, size_t *len);

/*  The next line of a text bt_file_read returned that holds more than blanks (' ', '\t', '\r'),
    for line-at-a-time formats (JSONL): cuts it out at its '\n' (written as a NUL), moves *at past
    it and counts the lines passed, blank ones included, in *line_no.  NULL at the end (*at NULL or
    at the NUL).  Borrowed: the line lies in the caller's text. */
char *bt_text_next_line(char **at, size_t *line_no);

/*  Opens path for writing ("wb", truncating).  Hand the stream to bt_file_finish() whatever
   happens. Returns NULL with a BT_EIO last error "PATH: cannot create: ..." when it cannot. */
FILE *bt_file_create(const char *path);

/*  Ends a streaming write: fflush, fsync and fclose f.  ok is the caller's verdict on its own
    writes.  When ok was false or any step fails, removes path and returns BT_EIO
    "PATH: write failed: ..."; else BT_OK.  Takes ownership of f: it is closed in every case. */
bt_status bt_file_finish(FILE *f, const char *path, bool ok);

/*  Writes len bytes of data durably to tmp (bt_file_write), then renames tmp over path, so a
    reader sees the old file or all of the new one, never part.  tmp is removed on failure; errors
    name the paths. */
bt_status bt_file_replace(const char *path, const char *tmp, const void *data, size_t len);

/*  XXH3 64-bit hash of len bytes (the MANIFEST and cache hash). */
uint64_t bt_hash64(const void *data, size_t len);
/*  XXH3 64-bit hash and size of the file at path, read in chunks.  BT_EIO naming the path when it
    cannot be read. */
bt_status bt_file_hash(const char *path, uint64_t *hash, uint64_t *size);
/*  fsyncs the directory at path, so entries created or renamed in it are durable. */
bt_status bt_dir_sync(const char *path);

/*  rm -r path, not following symbolic links; nothing to do when it does not exist.  BT_EIO naming
    the first path that resists. */
bt_status bt_rmtree(const char *path);

/*  Writes len bytes of data to path durably: bt_file_create, fwrite, bt_file_finish. */
bt_status bt_file_write(const char *path, const void *data, size_t len);

/*  This process's resident memory now and at its peak so far (VmRSS and VmHWM of
    /proc/self/status), in bytes; either pointer may be NULL.  BT_EIO when they cannot be read. */
bt_status bt_proc_memory(size_t *rss, size_t *peak);

#ifdef __cplusplus
}
#endif
#endif
