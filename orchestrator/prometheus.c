/*  prometheus.c — the Prometheus endpoint: a table of series behind one mutex, the text exposition
    format 0.0.4, and an HTTP/1.1 server thread that answers one request per connection. */
#define _POSIX_C_SOURCE 200809L
#include "baton/prometheus.h"

#include "baton/buf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

enum {
    S_REQUEST_MAX = 8192, /* bytes of a request's line and headers */
    S_IO_TIMEOUT_S = 5,   /* a client silent this long is dropped */
    S_HELP_MAX = 192,     /* a family's # HELP text */
    S_LISTEN_MAX = 256    /* the address as given */
};

typedef struct s_series {
    char name[BT_PROMETHEUS_NAME_MAX];
    char labels[BT_PROMETHEUS_LABELS_MAX];
    char help[S_HELP_MAX];
    bt_prometheus_type type;
    double value;
} s_series;

struct bt_prometheus {
    char listen[S_LISTEN_MAX];
    int fd;      /* the listening socket */
    int wake[2]; /* a pipe: destroy writes to it to stop the server thread */
    pthread_t thread;
    bool started;
    /* the registry's figures last published (the controller thread's alone) */
    int64_t workers[BT_ROLE_COUNT][3], queued[BT_ROLE_COUNT];
    bool published;
    pthread_mutex_t lock; /* guards everything below */
    s_series *series;     /* [BT_PROMETHEUS_MAX_SERIES], n used, in the order first set */
    int n;
    bool full_warned;
};

/* ---- the table ------------------------------------------------------------------------------- */

/*  The series name{labels}, added when new; NULL when the table is full.  Lock held. */
static s_series *s_series_of(bt_prometheus_t *self, const char *name, const char *help,
                             bt_prometheus_type type, const char *labels) {
    for (int i = 0; i < self->n; i++)
        if (!strcmp(self->series[i].name, name) && !strcmp(self->series[i].labels, labels))
            return &self->series[i];
    if (self->n == BT_PROMETHEUS_MAX_SERIES) {
        if (!self->full_warned)
            bt_log(BT_LOG_WARN, "prometheus: more than %d series: %s and later ones are dropped",
                   BT_PROMETHEUS_MAX_SERIES, name);
        self->full_warned = true;
        return NULL;
    }
    s_series *s = &self->series[self->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->labels, sizeof s->labels, "%s", labels);
    snprintf(s->help, sizeof s->help, "%s", help);
    s->type = type;
    s->value = 0;
    return s;
}

static void s_set_locked(bt_prometheus_t *self, const char *name, const char *help,
                         bt_prometheus_type type, const char *labels, double value) {
    s_series *s = s_series_of(self, name, help, type, labels);
    if (s)
        s->value = value;
}

void bt_prometheus_set(bt_prometheus_t *self, const char *name, const char *help,
                       bt_prometheus_type type, const char *labels, double value) {
    pthread_mutex_lock(&self->lock);
    s_set_locked(self, name, help, type, labels, value);
    pthread_mutex_unlock(&self->lock);
}

void bt_prometheus_add(bt_prometheus_t *self, const char *name, const char *help,
                       const char *labels, double delta) {
    pthread_mutex_lock(&self->lock);
    s_series *s = s_series_of(self, name, help, BT_PROMETHEUS_COUNTER, labels);
    if (s && delta > 0)
        s->value += delta;
    pthread_mutex_unlock(&self->lock);
}

bool bt_prometheus_label(char *labels, size_t cap, const char *key, const char *value) {
    size_t n = strlen(labels);
    bt_buf b;
    bt_buf_init_fixed(&b, labels + n, cap - n);
    bt_buf_printf(&b, "%s%s=\"", n ? "," : "", key);
    for (const char *p = value; *p; p++)
        if (*p == '\\' || *p == '"')
            bt_buf_printf(&b, "\\%c", *p);
        else if (*p == '\n')
            bt_buf_puts(&b, "\\n");
        else
            bt_buf_put(&b, p, 1);
    bt_buf_puts(&b, "\"");
    if (b.failed)
        labels[n] = '\0';
    return !b.failed;
}

/*  prefix then key with every byte outside [a-zA-Z0-9_] as '_', cut to fit cap. */
static void s_metric_name(char *out, size_t cap, const char *prefix, const char *key) {
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (const char *p = key; *p && n + 1 < cap; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        out[n++] = ok ? c : '_';
    }
    out[n < cap ? n : cap - 1] = '\0';
}

