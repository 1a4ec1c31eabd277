/*  security.c — CURVE key files, socket options and the ZAP handler (include/baton/security.h).
    ZAP is ZeroMQ's authentication protocol (RFC 27): the library asks the handler bound at
    inproc://zeromq.zap.01 in the socket's context about every CURVE handshake, and lets the
    connection in only on "200". */
#define _POSIX_C_SOURCE 200809L
#include "baton/security.h"

#include "baton/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

enum {
    S_KEY_BYTES = 32,
    S_MAX_ALLOWED = 4096,
    S_MAX_FILE = 1 << 20, /* a key file or allow list */
    S_MAX_LOGGED = 64,    /* refusals remembered for the log's rate limit */
    S_MAX_ZAPS = 16,      /* contexts served at once in this process */
    S_FRAMES = 8          /* ZAP request frames read; the rest are dropped */
};
#define S_LOG_EVERY_S 10.0 /* one log line per key (or kind of failure) this often */
#define S_ZAP_ENDPOINT "inproc://zeromq.zap.01"

/* ---- keys ------------------------------------------------------------------------------------ */

bt_status bt_curve_available(void) {
    if (!zmq_has("curve"))
        return bt_fail(BT_EUNSUPPORTED, "this libzmq was built without CURVE (libsodium); use "
                                        "--insecure on a trusted network, or a libzmq with CURVE");
    return BT_OK;
}

bool bt_key_is_valid(const char *text) {
    uint8_t bytes[S_KEY_BYTES];
    return text && strlen(text) == BT_KEY_LEN && zmq_z85_decode(bytes, text) != NULL;
}

/*  The key lines of text, in order: the first max keys into keys[] (each BT_KEY_LEN + 1); returns
    how many keys text holds, or -1 with the fault (naming path and line) in bt_last_error(). */
static int s_parse_keys(const char *path, char *text, char (*keys)[BT_KEY_LEN + 1], int max) {
    int n = 0, line_no = 0;
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        size_t len = strlen(line);
        while (len > 0 && strchr(" \t\r", line[len - 1]))
            line[--len] = '\0';
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || *line == '#')
            continue;
        if (!bt_key_is_valid(line)) {
            bt_fail(BT_EFORMAT, "%s:%d: not a key (40 characters of Z85 expected)", path, line_no);
            return -1;
        }
        if (n < max)
            memcpy(keys[n], line, BT_KEY_LEN + 1);
        n++;
    }
    return n;
}

static bt_status s_write_new(const char *path, mode_t mode, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0)
        return bt_fail(BT_EIO, "%s: cannot create: %s%s", path, strerror(errno),
                       errno == EEXIST ? " (keygen never overwrites a key)" : "");
    size_t len = strlen(text);
    bool ok = fchmod(fd, mode) == 0 && write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
    int err = errno;
    ok = close(fd) == 0 && ok;
    if (!ok) {
        unlink(path);
        return bt_fail(BT_EIO, "%s: write failed: %s", path, strerror(err));
    }
    return BT_OK;
}

bt_status bt_keygen(const char *dir, const char *name, char *public_key) {
    BT_TRY(bt_curve_available());
    if (!name[0] || strchr(name, '/') || name[0] == '.' || strlen(name) > 64)
        return bt_fail(BT_EINVAL,
                       "keygen: name \"%s\": expected 1 to 64 characters, no '/', not "
                       "starting with '.'",
                       name);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return bt_fail(BT_EIO, "%s: cannot create: %s", dir, strerror(errno));
    char pub[BT_KEY_LEN + 1], sec[BT_KEY_LEN + 1], key_path[4096], pub_path[4096], text[256];
    if (zmq_curve_keypair(pub, sec) != 0)
        return bt_fail(BT_EIO, "keygen: %s", zmq_strerror(zmq_errno()));
    snprintf(key_path, sizeof key_path, "%s/%s.key", dir, name);
    snprintf(pub_path, sizeof pub_path, "%s/%s.pub", dir, name);
    if (access(pub_path, F_OK) == 0)
        return bt_fail(BT_EIO, "%s: exists (keygen never overwrites a key)", pub_path);
    snprintf(text, sizeof text, "# baton CURVE secret key of %s (Z85): keep it private\n%s\n", name,
             sec);
    BT_TRY(s_write_new(key_path, 0600, text));
    snprintf(text, sizeof text, "# baton CURVE public key of %s (Z85)\n%s\n", name, pub);
    bt_status st = s_write_new(pub_path, 0644, text);
    memset(sec, 0, sizeof sec);
    memset(text, 0, sizeof text);
    if (st != BT_OK) {
        unlink(key_path);
        return st;
    }
    if (public_key)
        memcpy(public_key, pub, BT_KEY_LEN + 1);
    return BT_OK;
}

