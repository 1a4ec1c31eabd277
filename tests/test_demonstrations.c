/*  test_demonstrations.c — SFT demonstrations of episodes (task.demonstration_key; data/source.c,
    workers/rollout.c bt_rollout_demonstrations): a record's demonstration is a string or the
    turns [model, observation, model, ...]; each observation is framed by the observation template
    (the chat template's tool turn) and tokenized on its own; model turns and the EOS train
    (loss_mask 1), observations do not (0, the turn they answer); a record without the key is
    demonstrated by its answer.  The expected rows are written here byte by byte (the byte
    tokenizer: id = byte, BOS 256, EOS 257).  Bad values are refused naming the file, the record,
    the key and what it got. */
#define _DEFAULT_SOURCE
#include "baton/config.h"
#include "baton/fileio.h"
#include "baton/rollout.h"
#include "baton/source.h"
#include "baton/tokenizer.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_tmp[64];

static bt_source_t *s_open(const char *lines, const char *chat, const char *obs_tmpl) {
    char path[128];
    snprintf(path, sizeof path, "%s/d.jsonl", s_tmp);
    CHECK_OK(bt_file_write(path, lines, strlen(lines)));
    char idx[140];
    snprintf(idx, sizeof idx, "%s.btidx", path);
    unlink(idx);
    bt_source_jsonl_config c = {.train_path = path,
                                .heldout_path = path,
                                .verifier = BT_SOURCE_VERIFY_EXACT,
                                .chat_template = chat,
                                .demonstration_key = "demo",
                                .observation_template = obs_tmpl};
    bt_source_t *src = NULL;
    CHECK_OK(bt_source_new_jsonl(&c, &src));
    return src;
}

/*  Row i of b: its completion is the parts' bytes (mask 1 for model parts, 0 for observations,
    turn = part / 2), then EOS (mask 1). */
static void s_check_row(const bt_rollout_batch *b, int64_t i, const char *const *parts, int n) {
    const int32_t *t = b->tokens + i * b->max_new_tokens;
    const uint8_t *m = b->loss_mask + i * b->max_new_tokens, *tu = b->turn + i * b->max_new_tokens;
    int64_t at = 0;
    bool same = true;
    for (int k = 0; k < n; k++)
        for (size_t j = 0; j < strlen(parts[k]); j++, at++)
            same = same && at < b->lengths[i] && t[at] == (uint8_t)parts[k][j] &&
                   m[at] == (k % 2 == 0) && tu[at] == k / 2;
    CHECK(same);
    CHECK(b->lengths[i] == at + 1);
    CHECK(t[at] == 257 && m[at] == 1 && tu[at] == (n - 1) / 2);
    CHECK(b->n_turns[i] == (n + 1) / 2);
}

