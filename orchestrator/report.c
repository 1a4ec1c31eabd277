/*  report.c — the HTML run report: JSON lines in, one XHTML page with inline SVG charts out. */
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

/*  The charts, one per family of curves. */
typedef enum s_family_kind {
    S_ACCURACY,
    S_RESPONSE_LENGTH,
    S_REWARD,
    S_PERPLEXITY,
    S_PROBES,
    S_ROBUSTNESS,
    S_SOURCES,
    S_WEIGHTS,
    S_LOSS,
    S_KL,
    S_ENTROPY,
    S_GRAD_NORM,
    S_LR,
    S_CLIP,
    S_EVAL_LENGTH,
    S_MARGINS,
    S_CHOICES,
    S_SUBJECTS,
    S_CONTAMINATION,
    S_FAMILIES
} s_family_kind;

static const struct {
    const char *name, *title, *y_title;
} s_family[S_FAMILIES] = {
    {"accuracy", "Evaluation accuracy", "accuracy"},
    {"response_length", "Response length (training)", "response_len_mean"},
    {"reward", "Reward (training)", "reward_mean"},
    {"perplexity", "Perplexity", "perplexity"},
    {"probes", "Probe log-probabilities", "log P(target | prompt)"},
    {"robustness", "Robustness (clean accuracy and perturbed variants)", "accuracy"},
    {"sources", "Training accuracy by data source", "accuracy"},
    {"weights", "Data mixture weights", "weight"},
    {"loss", "Training loss", "loss"},
    {"kl", "KL to the reference (training)", "kl"},
    {"entropy", "Policy entropy (training)", "entropy"},
    {"grad_norm", "Gradient norm (training)", "grad_norm"},
    {"lr", "Learning rate", "lr"},
    {"clip_frac", "Clipped ratio fraction (training)", "clip_frac"},
    {"eval_response_length", "Response length (evaluation)", "response_len_mean"},
    {"margins", "Pair-probe margins", "log(PPL(worse) / PPL(better))"},
    {"choices", "Multiple choice: acc and acc_norm per benchmark", "accuracy"},
    {"subjects", "Multiple choice by subject", "accuracy"},
    {"contamination", "Contamination gap (acc - acc in shuffled order)", "contamination_gap"},
};

/*  The training line's fields drawn as a curve per variant, and their charts. */
static const struct {
    s_family_kind family;
    const char *field;
} s_train_fields[] = {
    {S_RESPONSE_LENGTH, "response_len_mean"},
    {S_REWARD, "reward_mean"},
    {S_LOSS, "loss"},
    {S_KL, "kl"},
    {S_ENTROPY, "entropy"},
    {S_GRAD_NORM, "grad_norm"},
    {S_LR, "lr"},
    {S_CLIP, "clip_frac"},
};

enum { S_LABEL = 256, S_MAX_DATASETS = 16 };
/*  Chart geometry in px: the plot area is [S_L, S_R] x [S_T, S_B]; the legend goes below S_H. */
enum { S_W = 720, S_L = 64, S_R = 704, S_T = 16, S_B = 244, S_H = 300, S_ROW = 16, S_COL = 320 };

static const char *const s_palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
enum { S_PALETTE = sizeof s_palette / sizeof *s_palette };

static const char s_css[] =
    "body{font-family:system-ui,sans-serif;margin:24px;color:#222}\n"
    "table.runs{border-collapse:collapse}\n"
    "table.runs td,table.runs th{border:1px solid #ccc;padding:4px 8px;text-align:left}\n"
    ".note{color:#a05000}\n"
    "svg.chart{display:block;margin:8px 0 24px;font-family:sans-serif;font-size:11px}\n"
    "svg.chart .axis{stroke:#333}\n"
    "svg.chart .grid{stroke:#e8e8e8}\n"
    "svg.chart .axis-title{font-size:12px}\n";

typedef struct {
    double x, y;
    char trigger[16];
} s_point;

