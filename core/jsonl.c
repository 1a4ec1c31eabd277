/*  jsonl.c — one JSON object built field by field into a fixed buffer (metrics and event lines). */
#include "baton/jsonl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void bt_jsonl_init(bt_jsonl *line) {
    line->len = 0;
    line->overflow = false;
    line->buf[0] = '\0';
}

static void s_append(bt_jsonl *line, const char *fmt, ...) {
    if (line->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    size_t room = sizeof line->buf - line->len;
    int n = vsnprintf(line->buf + line->len, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        line->overflow = true;
    else
        line->len += (size_t)n;
}

/*  A JSON string literal of text: quotes, backslashes and control bytes escaped. */
static void s_quoted(bt_jsonl *line, const char *text) {
    s_append(line, "\"");
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\')
            s_append(line, "\\%c", *p);
        else if (*p < 0x20)
            s_append(line, "\\u%04x", *p);
        else
            s_append(line, "%c", *p);
    }
    s_append(line, "\"");
}

static void s_key(bt_jsonl *line, const char *key) {
    s_append(line, line->len ? "," : "{");
    s_quoted(line, key);
    s_append(line, ":");
}

void bt_jsonl_str(bt_jsonl *line, const char *key, const char *value) {
    s_key(line, key);
    s_quoted(line, value ? value : "");
}

void bt_jsonl_int(bt_jsonl *line, const char *key, int64_t value) {
    s_key(line, key);
    s_append(line, "%lld", (long long)value);
}

void bt_jsonl_uints(bt_jsonl *line, const char *key, const uint64_t *values, size_t n) {
    s_key(line, key);
    s_append(line, "[");
    for (size_t i = 0; i < n; i++)
        s_append(line, i ? ",%llu" : "%llu", (unsigned long long)values[i]);
    s_append(line, "]");
}

void bt_jsonl_strs(bt_jsonl *line, const char *key, const char *const *values, size_t n) {
    s_key(line, key);
    s_append(line, "[");
    for (size_t i = 0; i < n; i++) {
        s_append(line, i ? "," : "");
        s_quoted(line, values[i]);
    }
    s_append(line, "]");
}

void bt_jsonl_num(bt_jsonl *line, const char *key, double value) {
    s_key(line, key);
    char num[32] = "null";
    for (int digits = 9; isfinite(value) && digits <= 17; digits++) { /* shortest exact text */
        snprintf(num, sizeof num, "%.*g", digits, value);
        if (strtod(num, NULL) == value)
            break;
    }
    s_append(line, "%s", num);
}

void bt_jsonl_bool(bt_jsonl *line, const char *key, bool value) {
    s_key(line, key);
    s_append(line, value ? "true" : "false");
}
