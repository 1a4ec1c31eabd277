/*  worker.c — `baton worker --connect ENDPOINT --role rollout|trainer|eval [--name NAME]`: one
    worker process serving a controller until it says STOP. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "baton/registry.h"
#include "baton/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

int bt_cli_worker(int argc, char **argv) {
    const char *endpoint = getenv("BATON_CONNECT"), *role_name = getenv("BATON_ROLE"), *name = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--connect") && i + 1 < argc)
            endpoint = argv[++i];
        else if (!strcmp(argv[i], "--role") && i + 1 < argc)
            role_name = argv[++i];
        else if (!strcmp(argv[i], "--name") && i + 1 < argc)
            name = argv[++i];
        else
            return bt_cli_usage_error("worker: unexpected argument \"%s\"", argv[i]);
    }
    bt_role role;
    if (!endpoint)
        return bt_cli_usage_error("worker: missing --connect ENDPOINT (or BATON_CONNECT)");
    if (!role_name || bt_role_parse(role_name, &role) != BT_OK)
        return bt_cli_usage_error("worker: --role: %s",
                                  role_name ? bt_last_error() : "missing (or BATON_ROLE)");
    char fallback[64];
    snprintf(fallback, sizeof fallback, "%s-%ld", role_name, (long)getpid());
    void *ctx = zmq_ctx_new();
    if (!ctx) {
        fprintf(stderr, "baton: worker: cannot create a ZeroMQ context\n");
        return 1;
    }
    bt_worker_options opt = {
        .zmq_ctx = ctx, .endpoint = endpoint, .role = role, .name = name ? name : fallback};
    bt_status st = bt_worker_run(&opt);
    if (st != BT_OK)
        fprintf(stderr, "baton: worker %s: %s\n", opt.name, bt_last_error());
    zmq_ctx_term(ctx);
    return st == BT_OK ? 0 : 1;
}
