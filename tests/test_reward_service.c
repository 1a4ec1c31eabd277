/*  test_reward_service.c — the reward service (docs/protocol.md, "Reward service"): the client
    scores a batch through examples/reward_service.py, whose rewards agree with a hand-made table
    and with the built-in verifier; replies that are malformed, missing or late fail the call with
    a line naming the endpoint and the fault, and the client keeps working; a whole run whose
    rewards come from the example (worker processes) writes the metrics of the run scored by the
    built-in verifier, and a run whose service never answers stops with that line.  Without a
    python3 that imports zmq the Python parts print SKIP and the test exits 77 (ctest: skipped). */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/reward_service.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define S_SKIP 77 /* ctest's SKIP_RETURN_CODE for this test (CMakeLists.txt) */

static char s_tmp[64];

/*  A python3 that imports zmq: $BATON_PYTHON when set (only it), else python3 on the PATH, else
    Debian's (whose python3-zmq a pyenv or venv python3 on the PATH does not see); NULL when none
    does. */
static const char *s_python(void) {
    const char *env = getenv("BATON_PYTHON");
    const char *candidates[] = {env ? env : "python3", env ? NULL : "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && candidates[i]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import zmq' >/dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0)
            return candidates[i];
    }
    return NULL;
}

/*  Starts examples/reward_service.py on endpoint with --format-reward format_reward. */
static pid_t s_start_service(const char *python, const char *endpoint, const char *format_reward) {
    char script[1024];
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(script, sizeof script, "%s/examples/reward_service.py", src ? src : ".");
    pid_t pid = fork();
    if (pid == 0) {
        execlp(python, python, script, endpoint, "--format-reward", format_reward, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* ---- the Python example against a hand-made table -------------------------------------------- */

/*  Each completion's reward under the arithmetic verifier with format_reward 0.5, worked out by
    hand: 1 when the optional '-' and digits after leading C white space equal the answer, plus 0.5
    when nothing but white space follows them. */
static const struct {
    const char *answer, *completion;
    size_t len; /* 0: strlen(completion) */
    double reward;
    bool correct;
} s_table[] = {
    {"85", "85", 0, 1.5, true},
    {"85", "84", 0, 0.5, false},
    {"85", " 85\n", 0, 1.5, true},
    {"85", "85+1", 0, 1.0, true},
    {"85", "085", 0, 0.5, false}, /* "085" is not "85" */
    {"-12", "-12", 0, 1.5, true},
    {"-12", "- 12", 0, 0.0, false},
    {"85", "", 0, 0.0, false},
    {"85", "8\3775", 0, 0.0, false},    /* 0xFF, not UTF-8, between the digits */
    {"85", "85\xff", 0, 1.0, true},     /* ... after them */
    {"85", "85\xe2\x80", 0, 1.0, true}, /* a cut-off UTF-8 sequence */
    {"85", "85\0", 3, 1.0, true},       /* a NUL byte is not white space */
    {"85", "\"85\"", 0, 0.0, false},
    {"7", "\t7 ", 0, 1.5, true},
    {"85", "\v85\f", 0, 1.5, true},      /* C white space */
    {"85", "\03485", 0, 0.0, false},     /* 0x1C: not C white space, yet Python's str.strip() */
    {"85", "\302\24085", 0, 0.0, false}, /* U+00A0 neither */
    {"85", "\xd9\xa8\xd9\xa5", 0, 0.0, false}, /* Arabic-Indic 85: digits to Python, not to C */
};
enum { S_N = sizeof s_table / sizeof *s_table };

static void s_table_items(bt_reward_item *items) {
    for (int i = 0; i < S_N; i++)
        items[i] = (bt_reward_item){.index = (uint64_t)(1000 + i / 4),
                                    .prompt = "question",
                                    .answer = s_table[i].answer,
                                    .completion = s_table[i].completion,
                                    .len = s_table[i].len ? s_table[i].len
                                                          : strlen(s_table[i].completion)};
}

static void test_python_example(const char *python) {
    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/example.ipc", s_tmp);
    pid_t service = s_start_service(python, endpoint, "0.5");
    bt_reward_service_t *client = NULL;
    /* a generous timeout: the first request waits for the interpreter to start and bind */
    CHECK_OK(bt_reward_service_new(endpoint, 30000, 0, &client));
    bt_reward_item items[S_N];
    s_table_items(items);
    double rewards[S_N];
    bool correct[S_N];
    CHECK_OK(bt_reward_service_score(client, "rollout", items, S_N, rewards, correct));
    CHECK_OK(bt_reward_service_score(client, "eval", items, S_N, rewards, correct)); /* again */

    /* the example mirrors the built-in arithmetic verifier */
    bt_source_arith_config cfg;
    bt_source_arith_config_init(&cfg);
    cfg.format_reward = 0.5;
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_arith(&cfg, &task));
    for (int i = 0; i < S_N && task; i++) {
        bt_reward_detail d;
        double builtin =
            bt_source_reward(task, items[i].answer, items[i].completion, items[i].len, &d);
        if (rewards[i] != s_table[i].reward || correct[i] != s_table[i].correct ||
            builtin != s_table[i].reward || d.correct != s_table[i].correct) {
            fprintf(stderr, "row %d: service %g %d, built-in %g %d, table %g %d\n", i, rewards[i],
                    correct[i], builtin, d.correct, s_table[i].reward, s_table[i].correct);
            s_check_failures++;
        }
    }
    /* with no service, bt_reward_score is the task's verifier */
    double local[S_N];
    bool local_correct[S_N];
    CHECK_OK(bt_reward_score(NULL, task, "rollout", items, S_N, local, local_correct));
    CHECK(memcmp(local, rewards, sizeof local) == 0);
    CHECK(memcmp(local_correct, correct, sizeof correct) == 0);
    bt_source_destroy(&task);
    bt_reward_service_destroy(&client);
    bt_reward_service_destroy(&client); /* idempotent */
    runs_term(service);
}

/* ---- a misbehaving service: a ROUTER thread that follows a script --------------------------- */

/*  What the service does with one request. */
typedef struct s_step {
    const char *reply; /* NULL: no reply at all */
    size_t len;        /* 0: strlen(reply) */
    int frames;        /* the reply sent as this many copies, one per frame (0: 1) */
    const char *stale; /* first sent as a (late) reply to the previous request, or NULL */
} s_step;

typedef struct s_server {
    void *router;
    const s_step *steps;
    int n_steps;
    pthread_mutex_t lock;
    char first_request[4096]; /* body of the first request, NUL-terminated */
} s_server;

/*  Receives one multipart message into frames[0..*n); false after 5 s without one. */
static bool s_recv_all(void *sock, zmq_msg_t *frames, int max, int *n) {
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 5000) <= 0)
        return false;
    *n = 0;
    do {
        zmq_msg_init(&frames[*n]);
        zmq_msg_recv(&frames[*n], sock, 0);
    } while (zmq_msg_more(&frames[(*n)++]) && *n < max);
    return true;
}

