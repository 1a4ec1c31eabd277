/*  test_tools.c — the built-in tools through the bt_env interface (bt_env_step), as a rollout
    calls them.  The calculator against an independent computation: 2000 seeded random
    expressions, each parsed by Python's own parser (ast) and evaluated with fractions.Fraction in
    one python3 process; exact results must match to the bit, the rest within a bound.  Then hand
    cases: precedence, right-associative power, signs, floored %, division by zero, overflow to
    double, garbage with its position, nested tags, no tag (the model answered: done), several
    calls (the last one counts), the limits, the configuration's errors.  The python tool: its
    output, an exception's traceback, an infinite loop's timeout, an output flood, no state kept
    between calls.  No timings are asserted. */
#define _GNU_SOURCE /* mkdtemp, setenv */
#include "baton/buf.h"
#include "baton/rng.h"
#include "baton/sandbox.h"
#include "baton/tools.h"

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_RANDOM 2000

static char s_dir[64];

static bt_env_t *s_env(bool calculator, bool python) {
    bt_tools_config cfg;
    bt_tools_config_init(&cfg);
    cfg.calculator = calculator;
    cfg.python = python;
    bt_env_t *env = NULL;
    CHECK_OK(bt_tools_env_new(&cfg, &env));
    return env;
}

/*  One model turn of one episode; the reply is valid until env's next call. */
static bt_env_reply s_turn(bt_env_t *env, const char *text) {
    bt_env_step_item item = {.episode = 7, .action_text = text, .action_len = strlen(text)};
    bt_env_reply r = {0};
    CHECK_OK(bt_env_step(env, &item, 1, &r));
    CHECK(r.reward == 0);
    return r;
}

/*  <calc>expr</calc> answers want, a value (tool_error false) or an "error: ..." (true). */
static void s_calc_is(bt_env_t *env, const char *expr, const char *want) {
    char text[512], obs[512];
    snprintf(text, sizeof text, "Let me compute. <calc>%s</calc>", expr);
    snprintf(obs, sizeof obs, "<result>%s</result>", want);
    bt_env_reply r = s_turn(env, text);
    if (!r.observation || strcmp(r.observation, obs) != 0)
        fprintf(stderr, "calc %s: want %s\n", expr, obs);
    CHECK_STR_EQ(r.observation, obs);
    CHECK(r.observation_len == strlen(obs));
    CHECK(r.tool_called && !r.done);
    CHECK(r.tool_error == (strncmp(want, "error: ", 7) == 0));
}

/* ---- random expressions against Python's parser and Fraction ------------------------------ */

static double s_unit(uint64_t *state) {
    return bt_rng_unit(bt_rng_next(state));
}

static void s_space(bt_buf *b, uint64_t *state) {
    double u = s_unit(state);
    bt_buf_puts(b, u < 0.6 ? "" : u < 0.9 ? " " : u < 0.97 ? "  " : "\t");
}

static void s_literal(bt_buf *b, uint64_t *state) {
    double u = s_unit(state);
    int i = (int)(s_unit(state) * 1000);
    if (u < 0.45)
        bt_buf_printf(b, "%d", i % 13);
    else if (u < 0.7)
        bt_buf_printf(b, "%d", i);
    else if (u < 0.8)
        bt_buf_printf(b, "%d.%d", i % 20, i % 10);
    else if (u < 0.9)
        bt_buf_printf(b, "%d.%02d", i % 7, i % 100);
    else if (u < 0.95)
        bt_buf_printf(b, ".%d", i % 10);
    else if (u < 0.98)
        bt_buf_printf(b, "%d%03d%03d", i % 9 + 1, i, (i * 7) % 1000);
    else /* up to 18 digits: products leave 64 bits, quotients need the one rounding */
        bt_buf_printf(b, "%d%03d%03d%03d%03d%03d", i % 9 + 1, i, (i * 7) % 1000, (i * 13) % 1000,
                      (i * 31) % 1000, (i * 37) % 1000);
}

/*  A random expression.  A power's base is a literal or parenthesized and its exponent a small
    literal, so no chain a ** b ** c grows past what Python's exact integers compute at once;
    everything else is free text: both parsers decide the grouping. */