/*  The exposition format's number: the shortest text that reads back as x (an integer in full),
    NaN, +Inf, -Inf. */
static void s_number(bt_buf *b, double x) {
    char num[BT_BUF_NUMBER_LEN];
    if (isnan(x))
        bt_buf_puts(b, "NaN");
    else if (isinf(x))
        bt_buf_puts(b, x > 0 ? "+Inf" : "-Inf");
    else
        bt_buf_puts(b, bt_buf_format_number(num, x, x == floor(x) && fabs(x) < 1e17 ? 17 : 1));
}

static int s_by_name(const void *a, const void *b) {
    const s_series *x = *(const s_series *const *)a, *y = *(const s_series *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y); /* a family's series in the order first set */
}

char *bt_prometheus_render(bt_prometheus_t *self) {
    bt_buf b = {0};
    pthread_mutex_lock(&self->lock);
    const s_series **order = malloc(sizeof *order * (size_t)(self->n ? self->n : 1));
    if (!order) {
        pthread_mutex_unlock(&self->lock);
        return NULL;
    }
    for (int i = 0; i < self->n; i++)
        order[i] = &self->series[i];
    qsort(order, (size_t)self->n, sizeof *order, s_by_name);
    for (int k = 0; k < self->n; k++) {
        const s_series *s = order[k];
        if (k == 0 || strcmp(s->name, order[k - 1]->name) != 0) {
            bt_buf_printf(&b, "# HELP %s ", s->name);
            for (const char *p = s->help; *p; p++) /* HELP escapes \ and newline */
                if (*p == '\\')
                    bt_buf_puts(&b, "\\\\");
                else if (*p == '\n')
                    bt_buf_puts(&b, "\\n");
                else
                    bt_buf_put(&b, p, 1);
            bt_buf_printf(&b, "\n# TYPE %s %s\n", s->name,
                          s->type == BT_PROMETHEUS_COUNTER ? "counter" : "gauge");
        }
        bt_buf_printf(&b, s->labels[0] ? "%s{%s} " : "%s%s ", s->name, s->labels);
        s_number(&b, s->value);
        bt_buf_puts(&b, "\n");
    }
    pthread_mutex_unlock(&self->lock);
    free(order);
    return bt_buf_detach(&b, NULL);
}

/* ---- the run log's lines --------------------------------------------------------------------- */

/*  One metrics line: its numeric fields as gauges of its kind, all under one lock. */
static void s_metric_line(bt_prometheus_t *self, const char *json, size_t len) {
    cJSON *j = cJSON_ParseWithLength(json, len);
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(j, "kind"));
    bool eval = kind && !strcmp(kind, "eval");
    if (!kind || (!eval && strcmp(kind, "train") != 0 && strcmp(kind, "sft") != 0)) {
        cJSON_Delete(j);
        return;
    }
    const char *variant = cJSON_GetStringValue(cJSON_GetObjectItem(j, "variant"));
    const char *dataset = cJSON_GetStringValue(cJSON_GetObjectItem(j, "dataset"));
    char labels[BT_PROMETHEUS_LABELS_MAX] = "", prefix[32];
    bt_prometheus_label(labels, sizeof labels, "variant", variant ? variant : "main");
    if (eval)
        bt_prometheus_label(labels, sizeof labels, "dataset", dataset ? dataset : "");
    snprintf(prefix, sizeof prefix, "baton_%s_", kind);
    pthread_mutex_lock(&self->lock);
    const cJSON *f;
    cJSON_ArrayForEach(f, j) {
        if (!cJSON_IsNumber(f) && !cJSON_IsNull(f)) /* null: a number that was not finite */
            continue;
        char name[BT_PROMETHEUS_NAME_MAX], help[S_HELP_MAX];
        s_metric_name(name, sizeof name, prefix, f->string);
        snprintf(help, sizeof help, "metrics.jsonl: %s of the last %s line%s", f->string, kind,
                 eval ? " of the dataset" : "");
        s_set_locked(self, name, help, BT_PROMETHEUS_GAUGE, labels,
                     cJSON_IsNumber(f) ? f->valuedouble : NAN);
    }
    pthread_mutex_unlock(&self->lock);
    cJSON_Delete(j);
}

