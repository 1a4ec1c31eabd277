/*  report.c — the run report: run directories in, one self-contained HTML page out.  C reads the
    runs and writes the tables (identity, comparison, lineage, config keys that differ) and the
    data as one JSON blob; the page's script (report.js) draws the dashboard from it. */
#define _POSIX_C_SOURCE 200809L
#include "baton/report.h"

#include "baton/buf.h"
#include "baton/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*  orchestrator/report.css and report.js as NUL-terminated strings (CMake's report_assets.c). */
extern const char bt_report_css[], bt_report_js[];

enum { S_LABEL = 256, S_MAX_DATASETS = 16, S_MAX_ROWS = 8, S_TEXT = 1024 };

typedef struct {
    char dataset[64];
    double accuracy;
    double best, best_step;        /* the best RL accuracy and its step; NaN: none */
    double reach_step, reach_time; /* the first RL evaluation at or above the target; NaN: none */
} s_last;

/*  A population-based training copy: variant copied from, at step, and its exploration. */
typedef struct {
    const char *run; /* the run's name, borrowed */
    double step, lr_before, lr_after;
    char variant[64], from[64], explore[16];
} s_copy;

/*  One row of the table: a run's variant ("main" without variants). */
typedef struct {
    char variant[64];
    double final_step; /* NaN when no step was logged */
    s_last last[S_MAX_DATASETS];
    int n_last;
    double tokens; /* the last train line's cumulative completion tokens; NaN: none */
} s_row;

/*  A key of config.json flattened ("grpo.lr") and its value as compact JSON text; both owned. */
typedef struct {
    char *key, *value;
} s_kv;

/*  One record of run.json: the invocation that started or resumed the run. */
typedef struct {
    char version[32], revision[48], host[256], user[64], start[32];
    bool resume;
    char *command, *changes; /* owned; changes: "key from -> to; ..." or "" */
} s_record;

typedef struct {
    const char *dir; /* borrowed from the caller */
    char name[128];
    int bad_metrics, bad_events; /* malformed lines skipped */
    s_row rows[S_MAX_ROWS];      /* in the order the variants first appear */
    int n_rows;
    s_kv *config; /* config.json flattened, in its order */
    int n_config, cap_config;
    s_record *records; /* run.json's records; none without run.json */
    int n_records, cap_records;
    char identity_note[S_LABEL]; /* why there are no records, when there are none */
} s_run;

/*  A curve's owner: a run's variant.  Its index is its colour in every chart. */
typedef struct {
    int run;
    char variant[64];
} s_series;

/*  A column of a stream: one value per row, NaN where the line had none. */
typedef struct {
    char *name; /* owned */
    double *v;  /* (cap) */
} s_col;

/*  The lines of one series and group ("train", "eval/<dataset>", ...), as columns. */
typedef struct {
    int series;
    char group[S_LABEL];
    s_col *cols;
    int n_cols, cap_cols;
    int n, cap; /* rows */
} s_stream;

/*  A line of events.jsonl drawn as a vertical mark. */
typedef struct {
    int run, series; /* series -1: the event names no variant of the run */
    double step, time;
    char event[64];
    char *text; /* owned */
} s_event;

typedef struct {
    s_run *runs;
    int n_runs;
    s_series *series;
    int n_series, cap_series;
    s_stream *streams;
    int n_streams, cap_streams;
    s_event *events;
    int n_events, cap_events;
    double target;  /* the table's target accuracy; NaN: none */
    s_copy *copies; /* pbt events: the variants' lineage */
    int n_copies, cap_copies;
    bool oom;
} s_report;

/*  Length of the valid UTF-8 sequence at p (1..4), or 0 when it is not one. */
static int s_utf8_len(const unsigned char *p) {
    int n = p[0] < 0x80   ? 1
            : p[0] < 0xc2 ? 0
            : p[0] < 0xe0 ? 2
            : p[0] < 0xf0 ? 3
            : p[0] < 0xf5 ? 4
                          : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
        return 0; /* overlong, surrogate or beyond U+10FFFF */
    return n;
}

/*  Text from a file as XML character data: & < > " escaped, control bytes and invalid UTF-8
    replaced by '?'. */
static void s_esc(bt_buf *b, const char *text) {
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int n = s_utf8_len(p);
        if (*p == '&')
            bt_buf_printf(b, "&amp;");
        else if (*p == '<')
            bt_buf_printf(b, "&lt;");
        else if (*p == '>')
            bt_buf_printf(b, "&gt;");
        else if (*p == '"')
            bt_buf_printf(b, "&quot;");
        else if (n == 0 || (*p < 0x20 && *p != '\t' && *p != '\n'))
            bt_buf_printf(b, "?");
        else
            bt_buf_put(b, (const char *)p, (size_t)n);
        p += n ? n : 1;
    }
}

/*  ---- helpers ------------------------------------------------------------------------------ */

static const char *s_str(const cJSON *o, const char *key, const char *fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : fallback;
}

/*  NaN when missing, null or not a number. */
static double s_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool s_has(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key) != NULL;
}

/*  Makes room for element n of an array of cap elements; NULL (array untouched) when out of
    memory. */
static void *s_reserve(void *p, int *cap, int n, size_t size) {
    if (n < *cap)
        return p;
    int grown = *cap ? *cap * 2 : 16;
    void *q = realloc(p, (size_t)grown * size);
    if (q)
        *cap = grown;
    return q;
}

