/*  safetensors.c — the safetensors reader (whole file in memory, validated at open) and writer.
    The JSON header is parsed with cJSON, copied into plain structs and deleted inside this file. */
#define _POSIX_C_SOURCE 200809L
#include "baton/safetensors.h"
#include "baton/dtype.h"
#include "baton/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/*  Header integers are JSON numbers, read and written as doubles: exact up to 2^53.  Shapes,
    offsets and byte counts above it are refused. */
#define S_JSON_INT_MAX 9007199254740992ull

typedef struct s_meta_pair {
    const char *key;
    const char *value;
} s_meta_pair;

struct bt_safetensors {
    uint8_t *file; /* the whole file, mapped read-only: 8 + N + data_size bytes */
    size_t file_size;
    const uint8_t *data; /* the data region, data_size bytes */
    size_t data_size;
    char *strings; /* names, metadata keys and values, each NUL-terminated */
    size_t strings_used, strings_cap;
    bt_st_entry *entries; /* (count), ordered by data offset */
    int count;
    const bt_st_entry **by_name; /* (count), ordered by name */
    s_meta_pair *meta;           /* (n_meta), ordered by key */
    int n_meta;
};

/*  numel * esize into *out; false when it exceeds S_JSON_INT_MAX.  Every dim must be >= 0. */
static bool s_nbytes(const int64_t *shape, int ndim, size_t esize, uint64_t *out) {
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) {
            *out = 0;
            return true;
        }
    uint64_t n = esize;
    for (int i = 0; i < ndim; i++) {
        if ((uint64_t)shape[i] > S_JSON_INT_MAX / n)
            return false;
        n *= (uint64_t)shape[i];
    }
    *out = n;
    return true;
}

/*  "[5, 7]" into buf. */
static void s_format_shape(char *buf, size_t len, const int64_t *shape, int ndim) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

/* ---- reader --------------------------------------------------------------------------------- */

static uint64_t s_get_u64le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/*  Copies s into the string pool.  The pool holds N + 1 bytes: every string copied comes from a
    quoted JSON string of the N-byte header, which is at least 2 bytes longer than its decoded
    form, so the pool cannot run out. */
static const char *s_keep(bt_safetensors_t *self, const char *s) {
    size_t len = strlen(s) + 1;
    BT_ASSERT(self->strings_used + len <= self->strings_cap);
    char *dst = self->strings + self->strings_used;
    memcpy(dst, s, len);
    self->strings_used += len;
    return dst;
}

/*  A JSON number that is an integer in [0, 2^53]. */
static bool s_json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item))
        return false;
    double d = item->valuedouble;
    if (!(d >= 0 && d <= (double)S_JSON_INT_MAX) || (double)(uint64_t)d != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

/*  The fields of one tensor entry, each present exactly once. */
enum { S_DTYPE, S_SHAPE, S_OFFSETS, S_N_FIELDS };
static const char *const s_field_names[S_N_FIELDS] = {"dtype", "shape", "data_offsets"};

static bt_status s_entry_fields(const char *path, const cJSON *item, const cJSON **fields) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return bt_fail(BT_EFORMAT, "%s: tensor '%s': expected an object", path, name);
    const cJSON *field;
    cJSON_ArrayForEach(field, item) {
        int k = 0;
        while (k < S_N_FIELDS && strcmp(field->string, s_field_names[k]) != 0)
            k++;
        if (k == S_N_FIELDS)
            return bt_fail(BT_EFORMAT, "%s: tensor '%s': unknown key '%s'", path, name,
                           field->string);
        if (fields[k])
            return bt_fail(BT_EFORMAT, "%s: tensor '%s': key '%s' appears twice", path, name,
                           field->string);
        fields[k] = field;
    }
    for (int k = 0; k < S_N_FIELDS; k++)
        if (!fields[k])
            return bt_fail(BT_EFORMAT, "%s: tensor '%s': missing '%s'", path, name,
                           s_field_names[k]);
    return BT_OK;
}

static bt_status s_entry_shape(const char *path, const char *name, const cJSON *shape,
                               bt_st_entry *e) {
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > BT_MAX_DIMS)
        return bt_fail(BT_EFORMAT, "%s: tensor '%s': shape must be an array of at most %d dims",
                       path, name, BT_MAX_DIMS);
    e->ndim = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape) {
        uint64_t d;
        if (!s_json_uint(dim, &d))
            return bt_fail(BT_EFORMAT,
                           "%s: tensor '%s': shape dim %d is not an integer in [0, 2^53]", path,
                           name, e->ndim);
        e->shape[e->ndim++] = (int64_t)d;
    }
    return BT_OK;
}