static void s_expression(bt_buf *b, uint64_t *state, int depth) {
    double u = s_unit(state);
    if (depth == 0 || u < 0.2) {
        s_literal(b, state);
        return;
    }
    static const char *const exponents[] = {"0",  "1",  "2",  "3",   "4",
                                            "-1", "-2", "-3", "0.5", "-0.5"};
    if (u < 0.65) {
        s_expression(b, state, depth - 1);
        s_space(b, state);
        bt_buf_put(b, &"+-*/%+-*/"[(int)(s_unit(state) * 9)], 1);
        s_space(b, state);
        s_expression(b, state, depth - 1);
    } else if (u < 0.75) {
        bt_buf_puts(b, "(");
        s_expression(b, state, depth - 1);
        bt_buf_puts(b, ")");
    } else if (u < 0.85) {
        bt_buf_puts(b, s_unit(state) < 0.85 ? "-" : "+");
        s_space(b, state);
        s_expression(b, state, depth - 1);
    } else {
        if (s_unit(state) < 0.5) {
            s_literal(b, state);
        } else {
            bt_buf_puts(b, "(");
            s_expression(b, state, depth - 1);
            bt_buf_puts(b, ")");
        }
        s_space(b, state);
        bt_buf_puts(b, "**");
        s_space(b, state);
        bt_buf_puts(b, exponents[(int)(s_unit(state) * 10)]);
    }
}

/*  The reference: Python's ast parses each line (so the grouping is Python's, not ours) and a
    walk evaluates it with Fraction literals and Python's own operators.  It prints one line per
    expression: "int N" or "frac X" when every subexpression is a fraction with 64-bit parts
    (the calculator is exact then; X is repr(float(value)), correctly rounded), "approx X S" when
    not (S the largest magnitude of any subexpression), "error KIND" when Python raises or the
    value is not a finite real. */
static const char s_reference[] =
    "import ast, math, sys\n"
    "from fractions import Fraction\n"
    "LIM = 2**63 - 1\n"
    "OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,\n"
    "       ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,\n"
    "       ast.Mod: lambda a, b: a % b, ast.Pow: lambda a, b: a ** b}\n"
    "def ev(node, src, info):\n"
    "    if isinstance(node, ast.Constant):\n"
    "        v = Fraction(ast.get_source_segment(src, node))\n"
    "    elif isinstance(node, ast.UnaryOp):\n"
    "        x = ev(node.operand, src, info)\n"
    "        v = -x if isinstance(node.op, ast.USub) else +x\n"
    "    else:\n"
    "        a = ev(node.left, src, info)\n"
    "        b = ev(node.right, src, info)\n"
    "        v = OPS[type(node.op)](a, b)\n"
    "    if isinstance(v, complex):\n"
    "        raise ValueError('complex')\n"
    "    if not isinstance(v, Fraction):\n"
    "        info['exact'] = False\n"
    "        if not math.isfinite(v):\n"
    "            raise OverflowError()\n"
    "    elif abs(v.numerator) > LIM or v.denominator > LIM:\n"
    "        info['exact'] = False\n"
    "    try:\n"
    "        info['scale'] = max(info['scale'], abs(float(v)))\n"
    "    except OverflowError:\n"
    "        info['scale'] = math.inf\n"
    "    return v\n"
    "for line in open(sys.argv[1]):\n"
    "    src = line.rstrip('\\n')\n"
    "    info = {'exact': True, 'scale': 0.0}\n"
    "    try:\n"
    "        v = ev(ast.parse(src, mode='eval').body, src, info)\n"
    "        f = float(v)\n"
    "    except Exception as e:\n"
    "        print('error', type(e).__name__)\n"
    "        continue\n"
    "    if info['exact'] and v.denominator == 1:\n"
    "        print('int', v.numerator)\n"
    "    elif info['exact']:\n"
    "        print('frac', repr(f))\n"
    "    else:\n"
    "        print('approx', repr(f), repr(info['scale']))\n";

