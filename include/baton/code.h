/*  code.h — code tasks: HumanEval and MBPP records, the program a completion makes with a record's
    tests, and whether it passes them in the sandbox (include/baton/sandbox.h).
    Threading: no state; any thread may call any function.  Lifetime: results are the caller's.

    Record shapes (one JSON object per JSONL line; other fields are ignored):
    - HumanEval: "prompt" (the function's signature and docstring), "test" (Python defining
      check(candidate)), "entry_point" (the function's name).  The model sees the prompt; the
      program is prompt + completion + "\n" + test + "\ncheck(" + entry_point + ")\n".
    - MBPP: "test_list" (a non-empty array of Python statements, asserts), "text" or "prompt" (the
      task in words; "prompt" wins when both are there), optional "test_setup_code".  The model
      sees the words, then "\nYour code should pass these tests:\n" and the tests, one a line (as
      in the MBPP paper's prompt: the tests name the function); the program is test_setup_code +
      "\n" + completion + "\n" + the tests, one a line.
    A completion that holds a fenced block (```...```) is taken to be the code of its first block
    (the fence's info string, "python", dropped); after a HumanEval prompt it follows a newline,
    so a whole function redefines the prompt's (whose docstring alone is a valid body).

    The harness is what the program needs beside the completion, as one string (a source's
    "answer" for the code verifier): the byte length of what goes before the completion in
    decimal, ':', that text, then what goes after it. */
#ifndef BATON_CODE_H
#define BATON_CODE_H

#include "baton/sandbox.h"
#include "baton/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  A parsed record.  Caller owns both strings; free them with bt_code_record_release(). */
typedef struct bt_code_record {
    char *prompt;  /* what the model sees */
    char *harness; /* see above */
} bt_code_record;

/*  Parses line[0, len) (need not be NUL-terminated) as a HumanEval or an MBPP record.  Returns
    NULL and fills *out (out may be NULL: a check only), or, with *out untouched, why the line is
    not a record: "not valid JSON", "expected a JSON object", "expected \"test\" and
    \"entry_point\" (HumanEval) or \"test_list\" (MBPP)", "\"test_list\" is not a non-empty array
    of strings", a field that is not a string, named, or "out of memory".  Static string. */
const char *bt_code_parse(const char *line, size_t len, bt_code_record *out);

/*  Frees what r holds; idempotent. */
void bt_code_record_release(bt_code_record *r);

/*  The code of completion[0, len): the first fenced block's content, else all of it.  Sets
 *start and *n to its place in the completion. */
void bt_code_extract(const char *completion, size_t len, size_t *start, size_t *n);

/*  Runs the program of harness (as bt_code_parse made it) and completion[0, len) in the sandbox
    under cfg and fills *result; pass is result->verdict == BT_SANDBOX_PASS.  Errors:
    BT_EFORMAT "code harness: ..." for a harness bt_code_parse did not make, BT_ENOMEM, and
    bt_sandbox_run's. */
bt_status bt_code_run(const bt_sandbox_config *cfg, const char *harness, const char *completion,
                      size_t len, bt_sandbox_result *result);

#ifdef __cplusplus
}
#endif
#endif
