/*  check.h — the assertions every test uses.  A failed check prints file:line and what differed,
    the test keeps going, and main() returns check_exit() (non-zero when any check failed). */
#ifndef BATON_TESTS_CHECK_H
#define BATON_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int s_check_failures = 0;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            s_check_failures++;                                                                    \
        }                                                                                          \
    } while (0)

/*  Checks a bt_status-returning call and prints bt_last_error() when it fails. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        int _st = (expr);                                                                          \
        if (_st != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr, _st,         \
                    bt_last_error());                                                              \
            s_check_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double _a = (double)(a), _b = (double)(b), _t = (double)(tol);                             \
        if (!(fabs(_a - _b) <= _t)) {                                                              \
            fprintf(stderr, "%s:%d: CHECK_NEAR(%s, %s): %.17g vs %.17g (diff %.3g > %.3g)\n",     \
                    __FILE__, __LINE__, #a, #b, _a, _b, fabs(_a - _b), _t);                        \
            s_check_failures++;                                                                    \
        }                                                                                          \
    } while (0)

/*  Relative difference |a-b| / max(|a|,|b|,tiny) <= tol. */
#define CHECK_REL(a, b, tol)                                                                       \
    do {                                                                                           \
        double _a = (double)(a), _b = (double)(b), _t = (double)(tol);                             \
        double _m = fmax(fmax(fabs(_a), fabs(_b)), 1e-300);                                        \
        if (!(fabs(_a - _b) / _m <= _t)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK_REL(%s, %s): %.17g vs %.17g (rel %.3g > %.3g)\n",       \
                    __FILE__, __LINE__, #a, #b, _a, _b, fabs(_a - _b) / _m, _t);                   \
            s_check_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                            \
    do {                                                                                           \
        const char *_h = (hay), *_n = (needle);                                                    \
        if (!_h || !strstr(_h, _n)) {                                                              \
            fprintf(stderr, "%s:%d: expected \"%s\" to contain \"%s\"\n", __FILE__, __LINE__,      \
                    _h ? _h : "(null)", _n);                                                       \
            s_check_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_STR_EQ(got, want)                                                                    \
    do {                                                                                           \
        const char *_g = (got), *_w = (want);                                                      \
        if (!_g || strcmp(_g, _w) != 0) {                                                          \
            fprintf(stderr, "%s:%d: expected \"%s\", got \"%s\"\n", __FILE__, __LINE__, _w,         \
                    _g ? _g : "(null)");                                                           \
            s_check_failures++;                                                                    \
        }                                                                                          \
    } while (0)

static inline int check_exit(void) {
    if (s_check_failures)
        fprintf(stderr, "%d check(s) failed\n", s_check_failures);
    return s_check_failures ? 1 : 0;
}

#endif
