/*  ckpt.h — the checkpoint store: durable, verified, atomically installed checkpoint folders,
    written on a background thread and found again (skipping corrupt ones) to resume a run.
    Threading: a snapshot belongs to one thread at a time; a writer is driven by one thread and runs
    its saves on a thread of its own; the other functions are plain and run on the calling thread.
    Lifetime: a snapshot owns copies of everything it holds until destroyed or handed to a writer;
    a writer lives for a run.

    On disk, under a run directory DIR:
      DIR/ckpt/step-00000120/     one checkpoint: the caller's files plus MANIFEST
      DIR/ckpt/LATEST             "step-00000120\n": the newest verified full checkpoint
      DIR/ckpt/.tmp-step-00000120 a save in progress (or the leftover of one that crashed)
    A checkpoint folder holding config.json and model.safetensors (Hugging Face names) is also a
    model folder bt_model_load() and Hugging Face tools open.  MANIFEST is text:
      kind full                                      (or "kind light")
      <16 lowercase hex digits of XXH3-64> <size in bytes> <file name>    one line per file,
                                                     sorted by name (strcmp), each ending in '\n'
    The store knows nothing of what the files mean: the caller fills a snapshot. */
#ifndef BATON_CHECKPOINT_H
#define BATON_CHECKPOINT_H

#include "baton/safetensors.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Most files in one checkpoint, MANIFEST not counted. */
#define BT_CKPT_MAX_FILES 64
/*  Longest file name, in bytes, plus one. */
#define BT_CKPT_NAME_MAX 128

/* ---- snapshots ------------------------------------------------------------------------------ */
/*  Everything one checkpoint will hold, as owned copies, so the caller may go on training while a
    writer saves it. */
typedef struct bt_ckpt_snapshot bt_ckpt_snapshot_t;

/*  full: resumable (it may become LATEST); light: weights only, never LATEST, never resumed from.
    step >= 0.  Caller owns the result (NULL when out of memory); destroy with
    bt_ckpt_snapshot_destroy(). */
bt_ckpt_snapshot_t *bt_ckpt_snapshot_new(int64_t step, bool full);
void bt_ckpt_snapshot_destroy(bt_ckpt_snapshot_t **self_p);

/*  A file name is 1 to BT_CKPT_NAME_MAX - 1 bytes: a plain name (letters, digits, '.', '_' and
    '-', not starting with '.', not "MANIFEST") or FOLDER/NAME, two plain names (a run with variants
    keeps each policy's files in a folder of its name); tensor files, and only they, end in
    ".safetensors".  Each name may be added once. */
/*  Copies text (NUL-terminated) to be written as the file name ("config.json", "state.json", a
    tokenizer file).  BT_EINVAL for a bad or repeated name, BT_ERANGE past BT_CKPT_MAX_FILES,
    BT_ENOMEM. */
bt_status bt_ckpt_snapshot_add_text(bt_ckpt_snapshot_t *self, const char *name, const char *text);
/*  Copies n >= 1 tensors (names, shapes and data) to be written, in this order, as the safetensors
    file name (metadata {"format": "pt"}).  Errors as bt_ckpt_snapshot_add_text, and BT_EINVAL for
    a tensor with a NULL name, an unknown dtype, a bad shape, or NULL data with elements. */
bt_status bt_ckpt_snapshot_add_tensors(bt_ckpt_snapshot_t *self, const char *name,
                                       const bt_st_tensor *tensors, int n);
/*  As bt_ckpt_snapshot_add_tensors, copying names and shapes but not the data: borrowed, it must
    stay valid and unchanged until the snapshot is destroyed or its save has finished
    (bt_ckpt_writer_poll reports it, or bt_ckpt_writer_is_busy turns false).  Spares a copy of a
    large state the caller keeps anyway. */
bt_status bt_ckpt_snapshot_add_tensors_borrowed(bt_ckpt_snapshot_t *self, const char *name,
                                                const bt_st_tensor *tensors, int n);
int64_t bt_ckpt_snapshot_step(const bt_ckpt_snapshot_t *self);
bool bt_ckpt_snapshot_is_full(const bt_ckpt_snapshot_t *self);
/*  Bytes of text and tensor data held (for stats). */
size_t bt_ckpt_snapshot_bytes(const bt_ckpt_snapshot_t *self);

/* ---- saving, verifying, finding ------------------------------------------------------------- */
typedef struct bt_ckpt_config {
    char dir[1024];        /* the run directory: checkpoints go to dir/ckpt */
    char mirror_dir[1024]; /* "" or a second run-like directory, written the same way after dir */
    int64_t keep_last;     /* >= 1: the newest full checkpoints kept, and as many light ones */
    int64_t keep_every;    /* 0, or N: full checkpoints whose step % N == 0 are kept forever */
    int64_t pause_ms;      /* test hook (debug.save_pause_ms): sleep after writing the files,
                              before verifying and installing them; 0 in normal use */
} bt_ckpt_config;