static void s_on_line(void *user, bool metric, const char *json, size_t len) {
    if (metric)
        s_metric_line(user, json, len);
}

/*  Drops the gauges the metrics lines set (their lines come again). */
static void s_drop_lines(bt_prometheus_t *self) {
    pthread_mutex_lock(&self->lock);
    int kept = 0;
    for (int i = 0; i < self->n; i++) {
        const char *name = self->series[i].name;
        if (!strncmp(name, "baton_train_", 12) || !strncmp(name, "baton_eval_", 11) ||
            !strncmp(name, "baton_sft_", 10))
            continue;
        if (kept != i)
            self->series[kept] = self->series[i];
        kept++;
    }
    self->n = kept;
    pthread_mutex_unlock(&self->lock);
}

void bt_prometheus_load(bt_prometheus_t *self, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (f && (n = getline(&line, &cap, f)) > 0)
        s_metric_line(self, line, (size_t)n); /* the last line of each series wins */
    free(line);
    if (f)
        fclose(f);
}

static void s_on_rewound(void *user, const char *dir) {
    s_drop_lines(user);
    bt_prometheus_load(user, dir);
}

bt_runlog_sink bt_prometheus_sink(bt_prometheus_t *self) {
    return (bt_runlog_sink){.line = s_on_line, .rewound = s_on_rewound, .user = self};
}

/* ---- the registry ---------------------------------------------------------------------------- */

void bt_prometheus_registry(bt_prometheus_t *self, bt_registry_t *reg) {
    static const char *const states[] = {"idle", "busy", "lost"};
    int64_t count[BT_ROLE_COUNT][3] = {{0}}, queued[BT_ROLE_COUNT];
    for (int32_t i = 0; i < bt_registry_worker_count(reg); i++) {
        const bt_worker_info *w = bt_registry_worker(reg, i);
        if (w->role >= 0 && w->role < BT_ROLE_COUNT && w->state >= 0 && w->state <= 2)
            count[w->role][w->state]++;
    }
    for (int r = 0; r < BT_ROLE_COUNT; r++)
        queued[r] = bt_registry_queued(reg, (bt_role)r);
    if (self->published && !memcmp(count, self->workers, sizeof count) &&
        !memcmp(queued, self->queued, sizeof queued))
        return; /* called every turn: the table is touched on a change only */
    memcpy(self->workers, count, sizeof count);
    memcpy(self->queued, queued, sizeof queued);
    self->published = true;
    pthread_mutex_lock(&self->lock);
    for (int r = 0; r < BT_ROLE_COUNT; r++) {
        char role[64] = "";
        bt_prometheus_label(role, sizeof role, "role", bt_role_name((bt_role)r));
        for (int s = 0; s < 3; s++) {
            char labels[96];
            snprintf(labels, sizeof labels, "%s", role);
            bt_prometheus_label(labels, sizeof labels, "state", states[s]);
            s_set_locked(self, "baton_workers",
                         "Workers the controller knows, per role and state (idle, busy, lost)",
                         BT_PROMETHEUS_GAUGE, labels, (double)count[r][s]);
        }
        s_set_locked(self, "baton_queued_jobs", "Jobs waiting for a worker of the role",
                     BT_PROMETHEUS_GAUGE, role, (double)queued[r]);
    }
    pthread_mutex_unlock(&self->lock);
}

/* ---- the server ------------------------------------------------------------------------------ */

static void s_send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return; /* the client went away, or stalled past the timeout */
        p += k;
        n -= (size_t)k;
    }
}

static void s_respond(int fd, const char *status, const char *extra, const char *type,
                      const char *body) {
    char head[512];
    size_t len = strlen(body);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: "
                     "close\r\n\r\n",
                     status, type, len, extra);
    s_send_all(fd, head, (size_t)n);
    s_send_all(fd, body, len);
}

/*  Reads one request and answers it: GET /metrics (any query string) gets the exposition text,
    another path 404, another method 405, anything unreadable 400. */
