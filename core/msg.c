/*  msg.c — messages as ZeroMQ multipart messages: a JSON header (cJSON, parsed, validated, copied
    and deleted inside this file) and raw tensor frames kept as zmq_msg_t, so a tensor is never
    copied on receive nor, when added zero-copy or shared, on send. */
#include "baton/msg.h"
#include "baton/buf.h"
#include "baton/dtype.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/*  Frames read and kept by bt_msg_recv(): routing id, header, tensors.  Later ones are counted. */
#define S_FRAMES_KEPT (2 + BT_WIRE_TENSORS_MAX)
/*  Room for one quoted, escaped and shortened name or value in a message. */
#define S_QUOTE_LEN 72

typedef enum s_kind { S_NUM, S_BOOL, S_STR } s_kind;

typedef struct s_field {
    char *key;
    s_kind kind;
    double num;
    bool flag;
    char *str;
} s_field;

typedef struct s_tensor {
    char *name;
    bt_dtype dtype;
    int ndim;
    int64_t shape[BT_MAX_DIMS];
    zmq_msg_t frame; /* the payload; never moved in memory once initialised */
} s_tensor;

struct bt_msg {
    bt_msg_type type;
    int64_t id;
    char *run;
    char *user; /* the transport's authenticated identity of the sender (ZAP's user id), or NULL */
    s_field *fields; /* (n_fields), capacity cap_fields */
    int n_fields, cap_fields;
    s_tensor *tensors[BT_WIRE_TENSORS_MAX];
    int n_tensors;
};

static size_t s_frame_max = BT_WIRE_FRAME_MAX_DEFAULT;

void bt_msg_set_frame_max(size_t bytes) {
    s_frame_max = bytes;
}
size_t bt_msg_frame_max(void) {
    return s_frame_max;
}

/* ---- names and text ------------------------------------------------------------------------- */

static const char *const s_type_names[] = {"HELLO", "WELCOME", "PING", "TASK", "RESULT",
                                           "FAIL",  "WEIGHTS", "STOP", "BYE",  "INVALID"};
#define S_N_TYPES ((int)(sizeof s_type_names / sizeof s_type_names[0]))

const char *bt_msg_type_name(bt_msg_type type) {
    return (int)type >= 0 && (int)type < S_N_TYPES ? s_type_names[type] : "?";
}

bool bt_msg_type_parse(const char *name, bt_msg_type *out) {
    for (int i = 0; i < S_N_TYPES; i++)
        if (strcmp(s_type_names[i], name) == 0) {
            *out = (bt_msg_type)i;
            return true;
        }
    return false;
}

/*  A field key or tensor name: 1..BT_WIRE_NAME_MAX bytes of A-Z a-z 0-9 _ . - */
static bool s_is_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok || n == BT_WIRE_NAME_MAX)
            return false;
    }
    return n > 0;
}

/*  s between quote characters, fit for a one-line message: printable ASCII kept, other bytes and
    the quote itself as \xNN, cut with "..." when long.  Returns buf. */
static const char *s_quote(char buf[S_QUOTE_LEN], const char *s, char quote) {
    size_t n = 0, i = 0;
    buf[n++] = quote;
    for (; s[i] && n + 4 + 5 < S_QUOTE_LEN; i++) { /* room for \xNN, then ..." and NUL */
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != (unsigned char)quote && c != '\\')
            buf[n++] = (char)c;
        else
            n += (size_t)snprintf(buf + n, S_QUOTE_LEN - n, "\\x%02x", c);
    }
    snprintf(buf + n, S_QUOTE_LEN - n, "%s%c", s[i] ? "..." : "", quote);
    return buf;
}

/*  Checks a string value: at most BT_WIRE_STR_MAX bytes of UTF-8.  what names it in the error. */
static bt_status s_check_text(const bt_msg_t *m, const char *what, const char *s, bt_status code) {
    size_t len = strlen(s);
    if (len > BT_WIRE_STR_MAX)
        return bt_fail(code, "%s: %s: a string of %zu bytes, more than %d",
                       bt_msg_type_name(m->type), what, len, BT_WIRE_STR_MAX);
    if (!bt_utf8_is_valid((const uint8_t *)s, len))
        return bt_fail(code, "%s: %s: a string that is not UTF-8", bt_msg_type_name(m->type), what);
    return BT_OK;
}

static char *s_strdup(const char *s) {
    size_t len = strlen(s) + 1;
    char *copy = malloc(len);
    if (copy)
        memcpy(copy, s, len);
    return copy;
}

/* ---- messages ------------------------------------------------------------------------------- */

bt_msg_t *bt_msg_new(bt_msg_type type) {
    BT_ASSERT((int)type >= 0 && (int)type < S_N_TYPES);
    bt_msg_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->type = type;
    self->run = s_strdup("");
    if (!self->run) {
        free(self);
        return NULL;
    }
    return self;
}

void bt_msg_destroy(bt_msg_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_msg_t *self = *self_p;
    for (int i = 0; i < self->n_fields; i++) {
        free(self->fields[i].key);
        free(self->fields[i].str);
    }
    for (int i = 0; i < self->n_tensors; i++) {
        zmq_msg_close(&self->tensors[i]->frame);
        free(self->tensors[i]->name);
        free(self->tensors[i]);
    }
    free(self->fields);
    free(self->user);
    free(self->run);
    free(self);
    *self_p = NULL;
}