bt_status bt_key_read_secret(const char *path, bt_curve_keys *keys) {
    struct stat st;
    if (stat(path, &st) != 0)
        return bt_fail(BT_EIO, "%s: cannot read: %s", path, strerror(errno));
    if (st.st_mode & 077)
        return bt_fail(BT_EINVAL, "%s: a secret key that others may read (mode %04o): chmod 600 %s",
                       path, (unsigned)(st.st_mode & 07777), path);
    char *text = NULL, found[1][BT_KEY_LEN + 1];
    size_t len = 0;
    BT_TRY(bt_file_read(path, S_MAX_FILE, &text, &len));
    int n = s_parse_keys(path, text, found, 1);
    memset(text, 0, len);
    free(text);
    if (n < 0)
        return BT_EFORMAT;
    if (n != 1)
        return bt_fail(BT_EFORMAT, "%s: expected one secret key, found %d", path, n);
    memcpy(keys->secret_key, found[0], sizeof keys->secret_key);
    memset(found, 0, sizeof found);
    if (zmq_curve_public(keys->public_key, keys->secret_key) != 0)
        return bt_fail(BT_EFORMAT, "%s: not a CURVE secret key", path);
    return BT_OK;
}

bt_status bt_key_read_public(const char *path, char *public_key) {
    char *text = NULL, found[1][BT_KEY_LEN + 1];
    BT_TRY(bt_file_read(path, S_MAX_FILE, &text, NULL));
    int n = s_parse_keys(path, text, found, 1); /* the first of several */
    free(text);
    if (n < 0)
        return BT_EFORMAT;
    if (n == 0)
        return bt_fail(BT_EFORMAT, "%s: no key in it", path);
    memcpy(public_key, found[0], BT_KEY_LEN + 1);
    return BT_OK;
}

bt_status bt_curve_client(void *sock, const bt_curve_keys *keys) {
    BT_TRY(bt_curve_available());
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, keys->server_key, BT_KEY_LEN + 1) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, keys->public_key, BT_KEY_LEN + 1) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, keys->secret_key, BT_KEY_LEN + 1) != 0)
        return bt_fail(BT_EINVAL, "CURVE client keys refused: %s", zmq_strerror(zmq_errno()));
    return BT_OK;
}

/* ---- the ZAP handler ------------------------------------------------------------------------- */

typedef struct {
    uint8_t key[S_KEY_BYTES];
    char name[64];
} s_allowed;

typedef struct {
    uint8_t id[S_KEY_BYTES]; /* a client key, or a kind of handshake failure */
    double at;
} s_logged;

struct bt_zap {
    void *ctx;
    bt_curve_keys keys; /* the server's */
    s_allowed *allowed;
    int n_allowed;
    bt_zap_refused_fn *on_refused;
    void *user;
    void *rep;     /* the ZAP socket: the handler thread's */
    void *monitor; /* the serving socket's handshake failures: the handler thread's */
    char monitor_endpoint[64];
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_int_fast64_t refused;
    s_logged logged[S_MAX_LOGGED]; /* the handler thread's */
};

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static bt_zap_t *s_zaps[S_MAX_ZAPS]; /* by context, under s_lock */

static bt_status s_allow_file(bt_zap_t *self, const char *path, const char *name) {
    char *text = NULL, (*keys)[BT_KEY_LEN + 1] = calloc(S_MAX_ALLOWED, BT_KEY_LEN + 1);
    if (!keys)
        return bt_fail(BT_ENOMEM, "out of memory");
    bt_status st = bt_file_read(path, S_MAX_FILE, &text, NULL);
    int room = S_MAX_ALLOWED - self->n_allowed;
    int n = st == BT_OK ? s_parse_keys(path, text, keys, room) : -1;
    if (n > room) {
        st = bt_fail(BT_ERANGE, "%s: more than %d allowed keys in all", path, S_MAX_ALLOWED);
        n = -1;
    }
    for (int i = 0; i < n; i++) {
        s_allowed *a = &self->allowed[self->n_allowed++];
        zmq_z85_decode(a->key, keys[i]);
        snprintf(a->name, sizeof a->name, "%s", name);
    }
    free(text);
    free(keys);
    return n < 0 ? BT_EFORMAT : BT_OK;
}

