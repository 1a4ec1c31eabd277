/*  test_choices.c — multiple choice by log-likelihood: each choice's log-likelihood as a
    continuation (" " + choice) of its context, acc and acc_norm, overall and per subject, equal
    those of tests/ref's choices_ref.py (lm-evaluation-harness's definitions on llama_ref.py's
    float64 numpy forward) to 1e-6; answers given as indices or letters; the metrics (stderr, the
    probability of the right choice, the calibration error) follow from the per-item
    probabilities as the test recomputes them; two shards add up to the one-worker sums exactly
    (subjects included) and give the same metrics; a malformed line, a subject that cannot name a
    metric and a 65th subject are refused naming their line.  Few-shot: with k = 2 exemplars (from
    the set's other items, or from a pool file under letters) the log-likelihoods equal the
    reference's, which builds each prompt text itself from the exemplars' indices; the exemplars
    are distinct, never the item, the same in a set loaded again and in any shard.  Under a chat
    template the context (exemplars included) is the user's turn and the continuations lose the
    delimiter, and a config's suite sets all of it up from its keys. */
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
    "{\"context\": \"2+2=\", \"choices\": [\"4\", \"5\", \"22\"], \"answer\": 0,"
    " \"subject\": \"sums\"}\n"
    "{\"question\": \"3+4=\", \"choices\": [\"1\", \"7\", \"34\", \"12\"], \"answer\": \"B\","
    " \"subject\": \"sums\"}\n"
    "\n"
    "{\"context\": \"The sky is\", \"choices\": [\"blue\", \"green\"], \"answer\": 0,"
    " \"subject\": \"colours\"}\n"
    "{\"context\": \"9-3=\", \"choices\": [\"6\", \"3\", \"93\"], \"answer\": \"A\"}\n"
    "{\"context\": \"1+1=\", \"choices\": [\"11\", \"2\"], \"answer\": 1,"
    " \"subject\": \"sums\"}\n";
enum { N = 5 };
static const int s_answers[N] = {0, 1, 0, 0, 1};
static const char *const s_subject[N] = {"sums", "sums", "colours", NULL, "sums"};
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
        bt_buf_printf(&b, "], \"answer\": %d", s_answers[i]);
        if (s_subject[i])
            bt_buf_printf(&b, ", \"subject\": \"%s\"", s_subject[i]);
        bt_buf_puts(&b, "}");
    }
    bt_buf_puts(&b, "]");
    return bt_buf_detach(&b, NULL);
}

static const bt_choices_options s_text = {.delimiter = " "};
static char s_dir[] = "/tmp/bt_choices_XXXXXX";

/*  The reference's answer to req (JSON text), run on the model saved in s_dir; NULL on failure.
    Caller deletes it. */
static cJSON *s_reference(const char *req) {
    char reqpath[160], cmd[512];
    snprintf(reqpath, sizeof reqpath, "%s/req.json", s_dir);
    CHECK_OK(bt_file_write(reqpath, req, strlen(req)));
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/choices_ref.py %s < %s",
             src ? src : "..", s_dir, reqpath);
    static char out[1 << 16];
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    cJSON *ref = cJSON_Parse(out);
    CHECK(ref != NULL);
    return ref;
}

static double s_metric_of(const bt_evaluator_sums *s, const bt_choice_set *set, const char *name) {
    bt_eval_metric m[BT_EVAL_MAX_METRICS];
    int n = bt_evaluator_metrics(s, BT_EVAL_CHOICES, NULL, 0, set, m, BT_EVAL_MAX_METRICS, NULL);
    for (int i = 0; i < n; i++)
        if (!strcmp(m[i].name, name))
            return m[i].value;
    return NAN;
}

static double s_metric(const bt_evaluator_sums *s, const char *name) {
    return s_metric_of(s, NULL, name);
}

/*  a and b have the same metrics, name for name and value for value (NaN equal to NaN), but for
    the two that measure speed and memory. */
static bool s_same_metrics(const bt_evaluator_sums *a, const bt_evaluator_sums *b,
                           const bt_choice_set *set) {
    static bt_eval_metric ma[BT_EVAL_MAX_METRICS], mb[BT_EVAL_MAX_METRICS];
    int na = bt_evaluator_metrics(a, BT_EVAL_CHOICES, NULL, 0, set, ma, BT_EVAL_MAX_METRICS, NULL);
    int nb = bt_evaluator_metrics(b, BT_EVAL_CHOICES, NULL, 0, set, mb, BT_EVAL_MAX_METRICS, NULL);
    bool same = na == nb;
    for (int i = 0; same && i < na; i++)
        same = !strcmp(ma[i].name, mb[i].name) &&
               (ma[i].value == mb[i].value || (isnan(ma[i].value) && isnan(mb[i].value)) ||
                !strcmp(ma[i].name, "tokens_per_s") || !strcmp(ma[i].name, "peak_rss_mb"));
    return same;
}