bt_msg_type bt_msg_type_of(const bt_msg_t *self) {
    return self->type;
}
int64_t bt_msg_id(const bt_msg_t *self) {
    return self->id;
}
const char *bt_msg_run(const bt_msg_t *self) {
    return self->run;
}

void bt_msg_set_id(bt_msg_t *self, int64_t id) {
    BT_ASSERT(id >= 0 && id <= BT_WIRE_INT_MAX);
    self->id = id;
}

static bt_status s_set_run(bt_msg_t *self, const char *run, bt_status code) {
    bt_status rc = s_check_text(self, "'run'", run, code);
    if (rc != BT_OK)
        return rc;
    char *copy = s_strdup(run);
    if (!copy)
        return bt_fail(BT_ENOMEM, "%s: out of memory", bt_msg_type_name(self->type));
    free(self->run);
    self->run = copy;
    return BT_OK;
}

bt_status bt_msg_set_run(bt_msg_t *self, const char *run) {
    return s_set_run(self, run, BT_EINVAL);
}

/* ---- header fields -------------------------------------------------------------------------- */

static s_field *s_find(const bt_msg_t *m, const char *key) {
    for (int i = 0; i < m->n_fields; i++)
        if (strcmp(m->fields[i].key, key) == 0)
            return &m->fields[i];
    return NULL;
}

/*  Appends an empty field called key (absent from m), failing with code when the key is not a
    valid name or m is full. */
static bt_status s_field_new(bt_msg_t *m, const char *key, bt_status code, s_field **out) {
    const char *type = bt_msg_type_name(m->type);
    char q[S_QUOTE_LEN];
    if (!s_is_name(key))
        return bt_fail(code, "%s: field %s: not a valid key (1 to %d bytes of A-Z a-z 0-9 _ . -)",
                       type, s_quote(q, key, '\''), BT_WIRE_NAME_MAX);
    if (m->n_fields == BT_WIRE_FIELDS_MAX)
        return bt_fail(code, "%s: more than %d fields", type, BT_WIRE_FIELDS_MAX);
    if (m->n_fields == m->cap_fields) {
        int cap = m->cap_fields ? 2 * m->cap_fields : 8;
        s_field *grown = realloc(m->fields, (size_t)cap * sizeof *grown);
        if (!grown)
            return bt_fail(BT_ENOMEM, "%s: out of memory", type);
        m->fields = grown;
        m->cap_fields = cap;
    }
    char *copy = s_strdup(key);
    if (!copy)
        return bt_fail(BT_ENOMEM, "%s: out of memory", type);
    *out = &m->fields[m->n_fields++];
    **out = (s_field){.key = copy};
    return BT_OK;
}

/*  The field key, emptied for a new value: the existing one or a new one. */
static bt_status s_field_slot(bt_msg_t *m, const char *key, s_field **out) {
    s_field *f = s_find(m, key);
    if (!f)
        return s_field_new(m, key, BT_EINVAL, out);
    free(f->str);
    *f = (s_field){.key = f->key};
    *out = f;
    return BT_OK;
}

bt_status bt_msg_set_int(bt_msg_t *self, const char *key, int64_t value) {
    if (value < -BT_WIRE_INT_MAX || value > BT_WIRE_INT_MAX)
        return bt_fail(BT_EINVAL, "%s: field '%s': %" PRId64 " is beyond +-2^53",
                       bt_msg_type_name(self->type), key, value);
    return bt_msg_set_double(self, key, (double)value);
}

bt_status bt_msg_set_double(bt_msg_t *self, const char *key, double value) {
    if (!isfinite(value))
        return bt_fail(BT_EINVAL, "%s: field '%s': %g is not finite", bt_msg_type_name(self->type),
                       key, value);
    s_field *f;
    bt_status rc = s_field_slot(self, key, &f);
    if (rc == BT_OK)
        f->num = value;
    return rc;
}

bt_status bt_msg_set_bool(bt_msg_t *self, const char *key, bool value) {
    s_field *f;
    bt_status rc = s_field_slot(self, key, &f);
    if (rc == BT_OK) {
        f->kind = S_BOOL;
        f->flag = value;
    }
    return rc;
}

/*  Gives the field key (a new one when fresh) the string value, failing with code. */
static bt_status s_put_str(bt_msg_t *m, const char *key, const char *value, bool fresh,
                           bt_status code) {
    char what[S_QUOTE_LEN + 8], q[S_QUOTE_LEN];
    snprintf(what, sizeof what, "field %s", s_quote(q, key, '\''));
    bt_status rc = s_check_text(m, what, value, code);
    char *copy = rc == BT_OK ? s_strdup(value) : NULL;
    if (rc == BT_OK && !copy)
        rc = bt_fail(BT_ENOMEM, "%s: out of memory", bt_msg_type_name(m->type));
    s_field *f = NULL;
    if (rc == BT_OK)
        rc = fresh ? s_field_new(m, key, code, &f) : s_field_slot(m, key, &f);
    if (rc != BT_OK) {
        free(copy);
        return rc;
    }
    f->kind = S_STR;
    f->str = copy;
    return BT_OK;
}

bt_status bt_msg_set_str(bt_msg_t *self, const char *key, const char *value) {
    return s_put_str(self, key, value, false, BT_EINVAL);
}

