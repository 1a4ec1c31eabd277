/*  test_probe_file.c — probes from a file (eval.probes_source): 40 of them, targets and pairs,
    after the config's own two.  Each probe's NLL (a target's after its prompt in the chat
    template, a pair's texts as written) equals tests/ref/choices_ref.py's float64 numpy forward
    pass to 1e-6, and its metrics follow from those log-likelihoods; the limit (256 in all) holds
    on the wire and in one eval line; a name used twice, the probe past the limit and malformed
    lines are refused naming the file and the line; `baton run` writes eval lines naming all 42,
    with `baton eval init`'s numbers, whose cache evaluates a changed file again but not a
    reformatted one. */
#define _DEFAULT_SOURCE
#include "baton/buf.h"
#include "baton/config.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/jsonl.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "check.h"
#include "runs.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

enum { S_FILE = 40, S_ALL = S_FILE + 2, S_DEFAULT = 38 /* the file line without a name */ };

static char s_tmp[64];

/*  The config's own probes, then S_FILE more in the file. */
static const char s_config_probes[] =
    "[{\"name\": \"cfg_sum\", \"prompt\": \"12+7=\", \"target\": \"19\"},"
    " {\"name\": \"cfg_order\", \"better\": \"58+67=125\", \"worse\": \"58+67=115\"}]";

/*  File probe i: even i a target probe "a+b=" -> "c", odd i a pair ("a+b=c" against a wrong sum).
 */
static void s_probe(int i, bt_eval_probe *p) {
    int a = (3 * i) % 50 + 1, b = (7 * i) % 40 + 2;
    memset(p, 0, sizeof *p);
    if (i == S_DEFAULT)
        snprintf(p->name, sizeof p->name, "p%d", i + 2); /* its index among all the probes */
    else
        snprintf(p->name, sizeof p->name, i % 2 ? "pair%02d" : "t%02d", i);
    if (i % 2 == 0) {
        snprintf(p->prompt, sizeof p->prompt, "%d+%d=", a, b);
        snprintf(p->target, sizeof p->target, "%d", a + b);
    } else {
        snprintf(p->better, sizeof p->better, "%d+%d=%d", a, b, a + b);
        snprintf(p->worse, sizeof p->worse, "%d+%d=%d", a, b, a + b + 10);
    }
}

/*  The file: one line per probe, a blank line and a line of blanks after the tenth. */
static void s_write_file(const char *path) {
    bt_buf b = {0};
    for (int i = 0; i < S_FILE; i++) {
        bt_eval_probe p;
        s_probe(i, &p);
        if (i == S_DEFAULT)
            bt_buf_puts(&b, "{");
        else
            bt_buf_printf(&b, "{\"name\": \"%s\", ", p.name);
        if (p.target[0])
            bt_buf_printf(&b, "\"prompt\": \"%s\", \"target\": \"%s\"}\n", p.prompt, p.target);
        else
            bt_buf_printf(&b, "\"better\": \"%s\", \"worse\": \"%s\"}\n", p.better, p.worse);
        if (i == 9)
            bt_buf_puts(&b, "\n \t\r\n");
    }
    CHECK_OK(bt_file_write(path, b.data, b.len));
    bt_buf_release(&b);
}

static bt_config *s_parse(const char *json) {
    bt_config *cfg = malloc(sizeof *cfg);
    if (bt_config_parse(json, "probes.json", NULL, 0, cfg) != BT_OK) {
        fprintf(stderr, "%s\n", bt_last_error());
        free(cfg);
        return NULL;
    }
    return cfg;
}

/*  A config over a chat model with the two probes of its own and the file. */
static bt_config *s_chat_config(const char *file) {
    char train[128], json[2048];
    snprintf(train, sizeof train, "%s/train.jsonl", s_tmp);
    const char *lines = "{\"prompt\": \"3+4=\", \"answer\": \"7\"}\n";
    CHECK_OK(bt_file_write(train, lines, strlen(lines)));
    snprintf(json, sizeof json,
             "{\"task\": {\"kind\": \"jsonl\", \"train\": \"%s\", \"chat_template\": \"chatml\","
             "  \"system_prompt\": \"Add.\"},"
             " \"eval\": {\"probes\": %s, \"probes_source\": \"%s\"}}",
             train, s_config_probes, file);
    return s_parse(json);
}

