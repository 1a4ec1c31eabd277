/*  test_py_hostile.c — hostile requests to the Python services (python/baton_reward: serve, and
    baton_reward.env: serve_env; docs/protocol.md "Reward service" and "Environment service").
    A raw ZeroMQ DEALER socket (this test's own client, not workers/service.c) sends each service
    what baton never would: bytes that are not JSON, JSON null, a number, an array, an object
    without items, items of the wrong type, an item missing a field, several frames in one message,
    a 0-byte frame, invalid UTF-8 inside a string, a request of a few MB, one nested a million
    deep, an unknown kind, a wrong version (2; true and 1.0, which Python counts as 1).  Each
    reply must be one frame holding a JSON object (read with cJSON) whose "error" is a string
    naming what was wrong; after each, the service must still answer a valid request with the value
    this test computes (reward: a completion's length; environment: the observation "obs:" +
    prompt), waited for with a generous deadline (it did not crash or hang).  Without a python3
    that has zmq, pip and setuptools: SKIP naming the package, exit 77. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define S_DEADLINE_MS 60000 /* generous: the first reply waits for python to start and bind */

static char s_tmp[64];

/*  The services this test starts: argv[1] "reward" serves the length of each completion,
    "env" an environment whose reset observes "obs:" + prompt. */
static const char s_script[] = "import sys\n"
                               "from baton_reward import serve\n"
                               "from baton_reward.env import serve_env\n"
                               "def length(prompts, completions, answers, **columns):\n"
                               "    return [float(len(c)) for c in completions]\n"
                               "class Echo:\n"
                               "    def __init__(self, prompt, answer, **columns):\n"
                               "        self.prompt = prompt\n"
                               "    def reset(self):\n"
                               "        return 'obs:' + self.prompt, False\n"
                               "    def step(self, text, ids):\n"
                               "        return 'ok', 0.0, True, {}\n"
                               "if sys.argv[1] == 'reward':\n"
                               "    serve(length, sys.argv[2])\n"
                               "else:\n"
                               "    serve_env(Echo, sys.argv[2], stop=['</x>'])\n";

typedef struct s_frames {
    const char *data[3];
    size_t len[3];
    int n;
} s_frames;

/*  Sends frames (after the empty delimiter a REQ peer puts first) on sock and receives the reply:
    the number of frames after the delimiter into *n_frames, the first of them as a NUL-terminated
    copy (malloc'd; NULL when no reply came within S_DEADLINE_MS). */
static char *s_ask(void *sock, const s_frames *f, int *n_frames) {
    *n_frames = 0;
    CHECK(zmq_send(sock, "", 0, ZMQ_SNDMORE) == 0);
    for (int i = 0; i < f->n; i++)
        CHECK(zmq_send(sock, f->data[i], f->len[i], i + 1 < f->n ? ZMQ_SNDMORE : 0) ==
              (int)f->len[i]);
    zmq_pollitem_t item = {.socket = sock, .events = ZMQ_POLLIN};
    if (zmq_poll(&item, 1, S_DEADLINE_MS) != 1)
        return NULL;
    char *first = NULL;
    int more = 1, k = 0;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        CHECK(zmq_msg_recv(&m, sock, 0) >= 0);
        if (k == 0)
            CHECK(zmq_msg_size(&m) == 0); /* the delimiter comes back first */
        else if (k == 1) {
            first = malloc(zmq_msg_size(&m) + 1);
            memcpy(first, zmq_msg_data(&m), zmq_msg_size(&m));
            first[zmq_msg_size(&m)] = '\0';
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        k++;
    }
    *n_frames = k - 1;
    return first;
}

static char *s_ask1(void *sock, const char *text, size_t len, int *n_frames) {
    s_frames f = {.data = {text}, .len = {len}, .n = 1};
    return s_ask(sock, &f, n_frames);
}