bool bt_msg_has(const bt_msg_t *self, const char *key) {
    return s_find(self, key) != NULL;
}
int bt_msg_field_count(const bt_msg_t *self) {
    return self->n_fields;
}

const char *bt_msg_field_key(const bt_msg_t *self, int i) {
    BT_ASSERT(i >= 0 && i < self->n_fields);
    return self->fields[i].key;
}

/*  The value of f for an error message: a number, true/false or a quoted string. */
static const char *s_describe(char buf[S_QUOTE_LEN], const s_field *f) {
    if (f->kind == S_STR)
        return s_quote(buf, f->str, '"');
    if (f->kind == S_BOOL)
        return f->flag ? "true" : "false";
    snprintf(buf, S_QUOTE_LEN, "%.17g", f->num);
    return buf;
}

/*  The field key, or BT_EFORMAT "TYPE: field 'key': missing". */
static bt_status s_get(const bt_msg_t *m, const char *key, const s_field **out) {
    *out = s_find(m, key);
    if (!*out)
        return bt_fail(BT_EFORMAT, "%s: field '%s': missing", bt_msg_type_name(m->type), key);
    return BT_OK;
}

/*  BT_EFORMAT "TYPE: field 'key': expected WANT, got VALUE". */
static bt_status s_mistyped(const bt_msg_t *m, const s_field *f, const char *want) {
    char got[S_QUOTE_LEN];
    return bt_fail(BT_EFORMAT, "%s: field '%s': expected %s, got %s", bt_msg_type_name(m->type),
                   f->key, want, s_describe(got, f));
}

bt_status bt_msg_get_int(const bt_msg_t *self, const char *key, int64_t min, int64_t max,
                         int64_t *out) {
    const s_field *f;
    bt_status rc = s_get(self, key, &f);
    if (rc != BT_OK)
        return rc;
    min = min > -BT_WIRE_INT_MAX ? min : -BT_WIRE_INT_MAX;
    max = max < BT_WIRE_INT_MAX ? max : BT_WIRE_INT_MAX;
    double d = f->num;
    if (f->kind != S_NUM || !(d >= (double)min && d <= (double)max) || d != floor(d)) {
        char want[96];
        snprintf(want, sizeof want, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
        return s_mistyped(self, f, want);
    }
    *out = (int64_t)d;
    return BT_OK;
}

bt_status bt_msg_get_double(const bt_msg_t *self, const char *key, double min, double max,
                            double *out) {
    const s_field *f;
    bt_status rc = s_get(self, key, &f);
    if (rc != BT_OK)
        return rc;
    if (f->kind != S_NUM || !(f->num >= min && f->num <= max)) {
        char want[96];
        snprintf(want, sizeof want, "a number in [%.17g, %.17g]", min, max);
        return s_mistyped(self, f, want);
    }
    *out = f->num;
    return BT_OK;
}

bt_status bt_msg_get_bool(const bt_msg_t *self, const char *key, bool *out) {
    const s_field *f;
    bt_status rc = s_get(self, key, &f);
    if (rc != BT_OK)
        return rc;
    if (f->kind != S_BOOL)
        return s_mistyped(self, f, "true or false");
    *out = f->flag;
    return BT_OK;
}

bt_status bt_msg_get_str(const bt_msg_t *self, const char *key, size_t maxlen, const char **out) {
    const s_field *f;
    bt_status rc = s_get(self, key, &f);
    if (rc != BT_OK)
        return rc;
    if (f->kind != S_STR || strlen(f->str) > maxlen) {
        char want[64];
        snprintf(want, sizeof want, "a string of at most %zu bytes", maxlen);
        return s_mistyped(self, f, want);
    }
    *out = f->str;
    return BT_OK;
}

/* ---- tensors -------------------------------------------------------------------------------- */

/*  Checks a tensor about to join m and returns its size in *nbytes; fails with code. */
static bt_status s_tensor_check(const bt_msg_t *m, const char *name, bt_dtype dtype, int ndim,
                                const int64_t *shape, bt_status code, size_t *nbytes) {
    const char *type = bt_msg_type_name(m->type);
    size_t esize = bt_dtype_size(dtype);
    char q[S_QUOTE_LEN];
    if (!s_is_name(name))
        return bt_fail(code, "%s: tensor %s: not a valid name (1 to %d bytes of A-Z a-z 0-9 _ . -)",
                       type, s_quote(q, name, '\''), BT_WIRE_NAME_MAX);
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i]->name, name) == 0)
            return bt_fail(code, "%s: tensor '%s' appears twice", type, name);
    if (m->n_tensors == BT_WIRE_TENSORS_MAX)
        return bt_fail(code, "%s: more than %d tensors", type, BT_WIRE_TENSORS_MAX);
    if (esize == 0)
        return bt_fail(code, "%s: tensor '%s': unknown dtype %d", type, name, (int)dtype);
    if (ndim < 0 || ndim > BT_MAX_DIMS)
        return bt_fail(code, "%s: tensor '%s': %d dims, expected 0 to %d", type, name, ndim,
                       BT_MAX_DIMS);
    uint64_t n = esize, limit = s_frame_max;
    bool empty = false, over = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || shape[i] > BT_WIRE_INT_MAX)
            return bt_fail(code, "%s: tensor '%s': dim %d is %" PRId64, type, name, i, shape[i]);
        if (shape[i] == 0)
            empty = true;
        else if (n > limit / (uint64_t)shape[i])
            over = true; /* n * shape[i] would pass the limit, or wrap */
        else
            n *= (uint64_t)shape[i];
    }
    if (!empty && (over || n > limit))
        return bt_fail(code, "%s: tensor '%s': more than the frame limit of %zu bytes", type, name,
                       s_frame_max);
    *nbytes = empty ? 0 : (size_t)n;
    return BT_OK;
}

