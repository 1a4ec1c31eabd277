/*  test_prometheus.c — run.metrics_listen: a live run serves its figures to a real Prometheus
    server (Debian's prometheus, scraping every second), and what Prometheus's query API gives
    back is what the run's own metrics.jsonl says: every numeric field of the train line and of
    the eval line of the scraped step, the worker counts the config asks for, the bytes of WEIGHTS
    sent (whole models, never falling).  The exposition text itself is read by a parser written
    here; a port taken and a malformed address are refused naming the key. */
#define _DEFAULT_SOURCE
#include "check.h"
#include "runs.h"

#include "baton/prometheus.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_tmp[64];

/*  Long enough to outlast the checks; the test stops it.  Two rollout workers, one trainer, one
    eval worker, an evaluation every 5 steps. */
static const char s_config[] =
    "{\"run\": {\"name\": \"prom\"}," RUNS_MODEL_TINY
    " \"task\": {\"digits\": 1, \"heldout_size\": 4},"
    " \"grpo\": {\"steps\": 1000000, \"group_size\": 2, \"prompts_per_step\": 2,"
    "  \"max_new_tokens\": 2},"
    " \"eval\": {\"heldout_count\": 4, \"every_steps\": 5},"
    " \"workers\": {\"rollout\": 2, \"trainer\": 1, \"eval\": 1}}";

/* ---- a small HTTP client -------------------------------------------------------------------- */

/*  Sends request to 127.0.0.1:port and reads the whole response (HTTP/1.0 or Connection: close:
    the server closes it) into out; returns the bytes read, -1 when no connection was made. */
static long s_http(int port, const char *request, char *out, size_t cap) {
    int fd = runs_connect_local(port);
    if (fd < 0)
        return -1;
    size_t len = strlen(request), sent = 0;
    while (sent < len) {
        ssize_t k = send(fd, request + sent, len - sent, MSG_NOSIGNAL);
        if (k <= 0)
            break;
        sent += (size_t)k;
    }
    size_t got = 0;
    for (ssize_t k; got + 1 < cap && (k = recv(fd, out + got, cap - 1 - got, 0)) > 0;)
        got += (size_t)k;
    out[got] = '\0';
    close(fd);
    return (long)got;
}

/*  The status code of a response, or 0. */
static int s_status(const char *resp) {
    int code = 0;
    return sscanf(resp, "HTTP/1.%*d %d", &code) == 1 ? code : 0;
}

static const char *s_body(const char *resp) {
    const char *at = strstr(resp, "\r\n\r\n");
    return at ? at + 4 : "";
}

/*  The value of header name (case-insensitive) into out, "" when absent. */
static void s_header(const char *resp, const char *name, char *out, size_t cap) {
    out[0] = '\0';
    const char *end = strstr(resp, "\r\n\r\n");
    size_t n = strlen(name);
    for (const char *l = strstr(resp, "\r\n"); l && end && l < end; l = strstr(l + 2, "\r\n"))
        if (!strncasecmp(l + 2, name, n) && l[2 + n] == ':') {
            const char *v = l + 3 + n;
            while (*v == ' ')
                v++;
            snprintf(out, cap, "%.*s", (int)strcspn(v, "\r"), v);
            return;
        }
}

/*  GET path from Prometheus's HTTP API, parsed; NULL unless it answered 200 with status
    "success". */
static cJSON *s_api(int port, const char *path) {
    static char resp[1 << 20];
    char req[4096];
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (s_http(port, req, resp, sizeof resp) <= 0 || s_status(resp) != 200)
        return NULL;
    cJSON *j = cJSON_Parse(s_body(resp));
    const char *st = cJSON_GetStringValue(cJSON_GetObjectItem(j, "status"));
    if (!st || strcmp(st, "success") != 0) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static void s_urlencode(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && n + 4 < cap; p++)
        n += isalnum(*p) || strchr("-_.~", *p) ? (size_t)snprintf(out + n, cap - n, "%c", *p)
                                               : (size_t)snprintf(out + n, cap - n, "%%%02X", *p);
    out[n] = '\0';
}

