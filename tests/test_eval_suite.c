/*  test_eval_suite.c — a config's evaluation suite prompts like its training data, and few-shot:
   with task.chat_template and task.system_prompt, an eval dataset with its own JSONL source shows
   its prompts in the template (as the held-out set does), and a target probe is scored after its
    templated prompt: its logp is the model's NLL of the target after the templated prompt (checked
    by a direct bt_evaluator_nll call), not after the bare one; pair probes are scored as written.
 */
#define _DEFAULT_SOURCE
#include "baton/config.h"
#include "baton/evaluator.h"
#include "baton/fileio.h"
#include "baton/model.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static const char s_json[] =
    "{\"task\": {\"kind\": \"jsonl\", \"train\": \"%s\", \"eval\": \"%s\","
    "  \"chat_template\": \"chatml\", \"system_prompt\": \"Add.\"},"
    " \"eval\": {\"datasets\": [{\"name\": \"own\", \"source\": \"%s\"},"
    "  {\"name\": \"probes\", \"kind\": \"probes\"},"
    "  {\"name\": \"fewshot\", \"source\": \"%s\", \"num_fewshot\": 3},"
    "  {\"name\": \"fewfile\", \"source\": \"%s\", \"num_fewshot\": 2,"
    "   \"fewshot_source\": \"%s\", \"fewshot_separator\": \"\\n---\\n\"}],"
    " \"probes\": [{\"name\": \"two\", \"prompt\": \"2+2=\", \"target\": \"4\"},"
    "  {\"name\": \"order\", \"better\": \"1+1=2\", \"worse\": \"1+1=3\"}]}}";

static const char *const s_items[][2] = {
    {"3+4=", "7"}, {"5+1=", "6"}, {"2+5=", "7"}, {"6+2=", "8"}};
static const char *const s_pool[][2] = {{"9+9=", "18"}, {"8+8=", "16"}, {"7+7=", "14"}};

/*  Each held-out prompt of dataset ds holds k exemplars "P A" of pool (n entries), joined by sep,
    then the item's own prompt, inside the chatml user turn; distinct, and (own: the pool is the
    dataset itself) never the item. */
static void s_check_fewshot(const bt_eval_suite *s, int ds, int k, const char *sep,
                            const char *const (*pool)[2], int n, bool own) {
    for (size_t i = 0; i < 4; i++) {
        bt_source_example ex;
        bt_source_example_init(&ex);
        CHECK_OK(bt_source_heldout_example(s->own_task[ds], i, &ex));
        const char *open = "<|im_start|>user\n", *close = "<|im_end|>\n<|im_start|>assistant\n";
        const char *at = ex.prompt ? strstr(ex.prompt, open) : NULL;
        CHECK(at && strstr(ex.prompt, close));
        char user[512] = "";
        if (at && strstr(at, close))
            snprintf(user, sizeof user, "%.*s", (int)(strstr(at, close) - at - strlen(open)),
                     at + strlen(open));
        bool used[8] = {false};
        char *part = user;
        for (int e = 0; e < k; e++) {
            char *end = strstr(part, sep);
            CHECK(end != NULL);
            if (!end)
                break;
            *end = '\0';
            int found = -1;
            for (int j = 0; j < n; j++) {
                char want[64];
                snprintf(want, sizeof want, "%s %s", pool[j][0], pool[j][1]);
                if (!strcmp(part, want))
                    found = j;
            }
            CHECK(found >= 0 && !used[found] && !(own && found == (int)i));
            if (found >= 0)
                used[found] = true;
            part = end + strlen(sep);
        }
        CHECK(strcmp(part, s_items[i][0]) == 0 && strcmp(ex.answer, s_items[i][1]) == 0);
        bt_source_example_release(&ex);
    }
}

