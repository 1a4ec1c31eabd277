/*  test_report_browser.c — the report's dashboard in a real browser.  Two real tiny runs that
    differ in two config keys; `baton report` writes the page; headless Chromium loads it, driven
    over its DevTools pipe (--remote-debugging-pipe: NUL-separated JSON on fds 3 and 4), and the
    test clicks the second run's checkbox and moves the smoothing slider with the keyboard, as
    trusted input events (Input.dispatchMouseEvent, Input.dispatchKeyEvent), hovers a chart, and
    then reads the DOM.  It asserts: one chart per numeric field it counts itself in the runs'
    metrics.jsonl; the toggled run's paths and event marks hidden, the other's shown; the
    smoothed path differs from the raw one and, decoded through the chart's own axis attributes,
    equals the debiased EMA (TensorBoard's) this test computes from metrics.jsonl; the raw path
    equals the values themselves; the event marks are the events.jsonl lines with a step; the
    config-diff table lists exactly the keys the test changed; the tooltip names the visible run;
    the legend and the chart's title name the build and command that made run a (its run.json).
    Then a click on the chart's log checkbox and ArrowDown twice on the x-axis select (step to
   global_step to tokens): the paths decode to log10 of the values (and of the EMA) against the
   cumulative tokens, and an eval chart puts each evaluation at the tokens of its step's train line.
    A screenshot after the clicks is left in the build directory (report_browser.png).  Exits 77
    when Chromium (Debian's chromium) is absent. */
#define _DEFAULT_SOURCE
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_CHROMIUM "/usr/bin/chromium"

static char s_tmp[64];

/*  Two runs: "a" as written, "b" with the two keys the config-diff table must list. */
static const char s_config[] =
    "{\"run\": {\"name\": \"small\"}," RUNS_MODEL_TINY
    " \"task\": {\"digits\": 1, \"heldout_size\": 4},"
    " \"grpo\": {\"steps\": 8, \"group_size\": 2, \"prompts_per_step\": 2, \"max_new_tokens\": 2},"
    " \"eval\": {\"heldout_count\": 4, \"every_steps\": 2},"
    " \"checkpoint\": {\"full_every_steps\": 3}}";
static const char *const s_changed[] = {"grpo.lr", "run.seed"};
static const char s_set_b[] = "--set grpo.lr=0.002 --set run.seed=7";

/*  ---- the DevTools protocol over a pipe ------------------------------------------------------ */

typedef struct {
    pid_t pid;
    int to, from; /* our ends: commands in, replies and events out */
    char *buf;    /* bytes read, not yet a whole message */
    size_t len, cap;
    int next_id;
    char session[128];
    bool loaded; /* Page.loadEventFired seen */
} s_cdp;

/*  Starts Chromium with fds 3 (its commands) and 4 (its replies) on two pipes. */
static bool s_cdp_start(s_cdp *c, const char *profile) {
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return false;
    *c = (s_cdp){.to = in[1], .from = out[0], .next_id = 1};
    c->pid = fork();
    if (c->pid == 0) {
        int r = fcntl(in[0], F_DUPFD, 10), w = fcntl(out[1], F_DUPFD, 10);
        if (r < 0 || w < 0 || dup2(r, 3) < 0 || dup2(w, 4) < 0)
            _exit(127);
        for (int fd = 5; fd < 64; fd++)
            close(fd);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        char dir[PATH_MAX + 32];
        snprintf(dir, sizeof dir, "--user-data-dir=%s", profile);
        execl(S_CHROMIUM, "chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
              "--remote-debugging-pipe", "--run-all-compositor-stages-before-draw",
              "--window-size=1400,2000", "--hide-scrollbars", "--no-first-run", dir, "about:blank",
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    return c->pid > 0;
}

/*  The next whole message, parsed; NULL when Chromium closed the pipe or said nothing for a
    minute (a hung browser fails the test instead of hanging it). */
static cJSON *s_cdp_read(s_cdp *c) {
    for (;;) {
        char *nul = c->len ? memchr(c->buf, '\0', c->len) : NULL;
        if (nul) {
            cJSON *msg = cJSON_Parse(c->buf);
            size_t used = (size_t)(nul - c->buf) + 1;
            memmove(c->buf, nul + 1, c->len - used);
            c->len -= used;
            return msg;
        }
        if (c->len + 65536 > c->cap) {
            c->cap = (c->len + 65536) * 2;
            c->buf = realloc(c->buf, c->cap);
            if (!c->buf)
                return NULL;
        }
        struct pollfd p = {.fd = c->from, .events = POLLIN};
        if (poll(&p, 1, 60000) != 1) {
            fprintf(stderr, "test_report_browser: chromium sent nothing for 60 s\n");
            return NULL;
        }
        ssize_t n = read(c->from, c->buf + c->len, c->cap - c->len);
        if (n <= 0)
            return NULL;
        c->len += (size_t)n;
    }
}

static void s_cdp_note(s_cdp *c, const cJSON *msg) {
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "method"));
    if (m && !strcmp(m, "Page.loadEventFired"))
        c->loaded = true;
}

