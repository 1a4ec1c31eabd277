/*  yaml.c — YAML to JSON text for the config parser: libyaml's events (yaml_parser_parse) built
    into a cJSON tree here, printed, and deleted; each key's path and line kept beside it. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "baton/yaml.h"

#include "baton/buf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

enum { S_MAX_DEPTH = 64, S_PATH_MAX = 512 };

typedef struct {
    char *path;
    int line;
} s_line;

struct bt_yaml {
    char *json;
    s_line *lines;
    int n_lines, cap_lines;
};

typedef struct {
    yaml_parser_t parser;
    const char *source;
    bt_yaml_t *doc;
    char path[S_PATH_MAX]; /* the node being read: "grpo.lr", "eval.datasets[1]" */
} s_reader;

/*  "SOURCE:LINE: PATH: detail" (no PATH at the top level). */
static bt_status s_fail_at(const s_reader *r, int line, bt_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static bt_status s_fail_at(const s_reader *r, int line, bt_status st, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return bt_fail(st, "%s:%d: %s%s%s", r->source, line, r->path, r->path[0] ? ": " : "", detail);
}

/*  libyaml's own message, at the place it stopped. */
static bt_status s_syntax(const s_reader *r) {
    const yaml_parser_t *p = &r->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
    char context[160] = "";
    if (p->context)
        snprintf(context, sizeof context, " (%s at line %zu)", p->context,
                 p->context_mark.line + 1);
    return bt_fail(BT_EFORMAT, "%s:%zu:%zu: %s%s", r->source, p->problem_mark.line + 1,
                   p->problem_mark.column + 1, p->problem ? p->problem : "invalid YAML", context);
}

static bt_status s_next(s_reader *r, yaml_event_t *ev) {
    return yaml_parser_parse(&r->parser, ev) ? BT_OK : s_syntax(r);
}

/*  Remembers that the node at r->path starts at line. */
static bt_status s_mark(s_reader *r, int line) {
    bt_yaml_t *d = r->doc;
    if (d->n_lines == d->cap_lines) {
        int cap = d->cap_lines ? 2 * d->cap_lines : 64;
        s_line *grown = realloc(d->lines, (size_t)cap * sizeof *grown);
        if (!grown)
            return bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
        d->lines = grown;
        d->cap_lines = cap;
    }
    char *path = strdup(r->path);
    if (!path)
        return bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
    d->lines[d->n_lines++] = (s_line){path, line};
    return BT_OK;
}

#define S_TAG "tag:yaml.org,2002:"

/*  Anchors and aliases are refused: an error inside an aliased value would have two lines. */
static bt_status s_check_node(const s_reader *r, int line, const yaml_char_t *anchor,
                              const yaml_char_t *tag, const char *allowed) {
    if (anchor)
        return s_fail_at(r, line, BT_EFORMAT,
                         "an anchor (&%s): anchors and aliases are not supported (write the "
                         "value out)",
                         (const char *)anchor);
    const char *t = (const char *)tag;
    bool core = t && strncmp(t, S_TAG, strlen(S_TAG)) == 0;
    if (t && strcmp(t, "!") != 0 && strcmp(t, allowed) != 0)
        return s_fail_at(r, line, BT_EFORMAT,
                         "the tag %s%s: only !!str, !!map and !!seq are taken (a plain scalar's "
                         "type is read from its text)",
                         core ? "!!" : "", core ? t + strlen(S_TAG) : t);
    return BT_OK;
}

/*  A scalar, key or value: no anchor, no tag but !!str, no NUL inside. */
static bt_status s_check_scalar(const s_reader *r, const yaml_event_t *ev, int line) {
    BT_TRY(s_check_node(r, line, ev->data.scalar.anchor, ev->data.scalar.tag, S_TAG "str"));
    if (strlen((const char *)ev->data.scalar.value) != ev->data.scalar.length)
        return s_fail_at(r, line, BT_EFORMAT, "a NUL character (JSON strings hold none)");
    return BT_OK;
}

static bt_status s_alias(const s_reader *r, int line, const yaml_char_t *anchor) {
    return s_fail_at(r, line, BT_EFORMAT,
                     "an alias (*%s): anchors and aliases are not supported (write the value out)",
                     (const char *)anchor);
}

static bool s_is_digits(const char *s, const char *set) {
    return s[0] && strspn(s, set) == strlen(s);
}

/*  YAML 1.2 core schema int: [-+]?[0-9]+ */
static bool s_is_decimal(const char *s) {
    return s_is_digits(s + (*s == '-' || *s == '+'), "0123456789");
}

/*  YAML 1.2 core schema float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static bool s_is_float(const char *s) {
    s += *s == '-' || *s == '+';
    size_t whole = strspn(s, "0123456789");
    s += whole;
    size_t frac = 0;
    if (*s == '.') {
        frac = strspn(s + 1, "0123456789");
        s += 1 + frac;
    }
    if (!whole && !frac)
        return false;
    if (*s == 'e' || *s == 'E') {
        s++;
        s += *s == '-' || *s == '+';
        size_t exp = strspn(s, "0123456789");
        if (!exp)
            return false;
        s += exp;
    }
    return *s == '\0';
}

static bool s_is_one_of(const char *s, const char *const *words) {
    for (; *words; words++)
        if (strcmp(s, *words) == 0)
            return true;
    return false;
}

/*  A number as JSON text: integers exactly, floats as the shortest text that reads back. */
static cJSON *s_number(const char *v, bool *finite) {
    char text[BT_BUF_NUMBER_LEN];
    const char *digits = v + (*v == '-' || *v == '+');
    *finite = true;
    if (s_is_decimal(v)) {
        errno = 0;
        long long x = strtoll(v, NULL, 10);
        if (errno == 0) {
            snprintf(text, sizeof text, "%lld", x);
            return cJSON_CreateRaw(text);
        }
    } else if (digits == v && (strncmp(v, "0x", 2) == 0 || strncmp(v, "0o", 2) == 0)) {
        errno = 0;
        unsigned long long x = strtoull(v + 2, NULL, v[1] == 'x' ? 16 : 8);
        if (errno == 0) {
            snprintf(text, sizeof text, "%llu", x);
            return cJSON_CreateRaw(text);
        }
        *finite = false; /* beyond 64 bits */
        return NULL;
    }
    double x = strtod(v, NULL); /* a float, or a decimal integer beyond 64 bits */
    if (!isfinite(x)) {
        *finite = false;
        return NULL;
    }
    return cJSON_CreateRaw(bt_buf_format_number(text, x, 1));
}

static bt_status s_scalar(const s_reader *r, const yaml_event_t *ev, int line, cJSON **out) {
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", NULL};
    static const char *const infinities[] = {".inf",  ".Inf",  ".INF",  "+.inf", "+.Inf",
                                             "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
                                             ".NaN",  ".NAN",  NULL};
    const char *v = (const char *)ev->data.scalar.value;
    BT_TRY(s_check_scalar(r, ev, line));
    bool typed = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !ev->data.scalar.tag;
    bool finite = true;
    if (!typed)
        *out = cJSON_CreateString(v);
    else if (s_is_one_of(v, nulls))
        *out = cJSON_CreateNull();
    else if (s_is_one_of(v, trues) || s_is_one_of(v, falses))
        *out = cJSON_CreateBool(s_is_one_of(v, trues));
    else if (s_is_one_of(v, infinities))
        return s_fail_at(r, line, BT_EINVAL,
                         "%s: JSON has no infinity or NaN (and no key takes one); quote it for "
                         "a string",
                         v);
    else if (s_is_decimal(v) || s_is_float(v) ||
             (strncmp(v, "0x", 2) == 0 && s_is_digits(v + 2, "0123456789abcdefABCDEF")) ||
             (strncmp(v, "0o", 2) == 0 && s_is_digits(v + 2, "01234567")))
        *out = s_number(v, &finite);
    else
        *out = cJSON_CreateString(v);
    if (!finite)
        return s_fail_at(r, line, BT_EINVAL, "%s: beyond the range of a number", v);
    return *out ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
}

static bt_status s_node(s_reader *r, const yaml_event_t *ev, int depth, cJSON **out);

/*  The members of a mapping whose start event was read, up to its end. */
static bt_status s_mapping(s_reader *r, int depth, cJSON *obj) {
    size_t base = strlen(r->path);
    bt_status st = BT_OK;
    while (st == BT_OK) {
        yaml_event_t key, value;
        BT_TRY(s_next(r, &key));
        if (key.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&key);
            return BT_OK;
        }
        int line = (int)key.start_mark.line + 1;
        if (key.type != YAML_SCALAR_EVENT) {
            st = key.type == YAML_ALIAS_EVENT
                     ? s_alias(r, line, key.data.alias.anchor)
                     : s_fail_at(r, line, BT_EFORMAT, "a key that is not a scalar");
            yaml_event_delete(&key);
            return st;
        }
        const char *name = (const char *)key.data.scalar.value;
        snprintf(r->path + base, sizeof r->path - base, "%s%s", base ? "." : "", name);
        st = s_check_scalar(r, &key, line);
        if (st == BT_OK && cJSON_GetObjectItemCaseSensitive(obj, name))
            st = s_fail_at(r, line, BT_EINVAL, "duplicate key");
        if (st == BT_OK)
            st = s_mark(r, line);
        if (st == BT_OK)
            st = s_next(r, &value);
        if (st == BT_OK) {
            cJSON *child = NULL;
            st = s_node(r, &value, depth + 1, &child);
            yaml_event_delete(&value);
            if (st == BT_OK && !cJSON_AddItemToObject(obj, name, child)) {
                cJSON_Delete(child);
                st = bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
            }
        }
        yaml_event_delete(&key);
        r->path[base] = '\0';
    }
    return st;
}