/*  Checks data_offsets [begin, end] against the data region and the entry's dtype and shape. */
static bt_status s_entry_offsets(bt_safetensors_t *self, const char *path, const char *name,
                                 const cJSON *offsets, bt_st_entry *e) {
    uint64_t begin = 0, end = 0, nbytes = 0;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !s_json_uint(offsets->child, &begin) || !s_json_uint(offsets->child->next, &end))
        return bt_fail(BT_EFORMAT, "%s: tensor '%s': data_offsets must be [begin, end]", path,
                       name);
    if (begin > end || end > self->data_size)
        return bt_fail(BT_EFORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] outside the data region of %zu bytes",
                       path, name, begin, end, self->data_size);
    char shape[256];
    s_format_shape(shape, sizeof shape, e->shape, e->ndim);
    if (!s_nbytes(e->shape, e->ndim, bt_dtype_size(e->dtype), &nbytes))
        return bt_fail(BT_EFORMAT, "%s: tensor '%s': shape %s is too large", path, name, shape);
    if (end - begin != nbytes)
        return bt_fail(BT_EFORMAT,
                       "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                       "] but shape %s %s needs %" PRIu64 " bytes",
                       path, name, begin, end, shape, bt_dtype_code(e->dtype), nbytes);
    e->nbytes = (size_t)nbytes;
    e->data = self->data + begin;
    return BT_OK;
}

static bt_status s_parse_entry(bt_safetensors_t *self, const char *path, const cJSON *item,
                               bt_st_entry *e) {
    const char *name = item->string;
    size_t len = strlen(name);
    if (len == 0 || len > BT_ST_NAME_MAX)
        return bt_fail(BT_EFORMAT, "%s: tensor name of %zu bytes (expected 1..%d)", path, len,
                       BT_ST_NAME_MAX);
    const cJSON *fields[S_N_FIELDS] = {NULL};
    bt_status rc = s_entry_fields(path, item, fields);
    if (rc != BT_OK)
        return rc;
    if (!cJSON_IsString(fields[S_DTYPE]))
        return bt_fail(BT_EFORMAT, "%s: tensor '%s': dtype is not a string", path, name);
    if (!bt_dtype_from_code(fields[S_DTYPE]->valuestring, &e->dtype))
        return bt_fail(BT_EFORMAT,
                       "%s: tensor '%s': unknown dtype '%s' (expected F32, F16, BF16, F64, I64, "
                       "I32, U8 or BOOL)",
                       path, name, fields[S_DTYPE]->valuestring);
    rc = s_entry_shape(path, name, fields[S_SHAPE], e);
    if (rc == BT_OK)
        rc = s_entry_offsets(self, path, name, fields[S_OFFSETS], e);
    if (rc == BT_OK)
        e->name = s_keep(self, name);
    return rc;
}

static int s_cmp_meta(const void *a, const void *b) {
    return strcmp(((const s_meta_pair *)a)->key, ((const s_meta_pair *)b)->key);
}

static bt_status s_parse_meta(bt_safetensors_t *self, const char *path, const cJSON *obj) {
    if (self->meta)
        return bt_fail(BT_EFORMAT, "%s: __metadata__ appears twice", path);
    if (!cJSON_IsObject(obj))
        return bt_fail(BT_EFORMAT, "%s: __metadata__ is not an object", path);
    self->meta = calloc((size_t)cJSON_GetArraySize(obj) + 1, sizeof *self->meta);
    if (!self->meta)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        if (strlen(item->string) > BT_ST_NAME_MAX)
            return bt_fail(BT_EFORMAT, "%s: __metadata__ key of %zu bytes (at most %d)", path,
                           strlen(item->string), BT_ST_NAME_MAX);
        if (!cJSON_IsString(item))
            return bt_fail(BT_EFORMAT, "%s: __metadata__ key '%s': value is not a string", path,
                           item->string);
        self->meta[self->n_meta].key = s_keep(self, item->string);
        self->meta[self->n_meta++].value = s_keep(self, item->valuestring);
    }
    qsort(self->meta, (size_t)self->n_meta, sizeof *self->meta, s_cmp_meta);
    for (int i = 1; i < self->n_meta; i++)
        if (strcmp(self->meta[i - 1].key, self->meta[i].key) == 0)
            return bt_fail(BT_EFORMAT, "%s: __metadata__ key '%s' appears twice", path,
                           self->meta[i].key);
    return BT_OK;
}

