/*  test_security.c — CURVE on tcp:// (include/baton/security.h, `baton keygen`, `baton controller
    --key --allow`, `baton worker --key --server-key`).  keygen writes a valid key pair (the secret
    one private); a tcp:// controller or worker without keys and without --insecure is a usage
    error; a run over tcp://127.0.0.1 with CURVE finishes with the allowed workers, while a worker
    whose key is not allowed is refused (it says so, and so does the run's events.jsonl) and a
    plain ZeroMQ client gets nothing; and the bytes on the wire, relayed through a proxy that
    records them, never show the run's config or message names in clear. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/msg.h"
#include "baton/proto.h"
#include "baton/security.h"
#include "check.h"
#include "runs.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <zmq.h>

static char s_tmp[64];

static const char s_json[] =
    "{\"run\": {\"name\": \"sec\", \"seed\": 5},"
    RUNS_MODEL_TINY
    " \"task\": {\"kind\": \"arithmetic\", \"digits\": 1, \"operators\": \"+\", \"heldout_size\": "
    "6},"
    " \"sft\": {\"steps\": 2, \"batch_size\": 8, \"lr\": 0.003},"
    " \"grpo\": {\"steps\": 8, \"group_size\": 4, \"prompts_per_step\": 6, \"max_new_tokens\": 3,"
    "  \"lr\": 0.001},"
    " \"eval\": {\"heldout_count\": 6},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 0, \"heartbeat_ms\": 50,"
    "  \"expiry_ms\": 2000}}";

static char *s_read(const char *dir, const char *name) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return bt_file_read(path, 1 << 24, &text, NULL) == BT_OK ? text : NULL;
}

/* ---- a TCP proxy that keeps every byte it relays --------------------------------------------- */

enum { S_PROXY_CAP = 16 << 20, S_PROXY_PAIRS = 8 };

typedef struct {
    int listen_fd, upstream_port;
    atomic_bool stop;
    char *seen; /* both directions, in arrival order, up to S_PROXY_CAP bytes */
    size_t n_seen;
} s_proxy;