/*  Sends the envelope (every frame but the last of request) and then body, copies times. */
static void s_reply(void *sock, zmq_msg_t *request, int n, const char *body, size_t len,
                    int copies) {
    for (int i = 0; i < n - 1; i++)
        zmq_send(sock, zmq_msg_data(&request[i]), zmq_msg_size(&request[i]), ZMQ_SNDMORE);
    for (int c = 0; c < copies; c++)
        zmq_send(sock, body, len, c + 1 < copies ? ZMQ_SNDMORE : 0);
}

static void *s_server_main(void *arg) {
    s_server *s = arg;
    zmq_msg_t prev[8], cur[8];
    int n_prev = 0, n_cur = 0;
    for (int i = 0; i < s->n_steps; i++) {
        const s_step *st = &s->steps[i];
        if (!s_recv_all(s->router, cur, 8, &n_cur))
            break; /* the client gave up early: the checks in main say so */
        if (i == 0) {
            pthread_mutex_lock(&s->lock);
            size_t len = zmq_msg_size(&cur[n_cur - 1]);
            len = len < sizeof s->first_request - 1 ? len : sizeof s->first_request - 1;
            memcpy(s->first_request, zmq_msg_data(&cur[n_cur - 1]), len);
            s->first_request[len] = '\0';
            pthread_mutex_unlock(&s->lock);
        }
        if (st->stale && n_prev)
            s_reply(s->router, prev, n_prev, st->stale, strlen(st->stale), 1);
        if (st->reply)
            s_reply(s->router, cur, n_cur, st->reply, st->len ? st->len : strlen(st->reply),
                    st->frames ? st->frames : 1);
        for (int f = 0; f < n_prev; f++)
            zmq_msg_close(&prev[f]);
        memcpy(prev, cur, sizeof cur);
        n_prev = n_cur;
    }
    for (int f = 0; f < n_prev; f++)
        zmq_msg_close(&prev[f]);
    return NULL;
}