/*  The chat config over file, its files checked, its task and its evaluation suite; false (with
    nothing to release) when any fails. */
static bool s_suite(const char *file, bt_config **cfg, bt_source_t **task, bt_eval_suite *suite) {
    *cfg = s_chat_config(file);
    *task = NULL;
    CHECK(*cfg != NULL);
    if (*cfg && bt_config_check_files(*cfg, "probes.json") == BT_OK &&
        bt_config_new_source(*cfg, 0, task, NULL) == BT_OK &&
        bt_config_eval_suite(*cfg, *task, suite) == BT_OK)
        return true;
    fprintf(stderr, "%s\n", bt_last_error());
    CHECK(false);
    bt_source_destroy(task);
    free(*cfg);
    return false;
}

/*  A small random model on the CPU. */
static bt_model *s_model(int64_t hidden, int64_t layers, uint64_t seed) {
    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.hidden_size = hidden;
    mc.intermediate_size = 2 * hidden;
    mc.num_hidden_layers = layers;
    return bt_model_new(&mc, bt_cpu(), seed);
}

/*  Appends the token ids of text (BOS first with bos) as a JSON array. */
static void s_ids(bt_buf *b, const bt_tokenizer_t *tok, const char *text, bool bos) {
    int32_t ids[512];
    size_t got = 0;
    CHECK_OK(bt_tokenizer_encode(tok, text, strlen(text), bos, ids, 512, &got));
    bt_buf_puts(b, "[");
    for (size_t t = 0; t < got; t++)
        bt_buf_printf(b, "%s%d", t ? ", " : "", ids[t]);
    bt_buf_puts(b, "]");
}

/*  choices_ref.py's request: per probe, a target's templated prompt (the chatml text written out
    here, not bt_chat_apply's) with its target, or BOS alone with the pair's two texts. */
static char *s_request(const bt_eval_probe *probes, int n, const bt_tokenizer_t *tok) {
    bt_buf b = {0};
    bt_buf_puts(&b, "[");
    for (int i = 0; i < n; i++) {
        const bt_eval_probe *p = &probes[i];
        char prompt[512];
        snprintf(prompt, sizeof prompt,
                 "<|im_start|>system\nAdd.<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n"
                 "<|im_start|>assistant\n",
                 p->prompt);
        bt_buf_puts(&b, i ? ", {\"context\": " : "{\"context\": ");
        s_ids(&b, tok, p->target[0] ? prompt : "", true);
        bt_buf_puts(&b, ", \"continuations\": [");
        s_ids(&b, tok, p->target[0] ? p->target : p->better, false);
        if (!p->target[0]) {
            bt_buf_puts(&b, ", ");
            s_ids(&b, tok, p->worse, false);
        }
        bt_buf_printf(&b, "], \"lengths\": [1%s], \"answer\": 0}", p->target[0] ? "" : ", 1");
    }
    bt_buf_puts(&b, "]");
    return bt_buf_detach(&b, NULL);
}

static const bt_eval_metric *s_find(const bt_eval_metric *m, int n, const char *fmt,
                                    const char *name) {
    char key[96];
    snprintf(key, sizeof key, fmt, name);
    for (int i = 0; i < n; i++)
        if (!strcmp(m[i].name, key))
            return &m[i];
    fprintf(stderr, "no metric %s\n", key);
    return NULL;
}

/*  Each probe of the suite against the numpy reference, and its metrics from the reference's
    log-likelihoods. */