/*  The row of the line's variant; NULL past S_MAX_ROWS variants (their lines only draw). */
static s_row *s_row_of(s_run *u, const cJSON *o) {
    const char *variant = s_str(o, "variant", "main");
    for (int i = 0; i < u->n_rows; i++)
        if (!strcmp(u->rows[i].variant, variant))
            return &u->rows[i];
    if (u->n_rows == S_MAX_ROWS)
        return NULL;
    s_row *w = &u->rows[u->n_rows++];
    *w = (s_row){.final_step = NAN, .tokens = NAN};
    snprintf(w->variant, sizeof w->variant, "%s", variant);
    return w;
}

static void s_final_step(s_row *w, double step) {
    if (w && !(w->final_step >= step))
        w->final_step = step;
}

/*  The table's accuracy per dataset (accuracy, else pairs_accuracy): the last of any phase; over
    RL evaluations the best and the first at or above target. */
static void s_last_accuracy(s_row *u, const char *dataset, const cJSON *o, double target) {
    if (!u)
        return;
    double acc = s_num(o, "accuracy");
    if (!isfinite(acc))
        acc = s_num(o, "pairs_accuracy");
    if (!isfinite(acc))
        return;
    int i = 0;
    while (i < u->n_last && strcmp(u->last[i].dataset, dataset))
        i++;
    if (i == S_MAX_DATASETS)
        return;
    s_last *l = &u->last[i];
    if (i == u->n_last) {
        u->n_last++;
        *l = (s_last){.best = NAN, .best_step = NAN, .reach_step = NAN, .reach_time = NAN};
        snprintf(l->dataset, sizeof l->dataset, "%s", dataset);
    }
    l->accuracy = acc;
    double step = s_num(o, "step");
    if (strcmp(s_str(o, "phase", "rl"), "rl") || !isfinite(step))
        return;
    if (!(l->best >= acc)) {
        l->best = acc;
        l->best_step = step;
    }
    if (acc >= target && !isfinite(l->reach_step)) {
        l->reach_step = step;
        l->reach_time = s_num(o, "time");
    }
}

/*  A `pbt` event: one row of the lineage table. */
static void s_copy_event(s_report *r, const s_run *u, const cJSON *o) {
    s_copy *q = s_reserve(r->copies, &r->cap_copies, r->n_copies, sizeof *q);
    if (!q) {
        r->oom = true;
        return;
    }
    r->copies = q;
    s_copy *c = &r->copies[r->n_copies++];
    *c = (s_copy){.run = u->name,
                  .step = s_num(o, "step"),
                  .lr_before = s_num(o, "lr_before"),
                  .lr_after = s_num(o, "lr_after")};
    snprintf(c->variant, sizeof c->variant, "%s", s_str(o, "variant", "?"));
    snprintf(c->from, sizeof c->from, "%s", s_str(o, "from", "?"));
    snprintf(c->explore, sizeof c->explore, "%s", s_str(o, "explore", "?"));
}

/*  ---- series, streams and events --------------------------------------------------------- */

/*  The series of the run's variant, made when new and create; -1 when none (or no memory). */
static int s_series_of(s_report *r, int run, const char *variant, bool create) {
    for (int i = 0; i < r->n_series; i++)
        if (r->series[i].run == run && !strcmp(r->series[i].variant, variant))
            return i;
    s_series *q = create ? s_reserve(r->series, &r->cap_series, r->n_series, sizeof *q) : NULL;
    if (!q)
        return create ? (r->oom = true, -1) : -1;
    r->series = q;
    q[r->n_series].run = run;
    snprintf(q[r->n_series].variant, sizeof q->variant, "%s", variant);
    return r->n_series++;
}

static s_stream *s_stream_of(s_report *r, int series, const char *group) {
    for (s_stream *s = r->streams; s < r->streams + r->n_streams; s++)
        if (s->series == series && !strcmp(s->group, group))
            return s;
    s_stream *q = s_reserve(r->streams, &r->cap_streams, r->n_streams, sizeof *q);
    if (!q)
        return NULL;
    r->streams = q;
    s_stream *s = &q[r->n_streams++];
    *s = (s_stream){.series = series};
    snprintf(s->group, sizeof s->group, "%s", group);
    return s;
}

/*  A new last row, NaN in every column; false when out of memory. */
static bool s_stream_row(s_stream *s) {
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        for (int i = 0; i < s->n_cols; i++) {
            double *v = realloc(s->cols[i].v, (size_t)cap * sizeof *v);
            if (!v)
                return false;
            s->cols[i].v = v;
        }
        s->cap = cap;
    }
    for (int i = 0; i < s->n_cols; i++)
        s->cols[i].v[s->n] = NAN;
    s->n++;
    return true;
}

/*  The column named name, made NaN in every row when new; NULL when out of memory. */
static s_col *s_col_of(s_stream *s, const char *name) {
    for (int i = 0; i < s->n_cols; i++)
        if (!strcmp(s->cols[i].name, name))
            return &s->cols[i];
    s_col *q = s_reserve(s->cols, &s->cap_cols, s->n_cols, sizeof *q);
    if (!q)
        return NULL;
    s->cols = q;
    s_col *c = &q[s->n_cols];
    c->name = strdup(name);
    c->v = malloc((size_t)s->cap * sizeof *c->v);
    if (!c->name || !c->v) {
        free(c->name);
        free(c->v);
        return NULL;
    }
    for (int i = 0; i < s->cap; i++)
        c->v[i] = NAN;
    s->n_cols++;
    return c;
}

