/*  tensorboard.c — the run's TensorBoard event files, a function of metrics.jsonl and events.jsonl
    (docs/architecture.md, "TensorBoard event files"). */
#define _POSIX_C_SOURCE 200809L
#include "baton/tensorboard.h"

#include "baton/buf.h"
#include "baton/fileio.h"
#include "baton/tfrecord.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    S_MAX_DIRS = 16,        /* variants (config: at most 8) and the run's own */
    S_NAME_MAX = 64,        /* a variant's name, its NUL included */
    S_TAG_MAX = 256,        /* "eval/<dataset>/<field>" */
    S_TEXT_MAX = 16 * 1024, /* the events of one kind at one step, kept as one text */
    S_RECENT = 4,           /* event lines a rebuild may have read before their own call came */
};

static const char S_PREFIX[] = "events.out.tfevents.";

/*  The events of one kind at the newest step they came at: TensorBoard keeps one record per tag
    and step (a record preempts those of its tag at that step or later), so each record repeats
    the ones before it at its step. */
typedef struct {
    char tag[S_TAG_MAX];
    int64_t step;
    bt_buf text;
} s_text;

/*  The newest step written of the scalars of one prefix ("train", "eval/<dataset>", ...): a tag's
    steps must rise within a file, or TensorBoard drops the later points when an earlier comes. */
typedef struct {
    char prefix[S_TAG_MAX];
    int64_t step;
} s_series;

/*  RUN_DIR/tb/<name>/ (name "": RUN_DIR/tb/) and its open event file. */
typedef struct {
    char name[S_NAME_MAX];
    char path[PATH_MAX]; /* the event file; "" before it is created */
    FILE *f;
    bool failed; /* a write failed: nothing more goes to this file */
    s_text *texts;
    int n_texts;
    s_series *series;
    int n_series;
} s_dir;

struct bt_tensorboard {
    char run_dir[1024]; /* as bt_run's: room left for tb/<variant>/<file name> */
    char host[128];
    bool stale;    /* the files do not hold the logs as they are: start new ones from them */
    bool disorder; /* a line came with a step below its series' or tag's: write them sorted */
    bool started;  /* event files were written */
    int counter;   /* event files this writer created */
    s_dir dirs[S_MAX_DIRS];
    int n_dirs;
    /* hashes of the last lines of events.jsonl the newest rebuild read: another thread (the ZAP
       handler's) may have written one of them and be waiting to hand it over; it is not written
       twice.  A line's "time" makes two lines the same text only when they are one line. */
    uint64_t recent[S_RECENT];
    int n_recent;
    bool warned; /* a line named a variant that cannot be a directory */
};

static double s_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void s_close(s_dir *d) {
    if (d->f && fclose(d->f) != 0 && !d->failed)
        bt_log(BT_LOG_WARN, "tensorboard: %s: write failed: %s", d->path, strerror(errno));
    d->f = NULL;
    d->path[0] = '\0';
    d->failed = false;
    for (int i = 0; i < d->n_texts; i++)
        bt_buf_release(&d->texts[i].text);
    free(d->texts);
    d->texts = NULL;
    d->n_texts = 0;
    free(d->series);
    d->series = NULL;
    d->n_series = 0;
}

/*  The largest <unix seconds> of the event files in dir; -1 when none. */
static long long s_newest_file(const char *dir) {
    long long newest = -1;
    DIR *dp = opendir(dir);
    if (!dp)
        return -1;
    for (struct dirent *e; (e = readdir(dp));) {
        if (strncmp(e->d_name, S_PREFIX, sizeof S_PREFIX - 1))
            continue;
        long long t = strtoll(e->d_name + sizeof S_PREFIX - 1, NULL, 10);
        if (t > newest)
            newest = t;
    }
    closedir(dp);
    return newest;
}

/*  Writes one encoded event to d's file; on failure logs it once and stops writing there. */
static void s_record(bt_tensorboard_t *self, s_dir *d, bt_buf *event) {
    if (d->failed || !d->f || event->failed) {
        bt_buf_release(event);
        return;
    }
    if (bt_tfrecord_write(d->f, event->data, event->len) != BT_OK || fflush(d->f) != 0) {
        bt_log(BT_LOG_WARN, "tensorboard: %s: write failed: %s; its later records are lost",
               d->path, strerror(errno));
        d->failed = true;
    }
    bt_buf_release(event);
}

