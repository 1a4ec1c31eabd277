/*  test_report.c — `baton report` on synthetic run directories: one XML-well-formed HTML file
    whose data (the JSON in <script id="baton-data">, read here by cJSON) holds every numeric
    field of every metrics line per series and group, and the events; the runs, identity and
    config-diff tables; no external URLs, no script from elsewhere, and a dataset named
    "</script>" cannot end the data early; exit codes 1 (unreadable dir) and 2 (usage); the
    default output path; which build and command made each run on stdout.  The page's script is
    tested in Chromium by test_report_browser.c. */
#define _DEFAULT_SOURCE
#include "check.h"

#include "baton/fileio.h"
#include "baton/report.h"

#include <cjson/cJSON.h>

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char s_tmp[64];

static int s_exit_code(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*  Runs `baton report ARGS` in s_tmp; out gets stdout and stderr. */
static int s_report(const char *args, char *out, size_t cap) {
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "cd %s && %s report %s 2>&1", s_tmp, getenv("BATON_BIN"), args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = '\0';
    return p ? s_exit_code(pclose(p)) : -1;
}

static void s_write(const char *dir, const char *name, const char *text) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int s_count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/*  The page's data: the text of <script id="baton-data" type="application/json">, parsed.
    NULL when missing or not JSON.  Caller deletes. */
static cJSON *s_blob(const char *html) {
    const char *tag = "<script id=\"baton-data\" type=\"application/json\">";
    const char *a = strstr(html, tag), *z = a ? strstr(a, "</script>") : NULL;
    if (!z)
        return NULL;
    a += strlen(tag);
    char *text = strndup(a, (size_t)(z - a));
    CHECK(text && !strchr(text, '<') && !strchr(text, '&')); /* nothing can end it or break XML */
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    return doc;
}

/*  The index of the series labelled label; -1 when none. */
static int s_series(const cJSON *blob, const char *label) {
    int k = 0;
    for (const cJSON *s = cJSON_GetObjectItem(blob, "series")->child; s; s = s->next, k++)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "label")), label))
            return k;
    return -1;
}

/*  The column field of the stream of series label and group; NULL when none. */
static const cJSON *s_col(const cJSON *blob, const char *label, const char *group,
                          const char *field) {
    int k = s_series(blob, label);
    for (const cJSON *s = cJSON_GetObjectItem(blob, "streams")->child; s; s = s->next)
        if (cJSON_GetObjectItem(s, "series")->valueint == k &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "group")), group))
            return cJSON_GetObjectItem(cJSON_GetObjectItem(s, "cols"), field);
    return NULL;
}

