/*  test_source.c — the arithmetic and JSONL tasks: deterministic streams, held-out sets disjoint
   from training, answers checked by an independent computation, verifiers, dataset errors,
   perturbed prompts that keep their answers, and canonical answers for majority voting. */
#define _DEFAULT_SOURCE /* setenv */
#include "baton/source.h"

#include "baton/config.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char s_dir[64]; /* a fresh temp folder for the JSONL files */

static bt_source_t *s_arith(uint64_t seed, int digits, const char *ops, size_t heldout) {
    bt_source_arith_config cfg;
    bt_source_arith_config_init(&cfg);
    cfg.seed = seed;
    cfg.digits = digits;
    cfg.operators = ops;
    cfg.heldout_size = heldout;
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_arith(&cfg, &task));
    return task;
}

/*  Parses "A<op>B=" with strtoll; false unless the whole prompt has that shape. */
static bool s_parse_prompt(const char *prompt, long long *a, char *op, long long *b) {
    char *end;
    *a = strtoll(prompt, &end, 10);
    if (end == prompt || !strchr("+-*", *end))
        return false;
    *op = *end;
    const char *rest = end + 1;
    *b = strtoll(rest, &end, 10);
    return end > rest && rest[0] != '-' && strcmp(end, "=") == 0;
}

static int s_cmp_str(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* ---- arithmetic --------------------------------------------------------------------------- */
static void test_arith_determinism(void) {
    bt_source_t *t1 = s_arith(7, 3, "+-*", 100), *t2 = s_arith(7, 3, "+-*", 100);
    bt_source_t *t3 = s_arith(8, 3, "+-*", 100);
    bt_source_example e1, e2, e3;
    bt_source_example_init(&e1);
    bt_source_example_init(&e2);
    bt_source_example_init(&e3);
    int differ = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        bt_source_train_example(t1, i, &e1);
        bt_source_train_example(t2, i, &e2);
        bt_source_train_example(t3, i, &e3);
        CHECK(strcmp(e1.prompt, e2.prompt) == 0 && strcmp(e1.answer, e2.answer) == 0);
        differ += strcmp(e1.prompt, e3.prompt) != 0;
    }
    CHECK(differ > 900);
    for (size_t i = 0; i < 100; i++) {
        bt_source_heldout_example(t1, i, &e1);
        bt_source_heldout_example(t2, i, &e2);
        CHECK(strcmp(e1.prompt, e2.prompt) == 0);
    }
    CHECK(bt_source_epoch_size(t1) == 0);
    bt_source_example_release(&e1);
    bt_source_example_release(&e2);
    bt_source_example_release(&e3);
    bt_source_destroy(&t1);
    bt_source_destroy(&t2);
    bt_source_destroy(&t3);
    CHECK(t1 == NULL);
    bt_source_destroy(&t1); /* idempotent */
}

/*  Example i is the same whether fetched in order, backwards or far out of order. */
static void test_arith_out_of_order(void) {
    bt_source_t *task = s_arith(3, 4, "+-", 10);
    enum { N = 500 };
    static char prompts[N][32];
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (uint64_t i = 0; i < N; i++) {
        bt_source_train_example(task, i, &ex);
        snprintf(prompts[i], sizeof prompts[i], "%s", ex.prompt);
    }
    bt_source_train_example(task, UINT64_MAX - 5, &ex);
    for (uint64_t i = N; i-- > 0;) {
        bt_source_train_example(task, (i * 7919) % N, &ex);
        CHECK(strcmp(ex.prompt, prompts[(i * 7919) % N]) == 0);
    }
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
}

static void test_arith_heldout_disjoint(void) {
    bt_source_t *task = s_arith(11, 2, "+-*", 2000);
    size_t n = bt_source_heldout_count(task);
    CHECK(n == 2000);
    char **held = malloc(n * sizeof *held);
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (size_t i = 0; i < n; i++) {
        bt_source_heldout_example(task, i, &ex);
        held[i] = strdup(ex.prompt);
    }
    qsort(held, n, sizeof *held, s_cmp_str);
    for (size_t i = 1; i < n; i++)
        CHECK(strcmp(held[i - 1], held[i]) != 0); /* distinct */
    int leaks = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        bt_source_train_example(task, i, &ex);
        const char *key = ex.prompt;
        leaks += bsearch(&key, held, n, sizeof *held, s_cmp_str) != NULL;
    }
    CHECK(leaks == 0);
    for (size_t i = 0; i < n; i++)
        free(held[i]);
    free(held);
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
}

/*  Answers recomputed from the prompt text; operands within digits; only the given operators. */
static void s_check_answers(int digits, const char *ops) {
    bt_source_t *task = s_arith(5, digits, ops, 10);
    long long limit = 1;
    for (int i = 0; i < digits; i++)
        limit *= 10;
    int seen[3] = {0}, wrong = 0, out_of_range = 0, bad_op = 0;
    long long max_operand = 0;
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (uint64_t i = 0; i < 3000; i++) {
        long long a, b;
        char op;
        if (i % 3 == 0)
            bt_source_heldout_example(task, i % 10, &ex);
        else
            bt_source_train_example(task, i, &ex);
        if (!s_parse_prompt(ex.prompt, &a, &op, &b)) {
            CHECK(!"prompt shaped A<op>B=");
            continue;
        }
        long long c = op == '+' ? a + b : op == '-' ? a - b : a * b;
        wrong += strtoll(ex.answer, NULL, 10) != c || strchr(ex.answer, ' ') != NULL;
        out_of_range += a < 0 || b < 0 || a >= limit || b >= limit;
        max_operand = a > max_operand ? a : max_operand;
        bad_op += strchr(ops, op) == NULL;
        seen[strchr("+-*", op) - "+-*"]++;
    }
    CHECK(wrong == 0 && out_of_range == 0 && bad_op == 0);
    CHECK(max_operand >= limit / 10); /* the largest operands use all the digits */
    for (const char *p = ops; *p; p++)
        CHECK(seen[strchr("+-*", *p) - "+-*"] > 500);
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
}

static void test_arith_answers(void) {
    s_check_answers(1, "+");
    s_check_answers(2, "-");
    s_check_answers(3, "+-*");
    s_check_answers(9, "*-");
    bt_source_t *task = s_arith(1, 2, "-", 10);
    bt_source_example ex;
    bt_source_example_init(&ex);
    bool negative = false;
    for (uint64_t i = 0; i < 100 && !negative; i++) {
        bt_source_train_example(task, i, &ex);
        negative = ex.answer[0] == '-';
    }
    CHECK(negative);
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
}

static void s_check_config_error(int digits, const char *ops, size_t heldout, double format,
                                 const char *field) {
    bt_source_arith_config cfg;
    bt_source_arith_config_init(&cfg);
    cfg.digits = digits;
    cfg.operators = ops;
    cfg.heldout_size = heldout;
    cfg.format_reward = format;
    bt_source_t *task = NULL;
    CHECK(bt_source_new_arith(&cfg, &task) == BT_EINVAL);
    CHECK(task == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), field);
}

static void test_arith_config_errors(void) {
    s_check_config_error(1, "+", 50, 0.0, "heldout_size"); /* ~10 of 100 problems are held out */
    s_check_config_error(2, "+-*", 5000, 0.0, "heldout_size");
    s_check_config_error(9, "+", 2000000, 0.0, "heldout_size");
    s_check_config_error(0, "+", 1, 0.0, "digits");
    s_check_config_error(10, "+", 1, 0.0, "digits");
    s_check_config_error(2, "+/", 1, 0.0, "operators");
    s_check_config_error(2, "++", 1, 0.0, "operators");
    s_check_config_error(2, "", 1, 0.0, "operators");
    s_check_config_error(2, "+", 1, -1.0, "format_reward");
    bt_source_t *small = s_arith(0, 1, "+", 5); /* a 1-digit space still has a training stream */
    bt_source_example ex;
    bt_source_example_init(&ex);
    bt_source_train_example(small, 12345, &ex);
    CHECK(strlen(ex.prompt) == 4);
    bt_source_example_release(&ex);
    bt_source_destroy(&small);
}

static double s_reward(const bt_source_t *task, const char *answer, const char *completion,
                       bt_reward_detail *d) {
    return bt_source_reward(task, answer, completion, strlen(completion), d);
}

