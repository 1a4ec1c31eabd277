/*  test_tokenizer.c — the byte-level tokenizer (ids, special tokens, errors,
    tokenizer_config.json) and byte-level BPE from a tokenizer.json written here, every encoding
    worked out by hand from the merges (tests/test_hf_tokenizer.c checks real tokenizers). */
#define _XOPEN_SOURCE 700
#include "baton/fileio.h"
#include "baton/tokenizer.h"

#include "bpe_fixture.h"
#include "check.h"

#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char s_dir[64];

static int s_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void s_write_config(const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", s_dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static void test_ids_and_vocab(void) {
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    CHECK(bt_tokenizer_kind_of(tok) == BT_TOKENIZER_BYTES);
    CHECK(bt_tokenizer_bos(tok) == 256);
    CHECK(bt_tokenizer_eos(tok) == 257);
    CHECK(bt_tokenizer_pad(tok) == 258);
    CHECK(bt_tokenizer_vocab_size(tok) == 259);
    bt_tokenizer_destroy(&tok);
    CHECK(tok == NULL);
    bt_tokenizer_destroy(&tok); /* idempotent */
}

/*  Every byte value, NUL and 0xFF included, is its own id and comes back unchanged. */
static void test_round_trip_of_all_bytes(void) {
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    char text[256];
    for (int i = 0; i < 256; i++)
        text[i] = (char)(unsigned char)(255 - i);
    int32_t ids[257];
    size_t n = 0;
    CHECK_OK(bt_tokenizer_encode(tok, text, sizeof text, false, ids, 257, &n));
    CHECK(n == 256);
    CHECK(ids[0] == 0xFF && ids[255] == 0x00);
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] == 255 - (int32_t)i);
    char back[257];
    size_t len = 0;
    CHECK_OK(bt_tokenizer_decode(tok, ids, n, back, sizeof back, &len));
    CHECK(len == 256);
    CHECK(memcmp(back, text, 256) == 0);
    CHECK(back[256] == '\0');
    bt_tokenizer_destroy(&tok);
}

static void test_bos_pad_and_eos(void) {
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    int32_t ids[8];
    size_t n = 0;
    CHECK_OK(bt_tokenizer_encode(tok, "hi", 2, true, ids, 8, &n));
    CHECK(n == 3 && ids[0] == 256 && ids[1] == 'h' && ids[2] == 'i');
    CHECK_OK(bt_tokenizer_encode(tok, "", 0, true, ids, 1, &n));
    CHECK(n == 1 && ids[0] == 256);

    /* BOS and PAD vanish; EOS ends the text, and what follows it is never looked at. */
    const int32_t gen[] = {256, 'o', 258, 'k', 257, 'x', 999};
    char out[8];
    size_t len = 0;
    CHECK_OK(bt_tokenizer_decode(tok, gen, 7, out, sizeof out, &len));
    CHECK(len == 2 && strcmp(out, "ok") == 0);
    CHECK_OK(bt_tokenizer_decode(tok, gen, 0, out, 1, &len));
    CHECK(len == 0 && out[0] == '\0');
    bt_tokenizer_destroy(&tok);
}

static void test_errors(void) {
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    int32_t ids[4];
    size_t n = 0;
    CHECK(bt_tokenizer_encode(tok, "hello", 5, true, ids, 4, &n) == BT_ERANGE);
    CHECK(n == 6); /* what it would need */
    CHECK_STR_CONTAINS(bt_last_error(), "needs 6 ids");

    char out[16];
    size_t len = 0;
    const int32_t bad[] = {'a', 259};
    CHECK(bt_tokenizer_decode(tok, bad, 2, out, sizeof out, &len) == BT_ERANGE);
    CHECK_STR_CONTAINS(bt_last_error(), "id 259 at position 1 is outside 0..258");
    const int32_t negative[] = {-1};
    CHECK(bt_tokenizer_decode(tok, negative, 1, out, sizeof out, &len) == BT_ERANGE);
    CHECK_STR_CONTAINS(bt_last_error(), "id -1");

    const int32_t abc[] = {'a', 'b', 'c'};
    CHECK(bt_tokenizer_decode(tok, abc, 3, out, 3, &len) == BT_ERANGE); /* no room for the NUL */
    CHECK(len == 3);
    bt_tokenizer_destroy(&tok);
}

