/*  test_choices.c — multiple choice by log-likelihood: each choice's log-likelihood as a
    continuation (" " + choice) of its context, acc and acc_norm, equal those of tests/ref's
    choices_ref.py (lm-evaluation-harness's definitions on llama_ref.py's float64 numpy forward)
    to 1e-6; answers given as indices or letters; the metrics (stderr, the probability of the
    right choice, the calibration error) follow from the per-item probabilities as the test
    recomputes them; two shards add up to the one-worker sums exactly and give the same metrics;
    a malformed line is refused naming its line. */
#define _DEFAULT_SOURCE
#include "baton/buf.h"
#include "baton/choices.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/model.h"
#include "check.h"
#include "runs.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static const char s_items[] =
    "{\"context\": \"2+2=\", \"choices\": [\"4\", \"5\", \"22\"], \"answer\": 0}\n"
    "{\"question\": \"3+4=\", \"choices\": [\"1\", \"7\", \"34\", \"12\"], \"answer\": \"B\"}\n"
    "\n"
    "{\"context\": \"The sky is\", \"choices\": [\"blue\", \"green\"], \"answer\": 0,"
    " \"subject\": \"colours\"}\n"
    "{\"context\": \"9-3=\", \"choices\": [\"6\", \"3\", \"93\"], \"answer\": \"A\"}\n"
    "{\"context\": \"1+1=\", \"choices\": [\"11\", \"2\"], \"answer\": 1}\n";
enum { N = 5 };
static const int s_answers[N] = {0, 1, 0, 0, 1};
/*  The set's items as the file writes them: what the reference and the shuffled copy are built
    from. */
static const char *const s_ctx[N] = {"2+2=", "3+4=", "The sky is", "9-3=", "1+1="};
static const char *const s_ch[N][4] = {
    {"4", "5", "22"}, {"1", "7", "34", "12"}, {"blue", "green"}, {"6", "3", "93"}, {"11", "2"}};
static const int s_nch[N] = {3, 4, 2, 3, 2};

/*  The reference's JSON for the set: the token ids the C side scores, from the tokenizer. */
static char *s_request(const bt_tokenizer_t *tok) {
    bt_buf b = {0};
    bt_buf_puts(&b, "[");
    for (int i = 0; i < N; i++) {
        int32_t ids[64];
        size_t got = 0;
        bt_tokenizer_encode(tok, s_ctx[i], strlen(s_ctx[i]), true, ids, 64, &got);
        bt_buf_printf(&b, "%s{\"context\": [", i ? ", " : "");
        for (size_t t = 0; t < got; t++)
            bt_buf_printf(&b, "%s%d", t ? ", " : "", ids[t]);
        bt_buf_puts(&b, "], \"continuations\": [");
        for (int j = 0; j < s_nch[i]; j++) {
            char cont[16];
            snprintf(cont, sizeof cont, " %s", s_ch[i][j]);
            bt_tokenizer_encode(tok, cont, strlen(cont), false, ids, 64, &got);
            bt_buf_printf(&b, "%s[", j ? ", " : "");
            for (size_t t = 0; t < got; t++)
                bt_buf_printf(&b, "%s%d", t ? ", " : "", ids[t]);
            bt_buf_puts(&b, "]");
        }
        bt_buf_puts(&b, "], \"lengths\": [");
        for (int j = 0; j < s_nch[i]; j++)
            bt_buf_printf(&b, "%s%zu", j ? ", " : "", strlen(s_ch[i][j]));
        bt_buf_printf(&b, "], \"answer\": %d}", s_answers[i]);
    }
    bt_buf_puts(&b, "]");
    return bt_buf_detach(&b, NULL);
}

static const bt_choices_options s_text = {.delimiter = " "};

