/*  gen_unicode.c — writes text/unicode_data.c, the tables text/unicode.c looks up, from the
    Unicode Character Database text files (Debian's unicode-data installs them in
   /usr/share/unicode). A build tool, not part of the library: run by `make unicode-data`; prints
   its errors and exits.

    usage: gen_unicode UCD_DIR OUT.c
    Reads UCD_DIR/UnicodeData.txt (General_Category, Canonical_Combining_Class, decompositions),
    UCD_DIR/PropList.txt (White_Space) and UCD_DIR/DerivedNormalizationProps.txt
    (Full_Composition_Exclusion, NFC_Quick_Check).  Writes OUT.c.tmp, then renames it to OUT.c. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_N_CP 0x110000u
#define S_LINE_MAX 4096
#define S_MAX_COMPS 8192 /* Unicode 15 has 941 */

/*  In bt_uc_category order (include/baton/unicode.h). */
static const char *const s_category_names[] = {
    "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
    "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
#define S_N_CATEGORIES (sizeof s_category_names / sizeof s_category_names[0])

enum { S_QC_YES = 0, S_QC_NO = 1, S_QC_MAYBE = 2 };

/*  Per code point, (0x110000) each. */
static uint8_t s_category[S_N_CP];
static uint8_t s_ccc[S_N_CP];
static uint8_t s_white_space[S_N_CP];
static uint8_t s_nfc_qc[S_N_CP];
static uint8_t s_full_excl[S_N_CP];
static uint32_t s_decomp[S_N_CP][2]; /* canonical mapping, one level; [1] is 0 for a singleton */
static uint8_t s_decomp_len[S_N_CP]; /* 0: none (or a compatibility mapping) */

static const char *s_ucd_dir;

static void s_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("gen_unicode: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static FILE *s_open(const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", s_ucd_dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        s_die("%s: cannot open (Debian: apt-get install unicode-data)", path);
    return f;
}

static char *s_trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static uint32_t s_hex(const char *s, const char *path, int line) {
    char *end;
    unsigned long v = strtoul(s, &end, 16);
    if (end == s || v >= S_N_CP)
        s_die("%s:%d: bad code point '%s'", path, line, s);
    return (uint32_t)v;
}

/*  "15.0.0" from a first line "# NAME-15.0.0.txt" into out[cap]. */
static void s_read_version(FILE *f, const char *path, char *out, size_t cap) {
    char line[S_LINE_MAX];
    if (!fgets(line, sizeof line, f))
        s_die("%s: empty", path);
    const char *dash = strrchr(line, '-'), *dot_txt = strstr(line, ".txt");
    if (!dash || !dot_txt || dot_txt <= dash + 1 || (size_t)(dot_txt - dash) > cap)
        s_die("%s: first line has no version (expected '# NAME-X.Y.Z.txt')", path);
    memcpy(out, dash + 1, (size_t)(dot_txt - dash - 1));
    out[dot_txt - dash - 1] = '\0';
}

static void s_read_unicode_data(void) {
    char path[1024], line[S_LINE_MAX];
    FILE *f = s_open("UnicodeData.txt", path, sizeof path);
    int lineno = 0;
    long range_first = -1; /* the code point of a pending "<..., First>" line */
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *field[15];
        int n = 0;
        for (char *p = line, *semi; n < 15; p = semi + 1) {
            field[n++] = p;
            if (!(semi = strchr(p, ';')))
                break;
            *semi = '\0';
        }
        if (n < 6)
            s_die("%s:%d: expected 15 fields", path, lineno);
        uint32_t cp = s_hex(field[0], path, lineno);
        int cat = -1;
        for (size_t i = 0; i < S_N_CATEGORIES; i++)
            if (strcmp(field[2], s_category_names[i]) == 0)
                cat = (int)i;
        if (cat < 0)
            s_die("%s:%d: unknown category '%s'", path, lineno, field[2]);
        int ccc = atoi(field[3]);
        if (ccc < 0 || ccc > 254)
            s_die("%s:%d: bad combining class '%s'", path, lineno, field[3]);

        uint32_t first = cp;
        if (strstr(field[1], ", First>")) {
            range_first = cp;
            continue;
        }
        if (strstr(field[1], ", Last>")) {
            if (range_first < 0)
                s_die("%s:%d: '<..., Last>' without its First", path, lineno);
            first = (uint32_t)range_first;
        }
        range_first = -1;
        for (uint32_t c = first; c <= cp; c++) {
            s_category[c] = (uint8_t)cat;
            s_ccc[c] = (uint8_t)ccc;
        }

        char *d = s_trim(field[5]);
        if (d[0] == '\0' || d[0] == '<') /* none, or a compatibility mapping */
            continue;
        int k = 0;
        for (char *tok = strtok(d, " "); tok; tok = strtok(NULL, " ")) {
            if (k == 2)
                s_die("%s:%d: canonical mapping longer than 2", path, lineno);
            s_decomp[cp][k++] = s_hex(tok, path, lineno);
        }
        s_decomp_len[cp] = (uint8_t)k;
    }
    fclose(f);
    if (range_first >= 0)
        s_die("%s: '<..., First>' at the end without its Last", path);
}