/*  A valid request, and whether its reply is the one this test computes. */
static bool s_valid(void *sock, bool env, int round) {
    char req[256], want[64];
    int n = 0;
    if (env)
        snprintf(req, sizeof req,
                 "{\"version\": 1, \"kind\": \"reset\", \"request\": %d, \"items\": [{\"episode\": "
                 "%d, \"prompt\": \"p%d\", \"answer\": \"a\"}]}",
                 1000 + round, round, round);
    else
        snprintf(req, sizeof req,
                 "{\"version\": 1, \"kind\": \"rollout\", \"items\": [{\"index\": 0, \"prompt\": "
                 "\"q\", \"answer\": \"a\", \"completion\": \"%.*s\"}, {\"index\": 0, \"prompt\": "
                 "\"q\", \"answer\": \"a\", \"completion\": \"\\u00e9\"}]}",
                 round % 40 + 1, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    char *text = s_ask1(sock, req, strlen(req), &n);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    bool ok = n == 1 && j != NULL;
    if (ok && env) {
        const cJSON *it = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "items"), 0);
        snprintf(want, sizeof want, "obs:p%d", round);
        const char *obs = cJSON_GetStringValue(cJSON_GetObjectItem(it, "observation"));
        ok = obs && !strcmp(obs, want) && cJSON_IsFalse(cJSON_GetObjectItem(it, "done"));
    } else if (ok) {
        const cJSON *r = cJSON_GetObjectItem(j, "rewards");
        ok = cJSON_GetArraySize(r) == 2 &&
             cJSON_GetArrayItem(r, 0)->valuedouble == (double)(round % 40 + 1) &&
             cJSON_GetArrayItem(r, 1)->valuedouble == 1.0; /* é: one code point */
    }
    if (!ok)
        fprintf(stderr, "round %d: valid request got %s\n", round, text ? text : "(no reply)");
    cJSON_Delete(j);
    free(text);
    return ok;
}

typedef struct s_case {
    const char *what;
    s_frames frames;
    const char *reward_error, *env_error; /* what each service's error must contain */
} s_case;

#define S_ONE(text)                                                                                \
    { .data = {text}, .len = {sizeof text - 1}, .n = 1 }
#define S_ITEM_OK "{\"index\": 0, \"prompt\": \"q\", \"answer\": \"a\", \"completion\": \"c\"}"

