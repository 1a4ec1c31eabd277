/*  tokenizer.c — the byte-level tokenizer and its tokenizer_config.json.
    The config is parsed with cJSON, checked and deleted inside this file. */
#define _POSIX_C_SOURCE 200809L
#include "baton/tokenizer.h"
#include "baton/fileio.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CONFIG_NAME "tokenizer_config.json"
#define S_CONFIG_MAX (64 << 10) /* bytes */
#define S_BYTES_CLASS "baton_bytes"

struct bt_tokenizer {
    bt_tokenizer_kind kind;
    int32_t bos, eos, pad, vocab_size;
};

static const bt_tokenizer_t s_bytes = {BT_TOKENIZER_BYTES, 256, 257, 258, 259};

bt_tokenizer_t *bt_tokenizer_new_bytes(void) {
    bt_tokenizer_t *self = malloc(sizeof *self);
    if (self)
        *self = s_bytes;
    return self;
}

void bt_tokenizer_destroy(bt_tokenizer_t **self_p) {
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

bt_tokenizer_kind bt_tokenizer_kind_of(const bt_tokenizer_t *self) {
    return self->kind;
}
int32_t bt_tokenizer_bos(const bt_tokenizer_t *self) {
    return self->bos;
}
int32_t bt_tokenizer_eos(const bt_tokenizer_t *self) {
    return self->eos;
}
int32_t bt_tokenizer_pad(const bt_tokenizer_t *self) {
    return self->pad;
}
int32_t bt_tokenizer_vocab_size(const bt_tokenizer_t *self) {
    return self->vocab_size;
}

bt_status bt_tokenizer_encode(const bt_tokenizer_t *self, const char *text, size_t len,
                              bool add_bos, int32_t *out, size_t cap, size_t *n_out) {
    size_t need = len + (add_bos ? 1 : 0);
    *n_out = need;
    if (need > cap)
        return bt_fail(BT_ERANGE, "tokenizer: encoding needs %zu ids, the buffer holds %zu", need,
                       cap);
    size_t k = 0;
    if (add_bos)
        out[k++] = self->bos;
    for (size_t i = 0; i < len; i++)
        out[k++] = (unsigned char)text[i];
    return BT_OK;
}

bt_status bt_tokenizer_decode(const bt_tokenizer_t *self, const int32_t *ids, size_t n, char *out,
                              size_t cap, size_t *len) {
    size_t used = 0;
    for (size_t i = 0; i < n && ids[i] != self->eos; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= self->vocab_size) {
            *len = 0;
            return bt_fail(BT_ERANGE, "tokenizer: id %d at position %zu is outside 0..%d", id, i,
                           self->vocab_size - 1);
        }
        if (id == self->bos || id == self->pad)
            continue;
        if (used + 1 < cap)
            out[used] = (char)(unsigned char)id;
        used++;
    }
    *len = used;
    if (used + 1 > cap)
        return bt_fail(BT_ERANGE,
                       "tokenizer: decoding needs %zu bytes with the NUL, the buffer "
                       "holds %zu",
                       used + 1, cap);
    out[used] = '\0';
    return BT_OK;
}

/* ---- tokenizer_config.json ------------------------------------------------------------------ */

static bt_status s_config_path(const char *dir, char *path, size_t len) {
    if (snprintf(path, len, "%s/%s", dir, S_CONFIG_NAME) >= (int)len)
        return bt_fail(BT_EINVAL, "%s: directory path too long", dir);
    return BT_OK;
}

static const char *s_json_type(const cJSON *v) {
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsArray(v))
        return "an array";
    return "an object";
}

/*  The keys of a byte-level config and the value each must hold. */
static const struct {
    const char *key;
    int32_t value;
} s_byte_ids[] = {
    {"bos_token_id", 256}, {"eos_token_id", 257}, {"pad_token_id", 258}, {"vocab_size", 259}};
#define S_N_BYTE_IDS ((int)(sizeof s_byte_ids / sizeof s_byte_ids[0]))

static bool s_is_known_key(const char *key) {
    if (strcmp(key, "tokenizer_class") == 0)
        return true;
    for (int i = 0; i < S_N_BYTE_IDS; i++)
        if (strcmp(key, s_byte_ids[i].key) == 0)
            return true;
    return false;
}

/*  Refuses unknown and repeated keys. */
static bt_status s_check_keys(const char *path, const cJSON *root) {
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (!s_is_known_key(item->string))
            return bt_fail(BT_EFORMAT, "%s: unknown key '%s'", path, item->string);
        if (cJSON_GetObjectItemCaseSensitive(root, item->string) != item)
            return bt_fail(BT_EFORMAT, "%s: key '%s' appears twice", path, item->string);
    }
    return BT_OK;
}

/*  Checks that root describes the byte-level tokenizer. */
static bt_status s_check_config(const char *path, const cJSON *root) {
    bt_status rc = s_check_keys(path, root);
    if (rc != BT_OK)
        return rc;
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(root, "tokenizer_class");
    if (!cls)
        return bt_fail(BT_EFORMAT, "%s: missing key 'tokenizer_class'", path);
    if (!cJSON_IsString(cls))
        return bt_fail(BT_EFORMAT, "%s: tokenizer_class: expected a string, got %s", path,
                       s_json_type(cls));
    if (strcmp(cls->valuestring, S_BYTES_CLASS) != 0)
        return bt_fail(BT_EFORMAT, "%s: tokenizer_class: expected '%s', got '%s'", path,
                       S_BYTES_CLASS, cls->valuestring);
    for (int i = 0; i < S_N_BYTE_IDS; i++) {
        const char *key = s_byte_ids[i].key;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
        if (!v)
            return bt_fail(BT_EFORMAT, "%s: missing key '%s'", path, key);
        if (!cJSON_IsNumber(v))
            return bt_fail(BT_EFORMAT, "%s: %s: expected an integer, got %s", path, key,
                           s_json_type(v));
        if (v->valuedouble != (double)s_byte_ids[i].value)
            return bt_fail(BT_EFORMAT, "%s: %s: expected %d for %s, got %g", path, key,
                           s_byte_ids[i].value, S_BYTES_CLASS, v->valuedouble);
    }
    return BT_OK;
}

bt_status bt_tokenizer_load(const char *dir, bt_tokenizer_t **out) {
    *out = NULL;
    char path[4096];
    char *text = NULL;
    bt_status rc = s_config_path(dir, path, sizeof path);
    if (rc == BT_OK)
        rc = bt_file_read(path, S_CONFIG_MAX, &text, NULL);
    if (rc != BT_OK)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root))
        rc = bt_fail(BT_EFORMAT, "%s: not a JSON object", path);
    else
        rc = s_check_config(path, root);
    cJSON_Delete(root);
    if (rc != BT_OK)
        return rc;
    *out = bt_tokenizer_new_bytes();
    return *out ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", path);
}

bt_status bt_tokenizer_save(const bt_tokenizer_t *self, const char *dir) {
    char path[4096];
    bt_status rc = s_config_path(dir, path, sizeof path);
    if (rc != BT_OK)
        return rc;
    char text[256];
    int n = snprintf(text, sizeof text,
                     "{\"tokenizer_class\": \"%s\", \"bos_token_id\": %d, \"eos_token_id\": "
                     "%d, \"pad_token_id\": %d, \"vocab_size\": %d}\n",
                     S_BYTES_CLASS, self->bos, self->eos, self->pad, self->vocab_size);
    BT_ASSERT(n > 0 && (size_t)n < sizeof text);
    return bt_file_write(path, text, (size_t)n);
}