/*  Sends method with params (JSON text, or NULL) to the page's session (or the browser when
    the session is not yet known) and returns the reply's "result"; NULL on an error reply.
    Caller deletes *reply_p, which holds the result. */
static const cJSON *s_cdp_call(s_cdp *c, const char *method, const char *params, cJSON **reply_p) {
    int id = c->next_id++;
    char head[512];
    int n = snprintf(head, sizeof head, "{\"id\":%d,%s%s%s\"method\":\"%s\",\"params\":", id,
                     *c->session ? "\"sessionId\":\"" : "", c->session, *c->session ? "\"," : "",
                     method);
    bool ok = write(c->to, head, (size_t)n) == n;
    const char *p = params ? params : "{}";
    ok = ok && write(c->to, p, strlen(p)) == (ssize_t)strlen(p);
    ok = ok && write(c->to, "}", 2) == 2; /* the brace and the NUL that ends the message */
    *reply_p = NULL;
    while (ok) {
        cJSON *msg = s_cdp_read(c);
        if (!msg)
            break;
        const cJSON *rid = cJSON_GetObjectItem(msg, "id");
        if (cJSON_IsNumber(rid) && rid->valueint == id) {
            *reply_p = msg;
            const cJSON *result = cJSON_GetObjectItem(msg, "result");
            if (!result) {
                char *text = cJSON_PrintUnformatted(msg);
                fprintf(stderr, "test_report_browser: %s: %s\n", method, text ? text : "?");
                free(text);
            }
            return result;
        }
        s_cdp_note(c, msg);
        cJSON_Delete(msg);
    }
    fprintf(stderr, "test_report_browser: %s: no reply\n", method);
    return NULL;
}

/*  A call whose result is not needed; false on an error reply. */
static bool s_cdp_do(s_cdp *c, const char *method, const char *params) {
    cJSON *reply = NULL;
    bool ok = s_cdp_call(c, method, params, &reply) != NULL;
    cJSON_Delete(reply);
    return ok;
}

/*  Runtime.evaluate of a JavaScript expression whose value is a string (or a promise of one,
    awaited); caller frees. */
static char *s_cdp_eval(s_cdp *c, const char *expression) {
    cJSON *params = cJSON_CreateObject(), *reply = NULL;
    cJSON_AddStringToObject(params, "expression", expression);
    cJSON_AddBoolToObject(params, "returnByValue", true);
    cJSON_AddBoolToObject(params, "awaitPromise", true); /* a promise's value, once it settles */
    char *text = cJSON_PrintUnformatted(params);
    cJSON_Delete(params);
    const cJSON *result = s_cdp_call(c, "Runtime.evaluate", text, &reply);
    free(text);
    const char *value =
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(result, "result"), "value"));
    char *out = value ? strdup(value) : NULL;
    if (!out)
        fprintf(stderr, "test_report_browser: %s did not give a string\n", expression);
    cJSON_Delete(reply);
    return out;
}

/*  A left click at (x, y) in CSS pixels: press and release, as a user's mouse does. */
static bool s_cdp_click(s_cdp *c, double x, double y) {
    char p[256];
    snprintf(p, sizeof p,
             "{\"type\":\"mousePressed\",\"x\":%.1f,\"y\":%.1f,\"button\":\"left\","
             "\"clickCount\":1}",
             x, y);
    bool ok = s_cdp_do(c, "Input.dispatchMouseEvent", p);
    snprintf(p, sizeof p,
             "{\"type\":\"mouseReleased\",\"x\":%.1f,\"y\":%.1f,\"button\":\"left\","
             "\"clickCount\":1}",
             x, y);
    return ok && s_cdp_do(c, "Input.dispatchMouseEvent", p);
}