static void test_against_reference(void) {
    char file[128], cmd[512], reqpath[128];
    snprintf(file, sizeof file, "%s/probes.jsonl", s_tmp);
    s_write_file(file);
    bt_config *cfg = NULL;
    bt_source_t *task = NULL;
    bt_eval_suite suite;
    if (!s_suite(file, &cfg, &task, &suite))
        return;
    /* the list: eval.probes, then the file's lines in order */
    bt_eval_probe *list = NULL;
    int64_t n = 0;
    CHECK_OK(bt_config_probes(cfg, &list, &n));
    CHECK(n == S_ALL);
    for (int i = 0; list && i < S_FILE && n == S_ALL; i++) {
        bt_eval_probe want;
        s_probe(i, &want);
        CHECK(!memcmp(&list[i + 2], &want, sizeof want));
    }
    CHECK(list && !strcmp(list[0].name, "cfg_sum") && !strcmp(list[1].name, "cfg_order"));
    /* the suite's probes dataset, added because none was listed */
    int ds = cfg->eval.n_datasets - 1;
    CHECK(cfg->eval.datasets[ds].kind == BT_EVAL_PROBES);
    CHECK(bt_eval_suite_size(&suite, ds) == S_ALL);
    bt_model *m = s_model(32, 2, 21);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    CHECK_OK(bt_model_save(m, NULL, s_tmp));
    bt_evaluator_sums s;
    CHECK_OK(bt_eval_suite_run(&suite, ds, m, tok, 0, S_ALL, false, 0, &s));
    CHECK(s.n_probes == S_ALL);
    /* the reference */
    char *req = list ? s_request(list, (int)n, tok) : NULL;
    snprintf(reqpath, sizeof reqpath, "%s/req.json", s_tmp);
    CHECK_OK(bt_file_write(reqpath, req, req ? strlen(req) : 0));
    free(req);
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/choices_ref.py %s < %s",
             src ? src : "..", s_tmp, reqpath);
    static char out[1 << 16];
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    cJSON *ref = cJSON_Parse(out), *ll = cJSON_GetObjectItem(ref, "loglik");
    CHECK(cJSON_GetArraySize(ll) == S_ALL);
    bt_eval_metric metrics[BT_EVAL_MAX_METRICS];
    double primary = NAN;
    int nm = bt_evaluator_metrics(&s, BT_EVAL_PROBES, suite.listed, suite.n_probes, NULL, metrics,
                                  BT_EVAL_MAX_METRICS, &primary);
    CHECK(nm == 21 + 21 * 4 + 1 + 2); /* logp, the pairs' four, pairs_accuracy, tokens_per_s, rss */
    int right = 0, pairs = 0;
    for (int i = 0; i < S_ALL && cJSON_GetArraySize(ll) == S_ALL && list; i++) {
        const bt_eval_probe *p = &list[i];
        const cJSON *row = cJSON_GetArrayItem(ll, i);
        int32_t ids[512];
        size_t nb = 0, nw = 0;
        bt_tokenizer_encode(tok, p->target[0] ? p->target : p->better,
                            strlen(p->target[0] ? p->target : p->better), false, ids, 512, &nb);
        CHECK(s.probe_tokens[i][0] == (int64_t)nb);
        double b = cJSON_GetArrayItem(row, 0)->valuedouble; /* log-likelihood */
        CHECK_REL(s.probe_nll[i][0], -b, 1e-6);
        if (p->target[0]) {
            const bt_eval_metric *lp = s_find(metrics, nm, "probe.%s.logp", p->name);
            CHECK(lp && fabs(lp->value - b) <= 1e-6 * fabs(b));
            CHECK(s.probe_tokens[i][1] == 0);
            continue;
        }
        double w = cJSON_GetArrayItem(row, 1)->valuedouble;
        bt_tokenizer_encode(tok, p->worse, strlen(p->worse), false, ids, 512, &nw);
        CHECK(s.probe_tokens[i][1] == (int64_t)nw);
        CHECK_REL(s.probe_nll[i][1], -w, 1e-6);
        double mb = -b / (double)nb, mw = -w / (double)nw; /* mean NLL per token */
        const bt_eval_metric *ok = s_find(metrics, nm, "pair.%s.ok", p->name),
                             *bp = s_find(metrics, nm, "pair.%s.better_ppl", p->name),
                             *wp = s_find(metrics, nm, "pair.%s.worse_ppl", p->name),
                             *mg = s_find(metrics, nm, "pair.%s.margin", p->name);
        CHECK(ok && bp && wp && mg);
        if (!(ok && bp && wp && mg))
            continue;
        CHECK(fabs(bp->value - exp(mb)) <= 1e-6 * exp(mb));
        CHECK(fabs(wp->value - exp(mw)) <= 1e-6 * exp(mw));
        CHECK(fabs(mg->value - (mw - mb)) <= 1e-6);
        CHECK(ok->value == (mg->value > 0));
        right += mw > mb;
        pairs++;
    }
    const bt_eval_metric *acc = s_find(metrics, nm, "%s", "pairs_accuracy");
    CHECK(pairs == 21 && acc && acc->value == (double)right / pairs && primary == acc->value);
    printf("42 probes: pairs_accuracy %.4f (%d of %d), first logp %.6f\n", (double)right / pairs,
           right, pairs, metrics[0].value);
    cJSON_Delete(ref);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    bt_eval_suite_release(&suite);
    bt_source_destroy(&task);
    free(list);
    free(cfg);
}