/*  An instant query at time at ("" for now); data.result, owned by *doc (delete it). */
static const cJSON *s_query(int port, const char *query, const char *at, cJSON **doc) {
    char q[1024], path[2048];
    s_urlencode(query, q, sizeof q);
    snprintf(path, sizeof path, "/api/v1/query?query=%s%s%s", q, at[0] ? "&time=" : "", at);
    *doc = s_api(port, path);
    return cJSON_GetObjectItem(cJSON_GetObjectItem(*doc, "data"), "result");
}

/*  A sample's value: Prometheus writes it as a string ("NaN", "+Inf" included). */
static double s_value(const cJSON *sample) {
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItem(sample, "value"), 1);
    return cJSON_IsString(v) ? strtod(v->valuestring, NULL) : NAN;
}

static const char *s_label(const cJSON *sample, const char *key) {
    return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(sample, "metric"), key));
}

/*  The sample of result named name whose labels include key=value (key NULL: any). */
static const cJSON *s_find(const cJSON *result, const char *name, const char *key,
                           const char *value) {
    const cJSON *s;
    cJSON_ArrayForEach(s, result) {
        const char *n = s_label(s, "__name__");
        const char *v = key ? s_label(s, key) : NULL;
        if (n && !strcmp(n, name) && (!key || (v && !strcmp(v, value))))
            return s;
    }
    return NULL;
}

/* ---- the exposition text, read here ---------------------------------------------------------- */

static bool s_is_name(const char *p, size_t n) {
    if (n == 0 || !(isalpha((unsigned char)p[0]) || p[0] == '_' || p[0] == ':'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)p[i]) || p[i] == '_' || p[i] == ':'))
            return false;
    return true;
}

/*  `{k="v",...}` at p: true when well formed (escapes \\ \" \n only); *end after the brace. */
static bool s_labels_ok(const char *p, const char **end) {
    if (*p++ != '{')
        return false;
    while (*p != '}') {
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (!s_is_name(p, n) || p[n] != '=' || p[n + 1] != '"')
            return false;
        p += n + 2;
        for (; *p != '"'; p++) {
            if (*p == '\0' || *p == '\n')
                return false;
            if (*p == '\\' && !strchr("\\\"n", *++p))
                return false;
        }
        p++;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return false;
    }
    *end = p + 1;
    return true;
}

/*  Checks every line of an exposition text; returns the samples read, -1 at the first bad line
    (printed).  Each family has one # HELP and one # TYPE, before its samples, which are
    contiguous; a value is a float, NaN, +Inf or -Inf. */
static int s_parse_exposition(const char *text) {
    char *copy = strdup(text), *save = NULL, families[512][128], typed[128] = "";
    int n_families = 0, samples = 0;
    bool ok = copy && strlen(text) > 0 && text[strlen(text) - 1] == '\n';
    for (char *l = copy ? strtok_r(copy, "\n", &save) : NULL; ok && l;
         l = strtok_r(NULL, "\n", &save)) {
        char name[128], kind[32];
        if (!strncmp(l, "# HELP ", 7)) {
            size_t n = strcspn(l + 7, " ");
            ok = s_is_name(l + 7, n) && l[7 + n] == ' ' && n < sizeof name;
            snprintf(name, sizeof name, "%.*s", (int)n, l + 7);
            for (int i = 0; ok && i < n_families; i++)
                ok = strcmp(families[i], name) != 0; /* one family, one block */
            if (ok && n_families < 512)
                snprintf(families[n_families++], 128, "%s", name);
        } else if (!strncmp(l, "# TYPE ", 7)) {
            ok = sscanf(l + 7, "%127s %31s", name, kind) == 2 && n_families > 0 &&
                 !strcmp(name, families[n_families - 1]) &&
                 (!strcmp(kind, "gauge") || !strcmp(kind, "counter"));
            snprintf(typed, sizeof typed, "%s", name);
        } else {
            size_t n = strcspn(l, "{ ");
            const char *p = l + n;
            ok = s_is_name(l, n) && n == strlen(typed) && !strncmp(l, typed, n);
            if (ok && *p == '{')
                ok = s_labels_ok(p, &p);
            ok = ok && *p++ == ' ';
            char *end = NULL;
            if (ok && strcmp(p, "NaN") && strcmp(p, "+Inf") && strcmp(p, "-Inf")) {
                strtod(p, &end);
                ok = end != p && *end == '\0';
            }
            samples++;
        }
        if (!ok)
            fprintf(stderr, "exposition: bad line: %s\n", l);
    }
    free(copy);
    return ok ? samples : -1;
}