/*  Data order: by start, then by size (an empty tensor before the one starting where it does),
    then by name. */
static int s_cmp_offset(const void *a, const void *b) {
    const bt_st_entry *x = a, *y = b;
    const uint8_t *px = x->data, *py = y->data;
    if (px != py)
        return px < py ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int s_cmp_name(const void *a, const void *b) {
    return strcmp((*(const bt_st_entry *const *)a)->name, (*(const bt_st_entry *const *)b)->name);
}

/*  Sorts the entries into data order and a name index; refuses overlaps and repeated names. */
static bt_status s_index(bt_safetensors_t *self, const char *path) {
    qsort(self->entries, (size_t)self->count, sizeof *self->entries, s_cmp_offset);
    for (int i = 1; i < self->count; i++) {
        const bt_st_entry *prev = &self->entries[i - 1], *cur = &self->entries[i];
        if ((const uint8_t *)prev->data + prev->nbytes > (const uint8_t *)cur->data)
            return bt_fail(BT_EFORMAT, "%s: tensors '%s' and '%s' overlap in the data region", path,
                           prev->name, cur->name);
    }
    for (int i = 0; i < self->count; i++)
        self->by_name[i] = &self->entries[i];
    qsort(self->by_name, (size_t)self->count, sizeof *self->by_name, s_cmp_name);
    for (int i = 1; i < self->count; i++)
        if (strcmp(self->by_name[i - 1]->name, self->by_name[i]->name) == 0)
            return bt_fail(BT_EFORMAT, "%s: tensor '%s' appears twice", path,
                           self->by_name[i]->name);
    return BT_OK;
}

/*  Copies the parsed header (a JSON object) into entries, metadata and the string pool. */
static bt_status s_parse_header(bt_safetensors_t *self, const char *path, const cJSON *root,
                                size_t header_len) {
    size_t n = (size_t)cJSON_GetArraySize(root) + 1;
    self->entries = calloc(n, sizeof *self->entries);
    self->by_name = calloc(n, sizeof *self->by_name);
    self->strings_cap = header_len + 1;
    self->strings = malloc(self->strings_cap);
    if (!self->entries || !self->by_name || !self->strings)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        bt_status rc = strcmp(item->string, "__metadata__") == 0
                           ? s_parse_meta(self, path, item)
                           : s_parse_entry(self, path, item, &self->entries[self->count++]);
        if (rc != BT_OK)
            return rc;
    }
    return s_index(self, path);
}

/*  Parses the n header bytes: UTF-8 text holding one JSON object, then only whitespace.  On
    success caller owns *root_p (cJSON_Delete()). */