/*  Value i of a column, NaN for null. */
static double s_at(const cJSON *col, int i) {
    const cJSON *v = cJSON_GetArrayItem(col, i);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/*  Appends one line to a growing text. */
static void s_line(char *text, size_t cap, const char *line) {
    strncat(text, line, cap - strlen(text) - 1);
    strncat(text, "\n", cap - strlen(text) - 1);
}

/*  A run directory under s_tmp: SFT lines, 20 training steps, evaluations of two accuracy datasets
    at steps 0, 5, ..., 20 (with robust.* fields), a perplexity and a probes dataset, two eval
    events, one malformed event line.  Returns the number of RL eval lines with a finite accuracy.
 */
static int s_make_run(const char *dir, const char *config, bool null_point) {
    char path[PATH_MAX], line[1024];
    static char text[1 << 17];
    snprintf(path, sizeof path, "%s/%s", s_tmp, dir);
    CHECK(mkdir(path, 0755) == 0);
    s_write(path, "config.json", config);
    text[0] = '\0';
    s_line(text, sizeof text, "{\"kind\":\"sft\",\"step\":1,\"variant\":\"main\",\"loss\":2.5}");
    s_line(text, sizeof text,
           "{\"kind\":\"eval\",\"phase\":\"sft\",\"step\":1,\"dataset\":\"heldout\",\"accuracy\":0."
           "1}");
    int accuracy_lines = 0;
    for (int step = 0; step <= 20; step++) {
        if (step > 0) {
            snprintf(line, sizeof line,
                     "{\"kind\":\"train\",\"step\":%d,\"variant\":\"main\",\"time\":%d.5,"
                     "\"reward_mean\":%.6g,\"loss\":0.1,\"kl\":null,\"response_len_mean\":%.6g,"
                     "\"unknown_field\":[1,2],\"version\":%d,\"tokens\":%d}",
                     step, step, 0.3 + 0.01 * step, 5.0 + step, step, 100 * step);
            s_line(text, sizeof text, line);
        }
        if (step % 5)
            continue;
        if (null_point && step == 15) /* a null accuracy breaks gsm's line and draws no marker */
            s_line(text, sizeof text,
                   "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":12,\"dataset\":\"gsm\","
                   "\"accuracy\":null}");
        for (int d = 0; d < 2; d++) {
            snprintf(line, sizeof line,
                     "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":%d,\"variant\":\"main\","
                     "\"time\":%d.75,\"dataset\":\"%s\",\"trigger\":\"steps\",\"examples\":200,"
                     "\"accuracy\":%.6g,\"accuracy_stderr\":0.03,\"response_len_mean\":6,"
                     "\"robust.spacing\":%.6g,\"robust.order\":0.5}",
                     step, step, d ? "gsm" : "heldout", 0.4 + 0.02 * step - 0.1 * d,
                     0.2 + 0.01 * step);
            s_line(text, sizeof text, line);
            accuracy_lines++;
        }
        if (step % 10)
            continue;
        snprintf(line, sizeof line,
                 "{\"kind\":\"eval\",\"step\":%d,\"variant\":\"main\",\"dataset\":\"wiki\","
                 "\"perplexity\":%.6g,\"nll_per_token\":2.1}",
                 step, 12.0 - 0.2 * step);
        s_line(text, sizeof text, line);
        snprintf(line, sizeof line,
                 "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":%d,\"dataset\":\"probes\","
                 "\"probe.capital.logp\":%.6g,\"probe.sum.logp\":-3.5,\"pair.order.ok\":1,"
                 "\"pairs_accuracy\":0.75}",
                 step, -2.0 + 0.05 * step);
        s_line(text, sizeof text, line);
    }
    s_line(text, sizeof text, "{\"kind\":\"weird\",\"step\":3}");
    if (null_point) /* a name that would end a <script> written as it is */
        s_line(text, sizeof text,
               "{\"kind\":\"eval\",\"step\":20,\"dataset\":\"x</script><b>&\",\"perplexity\":3}");
    else /* who made it: a start and a resume that changed a key */
        s_write(path, "run.json",
                "{\"records\":[{\"baton_version\":\"0.1.0\",\"git_revision\":\"abc123def456\","
                "\"argv\":[\"baton\",\"run\",\"x.json\",\"--run-dir\",\"my dir\"],\"host\":\"h1\","
                "\"user\":\"u1\",\"start_time\":\"2026-01-02T03:04:05Z\",\"config_hash\":\"00\","
                "\"resume\":false,\"config_diff\":[]},{\"baton_version\":\"0.1.1\","
                "\"git_revision\":\"fedcba654321\",\"argv\":[\"baton\",\"run\",\"x.json\","
                "\"--resume\"],\"host\":\"h2\",\"user\":\"u1\",\"start_time\":"
                "\"2026-01-02T05:00:00Z\",\"resume\":true,\"config_diff\":[{\"key\":"
                "\"grpo.steps\",\"from\":\"2\",\"to\":\"3\"}]}]}\n");
    s_write(path, "metrics.jsonl", text);
    s_write(path, "events.jsonl",
            "{\"event\":\"worker_joined\",\"time\":0.1,\"worker\":\"w1\"}\n"
            "{\"event\":\"eval_interval\",\"time\":3,\"dataset\":\"heldout\",\"step\":10,"
            "\"old\":5,\"new\":10,\"reason\":\"flat <plateau> & \\\"stable\\\"\"}\n"
            "{\"event\":\"eval_alarm\",\"time\":4,\"dataset\":\"gsm\",\"step\":15}\n"
            "{\"event\":\"tuner\",\"time\":5,\"rule\":\"lr_plateau\",\"step\":12,"
            "\"param\":\"lr\",\"before\":0.001,\"after\":0.0005,\"accuracy\":0.5}\n"
            "{\"event\":\"eval_alarm\",\"step\":\n");
    return accuracy_lines;
}

static char *s_read(const char *path) {
    char *text = NULL;
    if (bt_file_read(path, SIZE_MAX, &text, NULL) != BT_OK)
        fprintf(stderr, "cannot read %s: %s\n", path, bt_last_error());
    return text;
}

/*  No URL but the two namespace URIs. */
static bool s_only_namespaces(const char *html) {
    const char *ok[] = {"http://www.w3.org/1999/xhtml\"", "http://www.w3.org/2000/svg\""};
    for (const char *p = html; (p = strstr(p, "http")) != NULL; p++) {
        bool fine = strncmp(p, "http://", 7) && strncmp(p, "https://", 8);
        for (int i = 0; i < 2; i++)
            fine = fine || !strncmp(p, ok[i], strlen(ok[i]));
        if (!fine)
            return false;
    }
    return true;
}

static void s_check_xml(const char *path) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "test_report: /usr/bin/python3 missing, XML well-formedness not checked\n");
        return;
    }
    char cmd[PATH_MAX + 128];
    snprintf(
        cmd, sizeof cmd,
        "/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' %s",
        path);
    CHECK(s_exit_code(system(cmd)) == 0);
}