static bool s_cdp_key(s_cdp *c, const char *key, int code) {
    char p[256];
    snprintf(p, sizeof p,
             "{\"type\":\"keyDown\",\"key\":\"%s\",\"code\":\"%s\","
             "\"windowsVirtualKeyCode\":%d}",
             key, key, code);
    bool ok = s_cdp_do(c, "Input.dispatchKeyEvent", p);
    snprintf(p, sizeof p,
             "{\"type\":\"keyUp\",\"key\":\"%s\",\"code\":\"%s\","
             "\"windowsVirtualKeyCode\":%d}",
             key, key, code);
    return ok && s_cdp_do(c, "Input.dispatchKeyEvent", p);
}

/*  The centre of the element the CSS selector finds, from getBoundingClientRect. */
static bool s_cdp_centre(s_cdp *c, const char *selector, double *x, double *y, double *left) {
    char js[512];
    snprintf(js, sizeof js,
             "(function(){var r=document.querySelector('%s').getBoundingClientRect();"
             "return JSON.stringify([r.left+r.width/2,r.top+r.height/2,r.left]);})()",
             selector);
    char *text = s_cdp_eval(c, js);
    cJSON *v = text ? cJSON_Parse(text) : NULL;
    free(text);
    bool ok = cJSON_GetArraySize(v) == 3;
    if (ok) {
        *x = cJSON_GetArrayItem(v, 0)->valuedouble;
        *y = cJSON_GetArrayItem(v, 1)->valuedouble;
        *left = cJSON_GetArrayItem(v, 2)->valuedouble;
    }
    cJSON_Delete(v);
    return ok;
}

static void s_cdp_stop(s_cdp *c) {
    if (c->pid > 0) {
        s_cdp_do(c, "Browser.close", NULL);
        close(c->to);
        close(c->from);
        int st;
        waitpid(c->pid, &st, 0);
    }
    free(c->buf);
}

/*  ---- what the test knows on its own: the runs' files ------------------------------------- */

/*  The lines of DIR/metrics.jsonl, parsed; *n of them.  Caller deletes each and frees. */
static cJSON **s_lines(const char *dir, const char *file, int *n) {
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/%s/%s", s_tmp, dir, file);
    *n = 0;
    if (bt_file_read(path, 1 << 24, &text, NULL) != BT_OK)
        return NULL;
    cJSON **out = calloc(strlen(text) / 2 + 1, sizeof *out);
    for (char *l = strtok(text, "\n"); l && out; l = strtok(NULL, "\n"))
        if ((out[*n] = cJSON_Parse(l)) != NULL)
            (*n)++;
    free(text);
    return out;
}

static void s_free_lines(cJSON **lines, int n) {
    for (int i = 0; i < n; i++)
        cJSON_Delete(lines[i]);
    free(lines);
}

/*  The chart a metrics line's numeric field belongs in, as docs/architecture.md ("The report")
    states it: "train/FIELD", "eval/DATASET/FIELD" for RL evaluations; step is the x-axis. */
static bool s_chart_id(const cJSON *line, const cJSON *field, char *out, size_t cap) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(line, "kind"));
    if (!cJSON_IsNumber(field) || !strcmp(field->string, "step") ||
        !strcmp(field->string, "global_step") || !kind)
        return false;
    if (!strcmp(kind, "eval"))
        snprintf(out, cap, "eval/%s/%s", cJSON_GetStringValue(cJSON_GetObjectItem(line, "dataset")),
                 field->string);
    else
        snprintf(out, cap, "%s/%s", kind, field->string);
    return true;
}

enum { S_MAX_IDS = 256 };

/*  The distinct chart ids of the numeric fields of the runs whose bit is set in runs (1: a,
    2: b); returns how many. */
static int s_count_fields(int runs, char ids[S_MAX_IDS][128]) {
    int n_ids = 0;
    for (int r = 0; r < 2; r++) {
        int n;
        cJSON **lines = runs & (1 << r) ? s_lines(r ? "b" : "a", "metrics.jsonl", &n) : NULL;
        for (int i = 0; lines && i < n; i++)
            for (const cJSON *f = lines[i]->child; f; f = f->next) {
                char id[128];
                if (!s_chart_id(lines[i], f, id, sizeof id))
                    continue;
                int j = 0;
                while (j < n_ids && strcmp(ids[j], id))
                    j++;
                if (j == n_ids && n_ids < S_MAX_IDS)
                    snprintf(ids[n_ids++], sizeof ids[0], "%s", id);
            }
        if (lines)
            s_free_lines(lines, n);
    }
    return n_ids;
}

