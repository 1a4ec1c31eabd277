/*  test_py_reward.c — rewards in Python the way TRL users write them (python/baton_reward,
    docs/protocol.md "Reward service").  A JSONL record's other keys reach its example as columns
    (compact, in file order, a byte that is not UTF-8 as \ufffd).  The package installs with pip,
    offline, into a folder; a user's script serves two functions through it, weights 1 and 0.5,
    the second reading a column of this test's own JSONL file.  Asked directly (bt_reward_service,
    several clients at once), each reward is the weighted sum this test computes in C; a function
    that raises or returns the wrong count comes back as the batch's error, and the service goes
    on.  A whole run (2 rollout worker processes) against it: every completion the functions saw
    came with its record's columns intact, and the train lines' reward means are the means of the
    weighted sums this test computes for those completions; with a function that raises, the run
    stops with the Python exception's text.  Without a python3 that has zmq, pip and setuptools
    the Python parts print SKIP naming the missing package and the test exits 77 (ctest:
    skipped). */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/reward_service.h"
#include "baton/source.h"
#include "baton/unicode.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_RECORDS 40
#define S_STEPS 3
#define S_PROMPTS 4 /* per step */
#define S_GROUP 4

static char s_tmp[64];

/* ---- the dataset: this test's own records and what it expects of them ----------------------- */

typedef struct s_record {
    char prompt[32], answer[8], tag[64];
    double bonus;
    int level;
    bool ok;
} s_record;

static s_record s_records[S_RECORDS];

/*  Record k: a unique prompt, its sum as the answer, and three columns (a number, a string with
    non-ASCII text, quotes, a backslash and a tab, and an object). */
static void s_make_records(void) {
    for (int k = 0; k < S_RECORDS; k++) {
        s_record *r = &s_records[k];
        int a = (k * 7) % 10, b = (k * 3) % 10;
        snprintf(r->prompt, sizeof r->prompt, "Q%d: %d+%d=", k, a, b);
        snprintf(r->answer, sizeof r->answer, "%d", a + b);
        snprintf(r->tag, sizeof r->tag, "rec %d: caf\xc3\xa9 \xe2\x9c\x93 \"q\" \\ back\t", k);
        r->bonus = 0.25 * (1 + k % 4);
        r->level = k % 3;
        r->ok = k % 2 == 0;
    }
}

static bt_status s_write_dataset(const char *path) {
    char *text = calloc(S_RECORDS, 256);
    size_t len = 0;
    for (int k = 0; k < S_RECORDS; k++) {
        const s_record *r = &s_records[k];
        /* the tag as JSON: the UTF-8 as it is, the rest escaped */
        len +=
            (size_t)snprintf(text + len, 256,
                             "{\"prompt\": \"%s\", \"answer\": \"%s\", "
                             "\"bonus\": %g, \"tag\": \"rec %d: caf\xc3\xa9 \xe2\x9c\x93 "
                             "\\\"q\\\" \\\\ back\\t\", \"meta\": {\"level\": %d, \"ok\": %s}}\n",
                             r->prompt, r->answer, r->bonus, k, r->level, r->ok ? "true" : "false");
    }
    bt_status st = bt_file_write(path, text, len);
    free(text);
    return st;
}

static const s_record *s_find(const char *prompt) {
    for (int k = 0; k < S_RECORDS; k++)
        if (!strcmp(s_records[k].prompt, prompt))
            return &s_records[k];
    return NULL;
}

/*  Records 10, 20, 30, 40 (counting from 1) are the held-out set (no task.eval file). */
static bool s_is_heldout(const s_record *r) {
    return (r - s_records) % 10 == 9;
}

/* ---- the user's script, and the rewards it must give ----------------------------------------- */

/*  Written as a TRL user writes reward functions.  contains_answer logs each batch it gets (the
    completions as code points, so that any character survives the trip into C).  length_bonus
    reads the "bonus" column; the first prompt of a batch may ask it to misbehave, and with mode
    "raise" it always raises. */
