/*  bench_plan.c — the memory planner's trainer prediction (plan.h) beside the allocator peak of one
    real GRPO step (tests/plan_measure.h) for a config, on BENCH_DEVICE (default cpu: the shim's
    memory tracking, one thread; cuda:N: CUDA's caching allocator).  One JSON line.
    Usage: bench_plan CONFIG [key.path=value ...] (the overrides --set takes). */
#include "../tests/check.h"
#include "../tests/plan_measure.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_plan CONFIG [key.path=value ...]\n");
        return 2;
    }
    bt_device dev = bt_cpu();
    const char *name = getenv("BENCH_DEVICE");
    if (name && bt_device_parse(name, &dev) != BT_OK) {
        fprintf(stderr, "bench_plan: BENCH_DEVICE: %s\n", bt_last_error());
        return 2;
    }
    if (dev.type == BT_DEVICE_CPU)
        bt_set_num_threads(1); /* the tracking counts the calling thread's allocations */
    bt_config cfg;
    if (bt_config_load(argv[1], (const char *const *)argv + 2, argc - 2, &cfg) != BT_OK) {
        fprintf(stderr, "bench_plan: %s\n", bt_last_error());
        return 2;
    }
    bt_plan plan;
    char err[256] = "";
    bt_plan_input in = {0};
    if (bt_plan_make(&cfg, &cfg.model, &in, &plan, err, sizeof err) != BT_OK) {
        fprintf(stderr, "bench_plan: %s\n", err);
        return 2;
    }
    int64_t params = 0;
    double measured = plan_measure(&cfg, &plan, dev, &params);
    char dev_name[32];
    bt_device_format(dev, dev_name, sizeof dev_name);
    printf("{\"bench\":\"plan\",\"device\":\"%s\",\"params\":%lld,\"micro_batch\":%lld,"
           "\"planned_bytes\":%.0f,\"measured_bytes\":%.0f,\"error\":%.4f}\n",
           dev_name, (long long)params, (long long)plan.micro_batch, plan.trainer.total, measured,
           (plan.trainer.total - measured) / measured);
    return check_exit();
}
