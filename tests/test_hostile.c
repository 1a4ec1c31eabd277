/*  test_hostile.c — a live controller under a flood from an untrusted peer: 100,000 random and
    mutated messages (garbage frames, valid headers with bytes flipped, truncated and oversized
    frames, messages before HELLO) sent over ipc:// while a run trains.  The controller neither
    crashes nor stalls: the run finishes, writes exactly the metrics of an undisturbed run, counts
    what it refused, and its resident memory does not grow with the flood. */
#define _DEFAULT_SOURCE
#include "baton/baton.h"
#include "baton/fileio.h"
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

enum { S_MESSAGES = 100000 };

static const char s_config[] =
    "{\"run\": {\"name\": \"h\", \"seed\": 5}," RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 3, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 200, \"group_size\": 4, \"prompts_per_step\": 5, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"every_steps\": 2, \"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1, \"heartbeat_ms\": 50}}";

static char s_tmp[64], s_endpoint[128];
static volatile int s_sent;

static uint64_t s_rand(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/*  The flood, from a peer that never joins: messages shaped like HELLO (broken, so it stays
    unknown), RESULT, PING and WEIGHTS, mutated or not. */
static void *s_flood(void *arg) {
    (void)arg;
    void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0, hwm = 0, timeout = 5000; /* a send that waits this long: the run ended */
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_connect(sock, s_endpoint);
    const char *valid[] = {
        "{\"v\":1,\"type\":\"HELLO\",\"run\":\"h\",\"id\":1,\"f\":{\"role\":\"admin\","
        "\"name\":\"intruder\",\"host\":\"x\",\"pid\":1,\"device\":\"cpu\",\"threads\":1,"
        "\"proto\":1}}",
        "{\"v\":1,\"type\":\"RESULT\",\"run\":\"h\",\"id\":2,\"f\":{\"task\":3}}",
        "{\"v\":1,\"type\":\"PING\",\"run\":\"h\",\"id\":3}",
        "{\"v\":1,\"type\":\"WEIGHTS\",\"run\":\"h\",\"id\":4,\"f\":{\"version\":99},"
        "\"tensors\":[{\"name\":\"x\",\"dtype\":\"F32\",\"shape\":[2]}]}",
    };
    uint64_t x = 88172645463325252ULL;
    char buf[512];
    for (int i = 0; i < S_MESSAGES; i++) {
        const char *v = valid[s_rand(&x) % 4];
        size_t len = strlen(v);
        memcpy(buf, v, len);
        int kind = (int)(s_rand(&x) % 4);
        if (kind == 0) { /* random bytes */
            len = 1 + s_rand(&x) % 200;
            for (size_t j = 0; j < len; j++)
                buf[j] = (char)s_rand(&x);
        } else if (kind == 1) { /* a few flipped bytes */
            for (int j = 0; j < 3; j++)
                buf[s_rand(&x) % len] = (char)s_rand(&x);
        } else if (kind == 2) { /* cut short */
            len = s_rand(&x) % len;
        } /* kind 3: as it is, with a stray frame or none */
        int more = kind == 3 && s_rand(&x) % 2 ? ZMQ_SNDMORE : 0;
        if (zmq_send(sock, buf, len, more) < 0 ||
            (more && zmq_send(sock, "\0\0\0\0\0\0\0", 7, 0) < 0))
            break;
        char sink[64]; /* drop whatever the controller answers */
        while (zmq_recv(sock, sink, sizeof sink, ZMQ_DONTWAIT) >= 0)
            ;
        s_sent = i + 1;
    }
    zmq_close(sock);
    zmq_ctx_term(ctx);
    return NULL;
}

/*  The process's peak resident memory so far (VmHWM), KiB. */
static long s_peak_kb(void) {
    size_t peak = 0;
    CHECK_OK(bt_proc_memory(NULL, &peak));
    return (long)(peak >> 10);
}

/*  In a child process (its memory apart from ours): one 512 MiB frame at the controller, from a
    peer that never authenticates, as a plain --insecure peer could. */
static pid_t s_send_huge(void) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 2000;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(sock, s_endpoint);
    size_t n = (size_t)512 << 20;
    char *big = malloc(n);
    if (big) {
        memset(big, 'x', n);
        zmq_send(sock, big, n, 0);
    }
    zmq_close(sock);
    zmq_ctx_term(ctx);
    _exit(0);
}

static long s_rss_kb(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    if (f)
        fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/*  Runs the config in dir; with flood, the flood runs while the run trains; with huge, a child
    sends one 512 MiB message meanwhile and *peak_growth_kb gets how much our peak RSS grew. */
static bt_controller_stats s_run(const char *dir, bool flood, long *rss_growth_kb, bool huge,
                                 long *peak_growth_kb) {
    bt_controller_stats none = {0};
    bt_run_t *run = bt_run_new(s_config, "hostile", NULL, 0);
    CHECK(run != NULL);
    if (!run)
        return none;
    bt_run_set_dir(run, dir);
    bt_run_set_endpoint(run, s_endpoint);
    CHECK_OK(bt_run_start(run));
    pthread_t t;
    long before = s_rss_kb(), peak_before = s_peak_kb();
    if (flood)
        pthread_create(&t, NULL, s_flood, NULL);
    pid_t sender = huge ? s_send_huge() : 0;
    bool done = false;
    while (!done)
        if (bt_run_step(run, &done) != BT_OK) {
            CHECK(!"step failed");
            break;
        }
    if (flood)
        pthread_join(t, NULL);
    if (sender > 0)
        waitpid(sender, NULL, 0);
    if (rss_growth_kb)
        *rss_growth_kb = s_rss_kb() - before;
    if (peak_growth_kb)
        *peak_growth_kb = s_peak_kb() - peak_before;
    CHECK_OK(bt_run_finish(run));
    bt_controller_stats st = bt_run_stats(run);
    bt_run_destroy(&run);
    return st;
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_hostile_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    snprintf(s_endpoint, sizeof s_endpoint, "ipc://%s/ctl.ipc", s_tmp);
    char calm[128], flooded[128];
    snprintf(calm, sizeof calm, "%s/calm", s_tmp);
    snprintf(flooded, sizeof flooded, "%s/flooded", s_tmp);
    s_run(calm, false, NULL, false, NULL);
    long growth = 0;
    bt_controller_stats st = s_run(flooded, true, &growth, false, NULL);
    CHECK(s_sent == S_MESSAGES);
    fprintf(stderr, "refused: %lld malformed, %lld from unknown peers; RSS grew %ld KiB\n",
            (long long)st.malformed, (long long)st.unknown_peer, growth);
    CHECK(st.malformed + st.unknown_peer >= S_MESSAGES * 9 / 10); /* each refused, counted */
    CHECK(st.lost_workers == 0 && st.failed_tasks == 0);
    CHECK(growth < 64 * 1024); /* no per-message leak (100k messages) */
    char *a = runs_metrics(calm), *b = runs_metrics(flooded);
    CHECK(a && b && strcmp(a, b) == 0); /* the run's results are untouched */
    free(a);
    free(b);
    /* a message far beyond any this run sends is dropped as it arrives, never held whole */
    char huge[128];
    snprintf(huge, sizeof huge, "%s/huge", s_tmp);
    long peak = 0;
    s_run(huge, false, NULL, true, &peak);
    fprintf(stderr, "a 512 MiB message: peak RSS grew %ld KiB\n", peak);
    CHECK(peak < 128 * 1024);
    a = runs_metrics(calm);
    b = runs_metrics(huge);
    CHECK(a && b && strcmp(a, b) == 0);
    free(a);
    free(b);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
