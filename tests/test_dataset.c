/*  test_dataset.c — indexed JSONL datasets and their saved index: records read back equal
    the lines written, the index is saved beside the file and reused by the next open (not
    rewritten, no line checked again), rebuilt when the file changes, is replaced, or the index is
    truncated or corrupt, saved in the cache folder when the file's folder refuses it and kept in
    memory when both do; malformed lines are reported by line number and leave no index behind;
    a file truncated while open gives errors, not a crash. */
#define _DEFAULT_SOURCE /* setenv */
#include "baton/dataset.h"

#include "baton/fileio.h"
#include "check.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char s_dir[64]; /* a fresh temp folder: the datasets, and the cache folder under it */

enum { S_MAX_LINES = 600 };

/*  What a file holds: its records (non-blank lines), as the test wrote them. */
typedef struct {
    char *lines[S_MAX_LINES];
    int n;
} s_expect;

static void s_expect_free(s_expect *e) {
    for (int i = 0; i < e->n; i++)
        free(e->lines[i]);
    e->n = 0;
}

/*  Counts the lines a check saw (on several threads for a large file); refuses a line holding
    "BAD". */
static const char *s_check(const char *line, size_t len, char *scratch, void *user) {
    memcpy(scratch, line, len); /* scratch holds len + 1 bytes */
    scratch[len] = '\0';
    atomic_fetch_add((atomic_int *)user, 1);
    return strstr(scratch, "BAD") ? "holds BAD" : NULL;
}

static char *s_path(const char *name) {
    static char paths[8][160];
    static int next = 0;
    char *path = paths[next++ % 8];
    snprintf(path, 160, "%s/%s", s_dir, name);
    return path;
}

/*  Sets a file's modification time to `ago` seconds (plus nsec) before now, so that an index
    built from it may be saved (one built within 0.1 s of a change is not; a negative `ago`, a
    time ahead of the clock, is never more than 0.1 s old). */
static void s_age(const char *path, int ago, long nsec) {
    struct timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= ago;
    times[0].tv_nsec = nsec;
    times[1] = times[0];
    CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
}

/*  Appends n records of varied lengths (some after blank lines, the last one without its newline
    when `open_end`), numbered from e->n, to path; remembers them in e. */
static void s_append(const char *path, s_expect *e, int n, bool open_end) {
    FILE *f = fopen(path, "a");
    CHECK(f != NULL);
    for (int k = 0; k < n && e->n < S_MAX_LINES; k++) {
        int id = e->n;
        char line[512];
        int pad = (id * 37) % 300;
        snprintf(line, sizeof line, "{\"prompt\": \"q%d %.*s\", \"answer\": \"%d\"}", id, pad,
                 "................................................................................"
                 "................................................................................"
                 "................................................................................"
                 "................................................................................",
                 id);
        if (id % 7 == 3)
            fputs(id % 2 ? "\n" : "  \t\r\n", f); /* blank lines are not records */
        fputs(line, f);
        if (!(open_end && k == n - 1))
            fputc('\n', f);
        e->lines[e->n++] = strdup(line);
    }
    fclose(f);
}

static bt_status s_open(const char *path, uint32_t rules, atomic_int *checked, bt_dataset_t **ds) {
    bt_dataset_config cfg = {.path = path, .check = s_check, .user = checked, .rules = rules};
    *checked = 0;
    return bt_dataset_open(&cfg, ds);
}

/*  Every record of ds equals the line the test wrote. */
static void s_check_records(const bt_dataset_t *ds, const s_expect *e) {
    CHECK(bt_dataset_count(ds) == (uint64_t)e->n);
    int wrong = 0;
    for (int i = 0; i < e->n && (uint64_t)i < bt_dataset_count(ds); i++) {
        size_t len = 0;
        char *rec = NULL;
        CHECK_OK(bt_dataset_record(ds, (uint64_t)i, &rec, &len));
        wrong += !rec || len != strlen(e->lines[i]) || strcmp(rec, e->lines[i]) != 0;
        free(rec);
    }
    CHECK(wrong == 0);
}

static bool s_stat(const char *path, struct stat *st) {
    return stat(path, st) == 0;
}

static bool s_same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_size == b->st_size;
}