/*  The sums of the choices fields (subjects included) are equal. */
static bool s_same_sums(const bt_evaluator_sums *a, const bt_evaluator_sums *b) {
    return a->mc_items == b->mc_items && a->mc_correct == b->mc_correct &&
           a->mc_correct_norm == b->mc_correct_norm && a->mc_p_right_fx == b->mc_p_right_fx &&
           !memcmp(a->mc_bin_n, b->mc_bin_n, sizeof a->mc_bin_n) &&
           !memcmp(a->mc_bin_conf_fx, b->mc_bin_conf_fx, sizeof a->mc_bin_conf_fx) &&
           !memcmp(a->mc_bin_correct, b->mc_bin_correct, sizeof a->mc_bin_correct) &&
           a->mc_shuffled == b->mc_shuffled && a->mc_shuffled_correct == b->mc_shuffled_correct &&
           !memcmp(a->mc_subject_n, b->mc_subject_n, sizeof a->mc_subject_n) &&
           !memcmp(a->mc_subject_correct, b->mc_subject_correct, sizeof a->mc_subject_correct) &&
           !memcmp(a->mc_subject_correct_norm, b->mc_subject_correct_norm,
                   sizeof a->mc_subject_correct_norm);
}

/*  Sums of set's items [0, N) in one pass, and in the shards [0, 2) and [2, N) added up. */
static void s_one_and_two(const bt_choice_set *set, bt_model *m, const bt_tokenizer_t *tok,
                          const bt_choices_options *o, bt_evaluator_sums *all,
                          bt_evaluator_sums *two) {
    bt_evaluator_sums b;
    bt_evaluator_sums_init(all, 1);
    bt_evaluator_sums_init(two, 1);
    bt_evaluator_sums_init(&b, 1);
    CHECK_OK(bt_choices_run(set, m, tok, o, 0, N, all));
    CHECK_OK(bt_choices_run(set, m, tok, o, 0, 2, two));
    CHECK_OK(bt_choices_run(set, m, tok, o, 2, N - 2, &b));
    CHECK_OK(bt_evaluator_sums_add(two, &b));
}

/*  The set's items as JSON objects of texts, for the reference's texts request. */
static cJSON *s_items_json(const char *const *ctx, const char *const (*ch)[4], const int *nch,
                           const int *answers, int n) {
    cJSON *items = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "context", ctx[i]);
        cJSON_AddItemToObject(it, "choices", cJSON_CreateStringArray(ch[i], nch[i]));
        cJSON_AddNumberToObject(it, "answer", answers[i]);
        cJSON_AddItemToArray(items, it);
    }
    return items;
}

/*  Every item's log-likelihoods under o equal the reference's loglik rows to 1e-6. */
static void s_check_loglik(const bt_choice_set *set, bt_model *m, const bt_tokenizer_t *tok,
                           const bt_choices_options *o, const cJSON *ref) {
    for (int i = 0; ref && i < N; i++) {
        double ll[BT_CHOICES_MAX];
        int n = 0, answer = -1;
        CHECK_OK(bt_choices_loglik(set, (size_t)i, m, tok, o, NULL, ll, &n, &answer, NULL));
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "loglik"), i);
        CHECK(answer == s_answers[i] && cJSON_GetArraySize(row) == n);
        for (int j = 0; j < n && j < cJSON_GetArraySize(row); j++)
            CHECK_REL(ll[j], cJSON_GetArrayItem(row, j)->valuedouble, 1e-6);
    }
}

/*  Item i's exemplars: k distinct indices below n, never i itself when own. */
static bool s_exemplars_ok(const size_t *picked, int64_t k, size_t i, size_t n, bool own) {
    bool ok = true;
    for (int64_t q = 0; q < k; q++) {
        ok = ok && picked[q] < n && !(own && picked[q] == i);
        for (int64_t r = 0; r < q; r++)
            ok = ok && picked[r] != picked[q];
    }
    return ok;
}

/*  Per-subject breakdown: the reference's per-subject acc and acc_norm; the subjects numbered by
    first appearance; a 65th subject refused; 64 subjects' metrics all fit one evaluation's. */
