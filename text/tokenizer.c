/*  tokenizer.c — the byte-level tokenizer with its tokenizer_config.json, and Hugging Face
    byte-level BPE read from tokenizer.json (normalizer, pre-tokenizer, merges, added tokens).
    Every JSON document is parsed with cJSON, checked and deleted inside this file. */
#define _POSIX_C_SOURCE 200809L
#include "baton/tokenizer.h"
#include "baton/buf.h"
#include "baton/fileio.h"
#include "baton/regex.h"
#include "baton/unicode.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_CONFIG_NAME "tokenizer_config.json"
#define S_JSON_NAME "tokenizer.json"
#define S_GENERATION_NAME "generation_config.json"
#define S_CONFIG_MAX (64 << 10)    /* bytes of a byte-level tokenizer_config.json */
#define S_HF_CONFIG_MAX (16 << 20) /* bytes of a Hugging Face tokenizer_config.json */
#define S_JSON_MAX (256 << 20)     /* bytes of tokenizer.json */
#define S_BYTES_CLASS "baton_bytes"
#define S_MAX_STEPS 8 /* pre-tokenizer steps */

/*  GPT-2's ByteLevel pre-tokenizer pattern, used when a ByteLevel step says use_regex. */
#define S_GPT2_PATTERN                                                                             \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct {
    int32_t id;
    char *text;
    size_t len;
    bool lstrip, rstrip, single_word, special;
} s_added;

typedef struct {
    bt_regex_t *regex; /* Split (or ByteLevel with use_regex) */
    bool prefix_space; /* ByteLevel add_prefix_space */
} s_step;

/*  Open addressing: keys are byte strings (vocab) or id pairs (merges). */
typedef struct {
    int32_t *slots; /* -1 empty; else an id (vocab) or a merge index */
    size_t mask;
} s_table;

typedef struct {
    int32_t left, right, merged;
} s_merge;

#define S_MAX_STOPS 8

struct bt_tokenizer {
    bt_tokenizer_kind kind;
    int32_t bos, eos, pad, vocab_size;
    int32_t stops[S_MAX_STOPS]; /* tokens that end a completion: eos first */
    int n_stops;
    char bytes[256]; /* byte-level: the text of ids 0..255 */
    /* BPE only */
    char *arena;      /* the bytes of every token, back to back */
    size_t *tok_off;  /* (vocab_size + 1) offsets into arena; an id with no token has length 0 */
    bool *tok_known;  /* (vocab_size) */
    size_t max_token; /* longest token in bytes */
    s_table vocab;    /* bytes -> id (model vocabulary only) */
    s_merge *merges;  /* (n_merges) in rank order */
    int32_t n_merges;
    s_table merge_of; /* (left, right) -> rank */
    int32_t byte_id[256];
    s_added *added; /* longest first */
    int n_added;
    bool added_first[256]; /* bytes that begin some added token */
    bool nfc, ignore_merges;
    s_step steps[S_MAX_STEPS];
    int n_steps;
    char *json_text, *config_text; /* the files as read, written back by save */
    size_t json_len, config_len;
    char *generation_text; /* generation_config.json as read, or NULL */
    size_t generation_len;
};

/*  DIR/NAME into path[0 .. len). */
static bt_status s_path(const char *dir, const char *name, char *path, size_t len) {
    if (snprintf(path, len, "%s/%s", dir, name) >= (int)len)
        return bt_fail(BT_EINVAL, "%s: directory path too long", dir);
    return BT_OK;
}

/* ---- shared accessors ------------------------------------------------------------------------ */

static const bt_tokenizer_t s_bytes = {
    .kind = BT_TOKENIZER_BYTES, 256, 257, 258, 259, .stops = {257}, .n_stops = 1};

bt_tokenizer_t *bt_tokenizer_new_bytes(void) {
    bt_tokenizer_t *self = malloc(sizeof *self);
    if (!self)
        return NULL;
    *self = s_bytes;
    for (int b = 0; b < 256; b++)
        self->bytes[b] = (char)(unsigned char)b;
    return self;
}

void bt_tokenizer_destroy(bt_tokenizer_t **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_tokenizer_t *self = *self_p;
    free(self->arena);
    free(self->tok_off);
    free(self->tok_known);
    free(self->vocab.slots);
    free(self->merges);
    free(self->merge_of.slots);
    for (int i = 0; i < self->n_added; i++)
        free(self->added[i].text);
    free(self->added);
    for (int i = 0; i < self->n_steps; i++)
        bt_regex_destroy(&self->steps[i].regex);
    free(self->json_text);
    free(self->config_text);
    free(self->generation_text);
    free(self);
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

int bt_tokenizer_stops(const bt_tokenizer_t *self, int32_t *out, int cap) {
    int n = 0;
    for (; n < self->n_stops && n < cap; n++)
        out[n] = self->stops[n];
    return n;
}

static bool s_is_stop(const bt_tokenizer_t *self, int32_t id) {
    for (int i = 0; i < self->n_stops; i++)
        if (id == self->stops[i])
            return true;
    return false;
}

size_t bt_tokenizer_max_token_bytes(const bt_tokenizer_t *self) {
    return self->kind == BT_TOKENIZER_BYTES ? 1 : self->max_token;
}

const char *bt_tokenizer_token(const bt_tokenizer_t *self, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= self->vocab_size)
        return NULL;
    if (self->kind == BT_TOKENIZER_BYTES) {
        static const char s_names[3][8] = {"<bos>", "<eos>", "<pad>"};
        if (id >= 256) {
            *len = strlen(s_names[id - 256]);
            return s_names[id - 256];
        }
        *len = 1;
        return &self->bytes[id];
    }
    if (!self->tok_known[id])
        return NULL;
    *len = self->tok_off[id + 1] - self->tok_off[id];
    return self->arena + self->tok_off[id];
}

/* ---- growable arrays ------------------------------------------------------------------------- */

typedef struct {
    int32_t *v;
    size_t n, cap;
} s_ids;

static bool s_ids_push(s_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *grown = realloc(a->v, cap * sizeof *grown);
        if (!grown)
            return false;
        a->v = grown;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return true;
}

