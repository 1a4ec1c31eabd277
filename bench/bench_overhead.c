/*  bench_overhead.c — orchestration overhead of a real run: the demo config (configs/arith.json,
    shortened) through the controller and worker threads over ZeroMQ.  Overhead = wall time not
    spent in model compute on the critical path (scheduling, messages, copies, advantages,
    logging), as a fraction of the wall time.  Target <= 5%.  Prints one JSON line.
    Environment: BATON_SOURCE_DIR (default "."), BATON_BENCH_STEPS (default 20). */
#define _POSIX_C_SOURCE 200809L
#include "baton/baton.h"
#include "baton/blas.h"
#include "baton/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    const char *src = getenv("BATON_SOURCE_DIR") ? getenv("BATON_SOURCE_DIR") : ".";
    const char *steps = getenv("BATON_BENCH_STEPS") ? getenv("BATON_BENCH_STEPS") : "20";
    char path[1024], set_steps[64], *text = NULL;
    snprintf(path, sizeof path, "%s/configs/arith.json", src);
    snprintf(set_steps, sizeof set_steps, "grpo.steps=%s", steps);
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK) {
        fprintf(stderr, "bench_overhead: %s\n", bt_last_error());
        return 1;
    }
    const char *sets[] = {set_steps, "sft.steps=20", "eval.every_steps=10"};
    bt_run_t *run = bt_run_new(text, "arith.json", sets, 3);
    free(text);
    if (!run) {
        fprintf(stderr, "bench_overhead: %s\n", bt_last_error());
        return 1;
    }
    bt_run_set_dir(run, "/tmp/baton-bench-overhead");
    bt_run_set_overwrite(run); /* the previous measurement's run */
    double t0 = bt_now();
    bt_status st = bt_run_start(run);
    for (bool done = false; st == BT_OK && !done;)
        st = bt_run_step(run, &done);
    double wall = bt_now() - t0; /* up to the last step: stopping the workers is not the run */
    if (st == BT_OK)
        st = bt_run_finish(run);
    if (st != BT_OK) {
        fprintf(stderr, "bench_overhead: %s\n", bt_last_error());
        bt_run_destroy(&run);
        return 1;
    }
    bt_controller_stats s = bt_run_stats(run);
    printf("{\"bench\":\"orchestration_overhead\",\"steps\":%s,\"wall_s\":%.3f,\"compute_s\":%.3f,"
           "\"in_tasks_s\":%.3f,\"overhead_s\":%.3f,\"overhead_frac\":%.4f}\n",
           steps, wall, s.compute_s, s.tasks_s, wall - s.compute_s, (wall - s.compute_s) / wall);
    bt_run_destroy(&run);
    return 0;
}