/*  The whole limit: 2 + 254 probes evaluate, every one's numbers travel in a RESULT of just
    those rows, and the eval line of 255 pairs with the longest names fits one JSON line. */
static void test_the_limit(void) {
    char file[128];
    snprintf(file, sizeof file, "%s/limit.jsonl", s_tmp);
    bt_buf b = {0};
    for (int i = 0; i < BT_EVAL_MAX_PROBES - 2; i++)
        bt_buf_printf(&b,
                      "{\"name\": \"pair_with_a_long_name_%09d\", \"better\": \"%d+1=%d\","
                      " \"worse\": \"%d+1=%d\"}\n",
                      i, i, i + 1, i, i + 2);
    CHECK_OK(bt_file_write(file, b.data, b.len));
    bt_buf_release(&b);
    bt_config *cfg = NULL;
    bt_source_t *task = NULL;
    bt_eval_suite suite;
    if (!s_suite(file, &cfg, &task, &suite))
        return;
    CHECK(suite.n_probes == BT_EVAL_MAX_PROBES);
    bt_model *m = s_model(16, 1, 3);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    bt_evaluator_sums s, back;
    CHECK_OK(bt_eval_suite_run(&suite, cfg->eval.n_datasets - 1, m, tok, 0, BT_EVAL_MAX_PROBES,
                               false, 0, &s));
    CHECK(s.n_probes == BT_EVAL_MAX_PROBES && s.probe_tokens[BT_EVAL_MAX_PROBES - 1][1] > 0);
    /* the wire: (n_probes, 2) rows only, read back exactly */
    bt_msg_t *msg = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_sums_to_msg(&s, msg));
    bt_msg_tensor t;
    CHECK_OK(bt_msg_get_tensor(msg, "probe_nll", BT_F64, 2, &t));
    CHECK(t.shape[0] == BT_EVAL_MAX_PROBES && t.shape[1] == 2);
    CHECK_OK(bt_sums_from_msg(msg, &back));
    CHECK(!memcmp(&s, &back, sizeof s));
    bt_msg_destroy(&msg);
    /* one more than the limit is refused on the wire too */
    s.n_probes = 2;
    msg = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_sums_to_msg(&s, msg));
    CHECK_OK(bt_msg_get_tensor(msg, "probe_nll", BT_F64, 2, &t));
    CHECK(t.shape[0] == 2); /* a small probe set sends a small tensor */
    CHECK_OK(bt_msg_set_int(msg, "n_probes", BT_EVAL_MAX_PROBES + 1));
    CHECK(bt_sums_from_msg(msg, &back) == BT_EFORMAT);
    bt_msg_destroy(&msg);
    s.n_probes = BT_EVAL_MAX_PROBES;
    /* every metric of it in one line, as the controller writes eval lines */
    bt_eval_metric metrics[BT_EVAL_MAX_METRICS];
    int nm = bt_evaluator_metrics(&s, BT_EVAL_PROBES, suite.listed, suite.n_probes, NULL, metrics,
                                  BT_EVAL_MAX_METRICS, NULL);
    CHECK(nm == 255 * 4 + 1 + 1 + 2);
    static bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "eval");
    bt_jsonl_str(&line, "dataset", "probes");
    for (int i = 0; i < nm; i++)
        bt_jsonl_num(&line, metrics[i].name, i % 2 ? -1.2345678901234567e-300 : metrics[i].value);
    CHECK(!line.overflow);
    printf("the eval line of %d probes: %zu bytes of %d\n", BT_EVAL_MAX_PROBES, line.len,
           BT_JSONL_MAX);
    bt_tokenizer_destroy(&tok);
    bt_model_destroy(&m);
    bt_eval_suite_release(&suite);
    bt_source_destroy(&task);
    free(cfg);
}