static void test_arith_reward(void) {
    bt_source_arith_config cfg;
    bt_source_arith_config_init(&cfg);
    bt_source_t *plain = NULL, *shaped = NULL;
    CHECK_OK(bt_source_new_arith(&cfg, &plain));
    cfg.format_reward = 0.25;
    CHECK_OK(bt_source_new_arith(&cfg, &shaped));
    bt_reward_detail d;
    CHECK(s_reward(plain, "85", "85", &d) == 1.0 && d.correct && d.well_formed);
    CHECK(s_reward(plain, "85", " 85", &d) == 1.0 && d.correct && d.well_formed);
    CHECK(d.extracted_start == 1 && d.extracted_len == 2);
    CHECK(s_reward(plain, "85", "85abc", &d) == 1.0 && d.correct && !d.well_formed);
    CHECK(s_reward(plain, "3", "-3", &d) == 0.0 && !d.correct && d.well_formed);
    CHECK(s_reward(plain, "-3", "3", &d) == 0.0 && !d.correct);
    CHECK(s_reward(plain, "-3", "-3\n", &d) == 1.0 && d.correct && d.well_formed);
    CHECK(s_reward(plain, "85", "", &d) == 0.0 && !d.correct && !d.well_formed);
    CHECK(d.extracted_len == 0);
    CHECK(s_reward(plain, "85", "850", &d) == 0.0 && !d.correct);
    CHECK(s_reward(plain, "85", "the answer is 85", &d) == 0.0 && !d.correct);
    CHECK(s_reward(plain, "85", "85", NULL) == 1.0);
    CHECK(bt_source_reward(plain, "85", "8512", 2, &d) == 1.0 && d.well_formed); /* len bounds it */
    CHECK_NEAR(s_reward(shaped, "85", "85", &d), 1.25, 0);
    CHECK_NEAR(s_reward(shaped, "85", "84", &d), 0.25, 0);
    CHECK_NEAR(s_reward(shaped, "85", "85abc", &d), 1.0, 0);
    CHECK_NEAR(s_reward(shaped, "85", "", &d), 0.0, 0);
    bt_source_destroy(&plain);
    bt_source_destroy(&shaped);
}

/* ---- perturbations and canonical answers ------------------------------------------------- */
/*  Recovers "A<op>B=" from a perturbed prompt: drops a leading sentence (up to the last ". ") and
    every space. */
static void s_unperturb(const char *text, char *out, size_t len) {
    const char *sentence_end = NULL;
    for (const char *p = strstr(text, ". "); p; p = strstr(p + 1, ". "))
        sentence_end = p;
    const char *problem = sentence_end ? sentence_end + 2 : text;
    size_t k = 0;
    for (const char *p = problem; *p && k + 1 < len; p++)
        if (*p != ' ')
            out[k++] = *p;
    out[k] = '\0';
}

/*  Every held-out problem, every perturbation: the answer recomputed from the perturbed text alone
    is the example's answer, and the task's verifier accepts it. */
static void s_check_arith_perturb(int digits, const char *ops, size_t heldout) {
    bt_source_t *task = s_arith(13, digits, ops, heldout),
                *twin = s_arith(13, digits, ops, heldout);
    int wrong = 0, order_minus = 0, sentences_differ = 0;
    char first_sentence[64] = "";
    for (size_t i = 0; i < bt_source_heldout_count(task); i++) {
        bt_source_example ex;
        bt_source_example_init(&ex);
        bt_source_heldout_example(task, i, &ex);
        long long a0 = 0, b0 = 0;
        char op0 = 0;
        CHECK(s_parse_prompt(ex.prompt, &a0, &op0, &b0));
        for (int p = 0; p < BT_PERTURB_COUNT; p++) {
            char buf[128], again[128], compact[128];
            memset(buf, 'X', sizeof buf);
            size_t n = bt_source_perturb(task, i, (bt_source_perturbation)p, buf, sizeof buf);
            if (p == BT_PERTURB_ORDER && op0 == '-') {
                CHECK(n == 0 && buf[0] == 'X'); /* a - b has no swapped form */
                order_minus++;
                continue;
            }
            CHECK(n > 0 && n == strlen(buf));
            long long a, b;
            char op;
            s_unperturb(buf, compact, sizeof compact);
            if (!s_parse_prompt(compact, &a, &op, &b)) {
                CHECK(!"perturbed prompt reads as A<op>B=");
                continue;
            }
            long long c = op == '+' ? a + b : op == '-' ? a - b : a * b;
            char said[32];
            snprintf(said, sizeof said, "%lld", c);
            wrong += strcmp(said, ex.answer) != 0 || s_reward(task, ex.answer, said, NULL) != 1.0;
            if (p == BT_PERTURB_SPACING)
                CHECK(strcmp(compact, ex.prompt) == 0 && strchr(buf, ' ') != NULL);
            if (p == BT_PERTURB_ORDER)
                CHECK(a == b0 && b == a0 && op == op0);
            if (p == BT_PERTURB_DISTRACTOR) {
                size_t plen = strlen(ex.prompt);
                CHECK(n > plen + 2 && strcmp(buf + n - plen, ex.prompt) == 0);
                CHECK(strncmp(buf + n - plen - 2, ". ", 2) == 0);
                CHECK(strpbrk(buf, "0123456789") < buf + n - plen); /* a number in the sentence */
                if (i == 0)
                    snprintf(first_sentence, sizeof first_sentence, "%.*s", (int)(n - plen), buf);
                else
                    sentences_differ += strncmp(buf, first_sentence, n - plen) != 0;
            }
            /* deterministic, in this task and in another built from the same config */
            CHECK(bt_source_perturb(task, i, (bt_source_perturbation)p, again, sizeof again) == n);
            CHECK(memcmp(buf, again, n + 1) == 0);
            CHECK(bt_source_perturb(twin, i, (bt_source_perturbation)p, again, sizeof again) == n);
            CHECK(memcmp(buf, again, n + 1) == 0);
            /* room for the text and its NUL, or nothing is written */
            memset(again, 'X', sizeof again);
            CHECK(bt_source_perturb(task, i, (bt_source_perturbation)p, again, n) == 0);
            CHECK(again[0] == 'X');
            CHECK(bt_source_perturb(task, i, (bt_source_perturbation)p, again, n + 1) == n);
        }
        bt_source_example_release(&ex);
    }
    CHECK(wrong == 0);
    CHECK((order_minus > 0) == (strchr(ops, '-') != NULL));
    CHECK(sentences_differ > 0);
    bt_source_destroy(&task);
    bt_source_destroy(&twin);
}

static void test_arith_perturb(void) {
    s_check_arith_perturb(1, "+", 5);
    s_check_arith_perturb(3, "+-*", 300);
    s_check_arith_perturb(9, "*-", 200); /* products near 10^18 */
    CHECK(strcmp(bt_source_perturbation_name(BT_PERTURB_SPACING), "spacing") == 0);
    CHECK(strcmp(bt_source_perturbation_name(BT_PERTURB_ORDER), "order") == 0);
    CHECK(strcmp(bt_source_perturbation_name(BT_PERTURB_DISTRACTOR), "distractor") == 0);
    CHECK(strcmp(bt_source_perturbation_name(BT_PERTURB_COUNT), "unknown") == 0);
}

/*  The canonical answer of completion, or "" when there is none (then buf must be untouched).
    Static buffers, so that two results can be compared. */
static const char *s_canon(const bt_source_t *task, const char *completion) {
    static char bufs[2][64];
    static int next = 0;
    char *buf = bufs[next++ % 2];
    memset(buf, 'X', sizeof bufs[0]);
    size_t n =
        bt_source_canonical_answer(task, completion, strlen(completion), buf, sizeof bufs[0]);
    if (n == 0) {
        CHECK(buf[0] == 'X');
        return "";
    }
    CHECK(n == strlen(buf));
    return buf;
}