/*  Run a's train lines: step and field, in file order; returns how many. */
static int s_train_values(const char *field, double *steps, double *ys, int cap) {
    int n, k = 0;
    cJSON **lines = s_lines("a", "metrics.jsonl", &n);
    for (int i = 0; i < n && k < cap; i++) {
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(lines[i], "kind"));
        if (!kind || strcmp(kind, "train"))
            continue;
        steps[k] = cJSON_GetObjectItem(lines[i], "step")->valuedouble;
        ys[k++] = cJSON_GetObjectItem(lines[i], field)->valuedouble;
    }
    s_free_lines(lines, n);
    return k;
}

/*  ---- the DOM as the test's own script reads it ------------------------------------------- */

static const char s_read_dom[] =
    "(function(){function at(e,a){return e.getAttribute(a);}"
    "var q=function(s,r){return Array.prototype.slice.call((r||document).querySelectorAll(s));};"
    "var tip=document.getElementById('tooltip');"
    "return JSON.stringify({smoothing:document.getElementById('smoothing').value,"
    "keys:q('table.config-diff td.key').map(function(t){return t.textContent;}),"
    "tooltip:{shown:getComputedStyle(tip).display!=='none',text:tip.textContent},"
    "legend:q('#legend label').map(function(l){return l.textContent;}),"
    "charts:q('svg.chart').map(function(s){var box={};"
    "['data-chart','data-x0','data-x1','data-y0','data-y1','data-left','data-right','data-top',"
    "'data-bottom','data-scale','data-x'].forEach(function(a){box[a]=at(s,a);});"
    "box.title=s.querySelector('title').textContent;"
    "box.paths=q('path',s).map(function(p){return {cls:at(p,'class'),series:at(p,'data-series'),"
    "display:at(p,'display'),d:at(p,'d')};});"
    "box.events=q('line.event',s).map(function(l){return {series:at(l,'data-series'),"
    "display:at(l,'display'),x:+at(l,'x1')};});return box;})});})()";

static double s_attr(const cJSON *o, const char *name) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(o, name));
    return v ? strtod(v, NULL) : NAN;
}

/*  The points of a path's d ("M x,y L x,y ..."), mapped back to data through the chart's
    attributes; returns how many. */
static int s_decode(const cJSON *chart, const char *d, double *xs, double *ys, int cap) {
    double x0 = s_attr(chart, "data-x0"), x1 = s_attr(chart, "data-x1");
    double y0 = s_attr(chart, "data-y0"), y1 = s_attr(chart, "data-y1");
    double l = s_attr(chart, "data-left"), r = s_attr(chart, "data-right");
    double t = s_attr(chart, "data-top"), b = s_attr(chart, "data-bottom");
    int n = 0;
    for (const char *p = d; p && *p && n < cap;) {
        while (*p == ' ' || *p == 'M' || *p == 'L')
            p++;
        char *end;
        double px = strtod(p, &end);
        if (end == p || *end != ',')
            break;
        double py = strtod(end + 1, &end);
        xs[n] = x0 + (px - l) / (r - l) * (x1 - x0);
        ys[n++] = y0 + (b - py) / (b - t) * (y1 - y0);
        p = end;
    }
    return n;
}

/*  The chart's path of class cls for series k; NULL when none. */
static const cJSON *s_path(const cJSON *chart, const char *cls, const char *k) {
    for (const cJSON *p = cJSON_GetObjectItem(chart, "paths")->child; p; p = p->next)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(p, "cls")), cls) &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(p, "series")), k))
            return p;
    return NULL;
}

static bool s_hidden(const cJSON *o) {
    return cJSON_IsString(cJSON_GetObjectItem(o, "display")) &&
           !strcmp(cJSON_GetObjectItem(o, "display")->valuestring, "none");
}