typedef struct {
    size_t off, len; /* into a bt_buf */
} s_piece;

typedef struct {
    s_piece *v;
    size_t n, cap;
} s_pieces;

static bool s_pieces_push(s_pieces *a, size_t off, size_t len) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 32;
        s_piece *grown = realloc(a->v, cap * sizeof *grown);
        if (!grown)
            return false;
        a->v = grown;
        a->cap = cap;
    }
    a->v[a->n++] = (s_piece){off, len};
    return true;
}

/* ---- hash tables ----------------------------------------------------------------------------- */

static bool s_table_init(s_table *t, size_t n) {
    size_t cap = 64;
    while (cap < 2 * n)
        cap *= 2;
    t->slots = malloc(cap * sizeof *t->slots);
    if (!t->slots)
        return false;
    memset(t->slots, 0xFF, cap * sizeof *t->slots); /* -1 */
    t->mask = cap - 1;
    return true;
}

static uint64_t s_pair_hash(int32_t a, int32_t b) {
    int32_t key[2] = {a, b};
    return bt_hash64(key, sizeof key);
}

/*  The id of the model token with these bytes, or -1. */
static int32_t s_vocab_find(const bt_tokenizer_t *t, const char *s, size_t len) {
    for (size_t h = bt_hash64(s, len) & t->vocab.mask;; h = (h + 1) & t->vocab.mask) {
        int32_t id = t->vocab.slots[h];
        if (id < 0)
            return -1;
        size_t l = t->tok_off[id + 1] - t->tok_off[id];
        if (l == len && memcmp(t->arena + t->tok_off[id], s, len) == 0)
            return id;
    }
}

static void s_vocab_insert(bt_tokenizer_t *t, int32_t id) {
    const char *s = t->arena + t->tok_off[id];
    size_t len = t->tok_off[id + 1] - t->tok_off[id];
    size_t h = bt_hash64(s, len) & t->vocab.mask;
    while (t->vocab.slots[h] >= 0)
        h = (h + 1) & t->vocab.mask;
    t->vocab.slots[h] = id;
}

/*  The rank of the merge (left, right), or -1. */
static int32_t s_merge_find(const bt_tokenizer_t *t, int32_t left, int32_t right) {
    for (size_t h = s_pair_hash(left, right) & t->merge_of.mask;; h = (h + 1) & t->merge_of.mask) {
        int32_t r = t->merge_of.slots[h];
        if (r < 0 || (t->merges[r].left == left && t->merges[r].right == right))
            return r;
    }
}

/* ---- encoding -------------------------------------------------------------------------------- */

static bt_status s_bytes_encode(const bt_tokenizer_t *self, const char *text, size_t len,
                                bool add_bos, s_ids *out) {
    if (add_bos && !s_ids_push(out, self->bos))
        return bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < len; i++)
        if (!s_ids_push(out, (unsigned char)text[i]))
            return bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    return BT_OK;
}

/*  Scratch for merging one piece: a doubly linked list of symbols and a min-heap of candidate
    merges keyed by (rank, position), as Hugging Face's BPE word merge does. */
typedef struct {
    int32_t *id, *prev, *next;
    uint64_t *heap;
    size_t cap, heap_cap;
} s_scratch;

static bool s_scratch_fit(s_scratch *s, size_t n) {
    if (n <= s->cap)
        return true;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *id = realloc(s->id, cap * sizeof *id);
    if (id)
        s->id = id;
    int32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (prev)
        s->prev = prev;
    int32_t *next = realloc(s->next, cap * sizeof *next);
    if (next)
        s->next = next;
    uint64_t *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (heap)
        s->heap = heap;
    if (!id || !prev || !next || !heap)
        return false;
    s->cap = cap;
    s->heap_cap = 3 * cap;
    return true;
}

static void s_scratch_release(s_scratch *s) {
    free(s->id);
    free(s->prev);
    free(s->next);
    free(s->heap);
}

static void s_heap_push(uint64_t *heap, size_t *n, uint64_t key) {
    size_t i = (*n)++;
    while (i > 0 && heap[(i - 1) / 2] > key) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = key;
}

static uint64_t s_heap_pop(uint64_t *heap, size_t *n) {
    uint64_t top = heap[0], last = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && heap[c + 1] < heap[c])
            c++;
        if (heap[c] >= last)
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (*n > 0)
        heap[i] = last;
    return top;
}

static void s_candidate(const bt_tokenizer_t *self, s_scratch *s, size_t *n_heap, int32_t i) {
    int32_t j = s->next[i];
    if (i < 0 || j < 0)
        return;
    int32_t rank = s_merge_find(self, s->id[i], s->id[j]);
    if (rank >= 0 && *n_heap < s->heap_cap)
        s_heap_push(s->heap, n_heap, ((uint64_t)(uint32_t)rank << 32) | (uint32_t)i);
}

