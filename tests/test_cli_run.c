/*  test_cli_run.c — `baton run` on bad input (a key out of the range the workers accept, a file
    that does not exist): one line naming the key, exit code 2, and no run directory; on a good
    config: exit 0 with config.json, metrics.jsonl and events.jsonl; a directory that holds a run
    is refused without --resume or --overwrite; an SFT-only run saves the policy SFT made; --dry-run
    prints the config.json the run writes and starts nothing; a YAML config runs as its JSON. */
#define _DEFAULT_SOURCE
#include "check.h"
#include "runs.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char s_tmp[64];

static int s_run(const char *args, char *out, size_t cap) {
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "cd %s && %s run %s 2>&1", s_tmp, getenv("BATON_BIN"), args);
    return runs_capture(cmd, out, cap);
}

static bool s_exists(const char *rel) {
    char path[PATH_MAX];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", s_tmp, rel);
    return stat(path, &sb) == 0;
}

/*  rel inside the test's folder.  Borrowed: valid until the next call. */
static const char *s_path_of(const char *rel) {
    static char path[192];
    snprintf(path, sizeof path, "%s/%s", s_tmp, rel);
    return path;
}

static void s_write(const char *name, const char *text) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", s_tmp, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/*  `baton run ARGS` with stdout into out and stderr into the file err in the test's folder. */
static int s_run_split(const char *args, const char *err, char *out, size_t cap) {
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "cd %s && %s run %s 2>%s", s_tmp, getenv("BATON_BIN"), args, err);
    return runs_capture(cmd, out, cap);
}