/*  The smoothed and raw paths of run a's entropy against the test's own EMA of its values. */
static void s_check_smoothing(const cJSON *chart, double a) {
    enum { CAP = 64 };
    double steps[CAP], ys[CAP], px[CAP], py[CAP], ema[CAP];
    int n = s_train_values("entropy", steps, ys, CAP);
    CHECK(n == 8);
    /* TensorBoard's debiased EMA: s_t = a s_{t-1} + (1-a) y_t from s_0 = 0, shown s_t/(1-a^t) */
    double s = 0;
    for (int t = 0; t < n; t++) {
        s = a * s + (1 - a) * ys[t];
        ema[t] = s / (1 - pow(a, t + 1));
    }
    double range = s_attr(chart, "data-y1") - s_attr(chart, "data-y0");
    double per_px = range / (s_attr(chart, "data-bottom") - s_attr(chart, "data-top"));
    const cJSON *smooth = s_path(chart, "smooth", "0"), *raw = s_path(chart, "raw", "0");
    CHECK(smooth && raw);
    if (!smooth || !raw)
        return;
    const char *sd = cJSON_GetStringValue(cJSON_GetObjectItem(smooth, "d"));
    const char *rd = cJSON_GetStringValue(cJSON_GetObjectItem(raw, "d"));
    CHECK(strcmp(sd, rd) != 0);
    CHECK(s_decode(chart, sd, px, py, CAP) == n);
    for (int t = 0; t < n; t++) {
        CHECK_NEAR(px[t], steps[t], 0.002 * (s_attr(chart, "data-x1") - s_attr(chart, "data-x0")));
        CHECK_NEAR(py[t], ema[t], 0.002 * per_px); /* the path's 3 decimals of a pixel */
    }
    CHECK(s_decode(chart, rd, px, py, CAP) == n);
    for (int t = 0; t < n; t++)
        CHECK_NEAR(py[t], ys[t], 0.002 * per_px);
    /* the smoothing is not a no-op on this data: the EMA moves some point by over a pixel */
    double most = 0;
    for (int t = 0; t < n; t++)
        most = fmax(most, fabs(ema[t] - ys[t]) / per_px);
    CHECK(most > 1);
}

/*  Event marks: run b's hidden, run a's shown, one per events.jsonl line with a step in range. */
static void s_check_events(const cJSON *chart) {
    int n, want = 0, shown = 0, hidden_b = 0, shown_b = 0;
    cJSON **lines = s_lines("a", "events.jsonl", &n);
    double x0 = s_attr(chart, "data-x0"), x1 = s_attr(chart, "data-x1");
    for (int i = 0; i < n; i++) {
        const cJSON *step = cJSON_GetObjectItem(lines[i], "step");
        want += cJSON_IsNumber(step) && step->valuedouble >= x0 && step->valuedouble <= x1;
    }
    s_free_lines(lines, n);
    for (const cJSON *e = cJSON_GetObjectItem(chart, "events")->child; e; e = e->next) {
        bool b = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "series")), "1");
        shown += !b && !s_hidden(e);
        hidden_b += b && s_hidden(e);
        shown_b += b && !s_hidden(e);
    }
    CHECK(want > 0);
    CHECK(shown == want);
    CHECK(hidden_b > 0 && shown_b == 0);
}

/*  The chart of the DOM with id; NULL when none. */
static const cJSON *s_chart(const cJSON *dom, const char *id) {
    for (const cJSON *c = cJSON_GetObjectItem(dom, "charts")->child; c; c = c->next)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "data-chart")), id))
            return c;
    return NULL;
}

/*  The chart's path cls of series "0", decoded, against (xs, ys): within the path's 3 decimals
    of a pixel. */
static void s_check_path(const cJSON *chart, const char *cls, const double *xs, const double *ys,
                         int n) {
    enum { CAP = 64 };
    double px[CAP], py[CAP];
    const cJSON *p = chart ? s_path(chart, cls, "0") : NULL;
    CHECK(p != NULL);
    if (!p)
        return;
    double per_x = (s_attr(chart, "data-x1") - s_attr(chart, "data-x0")) /
                   (s_attr(chart, "data-right") - s_attr(chart, "data-left"));
    double per_y = (s_attr(chart, "data-y1") - s_attr(chart, "data-y0")) /
                   (s_attr(chart, "data-bottom") - s_attr(chart, "data-top"));
    CHECK(s_decode(chart, cJSON_GetStringValue(cJSON_GetObjectItem(p, "d")), px, py, CAP) == n);
    for (int t = 0; t < n; t++) {
        CHECK_NEAR(px[t], xs[t], 0.002 * per_x);
        CHECK_NEAR(py[t], ys[t], 0.002 * per_y);
    }
}

/*  After the log-scale click and the x-axis change to tokens: run a's entropy against its
    cumulative tokens in log10 units, raw and smoothed; heldout accuracy at the tokens of the
    last train line at or before each evaluation (0 before the first). */
