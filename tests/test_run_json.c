/*  test_run_json.c — RUN_DIR/run.json says which baton made a run and how: the release (the
    project VERSION of CMakeLists.txt), the git revision (git's own answer), the command line, host,
    user, start time and the hash of the resolved config.json; each --resume appends a record with
    the keys it changed, and --overwrite starts the history again. */
#define _DEFAULT_SOURCE
#define _XOPEN_SOURCE 700 /* strptime */
#include "check.h"
#include "runs.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static char s_tmp[64];

static const char s_small[] =
    "{\"run\": {\"name\": \"small\"}," RUNS_MODEL_TINY
    " \"task\": {\"digits\": 1, \"heldout_size\": 4},"
    " \"grpo\": {\"steps\": 2, \"group_size\": 2, \"prompts_per_step\": 2, \"max_new_tokens\": 2},"
    " \"eval\": {\"heldout_count\": 4}, \"checkpoint\": {\"full_every_steps\": 1}}";

/*  run.json of the run in s_tmp/out, parsed; NULL when missing or not JSON. */
static cJSON *s_run_json(void) {
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/out/run.json", s_tmp);
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK)
        return NULL;
    cJSON *doc = cJSON_Parse(text);
    free(text);
    return doc;
}

static const char *s_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/*  The release as CMakeLists.txt's project() line states it, read here on its own. */
static void s_project_version(char *out, size_t cap) {
    char path[PATH_MAX], *text = NULL;
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/CMakeLists.txt", src ? src : "..");
    out[0] = '\0';
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK)
        return;
    const char *at = strstr(text, "project(baton VERSION ");
    if (at)
        sscanf(at + strlen("project(baton VERSION "), "%31[0-9.]", out);
    free(text);
    (void)cap;
}

/*  One record's identity against what this process finds itself. */
static void s_check_identity(const cJSON *r, time_t before, time_t after) {
    char version[32];
    s_project_version(version, sizeof version);
    CHECK(version[0] != '\0');
    CHECK_STR_EQ(s_str(r, "baton_version"), version);
    char cmd[PATH_MAX + 64], rev[64] = "";
    const char *src = getenv("BATON_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short=12 HEAD 2>/dev/null",
             src ? src : "..");
    if (runs_capture(cmd, rev, sizeof rev) == 0 && rev[0]) {
        rev[strcspn(rev, "\n")] = 0;
        CHECK_STR_EQ(s_str(r, "git_revision"), rev);
    }
    char host[256] = "";
    gethostname(host, sizeof host);
    CHECK_STR_EQ(s_str(r, "host"), host);
    const struct passwd *pw = getpwuid(geteuid());
    CHECK(pw != NULL);
    if (pw)
        CHECK_STR_EQ(s_str(r, "user"), pw->pw_name);
    struct tm tm = {0};
    const char *end = strptime(s_str(r, "start_time"), "%Y-%m-%dT%H:%M:%SZ", &tm);
    CHECK(end != NULL && *end == '\0');
    time_t started = timegm(&tm);
    CHECK(started >= before - 1 && started <= after + 1);
    /* the hash of the resolved config the run wrote, by xxHash's own XXH3 */
    char path[PATH_MAX], *text = NULL, want[24];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/out/config.json", s_tmp);
    CHECK(bt_file_read(path, 1 << 20, &text, &len) == BT_OK);
    snprintf(want, sizeof want, "%016llx", (unsigned long long)XXH3_64bits(text, len));
    CHECK_STR_EQ(s_str(r, "config_hash"), want);
    free(text);
}

/*  The record's argv equals words. */
static void s_check_argv(const cJSON *r, const char *const *words, int n) {
    const cJSON *argv = cJSON_GetObjectItem(r, "argv");
    CHECK(cJSON_IsArray(argv) && cJSON_GetArraySize(argv) == n);
    for (int i = 0; i < n && i < cJSON_GetArraySize(argv); i++)
        CHECK_STR_EQ(cJSON_GetArrayItem(argv, i)->valuestring, words[i]);
}

int main(void) {
    snprintf(s_tmp, sizeof s_tmp, "/tmp/bt_runjson_XXXXXX");
    CHECK(mkdtemp(s_tmp) != NULL);
    char path[PATH_MAX], out[8192], cmd[PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/small.json", s_tmp);
    CHECK(bt_file_write(path, s_small, strlen(s_small)) == BT_OK);

    /* a fresh run: one record, resume false, no diff */
    time_t before = time(NULL);
    CHECK(runs_baton(s_tmp, "run", "small.json --run-dir out", out, sizeof out) == 0);
    time_t after = time(NULL);
    cJSON *doc = s_run_json();
    CHECK(doc != NULL);
    const cJSON *records = cJSON_GetObjectItem(doc, "records");
    CHECK(cJSON_IsArray(records) && cJSON_GetArraySize(records) == 1);
    const cJSON *r = cJSON_GetArrayItem(records, 0);
    s_check_identity(r, before, after);
    s_check_argv(r, (const char *const[]){"baton", "run", "small.json", "--run-dir", "out"}, 5);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(r, "resume")));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "config_diff")) == 0);
    char first_start[32];
    snprintf(first_start, sizeof first_start, "%s", s_str(r, "start_time"));
    cJSON_Delete(doc);

    /* --resume with a longer run: the first record stays as it was, the second names the change */
    before = time(NULL);
    CHECK(runs_baton(s_tmp, "run", "small.json --run-dir out --resume --set grpo.steps=3", out,
                     sizeof out) == 0);
    after = time(NULL);
    doc = s_run_json();
    CHECK(doc != NULL);
    records = cJSON_GetObjectItem(doc, "records");
    CHECK(cJSON_IsArray(records) && cJSON_GetArraySize(records) == 2);
    CHECK_STR_EQ(s_str(cJSON_GetArrayItem(records, 0), "start_time"), first_start);
    r = cJSON_GetArrayItem(records, 1);
    s_check_identity(r, before, after);
    s_check_argv(r,
                 (const char *const[]){"baton", "run", "small.json", "--run-dir", "out", "--resume",
                                       "--set", "grpo.steps=3"},
                 8);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(r, "resume")));
    const cJSON *diff = cJSON_GetObjectItem(r, "config_diff");
    CHECK(cJSON_IsArray(diff) && cJSON_GetArraySize(diff) == 1);
    const cJSON *d = cJSON_GetArrayItem(diff, 0);
    CHECK_STR_EQ(s_str(d, "key"), "grpo.steps");
    CHECK_STR_EQ(s_str(d, "from"), "2");
    CHECK_STR_EQ(s_str(d, "to"), "3");
    cJSON_Delete(doc);

    /* --overwrite replaces the run, its history with it */
    CHECK(runs_baton(s_tmp, "run", "small.json --run-dir out --overwrite", out, sizeof out) == 0);
    doc = s_run_json();
    CHECK(doc != NULL);
    records = cJSON_GetObjectItem(doc, "records");
    CHECK(cJSON_IsArray(records) && cJSON_GetArraySize(records) == 1);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(records, 0), "resume")));
    cJSON_Delete(doc);

    snprintf(cmd, sizeof cmd, "rm -rf %s", s_tmp);
    CHECK(system(cmd) == 0);
    return check_exit();
}
