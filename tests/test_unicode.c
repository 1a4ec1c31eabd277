/*  test_unicode.c — Unicode properties, UTF-8 and NFC (include/baton/unicode.h), against the
    Unicode Character Database files Debian's unicode-data installs in /usr/share/unicode, read here
    with a parser of the test's own: NormalizationTest.txt.bz2 (through bzcat) for NFC,
    UnicodeData.txt for every code point's General_Category, PropList.txt for White_Space.  Without
    those files (or bzcat), or when they are another Unicode version than the tables, the test
    prints SKIP and why and exits 77 (ctest: skipped, never passed).  BATON_UCD=DIR reads DIR. */
#define _POSIX_C_SOURCE 200809L
#include "baton/unicode.h"

#include "check.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define S_SKIP 77                  /* ctest's SKIP_RETURN_CODE for this test (CMakeLists.txt) */
#define S_UCD "/usr/share/unicode" /* BATON_UCD=DIR reads another copy */
#define S_N_CP 0x110000u
#define S_SHOW 10 /* mismatches printed per kind; the rest are only counted */

static char s_path_buf[4][1024];

/*  DIR/name, DIR being $BATON_UCD or S_UCD.  Borrowed: valid until the fourth call after. */
static const char *s_ucd(const char *name) {
    static int next;
    const char *dir = getenv("BATON_UCD");
    char *buf = s_path_buf[next++ % 4];
    snprintf(buf, sizeof s_path_buf[0], "%s/%s", dir && dir[0] ? dir : S_UCD, name);
    return buf;
}

static int s_skip(const char *why, const char *path) {
    printf("SKIP: %s: %s (Debian: apt-get install unicode-data bzip2)\n", path, why);
    return S_SKIP;
}

