/*  bench_dataset.c — opening a large JSONL dataset (issue 9): a file of BATON_BENCH_LINES lines
    (default 10,000,000, about 60 bytes each) is generated in a fresh folder under /tmp, then:
    - read_s: a plain sequential read() of it in 1 MiB chunks, the physical reference (from the
      page cache, as the opens below read it);
    - scan_s: an index build with no record check (lines and offsets only); like the first open,
      on one thread per CPU (cpus), at most 8;
    - first_open_s: bt_source_new_jsonl with no saved index: the index built, every record checked
      (exact verifier), the index saved; first_open_vs_read = first_open_s / read_s;
    - second_open_s: bt_source_new_jsonl again, which maps the saved index;
    - fetch_us: the mean time of one of 10,000 random training examples (parsed on access);
    - RSS (/proc/self/statm) before opening, after each open and after the fetches, and the index
      size.
    The file is fsynced before the measurements (so no write-back runs during them), and each
    figure is the best of 3 runs (the machine may be shared).  Everything it wrote is removed at
    the end.  Prints one JSON line:
      {"bench":"dataset","cpus":C,"lines":N,"file_mb":F,"generate_s":G,"read_s":R,"read_gb_s":B,
       "scan_s":S,"first_open_s":O1,"first_open_vs_read":X,"second_open_s":O2,"index_mb":I,
       "fetch_us":U,"rss_before_mb":..,"rss_first_open_mb":..,"rss_second_open_mb":..,
       "rss_after_fetch_mb":..}
    Usage: bench_dataset (BATON_BENCH_LINES: the line count) */
#define _DEFAULT_SOURCE /* setenv */
#include "baton/blas.h"
#include "baton/dataset.h"
#include "baton/source.h"

#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { REPS = 3 };

static double s_rss_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/*  Lines of about 60 bytes: {"prompt": "What is A+B?", "answer": "C"}, A and B from an LCG. */
static double s_generate(const char *path, long lines, size_t *bytes) {
    double t0 = bt_now();
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    uint64_t state = 1;
    *bytes = 0;
    for (long i = 0; i < lines; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        unsigned a = (unsigned)(state >> 40) % 10000000, b = (unsigned)(state >> 20) % 100000;
        int n = fprintf(f, "{\"prompt\": \"What is %u+%u?\", \"answer\": \"%u\"}\n", a, b, a + b);
        *bytes += n > 0 ? (size_t)n : 0;
    }
    /* flushed to disk, so that write-back does not run during the measurements */
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    return fclose(f) == 0 && ok ? bt_now() - t0 : -1;
}

/*  Seconds to read path sequentially in 1 MiB chunks. */
static double s_read(const char *path) {
    static char buf[1 << 20];
    double t0 = bt_now();
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    unsigned sum = 0;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
        sum += (unsigned char)buf[n - 1]; /* used below, so the reads stay */
    close(fd);
    double s = bt_now() - t0;
    return sum == 0xffffffffu ? -s : s;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    long lines = getenv("BATON_BENCH_LINES") ? atol(getenv("BATON_BENCH_LINES")) : 10000000;
    if (lines < 1)
        lines = 1;
    char dir[64] = "/tmp/baton_bench_dataset_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[128], index[160], cache[128];
    snprintf(path, sizeof path, "%s/data.jsonl", dir);
    snprintf(index, sizeof index, "%s.btidx", path);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    setenv("XDG_CACHE_HOME", cache, 1); /* a refused index would land here, not in ~/.cache */
    size_t bytes = 0;
    double gen_s = s_generate(path, lines, &bytes), read_s = 1e30;
    for (int r = 0; r < REPS; r++) /* the best of REPS, for each figure: a shared machine */
        read_s = fmin(read_s, s_read(path));
    /* an index built within 0.1 s of the file's last change is not saved: wait that out */
    struct timespec pause = {0, 150000000L};
    nanosleep(&pause, NULL);

    int rc = 1;
    double rss_before = s_rss_mb(), scan_s = 1e30, first_s = 1e30, second_s = 1e30;
    double rss_first = 0, rss_second = 0, fetch_us = 0, rss_fetch = 0, t0;
    bt_status st = BT_OK;
    for (int r = 0; r < REPS && st == BT_OK; r++) {
        bt_dataset_config dc = {.path = path, .rules = 0xffffffffu}; /* no check: lines only */
        bt_dataset_t *ds = NULL;
        unlink(index);
        t0 = bt_now();
        st = bt_dataset_open(&dc, &ds);
        scan_s = fmin(scan_s, bt_now() - t0);
        bt_dataset_destroy(&ds);
    }
    bt_source_jsonl_config cfg = {
        .train_path = path, .verifier = BT_SOURCE_VERIFY_EXACT, .seed = 1};
    bt_source_t *task = NULL;
    for (int r = 0; r < REPS && st == BT_OK; r++) { /* no index: build, check, save */
        unlink(index);
        t0 = bt_now();
        st = bt_source_new_jsonl(&cfg, &task);
        first_s = fmin(first_s, bt_now() - t0);
        rss_first = fmax(rss_first, s_rss_mb());
        bt_source_destroy(&task);
    }
    for (int r = 0; r < REPS && st == BT_OK; r++) { /* the saved index */
        bt_source_destroy(&task);
        t0 = bt_now();
        st = bt_source_new_jsonl(&cfg, &task);
        second_s = fmin(second_s, bt_now() - t0);
        rss_second = s_rss_mb();
    }
    if (st == BT_OK) {
        enum { FETCHES = 10000 };
        bt_source_example ex;
        bt_source_example_init(&ex);
        uint64_t state = 7, n = bt_source_epoch_size(task);
        t0 = bt_now();
        for (int i = 0; i < FETCHES && st == BT_OK; i++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            st = bt_source_train_example(task, (state >> 11) % (4 * n), &ex);
        }
        fetch_us = (bt_now() - t0) / FETCHES * 1e6;
        rss_fetch = s_rss_mb();
        bt_source_example_release(&ex);
    }
    bt_source_destroy(&task);
    struct stat is;
    double index_mb = stat(index, &is) == 0 ? (double)is.st_size / (1 << 20) : 0.0;
    if (st != BT_OK)
        fprintf(stderr, "bench_dataset: %s\n", bt_last_error());
    else if (gen_s < 0 || read_s < 0)
        fprintf(stderr, "bench_dataset: cannot write or read %s\n", path);
    else {
        printf("{\"bench\":\"dataset\",\"cpus\":%ld,\"lines\":%ld,\"file_mb\":%.1f,\"generate_s\":%"
               ".3f,"
               "\"read_s\":%.3f,\"read_gb_s\":%.2f,\"scan_s\":%.3f,\"first_open_s\":%.3f,"
               "\"first_open_vs_read\":%.2f,\"second_open_s\":%.4f,\"index_mb\":%.1f,"
               "\"fetch_us\":%.2f,\"rss_before_mb\":%.1f,\"rss_first_open_mb\":%.1f,"
               "\"rss_second_open_mb\":%.1f,\"rss_after_fetch_mb\":%.1f}\n",
               sysconf(_SC_NPROCESSORS_ONLN), lines, (double)bytes / (1 << 20), gen_s, read_s,
               (double)bytes / read_s / 1e9, scan_s, first_s, first_s / read_s, second_s, index_mb,
               fetch_us, rss_before, rss_first, rss_second, rss_fetch);
        rc = 0;
    }
    unlink(index);
    unlink(path);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