/*  Opens path and checks that the index was built (every record checked) or reused (none). */
static void s_open_expect(const char *path, const s_expect *e, bool built) {
    bt_dataset_t *ds = NULL;
    atomic_int checked = 0;
    CHECK_OK(s_open(path, 1, &checked, &ds));
    if (!ds)
        return;
    CHECK(bt_dataset_index_was_built(ds) == built);
    CHECK(checked == (built ? e->n : 0));
    s_check_records(ds, e);
    bt_dataset_destroy(&ds);
    CHECK(ds == NULL);
    bt_dataset_destroy(&ds); /* idempotent */
}

/* ---- tests ---------------------------------------------------------------------------------- */
/*  The first open checks every record and saves PATH.btidx; the second maps it: nothing checked,
    the index file not rewritten (same inode and mtime), the same records. */
static void test_index_reused(void) {
    const char *path = s_path("reuse.jsonl");
    s_expect e = {0};
    s_append(path, &e, 200, false);
    s_age(path, 10, 0);
    bt_dataset_t *ds = NULL;
    atomic_int checked = 0;
    CHECK_OK(s_open(path, 1, &checked, &ds));
    CHECK(bt_dataset_index_was_built(ds) && checked == 200);
    char beside[200];
    snprintf(beside, sizeof beside, "%s.btidx", path);
    CHECK(strcmp(bt_dataset_index_path(ds), beside) == 0);
    CHECK(strcmp(bt_dataset_path(ds), path) == 0);
    s_check_records(ds, &e);
    bt_dataset_destroy(&ds);
    struct stat first, again;
    CHECK(s_stat(beside, &first));
    CHECK(first.st_size == 88 + 8 * 200); /* the header, then 8 bytes per record */
    for (int k = 0; k < 2; k++)
        s_open_expect(path, &e, false);
    CHECK(s_stat(beside, &again) && s_same_file(&first, &again));
    /* other rules (another verifier) are another index */
    CHECK_OK(s_open(path, 2, &checked, &ds));
    CHECK(bt_dataset_index_was_built(ds) && checked == 200);
    bt_dataset_destroy(&ds);
    s_open_expect(path, &e, true); /* one index per file: rules 1 build theirs again */
    s_open_expect(path, &e, false);
    s_expect_free(&e);
}

/*  A changed file rebuilds the index: appended lines (the count changes), a rewrite of the same
    size with another mtime, and a replacement (a new inode) with the same size and mtime. */
static void test_index_rebuilt_on_change(void) {
    const char *path = s_path("change.jsonl");
    s_expect e = {0};
    s_append(path, &e, 50, false);
    s_age(path, 20, 0);
    s_open_expect(path, &e, true);
    s_open_expect(path, &e, false);

    s_append(path, &e, 1, true); /* one more line, without a final newline */
    s_age(path, 19, 0);
    s_open_expect(path, &e, true);
    s_open_expect(path, &e, false);

    /* same size, one byte changed in place, another mtime (nanoseconds only) */
    struct stat st;
    CHECK(s_stat(path, &st));
    FILE *f = fopen(path, "r+");
    CHECK(f != NULL);
    long at = (long)strlen(e.lines[0]) - 3; /* the answer: "0" -> "Z" (line 0 starts the file) */
    CHECK(fseek(f, at, SEEK_SET) == 0 && fputc('Z', f) == 'Z');
    fclose(f);
    e.lines[0][at] = 'Z';
    struct timespec times[2] = {st.st_mtim, st.st_mtim};
    times[1].tv_nsec = (times[1].tv_nsec + 1) % 1000000000L;
    CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
    s_open_expect(path, &e, true);

    /* a new file renamed over it: same size and mtime, another inode */
    CHECK(s_stat(path, &st));
    char *copy = s_path("change.jsonl.new"), cmd[400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, copy);
    CHECK(system(cmd) == 0);
    struct timespec same[2] = {st.st_mtim, st.st_mtim};
    CHECK(utimensat(AT_FDCWD, copy, same, 0) == 0);
    CHECK(rename(copy, path) == 0);
    struct stat now;
    CHECK(s_stat(path, &now) && now.st_ino != st.st_ino && now.st_size == st.st_size);
    s_open_expect(path, &e, true);
    s_open_expect(path, &e, false);
    s_expect_free(&e);
}