/*  Counts a failure and prints the first S_SHOW of each kind (*shown counts them). */
static void s_mismatch(int *shown, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_mismatch(int *shown, const char *fmt, ...) {
    s_check_failures++;
    if ((*shown)++ >= S_SHOW)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/*  "0044 0307" -> its UTF-8 in out (cap >= 4 * code points + 1), NUL-terminated; returns length. */
static size_t s_utf8_of_hex(const char *field, char *out) {
    size_t n = 0;
    for (const char *p = field;;) {
        char *end;
        unsigned long cp = strtoul(p, &end, 16);
        if (end == p)
            break;
        n += bt_utf8_encode((uint32_t)cp, out + n);
        p = end;
    }
    out[n] = '\0';
    return n;
}

static bool s_nfc_is(const char *in, size_t len, const char *want, size_t want_len) {
    char *got = NULL;
    size_t got_len = 0;
    if (bt_uc_nfc(in, len, &got, &got_len) != BT_OK)
        return false;
    bool same = got_len == want_len && memcmp(got, want, want_len) == 0 && got[got_len] == '\0';
    free(got);
    return same;
}

/*  "# NAME-15.0.0.txt" -> "15.0.0" (out[32]); false when the line is not like that. */
static bool s_version_of_line(const char *line, char out[32]) {
    const char *dash = strrchr(line, '-'), *txt = strstr(line, ".txt");
    if (!dash || !txt || txt <= dash + 1 || txt - dash > 31)
        return false;
    memcpy(out, dash + 1, (size_t)(txt - dash - 1));
    out[txt - dash - 1] = '\0';
    return true;
}

/* ---- 1. NFC conformance ------------------------------------------------------------------ */

/*  Every line: NFC(c1) == NFC(c2) == NFC(c3) == c2 and NFC(c4) == NFC(c5) == c4; any column
    bt_uc_nfc_quick() accepts is its own NFC; and every code point Part 1 does not list is its own
    NFC (all of them, not a sample).  Returns S_SKIP when the file cannot be read, else 0. */
static int test_normalization_conformance(void) {
    const char *path = s_ucd("NormalizationTest.txt.bz2");
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return s_skip("cannot open", path);
    fclose(probe);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "bzcat '%s' 2>/dev/null", path);
    FILE *f = popen(cmd, "r");
    if (!f)
        return s_skip("cannot run bzcat", path);

    static bool listed[S_N_CP]; /* in Part 1 */
    static char line[4096], col[5][512];
    size_t col_len[5];
    int part = -1, n_lines = 0, n_quick = 0, shown_nfc = 0, shown_quick = 0;
    char version[32] = "?";
    if (!fgets(line, sizeof line, f)) {
        int status = pclose(f);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
            return s_skip("no bzcat to read it", path);
        fprintf(stderr, "%s: bzcat gave nothing (status %d)\n", path, status);
        s_check_failures++;
        return 0;
    }
    if (!s_version_of_line(line, version) || strcmp(version, bt_uc_version()) != 0) {
        pclose(f);
        printf("SKIP: %s is Unicode %s, the tables are %s: regenerate them (make unicode-data)\n",
               path, version, bt_uc_version());
        return S_SKIP;
    }
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "@Part", 5) == 0) {
            part = atoi(line + 5);
            continue;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char *p = line;
        for (int k = 0; k < 5; k++) {
            char *semi = strchr(p, ';');
            if (!semi) {
                s_mismatch(&shown_nfc, "NormalizationTest: line without 5 columns: %s", line);
                break;
            }
            *semi = '\0';
            col_len[k] = s_utf8_of_hex(p, col[k]);
            p = semi + 1;
        }
        n_lines++;
        if (part == 1) {
            unsigned long cp = strtoul(line, NULL, 16);
            if (cp < S_N_CP)
                listed[cp] = true;
        }
        static const int want_of[5] = {1, 1, 1, 3, 3}; /* NFC(c[k]) == c[want_of[k]] */
        for (int k = 0; k < 5; k++) {
            int w = want_of[k];
            if (!s_nfc_is(col[k], col_len[k], col[w], col_len[w]))
                s_mismatch(&shown_nfc, "NFC(c%d) != c%d on line: %.200s", k + 1, w + 1, line);
            if (bt_uc_nfc_quick(col[k], col_len[k])) {
                n_quick++;
                if (!s_nfc_is(col[k], col_len[k], col[k], col_len[k]))
                    s_mismatch(&shown_quick, "bt_uc_nfc_quick true, NFC differs: c%d of %.200s",
                               k + 1, line);
            }
        }
    }
    CHECK(pclose(f) == 0);
    CHECK(n_lines > 19000); /* 15.0.0 has 19,074: the whole file was read */
    CHECK(n_quick > 10000); /* the quick check accepts most NFC text */

    /*  Part 1: a code point it does not list is its own NFC. */
    int n_invariant = 0, shown_inv = 0;
    for (uint32_t cp = 0; cp < S_N_CP; cp++) {
        if (listed[cp] || (cp >= 0xD800 && cp <= 0xDFFF))
            continue;
        char s[4];
        size_t n = bt_utf8_encode(cp, s);
        if (!s_nfc_is(s, n, s, n))
            s_mismatch(&shown_inv, "U+%04X is not in Part 1 but NFC changes it", cp);
        n_invariant++;
    }
    CHECK(n_invariant > 1000000);
    printf("NormalizationTest %s: %d lines x 5 columns (%d quick), %d unlisted code points\n",
           version, n_lines, n_quick, n_invariant);
    return 0;
}

/* ---- 2. Properties ----------------------------------------------------------------------- */

/*  bt_uc_category_of() for every code point against UnicodeData.txt, parsed here ("<..., First>"
    and "<..., Last>" lines bound a range; absent code points are Cn). */
