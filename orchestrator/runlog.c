/*  runlog.c — run directory and JSON-lines logs. */
#define _POSIX_C_SOURCE 200809L
#include "baton/runlog.h"

#include "baton/fileio.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BT_RUNLOG_TAG_MAX 160 /* `"variant":"NAME"`: a variant name and its key */

struct bt_runlog {
    char dir[PATH_MAX];
    FILE *metrics, *events;
    int64_t events_opened; /* bytes events.jsonl held when this invocation opened it */
    pthread_mutex_t sink_lock; /* one sink call at a time */
    bt_runlog_sink sinks[BT_RUNLOG_MAX_SINKS];
    int n_sinks;
};

bt_status bt_mkdirs(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return bt_fail(BT_EINVAL, "%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return bt_fail(BT_EIO, "%s: cannot create: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return bt_fail(BT_EIO, "%s: cannot create: %s", buf, strerror(errno));
    return BT_OK;
}

static int64_t s_size(FILE *f) {
    fflush(f);
    struct stat st;
    return fstat(fileno(f), &st) == 0 ? (int64_t)st.st_size : -1;
}

static FILE *s_open_log(const char *dir, const char *name) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "a+"); /* "+": a resume reads back where it cuts metrics.jsonl */
    if (!f)
        bt_fail(BT_EIO, "%s: cannot open: %s", path, strerror(errno));
    return f;
}

bt_runlog_t *bt_runlog_open(const char *dir, const char *config_json) {
    if (bt_mkdirs(dir) != BT_OK)
        return NULL;
    bt_runlog_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "runlog: out of memory");
        return NULL;
    }
    snprintf(self->dir, sizeof self->dir, "%s", dir);
    pthread_mutex_init(&self->sink_lock, NULL);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (bt_file_write(path, config_json, strlen(config_json)) != BT_OK ||
        !(self->metrics = s_open_log(dir, "metrics.jsonl")) ||
        !(self->events = s_open_log(dir, "events.jsonl"))) {
        bt_runlog_destroy(&self);
        return NULL;
    }
    self->events_opened = s_size(self->events);
    return self;
}

void bt_runlog_destroy(bt_runlog_t **self_p) {
    if (!self_p || !*self_p)
        return;
    if ((*self_p)->metrics)
        fclose((*self_p)->metrics);
    if ((*self_p)->events)
        fclose((*self_p)->events);
    pthread_mutex_destroy(&(*self_p)->sink_lock);
    free(*self_p);
    *self_p = NULL;
}

static void s_sink_line(bt_runlog_t *self, bool metric, const bt_jsonl *line) {
    if (!self->n_sinks)
        return;
    size_t n = line->len ? line->len : 1; /* the writer closes the object as it writes it */
    char *json = malloc(n + 2);
    if (!json)
        return; /* a sink misses a line; the log has it */
    memcpy(json, line->len ? line->buf : "{", n);
    json[n] = '}';
    json[n + 1] = '\0';
    pthread_mutex_lock(&self->sink_lock);
    for (int i = 0; i < self->n_sinks; i++)
        if (self->sinks[i].line)
            self->sinks[i].line(self->sinks[i].user, metric, json, n + 1);
    pthread_mutex_unlock(&self->sink_lock);
    free(json);
}

static void s_sink_rewound(bt_runlog_t *self) {
    pthread_mutex_lock(&self->sink_lock);
    for (int i = 0; i < self->n_sinks; i++)
        if (self->sinks[i].rewound)
            self->sinks[i].rewound(self->sinks[i].user, self->dir);
    pthread_mutex_unlock(&self->sink_lock);
}

bt_status bt_runlog_add_sink(bt_runlog_t *self, bt_runlog_sink sink) {
    pthread_mutex_lock(&self->sink_lock);
    bool full = self->n_sinks >= BT_RUNLOG_MAX_SINKS;
    if (!full)
        self->sinks[self->n_sinks++] = sink;
    pthread_mutex_unlock(&self->sink_lock);
    return full ? bt_fail(BT_ERANGE, "%s: more than %d log sinks", self->dir, BT_RUNLOG_MAX_SINKS)
                : BT_OK;
}

static bt_status s_write(FILE *f, const char *name, const bt_jsonl *line) {
    if (line->overflow)
        return bt_fail(BT_ERANGE, "%s: a record longer than %zu bytes was refused", name,
                       sizeof line->buf);
    flockfile(f); /* whole lines, whichever thread writes */
    bool ok = fprintf(f, "%s}\n", line->len ? line->buf : "{") >= 0 && fflush(f) == 0;
    funlockfile(f);
    if (!ok)
        return bt_fail(BT_EIO, "%s: write failed: %s", name, strerror(errno));
    return BT_OK;
}

bt_status bt_runlog_metric(bt_runlog_t *self, const bt_jsonl *line) {
    BT_TRY(s_write(self->metrics, "metrics.jsonl", line));
    s_sink_line(self, true, line);
    return BT_OK;
}

bt_status bt_runlog_event(bt_runlog_t *self, const bt_jsonl *line) {
    BT_TRY(s_write(self->events, "events.jsonl", line));
    s_sink_line(self, false, line);
    return BT_OK;
}

