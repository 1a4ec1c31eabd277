/*  tools.c — the built-in tools behind one bt_env (include/baton/tools.h): the calculator, a
    recursive-descent parser that evaluates as it parses, in exact 64-bit rationals while they
    fit and in doubles after; the python tool, one bt_sandbox_run per call, a step's calls on a
    few threads at once. */
#define _GNU_SOURCE /* memmem */
#include "baton/tools.h"

#include "baton/buf.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_WORKERS_MAX 64 /* python_workers' bound */

typedef __int128 s_i128;
typedef unsigned __int128 s_u128;

/* ---- the calculator's numbers ------------------------------------------------------------- */

typedef enum { S_EXACT, S_DOUBLE, S_ERROR } s_kind;

/*  A value: EXACT num/den in lowest terms, den >= 1, |num| <= INT64_MAX; DOUBLE x, finite;
    ERROR (the parser holds the message). */
typedef struct {
    s_kind kind;
    int64_t num, den;
    double x;
} s_value;

static s_value s_error_value(void) {
    return (s_value){.kind = S_ERROR};
}

static s_value s_double_value(double x) {
    return (s_value){.kind = S_DOUBLE, .x = x};
}

static s_u128 s_gcd(s_u128 a, s_u128 b) {
    while (b) {
        s_u128 t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/*  num/den (den != 0) in lowest terms when it fits in an EXACT value; false when it does not. */
static bool s_make(s_i128 num, s_i128 den, s_value *v) {
    bool negative = (num < 0) != (den < 0);
    s_u128 n = num < 0 ? -(s_u128)num : (s_u128)num;
    s_u128 d = den < 0 ? -(s_u128)den : (s_u128)den;
    s_u128 g = s_gcd(n, d);
    n /= g;
    d /= g;
    if (n > INT64_MAX || d > INT64_MAX)
        return false;
    *v = (s_value){.kind = S_EXACT, .num = negative ? -(int64_t)n : (int64_t)n, .den = (int64_t)d};
    return true;
}

static int s_bits(uint64_t x) {
    return x ? 64 - __builtin_clzll(x) : 0;
}

/*  The double nearest num/den, rounded once (as Python's float(Fraction) is): a quotient of at
    least 62 bits with the remainder as a sticky bit, converted by the one rounding of uint64 to
    double.  (double)num / den would round up to three times. */
static double s_exact_double(int64_t num, int64_t den) {
    if (den == 1)
        return (double)num;
    uint64_t n = num < 0 ? (uint64_t)-num : (uint64_t)num;
    int shift = 63 - s_bits(n) + s_bits((uint64_t)den); /* >= 1; quotient in [2^62, 2^64) */
    s_u128 big = (s_u128)n << shift;
    uint64_t q = (uint64_t)(big / (uint64_t)den) | (big % (uint64_t)den != 0);
    double x = ldexp((double)q, -shift);
    return num < 0 ? -x : x;
}

static double s_to_double(s_value v) {
    return v.kind == S_EXACT ? s_exact_double(v.num, v.den) : v.x;
}

/* ---- the calculator's parser -------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t len, pos;
    int depth, max_depth; /* nesting of the unary being parsed: 0 at the top */
    char syntax[96];      /* the syntax error that stopped the parse; "" while none */
    char arith[64]; /* the first arithmetic error (the parse goes on to find a syntax error) */
} s_calc;

static void s_arith(s_calc *c, const char *msg) {
    if (!c->arith[0])
        snprintf(c->arith, sizeof c->arith, "%s", msg);
}

/*  The value of a double operation: overflow to infinity and NaN (a negative number to a
    fractional power) are errors. */
static s_value s_checked(s_calc *c, double x) {
    if (isnan(x)) {
        s_arith(c, "not a real number");
        return s_error_value();
    }
    if (isinf(x)) {
        s_arith(c, "overflow");
        return s_error_value();
    }
    return s_double_value(x == 0 ? 0.0 : x); /* no "-0" */
}

/*  The parse stops at pos: what stands there is not what the grammar allows. */
static s_value s_unexpected(s_calc *c) {
    if (c->pos >= c->len) {
        snprintf(c->syntax, sizeof c->syntax, "the expression ends early");
    } else {
        unsigned char ch = (unsigned char)c->s[c->pos];
        char shown[8];
        if (ch >= 0x20 && ch < 0x7f)
            snprintf(shown, sizeof shown, "'%c'", ch);
        else
            snprintf(shown, sizeof shown, "0x%02x", ch);
        snprintf(c->syntax, sizeof c->syntax, "unexpected %s at character %zu%s", shown, c->pos + 1,
                 ch == '^' ? " (a power is **)" : "");
    }
    return s_error_value();
}

static void s_skip_space(s_calc *c) {
    while (c->pos < c->len && strchr(" \t\r\n", c->s[c->pos]) && c->s[c->pos])
        c->pos++;
}

static bool s_digit(char ch) {
    return ch >= '0' && ch <= '9';
}

/*  digits ['.' digits] | '.' digits: exact when its digits fit 128 bits and its lowest terms fit
    an EXACT value, else strtod's double of the same text. */
static s_value s_number(s_calc *c) {
    size_t start = c->pos, end = c->pos, dot = SIZE_MAX;
    while (end < c->len && (s_digit(c->s[end]) || (c->s[end] == '.' && dot == SIZE_MAX))) {
        if (c->s[end] == '.')
            dot = end;
        end++;
    }
    if (end == start + (dot != SIZE_MAX)) /* no digit at all: "." */
        return s_unexpected(c);
    c->pos = end;
    size_t last = end; /* one past the last digit that counts: trailing fraction zeros do not */
    if (dot != SIZE_MAX)
        while (last > dot + 1 && c->s[last - 1] == '0')
            last--;
    s_u128 m = 0, p = 1;
    int significant = 0, decimals = 0;
    for (size_t i = start; i < last; i++) {
        if (i == dot)
            continue;
        if (dot != SIZE_MAX && i > dot)
            decimals++, p *= decimals <= 38 ? 10 : 1;
        significant += significant || c->s[i] != '0';
        m = significant <= 38 ? m * 10 + (unsigned)(c->s[i] - '0') : m;
    }
    s_value v;
    if (significant <= 38 && decimals <= 38 && s_make((s_i128)m, (s_i128)p, &v))
        return v;
    char text[64];
    char *copy = end - start < sizeof text ? text : malloc(end - start + 1);
    if (!copy) {
        snprintf(c->syntax, sizeof c->syntax, "out of memory");
        return s_error_value();
    }
    memcpy(copy, c->s + start, end - start);
    copy[end - start] = '\0';
    double x = strtod(copy, NULL);
    if (copy != text)
        free(copy);
    return s_checked(c, x);
}

static s_value s_expr(s_calc *c);
static s_value s_unary(s_calc *c);

/*  '(' expr ')' | number */
static s_value s_atom(s_calc *c) {
    s_skip_space(c);
    if (c->pos < c->len && c->s[c->pos] == '(') {
        c->pos++;
        s_value v = s_expr(c);
        if (c->syntax[0])
            return v;
        s_skip_space(c);
        if (c->pos >= c->len || c->s[c->pos] != ')')
            return s_unexpected(c);
        c->pos++;
        return v;
    }
    if (c->pos < c->len && (s_digit(c->s[c->pos]) || c->s[c->pos] == '.'))
        return s_number(c);
    return s_unexpected(c);
}

/*  a ** b: exact for an exact base and an integer exponent while the result fits. */
static s_value s_pow(s_calc *c, s_value a, s_value b) {
    if (a.kind == S_ERROR || b.kind == S_ERROR)
        return s_error_value();
    if (a.kind == S_EXACT && b.kind == S_EXACT && b.den == 1) {
        if (a.num == 0 && b.num < 0) {
            s_arith(c, "division by zero");
            return s_error_value();
        }
        uint64_t e = b.num < 0 ? (uint64_t)-b.num : (uint64_t)b.num;
        uint64_t bn = a.num < 0 ? (uint64_t)-a.num : (uint64_t)a.num, bd = (uint64_t)a.den;
        uint64_t rn = 1, rd = 1;
        bool fits = true;
        /* square and multiply; a square that overflows would be a factor of the result */
        for (uint64_t k = e; k && fits; k >>= 1) {
            if (k & 1) {
                s_u128 n = (s_u128)rn * bn, d = (s_u128)rd * bd;
                fits = n <= INT64_MAX && d <= INT64_MAX;
                rn = (uint64_t)n, rd = (uint64_t)d;
            }
            if (k > 1 && fits) {
                s_u128 n = (s_u128)bn * bn, d = (s_u128)bd * bd;
                fits = n <= INT64_MAX && d <= INT64_MAX;
                bn = (uint64_t)n, bd = (uint64_t)d;
            }
        }
        if (fits) {
            bool negative = a.num < 0 && (e & 1);
            s_i128 top = b.num < 0 ? rd : rn, bottom = b.num < 0 ? rn : rd; /* a^-e = 1/a^e */
            s_value v;
            if (s_make(negative ? -top : top, bottom, &v))
                return v;
        }
    }
    double x = s_to_double(a), y = s_to_double(b);
    if (x == 0 && y < 0) {
        s_arith(c, "division by zero");
        return s_error_value();
    }
    return s_checked(c, pow(x, y));
}

/*  atom ['**' unary]: right-associative, and -2**2 is -(2**2), as in Python. */
static s_value s_power(s_calc *c) {
    s_value a = s_atom(c);
    if (c->syntax[0])
        return a;
    s_skip_space(c);
    if (c->pos + 1 < c->len && c->s[c->pos] == '*' && c->s[c->pos + 1] == '*') {
        c->pos += 2;
        s_value b = s_unary(c);
        if (c->syntax[0])
            return b;
        return s_pow(c, a, b);
    }
    return a;
}

/*  ('-' | '+') unary | power; every level of nesting passes here once, so depth counts it. */
static s_value s_unary(s_calc *c) {
    if (++c->depth > c->max_depth) {
        snprintf(c->syntax, sizeof c->syntax, "nested deeper than %d", c->max_depth);
        return s_error_value();
    }
    s_skip_space(c);
    s_value v;
    if (c->pos < c->len && (c->s[c->pos] == '-' || c->s[c->pos] == '+')) {
        bool minus = c->s[c->pos++] == '-';
        v = s_unary(c);
        if (minus && v.kind == S_EXACT)
            v.num = -v.num;
        else if (minus && v.kind == S_DOUBLE)
            v.x = v.x == 0 ? 0.0 : -v.x;
    } else {
        v = s_power(c);
    }
    c->depth--;
    return v;
}

/*  a op b for + - * / %, exact while it fits (128-bit products of 64-bit parts cannot overflow). */
static s_value s_binary(s_calc *c, char op, s_value a, s_value b) {
    if (a.kind == S_ERROR || b.kind == S_ERROR)
        return s_error_value();
    bool zero = b.kind == S_EXACT ? b.num == 0 : b.x == 0;
    if ((op == '/' || op == '%') && zero) {
        s_arith(c, "division by zero");
        return s_error_value();
    }
    if (a.kind == S_EXACT && b.kind == S_EXACT) {
        s_i128 an = a.num, ad = a.den, bn = b.num, bd = b.den, n = 0, d = 1;
        switch (op) {
        case '+': n = an * bd + bn * ad, d = ad * bd; break;
        case '-': n = an * bd - bn * ad, d = ad * bd; break;
        case '*': n = an * bn, d = ad * bd; break;
        case '/': n = an * bd, d = ad * bn; break;
        default: { /* floored: (p/q) mod (r/s) = (ps mod rq) / qs, with the divisor's sign */
            s_i128 x = an * bd, y = bn * ad;
            n = x % y;
            if (n != 0 && (n < 0) != (y < 0))
                n += y;
            d = ad * bd;
        }
        }
        s_value v;
        if (s_make(n, d, &v))
            return v;
    }
    double x = s_to_double(a), y = s_to_double(b), r = 0;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/': r = x / y; break;
    default: /* Python's float %: fmod, moved to the divisor's sign */
        r = fmod(x, y);
        if (r != 0 && (r < 0) != (y < 0))
            r += y;
    }
    return s_checked(c, r);
}