static void s_answer(bt_prometheus_t *self, int fd) {
    struct timeval tv = {S_IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char req[S_REQUEST_MAX + 1];
    size_t got = 0;
    while (got < S_REQUEST_MAX) {
        ssize_t k = recv(fd, req + got, S_REQUEST_MAX - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[got] = '\0';
    const char *text = "text/plain; charset=utf-8";
    char method[16], target[1024], version[16];
    if (!(strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) ||
        sscanf(req, "%15s %1023s %15s", method, target, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0) {
        s_respond(fd, "400 Bad Request", "", text, "bad request\n");
        return;
    }
    if (strcmp(method, "GET") != 0) {
        s_respond(fd, "405 Method Not Allowed", "Allow: GET\r\n", text, "only GET\n");
        return;
    }
    target[strcspn(target, "?")] = '\0';
    if (strcmp(target, "/metrics") != 0) {
        s_respond(fd, "404 Not Found", "", text, "not found: the metrics are at /metrics\n");
        return;
    }
    char *body = bt_prometheus_render(self);
    if (!body) {
        s_respond(fd, "503 Service Unavailable", "", text, "out of memory\n");
        return;
    }
    s_respond(fd, "200 OK", "", "text/plain; version=0.0.4; charset=utf-8", body);
    free(body);
}

static void *s_serve(void *arg) {
    bt_prometheus_t *self = arg;
    for (;;) {
        struct pollfd p[2] = {{self->fd, POLLIN, 0}, {self->wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            bt_log(BT_LOG_ERROR, "prometheus: %s: poll failed: %s", self->listen, strerror(errno));
            return NULL;
        }
        if (p[1].revents)
            return NULL;
        if (!(p[0].revents & POLLIN))
            continue;
        int c = accept(self->fd, NULL, NULL);
        if (c < 0)
            continue; /* the client gave up before we took it, or no descriptor is free */
        fcntl(c, F_SETFL, fcntl(c, F_GETFL) & ~O_NONBLOCK); /* its own timeouts bound it */
        s_answer(self, c);
        close(c);
    }
}

/*  A listening socket for "HOST:PORT" (brackets around an IPv6 host); -1 with the reason. */
static int s_listen(const char *address) {
    char host[S_LISTEN_MAX];
    const char *colon = strrchr(address, ':');
    if (!colon || (size_t)(colon - address) >= sizeof host) {
        bt_fail(BT_EINVAL, "run.metrics_listen: %s: expected HOST:PORT", address);
        return -1;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - address), address);
    char *h = host;
    if (h[0] == '[') { /* [::1] */
        h++;
        h[strcspn(h, "]")] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(h, colon + 1, &hints, &res);
    if (rc != 0) {
        bt_fail(BT_EINVAL, "run.metrics_listen: cannot resolve %s: %s", address, gai_strerror(rc));
        return -1;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        /* non-blocking: a client that resets between poll and accept cannot stall the thread */
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1; /* a restarted run takes its port back from connections in TIME_WAIT */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        bt_fail(BT_EIO, "run.metrics_listen: cannot listen on %s: %s", address, strerror(err));
    return fd;
}

bt_prometheus_t *bt_prometheus_new(const char *address) {
    bt_prometheus_t *self = calloc(1, sizeof *self);
    s_series *series = calloc(BT_PROMETHEUS_MAX_SERIES, sizeof *series);
    if (!self || !series) {
        free(self);
        free(series);
        bt_fail(BT_ENOMEM, "prometheus: out of memory");
        return NULL;
    }
    snprintf(self->listen, sizeof self->listen, "%s", address);
    self->series = series;
    self->wake[0] = self->wake[1] = -1;
    pthread_mutex_init(&self->lock, NULL);
    self->fd = s_listen(address);
    if (self->fd < 0) {
        bt_prometheus_destroy(&self);
        return NULL;
    }
    if (pipe(self->wake) != 0) {
        bt_fail(BT_EIO, "prometheus: cannot make a pipe: %s", strerror(errno));
        bt_prometheus_destroy(&self);
        return NULL;
    }
    if (pthread_create(&self->thread, NULL, s_serve, self) != 0) {
        bt_fail(BT_EIO, "prometheus: cannot start the server thread");
        bt_prometheus_destroy(&self);
        return NULL;
    }
    self->started = true;
    return self;
}

void bt_prometheus_destroy(bt_prometheus_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_prometheus_t *self = *self_p;
    if (self->started) {
        char byte = 1;
        while (write(self->wake[1], &byte, 1) < 0 && errno == EINTR)
            ;
        pthread_join(self->thread, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (self->wake[i] >= 0)
            close(self->wake[i]);
    if (self->fd >= 0)
        close(self->fd);
    pthread_mutex_destroy(&self->lock);
    free(self->series);
    free(self);
    *self_p = NULL;
}