/*  Appends a checked tensor whose payload is moved out of *frame (left empty). */
static bt_status s_tensor_append(bt_msg_t *m, const char *name, bt_dtype dtype, int ndim,
                                 const int64_t *shape, zmq_msg_t *frame) {
    s_tensor *t = calloc(1, sizeof *t);
    char *copy = s_strdup(name);
    if (!t || !copy) {
        free(t);
        free(copy);
        return bt_fail(BT_ENOMEM, "%s: out of memory", bt_msg_type_name(m->type));
    }
    t->name = copy;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim > 0)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    zmq_msg_init(&t->frame);
    zmq_msg_move(&t->frame, frame);
    m->tensors[m->n_tensors++] = t;
    return BT_OK;
}

bt_status bt_msg_add_tensor(bt_msg_t *self, const char *name, bt_dtype dtype, int ndim,
                            const int64_t *shape, const void *data) {
    size_t nbytes;
    bt_status rc = s_tensor_check(self, name, dtype, ndim, shape, BT_EINVAL, &nbytes);
    if (rc != BT_OK)
        return rc;
    BT_ASSERT(data || nbytes == 0);
    zmq_msg_t frame;
    if (zmq_msg_init_size(&frame, nbytes) != 0)
        return bt_fail(BT_ENOMEM, "%s: tensor '%s': cannot allocate %zu bytes",
                       bt_msg_type_name(self->type), name, nbytes);
    if (nbytes)
        memcpy(zmq_msg_data(&frame), data, nbytes);
    rc = s_tensor_append(self, name, dtype, ndim, shape, &frame);
    zmq_msg_close(&frame);
    return rc;
}

static void s_free(void *data, void *hint) {
    (void)hint;
    free(data);
}

bt_status bt_msg_add_tensor_zero_copy(bt_msg_t *self, const char *name, bt_dtype dtype, int ndim,
                                      const int64_t *shape, void *data, bt_msg_free_fn *free_fn,
                                      void *hint) {
    free_fn = free_fn ? free_fn : s_free;
    size_t nbytes;
    bt_status rc = s_tensor_check(self, name, dtype, ndim, shape, BT_EINVAL, &nbytes);
    BT_ASSERT(rc != BT_OK || data || nbytes == 0);
    zmq_msg_t frame;
    if (rc == BT_OK && zmq_msg_init_data(&frame, data, nbytes, free_fn, hint) != 0)
        rc = bt_fail(BT_ENOMEM, "%s: out of memory", bt_msg_type_name(self->type));
    if (rc != BT_OK) {
        free_fn(data, hint);
        return rc;
    }
    rc = s_tensor_append(self, name, dtype, ndim, shape, &frame);
    zmq_msg_close(&frame); /* runs free_fn when the append failed */
    return rc;
}

bt_status bt_msg_add_tensor_shared(bt_msg_t *self, const bt_msg_t *src, int i) {
    BT_ASSERT(i >= 0 && i < src->n_tensors);
    s_tensor *t = src->tensors[i];
    size_t nbytes;
    bt_status rc = s_tensor_check(self, t->name, t->dtype, t->ndim, t->shape, BT_EINVAL, &nbytes);
    if (rc != BT_OK)
        return rc;
    zmq_msg_t frame;
    zmq_msg_init(&frame);
    /* counts one more reference to the buffer (atomically); src's frame is otherwise unchanged */
    if (zmq_msg_copy(&frame, &t->frame) != 0)
        rc = bt_fail(BT_ENOMEM, "%s: out of memory", bt_msg_type_name(self->type));
    else
        rc = s_tensor_append(self, t->name, t->dtype, t->ndim, t->shape, &frame);
    zmq_msg_close(&frame);
    return rc;
}

int bt_msg_tensor_count(const bt_msg_t *self) {
    return self->n_tensors;
}

bt_msg_tensor bt_msg_tensor_at(const bt_msg_t *self, int i) {
    BT_ASSERT(i >= 0 && i < self->n_tensors);
    s_tensor *t = self->tensors[i];
    bt_msg_tensor out = {.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
    memcpy(out.shape, t->shape, sizeof out.shape);
    out.nbytes = zmq_msg_size(&t->frame);
    out.data = zmq_msg_data(&t->frame);
    return out;
}

bt_status bt_msg_get_tensor(const bt_msg_t *self, const char *name, bt_dtype dtype, int ndim,
                            bt_msg_tensor *out) {
    const char *type = bt_msg_type_name(self->type);
    for (int i = 0; i < self->n_tensors; i++) {
        if (strcmp(self->tensors[i]->name, name) != 0)
            continue;
        const s_tensor *t = self->tensors[i];
        const char *want = bt_dtype_code(dtype);
        if (t->dtype != dtype || t->ndim != ndim)
            return bt_fail(BT_EFORMAT,
                           "%s: tensor '%s': expected %s with %d dims, got %s with %d dims", type,
                           name, want ? want : "?", ndim, bt_dtype_code(t->dtype), t->ndim);
        *out = bt_msg_tensor_at(self, i);
        return BT_OK;
    }
    return bt_fail(BT_EFORMAT, "%s: tensor '%s': missing", type, name);
}

/* ---- required fields ------------------------------------------------------------------------ */

static bt_status s_check_one_of(const bt_msg_t *m, const bt_msg_rule *r) {
    const s_field *f;
    bt_status rc = s_get(m, r->key, &f);
    if (rc != BT_OK)
        return rc;
    char want[96] = "one of";
    for (int i = 0; r->choices[i]; i++) {
        if (f->kind == S_STR && strcmp(f->str, r->choices[i]) == 0)
            return BT_OK;
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s %s", i ? "," : "",
                 r->choices[i]);
    }
    return s_mistyped(m, f, want);
}