/*  unary (('*' | '/' | '%') unary)* */
static s_value s_term(s_calc *c) {
    s_value v = s_unary(c);
    while (!c->syntax[0]) {
        s_skip_space(c);
        if (c->pos >= c->len || !strchr("*/%", c->s[c->pos]) || !c->s[c->pos])
            break;
        char op = c->s[c->pos++];
        s_value b = s_unary(c);
        if (c->syntax[0])
            return b;
        v = s_binary(c, op, v, b);
    }
    return v;
}

/*  term (('+' | '-') term)* */
static s_value s_expr(s_calc *c) {
    s_value v = s_term(c);
    while (!c->syntax[0]) {
        s_skip_space(c);
        if (c->pos >= c->len || (c->s[c->pos] != '+' && c->s[c->pos] != '-'))
            break;
        char op = c->s[c->pos++];
        s_value b = s_term(c);
        if (c->syntax[0])
            return b;
        v = s_binary(c, op, v, b);
    }
    return v;
}

/*  Appends the calculator's answer to expr[0, len) to b; *error when it is an error. */
static void s_calculate(const bt_tools_config *cfg, const char *expr, size_t len, bt_buf *b,
                        bool *error) {
    *error = true;
    if (len > cfg->calc_max_length) {
        bt_buf_printf(b, "error: the expression is longer than %zu bytes", cfg->calc_max_length);
        return;
    }
    s_calc c = {.s = expr, .len = len, .depth = -1, .max_depth = cfg->calc_max_depth};
    s_skip_space(&c);
    if (c.pos == len) {
        bt_buf_puts(b, "error: empty expression");
        return;
    }
    s_value v = s_expr(&c);
    if (!c.syntax[0]) {
        s_skip_space(&c);
        if (c.pos < len)
            s_unexpected(&c);
    }
    if (c.syntax[0] || c.arith[0]) {
        bt_buf_printf(b, "error: %s", c.syntax[0] ? c.syntax : c.arith);
        return;
    }
    *error = false;
    if (v.kind == S_EXACT && v.den == 1) {
        bt_buf_printf(b, "%lld", (long long)v.num);
        return;
    }
    char text[BT_BUF_NUMBER_LEN];
    bt_buf_puts(b, bt_buf_format_number(text, s_to_double(v), 1));
    /* integral but not exact: "2.0", so that only an exact integer looks like one */
    if (!strpbrk(text, ".e"))
        bt_buf_puts(b, ".0");
}