static void test_random_against_python(void) {
    char exprs_path[128], ref_path[128], out_path[128], cmd[512];
    snprintf(exprs_path, sizeof exprs_path, "%s/exprs.txt", s_dir);
    snprintf(ref_path, sizeof ref_path, "%s/reference.py", s_dir);
    snprintf(out_path, sizeof out_path, "%s/reference.out", s_dir);
    FILE *f = fopen(ref_path, "w");
    CHECK(f && fputs(s_reference, f) >= 0);
    if (f)
        fclose(f);

    bt_buf exprs[S_RANDOM], texts[S_RANDOM];
    bt_env_step_item items[S_RANDOM];
    uint64_t state = 20260321;
    f = fopen(exprs_path, "w");
    for (int i = 0; i < S_RANDOM; i++) {
        exprs[i] = (bt_buf){0};
        texts[i] = (bt_buf){0};
        s_expression(&exprs[i], &state, 1 + i % 5);
        bt_buf_printf(&texts[i], "step %d: <calc>%s</calc>", i, exprs[i].data);
        CHECK(!exprs[i].failed && !texts[i].failed);
        fprintf(f, "%s\n", exprs[i].data);
        items[i] = (bt_env_step_item){
            .episode = (uint64_t)i, .action_text = texts[i].data, .action_len = texts[i].len};
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s > %s", ref_path, exprs_path, out_path);
    CHECK(system(cmd) == 0);

    bt_env_t *env = s_env(true, false);
    static bt_env_reply replies[S_RANDOM];
    CHECK_OK(bt_env_step(env, items, S_RANDOM, replies)); /* one batch: all replies valid now */

    f = fopen(out_path, "r");
    CHECK(f != NULL);
    int n_int = 0, n_frac = 0, n_approx = 0, n_error = 0, lines = 0;
    double worst = 0; /* the largest |ours - Python's| / scale of the approx ones */
    char line[512];
    for (int i = 0; f && i < S_RANDOM && fgets(line, sizeof line, f); i++) {
        lines++;
        line[strcspn(line, "\n")] = '\0';
        const bt_env_reply *r = &replies[i];
        CHECK(r->tool_called && !r->done && r->reward == 0);
        const char *obs = r->observation;
        size_t n = r->observation_len;
        bool framed =
            n >= 17 && !memcmp(obs, "<result>", 8) && !memcmp(obs + n - 9, "</result>", 9);
        CHECK(framed);
        char value[256] = "";
        if (framed && n - 17 < sizeof value)
            memcpy(value, obs + 8, n - 17), value[n - 17] = '\0';
        bool ok = true;
        if (!strncmp(line, "int ", 4)) {
            n_int++;
            ok = !r->tool_error && !strcmp(value, line + 4);
        } else if (!strncmp(line, "frac ", 5)) {
            n_frac++;
            char *end;
            double got = strtod(value, &end);
            ok = !r->tool_error && *end == '\0' && got == strtod(line + 5, NULL);
        } else if (!strncmp(line, "approx ", 7)) {
            n_approx++;
            char *rest, *end;
            double want = strtod(line + 7, &rest), scale = strtod(rest, NULL);
            double got = strtod(value, &end);
            double dev = fabs(got - want) / fmax(scale, 1e-300);
            ok = !r->tool_error && *end == '\0' && dev <= 1e-9;
            if (ok && dev > worst)
                worst = dev;
        } else {
            n_error++;
            ok = r->tool_error && !strncmp(value, "error: ", 7);
            if (!strcmp(line, "error ZeroDivisionError"))
                ok = ok && !strcmp(value, "error: division by zero");
            else if (!strcmp(line, "error ValueError"))
                ok = ok && !strcmp(value, "error: not a real number");
        }
        if (!ok)
            fprintf(stderr, "expression %d: %s\n  python: %s\n  calculator: %.*s\n", i,
                    exprs[i].data, line, (int)n, obs);
        CHECK(ok);
    }
    if (f)
        fclose(f);
    CHECK(lines == S_RANDOM);
    printf("calculator vs Python Fraction, %d expressions: %d exact integers, %d exact fractions "
           "(bit-equal doubles), %d in double precision (worst deviation %.2g of the largest "
           "subexpression), %d errors\n",
           lines, n_int, n_frac, n_approx, worst, n_error);
    /* the generator must reach every class, or the comparison proves less than it says */
    CHECK(n_int > 100 && n_frac > 100 && n_approx > 10 && n_error > 10);
    for (int i = 0; i < S_RANDOM; i++) {
        bt_buf_release(&exprs[i]);
        bt_buf_release(&texts[i]);
    }
    bt_env_destroy(&env);
}

/* ---- hand cases --------------------------------------------------------------------------- */

static void test_arithmetic(void) {
    bt_env_t *env = s_env(true, false);
    s_calc_is(env, "17*23", "391");
    s_calc_is(env, "2+3*4", "14");
    s_calc_is(env, "(2+3)*4", "20");
    s_calc_is(env, "10-4-3", "3");    /* left-associative */
    s_calc_is(env, "2**3**2", "512"); /* right-associative: 2**9 */
    s_calc_is(env, "(2**3)**2", "64");
    s_calc_is(env, "-2**2", "-4"); /* the power binds tighter than the sign */
    s_calc_is(env, "(-2)**2", "4");
    s_calc_is(env, "2**-2", "0.25");
    s_calc_is(env, "--3", "3");
    s_calc_is(env, "+-+3", "-3");
    s_calc_is(env, "7 % 3", "1");
    s_calc_is(env, "-7 % 3", "2"); /* floored: the divisor's sign */
    s_calc_is(env, "7 % -3", "-2");
    s_calc_is(env, "7.5 % 2", "1.5");
    s_calc_is(env, "0.1 + 0.2", "0.3"); /* exact: not 0.30000000000000004 */
    s_calc_is(env, "1/3", "0.3333333333333333");
    s_calc_is(env, "2/3*3", "2");
    s_calc_is(env, "6/4", "1.5");
    s_calc_is(env, "2.50*2", "5");
    s_calc_is(env, ".5+5.", "5.5");
    s_calc_is(env, " 1 +\t2\n", "3");
    s_calc_is(env, "0**0", "1");
    s_calc_is(env, "9223372036854775807", "9223372036854775807");
    s_calc_is(env, "3037000499**2", "9223372030926249001"); /* exact, just below 2^63 */
    s_calc_is(env, "-9223372036854775807 - 0", "-9223372036854775807");
    /* beyond 64 bits: double precision, printed as Python prints a float */
    char want[64];
    snprintf(want, sizeof want, "%.16g", ldexp(1, 64)); /* 1.844674407370955e+19: 16 digits ... */
    CHECK_STR_EQ(want, "1.844674407370955e+19");        /* ... do not read back; 17 do */
    s_calc_is(env, "2**64", "1.8446744073709552e+19");
    s_calc_is(env, "2**64 / 2**63", "2.0");
    s_calc_is(env, "2**0.5", "1.4142135623730951");
    s_calc_is(env, "4**0.5", "2.0");
    s_calc_is(env, "1/(2**62*3)", "7.228014483236696e-20");
    /* a fraction of 64-bit parts rounds once to the nearest double, as Python's float(Fraction)
       does; (double)num / (double)den rounds three times and gives ...385e+17, ...182e+18 */
    s_calc_is(env, "1435064358685315475/3", "4.7835478622843846e+17");
    s_calc_is(env, "7077041406850927796/7", "1.0110059152644183e+18");
    /* errors */
    s_calc_is(env, "1/0", "error: division by zero");
    s_calc_is(env, "5 % 0", "error: division by zero");
    s_calc_is(env, "0**-1", "error: division by zero");
    s_calc_is(env, "1/(0.5-1/2)", "error: division by zero");
    s_calc_is(env, "2**64/0", "error: division by zero");
    s_calc_is(env, "10**400", "error: overflow");
    s_calc_is(env, "10**200*10**200", "error: overflow");
    s_calc_is(env, "(-8)**0.5", "error: not a real number");
    bt_env_destroy(&env);
}

static void test_garbage(void) {
    bt_env_t *env = s_env(true, false);
    s_calc_is(env, "2+x", "error: unexpected 'x' at character 3");
    s_calc_is(env, "sqrt(4)", "error: unexpected 's' at character 1");
    s_calc_is(env, "2^3", "error: unexpected '^' at character 2 (a power is **)");
    s_calc_is(env, "2+", "error: the expression ends early");
    s_calc_is(env, "(1+2", "error: the expression ends early");
    s_calc_is(env, "1+2)", "error: unexpected ')' at character 4");
    s_calc_is(env, "1..2", "error: unexpected '.' at character 3");
    s_calc_is(env, ".", "error: unexpected '.' at character 1");
    s_calc_is(env, "2***3", "error: unexpected '*' at character 4");
    s_calc_is(env, "1e5", "error: unexpected 'e' at character 2");
    s_calc_is(env, "3 4", "error: unexpected '4' at character 3");
    s_calc_is(env, "\x01", "error: unexpected 0x01 at character 1");
    s_calc_is(env, "", "error: empty expression");
    s_calc_is(env, "  ", "error: empty expression");
    s_calc_is(env, "1/0 + x", "error: unexpected 'x' at character 7"); /* syntax first */
    /* a NUL inside the action text is a byte like any other */
    static const char nul[] = "<calc>1+\0</calc>";
    bt_env_step_item item = {.episode = 1, .action_text = nul, .action_len = sizeof nul - 1};
    bt_env_reply r;
    CHECK_OK(bt_env_step(env, &item, 1, &r));
    CHECK_STR_EQ(r.observation, "<result>error: unexpected 0x00 at character 3</result>");
    CHECK(r.tool_error);
    bt_env_destroy(&env);
}

static void test_tags(void) {
    bt_env_t *env = s_env(true, false);
    bt_env_reply r = s_turn(env, "The answer is 42.");
    CHECK(r.done && !r.tool_called && !r.tool_error && r.observation_len == 0);
    CHECK_STR_EQ(r.observation, "");
    r = s_turn(env, "<calc>1+2"); /* no closing tag: not a call */
    CHECK(r.done && !r.tool_called);
    r = s_turn(env, "1+2</calc>"); /* no opening tag */
    CHECK(r.done && !r.tool_called);
    r = s_turn(env, "</calc><calc>");
    CHECK(r.done && !r.tool_called);
    r = s_turn(env, "<calc>1+1</calc> and then <calc>2*3</calc>"); /* the last call */
    CHECK_STR_EQ(r.observation, "<result>6</result>");
    r = s_turn(env, "<calc>1+<calc>2*3</calc>"); /* the opening tag nearest the closing one */
    CHECK_STR_EQ(r.observation, "<result>6</result>");
    r = s_turn(env, "<calc>1+<calc>2</calc>*3</calc>");
    CHECK_STR_EQ(r.observation, "<result>error: unexpected '<' at character 2</result>");
    r = s_turn(env, "<python>print(1)</python>"); /* a tool that is off: plain text */
    CHECK(r.done && !r.tool_called);
    bt_env_destroy(&env);

    /* both on: the call whose closing tag ends last (no python runs here) */
    env = s_env(true, true);
    if (env) {
        r = s_turn(env, "<python>print(1)</python> or <calc>5*5</calc>");
        CHECK_STR_EQ(r.observation, "<result>25</result>");
        CHECK(r.tool_called && !r.done);
    }
    bt_env_destroy(&env);
}

static void test_stop_strings_and_reset(void) {
    bt_env_t *env = s_env(true, true);
    static const char both[] = "</calc>\0</python>\0"; /* and the literal's NUL: the list's end */
    const char *s = env ? bt_env_stop_strings(env) : NULL;
    CHECK(s && !memcmp(s, both, sizeof both));
    bt_env_reset_item resets[3] = {{.episode = 1, .prompt = "a", .answer = "1"},
                                   {.episode = 2, .prompt = "b", .answer = "2"},
                                   {.episode = 3, .prompt = "c", .answer = "3"}};
    bt_env_reply out[3];
    CHECK_OK(bt_env_reset(env, resets, 3, out));
    for (int i = 0; i < 3; i++) {
        CHECK(!out[i].done && !out[i].tool_called && out[i].reward == 0);
        CHECK_STR_EQ(out[i].observation, "");
    }
    bt_env_destroy(&env);
    CHECK(env == NULL);
    bt_env_destroy(&env); /* idempotent */
    env = s_env(true, false);
    s = env ? bt_env_stop_strings(env) : NULL;
    CHECK(s && !memcmp(s, "</calc>\0", 9));
    bt_env_destroy(&env);
    env = s_env(false, true);
    s = env ? bt_env_stop_strings(env) : NULL;
    CHECK(s && !memcmp(s, "</python>\0", 11));
    bt_env_destroy(&env);
}

static void test_limits_and_config(void) {
    bt_tools_config cfg;
    bt_tools_config_init(&cfg);
    cfg.python = false;
    cfg.calc_max_length = 16;
    cfg.calc_max_depth = 8;
    bt_env_t *env = NULL;
    CHECK_OK(bt_tools_env_new(&cfg, &env));
    s_calc_is(env, "1+1+1+1+1+1+1+11", "18"); /* 16 bytes */
    s_calc_is(env, "1+1+1+1+1+1+1+111", "error: the expression is longer than 16 bytes");
    s_calc_is(env, "((((((((1))))))))", "error: the expression is longer than 16 bytes");
    s_calc_is(env, "(((((((8)))))))", "8"); /* 7 parentheses, depth 7 */
    s_calc_is(env, "-(-(-(-1)))", "1");     /* 4 signs, 3 parentheses: depth 7 */
    s_calc_is(env, "--------8", "8");       /* 8 signs */
    s_calc_is(env, "---------9", "error: nested deeper than 8");
    s_calc_is(env, "2**2**2**1", "16"); /* exponents nest too: depth 3 */
    bt_env_destroy(&env);

    /* a deep expression is refused at the depth limit, whatever its length */
    cfg.calc_max_length = 1 << 20;
    cfg.calc_max_depth = 64;
    CHECK_OK(bt_tools_env_new(&cfg, &env));
    bt_buf deep = {0};
    bt_buf_puts(&deep, "<calc>");
    for (int i = 0; i < 200000; i++)
        bt_buf_puts(&deep, "(");
    bt_buf_puts(&deep, "1</calc>");
    bt_env_reply r = s_turn(env, deep.data);
    CHECK_STR_EQ(r.observation, "<result>error: nested deeper than 64</result>");
    bt_buf_release(&deep);
    bt_env_destroy(&env);

    /* configuration errors name the field */
    bt_tools_config_init(&cfg);
    cfg.calculator = cfg.python = false;
    CHECK(bt_tools_env_new(&cfg, &env) == BT_EINVAL && env == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "no tool is on");
    bt_tools_config_init(&cfg);
    cfg.calc_max_depth = 0;
    CHECK(bt_tools_env_new(&cfg, &env) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "calc_max_depth: expected >= 1, got 0");
    bt_tools_config_init(&cfg);
    cfg.calc_max_length = 0;
    CHECK(bt_tools_env_new(&cfg, &env) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "calc_max_length: expected >= 1, got 0");
    bt_tools_config_init(&cfg);
    cfg.python_sandbox.timeout_s = 0;
    CHECK(bt_tools_env_new(&cfg, &env) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "python_sandbox.timeout_s: expected > 0, got 0");
    bt_tools_config_init(&cfg);
    cfg.python_workers = 0;
    CHECK(bt_tools_env_new(&cfg, &env) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "python_workers: expected 1 to 64, got 0");
    bt_tools_config_init(&cfg);
    cfg.python_sandbox.python = "/nonexistent/python3";
    CHECK(bt_tools_env_new(&cfg, &env) == BT_EUNSUPPORTED && env == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "/nonexistent/python3 is missing");
    bt_tools_config_init(&cfg);
    CHECK(cfg.python_sandbox.timeout_s == 2 && cfg.python_sandbox.output_limit == 65536);
}

/* ---- the python tool ---------------------------------------------------------------------- */

/*  Whether s ends with suffix. */
static bool s_ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

static void test_python(void) {
    bt_env_t *env = s_env(true, true);
    if (!env)
        return;
    bt_env_reply r = s_turn(env, "I'll run it.\n<python>print(17*23)</python>");
    CHECK_STR_EQ(r.observation, "<result>391</result>");
    CHECK(r.tool_called && !r.tool_error && !r.done);

    r = s_turn(env, "<python>\nx = [1, 2]\nprint(len(x))\nx[5]\n</python>");
    CHECK(r.tool_called && r.tool_error && !r.done);
    CHECK_STR_CONTAINS(r.observation, "<result>2\nTraceback (most recent call last):\n"
                                      "  File \"<python>\", line 4, in <module>\n    x[5]\n");
    /* the traceback's last line is the observation's */
    CHECK(s_ends_with(r.observation, r.observation_len,
                      "\nIndexError: list index out of range</result>"));

    r = s_turn(env, "<python>print('a')\nexit()\nprint('b')</python>");
    CHECK_STR_EQ(r.observation, "<result>a</result>");
    CHECK(!r.tool_error);
    r = s_turn(env, "<python>import sys\nsys.exit(3)</python>");
    CHECK_STR_EQ(r.observation, "<result>error: exit status 3</result>");
    CHECK(r.tool_error);

    r = s_turn(env, "<python>while True:\n    pass\n</python>");
    CHECK_STR_EQ(r.observation, "<result>error: timed out after 2 s</result>");
    CHECK(r.tool_called && r.tool_error && !r.done);

    /* output past the head is cut, saying so; past output_limit the run is killed */
    r = s_turn(env, "<python>print('y' * 5000)</python>");
    CHECK(!r.tool_error);
    CHECK(r.observation_len > 8 + 4096 && !memcmp(r.observation, "<result>", 8));
    CHECK(strspn(r.observation + 8, "y") == 4096);
    CHECK(s_ends_with(r.observation, r.observation_len,
                      "\n[output cut: 5001 bytes, the first 4096 shown]</result>"));
    r = s_turn(env, "<python>while True:\n    print('z' * 1000)\n</python>");
    CHECK(r.tool_error);
    CHECK(r.observation_len > 8 + 4096 + 14 && strspn(r.observation + 8, "z\n") >= 4096);
    CHECK(r.observation_len > 8 + 4096 + 14 &&
          !memcmp(r.observation + 8 + 4096, "\n[output cut: ", 14));
    CHECK(s_ends_with(r.observation, r.observation_len,
                      "\nerror: more than 65536 bytes of output</result>"));
    CHECK(r.observation_len < 4096 + 200);

    /* every call is a fresh interpreter */
    r = s_turn(env, "<python>x = 5</python>");
    CHECK_STR_EQ(r.observation, "<result></result>");
    r = s_turn(env, "<python>print(x)</python>");
    CHECK(r.tool_error);
    CHECK(s_ends_with(r.observation, r.observation_len,
                      "NameError: name 'x' is not defined</result>"));

    r = s_turn(env, "<python>print(1\n</python>"); /* compile errors are tracebacks too */
    CHECK(r.tool_error);
    CHECK_STR_CONTAINS(r.observation, "<result>  File \"<python>\", line 1\n");
    CHECK_STR_CONTAINS(r.observation, "SyntaxError: ");

    /* one batch mixing both tools and an answer: every reply valid after the call */
    const char *texts[3] = {"<python>print(6*7)</python>", "final answer: 42", "<calc>6*7</calc>"};
    bt_env_step_item items[3];
    for (int i = 0; i < 3; i++)
        items[i] = (bt_env_step_item){
            .episode = (uint64_t)(10 + i), .action_text = texts[i], .action_len = strlen(texts[i])};
    bt_env_reply out[3];
    CHECK_OK(bt_env_step(env, items, 3, out));
    CHECK_STR_EQ(out[0].observation, "<result>42</result>");
    CHECK(out[1].done && out[1].observation_len == 0);
    CHECK_STR_EQ(out[2].observation, "<result>42</result>");

    /* a batch of python calls runs on python_workers threads; each answer is its own episode's */
    enum { N = 12 };
    bt_buf codes[N];
    bt_env_step_item batch[N];
    bt_env_reply replies[N];
    for (int i = 0; i < N; i++) {
        codes[i] = (bt_buf){0};
        if (i % 4 == 3)
            bt_buf_printf(&codes[i], "<python>raise ValueError(%d)</python>", i);
        else
            bt_buf_printf(&codes[i], "<python>print(%d ** 2)</python>", i);
        batch[i] = (bt_env_step_item){
            .episode = (uint64_t)i, .action_text = codes[i].data, .action_len = codes[i].len};
    }
    CHECK_OK(bt_env_step(env, batch, N, replies));
    for (int i = 0; i < N; i++) {
        char want[64];
        if (i % 4 == 3) {
            snprintf(want, sizeof want, "\nValueError: %d</result>", i);
            CHECK(replies[i].tool_error);
            CHECK(s_ends_with(replies[i].observation, replies[i].observation_len, want));
        } else {
            snprintf(want, sizeof want, "<result>%d</result>", i * i);
            CHECK(!replies[i].tool_error);
            CHECK_STR_EQ(replies[i].observation, want);
        }
        bt_buf_release(&codes[i]);
    }

    /* four infinite loops in one batch: their timeouts overlap (the figure is printed, not
       asserted: a loaded machine stretches it) */
    const char *loop = "<python>while True:\n    pass\n</python>";
    for (int i = 0; i < 4; i++)
        batch[i] = (bt_env_step_item){
            .episode = (uint64_t)i, .action_text = loop, .action_len = strlen(loop)};
    double t0 = bt_now();
    CHECK_OK(bt_env_step(env, batch, 4, replies));
    printf("python tool: 4 calls that time out (2 s each) in one batch took %.1f s with 4 "
           "workers\n",
           bt_now() - t0);
    for (int i = 0; i < 4; i++)
        CHECK_STR_EQ(replies[i].observation, "<result>error: timed out after 2 s</result>");

    /* 32 short calls in one batch, on 1 and on 4 workers (figures, not assertions) */
    enum { M = 32 };
    bt_env_step_item many[M];
    bt_env_reply many_out[M];
    for (int i = 0; i < M; i++)
        many[i] = (bt_env_step_item){
            .episode = (uint64_t)i, .action_text = texts[0], .action_len = strlen(texts[0])};
    for (int workers = 1; workers <= 4; workers += 3) {
        bt_tools_config cfg;
        bt_tools_config_init(&cfg);
        cfg.python_workers = workers;
        bt_env_t *e = NULL;
        CHECK_OK(bt_tools_env_new(&cfg, &e));
        t0 = bt_now();
        CHECK_OK(bt_env_step(e, many, M, many_out));
        double dt = bt_now() - t0;
        printf("python tool: %d calls of print(6*7) in one batch, %d worker(s): %.2f s, %.0f "
               "calls/s\n",
               M, workers, dt, M / dt);
        for (int i = 0; i < M; i++)
            CHECK_STR_EQ(many_out[i].observation, "<result>42</result>");
        bt_env_destroy(&e);
    }

    /* a sandbox that cannot run fails the step, naming the episode */
    const char *tmpdir = getenv("TMPDIR");
    char saved[512] = "";
    if (tmpdir)
        snprintf(saved, sizeof saved, "%s", tmpdir);
    setenv("TMPDIR", "/nonexistent/baton_test_tools", 1);
    bt_env_step_item item = {
        .episode = 99, .action_text = texts[0], .action_len = strlen(texts[0])};
    CHECK(bt_env_step(env, &item, 1, replies) == BT_EIO);
    CHECK_STR_CONTAINS(bt_last_error(), "tools: episode 99: python: sandbox: ");
    if (tmpdir)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
    r = s_turn(env, texts[0]); /* and the next step goes on */
    CHECK_STR_EQ(r.observation, "<result>42</result>");
    bt_env_destroy(&env);
}

/*  Which isolation the sandbox gives this process (the python tool runs in it). */
static const char *s_isolation(void) {
    bt_sandbox_config cfg;
    bt_sandbox_config_init(&cfg);
    bt_sandbox_result r;
    if (bt_sandbox_run(&cfg, "pass", 4, &r) != BT_OK)
        return NULL;
    return r.isolation == BT_SANDBOX_NAMESPACES ? "namespaces" : "plain";
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("SKIP: /usr/bin/python3 missing: the reference and the python tool need it\n");
        return 77;
    }
    snprintf(s_dir, sizeof s_dir, "/tmp/baton_test_tools_XXXXXX");
    if (!mkdtemp(s_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_random_against_python();
    test_arithmetic();
    test_garbage();
    test_tags();
    test_stop_strings_and_reset();
    test_limits_and_config();
    const char *isolation = s_isolation();
    if (isolation) {
        printf("python tool: the sandbox isolates with %s\n", isolation);
        test_python();
    } else {
        printf("SKIP (python tool): the sandbox cannot run here: %s\n", bt_last_error());
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    CHECK(system(cmd) == 0);
    if (check_exit() == 0 && !isolation)
        return 77;
    return check_exit();
}