/*  One call of the script: the status and error it must give (want NULL: BT_OK). */
static void s_expect(bt_reward_service_t *client, int n, bt_status code, const char *want,
                     double *rewards, bool *correct) {
    bt_reward_item items[3] = {{.index = 7, .prompt = "2+2=", .answer = "4", .completion = "4"},
                               {.index = 7, .prompt = "2+2=", .answer = "4", .completion = "5"},
                               {.index = 8, .prompt = "1+1=", .answer = "2", .completion = "2"}};
    for (int i = 0; i < 3; i++)
        items[i].len = strlen(items[i].completion);
    bt_status st = bt_reward_service_score(client, "rollout", items, n, rewards, correct);
    CHECK(st == code);
    if (want)
        CHECK_STR_CONTAINS(bt_last_error(), want);
    if (st != code)
        fprintf(stderr, "  (expected \"%s\", got %d: %s)\n", want ? want : "ok", st,
                bt_last_error());
}

static void test_misbehaving(void) {
    char endpoint[128], prefix[192];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/script.ipc", s_tmp);
    snprintf(prefix, sizeof prefix, "reward service %s: ", endpoint);
    const s_step steps[] = {
        {.reply = "{\"rewards\": [1, 0]}"},
        {.reply = "{\"rewards\": [0.5, 2], \"correct\": [true, false], \"extra\": {}}"},
        {.reply = "not json"},
        {.reply = "{\"rewards\": [1, 0]} trailing"},
        {.reply = "{\"rewards\": [1, 0]}\0", .len = 20},
        {.reply = "{\"rewards\": [\"\xff\"]}"},
        {.reply = "[1, 0]"},
        {.reply = "{\"reward\": [1, 0]}"},
        {.reply = "{\"rewards\": {\"0\": 1}}"},
        {.reply = "{\"rewards\": [1]}"},
        {.reply = "{\"rewards\": [1, \"x\"]}"},
        {.reply = "{\"rewards\": [1, 1e999]}"},
        {.reply = "{\"rewards\": [1, null]}"},
        {.reply = "{\"rewards\": [1, 0], \"correct\": [1, 0]}"},
        {.reply = "{\"rewards\": [1, 0], \"correct\": [true]}"},
        {.reply = "{\"error\": \"model server down\"}"},
        {.reply = "{\"rewards\": [1, 0]}", .frames = 2},
        {.reply = NULL}, /* silence: a timeout */
        {.reply = "{\"rewards\": [3, 4]}", .stale = "{\"rewards\": [9, 9]}"},
        {.reply = "{\"rewards\": [0, 1, 0]}"},
    };
    s_server server = {.steps = steps, .n_steps = (int)(sizeof steps / sizeof *steps)};
    pthread_mutex_init(&server.lock, NULL);
    void *ctx = zmq_ctx_new();
    server.router = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(server.router, ZMQ_LINGER, &linger, sizeof linger);
    CHECK(zmq_bind(server.router, endpoint) == 0);
    pthread_t thread;
    pthread_create(&thread, NULL, s_server_main, &server);

    bt_reward_service_t *client = NULL;
    CHECK_OK(bt_reward_service_new(endpoint, 300, 0, &client));
    double r[3] = {0};
    bool c[3] = {0};
    char want[512];
    s_expect(client, 2, BT_OK, NULL, r, c);
    CHECK(r[0] == 1 && r[1] == 0 && c[0] && !c[1]); /* no "correct": reward >= 1 */
    s_expect(client, 2, BT_OK, NULL, r, c);
    CHECK(r[0] == 0.5 && r[1] == 2 && c[0] && !c[1]); /* "correct" given; other keys ignored */
    const char *faults[] = {
        "reply: not valid JSON",
        "reply: not valid JSON",
        "reply: not UTF-8 text",
        "reply: not UTF-8 text",
        "reply: expected a JSON object, got an array",
        "reply: \"rewards\": expected an array of 2 numbers, got nothing",
        "reply: \"rewards\": expected an array of 2 numbers, got an object",
        "reply: \"rewards\" has 1 entries for 2 completions",
        "reply: rewards[1]: expected a finite number, got \"x\"",
        "reply: rewards[1]: expected a finite number, got inf",
        "reply: rewards[1]: expected a finite number, got null",
        "reply: correct[0]: expected true or false, got 1",
        "reply: \"correct\" has 1 entries for 2 completions",
        "the service says: model server down",
        "reply: 2 frames, expected 1",
    };
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
        snprintf(want, sizeof want, "%s%s", prefix, faults[i]);
        s_expect(client, 2, BT_EFORMAT, want, r, c);
    }
    snprintf(want, sizeof want, "%sno reply within 300 ms (1 attempt)", prefix);
    s_expect(client, 2, BT_EIO, want, r, c);
    /* the late reply to the abandoned request is dropped, not taken for this one's */
    s_expect(client, 2, BT_OK, NULL, r, c);
    CHECK(r[0] == 3 && r[1] == 4);
    s_expect(client, 3, BT_OK, NULL, r, c);
    CHECK(r[0] == 0 && r[1] == 1 && r[2] == 0 && !c[0] && c[1] && !c[2]);
    pthread_join(thread, NULL);

    /* the request, as the service saw it: any completion bytes travel, escaped */
    cJSON *req = cJSON_Parse(server.first_request);
    CHECK(req && cJSON_GetObjectItem(req, "version")->valuedouble == 1);
    CHECK(req && !strcmp(cJSON_GetObjectItem(req, "kind")->valuestring, "rollout"));
    const cJSON *items = req ? cJSON_GetObjectItem(req, "items") : NULL;
    CHECK(cJSON_GetArraySize(items) == 2);
    const cJSON *first = cJSON_GetArrayItem(items, 0);
    CHECK(first && cJSON_GetObjectItem(first, "index")->valuedouble == 7);
    CHECK(first && !strcmp(cJSON_GetObjectItem(first, "prompt")->valuestring, "2+2="));
    CHECK(first && !strcmp(cJSON_GetObjectItem(first, "answer")->valuestring, "4"));
    CHECK(first && !strcmp(cJSON_GetObjectItem(first, "completion")->valuestring, "4"));
    cJSON_Delete(req);

    /* retries: a silent first attempt, an answered second one; then two silent ones */
    const s_step retry_steps[] = {
        {.reply = NULL}, {.reply = "{\"rewards\": [5, 6]}"}, {.reply = NULL}, {.reply = NULL}};
    server.steps = retry_steps;
    server.n_steps = (int)(sizeof retry_steps / sizeof *retry_steps);
    pthread_create(&thread, NULL, s_server_main, &server);
    bt_reward_service_t *patient = NULL;
    CHECK_OK(bt_reward_service_new(endpoint, 300, 1, &patient));
    s_expect(patient, 2, BT_OK, NULL, r, c);
    CHECK(r[0] == 5 && r[1] == 6);
    snprintf(want, sizeof want, "%sno reply within 300 ms (2 attempts)", prefix);
    s_expect(patient, 2, BT_EIO, want, r, c);
    pthread_join(thread, NULL);

    bt_reward_service_destroy(&patient);
    bt_reward_service_destroy(&client);
    zmq_close(server.router);
    zmq_ctx_term(ctx);
    pthread_mutex_destroy(&server.lock);
}