/* ---- the python tool ---------------------------------------------------------------------- */

/*  The program around a call's code: it runs the code as __main__ from a file named
    "<python>", with exit() and quit() (python3 -S leaves them out); on an exception it flushes
   stdout first (a pipe buffers it, so the traceback would come before the output), then prints the
   traceback without the wrapper's own frame, with the code's lines, and exits 1.  The code travels
   as a bytes literal, so any byte is safe. */
static const char s_wrapper_head[] = "import sys as _sys\n_src = b'";
static const char s_wrapper_tail[] =
    "'\n"
    "try:\n"
    "    _main = {'__name__': '__main__', 'exit': _sys.exit, 'quit': _sys.exit}\n"
    "    exec(compile(_src, '<python>', 'exec'), _main)\n"
    "except SystemExit:\n"
    "    raise\n"
    "except BaseException as _e:\n"
    "    _sys.stdout.flush()\n"
    "    import linecache, traceback\n"
    "    _lines = _src.decode('utf-8', 'replace').splitlines(True)\n"
    "    linecache.cache['<python>'] = (len(_src), None, _lines, '<python>')\n"
    "    traceback.print_exception(type(_e), _e, _e.__traceback__.tb_next)\n"
    "    _sys.exit(1)\n";

static void s_wrap(const char *code, size_t len, bt_buf *program) {
    bt_buf_truncate(program, 0);
    bt_buf_puts(program, s_wrapper_head);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)code[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'')
            bt_buf_put(program, &code[i], 1);
        else
            bt_buf_printf(program, "\\x%02x", ch);
    }
    bt_buf_puts(program, s_wrapper_tail);
}