bt_status bt_msg_check(const bt_msg_t *self, const bt_msg_rule *rules, int n) {
    for (int i = 0; i < n; i++) {
        const bt_msg_rule *r = &rules[i];
        int64_t v;
        const char *s;
        bt_status rc = BT_OK;
        if (r->type != self->type)
            continue;
        switch (r->kind) {
        case BT_MSG_RULE_INT: rc = bt_msg_get_int(self, r->key, r->min, r->max, &v); break;
        case BT_MSG_RULE_TEXT: rc = bt_msg_get_str(self, r->key, BT_WIRE_STR_MAX, &s); break;
        case BT_MSG_RULE_ONE_OF: rc = s_check_one_of(self, r); break;
        }
        if (rc != BT_OK)
            return rc;
    }
    return BT_OK;
}

/* ---- encoding and sending ------------------------------------------------------------------- */

/*  A JSON number item holding the shortest decimal text that reads back as exactly value (cJSON's
    own printer settles for 15 digits when they come within an epsilon). */
static cJSON *s_number(double value) {
    char text[BT_BUF_NUMBER_LEN];
    return cJSON_CreateRaw(bt_buf_format_number(text, value, 15));
}

/*  Adds item to obj under key (to an array when key is NULL); deletes it when that fails. */
static bool s_add(cJSON *obj, const char *key, cJSON *item) {
    bool ok =
        item && (key ? cJSON_AddItemToObject(obj, key, item) : cJSON_AddItemToArray(obj, item));
    if (!ok)
        cJSON_Delete(item);
    return ok;
}

static bool s_encode_field(cJSON *obj, const s_field *f) {
    if (f->kind == S_NUM)
        return s_add(obj, f->key, s_number(f->num));
    if (f->kind == S_BOOL)
        return cJSON_AddBoolToObject(obj, f->key, f->flag) != NULL;
    return cJSON_AddStringToObject(obj, f->key, f->str) != NULL;
}

static bool s_encode_tensor(cJSON *arr, const s_tensor *t) {
    cJSON *e = cJSON_CreateObject(), *shape = NULL;
    bool ok = s_add(arr, NULL, e) && cJSON_AddStringToObject(e, "name", t->name) &&
              cJSON_AddStringToObject(e, "dtype", bt_dtype_code(t->dtype)) &&
              (shape = cJSON_AddArrayToObject(e, "shape")) != NULL;
    for (int i = 0; ok && i < t->ndim; i++)
        ok = s_add(shape, NULL, s_number((double)t->shape[i]));
    return ok;
}

/*  The header of m as JSON text.  Caller owns *json (cJSON_free()). */
static bt_status s_encode(const bt_msg_t *m, char **json) {
    cJSON *root = cJSON_CreateObject(), *f = NULL, *tensors = NULL;
    bool ok = root && s_add(root, "v", s_number(BT_WIRE_VERSION)) &&
              cJSON_AddStringToObject(root, "type", bt_msg_type_name(m->type)) &&
              cJSON_AddStringToObject(root, "run", m->run) &&
              s_add(root, "id", s_number((double)m->id));
    if (ok && m->n_fields)
        ok = (f = cJSON_AddObjectToObject(root, "f")) != NULL;
    for (int i = 0; ok && i < m->n_fields; i++)
        ok = s_encode_field(f, &m->fields[i]);
    if (ok && m->n_tensors)
        ok = (tensors = cJSON_AddArrayToObject(root, "tensors")) != NULL;
    for (int i = 0; ok && i < m->n_tensors; i++)
        ok = s_encode_tensor(tensors, m->tensors[i]);
    *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!*json)
        return bt_fail(BT_ENOMEM, "%s: out of memory", bt_msg_type_name(m->type));
    size_t len = strlen(*json);
    if (len > BT_WIRE_HEADER_MAX) {
        cJSON_free(*json);
        *json = NULL;
        return bt_fail(BT_EFORMAT, "%s: header of %zu bytes, more than %d",
                       bt_msg_type_name(m->type), len, BT_WIRE_HEADER_MAX);
    }
    return BT_OK;
}

static bool s_is_router(void *socket) {
    int type = -1;
    size_t size = sizeof type;
    BT_ASSERT(zmq_getsockopt(socket, ZMQ_TYPE, &type, &size) == 0);
    return type == ZMQ_ROUTER;
}

/*  zmq_send, or zmq_msg_send when frame is not NULL, retried when a signal interrupts: a multipart
    message left half sent would swallow the next one. */