static void test_save_and_load(void) {
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    CHECK_OK(bt_tokenizer_save(tok, s_dir));
    bt_tokenizer_destroy(&tok);
    CHECK_OK(bt_tokenizer_load(s_dir, &tok));
    CHECK(tok != NULL);
    if (!tok)
        return;
    CHECK(bt_tokenizer_kind_of(tok) == BT_TOKENIZER_BYTES);
    CHECK(bt_tokenizer_bos(tok) == 256 && bt_tokenizer_eos(tok) == 257);
    CHECK(bt_tokenizer_pad(tok) == 258 && bt_tokenizer_vocab_size(tok) == 259);
    CHECK(bt_tokenizer_save(tok, "/nonexistent-dir") == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "/nonexistent-dir/tokenizer_config.json");
    bt_tokenizer_destroy(&tok);
}

/*  Load must refuse a bad config and name the key at fault. */
#define EXPECT_BAD_CONFIG(text, needle)                                                            \
    do {                                                                                           \
        s_write_config(text);                                                                      \
        bt_tokenizer_t *_tok = NULL;                                                               \
        CHECK(bt_tokenizer_load(s_dir, &_tok) == BT_EFORMAT);                                      \
        CHECK(_tok == NULL);                                                                       \
        CHECK_STR_CONTAINS(bt_last_error(), "tokenizer_config.json");                              \
        CHECK_STR_CONTAINS(bt_last_error(), needle);                                               \
        bt_tokenizer_destroy(&_tok);                                                               \
    } while (0)

static void test_load_refuses_bad_configs(void) {
    EXPECT_BAD_CONFIG("{\"tokenizer_class\":\"baton_bytes\",\"bos_token_id\":\"256\","
                      "\"eos_token_id\":257,\"pad_token_id\":258,\"vocab_size\":259}",
                      "bos_token_id: expected an integer, got a string");
    EXPECT_BAD_CONFIG("{\"tokenizer_class\":\"baton_bytes\",\"bos_token_id\":256,"
                      "\"eos_token_id\":1,\"pad_token_id\":258,\"vocab_size\":259}",
                      "eos_token_id: expected 257 for baton_bytes, got 1");
    EXPECT_BAD_CONFIG("{\"tokenizer_class\":\"baton_bytes\",\"bos_token_id\":256,"
                      "\"eos_token_id\":257,\"vocab_size\":259}",
                      "missing key 'pad_token_id'");
    EXPECT_BAD_CONFIG("{\"tokenizer_class\":\"LlamaTokenizer\"}",
                      "tokenizer_class: expected 'baton_bytes', got 'LlamaTokenizer'");
    EXPECT_BAD_CONFIG("{\"tokenizer_class\":3}", "tokenizer_class: expected a string");
    EXPECT_BAD_CONFIG("{\"tokenizer_class\":\"baton_bytes\",\"bos_token_id\":256,"
                      "\"eos_token_id\":257,\"pad_token_id\":258,\"vocab_size\":259,\"x\":1}",
                      "unknown key 'x'");
    EXPECT_BAD_CONFIG("[256]", "not a JSON object");

    bt_tokenizer_t *tok = NULL;
    CHECK(bt_tokenizer_load("/nonexistent-dir", &tok) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "/nonexistent-dir/tokenizer_config.json");
}

/* ---- byte-level BPE ------------------------------------------------------------------------ */

/*  Tokens 256.. made by the merges, in rank order: {left, right}. */
static const char *const s_merges[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"},     {"hell", "o"},
                                          {"a", "b"}, {"y", "z"}, {"b", "c"},       {"x", "y"},
                                          {"a", "a"}, {"3", "4"}, {"\xC3", "\xA9"}, {" ", " "}};
#define S_N_MERGES 12
#define S_LLAMA3_PATTERN                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "         \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

typedef struct {
    const char *normalizer;  /* JSON value */
    const char *model_extra; /* more "model" keys, with a leading comma, or "" */
    const char *split;       /* the Split step's behavior */
    const char *pattern;     /* the Split regex, JSON-escaped */
    const char *bad_merge;   /* an extra merge "a b" string, or NULL */
    const char *config;      /* tokenizer_config.json */
} s_bpe_spec;

