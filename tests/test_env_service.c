/*  test_env_service.c — the environment service (docs/protocol.md, "Environment service"): a
    number-guessing game in Python (tests/ref/env_guess.py, served by python/baton_reward/env.py,
    pip-installed offline into a folder) played by the C client (workers/env_service.c) over 9
    episodes at once, the guesses a binary search: every observation, reward, done and tool flag
    equals what this test computes for the game itself; a step resent after a timeout is answered
    with the reply already given, never played twice; the Python env's exceptions and a step of a
    finished episode come back as the batch's error.  A misbehaving service (tests/ref/env_stub.py)
    gives each bad reply (wrong count, NaN reward, missing observation, oversize observation, a
    wrong episode, wrong types, its own error, no reply, a late reply to an abandoned attempt, a
    silent first attempt) and the client fails with the documented line naming the endpoint and the
    episode, then works again.  On tcp:// the game runs with CURVE keys from bt_keygen; a client
    without the allowed key gets no answer, and a tcp:// client without keys must say insecure.
    Without a python3 that has zmq, pip and setuptools: SKIP naming the package, exit 77. */
#define _DEFAULT_SOURCE
#include "baton/env_service.h"
#include "baton/fileio.h"
#include "baton/security.h"
#include "check.h"
#include "runs.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char s_tmp[64];

/*  Starts python on tests/ref/SCRIPT with args (at most 3; NULL-terminated) and
    PYTHONPATH=s_tmp/site, its stderr appended to s_tmp/service.err. */
static pid_t s_start(const char *python, const char *script, const char *const *args) {
    char path[1024];
    const char *src = getenv("BATON_SOURCE_DIR") ? getenv("BATON_SOURCE_DIR") : ".";
    snprintf(path, sizeof path, "%s/tests/ref/%s", src, script);
    const char *argv[6] = {python, path};
    for (int i = 0; args[i] && i < 3; i++)
        argv[i + 2] = args[i];
    return runs_python_start(s_tmp, argv);
}

/*  The reply's observation as a NUL-terminated string (the test's own copy). */
static const char *s_obs(const bt_env_reply *r, char *buf, size_t cap) {
    size_t n = r->observation_len < cap - 1 ? r->observation_len : cap - 1;
    memcpy(buf, r->observation, n);
    buf[n] = '\0';
    return buf;
}

/* ---- the game, played and computed --------------------------------------------------------- */

enum { S_GAMES = 9 };

/*  One episode as this test knows it: the number, the range the search has left, the guesses. */
typedef struct s_game {
    uint64_t episode;
    int target, lo, hi, guesses;
    double reward; /* the sum of the rewards the service gave */
    bool done;
    char text[64];
    int32_t ids[64];
} s_game;

/*  Plays every game to its end through env, round by round, each round one batched step of the
    games still going; in round 1 the first game's turn holds "slow" and goes through impatient
    (a client whose timeout the service's answer outlasts: it resends).  In round 0 the second game
    sends a turn without a guess.  Checks each reply against the game as this test computes it. */
static void s_play(bt_env_t *env, bt_env_t *impatient, s_game *games, int n) {
    for (int round = 0; round < 16; round++) {
        bt_env_step_item items[S_GAMES];
        s_game *of[S_GAMES];
        int k = 0;
        for (int i = 0; i < n; i++) {
            s_game *g = &games[i];
            if (g->done)
                continue;
            int guess = (g->lo + g->hi) / 2;
            bool none = round == 0 && i == 1, slow = round == 1 && i == 0;
            snprintf(g->text, sizeof g->text, none ? "I pass</guess>" : "<guess>%d</guess>%s",
                     guess, slow ? " slow" : "");
            size_t len = strlen(g->text);
            for (size_t b = 0; b < len; b++)
                g->ids[b] = (int32_t)(unsigned char)g->text[b];
            items[k] = (bt_env_step_item){.episode = g->episode,
                                          .action_text = g->text,
                                          .action_len = len,
                                          .action_ids = g->ids,
                                          .n_action_ids = (int64_t)len};
            of[k++] = g;
        }
        if (k == 0)
            return;
        bt_env_reply out[S_GAMES];
        CHECK_OK(bt_env_step(round == 1 ? impatient : env, items, k, out));
        for (int j = 0; j < k; j++) {
            s_game *g = of[j];
            char want[64], got[128];
            double reward = 0;
            bool done = false, called = true, failed = false;
            int guess = (g->lo + g->hi) / 2;
            if (strncmp(g->text, "<guess>", 7) != 0) {
                snprintf(want, sizeof want, "no guess");
                called = false;
                failed = true;
            } else if (++g->guesses, guess == g->target) {
                snprintf(want, sizeof want, "correct in %d guesses", g->guesses);
                reward = 1.0;
                done = true;
            } else {
                snprintf(want, sizeof want, guess < g->target ? "higher" : "lower");
                reward = -0.125;
                if (guess < g->target)
                    g->lo = guess + 1;
                else
                    g->hi = guess - 1;
            }
            CHECK_STR_EQ(s_obs(&out[j], got, sizeof got), want);
            CHECK(out[j].reward == reward && out[j].done == done);
            CHECK(out[j].tool_called == called && out[j].tool_error == failed);
            g->reward += out[j].reward;
            g->done = out[j].done;
        }
    }
    CHECK(!"a game outlasted 16 rounds");
}