/*  The number of finite values of field over the streams of every group starting "eval/". */
static int s_finite_in_evals(const cJSON *blob, const char *field) {
    int n = 0;
    for (const cJSON *s = cJSON_GetObjectItem(blob, "streams")->child; s; s = s->next) {
        if (strncmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "group")), "eval/", 5))
            continue;
        const cJSON *col = cJSON_GetObjectItem(cJSON_GetObjectItem(s, "cols"), field);
        for (const cJSON *v = col ? col->child : NULL; v; v = v->next)
            n += cJSON_IsNumber(v) && isfinite(v->valuedouble);
    }
    return n;
}

/*  The text of the event of run r named name at step; NULL when none. */
static const char *s_event(const cJSON *blob, int run, const char *name, double step) {
    for (const cJSON *e = cJSON_GetObjectItem(blob, "events")->child; e; e = e->next)
        if (cJSON_GetObjectItem(e, "run")->valueint == run &&
            !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "event")), name) &&
            (isnan(step) || cJSON_GetObjectItem(e, "step")->valuedouble == step))
            return cJSON_GetStringValue(cJSON_GetObjectItem(e, "text"));
    return NULL;
}

static void s_check_data(const cJSON *blob, int accuracy_lines) {
    const char *a = "alpha", *b = "b<&>\"run";
    CHECK(s_series(blob, a) == 0 && s_series(blob, b) == 1); /* one variant: the run's name */
    /* each run's build (its latest invocation's) and every invocation, for the charts to show */
    const cJSON *run0 = cJSON_GetArrayItem(cJSON_GetObjectItem(blob, "runs"), 0);
    const cJSON *run1 = cJSON_GetArrayItem(cJSON_GetObjectItem(blob, "runs"), 1);
    CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(run0, "build")),
                 "baton 0.1.1 (git fedcba654321)");
    CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(run0, "identity")),
                 "alpha: started 2026-01-02T03:04:05Z by baton 0.1.0 (git abc123def456) on h1 as "
                 "u1: baton run x.json --run-dir 'my dir'\nalpha: resumed 2026-01-02T05:00:00Z by "
                 "baton 0.1.1 (git fedcba654321) on h2 as u1: baton run x.json --resume (changed "
                 "grpo.steps 2 -> 3)\n");
    CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(run1, "build")), "");
    CHECK_STR_CONTAINS(cJSON_GetStringValue(cJSON_GetObjectItem(run1, "identity")),
                       "b<&>\"run: no run.json");
    /* every train line of a: its values as written, the step as x */
    const cJSON *step = s_col(blob, a, "train", "step"),
                *reward = s_col(blob, a, "train", "reward_mean");
    const cJSON *len = s_col(blob, a, "train", "response_len_mean");
    const cJSON *tokens = s_col(blob, a, "train", "tokens"),
                *time = s_col(blob, a, "train", "time");
    CHECK(cJSON_GetArraySize(step) == 20 && cJSON_GetArraySize(reward) == 20);
    for (int i = 0; i < 20; i++) {
        CHECK(s_at(step, i) == i + 1);
        CHECK(fabs(s_at(reward, i) - (0.3 + 0.01 * (i + 1))) < 1e-12);
        CHECK(s_at(len, i) == 6 + i && s_at(tokens, i) == 100 * (i + 1));
        CHECK(s_at(time, i) == i + 1.5);
    }
    CHECK(s_col(blob, a, "train", "kl") == NULL);            /* null on every line: no column */
    CHECK(s_col(blob, a, "train", "unknown_field") == NULL); /* not a number */
    CHECK(s_col(blob, a, "train", "variant") == NULL);
    /* evaluations: a group per dataset, robust.* and probes as fields like any other */
    const cJSON *acc = s_col(blob, a, "eval/heldout", "accuracy");
    CHECK(cJSON_GetArraySize(acc) == 5);
    for (int i = 0; i < 5; i++)
        CHECK(fabs(s_at(acc, i) - (0.4 + 0.02 * 5 * i)) < 1e-12);
    CHECK(s_at(s_col(blob, a, "eval/gsm", "robust.spacing"), 4) == 0.4);
    CHECK(s_at(s_col(blob, a, "eval/wiki", "perplexity"), 2) == 8);
    CHECK(s_at(s_col(blob, a, "eval/probes", "probe.capital.logp"), 1) == -1.5);
    CHECK(s_at(s_col(blob, a, "eval/probes", "pairs_accuracy"), 0) == 0.75);
    CHECK(s_at(s_col(blob, a, "sft", "loss"), 0) == 2.5);                  /* SFT's own group */
    CHECK(s_at(s_col(blob, a, "sft-eval/heldout", "accuracy"), 0) == 0.1); /* SFT steps */
    CHECK(s_finite_in_evals(blob, "accuracy") == accuracy_lines);
    /* b's null accuracy at step 12 is a gap in gsm's column */
    const cJSON *gsm = s_col(blob, b, "eval/gsm", "accuracy");
    CHECK(cJSON_GetArraySize(gsm) == 6 && isnan(s_at(gsm, 3)));
    CHECK(s_at(s_col(blob, b, "eval/x</script><b>&", "perplexity"), 0) == 3);
    /* events: those with a step or a time, every field in the text, the malformed one skipped */
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(blob, "events")) == 8);
    CHECK_STR_EQ(s_event(blob, 0, "tuner", 12),
                 "alpha: tuner rule=lr_plateau, step=12, "
                 "param=lr, before=0.001, after=0.0005, accuracy=0.5");
    CHECK_STR_EQ(s_event(blob, 1, "eval_interval", 10),
                 "b<&>\"run: eval_interval dataset=heldout, step=10, old=5, new=10, "
                 "reason=flat <plateau> & \"stable\"");
    CHECK(s_event(blob, 0, "eval_alarm", 15) && s_event(blob, 1, "worker_joined", NAN));
}