static void s_write(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

/*  Writes s_dir/tokenizer.json and tokenizer_config.json: bytes 0..255 are ids 0..255, merge k
    makes id 256 + k, one whole-word token "xyz" (268) that no merge makes, and added tokens
    <|begin|> 299 (the template's BOS), <|end|> 300, <sep> 301 (strips spaces on both sides),
    <|end|>! 303; ids 269..298 and 302 have no token. */
static void s_write_bpe(const s_bpe_spec *spec) {
    size_t cap = 1 << 16, w = 0;
    char *j = malloc(cap), key[128], left[64], right[64];
    w += (size_t)snprintf(j + w, cap - w,
                          "{\"version\": \"1.0\", \"normalizer\": %s, \"pre_tokenizer\": "
                          "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                          "\"pattern\": {\"Regex\": \"%s\"}, \"behavior\": \"%s\", \"invert\": "
                          "false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                          "\"use_regex\": false}]},",
                          spec->normalizer, spec->pattern, spec->split);
    w += (size_t)snprintf(
        j + w, cap - w,
        "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
        "{\"id\": \"<|begin|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": "
        "0}}], \"special_tokens\": {\"<|begin|>\": {\"id\": \"<|begin|>\", \"ids\": [299], "
        "\"tokens\": [\"<|begin|>\"]}}}, \"decoder\": {\"type\": \"ByteLevel\"},"
        "\"added_tokens\": [{\"id\": 299, \"content\": \"<|begin|>\", \"special\": true}, {\"id\": "
        "300, \"content\": \"<|end|>\", \"special\": true}, {\"id\": 301, \"content\": \"<sep>\", "
        "\"lstrip\": true, \"rstrip\": true}, {\"id\": 303, \"content\": \"<|end|>!\"}],"
        "\"model\": {\"type\": \"BPE\"%s, \"vocab\": {",
        spec->model_extra);
    bpe_fixture_byte_vocab(j, cap, &w);
    w += (size_t)snprintf(j + w, cap - w, ", ");
    for (int k = 0; k < S_N_MERGES; k++) {
        char both[16];
        snprintf(both, sizeof both, "%s%s", s_merges[k][0], s_merges[k][1]);
        bpe_fixture_key(key, sizeof key, both, strlen(both));
        w += (size_t)snprintf(j + w, cap - w, "%s: %d, ", key, 256 + k);
    }
    bpe_fixture_key(key, sizeof key, "xyz", 3);
    w += (size_t)snprintf(j + w, cap - w, "%s: 268}, \"merges\": [", key);
    for (int k = 0; k < S_N_MERGES; k++) {
        bpe_fixture_key(left, sizeof left, s_merges[k][0], strlen(s_merges[k][0]));
        bpe_fixture_key(right, sizeof right, s_merges[k][1], strlen(s_merges[k][1]));
        /* both spellings Hugging Face uses: "a b" (Llama 3) and ["a", "b"] (Qwen) */
        if (k % 2 == 0) {
            left[strlen(left) - 1] = '\0';
            w += (size_t)snprintf(j + w, cap - w, "%s%s \\u%s", k ? ", " : "", left, right + 3);
        } else
            w += (size_t)snprintf(j + w, cap - w, ", [%s, %s]", left, right);
    }
    if (spec->bad_merge)
        w += (size_t)snprintf(j + w, cap - w, ", \"%s\"", spec->bad_merge);
    w += (size_t)snprintf(j + w, cap - w, "]}}\n");
    CHECK(w < cap);
    s_write("tokenizer.json", j);
    s_write("tokenizer_config.json", spec->config);
    free(j);
}

static const s_bpe_spec s_good = {
    "{\"type\": \"NFC\"}", "",   "Isolated",
    S_LLAMA3_PATTERN,      NULL, "{\"eos_token\": \"<|end|>\", \"bos_token\": null}"};

/*  Encodes text and compares with the hand-computed ids. */
#define EXPECT_IDS(tok, text, bos, ...)                                                            \
    do {                                                                                           \
        const int32_t _want[] = {__VA_ARGS__};                                                     \
        size_t _n_want = sizeof _want / sizeof _want[0], _n = 0;                                   \
        int32_t _got[64];                                                                          \
        CHECK_OK(bt_tokenizer_encode(tok, text, strlen(text), bos, _got, 64, &_n));                \
        bool _same = _n == _n_want && memcmp(_got, _want, _n * sizeof *_got) == 0;                 \
        if (!_same) {                                                                              \
            fprintf(stderr, "%s:%d: \"%s\" gave", __FILE__, __LINE__, text);                       \
            for (size_t _i = 0; _i < _n; _i++)                                                     \
                fprintf(stderr, " %d", _got[_i]);                                                  \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
        CHECK(_same);                                                                              \
    } while (0)

static void test_bpe_merges(void) {
    s_write_bpe(&s_good);
    bt_tokenizer_t *tok = NULL;
    CHECK_OK(bt_tokenizer_load(s_dir, &tok));
    if (!tok)
        return;
    CHECK(bt_tokenizer_kind_of(tok) == BT_TOKENIZER_BPE);
    CHECK(bt_tokenizer_vocab_size(tok) == 304);
    CHECK(bt_tokenizer_bos(tok) == 299); /* from the post-processor's template */
    CHECK(bt_tokenizer_eos(tok) == 300);
    CHECK(bt_tokenizer_pad(tok) == 300); /* no pad_token: the EOS */
    /* h e l l o: "h e" (rank 0), "l l" (1), "he ll" (2), "hell o" (3) */
    EXPECT_IDS(tok, "hello", false, 259);
    EXPECT_IDS(tok, "hellp", false, 258, 'p');
    /* lower rank first: "a b" (4) before "b c" (6); "y z" (5) before "x y" (7) */
    EXPECT_IDS(tok, "abc", false, 260, 'c');
    EXPECT_IDS(tok, "xyz", false, 'x', 261); /* no ignore_merges: the whole-word token is unused */
    /* equal ranks: leftmost first */
    EXPECT_IDS(tok, "aaa", false, 264, 'a');
    EXPECT_IDS(tok, "aaaa", false, 264, 264);
    /* \p{N}{1,3} splits 12345 into 123|45, so "3 4" never applies across the split */
    EXPECT_IDS(tok, "12345", false, '1', '2', '3', '4', '5');
    EXPECT_IDS(tok, "34", false, 265);
    /* "  hello": \s+(?!\S) takes one space, then " hello"; "Ġ Ġ" would have merged both */
    EXPECT_IDS(tok, "  hello", false, ' ', ' ', 259);
    EXPECT_IDS(tok, "a  ", false, 'a', 267);
    /* NFC: e + U+0301 becomes U+00E9 (C3 A9), merged by "Ã ©" */
    EXPECT_IDS(tok, "e\xCC\x81", false, 266);
    /* added tokens: longest first; <sep> swallows the spaces around it */
    EXPECT_IDS(tok, "<|end|>!", false, 303);
    EXPECT_IDS(tok, "<|end|>?", false, 300, '?');
    EXPECT_IDS(tok, "a <sep> b", false, 'a', 301, 'b');
    EXPECT_IDS(tok, "hello<|end|>hello", true, 299, 259, 300, 259);
    /* any bytes: invalid UTF-8 goes through byte by byte */
    EXPECT_IDS(tok,
               "\xFF\xFE"
               "ab",
               false, 255, 254, 260);

    const int32_t ids[] = {299, 255, 254, 260, 259, 301, 266, 300, 'x'};
    char out[64];
    size_t len = 0;
    CHECK_OK(bt_tokenizer_decode(tok, ids, 9, out, sizeof out, &len));
    /* BOS skipped, stops at EOS */
    CHECK(len == 16 && memcmp(out,
                              "\xFF\xFE"
                              "abhello<sep>\xC3\xA9",
                              16) == 0);
    CHECK(bt_tokenizer_max_token_bytes(tok) == 9); /* "<|begin|>" */
    size_t tlen = 0;
    const char *t = bt_tokenizer_token(tok, 303, &tlen);
    CHECK(t && tlen == 8 && memcmp(t, "<|end|>!", 8) == 0);
    CHECK(bt_tokenizer_token(tok, 270, &tlen) == NULL && tlen == 0); /* a gap */
    const int32_t gap[] = {'a', 270};
    CHECK(bt_tokenizer_decode(tok, gap, 2, out, sizeof out, &len) == BT_ERANGE);
    CHECK_STR_CONTAINS(bt_last_error(), "id 270 at position 1 has no token");

    /* saved byte for byte, and loads back to the same tokenizer */
    char other[128];
    snprintf(other, sizeof other, "%s/saved", s_dir);
    CHECK(mkdir(other, 0700) == 0);
    CHECK_OK(bt_tokenizer_save(tok, other));
    bt_tokenizer_t *again = NULL;
    CHECK_OK(bt_tokenizer_load(other, &again));
    if (again) {
        EXPECT_IDS(again, "hello<|end|>!abc", true, 299, 259, 303, 260, 'c');
        bt_tokenizer_destroy(&again);
    }
    bt_tokenizer_destroy(&tok);
}

/*  generation_config.json's eos_token_id adds stops: generation and decoding end at any. */
static void test_bpe_stops(void) {
    s_write_bpe(&s_good);
    s_write("generation_config.json", "{\"eos_token_id\": [300, 303], \"do_sample\": true}");
    bt_tokenizer_t *tok = NULL;
    CHECK_OK(bt_tokenizer_load(s_dir, &tok));
    int32_t stops[8];
    CHECK(tok && bt_tokenizer_stops(tok, stops, 8) == 2 && stops[0] == 300 && stops[1] == 303);
    const int32_t ids[] = {'a', 303, 'b'};
    char out[16];
    size_t len = 0;
    if (tok)
        CHECK_OK(bt_tokenizer_decode(tok, ids, 3, out, sizeof out, &len));
    CHECK(len == 1 && out[0] == 'a');
    /* saved with the tokenizer, so the stops travel with the policy */
    char saved[160];
    snprintf(saved, sizeof saved, "%s/with_stops", s_dir);
    CHECK(mkdir(saved, 0700) == 0);
    if (tok)
        CHECK_OK(bt_tokenizer_save(tok, saved));
    bt_tokenizer_t *again = NULL;
    CHECK_OK(bt_tokenizer_load(saved, &again));
    CHECK(again && bt_tokenizer_stops(again, stops, 8) == 2 && stops[1] == 303);
    bt_tokenizer_destroy(&again);
    bt_tokenizer_destroy(&tok);
    s_write("generation_config.json", "{\"eos_token_id\": 301}");
    CHECK_OK(bt_tokenizer_load(s_dir, &tok));
    CHECK(tok && bt_tokenizer_stops(tok, stops, 8) == 2 && stops[1] == 301);
    bt_tokenizer_destroy(&tok);
    s_write("generation_config.json", "{\"eos_token_id\": [300, 9999]}");
    CHECK(bt_tokenizer_load(s_dir, &tok) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "generation_config.json: eos_token_id: a value is not an id");
    char path[128];
    snprintf(path, sizeof path, "%s/generation_config.json", s_dir);
    remove(path);
    bt_tokenizer_t *bytes = bt_tokenizer_new_bytes();
    CHECK(bt_tokenizer_stops(bytes, stops, 8) == 1 && stops[0] == 257);
    bt_tokenizer_destroy(&bytes);
}

static void test_bpe_ignore_merges(void) {
    s_bpe_spec spec = s_good;
    spec.model_extra = ", \"ignore_merges\": true";
    s_write_bpe(&spec);
    bt_tokenizer_t *tok = NULL;
    CHECK_OK(bt_tokenizer_load(s_dir, &tok));
    if (!tok)
        return;
    EXPECT_IDS(tok, "xyz", false, 268);            /* a piece that is a token is taken whole */
    EXPECT_IDS(tok, "xyzz", false, 'x', 261, 'z'); /* not a token: merged as before */
    bt_tokenizer_destroy(&tok);
}

/*  Load must refuse what baton does not implement, and say what and where. */
static void s_expect_bad(const s_bpe_spec *spec, bt_status want, const char *needle) {
    s_write_bpe(spec);
    bt_tokenizer_t *tok = NULL;
    CHECK(bt_tokenizer_load(s_dir, &tok) == want);
    CHECK(tok == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), needle);
}

static void test_bpe_refuses(void) {
    s_bpe_spec spec = s_good;
    spec.normalizer = "{\"type\": \"Lowercase\"}";
    s_expect_bad(&spec, BT_EUNSUPPORTED, "normalizer type \"Lowercase\" is not supported");
    spec = s_good;
    spec.model_extra = ", \"byte_fallback\": true";
    s_expect_bad(&spec, BT_EUNSUPPORTED, "byte_fallback");
    spec = s_good;
    spec.split = "Removed";
    s_expect_bad(&spec, BT_EUNSUPPORTED, "behavior \"Removed\" is not supported");
    spec = s_good;
    spec.pattern = "(?<=a)b";
    s_expect_bad(&spec, BT_EFORMAT, "unsupported group kind");
    spec = s_good;
    spec.bad_merge = "q r";
    s_expect_bad(&spec, BT_EFORMAT, "model.merges[12]");
    spec = s_good;
    spec.config = "{\"bos_token\": null}";
    s_expect_bad(&spec, BT_EFORMAT, "eos_token is missing");
    spec = s_good;
    spec.config = "{\"eos_token\": \"<|nope|>\"}";
    s_expect_bad(&spec, BT_EFORMAT, "eos_token \"<|nope|>\" is not a token");
}

/*  s_dir/name holds text[0, len) and the load fails with BT_EFORMAT saying needle. */
static void s_expect_cut(const char *name, const char *text, size_t len, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    CHECK_OK(bt_file_write(path, text, len));
    bt_tokenizer_t *tok = NULL;
    CHECK(bt_tokenizer_load(s_dir, &tok) == BT_EFORMAT);
    CHECK(tok == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), needle);
}