/*  The group of a metrics line: "train", "sft", "eval/<dataset>" for RL evaluations and
    "sft-eval/<dataset>" for SFT's (whose steps count SFT steps), any other kind its name. */
static void s_group_of(const cJSON *o, char out[S_LABEL]) {
    const char *kind = s_str(o, "kind", "");
    if (!strcmp(kind, "eval"))
        snprintf(out, S_LABEL, "%s/%s",
                 strcmp(s_str(o, "phase", "rl"), "sft") ? "eval" : "sft-eval",
                 s_str(o, "dataset", "eval"));
    else
        snprintf(out, S_LABEL, "%s", kind);
}

/*  Every numeric field of a metrics line with a step, as a row of its series' stream. */
static void s_stream_line(s_report *r, int run, const cJSON *o) {
    char group[S_LABEL];
    s_group_of(o, group);
    if (!*group || !isfinite(s_num(o, "step")))
        return;
    int k = s_series_of(r, run, s_str(o, "variant", "main"), true);
    s_stream *s = k >= 0 ? s_stream_of(r, k, group) : NULL;
    if (!s || !s_stream_row(s)) {
        r->oom = true;
        return;
    }
    for (const cJSON *f = o->child; f; f = f->next) {
        s_col *c = cJSON_IsNumber(f) && f->string ? s_col_of(s, f->string) : NULL;
        if (c)
            c->v[s->n - 1] = f->valuedouble;
        else if (cJSON_IsNumber(f) && f->string)
            r->oom = true;
    }
}

/*  "run: event key=value, ..." of every field but event and time, cut at S_TEXT bytes. */
static char *s_event_text(const s_run *u, const cJSON *o) {
    bt_buf b = {0};
    bt_buf_printf(&b, "%s: %s", u->name, s_str(o, "event", ""));
    int n = 0;
    for (const cJSON *f = o->child; f; f = f->next) {
        if (!f->string || !strcmp(f->string, "event") || !strcmp(f->string, "time"))
            continue;
        bt_buf_printf(&b, "%s%s=", n++ ? ", " : " ", f->string);
        if (cJSON_IsString(f))
            bt_buf_puts(&b, f->valuestring);
        else if (cJSON_IsNumber(f))
            bt_buf_number(&b, f->valuedouble, 12);
        else {
            char *t = cJSON_PrintUnformatted(f);
            bt_buf_puts(&b, t ? t : "?");
            free(t);
        }
    }
    if (b.len > S_TEXT)
        bt_buf_truncate(&b, S_TEXT);
    return bt_buf_detach(&b, NULL);
}

/*  An event with a step or a time: a mark on the charts. */
static void s_mark(s_report *r, int run, const cJSON *o) {
    const s_run *u = &r->runs[run];
    double step = s_num(o, "step"), time = s_num(o, "time");
    const char *name = s_str(o, "event", "");
    if (!*name || (!isfinite(step) && !isfinite(time)))
        return;
    s_event *q = s_reserve(r->events, &r->cap_events, r->n_events, sizeof *q);
    char *text = q ? s_event_text(u, o) : NULL;
    if (!text) {
        if (q)
            r->events = q;
        r->oom = true;
        return;
    }
    r->events = q;
    const char *variant = s_str(o, "variant", NULL);
    q[r->n_events++] = (s_event){.run = run,
                                 .series = variant ? s_series_of(r, run, variant, false) : -1,
                                 .step = step,
                                 .time = time,
                                 .text = text};
    snprintf(q[r->n_events - 1].event, sizeof q->event, "%s", name);
}

/*  ---- reading the logs ------------------------------------------------------------------- */

static void s_train(s_run *u, const cJSON *o) {
    double step = s_num(o, "step");
    if (!isfinite(step))
        return;
    s_row *w = s_row_of(u, o);
    s_final_step(w, step);
    if (w && s_has(o, "tokens"))
        w->tokens = s_num(o, "tokens");
}

/*  Phase "sft" evaluations count SFT steps: they set no final step. */
static void s_eval(s_report *r, s_run *u, const cJSON *o) {
    s_row *w = s_row_of(u, o);
    s_last_accuracy(w, s_str(o, "dataset", "eval"), o, r->target);
    double step = s_num(o, "step");
    if (!strcmp(s_str(o, "phase", "rl"), "rl") && isfinite(step))
        s_final_step(w, step);
}

/*  One line of metrics.jsonl or events.jsonl; blank lines are not counted as malformed. */
static void s_line(s_report *r, int run, char *line, bool events) {
    s_run *u = &r->runs[run];
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
        line[--n] = '\0';
    if (!n)
        return;
    cJSON *o = cJSON_ParseWithOpts(line, NULL, true);
    if (!cJSON_IsObject(o) && events)
        u->bad_events++;
    else if (!cJSON_IsObject(o))
        u->bad_metrics++;
    else if (events && !strcmp(s_str(o, "event", ""), "pbt"))
        s_copy_event(r, u, o);
    else if (events)
        s_mark(r, run, o);
    else {
        if (!strcmp(s_str(o, "kind", ""), "train"))
            s_train(u, o);
        else if (!strcmp(s_str(o, "kind", ""), "eval"))
            s_eval(r, u, o);
        s_stream_line(r, run, o);
    }
    cJSON_Delete(o);
}

