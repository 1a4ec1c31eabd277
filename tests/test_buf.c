/*  test_buf.c — the toolbox's byte buffer, JSON-string writer, shortest number text and JSON-line
    writer: a growable buffer keeps every byte however it grows; a fixed one never writes past its
    storage and says so; each escaping flag spells what it names and nothing else; the number text
    reads back (strtod) as exactly the double it came from, and no shorter "%.Pg" would; a line
    refuses a field that does not fit. */
#include "baton/buf.h"
#include "baton/jsonl.h"

#include "check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_growable_keeps_every_byte(void) {
    bt_buf b = {0};
    CHECK(b.len == 0 && !b.failed);
    char want[100000];
    for (size_t i = 0; i < sizeof want; i++) {
        want[i] = (char)(i * 7 + 1);
        CHECK(bt_buf_put(&b, &want[i], 1));
    }
    CHECK(b.len == sizeof want && b.cap > b.len);
    CHECK(memcmp(b.data, want, sizeof want) == 0);
    CHECK(b.data[b.len] == '\0');
    bt_buf_truncate(&b, 3);
    CHECK(b.len == 3 && b.data[3] == '\0');
    CHECK(bt_buf_printf(&b, "%d-%s", 42, "x") && b.len == 7 && !memcmp(b.data + 3, "42-x", 5));
    char *at = bt_buf_extend(&b, 2);
    CHECK(at == b.data + 7 && b.len == 9 && b.data[9] == '\0');
    size_t len = 0;
    char *text = bt_buf_detach(&b, &len);
    CHECK(text && len == 9 && b.data == NULL && b.len == 0);
    free(text);
    text = bt_buf_detach(&b, &len); /* an empty buffer gives "" */
    CHECK(text && len == 0 && text[0] == '\0');
    free(text);
    bt_buf_release(&b);
}

static void test_fixed_never_writes_past_its_storage(void) {
    char storage[9];
    memset(storage, 'z', sizeof storage);
    bt_buf b;
    bt_buf_init_fixed(&b, storage, 8); /* 7 bytes and the NUL; storage[8] is a guard */
    CHECK(bt_buf_puts(&b, "abcd") && bt_buf_printf(&b, "%s", "efg"));
    CHECK(b.len == 7 && !strcmp(storage, "abcdefg"));
    CHECK(!bt_buf_puts(&b, "h")); /* no room for it and the NUL */
    CHECK(b.failed && b.len == 7 && !strcmp(storage, "abcdefg"));
    CHECK(!bt_buf_puts(&b, "")); /* failed stays failed */
    CHECK(storage[8] == 'z');
    bt_buf_init_fixed(&b, storage, 8);
    CHECK(!bt_buf_printf(&b, "%s", "123456789")); /* a whole write or none */
    CHECK(b.len == 0 && storage[0] == '\0' && storage[8] == 'z');
    CHECK(bt_buf_detach(&b, NULL) == NULL); /* fixed storage is never handed over */
}

static const char *s_json(const char *s, size_t len, unsigned escape) {
    static char out[256];
    bt_buf b;
    bt_buf_init_fixed(&b, out, sizeof out);
    CHECK(bt_buf_json_string(&b, s, len, escape));
    return out;
}

static void test_json_string_spellings(void) {
    const char in[] = "a\"b\\c\n\t\x01\x7f\xc3\xa9\xff\xe2\x82";
    size_t n = sizeof in - 1;
    CHECK(!strcmp(s_json(in, n, BT_JSON_ESCAPE_PLAIN),
                  "\"a\\\"b\\\\c\\u000a\\u0009\\u0001\x7f\xc3\xa9\xff\xe2\x82\""));
    CHECK(!strcmp(s_json(in, n, BT_JSON_ESCAPE_NEWLINE | BT_JSON_ESCAPE_DEL),
                  "\"a\\\"b\\\\c\\n\\u0009\\u0001\\u007f\xc3\xa9\xff\xe2\x82\""));
    CHECK(!strcmp(s_json(in, n, BT_JSON_ESCAPE_NEWLINE | BT_JSON_ESCAPE_TAB | BT_JSON_ESCAPE_UTF8),
                  "\"a\\\"b\\\\c\\n\\t\\u0001\x7f\xc3\xa9\\ufffd\\ufffd\\ufffd\"")); /* é kept; FF,
                                                                                        cut E2 82 */
    CHECK(!strcmp(s_json("a\0b", 3, BT_JSON_ESCAPE_PLAIN), "\"a\\u0000b\"")); /* NUL inside */
    CHECK(!strcmp(s_json("\xed\xa0\x80", 3, BT_JSON_ESCAPE_UTF8),
                  "\"\\ufffd\\ufffd\\ufffd\"")); /* surrogate */
    CHECK(!strcmp(s_json("", 0, BT_JSON_ESCAPE_PLAIN), "\"\""));
}

