/*  bench_sandbox.c — sandboxed executions per second: a pool of executor threads, each scoring a
    HumanEval-shaped program (a correct solution and its check) with bt_code_run, against the
    same programs run by a bare python3 (posix_spawn, no sandbox) on the same pool: the ratio is
    what the isolation costs.  A run is one python3 start (about 20 ms of CPU), so executions are
    CPU-bound: the pool has one executor per online CPU (more only queue for the same cores; the
    executor thread itself sleeps in poll while its program runs), and a one-executor line is
    printed beside it for the scaling.  One JSON line per pool size:
      {"bench":"sandbox","executors":N,"runs":R,"isolation":"namespaces","sandbox_per_s":A,
       "bare_per_s":B,"ratio":A/B,"sandbox_ms":M}
    Environment: BATON_BENCH_RUNS (runs per executor and mode, default 40); BATON_BENCH_RSS_MB
    (default 0): memory the bench process holds and has touched first, as a worker holding a model
    does, since every run clones this process (its page tables are copied, its pages marked
    copy-on-write); the line then carries "rss_mb". */
#define _GNU_SOURCE
#include "baton/blas.h"
#include "baton/code.h"
#include "baton/sandbox.h"

#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char s_harness_text[] =
    "def sum_to(n):\n    \"\"\"1 + 2 + ... + n.\"\"\"\n" /* the prompt */
    "def check(candidate):\n    assert candidate(1) == 1\n    assert candidate(100) == 5050\n"
    "check(sum_to)\n";
static const char s_completion[] = "    return n * (n + 1) // 2\n";

typedef struct {
    bool sandboxed;
    int runs, passed;
    bt_sandbox_isolation isolation;
    char harness[512], program[512];
} s_executor;

static void *s_execute(void *arg) {
    s_executor *e = arg;
    bt_sandbox_config cfg;
    bt_sandbox_config_init(&cfg);
    for (int i = 0; i < e->runs; i++) {
        if (e->sandboxed) {
            bt_sandbox_result r;
            if (bt_code_run(&cfg, e->harness, s_completion, strlen(s_completion), &r) == BT_OK)
                e->passed += r.verdict == BT_SANDBOX_PASS;
            e->isolation = r.isolation;
            continue;
        }
        char *argv[] = {"/usr/bin/python3", "-I", "-S", "-B", "-c", e->program, NULL};
        pid_t pid;
        int status = 1;
        if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) == 0 &&
            waitpid(pid, &status, 0) == pid)
            e->passed += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    return NULL;
}

/*  Runs n executors of runs each; returns executions per second, or -1 when one failed. */
static double s_pool(int n, int runs, bool sandboxed, bt_sandbox_isolation *isolation) {
    s_executor *e = calloc((size_t)n, sizeof *e);
    pthread_t *t = calloc((size_t)n, sizeof *t);
    int head = (int)(strstr(s_harness_text, "def check") - s_harness_text); /* the prompt */
    double start = bt_now();
    for (int i = 0; i < n; i++) {
        e[i].sandboxed = sandboxed;
        e[i].runs = runs;
        snprintf(e[i].harness, sizeof e[i].harness, "%d:%s", head, s_harness_text);
        snprintf(e[i].program, sizeof e[i].program, "%.*s%s\n%s", head, s_harness_text,
                 s_completion, s_harness_text + head);
        pthread_create(&t[i], NULL, s_execute, &e[i]);
    }
    int passed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        passed += e[i].passed;
    }
    double rate = passed == n * runs ? n * runs / (bt_now() - start) : -1;
    if (isolation)
        *isolation = e[0].isolation;
    free(e);
    free(t);
    return rate;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    int runs = getenv("BATON_BENCH_RUNS") ? atoi(getenv("BATON_BENCH_RUNS")) : 40;
    size_t rss_mb =
        getenv("BATON_BENCH_RSS_MB") ? strtoull(getenv("BATON_BENCH_RSS_MB"), 0, 10) : 0;
    char *held = rss_mb ? malloc(rss_mb << 20) : NULL;
    if (held)
        memset(held, 1, rss_mb << 20);
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int sizes[2] = {1, cores > 1 ? cores : 1};
    for (int k = 0; k < (cores > 1 ? 2 : 1); k++) {
        int n = sizes[k];
        bt_sandbox_isolation iso = BT_SANDBOX_PLAIN;
        double sandbox = s_pool(n, runs, true, &iso), bare = s_pool(n, runs, false, NULL);
        if (sandbox < 0 || bare < 0) {
            fprintf(stderr, "bench_sandbox: a correct solution did not pass (%s)\n",
                    bt_last_error());
            return 1;
        }
        printf("{\"bench\":\"sandbox\",\"executors\":%d,\"runs\":%d,\"isolation\":\"%s\","
               "\"sandbox_per_s\":%.1f,\"bare_per_s\":%.1f,\"ratio\":%.3f,\"sandbox_ms\":%.2f,"
               "\"rss_mb\":%zu}\n",
               n, n * runs, iso == BT_SANDBOX_NAMESPACES ? "namespaces" : "plain", sandbox, bare,
               sandbox / bare, 1000.0 * n / sandbox, held ? rss_mb : 0);
    }
    free(held);
    return 0;
}
