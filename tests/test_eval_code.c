/*  test_eval_code.c — a code benchmark as an eval dataset: a generate dataset whose JSONL source
    holds HumanEval and MBPP records and whose `verifier` is "code" scores each greedy completion
    by running it with the record's tests in the sandbox.  Checked against an independent run: the
    test builds each program itself, from the record's fields as HumanEval and MBPP define them and
    the model's greedy completion (generated here with bt_generate), runs it with plain python3
    and counts exit status 0; the dataset's accuracy must be that count over the items.  The
    records end their prompts inside a latin-1 raw string, so whatever bytes an untrained model
    writes, the outcome is the tests' (four of the six pass), which makes the count informative.
    Also: the dataset's own verifier overrides the task's, and misuses are refused by key. */
#define _GNU_SOURCE /* memmem */
#include "baton/config.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/sample.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_ITEMS 6
#define S_NEW 8

/*  HumanEval: the function is whole in the prompt, which then opens a raw string the test closes.
    MBPP: the setup code does the same and the first "test" closes it. */
static const char *const s_records[S_ITEMS] = {
    "{\"prompt\": \"# -*- coding: latin-1 -*-\\ndef f():\\n    return 7\\n_ = r'''\", "
    "\"test\": \"'''\\ndef check(c):\\n    assert c() == 7\\n\", \"entry_point\": \"f\"}",
    "{\"prompt\": \"# -*- coding: latin-1 -*-\\ndef f():\\n    return 7\\n_ = r'''\", "
    "\"test\": \"'''\\ndef check(c):\\n    assert c() == 8\\n\", \"entry_point\": \"f\"}",
    "{\"prompt\": \"# -*- coding: latin-1 -*-\\ndef add(a, b):\\n    return a + b\\n_ = r'''\", "
    "\"test\": \"'''\\ndef check(c):\\n    assert c(2, 3) == 5\\n\", \"entry_point\": \"add\"}",
    "{\"text\": \"Write g.\", \"test_setup_code\": \"# -*- coding: latin-1 -*-\\ndef g(x):\\n"
    "    return x + 1\\n_ = r'''\", \"test_list\": [\"'''\", \"assert g(1) == 2\"]}",
    "{\"text\": \"Write g.\", \"test_setup_code\": \"# -*- coding: latin-1 -*-\\ndef g(x):\\n"
    "    return x + 1\\n_ = r'''\", \"test_list\": [\"'''\", \"assert g(1) == 3\"]}",
    "{\"prompt\": \"Write h.\", \"test_setup_code\": \"# -*- coding: latin-1 -*-\\ndef h():\\n"
    "    return [1]\\n_ = r'''\", \"test_list\": [\"'''\", \"assert h() == [1]\", \"assert 1\"]}",
};

/*  What the model sees and what the program is around the completion, as the test reads the
    record (HumanEval: prompt | completion, "\n", test, "\ncheck(entry)\n"; MBPP: setup, "\n" |
    completion, "\n", the tests one a line). */
typedef struct s_expect {
    char seen[2048], before[2048], after[2048];
} s_expect;