/*  Opens d's new event file: its name's seconds are later than any file's there, so the names
    sort in the order they were written (TensorBoard reads a run's files in name order); it opens
    with file_version and a session START at step 0, which tells TensorBoard that the records of
    the earlier files are replaced by this one's. */
static void s_open(bt_tensorboard_t *self, s_dir *d) {
    char dir[PATH_MAX - 256];
    snprintf(dir, sizeof dir, "%s/tb%s%s", self->run_dir, d->name[0] ? "/" : "", d->name);
    if (bt_mkdirs(dir) != BT_OK) {
        bt_log(BT_LOG_WARN, "tensorboard: %s", bt_last_error());
        d->failed = true;
        return;
    }
    long long t = (long long)time(NULL), newest = s_newest_file(dir);
    if (t <= newest)
        t = newest + 1;
    if (snprintf(d->path, sizeof d->path, "%s/%s%lld.%s.%ld.%d", dir, S_PREFIX, t, self->host,
                 (long)getpid(), self->counter) >= (int)sizeof d->path) {
        bt_log(BT_LOG_WARN, "tensorboard: %s: path too long", dir);
        d->failed = true;
        return;
    }
    d->f = fopen(d->path, "wb");
    if (!d->f) {
        bt_log(BT_LOG_WARN, "tensorboard: %s: cannot create: %s", d->path, strerror(errno));
        d->failed = true;
        return;
    }
    self->counter++;
    self->started = true;
    double now = s_wall_time();
    bt_buf event = {0};
    bt_tfevent_file_version(&event, now);
    s_record(self, d, &event);
    bt_tfevent_session_start(&event, now, 0);
    s_record(self, d, &event);
}

/*  The directory of lines naming variant (NULL: the run's own), its file open; NULL when the name
    cannot be a directory's or the table is full. */
static s_dir *s_dir_of(bt_tensorboard_t *self, const char *variant) {
    const char *name = variant ? variant : "";
    for (int i = 0; i < self->n_dirs; i++)
        if (!strcmp(self->dirs[i].name, name))
            return &self->dirs[i];
    if (strlen(name) >= S_NAME_MAX || strchr(name, '/') || name[0] == '.' ||
        (variant && !name[0]) || self->n_dirs == S_MAX_DIRS) {
        if (self->warned)
            return NULL;
        self->warned = true;
        bt_log(BT_LOG_WARN,
               "tensorboard: variant \"%.64s\": not written, nor any other such (not a "
               "directory name, or more than %d variants)",
               name, S_MAX_DIRS - 1);
        return NULL;
    }
    s_dir *d = &self->dirs[self->n_dirs++];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    s_open(self, d);
    return d;
}

static const char *s_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/*  global_step when the line has it, else step, else 0. */
static int64_t s_step(const cJSON *o) {
    const cJSON *s = cJSON_GetObjectItem(o, "global_step");
    if (!cJSON_IsNumber(s))
        s = cJSON_GetObjectItem(o, "step");
    double x = cJSON_IsNumber(s) ? s->valuedouble : 0;
    return x >= -9e18 && x <= 9e18 ? (int64_t)x : 0; /* NaN too: 0 */
}

/*  A metrics line: every numeric field but the step as a scalar under "<kind>/<field>", eval
    lines under "eval/<dataset>/<field>" ("<phase>/eval/<dataset>/<field>" outside the RL phase). */
