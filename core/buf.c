/*  buf.c — the growable byte buffer and its writers. */
#include "baton/buf.h"

#include "baton/dtype.h" /* bt_utf8_is_valid */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_FIRST_CAP 64

/*  Makes room for n more bytes and the NUL; false (and failed) when it cannot. */
static bool s_reserve(bt_buf *b, size_t n) {
    if (b->failed)
        return false;
    if (b->cap > b->len && n < b->cap - b->len) /* n bytes and the NUL fit */
        return true;
    if (b->fixed || n > SIZE_MAX / 2 - b->len)
        return !(b->failed = true);
    size_t cap = b->cap ? b->cap : S_FIRST_CAP;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *grown = realloc(b->data, cap);
    if (!grown)
        return !(b->failed = true);
    if (!b->data)
        grown[0] = '\0';
    b->data = grown;
    b->cap = cap;
    return true;
}

void bt_buf_init_fixed(bt_buf *b, char *storage, size_t cap) {
    *b = (bt_buf){.data = storage, .cap = cap, .fixed = true};
    storage[0] = '\0';
}

void bt_buf_release(bt_buf *b) {
    if (b->fixed) {
        bt_buf_init_fixed(b, b->data, b->cap);
        return;
    }
    free(b->data);
    *b = (bt_buf){0};
}

char *bt_buf_detach(bt_buf *b, size_t *len) {
    char *out = NULL;
    if (!b->fixed && !b->failed)
        out = b->data ? b->data : calloc(1, 1);
    if (len)
        *len = out ? b->len : 0;
    if (out)
        *b = (bt_buf){0};
    else
        bt_buf_release(b);
    return out;
}

void bt_buf_truncate(bt_buf *b, size_t len) {
    if (len >= b->len)
        return;
    b->len = len;
    b->data[len] = '\0';
}

char *bt_buf_extend(bt_buf *b, size_t n) {
    if (!s_reserve(b, n))
        return NULL;
    char *at = b->data + b->len;
    b->len += n;
    b->data[b->len] = '\0';
    return at;
}

bool bt_buf_put(bt_buf *b, const void *bytes, size_t n) {
    char *at = bt_buf_extend(b, n);
    if (at && n)
        memcpy(at, bytes, n);
    return at != NULL;
}

bool bt_buf_puts(bt_buf *b, const char *s) {
    return bt_buf_put(b, s, strlen(s));
}

bool bt_buf_printf(bt_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !s_reserve(b, (size_t)n))
        return n < 0 ? !(b->failed = true) : false;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return true;
}

/*  Bytes of the UTF-8 sequence that byte c starts (RFC 3629), 0 when c cannot start one. */
static size_t s_utf8_seq_len(unsigned char c) {
    return c < 0x80                 ? 1
           : c >= 0xC2 && c <= 0xDF ? 2
           : c >= 0xE0 && c <= 0xEF ? 3
           : c >= 0xF0 && c <= 0xF4 ? 4
                                    : 0;
}

bool bt_buf_json_string(bt_buf *b, const char *s, size_t len, unsigned escape) {
    bt_buf_put(b, "\"", 1);
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        size_t n = 1;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            bt_buf_put(b, esc, 2);
        } else if (c == '\n' && (escape & BT_JSON_ESCAPE_NEWLINE)) {
            bt_buf_put(b, "\\n", 2);
        } else if (c == '\t' && (escape & BT_JSON_ESCAPE_TAB)) {
            bt_buf_put(b, "\\t", 2);
        } else if (c < 0x20 || (c == 0x7F && (escape & BT_JSON_ESCAPE_DEL))) {
            bt_buf_printf(b, "\\u%04x", c);
        } else if (c < 0x80 || !(escape & BT_JSON_ESCAPE_UTF8)) {
            bt_buf_put(b, &s[i], 1);
        } else if ((n = s_utf8_seq_len(c)) > 0 && n <= len - i &&
                   bt_utf8_is_valid((const uint8_t *)s + i, n)) {
            bt_buf_put(b, s + i, n);
        } else {
            n = 1;
            bt_buf_put(b, "\\ufffd", 6);
        }
        i += n;
    }
    return bt_buf_put(b, "\"", 1);
}

const char *bt_buf_format_number(char out[BT_BUF_NUMBER_LEN], double x, int min_digits) {
    int from = min_digits < 1 ? 1 : min_digits > 17 ? 17 : min_digits;
    for (int digits = from; digits <= 17; digits++) {
        snprintf(out, BT_BUF_NUMBER_LEN, "%.*g", digits, x);
        if (strtod(out, NULL) == x)
            break;
    }
    return out;
}

bool bt_buf_number(bt_buf *b, double x, int min_digits) {
    char text[BT_BUF_NUMBER_LEN];
    return bt_buf_puts(b, bt_buf_format_number(text, x, min_digits));
}