/* ---- the run's own files --------------------------------------------------------------------- */

/*  The last line of dir/metrics.jsonl of kind with that step (and dataset, for eval); NULL when
    none.  Caller deletes. */
static cJSON *s_line(const char *dir, const char *kind, int64_t step, const char *dataset) {
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bt_file_read(path, 1 << 26, &text, NULL) != BT_OK)
        return NULL;
    cJSON *found = NULL;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(j, "kind"));
        const char *d = cJSON_GetStringValue(cJSON_GetObjectItem(j, "dataset"));
        const cJSON *s = cJSON_GetObjectItem(j, "step");
        if (k && !strcmp(k, kind) && cJSON_IsNumber(s) && s->valuedouble == (double)step &&
            (!dataset || (d && !strcmp(d, dataset)))) {
            cJSON_Delete(found);
            found = j;
        } else {
            cJSON_Delete(j);
        }
    }
    free(text);
    return found;
}

/*  prefix + key with every byte outside [A-Za-z0-9_] as '_', as the exposition's names are. */
static void s_name(char *out, size_t cap, const char *prefix, const char *key) {
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (; *key && n + 1 < cap; key++)
        out[n++] = isalnum((unsigned char)*key) ? *key : '_';
    out[n] = '\0';
}

/*  Every numeric field of line equals the series prefix<field> of result (labels key=value), a
    null field NaN; and no series of the prefix is missing from the line.  Returns the fields
    compared. */
static int s_check_line(const cJSON *line, const cJSON *result, const char *prefix, const char *key,
                        const char *value) {
    int fields = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, line) {
        if (!cJSON_IsNumber(f) && !cJSON_IsNull(f))
            continue;
        char name[160];
        s_name(name, sizeof name, prefix, f->string);
        const cJSON *s = s_find(result, name, key, value);
        CHECK(s != NULL);
        if (!s) {
            fprintf(stderr, "no series %s{%s=\"%s\"}\n", name, key, value);
            continue;
        }
        double got = s_value(s);
        if (cJSON_IsNull(f))
            CHECK(isnan(got));
        else if (got != f->valuedouble) {
            fprintf(stderr, "%s: Prometheus %.17g, metrics.jsonl %.17g\n", name, got,
                    f->valuedouble);
            CHECK(got == f->valuedouble);
        }
        fields++;
    }
    const cJSON *s;
    cJSON_ArrayForEach(s, result) { /* nothing served that the line does not hold */
        const char *n = s_label(s, "__name__");
        const char *v = s_label(s, key);
        if (!n || strncmp(n, prefix, strlen(prefix)) || !v || strcmp(v, value))
            continue;
        bool in_line = false;
        cJSON_ArrayForEach(f, line) {
            char name[160];
            s_name(name, sizeof name, prefix, f->string);
            in_line |= (cJSON_IsNumber(f) || cJSON_IsNull(f)) && !strcmp(name, n);
        }
        if (!in_line)
            fprintf(stderr, "%s is served but not in the line\n", n);
        CHECK(in_line);
    }
    return fields;
}

/*  The bytes of one WEIGHTS message of the run's model: its float32 parameters, counted from the
    resolved config.json (Llama: embeddings, per layer q k v o, gate up down and two norms, the
    final norm, an untied head). */
static double s_model_bytes(const char *dir) {
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK)
        return NAN;
    cJSON *c = cJSON_Parse(text);
    free(text);
    const cJSON *m = cJSON_GetObjectItem(c, "model");
    double V = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "vocab_size"));
    double H = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "hidden_size"));
    double I = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "intermediate_size"));
    double L = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "num_hidden_layers"));
    double heads = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "num_attention_heads"));
    double kv = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "num_key_value_heads"));
    bool tied = cJSON_IsTrue(cJSON_GetObjectItem(m, "tie_word_embeddings"));
    cJSON_Delete(c);
    double kvd = kv * (H / heads);
    double params =
        V * H + L * (2 * H * H + 2 * H * kvd + 3 * H * I + 2 * H) + H + (tied ? 0 : V * H);
    return 4 * params;
}

/* ---- the module alone ------------------------------------------------------------------------ */

/*  The value of the sample line `series value` in text (series: name and labels as written);
    NAN when there is no such line, and *found false. */