typedef enum { S_CALC, S_PYTHON, S_TOOLS } s_tool;

/*  One episode's turn: the call it holds, and for python the run's result. */
typedef struct {
    s_tool tool; /* S_TOOLS: none (the model answered) */
    const char *body;
    size_t body_len;
    bt_sandbox_result *run; /* python: where its result goes */
    bt_status status;       /* python: bt_sandbox_run's */
    char error[256];        /* ... and its last error when it failed */
} s_call;

/*  The python calls of one step, shared by the threads that run them. */
typedef struct {
    const bt_sandbox_config *sandbox;
    s_call **calls;
    int64_t n;
    atomic_llong next; /* the next call to take */
} s_runs;

/*  Takes calls until none is left.  The sandbox lets any thread run at any time (sandbox.h). */
static void *s_runner(void *arg) {
    s_runs *runs = arg;
    bt_buf program = {0};
    for (long long i; (i = atomic_fetch_add(&runs->next, 1)) < runs->n;) {
        s_call *c = runs->calls[i];
        s_wrap(c->body, c->body_len, &program);
        c->status =
            program.failed
                ? bt_fail(BT_ENOMEM, "out of memory for a program of %zu bytes", c->body_len)
                : bt_sandbox_run(runs->sandbox, program.data, program.len, c->run);
        if (c->status != BT_OK)
            snprintf(c->error, sizeof c->error, "%s", bt_last_error());
        if (program.failed)
            bt_buf_release(&program);
    }
    bt_buf_release(&program);
    return NULL;
}