static void s_check_report(const char *html, int accuracy_lines) {
    cJSON *blob = s_blob(html);
    CHECK(blob != NULL);
    if (blob)
        s_check_data(blob, accuracy_lines);
    cJSON_Delete(blob);
    CHECK_STR_CONTAINS(html, "<td>alpha</td><td>a</td><td>20</td><td>heldout 0.8; gsm 0.7");
    /* the comparison: accuracy 0.4 + 0.02 step (gsm 0.1 lower) evaluated every 5 steps at time
       step + 0.75; 100 completion tokens a step; target 0.6: heldout at step 10, gsm at 15 */
    CHECK_STR_CONTAINS(html, "<td>heldout 0.8 (step 20); gsm 0.7 (step 20); probes 0.75 (step 0)"
                             "</td><td>2000</td><td>heldout step 10, 10.8 s; gsm step 15, 15.8 s;"
                             " probes step 0</td>");
    CHECK_STR_CONTAINS(html, "<th>first at accuracy &#8805; 0.6</th>");
    CHECK_STR_CONTAINS(html, "alpha: 1 malformed line skipped in events.jsonl");
    /* who made them: both records of a's run.json, b without one */
    CHECK_STR_CONTAINS(html, "<tr><td>alpha</td><td>start</td><td>2026-01-02T03:04:05Z</td>"
                             "<td>0.1.0</td><td>abc123def456</td><td class=\"command\">baton run "
                             "x.json --run-dir 'my dir'</td><td>h1</td><td>u1</td><td>-</td></tr>");
    CHECK_STR_CONTAINS(html, "<td>resume</td><td>2026-01-02T05:00:00Z</td><td>0.1.1</td>");
    CHECK_STR_CONTAINS(html, "<td>grpo.steps 2 -&gt; 3</td>");
    CHECK_STR_CONTAINS(html, "<tr><td>b&lt;&amp;&gt;&quot;run</td><td colspan=\"8\" class=\"note\">"
                             "no run.json");
    /* the config keys that differ: run.name, and run.seed that b lacks; nothing else */
    CHECK_STR_CONTAINS(html, "<tr><td class=\"key\">run.name</td><td>&quot;alpha&quot;</td>"
                             "<td>&quot;b&lt;&amp;&gt;\\&quot;run&quot;</td></tr>\n"
                             "<tr><td class=\"key\">run.seed</td><td>1</td><td>(absent)</td></tr>"
                             "\n</table>");
    CHECK(s_count(html, "<td class=\"key\">") == 2);
    CHECK(s_only_namespaces(html));
    CHECK(s_count(html, "<script") == 2 && s_count(html, "</script>") == 2);
    CHECK(!strstr(html, " src="));
}