static const char s_script[] =
    "import json, sys\n"
    "from baton_reward import serve\n"
    "endpoint, log_path, mode = sys.argv[1:4]\n"
    "log = open(log_path, 'a', encoding='utf-8')\n"
    "\n"
    "def contains_answer(prompts, completions, answers, **columns):\n"
    "    log.write(json.dumps({'prompts': prompts, 'answers': answers, 'columns': columns,\n"
    "                          'completions': [[ord(ch) for ch in c] for c in completions]}))\n"
    "    log.write('\\n')\n"
    "    log.flush()\n"
    "    return [1.0 if a in c else 0.0 for c, a in zip(completions, answers)]\n"
    "\n"
    "def length_bonus(prompts, completions, answers, bonus, **columns):\n"
    "    if mode == 'raise' or prompts[0] == 'RAISE':\n"
    "        raise ValueError('grader unavailable for ' + prompts[-1])\n"
    "    if prompts[0] == 'SHORT':\n"
    "        return [0.0] * (len(completions) - 1)\n"
    "    if prompts[0] == 'NAN':\n"
    "        return [float('nan')] * len(completions)\n"
    "    return [None if b is None else b * len(c) for c, b in zip(completions, bonus)]\n"
    "\n"
    "serve([contains_answer, length_bonus], endpoint, weights=[1, 0.5])\n";

/*  The reward of one completion (UTF-8), as the script's functions and weights define it: 1 when
    the answer occurs in it, plus 0.5 x bonus x its length in characters (no bonus: nothing).  In
    the order Python sums them, so the result is the same double. */
static double s_expected(const char *answer, const char *completion, size_t len, bool has_bonus,
                         double bonus) {
    bool found = false;
    size_t alen = strlen(answer), chars = 0;
    for (size_t i = 0; i + alen <= len && !found; i++)
        found = memcmp(completion + i, answer, alen) == 0;
    for (size_t i = 0; i < len; i++)
        chars += ((unsigned char)completion[i] & 0xC0) != 0x80; /* not a continuation byte */
    double r = 0.0;
    r += 1.0 * (found ? 1.0 : 0.0);
    if (has_bonus)
        r += 0.5 * (bonus * (double)chars);
    return r;
}

/*  Starts the script on endpoint with PYTHONPATH=s_tmp/site, appending its log to log and its
    stderr to s_tmp/service.err. */
static pid_t s_start(const char *python, const char *endpoint, const char *log, const char *mode) {
    char script[128];
    snprintf(script, sizeof script, "%s/rewards.py", s_tmp);
    const char *argv[] = {python, script, endpoint, log, mode, NULL};
    return runs_python_start(s_tmp, argv);
}

/* ---- the columns a JSONL record gives ------------------------------------------------------- */

/*  Each record's keys besides "prompt" and "answer", compact and in file order, with a byte that
    is not UTF-8 as \ufffd; none for a record without other keys. */
static void test_columns(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/columns.jsonl", s_tmp);
    const char text[] = "{\"prompt\": \"a\", \"x\": \"b\xff\xc3\xa9\", \"answer\": 1, \"n\": 2.5}\n"
                        "{\"prompt\": \"b\", \"answer\": \"2\"}\n"
                        "{\"answer\": \"3\", \"k\": [1, true, null, {\"z\": \"\\n\"}], "
                        "\"prompt\": \"c\"}\n";
    CHECK_OK(bt_file_write(path, text, strlen(text)));
    bt_source_jsonl_config c = {.train_path = path, .heldout_path = path};
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_jsonl(&c, &task));
    const char *want[] = {"{\"x\":\"b\\ufffd\xc3\xa9\",\"n\":2.5}", NULL,
                          "{\"k\":[1,true,null,{\"z\":\"\\n\"}]}"};
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (size_t i = 0; task && i < 3; i++) {
        CHECK_OK(bt_source_heldout_example(task, i, &ex));
        if (want[i])
            CHECK_STR_EQ(ex.columns, want[i]);
        else
            CHECK(ex.columns == NULL);
    }
    bt_source_example_release(&ex);
    bt_source_destroy(&task);
}

/* ---- asked directly ------------------------------------------------------------------------- */