static void s_test_subjects(const bt_choice_set *set, const bt_evaluator_sums *all,
                            const cJSON *ref, const char *path) {
    CHECK(bt_choices_subjects(set) == 2);
    CHECK(!strcmp(bt_choices_subject_name(set, 0), "sums") &&
          !strcmp(bt_choices_subject_name(set, 1), "colours"));
    const cJSON *subjects = cJSON_GetObjectItem(ref, "subjects"), *sub;
    CHECK(cJSON_GetArraySize(subjects) == 2);
    cJSON_ArrayForEach(sub, subjects) {
        char key[64];
        const char *what[] = {"items", "acc", "acc_norm"};
        for (int w = 0; w < 3; w++) {
            snprintf(key, sizeof key, "subject.%s.%s", sub->string, what[w]);
            double want = cJSON_GetNumberValue(cJSON_GetObjectItem(sub, what[w]));
            printf("%s %.3f (reference %.3f)\n", key, s_metric_of(all, set, key), want);
            CHECK(s_metric_of(all, set, key) == want);
        }
    }
    CHECK(isnan(s_metric(all, "subject.sums.acc"))); /* without the set, no breakdown */
    bt_buf lines = {0};
    for (int k = 0; k <= BT_CHOICES_SUBJECTS; k++)
        bt_buf_printf(&lines,
                      "{\"context\": \"q\", \"choices\": [\"a\", \"b\"], \"answer\": 0, "
                      "\"subject\": \"s%d\"}\n",
                      k);
    size_t sixty_four = (size_t)(strstr(lines.data, "\"s64\"") - lines.data);
    while (sixty_four > 0 && lines.data[sixty_four - 1] != '\n')
        sixty_four--;
    CHECK_OK(bt_file_write(path, lines.data, sixty_four));
    bt_choice_set *most = NULL, *no = NULL;
    CHECK_OK(bt_choices_load(path, &most));
    CHECK(most && bt_choices_subjects(most) == BT_CHOICES_SUBJECTS);
    CHECK_OK(bt_file_write(path, lines.data, lines.len));
    CHECK(bt_choices_load(path, &no) == BT_EFORMAT && no == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "mc.jsonl:65: \"subject\": \"s64\" is one subject too "
                                        "many: a choices file may name at most 64");
    bt_buf_release(&lines);
    /* 64 subjects with items, and the shuffled pass: every metric fits */
    bt_evaluator_sums full;
    bt_evaluator_sums_init(&full, 1);
    full.mc_items = full.mc_shuffled = full.mc_bin_n[0] = BT_CHOICES_SUBJECTS;
    for (int k = 0; k < BT_CHOICES_SUBJECTS; k++)
        full.mc_subject_n[k] = 1;
    bt_eval_metric m[BT_EVAL_MAX_METRICS];
    int n = most ? bt_evaluator_metrics(&full, BT_EVAL_CHOICES, NULL, 0, most, m,
                                        BT_EVAL_MAX_METRICS, NULL)
                 : 0;
    CHECK(n == 9 + 3 * BT_CHOICES_SUBJECTS + 2 && n <= BT_EVAL_MAX_METRICS);
    CHECK(n > 2 && !strcmp(m[n - 3].name, "subject.s63.acc_norm") &&
          !strcmp(m[n - 1].name, "peak_rss_mb"));
    bt_choices_free(&most);
}

/*  Few-shot: k = 2 exemplars of the set's other items, and under letters from a pool file; the
    reference builds each prompt from the exemplars' indices and scores it. */