/*  The ids of one pre-tokenized piece: lowest-rank merge first, leftmost among equal ranks. */
static bt_status s_bpe(const bt_tokenizer_t *self, const char *piece, size_t len, s_scratch *s,
                       s_ids *out) {
    if (len == 0)
        return BT_OK;
    if (self->ignore_merges) {
        int32_t whole = s_vocab_find(self, piece, len);
        if (whole >= 0)
            return s_ids_push(out, whole) ? BT_OK : bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    }
    if (!s_scratch_fit(s, len))
        return bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < len; i++) {
        s->id[i] = self->byte_id[(unsigned char)piece[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    size_t n_heap = 0;
    for (size_t i = 0; i + 1 < len; i++)
        s_candidate(self, s, &n_heap, (int32_t)i);
    while (n_heap > 0) {
        uint64_t key = s_heap_pop(s->heap, &n_heap);
        int32_t rank = (int32_t)(key >> 32), i = (int32_t)(uint32_t)key, j = s->next[i];
        const s_merge *m = &self->merges[rank];
        if (s->id[i] < 0 || j < 0 || s->id[i] != m->left || s->id[j] != m->right)
            continue; /* stale: one side was merged since */
        s->id[i] = m->merged;
        s->id[j] = -1;
        s->next[i] = s->next[j];
        if (s->next[j] >= 0)
            s->prev[s->next[j]] = i;
        if (s->prev[i] >= 0)
            s_candidate(self, s, &n_heap, s->prev[i]);
        s_candidate(self, s, &n_heap, i);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (!s_ids_push(out, s->id[i]))
            return bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    return BT_OK;
}

/*  Splits pieces by every match of re (matches and the text between them both become pieces,
    Hugging Face's "Isolated" behaviour). */
static bt_status s_split(const bt_regex_t *re, const bt_buf *buf, const s_pieces *in, s_pieces *out,
                         uint32_t **cps, size_t **offs, size_t *cap) {
    for (size_t k = 0; k < in->n; k++) {
        const char *p = buf->data + in->v[k].off;
        size_t len = in->v[k].len, n = 0;
        if (len + 1 > *cap) {
            uint32_t *c = realloc(*cps, (len + 1) * sizeof *c);
            if (c)
                *cps = c;
            size_t *o = realloc(*offs, (len + 1) * sizeof *o);
            if (o)
                *offs = o;
            if (!c || !o)
                return bt_fail(BT_ENOMEM, "tokenizer: out of memory");
            *cap = len + 1;
        }
        for (size_t i = 0; i < len; n++) {
            bool valid;
            (*offs)[n] = i;
            i += bt_utf8_decode(p + i, len - i, &(*cps)[n], &valid);
        }
        (*offs)[n] = len;
        size_t last = 0, at = 0;
        bool ok = true;
        while (at < n && ok) {
            int64_t end = bt_regex_match_at(re, *cps, n, at);
            if (end > (int64_t)at) {
                if (last < at)
                    ok = s_pieces_push(out, in->v[k].off + (*offs)[last],
                                       (*offs)[at] - (*offs)[last]);
                ok = ok &&
                     s_pieces_push(out, in->v[k].off + (*offs)[at], (*offs)[end] - (*offs)[at]);
                at = last = (size_t)end;
            } else
                at++;
        }
        if (ok && last < n)
            ok = s_pieces_push(out, in->v[k].off + (*offs)[last], len - (*offs)[last]);
        if (!ok)
            return bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    }
    return BT_OK;
}

/*  Normalizes, pre-tokenizes and merges text that holds no added token. */
static bt_status s_encode_plain(const bt_tokenizer_t *self, const char *text, size_t len,
                                s_scratch *s, s_ids *out) {
    if (len == 0)
        return BT_OK;
    bt_buf buf = {0};
    s_pieces a = {0}, b = {0};
    uint32_t *cps = NULL;
    size_t *offs = NULL, cap = 0;
    bt_status st = BT_OK;
    if (self->nfc && !bt_uc_nfc_quick(text, len)) {
        char *norm = NULL;
        size_t n = 0;
        st = bt_uc_nfc(text, len, &norm, &n);
        if (st == BT_OK && !bt_buf_put(&buf, norm, n))
            st = bt_fail(BT_ENOMEM, "tokenizer: out of memory");
        free(norm);
    } else if (!bt_buf_put(&buf, text, len))
        st = bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    if (st == BT_OK && !s_pieces_push(&a, 0, buf.len))
        st = bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    for (int k = 0; k < self->n_steps && st == BT_OK; k++) {
        const s_step *step = &self->steps[k];
        if (step->prefix_space)
            for (size_t i = 0; i < a.n && st == BT_OK; i++) {
                if (a.v[i].len > 0 && buf.data[a.v[i].off] == ' ')
                    continue;
                size_t off = buf.len, plen = a.v[i].len;
                /* reserve first (buf.data may move), then copy the piece from its old place */
                if (!bt_buf_put(&buf, " ", 1) || !bt_buf_extend(&buf, plen)) {
                    st = bt_fail(BT_ENOMEM, "tokenizer: out of memory");
                    break;
                }
                memmove(buf.data + off + 1, buf.data + a.v[i].off, plen);
                a.v[i] = (s_piece){off, plen + 1};
            }
        if (st == BT_OK && step->regex) {
            b.n = 0;
            st = s_split(step->regex, &buf, &a, &b, &cps, &offs, &cap);
            s_pieces t = a;
            a = b;
            b = t;
        }
    }
    for (size_t i = 0; i < a.n && st == BT_OK; i++)
        st = s_bpe(self, buf.data + a.v[i].off, a.v[i].len, s, out);
    free(cps);
    free(offs);
    free(a.v);
    free(b.v);
    bt_buf_release(&buf);
    return st;
}

static bool s_is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool s_is_word_byte(char c) {
    unsigned char u = (unsigned char)c;
    return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') ||
           (u >= 'A' && u <= 'Z') || u == '_';
}

/*  The added token at text[i], longest first, or NULL. */
static const s_added *s_added_at(const bt_tokenizer_t *self, const char *text, size_t len,
                                 size_t i) {
    for (int k = 0; k < self->n_added; k++) {
        const s_added *a = &self->added[k];
        if (a->len == 0 || a->text[0] != text[i] || a->len > len - i ||
            memcmp(text + i, a->text, a->len) != 0)
            continue;
        if (a->single_word && ((i > 0 && s_is_word_byte(text[i - 1])) ||
                               (i + a->len < len && s_is_word_byte(text[i + a->len]))))
            continue;
        return a;
    }
    return NULL;
}

static bt_status s_bpe_encode(const bt_tokenizer_t *self, const char *text, size_t len,
                              bool add_bos, s_ids *out) {
    if (add_bos && self->bos >= 0 && !s_ids_push(out, self->bos))
        return bt_fail(BT_ENOMEM, "tokenizer: out of memory");
    s_scratch s = {0};
    bt_status st = BT_OK;
    size_t from = 0;
    for (size_t i = 0; i < len && st == BT_OK;) {
        const s_added *a =
            self->added_first[(unsigned char)text[i]] ? s_added_at(self, text, len, i) : NULL;
        if (!a) {
            i++;
            continue;
        }
        size_t start = i, end = i + a->len;
        if (a->lstrip)
            while (start > from && s_is_space(text[start - 1]))
                start--;
        if (a->rstrip)
            while (end < len && s_is_space(text[end]))
                end++;
        st = s_encode_plain(self, text + from, start - from, &s, out);
        if (st == BT_OK && !s_ids_push(out, a->id))
            st = bt_fail(BT_ENOMEM, "tokenizer: out of memory");
        from = i = end;
    }
    if (st == BT_OK)
        st = s_encode_plain(self, text + from, len - from, &s, out);
    s_scratch_release(&s);
    return st;
}

bt_status bt_tokenizer_encode(const bt_tokenizer_t *self, const char *text, size_t len,
                              bool add_bos, int32_t *out, size_t cap, size_t *n_out) {
    s_ids ids = {0};
    bt_status st = self->kind == BT_TOKENIZER_BYTES ? s_bytes_encode(self, text, len, add_bos, &ids)
                                                    : s_bpe_encode(self, text, len, add_bos, &ids);
    *n_out = ids.n;
    if (st == BT_OK && ids.n > cap)
        st = bt_fail(BT_ERANGE, "tokenizer: encoding needs %zu ids, the buffer holds %zu", ids.n,
                     cap);
    if (st == BT_OK && ids.n)
        memcpy(out, ids.v, ids.n * sizeof *out);
    free(ids.v);
    return st;
}

bt_status bt_tokenizer_decode(const bt_tokenizer_t *self, const int32_t *ids, size_t n, char *out,
                              size_t cap, size_t *len) {
    size_t used = 0;
    for (size_t i = 0; i < n && !s_is_stop(self, ids[i]); i++) {
        int32_t id = ids[i];
        size_t tlen;
        const char *t = bt_tokenizer_token(self, id, &tlen);
        if (!t) {
            *len = 0;
            if (id < 0 || id >= self->vocab_size)
                return bt_fail(BT_ERANGE, "tokenizer: id %d at position %zu is outside 0..%d", id,
                               i, self->vocab_size - 1);
            return bt_fail(BT_ERANGE, "tokenizer: id %d at position %zu has no token", id, i);
        }
        if (id == self->bos || id == self->pad)
            continue;
        for (size_t k = 0; k < tlen; k++, used++)
            if (used + 1 < cap)
                out[used] = t[k];
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

/* ---- tokenizer.json -------------------------------------------------------------------------- */

/*  GPT-2's byte-to-character table: printable bytes stand for themselves, the other 68 become
    U+0100 + k in byte order.  s_char_byte inverts it (-1: not a byte-level character). */
static int s_char_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68)
        return -1;
    int k = (int)(cp - 256);
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (!printable && k-- == 0)
            return b;
    }
    return -1;
}

/*  The bytes a vocabulary string stands for: byte-level characters mapped back to bytes; a string
    with any other character (never in a byte-level vocabulary) is kept as its UTF-8. */
static bool s_token_bytes(const char *key, bt_buf *out) {
    size_t start = out->len, len = strlen(key);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        bool valid;
        i += bt_utf8_decode(key + i, len - i, &cp, &valid);
        int b = valid ? s_char_byte(cp) : -1;
        if (b < 0) {
            bt_buf_truncate(out, start);
            return bt_buf_put(out, key, len);
        }
        char c = (char)(unsigned char)b;
        if (!bt_buf_put(out, &c, 1))
            return false;
    }
    return true;
}

/* ---- JSON documents ------------------------------------------------------------------------ */

/*  Appends to buf[*w .. cap) what snprintf would, never past cap. */
static void s_append(char *buf, size_t cap, size_t *w, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void s_append(char *buf, size_t cap, size_t *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (*w < cap) {
        int n = vsnprintf(buf + *w, cap - *w, fmt, ap);
        *w += n > 0 ? (size_t)n : 0;
    }
    va_end(ap);
}

#define S_JSON_LEVELS 64 /* levels of nesting named in a "truncated" message */

/*  One open object or array of a JSON text, as s_json_error scans it. */
typedef struct s_json_level {
    char open;         /* '{' or '[' */
    size_t key, n_key; /* object: the text of the member's key being read (n_key 0: none) */
    size_t index;      /* array: the element being read */
} s_json_level;

/*  Why text[0, len) did not parse (cJSON gave up at byte err), into msg: "truncated (...)" when the
    text ends with objects, arrays or a string still open and cJSON failed in its last value, naming
    where it ends (inside "model" > "merges" > [117]); else where it stops being JSON, with line
    and column. */
static void s_json_error(const char *text, size_t len, size_t err, char *msg, size_t cap) {
    s_json_level level[S_JSON_LEVELS];
    size_t depth = 0, last = 0, string = 0, line = 1, col = 1;
    bool in_string = false, escaped = false, in_word = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
            continue;
        }
        bool word = !strchr("{}[]:,\" \t\r\n", c);
        if (word && !in_word)
            last = i; /* a number or literal starts */
        in_word = word;
        if (c == '"') {
            in_string = true;
            last = string = i;
        } else if (c == '{' || c == '[') {
            if (depth < S_JSON_LEVELS)
                level[depth] = (s_json_level){.open = c};
            depth++;
            last = i;
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        } else if (c == ':' && depth > 0 && depth <= S_JSON_LEVELS &&
                   level[depth - 1].open == '{') {
            size_t end = string + 1; /* the key: the last string */
            while (end < i && text[end] != '"')
                end += text[end] == '\\' ? 2 : 1;
            level[depth - 1].key = string + 1;
            level[depth - 1].n_key = end - string - 1;
        } else if (c == ',' && depth > 0 && depth <= S_JSON_LEVELS) {
            level[depth - 1].n_key = 0;
            level[depth - 1].index++;
        }
    }
    for (size_t i = 0; i < err && i < len; i++) {
        line += text[i] == '\n';
        col = text[i] == '\n' ? 1 : col + 1;
    }
    size_t w = 0;
    if (len == strspn(text, " \t\r\n")) {
        s_append(msg, cap, &w, "empty (%zu bytes)", len);
    } else if ((depth > 0 || in_string) && err >= last) {
        s_append(msg, cap, &w, "truncated (ends at byte %zu, inside ", len);
        size_t named = 0;
        for (size_t d = 0; d < depth && d < S_JSON_LEVELS; d++) {
            const char *sep = named ? " > " : "";
            if (level[d].open == '[')
                s_append(msg, cap, &w, "%s[%zu]", sep, level[d].index);
            else if (level[d].n_key)
                s_append(msg, cap, &w, "%s\"%.*s%s\"", sep,
                         (int)(level[d].n_key < 40 ? level[d].n_key : 40), text + level[d].key,
                         level[d].n_key > 40 ? "..." : "");
            named += level[d].open == '[' || level[d].n_key;
        }
        if (!named)
            s_append(msg, cap, &w, "the top-level %s", depth ? "value" : "string");
        s_append(msg, cap, &w, ", %s, %zu bracket%s left open): the file was cut short",
                 in_string ? "in a string" : "between values", depth, depth == 1 ? "" : "s");
    } else {
        s_append(msg, cap, &w, "not valid JSON at byte %zu (line %zu, column %zu)", err, line, col);
    }
}