static bt_status s_read_lines(s_report *r, int run, const char *path, bool events) {
    char *text = NULL;
    BT_TRY(bt_file_read(path, SIZE_MAX, &text, NULL));
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        s_line(r, run, line, events);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return r->oom ? bt_fail(BT_ENOMEM, "report: out of memory") : BT_OK;
}

static bt_status s_path(char *out, const char *dir, const char *file) {
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, file);
    return n >= 0 && n < PATH_MAX ? BT_OK : bt_fail(BT_EIO, "%s: path too long", dir);
}

/*  dir/file parsed; NULL (no error left) when missing or not JSON. */
static cJSON *s_read_json(const char *dir, const char *file) {
    char path[PATH_MAX], *text = NULL;
    cJSON *doc = NULL;
    if (s_path(path, dir, file) == BT_OK && bt_file_read(path, 1 << 24, &text, NULL) == BT_OK)
        doc = cJSON_Parse(text);
    free(text);
    bt_clear_error();
    return doc;
}

/*  ---- config.json flattened, run.json's records -------------------------------------------- */

/*  The leaves of node under prefix ("a.b"; arrays are leaves), appended to u->config. */
static void s_flatten(s_report *r, s_run *u, const cJSON *node, const char *prefix) {
    for (const cJSON *f = node->child; f && !r->oom; f = f->next) {
        char key[S_LABEL];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", f->string ? f->string : "");
        if (cJSON_IsObject(f) && f->child) {
            s_flatten(r, u, f, key);
            continue;
        }
        s_kv *q = s_reserve(u->config, &u->cap_config, u->n_config, sizeof *q);
        char *value = q ? cJSON_PrintUnformatted(f) : NULL, *k = value ? strdup(key) : NULL;
        if (q)
            u->config = q;
        if (!k) {
            free(value);
            r->oom = true;
            return;
        }
        q[u->n_config++] = (s_kv){k, value};
    }
}

/*  The words of argv joined by spaces, each quoted for a POSIX shell when it needs it. */
static void s_command(bt_buf *b, const cJSON *argv) {
    int n = 0;
    for (const cJSON *a = argv ? argv->child : NULL; a; a = a->next) {
        const char *w = cJSON_IsString(a) ? a->valuestring : "?";
        bt_buf_puts(b, n++ ? " " : "");
        if (*w &&
            strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+-@%") ==
                strlen(w)) {
            bt_buf_puts(b, w);
            continue;
        }
        bt_buf_puts(b, "'");
        for (const char *p = w; *p; p++)
            bt_buf_puts(b, *p == '\'' ? "'\\''" : (char[2]){*p, 0});
        bt_buf_puts(b, "'");
    }
}

/*  run.json's records into u->records; a missing or unreadable one leaves a note instead. */
static void s_load_identity(s_report *r, s_run *u) {
    cJSON *doc = s_read_json(u->dir, "run.json");
    const cJSON *records = cJSON_GetObjectItemCaseSensitive(doc, "records");
    char path[PATH_MAX];
    bool exists = s_path(path, u->dir, "run.json") == BT_OK && access(path, F_OK) == 0;
    bt_clear_error();
    if (!cJSON_IsArray(records) || !records->child)
        snprintf(u->identity_note, sizeof u->identity_note, "%s",
                 doc      ? "run.json: expected {\"records\": [...]} with at least one record"
                 : exists ? "run.json: not valid JSON"
                          : "no run.json (which baton made it is not recorded)");
    for (const cJSON *o = records ? records->child : NULL; o && !r->oom; o = o->next) {
        s_record *q = s_reserve(u->records, &u->cap_records, u->n_records, sizeof *q);
        if (!q) {
            r->oom = true;
            break;
        }
        u->records = q;
        s_record *rec = &q[u->n_records];
        *rec = (s_record){.resume = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "resume"))};
        snprintf(rec->version, sizeof rec->version, "%s", s_str(o, "baton_version", "?"));
        snprintf(rec->revision, sizeof rec->revision, "%s", s_str(o, "git_revision", "?"));
        snprintf(rec->host, sizeof rec->host, "%s", s_str(o, "host", "?"));
        snprintf(rec->user, sizeof rec->user, "%s", s_str(o, "user", "?"));
        snprintf(rec->start, sizeof rec->start, "%s", s_str(o, "start_time", "?"));
        bt_buf cmd = {0}, changes = {0};
        s_command(&cmd, cJSON_GetObjectItemCaseSensitive(o, "argv"));
        const cJSON *diff = cJSON_GetObjectItemCaseSensitive(o, "config_diff");
        for (const cJSON *d = diff ? diff->child : NULL; d; d = d->next)
            bt_buf_printf(&changes, "%s%s %s -> %s", d == diff->child ? "" : "; ",
                          s_str(d, "key", "?"), s_str(d, "from", "?"), s_str(d, "to", "?"));
        rec->command = bt_buf_detach(&cmd, NULL);
        rec->changes = bt_buf_detach(&changes, NULL);
        u->n_records++;
        if (!rec->command || !rec->changes)
            r->oom = true;
    }
    cJSON_Delete(doc);
}