static void s_test_fewshot(const char *path, bt_model *m, const bt_tokenizer_t *tok) {
    CHECK_OK(bt_file_write(path, s_items, strlen(s_items)));
    bt_choice_set *set = NULL, *again = NULL;
    CHECK_OK(bt_choices_load(path, &set));
    CHECK_OK(bt_choices_load(path, &again)); /* as another process reads the file */
    const bt_choices_fewshot two = {.k = 2, .separator = "\n\n", .seed = 11};
    CHECK_OK(bt_choices_set_fewshot(set, &two));
    CHECK_OK(bt_choices_set_fewshot(again, &two));
    cJSON *req = cJSON_CreateObject(), *ex = cJSON_CreateArray();
    cJSON_AddNumberToObject(req, "bos", bt_tokenizer_bos(tok));
    cJSON_AddItemToObject(req, "items", s_items_json(s_ctx, s_ch, s_nch, s_answers, N));
    cJSON_AddStringToObject(req, "delimiter", " ");
    cJSON_AddStringToObject(req, "separator", "\n\n");
    bool differs = false;
    for (size_t i = 0; i < N; i++) {
        size_t picked[BT_SOURCE_FEWSHOT_MAX], other[BT_SOURCE_FEWSHOT_MAX];
        CHECK(bt_choices_exemplars(set, i, picked) == 2);
        CHECK(bt_choices_exemplars(again, i, other) == 2);
        CHECK(s_exemplars_ok(picked, 2, i, N, true));
        CHECK(picked[0] == other[0] && picked[1] == other[1]);
        int idx[2] = {(int)picked[0], (int)picked[1]};
        cJSON_AddItemToArray(ex, cJSON_CreateIntArray(idx, 2));
        bt_source_fewshot_pick(12, i, N, true, 2, other); /* another seed */
        differs = differs || other[0] != picked[0] || other[1] != picked[1];
    }
    CHECK(differs);
    cJSON_AddItemToObject(req, "exemplars", ex);
    char *text = cJSON_PrintUnformatted(req);
    cJSON *ref = s_reference(text);
    cJSON_free(text);
    s_check_loglik(set, m, tok, &s_text, ref);
    cJSON_Delete(ref);
    /* any shard layout gives an item its exemplars: two shards add up to one worker */
    bt_evaluator_sums all, split;
    s_one_and_two(set, m, tok, &s_text, &all, &split);
    CHECK(s_same_sums(&all, &split) && s_same_metrics(&all, &split, set));
    /* letters, exemplars from a pool file of three items */
    char pool_path[160];
    snprintf(pool_path, sizeof pool_path, "%s/pool.jsonl", s_dir);
    static const char *const pctx[3] = {"5+5=", "Grass is", "8-1="};
    static const char *const pch[3][4] = {{"10", "55"}, {"red", "green", "blue"}, {"9", "7"}};
    static const int pn[3] = {2, 3, 2}, pans[3] = {0, 1, 1};
    cJSON *pool_items = s_items_json(pctx, pch, pn, pans, 3), *line;
    bt_buf pool_text = {0};
    cJSON_ArrayForEach(line, pool_items) {
        char *one = cJSON_PrintUnformatted(line);
        bt_buf_printf(&pool_text, "%s\n", one);
        cJSON_free(one);
    }
    CHECK_OK(bt_file_write(pool_path, pool_text.data, pool_text.len));
    bt_buf_release(&pool_text);
    bt_choice_set *pool = NULL;
    CHECK_OK(bt_choices_load(pool_path, &pool));
    CHECK_OK(bt_choices_set_fewshot(
        set, &(bt_choices_fewshot){.k = 2, .separator = "\n---\n", .pool = pool, .seed = 3}));
    cJSON_ReplaceItemInObject(req, "separator", cJSON_CreateString("\n---\n"));
    cJSON_AddItemToObject(req, "pool", pool_items);
    cJSON_AddBoolToObject(req, "letters", true);
    ex = cJSON_CreateArray();
    for (size_t i = 0; i < N; i++) {
        size_t picked[BT_SOURCE_FEWSHOT_MAX];
        CHECK(bt_choices_exemplars(set, i, picked) == 2 && s_exemplars_ok(picked, 2, i, 3, false));
        int idx[2] = {(int)picked[0], (int)picked[1]};
        cJSON_AddItemToArray(ex, cJSON_CreateIntArray(idx, 2));
    }
    cJSON_ReplaceItemInObject(req, "exemplars", ex);
    text = cJSON_PrintUnformatted(req);
    ref = s_reference(text);
    cJSON_free(text);
    const bt_choices_options letters = {.delimiter = " ", .letters = true};
    s_check_loglik(set, m, tok, &letters, ref);
    cJSON_Delete(ref);
    cJSON_Delete(req);
    /* more exemplars than the other items: refused */
    CHECK(bt_choices_set_fewshot(again, &(bt_choices_fewshot){.k = N}) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "num_fewshot: expected an integer in [0, 64] and at most "
                                        "the 4 exemplars the dataset's other items holds, got 5");
    /* a chat template: the context (its exemplars too) is the user's turn, the continuations the
       choices without the delimiter, as the harness scores multiple choice under a template */
    CHECK_OK(bt_choices_set_chat(again, "chatml", "Pick."));
    size_t picked[BT_SOURCE_FEWSHOT_MAX];
    bt_choices_exemplars(again, 0, picked);
    bt_buf ctx = {0};
    bt_buf_puts(&ctx, "<|im_start|>system\nPick.<|im_end|>\n<|im_start|>user\n");
    for (int q = 0; q < 2; q++)
        bt_buf_printf(&ctx, "%s %s\n\n", s_ctx[picked[q]], s_ch[picked[q]][s_answers[picked[q]]]);
    bt_buf_puts(&ctx, "2+2=<|im_end|>\n<|im_start|>assistant\n");
    bt_nll_item items[3] = {
        {ctx.data, "4", false}, {ctx.data, "5", false}, {ctx.data, "22", false}};
    double want[3], ll[BT_CHOICES_MAX];
    int64_t ntok[3];
    int n = 0, answer = -1;
    CHECK_OK(bt_evaluator_nll(m, tok, items, 3, want, ntok));
    CHECK_OK(bt_choices_loglik(again, 0, m, tok, &s_text, NULL, ll, &n, &answer, NULL));
    CHECK(n == 3);
    for (int j = 0; j < 3; j++)
        CHECK(ll[j] == -want[j]);
    bt_buf_release(&ctx);
    bt_choices_free(&pool);
    bt_choices_free(&again);
    bt_choices_free(&set);
}