static void test_direct(const char *endpoint) {
    bt_reward_service_t *client = NULL;
    /* generous: the first request waits for the interpreter to start and bind */
    CHECK_OK(bt_reward_service_new(endpoint, 30000, 0, &client));
    CHECK_OK(bt_reward_service_ping(client));
    const char *cols[] = {"{\"bonus\": 0.25, \"tag\": \"a\"}",
                          "{\"bonus\": 1.5}",
                          "{\"bonus\": 0.75, \"extra\": [1, {\"x\": null}]}",
                          NULL,
                          "{\"bonus\": 2}",
                          "{\"bonus\": 0.5}"};
    const char *completions[] = {"12 and 12",       "no digits", "x7y7z",
                                 "77 but no bonus", "",          "\xe2\x9c\x93 7"};
    enum { N = 6 };
    bt_reward_item items[N];
    for (int i = 0; i < N; i++)
        items[i] = (bt_reward_item){.index = (uint64_t)i,
                                    .prompt = "q",
                                    .answer = i < 3 ? "12" : "7",
                                    .completion = completions[i],
                                    .len = strlen(completions[i]),
                                    .columns = cols[i]};
    double rewards[N], bonus[N] = {0.25, 1.5, 0.75, 0, 2, 0.5};
    bool correct[N];
    CHECK_OK(bt_reward_service_score(client, "rollout", items, N, rewards, correct));
    for (int i = 0; i < N; i++) { /* item 3 has no columns: length_bonus gives it None */
        double want =
            s_expected(items[i].answer, completions[i], items[i].len, cols[i] != NULL, bonus[i]);
        CHECK_NEAR(rewards[i], want, 1e-12);
        CHECK(correct[i] == (want >= 1.0)); /* no correct function: reward >= 1 */
    }
    CHECK_NEAR(rewards[0], 1.0 + 0.5 * 0.25 * 9, 1e-12); /* the weights, worked by hand */

    /* a function's failure is the batch's error, with its text; the service goes on */
    struct {
        const char *prompt, *want;
    } bad[] = {
        {"RAISE", "the service says: reward function length_bonus raised ValueError: grader "
                  "unavailable for q"},
        {"SHORT", "the service says: reward function length_bonus returned 5 values for 6 "
                  "completions"},
        {"NAN", "the service says: reward function length_bonus: value 0 is nan, expected a finite "
                "number"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        items[0].prompt = bad[b].prompt;
        CHECK(bt_reward_service_score(client, "rollout", items, N, rewards, correct) == BT_EFORMAT);
        CHECK_STR_CONTAINS(bt_last_error(), bad[b].want);
    }
    items[0].prompt = "q";
    CHECK_OK(bt_reward_service_score(client, "eval", items, N, rewards, correct));
    CHECK_NEAR(rewards[0], 2.125, 1e-12);
    bt_reward_service_destroy(&client);
}

/*  Several workers at once: each thread its own client (a peer of the ROUTER), its own
    completions; every reply must be its own. */
typedef struct s_peer {
    const char *endpoint;
    int id;
    int wrong; /* replies that were not this peer's rewards */
    int failed;
} s_peer;

static void *s_peer_main(void *arg) {
    s_peer *p = arg;
    bt_reward_service_t *client = NULL;
    if (bt_reward_service_new(p->endpoint, 30000, 0, &client) != BT_OK) {
        p->failed = 1;
        return NULL;
    }
    for (int j = 0; j < 10; j++) {
        char text[2][32];
        snprintf(text[0], sizeof text[0], "%*d", p->id + j, j); /* its own length */
        snprintf(text[1], sizeof text[1], "peer %d", p->id);
        bt_reward_item items[2];
        for (int i = 0; i < 2; i++)
            items[i] = (bt_reward_item){.prompt = "q",
                                        .answer = "peer",
                                        .completion = text[i],
                                        .len = strlen(text[i]),
                                        .columns = "{\"bonus\": 1}"};
        double rewards[2];
        bool correct[2];
        if (bt_reward_service_score(client, "rollout", items, 2, rewards, correct) != BT_OK) {
            p->failed++;
            continue;
        }
        for (int i = 0; i < 2; i++)
            p->wrong +=
                fabs(rewards[i] - s_expected("peer", text[i], strlen(text[i]), true, 1)) > 1e-12;
    }
    bt_reward_service_destroy(&client);
    return NULL;
}

static void test_peers(const char *endpoint) {
    enum { P = 4 };
    s_peer peers[P];
    pthread_t threads[P];
    for (int i = 0; i < P; i++) {
        peers[i] = (s_peer){.endpoint = endpoint, .id = i + 1};
        CHECK(pthread_create(&threads[i], NULL, s_peer_main, &peers[i]) == 0);
    }
    for (int i = 0; i < P; i++) {
        pthread_join(threads[i], NULL);
        CHECK(peers[i].failed == 0);
        CHECK(peers[i].wrong == 0);
    }
}

/* ---- whole runs ----------------------------------------------------------------------------- */

static const char s_json[] =
    "{\"run\": {\"name\": \"pyr\", \"seed\": 3}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"jsonl\", \"train\": \"TRAIN\"},"
    " \"sft\": {\"steps\": 2, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 3, \"group_size\": 4, \"prompts_per_step\": 4, \"max_new_tokens\": 4,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 2, \"heldout_count\": 4, \"datasets\": [{\"name\": "
    "\"heldout\"}]},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

/*  Checks each batch the functions saw (log: one JSON line per batch) against the dataset and
    sums the rewards this test expects for the training completions; the number of those into
    *n_train, of held-out ones into *n_heldout. */
static double s_check_log(const char *log, int *n_train, int *n_heldout) {
    char *text = NULL;
    double sum = 0;
    *n_train = *n_heldout = 0;
    CHECK_OK(bt_file_read(log, 1 << 26, &text, NULL));
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        CHECK(j != NULL);
        const cJSON *prompts = cJSON_GetObjectItem(j, "prompts");
        const cJSON *answers = cJSON_GetObjectItem(j, "answers");
        const cJSON *completions = cJSON_GetObjectItem(j, "completions");
        const cJSON *cols = cJSON_GetObjectItem(j, "columns");
        int n = cJSON_GetArraySize(prompts);
        /* exactly the record's other keys: "prompt" and "answer" are the arguments */
        CHECK(cJSON_GetArraySize(cols) == 3);
        const cJSON *bonus = cJSON_GetObjectItem(cols, "bonus");
        const cJSON *tag = cJSON_GetObjectItem(cols, "tag");
        const cJSON *meta = cJSON_GetObjectItem(cols, "meta");
        CHECK(n > 0 && cJSON_GetArraySize(answers) == n && cJSON_GetArraySize(completions) == n &&
              cJSON_GetArraySize(bonus) == n && cJSON_GetArraySize(tag) == n &&
              cJSON_GetArraySize(meta) == n);
        for (int i = 0; i < n && j; i++) {
            const s_record *r = s_find(cJSON_GetStringValue(cJSON_GetArrayItem(prompts, i)));
            CHECK(r != NULL);
            if (!r)
                continue;
            const cJSON *m = cJSON_GetArrayItem(meta, i);
            CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetArrayItem(answers, i)), r->answer);
            CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetArrayItem(tag, i)), r->tag);
            CHECK(cJSON_GetArrayItem(bonus, i) &&
                  cJSON_GetArrayItem(bonus, i)->valuedouble == r->bonus);
            CHECK(cJSON_GetObjectItem(m, "level") &&
                  cJSON_GetObjectItem(m, "level")->valueint == r->level);
            CHECK(cJSON_IsBool(cJSON_GetObjectItem(m, "ok")) &&
                  cJSON_IsTrue(cJSON_GetObjectItem(m, "ok")) == r->ok);
            /* the completion from its code points, as UTF-8 */
            char c[256];
            size_t len = 0;
            const cJSON *cp;
            cJSON_ArrayForEach(cp, cJSON_GetArrayItem(completions, i)) {
                if (len + 4 < sizeof c)
                    len += bt_utf8_encode((uint32_t)cp->valuedouble, c + len);
            }
            if (s_is_heldout(r))
                (*n_heldout)++;
            else {
                (*n_train)++;
                sum += s_expected(r->answer, c, len, true, r->bonus);
            }
        }
        cJSON_Delete(j);
    }
    free(text);
    return sum;
}

