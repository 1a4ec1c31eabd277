/*  test_dtype.c — element types by code, size and name, and the UTF-8 check shared by safetensors
    and wire headers.  Sizes are checked against the C types they stand for, not against the table;
    UTF-8 against hand-encoded bytes at each boundary RFC 3629 draws. */
#include "baton/dtype.h"

#include "check.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct s_case {
    const char *code;
    bt_dtype dtype;
    size_t size; /* from the C type the dtype stands for */
    const char *name;
} s_case;

static const s_case s_cases[] = {
    {"F32", BT_F32, sizeof(float), "float32"},    {"F64", BT_F64, sizeof(double), "float64"},
    {"F16", BT_F16, sizeof(uint16_t), "float16"}, {"BF16", BT_BF16, sizeof(uint16_t), "bfloat16"},
    {"I64", BT_I64, sizeof(int64_t), "int64"},    {"I32", BT_I32, sizeof(int32_t), "int32"},
    {"U8", BT_U8, sizeof(uint8_t), "uint8"},      {"BOOL", BT_BOOL, 1, "bool"}};
#define S_N_CASES ((int)(sizeof s_cases / sizeof s_cases[0]))

static void test_every_code_round_trips_to_its_dtype_and_size(void) {
    for (int i = 0; i < S_N_CASES; i++) {
        const s_case *c = &s_cases[i];
        bt_dtype dtype = (bt_dtype)-1;
        CHECK(bt_dtype_from_code(c->code, &dtype));
        CHECK(dtype == c->dtype);
        CHECK(bt_dtype_code(c->dtype) && strcmp(bt_dtype_code(c->dtype), c->code) == 0);
        CHECK(bt_dtype_size(c->dtype) == c->size);
        CHECK(strcmp(bt_dtype_name(c->dtype), c->name) == 0);
    }
}

static void test_unknown_codes_and_values_are_refused(void) {
    const char *bad[] = {"", "f32", "F8", "FLOAT32", "F32 ", "BOOLEAN", "I16", "U16"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bt_dtype dtype = BT_I32;
        CHECK(!bt_dtype_from_code(bad[i], &dtype));
        CHECK(dtype == BT_I32); /* left alone */
    }
    bt_dtype dtype = BT_I32;
    CHECK(!bt_dtype_from_code(NULL, &dtype));
    CHECK(dtype == BT_I32);

    bt_dtype out_of_range[] = {(bt_dtype)-1, (bt_dtype)(BT_BOOL + 1), (bt_dtype)1000};
    for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; i++) {
        CHECK(bt_dtype_code(out_of_range[i]) == NULL);
        CHECK(bt_dtype_size(out_of_range[i]) == 0);
        CHECK(strcmp(bt_dtype_name(out_of_range[i]), "unknown") == 0);
    }
}

static bool s_utf8(const char *s) {
    return bt_utf8_is_valid((const uint8_t *)s, strlen(s));
}

static void test_utf8_accepts_well_formed_text(void) {
    CHECK(bt_utf8_is_valid((const uint8_t *)"", 0));
    CHECK(s_utf8("plain ASCII, ~ and \x7f"));
    CHECK(s_utf8("\xC2\x80"));         /* U+0080, the first 2-byte */
    CHECK(s_utf8("caf\xC3\xA9"));      /* U+00E9 */
    CHECK(s_utf8("\xDF\xBF"));         /* U+07FF, the last 2-byte */
    CHECK(s_utf8("\xE0\xA0\x80"));     /* U+0800, the first 3-byte */
    CHECK(s_utf8("\xE2\x82\xAC"));     /* U+20AC euro sign */
    CHECK(s_utf8("\xED\x9F\xBF"));     /* U+D7FF, just below the surrogates */
    CHECK(s_utf8("\xEE\x80\x80"));     /* U+E000, just above them */
    CHECK(s_utf8("\xEF\xBF\xBF"));     /* U+FFFF */
    CHECK(s_utf8("\xF0\x90\x80\x80")); /* U+10000, the first 4-byte */
    CHECK(s_utf8("\xF0\x9F\x98\x80")); /* U+1F600 */
    CHECK(s_utf8("\xF4\x8F\xBF\xBF")); /* U+10FFFF, the last code point */
    /* A NUL byte is well-formed UTF-8. */
    CHECK(bt_utf8_is_valid((const uint8_t *)"a\0b", 3));
    /* Only n bytes are read: a bad byte past the end does not count. */
    CHECK(bt_utf8_is_valid((const uint8_t *)"ok\xFF", 2));
}

static void test_utf8_refuses_malformed_text(void) {
    CHECK(!s_utf8("\xC0\xAF"));             /* '/' as an overlong 2-byte form */
    CHECK(!s_utf8("\xC1\xBF"));             /* U+007F overlong */
    CHECK(!s_utf8("\xE0\x80\xAF"));         /* overlong 3-byte */
    CHECK(!s_utf8("\xE0\x9F\xBF"));         /* U+07FF overlong */
    CHECK(!s_utf8("\xF0\x80\x80\xAF"));     /* overlong 4-byte */
    CHECK(!s_utf8("\xF0\x8F\xBF\xBF"));     /* U+FFFF overlong */
    CHECK(!s_utf8("\xED\xA0\x80"));         /* U+D800, a surrogate */
    CHECK(!s_utf8("\xED\xBF\xBF"));         /* U+DFFF, a surrogate */
    CHECK(!s_utf8("\xF4\x90\x80\x80"));     /* U+110000, above U+10FFFF */
    CHECK(!s_utf8("\xF7\xBF\xBF\xBF"));     /* far above */
    CHECK(!s_utf8("\xF8\x88\x80\x80\x80")); /* 5-byte form */
    CHECK(!s_utf8("\xFF"));
    CHECK(!s_utf8("\x80"));           /* lone continuation byte */
    CHECK(!s_utf8("ab\xBF\x63\x64")); /* ... in the middle of "ab?cd" */
    CHECK(!s_utf8("\xE2\x82"));       /* truncated at the end */
    CHECK(!s_utf8("\xF0\x9F\x98"));   /* truncated 4-byte */
    CHECK(!s_utf8("\xC3\x61"));       /* lead byte followed by 'a' */
    CHECK(!s_utf8("\xE2\x82!"));      /* truncated in the middle */
    /* A sequence cut by n is truncated even when the bytes after n would complete it. */
    CHECK(!bt_utf8_is_valid((const uint8_t *)"\xC3\xA9", 1));
}

int main(void) {
    test_every_code_round_trips_to_its_dtype_and_size();
    test_unknown_codes_and_values_are_refused();
    test_utf8_accepts_well_formed_text();
    test_utf8_refuses_malformed_text();
    return check_exit();
}