/*  The items of a sequence whose start event was read, up to its end. */
static bt_status s_sequence(s_reader *r, int depth, cJSON *arr) {
    size_t base = strlen(r->path);
    for (int i = 0;; i++) {
        yaml_event_t item;
        BT_TRY(s_next(r, &item));
        if (item.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&item);
            return BT_OK;
        }
        snprintf(r->path + base, sizeof r->path - base, "[%d]", i);
        cJSON *child = NULL;
        bt_status st = s_mark(r, (int)item.start_mark.line + 1);
        if (st == BT_OK)
            st = s_node(r, &item, depth + 1, &child);
        yaml_event_delete(&item);
        if (st == BT_OK && !cJSON_AddItemToArray(arr, child)) {
            cJSON_Delete(child);
            st = bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
        }
        r->path[base] = '\0';
        BT_TRY(st);
    }
}

/*  The node that starts with ev (read by the caller, who deletes it) into *out. */
static bt_status s_node(s_reader *r, const yaml_event_t *ev, int depth, cJSON **out) {
    int line = (int)ev->start_mark.line + 1;
    *out = NULL;
    if (ev->type == YAML_SCALAR_EVENT)
        return s_scalar(r, ev, line, out);
    if (ev->type == YAML_ALIAS_EVENT)
        return s_alias(r, line, ev->data.alias.anchor);
    bool map = ev->type == YAML_MAPPING_START_EVENT;
    if (!map && ev->type != YAML_SEQUENCE_START_EVENT)
        return s_fail_at(r, line, BT_EFORMAT, "expected a value");
    BT_TRY(s_check_node(r, line,
                        map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor,
                        map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag,
                        map ? S_TAG "map" : S_TAG "seq"));
    if (depth >= S_MAX_DEPTH)
        return s_fail_at(r, line, BT_EFORMAT, "nested deeper than %d", S_MAX_DEPTH);
    *out = map ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!*out)
        return bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
    bt_status st = map ? s_mapping(r, depth, *out) : s_sequence(r, depth, *out);
    if (st != BT_OK) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return st;
}