/*  run.name from config.json, else the directory's last component; made unique among the runs
    before it by appending the directory.  The config is kept flattened for the diff table. */
static void s_load_config(s_report *r, s_run *u) {
    char base[PATH_MAX];
    cJSON *cfg = s_read_json(u->dir, "config.json");
    snprintf(base, sizeof base, "%s", u->dir);
    for (size_t n = strlen(base); n > 1 && base[n - 1] == '/'; n--)
        base[n - 1] = '\0';
    const char *name = s_str(cJSON_GetObjectItemCaseSensitive(cfg, "run"), "name", "");
    if (!*name)
        name = strrchr(base, '/') && strrchr(base, '/')[1] ? strrchr(base, '/') + 1 : base;
    snprintf(u->name, sizeof u->name, "%s", name);
    for (const s_run *v = r->runs; v < u; v++)
        if (!strcmp(v->name, u->name))
            snprintf(u->name, sizeof u->name, "%s (%s)", name, u->dir);
    if (cJSON_IsObject(cfg))
        s_flatten(r, u, cfg, "");
    cJSON_Delete(cfg);
}

static bt_status s_load_run(s_report *r, int run, const char *dir) {
    struct stat sb;
    s_run *u = &r->runs[run];
    u->dir = dir;
    u->rows[0] = (s_row){.variant = "main", .final_step = NAN, .tokens = NAN}; /* until a line */
    if (stat(dir, &sb) != 0)
        return bt_fail(BT_EIO, "%s: cannot read run directory: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return bt_fail(BT_EIO, "%s: cannot read run directory: not a directory", dir);
    s_load_config(r, u);
    s_load_identity(r, u);
    char path[PATH_MAX];
    BT_TRY(s_path(path, dir, "metrics.jsonl"));
    BT_TRY(s_read_lines(r, run, path, false));
    BT_TRY(s_path(path, dir, "events.jsonl"));
    return stat(path, &sb) == 0 ? s_read_lines(r, run, path, true) : BT_OK;
}

/*  ---- the data blob ----------------------------------------------------------------------- */

/*  "run" for a run with one series "main", else "run / variant". */
static void s_series_label(const s_report *r, int k, char out[S_LABEL]) {
    const s_series *s = &r->series[k];
    int n = 0;
    for (int i = 0; i < r->n_series; i++)
        n += r->series[i].run == s->run;
    if (n == 1 && !strcmp(s->variant, "main"))
        snprintf(out, S_LABEL, "%s", r->runs[s->run].name);
    else
        snprintf(out, S_LABEL, "%s / %s", r->runs[s->run].name, s->variant);
}

static void s_jstr(bt_buf *b, const char *s) {
    bt_buf_json_string(b, s, strlen(s), BT_JSON_ESCAPE_UTF8);
}

/*  A finite number in its shortest round-tripping text, anything else null. */
static void s_jnum(bt_buf *b, double x) {
    if (isfinite(x))
        bt_buf_number(b, x, 12);
    else
        bt_buf_puts(b, "null");
}

/*  A line per run.json record, "PREFIX: started|resumed TIME by baton VERSION (git REV) on HOST
    as USER: COMMAND[ (changed ...)]", or one with the note when there is none. */
static void s_identity_lines(bt_buf *b, const s_run *u, const char *prefix) {
    if (!u->n_records)
        bt_buf_printf(b, "%s: %s\n", prefix, u->identity_note);
    for (const s_record *rec = u->records; rec < u->records + u->n_records; rec++)
        bt_buf_printf(b, "%s: %s %s by baton %s (git %s) on %s as %s: %s%s%s%s\n", prefix,
                      rec->resume ? "resumed" : "started", rec->start, rec->version, rec->revision,
                      rec->host, rec->user, rec->command, *rec->changes ? " (changed " : "",
                      rec->changes, *rec->changes ? ")" : "");
}

/*  {"runs":[{name, dir, build, identity}], "series":[{run, variant, label}], "streams":[{series,
   group, n, cols:{field:[value per row]}}], "events":[{run, series, event, step, time, text}]}: see
    docs/architecture.md, "The report". */
static void s_blob(bt_buf *b, const s_report *r) {
    bt_buf_puts(b, "{\"runs\":[");
    for (int i = 0; i < r->n_runs; i++) {
        bt_buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        s_jstr(b, r->runs[i].name);
        bt_buf_puts(b, ",\"dir\":");
        s_jstr(b, r->runs[i].dir);
        const s_run *u = &r->runs[i]; /* the build of its latest invocation, and every one */
        const s_record *last = u->n_records ? &u->records[u->n_records - 1] : NULL;
        bt_buf identity = {0};
        s_identity_lines(&identity, u, u->name);
        char build[S_LABEL] = "";
        if (last)
            snprintf(build, sizeof build, "baton %s (git %s)", last->version, last->revision);
        bt_buf_puts(b, ",\"build\":");
        s_jstr(b, build);
        bt_buf_puts(b, ",\"identity\":");
        s_jstr(b, identity.data ? identity.data : "");
        b->failed |= identity.failed;
        bt_buf_release(&identity);
        bt_buf_puts(b, "}");
    }
    bt_buf_puts(b, "],\"series\":[");
    for (int k = 0; k < r->n_series; k++) {
        char label[S_LABEL];
        s_series_label(r, k, label);
        bt_buf_printf(b, "%s{\"run\":%d,\"variant\":", k ? "," : "", r->series[k].run);
        s_jstr(b, r->series[k].variant);
        bt_buf_puts(b, ",\"label\":");
        s_jstr(b, label);
        bt_buf_puts(b, "}");
    }
    bt_buf_puts(b, "],\"streams\":[");
    for (const s_stream *s = r->streams; s < r->streams + r->n_streams; s++) {
        bt_buf_printf(b, "%s{\"series\":%d,\"group\":", s > r->streams ? "," : "", s->series);
        s_jstr(b, s->group);
        bt_buf_printf(b, ",\"n\":%d,\"cols\":{", s->n);
        for (const s_col *c = s->cols; c < s->cols + s->n_cols; c++) {
            bt_buf_puts(b, c > s->cols ? "," : "");
            s_jstr(b, c->name);
            bt_buf_puts(b, ":[");
            for (int i = 0; i < s->n; i++) {
                bt_buf_puts(b, i ? "," : "");
                s_jnum(b, c->v[i]);
            }
            bt_buf_puts(b, "]");
        }
        bt_buf_puts(b, "}}");
    }
    bt_buf_puts(b, "],\"events\":[");
    for (const s_event *e = r->events; e < r->events + r->n_events; e++) {
        bt_buf_printf(b, "%s{\"run\":%d,\"series\":%d,\"event\":", e > r->events ? "," : "", e->run,
                      e->series);
        s_jstr(b, e->event);
        bt_buf_puts(b, ",\"step\":");
        s_jnum(b, e->step);
        bt_buf_puts(b, ",\"time\":");
        s_jnum(b, e->time);
        bt_buf_puts(b, ",\"text\":");
        s_jstr(b, e->text);
        bt_buf_puts(b, "}");
    }
    bt_buf_puts(b, "]}");
}

/*  The blob inside <script type="application/json">: '<', '>' and '&' (found only inside its
    strings) as \u escapes, so no "</script" can end the element early and the page stays XML. */
static void s_blob_script(bt_buf *page, const s_report *r) {
    bt_buf blob = {0};
    s_blob(&blob, r);
    if (blob.failed)
        page->failed = true;
    bt_buf_puts(page, "<script id=\"baton-data\" type=\"application/json\">");
    for (size_t i = 0; i < blob.len; i++) {
        char c = blob.data[i];
        if (c == '<' || c == '>' || c == '&')
            bt_buf_printf(page, "\\u%04x", (unsigned)c);
        else
            bt_buf_put(page, &c, 1);
    }
    bt_buf_puts(page, "</script>\n");
    bt_buf_release(&blob);
}

/*  ---- the page ---------------------------------------------------------------------------- */

static void s_head(bt_buf *b, const s_report *r) {
    bt_buf_printf(
        b, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
           "<meta charset=\"utf-8\"/>\n<title>baton report: ");
    for (int i = 0; i < r->n_runs; i++) {
        bt_buf_printf(b, i ? ", " : "");
        s_esc(b, r->runs[i].name);
    }
    bt_buf_printf(b, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>baton report</h1>\n",
                  bt_report_css);
}

static void s_cell(bt_buf *b, const char *text) {
    bt_buf_puts(b, "<td>");
    s_esc(b, text);
    bt_buf_puts(b, "</td>");
}

/*  run.json: which baton and which command made each run, and what each resume changed. */
static void s_identity_table(bt_buf *b, const s_report *r) {
    bt_buf_puts(b, "<h2>who made the runs</h2>\n<table class=\"identity\">\n<tr><th>run</th>"
                   "<th>invocation</th><th>start time (UTC)</th><th>baton</th><th>git revision</th>"
                   "<th>command</th><th>host</th><th>user</th><th>config changed</th></tr>\n");
    for (const s_run *u = r->runs; u < r->runs + r->n_runs; u++) {
        if (!u->n_records) {
            bt_buf_puts(b, "<tr>");
            s_cell(b, u->name);
            bt_buf_puts(b, "<td colspan=\"8\" class=\"note\">");
            s_esc(b, u->identity_note);
            bt_buf_puts(b, "</td></tr>\n");
        }
        for (const s_record *rec = u->records; rec < u->records + u->n_records; rec++) {
            bt_buf_puts(b, "<tr>");
            s_cell(b, u->name);
            s_cell(b, rec->resume ? "resume" : "start");
            s_cell(b, rec->start);
            s_cell(b, rec->version);
            s_cell(b, rec->revision);
            bt_buf_puts(b, "<td class=\"command\">");
            s_esc(b, rec->command);
            bt_buf_puts(b, "</td>");
            s_cell(b, rec->host);
            s_cell(b, rec->user);
            s_cell(b, *rec->changes ? rec->changes : "-");
            bt_buf_puts(b, "</tr>\n");
        }
    }
    bt_buf_puts(b, "</table>\n");
}

/*  The value of key in the run's flattened config; NULL when it has none. */
static const char *s_config_value(const s_run *u, const char *key) {
    for (int i = 0; i < u->n_config; i++)
        if (!strcmp(u->config[i].key, key))
            return u->config[i].value;
    return NULL;
}

/*  True when key differs between the runs (or some run lacks it). */
static bool s_config_differs(const s_report *r, const char *key) {
    const char *first = s_config_value(&r->runs[0], key);
    for (int i = 1; i < r->n_runs; i++) {
        const char *v = s_config_value(&r->runs[i], key);
        if (!first || !v || strcmp(first, v))
            return true;
    }
    return false;
}

/*  Every key of the flattened config.json files whose value is not the same in all runs. */
static void s_config_table(bt_buf *b, const s_report *r) {
    if (r->n_runs < 2)
        return;
    bt_buf_puts(b, "<h2>config keys that differ</h2>\n<table class=\"config-diff\">\n<tr><th>key"
                   "</th>");
    for (int i = 0; i < r->n_runs; i++) {
        bt_buf_puts(b, "<th>");
        s_esc(b, r->runs[i].name);
        bt_buf_puts(b, "</th>");
    }
    bt_buf_puts(b, "</tr>\n");
    int rows = 0;
    for (const s_run *u = r->runs; u < r->runs + r->n_runs; u++)
        for (const s_kv *kv = u->config; kv < u->config + u->n_config; kv++) {
            bool seen = false; /* listed already, from a run before this one */
            for (const s_run *v = r->runs; v < u && !seen; v++)
                seen = s_config_value(v, kv->key) != NULL;
            if (seen || !s_config_differs(r, kv->key))
                continue;
            rows++;
            bt_buf_puts(b, "<tr><td class=\"key\">");
            s_esc(b, kv->key);
            bt_buf_puts(b, "</td>");
            for (int i = 0; i < r->n_runs; i++) {
                const char *v = s_config_value(&r->runs[i], kv->key);
                s_cell(b, v ? v : "(absent)");
            }
            bt_buf_puts(b, "</tr>\n");
        }
    bt_buf_puts(b, "</table>\n");
    if (!rows)
        bt_buf_puts(b, "<p class=\"note\">the runs' configs are the same</p>\n");
}

/*  "dataset value (step S)" per dataset, "; "-separated, or "-". */
static void s_best_cell(bt_buf *b, const s_row *u) {
    int n = 0;
    for (int i = 0; i < u->n_last; i++) {
        if (!isfinite(u->last[i].best))
            continue;
        bt_buf_printf(b, n++ ? "; " : "");
        s_esc(b, u->last[i].dataset);
        bt_buf_printf(b, " %.6g (step %.6g)", u->last[i].best, u->last[i].best_step);
    }
    bt_buf_printf(b, n ? "" : "-");
}

/*  "dataset step S, T s" per dataset that reached the target, else "dataset not reached". */
static void s_reach_cell(bt_buf *b, const s_row *u) {
    int n = 0;
    for (int i = 0; i < u->n_last; i++) {
        const s_last *l = &u->last[i];
        if (!isfinite(l->best))
            continue;
        bt_buf_printf(b, n++ ? "; " : "");
        s_esc(b, l->dataset);
        if (!isfinite(l->reach_step))
            bt_buf_printf(b, " not reached");
        else if (isfinite(l->reach_time))
            bt_buf_printf(b, " step %.6g, %.1f s", l->reach_step, l->reach_time);
        else
            bt_buf_printf(b, " step %.6g", l->reach_step);
    }
    bt_buf_printf(b, n ? "" : "-");
}

static void s_runs_table(bt_buf *b, const s_report *r) {
    bt_buf_printf(b, "<table class=\"runs\">\n<tr><th>run</th><th>directory</th><th>final step</th>"
                     "<th>last accuracy</th><th>best accuracy</th><th>tokens</th>");
    if (isfinite(r->target))
        bt_buf_printf(b, "<th>first at accuracy &#8805; %.6g</th>", r->target);
    bt_buf_printf(b, "</tr>\n");
    for (const s_run *run = r->runs; run < r->runs + r->n_runs; run++)
        for (const s_row *u = run->rows; u < run->rows + (run->n_rows ? run->n_rows : 1); u++) {
            bt_buf_printf(b, "<tr><td>");
            s_esc(b, run->name);
            if (run->n_rows > 1 || (run->n_rows && strcmp(u->variant, "main"))) {
                bt_buf_printf(b, " / ");
                s_esc(b, u->variant);
            }
            bt_buf_printf(b, "</td><td>");
            s_esc(b, run->dir);
            bt_buf_printf(b, "</td><td>");
            if (run->n_rows && isfinite(u->final_step))
                bt_buf_printf(b, "%.6g", u->final_step);
            bt_buf_printf(b, "%s</td><td>", isfinite(u->final_step) ? "" : "-");
            for (int i = 0; i < u->n_last; i++) {
                bt_buf_printf(b, i ? "; " : "");
                s_esc(b, u->last[i].dataset);
                bt_buf_printf(b, " %.6g", u->last[i].accuracy);
            }
            bt_buf_printf(b, "%s</td><td>", u->n_last ? "" : "-");
            s_best_cell(b, u);
            bt_buf_printf(b, "</td><td>");
            if (isfinite(u->tokens))
                bt_buf_printf(b, "%.0f", u->tokens);
            else
                bt_buf_printf(b, "-");
            if (isfinite(r->target)) {
                bt_buf_printf(b, "</td><td>");
                s_reach_cell(b, u);
            }
            bt_buf_printf(b, "</td></tr>\n");
        }
    bt_buf_printf(b, "</table>\n");
}

/*  Population-based training: who copied whom, when, and the learning rate it explored. */
static void s_lineage_table(bt_buf *b, const s_report *r) {
    if (!r->n_copies)
        return;
    bt_buf_printf(b,
                  "<h2>lineage</h2>\n<table class=\"lineage\">\n<tr><th>run</th><th>step</th>"
                  "<th>variant</th><th>copied</th><th>learning rate</th><th>explore</th></tr>\n");
    for (const s_copy *c = r->copies; c < r->copies + r->n_copies; c++) {
        bt_buf_printf(b, "<tr><td>");
        s_esc(b, c->run);
        bt_buf_printf(b, "</td><td>%.6g</td><td>", c->step);
        s_esc(b, c->variant);
        bt_buf_printf(b, "</td><td>");
        s_esc(b, c->from);
        bt_buf_printf(b, "</td><td>%.6g &#8594; %.6g</td><td>", c->lr_before, c->lr_after);
        s_esc(b, c->explore);
        bt_buf_printf(b, "</td></tr>\n");
    }
    bt_buf_printf(b, "</table>\n");
}

static void s_notes(bt_buf *b, const s_report *r) {
    for (const s_run *u = r->runs; u < r->runs + r->n_runs; u++) {
        for (int events = 0; events < 2; events++) {
            int n = events ? u->bad_events : u->bad_metrics;
            if (!n)
                continue;
            bt_buf_printf(b, "<p class=\"note\">");
            s_esc(b, u->name);
            bt_buf_printf(b, ": %d malformed line%s skipped in %s</p>\n", n, n == 1 ? "" : "s",
                          events ? "events.jsonl" : "metrics.jsonl");
        }
    }
}

static bt_status s_write(const char *path, const bt_buf *b) {
    char tmp[PATH_MAX], why[512];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    if (n < 0 || n >= (int)sizeof tmp)
        return bt_fail(BT_EIO, "%s: path too long", path);
    if (bt_file_replace(path, tmp, b->data, b->len) != BT_OK) {
        snprintf(why, sizeof why, "%s", bt_last_error());
        return bt_fail(BT_EIO, "%s: cannot write the report (%s)", path, why);
    }
    return BT_OK;
}

/*  The charts: report.js draws them into #dashboard from the blob. */
static void s_dashboard(bt_buf *b, const s_report *r) {
    bt_buf_puts(b,
                "<h2>charts</h2>\n<noscript><p class=\"note\">The charts are drawn by the page's "
                "script: allow JavaScript for this file.</p></noscript>\n"
                "<div id=\"dashboard\"></div>\n");
    s_blob_script(b, r);
    bt_buf_printf(b, "<script>//<![CDATA[\n%s//]]>\n</script>\n", bt_report_js);
}

static void s_run_release(s_run *u) {
    for (int i = 0; i < u->n_config; i++) {
        free(u->config[i].key);
        free(u->config[i].value);
    }
    free(u->config);
    for (int i = 0; i < u->n_records; i++) {
        free(u->records[i].command);
        free(u->records[i].changes);
    }
    free(u->records);
}

static void s_report_release(s_report *r) {
    for (s_stream *s = r->streams; s < r->streams + r->n_streams; s++) {
        for (int i = 0; i < s->n_cols; i++) {
            free(s->cols[i].name);
            free(s->cols[i].v);
        }
        free(s->cols);
    }
    free(r->streams);
    for (int i = 0; i < r->n_events; i++)
        free(r->events[i].text);
    free(r->events);
    free(r->series);
    free(r->copies);
    for (int i = 0; r->runs && i < r->n_runs; i++)
        s_run_release(&r->runs[i]);
    free(r->runs);
}

bt_status bt_report_write(const char *const *run_dirs, int n_dirs, const char *out_path,
                          double target_accuracy) {
    BT_ASSERT(run_dirs && n_dirs > 0 && out_path);
    s_report r = {
        .runs = calloc((size_t)n_dirs, sizeof(s_run)), .n_runs = n_dirs, .target = target_accuracy};
    bt_status st = r.runs ? BT_OK : bt_fail(BT_ENOMEM, "report: out of memory");
    for (int i = 0; i < n_dirs && st == BT_OK; i++)
        st = s_load_run(&r, i, run_dirs[i]);
    if (st == BT_OK && r.oom)
        st = bt_fail(BT_ENOMEM, "report: out of memory");
    bt_buf b = {0};
    if (st == BT_OK) {
        s_head(&b, &r);
        s_identity_table(&b, &r);
        s_runs_table(&b, &r);
        s_lineage_table(&b, &r);
        s_config_table(&b, &r);
        s_notes(&b, &r);
        s_dashboard(&b, &r);
        bt_buf_printf(&b, "</body>\n</html>\n");
        st = b.failed ? bt_fail(BT_ENOMEM, "report: out of memory") : s_write(out_path, &b);
    }
    bt_buf_release(&b);
    s_report_release(&r);
    return st;
}

bt_status bt_report_identity(const char *run_dir, char **text_out) {
    BT_ASSERT(run_dir && text_out);
    s_report r = {0};
    s_run u = {.dir = run_dir};
    s_load_identity(&r, &u);
    bt_buf b = {0};
    s_identity_lines(&b, &u, run_dir);
    s_run_release(&u);
    *text_out = r.oom ? NULL : bt_buf_detach(&b, NULL);
    bt_buf_release(&b);
    return *text_out ? BT_OK : bt_fail(BT_ENOMEM, "report: out of memory");
}
