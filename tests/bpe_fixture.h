/*  bpe_fixture.h — writing small byte-level BPE tokenizer.json files in tests: GPT-2's
    byte-to-character table, written out independently of text/tokenizer.c, and the JSON
    spelling of a vocabulary key. */
#ifndef BATON_TESTS_BPE_FIXTURE_H
#define BATON_TESTS_BPE_FIXTURE_H

#include <stdint.h>
#include <stdio.h>

/*  The character GPT-2's byte-level BPE writes for byte b. */
static inline uint32_t bpe_fixture_byte_char(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
        return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
            k++;
    return 256u + (uint32_t)k;
}

/*  A JSON string literal of the byte-level characters for bytes s[0 .. len), as \u escapes. */
static inline void bpe_fixture_key(char *out, size_t cap, const char *s, size_t len) {
    size_t w = 0;
    out[w++] = '"';
    for (size_t i = 0; i < len && w + 8 < cap; i++)
        w += (size_t)snprintf(out + w, cap - w, "\\u%04x",
                              bpe_fixture_byte_char((unsigned char)s[i]));
    out[w++] = '"';
    out[w] = '\0';
}

/*  Appends `"KEY": 0, ... "KEY": 255` (every byte is its own id) to out at *w. */
static inline void bpe_fixture_byte_vocab(char *out, size_t cap, size_t *w) {
    char key[16];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        bpe_fixture_key(key, sizeof key, &c, 1);
        *w += (size_t)snprintf(out + *w, cap - *w, "%s%s: %d", b ? ", " : "", key, b);
    }
}

#endif