static bt_status s_send_frame(void *socket, const void *buf, size_t len, zmq_msg_t *frame,
                              bool more) {
    int flags = more ? ZMQ_SNDMORE : 0, rc;
    do
        rc = frame ? zmq_msg_send(frame, socket, flags) : zmq_send(socket, buf, len, flags);
    while (rc < 0 && zmq_errno() == EINTR);
    return rc < 0 ? bt_fail(BT_EIO, "send: %s", zmq_strerror(zmq_errno())) : BT_OK;
}

static bt_status s_send_frames(bt_msg_t *m, void *socket, const void *peer_id, size_t peer_len,
                               const char *json) {
    bt_status rc = BT_OK;
    if (peer_id)
        rc = s_send_frame(socket, peer_id, peer_len, NULL, true);
    if (rc == BT_OK)
        rc = s_send_frame(socket, json, strlen(json), NULL, m->n_tensors > 0);
    for (int i = 0; rc == BT_OK && i < m->n_tensors; i++)
        rc = s_send_frame(socket, NULL, 0, &m->tensors[i]->frame, i + 1 < m->n_tensors);
    return rc;
}

bt_status bt_msg_send(bt_msg_t **msg_p, void *socket, const void *peer_id, size_t peer_len) {
    BT_ASSERT(msg_p && *msg_p);
    BT_ASSERT(s_is_router(socket) == (peer_id != NULL));
    bt_msg_t *m = *msg_p;
    *msg_p = NULL;
    char *json = NULL;
    bt_status rc = s_encode(m, &json);
    if (rc == BT_OK)
        rc = s_send_frames(m, socket, peer_id, peer_len, json);
    cJSON_free(json);
    bt_msg_destroy(&m);
    return rc;
}

/* ---- decoding ------------------------------------------------------------------------------- */

/*  Finds each of the n keys of obj's members in items (NULL when absent); refuses other keys and
    repeated ones.  what names obj in the message. */
static bt_status s_members(const cJSON *obj, const char *const *keys, int n, const cJSON **items,
                           const char *what) {
    char q[S_QUOTE_LEN];
    for (int k = 0; k < n; k++)
        items[k] = NULL;
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        int k = 0;
        while (k < n && strcmp(keys[k], item->string) != 0)
            k++;
        if (k == n)
            return bt_fail(BT_EFORMAT, "%s: unknown key %s", what, s_quote(q, item->string, '\''));
        if (items[k])
            return bt_fail(BT_EFORMAT, "%s: key '%s' appears twice", what, keys[k]);
        items[k] = item;
    }
    return BT_OK;
}

/*  A JSON number that is an integer in [min, max]. */
static bool s_json_int(const cJSON *item, int64_t min, int64_t max, int64_t *out) {
    if (!cJSON_IsNumber(item))
        return false;
    double d = item->valuedouble;
    if (!(d >= (double)min && d <= (double)max) || d != floor(d))
        return false;
    *out = (int64_t)d;
    return true;
}

/*  The header's first line of checks: "v", "type" (m is created here), "id" and "run". */
static bt_status s_decode_envelope(const cJSON **items, bt_msg_t **out) {
    static const char *const names[] = {"v", "type", "run", "id"};
    char q[S_QUOTE_LEN];
    for (int k = 0; k < 4; k++)
        if (!items[k])
            return bt_fail(BT_EFORMAT, "header: missing '%s'", names[k]);
    if (!cJSON_IsNumber(items[0]) || items[0]->valuedouble != BT_WIRE_VERSION)
        return bt_fail(BT_EFORMAT, "header: 'v' is not %d (protocol version)", BT_WIRE_VERSION);
    bt_msg_type type;
    if (!cJSON_IsString(items[1]) || !bt_msg_type_parse(items[1]->valuestring, &type))
        return bt_fail(BT_EFORMAT, "header: 'type' is not a message type%s%s",
                       cJSON_IsString(items[1]) ? ": " : "",
                       cJSON_IsString(items[1]) ? s_quote(q, items[1]->valuestring, '"') : "");
    bt_msg_t *m = bt_msg_new(type);
    if (!m)
        return bt_fail(BT_ENOMEM, "header: out of memory");
    *out = m;
    if (!s_json_int(items[3], 0, BT_WIRE_INT_MAX, &m->id))
        return bt_fail(BT_EFORMAT, "%s: 'id': expected an integer in [0, %" PRId64 "]",
                       bt_msg_type_name(type), BT_WIRE_INT_MAX);
    if (!cJSON_IsString(items[2]))
        return bt_fail(BT_EFORMAT, "%s: 'run': expected a string", bt_msg_type_name(type));
    return s_set_run(m, items[2]->valuestring, BT_EFORMAT);
}

static bt_status s_decode_field(bt_msg_t *m, const cJSON *item) {
    const char *type = bt_msg_type_name(m->type), *key = item->string;
    char q[S_QUOTE_LEN];
    s_field *f = NULL;
    if (s_find(m, key))
        return bt_fail(BT_EFORMAT, "%s: field '%s' appears twice", type, key);
    if (cJSON_IsString(item))
        return s_put_str(m, key, item->valuestring, true, BT_EFORMAT);
    if (!cJSON_IsBool(item) && !(cJSON_IsNumber(item) && isfinite(item->valuedouble)))
        return bt_fail(BT_EFORMAT, "%s: field %s: expected a finite number, a boolean or a string",
                       type, s_quote(q, key, '\''));
    bt_status rc = s_field_new(m, key, BT_EFORMAT, &f);
    if (rc == BT_OK && cJSON_IsBool(item)) {
        f->kind = S_BOOL;
        f->flag = cJSON_IsTrue(item);
    } else if (rc == BT_OK) {
        f->num = item->valuedouble;
    }
    return rc;
}

