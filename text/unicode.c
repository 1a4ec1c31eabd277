/*  unicode.c — character properties by binary search in the tables of unicode_data.c, UTF-8, and
    NFC: canonical decomposition, canonical ordering, canonical composition (UAX #15; the Unicode
    Standard 15.0, section 3.11), with Hangul syllables done by arithmetic (section 3.12). */
#include "baton/unicode.h"
#include "unicode_data.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_CP 0x10FFFFu
/*  An invalid UTF-8 byte b travels through NFC as the unit S_RAW + b: above every code point, so
    it has no decomposition, combining class 0, and composes with nothing. */
#define S_RAW 0x110000u

/*  Hangul syllables (Unicode chapter 3.12): S = SBase + (L * VCount + V) * TCount + T. */
#define S_SBASE 0xAC00u
#define S_LBASE 0x1100u
#define S_VBASE 0x1161u
#define S_TBASE 0x11A7u
#define S_LCOUNT 19u
#define S_VCOUNT 21u
#define S_TCOUNT 28u
#define S_NCOUNT (S_VCOUNT * S_TCOUNT)
#define S_SCOUNT (S_LCOUNT * S_NCOUNT)

enum { S_QC_YES = 0 };

/*  The value of cp in a range table (unicode_data.h): the last entry whose start <= cp. */
static uint8_t s_range_value(const uint32_t *table, size_t n, uint32_t cp) {
    uint32_t key = cp << 8 | 0xFFu;
    size_t lo = 0, hi = n; /* table[lo] <= key < table[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (table[mid] <= key)
            lo = mid;
        else
            hi = mid;
    }
    return (uint8_t)(table[lo] & 0xFFu);
}

bt_uc_category bt_uc_category_of(uint32_t cp) {
    if (cp > S_MAX_CP)
        return BT_UC_CN;
    return (bt_uc_category)s_range_value(bt_ucd_category, bt_ucd_category_n, cp);
}

char bt_uc_major(bt_uc_category c) {
    static const char major[] = "CLLLLLMMMNNNPPPPPPPSSSSZZZCCCC"; /* in bt_uc_category order */
    BT_ASSERT((unsigned)c < sizeof major - 1);
    return major[c];
}

bool bt_uc_is_white_space(uint32_t cp) {
    return cp <= S_MAX_CP && s_range_value(bt_ucd_white_space, bt_ucd_white_space_n, cp) != 0;
}

const char *bt_uc_version(void) {
    return bt_ucd_version;
}

/*  Canonical_Combining_Class; 0 for an invalid byte's unit. */
static uint8_t s_ccc(uint32_t u) {
    if (u < 0x300 || u > S_MAX_CP) /* nothing below U+0300 combines */
        return 0;
    return s_range_value(bt_ucd_ccc, bt_ucd_ccc_n, u);
}

/* ---- UTF-8 ---------------------------------------------------------------------------------- */

size_t bt_utf8_decode(const char *s, size_t len, uint32_t *cp, bool *valid) {
    BT_ASSERT(s && len >= 1 && cp);
    const unsigned char *b = (const unsigned char *)s;
    unsigned char c = b[0];
    if (c < 0x80) {
        *cp = c;
        if (valid)
            *valid = true;
        return 1;
    }
    /*  Well-formed sequences (Unicode Table 3-7): the lead byte fixes the length and the range of
        the second byte; later bytes are 80..BF. */
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, v = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, v = c & 0x0Fu;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, v = c & 0x07u;
        if (c == 0xF0)
            lo = 0x90; /* no overlongs */
        else if (c == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        goto out_invalid; /* 80..C1, F5..FF */
    }
    if (len < n || b[1] < lo || b[1] > hi)
        goto out_invalid;
    for (size_t i = 1; i < n; i++) {
        if (i > 1 && (b[i] & 0xC0u) != 0x80u)
            goto out_invalid;
        v = v << 6 | (b[i] & 0x3Fu);
    }
    *cp = v;
    if (valid)
        *valid = true;
    return n;

out_invalid:
    *cp = 0xFFFD;
    if (valid)
        *valid = false;
    return 1;
}