static void s_check_tokens_log(const cJSON *dom, double a) {
    enum { CAP = 64 };
    double steps[CAP], tokens[CAP], ys[CAP], logy[CAP], logema[CAP], s = 0;
    int n = s_train_values("tokens", steps, tokens, CAP);
    CHECK(s_train_values("entropy", steps, ys, CAP) == n);
    for (int t = 0; t < n; t++) {
        s = a * s + (1 - a) * ys[t];
        logy[t] = log10(ys[t]);
        logema[t] = log10(s / (1 - pow(a, t + 1)));
    }
    const cJSON *entropy = s_chart(dom, "train/entropy");
    CHECK(entropy != NULL);
    if (entropy) {
        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(entropy, "data-scale")), "log");
        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(entropy, "data-x")), "tokens");
        s_check_path(entropy, "raw", tokens, logy, n);
        s_check_path(entropy, "smooth", tokens, logema, n);
    }
    /* the eval lines have no tokens field: each takes its step's train line */
    int nl, k = 0;
    double xs[CAP], acc[CAP];
    cJSON **lines = s_lines("a", "metrics.jsonl", &nl);
    for (int i = 0; i < nl && k < CAP; i++) {
        const char *ds = cJSON_GetStringValue(cJSON_GetObjectItem(lines[i], "dataset"));
        if (!ds || strcmp(ds, "heldout"))
            continue;
        double step = cJSON_GetObjectItem(lines[i], "step")->valuedouble;
        xs[k] = 0;
        for (int t = 0; t < n && steps[t] <= step; t++)
            xs[k] = tokens[t];
        acc[k++] = cJSON_GetObjectItem(lines[i], "accuracy")->valuedouble;
    }
    s_free_lines(lines, nl);
    CHECK(k == 5);
    const cJSON *heldout = s_chart(dom, "eval/heldout/accuracy");
    CHECK(heldout &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(heldout, "data-x")), "tokens"));
    s_check_path(heldout, "raw", xs, acc, k);
}

/*  Which build and command made run a, from its run.json as this test reads it: in the legend
    and in the title of a chart that draws it (and not b's command, whose run is hidden). */
static void s_check_identity(const cJSON *dom, const cJSON *entropy) {
    char path[PATH_MAX], *text = NULL, build[256] = "", command[1024] = "";
    snprintf(path, sizeof path, "%s/a/run.json", s_tmp);
    CHECK(bt_file_read(path, 1 << 20, &text, NULL) == BT_OK);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *rec = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "records"), 0);
    CHECK(rec != NULL);
    snprintf(build, sizeof build, "baton %s (git %s)",
             cJSON_GetStringValue(cJSON_GetObjectItem(rec, "baton_version")),
             cJSON_GetStringValue(cJSON_GetObjectItem(rec, "git_revision")));
    for (const cJSON *w = cJSON_GetObjectItem(rec, "argv")->child; w; w = w->next)
        snprintf(command + strlen(command), sizeof command - strlen(command), "%s%s",
                 w == cJSON_GetObjectItem(rec, "argv")->child ? "" : " ", w->valuestring);
    cJSON_Delete(doc);
    const char *legend =
        cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(dom, "legend"), 0));
    CHECK(legend && strstr(legend, "small") && strstr(legend, build));
    const char *title = cJSON_GetStringValue(cJSON_GetObjectItem(entropy, "title"));
    CHECK(title && strstr(title, build) && strstr(title, command));
    CHECK(title && !strstr(title, s_set_b));
}

static void s_check_dom(const cJSON *dom, double smoothing) {
    static char ids[S_MAX_IDS][128], ids_a[S_MAX_IDS][128], ids_b[S_MAX_IDS][128];
    int n_ids = s_count_fields(3, ids), n_a = s_count_fields(1, ids_a),
        n_b = s_count_fields(2, ids_b);
    const cJSON *charts = cJSON_GetObjectItem(dom, "charts");
    CHECK(n_ids > 20 && cJSON_GetArraySize(charts) == n_ids);
    for (int i = 0; i < n_ids; i++) { /* and the same ones */
        bool found = false;
        for (const cJSON *c = charts->child; c && !found; c = c->next)
            found = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "data-chart")), ids[i]);
        CHECK(found);
        if (!found)
            fprintf(stderr, "no chart %s\n", ids[i]);
    }
    /* the toggled run: every path of series 1 (a raw and a smoothed one in each chart of a
       field b's lines hold) hidden, every path of series 0 shown */
    int hidden_1 = 0, shown_1 = 0, hidden_0 = 0, shown_0 = 0;
    for (const cJSON *c = charts->child; c; c = c->next)
        for (const cJSON *p = cJSON_GetObjectItem(c, "paths")->child; p; p = p->next) {
            bool one = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(p, "series")), "1");
            hidden_1 += one && s_hidden(p);
            shown_1 += one && !s_hidden(p);
            hidden_0 += !one && s_hidden(p);
            shown_0 += !one && !s_hidden(p);
        }
    CHECK(hidden_1 == 2 * n_b && shown_1 == 0 && hidden_0 == 0 && shown_0 == 2 * n_a);
    const cJSON *entropy = NULL;
    for (const cJSON *c = charts->child; c; c = c->next)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "data-chart")), "train/entropy"))
            entropy = c;
    CHECK(entropy != NULL);
    if (entropy) {
        s_check_smoothing(entropy, smoothing);
        s_check_events(entropy);
        s_check_identity(dom, entropy);
    }
    /* the config keys that differ: exactly those the test changed */
    const cJSON *keys = cJSON_GetObjectItem(dom, "keys");
    CHECK(cJSON_GetArraySize(keys) == 2);
    for (int i = 0; i < 2; i++) {
        bool found = false;
        for (const cJSON *k = keys->child; k; k = k->next)
            found = found || !strcmp(k->valuestring, s_changed[i]);
        CHECK(found);
    }
    /* hovering the chart: the tooltip holds run a's label and not b's, which is hidden */
    const cJSON *tip = cJSON_GetObjectItem(dom, "tooltip");
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(tip, "text"));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(tip, "shown")));
    CHECK(text && strstr(text, "train/entropy") && strstr(text, "small: "));
    CHECK(text && !strstr(text, "small (b)"));
}