/*  Runs the calls on up to workers threads, this one among them (fewer when a thread cannot be
    made); returns when every call has run. */
static void s_run_all(const bt_sandbox_config *sandbox, s_call **calls, int64_t n, int workers) {
    s_runs runs = {.sandbox = sandbox, .calls = calls, .n = n};
    atomic_init(&runs.next, 0);
    pthread_t threads[S_WORKERS_MAX];
    int started = 0;
    for (; started < workers - 1 && started < n - 1; started++)
        if (pthread_create(&threads[started], NULL, s_runner, &runs) != 0)
            break;
    s_runner(&runs);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
}

/*  Appends the answer of a python run r to b; *error as tools.h says. */
static void s_python_answer(const bt_tools_config *cfg, const bt_sandbox_result *r, bt_buf *b,
                            bool *error) {
    size_t shown = r->output_bytes < BT_SANDBOX_HEAD ? r->output_bytes : BT_SANDBOX_HEAD;
    bool cut = r->output_bytes > shown;
    if (!cut)
        while (shown && r->head[shown - 1] == '\n')
            shown--;
    bt_buf_put(b, r->head, shown);
    if (cut)
        bt_buf_printf(b, "%s[output cut: %zu bytes, the first %d shown]", shown ? "\n" : "",
                      r->output_bytes, BT_SANDBOX_HEAD);
    const char *sep = shown || cut ? "\n" : "";
    *error = r->verdict != BT_SANDBOX_PASS;
    switch (r->verdict) {
    case BT_SANDBOX_PASS: break;
    case BT_SANDBOX_EXIT:
        if (!shown) /* else the output says why (a traceback) */
            bt_buf_printf(b, "%serror: exit status %d", sep, r->exit_status);
        break;
    case BT_SANDBOX_SIGNAL: bt_buf_printf(b, "%serror: killed by signal %d", sep, r->signal); break;
    case BT_SANDBOX_TIMEOUT:
        bt_buf_printf(b, "%serror: timed out after %g s", sep, cfg->python_sandbox.timeout_s);
        break;
    case BT_SANDBOX_OUTPUT:
        bt_buf_printf(b, "%serror: more than %zu bytes of output", sep,
                      cfg->python_sandbox.output_limit);
        break;
    }
}

/* ---- the environment ---------------------------------------------------------------------- */

typedef struct {
    bt_tools_config cfg;
    bt_buf obs; /* this call's observations, each followed by a NUL */
} s_tools;

