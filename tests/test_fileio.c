/*  test_fileio.c — whole-file reads and durable writes: round trip, limits, errors, cleanup. */
#define _XOPEN_SOURCE 700
#include "baton/fileio.h"

#include "check.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static char s_dir[64];

static int s_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static const char *s_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    return path;
}

static bool s_exists(const char *path) {
    return access(path, F_OK) == 0;
}

static void test_round_trip_keeps_every_byte(void) {
    const char data[] = {'a', '\0', 'b', '\n', '\0', (char)0xFF, 'z'}; /* NULs inside */
    const char *path = s_path("bytes.bin");
    CHECK_OK(bt_file_write(path, data, sizeof data));
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(bt_file_read(path, sizeof data, &text, &len)); /* exactly at the limit */
    CHECK(len == sizeof data);
    CHECK(text && memcmp(text, data, sizeof data) == 0);
    CHECK(text && text[len] == '\0');
    free(text);

    /* An empty file reads as an empty string. */
    path = s_path("empty.txt");
    CHECK_OK(bt_file_write(path, NULL, 0));
    text = NULL;
    CHECK_OK(bt_file_read(path, 0, &text, NULL));
    CHECK(text && text[0] == '\0');
    free(text);
}

static void test_read_refuses_a_file_over_the_limit(void) {
    const char *path = s_path("big.txt");
    CHECK_OK(bt_file_write(path, "0123456789", 10));
    char *text = NULL;
    CHECK(bt_file_read(path, 9, &text, NULL) == BT_EFORMAT);
    CHECK(text == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), path);
    CHECK_STR_CONTAINS(bt_last_error(), "larger than 9 bytes");
}

static void test_read_of_a_missing_file_names_it(void) {
    const char *path = s_path("missing.txt");
    char *text = NULL;
    CHECK(bt_file_read(path, 100, &text, NULL) == BT_EIO);
    CHECK(text == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), path);
    CHECK_STR_CONTAINS(bt_last_error(), "cannot open");

    CHECK(bt_file_read(s_dir, 100, &text, NULL) == BT_EIO); /* a directory */
    CHECK_STR_CONTAINS(bt_last_error(), "not a regular file");
}

static void test_write_into_a_missing_directory_leaves_nothing(void) {
    const char *path = s_path("no-such-dir/x.bin");
    CHECK(bt_file_write(path, "x", 1) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), path);
    CHECK_STR_CONTAINS(bt_last_error(), "cannot create");
    CHECK(!s_exists(path));
    CHECK(!s_exists(s_path("no-such-dir")));
}

static void test_finish_removes_a_failed_write(void) {
    const char *path = s_path("stream.txt");
    FILE *f = bt_file_create(path);
    CHECK(f != NULL);
    if (!f)
        return;
    fputs("half written", f);
    CHECK(bt_file_finish(f, path, false) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), path);
    CHECK_STR_CONTAINS(bt_last_error(), "write failed");
    CHECK(!s_exists(path));

    /* The same stream, judged ok, stays on disk whole. */
    f = bt_file_create(path);
    CHECK(f != NULL);
    if (!f)
        return;
    fputs("whole", f);
    CHECK_OK(bt_file_finish(f, path, true));
    char *text = NULL;
    CHECK_OK(bt_file_read(path, 100, &text, NULL));
    CHECK(text && strcmp(text, "whole") == 0);
    free(text);
}

static void test_write_replaces_an_existing_file(void) {
    const char *path = s_path("replace.txt");
    CHECK_OK(bt_file_write(path, "a longer first version", 22));
    CHECK_OK(bt_file_write(path, "short", 5));
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(bt_file_read(path, 100, &text, &len));
    CHECK(len == 5 && text && strcmp(text, "short") == 0);
    free(text);
}

/*  XXH3-64: the published value of the empty input, and a file hashed in chunks equals its bytes
    hashed at once. */