int main(void) {
    char dir[] = "/tmp/bt_suite_XXXXXX", path[128], pool[128], json[4096];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/own.jsonl", dir);
    const char *lines = "{\"prompt\": \"3+4=\", \"answer\": \"7\"}\n"
                        "{\"prompt\": \"5+1=\", \"answer\": \"6\"}\n"
                        "{\"prompt\": \"2+5=\", \"answer\": \"7\"}\n"
                        "{\"prompt\": \"6+2=\", \"answer\": \"8\"}\n";
    CHECK_OK(bt_file_write(path, lines, strlen(lines)));
    snprintf(pool, sizeof pool, "%s/pool.jsonl", dir);
    const char *pool_lines = "{\"prompt\": \"9+9=\", \"answer\": \"18\"}\n"
                             "{\"prompt\": \"8+8=\", \"answer\": \"16\"}\n"
                             "{\"prompt\": \"7+7=\", \"answer\": \"14\"}\n";
    CHECK_OK(bt_file_write(pool, pool_lines, strlen(pool_lines)));
    snprintf(json, sizeof json, s_json, path, path, path, path, path, pool);
    bt_config *cfg = malloc(sizeof *cfg);
    CHECK_OK(bt_config_parse(json, "suite.json", NULL, 0, cfg));
    bt_source_t *task = NULL;
    CHECK_OK(bt_config_new_source(cfg, 0, &task, NULL));
    bt_eval_suite suite;
    CHECK_OK(bt_config_eval_suite(cfg, task, &suite));
    /* the own source's prompts are in the template, system prompt included */
    bt_source_example ex;
    bt_source_example_init(&ex);
    CHECK(suite.own_task[0] != NULL);
    CHECK_OK(bt_source_heldout_example(suite.own_task[0], 0, &ex));
    char *want = NULL;
    CHECK_OK(bt_chat_apply("chatml", "Add.", "3+4=", &want));
    CHECK(want && strcmp(ex.prompt, want) == 0);
    CHECK_STR_CONTAINS(ex.prompt, "<|im_start|>system\nAdd.<|im_end|>");
    bt_source_example_release(&ex);
    free(want);
    /* the target probe after its templated prompt; the pair as written */
    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.hidden_size = 32;
    mc.intermediate_size = 64;
    mc.num_hidden_layers = 1;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 5);
    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    bt_evaluator_sums s;
    bt_evaluator_sums_init(&s, 1);
    CHECK_OK(bt_eval_suite_run(&suite, 1, m, tok, 0, 2, false, 0, &s));
    char *templated = NULL;
    CHECK_OK(bt_chat_apply("chatml", "Add.", "2+2=", &templated));
    bt_nll_item items[3] = {{templated, "4", false}, {"2+2=", "4", false}, {"", "1+1=2", false}};
    double nll[3];
    int64_t ntok[3];
    CHECK_OK(bt_evaluator_nll(m, tok, items, 3, nll, ntok));
    printf("probe nll: templated %.9g, bare %.9g, suite %.9g\n", nll[0], nll[1], s.probe_nll[0][0]);
    CHECK(s.n_probes == 2);
    CHECK_REL(s.probe_nll[0][0], nll[0], 1e-6);
    CHECK(fabs(nll[0] - nll[1]) > 1e-3); /* the template makes a difference to check */
    CHECK_REL(s.probe_nll[1][0], nll[2], 1e-6);
    free(templated);
    s_check_fewshot(&suite, 2, 3, "\n\n", s_items, 4, true);
    s_check_fewshot(&suite, 3, 2, "\n---\n", s_pool, 3, false);
    bt_eval_suite again; /* the same exemplars on another load */
    CHECK_OK(bt_config_eval_suite(cfg, task, &again));
    for (size_t i = 0; i < 4; i++) {
        bt_source_example a, b;
        bt_source_example_init(&a);
        bt_source_example_init(&b);
        CHECK_OK(bt_source_heldout_example(suite.own_task[2], i, &a));
        CHECK_OK(bt_source_heldout_example(again.own_task[2], i, &b));
        CHECK(strcmp(a.prompt, b.prompt) == 0);
        bt_source_example_release(&a);
        bt_source_example_release(&b);
    }
    bt_eval_suite_release(&again);
    /* four exemplars from three other items, and few-shot perplexity, are refused */
    snprintf(json, sizeof json, s_json, path, path, path, path, path, pool);
    char *four = strstr(json, "\"num_fewshot\": 3");
    CHECK(four != NULL);
    if (four)
        four[15] = '4';
    bt_config *bad = malloc(sizeof *bad);
    CHECK_OK(bt_config_parse(json, "suite.json", NULL, 0, bad));
    CHECK(bt_config_eval_suite(bad, task, &again) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "eval.datasets[2].num_fewshot: expected an integer in "
                                        "[0, 64] and at most the 3 exemplars");
    const char *ppl = "{\"eval\": {\"datasets\": [{\"name\": \"p\", \"kind\": \"perplexity\","
                      " \"num_fewshot\": 1}]}}";
    CHECK(bt_config_parse(ppl, "ppl.json", NULL, 0, bad) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(),
                       "num_fewshot: few-shot prompts are for generate and choices "
                       "datasets");
    free(bad);
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