/*  text[0, len) parsed into *root: BT_EFORMAT naming path and saying why when it is not JSON
    (s_json_error).  The caller deletes *root. */
static bt_status s_parse(const char *path, const char *text, size_t len, cJSON **root) {
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (*root)
        return BT_OK;
    char why[1024];
    size_t err = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
    s_json_error(text, len, err, why, sizeof why);
    return bt_fail(BT_EFORMAT, "%s: %s", path, why);
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

static const char *s_type_of(const cJSON *obj) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static bool s_flag(const cJSON *obj, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

/*  A regex that matches s literally. */
static char *s_literal_pattern(const char *s) {
    size_t len = strlen(s);
    char *p = malloc(2 * len + 1), *w = p;
    if (!p)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (strchr("\\.^$|?*+()[]{}", s[i]))
            *w++ = '\\';
        *w++ = s[i];
    }
    *w = '\0';
    return p;
}

static bt_status s_add_step(bt_tokenizer_t *t, const char *path, const char *pattern,
                            bool prefix_space) {
    if (t->n_steps == S_MAX_STEPS)
        return bt_fail(BT_EFORMAT, "%s: pre_tokenizer: more than %d steps", path, S_MAX_STEPS);
    s_step *step = &t->steps[t->n_steps];
    step->prefix_space = prefix_space;
    if (pattern) {
        bt_status st = bt_regex_compile(pattern, &step->regex);
        if (st != BT_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", bt_last_error());
            return bt_fail(st, "%s: pre_tokenizer pattern \"%s\": %s", path, pattern, why);
        }
    }
    t->n_steps++;
    return BT_OK;
}

static bt_status s_pre_tokenizer(bt_tokenizer_t *t, const char *path, const cJSON *pt) {
    if (!pt || cJSON_IsNull(pt))
        return BT_OK;
    const char *type = s_type_of(pt);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers"))
            BT_TRY(s_pre_tokenizer(t, path, item));
        return BT_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        const cJSON *use = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        bool use_regex = !use || cJSON_IsTrue(use); /* Hugging Face's default is true */
        return s_add_step(t, path, use_regex ? S_GPT2_PATTERN : NULL,
                          s_flag(pt, "add_prefix_space"));
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
        const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pattern, "String");
        const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated") != 0)
            return bt_fail(BT_EUNSUPPORTED,
                           "%s: pre_tokenizer Split: behavior \"%s\" is not supported (only "
                           "\"Isolated\")",
                           path, cJSON_IsString(behavior) ? behavior->valuestring : "?");
        if (s_flag(pt, "invert"))
            return bt_fail(BT_EUNSUPPORTED, "%s: pre_tokenizer Split: invert is not supported",
                           path);
        if (cJSON_IsString(re))
            return s_add_step(t, path, re->valuestring, false);
        if (!cJSON_IsString(lit))
            return bt_fail(BT_EFORMAT,
                           "%s: pre_tokenizer Split: pattern needs \"Regex\" or "
                           "\"String\"",
                           path);
        char *p = s_literal_pattern(lit->valuestring);
        if (!p)
            return bt_fail(BT_ENOMEM, "%s: out of memory", path);
        bt_status st = s_add_step(t, path, p, false);
        free(p);
        return st;
    }
    return bt_fail(BT_EUNSUPPORTED,
                   "%s: pre_tokenizer type \"%s\" is not supported (Split, ByteLevel, Sequence)",
                   path, type);
}