/*  A config's suite: a choices dataset with num_fewshot, fewshot_source and the task's chat
    template scores as a set given them by hand (exemplars from run.seed), and its metrics name
    the subjects. */
static void s_test_suite(const char *path, bt_model *m, const bt_tokenizer_t *tok) {
    char pool_path[160], train[160], json[1024];
    snprintf(pool_path, sizeof pool_path, "%s/pool.jsonl", s_dir);
    snprintf(train, sizeof train, "%s/train.jsonl", s_dir);
    CHECK_OK(bt_file_write(path, s_items, strlen(s_items)));
    static const char prompts[] = "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n"
                                  "{\"prompt\": \"2+3=\", \"answer\": \"5\"}\n";
    CHECK_OK(bt_file_write(train, prompts, strlen(prompts)));
    snprintf(json, sizeof json,
             "{\"run\": {\"seed\": 9}, \"task\": {\"kind\": \"jsonl\", \"train\": \"%s\","
             " \"eval\": \"%s\", \"chat_template\": \"chatml\", \"system_prompt\": \"Pick.\"},"
             " \"eval\": {\"datasets\": [{\"name\": \"mc\", \"kind\": \"choices\","
             " \"source\": \"%s\", \"num_fewshot\": 2, \"fewshot_source\": \"%s\","
             " \"choices_letters\": true}]}}",
             train, train, path, pool_path);
    bt_config *cfg = malloc(sizeof *cfg);
    CHECK_OK(bt_config_parse(json, "mc.json", NULL, 0, cfg));
    bt_source_t *task = NULL;
    CHECK_OK(bt_config_new_task(cfg, &task));
    bt_eval_suite suite;
    CHECK_OK(bt_config_eval_suite(cfg, task, &suite));
    bt_choice_set *set = NULL, *pool = NULL;
    CHECK_OK(bt_choices_load(path, &set));
    CHECK_OK(bt_choices_load(pool_path, &pool));
    CHECK_OK(bt_choices_set_chat(set, "chatml", "Pick."));
    CHECK_OK(bt_choices_set_fewshot(
        set, &(bt_choices_fewshot){.k = 2, .separator = "\n\n", .pool = pool, .seed = 9}));
    bt_evaluator_sums from_suite, by_hand;
    bt_evaluator_sums_init(&by_hand, 1);
    CHECK_OK(bt_eval_suite_run(&suite, 0, m, tok, 0, N, false, 0, &from_suite));
    CHECK_OK(bt_choices_run(set, m, tok, &(bt_choices_options){.delimiter = " ", .letters = true},
                            0, N, &by_hand));
    CHECK(s_same_sums(&from_suite, &by_hand));
    bt_eval_metric metrics[BT_EVAL_MAX_METRICS];
    int n = bt_eval_suite_metrics(&suite, 0, &from_suite, metrics, BT_EVAL_MAX_METRICS, NULL);
    bool named = false;
    for (int k = 0; k < n; k++)
        named = named || (!strcmp(metrics[k].name, "subject.colours.acc_norm") &&
                          metrics[k].value == s_metric_of(&by_hand, set, metrics[k].name));
    CHECK(named);
    bt_choices_free(&pool);
    bt_choices_free(&set);
    bt_eval_suite_release(&suite);
    bt_source_destroy(&task);
    free(cfg);
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("SKIP: /usr/bin/python3 missing: the numpy reference cannot run\n");
        return 77;
    }
    char path[128], cmd[512];
    CHECK(mkdtemp(s_dir) != NULL);
    snprintf(path, sizeof path, "%s/mc.jsonl", s_dir);
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
    CHECK_OK(bt_model_save(m, NULL, s_dir));
    /* the reference's log-likelihoods, acc and acc_norm */
    char *req = s_request(tok);
    cJSON *ref = s_reference(req);
    free(req);
    double p_right = 0, ece_conf[BT_CHOICES_BINS] = {0}, ece_right[BT_CHOICES_BINS] = {0};
    s_check_loglik(set, m, tok, &s_text, ref);
    for (int i = 0; ref && i < N; i++) {
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "loglik"), i);
        double top = -INFINITY, sum = 0;
        int pred = 0;
        for (int j = 0; j < cJSON_GetArraySize(row); j++) {
            double want = cJSON_GetArrayItem(row, j)->valuedouble;
            pred = want > top ? j : pred;
            top = fmax(top, want);
        }
        for (int j = 0; j < cJSON_GetArraySize(row); j++)
            sum += exp(cJSON_GetArrayItem(row, j)->valuedouble - top);
        double right = exp(cJSON_GetArrayItem(row, s_answers[i])->valuedouble - top) / sum;
        int bin = (int)fmin(floor(10.0 / sum), 9);
        p_right += right / N;
        ece_conf[bin] += 1.0 / sum;
        ece_right[bin] += pred == s_answers[i];
    }
    double ece = 0;
    for (int b = 0; b < BT_CHOICES_BINS; b++)
        ece += fabs(ece_conf[b] - ece_right[b]) / N;
    /* one worker over all items, and two shards: the same sums, subjects included */
    bt_evaluator_sums all, a;
    s_one_and_two(set, m, tok, &s_text, &all, &a);
    CHECK(all.mc_items == N && s_same_sums(&all, &a) && s_same_metrics(&all, &a, set));
    CHECK(all.mc_subject_n[0] == 3 && all.mc_subject_n[1] == 1); /* item 3 names none */
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
    /* the sums travel: a RESULT's fields read back equal */
    bt_msg_t *msg = bt_msg_new(BT_MSG_RESULT);
    bt_evaluator_sums back;
    CHECK_OK(bt_sums_to_msg(&all, msg));
    CHECK_OK(bt_sums_from_msg(msg, &back));
    CHECK(s_same_sums(&back, &all));
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
    snprintf(spath, sizeof spath, "%s/shuffled.jsonl", s_dir);
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
    s_test_subjects(set, &all, ref, path);
    cJSON_Delete(ref);
    /* malformed lines, and subjects that cannot name a metric */
    const char *bad[][2] = {
        {"{\"context\": \"x\", \"choices\": [\"a\"], \"answer\": 0}\n",
         "mc.jsonl:1: expected \"choices\": an array of 2 to 26 non-empty strings"},
        {"\n{\"context\": \"x\", \"choices\": [\"a\", \"b\"], \"answer\": \"C\"}\n",
         "mc.jsonl:2: expected \"answer\": the index of a choice, or its letter"},
        {"{\"choices\": [\"a\", \"b\"], \"answer\": 1}\n",
         "mc.jsonl:1: expected a string \"context\" (or \"question\")"},
        {"{\"context\": \"x\", \"choices\": [\"a\", \"b\"], \"answer\": 0, \"subject\": \"a.b\"}\n",
         "mc.jsonl:1: \"subject\": expected 1 to 40 letters, digits, '_' or '-' (it names the "
         "metrics subject.NAME.acc), got \"a.b\""},
        {"\n{\"context\": \"x\", \"choices\": [\"a\", \"b\"], \"answer\": 0, \"subject\": 7}\n",
         "mc.jsonl:2: \"subject\": expected 1 to 40 letters, digits, '_' or '-' (it names the "
         "metrics subject.NAME.acc), got not a string"}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        bt_choice_set *no = NULL;
        CHECK_OK(bt_file_write(path, bad[k][0], strlen(bad[k][0])));
        CHECK(bt_choices_load(path, &no) == BT_EFORMAT && no == NULL);
        CHECK_STR_CONTAINS(bt_last_error(), bad[k][1]);
    }
    bt_choices_free(&set);
    s_test_fewshot(path, m, tok);
    s_test_suite(path, m, tok);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    CHECK(system(cmd) == 0);
    return check_exit();
}