/*  The ping a worker sends as it starts: an empty request of kind "ping", answered as any request
    ({"rewards": []}); silence fails it within the timeout, saying no service answers at the
    endpoint; a wrong reply fails it as a request's would.  Replies holding NaN or Infinity (what
    Python's json.dumps writes for float("nan") and float("inf")) say so and where, not "not valid
    JSON"; a reward beyond BT_REWARD_MAX (1e6) is refused with its value; 1e6 itself passes. */
static void test_ping_and_values(void) {
    char endpoint[128], prefix[192];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/ping.ipc", s_tmp);
    snprintf(prefix, sizeof prefix, "reward service %s: ", endpoint);
    const s_step steps[] = {
        {.reply = "{\"rewards\": []}"},
        {.reply = NULL},
        {.reply = "{\"rewards\": [1]}"},
        {.reply = "{\"rewards\": [1, NaN]}"},
        {.reply = "{\"rewards\": [Infinity, 0]}"},
        {.reply = "{\"rewards\": [1, -Infinity], \"correct\": [true, false]}"},
        {.reply = "{\"rewards\": [1, 1e300]}"},
        {.reply = "{\"rewards\": [-1000000.5, 0]}"},
        {.reply = "{\"rewards\": [1000000, -1000000]}"},
    };
    s_server server = {.steps = steps, .n_steps = (int)(sizeof steps / sizeof *steps)};
    pthread_mutex_init(&server.lock, NULL);
    void *ctx = zmq_ctx_new();
    server.router = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(server.router, ZMQ_LINGER, &linger, sizeof linger);
    CHECK(zmq_bind(server.router, endpoint) == 0);
    pthread_t thread;
    pthread_create(&thread, NULL, s_server_main, &server);

    bt_reward_service_t *client = NULL;
    CHECK_OK(bt_reward_service_new(endpoint, 300, 0, &client));
    CHECK_OK(bt_reward_service_ping(client));
    pthread_mutex_lock(&server.lock);
    CHECK(strcmp(server.first_request, "{\"version\":1,\"kind\":\"ping\",\"items\":[]}") == 0);
    pthread_mutex_unlock(&server.lock);
    char want[512];
    double t0 = bt_now();
    CHECK(bt_reward_service_ping(client) == BT_EIO);
    double waited = bt_now() - t0;
    CHECK(waited >= 0.29 && waited < 2.0);
    snprintf(want, sizeof want,
             "%sno reply within 300 ms (1 attempt) to the ping a worker sends as it starts: no "
             "service answers there",
             prefix);
    CHECK_STR_CONTAINS(bt_last_error(), want);
    CHECK(bt_reward_service_ping(client) == BT_EFORMAT);
    snprintf(want, sizeof want, "%sreply: \"rewards\" has 1 entries for 0 completions", prefix);
    CHECK_STR_CONTAINS(bt_last_error(), want);
    double r[3] = {0};
    bool c[3] = {0};
    const char *faults[] = {
        "reply: NaN at byte 16 is not a JSON number: every reward must be a finite number",
        "reply: Infinity at byte 13 is not a JSON number",
        "reply: -Infinity at byte 16 is not a JSON number",
        "reply: rewards[1] is 1e+300, beyond the magnitude of 1e+06 a reward may have "
        "(BT_REWARD_MAX)",
        "reply: rewards[0] is -1000000.5, beyond the magnitude of 1e+06",
    };
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
        snprintf(want, sizeof want, "%s%s", prefix, faults[i]);
        s_expect(client, 2, BT_EFORMAT, want, r, c);
    }
    s_expect(client, 2, BT_OK, NULL, r, c);
    CHECK(r[0] == 1e6 && r[1] == -1e6 && c[0] && !c[1]);
    pthread_join(thread, NULL);
    bt_reward_service_destroy(&client);
    zmq_close(server.router);
    zmq_ctx_term(ctx);
    pthread_mutex_destroy(&server.lock);
}