static bt_status s_parse_json(const char *path, const char *header, size_t n, cJSON **root_p) {
    if (memchr(header, '\0', n) || !bt_utf8_is_valid((const uint8_t *)header, n))
        return bt_fail(BT_EFORMAT, "%s: header is not UTF-8 text", path);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, n, &end, false);
    while (root && end < header + n &&
           (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    if (!root || end != header + n) {
        cJSON_Delete(root);
        return bt_fail(BT_EFORMAT, "%s: header is not valid JSON", path);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bt_fail(BT_EFORMAT, "%s: header is not a JSON object", path);
    }
    *root_p = root;
    return BT_OK;
}

/*  Checks the header length, then parses the header of the size-byte file in self->file. */
static bt_status s_parse_file(bt_safetensors_t *self, const char *path, size_t size) {
    if (size < 8)
        return bt_fail(BT_EFORMAT, "%s: file of %zu bytes is too short for a header length", path,
                       size);
    uint64_t n = s_get_u64le(self->file);
    if (n > size - 8)
        return bt_fail(BT_EFORMAT,
                       "%s: header length %" PRIu64 " is larger than the %zu bytes that follow it",
                       path, n, size - 8);
    if (n > BT_ST_HEADER_MAX)
        return bt_fail(BT_EFORMAT, "%s: header length %" PRIu64 " exceeds the limit of %u bytes",
                       path, n, BT_ST_HEADER_MAX);
    self->data = self->file + 8 + n;
    self->data_size = size - 8 - (size_t)n;
    cJSON *root = NULL;
    bt_status rc = s_parse_json(path, (const char *)self->file + 8, (size_t)n, &root);
    if (rc == BT_OK)
        rc = s_parse_header(self, path, root, (size_t)n);
    cJSON_Delete(root);
    return rc;
}

bt_status bt_safetensors_open(const char *path, bt_safetensors_t **out) {
    *out = NULL;
    bt_safetensors_t *self = calloc(1, sizeof *self);
    if (!self)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    /* mapped, not read: the weights are read once, into the model's tensors, and the page cache
       holds the file (a model loaded does not hold two copies in process memory) */
    bt_status rc = BT_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0)
        rc = bt_fail(BT_EIO, "%s: cannot open: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = bt_fail(BT_EIO, "%s: not a regular file", path);
    else if (sb.st_size < 8)
        rc = bt_fail(BT_EFORMAT, "%s: %lld bytes: too short for a safetensors header", path,
                     (long long)sb.st_size);
    void *map =
        rc == BT_OK ? mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (rc == BT_OK && map == MAP_FAILED)
        rc = bt_fail(BT_EIO, "%s: cannot map: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (rc == BT_OK) {
        self->file = map;
        self->file_size = (size_t)sb.st_size;
        rc = s_parse_file(self, path, self->file_size);
    }
    if (rc != BT_OK) {
        bt_safetensors_destroy(&self);
        return rc;
    }
    *out = self;
    return BT_OK;
}

void bt_safetensors_destroy(bt_safetensors_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_safetensors_t *self = *self_p;
    if (self->file)
        munmap(self->file, self->file_size);
    free(self->strings);
    free(self->entries);
    free(self->by_name);
    free(self->meta);
    free(self);
    *self_p = NULL;
}

int bt_safetensors_count(const bt_safetensors_t *self) {
    return self->count;
}

const bt_st_entry *bt_safetensors_entry(const bt_safetensors_t *self, int i) {
    BT_ASSERT(i >= 0 && i < self->count);
    return &self->entries[i];
}

const bt_st_entry *bt_safetensors_find(const bt_safetensors_t *self, const char *name) {
    bt_st_entry key = {.name = name};
    const bt_st_entry *key_p = &key;
    const bt_st_entry *const *hit =
        bsearch(&key_p, self->by_name, (size_t)self->count, sizeof *self->by_name, s_cmp_name);
    return hit ? *hit : NULL;
}

const char *bt_safetensors_meta(const bt_safetensors_t *self, const char *key) {
    s_meta_pair probe = {.key = key};
    const s_meta_pair *hit =
        bsearch(&probe, self->meta, (size_t)self->n_meta, sizeof *self->meta, s_cmp_meta);
    return hit ? hit->value : NULL;
}

/* ---- writer --------------------------------------------------------------------------------- */

/*  Checks one tensor to write and returns its size in *nbytes. */
static bt_status s_check_tensor(const char *path, const bt_st_tensor *t, uint64_t *nbytes) {
    size_t len = t->name ? strlen(t->name) : 0;
    if (len == 0 || len > BT_ST_NAME_MAX || strcmp(t->name, "__metadata__") == 0)
        return bt_fail(BT_EINVAL,
                       "%s: bad tensor name '%s' (expected 1..%d bytes, not "
                       "__metadata__)",
                       path, t->name ? t->name : "(null)", BT_ST_NAME_MAX);
    size_t esize = bt_dtype_size(t->dtype);
    if (esize == 0)
        return bt_fail(BT_EINVAL, "%s: tensor '%s': unknown dtype %d", path, t->name,
                       (int)t->dtype);
    if (t->ndim < 0 || t->ndim > BT_MAX_DIMS)
        return bt_fail(BT_EINVAL, "%s: tensor '%s': ndim %d outside 0..%d", path, t->name, t->ndim,
                       BT_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0 || (uint64_t)t->shape[i] > S_JSON_INT_MAX)
            return bt_fail(BT_EINVAL, "%s: tensor '%s': dim %d is %" PRId64, path, t->name, i,
                           t->shape[i]);
    if (!s_nbytes(t->shape, t->ndim, esize, nbytes))
        return bt_fail(BT_EINVAL, "%s: tensor '%s': shape too large", path, t->name);
    if (*nbytes > 0 && !t->data)
        return bt_fail(BT_EINVAL, "%s: tensor '%s': data is NULL", path, t->name);
    return BT_OK;
}

/*  Adds key: [v0, v1, ...] to obj. */
static bool s_add_ints(cJSON *obj, const char *key, const int64_t *v, int n) {
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    if (!arr)
        return false;
    for (int i = 0; i < n; i++) {
        cJSON *num = cJSON_CreateNumber((double)v[i]);
        if (!num || !cJSON_AddItemToArray(arr, num)) {
            cJSON_Delete(num);
            return false;
        }
    }
    return true;
}

/*  Adds "__metadata__": {key: value, ...} to root when n_meta > 0. */
static bt_status s_add_meta(const char *path, cJSON *root, const char *const *meta_kv, int n_meta) {
    if (n_meta <= 0)
        return BT_OK;
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    if (!meta)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < n_meta; i++) {
        const char *key = meta_kv[2 * i], *value = meta_kv[2 * i + 1];
        if (!key || !value || strlen(key) > BT_ST_NAME_MAX)
            return bt_fail(BT_EINVAL, "%s: metadata pair %d: NULL or over-long key or value", path,
                           i);
        if (cJSON_GetObjectItemCaseSensitive(meta, key))
            return bt_fail(BT_EINVAL, "%s: metadata key '%s' given twice", path, key);
        if (!cJSON_AddStringToObject(meta, key, value))
            return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    }
    return BT_OK;
}