static void test_canonical_answer_arith(void) {
    bt_source_t *task = s_arith(0, 2, "+", 10);
    CHECK(strcmp(s_canon(task, "  85"), "85") == 0);
    CHECK(strcmp(s_canon(task, "85"), "85") == 0);
    CHECK(strcmp(s_canon(task, "85 is it"), "85") == 0);
    CHECK(strcmp(s_canon(task, "\n-12\n"), "-12") == 0);
    CHECK(strcmp(s_canon(task, "085"), "085") == 0); /* as the verifier reads it: not 85 */
    CHECK(strcmp(s_canon(task, ""), "") == 0);
    CHECK(strcmp(s_canon(task, "the answer is 85"), "") == 0);
    CHECK(strcmp(s_canon(task, "-"), "") == 0);
    /* the canonical answer is right exactly when the completion is */
    const char *said[] = {"85", " 85", "85abc", "850", "-85", "085", "x85", "  85  "};
    for (size_t j = 0; j < sizeof said / sizeof *said; j++) {
        bt_reward_detail d;
        s_reward(task, "85", said[j], &d);
        CHECK(d.correct == (strcmp(s_canon(task, said[j]), "85") == 0));
    }
    char small[2] = {'X', 'X'};
    CHECK(bt_source_canonical_answer(task, "85", 2, small, sizeof small) == 0 && small[0] == 'X');
    CHECK(bt_source_canonical_answer(task, "8512", 2, small, sizeof small) ==
          0); /* len bounds it */
    char fits[3];
    CHECK(bt_source_canonical_answer(task, "8512", 2, fits, sizeof fits) == 2);
    CHECK(strcmp(fits, "85") == 0);
    bt_source_destroy(&task);
}

/* ---- JSONL datasets ------------------------------------------------------------------------ */
/*  Writes text to s_dir/name and returns the path (static buffer, one per call site is enough). */
static const char *s_write(const char *name, const char *text) {
    static char paths[8][128];
    static int next = 0;
    char *path = paths[next++ % 8];
    snprintf(path, 128, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
    return path;
}

/*  A dataset of lines {"prompt": "q<k>", "answer": "<k>"}, k = 1..n. */
static const char *s_write_numbered(const char *name, int n) {
    char *text = malloc((size_t)n * 48 + 1), *p = text;
    for (int k = 1; k <= n; k++)
        p += sprintf(p, "{\"prompt\": \"q%d\", \"answer\": \"%d\"}\n", k, k);
    const char *path = s_write(name, text);
    free(text);
    return path;
}

static bt_status s_open(const char *train, const char *heldout, bt_source_verifier verifier,
                        uint64_t seed, bt_source_t **task) {
    bt_source_jsonl_config cfg = {
        .train_path = train, .heldout_path = heldout, .verifier = verifier, .seed = seed};
    return bt_source_new_jsonl(&cfg, task);
}

static void test_jsonl_parse(void) {
    const char *train = s_write("parse.jsonl", "{\"prompt\": \"capital of France?\", \"answer\": "
                                               "\"Paris\"}\n"
                                               "\n  \r\n"
                                               "{\"answer\": 1234, \"prompt\": \"a\\nb\"}\n"
                                               "{\"prompt\": \"half\", \"answer\": 0.5}");
    const char *held = s_write("parse_held.jsonl", "{\"prompt\": \"p\", \"answer\": -2e-3}\n");
    bt_source_t *task = NULL;
    CHECK_OK(s_open(train, held, BT_SOURCE_VERIFY_EXACT, 1, &task));
    CHECK(bt_source_epoch_size(task) == 3);
    CHECK(bt_source_heldout_count(task) == 1);
    int found = 0;
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (uint64_t i = 0; i < 3; i++) {
        CHECK_OK(bt_source_train_example(task, i, &ex));
        found += strcmp(ex.prompt, "capital of France?") == 0 && strcmp(ex.answer, "Paris") == 0;
        found += strcmp(ex.prompt, "a\nb") == 0 && strcmp(ex.answer, "1234") == 0;
        found += strcmp(ex.prompt, "half") == 0 && strcmp(ex.answer, "0.5") == 0;
    }
    CHECK(found == 3);
    CHECK_OK(bt_source_heldout_example(task, 0, &ex));
    CHECK(strcmp(ex.answer, "-0.002") == 0);
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
}

static void test_jsonl_verifiers(void) {
    const char *path = s_write("verify.jsonl", "{\"prompt\": \"x\", \"answer\": \"1\"}\n");
    bt_source_t *exact = NULL, *numeric = NULL;
    CHECK_OK(s_open(path, NULL, BT_SOURCE_VERIFY_EXACT, 0, &exact));
    CHECK_OK(s_open(path, NULL, BT_SOURCE_VERIFY_NUMERIC, 0, &numeric));
    bt_reward_detail d;
    CHECK(s_reward(exact, "Paris", " Paris \n", &d) == 1.0 && d.well_formed);
    CHECK(s_reward(exact, " Paris", "Paris", &d) == 1.0);
    CHECK(s_reward(exact, "Paris", "paris", &d) == 0.0);
    CHECK(s_reward(exact, "Paris", "Paris.", &d) == 0.0);
    CHECK(s_reward(exact, "Paris", "", &d) == 0.0 && !d.well_formed);

    const char *said = "The answer is 1,234.0";
    CHECK(s_reward(numeric, "1234", said, &d) == 1.0 && d.correct && !d.well_formed);
    CHECK(d.extracted_start == 14 && d.extracted_len == 7);
    CHECK(s_reward(numeric, "3.14159", "3.14159", &d) == 1.0 && d.well_formed);
    CHECK(s_reward(numeric, "41", "42", &d) == 0.0 && !d.correct);
    CHECK(s_reward(numeric, "7", "first 3, then 7.", &d) == 1.0); /* the last number */
    CHECK(s_reward(numeric, "3", "first 3, then 7.", &d) == 0.0);
    CHECK(s_reward(numeric, "-12.5", "so x = -12.5", &d) == 1.0);
    CHECK(s_reward(numeric, "1500", "about 1.5e3 units", &d) == 1.0);
    CHECK(s_reward(numeric, "1000000", "1000000.5", &d) == 1.0); /* relative 1e-6 */
    CHECK(s_reward(numeric, "1000000", "1000002", &d) == 0.0);
    CHECK(s_reward(numeric, "0", "1e-10", &d) == 1.0); /* absolute 1e-9 */
    CHECK(s_reward(numeric, "0", "1e-8", &d) == 0.0);
    CHECK(s_reward(numeric, "1", "1,2", &d) == 0.0);     /* a list, not 12 */
    CHECK(s_reward(numeric, "1", "2024-01", &d) == 1.0); /* not -01 */
    CHECK(s_reward(numeric, "5", "no number here", &d) == 0.0 && d.extracted_len == 0);
    CHECK(s_reward(numeric, "5", " 5 ", &d) == 1.0 && d.well_formed);
    bt_source_destroy(&exact);
    bt_source_destroy(&numeric);
}

/*  Each epoch shows every training line exactly once, in an order that changes between epochs. */
static void test_jsonl_epochs(void) {
    enum { N = 30 };
    const char *train = s_write_numbered("epochs.jsonl", N);
    const char *held = s_write("epochs_held.jsonl", "{\"prompt\": \"h\", \"answer\": \"0\"}\n");
    bt_source_t *task = NULL, *again = NULL;
    CHECK_OK(s_open(train, held, BT_SOURCE_VERIFY_EXACT, 9, &task));
    CHECK_OK(s_open(train, held, BT_SOURCE_VERIFY_EXACT, 9, &again));
    CHECK(bt_source_epoch_size(task) == N);
    int order[3][N];
    bt_source_example ex, ex2;
    bt_source_example_init(&ex);
    bt_source_example_init(&ex2);
    for (int e = 0; e < 3; e++) {
        int count[N + 1] = {0};
        for (int k = 0; k < N; k++) {
            CHECK_OK(bt_source_train_example(task, (uint64_t)(e * N + k), &ex));
            order[e][k] = atoi(ex.prompt + 1);
            CHECK(order[e][k] >= 1 && order[e][k] <= N && atoi(ex.answer) == order[e][k]);
            count[order[e][k]]++;
        }
        for (int k = 1; k <= N; k++)
            CHECK(count[k] == 1);
    }
    CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0);
    CHECK(memcmp(order[1], order[2], sizeof order[0]) != 0);
    for (int i = 3 * N; i-- > 0;) { /* out of order, across epochs, in another task */
        CHECK_OK(bt_source_train_example(again, (uint64_t)i, &ex2));
        CHECK(atoi(ex2.prompt + 1) == order[i / N][i % N]);
    }
    bt_source_example_release(&ex);
    bt_source_example_release(&ex2);
    bt_source_destroy(&task);
    bt_source_destroy(&again);
}

