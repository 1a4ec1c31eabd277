/*  test_pretrained.c — a run from a model folder that carries its own byte-level BPE tokenizer,
    as a Hugging Face checkpoint does: the workers use the folder's tokenizer (a model whose
    vocab_size cannot hold the tokenizer's ids is refused, naming both numbers), the run trains,
    and the policy it saves carries tokenizer.json and tokenizer_config.json byte for byte, so it
    opens again here and in other tools.  A folder whose vocab_size pads past its tokenizer (as
    Qwen's 151,936 logits for 151,669 ids), its padded logits made the largest, trains and
    evaluates too: no padded id is ever sampled or chosen. */
#define _DEFAULT_SOURCE
#include "baton/evaluator.h"
#include "baton/model.h"
#include "baton/rollout.h"
#include "baton/source.h"
#include "baton/tokenizer.h"

#include "bpe_fixture.h"
#include "check.h"
#include "runs.h"

#include <limits.h>
#include <math.h>
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

/*  Sets rows [first, V) of the (V, C) parameter name to value in column 0 and 0 elsewhere, and
    column 0 of the rows before first to column0 (NAN: unchanged). */
static void s_set_rows(bt_model *m, const char *name, int64_t first, float value, float column0) {
    bt_tensor *p = bt_model_find_param(m, name);
    CHECK(p != NULL && bt_ndim(p) == 2);
    if (!p)
        return;
    int64_t V = bt_dim(p, 0), C = bt_dim(p, 1), shape[2] = {V, C};
    float *w = malloc(sizeof *w * (size_t)(V * C));
    CHECK_OK(bt_to_host(p, w, sizeof *w * (size_t)(V * C)));
    for (int64_t v = 0; v < V; v++)
        for (int64_t c = 0; c < C; c++)
            if (v >= first)
                w[v * C + c] = c == 0 ? value : 0.0f;
            else if (c == 0 && !isnan(column0))
                w[v * C + c] = column0;
    bt_ctx *ctx = bt_ctx_new();
    bool grad = bt_set_grad_enabled(false);
    CHECK_OK(bt_copy_(p, bt_from_host(ctx, BT_F32, bt_cpu(), 2, shape, w)));
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&ctx);
    free(w);
}

/*  A random model of vocab_size rows saved with tok/'s tokenizer (ids 0 .. 259) into rel, whose
    rows from 260 on are padding the tokenizer lacks, made far more likely than any real id: every
    embedding carries 30 in dimension 0, so the residual stream has a large positive component
    there, and the padded rows of lm_head read it alone (20 each). */
static void s_write_padded_model(const char *rel, int64_t vocab_size) {
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
    mc.tie_word_embeddings = false;
    mc.bos_token_id = -1;
    mc.eos_token_id = 257;
    mc.pad_token_id = 258;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 7);
    CHECK(m != NULL && tok != NULL);
    if (m && tok) {
        s_set_rows(m, "model.embed_tokens.weight", vocab_size, 0.0f, 30.0f);
        s_set_rows(m, "lm_head.weight", 260, 20.0f, NAN);
        CHECK_OK(bt_model_save(m, tok, dir));
    }
    bt_model_destroy(&m);
    bt_tokenizer_destroy(&tok);
}

/*  The padded folder: its padded ids hold nearly all the probability (so a sampler that does not
    mask them would draw them), yet rollouts and evaluations, greedy and sampled, only produce ids
    below the tokenizer's 260. */