/*  Overwrites len bytes at offset of path (or truncates it to offset when data is NULL). */
static void s_damage(const char *path, long offset, const void *data, size_t len) {
    if (!data) {
        CHECK(truncate(path, offset) == 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    CHECK(fseek(f, offset, SEEK_SET) == 0 && fwrite(data, 1, len, f) == len);
    fclose(f);
}

/*  A truncated, short, empty, corrupt or foreign index is never trusted: the open rebuilds it,
    reads the right records, and the next open uses the repaired index. */
static void test_index_damaged(void) {
    const char *path = s_path("damage.jsonl");
    s_expect e = {0};
    s_append(path, &e, 300, false);
    s_age(path, 30, 0);
    s_open_expect(path, &e, true);
    char beside[200];
    snprintf(beside, sizeof beside, "%s.btidx", path);
    struct stat st;
    CHECK(s_stat(beside, &st));
    const long size = (long)st.st_size;
    const uint64_t big = UINT64_MAX / 4, wrong_offset = 5;
    struct {
        long at; /* where; -1: truncate to `len` */
        const void *data;
        size_t len;
    } damage[] = {
        {-1, NULL, (size_t)size / 2}, /* truncated among the offsets */
        {-1, NULL, 10},               /* shorter than the header */
        {-1, NULL, 0},                /* empty */
        {size - 8, "\x01", 1},        /* the last offset */
        {88, &wrong_offset, 8},       /* the first offset */
        {0, "XTIDX", 5},              /* the magic */
        {8, "\x02", 1},               /* the format version */
        {64, &big, 8},                /* the record count: sizes disagree */
        {72, "\xff", 1},              /* the offsets' hash */
        {80, "\xff", 1},              /* the header's hash */
        {16, "\x07", 1},              /* the line limit */
    };
    for (size_t k = 0; k < sizeof damage / sizeof *damage; k++) {
        if (damage[k].at < 0)
            s_damage(beside, (long)damage[k].len, NULL, 0);
        else
            s_damage(beside, damage[k].at, damage[k].data, damage[k].len);
        s_open_expect(path, &e, true);
        CHECK(s_stat(beside, &st) && st.st_size == size);
        s_open_expect(path, &e, false);
    }
    s_expect_free(&e);
}

/*  The file's folder refuses the index (PATH.btidx is a folder here): it goes to the cache folder
    ($XDG_CACHE_HOME/baton, as this test sets it), where the next open finds it.  When the cache
    folder cannot be made either, the index stays in memory and an INFO line says so. */
typedef struct {
    char last[512];
    int lines;
} s_log;

static void s_sink(bt_log_level level, const char *msg, void *user) {
    s_log *log = user;
    if (level == BT_LOG_INFO) {
        snprintf(log->last, sizeof log->last, "%s", msg);
        log->lines++;
    }
}

static void test_index_fallbacks(void) {
    const char *path = s_path("refused.jsonl");
    s_expect e = {0};
    s_append(path, &e, 40, false);
    s_age(path, 10, 0);
    char beside[200];
    snprintf(beside, sizeof beside, "%s.btidx", path);
    CHECK(mkdir(beside, 0700) == 0);

    bt_dataset_t *ds = NULL;
    atomic_int checked = 0;
    CHECK_OK(s_open(path, 1, &checked, &ds));
    char cache[200];
    snprintf(cache, sizeof cache, "%s/cache/baton/refused.jsonl.", s_dir);
    CHECK(strncmp(bt_dataset_index_path(ds), cache, strlen(cache)) == 0);
    struct stat st;
    CHECK(s_stat(bt_dataset_index_path(ds), &st) && S_ISREG(st.st_mode));
    bt_dataset_destroy(&ds);
    s_open_expect(path, &e, false);

    /* no cache folder either: XDG_CACHE_HOME under a regular file */
    char blocked[200];
    snprintf(blocked, sizeof blocked, "%s", s_path("refused.jsonl"));
    CHECK(setenv("XDG_CACHE_HOME", blocked, 1) == 0);
    s_log log = {{0}, 0};
    bt_log_set_sink(s_sink, &log, BT_LOG_DEBUG);
    for (int k = 0; k < 2; k++) { /* nothing saved: each open builds it again */
        CHECK_OK(s_open(path, 1, &checked, &ds));
        CHECK(bt_dataset_index_was_built(ds) && checked == 40);
        CHECK(strcmp(bt_dataset_index_path(ds), "") == 0);
        s_check_records(ds, &e);
        bt_dataset_destroy(&ds);
    }
    CHECK(log.lines == 2);
    CHECK_STR_CONTAINS(log.last, "index kept in memory");
    CHECK_STR_CONTAINS(log.last, path);

    /* a file changed just now: its index is not saved (a later change within the same timestamp
       tick would go unseen), and says so */
    const char *fresh = s_path("fresh.jsonl");
    s_expect f = {0};
    s_append(fresh, &f, 5, false);
    s_age(fresh, -3600, 0); /* "just now" however long the test took to get here: an hour ahead */
    for (int k = 0; k < 2; k++)
        s_open_expect(fresh, &f, true);
    CHECK_STR_CONTAINS(log.last, "not saved");
    bt_log_set_sink(NULL, NULL, BT_LOG_WARN);
    char cache_home[200];
    snprintf(cache_home, sizeof cache_home, "%s/cache", s_dir);
    CHECK(setenv("XDG_CACHE_HOME", cache_home, 1) == 0);
    s_expect_free(&e);
    s_expect_free(&f);
}

/*  Malformed lines are reported as PATH:LINE (blank lines counted), and no index is left. */
static void test_errors(void) {
    const char *path = s_path("bad.jsonl");
    FILE *f = fopen(path, "w");
    fputs("{\"ok\": 1}\n\n  \n{\"BAD\": 2}\n", f);
    fclose(f);
    s_age(path, 10, 0);
    bt_dataset_t *ds = NULL;
    atomic_int checked = 0;
    char where[200];
    snprintf(where, sizeof where, "%s:4: holds BAD", path);
    CHECK(s_open(path, 1, &checked, &ds) == BT_EFORMAT && ds == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), where);
    char beside[200];
    snprintf(beside, sizeof beside, "%s.btidx", path);
    struct stat st;
    CHECK(!s_stat(beside, &st));

    const char *longest = "{\"a\": \"0123456789abcdef\"}";
    f = fopen(path, "w");
    fprintf(f, "{\"a\": 1}\n%s\n", longest);
    fclose(f);
    bt_dataset_config cfg = {.path = path, .line_max = (uint32_t)strlen(longest) - 1};
    CHECK(bt_dataset_open(&cfg, &ds) == BT_EFORMAT);
    snprintf(where, sizeof where, "%s:2: line longer than %u bytes", path, cfg.line_max);
    CHECK_STR_CONTAINS(bt_last_error(), where);
    cfg.line_max++; /* exactly the longest line */
    CHECK_OK(bt_dataset_open(&cfg, &ds));
    CHECK(ds && bt_dataset_count(ds) == 2);
    bt_dataset_destroy(&ds);

    cfg.path = s_path("empty.jsonl");
    f = fopen(cfg.path, "w");
    fclose(f);
    CHECK_OK(bt_dataset_open(&cfg, &ds)); /* empty: no records, no error */
    CHECK(ds && bt_dataset_count(ds) == 0);
    bt_dataset_destroy(&ds);
    cfg.path = "/nonexistent/baton.jsonl";
    CHECK(bt_dataset_open(&cfg, &ds) == BT_EIO && ds == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "/nonexistent/baton.jsonl: cannot open");
    cfg.path = s_dir;
    CHECK(bt_dataset_open(&cfg, &ds) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "not a regular file");
}

/*  A file truncated while open: the records it lost are an error, the others still read. */
static void test_truncated_while_open(void) {
    const char *path = s_path("shrink.jsonl");
    s_expect e = {0};
    s_append(path, &e, 20, false);
    s_age(path, 10, 0);
    bt_dataset_t *ds = NULL;
    atomic_int checked = 0;
    CHECK_OK(s_open(path, 1, &checked, &ds));
    struct stat st;
    CHECK(s_stat(path, &st));
    CHECK(truncate(path, st.st_size - (off_t)strlen(e.lines[19]) / 2) == 0);
    char *rec = NULL;
    size_t len = 0;
    CHECK(bt_dataset_record(ds, 19, &rec, &len) == BT_EIO && rec == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "record 20");
    CHECK_OK(bt_dataset_record(ds, 18, &rec, &len));
    CHECK(rec && strcmp(rec, e.lines[18]) == 0);
    free(rec);
    bt_dataset_destroy(&ds);
    s_expect_free(&e);
}

/*  A file of a few MiB is read by several threads, each taking whole lines: the records come
    back in file order, equal to the lines written, and the first bad line in the file is the one
    reported, with its number in the file (blank lines counted), wherever the parts begin. */
static void test_threads(void) {
    enum { N = 40000 };
    const char *path = s_path("big.jsonl");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    uint64_t lines = 0, bad_line[2] = {0, 0};
    for (int k = 0; k < N; k++) {
        if (k % 1000 == 17) {
            fputs("\n", f);
            lines++;
        }
        /* record 39000, then record 21000 (the first in the file) are bad in the second pass */
        fprintf(f, "{\"k\": %d, \"pad\": \"%.*s\"}\n", k, 20 + k % 50,
                "..................................................................");
        lines++;
        if (k == 21000 || k == 39000)
            bad_line[k == 39000] = lines;
    }
    fclose(f);
    s_age(path, 10, 0);
    for (int threads = 1; threads <= 8; threads *= 2) {
        atomic_int checked = 0;
        bt_dataset_config cfg = {.path = path,
                                 .check = s_check,
                                 .user = &checked,
                                 .rules = (uint32_t)threads,
                                 .threads = threads};
        bt_dataset_t *ds = NULL;
        CHECK_OK(bt_dataset_open(&cfg, &ds));
        CHECK(ds && bt_dataset_count(ds) == N && checked == N);
        for (int k = 0; ds && k < N; k += 997) {
            char *rec = NULL, want[160];
            size_t len = 0;
            snprintf(want, sizeof want, "{\"k\": %d, ", k);
            CHECK_OK(bt_dataset_record(ds, (uint64_t)k, &rec, &len));
            CHECK(rec && strncmp(rec, want, strlen(want)) == 0 && len == strlen(rec));
            free(rec);
        }
        bt_dataset_destroy(&ds);
    }
    /* two bad records, marked in place ("..." -> "BAD"): the earlier one is reported */
    char *text = NULL;
    size_t size = 0;
    CHECK_OK(bt_file_read(path, SIZE_MAX, &text, &size));
    for (int which = 0; text && which < 2; which++) {
        char key[32];
        snprintf(key, sizeof key, "{\"k\": %d, \"pad\": \"...", which ? 39000 : 21000);
        char *at = strstr(text, key);
        CHECK(at != NULL);
        if (at)
            memcpy(at + strlen(key) - 3, "BAD", 3);
    }
    CHECK_OK(bt_file_write(path, text, size));
    free(text);
    s_age(path, 9, 0);
    for (int threads = 1; threads <= 8; threads *= 2) {
        atomic_int checked = 0;
        bt_dataset_config cfg = {
            .path = path, .check = s_check, .user = &checked, .rules = 9, .threads = threads};
        bt_dataset_t *ds = NULL;
        char where[200];
        snprintf(where, sizeof where, "%s:%llu: holds BAD", path, (unsigned long long)bad_line[0]);
        CHECK(bt_dataset_open(&cfg, &ds) == BT_EFORMAT && ds == NULL);
        CHECK_STR_CONTAINS(bt_last_error(), where);
    }
}

int main(void) {
    snprintf(s_dir, sizeof s_dir, "/tmp/baton_test_dataset_XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char cache_home[128];
    snprintf(cache_home, sizeof cache_home, "%s/cache", s_dir);
    setenv("XDG_CACHE_HOME", cache_home, 1); /* never the user's own cache */
    test_index_reused();
    test_index_rebuilt_on_change();
    test_index_damaged();
    test_index_fallbacks();
    test_errors();
    test_truncated_while_open();
    test_threads();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    CHECK(system(cmd) == 0);
    return check_exit();
}
