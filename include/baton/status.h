/*  status.h — status codes, the thread-local last error, assertions, logging and the clock.
    Threading: the last error is per thread; the log sink is process-wide (set it before threads start).
    Lifetime: static; nothing to create or destroy. */
#ifndef BATON_STATUS_H
#define BATON_STATUS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Negative values are errors.  Values are on disk and on the wire: append only. */
typedef int32_t bt_status;
enum {
    BT_OK = 0,
    BT_EINVAL = -1,      /* bad argument or bad input data */
    BT_ENOMEM = -2,      /* allocation failed */
    BT_EIO = -3,         /* file or socket I/O failed */
    BT_EFORMAT = -4,     /* malformed file or message */
    BT_ETORCH = -5,      /* libtorch raised an error */
    BT_ERANGE = -6,      /* a size or index out of bounds */
    BT_EUNSUPPORTED = -7, /* feature not compiled in or not available */
    BT_ESTATE = -8        /* a worker's state is not the one the job expects (a trainer that
                             holds another version): the job needs a restore, not a retry */
};

/*  Short name of a status code ("ok", "invalid argument", ...).  Static string. */
const char *bt_status_str(bt_status status);

/*  The detail of the last error on this thread.  Borrowed: valid until the next error on this thread. */
const char *bt_last_error(void);
/*  The status that error was recorded with (BT_OK when there is none): a caller that got a
    generic failure from a chain of calls (a NULL tensor) learns from it what happened first,
    e.g. BT_ENOMEM. */
bt_status bt_last_status(void);
/*  Records a printf-style detail as this thread's last error and returns status, so callers can
    write `return bt_fail(BT_EINVAL, "...", ...)`. */
bt_status bt_fail(bt_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void bt_clear_error(void);

/*  Returns from the calling function when expr (a bt_status) is an error. */
#define BT_TRY(expr)                                                                               \
    do {                                                                                           \
        bt_status bt_try_status_ = (expr);                                                         \
        if (bt_try_status_ != BT_OK)                                                               \
            return bt_try_status_;                                                                 \
    } while (0)

/*  Seconds on the monotonic clock (for durations and timers, not dates). */
double bt_now(void);

/*  Programmer errors: never compiled out; prints file:line and the expression, then aborts. */
#define BT_ASSERT(expr)                                                                            \
    ((expr) ? (void)0 : bt_assert_fail(#expr, __FILE__, __LINE__))
void bt_assert_fail(const char *expr, const char *file, int line)
#if defined(__GNUC__)
    __attribute__((noreturn))
#endif
    ;

typedef enum bt_log_level {
    BT_LOG_DEBUG = 0,
    BT_LOG_INFO = 1,
    BT_LOG_WARN = 2,
    BT_LOG_ERROR = 3
} bt_log_level;

typedef void (*bt_log_sink)(bt_log_level level, const char *msg, void *user);
/*  Library code logs here, never to stdout.  Default sink: stderr, level >= BT_LOG_WARN.
    A NULL sink restores the default. */
void bt_log_set_sink(bt_log_sink sink, void *user, bt_log_level min_level);
void bt_log(bt_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
