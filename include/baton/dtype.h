/*  dtype.h — element types (bt_dtype, shared by tensors, safetensors files and wire frames), the
    codes safetensors files and wire headers spell them with ("F32", "BF16", ...), and the UTF-8
    check both kinds of header share.  Here, not in tensor.h, because core/ (the wire codec) is below
    the tensor library and must not include it.
    Threading: plain functions; any thread.  Lifetime: static tables; nothing to create or destroy.
 */
#ifndef BATON_DTYPE_H
#define BATON_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Values appear in files and messages: append only. */
typedef enum bt_dtype {
    BT_F32 = 0,
    BT_F64 = 1,
    BT_F16 = 2,
    BT_BF16 = 3,
    BT_I64 = 4,
    BT_I32 = 5,
    BT_U8 = 6,
    BT_BOOL = 7
} bt_dtype;

#define BT_MAX_DIMS 8 /* dimensions of a tensor, a safetensors entry or a wire frame */

/*  Bytes per element; 0 for a value that is not a bt_dtype. */
size_t bt_dtype_size(bt_dtype dtype);
/*  The name PyTorch spells it with ("float32", "bfloat16", ...), "unknown" for a value that is not
    a bt_dtype.  Static string. */
const char *bt_dtype_name(bt_dtype dtype);

/*  The dtype whose code is code ("F32", "F64", "F16", "BF16", "I64", "I32", "U8", "BOOL"; case
    matters) into *out.  False, *out left alone, for any other string or NULL. */
bool bt_dtype_from_code(const char *code, bt_dtype *out);
/*  The code of dtype ("F32", ...), or NULL when dtype is not a bt_dtype value.  Static string. */
const char *bt_dtype_code(bt_dtype dtype);
/*  True when s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
    above U+10FFFF).  NUL bytes are well-formed; callers that refuse them check separately. */
bool bt_utf8_is_valid(const uint8_t *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
