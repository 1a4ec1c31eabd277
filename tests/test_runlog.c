/*  test_runlog.c — the run directory: config.json written, metrics/events lines are valid JSON that
    an independent parser (cJSON) reads back with the same values. */
#define _DEFAULT_SOURCE
#include "baton/fileio.h"
#include "baton/runlog.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

int main(void) {
    char tmp[] = "/tmp/bt_runlog_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "%s/runs/a/b", tmp);
    bt_runlog_t *log = bt_runlog_open(dir, "{\"run\": {\"seed\": 3}}\n");
    CHECK(log != NULL);

    bt_jsonl line;
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "train");
    bt_jsonl_int(&line, "step", -12);
    bt_jsonl_str(&line, "variant", "quo\"te\\back\nline");
    bt_jsonl_num(&line, "loss", 0.123456789012);
    bt_jsonl_num(&line, "bad", NAN);
    bt_jsonl_bool(&line, "ok", true);
    CHECK_OK(bt_runlog_metric(log, &line));
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "worker_joined");
    CHECK_OK(bt_runlog_event(log, &line));
    bt_jsonl_init(&line); /* a record that does not fit is refused, not truncated */
    for (int i = 0; i < BT_JSONL_MAX / 8; i++) /* ,"field":N is 10 bytes or more */
        bt_jsonl_num(&line, "field", i);
    CHECK(bt_runlog_metric(log, &line) == BT_ERANGE);
    bt_runlog_destroy(&log);
    CHECK(log == NULL);

    char *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &text, NULL));
    CHECK(text && strchr(text, '\n') == text + strlen(text) - 1); /* exactly one line */
    cJSON *j = cJSON_Parse(text ? text : "");
    CHECK(j != NULL);
    CHECK(strcmp(cJSON_GetObjectItem(j, "kind")->valuestring, "train") == 0);
    CHECK(cJSON_GetObjectItem(j, "step")->valuedouble == -12);
    CHECK(strcmp(cJSON_GetObjectItem(j, "variant")->valuestring, "quo\"te\\back\nline") == 0);
    CHECK_NEAR(cJSON_GetObjectItem(j, "loss")->valuedouble, 0.123456789012, 1e-9);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "bad")));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")));
    cJSON_Delete(j);
    free(text);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_OK(bt_file_read(path, 1 << 20, &text, NULL));
    CHECK(text && strstr(text, "\"seed\": 3"));
    free(text);

    /* a resume cuts metrics.jsonl back to a checkpoint's size: at a line's end, and never beyond
       the end (ftruncate would pad the file with NUL bytes: 2^40 made a 1 TiB sparse file) */
    log = bt_runlog_open(dir, "{}\n");
    CHECK(log != NULL);
    int64_t one = bt_runlog_metrics_size(log);
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "kind", "eval");
    CHECK_OK(bt_runlog_metric(log, &line));
    int64_t two = bt_runlog_metrics_size(log);
    CHECK(one > 0 && two > one);
    CHECK(bt_runlog_truncate_metrics(log, (int64_t)1 << 40) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "fewer than the 1099511627776 to cut it back to");
    CHECK(bt_runlog_truncate_metrics(log, two + 1) == BT_EINVAL);
    CHECK(bt_runlog_truncate_metrics(log, one - 1) == BT_EINVAL); /* inside the first line */
    CHECK_STR_CONTAINS(bt_last_error(), "is not the end of a line");
    CHECK(bt_runlog_truncate_metrics(log, -1) == BT_EINVAL);
    CHECK(bt_runlog_metrics_size(log) == two); /* refused cuts leave the file as it was */
    CHECK_OK(bt_runlog_truncate_metrics(log, two));
    CHECK_OK(bt_runlog_truncate_metrics(log, one));
    CHECK(bt_runlog_metrics_size(log) == one);
    CHECK_OK(bt_runlog_truncate_metrics(log, 0));
    CHECK(bt_runlog_metrics_size(log) == 0);
    /* events.jsonl is cut back the same way, but only what earlier invocations wrote: this
       one's events so far move down to the new end */
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "kept");
    CHECK_OK(bt_runlog_event(log, &line));
    int64_t e1 = bt_runlog_events_size(log);
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "cut");
    CHECK_OK(bt_runlog_event(log, &line));
    CHECK(bt_runlog_truncate_events(log, e1) == BT_EINVAL); /* this invocation's own: refused */
    CHECK_STR_CONTAINS(bt_last_error(), "when this run opened it");
    bt_runlog_destroy(&log);
    log = bt_runlog_open(dir, "{}\n"); /* the next invocation: a resume */
    CHECK(log != NULL);
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "mine");
    CHECK_OK(bt_runlog_event(log, &line));
    CHECK(bt_runlog_truncate_events(log, e1 - 1) == BT_EINVAL); /* inside a line */
    CHECK_OK(bt_runlog_truncate_events(log, e1));
    bt_jsonl_init(&line);
    bt_jsonl_str(&line, "event", "after");
    CHECK_OK(bt_runlog_event(log, &line));
    char events_path[512], *events = NULL;
    snprintf(events_path, sizeof events_path, "%s/events.jsonl", dir);
    fflush(NULL);
    CHECK_OK(bt_file_read(events_path, 1 << 20, &events, NULL));
    const char *kept = events ? strstr(events, "\"kept\"") : NULL,
               *mine = events ? strstr(events, "\"mine\"") : NULL,
               *after = events ? strstr(events, "\"after\"") : NULL;
    CHECK(kept && mine && after && kept < mine && mine < after && !strstr(events, "\"cut\""));
    free(events);
    /* an array of strings, as the config_changed event lists its keys */
    const char *keys[] = {"grpo.steps", "workers.\"eval\""};
    bt_jsonl_init(&line);
    bt_jsonl_strs(&line, "keys", keys, 2);
    CHECK(strcmp(line.buf, "{\"keys\":[\"grpo.steps\",\"workers.\\\"eval\\\"\"]") == 0);
    bt_runlog_destroy(&log);

    snprintf(path, sizeof path, "rm -rf %s", tmp);
    CHECK(system(path) == 0);
    return check_exit();
}