static bt_status s_normalizer(bt_tokenizer_t *t, const char *path, const cJSON *n) {
    if (!n || cJSON_IsNull(n))
        return BT_OK;
    const char *type = s_type_of(n);
    if (strcmp(type, "NFC") == 0) {
        t->nfc = true;
        return BT_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
            BT_TRY(s_normalizer(t, path, item));
        return BT_OK;
    }
    return bt_fail(BT_EUNSUPPORTED, "%s: normalizer type \"%s\" is not supported (NFC, Sequence)",
                   path, type);
}

/*  The first special token of a TemplateProcessing's single-sequence template (a BOS), or -1. */
static int32_t s_template_bos(const cJSON *pp) {
    if (!pp || cJSON_IsNull(pp))
        return -1;
    if (strcmp(s_type_of(pp), "Sequence") == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            int32_t id = s_template_bos(item);
            if (id >= 0)
                return id;
        }
        return -1;
    }
    if (strcmp(s_type_of(pp), "TemplateProcessing") != 0)
        return -1;
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
    if (!sp)
        return -1;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    const cJSON *entry =
        cJSON_IsString(name) ? cJSON_GetObjectItemCaseSensitive(tokens, name->valuestring) : NULL;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
    const cJSON *id = cJSON_GetArrayItem(ids, 0);
    return cJSON_IsNumber(id) ? (int32_t)id->valuedouble : -1;
}

typedef struct {
    int32_t id;
    size_t off, len; /* into the arena being built */
} s_entry;

static int s_added_longest_first(const void *a, const void *b) {
    const s_added *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : (x->id > y->id) - (x->id < y->id);
}