static int test_categories(void) {
    static const char names[][3] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                    "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                    "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
    const int n_names = (int)(sizeof names / sizeof names[0]);
    const char *path = s_ucd("UnicodeData.txt");
    FILE *f = fopen(path, "r");
    if (!f)
        return s_skip("cannot open", path);
    static uint8_t want[S_N_CP]; /* index into names; 0 (Cn) when not listed */
    static char line[1024];
    unsigned long first = 0;
    int n_lines = 0, shown = 0;
    while (fgets(line, sizeof line, f)) {
        n_lines++;
        char *f1 = strchr(line, ';'), *f2 = f1 ? strchr(f1 + 1, ';') : NULL;
        if (!f2) {
            s_mismatch(&shown, "%s:%d: not a UnicodeData line", path, n_lines);
            continue;
        }
        unsigned long cp = strtoul(line, NULL, 16);
        int cat = -1;
        for (int i = 0; i < n_names; i++)
            if (strncmp(f2 + 1, names[i], 2) == 0 && f2[3] == ';')
                cat = i;
        if (cp >= S_N_CP || cat < 0) {
            s_mismatch(&shown, "%s:%d: bad code point or category", path, n_lines);
            continue;
        }
        if (strstr(line, ", First>;")) {
            first = cp;
            continue;
        }
        if (!strstr(line, ", Last>;"))
            first = cp;
        for (unsigned long c = first; c <= cp; c++)
            want[c] = (uint8_t)cat;
    }
    fclose(f);
    CHECK(n_lines > 30000);

    int n_assigned = 0;
    for (uint32_t cp = 0; cp < S_N_CP; cp++) {
        bt_uc_category got = bt_uc_category_of(cp);
        n_assigned += want[cp] != 0;
        if ((int)got != want[cp])
            s_mismatch(&shown, "U+%04X: category %d, UnicodeData.txt says %s", cp, (int)got,
                       names[want[cp]]);
    }
    /*  15.0.0: 149,186 characters, 65 controls, 2,048 surrogates, 137,468 private use. */
    CHECK(n_assigned == 288767);
    CHECK(bt_uc_category_of(0x110000) == BT_UC_CN);
    CHECK(bt_uc_category_of(UINT32_MAX) == BT_UC_CN);
    CHECK(bt_uc_category_of('A') == BT_UC_LU && bt_uc_category_of(0x4E00) == BT_UC_LO);
    CHECK(bt_uc_category_of(0xFFFF) == BT_UC_CN);   /* a noncharacter */
    CHECK(bt_uc_category_of(0x10FFFD) == BT_UC_CO); /* plane 16 private use, a range's end */
    CHECK(bt_uc_category_of(0xD800) == BT_UC_CS);

    /*  The major class is the first letter of the category's name. */
    for (int i = 0; i < n_names; i++)
        CHECK(bt_uc_major((bt_uc_category)i) == names[i][0]);
    return 0;
}

/*  bt_uc_is_white_space() for every code point against PropList.txt's White_Space lines. */
static int test_white_space(void) {
    const char *path = s_ucd("PropList.txt");
    FILE *f = fopen(path, "r");
    if (!f)
        return s_skip("cannot open", path);
    static bool want[S_N_CP];
    static char line[1024];
    int n_ranges = 0, shown = 0;
    while (fgets(line, sizeof line, f)) {
        char *semi = strchr(line, ';');
        if (line[0] == '#' || !semi || strncmp(semi, "; White_Space ", 14) != 0)
            continue;
        char *end;
        unsigned long lo = strtoul(line, &end, 16), hi = lo;
        if (strncmp(end, "..", 2) == 0)
            hi = strtoul(end + 2, NULL, 16);
        for (unsigned long c = lo; c <= hi && c < S_N_CP; c++)
            want[c] = true;
        n_ranges++;
    }
    fclose(f);
    CHECK(n_ranges >= 10);
    int n_white = 0;
    for (uint32_t cp = 0; cp < S_N_CP; cp++) {
        n_white += want[cp];
        if (bt_uc_is_white_space(cp) != want[cp])
            s_mismatch(&shown, "U+%04X: White_Space %d, PropList.txt says %d", cp,
                       bt_uc_is_white_space(cp), want[cp]);
    }
    CHECK(n_white == 25);
    CHECK(!bt_uc_is_white_space(0x110000) && !bt_uc_is_white_space(UINT32_MAX));
    CHECK(bt_uc_is_white_space(' ') && bt_uc_is_white_space(0x3000));
    CHECK(!bt_uc_is_white_space(0x200B)); /* zero width space is Cf, not White_Space */
    return 0;
}

/* ---- 3. UTF-8 ---------------------------------------------------------------------------- */

static void test_utf8_round_trip(void) {
    int shown = 0;
    for (uint32_t cp = 0; cp < S_N_CP; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        char buf[4];
        size_t n = bt_utf8_encode(cp, buf);
        size_t want_n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        uint32_t back = 0;
        bool valid = false;
        size_t used = bt_utf8_decode(buf, n, &back, &valid);
        if (n != want_n || used != n || back != cp || !valid)
            s_mismatch(&shown, "U+%04X: %zu bytes, decoded %zu bytes to U+%04X (valid %d)", cp, n,
                       used, back, valid);
    }
    char buf[4];
    CHECK(bt_utf8_encode(0x20AC, buf) == 3 && memcmp(buf, "\xE2\x82\xAC", 3) == 0);
    CHECK(bt_utf8_encode(0x10348, buf) == 4 && memcmp(buf, "\xF0\x90\x8D\x88", 4) == 0);
    CHECK(bt_utf8_encode(0x10FFFF, buf) == 4 && memcmp(buf, "\xF4\x8F\xBF\xBF", 4) == 0);
    /*  No UTF-8 for a surrogate or beyond U+10FFFF: U+FFFD instead. */
    CHECK(bt_utf8_encode(0xD800, buf) == 3 && memcmp(buf, "\xEF\xBF\xBD", 3) == 0);
    CHECK(bt_utf8_encode(0x110000, buf) == 3 && memcmp(buf, "\xEF\xBF\xBD", 3) == 0);
}

