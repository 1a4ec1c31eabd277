/*  cli.h — the subcommands of the `baton` executable.  Only cli/ prints errors and exits.
    Exit codes: 0 done, 1 runtime failure, 2 bad input. */
#ifndef BATON_CLI_H
#define BATON_CLI_H

#include <stdbool.h>

#define BT_VERSION "0.1.0"

/*  Prints "baton: <message>" and the usage hint to stderr; returns exit code 2. */
int bt_cli_usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

int bt_cli_eval(int argc, char **argv);
int bt_cli_info(int argc, char **argv);
int bt_cli_plan(int argc, char **argv);
int bt_cli_run(int argc, char **argv);
int bt_cli_worker(int argc, char **argv);
int bt_cli_controller(int argc, char **argv);
int bt_cli_report(int argc, char **argv);
int bt_cli_keygen(int argc, char **argv);
int bt_cli_tokenize(int argc, char **argv);
int bt_cli_export(int argc, char **argv);

#endif
