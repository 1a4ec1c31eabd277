/*  dtype.c — the one table of element types: code, name and size per bt_dtype, and the UTF-8 check.
    Plain C: nothing here calls libtorch. */
#include "baton/dtype.h"

#include <string.h>

typedef struct s_dtype_info {
    const char *code; /* as safetensors and wire headers spell it */
    const char *name; /* as PyTorch spells it */
    size_t size;      /* bytes per element */
} s_dtype_info;

/*  Indexed by bt_dtype value. */
static const s_dtype_info s_dtypes[] = {
    [BT_F32] = {"F32", "float32", 4}, [BT_F64] = {"F64", "float64", 8},
    [BT_F16] = {"F16", "float16", 2}, [BT_BF16] = {"BF16", "bfloat16", 2},
    [BT_I64] = {"I64", "int64", 8},   [BT_I32] = {"I32", "int32", 4},
    [BT_U8] = {"U8", "uint8", 1},     [BT_BOOL] = {"BOOL", "bool", 1}};
#define S_N_DTYPES ((int)(sizeof s_dtypes / sizeof s_dtypes[0]))

static const s_dtype_info *s_info(bt_dtype dtype) {
    return (int)dtype >= 0 && (int)dtype < S_N_DTYPES ? &s_dtypes[dtype] : NULL;
}

bool bt_dtype_from_code(const char *code, bt_dtype *out) {
    for (int i = 0; code && i < S_N_DTYPES; i++)
        if (strcmp(s_dtypes[i].code, code) == 0) {
            *out = (bt_dtype)i;
            return true;
        }
    return false;
}

const char *bt_dtype_code(bt_dtype dtype) {
    const s_dtype_info *info = s_info(dtype);
    return info ? info->code : NULL;
}

size_t bt_dtype_size(bt_dtype dtype) {
    const s_dtype_info *info = s_info(dtype);
    return info ? info->size : 0;
}

const char *bt_dtype_name(bt_dtype dtype) {
    const s_dtype_info *info = s_info(dtype);
    return info ? info->name : "unknown";
}

bool bt_utf8_is_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0)
            len = 2, cp = c & 0x1Fu, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            len = 3, cp = c & 0x0Fu, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            len = 4, cp = c & 0x07u, min = 0x10000;
        else
            return false;
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}