/*  bt_report_write called directly: a run with training lines only has no evaluation group. */
static void s_check_train_only(void) {
    char dir[PATH_MAX], out[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/train_only", s_tmp);
    CHECK(mkdir(dir, 0755) == 0);
    s_write(dir, "metrics.jsonl",
            "{\"kind\":\"train\",\"step\":1,\"reward_mean\":0.5,\"accuracy.gsm\":0.25,"
            "\"accuracy.arith\":0.5,\"weight.gsm\":2,\"weight.arith\":1}\n"
            "{\"kind\":\"train\",\"step\":2,\"reward_mean\":0.6,\"accuracy.gsm\":0.3,"
            "\"accuracy.arith\":0.75,\"weight.gsm\":2.5,\"weight.arith\":0.8}\n");
    snprintf(out, sizeof out, "%s/train_only.html", s_tmp);
    const char *dirs[] = {dir};
    CHECK_OK(bt_report_write(dirs, 1, out, NAN));
    char *html = s_read(out);
    cJSON *blob = html ? s_blob(html) : NULL;
    CHECK(blob != NULL);
    CHECK_STR_CONTAINS(html, "<td>train_only</td>"); /* no config.json: the directory's name */
    CHECK(html && !strstr(html, "config keys that differ")); /* one run: nothing to compare */
    if (blob) {
        const cJSON *streams = cJSON_GetObjectItem(blob, "streams");
        CHECK(cJSON_GetArraySize(streams) == 1); /* train only */
        /* the data sources' fields are columns like any other */
        CHECK(s_at(s_col(blob, "train_only", "train", "accuracy.arith"), 1) == 0.75);
        CHECK(s_at(s_col(blob, "train_only", "train", "weight.gsm"), 0) == 2);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(streams, 0), "cols")) == 6);
    }
    cJSON_Delete(blob);
    free(html);
    /* a run.json that is not JSON says so */
    char *who = NULL;
    s_write(dir, "run.json", "{\"records\": [");
    CHECK_OK(bt_report_identity(dir, &who));
    CHECK_STR_CONTAINS(who, "/train_only: run.json: not valid JSON\n");
    free(who);
    /* variants: a series each, labelled run / variant, in the order they first appear */
    snprintf(dir, sizeof dir, "%s/variants", s_tmp);
    CHECK(mkdir(dir, 0755) == 0);
    s_write(
        dir, "metrics.jsonl",
        "{\"kind\":\"train\",\"step\":1,\"variant\":\"hot\",\"loss\":0.5}\n"
        "{\"kind\":\"train\",\"step\":1,\"variant\":\"cold\",\"loss\":0.7}\n"
        "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":1,\"variant\":\"cold\",\"dataset\":\"mmlu\","
        "\"acc\":0.5,\"subject.anatomy.acc\":1,\"subject.anatomy.items\":2}\n");
    s_write(dir, "events.jsonl",
            "{\"event\":\"tuner\",\"step\":1,\"variant\":\"cold\",\"param\":\"lr\"}\n");
    snprintf(out, sizeof out, "%s/variants.html", s_tmp);
    const char *one[] = {dir};
    CHECK_OK(bt_report_write(one, 1, out, NAN));
    html = s_read(out);
    blob = html ? s_blob(html) : NULL;
    CHECK(blob != NULL);
    if (blob) {
        CHECK(s_series(blob, "variants / hot") == 0 && s_series(blob, "variants / cold") == 1);
        CHECK(s_at(s_col(blob, "variants / cold", "train", "loss"), 0) == 0.7);
        CHECK(s_at(s_col(blob, "variants / cold", "eval/mmlu", "subject.anatomy.items"), 0) == 2);
        CHECK(s_col(blob, "variants / hot", "eval/mmlu", "acc") == NULL);
        const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(blob, "events"), 0);
        CHECK(e && cJSON_GetObjectItem(e, "series")->valueint == 1); /* the variant it names */
    }
    cJSON_Delete(blob);
    free(html);
    snprintf(out, sizeof out, "%s/no/such/dir/r.html", s_tmp);
    CHECK(bt_report_write(dirs, 1, out, NAN) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), out);
}