/*  The stream: nothing (null), or one document. */
static bt_status s_stream(s_reader *r, cJSON **root) {
    yaml_event_t ev;
    BT_TRY(s_next(r, &ev)); /* STREAM_START */
    yaml_event_delete(&ev);
    BT_TRY(s_next(r, &ev));
    if (ev.type == YAML_STREAM_END_EVENT) {
        yaml_event_delete(&ev);
        *root = cJSON_CreateNull();
        return *root ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", r->source);
    }
    yaml_event_delete(&ev); /* DOCUMENT_START */
    BT_TRY(s_next(r, &ev));
    bt_status st = s_mark(r, (int)ev.start_mark.line + 1);
    if (st == BT_OK)
        st = s_node(r, &ev, 0, root);
    yaml_event_delete(&ev);
    BT_TRY(st);
    st = s_next(r, &ev); /* DOCUMENT_END */
    if (st == BT_OK) {
        yaml_event_delete(&ev);
        st = s_next(r, &ev);
    }
    if (st == BT_OK) {
        if (ev.type != YAML_STREAM_END_EVENT)
            st = s_fail_at(r, (int)ev.start_mark.line + 1, BT_EFORMAT,
                           "a second document: a config is one document");
        yaml_event_delete(&ev);
    }
    if (st != BT_OK) {
        cJSON_Delete(*root);
        *root = NULL;
    }
    return st;
}

bt_status bt_yaml_parse(const char *text, size_t len, const char *source, bt_yaml_t **out) {
    *out = NULL;
    s_reader *r = calloc(1, sizeof *r);
    bt_yaml_t *self = calloc(1, sizeof *self);
    if (!r || !self || !yaml_parser_initialize(&r->parser)) {
        free(r);
        free(self);
        return bt_fail(BT_ENOMEM, "%s: out of memory", source);
    }
    r->source = source;
    r->doc = self;
    yaml_parser_set_input_string(&r->parser, (const unsigned char *)text, len);
    cJSON *root = NULL;
    bt_status st = s_stream(r, &root);
    if (st == BT_OK) {
        self->json = cJSON_PrintUnformatted(root);
        if (!self->json)
            st = bt_fail(BT_ENOMEM, "%s: out of memory", source);
    }
    cJSON_Delete(root);
    yaml_parser_delete(&r->parser);
    free(r);
    if (st != BT_OK)
        bt_yaml_destroy(&self);
    *out = self;
    return st;
}

void bt_yaml_destroy(bt_yaml_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_yaml_t *self = *self_p;
    for (int i = 0; i < self->n_lines; i++)
        free(self->lines[i].path);
    free(self->lines);
    if (self->json)
        cJSON_free(self->json);
    free(self);
    *self_p = NULL;
}

const char *bt_yaml_json(const bt_yaml_t *self) {
    return self->json;
}

int bt_yaml_line(const bt_yaml_t *self, const char *path) {
    for (int i = self->n_lines - 1; i >= 0; i--) /* the last: a duplicate's second */
        if (strcmp(self->lines[i].path, path) == 0)
            return self->lines[i].line;
    return 0;
}