/*  Cuts file (name: "metrics.jsonl" or "events.jsonl") back to size bytes, the end of a line. */
static bt_status s_truncate(bt_runlog_t *self, FILE *f, const char *name, int64_t size) {
    int64_t now = s_size(f);
    char last = '\n';
    if (size > 0 && size <= now && pread(fileno(f), &last, 1, (off_t)(size - 1)) != 1)
        return bt_fail(BT_EIO, "%s/%s: cannot read: %s", self->dir, name, strerror(errno));
    if (size < 0 || size > now) /* ftruncate would pad it with NUL bytes */
        return bt_fail(BT_EINVAL,
                       "%s/%s: holds %lld bytes, fewer than the %lld to cut it back to: a cut "
                       "never grows the file (its tail was lost, or the checkpoint is another "
                       "run's); resume from an older checkpoint or start again with --overwrite",
                       self->dir, name, (long long)now, (long long)size);
    if (last != '\n')
        return bt_fail(BT_EINVAL,
                       "%s/%s: %lld bytes is not the end of a line: the file is not the one the "
                       "checkpoint was taken with; resume from an older checkpoint or start again "
                       "with --overwrite",
                       self->dir, name, (long long)size);
    if (ftruncate(fileno(f), (off_t)size) != 0)
        return bt_fail(BT_EIO, "%s/%s: cannot truncate to %lld bytes: %s", self->dir, name,
                       (long long)size, strerror(errno));
    return BT_OK; /* opened for appending: the next line goes at the new end */
}

int64_t bt_runlog_metrics_size(bt_runlog_t *self) {
    return s_size(self->metrics);
}

bt_status bt_runlog_truncate_metrics(bt_runlog_t *self, int64_t size) {
    BT_TRY(s_truncate(self, self->metrics, "metrics.jsonl", size));
    s_sink_rewound(self);
    return BT_OK;
}

bt_status bt_runlog_drop_metrics(bt_runlog_t *self, int64_t size, const char *variant) {
    int64_t now = s_size(self->metrics);
    if (size < 0 || size > now)
        return s_truncate(self, self->metrics, "metrics.jsonl", size); /* says why */
    size_t n = (size_t)(now - size);
    char *tail = malloc(n + 1), tag[BT_RUNLOG_TAG_MAX];
    if (!tail)
        return bt_fail(BT_ENOMEM, "%s/metrics.jsonl: out of memory", self->dir);
    snprintf(tag, sizeof tag, "\"variant\":\"%s\"", variant);
    bt_status st =
        n && pread(fileno(self->metrics), tail, n, (off_t)size) != (ssize_t)n
            ? bt_fail(BT_EIO, "%s/metrics.jsonl: cannot read: %s", self->dir, strerror(errno))
            : s_truncate(self, self->metrics, "metrics.jsonl", size);
    tail[n] = '\0';
    for (char *line = tail; st == BT_OK && line < tail + n;) {
        char *end = memchr(line, '\n', (size_t)(tail + n - line));
        size_t len = end ? (size_t)(end - line) + 1 : (size_t)(tail + n - line);
        char keep = line[len - 1];
        line[len - 1] = '\0'; /* the tag is looked for in this line alone */
        bool drop = strstr(line, tag) != NULL;
        line[len - 1] = keep;
        if (!drop && fwrite(line, 1, len, self->metrics) != len)
            st = bt_fail(BT_EIO, "%s/metrics.jsonl: write failed: %s", self->dir, strerror(errno));
        line += len;
    }
    if (st == BT_OK && fflush(self->metrics) != 0)
        st = bt_fail(BT_EIO, "%s/metrics.jsonl: write failed: %s", self->dir, strerror(errno));
    free(tail);
    if (st == BT_OK)
        s_sink_rewound(self);
    return st;
}

int64_t bt_runlog_events_size(bt_runlog_t *self) {
    return s_size(self->events);
}

bt_status bt_runlog_truncate_events(bt_runlog_t *self, int64_t size) {
    int64_t now = s_size(self->events), from = self->events_opened;
    if (size > from) /* only what came before this invocation is cut */
        return bt_fail(BT_EINVAL,
                       "%s/events.jsonl: held %lld bytes when this run opened it, fewer than the "
                       "%lld to cut it back to: the checkpoint is another run's; resume from an "
                       "older checkpoint or start again with --overwrite",
                       self->dir, (long long)from, (long long)size);
    size_t n = (size_t)(now - from);
    char *mine = malloc(n + 1);
    if (!mine)
        return bt_fail(BT_ENOMEM, "%s/events.jsonl: out of memory", self->dir);
    bt_status st =
        n && pread(fileno(self->events), mine, n, (off_t)from) != (ssize_t)n
            ? bt_fail(BT_EIO, "%s/events.jsonl: cannot read: %s", self->dir, strerror(errno))
            : s_truncate(self, self->events, "events.jsonl", size);
    if (st == BT_OK && n && fwrite(mine, 1, n, self->events) != n)
        st = bt_fail(BT_EIO, "%s/events.jsonl: write failed: %s", self->dir, strerror(errno));
    if (st == BT_OK && fflush(self->events) != 0)
        st = bt_fail(BT_EIO, "%s/events.jsonl: write failed: %s", self->dir, strerror(errno));
    free(mine);
    if (st == BT_OK) {
        self->events_opened = size;
        s_sink_rewound(self);
    }
    return st;
}

const char *bt_runlog_dir(const bt_runlog_t *self) {
    return self->dir;
}