static void s_new_games(s_game *games, int n) {
    const int targets[S_GAMES] = {1, 100, 37, 64, 50, 2, 99, 73, 42};
    for (int i = 0; i < n; i++)
        games[i] = (s_game){.episode = ((uint64_t)(i + 1) << 40) | 3, /* beyond 2^32 */
                            .target = targets[i],
                            .lo = 1,
                            .hi = 100};
    games[8].target = games[8].lo = games[8].hi = 42; /* a range of one: over at reset */
}

static void s_reset(bt_env_t *env, s_game *games, int n) {
    char prompts[S_GAMES][32], answers[S_GAMES][8], columns[S_GAMES][64];
    bt_env_reset_item items[S_GAMES];
    for (int i = 0; i < n; i++) {
        snprintf(prompts[i], sizeof prompts[i], "game %d", i);
        snprintf(answers[i], sizeof answers[i], "%d", games[i].target);
        snprintf(columns[i], sizeof columns[i], "{\"low\": %d, \"high\": %d}", games[i].lo,
                 games[i].hi);
        items[i] = (bt_env_reset_item){.episode = games[i].episode,
                                       .prompt = prompts[i],
                                       .answer = answers[i],
                                       .columns = columns[i]};
    }
    bt_env_reply out[S_GAMES];
    CHECK_OK(bt_env_reset(env, items, n, out));
    for (int i = 0; i < n; i++) {
        char want[64], got[128];
        bool one = games[i].lo == games[i].hi;
        if (one)
            snprintf(want, sizeof want, "only %d", games[i].lo);
        else
            snprintf(want, sizeof want, "Guess a number from %d to %d.", games[i].lo, games[i].hi);
        CHECK_STR_EQ(s_obs(&out[i], got, sizeof got), want);
        CHECK(out[i].done == one && out[i].reward == 0);
        games[i].done = out[i].done;
    }
}

static void test_guess(const char *python) {
    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/guess.ipc", s_tmp);
    const char *args[] = {endpoint, NULL};
    pid_t service = s_start(python, "env_guess.py", args);
    bt_env_t *env = NULL, *impatient = NULL;
    /* generous: the hello waits for the interpreter to start and bind */
    CHECK_OK(bt_env_service_new(endpoint, 30000, 0, NULL, false, &env));
    CHECK_OK(bt_env_service_new(endpoint, 500, 6, NULL, false, &impatient));
    const char *stop = env ? bt_env_stop_strings(env) : NULL;
    CHECK(stop && !strcmp(stop, "</guess>") && stop[strlen(stop) + 1] == '\0');

    s_game games[S_GAMES];
    s_new_games(games, S_GAMES);
    s_reset(env, games, S_GAMES);
    s_play(env, impatient, games, S_GAMES);
    int total = 0;
    for (int i = 0; i < S_GAMES; i++) {
        /* each game: 1 for the number, 0.125 off per wrong guess (the last guess is right) */
        double want = i == 8 ? 0.0 : 1.0 - 0.125 * (games[i].guesses - 1);
        CHECK(games[i].reward == want);
        total += games[i].guesses;
    }
    printf("guess: %d episodes, %d guesses in all (binary search over 1..100)\n", S_GAMES, total);

    /* a finished episode is not the service's any more; a Python exception is the batch's error;
       the client goes on */
    int32_t ids[] = {'x'};
    bt_env_step_item late = {.episode = games[0].episode,
                             .action_text = "<guess>1</guess>",
                             .action_len = 16,
                             .action_ids = ids,
                             .n_action_ids = 1};
    bt_env_reply out[1];
    char want[256];
    CHECK(bt_env_step(env, &late, 1, out) == BT_EFORMAT);
    snprintf(want, sizeof want,
             "environment service %s: the service says: episode %llu: not an episode of this "
             "service (never reset, or already done)",
             endpoint, (unsigned long long)games[0].episode);
    CHECK_STR_CONTAINS(bt_last_error(), want);
    s_new_games(games, 1);
    s_reset(env, games, 1);
    CHECK(bt_env_step(env, &late, 1, out) == BT_EFORMAT); /* ids that are not the text's bytes */
    CHECK_STR_CONTAINS(bt_last_error(), "step raised ValueError: the ids are not the text's bytes");
    s_play(env, env, games, 1);
    CHECK(games[0].done && games[0].reward == 1.0 - 0.125 * (games[0].guesses - 1));
    bt_env_destroy(&impatient);
    bt_env_destroy(&env);
    bt_env_destroy(&env); /* idempotent */
    runs_kill(service);
}