static bt_status s_model(bt_tokenizer_t *t, const char *path, const cJSON *root) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model))
        return bt_fail(BT_EFORMAT, "%s: missing object \"model\"", path);
    const char *type = s_type_of(model);
    if (*type && strcmp(type, "BPE") != 0)
        return bt_fail(BT_EUNSUPPORTED, "%s: model type \"%s\" is not supported (only BPE)", path,
                       type);
    if (s_flag(model, "byte_fallback"))
        return bt_fail(BT_EUNSUPPORTED,
                       "%s: model.byte_fallback (SentencePiece-style BPE) is not supported; "
                       "baton reads byte-level BPE",
                       path);
    const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, affixes[k]);
        if (cJSON_IsString(v) && v->valuestring[0])
            return bt_fail(BT_EUNSUPPORTED, "%s: model.%s \"%s\" is not supported", path,
                           affixes[k], v->valuestring);
    }
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return bt_fail(BT_EUNSUPPORTED, "%s: model.dropout is not supported", path);
    t->ignore_merges = s_flag(model, "ignore_merges");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab))
        return bt_fail(BT_EFORMAT, "%s: model.vocab: expected an object, got %s", path,
                       vocab ? s_json_type(vocab) : "nothing");
    if (!cJSON_IsArray(merges))
        return bt_fail(BT_EFORMAT, "%s: model.merges: expected an array, got %s", path,
                       merges ? s_json_type(merges) : "nothing");
    if (added && !cJSON_IsArray(added))
        return bt_fail(BT_EFORMAT, "%s: added_tokens: expected an array, got %s", path,
                       s_json_type(added));

    /* Every token's bytes into one arena; then offsets by id. */
    size_t n_vocab = (size_t)cJSON_GetArraySize(vocab), n_added = (size_t)cJSON_GetArraySize(added);
    s_entry *entries = malloc((n_vocab + n_added + 1) * sizeof *entries);
    bt_buf arena = {0};
    bt_status st = entries ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", path);
    size_t n = 0;
    int32_t max_id = -1;
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab) {
        if (st != BT_OK)
            break;
        if (!cJSON_IsNumber(item) || item->valuedouble < 0 || item->valuedouble > INT32_MAX - 1 ||
            item->valuedouble != (double)(int32_t)item->valuedouble) {
            st = bt_fail(BT_EFORMAT, "%s: model.vocab[\"%s\"]: expected an id >= 0, got %s", path,
                         item->string, s_json_type(item));
            break;
        }
        entries[n] = (s_entry){(int32_t)item->valuedouble, arena.len, 0};
        if (!s_token_bytes(item->string, &arena))
            st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
        entries[n].len = arena.len - entries[n].off;
        max_id = entries[n].id > max_id ? entries[n].id : max_id;
        n++;
    }
    t->n_added = 0;
    t->added = n_added ? calloc(n_added, sizeof *t->added) : NULL;
    if (st == BT_OK && n_added && !t->added)
        st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
    int k = 0;
    cJSON_ArrayForEach(item, added) {
        if (st != BT_OK)
            break;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(item, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX - 1 ||
            !cJSON_IsString(content)) {
            st = bt_fail(BT_EFORMAT,
                         "%s: added_tokens[%d]: needs an \"id\" >= 0 and a string "
                         "\"content\"",
                         path, k);
            break;
        }
        s_added *a = &t->added[t->n_added++];
        a->id = (int32_t)id->valuedouble;
        a->len = strlen(content->valuestring);
        a->text = strdup(content->valuestring);
        a->lstrip = s_flag(item, "lstrip");
        a->rstrip = s_flag(item, "rstrip");
        a->single_word = s_flag(item, "single_word");
        a->special = s_flag(item, "special");
        if (a->len)
            t->added_first[(unsigned char)a->text[0]] = true;
        entries[n] = (s_entry){a->id, arena.len, a->len};
        if (!a->text || !bt_buf_put(&arena, a->text, a->len))
            st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
        max_id = a->id > max_id ? a->id : max_id;
        n++;
        k++;
    }
    if (st == BT_OK && max_id < 0)
        st = bt_fail(BT_EFORMAT, "%s: model.vocab is empty", path);
    if (st == BT_OK) {
        t->vocab_size = max_id + 1;
        t->tok_off = calloc((size_t)t->vocab_size + 1, sizeof *t->tok_off);
        t->tok_known = calloc((size_t)t->vocab_size, sizeof *t->tok_known);
        size_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += entries[i].len;
        t->arena = malloc(total + 1);
        if (!t->tok_off || !t->tok_known || !t->arena)
            st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
    }
    if (st == BT_OK) {
        /* Lengths by id (an added token replaces a vocabulary entry with its id), then prefix
           sums, then copy. */
        size_t *len_of = calloc((size_t)t->vocab_size, sizeof *len_of);
        size_t *src_of = calloc((size_t)t->vocab_size, sizeof *src_of);
        if (!len_of || !src_of)
            st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
        for (size_t i = 0; i < n && st == BT_OK; i++) {
            int32_t id = entries[i].id;
            if (t->tok_known[id] && i < n_vocab) {
                st = bt_fail(BT_EFORMAT, "%s: model.vocab: id %d appears twice", path, id);
                break;
            }
            t->tok_known[id] = true;
            len_of[id] = entries[i].len;
            src_of[id] = entries[i].off;
        }
        for (int32_t id = 0; id < t->vocab_size && st == BT_OK; id++) {
            t->tok_off[id + 1] = t->tok_off[id] + len_of[id];
            memcpy(t->arena + t->tok_off[id], arena.data + src_of[id], len_of[id]);
            t->max_token = len_of[id] > t->max_token ? len_of[id] : t->max_token;
        }
        free(len_of);
        free(src_of);
    }
    bt_buf_release(&arena);
    /* The vocabulary table holds model tokens only: merges never produce an added token. */
    if (st == BT_OK && !s_table_init(&t->vocab, n_vocab))
        st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n_vocab && st == BT_OK; i++) {
        bool replaced = false;
        for (int j = 0; j < t->n_added && !replaced; j++)
            replaced = t->added[j].id == entries[i].id;
        if (!replaced)
            s_vocab_insert(t, entries[i].id);
    }
    free(entries);
    for (int b = 0; b < 256 && st == BT_OK; b++) {
        char c = (char)(unsigned char)b;
        t->byte_id[b] = s_vocab_find(t, &c, 1);
        if (t->byte_id[b] < 0)
            st = bt_fail(BT_EFORMAT,
                         "%s: model.vocab has no token for byte 0x%02X (not a "
                         "byte-level BPE vocabulary)",
                         path, b);
    }
    if (st == BT_OK && t->n_added > 1)
        qsort(t->added, (size_t)t->n_added, sizeof *t->added, s_added_longest_first);

    /* Merges: "a b" strings or [a, b] pairs, in rank order. */
    int32_t n_merges = cJSON_GetArraySize(merges);
    if (st == BT_OK) {
        t->merges = malloc(((size_t)n_merges + 1) * sizeof *t->merges);
        if (!t->merges || !s_table_init(&t->merge_of, (size_t)n_merges))
            st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
    }
    bt_buf left = {0}, right = {0};
    int32_t rank = 0;
    cJSON_ArrayForEach(item, merges) {
        if (st != BT_OK)
            break;
        const char *a = NULL, *b = NULL;
        char *split = NULL;
        if (cJSON_IsString(item)) {
            split = strdup(item->valuestring);
            char *space = split ? strchr(split, ' ') : NULL;
            if (space) {
                *space = '\0';
                a = split;
                b = space + 1;
            }
        } else if (cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(item, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(item, 1))) {
            a = cJSON_GetArrayItem(item, 0)->valuestring;
            b = cJSON_GetArrayItem(item, 1)->valuestring;
        }
        if (!a) {
            free(split);
            st = bt_fail(BT_EFORMAT, "%s: model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]",
                         path, rank);
            break;
        }
        bt_buf_truncate(&left, 0);
        bt_buf_truncate(&right, 0);
        bool ok = s_token_bytes(a, &left) && s_token_bytes(b, &right) &&
                  bt_buf_put(&left, right.data, right.len);
        free(split);
        if (!ok) {
            st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
            break;
        }
        s_merge m = {s_vocab_find(t, left.data, left.len - right.len), s_vocab_find(t, right.data, right.len),
                     s_vocab_find(t, left.data, left.len)};
        if (m.left < 0 || m.right < 0 || m.merged < 0) {
            st = bt_fail(BT_EFORMAT,
                         "%s: model.merges[%d]: \"%s\" + \"%s\": %s is not in the "
                         "vocabulary",
                         path, rank, a, b,
                         m.merged < 0 && m.left >= 0 && m.right >= 0 ? "the merged token"
                                                                     : "a part");
            break;
        }
        if (s_merge_find(t, m.left, m.right) >= 0) { /* a repeated pair keeps its first rank */
            t->merges[rank++] = (s_merge){-1, -1, -1};
            continue;
        }
        t->merges[rank] = m;
        size_t h = s_pair_hash(m.left, m.right) & t->merge_of.mask;
        while (t->merge_of.slots[h] >= 0)
            h = (h + 1) & t->merge_of.mask;
        t->merge_of.slots[h] = rank++;
    }
    t->n_merges = rank;
    bt_buf_release(&left);
    bt_buf_release(&right);
    return st;
}