static double s_sample(const char *text, const char *series, bool *found) {
    size_t n = strlen(series);
    *found = false;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, series, n) && l[n] == ' ') {
            *found = true;
            return strtod(l + n + 1, NULL);
        }
    return NAN;
}

static double s_sample_of(const char *text, const char *series) {
    bool found;
    double v = s_sample(text, series, &found);
    if (!found)
        fprintf(stderr, "no sample %s in:\n%s\n", series, text);
    CHECK(found);
    return v;
}

/*  The sink, the labels' escapes, a rewind, a taken port: in this process, on a free port, read
    back by the parser above. */
static void s_module(void) {
    char listen[64];
    int port = runs_free_port(NULL);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    bt_prometheus_t *p = bt_prometheus_new(listen);
    CHECK(p != NULL);
    if (!p)
        return;
    bt_prometheus_t *again = bt_prometheus_new(listen); /* the port is taken now */
    CHECK(again == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), listen);
    CHECK_STR_CONTAINS(bt_last_error(), "run.metrics_listen");
    bt_runlog_sink sink = bt_prometheus_sink(p);
    const char *l1 = "{\"kind\":\"train\",\"step\":1,\"variant\":\"a\\\"b\\\\c\",\"loss\":0.25,"
                     "\"accuracy.x\":0.5,\"padding\":null,\"tokens\":12345678901234567}";
    const char *l2 = "{\"kind\":\"train\",\"step\":2,\"variant\":\"a\\\"b\\\\c\",\"loss\":-1e-300,"
                     "\"accuracy.x\":1,\"padding\":3,\"only_two\":7}";
    const char *e1 = "{\"kind\":\"eval\",\"step\":2,\"variant\":\"main\",\"dataset\":\"d\","
                     "\"pass@8\":0.125,\"shard_items\":\"4\"}";
    const char *ev = "{\"event\":\"x\",\"kind\":\"train\",\"step\":99}";
    sink.line(sink.user, true, l1, strlen(l1));
    sink.line(sink.user, true, e1, strlen(e1));
    sink.line(sink.user, false, ev, strlen(ev)); /* an event is no figure */
    char *text = bt_prometheus_render(p);
    CHECK(text && s_parse_exposition(text) > 0);
    const char *v = "{variant=\"a\\\"b\\\\c\"}"; /* a"b\c, escaped */
    char series[256];
    snprintf(series, sizeof series, "baton_train_step%s", v);
    CHECK(s_sample_of(text, series) == 1);
    snprintf(series, sizeof series, "baton_train_accuracy_x%s", v);
    CHECK(s_sample_of(text, series) == 0.5);
    snprintf(series, sizeof series, "baton_train_padding%s", v);
    CHECK(isnan(s_sample_of(text, series)));
    snprintf(series, sizeof series, "baton_train_tokens%s", v); /* an integer in full */
    CHECK(s_sample_of(text, series) == 12345678901234567.0);
    CHECK_STR_CONTAINS(text, "} 12345678901234568\n");
    CHECK(s_sample_of(text, "baton_eval_pass_8{variant=\"main\",dataset=\"d\"}") == 0.125);
    CHECK(strstr(text, "shard_items") == NULL);
    CHECK_STR_CONTAINS(text, "# TYPE baton_train_loss gauge\n");
    free(text);
    sink.line(sink.user, true, l2, strlen(l2));
    text = bt_prometheus_render(p);
    snprintf(series, sizeof series, "baton_train_loss%s", v);
    CHECK(s_sample_of(text, series) == -1e-300); /* exactly: the shortest text that reads back */
    snprintf(series, sizeof series, "baton_train_only_two%s", v);
    CHECK(s_sample_of(text, series) == 7);
    free(text);
    /* a counter adds; a series set once stays */
    bt_prometheus_add(p, "baton_weights_sent_bytes_total", "h", "variant=\"main\"", 100);
    bt_prometheus_add(p, "baton_weights_sent_bytes_total", "h", "variant=\"main\"", 28);
    text = bt_prometheus_render(p);
    CHECK(s_sample_of(text, "baton_weights_sent_bytes_total{variant=\"main\"}") == 128);
    CHECK_STR_CONTAINS(text, "# TYPE baton_weights_sent_bytes_total counter\n");
    free(text);
    /* a rewind: the file was cut back to step 1, whose figures come back; step 2's alone go */
    char dir[128], file[192];
    snprintf(dir, sizeof dir, "%s/rewound", s_tmp);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(file, sizeof file, "%s/metrics.jsonl", dir);
    char body[1024];
    snprintf(body, sizeof body, "%s\n%s\n", e1, l1);
    CHECK(bt_file_write(file, body, strlen(body)) == BT_OK);
    sink.rewound(sink.user, dir);
    text = bt_prometheus_render(p);
    snprintf(series, sizeof series, "baton_train_step%s", v);
    CHECK(s_sample_of(text, series) == 1);
    snprintf(series, sizeof series, "baton_train_only_two%s", v);
    bool found = true;
    s_sample(text, series, &found);
    CHECK(!found);
    CHECK(s_sample_of(text, "baton_weights_sent_bytes_total{variant=\"main\"}") == 128);
    free(text);
    bt_prometheus_destroy(&p);
    CHECK(p == NULL);
    bt_prometheus_destroy(&p);         /* idempotent */
    again = bt_prometheus_new(listen); /* the port is free again */
    CHECK(again != NULL);
    bt_prometheus_destroy(&again);
}