/*  Page.captureScreenshot's PNG into path. */
static void s_screenshot(s_cdp *c, const char *path) {
    cJSON *reply = NULL;
    const cJSON *r = s_cdp_call(c, "Page.captureScreenshot", "{\"format\":\"png\"}", &reply);
    const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItem(r, "data"));
    CHECK(b64 != NULL);
    size_t n = b64 ? strlen(b64) : 0, k = 0;
    unsigned char *png = malloc(n / 4 * 3 + 3);
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; png && i < n && b64[i] != '='; i++) {
        const char *at =
            strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", b64[i]);
        if (!at)
            continue;
        acc = (acc << 6) | (unsigned)(at - "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789+/");
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            png[k++] = (unsigned char)(acc >> bits);
        }
    }
    CHECK(k > 8 && !memcmp(png, "\x89PNG", 4));
    CHECK(png && bt_file_write(path, png, k) == BT_OK);
    fprintf(stderr, "test_report_browser: screenshot %s (%zu bytes)\n", path, k);
    free(png);
    cJSON_Delete(reply);
}

/*  Loads the page, clicks run b's checkbox, presses ArrowRight `presses` times on the slider,
    hovers the entropy chart, reads the DOM; then clicks the entropy chart's log checkbox and
    presses ArrowDown twice on the x-axis select (step to global_step to tokens) and reads it again
   into *after_p. Caller deletes both. */
