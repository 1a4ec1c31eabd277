/*  status.c — status names, the thread-local last error, assertions, the log sink. */
#define _POSIX_C_SOURCE 200809L
#include "baton/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char s_last_error[1024];
static _Thread_local bt_status s_last_status;

const char *bt_status_str(bt_status status) {
    switch (status) {
    case BT_OK: return "ok";
    case BT_EINVAL: return "invalid argument";
    case BT_ENOMEM: return "out of memory";
    case BT_EIO: return "i/o error";
    case BT_EFORMAT: return "malformed data";
    case BT_ETORCH: return "libtorch error";
    case BT_ERANGE: return "out of range";
    case BT_EUNSUPPORTED: return "unsupported";
    case BT_ESTATE: return "unexpected worker state";
    default: return "unknown status";
    }
}

const char *bt_last_error(void) { return s_last_error; }

bt_status bt_last_status(void) { return s_last_status; }

void bt_clear_error(void) {
    s_last_error[0] = '\0';
    s_last_status = BT_OK;
}

bt_status bt_fail(bt_status status, const char *fmt, ...) {
    s_last_status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s_last_error, sizeof s_last_error, fmt, ap);
    va_end(ap);
    return status;
}

void bt_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

static bt_log_sink s_sink = NULL;
static void *s_sink_user = NULL;
static bt_log_level s_min_level = BT_LOG_WARN;

void bt_log_set_sink(bt_log_sink sink, void *user, bt_log_level min_level) {
    s_sink = sink;
    s_sink_user = user;
    s_min_level = min_level;
}

void bt_log(bt_log_level level, const char *fmt, ...) {
    if (level < s_min_level)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s_sink) {
        s_sink(level, msg, s_sink_user);
        return;
    }
    static const char *names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "baton %s: %s\n", names[level & 3], msg);
}

double bt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