/*  A file of these lines is refused, the error holding want. */
static void s_refused(const char *lines, const char *want) {
    char file[128];
    snprintf(file, sizeof file, "%s/bad.jsonl", s_tmp);
    CHECK_OK(bt_file_write(file, lines, strlen(lines)));
    bt_config *cfg = s_chat_config(file);
    CHECK(cfg != NULL);
    if (!cfg)
        return;
    CHECK(bt_config_check_files(cfg, "probes.json") == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), want);
    bt_eval_probe *list = NULL;
    int64_t n = 0;
    CHECK(bt_config_probes(cfg, &list, &n) != BT_OK && list == NULL && n == 0);
    free(cfg);
}

static void test_refusals(void) {
    const char *t = "\"prompt\": \"1+1=\", \"target\": \"2\"";
    char lines[8192], want[256];
    /* a name twice: in the file, and across the config's list and the file */
    snprintf(lines, sizeof lines,
             "{\"name\": \"a\", %s}\n{\"name\": \"b\", %s}\n\n{\"name\": \"a\", %s}\n", t, t, t);
    snprintf(
        want, sizeof want,
        "probes.json: eval.probes_source: %s/bad.jsonl:4: name: \"a\" is used twice (line 1 first)",
        s_tmp);
    s_refused(lines, want);
    snprintf(lines, sizeof lines, "{\"name\": \"x\", %s}\n{\"name\": \"cfg_order\", %s}\n", t, t);
    s_refused(lines, "bad.jsonl:2: name: \"cfg_order\" is used twice (eval.probes[1] first)");
    /* a default name is its index among all, so it may meet a given one */
    snprintf(lines, sizeof lines, "{\"name\": \"p3\", %s}\n{%s}\n", t, t);
    s_refused(lines, "bad.jsonl:2: name: \"p3\" is used twice (line 1 first)");
    /* the 257th probe: the 255th line after the config's 2 */
    bt_buf b = {0};
    bt_buf_puts(&b, "\n"); /* blank lines count as lines, not probes */
    for (int i = 0; i < BT_EVAL_MAX_PROBES - 1; i++)
        bt_buf_printf(&b, "{\"name\": \"q%d\", %s}\n", i, t);
    s_refused(b.data, "bad.jsonl:256: one probe too many: at most 256 in all, eval.probes' 2 and "
                      "254 lines of this file");
    bt_buf_release(&b);
    /* malformed lines */
    s_refused("{\"name\": \"a\", \"prompt\": \"1=\", \"target\": \"1\"}\n{oops\n",
              "bad.jsonl:2: expected a JSON object of a probe");
    s_refused("[1, 2]\n", "bad.jsonl:1: expected a JSON object of a probe");
    s_refused("{\"name\": \"a\", \"prompt\": \"1+1=\"}\n",
              "bad.jsonl:1: expected either \"prompt\" and a non-empty \"target\", or non-empty "
              "\"better\" and \"worse\"");
    s_refused("{\"name\": \"a\", \"prompt\": \"1+1=\", \"target\": \"2\", \"better\": \"x\", "
              "\"worse\": \"y\"}\n",
              "bad.jsonl:1: expected either");
    s_refused("{\"name\": \"a\", \"better\": \"x\"}\n", "bad.jsonl:1: expected either");
    s_refused("{\"name\": \"a\", \"text\": \"x\"}\n", "bad.jsonl:1: text: unknown key");
    s_refused("{\"name\": 3, \"better\": \"x\", \"worse\": \"y\"}\n",
              "bad.jsonl:1: name: expected a string, got 3");
    s_refused("{\"name\": \"a b\", \"better\": \"x\", \"worse\": \"y\"}\n",
              "bad.jsonl:1: name: expected a name of letters");
    s_refused("{\"name\": \"a\", \"name\": \"b\", \"better\": \"x\", \"worse\": \"y\"}\n",
              "bad.jsonl:1: name: duplicate key");
    char lng[400];
    memset(lng, '7', 300);
    lng[300] = '\0';
    snprintf(lines, sizeof lines, "{\"name\": \"a\", \"prompt\": \"1=\", \"target\": \"%s\"}\n",
             lng);
    s_refused(lines, "bad.jsonl:1: target: expected a string of at most 255 bytes");
    s_refused("\n  \n", "bad.jsonl: no probes");
    /* a file that is not there */
    char json[1024];
    snprintf(json, sizeof json, "{\"eval\": {\"probes_source\": \"%s/none.jsonl\"}}", s_tmp);
    bt_config *cfg = s_parse(json);
    CHECK(cfg && cfg->eval.n_datasets == 2 && cfg->eval.datasets[1].kind == BT_EVAL_PROBES);
    CHECK(cfg && bt_config_check_files(cfg, "probes.json") == BT_EINVAL);
    snprintf(want, sizeof want, "probes.json: eval.probes_source: \"%s/none.jsonl\": no such file",
             s_tmp);
    CHECK_STR_CONTAINS(bt_last_error(), want);
    free(cfg);
    /* a probes dataset reads its probes from the two keys, never from its own source */
    cfg = s_parse("{\"eval\": {\"datasets\": [{\"name\": \"p\", \"kind\": \"probes\","
                  " \"source\": \"x.jsonl\"}], \"probes_source\": \"x.jsonl\"}}");
    CHECK(cfg == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "probes come from eval.probes and eval.probes_source");
}