/* ---- processes ------------------------------------------------------------------------------- */

/*  Starts argv with stdout and stderr to log; it dies with this test (PR_SET_PDEATHSIG), so a
    crashed test leaves no server behind. */
static pid_t s_start(const char *const *argv, const char *log) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (!freopen(log, "a", stdout) || !freopen(log, "a", stderr))
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static const char *s_prometheus_bin(void) {
    static char path[PATH_MAX];
    if (access("/usr/bin/prometheus", X_OK) == 0)
        return "/usr/bin/prometheus";
    if (runs_capture("command -v prometheus 2>/dev/null", path, sizeof path) == 0 && path[0]) {
        path[strcspn(path, "\n")] = '\0';
        return path;
    }
    return NULL;
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_prom_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    s_module();
    const char *prom_bin = s_prometheus_bin();
    if (!prom_bin) {
        char rm[128];
        snprintf(rm, sizeof rm, "rm -rf %s", s_tmp);
        CHECK(system(rm) == 0);
        if (s_check_failures)
            return check_exit();
        printf("SKIP: prometheus not installed (Debian's prometheus package; make deps): the "
               "endpoint was checked in this process only\n");
        return 77;
    }
    char path[PATH_MAX], out[16384], dir[256], log[PATH_MAX], plog[PATH_MAX];
    snprintf(path, sizeof path, "%s/prom.json", s_tmp);
    CHECK(bt_file_write(path, s_config, strlen(s_config)) == BT_OK);
    snprintf(dir, sizeof dir, "%s/out", s_tmp);
    snprintf(log, sizeof log, "%s/run.log", s_tmp);
    snprintf(plog, sizeof plog, "%s/prometheus.log", s_tmp);

    /* malformed addresses are refused before anything starts, naming the key and the value */
    const char *bad[] = {"localhost:70000", "127.0.0.1", "127.0.0.1:0", ":9464", "host name:1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char args[256];
        snprintf(args, sizeof args, "prom.json --run-dir bad --set 'run.metrics_listen=%s'",
                 bad[i]);
        CHECK(runs_baton(s_tmp, "run", args, out, sizeof out) == 2);
        CHECK_STR_CONTAINS(out, "run.metrics_listen");
        CHECK_STR_CONTAINS(out, bad[i]);
    }

    /* the run, serving on one free port; Prometheus on another, scraping it every second */
    int mport = runs_free_port(NULL), pport = runs_free_port(NULL);
    CHECK(mport > 0 && pport > 0 && mport != pport);
    char listen[64], yml[1024], target[64];
    snprintf(listen, sizeof listen, "run.metrics_listen=127.0.0.1:%d", mport);
    const char *bin = getenv("BATON_BIN");
    const char *run_argv[] = {bin, "run", path, "--run-dir", dir, "--set", listen, NULL};
    pid_t run = s_start(run_argv, log);
    snprintf(target, sizeof target, "127.0.0.1:%d", mport);
    snprintf(yml, sizeof yml,
             "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
             "scrape_configs:\n  - job_name: baton\n    scrape_interval: 1s\n"
             "    static_configs:\n      - targets: ['%s']\n",
             target);
    char yml_path[PATH_MAX], cfg_flag[PATH_MAX + 32], tsdb_flag[PATH_MAX + 32], web_flag[64];
    snprintf(yml_path, sizeof yml_path, "%s/prometheus.yml", s_tmp);
    CHECK(bt_file_write(yml_path, yml, strlen(yml)) == BT_OK);
    snprintf(cfg_flag, sizeof cfg_flag, "--config.file=%s", yml_path);
    snprintf(tsdb_flag, sizeof tsdb_flag, "--storage.tsdb.path=%s/tsdb", s_tmp);
    snprintf(web_flag, sizeof web_flag, "--web.listen-address=127.0.0.1:%d", pport);
    const char *prom_argv[] = {prom_bin, cfg_flag, tsdb_flag, web_flag, NULL};
    pid_t prom = s_start(prom_argv, plog);

    /* wait (a generous deadline, not a measurement) until Prometheus holds three scrapes, the
       last with a train line and an evaluation after step 0; `at` is that scrape's instant */
    char at[64] = "";
    cJSON *doc = NULL;
    const char *ready =
        "timestamp(baton_train_step) and on() (count_over_time(baton_train_step[5m]) "
        ">= 3) and on() (baton_eval_step > 0)";
    for (int tries = 0; tries < 600 && runs_alive(run) && !at[0]; tries++) {
        runs_sleep_ms(100);
        const cJSON *r = s_query(pport, ready, "", &doc);
        if (cJSON_GetArraySize(r) == 1)
            snprintf(at, sizeof at, "%.3f", s_value(cJSON_GetArrayItem(r, 0)));
        cJSON_Delete(doc);
        doc = NULL;
    }
    CHECK(at[0] != '\0');
    if (!at[0]) {
        char *t = NULL;
        bt_file_read(log, 1 << 20, &t, NULL);
        fprintf(stderr, "no scrape with a train line came; run log:\n%s\n", t ? t : "");
        free(t);
        bt_file_read(plog, 1 << 20, &t, NULL);
        fprintf(stderr, "prometheus log:\n%s\n", t ? t : "");
        free(t);
    }

    /* at that scrape's instant: every train and eval gauge against the line of the same step */
    const cJSON *result = at[0] ? s_query(pport, "{__name__=~\"baton_.*\"}", at, &doc) : NULL;
    const cJSON *step = s_find(result, "baton_train_step", "variant", "main");
    const cJSON *estep = s_find(result, "baton_eval_step", "dataset", "heldout");
    CHECK(step != NULL && estep != NULL);
    if (step && estep) {
        int64_t s = (int64_t)s_value(step), e = (int64_t)s_value(estep);
        printf("scraped at %s: train step %lld, eval step %lld\n", at, (long long)s, (long long)e);
        cJSON *train = s_line(dir, "train", s, NULL), *eval = s_line(dir, "eval", e, "heldout");
        CHECK(train != NULL && eval != NULL);
        int nt = train ? s_check_line(train, result, "baton_train_", "variant", "main") : 0;
        int ne = eval ? s_check_line(eval, result, "baton_eval_", "dataset", "heldout") : 0;
        printf("train fields equal: %d, eval fields equal: %d\n", nt, ne);
        CHECK(nt >= 15 && ne >= 10);
        cJSON_Delete(train);
        cJSON_Delete(eval);
    }
    /* the workers the config asks for, none lost; the queues' depths are counts */
    const char *roles[] = {"rollout", "trainer", "eval"};
    const int want[] = {2, 1, 1};
    for (int r = 0; r < 3 && result; r++) {
        double live = 0, lost = NAN, queued = NAN;
        const cJSON *smp;
        cJSON_ArrayForEach(smp, result) {
            const char *n = s_label(smp, "__name__"), *role = s_label(smp, "role");
            const char *state = s_label(smp, "state");
            if (!n || !role || strcmp(role, roles[r]))
                continue;
            if (!strcmp(n, "baton_workers") && state && !strcmp(state, "lost"))
                lost = s_value(smp);
            else if (!strcmp(n, "baton_workers") && state)
                live += s_value(smp);
            else if (!strcmp(n, "baton_queued_jobs"))
                queued = s_value(smp);
        }
        printf("%s: %g live, %g lost, %g queued\n", roles[r], live, lost, queued);
        CHECK(live == want[r]);
        CHECK(lost == 0);
        CHECK(queued >= 0 && queued == floor(queued));
    }
    cJSON_Delete(doc);

    /* WEIGHTS bytes: whole models, never falling, over every scrape so far */
    double model = s_model_bytes(dir);
    char q[256];
    snprintf(q, sizeof q, "baton_weights_sent_bytes_total{variant=\"main\"}[5m]");
    const cJSON *wr = at[0] ? s_query(pport, q, at, &doc) : NULL;
    const cJSON *values = cJSON_GetObjectItem(cJSON_GetArrayItem(wr, 0), "values");
    int n_values = cJSON_GetArraySize(values);
    double prev = 0, last = 0, first = NAN;
    bool monotone = true, whole = true;
    for (int i = 0; i < n_values; i++) {
        const cJSON *v = cJSON_GetArrayItem(cJSON_GetArrayItem(values, i), 1);
        double x = cJSON_IsString(v) ? strtod(v->valuestring, NULL) : NAN;
        monotone &= x >= prev;
        whole &= fmod(x, model) == 0;
        prev = last = x;
        first = i == 0 ? x : first;
    }
    printf("weights sent: %d samples, last %.0f bytes = %.0f models of %.0f bytes\n", n_values,
           last, last / model, model);
    CHECK(n_values >= 3);
    CHECK(last > 0 && last > first); /* each step publishes to the rollout workers */
    CHECK(monotone);
    CHECK(whole);
    cJSON_Delete(doc);

    /* the endpoint read directly: headers, and every line of the text well formed */
    static char resp[1 << 20];
    CHECK(s_http(mport, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp) > 0);
    CHECK(s_status(resp) == 200);
    char header[256];
    s_header(resp, "Content-Type", header, sizeof header);
    CHECK_STR_CONTAINS(header, "text/plain; version=0.0.4");
    s_header(resp, "Content-Length", header, sizeof header);
    CHECK(strtoul(header, NULL, 10) == strlen(s_body(resp)));
    int samples = s_parse_exposition(s_body(resp));
    printf("direct scrape: %d samples, %zu bytes\n", samples, strlen(s_body(resp)));
    CHECK(samples >= 40);
    CHECK(s_http(mport, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp) > 0);
    CHECK(s_status(resp) == 404);
    CHECK(s_http(mport, "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp) > 0);
    CHECK(s_status(resp) == 405);
    CHECK(s_http(mport, "garbage\r\n\r\n", resp, sizeof resp) > 0);
    CHECK(s_status(resp) == 400);

    /* a second run on the same port: refused naming the address, no run file written */
    char args[256], taken[PATH_MAX];
    snprintf(args, sizeof args, "prom.json --run-dir taken --set %s", listen);
    CHECK(runs_baton(s_tmp, "run", args, out, sizeof out) != 0);
    CHECK_STR_CONTAINS(out, target);
    CHECK_STR_CONTAINS(out, "run.metrics_listen");
    snprintf(taken, sizeof taken, "%s/taken/config.json", s_tmp);
    CHECK(access(taken, F_OK) != 0);

    /* the run stops between steps on SIGTERM; both servers go */
    kill(run, SIGTERM);
    CHECK(runs_wait(run) == 143);
    CHECK(s_http(mport, "GET /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp) < 0);
    runs_kill(prom);

    /* the address may change on --resume (a finished run resumed with another one has nothing
       left to do); a key that changes what a step computes may not */
    CHECK(runs_baton(s_tmp, "run", "prom.json --run-dir done --set grpo.steps=2", out,
                     sizeof out) == 0);
    snprintf(args, sizeof args,
             "prom.json --run-dir done --resume --set grpo.steps=2 --set "
             "run.metrics_listen=127.0.0.1:%d",
             runs_free_port(NULL));
    CHECK(runs_baton(s_tmp, "run", args, out, sizeof out) == 0);
    CHECK_STR_CONTAINS(out, "finished already");
    CHECK(runs_baton(s_tmp, "run",
                     "prom.json --run-dir done --resume --set grpo.steps=2 --set run.seed=1", out,
                     sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "run.seed");

    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    if (!s_check_failures)
        CHECK(system(cmd) == 0);
    else
        fprintf(stderr, "kept %s for a look\n", s_tmp);
    return check_exit();
}