/* ---- a misbehaving service ----------------------------------------------------------------- */

/*  A step of two episodes (7 and 8) whose first action text tells the stub what to do; the status
    it must give and, for an error, the text after "environment service ENDPOINT: ".  out[0]'s
    reward into *reward. */
static void s_expect(bt_env_t *env, const char *endpoint, const char *mode, bt_status code,
                     const char *want, double *reward) {
    int32_t ids[] = {1, 2, 3};
    bt_env_step_item items[2] = {
        {.episode = 7,
         .action_text = mode,
         .action_len = strlen(mode),
         .action_ids = ids,
         .n_action_ids = 3},
        {.episode = 8, .action_text = "ok", .action_len = 2, .action_ids = ids, .n_action_ids = 0}};
    bt_env_reply out[2];
    bt_status st = bt_env_step(env, items, 2, out);
    CHECK(st == code);
    char line[1024];
    snprintf(line, sizeof line, "environment service %s: %s", endpoint, want ? want : "");
    if (want)
        CHECK_STR_CONTAINS(bt_last_error(), line);
    if (st != code)
        fprintf(stderr, "  %s: expected %d \"%s\", got %d: %s\n", mode, code, want ? want : "", st,
                bt_last_error());
    if (st == BT_OK && reward) {
        char got[64];
        *reward = out[0].reward;
        CHECK_STR_EQ(s_obs(&out[0], got, sizeof got), "obs 7");
        CHECK_STR_EQ(s_obs(&out[1], got, sizeof got), "obs 8");
        CHECK(!out[0].done && !out[0].tool_called && !out[0].tool_error);
    }
}

static void test_stub(const char *python) {
    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/stub.ipc", s_tmp);
    const char *args[] = {endpoint, NULL};
    pid_t service = s_start(python, "env_stub.py", args);
    bt_env_t *first = NULL, *env = NULL, *patient = NULL;
    CHECK_OK(bt_env_service_new(endpoint, 30000, 0, NULL, false, &first)); /* waits for it */
    const char *stop = first ? bt_env_stop_strings(first) : NULL;
    CHECK(stop && !strcmp(stop, "</tool>") && !strcmp(stop + 8, "\n\nUser:") && !stop[16]);
    CHECK_OK(bt_env_service_new(endpoint, 300, 0, NULL, false, &env));
    CHECK_OK(bt_env_service_new(endpoint, 300, 1, NULL, false, &patient));
    const struct {
        const char *mode, *want;
        bt_status code;
    } faults[] = {
        {"short", "reply: \"items\" has 1 entries for 2 episodes", BT_EFORMAT},
        {"extra", "reply: \"items\" has 3 entries for 2 episodes", BT_EFORMAT},
        {"nan", "reply: NaN at byte ", BT_EFORMAT},
        {"noobs", "reply: items[1] (episode 8): \"observation\": expected a string, got nothing",
         BT_EFORMAT},
        {"big",
         "reply: items[0] (episode 7): an observation of 65537 bytes, beyond the 65536 an "
         "observation may have (BT_ENV_OBSERVATION_MAX)",
         BT_EFORMAT},
        {"wrongep", "reply: items[0]: episode 9 is not the episode asked there (7)", BT_EFORMAT},
        {"badinfo", "reply: items[0] (episode 7): \"tool_called\": expected true or false, got 1",
         BT_EFORMAT},
        {"nodone", "reply: items[0] (episode 7): \"done\": expected true or false, got \"no\"",
         BT_EFORMAT},
        {"error", "the service says: the tool server crashed", BT_EFORMAT},
        {"silent", "no reply within 300 ms (1 attempt)", BT_EIO},
    };
    double r = 0;
    s_expect(env, endpoint, "ok", BT_OK, NULL, &r);
    CHECK(r == 0.5);
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
        s_expect(env, endpoint, faults[i].mode, faults[i].code, faults[i].want, NULL);
        r = 0;
        s_expect(env, endpoint, "ok", BT_OK, NULL, &r); /* usable again */
        CHECK(r == 0.5);
    }
    s_expect(env, endpoint, "nan", BT_EFORMAT, "reply: NaN at byte ", NULL);
    CHECK_STR_CONTAINS(bt_last_error(), " is not a JSON number: every reward must be a finite "
                                        "number");
    s_expect(env, endpoint, "silent", BT_EIO, "no reply within 300 ms (1 attempt)", NULL);
    /* the late reply (reward 99) to the abandoned attempt is dropped, not taken for this one's */
    s_expect(env, endpoint, "stale", BT_OK, NULL, &r);
    CHECK(r == 3);
    /* a reset's reply is checked the same way */
    bt_env_reset_item reset = {.episode = 7, .prompt = "noobs", .answer = "1"};
    bt_env_reply out[1];
    CHECK(bt_env_reset(env, &reset, 1, out) == BT_EFORMAT);
    CHECK_STR_CONTAINS(bt_last_error(), "reply: items[0] (episode 7): \"observation\": expected "
                                        "a string, got nothing");
    reset.prompt = "ok";
    CHECK_OK(bt_env_reset(env, &reset, 1, out));
    /* retries: a silent first attempt, an answered resend; then two silent attempts */
    s_expect(patient, endpoint, "once", BT_OK, NULL, &r);
    CHECK(r == 7);
    s_expect(patient, endpoint, "silent", BT_EIO, "no reply within 300 ms (2 attempts)", NULL);
    bt_env_destroy(&patient);
    bt_env_destroy(&env);
    bt_env_destroy(&first);
    runs_kill(service);
}