/*  The NAME.pub files of dir; role "" lets them join as any role, else their user id is
    "ROLE/NAME" and the controller admits them as ROLE only. */
static bt_status s_allow_dir(bt_zap_t *self, const char *dir, const char *role) {
    DIR *d = opendir(dir);
    if (!d)
        return bt_fail(BT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    bt_status rc = BT_OK;
    for (struct dirent *e = readdir(d); e && rc == BT_OK; e = readdir(d)) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || strcmp(e->d_name + len - 4, ".pub") != 0 || e->d_name[0] == '.')
            continue;
        char path[4096], name[64];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%s%s%.*s", role, role[0] ? "/" : "", (int)(len - 4),
                 e->d_name);
        rc = s_allow_file(self, path, name);
    }
    closedir(d);
    return rc;
}

/*  A file of keys, or a directory of NAME.pub files (and ROLE/NAME.pub files). */
static bt_status s_read_allow(bt_zap_t *self, const char *allow) {
    self->allowed = calloc(S_MAX_ALLOWED, sizeof *self->allowed);
    if (!self->allowed)
        return bt_fail(BT_ENOMEM, "out of memory");
    struct stat st;
    if (stat(allow, &st) != 0)
        return bt_fail(BT_EIO, "%s: cannot read the allowed keys: %s", allow, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        const char *base = strrchr(allow, '/') ? strrchr(allow, '/') + 1 : allow;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "."), base);
        BT_TRY(s_allow_file(self, allow, name));
    } else {
        BT_TRY(s_allow_dir(self, allow, ""));
        static const char *const roles[] = {"rollout", "trainer", "eval"};
        for (int r = 0; r < 3; r++) { /* DIR/ROLE/NAME.pub: keys that may join as ROLE only */
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", allow, roles[r]);
            if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                BT_TRY(s_allow_dir(self, sub, roles[r]));
        }
    }
    if (self->n_allowed == 0)
        return bt_fail(BT_EINVAL, "%s: no public key in it (NAME.pub files of `baton keygen`)",
                       allow);
    return BT_OK;
}

/*  True when this refusal should be logged: nothing with the same id was logged lately. */
static bool s_should_log(bt_zap_t *self, const uint8_t *id) {
    double now = bt_now();
    s_logged *slot = &self->logged[0];
    for (int i = 0; i < S_MAX_LOGGED; i++) {
        s_logged *l = &self->logged[i];
        if (l->at > 0 && !memcmp(l->id, id, S_KEY_BYTES)) {
            if (now - l->at < S_LOG_EVERY_S)
                return false;
            slot = l;
            break;
        }
        if (l->at < slot->at)
            slot = l; /* the oldest, or an empty one */
    }
    memcpy(slot->id, id, S_KEY_BYTES);
    slot->at = now;
    return true;
}

static void s_refuse(bt_zap_t *self, const uint8_t *id, const char *key, const char *address,
                     const char *reason) {
    atomic_fetch_add(&self->refused, 1);
    if (!s_should_log(self, id))
        return;
    bt_log(BT_LOG_WARN, "controller: refused a worker%s%s%s%s: %s", key[0] ? " with key " : "", key,
           address[0] ? " from " : "", address, reason);
    if (self->on_refused)
        self->on_refused(key, address, reason, self->user);
}

/*  Frame i of n as a NUL-terminated string (cut to cap). */
static void s_frame_str(zmq_msg_t *frames, int n, int i, char *out, size_t cap) {
    size_t len = i < n ? zmq_msg_size(&frames[i]) : 0;
    if (len >= cap)
        len = cap - 1;
    if (len)
        memcpy(out, zmq_msg_data(&frames[i]), len);
    out[len] = '\0';
    for (size_t k = 0; k < len; k++)
        if ((unsigned char)out[k] < 0x20 || (unsigned char)out[k] > 0x7e)
            out[k] = '?';
}

static void s_send_str(void *sock, const char *s, size_t len, bool more) {
    zmq_send(sock, s, len, more ? ZMQ_SNDMORE : 0);
}