/*  No "%.Pg" with fewer digits reads back as x. */
static bool s_is_shortest(const char *text, double x, int min_digits) {
    char shorter[64];
    for (int p = min_digits; p < 17; p++) {
        snprintf(shorter, sizeof shorter, "%.*g", p, x);
        if (strtod(shorter, NULL) == x)
            return !strcmp(shorter, text);
    }
    return true;
}

static void test_number_reads_back_exactly_and_is_shortest(void) {
    char text[BT_BUF_NUMBER_LEN];
    uint64_t state = 12345;
    for (int i = 0; i < 20000; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        double x;
        uint64_t bits = state;
        memcpy(&x, &bits, sizeof x); /* any bit pattern: subnormals, huge, tiny */
        if (!isfinite(x))
            continue;
        int min = 1 + i % 17;
        bt_buf_format_number(text, x, min);
        CHECK(strtod(text, NULL) == x);
        CHECK(s_is_shortest(text, x, min));
    }
    const double edge[] = {
        0.1, 1.0 / 3, DBL_MAX, DBL_MIN, 5e-324, -0.0, 1e23, 0.3, 123456789012345678.0};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        CHECK(strtod(bt_buf_format_number(text, edge[i], 1), NULL) == edge[i]);
    CHECK(!strcmp(bt_buf_format_number(text, 0.1, 1), "0.1"));
    CHECK(!strcmp(bt_buf_format_number(text, 0.1, 15), "0.1"));
    CHECK(!strcmp(bt_buf_format_number(text, 1e10, 1), "1e+10")); /* P decides integers */
    CHECK(!strcmp(bt_buf_format_number(text, 1e10, 15), "10000000000"));
    CHECK(!strcmp(bt_buf_format_number(text, -0.0, 9), "-0"));
    CHECK(!strcmp(bt_buf_format_number(text, INFINITY, 9), "inf"));
    CHECK(!strcmp(bt_buf_format_number(text, -INFINITY, 9), "-inf"));
    bt_buf_format_number(text, NAN, 9);
    CHECK(strstr(text, "nan") != NULL);
}

static void test_jsonl_line(void) {
    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "a \"b\"\n");
    bt_jsonl_num(&line, "x", 0.1);
    bt_jsonl_num(&line, "big", 1e10);
    bt_jsonl_num(&line, "bad", NAN);
    bt_jsonl_int(&line, "n", -3);
    bt_jsonl_bool(&line, "ok", true);
    uint64_t u[] = {1, 18446744073709551615ULL};
    bt_jsonl_uints(&line, "u", u, 2);
    const char *s[] = {"p", "q"};
    bt_jsonl_strs(&line, "s", s, 2);
    bt_jsonl_str(&line, "null", NULL);
    CHECK(!line.overflow);
    CHECK(!strcmp(line.buf, "{\"event\":\"a \\\"b\\\"\\u000a\",\"x\":0.1,\"big\":1e+10,"
                            "\"bad\":null,\"n\":-3,\"ok\":true,\"u\":[1,18446744073709551615],"
                            "\"s\":[\"p\",\"q\"],\"null\":\"\""));
    CHECK(line.len == strlen(line.buf));
    static char big[BT_JSONL_MAX + 1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    bt_jsonl_str(&line, "big", big);
    CHECK(line.overflow && line.len < sizeof line.buf); /* refused when written */
    bt_jsonl_init(&line);
    CHECK(!line.overflow && line.len == 0);
    big[BT_JSONL_MAX - 1 - 7] = '\0'; /* {"k":"..."} and its NUL fill the BT_JSONL_MAX bytes */
    bt_jsonl_str(&line, "k", big);
    CHECK(!line.overflow && line.len == BT_JSONL_MAX - 1);
    bt_jsonl_bool(&line, "b", true);
    CHECK(line.overflow);
}

int main(void) {
    test_growable_keeps_every_byte();
    test_fixed_never_writes_past_its_storage();
    test_json_string_spellings();
    test_number_reads_back_exactly_and_is_shortest();
    test_jsonl_line();
    return check_exit();
}
