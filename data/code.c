/*  code.c — HumanEval and MBPP records, their programs, and their runs (include/baton/code.h). */
#define _GNU_SOURCE
#include "baton/code.h"

#include "baton/buf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*  The string field name of root, NULL when absent; *bad when present but not a string. */
static const char *s_string(const cJSON *root, const char *name, bool *bad) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    if (v && !cJSON_IsString(v))
        *bad = true;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/*  head and tail as a harness: "<strlen(head)>:" head tail. */
static bool s_harness(bt_buf *h, const bt_buf *head, const bt_buf *tail) {
    bt_buf_printf(h, "%zu:", head->len);
    bt_buf_put(h, head->data, head->len);
    bt_buf_put(h, tail->data, tail->len);
    return !h->failed;
}

static const char *s_humaneval(const cJSON *root, bt_buf *prompt, bt_buf *head, bt_buf *tail) {
    bool bad = false;
    const char *p = s_string(root, "prompt", &bad), *test = s_string(root, "test", &bad);
    const char *entry = s_string(root, "entry_point", &bad);
    if (bad || !p)
        return "\"prompt\", \"test\" and \"entry_point\" must be strings (HumanEval)";
    bt_buf_puts(prompt, p);
    bt_buf_puts(head, p);
    bt_buf_printf(tail, "%s\ncheck(%s)\n", test, entry);
    return NULL;
}

static const char *s_mbpp(const cJSON *root, bt_buf *prompt, bt_buf *head, bt_buf *tail) {
    bool bad = false;
    const char *words = s_string(root, "prompt", &bad);
    if (!words)
        words = s_string(root, "text", &bad);
    const char *setup = s_string(root, "test_setup_code", &bad);
    if (bad || !words)
        return "expected \"text\" or \"prompt\", and \"test_setup_code\" if any, as strings (MBPP)";
    const cJSON *tests = cJSON_GetObjectItemCaseSensitive(root, "test_list"), *t;
    if (!cJSON_IsArray(tests) || cJSON_GetArraySize(tests) == 0)
        return "\"test_list\" is not a non-empty array of strings";
    bt_buf_printf(prompt, "%s\nYour code should pass these tests:\n", words);
    cJSON_ArrayForEach(t, tests) {
        if (!cJSON_IsString(t))
            return "\"test_list\" is not a non-empty array of strings";
        bt_buf_printf(prompt, "%s\n", t->valuestring);
        bt_buf_printf(tail, "%s\n", t->valuestring);
    }
    bt_buf_printf(head, "%s\n", setup ? setup : "");
    return NULL;
}

const char *bt_code_parse(const char *line, size_t len, bt_code_record *out) {
    cJSON *root = cJSON_ParseWithLength(line, len);
    const char *problem = NULL;
    bt_buf prompt = {0}, head = {0}, tail = {0}, harness = {0};
    if (!root)
        problem = "not valid JSON";
    else if (!cJSON_IsObject(root))
        problem = "expected a JSON object";
    else if (cJSON_GetObjectItemCaseSensitive(root, "test_list"))
        problem = s_mbpp(root, &prompt, &head, &tail);
    else if (cJSON_GetObjectItemCaseSensitive(root, "test") &&
             cJSON_GetObjectItemCaseSensitive(root, "entry_point"))
        problem = s_humaneval(root, &prompt, &head, &tail);
    else
        problem = "expected \"test\" and \"entry_point\" (HumanEval) or \"test_list\" (MBPP)";
    cJSON_Delete(root);
    if (!problem && !s_harness(&harness, &head, &tail))
        problem = "out of memory";
    if (!problem && out) {
        out->prompt = bt_buf_detach(&prompt, NULL);
        out->harness = bt_buf_detach(&harness, NULL);
        if (!out->prompt || !out->harness) {
            bt_code_record_release(out);
            problem = "out of memory";
        }
    }
    bt_buf_release(&prompt);
    bt_buf_release(&head);
    bt_buf_release(&tail);
    bt_buf_release(&harness);
    return problem;
}

void bt_code_record_release(bt_code_record *r) {
    free(r->prompt);
    free(r->harness);
    r->prompt = r->harness = NULL;
}

void bt_code_extract(const char *completion, size_t len, size_t *start, size_t *n) {
    *start = 0;
    *n = len;
    const char *open = memmem(completion, len, "```", 3);
    if (!open)
        return;
    const char *body = memchr(open, '\n', len - (size_t)(open - completion));
    if (!body)
        return;
    body++;
    size_t rest = len - (size_t)(body - completion);
    const char *close = memmem(body, rest, "```", 3);
    *start = (size_t)(body - completion);
    *n = close ? (size_t)(close - body) : rest;
}

bt_status bt_code_run(const bt_sandbox_config *cfg, const char *harness, const char *completion,
                      size_t len, bt_sandbox_result *result) {
    char *colon = NULL;
    errno = 0;
    unsigned long long head = strtoull(harness, &colon, 10);
    size_t total = strlen(harness);
    if (colon == harness || *colon != ':' || errno || head > total - (size_t)(colon + 1 - harness))
        return bt_fail(BT_EFORMAT,
                       "code harness: expected \"<length>:<head><tail>\", got \"%.40s\"", harness);
    const char *head_at = colon + 1, *tail_at = head_at + head;
    size_t start, n;
    bt_code_extract(completion, len, &start, &n);
    bt_buf program = {0};
    bt_buf_put(&program, head_at, (size_t)head);
    if (start > 0 && head > 0)
        bt_buf_puts(&program, "\n"); /* a fenced whole function after the prompt's */
    bt_buf_put(&program, completion + start, n);
    bt_buf_puts(&program, "\n");
    bt_buf_puts(&program, tail_at);
    bt_status st = program.failed ? bt_fail(BT_ENOMEM, "code: out of memory")
                                  : bt_sandbox_run(cfg, program.data, program.len, result);
    bt_buf_release(&program);
    return st;
}