/*  Calls on(first, last, value) for every "X[..Y] ; NAME [; VALUE]" line whose NAME is name;
    returns the file's version into version[cap]. */
static void s_read_property(const char *file, const char *name, char *version, size_t cap,
                            void (*on)(uint32_t, uint32_t, const char *)) {
    char path[1024], line[S_LINE_MAX];
    FILE *f = s_open(file, path, sizeof path);
    s_read_version(f, path, version, cap);
    int lineno = 1;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *field[3] = {NULL, NULL, NULL};
        int n = 0;
        for (char *p = line, *semi; n < 3; p = semi + 1) {
            field[n++] = p;
            if (!(semi = strchr(p, ';')))
                break;
            *semi = '\0';
        }
        if (n < 2 || strcmp(s_trim(field[1]), name) != 0)
            continue;
        char *range = s_trim(field[0]), *dots = strstr(range, "..");
        uint32_t first = s_hex(range, path, lineno);
        uint32_t last = dots ? s_hex(dots + 2, path, lineno) : first;
        if (last < first)
            s_die("%s:%d: empty range", path, lineno);
        on(first, last, n == 3 ? s_trim(field[2]) : "");
    }
    fclose(f);
}

static void s_on_white_space(uint32_t first, uint32_t last, const char *value) {
    for (uint32_t c = first; c <= last; c++)
        s_white_space[c] = 1;
}

static void s_on_full_excl(uint32_t first, uint32_t last, const char *value) {
    for (uint32_t c = first; c <= last; c++)
        s_full_excl[c] = 1;
}

static void s_on_nfc_qc(uint32_t first, uint32_t last, const char *value) {
    uint8_t qc = strcmp(value, "N") == 0 ? S_QC_NO : strcmp(value, "M") == 0 ? S_QC_MAYBE : 0xFF;
    if (qc == 0xFF)
        s_die("DerivedNormalizationProps.txt: NFC_QC value '%s' (expected N or M)", value);
    for (uint32_t c = first; c <= last; c++)
        s_nfc_qc[c] = qc;
}

/*  Output, with a byte count for the summary. */
static FILE *s_out;
static size_t s_bytes;

static void s_newline_every(size_t i, size_t per_line, size_t n) {
    fputs(i + 1 == n ? ",\n" : (i + 1) % per_line == 0 ? ",\n    " : ", ", s_out);
}