static void *s_proxy_main(void *arg) {
    s_proxy *p = arg;
    int pair[S_PROXY_PAIRS][2], n = 0;
    char buf[65536];
    listen(p->listen_fd, 8);
    while (!atomic_load(&p->stop)) {
        struct pollfd fds[1 + 2 * S_PROXY_PAIRS] = {{p->listen_fd, POLLIN, 0}};
        for (int i = 0; i < n; i++) {
            fds[1 + 2 * i] = (struct pollfd){pair[i][0], POLLIN, 0};
            fds[2 + 2 * i] = (struct pollfd){pair[i][1], POLLIN, 0};
        }
        if (poll(fds, (nfds_t)(1 + 2 * n), 50) <= 0)
            continue;
        for (int i = n - 1; i >= 0; i--)
            for (int side = 0; side < 2; side++) {
                if (!(fds[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t got = read(pair[i][side], buf, sizeof buf);
                bool ok = got > 0;
                for (ssize_t off = 0; ok && off < got;) {
                    ssize_t w = write(pair[i][1 - side], buf + off, (size_t)(got - off));
                    ok = w > 0;
                    off += ok ? w : 0;
                }
                if (got > 0) {
                    size_t keep = (size_t)got < S_PROXY_CAP - p->n_seen ? (size_t)got
                                                                        : S_PROXY_CAP - p->n_seen;
                    memcpy(p->seen + p->n_seen, buf, keep);
                    p->n_seen += keep;
                }
                if (!ok) { /* one side is gone: so is the pair */
                    close(pair[i][0]);
                    close(pair[i][1]);
                    memmove(pair[i], pair[i + 1], sizeof pair[0] * (size_t)(n - i - 1));
                    n--;
                    break;
                }
            }
        if ((fds[0].revents & POLLIN) && n < S_PROXY_PAIRS) {
            int down = accept(p->listen_fd, NULL, NULL), up = runs_connect_local(p->upstream_port);
            if (down >= 0 && up >= 0) {
                pair[n][0] = down;
                pair[n][1] = up;
                n++;
            } else {
                if (down >= 0)
                    close(down);
                if (up >= 0)
                    close(up);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        close(pair[i][0]);
        close(pair[i][1]);
    }
    return NULL;
}

static bool s_seen(const s_proxy *p, const char *text) {
    size_t len = strlen(text);
    for (size_t i = 0; i + len <= p->n_seen; i++)
        if (!memcmp(p->seen + i, text, len))
            return true;
    return false;
}

/* ---- the checks ------------------------------------------------------------------------------ */

/*  `baton keygen` writes NAME.key (0600) and NAME.pub whose keys decode to 32 bytes and belong
    together; it never overwrites; a secret key others may read is refused. */
static void s_check_keygen(const char *keys) {
    const char *gen[] = {"keygen", keys, "--name", "controller", NULL};
    CHECK(runs_wait(runs_spawn(gen)) == 0);
    CHECK(runs_wait(runs_spawn(gen)) == 1); /* the pair exists: never overwritten */
    char path[256], pub[BT_KEY_LEN + 1] = "";
    struct stat st;
    snprintf(path, sizeof path, "%s/controller.key", keys);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    bt_curve_keys k = {0};
    CHECK_OK(bt_key_read_secret(path, &k)); /* derives the public key from the secret one */
    snprintf(path, sizeof path, "%s/controller.pub", keys);
    CHECK_OK(bt_key_read_public(path, pub));
    CHECK(strcmp(k.public_key, pub) == 0);
    const char *both[2] = {k.secret_key, pub};
    for (int i = 0; i < 2; i++) { /* Z85 round trip: 40 characters <-> 32 bytes */
        uint8_t bytes[32];
        char again[BT_KEY_LEN + 1] = "";
        CHECK(strlen(both[i]) == BT_KEY_LEN && zmq_z85_decode(bytes, both[i]) != NULL);
        CHECK(zmq_z85_encode(again, bytes, 32) != NULL && strcmp(again, both[i]) == 0);
    }
    CHECK(strcmp(k.secret_key, pub) != 0);
    char derived[BT_KEY_LEN + 1];
    CHECK(zmq_curve_public(derived, k.secret_key) == 0 && strcmp(derived, pub) == 0);

    char text[128], open_key[256];
    snprintf(text, sizeof text, "%s\n", k.secret_key);
    snprintf(open_key, sizeof open_key, "%s/readable.key", keys);
    CHECK_OK(bt_file_write(open_key, text, strlen(text)));
    chmod(open_key, 0644);
    bt_curve_keys other;
    CHECK(bt_key_read_secret(open_key, &other) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "chmod 600");
    CHECK(!bt_key_is_valid("short") && bt_key_is_valid(pub));
}

/*  tcp:// without keys and without --insecure: exit 2 and a message that names the way out. */
static void s_check_usage(const char *config, const char *keys) {
    char endpoint[64], log[256], key[256];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", runs_free_port(NULL));
    snprintf(log, sizeof log, "%s/usage.log", s_tmp);
    snprintf(key, sizeof key, "%s/controller.key", keys);
    const char *ctl[] = {"controller", config, "--bind", endpoint, NULL};
    CHECK(runs_wait(runs_spawn_in(NULL, ctl, log)) == 2);
    const char *half[] = {"controller", config, "--bind", endpoint, "--key", key, NULL};
    CHECK(runs_wait(runs_spawn_in(NULL, half, log)) == 2);
    const char *both[] = {"controller", config, "--bind",     endpoint,
                          "--key",      key,    "--insecure", NULL};
    CHECK(runs_wait(runs_spawn_in(NULL, both, log)) == 2);
    const char *worker[] = {"worker", "--connect", endpoint, "--role", "rollout", NULL};
    CHECK(runs_wait(runs_spawn_in(NULL, worker, log)) == 2);
    char *text = s_read(s_tmp, "usage.log");
    CHECK_STR_CONTAINS(text, "controller: tcp://127.0.0.1:");
    CHECK_STR_CONTAINS(text, "tcp:// needs CURVE keys (--key FILE --allow DIR_OR_FILE");
    CHECK_STR_CONTAINS(text, "--insecure and --key/--allow exclude each other");
    CHECK_STR_CONTAINS(text, "worker: tcp://127.0.0.1:");
    CHECK_STR_CONTAINS(text, "or, on a trusted network, --insecure");
    free(text);
}

/*  A ZeroMQ DEALER without CURVE says HELLO and waits: nothing comes back, and the controller
    writes the refusal.  Returns once the refusal is in events.jsonl (or after 20 s, or when the
    controller ctl is gone). */
static void s_check_plain_client(const char *endpoint, const char *dir, pid_t ctl) {
    void *ctx = zmq_ctx_new(), *dealer = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    CHECK(zmq_connect(dealer, endpoint) == 0);
    bt_msg_t *hello = bt_msg_new(BT_MSG_HELLO);
    bt_msg_set_str(hello, "role", "rollout");
    bt_msg_set_str(hello, "name", "plain");
    bt_msg_set_str(hello, "host", "localhost");
    bt_msg_set_int(hello, "pid", 1);
    bt_msg_set_str(hello, "device", "cpu");
    bt_msg_set_int(hello, "threads", 1);
    bt_msg_set_int(hello, "proto", BT_PROTO_VERSION);
    int timeout = 100;
    zmq_setsockopt(dealer, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    bt_msg_send(&hello, dealer, NULL, 0); /* queued until a connection would take it */
    bool refused = false, answered = false;
    for (int waited = 0; waited < 20000 && !refused && kill(ctl, 0) == 0; waited += 200) {
        zmq_pollitem_t item = {dealer, 0, ZMQ_POLLIN, 0};
        answered = answered || zmq_poll(&item, 1, 200) > 0;
        char *events = s_read(dir, "events.jsonl");
        refused = events && strstr(events, "\"key\":\"\",\"address\":\"\""); /* no key */
        free(events);
    }
    zmq_pollitem_t item = {dealer, 0, ZMQ_POLLIN, 0};
    answered = answered || zmq_poll(&item, 1, 300) > 0;
    CHECK(refused);
    CHECK(!answered);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/baton_security_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char config[128], keys[128], workers[160], other[128], dir[128];
    snprintf(config, sizeof config, "%s/sec.json", s_tmp);
    CHECK_OK(bt_file_write(config, s_json, strlen(s_json)));
    snprintf(keys, sizeof keys, "%s/keys", s_tmp);
    snprintf(workers, sizeof workers, "%s/keys/workers", s_tmp);
    snprintf(other, sizeof other, "%s/other", s_tmp);
    snprintf(dir, sizeof dir, "%s/run", s_tmp);
    double t0 = bt_now();

    s_check_keygen(keys);
    const char *gen_good[] = {"keygen", workers, "--name", "good", NULL};
    const char *gen_bad[] = {"keygen", other, "--name", "bad", NULL};
    CHECK(runs_wait(runs_spawn(gen_good)) == 0 && runs_wait(runs_spawn(gen_bad)) == 0);
    /* a key under workers/rollout/ is let in as a rollout worker only */
    char rollout_keys[200], roller_key[240], roller_log[192];
    snprintf(rollout_keys, sizeof rollout_keys, "%s/rollout", workers);
    snprintf(roller_key, sizeof roller_key, "%s/roller.key", rollout_keys);
    snprintf(roller_log, sizeof roller_log, "%s/roller.log", s_tmp);
    const char *gen_roller[] = {"keygen", rollout_keys, "--name", "roller", NULL};
    CHECK(runs_wait(runs_spawn(gen_roller)) == 0);
    s_check_usage(config, keys);

    /* the run: a proxy in front of the controller records what one worker's link carries */
    s_proxy proxy = {.seen = malloc(S_PROXY_CAP)};
    atomic_init(&proxy.stop, false);
    int port = runs_free_port(NULL), proxy_port = runs_free_port(&proxy.listen_fd);
    proxy.upstream_port = port;
    pthread_t proxy_thread;
    CHECK(proxy_port > 0 && pthread_create(&proxy_thread, NULL, s_proxy_main, &proxy) == 0);
    char endpoint[64], via_proxy[64], ctl_key[192], ctl_pub[192], good_key[192], bad_key[192];
    char bad_pub_path[192], log[192], bad_log[192];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    snprintf(via_proxy, sizeof via_proxy, "tcp://127.0.0.1:%d", proxy_port);
    snprintf(ctl_key, sizeof ctl_key, "%s/controller.key", keys);
    snprintf(ctl_pub, sizeof ctl_pub, "%s/controller.pub", keys);
    snprintf(good_key, sizeof good_key, "%s/good.key", workers);
    snprintf(bad_key, sizeof bad_key, "%s/bad.key", other);
    snprintf(bad_pub_path, sizeof bad_pub_path, "%s/bad.pub", other);
    snprintf(log, sizeof log, "%s/workers.log", s_tmp);
    snprintf(bad_log, sizeof bad_log, "%s/intruder.log", s_tmp);
    const char *ctl_args[] = {"controller", config,  "--bind",    endpoint, "--key", ctl_key,
                              "--allow",    workers, "--run-dir", dir,      NULL};
    pid_t ctl = runs_spawn_in(NULL, ctl_args, log);
    s_check_plain_client(endpoint, dir, ctl); /* while the controller waits for its workers */

    const char *roles[3][3] = {{"trainer", "trainer-0", endpoint},
                               {"rollout", "rollout-0", endpoint},
                               {"rollout", "rollout-1", via_proxy}};
    pid_t good[3];
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"worker",    "--connect",    roles[i][2], "--role",
                              roles[i][0], "--name",       roles[i][1], "--key",
                              good_key,    "--server-key", ctl_pub,     NULL};
        good[i] = runs_spawn_in(NULL, args, log);
    }
    const char *bad_args[] = {"worker", "--connect",      endpoint, "--role", "rollout",
                              "--name", "intruder",       "--key",  bad_key,  "--server-key",
                              ctl_pub,  "--join-timeout", "20",     NULL};
    double t_intruder = bt_now();
    pid_t intruder = runs_spawn_in(NULL, bad_args, bad_log);
    const char *roller_args[] = {"worker", "--connect",      endpoint, "--role",   "trainer",
                                 "--name", "impostor",       "--key",  roller_key, "--server-key",
                                 ctl_pub,  "--join-timeout", "20",     NULL};
    pid_t impostor = runs_spawn_in(NULL, roller_args, roller_log);
    CHECK(runs_wait(impostor) == 1); /* told to leave: its key is a rollout worker's */
    char *roller_said = s_read(s_tmp, "roller.log");
    CHECK_STR_CONTAINS(roller_said, "the key roller may join as rollout only, not as trainer");
    free(roller_said);
    CHECK(runs_wait(ctl) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(runs_wait(good[i]) == 0);
    CHECK(runs_wait(intruder) == 1);
    CHECK(bt_now() - t_intruder < 15); /* refused at once, not after its 20 s join timeout */
    CHECK(runs_train_steps(dir) == 8);
    atomic_store(&proxy.stop, true);
    pthread_join(proxy_thread, NULL);
    close(proxy.listen_fd);

    char bad_pub[BT_KEY_LEN + 1] = "", refusal[160];
    CHECK_OK(bt_key_read_public(bad_pub_path, bad_pub));
    char *events = s_read(dir, "events.jsonl"), *said = s_read(s_tmp, "intruder.log");
    snprintf(refusal, sizeof refusal, "\"event\":\"worker_refused\"");
    CHECK_STR_CONTAINS(events, refusal);
    snprintf(refusal, sizeof refusal, "\"key\":\"%s\",\"address\":\"127.0.0.1\"", bad_pub);
    CHECK_STR_CONTAINS(events, refusal);
    CHECK_STR_CONTAINS(events, "its key is not in the controller's allowed keys");
    CHECK_STR_CONTAINS(events, "\"worker\":\"rollout-1\""); /* joined through the proxy */
    CHECK(events && !strstr(events, "\"worker\":\"intruder\""));
    CHECK_STR_CONTAINS(events, "\"key\":\"rollout/roller\",\"worker\":\"impostor\"");
    CHECK_STR_CONTAINS(said, "refused this worker's key");
    CHECK_STR_CONTAINS(said, bad_pub);
    free(events);
    free(said);

    /* what the proxy saw: a CURVE greeting and handshake, then ciphertext (CURVE's own commands
       are named HELLO, WELCOME... in clear: they are not baton's).  In clear baton's WELCOME
       would carry the config ("arithmetic"), its HELLO the worker's name, every header "type". */
    fprintf(stderr, "proxy relayed %zu bytes\n", proxy.n_seen);
    CHECK(proxy.n_seen > 20000); /* the run's weights went through it */
    CHECK(s_seen(&proxy, "CURVE"));
    CHECK(!s_seen(&proxy, "arithmetic") && !s_seen(&proxy, "rollout-1"));
    CHECK(!s_seen(&proxy, "WEIGHTS") && !s_seen(&proxy, "\"type\"") && !s_seen(&proxy, "\"v\":1"));
    free(proxy.seen);
    fprintf(stderr, "test_security: %.1f s\n", bt_now() - t0);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (check_exit() == 0)
        CHECK(system(cmd) == 0);
    return check_exit();
}