static void test_run(const char *python, const char *config) {
    char endpoint[128], set[192], dir[128], log[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/run.ipc", s_tmp);
    snprintf(set, sizeof set, "reward.service=%s", endpoint);
    snprintf(dir, sizeof dir, "%s/run", s_tmp);
    snprintf(log, sizeof log, "%s/run.log", s_tmp);
    pid_t service = s_start(python, endpoint, log, "ok");
    const char *args[] = {"run", config, "--run-dir", dir, "--procs", "--set", set, NULL};
    CHECK(runs_wait(runs_spawn(args)) == 0);
    runs_term(service);

    int n_train = 0, n_heldout = 0;
    double sum = s_check_log(log, &n_train, &n_heldout);
    /* each training completion scored once; the evaluations went through the service too */
    CHECK(n_train == S_STEPS * S_PROMPTS * S_GROUP);
    CHECK(n_heldout > 0);
    char path[256], *metrics = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &metrics, NULL));
    double mean = 0;
    for (int s = 1; s <= S_STEPS && metrics; s++) /* each step: S_PROMPTS x S_GROUP completions */
        mean += runs_train_value(metrics, "main", s, "reward_mean") / S_STEPS;
    CHECK_NEAR(mean, n_train ? sum / n_train : NAN, 1e-9);
    printf("run: %d training and %d held-out completions scored in Python, reward mean %.6f\n",
           n_train, n_heldout, mean);
    free(metrics);
}