static void s_expect_of(int i, s_expect *e) {
    char text[1024];
    snprintf(text, sizeof text, "%s", s_records[i]);
    /* the fields, decoded by hand: the records above use only \n and \" escapes */
    char fields[5][512] = {{0}};
    const char *names[5] = {"\"prompt\": \"", "\"test\": \"", "\"entry_point\": \"",
                            "\"test_setup_code\": \"", "\"text\": \""};
    for (int f = 0; f < 5; f++) {
        const char *at = strstr(text, names[f]);
        if (!at)
            continue;
        at += strlen(names[f]);
        size_t n = 0;
        for (; *at && *at != '"' && n + 1 < sizeof fields[f]; at++)
            fields[f][n++] = at[0] == '\\' && at[1] == 'n' ? (at++, '\n') : *at;
    }
    const char *tl = strstr(text, "\"test_list\": [");
    if (!tl) {
        snprintf(e->seen, sizeof e->seen, "%s", fields[0]);
        snprintf(e->before, sizeof e->before, "%s", fields[0]);
        snprintf(e->after, sizeof e->after, "\n%s\ncheck(%s)\n", fields[1], fields[2]);
        return;
    }
    char tests[512] = "";
    for (const char *q = strchr(tl, '['); q && (q = strchr(q, '"'));) {
        const char *end = strchr(q + 1, '"');
        if (!end)
            break;
        size_t n = strlen(tests);
        snprintf(tests + n, sizeof tests - n, "%.*s\n", (int)(end - q - 1), q + 1);
        q = end + 1;
        if (*q == ']')
            break;
    }
    snprintf(e->seen, sizeof e->seen, "%s\nYour code should pass these tests:\n%s",
             fields[0][0] ? fields[0] : fields[4], tests);
    snprintf(e->before, sizeof e->before, "%s\n", fields[3]);
    snprintf(e->after, sizeof e->after, "\n%s", tests);
}