/*  Without a held-out file, records 10, 20, ... are held out and never trained on. */
static void test_jsonl_split(void) {
    char text[2048] = "\n"; /* a blank first line does not count as a record */
    for (int k = 1; k <= 25; k++)
        sprintf(text + strlen(text), "{\"prompt\": \"q%d\", \"answer\": \"%d\"}\n", k, k);
    bt_source_t *task = NULL;
    CHECK_OK(s_open(s_write("split.jsonl", text), NULL, BT_SOURCE_VERIFY_EXACT, 2, &task));
    CHECK(bt_source_heldout_count(task) == 2);
    CHECK(bt_source_epoch_size(task) == 23);
    bt_source_example ex;
    bt_source_example_init(&ex);
    CHECK_OK(bt_source_heldout_example(task, 0, &ex));
    CHECK(strcmp(ex.prompt, "q10") == 0);
    CHECK_OK(bt_source_heldout_example(task, 1, &ex));
    CHECK(strcmp(ex.prompt, "q20") == 0);
    for (uint64_t i = 0; i < 23; i++) {
        CHECK_OK(bt_source_train_example(task, i, &ex));
        CHECK(atoi(ex.prompt + 1) % 10 != 0);
    }
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
}

/*  The record numbers k of the prompts "q<k>" of epoch e of task (n training records), into
    order[n]; checks that each of the n records in want[] (sorted) appears exactly once. */
static void s_epoch(const bt_source_t *task, uint64_t e, uint64_t n, int *order, const int *want) {
    bt_source_example ex;
    bt_source_example_init(&ex);
    char *seen = calloc((size_t)n, 1);
    int wrong = 0;
    for (uint64_t k = 0; k < n; k++) {
        CHECK_OK(bt_source_train_example(task, e * n + k, &ex));
        order[k] = ex.prompt ? atoi(ex.prompt + 1) : -1;
        /* want is sorted: find the slot of this record */
        size_t lo = 0, hi = (size_t)n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (want[mid] < order[k])
                lo = mid + 1;
            else
                hi = mid;
        }
        bool known = lo < n && want[lo] == order[k] && ex.answer && atoi(ex.answer) == order[k];
        wrong += !known || seen[lo];
        if (known)
            seen[lo] = 1;
    }
    CHECK(wrong == 0); /* every training record exactly once, with its own answer */
    free(seen);
    bt_source_example_release(&ex);
}

/*  Epoch e is a permutation of the training records for n in {1, 2, 3, 7, 64, 1000, 12345}, with
    a held-out file (all n lines train) and without one (records 10, 20, ... held out); the same
    (seed, epoch) gives the same order in another task; epochs and seeds give other orders. */
static void test_jsonl_permutations(void) {
    static const int sizes[] = {1, 2, 3, 7, 64, 1000, 12345};
    const char *held = s_write("perm_held.jsonl", "{\"prompt\": \"h\", \"answer\": \"0\"}\n");
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s];
        const char *train = s_write_numbered("perm.jsonl", n);
        for (int split = 0; split < 2; split++) {
            bt_source_t *task = NULL, *twin = NULL, *other = NULL;
            CHECK_OK(s_open(train, split ? NULL : held, BT_SOURCE_VERIFY_EXACT, 5, &task));
            CHECK_OK(s_open(train, split ? NULL : held, BT_SOURCE_VERIFY_EXACT, 5, &twin));
            CHECK_OK(s_open(train, split ? NULL : held, BT_SOURCE_VERIFY_EXACT, 6, &other));
            if (!task || !twin || !other)
                return;
            uint64_t m = bt_source_epoch_size(task);
            int *want = malloc((size_t)n * sizeof *want), n_want = 0;
            for (int k = 1; k <= n; k++)
                if (!split || k % 10 != 0)
                    want[n_want++] = k;
            CHECK(m == (uint64_t)n_want);
            CHECK(bt_source_heldout_count(task) == (size_t)(split ? n / 10 : 1));
            int *order[3], *again = malloc((size_t)m * sizeof *again);
            for (int e = 0; e < 3; e++) {
                order[e] = malloc((size_t)m * sizeof *order[e]);
                s_epoch(task, (uint64_t)e, m, order[e], want);
            }
            s_epoch(twin, 1, m, again, want);
            CHECK(memcmp(again, order[1], (size_t)m * sizeof *again) == 0);
            s_epoch(other, 1, m, again, want);
            if (m >= 7) { /* 7! orders: a repeat would be a 1 in 5040 coincidence */
                CHECK(memcmp(again, order[1], (size_t)m * sizeof *again) != 0);
                CHECK(memcmp(order[0], order[1], (size_t)m * sizeof *again) != 0);
                CHECK(memcmp(order[1], order[2], (size_t)m * sizeof *again) != 0);
            }
            if (m >= 1000) { /* shuffled: about one record in place, as for a random order */
                int same_place = 0, in_file_order = 0;
                for (uint64_t k = 0; k < m; k++) {
                    same_place += order[0][k] == order[1][k];
                    in_file_order += order[0][k] == want[k];
                }
                CHECK(same_place < 10 && in_file_order < 10);
            }
            for (int e = 0; e < 3; e++)
                free(order[e]);
            free(again);
            free(want);
            bt_source_destroy(&task);
            bt_source_destroy(&twin);
            bt_source_destroy(&other);
        }
    }
}

/*  Several threads share one task: each fetches the first epochs in its own order and must see
    what one thread alone sees. */
typedef struct {
    const bt_source_t *task;
    const int *order; /* (total) the record of each index, fetched by one thread */
    int total, stride, wrong;
} s_worker;

static void *s_fetch_all(void *arg) {
    s_worker *w = arg;
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (int k = 0; k < w->total; k++) {
        int i = (k * w->stride) % w->total; /* stride is coprime with total: every index once */
        w->wrong += bt_source_train_example(w->task, (uint64_t)i, &ex) != BT_OK ||
                    atoi(ex.prompt + 1) != w->order[i] || atoi(ex.answer) != w->order[i];
    }
    bt_source_example_release(&ex);
    return NULL;
}