static cJSON *s_drive(const char *page, int presses, double *smoothing, cJSON **after_p) {
    char profile[PATH_MAX], url[PATH_MAX + 32];
    snprintf(profile, sizeof profile, "%s/profile", s_tmp);
    snprintf(url, sizeof url, "{\"url\":\"file://%s\"}", page);
    s_cdp c;
    CHECK(s_cdp_start(&c, profile));
    cJSON *reply = NULL, *dom = NULL;
    const cJSON *r = s_cdp_call(&c, "Target.createTarget", "{\"url\":\"about:blank\"}", &reply);
    char params[256];
    snprintf(params, sizeof params, "{\"targetId\":\"%s\",\"flatten\":true}",
             r ? cJSON_GetStringValue(cJSON_GetObjectItem(r, "targetId")) : "");
    cJSON_Delete(reply);
    r = s_cdp_call(&c, "Target.attachToTarget", params, &reply);
    const char *session = cJSON_GetStringValue(cJSON_GetObjectItem(r, "sessionId"));
    snprintf(c.session, sizeof c.session, "%s", session ? session : "");
    cJSON_Delete(reply);
    CHECK(*c.session);
    bool ok = *c.session && s_cdp_do(&c, "Page.enable", NULL) && s_cdp_do(&c, "Page.navigate", url);
    /* the report's load event (its script has run by then); about:blank's, which may come
       after Page.enable, is told apart by the document it leaves */
    for (bool report = false; ok && !report; c.loaded = false) {
        while (ok && !c.loaded) {
            cJSON *msg = s_cdp_read(&c);
            ok = msg != NULL;
            s_cdp_note(&c, msg);
            cJSON_Delete(msg);
        }
        char *where = ok ? s_cdp_eval(&c, "document.readyState+' '+location.protocol") : NULL;
        ok = where != NULL;
        report = where && !strcmp(where, "complete file:");
        free(where);
        if (report)
            break;
    }
    double x, y, left;
    ok = ok && s_cdp_centre(&c, "input.series-toggle[data-series=\"1\"]", &x, &y, &left) &&
         s_cdp_click(&c, x, y);
    /* a click at the slider's left end focuses it (value 0), then the arrow keys move it */
    ok = ok && s_cdp_centre(&c, "#smoothing", &x, &y, &left) && s_cdp_click(&c, left + 1, y);
    for (int i = 0; ok && i < presses; i++)
        ok = s_cdp_key(&c, "ArrowRight", 39);
    if (ok) /* the artifact: the top of the page as the clicks left it */
        s_screenshot(&c, "report_browser.png");
    /* the chart and its head into the window (layout, not what is tested), the mouse over it */
    char *done = ok ? s_cdp_eval(&c, "document.querySelector('svg.chart[data-chart=\"train/"
                                     "entropy\"]').parentNode.scrollIntoView(),'scrolled'")
                    : NULL;
    ok = done != NULL;
    free(done);
    ok = ok && s_cdp_centre(&c, "svg.chart[data-chart=\"train/entropy\"]", &x, &y, &left);
    /* Chromium hands a mouse move to the page at its next frame, after the call returns: a
       promise the page's own mousemove settles (the chart's handler runs first, on the way up) */
    done = ok ? s_cdp_eval(&c, "window.movedOnce=new Promise(function(r){window.addEventListener("
                               "'mousemove',function(){r('moved');},{once:true});}),'armed'")
              : NULL;
    ok = done != NULL;
    free(done);
    snprintf(params, sizeof params, "{\"type\":\"mouseMoved\",\"x\":%.1f,\"y\":%.1f}", x, y);
    ok = ok && s_cdp_do(&c, "Input.dispatchMouseEvent", params);
    done = ok ? s_cdp_eval(&c, "window.movedOnce") : NULL;
    ok = done != NULL && !strcmp(done, "moved");
    free(done);
    CHECK(ok);
    char *text = ok ? s_cdp_eval(&c, s_read_dom) : NULL;
    dom = text ? cJSON_Parse(text) : NULL;
    free(text);
    const char *value = cJSON_GetStringValue(cJSON_GetObjectItem(dom, "smoothing"));
    *smoothing = value ? strtod(value, NULL) : NAN;
    ok = ok && s_cdp_centre(&c, "input.log-toggle[data-chart=\"train/entropy\"]", &x, &y, &left) &&
         s_cdp_click(&c, x, y);
    done = ok ? s_cdp_eval(&c, "document.getElementById('xaxis').focus(),'focused'") : NULL;
    /* two options down: step, global_step, tokens */
    ok = done != NULL && s_cdp_key(&c, "ArrowDown", 40) && s_cdp_key(&c, "ArrowDown", 40);
    free(done);
    CHECK(ok);
    text = ok ? s_cdp_eval(&c, s_read_dom) : NULL;
    *after_p = text ? cJSON_Parse(text) : NULL;
    free(text);
    s_cdp_stop(&c);
    return dom;
}

int main(void) {
    if (access(S_CHROMIUM, X_OK) != 0) {
        fprintf(stderr, "SKIP: test_report_browser needs Chromium at " S_CHROMIUM
                        " (Debian's chromium package)\n");
        return 77;
    }
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_report_browser_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char path[PATH_MAX], cmd[PATH_MAX * 2], out[8192];
    snprintf(path, sizeof path, "%s/small.json", s_tmp);
    CHECK(bt_file_write(path, s_config, strlen(s_config)) == BT_OK);
    const char *bin = getenv("BATON_BIN");
    snprintf(cmd, sizeof cmd, "cd %s && %s run small.json --run-dir a 2>&1", s_tmp, bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && %s run small.json --run-dir b %s 2>&1", s_tmp, bin,
             s_set_b);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "cd %s && %s report a b --out report.html 2>&1", s_tmp, bin);
    CHECK(runs_capture(cmd, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "b: started ");
    CHECK_STR_CONTAINS(out, s_set_b); /* the command that made b */

    snprintf(path, sizeof path, "%s/report.html", s_tmp);
    double smoothing = NAN;
    cJSON *after = NULL, *dom = s_drive(path, 60, &smoothing, &after);
    CHECK(dom != NULL && after != NULL);
    CHECK_NEAR(smoothing, 0.6, 1e-9); /* 60 steps of 0.01 from 0 */
    if (dom)
        s_check_dom(dom, smoothing);
    if (after)
        s_check_tokens_log(after, smoothing);
    cJSON_Delete(dom);
    cJSON_Delete(after);
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