/*  Every 3-byte buffer: a valid decode is the encoding of the scalar it returns, an invalid one
    consumed 1 byte and gave U+FFFD, and the valid ones are exactly as many as the 1-, 2- and
    3-byte encodings that fit at the buffer's start, so nothing well-formed is refused. */
static void test_utf8_all_short_sequences(void) {
    long n_valid = 0;
    int shown = 0;
    for (uint32_t x = 0; x < (1u << 24); x++) {
        char b[3] = {(char)(x >> 16), (char)(x >> 8), (char)x}, enc[4];
        uint32_t cp = 0;
        bool valid = true;
        size_t n = bt_utf8_decode(b, 3, &cp, &valid);
        if (valid) {
            n_valid++;
            bool scalar = cp < 0xD800 || (cp > 0xDFFF && cp < S_N_CP);
            if (!scalar || bt_utf8_encode(cp, enc) != n || memcmp(enc, b, n) != 0)
                s_mismatch(&shown, "%06X: valid U+%04X in %zu bytes", x, cp, n);
        } else if (n != 1 || cp != 0xFFFD) {
            s_mismatch(&shown, "%06X: invalid but %zu bytes, U+%04X", x, n, cp);
        }
    }
    /*  1-byte: 128 * 65536 buffers; 2-byte: 1920 code points * 256; 3-byte: 61440 (no
        surrogates). */
    CHECK(n_valid == 128L * 65536 + 1920L * 256 + 61440);
}

static void test_utf8_invalid(void) {
    static const struct {
        const char *s;
        size_t len;
    } bad[] = {
        {"\xC0\x80", 2},         /* overlong NUL */
        {"\xC1\xBF", 2},         /* overlong */
        {"\xE0\x80\x80", 3},     /* overlong */
        {"\xF0\x80\x80\x80", 4}, /* overlong */
        {"\xED\xA0\x80", 3},     /* surrogate D800 */
        {"\xED\xBF\xBF", 3},     /* surrogate DFFF */
        {"\xE2\x82", 2},         /* truncated */
        {"\xE2\x82\x41", 3},     /* not a continuation */
        {"\xF0\x9F\x98", 3},     /* truncated emoji */
        {"\x80", 1},             /* lone continuation */
        {"\xBF\x80", 2},         /* lone continuations */
        {"\xF4\x90\x80\x80", 4}, /* above U+10FFFF */
        {"\xF5\x80\x80\x80", 4}, /* F5.. never appear */
        {"\xFF", 1},             /* never appears */
        {"\xC3", 1},             /* len cuts it short */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t cp = 0;
        bool valid = true;
        size_t n = bt_utf8_decode(bad[i].s, bad[i].len, &cp, &valid);
        if (n != 1 || valid || cp != 0xFFFD) {
            fprintf(stderr, "bad[%zu]: %zu bytes, U+%04X, valid %d\n", i, n, cp, valid);
            s_check_failures++;
        }
    }
    /*  valid may be NULL. */
    uint32_t cp = 0;
    CHECK(bt_utf8_decode("\xC3\xA9", 2, &cp, NULL) == 2 && cp == 0xE9);
    CHECK(bt_utf8_decode("\x80", 1, &cp, NULL) == 1 && cp == 0xFFFD);
}

/* ---- 4. NFC by hand ---------------------------------------------------------------------- */

static void s_check_nfc(const char *in, size_t len, const char *want, size_t want_len, int line) {
    char *got = NULL;
    size_t got_len = 99;
    bt_status st = bt_uc_nfc(in, len, &got, &got_len);
    if (st != BT_OK || got_len != want_len || memcmp(got, want, want_len) != 0 ||
        got[got_len] != '\0') {
        fprintf(stderr, "%s:%d: NFC of %zu bytes: status %d, %zu bytes:", __FILE__, line, len, st,
                got_len);
        for (size_t i = 0; st == BT_OK && i < got_len; i++)
            fprintf(stderr, " %02X", (unsigned char)got[i]);
        fputc('\n', stderr);
        s_check_failures++;
    }
    free(got);
}
#define CHECK_NFC(in, want) s_check_nfc(in, sizeof in - 1, want, sizeof want - 1, __LINE__)