static void s_metric(bt_tensorboard_t *self, const cJSON *o) {
    s_dir *d = s_dir_of(self, s_str(o, "variant"));
    if (!d)
        return;
    const char *kind = s_str(o, "kind"), *phase = s_str(o, "phase"), *ds = s_str(o, "dataset");
    char prefix[S_TAG_MAX], tag[S_TAG_MAX];
    if (kind && !strcmp(kind, "eval"))
        snprintf(prefix, sizeof prefix, "%s%seval/%s", phase && strcmp(phase, "rl") ? phase : "",
                 phase && strcmp(phase, "rl") ? "/" : "", ds ? ds : "eval");
    else
        snprintf(prefix, sizeof prefix, "%s", kind ? kind : "metrics");
    int64_t step = s_step(o);
    s_series *ser = NULL;
    for (int i = 0; i < d->n_series && !ser; i++)
        if (!strcmp(d->series[i].prefix, prefix))
            ser = &d->series[i];
    if (ser && step < ser->step) { /* an evaluation that finished after a later one */
        self->disorder = true;
        return;
    }
    if (!ser) {
        s_series *grown = realloc(d->series, (size_t)(d->n_series + 1) * sizeof *grown);
        if (!grown)
            return;
        d->series = grown;
        ser = &d->series[d->n_series++];
        snprintf(ser->prefix, sizeof ser->prefix, "%s", prefix);
    }
    ser->step = step;
    double now = s_wall_time();
    for (const cJSON *v = o->child; v; v = v->next) {
        if (!cJSON_IsNumber(v) || !v->string || !strcmp(v->string, "step") ||
            !strcmp(v->string, "global_step") ||
            snprintf(tag, sizeof tag, "%s/%s", prefix, v->string) >= (int)sizeof tag)
            continue;
        bt_buf event = {0};
        bt_tfevent_scalar(&event, now, step, tag, (float)v->valuedouble);
        s_record(self, d, &event);
    }
}

/*  An events line: a text under "events/<event>", the JSON line as a markdown code block, after
    the events of that kind written before at the same step. */
static void s_event(bt_tensorboard_t *self, const cJSON *o, const char *json, size_t len) {
    s_dir *d = s_dir_of(self, s_str(o, "variant"));
    if (!d)
        return;
    const char *kind = s_str(o, "event");
    char tag[S_TAG_MAX];
    if (snprintf(tag, sizeof tag, "events/%s", kind ? kind : "unnamed") >= (int)sizeof tag)
        return;
    int64_t step = s_step(o);
    s_text *t = NULL;
    for (int i = 0; i < d->n_texts && !t; i++)
        if (!strcmp(d->texts[i].tag, tag))
            t = &d->texts[i];
    if (t && step < t->step) { /* TensorBoard would drop the later texts of the tag */
        self->disorder = true;
        return;
    }
    if (!t) {
        s_text *grown = realloc(d->texts, (size_t)(d->n_texts + 1) * sizeof *grown);
        if (!grown)
            return;
        d->texts = grown;
        t = &d->texts[d->n_texts++];
        memset(t, 0, sizeof *t);
        snprintf(t->tag, sizeof t->tag, "%s", tag);
        t->step = step;
    }
    if (t->step != step || t->text.failed) { /* a new step: the text starts again */
        bt_buf_release(&t->text);
        t->text = (bt_buf){0};
    }
    while (t->text.len && t->text.len + len + 8 > S_TEXT_MAX) { /* full: the oldest goes */
        const char *next = strstr(t->text.data, "\n\n    ");
        size_t cut = next ? (size_t)(next - t->text.data) + 2 : t->text.len;
        memmove(t->text.data, t->text.data + cut, t->text.len - cut + 1);
        t->text.len -= cut;
    }
    t->step = step;
    bt_buf_puts(&t->text, t->text.len ? "\n\n    " : "    ");
    bt_buf_put(&t->text, json, len);
    if (t->text.failed)
        return;
    bt_buf event = {0};
    bt_tfevent_text(&event, s_wall_time(), step, tag, t->text.data, t->text.len);
    s_record(self, d, &event);
}

static void s_line(bt_tensorboard_t *self, bool metric, const char *json, size_t len) {
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (cJSON_IsObject(o)) {
        if (metric)
            s_metric(self, o);
        else
            s_event(self, o, json, len);
    }
    cJSON_Delete(o);
}

typedef struct {
    char *line;
    int64_t step;
    size_t index;
} s_sorted;

