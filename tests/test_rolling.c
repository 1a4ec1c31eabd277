/*  test_rolling.c — perplexity of texts longer than the model's context: a text 3x the context (and
    one just past it) is scored by rolling windows, and its NLL equals that of tests/ref's
    rolling_ref.py, which computes lm-evaluation-harness's loglikelihood_rolling windows
    (get_rolling_token_windows) on the float64 numpy forward pass of llama_ref.py, for the
    harness's disjoint windows (stride 0) and for overlapping ones (stride 8); a text that fits is
    scored as before (one pass from BOS), and shards of the texts add up to the whole. */
#define _DEFAULT_SOURCE
#include "baton/evaluator.h"
#include "baton/model.h"
#include "baton/tokenizer.h"
#include "check.h"
#include "runs.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

enum { S_CONTEXT = 32 };

/*  NLL and token count of text by rolling_ref.py: rolling windows of S_CONTEXT tokens. */
static bool s_reference(const char *dir, const bt_tokenizer_t *tok, const char *text,
                        int64_t stride, double *nll, int64_t *tokens) {
    const char *src = getenv("BATON_SOURCE_DIR");
    size_t n = strlen(text), got = 0;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids || bt_tokenizer_encode(tok, text, n, false, ids, n, &got) != BT_OK)
        return false;
    size_t cap = 64 + got * 8;
    char *cmd = malloc(cap + 512), out[512];
    int len = snprintf(cmd, cap + 512, "/usr/bin/python3 %s/tests/ref/rolling_ref.py %s %d %lld %d",
                       src ? src : "..", dir, S_CONTEXT, (long long)stride, bt_tokenizer_bos(tok));
    for (size_t i = 0; i < got; i++)
        len += snprintf(cmd + len, cap + 512 - (size_t)len, " %d", ids[i]);
    bool ok = runs_capture(cmd, out, sizeof out) == 0;
    cJSON *j = ok ? cJSON_Parse(out) : NULL;
    ok = j && cJSON_IsNumber(cJSON_GetObjectItem(j, "nll"));
    if (ok) {
        *nll = cJSON_GetObjectItem(j, "nll")->valuedouble;
        *tokens = (int64_t)cJSON_GetObjectItem(j, "tokens")->valuedouble;
    } else {
        fprintf(stderr, "rolling_ref.py failed: %s\n", out);
    }
    cJSON_Delete(j);
    free(cmd);
    free(ids);
    return ok;
}

/*  A text of n bytes from a fixed LCG over printable characters. */
static char *s_text(size_t n, uint64_t seed) {
    char *t = malloc(n + 1);
    for (size_t i = 0; t && i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (char)(' ' + (seed >> 33) % 95);
    }
    if (t)
        t[n] = '\0';
    return t;
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("SKIP: /usr/bin/python3 missing: the numpy reference cannot run\n");
        return 77;
    }
    bt_model_config cfg;
    bt_model_config_init(&cfg);
    cfg.vocab_size = 259;
    cfg.hidden_size = 32;
    cfg.intermediate_size = 64;
    cfg.num_hidden_layers = 2;
    cfg.num_attention_heads = 4;
    cfg.num_key_value_heads = 2;
    cfg.max_position_embeddings = S_CONTEXT;
    bt_model *m = bt_model_new(&cfg, bt_cpu(), 11);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    char dir[] = "/tmp/bt_rolling_XXXXXX";
    CHECK(m && tok && mkdtemp(dir) != NULL);
    CHECK_OK(bt_model_save(m, NULL, dir));
    /* 3x the context, one past it, one that fits exactly, a short one */
    char *texts[4] = {s_text(3 * S_CONTEXT, 1), s_text(S_CONTEXT + 1, 2), s_text(S_CONTEXT, 3),
                      s_text(7, 4)};
    const int64_t strides[2] = {0, 8};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) {
            bt_evaluator_sums s;
            bt_evaluator_sums_init(&s, 1);
            CHECK_OK(bt_evaluator_perplexity_texts(m, tok, (const char *const *)texts, (size_t)i, 1,
                                                   strides[k], &s));
            double want = NAN;
            int64_t want_tokens = -1;
            CHECK(s_reference(dir, tok, texts[i], strides[k] ? strides[k] : S_CONTEXT, &want,
                              &want_tokens));
            printf("text %d (%zu bytes), stride %lld: nll %.10g, reference %.10g\n", i,
                   strlen(texts[i]), (long long)strides[k], s.nll_sum, want);
            CHECK(s.texts == 1 && s.nll_tokens == want_tokens &&
                  s.nll_tokens == (int64_t)strlen(texts[i]));
            CHECK_REL(s.nll_sum, want, 1e-6);
        }
    /* a text that fits is the single pass it always was */
    bt_nll_item item = {.context = "", .continuation = texts[2]};
    double nll = 0;
    int64_t ntok = 0;
    CHECK_OK(bt_evaluator_nll(m, tok, &item, 1, &nll, &ntok));
    bt_evaluator_sums one;
    bt_evaluator_sums_init(&one, 1);
    CHECK_OK(bt_evaluator_perplexity_texts(m, tok, (const char *const *)texts, 2, 1, 0, &one));
    CHECK(one.nll_sum == nll && one.nll_tokens == ntok);
    /* shards add up to the whole (to the rounding of the sums' order): [0, 4) against [0, 2) +
       [2, 4) */
    bt_evaluator_sums all, a, b;
    bt_evaluator_sums_init(&all, 1);
    bt_evaluator_sums_init(&a, 1);
    bt_evaluator_sums_init(&b, 1);
    CHECK_OK(bt_evaluator_perplexity_texts(m, tok, (const char *const *)texts, 0, 4, 8, &all));
    CHECK_OK(bt_evaluator_perplexity_texts(m, tok, (const char *const *)texts, 0, 2, 8, &a));
    CHECK_OK(bt_evaluator_perplexity_texts(m, tok, (const char *const *)texts, 2, 2, 8, &b));
    CHECK_OK(bt_evaluator_sums_add(&a, &b));
    CHECK(all.texts == 4 && a.texts == 4 && all.nll_tokens == a.nll_tokens);
    CHECK_REL(all.nll_sum, a.nll_sum, 1e-12);
    for (int i = 0; i < 4; i++)
        free(texts[i]);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    return check_exit();
}