static void test_nfc_by_hand(void) {
    CHECK_NFC("e\xCC\x81", "\xC3\xA9");                                /* e U+0301 -> U+00E9 */
    CHECK_NFC("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"); /* 1100 1161 11A8 -> AC01 */
    CHECK_NFC("\xE1\x84\x80\xE1\x85\xA1", "\xEA\xB0\x80");             /* 1100 1161 -> AC00 */
    CHECK_NFC("\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81");             /* AC00 11A8 -> AC01 */
    CHECK_NFC("\xE2\x84\xAB", "\xC3\x85");                             /* Angstrom -> U+00C5 */
    /*  Marks reorder by class: U+0316 (220) before U+0301 (230), which then still reaches the
        a (a class 220 mark between does not block a class 230 one). */
    CHECK_NFC("a\xCC\x81\xCC\x96", "\xC3\xA1\xCC\x96");
    CHECK_NFC("q\xCC\x87\xCC\xA3", "q\xCC\xA3\xCC\x87"); /* q U+0307 U+0323: no composite */
    /*  A mark of the same class blocks: in a U+0305 U+0301 (both 230) the U+0301 cannot reach the
        a, though a U+0301 alone composes. */
    CHECK_NFC("a\xCC\x85\xCC\x81", "a\xCC\x85\xCC\x81");
    /*  A composition exclusion stays decomposed: U+0958 -> U+0915 U+093C. */
    CHECK_NFC("\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC");
    CHECK_NFC("", "");
    CHECK_NFC("a\0b", "a\0b");

    /*  Invalid bytes pass through and block: e FF U+0301 is left alone, so is a leading mark. */
    CHECK_NFC("e\xFF\xCC\x81", "e\xFF\xCC\x81");
    CHECK_NFC("\xCC\x81", "\xCC\x81");
    CHECK_NFC("e\xE2\x82\xCC\x81", "e\xE2\x82\xCC\x81");
    CHECK_NFC("\xC3\xA9\x80\xE2\x84\xAB\xC0", "\xC3\xA9\x80\xC3\x85\xC0");

    /*  A long run of marks (45, sorted another way than short ones) keeps equal classes in order:
        a (U+0301 U+0316 U+0300) x 15 -> U+00E1, U+0316 x 15, then U+0300 U+0301 ... U+0300. */
    char in[1 + 45 * 2], want[2 + 44 * 2];
    size_t n_in = 0, n_want = 0;
    in[n_in++] = 'a';
    memcpy(want, "\xC3\xA1", 2), n_want = 2;
    for (int i = 0; i < 15; i++) {
        memcpy(in + n_in, "\xCC\x81\xCC\x96\xCC\x80", 6);
        n_in += 6;
        memcpy(want + n_want, "\xCC\x96", 2);
        n_want += 2;
    }
    for (int i = 1; i < 30; i++) {
        memcpy(want + n_want, i % 2 ? "\xCC\x80" : "\xCC\x81", 2);
        n_want += 2;
    }
    s_check_nfc(in, n_in, want, n_want, __LINE__);
}

static void test_nfc_quick(void) {
    CHECK(bt_uc_nfc_quick("", 0));
    CHECK(bt_uc_nfc_quick("hello, world", 12));
    CHECK(bt_uc_nfc_quick("caf\xC3\xA9", 5));
    CHECK(bt_uc_nfc_quick("\xEA\xB0\x81\xFF\x80", 5));      /* invalid bytes are starters */
    CHECK(!bt_uc_nfc_quick("cafe\xCC\x81", 6));             /* U+0301 is NFC_QC=Maybe */
    CHECK(!bt_uc_nfc_quick("\xE2\x84\xAB", 3));             /* U+212B is NFC_QC=No */
    CHECK(!bt_uc_nfc_quick("\xEA\xB0\x80\xE1\x86\xA8", 6)); /* U+11A8 composes: Maybe */
    /*  Every code point below U+0300 passes (what makes "all bytes < 0xCC" enough). */
    for (uint32_t cp = 0; cp < 0x300; cp++) {
        char s[4];
        size_t n = bt_utf8_encode(cp, s);
        CHECK(bt_uc_nfc_quick(s, n));
    }
}