/* ---- through `baton run` and `baton eval` ------------------------------------------------------
 */

/*  The results of model k of a `baton eval` JSON for dataset "probes". */
static cJSON *s_results(const char *rel, cJSON **root) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", s_tmp, rel);
    CHECK_OK(bt_file_read(path, SIZE_MAX, &text, NULL));
    *root = cJSON_Parse(text ? text : "");
    free(text);
    cJSON *models = cJSON_GetObjectItem(*root, "models");
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(models, 0), "results"),
                               "probes");
}

/*  Every field of mine (but the two that measure the machine) has its value in line. */
static int s_same(const cJSON *mine, const cJSON *line) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, mine) {
        if (!strcmp(v->string, "tokens_per_s") || !strcmp(v->string, "peak_rss_mb"))
            continue;
        const cJSON *w = cJSON_GetObjectItem(line, v->string);
        CHECK(cJSON_IsNumber(w) ? w->valuedouble == v->valuedouble : cJSON_IsNull(v));
        n++;
    }
    return n;
}

static void test_run_and_eval(void) {
    char file[128], config[128], json[2048];
    static char out[1 << 16];
    snprintf(file, sizeof file, "%s/run_probes.jsonl", s_tmp);
    s_write_file(file);
    snprintf(config, sizeof config, "%s/run.json", s_tmp);
    snprintf(json, sizeof json,
             "{\"run\": {\"name\": \"probes\", \"seed\": 5}," RUNS_MODEL_TINY
             " \"task\": {\"kind\": \"arithmetic\", \"digits\": 2, \"heldout_size\": 20},"
             " \"grpo\": {\"steps\": 1, \"group_size\": 2, \"prompts_per_step\": 2,"
             "  \"max_new_tokens\": 4},"
             " \"eval\": {\"heldout_count\": 20,"
             "  \"datasets\": [{\"name\": \"probes\", \"kind\": \"probes\"}],"
             "  \"probes\": %s, \"probes_source\": \"%s\"},"
             " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1}}",
             s_config_probes, file);
    CHECK_OK(bt_file_write(config, json, strlen(json)));
    CHECK(runs_baton(s_tmp, "", "run run.json --run-dir run", out, sizeof out) == 0);
    CHECK(runs_baton(s_tmp, "", "eval init --config run.json --out init.json", out, sizeof out) ==
          0);
    cJSON *root = NULL, *mine = s_results("init.json", &root);
    CHECK(cJSON_GetArraySize(mine) == 21 + 21 * 4 + 1 + 2);
    /* the eval lines: step 0 and the final one, each naming every probe */
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/run/metrics.jsonl", s_tmp);
    CHECK_OK(bt_file_read(path, SIZE_MAX, &text, NULL));
    int lines = 0, compared = 0;
    for (char *l = text ? strtok(text, "\n") : NULL; l; l = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(l);
        const char *ds = cJSON_GetStringValue(cJSON_GetObjectItem(o, "dataset"));
        if (ds && !strcmp(ds, "probes")) {
            lines++;
            for (int i = -2; i < S_FILE; i++) {
                bt_eval_probe p;
                if (i >= 0)
                    s_probe(i, &p);
                const char *name = i == -2 ? "cfg_sum" : i == -1 ? "cfg_order" : p.name;
                bool pair = i == -1 || (i >= 0 && i % 2);
                char key[96];
                snprintf(key, sizeof key, pair ? "pair.%s.margin" : "probe.%s.logp", name);
                CHECK(cJSON_IsNumber(cJSON_GetObjectItem(o, key)));
            }
            const cJSON *step = cJSON_GetObjectItem(o, "step");
            if (cJSON_IsNumber(step) && step->valuedouble == 0)
                compared += s_same(mine, o);
        }
        cJSON_Delete(o);
    }
    free(text);
    CHECK(lines == 2 && compared == 21 + 21 * 4 + 1);
    /* the cache: a reformatted file is read from it, a changed line is evaluated again */
    const char *inc = "eval init --config run.json --mode incremental --cache cache";
    CHECK(runs_baton(s_tmp, "", inc, out, sizeof out) == 0);
    CHECK(strstr(out, "cached:") == NULL);
    CHECK(runs_baton(s_tmp, "", inc, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "cached: init probes");
    char *body = NULL;
    CHECK_OK(bt_file_read(file, SIZE_MAX, &body, NULL));
    bt_buf b = {0};
    bt_buf_puts(&b, "\n\n");
    for (const char *c = body; c && *c; c++) /* "a": "b" -> "a":"b", a blank line per line */
        if (!(*c == ' ' && c > body && c[-1] == ':'))
            bt_buf_put(&b, c, 1);
    CHECK_OK(bt_file_write(file, b.data, b.len));
    CHECK(runs_baton(s_tmp, "", inc, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "cached: init probes");
    char *t00 = strstr(b.data, "\"target\":\"3\"}"); /* probe t00: 1+2=3 */
    CHECK(t00 != NULL);
    if (t00)
        t00[10] = '4';
    CHECK_OK(bt_file_write(file, b.data, b.len));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s --out changed.json", inc);
    CHECK(runs_baton(s_tmp, "", cmd, out, sizeof out) == 0);
    CHECK(strstr(out, "cached:") == NULL);
    cJSON *changed_root = NULL, *changed = s_results("changed.json", &changed_root);
    double before = cJSON_GetObjectItem(mine, "probe.t00.logp")->valuedouble;
    double after = cJSON_GetObjectItem(changed, "probe.t00.logp")->valuedouble;
    CHECK(before != after);
    CHECK(cJSON_GetObjectItem(mine, "probe.t02.logp")->valuedouble ==
          cJSON_GetObjectItem(changed, "probe.t02.logp")->valuedouble);
    bt_buf_release(&b);
    free(body);
    cJSON_Delete(changed_root);
    cJSON_Delete(root);
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("SKIP: /usr/bin/python3 missing: the numpy reference cannot run\n");
        return 77;
    }
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_probe_file_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_against_reference();
    test_the_limit();
    test_refusals();
    test_run_and_eval();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
