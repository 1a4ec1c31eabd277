/*  jsonl.c — one JSON object built field by field into a fixed buffer (metrics and event lines),
    written through a fixed bt_buf over the line's own storage. */
#include "baton/jsonl.h"

#include "baton/buf.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/*  The line as a buffer: writes through it land in line->buf; s_keep records them. */
static bt_buf s_view(bt_jsonl *line) {
    return (bt_buf){.data = line->buf,
                    .len = line->len,
                    .cap = sizeof line->buf,
                    .fixed = true,
                    .failed = line->overflow};
}

static void s_keep(bt_jsonl *line, const bt_buf *b) {
    line->len = b->len;
    line->overflow = b->failed;
}

/*  A JSON string literal of text: quotes, backslashes and control bytes (as \u00XX) escaped. */
static void s_quoted(bt_buf *b, const char *text) {
    bt_buf_json_string(b, text, strlen(text), BT_JSON_ESCAPE_PLAIN);
}

static bt_buf s_key(bt_jsonl *line, const char *key) {
    bt_buf b = s_view(line);
    bt_buf_puts(&b, line->len ? "," : "{");
    s_quoted(&b, key);
    bt_buf_puts(&b, ":");
    return b;
}

void bt_jsonl_init(bt_jsonl *line) {
    bt_buf b;
    bt_buf_init_fixed(&b, line->buf, sizeof line->buf);
    s_keep(line, &b);
}

void bt_jsonl_str(bt_jsonl *line, const char *key, const char *value) {
    bt_buf b = s_key(line, key);
    s_quoted(&b, value ? value : "");
    s_keep(line, &b);
}

void bt_jsonl_int(bt_jsonl *line, const char *key, int64_t value) {
    bt_buf b = s_key(line, key);
    bt_buf_printf(&b, "%lld", (long long)value);
    s_keep(line, &b);
}

void bt_jsonl_uints(bt_jsonl *line, const char *key, const uint64_t *values, size_t n) {
    bt_buf b = s_key(line, key);
    bt_buf_puts(&b, "[");
    for (size_t i = 0; i < n; i++)
        bt_buf_printf(&b, i ? ",%llu" : "%llu", (unsigned long long)values[i]);
    bt_buf_puts(&b, "]");
    s_keep(line, &b);
}

void bt_jsonl_strs(bt_jsonl *line, const char *key, const char *const *values, size_t n) {
    bt_buf b = s_key(line, key);
    bt_buf_puts(&b, "[");
    for (size_t i = 0; i < n; i++) {
        bt_buf_puts(&b, i ? "," : "");
        s_quoted(&b, values[i]);
    }
    bt_buf_puts(&b, "]");
    s_keep(line, &b);
}

void bt_jsonl_num(bt_jsonl *line, const char *key, double value) {
    bt_buf b = s_key(line, key);
    if (isfinite(value))
        bt_buf_number(&b, value, 9);
    else
        bt_buf_puts(&b, "null");
    s_keep(line, &b);
}

void bt_jsonl_bool(bt_jsonl *line, const char *key, bool value) {
    bt_buf b = s_key(line, key);
    bt_buf_puts(&b, value ? "true" : "false");
    s_keep(line, &b);
}

void bt_jsonl_describe(const cJSON *v, char *buf, size_t len) {
    char text[BT_BUF_NUMBER_LEN];
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        bool integer = x == floor(x) && fabs(x) < 1e17; /* all 17 digits: no exponent */
        snprintf(buf, len, "%s", bt_buf_format_number(text, x, integer ? 17 : 1));
    } else if (cJSON_IsString(v)) {
        snprintf(buf, len, "\"%.40s%s\"", v->valuestring, strlen(v->valuestring) > 40 ? "..." : "");
    } else if (cJSON_IsBool(v)) {
        snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, len, "null");
    } else {
        snprintf(buf, len, "%s", cJSON_IsArray(v) ? "an array" : "an object");
    }
}