/*  Fixed-seed random texts of marks, jamo, composed letters and invalid bytes: NFC is idempotent,
    and the invalid bytes come out unchanged and in order (what a byte-level tokenizer relies on).
 */
static void test_nfc_random(void) {
    static const uint32_t pool[] = {'a',    'e',    'A',    ' ',    0x00E9, 0x00C5, 0x0300,
                                    0x0301, 0x0316, 0x0323, 0x0345, 0x0338, 0x05B0, 0x0F73,
                                    0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x1E0A, 0x1F82,
                                    0x212B, 0x0958, 0x2ADC, 0x3099, 0x304B, 0x1D15E};
    const size_t n_pool = sizeof pool / sizeof pool[0];
    uint32_t x = 12345;
    int shown = 0;
    for (int iter = 0; iter < 20000; iter++) {
        char in[256], raw_in[64], raw_out[64];
        size_t n = 0, n_raw_in = 0, n_raw_out = 0;
        for (int k = 0; k < 24; k++) {
            x = x * 1103515245u + 12345u; /* an LCG is enough to spread the cases */
            uint32_t r = x >> 8;
            if (r % 8 == 0)
                in[n++] = (char)(0x80 | (r >> 4 & 0x7F)); /* 80..FF */
            else
                n += bt_utf8_encode(pool[(r >> 4) % n_pool], in + n);
        }
        /*  What the decoder calls invalid, in order, before and after NFC. */
        for (size_t p = 0; p < n;) {
            uint32_t cp;
            bool valid;
            size_t used = bt_utf8_decode(in + p, n - p, &cp, &valid);
            if (!valid && n_raw_in < 64)
                raw_in[n_raw_in++] = in[p];
            p += used;
        }
        char *once = NULL, *twice = NULL;
        size_t n_once = 0, n_twice = 0;
        CHECK_OK(bt_uc_nfc(in, n, &once, &n_once));
        CHECK_OK(bt_uc_nfc(once, n_once, &twice, &n_twice));
        if (!once || !twice || n_once != n_twice || memcmp(once, twice, n_once) != 0)
            s_mismatch(&shown, "random text %d: NFC is not idempotent", iter);
        for (size_t p = 0; once && p < n_once;) {
            uint32_t cp;
            bool valid;
            size_t used = bt_utf8_decode(once + p, n_once - p, &cp, &valid);
            if (!valid && n_raw_out < 64)
                raw_out[n_raw_out++] = once[p];
            p += used;
        }
        if (n_raw_out != n_raw_in || memcmp(raw_out, raw_in, n_raw_in) != 0)
            s_mismatch(&shown, "random text %d: invalid bytes changed", iter);
        free(once);
        free(twice);
    }
}

/*  10,000 lines of mixed text through NFC, to see the cost (printed; not a pass condition). */
static void test_nfc_speed(void) {
    static const char *const lines[] = {
        "The quick brown fox jumps over the lazy dog 12345.",
        "Cafe\xCC\x81 cre\xCC\x80me bru\xCC\x82le\xCC\x81"
        "e, \xC3\xA0 la carte, na\xC3\xAFve.",
        "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB text",
        "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3"
        "\x83\x88 \xF0\x9F\x98\x80 emoji"};
    double t0 = bt_now();
    size_t bytes = 0;
    for (int i = 0; i < 10000; i++) {
        const char *s = lines[i % 4];
        char *out = NULL;
        size_t len = 0;
        CHECK_OK(bt_uc_nfc(s, strlen(s), &out, &len));
        bytes += len;
        free(out);
    }
    printf("NFC of 10,000 lines (%zu bytes out): %.1f ms\n", bytes, (bt_now() - t0) * 1e3);
}

int main(void) {
    double t0 = bt_now();
    int skip = test_normalization_conformance();
    if (skip == 0)
        skip = test_categories();
    if (skip == 0)
        skip = test_white_space();
    test_utf8_round_trip();
    test_utf8_all_short_sequences();
    test_utf8_invalid();
    test_nfc_by_hand();
    test_nfc_quick();
    test_nfc_random();
    test_nfc_speed();
    printf("test_unicode: %.2f s\n", bt_now() - t0);
    if (skip && s_check_failures == 0)
        return skip;
    return check_exit();
}