/*  Runs before + completion + after with python3 outside any sandbox; true when it exits 0. */
static bool s_python_passes(const char *dir, const s_expect *e, const char *completion,
                            size_t len) {
    char path[256], cmd[512];
    snprintf(path, sizeof path, "%s/program.py", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return false;
    fwrite(e->before, 1, strlen(e->before), f);
    fwrite(completion, 1, len, f);
    fwrite(e->after, 1, strlen(e->after), f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "python3 %s </dev/null >/dev/null 2>&1", path);
    return system(cmd) == 0;
}

int main(void) {
    char dir[] = "/tmp/bt_evalcode_XXXXXX", path[128], json[2048];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/code.jsonl", dir);
    char lines[8192] = "";
    for (int i = 0; i < S_ITEMS; i++) {
        strcat(lines, s_records[i]);
        strcat(lines, "\n");
    }
    CHECK_OK(bt_file_write(path, lines, strlen(lines)));
    snprintf(json, sizeof json,
             "{\"model\": {\"hidden_size\": 32, \"intermediate_size\": 64,"
             "  \"num_hidden_layers\": 1, \"max_position_embeddings\": 256},"
             " \"eval\": {\"datasets\": [{\"name\": \"code\", \"source\": \"%s\","
             "  \"verifier\": \"code\", \"max_new_tokens\": %d}]}}",
             path, S_NEW);
    bt_config *cfg = malloc(sizeof *cfg);
    CHECK_OK(bt_config_parse(json, "code.json", NULL, 0, cfg));
    CHECK(cfg->task.verifier == BT_SOURCE_VERIFY_EXACT); /* the task's stays exact */
    bt_source_t *task = NULL;
    CHECK_OK(bt_config_new_source(cfg, 0, &task, NULL));
    bt_eval_suite suite;
    CHECK_OK(bt_config_eval_suite(cfg, task, &suite));
    CHECK(bt_eval_suite_size(&suite, 0) == S_ITEMS);
    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.hidden_size = 32;
    mc.intermediate_size = 64;
    mc.num_hidden_layers = 1;
    mc.max_position_embeddings = 256;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 11);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    bt_evaluator_sums s;
    CHECK_OK(bt_eval_suite_run(&suite, 0, m, tok, 0, S_ITEMS, false, 0, &s));

    /* the independent count: the model's greedy completion of what it sees, run with python3 */
    int passes = 0;
    for (int i = 0; i < S_ITEMS; i++) {
        s_expect e;
        s_expect_of(i, &e);
        bt_source_example ex;
        bt_source_example_init(&ex);
        CHECK_OK(bt_source_heldout_example(suite.own_task[0], (size_t)i, &ex));
        CHECK(ex.prompt && strcmp(ex.prompt, e.seen) == 0); /* the model sees what HumanEval,
                                                               MBPP show */
        bt_source_example_release(&ex);
        int32_t ids[600];
        size_t n_ids = 0;
        CHECK_OK(bt_tokenizer_encode(tok, e.seen, strlen(e.seen), true, ids, 600, &n_ids));
        bt_sample_config sc;
        bt_sample_config_init(&sc);
        sc.max_new_tokens = S_NEW;
        sc.temperature = 0; /* greedy, as the dataset (eval.temperature 0) */
        sc.n_stops = bt_tokenizer_stops(tok, sc.stops, BT_SAMPLE_MAX_STOPS);
        sc.vocab_limit = bt_tokenizer_vocab_size(tok);
        const int32_t *rows[1] = {ids};
        int64_t lens[1] = {(int64_t)n_ids};
        bt_generation g;
        bt_generation_init(&g);
        CHECK_OK(bt_generate(m, rows, lens, 1, &sc, NULL, &g));
        char text[S_NEW * 8 + 1];
        size_t len = 0;
        CHECK_OK(bt_tokenizer_decode(tok, g.tokens, (size_t)g.lengths[0], text, sizeof text, &len));
        CHECK(!memmem(text, len, "```", 3)); /* no fenced block: the completion is the code */
        bool pass = s_python_passes(dir, &e, text, len);
        printf("item %d: %zu completion bytes, python3 %s\n", i, len, pass ? "passes" : "fails");
        passes += pass;
        bt_generation_release(&g);
    }
    bt_eval_metric metrics[BT_EVAL_MAX_METRICS];
    int n = bt_eval_suite_metrics(&suite, 0, &s, metrics, BT_EVAL_MAX_METRICS, NULL);
    double accuracy = NAN, examples = NAN;
    for (int k = 0; k < n; k++) {
        accuracy = strcmp(metrics[k].name, "accuracy") ? accuracy : metrics[k].value;
        examples = strcmp(metrics[k].name, "examples") ? examples : metrics[k].value;
    }
    printf("sandboxed accuracy %.6f of %g items; python3 directly: %d passes\n", accuracy,
           examples, passes);
    CHECK(examples == S_ITEMS);
    CHECK(passes == 4); /* the records' tests decide: items 1 and 4 assert a wrong value */
    CHECK(s.correct == passes && accuracy == (double)passes / S_ITEMS);

    /* misuses, refused by key before anything runs */
    const char *bad[][2] = {
        {"{\"eval\": {\"datasets\": [{\"name\": \"p\", \"kind\": \"perplexity\", \"source\": "
         "\"%s\", \"verifier\": \"code\"}]}}",
         "eval.datasets[0].verifier: a verifier of its own is for a generate dataset"},
        {"{\"eval\": {\"datasets\": [{\"name\": \"h\", \"verifier\": \"math\"}]}}%s",
         "eval.datasets[0].verifier: a verifier of its own is for a generate dataset"},
        {"{\"eval\": {\"datasets\": [{\"name\": \"c\", \"source\": \"%s\", \"verifier\": "
         "\"code\", \"num_fewshot\": 1}]}}",
         "eval.datasets[0]: a code record's answer is its tests"},
        {"{\"eval\": {\"datasets\": [{\"name\": \"c\", \"source\": \"%s\", \"verifier\": "
         "\"python\"}]}}",
         "eval.datasets[0].verifier: expected one of \"task\", \"exact\", \"numeric\", \"math\", "
         "\"code\""},
    };
    bt_config *other = malloc(sizeof *other);
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        snprintf(json, sizeof json, bad[b][0], strstr(bad[b][0], "%s\"") ? path : "");
        CHECK(bt_config_parse(json, "bad.json", NULL, 0, other) == BT_EINVAL);
        CHECK_STR_CONTAINS(bt_last_error(), bad[b][1]);
    }
    free(other);
    bt_eval_suite_release(&suite);
    bt_source_destroy(&task);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    free(cfg);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return check_exit();
}
