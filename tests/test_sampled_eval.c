/*  test_sampled_eval.c — sampled evaluation (eval samples 4 at temperature 1) gives the same
    eval lines whatever the number of eval workers: `baton run` with 1 eval worker and with 3
    (whose shards are sized by measured speed, so their boundaries vary) writes the same
    metrics.jsonl, sampled lines included, and two runs of the same config are identical but for
    the timing fields (DESIGN.md, "Reproducibility": every draw is keyed by the work, never by
    the worker or shard that did it). */
#define _DEFAULT_SOURCE
#include "check.h"
#include "runs.h"

#include <stdlib.h>
#include <string.h>

static char s_tmp[64];

static const char s_json[] =
    "{\"run\": {\"name\": \"sampled\", \"seed\": 3},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 2, \"operators\": \"+\","
    "  \"heldout_size\": 90, \"format_reward\": 0.5},"
    " \"sft\": {\"steps\": 40, \"batch_size\": 32, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 4, \"group_size\": 4, \"prompts_per_step\": 8, \"max_new_tokens\": 4,"
    "  \"lr\": 0.001, \"dynamic_sampling\": false},"
    " \"eval\": {\"every_steps\": 2, \"heldout_count\": 90, \"max_new_tokens\": 6, \"datasets\": ["
    "  {\"name\": \"heldout\"},"
    "  {\"name\": \"sampled\", \"samples\": 4, \"temperature\": 1.0}]},"
    " \"workers\": {\"rollout\": 1, \"trainer\": 1, \"eval\": 1}}";

/*  `baton run CONFIG --run-dir DIR --set workers.eval=N`; its exit status. */
static int s_run(const char *config, const char *dir, int eval_workers) {
    char set[64];
    snprintf(set, sizeof set, "workers.eval=%d", eval_workers);
    const char *args[] = {"run", config, "--run-dir", dir, "--set", set, NULL};
    return runs_wait(runs_spawn(args));
}

/*  How many lines of DIR/metrics.jsonl contain needle. */
static int s_count(const char *dir, const char *needle) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return 0;
    int n = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"))
        n += strstr(l, needle) != NULL;
    free(text);
    return n;
}

/*  Prints the first line where a and b differ. */
static void s_show_difference(const char *what, const char *a, const char *b) {
    size_t i = 0, line = 0;
    while (a[i] && a[i] == b[i])
        line = a[i++] == '\n' ? i : line;
    fprintf(stderr, "%s differ:\n  %.*s\n  %.*s\n", what, (int)strcspn(a + line, "\n"), a + line,
            (int)strcspn(b + line, "\n"), b + line);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_sampled_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char config[128], one[128], three[128], again[128];
    snprintf(config, sizeof config, "%s/sampled.json", s_tmp);
    snprintf(one, sizeof one, "%s/one", s_tmp);
    snprintf(three, sizeof three, "%s/three", s_tmp);
    snprintf(again, sizeof again, "%s/again", s_tmp);
    CHECK_OK(bt_file_write(config, s_json, strlen(s_json)));

    CHECK(s_run(config, one, 1) == 0);
    CHECK(s_run(config, three, 3) == 0);
    CHECK(s_run(config, again, 3) == 0);
    /* the runs did what the comparison needs: sampled evaluations, split three ways */
    CHECK(s_count(one, "\"pass@4\":") == 3); /* steps 0, 2 and 4 */
    CHECK(s_count(three, "\"shards\":3") >= 4);
    CHECK(s_count(one, "\"shards\":1") == s_count(one, "\"kind\":\"eval\""));

    char *a = runs_metrics(one), *b = runs_metrics(three), *c = runs_metrics(again);
    CHECK(a && b && c);
    if (a && b && c) {
        CHECK(strcmp(a, b) == 0);
        if (strcmp(a, b) != 0)
            s_show_difference("1 and 3 eval workers", a, b);
        CHECK(strcmp(b, c) == 0);
        if (strcmp(b, c) != 0)
            s_show_difference("two runs with 3 eval workers", b, c);
    }
    free(a);
    free(b);
    free(c);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0 && !getenv("BATON_KEEP"))
        CHECK(system(cmd) == 0);
    return check_exit();
}