/*  The escaping of a request, checked on what a service receives: a REP socket in this thread. */
static void test_request_bytes(void) {
    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/bytes.ipc", s_tmp);
    void *ctx = zmq_ctx_new(), *rep = zmq_socket(ctx, ZMQ_REP);
    CHECK(zmq_bind(rep, endpoint) == 0);
    bt_reward_service_t *client = NULL;
    CHECK_OK(bt_reward_service_new(endpoint, 50, 0, &client));
    bt_reward_item odd = {.index = 9007199254740991ULL,
                          .prompt = "say \"hi\"\\",
                          .answer = "\t",
                          .completion = "\0\"\n\xff\xe2\x82\xac\xe2\x82",
                          .len = 9};
    double r;
    bool c;
    CHECK(bt_reward_service_score(client, "eval", &odd, 1, &r, &c) == BT_EIO); /* no reply yet */
    char body[1024] = "";
    int n = zmq_recv(rep, body, sizeof body - 1, 0);
    CHECK(n > 0);
    body[n > 0 ? n : 0] = '\0';
    const char *expected =
        "{\"version\":1,\"kind\":\"eval\",\"items\":[{\"index\":9007199254740991,"
        "\"prompt\":\"say \\\"hi\\\"\\\\\",\"answer\":\"\\t\","
        "\"completion\":\"\\u0000\\\"\\n\\ufffd\xe2\x82\xac\\ufffd\\ufffd\"}]}";
    CHECK(strcmp(body, expected) == 0);
    if (strcmp(body, expected) != 0)
        fprintf(stderr, "  got:      %s\n  expected: %s\n", body, expected);
    bt_reward_service_destroy(&client);
    zmq_close(rep);
    zmq_ctx_term(ctx);
}