/*  A range table: one R(start, value) where the value changes, from 0 to 0x10FFFF. */
static size_t s_write_ranges(const char *name, const char *what, const uint8_t *value,
                             bool as_category) {
    size_t n = 0;
    for (uint32_t c = 0; c < S_N_CP; c++)
        n += c == 0 || value[c] != value[c - 1];
    fprintf(s_out, "\n/*  %s: %zu ranges. */\nconst uint32_t %s[] = {\n    ", what, n, name);
    size_t i = 0;
    for (uint32_t c = 0; c < S_N_CP; c++) {
        if (c != 0 && value[c] == value[c - 1])
            continue;
        if (as_category)
            fprintf(s_out, "C(0x%05X, %c%c)", c, toupper(s_category_names[value[c]][0]),
                    toupper(s_category_names[value[c]][1]));
        else
            fprintf(s_out, "R(0x%05X, %3d)", c, value[c]);
        s_newline_every(i++, 5, n);
    }
    fprintf(s_out, "};\nconst size_t %s_n = %zu;\n", name, n);
    s_bytes += n * sizeof(uint32_t);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fputs("usage: gen_unicode UCD_DIR OUT.c   (UCD_DIR: e.g. /usr/share/unicode)\n", stderr);
        return 2;
    }
    s_ucd_dir = argv[1];
    char version[32], other[32];
    s_read_unicode_data();
    s_read_property("PropList.txt", "White_Space", other, sizeof other, s_on_white_space);
    s_read_property("DerivedNormalizationProps.txt", "Full_Composition_Exclusion", version,
                    sizeof version, s_on_full_excl);
    s_read_property("DerivedNormalizationProps.txt", "NFC_QC", version, sizeof version,
                    s_on_nfc_qc);
    if (strcmp(version, other) != 0)
        s_die("PropList.txt is Unicode %s but DerivedNormalizationProps.txt is %s", other, version);

    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    if (!(s_out = fopen(tmp, "w")))
        s_die("%s: cannot write", tmp);
    fprintf(s_out,
            "/*  unicode_data.c — Unicode %s character tables for text/unicode.c.\n"
            "    GENERATED by tools/gen_unicode.c from the Unicode Character Database %s\n"
            "    (UnicodeData.txt, PropList.txt, DerivedNormalizationProps.txt; Debian's "
            "unicode-data).\n"
            "    Do not edit: regenerate with `make unicode-data` (clang-format leaves it as "
            "written). */\n"
            "#include \"unicode_data.h\"\n\n"
            "/* clang-format off */\n\n"
            "const char bt_ucd_version[] = \"%s\";\n\n"
            "#define R(start, value) ((uint32_t)(start) << 8 | (uint32_t)(value))\n"
            "#define C(start, cat) R(start, BT_UC_##cat)\n",
            version, version, version);

    size_t n_cat = s_write_ranges("bt_ucd_category", "General_Category", s_category, true);
    size_t n_ccc =
        s_write_ranges("bt_ucd_ccc", "Canonical_Combining_Class (0: starter)", s_ccc, false);
    size_t n_ws =
        s_write_ranges("bt_ucd_white_space", "White_Space (1: yes)", s_white_space, false);
    size_t n_qc = s_write_ranges("bt_ucd_nfc_qc", "NFC_Quick_Check (0: Yes, 1: No, 2: Maybe)",
                                 s_nfc_qc, false);

    size_t n_decomp = 0;
    for (uint32_t c = 0; c < S_N_CP; c++)
        n_decomp += s_decomp_len[c] != 0;
    fprintf(s_out,
            "\n/*  Canonical decomposition mappings, one level (UnicodeData.txt field 5 without a "
            "<tag>),\n    sorted by code point; second is 0 for a singleton: %zu. */\n"
            "const bt_ucd_decomp bt_ucd_decomps[] = {\n    ",
            n_decomp);
    size_t i = 0;
    for (uint32_t c = 0; c < S_N_CP; c++) {
        if (!s_decomp_len[c])
            continue;
        fprintf(s_out, "{0x%05X, 0x%05X, 0x%05X}", c, s_decomp[c][0], s_decomp[c][1]);
        s_newline_every(i++, 3, n_decomp);
    }
    fprintf(s_out, "};\nconst size_t bt_ucd_decomps_n = %zu;\n", n_decomp);
    s_bytes += n_decomp * 3 * sizeof(uint32_t);

    /*  Primary composites: two-code-point canonical mappings not Full_Composition_Exclusion,
        sorted by (first, second) for a binary search. */
    size_t n_comp = 0;
    static uint32_t comp[S_MAX_COMPS][3];
    for (uint32_t c = 0; c < S_N_CP; c++) {
        if (s_decomp_len[c] == 2 && !s_full_excl[c]) {
            if (n_comp == S_MAX_COMPS)
                s_die("more than %d primary composites", S_MAX_COMPS);
            comp[n_comp][0] = s_decomp[c][0];
            comp[n_comp][1] = s_decomp[c][1];
            comp[n_comp][2] = c;
            n_comp++;
        }
    }
    for (size_t a = 1; a < n_comp; a++) { /* insertion sort: a thousand entries, once */
        uint32_t key[3] = {comp[a][0], comp[a][1], comp[a][2]};
        size_t b = a;
        while (b > 0 &&
               (comp[b - 1][0] > key[0] || (comp[b - 1][0] == key[0] && comp[b - 1][1] > key[1]))) {
            memcpy(comp[b], comp[b - 1], sizeof comp[b]);
            b--;
        }
        memcpy(comp[b], key, sizeof key);
    }
    for (size_t a = 1; a < n_comp; a++)
        if (comp[a][0] == comp[a - 1][0] && comp[a][1] == comp[a - 1][1])
            s_die("two primary composites of %04X %04X", comp[a][0], comp[a][1]);
    fprintf(s_out,
            "\n/*  Canonical composition: the two-code-point mappings above whose code point is "
            "not\n    Full_Composition_Exclusion, sorted by (first, second): %zu. */\n"
            "const bt_ucd_comp bt_ucd_comps[] = {\n    ",
            n_comp);
    for (i = 0; i < n_comp; i++) {
        fprintf(s_out, "{0x%05X, 0x%05X, 0x%05X}", comp[i][0], comp[i][1], comp[i][2]);
        s_newline_every(i, 3, n_comp);
    }
    fprintf(s_out, "};\nconst size_t bt_ucd_comps_n = %zu;\n", n_comp);
    s_bytes += n_comp * 3 * sizeof(uint32_t);

    fputs("\n/* clang-format on */\n", s_out);
    if (fclose(s_out) != 0 || rename(tmp, argv[2]) != 0)
        s_die("%s: cannot write", argv[2]);
    fprintf(stderr,
            "gen_unicode: Unicode %s -> %s: %zu category, %zu ccc, %zu white-space, %zu NFC_QC "
            "ranges, %zu decompositions, %zu compositions (%zu bytes of tables)\n",
            version, argv[2], n_cat, n_ccc, n_ws, n_qc, n_decomp, n_comp, s_bytes);
    return 0;
}