static bt_status s_decode_fields(bt_msg_t *m, const cJSON *obj) {
    if (!obj)
        return BT_OK;
    if (!cJSON_IsObject(obj))
        return bt_fail(BT_EFORMAT, "%s: 'f': expected an object", bt_msg_type_name(m->type));
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        bt_status rc = s_decode_field(m, item);
        if (rc != BT_OK)
            return rc;
    }
    return BT_OK;
}

/*  Reads a tensor entry's shape: an array of at most BT_MAX_DIMS integers in [0, 2^53]. */
static bool s_decode_shape(const cJSON *arr, int *ndim, int64_t *shape) {
    if (!cJSON_IsArray(arr))
        return false;
    *ndim = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, arr) {
        if (*ndim == BT_MAX_DIMS || !s_json_int(dim, 0, BT_WIRE_INT_MAX, &shape[*ndim]))
            return false;
        (*ndim)++;
    }
    return true;
}

/*  Tensor entry i of the header, paired with its frame (moved into m). */
static bt_status s_decode_tensor(bt_msg_t *m, const cJSON *entry, int i, zmq_msg_t *frame) {
    static const char *const keys[] = {"name", "dtype", "shape"};
    const char *type = bt_msg_type_name(m->type);
    const cJSON *items[3];
    char what[64], q[S_QUOTE_LEN];
    snprintf(what, sizeof what, "%s: tensor %d", type, i);
    if (!cJSON_IsObject(entry))
        return bt_fail(BT_EFORMAT, "%s: expected an object {name, dtype, shape}", what);
    bt_status rc = s_members(entry, keys, 3, items, what);
    if (rc != BT_OK)
        return rc;
    if (!cJSON_IsString(items[0]) || !cJSON_IsString(items[1]) || !items[2])
        return bt_fail(BT_EFORMAT, "%s: expected string name and dtype and a shape", what);
    const char *name = items[0]->valuestring;
    bt_dtype dtype;
    int ndim;
    int64_t shape[BT_MAX_DIMS];
    size_t nbytes;
    if (!bt_dtype_from_code(items[1]->valuestring, &dtype))
        return bt_fail(BT_EFORMAT, "%s: unknown dtype %s", what,
                       s_quote(q, items[1]->valuestring, '"'));
    if (!s_decode_shape(items[2], &ndim, shape))
        return bt_fail(BT_EFORMAT, "%s: shape: expected at most %d integers in [0, %" PRId64 "]",
                       what, BT_MAX_DIMS, BT_WIRE_INT_MAX);
    rc = s_tensor_check(m, name, dtype, ndim, shape, BT_EFORMAT, &nbytes);
    if (rc == BT_OK && zmq_msg_size(frame) != nbytes)
        rc = bt_fail(BT_EFORMAT,
                     "%s: tensor '%s': shape and dtype %s make %zu bytes, its frame holds %zu",
                     type, name, bt_dtype_code(dtype), nbytes, zmq_msg_size(frame));
    return rc == BT_OK ? s_tensor_append(m, name, dtype, ndim, shape, frame) : rc;
}

static bt_status s_decode_tensors(bt_msg_t *m, const cJSON *arr, zmq_msg_t *frames,
                                  size_t n_frames) {
    const char *type = bt_msg_type_name(m->type);
    if (arr && !cJSON_IsArray(arr))
        return bt_fail(BT_EFORMAT, "%s: 'tensors': expected an array", type);
    int n = arr ? cJSON_GetArraySize(arr) : 0;
    if (n > BT_WIRE_TENSORS_MAX)
        return bt_fail(BT_EFORMAT, "%s: %d tensors, more than %d", type, n, BT_WIRE_TENSORS_MAX);
    if ((size_t)n != n_frames)
        return bt_fail(BT_EFORMAT, "%s: header lists %d tensors but %zu tensor frames followed",
                       type, n, n_frames);
    int i = 0;
    const cJSON *entry;
    cJSON_ArrayForEach(entry, arr) {
        bt_status rc = s_decode_tensor(m, entry, i, &frames[i]);
        if (rc != BT_OK)
            return rc;
        i++;
    }
    return BT_OK;
}

/*  True when text holds the escape \u0000, which cJSON would decode into a NUL that silently cuts
    the string short. */
static bool s_has_nul_escape(const char *text, size_t len) {
    for (size_t i = 0; i + 1 < len; i++)
        if (text[i] == '\\') {
            if (len - i >= 6 && memcmp(text + i + 1, "u0000", 5) == 0)
                return true;
            i++; /* skips the escaped character */
        }
    return false;
}

/*  Parses the header text: UTF-8, one JSON object, then only whitespace.  On success the caller
    owns the tree in root (cJSON_Delete()). */