/*  A special token named in tokenizer_config.json: a string, {"content": ...} or null. */
static bt_status s_special(const bt_tokenizer_t *t, const char *path, const cJSON *cfg,
                           const char *key, int32_t *id) {
    *id = -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!v || cJSON_IsNull(v))
        return BT_OK;
    if (!cJSON_IsString(v))
        return bt_fail(BT_EFORMAT, "%s: %s: expected a string or null, got %s", path, key,
                       s_json_type(v));
    for (int k = 0; k < t->n_added; k++)
        if (strcmp(t->added[k].text, v->valuestring) == 0) {
            *id = t->added[k].id;
            return BT_OK;
        }
    bt_buf bytes = {0};
    if (!s_token_bytes(v->valuestring, &bytes))
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    *id = s_vocab_find(t, bytes.data, bytes.len);
    bt_buf_release(&bytes);
    if (*id < 0)
        return bt_fail(BT_EFORMAT, "%s: %s \"%s\" is not a token of tokenizer.json", path, key,
                       v->valuestring);
    return BT_OK;
}

/*  More stops from DIR/generation_config.json's eos_token_id (an id or a list, as instruct
    models list their end of turn and end of text), when the file is there. */
static bt_status s_generation_stops(bt_tokenizer_t *t, const char *dir) {
    char path[4096], *text = NULL;
    BT_TRY(s_path(dir, S_GENERATION_NAME, path, sizeof path));
    struct stat sb;
    if (stat(path, &sb) != 0)
        return BT_OK;
    BT_TRY(bt_file_read(path, S_CONFIG_MAX, &text, &t->generation_len));
    t->generation_text = text; /* saved with the tokenizer */
    cJSON *root = NULL;
    bt_status st = s_parse(path, text, t->generation_len, &root);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), *id;
    if (st == BT_OK && !cJSON_IsObject(root))
        st = bt_fail(BT_EFORMAT, "%s: not a JSON object", path);
    if (st == BT_OK && ids && !cJSON_IsNumber(ids) && !cJSON_IsArray(ids) && !cJSON_IsNull(ids))
        st = bt_fail(BT_EFORMAT, "%s: eos_token_id: expected an id or a list of ids, got %s", path,
                     s_json_type(ids));
    /* one id, or each id of the list */
    id = cJSON_IsArray(ids) ? ids->child : cJSON_IsNumber(ids) ? ids : NULL;
    for (; id && st == BT_OK; id = cJSON_IsArray(ids) ? id->next : NULL) {
        double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (v < 0 || v >= t->vocab_size || v != (double)(int32_t)v) {
            st = bt_fail(BT_EFORMAT, "%s: eos_token_id: %s is not an id of the tokenizer (0..%d)",
                         path, cJSON_IsNumber(id) ? "a value" : "an item", t->vocab_size - 1);
            break;
        }
        bool known = false;
        for (int i = 0; i < t->n_stops; i++)
            known |= t->stops[i] == (int32_t)v;
        if (!known && t->n_stops < S_MAX_STOPS)
            t->stops[t->n_stops++] = (int32_t)v;
    }
    cJSON_Delete(root);
    return st;
}