/*  Nobody at the endpoint: the hello fails, saying so; tcp:// without keys needs insecure. */
static void test_no_service(void) {
    char endpoint[128], want[512];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/nobody.ipc", s_tmp);
    bt_env_t *env = NULL;
    CHECK(bt_env_service_new(endpoint, 200, 0, NULL, false, &env) == BT_EIO && !env);
    snprintf(want, sizeof want,
             "environment service %s: no reply within 200 ms (1 attempt) to the hello a worker "
             "sends as it starts: no service answers there",
             endpoint);
    CHECK_STR_CONTAINS(bt_last_error(), want);
    CHECK(bt_env_service_new("tcp://127.0.0.1:1", 200, 0, NULL, false, &env) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "environment service tcp://127.0.0.1:1: a tcp:// endpoint "
                                        "needs CURVE keys");
    CHECK(bt_env_service_new(endpoint, 0, 0, NULL, false, &env) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "timeout_ms >= 1");
}

/* ---- CURVE on tcp:// ------------------------------------------------------------------------ */

static void test_curve(const char *python) {
    if (bt_curve_available() != BT_OK) {
        printf("curve: this libzmq has no CURVE: not tested\n");
        return;
    }
    char keys[128], allow[128], path[256], endpoint[64], pub[BT_KEY_LEN + 1];
    snprintf(keys, sizeof keys, "%s/keys", s_tmp);
    snprintf(allow, sizeof allow, "%s/allow", s_tmp);
    CHECK_OK(bt_keygen(keys, "env", NULL));
    CHECK_OK(bt_keygen(keys, "stranger", NULL));
    CHECK_OK(bt_keygen(allow, "worker", pub)); /* the allow list: worker.pub */
    bt_curve_keys worker, stranger;
    snprintf(path, sizeof path, "%s/worker.key", allow);
    CHECK_OK(bt_key_read_secret(path, &worker));
    snprintf(path, sizeof path, "%s/stranger.key", keys);
    CHECK_OK(bt_key_read_secret(path, &stranger));
    snprintf(path, sizeof path, "%s/env.pub", keys);
    CHECK_OK(bt_key_read_public(path, worker.server_key));
    memcpy(stranger.server_key, worker.server_key, sizeof worker.server_key);
    int port = runs_free_port(NULL);
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    snprintf(path, sizeof path, "%s/env.key", keys);
    const char *args[] = {endpoint, path, allow, NULL};
    pid_t service = s_start(python, "env_guess.py", args);
    bt_env_t *env = NULL, *other = NULL;
    CHECK_OK(bt_env_service_new(endpoint, 30000, 0, &worker, false, &env));
    s_game games[S_GAMES];
    s_new_games(games, 3);
    if (env) {
        s_reset(env, games, 3);
        s_play(env, env, games + 2, 1); /* 37 */
        CHECK(games[2].done);
    }
    /* a key the service does not allow, or none: the handshake is refused, nothing answers */
    CHECK(bt_env_service_new(endpoint, 500, 0, &stranger, false, &other) == BT_EIO);
    CHECK(bt_env_service_new(endpoint, 500, 0, NULL, true, &other) == BT_EIO);
    printf("curve: %s played with the allowed key; a stranger's key and no key unanswered\n",
           endpoint);
    bt_env_destroy(&env);
    runs_kill(service);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_envsvc_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    const char *missing = NULL, *python = runs_python(&missing);
    test_no_service(); /* the C side, which needs no Python */
    if (python && runs_pip_install(python, s_tmp)) {
        test_guess(python);
        test_stub(python);
        test_curve(python);
    }
    runs_cleanup(s_tmp);
    return runs_python_exit(python, missing, "the environment service against Python");
}
