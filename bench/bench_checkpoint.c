/*  bench_checkpoint.c — what a full checkpoint costs the training loop: GRPO steps of the demo
    config (configs/arith.json, evaluation off) with a full checkpoint every 5 steps, written by the
    background writer.  Compares the wall time of steps that overlap a save (the snapshot taken at
    the end of the previous step included) with the other steps.  Target: overlapping steps take
    <= 1.1x a normal step.  Prints one JSON line.
    Environment: BATON_SOURCE_DIR (default "."), BATON_BENCH_STEPS (default 40),
    BATON_BENCH_HIDDEN (default: the demo's 128; 512 makes a 4x wider model). */
#define _POSIX_C_SOURCE 200809L
#include "baton/baton.h"
#include "baton/blas.h"
#include "baton/fileio.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S_MAX = 4096 };

typedef struct {
    double start, end;
} s_span;

/*  Train-line end times by step, and the spans of the checkpoint saves, from the run directory. */
static int s_read(const char *dir, double *t_end, int max_step, s_span *saves, int *n_saves) {
    char path[256], *text = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bt_file_read(path, 1 << 26, &text, NULL) != BT_OK)
        return -1;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(j, "kind"));
        int step = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "step"));
        if (kind && !strcmp(kind, "train") && step >= 0 && step <= max_step)
            t_end[step] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "time"));
        cJSON_Delete(j);
    }
    free(text);
    snprintf(path, sizeof path, "%s/events.jsonl", dir);
    if (bt_file_read(path, 1 << 26, &text, NULL) != BT_OK)
        return -1;
    *n_saves = 0;
    for (char *l = strtok(text, "\n"); l && *n_saves < S_MAX; l = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(l);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
        if (ev && !strcmp(ev, "checkpoint_saved")) {
            double end = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "time"));
            double secs = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "seconds"));
            /* the event is written when the loop next polls: the save ended no later */
            saves[(*n_saves)++] = (s_span){end - secs, end};
        }
        cJSON_Delete(j);
    }
    free(text);
    return 0;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    const char *src = getenv("BATON_SOURCE_DIR") ? getenv("BATON_SOURCE_DIR") : ".";
    int steps = getenv("BATON_BENCH_STEPS") ? atoi(getenv("BATON_BENCH_STEPS")) : 40;
    const char *hidden = getenv("BATON_BENCH_HIDDEN");
    if (steps < 10 || steps >= S_MAX) {
        fprintf(stderr, "bench_checkpoint: BATON_BENCH_STEPS must be in [10, %d)\n", S_MAX);
        return 2;
    }
    char path[1024], set_steps[64], set_hidden[64], set_inter[64], *text = NULL;
    snprintf(path, sizeof path, "%s/configs/arith.json", src);
    snprintf(set_steps, sizeof set_steps, "grpo.steps=%d", steps);
    snprintf(set_hidden, sizeof set_hidden, "model.hidden_size=%s", hidden ? hidden : "128");
    snprintf(set_inter, sizeof set_inter, "model.intermediate_size=%d",
             hidden ? 4 * atoi(hidden) : 352);
    if (bt_file_read(path, 1 << 20, &text, NULL) != BT_OK) {
        fprintf(stderr, "bench_checkpoint: %s\n", bt_last_error());
        return 1;
    }
    const char *dir = "/tmp/baton-bench-checkpoint";
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0)
        return 1;
    const char *sets[] = {set_steps,
                          set_hidden,
                          set_inter,
                          "sft.steps=5",
                          "workers.eval=0",
                          "grpo.dynamic_sampling=false",
                          "checkpoint.full_every_steps=5",
                          "checkpoint.keep_last=2"};
    bt_run_t *run = bt_run_new(text, "arith.json", sets, (int)(sizeof sets / sizeof *sets));
    free(text);
    if (!run) {
        fprintf(stderr, "bench_checkpoint: %s\n", bt_last_error());
        return 1;
    }
    bt_run_set_dir(run, dir);
    bt_status st = bt_run_start(run);
    for (bool done = false; st == BT_OK && !done;)
        st = bt_run_step(run, &done);
    if (st == BT_OK)
        st = bt_run_finish(run);
    bt_run_destroy(&run);
    if (st != BT_OK) {
        fprintf(stderr, "bench_checkpoint: %s\n", bt_last_error());
        return 1;
    }
    static double t_end[S_MAX];
    static s_span saves[S_MAX];
    int n_saves = 0;
    if (s_read(dir, t_end, steps, saves, &n_saves) != 0) {
        fprintf(stderr, "bench_checkpoint: %s\n", bt_last_error());
        return 1;
    }
    /* step k spans [t_end[k-1], t_end[k]]; steps 1 and 2 warm up and are left out */
    double sum[2] = {0, 0};
    int n[2] = {0, 0};
    for (int k = 3; k <= steps; k++) {
        bool overlap = false;
        for (int s = 0; s < n_saves; s++)
            overlap |= saves[s].start < t_end[k] && saves[s].end > t_end[k - 1];
        /* the snapshot of step k-1 (a multiple of 5) is taken at the start of step k */
        overlap |= (k - 1) % 5 == 0;
        sum[overlap] += t_end[k] - t_end[k - 1];
        n[overlap]++;
    }
    double normal = n[0] ? sum[0] / n[0] : 0, over = n[1] ? sum[1] / n[1] : 0;
    printf("{\"bench\":\"checkpoint_overlap\",\"hidden\":%s,\"steps\":%d,\"saves\":%d,"
           "\"normal_step_s\":%.4f,\"overlapping_step_s\":%.4f,\"n_normal\":%d,"
           "\"n_overlapping\":%d,\"ratio\":%.3f}\n",
           hidden ? hidden : "128", steps, n_saves, normal, over, n[0], n[1],
           normal > 0 ? over / normal : 0);
    return 0;
}