static bt_status s_bpe_load(const char *dir, bt_tokenizer_t *t) {
    char path[4096], cfg_path[4096];
    BT_TRY(s_path(dir, S_JSON_NAME, path, sizeof path));
    BT_TRY(s_path(dir, S_CONFIG_NAME, cfg_path, sizeof cfg_path));
    BT_TRY(bt_file_read(path, S_JSON_MAX, &t->json_text, &t->json_len));
    BT_TRY(bt_file_read(cfg_path, S_HF_CONFIG_MAX, &t->config_text, &t->config_len));
    cJSON *root = NULL, *cfg = NULL;
    bt_status st = s_parse(path, t->json_text, t->json_len, &root);
    if (st == BT_OK)
        st = s_parse(cfg_path, t->config_text, t->config_len, &cfg);
    if (st == BT_OK && !cJSON_IsObject(root))
        st = bt_fail(BT_EFORMAT, "%s: not a JSON object", path);
    else if (st == BT_OK && !cJSON_IsObject(cfg))
        st = bt_fail(BT_EFORMAT, "%s: not a JSON object", cfg_path);
    if (st == BT_OK)
        st = s_model(t, path, root);
    if (st == BT_OK)
        st = s_normalizer(t, path, cJSON_GetObjectItemCaseSensitive(root, "normalizer"));
    if (st == BT_OK)
        st = s_pre_tokenizer(t, path, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    int32_t bos = -1;
    if (st == BT_OK)
        st = s_special(t, cfg_path, cfg, "eos_token", &t->eos);
    if (st == BT_OK && t->eos < 0)
        st = bt_fail(BT_EFORMAT,
                     "%s: eos_token is missing: baton needs the token that ends a completion",
                     cfg_path);
    if (st == BT_OK)
        st = s_special(t, cfg_path, cfg, "pad_token", &t->pad);
    if (st == BT_OK)
        st = s_special(t, cfg_path, cfg, "bos_token", &bos);
    if (st == BT_OK) {
        /* BOS: the post-processor's template when it has one, else bos_token unless
           add_bos_token is false. */
        t->bos = s_template_bos(cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
        if (t->bos < 0 && !cJSON_IsFalse(add))
            t->bos = bos;
        if (t->bos >= t->vocab_size)
            st = bt_fail(BT_EFORMAT, "%s: post_processor: BOS id %d is not in the vocabulary", path,
                         t->bos);
        if (t->pad < 0)
            t->pad = t->eos;
        t->stops[t->n_stops++] = t->eos;
        st = s_generation_stops(t, dir);
    }
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}
/* ---- tokenizer_config.json ------------------------------------------------------------------ */

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

/* ---- load and save --------------------------------------------------------------------------- */

static bool s_exists(const char *dir, const char *name) {
    char path[4096];
    struct stat sb;
    return s_path(dir, name, path, sizeof path) == BT_OK && stat(path, &sb) == 0;
}

static bt_status s_bytes_load(const char *dir, bt_tokenizer_t **out) {
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    bt_status rc = s_path(dir, S_CONFIG_NAME, path, sizeof path);
    if (rc == BT_OK)
        rc = bt_file_read(path, S_CONFIG_MAX, &text, &len);
    if (rc != BT_OK)
        return rc;
    cJSON *root = NULL;
    rc = s_parse(path, text, len, &root);
    free(text);
    if (rc == BT_OK && !cJSON_IsObject(root))
        rc = bt_fail(BT_EFORMAT, "%s: not a JSON object", path);
    else if (rc == BT_OK)
        rc = s_check_config(path, root);
    cJSON_Delete(root);
    if (rc != BT_OK)
        return rc;
    *out = bt_tokenizer_new_bytes();
    return *out ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", path);
}

bt_status bt_tokenizer_load(const char *dir, bt_tokenizer_t **out) {
    *out = NULL;
    if (!s_exists(dir, S_JSON_NAME))
        return s_bytes_load(dir, out);
    bt_tokenizer_t *t = calloc(1, sizeof *t);
    if (!t)
        return bt_fail(BT_ENOMEM, "%s: out of memory", dir);
    t->kind = BT_TOKENIZER_BPE;
    t->bos = t->eos = t->pad = -1;
    bt_status st = s_bpe_load(dir, t);
    if (st != BT_OK) {
        bt_tokenizer_destroy(&t);
        return st;
    }
    *out = t;
    return BT_OK;
}

bt_status bt_tokenizer_for_model(const char *dir, bt_tokenizer_t **out) {
    if (dir && dir[0])
        return bt_tokenizer_load(dir, out);
    *out = bt_tokenizer_new_bytes();
    return *out ? BT_OK : bt_fail(BT_ENOMEM, "tokenizer: out of memory");
}

bt_status bt_tokenizer_save(const bt_tokenizer_t *self, const char *dir) {
    char path[4096];
    BT_TRY(s_path(dir, S_CONFIG_NAME, path, sizeof path));
    if (self->kind == BT_TOKENIZER_BPE) {
        char other[4096];
        BT_TRY(s_path(dir, S_JSON_NAME, other, sizeof other));
        BT_TRY(bt_file_write(other, self->json_text, self->json_len));
        if (self->generation_text) {
            BT_TRY(s_path(dir, S_GENERATION_NAME, other, sizeof other));
            BT_TRY(bt_file_write(other, self->generation_text, self->generation_len));
        }
        return bt_file_write(path, self->config_text, self->config_len);
    }
    char text[256];
    int n = snprintf(text, sizeof text,
                     "{\"tokenizer_class\": \"%s\", \"bos_token_id\": %d, \"eos_token_id\": "
                     "%d, \"pad_token_id\": %d, \"vocab_size\": %d}\n",
                     S_BYTES_CLASS, self->bos, self->eos, self->pad, self->vocab_size);
    BT_ASSERT(n > 0 && (size_t)n < sizeof text);
    return bt_file_write(path, text, (size_t)n);
}