static double s_metric(const bt_evaluator_sums *s, const char *name) {
    bt_eval_metric m[BT_EVAL_MAX_METRICS];
    int n = bt_evaluator_metrics(s, BT_EVAL_CHOICES, NULL, 0, m, BT_EVAL_MAX_METRICS, NULL);
    for (int i = 0; i < n; i++)
        if (!strcmp(m[i].name, name))
            return m[i].value;
    return NAN;
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("SKIP: /usr/bin/python3 missing: the numpy reference cannot run\n");
        return 77;
    }
    char dir[] = "/tmp/bt_choices_XXXXXX", path[128], cmd[512];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/mc.jsonl", dir);
    CHECK_OK(bt_file_write(path, s_items, strlen(s_items)));
    bt_choice_set *set = NULL;
    CHECK_OK(bt_choices_load(path, &set));
    CHECK(set && bt_choices_count(set) == N);
    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.hidden_size = 32;
    mc.intermediate_size = 64;
    mc.num_hidden_layers = 2;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 13);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    CHECK_OK(bt_model_save(m, NULL, dir));
    /* the reference's log-likelihoods, acc and acc_norm */
    char *req = s_request(tok), reqpath[160];
    snprintf(reqpath, sizeof reqpath, "%s/req.json", dir);
    CHECK_OK(bt_file_write(reqpath, req, strlen(req)));
    free(req);
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/choices_ref.py %s < %s",
             src ? src : "..", dir, reqpath);
    static char out[1 << 16];
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    cJSON *ref = cJSON_Parse(out);
    CHECK(ref != NULL);
    double p_right = 0, ece_conf[BT_CHOICES_BINS] = {0}, ece_right[BT_CHOICES_BINS] = {0};
    for (int i = 0; ref && i < N; i++) {
        double ll[BT_CHOICES_MAX];
        int n = 0, answer = -1;
        CHECK_OK(bt_choices_loglik(set, (size_t)i, m, tok, &s_text, NULL, ll, &n, &answer, NULL));
        CHECK(answer == s_answers[i]);
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "loglik"), i);
        CHECK(cJSON_GetArraySize(row) == n);
        double top = -INFINITY, sum = 0;
        int pred = 0;
        for (int j = 0; j < n && j < cJSON_GetArraySize(row); j++) {
            double want = cJSON_GetArrayItem(row, j)->valuedouble;
            CHECK_REL(ll[j], want, 1e-6);
            pred = want > top ? j : pred;
            top = fmax(top, want);
        }
        for (int j = 0; j < n && j < cJSON_GetArraySize(row); j++)
            sum += exp(cJSON_GetArrayItem(row, j)->valuedouble - top);
        double right = exp(cJSON_GetArrayItem(row, answer)->valuedouble - top) / sum;
        int bin = (int)fmin(floor(10.0 / sum), 9);
        p_right += right / N;
        ece_conf[bin] += 1.0 / sum;
        ece_right[bin] += pred == answer;
    }
    double ece = 0;
    for (int b = 0; b < BT_CHOICES_BINS; b++)
        ece += fabs(ece_conf[b] - ece_right[b]) / N;
    /* one worker over all items, and two shards */
    bt_evaluator_sums all, a, b;
    bt_evaluator_sums_init(&all, 1);
    bt_evaluator_sums_init(&a, 1);
    bt_evaluator_sums_init(&b, 1);
    CHECK_OK(bt_choices_run(set, m, tok, &s_text, 0, N, &all));
    CHECK_OK(bt_choices_run(set, m, tok, &s_text, 0, 2, &a));
    CHECK_OK(bt_choices_run(set, m, tok, &s_text, 2, N - 2, &b));
    CHECK_OK(bt_evaluator_sums_add(&a, &b));
    CHECK(all.mc_items == N && a.mc_items == N && all.mc_correct == a.mc_correct &&
          all.mc_correct_norm == a.mc_correct_norm && all.mc_p_right_fx == a.mc_p_right_fx &&
          !memcmp(all.mc_bin_n, a.mc_bin_n, sizeof a.mc_bin_n) &&
          !memcmp(all.mc_bin_conf_fx, a.mc_bin_conf_fx, sizeof a.mc_bin_conf_fx) &&
          !memcmp(all.mc_bin_correct, a.mc_bin_correct, sizeof a.mc_bin_correct));
    double acc = s_metric(&all, "acc");
    printf("acc %.3f (reference %.3f), acc_norm %.3f (%.3f), prob_right %.6f (%.6f), ece %.6f "
           "(%.6f)\n",
           acc, cJSON_GetNumberValue(cJSON_GetObjectItem(ref, "acc")), s_metric(&all, "acc_norm"),
           cJSON_GetNumberValue(cJSON_GetObjectItem(ref, "acc_norm")), s_metric(&all, "prob_right"),
           p_right, s_metric(&all, "ece"), ece);
    CHECK(acc == cJSON_GetNumberValue(cJSON_GetObjectItem(ref, "acc")));
    CHECK(s_metric(&all, "acc_norm") == cJSON_GetNumberValue(cJSON_GetObjectItem(ref, "acc_norm")));
    CHECK_REL(s_metric(&all, "acc_stderr"), sqrt(acc * (1 - acc) / (N - 1)) + 1e-300, 1e-12);
    CHECK(fabs(s_metric(&all, "prob_right") - p_right) < 1e-6);
    CHECK(fabs(s_metric(&all, "ece") - ece) < 1e-6);
    CHECK(s_metric(&all, "acc") == s_metric(&a, "acc") &&
          s_metric(&all, "ece") == s_metric(&a, "ece"));
    cJSON_Delete(ref);
    /* the sums travel: a RESULT's fields read back equal */
    bt_msg_t *msg = bt_msg_new(BT_MSG_RESULT);
    bt_evaluator_sums back;
    CHECK_OK(bt_sums_to_msg(&all, msg));
    CHECK_OK(bt_sums_from_msg(msg, &back));
    CHECK(back.mc_items == all.mc_items && back.mc_p_right_fx == all.mc_p_right_fx &&
          !memcmp(back.mc_bin_conf_fx, all.mc_bin_conf_fx, sizeof all.mc_bin_conf_fx));
    bt_msg_destroy(&msg);
    /* MMLU style: the context lists the choices as letters, the continuations are the letters */
    static const char *const ctx0 = "2+2=\nA. 4\nB. 5\nC. 22\nAnswer:";
    bt_nll_item letter_items[3] = {{ctx0, " A", false}, {ctx0, " B", false}, {ctx0, " C", false}};
    double want_ll[3];
    int64_t ntok[3];
    CHECK_OK(bt_evaluator_nll(m, tok, letter_items, 3, want_ll, ntok));
    bt_choices_options letters = {.delimiter = " ", .letters = true, .shuffle = true, .seed = 7};
    double ll[BT_CHOICES_MAX];
    int n = 0, answer = -1;
    CHECK_OK(bt_choices_loglik(set, 0, m, tok, &letters, NULL, ll, &n, &answer, NULL));
    CHECK(n == 3 && answer == 0);
    for (int j = 0; j < 3; j++)
        CHECK(ll[j] == -want_ll[j]);
    /* shuffled: the set written in each item's seeded order, scored without shuffling, is right
       as often as the shuffled pass says; contamination_gap is acc less that */
    bt_buf lines = {0};
    for (int i = 0; i < N; i++) {
        int order[BT_CHOICES_MAX], seen = 0, moved = -1;
        bt_choices_order(7, (size_t)i, s_nch[i], order);
        bt_buf_printf(&lines, "{\"context\": \"%s\", \"choices\": [", s_ctx[i]);
        for (int k = 0; k < s_nch[i]; k++) {
            seen |= 1 << order[k];
            moved = order[k] == s_answers[i] ? k : moved;
            bt_buf_printf(&lines, "%s\"%s\"", k ? ", " : "", s_ch[i][order[k]]);
        }
        bt_buf_printf(&lines, "], \"answer\": %d}\n", moved);
        CHECK(seen == (1 << s_nch[i]) - 1); /* a permutation */
    }
    char spath[160];
    snprintf(spath, sizeof spath, "%s/shuffled.jsonl", dir);
    CHECK_OK(bt_file_write(spath, lines.data, lines.len));
    bt_buf_release(&lines);
    bt_choice_set *shuffled = NULL;
    CHECK_OK(bt_choices_load(spath, &shuffled));
    bt_evaluator_sums with, plain;
    bt_evaluator_sums_init(&with, 1);
    bt_evaluator_sums_init(&plain, 1);
    CHECK_OK(bt_choices_run(set, m, tok, &letters, 0, N, &with));
    bt_choices_options unshuffled = letters;
    unshuffled.shuffle = false;
    CHECK_OK(bt_choices_run(shuffled, m, tok, &unshuffled, 0, N, &plain));
    CHECK(with.mc_shuffled == N && with.mc_shuffled_correct == plain.mc_correct);
    CHECK(s_metric(&with, "contamination_gap") ==
          s_metric(&with, "acc") - (double)plain.mc_correct / N);
    printf("letters: acc %.2f, acc_shuffled %.2f, contamination_gap %.2f\n", s_metric(&with, "acc"),
           s_metric(&with, "acc_shuffled"), s_metric(&with, "contamination_gap"));
    bt_choices_free(&shuffled);
    /* malformed lines */
    const char *bad[][2] = {
        {"{\"context\": \"x\", \"choices\": [\"a\"], \"answer\": 0}\n",
         "mc.jsonl:1: expected \"choices\": an array of 2 to 26 non-empty strings"},
        {"\n{\"context\": \"x\", \"choices\": [\"a\", \"b\"], \"answer\": \"C\"}\n",
         "mc.jsonl:2: expected \"answer\": the index of a choice, or its letter"},
        {"{\"choices\": [\"a\", \"b\"], \"answer\": 1}\n",
         "mc.jsonl:1: expected a string \"context\" (or \"question\")"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        bt_choice_set *no = NULL;
        CHECK_OK(bt_file_write(path, bad[k][0], strlen(bad[k][0])));
        CHECK(bt_choices_load(path, &no) == BT_EFORMAT && no == NULL);
        CHECK_STR_CONTAINS(bt_last_error(), bad[k][1]);
    }
    bt_choices_free(&set);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return check_exit();
}
