/*  worker.c — `baton worker --connect ENDPOINT --role rollout|trainer|eval [--name NAME]
    [--device DEV] [--key FILE --server-key FILE | --insecure] [--join-timeout SECONDS]`: one
    worker process serving a controller until it says STOP. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/registry.h"
#include "baton/security.h"
#include "baton/tensor.h"
#include "baton/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

int bt_cli_worker(int argc, char **argv) {
    const char *endpoint = getenv("BATON_CONNECT"), *role_name = getenv("BATON_ROLE"), *name = NULL;
    const char *key = getenv("BATON_KEY"), *server_key = getenv("BATON_SERVER_KEY");
    const char *device = getenv("BATON_DEVICE");
    bool insecure = false, key_flag = false;
    double join_timeout_s = 30;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--connect") && i + 1 < argc)
            endpoint = argv[++i];
        else if (!strcmp(argv[i], "--role") && i + 1 < argc)
            role_name = argv[++i];
        else if (!strcmp(argv[i], "--name") && i + 1 < argc)
            name = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--key") && i + 1 < argc) {
            key = argv[++i];
            key_flag = true;
        } else if (!strcmp(argv[i], "--server-key") && i + 1 < argc) {
            server_key = argv[++i];
            key_flag = true;
        } else if (!strcmp(argv[i], "--insecure"))
            insecure = true;
        else if (!strcmp(argv[i], "--join-timeout") && i + 1 < argc) {
            char *end = NULL;
            join_timeout_s = strtod(argv[++i], &end);
            if (!end || *end || !(join_timeout_s >= 0.001 && join_timeout_s <= 86400))
                return bt_cli_usage_error("worker: --join-timeout: expected seconds in [0.001, "
                                          "86400], "
                                          "got \"%s\"",
                                          argv[i]);
        } else
            return bt_cli_usage_error("worker: unexpected argument \"%s\"", argv[i]);
    }
    bt_role role;
    if (!endpoint)
        return bt_cli_usage_error("worker: missing --connect ENDPOINT (or BATON_CONNECT)");
    if (!role_name || bt_role_parse(role_name, &role) != BT_OK)
        return bt_cli_usage_error("worker: --role: %s",
                                  role_name ? bt_last_error() : "missing (or BATON_ROLE)");
    bt_device parsed;
    if (device && bt_device_parse(device, &parsed) != BT_OK)
        return bt_cli_usage_error("worker: --device: %s", bt_last_error());
    if (insecure && key_flag)
        return bt_cli_usage_error("worker: --insecure and --key/--server-key exclude each other");
    if (insecure) /* explicit: keys in the environment are not used */
        key = server_key = NULL;
    if ((key != NULL) != (server_key != NULL))
        return bt_cli_usage_error("worker: CURVE needs both --key FILE (this worker's secret key) "
                                  "and --server-key FILE (the controller's public key)");
    if (!key && !insecure && !strncmp(endpoint, "tcp://", 6))
        return bt_cli_usage_error("worker: %s: tcp:// needs CURVE keys (--key FILE --server-key "
                                  "FILE, from `baton keygen`) or, on a trusted network, --insecure",
                                  endpoint);
    bt_curve_keys keys = {0};
    if (key && (bt_curve_available() != BT_OK || bt_key_read_secret(key, &keys) != BT_OK ||
                bt_key_read_public(server_key, keys.server_key) != BT_OK))
        return bt_cli_usage_error("worker: %s", bt_last_error());
    char fallback[64];
    snprintf(fallback, sizeof fallback, "%s-%ld", role_name, (long)getpid());
    void *ctx = zmq_ctx_new();
    if (!ctx) {
        fprintf(stderr, "baton: worker: cannot create a ZeroMQ context\n");
        return 1;
    }
    bt_worker_stats stats = {0};
    bt_worker_options opt = {.zmq_ctx = ctx,
                             .endpoint = endpoint,
                             .role = role,
                             .name = name ? name : fallback,
                             .device = device,
                             .join_timeout_ms = (int64_t)(join_timeout_s * 1000),
                             .curve = key ? &keys : NULL,
                             .stats = &stats};
    bt_status st = bt_worker_run(&opt);
    if (st != BT_OK) /* never an empty error line */
        fprintf(stderr, "baton: worker %s: %s\n", opt.name,
                bt_last_error()[0] ? bt_last_error() : bt_status_str(st));
    char memory[96] = ""; /* CUDA only: the CPU's figure is the process's RSS */
    if (stats.device_peak > 0)
        snprintf(memory, sizeof memory, ", peak %s memory %.0f MiB", stats.device,
                 (double)stats.device_peak / (1 << 20));
    if (stats.joins)
        printf("worker %s: %lld tasks, %lld join%s (%lld tasks since the last)%s\n", opt.name,
               (long long)stats.tasks, (long long)stats.joins, stats.joins > 1 ? "s" : "",
               (long long)stats.tasks_last_join, memory);
    zmq_ctx_term(ctx);
    return st == BT_OK ? 0 : 1;
}