static const char *const s_open_tag[S_TOOLS] = {"<calc>", "<python>"};
static const char *const s_close_tag[S_TOOLS] = {"</calc>", "</python>"};

/*  Where the last needle in hay[0, len) starts; NULL when none. */
static const char *s_find_last(const char *hay, size_t len, const char *needle) {
    size_t n = strlen(needle);
    const char *last = NULL;
    for (const char *p = hay; (p = memmem(p, len - (size_t)(p - hay), needle, n)); p++)
        last = p;
    return last;
}

/*  The call of tool in text: its body and where its closing tag ends; false when none. */
static bool s_find_call(const char *text, size_t len, s_tool tool, const char **body,
                        size_t *body_len, size_t *end) {
    const char *close = s_find_last(text, len, s_close_tag[tool]);
    const char *open = close ? s_find_last(text, (size_t)(close - text), s_open_tag[tool]) : NULL;
    if (!open)
        return false;
    *body = open + strlen(s_open_tag[tool]);
    *body_len = (size_t)(close - *body);
    *end = (size_t)(close - text) + strlen(s_close_tag[tool]);
    return true;
}

static bool s_on(const bt_tools_config *cfg, s_tool tool) {
    return tool == S_CALC ? cfg->calculator : cfg->python;
}

/*  The call a turn holds: of the tools that are on, the one whose closing tag ends last. */
static s_call s_find(const bt_tools_config *cfg, const bt_env_step_item *it) {
    const char *text = it->action_text ? it->action_text : "";
    size_t len = it->action_text ? it->action_len : 0, best_end = 0;
    s_call call = {.tool = S_TOOLS};
    for (s_tool k = S_CALC; k < S_TOOLS; k++) {
        const char *body;
        size_t body_len, end;
        if (s_on(cfg, k) && s_find_call(text, len, k, &body, &body_len, &end) && end > best_end)
            call = (s_call){.tool = k, .body = body, .body_len = body_len}, best_end = end;
    }
    return call;
}

/*  Appends the observation of a turn's call (its python run done) and fills *r but for the
    observation's address. */
static void s_answer(s_tools *t, const s_call *call, bt_env_reply *r) {
    size_t before = t->obs.len;
    *r = (bt_env_reply){.done = call->tool == S_TOOLS, .tool_called = call->tool != S_TOOLS};
    if (call->tool != S_TOOLS) {
        bt_buf_puts(&t->obs, "<result>");
        if (call->tool == S_CALC)
            s_calculate(&t->cfg, call->body, call->body_len, &t->obs, &r->tool_error);
        else
            s_python_answer(&t->cfg, call->run, &t->obs, &r->tool_error);
        bt_buf_puts(&t->obs, "</result>");
    }
    r->observation_len = t->obs.len - before;
    bt_buf_put(&t->obs, "", 1);
}

/*  Points each reply at its observation, now that the buffer has stopped moving. */
static bt_status s_point(s_tools *t, int64_t n, bt_env_reply *out) {
    if (t->obs.failed)
        return bt_fail(BT_ENOMEM, "tools: out of memory for %lld observations", (long long)n);
    const char *p = t->obs.data;
    for (int64_t i = 0; i < n; i++) {
        out[i].observation = p;
        p += out[i].observation_len + 1;
    }
    return BT_OK;
}

/*  Empties the observations of the last call (a failed buffer is released: that clears it). */
static void s_clear(s_tools *t) {
    if (t->obs.failed)
        bt_buf_release(&t->obs);
    bt_buf_truncate(&t->obs, 0);
}

static bt_status s_reset(void *user, const bt_env_reset_item *items, int64_t n, bt_env_reply *out) {
    (void)items;
    s_tools *t = user;
    s_clear(t);
    for (int64_t i = 0; i < n; i++) {
        out[i] = (bt_env_reply){0};
        bt_buf_put(&t->obs, "", 1);
    }
    return s_point(t, n, out);
}

