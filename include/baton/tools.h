/*  tools.h — the built-in tools as an environment (env.h): a `calculator` that answers
    <calc>EXPR</calc> with EXPR's value, and a `python` tool that runs <python>CODE</python> in the
    code verifier's sandbox (sandbox.h) and answers with its output, so a math task trains with
    tools and no service (issue 21; docs/architecture.md, "Built-in tools").
    Threading: an environment belongs to the thread that made it; a step runs its python calls
    on up to python_workers threads of its own, joined before it returns.
    Lifetime: one per rollout or eval worker, as env.h says.

    A turn holds a tool call when its action text holds a complete call of a tool that is on: the
    call used is the one whose closing tag ends last, its body what lies between that tag and the
    last opening tag of the same tool before it.  Then the reply is reward 0, done false,
    tool_called, and the observation "<result>ANSWER</result>" (plain text, NUL-terminated too;
    the chat role is the rollout's).  A turn without one is the model's answer: reward 0, done
    true, observation "".  The tools never score: the task's verifier scores the final answer.
    A reset replies "" and done false.  The stop strings are the closing tags of the tools that
    are on. */
#ifndef BATON_TOOLS_H
#define BATON_TOOLS_H

#include "baton/env.h"
#include "baton/sandbox.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_tools_config {
    bool calculator;        /* <calc>EXPR</calc> */
    bool python;            /* <python>CODE</python> */
    size_t calc_max_length; /* an expression longer than this many bytes is refused, >= 1 */
    int calc_max_depth;     /* more parentheses, signs and exponents inside one another than
                               this are refused ("(-(1))" nests 3), >= 1 */
    bt_sandbox_config python_sandbox; /* each call's limits: timeout_s, output_limit, ...;
                                         python (NULL or a path) is borrowed: it must outlive
                                         the environment */
    int python_workers; /* a step's python calls run on up to this many threads at once, 1..64 */
} bt_tools_config;

/*  Defaults: both tools on, calc_max_length 1024, calc_max_depth 64, python_sandbox as
    bt_sandbox_config_init gives it but timeout_s 2, cpu_s 2 and output_limit 64 KiB,
    python_workers 4. */
void bt_tools_config_init(bt_tools_config *cfg);

/*  An environment of the tools cfg turns on (copied).  BT_EINVAL naming the field for a limit out
    of range or no tool on; BT_EUNSUPPORTED when python is on and its interpreter is missing.
    Caller owns *out; destroy with bt_env_destroy().

    Calculator: + - * / % ** (right-associative, binding tighter than a sign on its left, as in
    Python), signs, parentheses, integers and decimals ("2", "2.50", ".5"), whitespace between.
    Exact rational arithmetic on 64-bit numerators and denominators; a value that does not fit, or
    a power with an exponent that is not an integer, goes on in double precision.  % is floored
    (the result has the divisor's sign).  The answer is the integer when the value is one and
    exact, else the shortest decimal that reads back as the nearest double (".0" appended where
    that would look like an integer: "2.0" for 4**0.5).  Errors, with
    tool_error: "error: division by zero", "error: overflow", "error: not a real number",
    "error: unexpected 'x' at character N" (counting from 1), "error: the expression ends early",
    "error: empty expression", and the limits.

    Python: each call a fresh interpreter in bt_sandbox_run (no state carries over between
    calls) running CODE as __main__ from a file named "<python>", exit() and quit() defined; an
    exception's traceback comes after the output printed before it, without the wrapper's frame.
    The answer is its stdout and stderr together, trailing newlines dropped, cut at
    BT_SANDBOX_HEAD bytes with a line saying so.  tool_error when it exits non-zero (the
    traceback is in the output) or is killed (timeout, output limit, a signal: a line
    "error: ..." says which).  A sandbox that cannot run at all (sandbox.h's BT_EIO) fails the
    step, naming the episode: that is the machine's fault, not the model's. */
bt_status bt_tools_env_new(const bt_tools_config *cfg, bt_env_t **out);

#ifdef __cplusplus
}
#endif
#endif
