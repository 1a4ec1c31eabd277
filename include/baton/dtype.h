/*  dtype.h — element types by the code safetensors files and wire headers spell them with ("F32",
    "BF16", ...), and the UTF-8 check both kinds of header share.  bt_dtype_size() and
    bt_dtype_name(), declared in tensor.h, are defined beside these in core/dtype.c.
    Threading: plain functions; any thread.  Lifetime: static tables; nothing to create or destroy.
 */
#ifndef BATON_DTYPE_H
#define BATON_DTYPE_H

#include "baton/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