static void test_jsonl_threads(void) {
    enum { N = 997, TOTAL = 3 * N, THREADS = 4 };
    const char *train = s_write_numbered("threads.jsonl", N);
    bt_source_t *task = NULL;
    CHECK_OK(s_open(train, NULL, BT_SOURCE_VERIFY_EXACT, 8, &task));
    if (!task)
        return;
    static int order[TOTAL];
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (int i = 0; i < TOTAL; i++) {
        CHECK_OK(bt_source_train_example(task, (uint64_t)i, &ex));
        order[i] = atoi(ex.prompt + 1);
    }
    bt_source_example_release(&ex);
    s_worker w[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        static const int strides[THREADS] = {1, 2, 5, 7}; /* coprime with 3 * 997 */
        w[t] = (s_worker){.task = task, .order = order, .total = TOTAL, .stride = strides[t]};
        CHECK(pthread_create(&threads[t], NULL, s_fetch_all, &w[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(w[t].wrong == 0);
    }
    bt_source_destroy(&task);
}

/*  Sets path's modification time 10 s back, so that the index built from it is saved. */
static void s_age(const char *path) {
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= 10;
    times[1] = times[0];
    CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
}

/*  A task's dataset is indexed once: the second task maps PATH.btidx (not rewritten), appending
    a line rebuilds it (one more record), and a corrupt index is rebuilt with the right records. */
static void test_jsonl_index(void) {
    enum { N = 50 };
    const char *train = s_write_numbered("indexed.jsonl", N);
    s_age(train);
    char index[200];
    snprintf(index, sizeof index, "%s.btidx", train);
    struct stat first, again;
    int order[N], want[N + 1];
    for (int k = 0; k <= N; k++)
        want[k] = k + 1;
    for (int round = 0; round < 2; round++) {
        bt_source_t *task = NULL;
        CHECK_OK(s_open(train, train, BT_SOURCE_VERIFY_EXACT, 3, &task));
        if (!task)
            return;
        CHECK(bt_source_epoch_size(task) == N && bt_source_heldout_count(task) == N);
        s_epoch(task, 0, N, order, want);
        bt_source_destroy(&task);
        CHECK(stat(index, round == 0 ? &first : &again) == 0);
    }
    CHECK(first.st_ino == again.st_ino && first.st_mtim.tv_sec == again.st_mtim.tv_sec &&
          first.st_mtim.tv_nsec == again.st_mtim.tv_nsec);

    FILE *f = fopen(train, "a");
    fprintf(f, "{\"prompt\": \"q%d\", \"answer\": \"%d\"}\n", N + 1, N + 1);
    fclose(f);
    s_age(train);
    bt_source_t *task = NULL;
    CHECK_OK(s_open(train, NULL, BT_SOURCE_VERIFY_EXACT, 3, &task));
    CHECK(task && bt_source_epoch_size(task) == N + 1 - 5); /* 51 records, 5 held out */
    bt_source_destroy(&task);

    f = fopen(index, "r+b"); /* corrupt an offset: the record it points at would be wrong */
    CHECK(f && fseek(f, 88 + 8 * 3, SEEK_SET) == 0 && fputc(0, f) == 0);
    fclose(f);
    CHECK_OK(s_open(train, train, BT_SOURCE_VERIFY_EXACT, 3, &task));
    CHECK(task && bt_source_epoch_size(task) == N + 1);
    int order51[N + 1];
    if (task)
        s_epoch(task, 2, N + 1, order51, want);
    bt_source_destroy(&task);
}

/*  A JSON string literal for value: printable ASCII as it is, '"' and '\\' escaped, other bytes
    as \n, \t... (`unicode` false) or all of them, and the first byte too, as \u00XX (`unicode`
    true), which the record check's fast path leaves to cJSON. */
static void s_json_string(const char *value, bool unicode, char *out, size_t cap) {
    size_t k = 0;
    out[k++] = '"';
    for (const char *p = value; *p && k + 8 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        if (unicode && (p == value || c < 0x20 || c == '"' || c == '\\'))
            k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
        else if (c == '"' || c == '\\')
            k += (size_t)snprintf(out + k, cap - k, "\\%c", c);
        else if (c == '\n' || c == '\t')
            k += (size_t)snprintf(out + k, cap - k, "\\%c", c == '\n' ? 'n' : 't');
        else
            out[k++] = (char)c;
    }
    out[k++] = '"';
    out[k] = '\0';
}

/*  Whether a one-line dataset holding line opens under verifier. */
static bool s_accepts(const char *line, bt_source_verifier verifier) {
    const char *path = s_write("one.jsonl", line);
    bt_source_t *task = NULL;
    bt_status st = s_open(path, NULL, verifier, 0, &task);
    bt_source_destroy(&task);
    return st == BT_OK;
}

/*  What the record rules say of line, read by cJSON here (the exact verifier's rules). */
static bool s_cjson_accepts(const char *line) {
    cJSON *root = cJSON_ParseWithOpts(line, NULL, true);
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *answer = cJSON_GetObjectItemCaseSensitive(root, "answer");
    bool ok = cJSON_IsObject(root) && cJSON_IsString(prompt) &&
              (cJSON_IsString(answer) || (cJSON_IsNumber(answer) && isfinite(answer->valuedouble)));
    cJSON_Delete(root);
    return ok;
}

/*  The record check reads most lines without cJSON; its verdict must be cJSON's on every line:
    thousands of mutations of a few lines (exact verifier), and answers under the numeric and math
    verifiers written with simple escapes (read by the fast path) and with \u escapes (left to
    cJSON). */
static void test_jsonl_fast_check_agrees(void) {
    static const char *const seeds[] = {
        "{\"prompt\": \"What is 2+2?\", \"answer\": \"4\"}",
        "{\"answer\": 12.5e-3, \"prompt\": \"a\\nb \\\"q\\\" \\\\ \\/\", \"x\": [1, {\"y\": "
        "null}], "
        "\"z\": true, \"w\": false}",
        "{\"prompt\":\"p\",\"answer\":-0,\"prompt\":5,\"answer\":\"x\"}",
        "  {\"prompt\" : \"\\u00e9t\\u00e9\", \"answer\" : \"1\"} \r",
        "{\"prompt\": \"caf\xc3\xa9\", \"answer\": 1E+2, \"n\": -0.5e-7}",
    };
    static const char alphabet[] = "{}[]\":,\\ 0123456789eE+-.ntrufals\t\r/ub\x01\x7f\xc3";
    uint64_t state = 12345;
    int disagree = 0, accepted = 0;
    char line[256];
    for (int trial = 0; trial < 3000; trial++) {
        snprintf(line, sizeof line, "%s", seeds[trial % 5]);
        int edits = trial < 5 ? 0 : 1 + (int)((state >> 33) % 3);
        for (int k = 0; k < edits; k++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t len = strlen(line), at = (size_t)(state >> 33) % (len + 1);
            char c = alphabet[(state >> 20) % (sizeof alphabet - 1)];
            int op = (int)((state >> 10) % 3);
            if (op == 0 && at < len) /* replace */
                line[at] = c;
            else if (op == 1 && len + 1 < sizeof line) { /* insert */
                memmove(line + at + 1, line + at, len - at + 1);
                line[at] = c;
            } else if (at < len) /* delete */
                memmove(line + at, line + at + 1, len - at);
        }
        bool want = s_cjson_accepts(line);
        accepted += want;
        if (s_accepts(line, BT_SOURCE_VERIFY_EXACT) != want) {
            disagree++;
            fprintf(stderr, "record check disagrees with cJSON (%s): %s\n",
                    want ? "cJSON accepts" : "cJSON refuses", line);
        }
    }
    CHECK(disagree == 0);
    CHECK(accepted > 100 && accepted < 2900); /* both verdicts were exercised */

    static const char *const answers[] = {
        "72",        "1,234.5",    "one",         "#### ",       "work\n#### 72", "work\n#### \n",
        "\\boxed{}", "\\boxed{3}", " ",           "\t7\t",       "1e5",           "-3",
        "50%",       "\"7\"",      "x\\y #### 2", "\\frac{1}{2}"};
    for (size_t a = 0; a < sizeof answers / sizeof *answers; a++) {
        for (int v = 0; v < 2; v++) {
            bt_source_verifier verifier = v ? BT_SOURCE_VERIFY_MATH : BT_SOURCE_VERIFY_NUMERIC;
            char plain[128], unicode[256];
            s_json_string(answers[a], false, plain, sizeof plain);
            s_json_string(answers[a], true, unicode, sizeof unicode);
            char l1[300], l2[400];
            snprintf(l1, sizeof l1, "{\"prompt\": \"q\", \"answer\": %s}", plain);
            snprintf(l2, sizeof l2, "{\"prompt\": \"q\", \"answer\": %s}", unicode);
            bool fast = s_accepts(l1, verifier), slow = s_accepts(l2, verifier);
            if (fast != slow)
                fprintf(stderr, "verifier %d: %s and %s differ\n", verifier, l1, l2);
            CHECK(fast == slow);
        }
    }
    CHECK(s_accepts("{\"prompt\": \"q\", \"answer\": \"work\\n#### 72\"}", BT_SOURCE_VERIFY_MATH));
    CHECK(!s_accepts("{\"prompt\": \"q\", \"answer\": \"work\\n#### \"}", BT_SOURCE_VERIFY_MATH));
    CHECK(s_accepts("{\"prompt\": \"q\", \"answer\": \"1,234.5\"}", BT_SOURCE_VERIFY_NUMERIC));
    CHECK(!s_accepts("{\"prompt\": \"q\", \"answer\": \"one\"}", BT_SOURCE_VERIFY_NUMERIC));
}

/*  Undoes the JSONL spacing perturbation: drops the leading space and halves every run of spaces.
 */
static bool s_unspace(const char *text, char *out, size_t len) {
    if (text[0] != ' ')
        return false;
    size_t k = 0;
    for (const char *p = text + 1; *p && k + 1 < len; p++) {
        if (*p == ' ') {
            if (p[1] != ' ')
                return false; /* a space that was not doubled */
            p++;
        }
        out[k++] = *p;
    }
    out[k] = '\0';
    return true;
}

static void test_jsonl_perturb(void) {
    const char *held =
        s_write("perturb_held.jsonl", "{\"prompt\": \"What is 2 plus 3?\", \"answer\": \"5\"}\n"
                                      "{\"prompt\": \"q1\", \"answer\": \"1\"}\n"
                                      "{\"prompt\": \"a  b\\nnext line\", \"answer\": \"x\"}\n");
    const char *train = s_write("perturb.jsonl", "{\"prompt\": \"t\", \"answer\": \"1\"}\n");
    bt_source_t *task = NULL, *twin = NULL;
    CHECK_OK(s_open(train, held, BT_SOURCE_VERIFY_EXACT, 4, &task));
    CHECK_OK(s_open(train, held, BT_SOURCE_VERIFY_EXACT, 4, &twin));
    for (size_t i = 0; i < bt_source_heldout_count(task); i++) {
        bt_source_example ex;
        bt_source_example_init(&ex);
        CHECK_OK(bt_source_heldout_example(task, i, &ex));
        size_t plen = strlen(ex.prompt);
        char buf[128], again[128], orig[128];
        memset(buf, 'X', sizeof buf);
        CHECK(bt_source_perturb(task, i, BT_PERTURB_ORDER, buf, sizeof buf) == 0 && buf[0] == 'X');

        size_t n = bt_source_perturb(task, i, BT_PERTURB_SPACING, buf, sizeof buf);
        CHECK(n > plen && n == strlen(buf) && strcmp(buf, ex.prompt) != 0);
        CHECK(s_unspace(buf, orig, sizeof orig) && strcmp(orig, ex.prompt) == 0);
        CHECK(bt_source_perturb(twin, i, BT_PERTURB_SPACING, again, sizeof again) == n);
        CHECK(strcmp(buf, again) == 0);
        CHECK(bt_source_perturb(task, i, BT_PERTURB_SPACING, again, n) == 0);

        n = bt_source_perturb(task, i, BT_PERTURB_DISTRACTOR, buf, sizeof buf);
        CHECK(n > plen + 2 && n == strlen(buf) && strcmp(buf, ex.prompt) != 0);
        CHECK(strcmp(buf + n - plen, ex.prompt) == 0); /* the original, after a sentence */
        CHECK(strncmp(buf + n - plen - 2, ". ", 2) == 0);
        CHECK(bt_source_perturb(twin, i, BT_PERTURB_DISTRACTOR, again, sizeof again) == n);
        CHECK(strcmp(buf, again) == 0);
        memset(again, 'X', sizeof again);
        CHECK(bt_source_perturb(task, i, BT_PERTURB_DISTRACTOR, again, n) == 0 && again[0] == 'X');
        bt_source_example_release(&ex);
    }
    char buf[128];
    bt_source_perturb(task, 0, BT_PERTURB_SPACING, buf, sizeof buf);
    CHECK(strcmp(buf, " What  is  2  plus  3?") == 0);
    bt_source_perturb(task, 2, BT_PERTURB_SPACING, buf, sizeof buf);
    CHECK(strcmp(buf, " a    b\nnext  line") == 0);
    bt_source_destroy(&task);
    bt_source_destroy(&twin);
}

static void test_canonical_answer_jsonl(void) {
    const char *path = s_write("canon.jsonl", "{\"prompt\": \"x\", \"answer\": \"1\"}\n");
    bt_source_t *exact = NULL, *numeric = NULL;
    CHECK_OK(s_open(path, NULL, BT_SOURCE_VERIFY_EXACT, 0, &exact));
    CHECK_OK(s_open(path, NULL, BT_SOURCE_VERIFY_NUMERIC, 0, &numeric));
    CHECK(strcmp(s_canon(exact, "  Paris \n"), "Paris") == 0);
    CHECK(strcmp(s_canon(exact, "Paris"), "Paris") == 0);
    CHECK(strcmp(s_canon(exact, "New  York"), "New  York") == 0);
    CHECK(strcmp(s_canon(exact, " \n\t"), "") == 0);

    CHECK(strcmp(s_canon(numeric, "1,234.50"), s_canon(numeric, "1234.5")) == 0);
    CHECK(strcmp(s_canon(numeric, "1234.5"), "1234.5") == 0);
    CHECK(strcmp(s_canon(numeric, "so the total is 1,234.50 dollars"), "1234.5") == 0);
    CHECK(strcmp(s_canon(numeric, "first 3, then 7."), "7") == 0); /* the last number */
    CHECK(strcmp(s_canon(numeric, "1.5e3"), s_canon(numeric, "1500")) == 0);
    CHECK(strcmp(s_canon(numeric, "-0"), "0") == 0);
    CHECK(strcmp(s_canon(numeric, "x = -12.5"), "-12.5") == 0);
    CHECK(strcmp(s_canon(numeric, "0.1"), "0.1") == 0);
    CHECK(strcmp(s_canon(numeric, "0.1"), s_canon(numeric, "0.10000000000000001")) == 0);
    CHECK(strcmp(s_canon(numeric, "0.1"), s_canon(numeric, "0.2")) != 0);
    CHECK(strcmp(s_canon(numeric, "no number here"), "") == 0);
    /* a canonical answer reads back as the value the verifier compares */
    bt_reward_detail d;
    CHECK(s_reward(numeric, "1234.5", s_canon(numeric, "it is 1,234.50"), &d) == 1.0);
    CHECK(d.well_formed);
    bt_source_destroy(&exact);
    bt_source_destroy(&numeric);
}

/*  A bad line 3 (after a good line and a blank one) is reported as PATH:3: <reason>. */
static void s_check_bad_line(const char *bad, bt_source_verifier verifier, const char *reason) {
    size_t len = strlen(bad) + 64;
    char *text = malloc(len);
    snprintf(text, len, "{\"prompt\": \"ok\", \"answer\": \"1\"}\n\n%s\n", bad);
    const char *path = s_write("bad.jsonl", text);
    free(text);
    char where[160];
    snprintf(where, sizeof where, "%s:3: ", path);
    bt_source_t *task = NULL;
    CHECK(s_open(path, NULL, verifier, 0, &task) == BT_EFORMAT);
    CHECK(task == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), where);
    CHECK_STR_CONTAINS(bt_last_error(), reason);
}

static void test_jsonl_errors(void) {
    bt_source_verifier exact = BT_SOURCE_VERIFY_EXACT;
    s_check_bad_line("{\"prompt\": \"x\",", exact, "not valid JSON");
    s_check_bad_line("{\"prompt\": \"x\", \"answer\": \"1\"} trailing", exact, "not valid JSON");
    s_check_bad_line("[\"x\", \"1\"]", exact, "expected a JSON object");
    s_check_bad_line("{\"answer\": \"1\"}", exact, "missing \"prompt\"");
    s_check_bad_line("{\"prompt\": 5, \"answer\": \"1\"}", exact, "\"prompt\" is not a string");
    s_check_bad_line("{\"prompt\": \"x\"}", exact, "missing \"answer\"");
    s_check_bad_line("{\"prompt\": \"x\", \"answer\": [1]}", exact,
                     "\"answer\" is neither a string nor a number");
    s_check_bad_line("{\"prompt\": \"x\", \"answer\": \"one\"}", BT_SOURCE_VERIFY_NUMERIC,
                     "\"answer\" is not a number");
    size_t big = (1u << 20) + 16;
    char *long_line = malloc(big + 1);
    memset(long_line, ' ', big);
    long_line[big] = '\0';
    s_check_bad_line(long_line, exact, "line longer than");
    free(long_line);

    bt_source_t *task = NULL;
    const char *empty = s_write("empty.jsonl", "\n  \n");
    CHECK(s_open(empty, NULL, exact, 0, &task) == BT_EFORMAT && task == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "no examples");
    const char *good = s_write("good.jsonl", "{\"prompt\": \"x\", \"answer\": \"1\"}\n");
    CHECK(s_open(good, empty, exact, 0, &task) == BT_EFORMAT); /* an empty held-out file too */
    CHECK(s_open("/nonexistent/baton.jsonl", NULL, exact, 0, &task) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "/nonexistent/baton.jsonl");
}

/* ---- the math verifier ---------------------------------------------------------------------- */
/*  The answer bt_source_math_answer finds in completion, or "" when there is none. */
static const char *s_math(const char *completion) {
    static char out[256];
    if (!bt_source_math_answer(completion, strlen(completion), out, sizeof out))
        return "";
    return out;
}

/*  Whether completion's answer equals the reference answer, as the verifier decides. */
static bool s_math_says(const char *completion, const char *reference) {
    char got[256];
    return bt_source_math_answer(completion, strlen(completion), got, sizeof got) &&
           bt_source_math_equal(got, reference);
}

static void test_math_answer(void) {
    CHECK(strcmp(s_math("so 2 + 3 = 5\n#### 1,234"), "1,234") == 0);
    CHECK(strcmp(s_math("#### 7\n#### 8 \nThe end, 9"), "8") == 0); /* the last ####, its line */
    CHECK(strcmp(s_math("The answer is \\boxed{\\frac{3}{4}}."), "\\frac{3}{4}") == 0);
    CHECK(strcmp(s_math("\\boxed{2^{10}}"), "2^{10}") == 0);
    CHECK(strcmp(s_math("\\boxed{{3}}"), "{3}") == 0);
    CHECK(strcmp(s_math("\\boxed{1} or rather \\boxed{2}"), "2") == 0);      /* the last box */
    CHECK(strcmp(s_math("#### 5 and \\boxed{6}"), "5 and \\boxed{6}") == 0); /* #### first */
    CHECK(strcmp(s_math("I think 12 ... so 13"), "13") == 0);
    CHECK(strcmp(s_math("half of it: 3/4."), "3/4") == 0);
    CHECK(strcmp(s_math("it is \\frac{1}{2}"), "\\frac{1}{2}") == 0);
    CHECK(strcmp(s_math("then \\boxed{3"), "3") == 0); /* unclosed: the last number */
    CHECK(strcmp(s_math("\\boxed{1} then \\boxed{3"), "3") == 0);
    CHECK(strcmp(s_math("#### "), "") == 0);          /* an empty marker is no answer ... */
    CHECK(strcmp(s_math("12 then ####\n"), "") == 0); /* ... and no fallback either */
    CHECK(strcmp(s_math("\\boxed{ }"), "") == 0);
    CHECK(strcmp(s_math("no digits here"), "") == 0);
    CHECK(strcmp(s_math(""), "") == 0);
    char tiny[3];
    CHECK(!bt_source_math_answer("#### 1234", 9, tiny, sizeof tiny)); /* does not fit */
    CHECK(bt_source_math_answer("#### 12", 7, tiny, sizeof tiny) && strcmp(tiny, "12") == 0);
    CHECK(!bt_source_math_answer("#### 1234", 4, tiny, sizeof tiny)); /* len bounds the input */
}

static void test_math_equal(void) {
    CHECK(s_math_says("#### 1,234", "1234"));
    CHECK(s_math_says("The answer is \\boxed{\\frac{3}{4}}.", "0.75"));
    CHECK(s_math_says("\\boxed{\\dfrac{3}{4}}", "3/4"));
    CHECK(s_math_says("\\boxed{-\\frac{1}{2}}", "-0.5"));
    CHECK(s_math_says("\\boxed{2^{10}}", "2^{10}")); /* no number: the strings */
    CHECK(!s_math_says("\\boxed{2^{10}}", "1024"));
    CHECK(s_math_says("\\boxed{\\left( 1, 2 \\right)}", "(1,2)"));
    CHECK(s_math_says("\\boxed{x\\!+\\,1}", "x + 1"));
    CHECK(s_math_says("#### $18.00", "18"));
    CHECK(s_math_says("#### \\$18.", "18"));
    CHECK(s_math_says("#### 50%", "50"));
    CHECK(s_math_says("\\boxed{50\\%}", "50"));
    CHECK(!s_math_says("#### 50%", "0.5")); /* percent is compared as its number */
    CHECK(s_math_says("#### -3", "-3.0"));
    CHECK(s_math_says("#### +7", "7"));
    CHECK(s_math_says("#### 2.50", "2.5"));
    CHECK(s_math_says("I think 12 ... so 13", "13"));
    CHECK(!s_math_says("I think 12 ... so 13", "12"));
    CHECK(!s_math_says("#### ", "0") && !s_math_says("#### ", ""));
    CHECK(s_math_says("\\boxed{1} or rather \\boxed{2}", "2"));
    CHECK(s_math_says("then \\boxed{3", "3"));
    CHECK(bt_source_math_equal("1/3", "\\frac{1}{3}"));
    CHECK(!bt_source_math_equal("1/3", "0.333333")); /* relative 1e-9 */
    CHECK(!bt_source_math_equal("1000000000", "1000000002"));
    CHECK(bt_source_math_equal("1e9", "1000000000.4")); /* within relative 1e-9 */
    CHECK(!bt_source_math_equal("1,2", "12"));          /* a list, not a number */
    CHECK(bt_source_math_equal("1,2", "1, 2"));
    CHECK(!bt_source_math_equal("1 234", "1234")); /* digits apart stay apart */
    CHECK(bt_source_math_equal("1/0", "1/0") && !bt_source_math_equal("1/0", "0")); /* no number */
    CHECK(!bt_source_math_equal("0/0", "0/1"));
    CHECK(!bt_source_math_equal("1e999", "1e998")); /* infinite: the strings */
    CHECK(bt_source_math_equal("-0", "0"));
    CHECK(!bt_source_math_equal("", "") && !bt_source_math_equal("$", "$"));
    CHECK(!bt_source_math_equal("Paris", "paris"));

    /* very long inputs: linear scans, bounded answers, no crash */
    size_t big = 1u << 20;
    char *text = malloc(big + 1);
    for (size_t i = 0; i < big; i++)
        text[i] = "{\\boxed{9#"[i % 10];
    text[big] = '\0';
    char out[64];
    bt_source_math_answer(text, big, out, sizeof out);
    memset(text, '7', big);
    CHECK(!bt_source_math_answer(text, big, out, sizeof out)); /* a number too long for out */
    CHECK(!bt_source_math_equal(text, text));                  /* a normal form too long */
    memcpy(text, "#### ", 5);
    CHECK(!bt_source_math_answer(text, big, out, sizeof out));
    free(text);
}

/*  A GSM8K-style dataset: the reference holds the reasoning and "#### 72", as the real "answer"
    field does, and a plain number works too; scored through bt_source_score. */
static void test_math_gsm8k(void) {
    const char *path =
        s_write("gsm8k.jsonl",
                "{\"prompt\": \"Natalia sold clips to 48 of her friends in April, and then she "
                "sold half as many clips in May. How many clips did she sell altogether?\", "
                "\"answer\": \"Natalia sold 48/2 = <<48/2=24>>24 clips in May.\\nNatalia sold "
                "48+24 = <<48+24=72>>72 clips altogether.\\n#### 72\"}\n"
                "{\"prompt\": \"What is 1,000 + 234?\", \"answer\": 1234}\n"
                "{\"prompt\": \"Write one half.\", \"answer\": \"\\\\frac{1}{2}\"}\n");
    bt_source_t *task = NULL;
    CHECK_OK(s_open(path, NULL, BT_SOURCE_VERIFY_MATH, 0, &task));
    CHECK(bt_source_epoch_size(task) == 3);
    char *gsm = NULL, *sum = NULL, *half = NULL; /* copies: an example's strings are its own */
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (uint64_t i = 0; i < 3; i++) {
        CHECK_OK(bt_source_train_example(task, i, &ex));
        if (strstr(ex.prompt, "Natalia"))
            gsm = strdup(ex.answer);
        else if (strstr(ex.prompt, "1,000"))
            sum = strdup(ex.answer);
        else
            half = strdup(ex.answer);
    }
    CHECK(gsm && sum && half);
    bt_reward_detail d;
    const char *good = "She sold 48 / 2 = 24 in May, so 48 + 24 = 72.\n#### 72";
    CHECK(bt_source_score(task, "q", gsm, good, strlen(good), &d) == 1.0);
    CHECK(d.correct && d.well_formed && d.extracted_len == 2);
    CHECK(memcmp(good + d.extracted_start, "72", 2) == 0);
    const char *loose = "48 + 24 = 72 clips";
    CHECK(bt_source_score(task, "q", gsm, loose, strlen(loose), &d) == 1.0 && !d.well_formed);
    const char *wrong = "#### 24";
    CHECK(bt_source_score(task, "q", gsm, wrong, strlen(wrong), &d) == 0.0 && !d.correct);
    const char *empty = "so 72 ####";
    CHECK(bt_source_score(task, "q", gsm, empty, strlen(empty), &d) == 0.0);
    CHECK(d.extracted_len == 0);
    const char *boxed = "\\boxed{1,234}";
    CHECK(bt_source_score(task, "q", sum, boxed, strlen(boxed), &d) == 1.0);
    const char *frac = "one half is 1/2";
    CHECK(bt_source_score(task, "q", half, frac, strlen(frac), &d) == 1.0);

    /* majority voting groups equal normal forms */
    CHECK(strcmp(s_canon(task, "#### 72"), "72") == 0);
    CHECK(strcmp(s_canon(task, "so \\boxed{72.00}"), "72") == 0);
    CHECK(strcmp(s_canon(task, "#### $72"), "72") == 0);
    CHECK(strcmp(s_canon(task, "\\boxed{\\frac{3}{4}}"), s_canon(task, "#### 3/4")) == 0);
    CHECK(strcmp(s_canon(task, "#### 0.75"), "0.75") == 0);
    CHECK(strcmp(s_canon(task, "#### 50%"), "50") == 0);
    CHECK(strcmp(s_canon(task, "\\boxed{2^{10}}"), "2^{10}") == 0);
    CHECK(strcmp(s_canon(task, "\\boxed{ x + 1 }"), s_canon(task, "#### x+1")) == 0);
    CHECK(strcmp(s_canon(task, "#### "), "") == 0);
    bt_source_example_release(&ex);
    free(gsm);
    free(sum);
    free(half);
    bt_source_destroy(&task);

    /* a reference that holds no answer is a malformed line */
    s_check_bad_line("{\"prompt\": \"x\", \"answer\": \"work #### \"}", BT_SOURCE_VERIFY_MATH,
                     "holds no answer");
    s_check_bad_line("{\"prompt\": \"x\", \"answer\": \" \"}", BT_SOURCE_VERIFY_MATH,
                     "holds no answer");
}

/*  configs/gsm8k.json loads and asks for the math verifier over user-supplied JSONL files. */
static void test_math_config(void) {
    const char *dir = getenv("BATON_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/gsm8k.json", dir ? dir : ".");
    bt_config cfg;
    CHECK_OK(bt_config_load(path, NULL, 0, &cfg));
    CHECK(cfg.task.kind == BT_CONFIG_TASK_JSONL && cfg.task.verifier == BT_SOURCE_VERIFY_MATH);
    CHECK(strcmp(cfg.task.train, "data/gsm8k_train.jsonl") == 0);
    CHECK(strcmp(cfg.task.eval, "data/gsm8k_test.jsonl") == 0);
    bt_source_jsonl_config jsonl;
    bt_config_task_jsonl(&cfg, &jsonl);
    CHECK(jsonl.verifier == BT_SOURCE_VERIFY_MATH);
}

/*  Chat templates: the ChatML and Llama 3 presets give their formats exactly (with and without a
    system prompt), a custom template substitutes its fields, a bad one is refused by name; a
    JSONL task's prompts (training and held out) are the templated ones; the run config refuses a
    template on the arithmetic task and a template without {prompt}. */
static void test_chat_templates(void) {
    char *out = NULL;
    CHECK_OK(bt_chat_apply("chatml", "Be brief.", "2+2?", &out));
    CHECK(out && !strcmp(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?"
                              "<|im_end|>\n<|im_start|>assistant\n"));
    free(out);
    CHECK_OK(bt_chat_apply("chatml", NULL, "2+2?", &out));
    CHECK(out && !strcmp(out, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"));
    free(out);
    CHECK_OK(bt_chat_apply("llama3", "S", "Q", &out));
    CHECK(out && !strcmp(out, "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                              "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    free(out);
    CHECK_OK(bt_chat_apply("[{system}] Q: {prompt} A: {x}", "sys", "1+1", &out));
    CHECK(out && !strcmp(out, "[sys] Q: 1+1 A: {x}")); /* other braces stay as written */
    free(out);
    CHECK(bt_chat_apply("no placeholder", "", "p", &out) == BT_EINVAL && out == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "holding {prompt} once");
    CHECK(bt_chat_apply("{prompt}{prompt}", "", "p", &out) == BT_EINVAL);
    const char *path = s_write("chat.jsonl", "{\"prompt\": \"What is 6*7?\", \"answer\": 42}\n");
    bt_source_jsonl_config cfg = {.train_path = path,
                                  .heldout_path = path,
                                  .verifier = BT_SOURCE_VERIFY_NUMERIC,
                                  .chat_template = "chatml",
                                  .system_prompt = "Answer with a number."};
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_jsonl(&cfg, &task));
    bt_source_example ex;
    bt_source_example_init(&ex);
    CHECK_OK(bt_source_train_example(task, 0, &ex));
    CHECK(!strcmp(ex.prompt, "<|im_start|>system\nAnswer with a number.<|im_end|>\n<|im_start|>"
                             "user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n"));
    CHECK_OK(bt_source_heldout_example(task, 0, &ex));
    CHECK(strstr(ex.prompt, "<|im_start|>user\nWhat is 6*7?<|im_end|>") != NULL);
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
    bt_config rc;
    const char *arith[] = {"task.chat_template=chatml"};
    CHECK(bt_config_parse("{}", "c.json", arith, 1, &rc) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "task.chat_template: applies to \"jsonl\" tasks");
    char set_train[600];
    snprintf(set_train, sizeof set_train, "task.train=%s", path);
    const char *bad[] = {"task.kind=jsonl", set_train, "task.chat_template=Q: {question}"};
    CHECK(bt_config_parse("{}", "c.json", bad, 3, &rc) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "c.json: task.chat_template: expected");
}

/*  An observation between two model turns: each preset closes the model's turn, gives the
    observation the tool's role ("tool" in ChatML, as Qwen's template names it; "ipython" in
    Llama 3) and opens the model's next turn, byte for byte as written out here; a template of the
    task's own (or none) leaves the observation as it is; a custom observation_template wins over
    the preset; the observation's bytes are kept, a NUL among them; a template without
    {observation}, or with it twice, is refused by name. */
static void test_chat_observation(void) {
    char *out = NULL;
    size_t len = 0;
    CHECK_OK(bt_chat_observation("chatml", NULL, "391", 3, &out, &len));
    static const char chatml[] = "<|im_end|>\n<|im_start|>tool\n391<|im_end|>\n"
                                 "<|im_start|>assistant\n";
    CHECK(out && len == sizeof chatml - 1 && memcmp(out, chatml, len) == 0 && out[len] == '\0');
    free(out);
    CHECK_OK(bt_chat_observation("llama3", "", "391", 3, &out, &len));
    static const char llama3[] = "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n391"
                                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK(out && len == sizeof llama3 - 1 && memcmp(out, llama3, len) == 0);
    free(out);
    /* no chat template, or one of the task's own: the observation as written */
    CHECK_OK(bt_chat_observation(NULL, NULL, "<result>7</result>", 18, &out, &len));
    CHECK(out && len == 18 && !strcmp(out, "<result>7</result>"));
    free(out);
    CHECK_OK(bt_chat_observation("Q: {prompt} A:", NULL, "x", 1, &out, &len));
    CHECK(out && len == 1 && !strcmp(out, "x"));
    free(out);
    /* a custom template, over the preset; other braces stay as written */
    CHECK_OK(bt_chat_observation("chatml", "\n[tool {x}] {observation}\n", "42", 2, &out, &len));
    CHECK(out && len == 15 && !strcmp(out, "\n[tool {x}] 42\n"));
    free(out);
    /* any bytes: a NUL and a byte that is not UTF-8 come through, the length counts them */
    const char obs[] = {'a', '\0', 'b', (char)0xff};
    CHECK_OK(bt_chat_observation(NULL, "<{observation}>", obs, sizeof obs, &out, &len));
    const char want[] = {'<', 'a', '\0', 'b', (char)0xff, '>'};
    CHECK(out && len == sizeof want && memcmp(out, want, len) == 0 && out[len] == '\0');
    free(out);
    CHECK_OK(bt_chat_observation("chatml", NULL, "", 0, &out, &len)); /* an empty observation */
    CHECK(out &&
          len == strlen("<|im_end|>\n<|im_start|>tool\n<|im_end|>\n<|im_start|>assistant\n"));
    free(out);
    out = (char *)1;
    CHECK(bt_chat_observation("chatml", "no placeholder", "x", 1, &out, &len) == BT_EINVAL);
    CHECK(out == NULL && len == 0);
    CHECK_STR_CONTAINS(bt_last_error(), "holding {observation} once, got \"no placeholder\"");
    CHECK(bt_chat_observation(NULL, "{observation}{observation}", "x", 1, &out, &len) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "observation template: expected a text holding");
}

int main(void) {
    snprintf(s_dir, sizeof s_dir, "/tmp/baton_test_tasks_XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char cache_home[128]; /* an index that cannot go beside its file goes here, not to ~/.cache */
    snprintf(cache_home, sizeof cache_home, "%s/cache", s_dir);
    setenv("XDG_CACHE_HOME", cache_home, 1);
    test_arith_determinism();
    test_arith_out_of_order();
    test_arith_heldout_disjoint();
    test_arith_answers();
    test_arith_config_errors();
    test_arith_reward();
    test_arith_perturb();
    test_canonical_answer_arith();
    test_jsonl_parse();
    test_jsonl_verifiers();
    test_jsonl_epochs();
    test_jsonl_split();
    test_jsonl_permutations();
    test_jsonl_index();
    test_jsonl_threads();
    test_jsonl_fast_check_agrees();
    test_jsonl_errors();
    test_jsonl_perturb();
    test_canonical_answer_jsonl();
    test_math_answer();
    test_math_equal();
    test_math_gsm8k();
    test_math_config();
    test_chat_templates();
    test_chat_observation();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    CHECK(system(cmd) == 0);
    return check_exit();
}