/*  Saves s to dir/ckpt/step-NNNNNNNN (step in at least 8 digits) and then, when set, to
    mirror_dir/ckpt the same way:
      1. dir/ckpt/.tmp-step-NNNNNNNN is created (a leftover of that name removed first), every
         file written and fsynced, MANIFEST written and fsynced, the folder fsynced;
      2. every file is re-read and checked against MANIFEST, each safetensors file re-opened and
         its tensors compared with the snapshot's;
      3. the folder is renamed to step-NNNNNNNN and dir/ckpt fsynced (an existing folder of that
         name is first renamed to .tmp-old-step-NNNNNNNN, then removed); for a full checkpoint
         LATEST is then replaced (temp file, rename, fsync);
      4. retention: among step-* folders of the same kind, the newest keep_last are kept, and of
         full ones those whose step % keep_every == 0; the folder LATEST names and the one just
         saved are never removed, nor a folder whose MANIFEST cannot be read (left for a person).
         A folder that cannot be removed is logged (BT_LOG_WARN) and does not fail the save.
    A successful save is logged at BT_LOG_INFO.  When steps 1-2 fail the temp folder is removed
    and nothing else changes; an error in step 3 leaves the verified folder in place (LATEST may
    still name the previous one); a mirror failure leaves the primary saved.  Errors are BT_EIO,
    BT_EFORMAT or BT_EINVAL and name the path and the reason.  out_path (may be NULL) receives the
    primary folder's path; BT_ERANGE, before anything is written, when len is too short for it.
    Not for two saves of one directory at once, nor alongside bt_ckpt_find_latest() on it. */
bt_status bt_ckpt_save(const bt_ckpt_config *cfg, const bt_ckpt_snapshot_t *s, char *out_path,
                       size_t len);

/*  Checks a checkpoint folder: MANIFEST present and well-formed, every file it lists present with
    its size and hash, each *.safetensors file valid.  Files MANIFEST does not list are ignored.
    BT_EIO for what cannot be read or is missing, BT_EFORMAT for what is malformed or differs; the
    message names the file, e.g. "F/model.safetensors: hash mismatch (MANIFEST 1f..., file 9a...)",
    "F/optimizer.safetensors: missing", "F/MANIFEST: missing". */
bt_status bt_ckpt_verify(const char *folder);

/*  Reads folder/name into *out (NUL-terminated, of at most max bytes; caller frees) once its size
    and hash match its MANIFEST entry: one file of a checkpoint, without verifying the others.
    Errors as bt_ckpt_verify's, and BT_EFORMAT "F/MANIFEST: does not list NAME". */
bt_status bt_ckpt_read_file(const char *folder, const char *name, size_t max, char **out);

/*  The folder dir/ckpt/LATEST names ("dir/ckpt/step-N") into path, unverified and without removing
    anything: a look before a resume, which bt_ckpt_find_latest then makes for real.  "" when there
    is no LATEST; BT_EIO or BT_EFORMAT when it cannot be read or is malformed; BT_ERANGE when path
    is too short. */
bt_status bt_ckpt_latest_named(const char *dir, char *path, size_t len);

/*  Told of each folder skipped or removed while looking for a checkpoint, with the reason. */
typedef void(bt_ckpt_reject_fn)(const char *folder, const char *reason, void *user);

/*  Writes into path the newest verified full checkpoint under dir/ckpt: the folder LATEST names
    first, then every other step-* folder from the highest step down; light ones are passed over
    silently.  Each candidate that fails bt_ckpt_verify(), a LATEST that is malformed or names a
    missing folder, and each leftover .tmp-* folder (a save that crashed; it is removed) is
    reported through reject (may be NULL) and skipped.  BT_EIO "DIR/ckpt: no verified checkpoint"
    when there is none, BT_ERANGE when path is too short.  Call it when no save is in flight. */
bt_status bt_ckpt_find_latest(const char *dir, bt_ckpt_reject_fn *reject, void *user, char *path,
                              size_t len);

/* ---- the background writer ------------------------------------------------------------------ */
/*  One thread that runs bt_ckpt_save(), at most one save in flight. */
typedef struct bt_ckpt_writer bt_ckpt_writer_t;

/*  The outcome of one save. */
typedef struct bt_ckpt_result {
    int64_t step;
    bool full;
    bt_status status;
    char path[1100];  /* the primary folder, once it is saved (even when the mirror fails) */
    char error[1024]; /* bt_last_error() of the writer thread when status != BT_OK, else "" */
    double seconds;   /* wall time of the save */
} bt_ckpt_result;

/*  Copies cfg (keep_last >= 1, keep_every >= 0, dir set) and starts the thread.  Caller owns the
    result; destroy with bt_ckpt_writer_destroy().  NULL on failure, with the reason in
    bt_last_error(). */
bt_ckpt_writer_t *bt_ckpt_writer_new(const bt_ckpt_config *cfg);
/*  Waits for the save in flight, then stops the thread.  Unpolled results are dropped. */
void bt_ckpt_writer_destroy(bt_ckpt_writer_t **self_p);
/*  Hands *snap_p to the thread and returns at once: takes ownership of *snap_p and sets it to
    NULL.  When a save is still in flight returns BT_ERANGE ("busy") and leaves *snap_p with the
    caller, untouched. */
bt_status bt_ckpt_writer_submit(bt_ckpt_writer_t *self, bt_ckpt_snapshot_t **snap_p);
/*  True while a save is in flight. */
bool bt_ckpt_writer_is_busy(bt_ckpt_writer_t *self);
/*  Non-blocking: true, filling *out, once for each finished save, oldest first (the last 16 are
    held; older unpolled ones are dropped with a BT_LOG_WARN).  False when none is waiting. */
bool bt_ckpt_writer_poll(bt_ckpt_writer_t *self, bt_ckpt_result *out);
/*  Blocks until no save is in flight. */
void bt_ckpt_writer_wait(bt_ckpt_writer_t *self);

#ifdef __cplusplus
}
#endif
#endif