static void s_check_padded(const char *rel) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", s_tmp, rel);
    bt_model *m = bt_model_load(dir, bt_cpu());
    bt_tokenizer_t *tok = NULL;
    CHECK_OK(bt_tokenizer_for_model(dir, &tok));
    bt_source_arith_config ac;
    bt_source_arith_config_init(&ac);
    ac.digits = 1;
    ac.heldout_size = 4;
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_arith(&ac, &task));
    CHECK(m && tok && task && bt_tokenizer_vocab_size(tok) == 260);
    if (!m || !tok || !task)
        return;
    /* the hazard: the padded ids' probability after "1+2=" */
    const int64_t V = bt_model_get_config(m)->vocab_size, shape[2] = {1, 5};
    const int64_t ids[5] = {49, 43, 50, 61, 32}, ones[5] = {1, 1, 1, 1, 1};
    bt_ctx *ctx = bt_ctx_new();
    bt_tensor *logits = bt_model_forward(m, ctx, bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ids),
                                         bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ones));
    float *z = malloc(sizeof *z * (size_t)(5 * V));
    CHECK(logits && z && bt_to_host(logits, z, sizeof *z * (size_t)(5 * V)) == BT_OK);
    double mx = -INFINITY, all = 0, padded = 0;
    for (int64_t v = 0; z && v < V; v++)
        mx = fmax(mx, z[4 * V + v]);
    for (int64_t v = 0; z && v < V; v++) {
        all += exp(z[4 * V + v] - mx);
        padded += v >= 260 ? exp(z[4 * V + v] - mx) : 0;
    }
    CHECK(padded / all > 0.999);
    free(z);
    bt_ctx_destroy(&ctx);
    /* rollouts at temperature 1 and 2 and greedy: only the tokenizer's ids */
    const uint64_t idx[4] = {0, 1, 2, 3};
    bt_rollout_config rc;
    bt_rollout_config_init(&rc);
    rc.group_size = 8;
    rc.sample.max_new_tokens = 4;
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    int32_t worst = 0;
    for (int t = 0; t < 3; t++) {
        rc.sample.temperature = t;
        CHECK_OK(bt_rollout_sample(m, tok, task, idx, 4, &rc, 0, 5, &b));
        for (int64_t c = 0; c < b.n; c++)
            for (int64_t i = 0; i < b.lengths[c]; i++)
                worst = b.tokens[c * 4 + i] > worst ? b.tokens[c * 4 + i] : worst;
    }
    CHECK(worst < 260);
    bt_rollout_batch_release(&b);
    /* evaluations, greedy and 4 samples at temperature 1, decode every completion */
    bt_evaluator_config ec;
    bt_evaluator_config_init(&ec);
    ec.count = 4;
    ec.max_new_tokens = 4;
    bt_evaluator_sums sums;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 0, &sums));
    ec.samples = 4;
    ec.temperature = 1.0;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 3, &sums));
    CHECK(sums.completions == 16);
    bt_source_destroy(&task);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
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

static const char s_padded_config[] =
    "{\"run\": {\"name\": \"padded\"}, \"model\": {\"path\": \"%s\"},"
    " \"task\": {\"digits\": 1, \"heldout_size\": 4}, \"sft\": {\"steps\": 2, \"batch_size\": 4},"
    " \"grpo\": {\"steps\": 2, \"group_size\": 4, \"prompts_per_step\": 2, \"max_new_tokens\": 4,"
    "  \"top_k\": 50},"
    " \"eval\": {\"heldout_count\": 4, \"every_steps\": 1, \"datasets\": [{\"name\": \"greedy\"},"
    "  {\"name\": \"sampled\", \"samples\": 4, \"temperature\": 1.0}]}}";

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

    /* a vocab_size padded past the tokenizer (320 logits, 260 ids), the padded logits largest:
       sampling, greedy choice and top-k never pick a padded id, so the run trains and evaluates
       (greedy and sampled) without a decode error */
    s_write_tokenizer(259);
    s_write_padded_model("padded", 320);
    s_check_padded("padded");
    snprintf(text, sizeof text, s_padded_config, "padded");
    s_write("padded.json", text);
    rc = s_run("padded.json --run-dir out/padded", out, sizeof out);
    if (rc != 0)
        fprintf(stderr, "%s\n", out);
    CHECK(rc == 0);
    snprintf(path, sizeof path, "%s/out/padded/metrics.jsonl", s_tmp);
    char *metrics = NULL;
    CHECK_OK(bt_file_read(path, 1 << 20, &metrics, NULL));
    CHECK_STR_CONTAINS(metrics, "\"kind\":\"train\",\"step\":2");
    CHECK_STR_CONTAINS(metrics, "\"pass@4\":");
    free(metrics);

    if (getenv("BATON_KEEP"))
        return check_exit();
    snprintf(path, sizeof path, "rm -rf %s", s_tmp);
    CHECK(system(path) == 0);
    return check_exit();
}