typedef struct {
    s_family_kind family;
    char label[S_LABEL];
    s_point *pts;
    int n, cap;
} s_series;

typedef enum { S_EV_INTERVAL, S_EV_ALARM, S_EV_DEFERRED, S_EV_TUNER } s_event_kind;

/*  An evaluation or tuner event drawn as a tick on the accuracy chart's x-axis. */
typedef struct {
    s_event_kind kind;
    double step, new_every;
    char param[32]; /* tuner: the hyperparameter it changed */
    char tip[2 * S_LABEL];
} s_mark;

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

enum { S_MAX_ROWS = 8 };

typedef struct {
    const char *dir; /* borrowed from the caller */
    char name[128];
    int bad_metrics, bad_events; /* malformed lines skipped */
    s_row rows[S_MAX_ROWS];      /* in the order the variants first appear */
    int n_rows;
} s_run;

typedef struct {
    s_run *runs;
    int n_runs;
    s_series *series;
    int n_series, cap_series;
    s_mark *marks;
    int n_marks, cap_marks;
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

/*  ---- reading the logs ------------------------------------------------------------------- */

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

static s_series *s_series_of(s_report *r, s_family_kind family, const char *label) {
    for (int i = 0; i < r->n_series; i++)
        if (r->series[i].family == family && !strcmp(r->series[i].label, label))
            return &r->series[i];
    s_series *q = s_reserve(r->series, &r->cap_series, r->n_series, sizeof *q);
    if (!q)
        return (r->oom = true), NULL;
    r->series = q;
    s_series *s = &r->series[r->n_series++];
    memset(s, 0, sizeof *s);
    s->family = family;
    snprintf(s->label, sizeof s->label, "%s", label);
    return s;
}

/*  Appends (x, y) to the series; a NaN y breaks its line. */
static void s_add(s_report *r, s_family_kind family, const char *label, double x, double y,
                  const char *trigger) {
    s_series *s = s_series_of(r, family, label);
    s_point *q = s ? s_reserve(s->pts, &s->cap, s->n, sizeof *q) : NULL;
    if (!q) {
        r->oom = true;
        return;
    }
    s->pts = q;
    s_point *p = &s->pts[s->n++];
    p->x = x;
    p->y = y;
    snprintf(p->trigger, sizeof p->trigger, "%s", trigger ? trigger : "");
}

/*  "run / variant[ / a[ / b]]". */
static void s_label(char *out, const s_run *u, const char *variant, const char *a, const char *b) {
    snprintf(out, S_LABEL, "%s / %s%s%s%s%s", u->name, variant, a ? " / " : "", a ? a : "",
             b ? " / " : "", b ? b : "");
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

static void s_train(s_report *r, s_run *u, const cJSON *o) {
    double step = s_num(o, "step");
    if (!isfinite(step))
        return;
    s_row *w = s_row_of(u, o);
    s_final_step(w, step);
    if (w && s_has(o, "tokens"))
        w->tokens = s_num(o, "tokens");
    char label[S_LABEL];
    s_label(label, u, s_str(o, "variant", "main"), NULL, NULL);
    for (size_t i = 0; i < sizeof s_train_fields / sizeof *s_train_fields; i++)
        if (s_has(o, s_train_fields[i].field))
            s_add(r, s_train_fields[i].family, label, step, s_num(o, s_train_fields[i].field),
                  NULL);
    for (const cJSON *f = o->child; f; f = f->next) { /* data.sources: accuracy.NAME, weight.NAME */
        const char *k = f->string ? f->string : "";
        bool acc = !strncmp(k, "accuracy.", 9), weight = !strncmp(k, "weight.", 7);
        if (!acc && !weight)
            continue;
        s_label(label, u, s_str(o, "variant", "main"), k + (acc ? 9 : 7), NULL);
        s_add(r, acc ? S_SOURCES : S_WEIGHTS, label, step, cJSON_IsNumber(f) ? f->valuedouble : NAN,
              NULL);
    }
}

/*  probe.<name>.logp, pair.<name>.margin and subject.<name>.acc / .acc_norm fields, and robust.*
    fields beside the clean accuracy. */
static void s_eval_fields(s_report *r, s_run *u, const cJSON *o, double step) {
    const char *variant = s_str(o, "variant", "main"), *dataset = s_str(o, "dataset", "eval");
    char label[S_LABEL], name[64];
    bool clean = false;
    for (const cJSON *f = o->child; f; f = f->next) {
        const char *k = f->string ? f->string : "";
        size_t n = strlen(k);
        double y = cJSON_IsNumber(f) ? f->valuedouble : NAN;
        if (n > 11 && !strncmp(k, "probe.", 6) && !strcmp(k + n - 5, ".logp")) {
            snprintf(name, sizeof name, "%.*s", (int)(n - 11), k + 6);
            s_label(label, u, variant, name, NULL);
            s_add(r, S_PROBES, label, step, y, NULL);
        } else if (n > 12 && !strncmp(k, "pair.", 5) && !strcmp(k + n - 7, ".margin")) {
            snprintf(name, sizeof name, "%.*s", (int)(n - 12), k + 5);
            s_label(label, u, variant, name, NULL);
            s_add(r, S_MARGINS, label, step, y, NULL);
        } else if (n > 12 && !strncmp(k, "subject.", 8) &&
                   (!strcmp(k + n - 4, ".acc") || !strcmp(k + n - 9, ".acc_norm"))) {
            snprintf(name, sizeof name, "%.*s", (int)(n - 8), k + 8); /* NAME.acc */
            s_label(label, u, variant, dataset, name);
            s_add(r, S_SUBJECTS, label, step, y, NULL);
        } else if (!strncmp(k, "robust.", 7)) {
            if (!clean && s_has(o, "accuracy")) {
                s_label(label, u, variant, dataset, "clean");
                s_add(r, S_ROBUSTNESS, label, step, s_num(o, "accuracy"), NULL);
                clean = true;
            }
            s_label(label, u, variant, dataset, k);
            s_add(r, S_ROBUSTNESS, label, step, y, NULL);
        }
    }
}

/*  Phase "sft" evaluations count SFT steps: only the table sees them. */
static void s_eval(s_report *r, s_run *u, const cJSON *o) {
    const char *dataset = s_str(o, "dataset", "eval");
    s_row *w = s_row_of(u, o);
    s_last_accuracy(w, dataset, o, r->target);
    double step = s_num(o, "step");
    if (strcmp(s_str(o, "phase", "rl"), "rl") || !isfinite(step))
        return;
    s_final_step(w, step);
    char label[S_LABEL];
    s_label(label, u, s_str(o, "variant", "main"), dataset, NULL);
    if (s_has(o, "accuracy"))
        s_add(r, S_ACCURACY, label, step, s_num(o, "accuracy"), s_str(o, "trigger", ""));
    if (s_has(o, "perplexity"))
        s_add(r, S_PERPLEXITY, label, step, s_num(o, "perplexity"), NULL);
    if (s_has(o, "response_len_mean"))
        s_add(r, S_EVAL_LENGTH, label, step, s_num(o, "response_len_mean"), NULL);
    if (s_has(o, "contamination_gap"))
        s_add(r, S_CONTAMINATION, label, step, s_num(o, "contamination_gap"), NULL);
    static const char *const choices[] = {"acc", "acc_norm", "acc_shuffled"};
    for (int i = 0; i < 3; i++)
        if (s_has(o, choices[i])) {
            s_label(label, u, s_str(o, "variant", "main"), dataset, choices[i]);
            s_add(r, S_CHOICES, label, step, s_num(o, choices[i]), NULL);
        }
    s_eval_fields(r, u, o, step);
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

static void s_event(s_report *r, const s_run *u, const cJSON *o) {
    static const char *const names[] = {"eval_interval", "eval_alarm", "eval_deferred", "tuner"};
    const char *ev = s_str(o, "event", "");
    if (!strcmp(ev, "pbt")) {
        s_copy_event(r, u, o);
        return;
    }
    int kind = 0;
    while (kind < 4 && strcmp(ev, names[kind]))
        kind++;
    double step = s_num(o, "step");
    if (kind == 4 || !isfinite(step))
        return;
    s_mark *q = s_reserve(r->marks, &r->cap_marks, r->n_marks, sizeof *q);
    if (!q) {
        r->oom = true;
        return;
    }
    r->marks = q;
    s_mark *m = &r->marks[r->n_marks++];
    m->kind = (s_event_kind)kind;
    m->step = step;
    m->new_every = s_num(o, "new");
    snprintf(m->param, sizeof m->param, "%s", s_str(o, "param", ""));
    if (kind == S_EV_TUNER) { /* a tuner decision: the rule, the values before and after */
        snprintf(m->tip, sizeof m->tip, "%s: tuner %s at step %.6g: %s %.6g -> %.6g", u->name,
                 s_str(o, "rule", ""), step, m->param, s_num(o, "before"), s_num(o, "after"));
        return;
    }
    char every[64] = "";
    if (kind == S_EV_INTERVAL)
        snprintf(every, sizeof every, ", every %.6g -> %.6g steps", s_num(o, "old"), m->new_every);
    const char *reason = s_str(o, "reason", NULL);
    snprintf(m->tip, sizeof m->tip, "%s: %s %s at step %.6g%s%s%s%s", u->name, ev,
             s_str(o, "dataset", ""), step, every, reason ? " (" : "", reason ? reason : "",
             reason ? ")" : "");
}

/*  One line of metrics.jsonl or events.jsonl; blank lines are not counted as malformed. */
static void s_line(s_report *r, s_run *u, char *line, bool events) {
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
    else if (events)
        s_event(r, u, o);
    else if (!strcmp(s_str(o, "kind", ""), "train"))
        s_train(r, u, o);
    else if (!strcmp(s_str(o, "kind", ""), "eval"))
        s_eval(r, u, o);
    cJSON_Delete(o);
}

static bt_status s_read_lines(s_report *r, s_run *u, const char *path, bool events) {
    char *text = NULL;
    BT_TRY(bt_file_read(path, SIZE_MAX, &text, NULL));
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        s_line(r, u, line, events);
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return r->oom ? bt_fail(BT_ENOMEM, "report: out of memory") : BT_OK;
}

static bt_status s_path(char *out, const char *dir, const char *file) {
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, file);
    return n >= 0 && n < PATH_MAX ? BT_OK : bt_fail(BT_EIO, "%s: path too long", dir);
}

/*  run.name from config.json, else the directory's last component; made unique among the runs
    before it by appending the directory. */
static void s_run_name(s_report *r, s_run *u) {
    char path[PATH_MAX], base[PATH_MAX], *text = NULL;
    cJSON *cfg = NULL;
    if (s_path(path, u->dir, "config.json") == BT_OK &&
        bt_file_read(path, 1 << 24, &text, NULL) == BT_OK)
        cfg = cJSON_Parse(text);
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
    cJSON_Delete(cfg);
    free(text);
    bt_clear_error();
}

static bt_status s_load_run(s_report *r, s_run *u, const char *dir) {
    struct stat sb;
    u->dir = dir;
    u->rows[0] = (s_row){.variant = "main", .final_step = NAN, .tokens = NAN}; /* until a line */
    if (stat(dir, &sb) != 0)
        return bt_fail(BT_EIO, "%s: cannot read run directory: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return bt_fail(BT_EIO, "%s: cannot read run directory: not a directory", dir);
    s_run_name(r, u);
    char path[PATH_MAX];
    BT_TRY(s_path(path, dir, "metrics.jsonl"));
    BT_TRY(s_read_lines(r, u, path, false));
    BT_TRY(s_path(path, dir, "events.jsonl"));
    return stat(path, &sb) == 0 ? s_read_lines(r, u, path, true) : BT_OK;
}

/*  ---- charts ------------------------------------------------------------------------------ */

typedef struct {
    double lo, hi, step; /* ticks at lo, lo + step, ..., hi */
} s_axis;

typedef struct {
    s_axis x, y;
} s_frame;

/*  Round tick steps of 1, 2 or 5 times a power of ten, about five per axis, at least min_step. */
static s_axis s_axis_nice(double lo, double hi, double min_step) {
    if (hi - lo < 1e-9 * fmax(1, fabs(hi))) {
        double pad = lo == 0 ? 1 : fabs(lo) * 0.1;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double step = fmax((f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag, min_step);
    return (s_axis){floor(lo / step) * step, ceil(hi / step) * step, step};
}

/*  False when the family has no finite point. */
static bool s_frame_of(const s_report *r, s_family_kind family, s_frame *fr) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (const s_series *s = r->series; s < r->series + r->n_series; s++)
        for (int i = 0; s->family == family && i < s->n; i++)
            if (isfinite(s->pts[i].x) && isfinite(s->pts[i].y)) {
                x0 = fmin(x0, s->pts[i].x), x1 = fmax(x1, s->pts[i].x);
                y0 = fmin(y0, s->pts[i].y), y1 = fmax(y1, s->pts[i].y);
            }
    if (!(x0 <= x1))
        return false;
    for (int i = 0; family == S_ACCURACY && i < r->n_marks; i++)
        x0 = fmin(x0, r->marks[i].step), x1 = fmax(x1, r->marks[i].step);
    fr->x = s_axis_nice(x0, x1, 1);
    fr->y = s_axis_nice(y0, y1, 0);
    return true;
}

static double s_px(const s_frame *fr, double x) {
    return S_L + (x - fr->x.lo) / (fr->x.hi - fr->x.lo) * (S_R - S_L);
}

static double s_py(const s_frame *fr, double y) {
    return S_B - (y - fr->y.lo) / (fr->y.hi - fr->y.lo) * (S_B - S_T);
}

/*  Tick i of the axis, or NaN past its end. */
static double s_tick(const s_axis *a, int i) {
    double v = a->lo + i * a->step;
    if (i > 50 || v > a->hi + a->step * 1e-6)
        return NAN;
    return fabs(v) < a->step * 1e-9 ? 0 : v;
}

static void s_chart_axes(bt_buf *b, const s_frame *fr, s_family_kind family) {
    double v;
    for (int i = 0; isfinite(v = s_tick(&fr->y, i)); i++)
        bt_buf_printf(
            b,
            "<line class=\"grid\" stroke=\"#e8e8e8\" x1=\"%d\" y1=\"%.6g\" x2=\"%d\" y2=\"%.6g\"/>"
            "<text x=\"%d\" y=\"%.6g\" text-anchor=\"end\">%.6g</text>\n",
            S_L, s_py(fr, v), S_R, s_py(fr, v), S_L - 6, s_py(fr, v) + 4, v);
    for (int i = 0; isfinite(v = s_tick(&fr->x, i)); i++)
        bt_buf_printf(
            b,
            "<line class=\"axis\" stroke=\"#333333\" x1=\"%.6g\" y1=\"%d\" x2=\"%.6g\" y2=\"%d\"/>"
            "<text x=\"%.6g\" y=\"%d\" text-anchor=\"middle\">%.6g</text>\n",
            s_px(fr, v), S_B, s_px(fr, v), S_B + 5, s_px(fr, v), S_B + 18, v);
    bt_buf_printf(
        b, "<line class=\"axis\" stroke=\"#333333\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n",
        S_L, S_B, S_R, S_B);
    bt_buf_printf(
        b, "<line class=\"axis\" stroke=\"#333333\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n",
        S_L, S_T, S_L, S_B);
    bt_buf_printf(
        b, "<text class=\"axis-title\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n",
        (S_L + S_R) / 2, S_B + 36);
    bt_buf_printf(b,
                  "<text class=\"axis-title\" transform=\"rotate(-90)\" x=\"%d\" y=\"14\" "
                  "text-anchor=\"middle\">",
                  -(S_T + S_B) / 2);
    s_esc(b, s_family[family].y_title);
    bt_buf_printf(b, "</text>\n");
}

static void s_stroke(bt_buf *b, int k) {
    bt_buf_printf(b, " fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s", s_palette[k % S_PALETTE],
                  k >= S_PALETTE ? " stroke-dasharray=\"6 3\"" : "");
}

/*  Evaluation markers: a small circle per point, its details in a hover <title>. */
static void s_chart_markers(bt_buf *b, const s_frame *fr, const s_series *s, int k) {
    for (const s_point *p = s->pts; p < s->pts + s->n; p++) {
        if (!isfinite(p->x) || !isfinite(p->y))
            continue;
        bt_buf_printf(
            b, "<circle class=\"marker\" cx=\"%.6g\" cy=\"%.6g\" r=\"3\" fill=\"%s\"><title>",
            s_px(fr, p->x), s_py(fr, p->y), s_palette[k % S_PALETTE]);
        s_esc(b, s->label);
        bt_buf_printf(b, ": step %.6g, accuracy %.6g%s", p->x, p->y,
                      *p->trigger ? ", trigger " : "");
        s_esc(b, p->trigger);
        bt_buf_printf(b, "</title></circle>\n");
    }
}

/*  The k-th series of its chart: one polyline per run of finite points. */
static void s_chart_series(bt_buf *b, const s_frame *fr, const s_series *s, int k) {
    bt_buf_printf(b, "<g class=\"series\"><title>");
    s_esc(b, s->label);
    bt_buf_printf(b, "</title>\n");
    bool open = false;
    for (const s_point *p = s->pts; p < s->pts + s->n; p++) {
        bool ok = isfinite(p->x) && isfinite(p->y);
        if (open && !ok)
            bt_buf_printf(b, "\"/>\n");
        else if (!open && ok) {
            bt_buf_printf(b, "<polyline");
            s_stroke(b, k);
            bt_buf_printf(b, " points=\"");
        }
        if (ok)
            bt_buf_printf(b, "%s%.6g,%.6g", open ? " " : "", s_px(fr, p->x), s_py(fr, p->y));
        open = ok;
    }
    if (open)
        bt_buf_printf(b, "\"/>\n");
    if (s->family == S_ACCURACY)
        s_chart_markers(b, fr, s, k);
    bt_buf_printf(b, "</g>\n");
}

/*  eval_interval (grey, labelled with the new interval), eval_alarm (red), eval_deferred (light),
    tuner decisions (blue, labelled with the hyperparameter). */
static void s_chart_marks(bt_buf *b, const s_report *r, const s_frame *fr) {
    static const char *const colour[] = {"#555555", "#e00000", "#aaaaaa", "#1f5fbf"};
    for (const s_mark *m = r->marks; m < r->marks + r->n_marks; m++) {
        double x = s_px(fr, m->step);
        bt_buf_printf(b, "<g class=\"event\"><title>");
        s_esc(b, m->tip);
        bt_buf_printf(b,
                      "</title><line x1=\"%.6g\" y1=\"%d\" x2=\"%.6g\" y2=\"%d\" stroke=\"%s\" "
                      "stroke-width=\"2\"/>",
                      x, S_B, x, S_B - 10, colour[m->kind]);
        if (m->kind == S_EV_ALARM)
            bt_buf_printf(
                b, "<text x=\"%.6g\" y=\"%d\" fill=\"%s\" text-anchor=\"middle\">alarm</text>", x,
                S_B - 13, colour[m->kind]);
        else if (m->kind == S_EV_TUNER) {
            bt_buf_printf(b, "<text x=\"%.6g\" y=\"%d\" fill=\"%s\" text-anchor=\"middle\">", x,
                          S_B - 13, colour[m->kind]);
            s_esc(b, m->param);
            bt_buf_printf(b, "</text>");
        } else if (m->kind == S_EV_INTERVAL && isfinite(m->new_every))
            bt_buf_printf(
                b,
                "<text x=\"%.6g\" y=\"%d\" fill=\"%s\" text-anchor=\"middle\">&#8594;%.6g</text>",
                x, S_B - 13, colour[m->kind], m->new_every);
        bt_buf_printf(b, "</g>\n");
    }
}

static void s_chart_legend(bt_buf *b, const s_report *r, s_family_kind family) {
    bt_buf_printf(b, "<g class=\"legend\">\n");
    int k = 0;
    for (const s_series *s = r->series; s < r->series + r->n_series; s++) {
        if (s->family != family)
            continue;
        int x = S_L + (k % 2) * S_COL, y = S_H + (k / 2) * S_ROW;
        bt_buf_printf(b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"", x, y - 4, x + 20, y - 4);
        s_stroke(b, k++);
        bt_buf_printf(b, "/><text x=\"%d\" y=\"%d\">", x + 26, y);
        s_esc(b, s->label);
        bt_buf_printf(b, "</text>\n");
    }
    bt_buf_printf(b, "</g>\n");
}

static void s_chart(bt_buf *b, const s_report *r, s_family_kind family) {
    s_frame fr;
    if (!s_frame_of(r, family, &fr))
        return;
    int n = 0;
    for (int i = 0; i < r->n_series; i++)
        n += r->series[i].family == family;
    int h = S_H + (n + 1) / 2 * S_ROW;
    bt_buf_printf(b, "<h2>%s</h2>\n", s_family[family].title);
    bt_buf_printf(b,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-family=\"%s\" "
                  "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n<title>%s vs "
                  "step</title>\n",
                  s_family[family].name, S_W, h, S_W, h, s_family[family].y_title);
    s_chart_axes(b, &fr, family);
    int k = 0;
    for (const s_series *s = r->series; s < r->series + r->n_series; s++)
        if (s->family == family)
            s_chart_series(b, &fr, s, k++);
    if (family == S_ACCURACY)
        s_chart_marks(b, r, &fr);
    s_chart_legend(b, r, family);
    bt_buf_printf(b, "</svg>\n");
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
                  s_css);
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

static void s_report_release(s_report *r) {
    for (int i = 0; i < r->n_series; i++)
        free(r->series[i].pts);
    free(r->series);
    free(r->marks);
    free(r->copies);
    free(r->runs);
}

bt_status bt_report_write(const char *const *run_dirs, int n_dirs, const char *out_path,
                          double target_accuracy) {
    BT_ASSERT(run_dirs && n_dirs > 0 && out_path);
    s_report r = {
        .runs = calloc((size_t)n_dirs, sizeof(s_run)), .n_runs = n_dirs, .target = target_accuracy};
    bt_status st = r.runs ? BT_OK : bt_fail(BT_ENOMEM, "report: out of memory");
    for (int i = 0; i < n_dirs && st == BT_OK; i++)
        st = s_load_run(&r, &r.runs[i], run_dirs[i]);
    bt_buf b = {0};
    if (st == BT_OK) {
        s_head(&b, &r);
        s_runs_table(&b, &r);
        s_lineage_table(&b, &r);
        s_notes(&b, &r);
        for (int f = 0; f < S_FAMILIES; f++)
            s_chart(&b, &r, f);
        bt_buf_printf(&b, "</body>\n</html>\n");
        st = b.failed ? bt_fail(BT_ENOMEM, "report: out of memory") : s_write(out_path, &b);
    }
    bt_buf_release(&b);
    s_report_release(&r);
    return st;
}
