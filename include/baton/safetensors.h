/*  safetensors.h — reader and writer of safetensors files (Hugging Face weights and our
   checkpoints). Threading: a reader belongs to one thread at a time (it is never modified after
   open, so concurrent reads of a reader that no thread destroys are safe); the writer is a plain
   function. Lifetime: a reader holds the whole file in memory until bt_safetensors_destroy().

    File layout (spec: github.com/huggingface/safetensors):
      bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
      bytes [8, 8 + N)    UTF-8 JSON object, padded with spaces so the data starts 8-byte aligned:
                          {"NAME": {"dtype": "F32", "shape": [d0, d1, ...],
                                    "data_offsets": [begin, end]}, ...,
                           "__metadata__": {"KEY": "VALUE", ...}}          (metadata optional)
      bytes [8 + N, EOF)  data region; [begin, end) is relative to its start and holds the tensor
                          row-major, little-endian, numel * element size bytes.
    Supported dtypes: F32 F16 BF16 F64 I64 I32 U8 BOOL.  The host must be little-endian: tensor
    bytes are passed through unchanged. */
#ifndef BATON_SAFETENSORS_H
#define BATON_SAFETENSORS_H

#include "baton/status.h"
#include "baton/tensor.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Longest tensor name or metadata key accepted, in bytes. */
#define BT_ST_NAME_MAX 1024
/*  Largest JSON header accepted, in bytes. */
#define BT_ST_HEADER_MAX (100u << 20)

/*  One tensor to write.  data holds numel * element size bytes, row-major; may be NULL when the
    tensor is empty.  All pointers are borrowed for the duration of the call. */
typedef struct bt_st_tensor {
    const char *name;
    bt_dtype dtype;
    int ndim; /* 0 (a scalar) .. BT_MAX_DIMS */
    int64_t shape[BT_MAX_DIMS];
    const void *data;
} bt_st_tensor;

/*  One tensor of an open file.  Borrowed: valid until bt_safetensors_destroy(). */
typedef struct bt_st_entry {
    const char *name;
    bt_dtype dtype;
    int ndim;
    int64_t shape[BT_MAX_DIMS];
    size_t nbytes;    /* numel * element size */
    const void *data; /* nbytes bytes inside the reader; not aligned for the dtype: use memcpy */
} bt_st_entry;

typedef struct bt_safetensors bt_safetensors_t;

/*  Reads and validates the whole file: header length, JSON, every entry's dtype, shape and
    data_offsets (in bounds, sized as the shape says, not overlapping), unique names, string
    metadata.  On success caller owns *out; destroy with bt_safetensors_destroy().  On failure *out
    is NULL and the status is BT_EIO (cannot read) or BT_EFORMAT (malformed), with a message that
    names the file and the problem. */
bt_status bt_safetensors_open(const char *path, bt_safetensors_t **out);
void bt_safetensors_destroy(bt_safetensors_t **self_p);

int bt_safetensors_count(const bt_safetensors_t *self);
/*  Entry i, 0 <= i < count, in the order of the data region. */
const bt_st_entry *bt_safetensors_entry(const bt_safetensors_t *self, int i);
/*  The entry called name, or NULL. */
const bt_st_entry *bt_safetensors_find(const bt_safetensors_t *self, const char *name);
/*  The __metadata__ value under key, or NULL.  Borrowed: valid until bt_safetensors_destroy(). */
const char *bt_safetensors_meta(const bt_safetensors_t *self, const char *key);

/*  Writes n tensors, in the order given with contiguous offsets, and n_meta metadata pairs
    (meta_kv[2i] is a key, meta_kv[2i + 1] its value; meta_kv may be NULL when n_meta is 0) to
    path, then fsyncs and closes it.  Returns BT_EINVAL for a bad tensor (empty, duplicate or
    reserved name, unknown dtype, bad shape, NULL data) and BT_EIO when writing fails, in which case
    the partial file is removed. */
bt_status bt_safetensors_write(const char *path, const bt_st_tensor *tensors, int n,
                               const char *const *meta_kv, int n_meta);

#ifdef __cplusplus
}
#endif
#endif