size_t bt_utf8_encode(uint32_t cp, char out[4]) {
    if (cp > S_MAX_CP || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = 0xFFFD;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/*  The next unit of in[*pos..len): a code point, or S_RAW + byte for an invalid byte. */
static uint32_t s_next_unit(const char *in, size_t len, size_t *pos) {
    uint32_t cp;
    bool valid;
    size_t n = bt_utf8_decode(in + *pos, len - *pos, &cp, &valid);
    uint32_t u = valid ? cp : S_RAW + (unsigned char)in[*pos];
    *pos += n;
    return u;
}

/* ---- NFC ------------------------------------------------------------------------------------ */

bool bt_uc_nfc_quick(const char *in, size_t len) {
    uint8_t last_ccc = 0;
    for (size_t pos = 0; pos < len;) {
        if ((unsigned char)in[pos] < 0xCC) { /* below U+0300, or an invalid byte: a starter */
            last_ccc = 0;
            pos++;
            continue;
        }
        uint32_t u = s_next_unit(in, len, &pos);
        if (u > S_MAX_CP) {
            last_ccc = 0;
            continue;
        }
        if (s_range_value(bt_ucd_nfc_qc, bt_ucd_nfc_qc_n, u) != S_QC_YES)
            return false;
        uint8_t ccc = s_ccc(u);
        if (ccc != 0 && last_ccc > ccc)
            return false;
        last_ccc = ccc;
    }
    return true;
}

/*  A growable array of units. */
typedef struct s_units {
    uint32_t *v;
    size_t n, cap;
} s_units;

static bool s_push(s_units *a, uint32_t u) {
    if (a->n == a->cap) {
        size_t cap = a->cap * 2;
        uint32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = u;
    return true;
}

static const bt_ucd_decomp *s_find_decomp(uint32_t cp) {
    size_t lo = 0, hi = bt_ucd_decomps_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bt_ucd_decomps[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < bt_ucd_decomps_n && bt_ucd_decomps[lo].cp == cp ? &bt_ucd_decomps[lo] : NULL;
}

/*  Appends the full canonical decomposition of u (u itself when it has none). */
static bool s_decompose(s_units *a, uint32_t u) {
    if (u - S_SBASE < S_SCOUNT) {
        uint32_t s = u - S_SBASE, t = s % S_TCOUNT;
        if (!s_push(a, S_LBASE + s / S_NCOUNT) || !s_push(a, S_VBASE + s % S_NCOUNT / S_TCOUNT))
            return false;
        return t == 0 || s_push(a, S_TBASE + t);
    }
    const bt_ucd_decomp *d = u >= 0xC0 && u <= S_MAX_CP ? s_find_decomp(u) : NULL;
    if (!d)
        return s_push(a, u);
    return s_decompose(a, d->first) && (d->second == 0 || s_decompose(a, d->second));
}

/*  Sorts v[0..n) by combining class, keeping the order of equal classes (all are non-zero). */
static bool s_sort_marks(uint32_t *v, size_t n) {
    if (n <= 32) { /* insertion sort: the usual run is one or two marks */
        for (size_t i = 1; i < n; i++) {
            uint32_t u = v[i];
            uint8_t c = s_ccc(u);
            size_t j = i;
            for (; j > 0 && s_ccc(v[j - 1]) > c; j--)
                v[j] = v[j - 1];
            v[j] = u;
        }
        return true;
    }
    /*  A long run (hostile text): a stable counting sort by class, O(n). */
    uint32_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp)
        return false;
    size_t start[257] = {0};
    for (size_t i = 0; i < n; i++)
        start[s_ccc(v[i]) + 1]++;
    for (size_t c = 1; c < 257; c++)
        start[c] += start[c - 1];
    for (size_t i = 0; i < n; i++)
        tmp[start[s_ccc(v[i])]++] = v[i];
    memcpy(v, tmp, n * sizeof *v);
    free(tmp);
    return true;
}

/*  The primary composite of a + b, or 0 when there is none. */
static uint32_t s_compose(uint32_t a, uint32_t b) {
    if (a - S_LBASE < S_LCOUNT && b - S_VBASE < S_VCOUNT) /* L + V -> LV */
        return S_SBASE + ((a - S_LBASE) * S_VCOUNT + (b - S_VBASE)) * S_TCOUNT;
    if (a - S_SBASE < S_SCOUNT && (a - S_SBASE) % S_TCOUNT == 0 && b - S_TBASE - 1 < S_TCOUNT - 1)
        return a + (b - S_TBASE); /* LV + T -> LVT */
    size_t lo = 0, hi = bt_ucd_comps_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const bt_ucd_comp *m = &bt_ucd_comps[mid];
        if (m->first < a || (m->first == a && m->second < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < bt_ucd_comps_n && bt_ucd_comps[lo].first == a && bt_ucd_comps[lo].second == b)
        return bt_ucd_comps[lo].composite;
    return 0;
}

/*  Canonical composition of v[0..*n) in place (UAX #15 D117): each character joins the last
    starter when the pair has a primary composite and nothing between them blocks it (no
    character with class 0 or with a class >= its own). */
static void s_compose_all(uint32_t *v, size_t *n) {
    if (*n == 0)
        return;
    size_t starter = 0, out = 1;
    /*  The class of the last character kept after the starter; 0 when the starter is the last
        kept; 256 when the text begins with a mark, which then has no starter to join. */
    int last_ccc = s_ccc(v[0]) ? 256 : 0;
    for (size_t i = 1; i < *n; i++) {
        uint32_t u = v[i];
        int ccc = s_ccc(u);
        if (last_ccc == 0 || last_ccc < ccc) {
            uint32_t c = s_compose(v[starter], u);
            if (c) {
                v[starter] = c;
                continue;
            }
        }
        if (ccc == 0)
            starter = out;
        last_ccc = ccc;
        v[out++] = u;
    }
    *n = out;
}

bt_status bt_uc_nfc(const char *in, size_t len, char **out, size_t *out_len) {
    BT_ASSERT(out && out_len && (in || len == 0));
    *out = NULL;
    *out_len = 0;
    if (bt_uc_nfc_quick(in, len)) {
        char *copy = malloc(len + 1);
        if (!copy)
            return bt_fail(BT_ENOMEM, "unicode: NFC of %zu bytes", len);
        if (len)
            memcpy(copy, in, len);
        copy[len] = '\0';
        *out = copy;
        *out_len = len;
        return BT_OK;
    }

    bt_status st = BT_OK;
    s_units a = {NULL, 0, len + 16};
    if (len > SIZE_MAX / 16 || !(a.v = malloc(a.cap * sizeof *a.v)))
        goto out_nomem;
    /*  1. Full canonical decomposition. */
    for (size_t pos = 0; pos < len;)
        if (!s_decompose(&a, s_next_unit(in, len, &pos)))
            goto out_nomem;
    /*  2. Canonical ordering: each run of non-starters sorted by class, stably. */
    for (size_t i = 0; i < a.n;) {
        if (s_ccc(a.v[i]) == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < a.n && s_ccc(a.v[j]) != 0)
            j++;
        if (!s_sort_marks(a.v + i, j - i))
            goto out_nomem;
        i = j;
    }
    /*  3. Canonical composition. */
    s_compose_all(a.v, &a.n);

    size_t bytes = 0;
    char buf[4];
    for (size_t i = 0; i < a.n; i++)
        bytes += a.v[i] > S_MAX_CP ? 1 : bt_utf8_encode(a.v[i], buf);
    char *text = malloc(bytes + 1);
    if (!text)
        goto out_nomem;
    char *p = text;
    for (size_t i = 0; i < a.n; i++) {
        if (a.v[i] > S_MAX_CP)
            *p++ = (char)(a.v[i] - S_RAW);
        else
            p += bt_utf8_encode(a.v[i], p);
    }
    *p = '\0';
    *out = text;
    *out_len = bytes;
    goto out_free_units;

out_nomem:
    st = bt_fail(BT_ENOMEM, "unicode: NFC of %zu bytes", len);
out_free_units:
    free(a.v);
    return st;
}