static int s_cmp_sorted(const void *a, const void *b) {
    const s_sorted *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/*  One of the logs, every line of it, as though it came now, in step order (in file order within
    a step), so that every tag's steps rise. */
static void s_replay(bt_tensorboard_t *self, const char *name, bool metric) {
    char path[PATH_MAX + 32], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", self->run_dir, name);
    if (bt_file_read(path, SIZE_MAX, &text, NULL) != BT_OK) {
        bt_log(BT_LOG_WARN, "tensorboard: %s", bt_last_error());
        return;
    }
    size_t line_no = 0, n = 0, cap = 0;
    s_sorted *lines = NULL;
    char *at = text;
    for (char *line; (line = bt_text_next_line(&at, &line_no));) {
        if (n == cap) {
            s_sorted *grown = realloc(lines, (cap = cap ? 2 * cap : 256) * sizeof *grown);
            if (!grown) {
                bt_log(BT_LOG_WARN, "tensorboard: %s: out of memory", path);
                break;
            }
            lines = grown;
        }
        cJSON *o = cJSON_Parse(line);
        lines[n] = (s_sorted){line, o ? s_step(o) : 0, n};
        cJSON_Delete(o);
        n++;
    }
    for (size_t i = n > S_RECENT ? n - S_RECENT : 0; !metric && i < n; i++) /* file order */
        self->recent[self->n_recent++] = bt_hash64(lines[i].line, strlen(lines[i].line));
    if (n)
        qsort(lines, n, sizeof *lines, s_cmp_sorted);
    for (size_t i = 0; i < n; i++)
        s_line(self, metric, lines[i].line, strlen(lines[i].line));
    free(lines);
    free(text);
}

/*  Whether an events line that came now is one the newest rebuild read (then forgotten). */
static bool s_was_read(bt_tensorboard_t *self, const char *json, size_t len) {
    if (!self->n_recent)
        return false;
    uint64_t h = bt_hash64(json, len);
    for (int i = 0; i < self->n_recent; i++)
        if (self->recent[i] == h) {
            memmove(self->recent + i, self->recent + i + 1,
                    (size_t)(self->n_recent - i - 1) * sizeof *self->recent);
            self->n_recent--;
            return true;
        }
    return false;
}

/*  New event files for every directory, holding what the logs hold now. */
static void s_rebuild(bt_tensorboard_t *self) {
    for (int i = 0; i < self->n_dirs; i++)
        s_close(&self->dirs[i]);
    self->n_dirs = 0;
    self->stale = false;
    self->disorder = false;
    self->n_recent = 0;
    s_replay(self, "metrics.jsonl", true);
    s_replay(self, "events.jsonl", false);
}

static void s_on_line(void *user, bool metric, const char *json, size_t len) {
    bt_tensorboard_t *self = user;
    if (self->stale) /* the logs already hold this line */
        s_rebuild(self);
    else if (metric || !s_was_read(self, json, len))
        s_line(self, metric, json, len);
    if (self->disorder) /* new files, sorted, this line in its place */
        s_rebuild(self);
}

static void s_on_rewound(void *user, const char *dir) {
    bt_tensorboard_t *self = user;
    for (int i = 0; i < self->n_dirs; i++)
        s_close(&self->dirs[i]);
    self->n_dirs = 0;
    self->stale = true; /* the next line (or the end) starts new files */
}

bt_tensorboard_t *bt_tensorboard_new(const char *run_dir) {
    bt_tensorboard_t *self = calloc(1, sizeof *self);
    if (!self) {
        bt_fail(BT_ENOMEM, "tensorboard: out of memory");
        return NULL;
    }
    if (snprintf(self->run_dir, sizeof self->run_dir, "%s", run_dir) >= (int)sizeof self->run_dir) {
        bt_fail(BT_EINVAL, "tensorboard: %s: path too long", run_dir);
        free(self);
        return NULL;
    }
    if (gethostname(self->host, sizeof self->host) != 0 || !self->host[0])
        snprintf(self->host, sizeof self->host, "localhost");
    self->host[sizeof self->host - 1] = '\0';
    for (char *c = self->host; *c; c++)
        if (*c == '/')
            *c = '_';
    self->stale = true;
    return self;
}

void bt_tensorboard_destroy(bt_tensorboard_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_tensorboard_t *self = *self_p;
    if (self->stale && self->started) /* cut back with no line since: the files follow the cut */
        s_rebuild(self);
    for (int i = 0; i < self->n_dirs; i++)
        s_close(&self->dirs[i]);
    free(self);
    *self_p = NULL;
}

bt_runlog_sink bt_tensorboard_sink(bt_tensorboard_t *self) {
    return (bt_runlog_sink){.line = s_on_line, .rewound = s_on_rewound, .user = self};
}