/*  Reads one ZAP request and answers it. */
static void s_answer(bt_zap_t *self) {
    zmq_msg_t frames[S_FRAMES];
    int n = 0;
    for (int more = 1; more;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, self->rep, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            break;
        }
        more = zmq_msg_more(&part);
        if (n < S_FRAMES)
            frames[n++] = part;
        else
            zmq_msg_close(&part);
    }
    if (n == 0)
        return;
    char version[8], domain[64], address[64], mechanism[16];
    s_frame_str(frames, n, 0, version, sizeof version);
    s_frame_str(frames, n, 2, domain, sizeof domain);
    s_frame_str(frames, n, 3, address, sizeof address);
    s_frame_str(frames, n, 5, mechanism, sizeof mechanism);
    uint8_t id[S_KEY_BYTES] = {0};
    char key[BT_KEY_LEN + 1] = "", reason[160];
    const char *user = "", *status = "400";
    bool curve = !strcmp(mechanism, "CURVE") && n > 6 && zmq_msg_size(&frames[6]) == S_KEY_BYTES;
    if (curve) {
        memcpy(id, zmq_msg_data(&frames[6]), S_KEY_BYTES);
        zmq_z85_encode(key, id, S_KEY_BYTES);
    }
    if (strcmp(version, "1.0") != 0 || n < 6) {
        status = "500";
        snprintf(reason, sizeof reason, "a malformed ZAP request");
    } else if (!curve || strcmp(domain, BT_ZAP_DOMAIN) != 0) {
        snprintf(reason, sizeof reason,
                 "mechanism %s, domain \"%s\": only CURVE clients are let in", mechanism, domain);
    } else {
        snprintf(reason, sizeof reason, "its key is not in the controller's allowed keys");
        for (int i = 0; i < self->n_allowed && !user[0]; i++)
            if (!memcmp(self->allowed[i].key, id, S_KEY_BYTES))
                user = self->allowed[i].name;
        if (user[0])
            status = "200";
    }
    s_send_str(self->rep, "1.0", 3, true);
    if (n > 1)
        zmq_send(self->rep, zmq_msg_data(&frames[1]), zmq_msg_size(&frames[1]), ZMQ_SNDMORE);
    else
        s_send_str(self->rep, "", 0, true);
    s_send_str(self->rep, status, 3, true);
    s_send_str(self->rep, status[0] == '2' ? "OK" : reason,
               strlen(status[0] == '2' ? "OK" : reason), true);
    s_send_str(self->rep, user, strlen(user), true);
    s_send_str(self->rep, "", 0, false);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
    if (status[0] != '2')
        s_refuse(self, id, key, address, reason);
}

/*  One event of the serving socket's monitor: a handshake that failed before ZAP was asked (no
    CURVE at all, or a client that encrypted to another server key).  A client without CURVE is
    seen either way: a mechanism mismatch when the server notices first, a hang-up (EPIPE or
    ECONNRESET) when the client does. */
static void s_on_monitor(bt_zap_t *self) {
    zmq_msg_t head, where;
    zmq_msg_init(&head);
    zmq_msg_init(&where);
    int rc = zmq_msg_recv(&head, self->monitor, ZMQ_DONTWAIT);
    if (rc >= 0 && zmq_msg_more(&head))
        zmq_msg_recv(&where, self->monitor, 0);
    if (rc >= 6) {
        uint16_t event;
        uint32_t value;
        memcpy(&event, zmq_msg_data(&head), 2);
        memcpy(&value, (uint8_t *)zmq_msg_data(&head) + 2, 4);
        char reason[160];
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
            snprintf(reason, sizeof reason, "a client without CURVE (plain ZeroMQ, --insecure)");
        else if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
            snprintf(reason, sizeof reason,
                     "the CURVE handshake failed: the client's server key is not this "
                     "controller's public key");
        else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) /* value: an errno */
            snprintf(reason, sizeof reason,
                     "a client hung up during the CURVE handshake (%s): one without CURVE or "
                     "with another server key, most likely",
                     strerror((int)value));
        else
            snprintf(reason, sizeof reason, "the handshake failed (ZeroMQ event 0x%x, 0x%x)",
                     (unsigned)event, (unsigned)value);
        uint8_t id[S_KEY_BYTES] = {0xff}; /* one log line per kind of failure */
        memcpy(id + 1, &value, sizeof value);
        s_refuse(self, id, "", "", reason);
    }
    zmq_msg_close(&head);
    zmq_msg_close(&where);
}

