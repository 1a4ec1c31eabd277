/*  buf.h — the toolbox's byte buffer: a growable (or fixed, caller-owned) run of bytes kept
    NUL-terminated, with the writers every text producer shares: printf, JSON string literals and
    the shortest decimal text of a double.
    Threading: a buffer belongs to one thread at a time.  Lifetime: a value struct; a growable one
    holds heap memory until bt_buf_release() or bt_buf_detach(). */
#ifndef BATON_BUF_H
#define BATON_BUF_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  A zeroed bt_buf is an empty growable buffer.  Every write either lands whole or fails: a write
    that finds no memory (or no room, when fixed) leaves the bytes as they were and sets failed,
    after which every write is dropped and returns false, so a caller may check once at the end. */
typedef struct bt_buf {
    char *data;  /* len bytes, then a NUL; NULL until the first byte of a growable buffer */
    size_t len;  /* bytes held, the NUL not counted */
    size_t cap;  /* bytes allocated (or lent, when fixed), the NUL's included */
    bool fixed;  /* data is the caller's storage: it never grows */
    bool failed; /* a write was dropped */
} bt_buf;

/*  An empty buffer over the caller's storage of cap >= 1 bytes, which it never outgrows: at most
    cap - 1 bytes and the NUL.  Borrowed: storage must outlive the buffer's use. */
void bt_buf_init_fixed(bt_buf *b, char *storage, size_t cap);
/*  Frees a growable buffer's memory and empties it; a fixed one is only emptied. */
void bt_buf_release(bt_buf *b);
/*  The bytes, NUL-terminated, for the caller to own (free() them; "" when empty, NULL when the
    buffer failed or that allocation fails), and the buffer emptied.  Growable buffers only. */
char *bt_buf_detach(bt_buf *b, size_t *len);
/*  Cuts the buffer back to its first len <= b->len bytes; a failed buffer stays failed. */
void bt_buf_truncate(bt_buf *b, size_t len);

/*  Appends n bytes and returns where they start, for the caller to fill; NULL when no room.
    Borrowed: valid until the next write. */
char *bt_buf_extend(bt_buf *b, size_t n);
bool bt_buf_put(bt_buf *b, const void *bytes, size_t n);
bool bt_buf_puts(bt_buf *b, const char *s);
bool bt_buf_printf(bt_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/*  The spellings of a JSON string literal: '"' and '\' are always escaped, every control byte
    (below 0x20) is always written as \u00XX unless a flag below gives it a short form.  Each
    writer keeps the spelling it had, so no file or message changes its bytes. */
typedef enum bt_json_escape {
    BT_JSON_ESCAPE_PLAIN = 0,        /* every byte from 0x20 up as it is */
    BT_JSON_ESCAPE_NEWLINE = 1 << 0, /* 0x0A as \n */
    BT_JSON_ESCAPE_TAB = 1 << 1,     /* 0x09 as \t */
    BT_JSON_ESCAPE_DEL = 1 << 2,     /* 0x7F as \u007f */
    BT_JSON_ESCAPE_UTF8 = 1 << 3     /* each byte not part of well-formed UTF-8 as \ufffd */
} bt_json_escape;

/*  Appends the JSON string literal of s[0, len), quotes included; escape is an OR of
    bt_json_escape flags.  Written a piece at a time: when it fails, part of it may be there. */
bool bt_buf_json_string(bt_buf *b, const char *s, size_t len, unsigned escape);

/*  Room for any text bt_buf_format_number writes, its NUL included. */
#define BT_BUF_NUMBER_LEN 32

/*  The shortest round-tripping text of x: "%.Pg" with the least P in [min_digits, 17] whose text
    strtod reads back as exactly x ("%.17g" when none does: NaN).  min_digits (1..17) only decides
    how integers that fit in fewer digits are spelled ("1e+10" at P 1, "10000000000" at P 11);
    non-finite values give printf's "inf", "-inf", "nan".  Returns out. */
const char *bt_buf_format_number(char out[BT_BUF_NUMBER_LEN], double x, int min_digits);
/*  Appends bt_buf_format_number's text of x. */
bool bt_buf_number(bt_buf *b, double x, int min_digits);

#ifdef __cplusplus
}
#endif
#endif