/* ---- whole runs ------------------------------------------------------------------------------ */

static const char s_json[] =
    "{\"run\": {\"name\": \"rs\", \"seed\": 5}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6,"
    "  \"format_reward\": 0.25},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 4, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 2, \"heldout_count\": 6, \"datasets\": ["
    "  {\"name\": \"heldout\", \"robustness\": true},"
    "  {\"name\": \"sampled\", \"samples\": 4, \"temperature\": 1.0}]},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

/*  Runs `$BATON_BIN args...` (at most 15) with its stderr written to path; its exit status. */
static int s_run_stderr(const char *const *args, const char *path) {
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen(path, "w", stderr))
            _exit(126);
        const char *bin = getenv("BATON_BIN") ? getenv("BATON_BIN") : "./baton";
        const char *argv[17] = {bin};
        for (int i = 0; args[i] && i < 15; i++)
            argv[i + 1] = args[i];
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return runs_wait(pid);
}

static void test_runs(const char *python) {
    char config[128], plain[128], served[128], silent[128], endpoint[128], set[192];
    snprintf(config, sizeof config, "%s/rs.json", s_tmp);
    CHECK_OK(bt_file_write(config, s_json, strlen(s_json)));
    snprintf(plain, sizeof plain, "%s/plain", s_tmp);
    snprintf(served, sizeof served, "%s/served", s_tmp);
    snprintf(silent, sizeof silent, "%s/silent", s_tmp);

    const char *plain_args[] = {"run", config, "--run-dir", plain, NULL};
    CHECK(runs_wait(runs_spawn(plain_args)) == 0);

    /* worker processes, which a host reward function cannot reach, ask the Python example */
    snprintf(endpoint, sizeof endpoint, "ipc://%s/run.ipc", s_tmp);
    snprintf(set, sizeof set, "reward.service=%s", endpoint);
    pid_t service = s_start_service(python, endpoint, "0.25");
    const char *served_args[] = {"run", config, "--run-dir", served, "--procs", "--set", set, NULL};
    CHECK(runs_wait(runs_spawn(served_args)) == 0);
    runs_term(service);
    char *a = runs_metrics(plain), *b = runs_metrics(served);
    CHECK(a && b && strcmp(a, b) == 0);           /* the same rewards, so the same run */
    CHECK_STR_CONTAINS(a, "\"robust.spacing\":"); /* eval with robustness went through it too */
    free(a);
    free(b);

    /* nobody answers: every task fails with the endpoint in its error, and the run stops */
    snprintf(set, sizeof set, "reward.service=ipc://%s/nobody.ipc", s_tmp);
    const char *silent_args[] = {"run",   config,        "--run-dir", silent,
                                 "--set", set,           "--set",     "reward.timeout_ms=100",
                                 "--set", "sft.steps=0", NULL};
    CHECK(runs_wait(runs_spawn(silent_args)) == 1);
    char path[256], *events = NULL, want[256];
    snprintf(path, sizeof path, "%s/events.jsonl", silent);
    CHECK_OK(bt_file_read(path, 1 << 24, &events, NULL));
    snprintf(want, sizeof want, "reward service ipc://%s/nobody.ipc: no reply within 100 ms",
             s_tmp);
    CHECK_STR_CONTAINS(events, want);
    free(events);

    /* the workers ping the service as they start: with nobody there the run stops after that
       one ping (no job's timeout, no re-queue), before its first RL step or evaluation (the
       trainer's SFT needs no reward), and says why on stderr (before, the tasks' timeouts and
       re-queues took 4 timeouts and more).  No wall-clock bound: the machine may be loaded. */
    char early[128], early_err[128], *stderr_text = NULL;
    snprintf(early, sizeof early, "%s/early", s_tmp);
    snprintf(early_err, sizeof early_err, "%s/early.err", s_tmp);
    const char *early_args[] = {
        "run", config, "--run-dir", early, "--set", set, "--set", "reward.timeout_ms=1000", NULL};
    CHECK(s_run_stderr(early_args, early_err) == 1);
    CHECK_OK(bt_file_read(early_err, 1 << 20, &stderr_text, NULL));
    snprintf(want, sizeof want,
             "cannot start: reward service ipc://%s/nobody.ipc: no reply within 1000 ms (1 "
             "attempt) to the ping a worker sends as it starts",
             s_tmp);
    CHECK_STR_CONTAINS(stderr_text, want);
    free(stderr_text);
    snprintf(path, sizeof path, "%s/metrics.jsonl", early);
    char *early_metrics = NULL;
    if (bt_file_read(path, 1 << 20, &early_metrics, NULL) == BT_OK)
        CHECK(!strstr(early_metrics, "\"kind\":\"train\"") &&
              !strstr(early_metrics, "\"kind\":\"eval\""));
    free(early_metrics);
    snprintf(path, sizeof path, "%s/events.jsonl", early);
    char *early_events = NULL;
    CHECK_OK(bt_file_read(path, 1 << 20, &early_events, NULL));
    CHECK(early_events && !strstr(early_events, "\"task_failed\"") &&
          !strstr(early_events, "\"task_requeued\""));
    free(early_events);
    snprintf(want, sizeof want, "reward service ipc://%s/nobody.ipc: no reply within 100 ms",
             s_tmp);

    /* `baton eval` scores generate datasets as an eval worker does: through the service */
    char err_path[128], *err = NULL;
    snprintf(err_path, sizeof err_path, "%s/eval.err", s_tmp);
    const char *eval_args[] = {
        "eval", "init", "--config", config, "--set", set, "--set", "reward.timeout_ms=100", NULL};
    CHECK(s_run_stderr(eval_args, err_path) == 1);
    CHECK_OK(bt_file_read(err_path, 1 << 20, &err, NULL));
    CHECK_STR_CONTAINS(err, want);
    free(err);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_reward_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    test_misbehaving();
    test_ping_and_values();
    test_request_bytes();
    const char *python = s_python();
    if (python) {
        test_python_example(python);
        test_runs(python);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (s_check_failures == 0)
        CHECK(system(cmd) == 0);
    if (s_check_failures == 0 && !python) {
        printf("SKIP: no python3 with the zmq module (Debian: python3-zmq; or set BATON_PYTHON): "
               "examples/reward_service.py and the runs that use it were not tested\n");
        return S_SKIP;
    }
    return check_exit();
}