static const char s_small[] =
    "{\"run\": {\"name\": \"small\"}, \"model\": {\"hidden_size\": 32, \"intermediate_size\": 64,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 2},"
    " \"task\": {\"digits\": 1, \"heldout_size\": 4}, \"sft\": {\"steps\": 1, \"batch_size\": 4},"
    " \"grpo\": {\"steps\": 2, \"group_size\": 2, \"prompts_per_step\": 2, \"max_new_tokens\": 2},"
    " \"eval\": {\"heldout_count\": 4}}";

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_cli_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    s_write("small.json", s_small);
    /* s_small in YAML, and one with a mistake on its line 4 */
    s_write("small.yaml", "run: {name: small}\n"
                          "model: {hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,\n"
                          "        num_attention_heads: 2}\n"
                          "task:\n"
                          "  digits: 1\n"
                          "  heldout_size: 4\n"
                          "sft: {steps: 1, batch_size: 4}\n"
                          "grpo:\n"
                          "  steps: 2\n"
                          "  group_size: 2\n"
                          "  prompts_per_step: 2\n"
                          "  max_new_tokens: 2\n"
                          "eval:\n"
                          "  heldout_count: 4\n");
    s_write("bad.yaml", "run:\n  name: bad\ngrpo:\n  group_size: 1\n");
    s_write("variants.json", "{\"variants\": [{\"name\": \"a\"}, {\"name\": \"b\"}]}");
    s_write("a.jsonl", "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n");
    s_write(
        "sources.json",
        "{\"data\": {\"sources\": [{\"name\": \"a\", \"kind\": \"jsonl\", \"path\": \"a.jsonl\"},"
        " {\"name\": \"b\", \"kind\": \"jsonl\", \"path\": \"b.jsonl\"}]}}");
    s_write("evalfile.json", "{\"eval\": {\"datasets\": [{\"name\": \"heldout\"},"
                             " {\"name\": \"extra\", \"source\": \"missing_eval.jsonl\"}]}}");
    char out[8192];
    const struct {
        const char *args, *message;
    } bad[] = {
        {"small.json --set grpo.group_size=1",
         "--set grpo.group_size=1: expected an integer in [2, 4096], got 1"},
        {"small.json --set grpo.gropu_size=4", "unknown key (did you mean grpo.group_size?)"},
        {"small.json --set task.kind=math", "task.kind=math: expected one of"},
        {"small.json --set grpo.lr=fast", "grpo.lr=fast: expected a number"},
        /* what a worker would refuse mid-run is refused before anything starts */
        {"small.json --set grpo.lr=1e308",
         "--set grpo.lr=1e308: expected a number in [0, 1000], got 1e+308"},
        {"small.json --set grpo.max_new_tokens=2000",
         "small.json: grpo.max_new_tokens: expected an integer in [1, 1019] "
         "(model.max_position_embeddings 1024 less the longest prompt, 5 tokens), got 2000"},
        {"small.json --set model.num_key_value_heads=3", "model.num_key_value_heads"},
        {"small.json --set workers.expiry_ms=10", "workers.expiry_ms"},
        {"missing.json", "missing.json: cannot open"},
        /* a file the config names that does not exist: refused, naming the key and the path */
        {"small.json --set task.kind=jsonl --set task.train=nope.jsonl",
         "small.json: task.train: \"nope.jsonl\": no such file"},
        {"small.json --set task.kind=jsonl --set task.train=small.json --set task.eval=gone.jsonl",
         "small.json: task.eval: \"gone.jsonl\": no such file"},
        {"small.json --set model.path=no/model",
         "small.json: model.path: \"no/model\": no such folder"},
        {"small.json --set model.path=.", "model.path: \"./config.json\": no such file"},
        {"sources.json", "sources.json: data.sources[1].path: \"b.jsonl\": no such file"},
        {"evalfile.json",
         "evalfile.json: eval.datasets[1].source: \"missing_eval.jsonl\": no such file"},
        {"small.json --frobnicate", "unexpected argument \"--frobnicate\""},
        /* YAML: the file, the line and the key */
        {"bad.yaml", "baton: bad.yaml:4: grpo.group_size: expected an integer in [2, 4096], got 1"},
        {"bad.yaml --dry-run", "bad.yaml:4: grpo.group_size: expected an integer"},
        {"small.json --dry-run --set grpo.group_size=1",
         "--set grpo.group_size=1: expected an integer in [2, 4096], got 1"},
        {"", "missing CONFIG"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(s_run(bad[i].args, out, sizeof out) == 2);
        CHECK_STR_CONTAINS(out, bad[i].message);
        CHECK(!s_exists("runs"));
    }
    /* a config the task refuses (more held-out problems than exist) fails before any worker
       starts: no worker joined, and the run exits 1 with the task's reason */
    CHECK(s_run("small.json --set task.heldout_size=500 --set eval.heldout_count=500 --run-dir "
                "out/refused",
                out, sizeof out) == 1);
    CHECK_STR_CONTAINS(out, "heldout_size: 500 exceeds");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/out/refused/events.jsonl", s_tmp);
    FILE *f = fopen(path, "r");
    char buf[4096] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    CHECK(strstr(buf, "worker_joined") == NULL);
    /* the usage lists --dry-run */
    CHECK(s_run("--help", out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "[--dry-run]");
    /* --dry-run: exit 0, the resolved config on stdout and the plan on stderr, no run directory
       (neither the one named nor runs/) */
    static char dry[1 << 16];
    CHECK(s_run_split("small.json --set run.name=ok --run-dir out/ok --dry-run", "dry.err", dry,
                      sizeof dry) == 0);
    CHECK(!s_exists("out/ok") && !s_exists("runs"));
    char *plan = NULL;
    CHECK_OK(bt_file_read(s_path_of("dry.err"), 1 << 20, &plan, NULL));
    CHECK_STR_CONTAINS(plan, "plan (--dry-run: nothing started, nothing written)");
    CHECK_STR_CONTAINS(plan, "run directory  out/ok");
    CHECK_STR_CONTAINS(plan,
                       "workers        1 rollout, 1 trainer, 1 eval: threads of this process");
    CHECK_STR_CONTAINS(plan, "sft            1 steps of 4 demonstrations");
    CHECK_STR_CONTAINS(plan, "grpo           2 steps of 2 prompts x 2 completions (4 sequences");
    CHECK_STR_CONTAINS(plan, "evaluation     heldout (generate, 4 examples): every 10 steps");
    CHECK_STR_CONTAINS(plan, "memory         ");
    free(plan);
    /* a good run: exit 0, the run directory with its three files; --set with a plain string */
    CHECK(s_run("small.json --set run.name=ok --run-dir out/ok", out, sizeof out) == 0);
    CHECK(s_exists("out/ok/config.json") && s_exists("out/ok/metrics.jsonl") &&
          s_exists("out/ok/events.jsonl"));
    /* what --dry-run printed is the config.json the run wrote, byte for byte (and a newline) */
    char *written = NULL;
    CHECK_OK(bt_file_read(s_path_of("out/ok/config.json"), 1 << 20, &written, NULL));
    CHECK(written && strlen(dry) == strlen(written) + 1 &&
          strncmp(dry, written, strlen(written)) == 0 && dry[strlen(written)] == '\n');
    /* the same config in YAML runs, and writes the same config.json */
    CHECK(s_run("small.yaml --set run.name=ok --run-dir out/yaml", out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "done step 2/2");
    char *from_yaml = NULL;
    CHECK_OK(bt_file_read(s_path_of("out/yaml/config.json"), 1 << 20, &from_yaml, NULL));
    CHECK(written && from_yaml && strcmp(written, from_yaml) == 0);
    free(written);
    free(from_yaml);
    /* a large run.seed (beyond 1.4e8 the rollout jobs' seeds overflowed 2^53 mid-run) */
    CHECK(s_run("small.json --set run.seed=1099511627776 --run-dir out/seed", out, sizeof out) ==
          0);
    CHECK_STR_CONTAINS(out, "done step 2/2");
    /* a directory that holds a run is never appended to by accident: the same run again is
       refused, naming the directory and both flags, and leaves its files as they were */
    char metrics[PATH_MAX], *before = NULL, *after = NULL;
    snprintf(metrics, sizeof metrics, "%s/out/ok/metrics.jsonl", s_tmp);
    CHECK_OK(bt_file_read(metrics, 1 << 20, &before, NULL));
    CHECK(s_run("small.json --set run.name=ok --run-dir out/ok", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "out/ok holds a run already");
    CHECK_STR_CONTAINS(out, "--resume continues it, --overwrite replaces it");
    CHECK_OK(bt_file_read(metrics, 1 << 20, &after, NULL));
    CHECK(before && after && strcmp(before, after) == 0);
    free(after);
    /* --overwrite replaces the run: two train lines, not four */
    CHECK(s_run("small.json --set run.name=ok --run-dir out/ok --overwrite", out, sizeof out) == 0);
    CHECK(runs_train_steps(s_path_of("out/ok")) == 2);
    /* --resume needs a run, and excludes --overwrite */
    CHECK(s_run("small.json --run-dir out/none --resume", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "out/none: no run to resume");
    CHECK(!s_exists("out/none"));
    CHECK(s_run("small.json --run-dir out/ok --resume --overwrite", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "--resume continues a run and --overwrite replaces it");
    CHECK(s_run("variants.json --run-dir out/ok --resume", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "--resume: the config differs from");
    CHECK(runs_train_steps(s_path_of("out/ok")) == 2); /* untouched */
    free(before);
    /* an SFT-only run (grpo.steps 0) takes any learning-rate schedule (cosine was refused: it
       needs grpo.steps > warmup_steps, and no GRPO step uses it) and saves the policy SFT made
       (nothing was saved): not the untrained one a run without SFT saves */
    CHECK(s_run("small.json --set grpo.steps=0 --set sft.steps=3 --set grpo.lr_schedule=cosine "
                "--run-dir out/sft",
                out, sizeof out) == 0);
    CHECK(s_run("small.json --set grpo.steps=0 --set sft.steps=0 --run-dir out/untrained", out,
                sizeof out) == 0);
    char *sft = NULL, *untrained = NULL, *events = NULL;
    size_t n_sft = 0, n_untrained = 0;
    CHECK_OK(bt_file_read(s_path_of("out/sft/model/model.safetensors"), 1 << 24, &sft, &n_sft));
    CHECK_OK(bt_file_read(s_path_of("out/untrained/model/model.safetensors"), 1 << 24, &untrained,
                          &n_untrained));
    CHECK(sft && untrained && n_sft == n_untrained && memcmp(sft, untrained, n_sft) != 0);
    CHECK(s_exists("out/sft/model/config.json"));
    CHECK_OK(bt_file_read(s_path_of("out/sft/events.jsonl"), 1 << 20, &events, NULL));
    CHECK_STR_CONTAINS(events, "\"event\":\"policy_saved\"");
    free(sft);
    free(untrained);
    free(events);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
