/*  test_pretrained.c — a run from a model folder that carries its own byte-level BPE tokenizer,
    as a Hugging Face checkpoint does: the workers use the folder's tokenizer (a model whose
    vocab_size cannot hold the tokenizer's ids is refused, naming both numbers), the run trains,
    and the policy it saves carries tokenizer.json and tokenizer_config.json byte for byte, so it
    opens again here and in other tools. */
#define _DEFAULT_SOURCE
#include "baton/model.h"
#include "baton/tokenizer.h"

#include "bpe_fixture.h"
#include "check.h"
#include "runs.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char s_tmp[64];

static void s_write(const char *rel, const char *text) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", s_tmp, rel);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static char *s_read(const char *rel, size_t *len) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", s_tmp, rel);
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

static bool s_same_file(const char *a, const char *b) {
    size_t la, lb;
    char *x = s_read(a, &la), *y = s_read(b, &lb);
    bool same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

/*  tok/: bytes 0..255, added tokens <|im_start|> 256, <|im_end|> 257 (EOS), <|endoftext|> 258
    (PAD), and a merged token "  " 259 (+ extra added tokens up to id last when last > 259). */
static void s_write_tokenizer(int last) {
    size_t cap = 1 << 15, w = 0;
    char *j = malloc(cap), key[32];
    w += (size_t)snprintf(
        j + w, cap - w,
        "{\"version\": \"1.0\", \"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": "
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, "
        "\"decoder\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\": 256, \"content\": "
        "\"<|im_start|>\", \"special\": true}, {\"id\": 257, \"content\": \"<|im_end|>\", "
        "\"special\": true}, {\"id\": 258, \"content\": \"<|endoftext|>\", \"special\": true}");
    for (int id = 260; id <= last; id++)
        w += (size_t)snprintf(j + w, cap - w, ", {\"id\": %d, \"content\": \"<|x%d|>\"}", id, id);
    w += (size_t)snprintf(j + w, cap - w, "], \"model\": {\"type\": \"BPE\", \"vocab\": {");
    bpe_fixture_byte_vocab(j, cap, &w);
    bpe_fixture_key(key, sizeof key, "  ", 2);
    w += (size_t)snprintf(j + w, cap - w, ", %s: 259}, \"merges\": [[\"\\u0120\", \"\\u0120\"]]}}",
                          key);
    CHECK(w < cap);
    s_write("tok/tokenizer.json", j);
    s_write("tok/tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\", \"pad_token\": "
                                         "{\"content\": \"<|endoftext|>\"}, \"bos_token\": null}");
    free(j);
}

/*  A random model with vocab_size rows saved with tok/'s tokenizer into rel. */
static void s_write_model(const char *rel, int64_t vocab_size) {
    char tok_dir[PATH_MAX], dir[PATH_MAX];
    snprintf(tok_dir, sizeof tok_dir, "%s/tok", s_tmp);
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, rel);
    CHECK(mkdir(dir, 0700) == 0);
    bt_tokenizer_t *tok = NULL;
    CHECK_OK(bt_tokenizer_load(tok_dir, &tok));
    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.vocab_size = vocab_size;
    mc.hidden_size = 32;
    mc.intermediate_size = 64;
    mc.num_hidden_layers = 1;
    mc.num_attention_heads = 2;
    mc.num_key_value_heads = 2;
    mc.bos_token_id = -1;
    mc.eos_token_id = 257;
    mc.pad_token_id = 258;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 7);
    CHECK(m != NULL && tok != NULL);
    if (m && tok)
        CHECK_OK(bt_model_save(m, tok, dir));
    bt_model_destroy(&m);
    bt_tokenizer_destroy(&tok);
}

static int s_run(const char *args, char *out, size_t cap) {
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "cd %s && %s run %s 2>&1", s_tmp, getenv("BATON_BIN"), args);
    return runs_capture(cmd, out, cap);
}

static const char s_config[] =
    "{\"run\": {\"name\": \"pre\"}, \"model\": {\"path\": \"%s\"},"
    " \"task\": {\"digits\": 1, \"heldout_size\": 4}, \"sft\": {\"steps\": 2, \"batch_size\": 4},"
    " \"grpo\": {\"steps\": 2, \"group_size\": 2, \"prompts_per_step\": 2, \"max_new_tokens\": 4},"
    " \"eval\": {\"heldout_count\": 4}}";

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_pretrained_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char path[PATH_MAX], text[4096], out[1 << 14];
    snprintf(path, sizeof path, "%s/tok", s_tmp);
    CHECK(mkdir(path, 0700) == 0);

    /* the model folder keeps the tokenizer it was saved with, byte for byte */
    s_write_tokenizer(259);
    s_write_model("policy", 260);
    CHECK(s_same_file("tok/tokenizer.json", "policy/tokenizer.json"));
    CHECK(s_same_file("tok/tokenizer_config.json", "policy/tokenizer_config.json"));

    /* a run from it trains and saves a policy that carries the same tokenizer */
    snprintf(text, sizeof text, s_config, "policy");
    s_write("run.json", text);
    int rc = s_run("run.json --run-dir out/ok", out, sizeof out);
    if (rc != 0)
        fprintf(stderr, "%s\n", out);
    CHECK(rc == 0);
    CHECK(s_same_file("tok/tokenizer.json", "out/ok/model/tokenizer.json"));
    CHECK(s_same_file("tok/tokenizer_config.json", "out/ok/model/tokenizer_config.json"));
    snprintf(path, sizeof path, "%s/out/ok/model", s_tmp);
    bt_tokenizer_t *tok = NULL;
    CHECK_OK(bt_tokenizer_load(path, &tok));
    CHECK(tok && bt_tokenizer_kind_of(tok) == BT_TOKENIZER_BPE && bt_tokenizer_eos(tok) == 257 &&
          bt_tokenizer_pad(tok) == 258 && bt_tokenizer_bos(tok) == -1);
    bt_tokenizer_destroy(&tok);
    bt_model *m = bt_model_load(path, bt_cpu());
    CHECK(m && bt_model_get_config(m)->vocab_size == 260);
    bt_model_destroy(&m);

    /* the workers read the folder's tokenizer: one with more ids than the model has rows is
       refused, with both numbers */
    s_write_tokenizer(299);
    s_write_model("small", 260);
    snprintf(text, sizeof text, s_config, "small");
    s_write("small.json", text);
    CHECK(s_run("small.json --run-dir out/small", out, sizeof out) != 0);
    CHECK_STR_CONTAINS(out, "the tokenizer has 300 ids, the model's vocab_size is 260");

    if (getenv("BATON_KEEP"))
        return check_exit();
    snprintf(path, sizeof path, "rm -rf %s", s_tmp);
    CHECK(system(path) == 0);
    return check_exit();
}