static void test_hash(void) {
    CHECK(bt_hash64("", 0) == UINT64_C(0x2D06800538D394C2));
    enum { N = 200000 }; /* several 64 KiB chunks and a partial one */
    static unsigned char data[N];
    for (int i = 0; i < N; i++)
        data[i] = (unsigned char)(i * 2654435761u >> 13);
    char path[] = "/tmp/baton_hash_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(bt_file_write(path, data, N));
    uint64_t h = 0, size = 0;
    CHECK_OK(bt_file_hash(path, &h, &size));
    CHECK(size == N && h == bt_hash64(data, N));
    data[N / 2] ^= 1; /* one flipped bit changes it */
    CHECK(h != bt_hash64(data, N));
    remove(path);
    CHECK(bt_file_hash(path, &h, &size) == BT_EIO);
    CHECK_OK(bt_dir_sync("/tmp"));
}

/*  bt_file_replace: the new content replaces the old whole; a failed write leaves the old. */
static void test_replace(void) {
    char path[] = "/tmp/baton_replace_XXXXXX", tmp[64], *text = NULL;
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK_OK(bt_file_write(path, "old", 3));
    CHECK_OK(bt_file_replace(path, tmp, "brand new", 9));
    CHECK_OK(bt_file_read(path, 64, &text, NULL));
    CHECK(text && strcmp(text, "brand new") == 0);
    free(text);
    CHECK(access(tmp, F_OK) != 0); /* renamed away */
    CHECK(bt_file_replace(path, "/nonexistent/dir/x.tmp", "lost", 4) == BT_EIO);
    CHECK_OK(bt_file_read(path, 64, &text, NULL));
    CHECK(text && strcmp(text, "brand new") == 0);
    free(text);
    remove(path);
}

/*  JSONL lines come out in order with their line numbers, blank ones passed over but counted. */
static void test_next_line_skips_blanks_and_counts_them(void) {
    char text[] = "{\"a\": 1}\n\n \t\r\n{\"b\": 2}\r\n{\"c\": 3}";
    char *at = text, *line;
    size_t n = 0;
    line = bt_text_next_line(&at, &n);
    CHECK(line && !strcmp(line, "{\"a\": 1}") && n == 1);
    line = bt_text_next_line(&at, &n);
    CHECK(line && !strcmp(line, "{\"b\": 2}\r") && n == 4); /* the line as written, its \r too */
    line = bt_text_next_line(&at, &n);
    CHECK(line && !strcmp(line, "{\"c\": 3}") && n == 5); /* the last, without a newline */
    CHECK(bt_text_next_line(&at, &n) == NULL && n == 5);
    char blank[] = "\n  \n";
    at = blank;
    n = 0;
    CHECK(bt_text_next_line(&at, &n) == NULL && n == 2);
    at = NULL; /* bt_file_read never gives NULL, but a caller's empty state may */
    CHECK(bt_text_next_line(&at, &n) == NULL);
}

/*  bt_proc_memory against the kernel's other account (getrusage's ru_maxrss) and a known
    allocation: 64 MiB touched raise the resident set and the peak by at least that much. */
static void test_proc_memory(void) {
    size_t rss0, peak0, rss1, peak1;
    CHECK_OK(bt_proc_memory(&rss0, &peak0));
    CHECK(rss0 > 0 && peak0 >= rss0);
    size_t n = (size_t)64 << 20;
    volatile char *big = malloc(n);
    CHECK(big != NULL);
    for (size_t i = 0; big && i < n; i += 4096)
        big[i] = 1;
    CHECK_OK(bt_proc_memory(&rss1, &peak1));
    CHECK(rss1 >= rss0 + n - ((size_t)4 << 20)); /* a few pages may be swapped or shared */
    CHECK(peak1 >= rss1 && peak1 >= peak0);
    struct rusage ru;
    CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
    double kib = (double)ru.ru_maxrss; /* Linux: KiB, the same high-water mark */
    CHECK(fabs(kib * 1024.0 - (double)peak1) <= 0.02 * (double)peak1);
    free((void *)big);
}

int main(void) {
    test_hash();
    test_next_line_skips_blanks_and_counts_them();
    test_replace();
    test_proc_memory();
    snprintf(s_dir, sizeof s_dir, "/tmp/bt_fileio_XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip_keeps_every_byte();
    test_read_refuses_a_file_over_the_limit();
    test_read_of_a_missing_file_names_it();
    test_write_into_a_missing_directory_leaves_nothing();
    test_finish_removes_a_failed_write();
    test_write_replaces_an_existing_file();
    nftw(s_dir, s_remove_one, 8, FTW_DEPTH | FTW_PHYS);
    return check_exit();
}