static void *s_zap_main(void *arg) {
    bt_zap_t *self = arg;
    while (!atomic_load(&self->stop)) {
        zmq_pollitem_t items[2] = {{self->rep, 0, ZMQ_POLLIN, 0},
                                   {self->monitor, 0, ZMQ_POLLIN, 0}};
        int rc = zmq_poll(items, 2, 100);
        if (rc < 0 && zmq_errno() == ETERM)
            break;
        if (rc <= 0)
            continue;
        if (items[0].revents & ZMQ_POLLIN)
            s_answer(self);
        if (items[1].revents & ZMQ_POLLIN)
            s_on_monitor(self);
    }
    return NULL;
}

bt_zap_t *bt_zap_new(void *zmq_ctx, const char *secret_key_file, const char *allow,
                     bt_zap_refused_fn *on_refused, void *user) {
    if (bt_curve_available() != BT_OK)
        return NULL;
    bt_zap_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "out of memory");
        return NULL;
    }
    self->ctx = zmq_ctx;
    self->on_refused = on_refused;
    self->user = user;
    atomic_init(&self->stop, false);
    atomic_init(&self->refused, 0);
    snprintf(self->monitor_endpoint, sizeof self->monitor_endpoint, "inproc://bt-zap-monitor-%p",
             (void *)self);
    if (bt_key_read_secret(secret_key_file, &self->keys) != BT_OK ||
        s_read_allow(self, allow) != BT_OK) {
        bt_zap_destroy(&self);
        return NULL;
    }
    self->rep = zmq_socket(zmq_ctx, ZMQ_REP);
    self->monitor = zmq_socket(zmq_ctx, ZMQ_PAIR);
    int linger = 0;
    if (self->rep)
        zmq_setsockopt(self->rep, ZMQ_LINGER, &linger, sizeof linger);
    if (self->monitor)
        zmq_setsockopt(self->monitor, ZMQ_LINGER, &linger, sizeof linger);
    /* inproc may connect before bind: the monitor is bound when the serving socket is made */
    if (!self->rep || !self->monitor || zmq_bind(self->rep, S_ZAP_ENDPOINT) != 0 ||
        zmq_connect(self->monitor, self->monitor_endpoint) != 0) {
        bt_fail(BT_EIO, "cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
        bt_zap_destroy(&self);
        return NULL;
    }
    pthread_mutex_lock(&s_lock);
    int slot = -1;
    for (int i = 0; i < S_MAX_ZAPS && slot < 0; i++)
        if (!s_zaps[i])
            slot = i;
    if (slot >= 0)
        s_zaps[slot] = self;
    pthread_mutex_unlock(&s_lock);
    if (slot < 0 || pthread_create(&self->thread, NULL, s_zap_main, self) != 0) {
        bt_fail(BT_EIO, "cannot start the ZAP handler thread");
        bt_zap_destroy(&self);
        return NULL;
    }
    self->started = true;
    return self;
}

void bt_zap_destroy(bt_zap_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_zap_t *self = *self_p;
    pthread_mutex_lock(&s_lock);
    for (int i = 0; i < S_MAX_ZAPS; i++)
        if (s_zaps[i] == self)
            s_zaps[i] = NULL;
    pthread_mutex_unlock(&s_lock);
    if (self->started) {
        atomic_store(&self->stop, true);
        pthread_join(self->thread, NULL);
    }
    if (self->rep)
        zmq_close(self->rep);
    if (self->monitor)
        zmq_close(self->monitor);
    memset(&self->keys, 0, sizeof self->keys);
    free(self->allowed);
    free(self);
    *self_p = NULL;
}

int64_t bt_zap_refused(const bt_zap_t *self) {
    return self ? (int64_t)atomic_load(&((bt_zap_t *)self)->refused) : 0;
}

bt_status bt_curve_serve(void *zmq_ctx, void *sock) {
    bt_status st = BT_OK;
    pthread_mutex_lock(&s_lock);
    for (int i = 0; i < S_MAX_ZAPS; i++) {
        bt_zap_t *z = s_zaps[i];
        if (!z || z->ctx != zmq_ctx)
            continue;
        int one = 1;
        if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, z->keys.secret_key, BT_KEY_LEN + 1) != 0 ||
            zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, BT_ZAP_DOMAIN, strlen(BT_ZAP_DOMAIN)) != 0 ||
            zmq_socket_monitor(sock, z->monitor_endpoint,
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
            st =
                bt_fail(BT_EIO, "cannot make a CURVE server socket: %s", zmq_strerror(zmq_errno()));
        break;
    }
    pthread_mutex_unlock(&s_lock);
    return st;
}