/*  Adds the entry of tensors[i], stored at [*offset, *offset + size), and advances *offset. */
static bt_status s_add_entry(const char *path, cJSON *root, const bt_st_tensor *tensors, int i,
                             uint64_t *offset) {
    const bt_st_tensor *t = &tensors[i];
    uint64_t nbytes = 0;
    bt_status rc = s_check_tensor(path, t, &nbytes);
    if (rc != BT_OK)
        return rc;
    for (int j = 0; j < i; j++)
        if (strcmp(tensors[j].name, t->name) == 0)
            return bt_fail(BT_EINVAL, "%s: tensor '%s' given twice", path, t->name);
    if (nbytes > S_JSON_INT_MAX - *offset)
        return bt_fail(BT_EINVAL, "%s: tensors larger than 2^53 bytes in all", path);
    int64_t offsets[2] = {(int64_t)*offset, (int64_t)(*offset + nbytes)};
    cJSON *e = cJSON_AddObjectToObject(root, t->name);
    if (!e || !cJSON_AddStringToObject(e, "dtype", bt_dtype_code(t->dtype)) ||
        !s_add_ints(e, "shape", t->shape, t->ndim) || !s_add_ints(e, "data_offsets", offsets, 2))
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    *offset += nbytes;
    return BT_OK;
}

/*  The JSON header text of the file, unpadded.  Caller owns *json_p (free()). */
static bt_status s_build_header(const char *path, const bt_st_tensor *tensors, int n,
                                const char *const *meta_kv, int n_meta, char **json_p) {
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    bt_status rc = s_add_meta(path, root, meta_kv, n_meta);
    uint64_t offset = 0;
    for (int i = 0; i < n && rc == BT_OK; i++)
        rc = s_add_entry(path, root, tensors, i, &offset);
    if (rc == BT_OK) {
        *json_p = cJSON_PrintUnformatted(root);
        if (!*json_p)
            rc = bt_fail(BT_ENOMEM, "%s: out of memory", path);
    }
    cJSON_Delete(root);
    return rc;
}

static bool s_write_all(FILE *f, const void *p, size_t n) {
    return fwrite(p, 1, n, f) == n;
}

/*  Writes length, header padded with spaces to a multiple of 8, and the tensors' bytes. */
static bt_status s_write_file(const char *path, const char *json, const bt_st_tensor *tensors,
                              int n) {
    size_t json_len = strlen(json), padded = (json_len + 7) & ~(size_t)7;
    uint8_t head[8], spaces[8];
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memset(spaces, ' ', sizeof spaces);
    FILE *f = bt_file_create(path);
    if (!f)
        return BT_EIO;
    bool ok = s_write_all(f, head, 8) && s_write_all(f, json, json_len) &&
              s_write_all(f, spaces, padded - json_len);
    for (int i = 0; i < n && ok; i++) {
        uint64_t nbytes = 0;
        s_nbytes(tensors[i].shape, tensors[i].ndim, bt_dtype_size(tensors[i].dtype), &nbytes);
        ok = nbytes == 0 || s_write_all(f, tensors[i].data, (size_t)nbytes);
    }
    return bt_file_finish(f, path, ok);
}

bt_status bt_safetensors_write(const char *path, const bt_st_tensor *tensors, int n,
                               const char *const *meta_kv, int n_meta) {
    char *json = NULL;
    bt_status rc = s_build_header(path, tensors, n, meta_kv, n_meta, &json);
    if (rc == BT_OK)
        rc = s_write_file(path, json, tensors, n);
    free(json);
    return rc;
}
