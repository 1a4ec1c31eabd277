/*  test_eval_suite.c — a config's evaluation suite prompts like its training data: with
    task.chat_template and task.system_prompt, an eval dataset with its own JSONL source shows its
    prompts in the template (as the held-out set does), and a target probe is scored after its
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
    "  {\"name\": \"probes\", \"kind\": \"probes\"}],"
    " \"probes\": [{\"name\": \"two\", \"prompt\": \"2+2=\", \"target\": \"4\"},"
    "  {\"name\": \"order\", \"better\": \"1+1=2\", \"worse\": \"1+1=3\"}]}}";

int main(void) {
    char dir[] = "/tmp/bt_suite_XXXXXX", path[128], json[2048];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/own.jsonl", dir);
    const char *lines = "{\"prompt\": \"3+4=\", \"answer\": \"7\"}\n"
                        "{\"prompt\": \"5+1=\", \"answer\": \"6\"}\n";
    CHECK_OK(bt_file_write(path, lines, strlen(lines)));
    snprintf(json, sizeof json, s_json, path, path, path);
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