/*  A function that raises on every batch: the run stops, and says what Python said. */
static void test_run_raises(const char *python, const char *config) {
    char endpoint[128], set[192], dir[128], log[128], out[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/raise.ipc", s_tmp);
    snprintf(set, sizeof set, "reward.service=%s", endpoint);
    snprintf(dir, sizeof dir, "%s/raise", s_tmp);
    snprintf(log, sizeof log, "%s/raise.log", s_tmp);
    snprintf(out, sizeof out, "%s/raise.out", s_tmp);
    pid_t service = s_start(python, endpoint, log, "raise");
    const char *args[] = {"run",   config, "--run-dir", dir,           "--procs",
                          "--set", set,    "--set",     "sft.steps=0", NULL};
    CHECK(runs_wait(runs_spawn_in(NULL, args, out)) == 1);
    runs_term(service);
    const char *want = "the service says: reward function length_bonus raised ValueError: grader "
                       "unavailable for Q";
    char path[256], *events = NULL, *stderr_text = NULL;
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    CHECK_STR_CONTAINS(events, want);
    CHECK_OK(bt_file_read(out, 1 << 24, &stderr_text, NULL));
    CHECK_STR_CONTAINS(stderr_text, want);
    free(events);
    free(stderr_text);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_pyreward_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_columns(); /* the C side, which needs no Python */
    const char *missing = NULL, *python = runs_python(&missing);
    if (python) {
        s_make_records();
        char path[128], config[128];
        snprintf(path, sizeof path, "%s/rewards.py", s_tmp);
        CHECK_OK(bt_file_write(path, s_script, strlen(s_script)));
        snprintf(path, sizeof path, "%s/train.jsonl", s_tmp);
        CHECK_OK(s_write_dataset(path));
        char *json = malloc(sizeof s_json + 128), *at = strstr(s_json, "TRAIN");
        snprintf(json, sizeof s_json + 128, "%.*s%s%s", (int)(at - s_json), s_json, path, at + 5);
        snprintf(config, sizeof config, "%s/pyr.json", s_tmp);
        CHECK_OK(bt_file_write(config, json, strlen(json)));
        free(json);
        if (runs_pip_install(python, s_tmp)) {
            char endpoint[128], log[128];
            snprintf(endpoint, sizeof endpoint, "ipc://%s/direct.ipc", s_tmp);
            snprintf(log, sizeof log, "%s/direct.log", s_tmp);
            pid_t service = s_start(python, endpoint, log, "ok");
            test_direct(endpoint);
            test_peers(endpoint);
            runs_term(service);
            test_run(python, config);
            test_run_raises(python, config);
        }
    }
    runs_cleanup(s_tmp);
    return runs_python_exit(python, missing, "python/baton_reward");
}