static void test_service(const char *python, bool env) {
    char endpoint[128], script[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.ipc", s_tmp, env ? "env" : "reward");
    snprintf(script, sizeof script, "%s/services.py", s_tmp);
    const char *argv[] = {python, script, env ? "env" : "reward", endpoint, NULL};
    pid_t pid = runs_python_start(s_tmp, argv);

    /* a few MB: items a string of 4 MB; nested a million deep */
    enum { BIG = 4 << 20, DEEP = 1 << 20 };
    char *huge = malloc(BIG + 128), *deep = malloc(DEEP);
    int hl = snprintf(huge, 128, "{\"version\": 1, \"kind\": \"%s\", \"items\": \"",
                      env ? "reset" : "rollout");
    memset(huge + hl, 'x', BIG);
    hl += BIG;
    hl += snprintf(huge + hl, 128, "\"}");
    memset(deep, '[', DEEP);

    s_case cases[] = {
        {"invalid JSON bytes", S_ONE("{\"version\": 1, \"kind\": "), "not valid JSON",
         "not valid JSON"},
        {"JSON null", S_ONE("null"), "expected a request object", "expected a request object"},
        {"a number", S_ONE("42"), "expected a request object", "expected a request object"},
        {"an array", S_ONE("[{\"version\": 1}]"), "expected a request object",
         "expected a request object"},
        {"an object without items", S_ONE("{\"version\": 1, \"kind\": \"rollout\"}"),
         "\"items\": expected an array", "\"items\": expected an array"},
        {"items a string", S_ONE("{\"version\": 1, \"kind\": \"reset\", \"items\": \"abc\"}"),
         "\"items\": expected an array, got str", "\"items\": expected an array, got str"},
        {"items of numbers", S_ONE("{\"version\": 1, \"kind\": \"reset\", \"items\": [1]}"),
         "items[0]: expected an object", "expected an array of objects"},
        {"a field of the wrong type",
         S_ONE("{\"version\": 1, \"kind\": \"reset\", \"items\": [{\"index\": 0, \"episode\": "
               "\"e\", \"prompt\": 7, \"answer\": \"a\", \"completion\": \"c\"}]}"),
         "items[0].prompt: expected a string", "items[0].episode: expected an integer"},
        {"an item missing a field",
         S_ONE("{\"version\": 1, \"kind\": \"reset\", \"items\": [{\"index\": 0, \"episode\": 3, "
               "\"prompt\": \"q\", \"completion\": \"c\"}]}"),
         "items[0].answer: expected a string", "items[0].answer: expected a string"},
        {"several frames",
         {.data = {"{\"version\": 1,", "\"kind\": \"ping\", \"items\": []}"},
          .len = {strlen("{\"version\": 1,"), strlen("\"kind\": \"ping\", \"items\": []}")},
          .n = 2},
         "one frame, got 2",
         "one frame, got 2"},
        {"a 0-byte frame", {.data = {""}, .len = {0}, .n = 1}, "not valid JSON", "not valid JSON"},
        {"invalid UTF-8 in a string",
         S_ONE("{\"version\": 1, \"kind\": \"rollout\", \"items\": [{\"index\": 0, \"prompt\": "
               "\"q\", \"answer\": \"a\", \"completion\": \"c\xff\xfe\"}]}"),
         "not valid UTF-8", "not valid UTF-8"},
        {"a 4 MB request",
         {.data = {huge}, .len = {(size_t)hl}, .n = 1},
         "\"items\": expected an array, got str",
         "\"items\": expected an array, got str"},
        {"nested a million deep",
         {.data = {deep}, .len = {DEEP}, .n = 1},
         "nested too deep",
         "nested too deep"},
        {"an unknown kind",
         S_ONE("{\"version\": 1, \"kind\": \"bogus\", \"items\": [" S_ITEM_OK "]}"),
         "\"kind\": expected", "\"kind\": expected"},
        {"a wrong version", S_ONE("{\"version\": 2, \"kind\": \"ping\", \"items\": []}"),
         "expected \"version\": 1, got 2", "expected \"version\": 1, got 2"},
        {"version true", S_ONE("{\"version\": true, \"kind\": \"hello\", \"items\": []}"),
         "expected \"version\": 1, got True", "expected \"version\": 1, got True"},
        {"version 1.0", S_ONE("{\"version\": 1.0, \"kind\": \"hello\", \"items\": []}"),
         "expected \"version\": 1, got 1.0", "expected \"version\": 1, got 1.0"},
    };
    void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    CHECK(zmq_connect(sock, endpoint) == 0);
    CHECK(s_valid(sock, env, 0));
    int answered = 0, n_cases = (int)(sizeof cases / sizeof *cases);
    for (int c = 0; c < n_cases; c++) {
        int n = 0;
        char *text = s_ask(sock, &cases[c].frames, &n);
        cJSON *j = text ? cJSON_Parse(text) : NULL;
        const char *err = cJSON_GetStringValue(cJSON_GetObjectItem(j, "error"));
        const char *want = env ? cases[c].env_error : cases[c].reward_error;
        bool ok = n == 1 && cJSON_IsObject(j) && err && strstr(err, want);
        if (!ok)
            fprintf(
                stderr, "%s: %s: want one frame with an error containing '%s', got %d: %.300s\n",
                env ? "serve_env" : "serve", cases[c].what, want, n, text ? text : "(no reply)");
        CHECK(ok);
        cJSON_Delete(j);
        free(text);
        bool alive = s_valid(sock, env, c + 1);
        CHECK(alive);
        answered += ok && alive;
        if (!alive) { /* dead or hung: the rest would only time out */
            fprintf(stderr, "%s: no answer after %s\n", env ? "serve_env" : "serve", cases[c].what);
            break;
        }
    }
    printf("%s: %d of %d hostile requests refused with their error, each followed by a valid "
           "answer\n",
           env ? "serve_env" : "serve", answered, n_cases);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    free(huge);
    free(deep);
    runs_term(pid);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_pyhostile_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    const char *missing = NULL, *python = runs_python(&missing);
    if (python && runs_pip_install(python, s_tmp)) {
        char path[128];
        snprintf(path, sizeof path, "%s/services.py", s_tmp);
        CHECK_OK(bt_file_write(path, s_script, strlen(s_script)));
        test_service(python, false);
        test_service(python, true);
    }
    runs_cleanup(s_tmp);
    return runs_python_exit(python, missing,
                            "python/baton_reward's services against hostile requests");
}