static void test_layout(void) {
    bt_source_t *src =
        s_open("{\"prompt\": \"12*34=\", \"answer\": \"408\", \"demo\": [\"<calc>12*34</calc>\", "
               "\"<result>408</result>\", \"408\"], \"id\": 1}\n"
               "{\"prompt\": \"5*6=\", \"answer\": \"30\", \"demo\": \"thirty\"}\n"
               "{\"prompt\": \"7*8=\", \"answer\": \"56\"}\n",
               "chatml", NULL);
    bt_source_example ex;
    bt_source_example_init(&ex);
    CHECK_OK(bt_source_heldout_example(src, 0, &ex));
    CHECK(ex.n_demo == 3 && ex.demo && !ex.demo[0].observation && ex.demo[1].observation);
    const char *obs = "<|im_end|>\n<|im_start|>tool\n<result>408</result><|im_end|>\n"
                      "<|im_start|>assistant\n";
    CHECK(ex.demo[1].len == strlen(obs) && !memcmp(ex.demo[1].text, obs, strlen(obs)));
    CHECK_STR_EQ(ex.columns, "{\"id\":1}"); /* the demonstration is not a column */
    CHECK_OK(bt_source_heldout_example(src, 2, &ex));
    CHECK(ex.n_demo == 0 && !ex.demo);
    bt_source_example_release(&ex);

    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    const uint64_t idx[3] = {0, 1, 2};
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    CHECK_OK(bt_rollout_demonstrations(tok, src, idx, 3, &b));
    CHECK(b.n == 3);
    bt_source_example_init(&ex);
    for (int64_t i = 0; i < 3; i++) { /* the stream's order is shuffled: find each row's record */
        CHECK_OK(bt_source_train_example(src, idx[i], &ex));
        const char *p = strstr(ex.prompt, "user\n") + 5;
        CHECK(b.rewards[i] == 1.0 && b.correct[i] && b.finished[i]);
        if (!strncmp(p, "12*34=", 6)) {
            const char *parts[3] = {"<calc>12*34</calc>", obs, "408"};
            s_check_row(&b, i, parts, 3);
        } else if (!strncmp(p, "5*6=", 4)) {
            const char *parts[1] = {"thirty"};
            s_check_row(&b, i, parts, 1);
        } else {
            const char *parts[1] = {"56"};
            s_check_row(&b, i, parts, 1);
        }
    }
    bt_source_example_release(&ex);
    bt_rollout_batch_release(&b);
    bt_source_destroy(&src);

    /* a task's own observation template; no chat template */
    src = s_open("{\"prompt\": \"1+1=\", \"answer\": \"2\", \"demo\": [\"a\", \"b\", \"c\", \"d\", "
                 "\"e\"]}\n",
                 NULL, "[{observation}]");
    CHECK_OK(bt_rollout_demonstrations(tok, src, idx, 1, &b));
    const char *parts[5] = {"a", "[b]", "c", "[d]", "e"};
    s_check_row(&b, 0, parts, 5);
    bt_rollout_batch_release(&b);
    bt_source_destroy(&src);
    bt_tokenizer_destroy(&tok);
}

static void s_bad(const char *demo, const char *got) {
    char line[256];
    snprintf(line, sizeof line, "{\"prompt\": \"1+1=\", \"answer\": \"2\", \"demo\": %s}\n", demo);
    bt_source_t *src = s_open(line, NULL, NULL);
    bt_source_example ex;
    bt_source_example_init(&ex);
    CHECK(bt_source_heldout_example(src, 0, &ex) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "d.jsonl: record 1: \"demo\": expected a string or an "
                                        "array of strings [model, observation, model, ...] of "
                                        "odd length, got ");
    CHECK_STR_CONTAINS(bt_last_error(), got);
    bt_source_example_release(&ex);
    bt_source_destroy(&src);
}

static void test_bad(void) {
    s_bad("7", "got a number");
    s_bad("[\"a\", \"b\"]", "got an array of 2");
    s_bad("[]", "got an array of 0");
    s_bad("[\"a\", 3, \"c\"]", "got a number at [1]");
    s_bad("{\"x\": 1}", "got an object");
    s_bad("null", "got null");
    /* the config key: a record's own prompt or answer is not a demonstration key */
    bt_config *cfg = malloc(sizeof *cfg);
    const char *bad[] = {"task.demonstration_key=answer"},
               *good[] = {"task.demonstration_key=demo"};
    CHECK(bt_config_parse("{}", "t.json", bad, 1, cfg) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "task.demonstration_key");
    CHECK_STR_CONTAINS(bt_last_error(), "\"prompt\" and \"answer\"");
    CHECK(bt_config_parse("{}", "t.json", good, 1, cfg) == BT_EINVAL); /* arithmetic */
    CHECK_STR_CONTAINS(bt_last_error(), "t.json: task.demonstration_key: \"demo\": only a JSONL "
                                        "task (task.kind \"jsonl\")");
    const char *jsonl = "{\"task\": {\"kind\": \"jsonl\", \"train\": \"t.jsonl\"}}";
    CHECK_OK(bt_config_parse(jsonl, "t.json", good, 1, cfg));
    CHECK_STR_EQ(cfg->task.demonstration_key, "demo");
    bt_source_jsonl_config jc;
    bt_config_task_jsonl(cfg, &jc);
    CHECK_STR_EQ(jc.demonstration_key, "demo");
    free(cfg);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_demo_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_layout();
    test_bad();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
