/*  test_tokenizer.c — the byte-level tokenizer: ids, special tokens, errors, tokenizer_config.json.
 */
#define _XOPEN_SOURCE 700
#include "baton/tokenizer.h"

#include "check.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    nftw(s_dir, s_remove_one, 8, FTW_DEPTH | FTW_PHYS);
    return check_exit();
}