/*  A tokenizer.json cut short (an interrupted download or copy) says it is truncated, at which
    byte and inside what; one broken in the middle says where it stops being JSON, line and
    column; tokenizer_config.json likewise. */
static void test_truncated(void) {
    s_write_bpe(&s_good);
    char path[256], want[512], *full = NULL, *config = NULL;
    size_t len = 0, config_len = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", s_dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &full, &len));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", s_dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &config, &config_len));
    if (!full || !config)
        return;
    /* cut inside the vocab (after its 3rd entry), inside merge 3's first string (merges 1 and 3
       are ["a", "b"] arrays), and after the first byte */
    size_t cut = (size_t)(strstr(full, "\"vocab\": {") - full);
    for (int commas = 0; commas < 3; cut++)
        commas += full[cut] == ',';
    snprintf(want, sizeof want,
             "tokenizer.json: truncated (ends at byte %zu, inside \"model\" > \"vocab\", between "
             "values, 3 brackets left open): the file was cut short",
             cut);
    s_expect_cut("tokenizer.json", full, cut, want);
    const char *merge1 = strstr(strstr(full, "\"merges\": ["), ", [");
    cut = (size_t)(strstr(merge1 + 1, ", [") - full) + 5; /* past `, ["` and one byte */
    snprintf(want, sizeof want,
             "tokenizer.json: truncated (ends at byte %zu, inside \"model\" > \"merges\" > [3] > "
             "[0], in a string, 4 brackets left open)",
             cut);
    s_expect_cut("tokenizer.json", full, cut, want);
    s_expect_cut("tokenizer.json", full, 1,
                 "tokenizer.json: truncated (ends at byte 1, inside the top-level value, between "
                 "values, 1 bracket left open)");
    s_expect_cut("tokenizer.json", full, 0, "tokenizer.json: empty (0 bytes)");
    /* not cut: broken at byte 11 ("version" followed by '#') */
    char *broken = malloc(len + 1);
    memcpy(broken, full, len + 1);
    broken[11] = '#';
    CHECK(!strncmp(full, "{\"version\": ", 12));
    s_expect_cut("tokenizer.json", broken, len,
                 "tokenizer.json: not valid JSON at byte 11 (line 1, "
                 "column 12)");
    free(broken);
    CHECK_OK(bt_file_write(path, config, config_len)); /* path: tokenizer_config.json */
    snprintf(path, sizeof path, "%s/tokenizer.json", s_dir);
    CHECK_OK(bt_file_write(path, full, len));
    s_expect_cut("tokenizer_config.json", config, config_len - 3,
                 "tokenizer_config.json: truncated (ends at byte");
    bt_tokenizer_t *tok = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", s_dir);
    CHECK_OK(bt_file_write(path, config, config_len)); /* whole again: it loads */
    CHECK_OK(bt_tokenizer_load(s_dir, &tok));
    bt_tokenizer_destroy(&tok);
    free(full);
    free(config);
}

int main(void) {
    snprintf(s_dir, sizeof s_dir, "/tmp/bt_tokenizer_XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_ids_and_vocab();
    test_round_trip_of_all_bytes();
    test_bos_pad_and_eos();
    test_errors();
    test_save_and_load();
    test_load_refuses_bad_configs();
    test_bpe_merges();
    test_bpe_stops();
    test_bpe_ignore_merges();
    test_bpe_refuses();
    test_truncated();
    nftw(s_dir, s_remove_one, 8, FTW_DEPTH | FTW_PHYS);
    return check_exit();
}