int main(void) {
    if (!getenv("BATON_BIN")) {
        fprintf(stderr, "test_report: set BATON_BIN to the baton executable (ctest does)\n");
        return 1;
    }
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_report_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    int accuracy_lines = s_make_run("a", "{\"run\": {\"name\": \"alpha\", \"seed\": 1}}", false);
    accuracy_lines += s_make_run("b", "{\"run\": {\"name\": \"b<&>\\\"run\"}}", true);
    char out[8192], path[PATH_MAX];

    CHECK(s_report("a b --out both.html --target 0.6", out, sizeof out) == 0);
    /* which build and command made each run, on stdout */
    CHECK_STR_CONTAINS(out, "a: started 2026-01-02T03:04:05Z by baton 0.1.0 (git abc123def456) on "
                            "h1 as u1: baton run x.json --run-dir 'my dir'\n");
    CHECK_STR_CONTAINS(out, "a: resumed 2026-01-02T05:00:00Z by baton 0.1.1 (git fedcba654321) on "
                            "h2 as u1: baton run x.json --resume (changed grpo.steps 2 -> 3)\n");
    CHECK_STR_CONTAINS(out, "b: no run.json");
    snprintf(path, sizeof path, "%s/both.html", s_tmp);
    s_check_xml(path);
    char *html = s_read(path);
    if (html)
        s_check_report(html, accuracy_lines);
    free(html);

    CHECK(s_report("missing_dir", out, sizeof out) == 1);
    CHECK_STR_CONTAINS(out, "missing_dir");
    CHECK(s_report("", out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "missing RUN_DIR");
    CHECK(s_report("a --out", out, sizeof out) == 2);
    CHECK(s_report("a", out, sizeof out) == 0);
    snprintf(path, sizeof path, "%s/a/report.html", s_tmp);
    CHECK(access(path, R_OK) == 0);

    s_check_train_only();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