static bt_status s_parse_json(const char *text, size_t len, cJSON **root) {
    if (len > BT_WIRE_HEADER_MAX)
        return bt_fail(BT_EFORMAT, "header: %zu bytes, more than %d", len, BT_WIRE_HEADER_MAX);
    if (memchr(text, '\0', len) || !bt_utf8_is_valid((const uint8_t *)text, len))
        return bt_fail(BT_EFORMAT, "header: not UTF-8 text");
    if (s_has_nul_escape(text, len))
        return bt_fail(BT_EFORMAT, "header: a string holds \\u0000");
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    while (*root && end < text + len &&
           (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    if (!*root || end != text + len) {
        cJSON_Delete(*root);
        return bt_fail(BT_EFORMAT, "header: not valid JSON");
    }
    if (!cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        return bt_fail(BT_EFORMAT, "header: not a JSON object");
    }
    return BT_OK;
}

/*  Builds *out from the n frames of a message after any routing id: the header, then the tensor
    frames (moved into *out).  frames holds at least the first 1 + BT_WIRE_TENSORS_MAX of them; a
    message with more is refused from the count alone. */
static bt_status s_decode(zmq_msg_t *frames, size_t n, bt_msg_t **out) {
    static const char *const keys[] = {"v", "type", "run", "id", "f", "tensors"};
    const cJSON *items[6];
    cJSON *root = NULL;
    bt_msg_t *m = NULL;
    *out = NULL;
    if (n == 0)
        return bt_fail(BT_EFORMAT, "header: missing");
    bt_status rc = s_parse_json(zmq_msg_data(&frames[0]), zmq_msg_size(&frames[0]), &root);
    if (rc != BT_OK)
        return rc;
    rc = s_members(root, keys, 6, items, "header");
    if (rc == BT_OK)
        rc = s_decode_envelope(items, &m);
    if (rc == BT_OK)
        rc = s_decode_fields(m, items[4]);
    if (rc == BT_OK)
        rc = s_decode_tensors(m, items[5], &frames[1], n - 1);
    cJSON_Delete(root);
    if (rc != BT_OK)
        bt_msg_destroy(&m);
    *out = m;
    return rc;
}

static void s_close_frames(zmq_msg_t *frames, size_t n) {
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
}

/*  Reads every frame of one message: the first S_FRAMES_KEPT into frames, the rest read, counted
    and dropped.  *n 0: no message (EAGAIN, or EINTR before the first frame). */
static bt_status s_recv_frames(void *socket, int flags, zmq_msg_t *frames, size_t *n) {
    zmq_msg_t dropped;
    bool more = true;
    for (*n = 0; more; (*n)++) {
        zmq_msg_t *f = *n < S_FRAMES_KEPT ? &frames[*n] : &dropped;
        int rc;
        zmq_msg_init(f);
        do /* the rest of a message is already queued: a signal must not split it */
            rc = zmq_msg_recv(f, socket, *n ? 0 : flags);
        while (rc < 0 && *n && zmq_errno() == EINTR);
        if (rc < 0) {
            int err = zmq_errno();
            zmq_msg_close(f);
            s_close_frames(frames, *n < S_FRAMES_KEPT ? *n : S_FRAMES_KEPT);
            bool none = *n == 0 && (err == EAGAIN || err == EINTR);
            *n = 0;
            return none ? BT_OK : bt_fail(BT_EIO, "recv: %s", zmq_strerror(err));
        }
        more = zmq_msg_more(f);
        if (f == &dropped)
            zmq_msg_close(f);
    }
    return BT_OK;
}

bt_status bt_msg_recv(void *socket, bt_msg_t **out, uint8_t *peer_id, size_t *peer_len, int flags) {
    BT_ASSERT(out);
    bool router = s_is_router(socket);
    BT_ASSERT(router == (peer_id != NULL) && router == (peer_len != NULL));
    *out = NULL;
    zmq_msg_t frames[S_FRAMES_KEPT];
    size_t n, first = router ? 1 : 0;
    bt_status rc = s_recv_frames(socket, flags, frames, &n);
    if (rc != BT_OK || n == 0)
        return rc;
    size_t kept = n < S_FRAMES_KEPT ? n : S_FRAMES_KEPT;
    if (router) {
        *peer_len = zmq_msg_size(&frames[0]);
        BT_ASSERT(*peer_len <= BT_WIRE_PEER_MAX);
        memcpy(peer_id, zmq_msg_data(&frames[0]), *peer_len);
    }
    rc = s_decode(&frames[first], n - first, out);
    const char *user = rc == BT_OK ? zmq_msg_gets(&frames[first], "User-Id") : NULL;
    if (user && user[0] && !((*out)->user = s_strdup(user))) {
        bt_msg_destroy(out);
        rc = bt_fail(BT_ENOMEM, "wire: out of memory");
    }
    s_close_frames(frames, kept);
    return rc;
}

const char *bt_msg_user(const bt_msg_t *self) {
    return self->user ? self->user : "";
}

bt_status bt_msg_decode(const void *const *frames, const size_t *sizes, size_t n, bt_msg_t **out) {
    BT_ASSERT(out && (n == 0 || (frames && sizes)));
    zmq_msg_t wrapped[1 + BT_WIRE_TENSORS_MAX]; /* constant messages: never copied nor freed */
    size_t kept = n < 1 + BT_WIRE_TENSORS_MAX ? n : 1 + BT_WIRE_TENSORS_MAX;
    for (size_t i = 0; i < kept; i++) {
        BT_ASSERT(frames[i] || sizes[i] == 0);
        zmq_msg_init_data(&wrapped[i], (void *)frames[i], sizes[i], NULL, NULL);
    }
    bt_status rc = s_decode(wrapped, n, out);
    s_close_frames(wrapped, kept);
    return rc;
}