static bt_status s_step(void *user, const bt_env_step_item *items, int64_t n, bt_env_reply *out) {
    s_tools *t = user;
    s_clear(t);
    s_call *calls = calloc((size_t)n, sizeof *calls);
    s_call **python = calloc((size_t)n, sizeof *python);
    int64_t n_python = 0;
    for (int64_t i = 0; calls && python && i < n; i++) {
        calls[i] = s_find(&t->cfg, &items[i]);
        if (calls[i].tool == S_PYTHON)
            python[n_python++] = &calls[i];
    }
    bt_sandbox_result *runs = calls && python ? calloc((size_t)n_python + 1, sizeof *runs) : NULL;
    bt_status st =
        runs ? BT_OK : bt_fail(BT_ENOMEM, "tools: out of memory for %lld turns", (long long)n);
    if (st == BT_OK) {
        for (int64_t k = 0; k < n_python; k++)
            python[k]->run = &runs[k];
        s_run_all(&t->cfg.python_sandbox, python, n_python, t->cfg.python_workers);
    }
    for (int64_t i = 0; st == BT_OK && i < n; i++) {
        if (calls[i].tool == S_PYTHON && calls[i].status != BT_OK)
            st = bt_fail(calls[i].status, "tools: episode %llu: python: %s",
                         (unsigned long long)items[i].episode, calls[i].error);
        else
            s_answer(t, &calls[i], &out[i]);
    }
    free(runs);
    free(python);
    free(calls);
    return st == BT_OK ? s_point(t, n, out) : st;
}

static void s_destroy(void *user) {
    s_tools *t = user;
    if (!t)
        return;
    bt_buf_release(&t->obs);
    free(t);
}

void bt_tools_config_init(bt_tools_config *cfg) {
    *cfg = (bt_tools_config){
        .calculator = true, .python = true, .calc_max_length = 1024, .calc_max_depth = 64};
    bt_sandbox_config_init(&cfg->python_sandbox);
    cfg->python_sandbox.timeout_s = 2;
    cfg->python_sandbox.cpu_s = 2;
    cfg->python_sandbox.output_limit = 64 * 1024;
    cfg->python_workers = 4;
}

bt_status bt_tools_env_new(const bt_tools_config *cfg, bt_env_t **out) {
    *out = NULL;
    if (!cfg->calculator && !cfg->python)
        return bt_fail(BT_EINVAL, "tools: no tool is on (calculator, python)");
    if (cfg->calc_max_length < 1)
        return bt_fail(BT_EINVAL, "tools: calc_max_length: expected >= 1, got %zu",
                       cfg->calc_max_length);
    if (cfg->calc_max_depth < 1)
        return bt_fail(BT_EINVAL, "tools: calc_max_depth: expected >= 1, got %d",
                       cfg->calc_max_depth);
    if (cfg->python) {
        const bt_sandbox_config *sc = &cfg->python_sandbox;
        const char *python = sc->python ? sc->python : "/usr/bin/python3";
        if (!(sc->timeout_s > 0 && isfinite(sc->timeout_s)))
            return bt_fail(BT_EINVAL, "tools: python_sandbox.timeout_s: expected > 0, got %g",
                           sc->timeout_s);
        if (cfg->python_workers < 1 || cfg->python_workers > S_WORKERS_MAX)
            return bt_fail(BT_EINVAL, "tools: python_workers: expected 1 to %d, got %d",
                           S_WORKERS_MAX, cfg->python_workers);
        if (sc->output_limit < 1)
            return bt_fail(BT_EINVAL, "tools: python_sandbox.output_limit: expected >= 1, got 0");
        if (access(python, X_OK) != 0)
            return bt_fail(BT_EUNSUPPORTED,
                           "tools: python: %s is missing (the python tool runs code in the code "
                           "verifier's sandbox with it)",
                           python);
    }
    s_tools *t = calloc(1, sizeof *t);
    if (!t)
        return bt_fail(BT_ENOMEM, "tools: out of memory");
    t->cfg = *cfg;
    static const bt_env_ops ops[3] = {
        {s_reset, s_step, s_destroy, "</calc>\0</python>\0"},
        {s_reset, s_step, s_destroy, "</calc>\0"},
        {s_reset, s_step, s_destroy, "</python>\0"},
    };
    return bt_env_new(&ops[cfg->calculator && cfg->python ? 0 : cfg->calculator ? 1 : 2], t, out);
}
