/*  test_report.c — `baton report` on two synthetic run directories: one XML-well-formed HTML file
    with one chart per family that has data, every run in the legends, one marker per RL evaluation,
    no scripts and no external URLs; exit codes 1 (unreadable dir) and 2 (usage); the default
    output path; a run with only training lines has no accuracy chart. */
#define _DEFAULT_SOURCE
#include "check.h"

#include "baton/fileio.h"
#include "baton/report.h"

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

/*  The text of the chart of family (from its data-family attribute to </svg>), in buf. */
static const char *s_chart(const char *html, const char *family, char *buf, size_t cap) {
    char key[64];
    snprintf(key, sizeof key, "data-family=\"%s\"", family);
    const char *a = strstr(html, key), *z = a ? strstr(a, "</svg>") : NULL;
    size_t n = z ? (size_t)(z - a) : 0;
    n = n < cap - 1 ? n : cap - 1;
    memcpy(buf, a ? a : "", n);
    buf[n] = '\0';
    return buf;
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

static void s_check_report(const char *html, int accuracy_lines) {
    static char chart[1 << 20];
    const char *families[] = {"accuracy",   "response_length", "reward",
                              "perplexity", "probes",          "robustness"};
    for (int f = 0; f < 6; f++) {
        char key[64];
        snprintf(key, sizeof key, "data-family=\"%s\"", families[f]);
        CHECK(s_count(html, key) == 1);
        const char *legend = strstr(s_chart(html, families[f], chart, sizeof chart), "\"legend\"");
        CHECK(legend && strstr(legend, ">alpha /"));
        CHECK(legend && strstr(legend, ">b&lt;&amp;&gt;&quot;run /"));
    }
    s_chart(html, "accuracy", chart, sizeof chart);
    CHECK(s_count(chart, "class=\"marker\"") == accuracy_lines);
    CHECK(s_count(html, "class=\"marker\"") == accuracy_lines);
    CHECK(s_count(chart, "<polyline") == 5);       /* 2 series per run, b's gsm broken in two */
    CHECK(s_count(chart, "class=\"event\"") == 6); /* interval, alarm and tuner, per run */
    CHECK(s_count(chart, "tuner lr_plateau at step 12: lr 0.001 -&gt; 0.0005") == 2);
    CHECK(s_count(chart, ">alarm</text>") == 2);
    CHECK_STR_CONTAINS(chart, "flat &lt;plateau&gt; &amp; &quot;stable&quot;");
    CHECK_STR_CONTAINS(chart, ">step</text>");
    CHECK_STR_CONTAINS(html, "<td>alpha</td><td>a</td><td>20</td><td>heldout 0.8; gsm 0.7");
    /* the comparison: accuracy 0.4 + 0.02 step (gsm 0.1 lower) evaluated every 5 steps at time
       step + 0.75; 100 completion tokens a step; target 0.6: heldout at step 10, gsm at 15 */
    CHECK_STR_CONTAINS(html, "<td>heldout 0.8 (step 20); gsm 0.7 (step 20); probes 0.75 (step 0)"
                             "</td><td>2000</td><td>heldout step 10, 10.8 s; gsm step 15, 15.8 s;"
                             " probes step 0</td>");
    CHECK_STR_CONTAINS(html, "<th>first at accuracy &#8805; 0.6</th>");
    CHECK_STR_CONTAINS(html, "alpha: 1 malformed line skipped in events.jsonl");
    CHECK(s_only_namespaces(html));
    CHECK(!strstr(html, "<script") && !strstr(html, "<SCRIPT"));
}

/*  bt_report_write called directly: a run with training lines only has no accuracy chart. */
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
    CHECK(html && !strstr(html, "data-family=\"accuracy\""));
    CHECK(html && s_count(html, "data-family=\"reward\"") == 1);
    CHECK_STR_CONTAINS(html, "<td>train_only</td>"); /* no config.json: the directory's name */
    /* data sources: a chart of training accuracy and one of weights, a curve per source */
    char chart[1 << 14];
    CHECK(html && s_count(html, "data-family=\"sources\"") == 1);
    s_chart(html, "sources", chart, sizeof chart);
    CHECK(s_count(chart, "<polyline") == 2);
    CHECK_STR_CONTAINS(chart, "gsm");
    CHECK_STR_CONTAINS(chart, "arith");
    s_chart(html, "weights", chart, sizeof chart);
    CHECK(s_count(chart, "<polyline") == 2);
    free(html);
    /* the training signals, the evaluation response length per dataset and the pair-probe
       margins: a chart each, a curve per variant (dataset, probe), absent fields drawing none */
    snprintf(dir, sizeof dir, "%s/signals", s_tmp);
    CHECK(mkdir(dir, 0755) == 0);
    s_write(dir, "metrics.jsonl",
            "{\"kind\":\"train\",\"step\":1,\"loss\":0.5,\"kl\":0.01,\"entropy\":2.5,"
            "\"grad_norm\":1.5,\"lr\":0.001,\"clip_frac\":0.1}\n"
            "{\"kind\":\"train\",\"step\":2,\"loss\":0.4,\"kl\":0.02,\"entropy\":2.4,"
            "\"grad_norm\":1.2,\"lr\":0.0009,\"clip_frac\":0.2}\n"
            "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":1,\"dataset\":\"gsm\","
            "\"response_len_mean\":12,\"pair.order.margin\":0.25,\"pair.carry.margin\":-0.5}\n"
            "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":2,\"dataset\":\"gsm\","
            "\"response_len_mean\":10,\"pair.order.margin\":0.5,\"pair.carry.margin\":-0.25}\n"
            "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":1,\"dataset\":\"mmlu\",\"acc\":0.5,"
            "\"acc_norm\":0.25,\"acc_shuffled\":0.25,\"contamination_gap\":0.25,"
            "\"subject.algebra.acc\":0.5,\"subject.algebra.acc_norm\":0.5,"
            "\"subject.anatomy.acc\":1,\"subject.anatomy.items\":2}\n"
            "{\"kind\":\"eval\",\"phase\":\"rl\",\"step\":2,\"dataset\":\"mmlu\",\"acc\":0.75,"
            "\"acc_norm\":0.5,\"acc_shuffled\":0.5,\"contamination_gap\":0.25,"
            "\"subject.algebra.acc\":0.75,\"subject.algebra.acc_norm\":0.5,"
            "\"subject.anatomy.acc\":0.5,\"subject.anatomy.items\":2}\n");
    snprintf(out, sizeof out, "%s/signals.html", s_tmp);
    const char *one[] = {dir};
    CHECK_OK(bt_report_write(one, 1, out, NAN));
    html = s_read(out);
    const char *signals[] = {
        "loss", "kl", "entropy", "grad_norm", "lr", "clip_frac", "eval_response_length"};
    for (size_t f = 0; html && f < sizeof signals / sizeof *signals; f++) {
        s_chart(html, signals[f], chart, sizeof chart);
        CHECK(s_count(chart, "<polyline") == 1);
    }
    s_chart(html ? html : "", "margins", chart, sizeof chart);
    CHECK(s_count(chart, "<polyline") == 2);
    CHECK_STR_CONTAINS(chart, "order");
    CHECK_STR_CONTAINS(chart, "carry");
    /* multiple choice: acc, acc_norm and the shuffled acc of the benchmark; per subject its acc
       and acc_norm (not its item count); the contamination gap */
    s_chart(html ? html : "", "choices", chart, sizeof chart);
    CHECK(s_count(chart, "<polyline") == 3);
    CHECK_STR_CONTAINS(chart, "mmlu / acc_norm");
    s_chart(html ? html : "", "subjects", chart, sizeof chart);
    CHECK(s_count(chart, "<polyline") == 3);
    CHECK_STR_CONTAINS(chart, "mmlu / algebra.acc_norm");
    CHECK_STR_CONTAINS(chart, "mmlu / anatomy.acc");
    CHECK(!strstr(chart, "items"));
    s_chart(html ? html : "", "contamination", chart, sizeof chart);
    CHECK(s_count(chart, "<polyline") == 1);
    CHECK(html && !strstr(html, "data-family=\"reward\"")); /* no reward_mean: no chart */
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
