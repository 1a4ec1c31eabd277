/*  fuzz.h — what the fuzz targets, their replay driver and the tests that replay corpora share: a
    deterministic random generator, one random edit of a byte string, and the layout of a wire
    fuzz input (also the layout of every file in tests/corpus/wire and tests/corpus/wire-valid). */
#ifndef BATON_TESTS_FUZZ_H
#define BATON_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*  xorshift64* from a fixed seed: every run draws the same numbers. */
static inline uint32_t s_rand(void) {
    static uint64_t state = 0x9E3779B97F4A7C15ull;
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (uint32_t)((state * 0x2545F4914F6CDD1Dull) >> 32);
}

/*  One random edit of buf[0..*len), which has room for cap bytes: overwrite, insert, delete,
    truncate or duplicate a span, often with a byte that means something to JSON. */
static inline void s_mutate(char *buf, size_t *len, size_t cap) {
    static const char interesting[] = "{}[]\":,-.0123456789eE\\ntfu\xff\x80";
    size_t at = *len ? s_rand() % *len : 0;
    char c = s_rand() % 2 ? interesting[s_rand() % (sizeof interesting - 1)] : (char)s_rand();
    switch (s_rand() % 5) {
    case 0:
        if (*len)
            buf[at] = c;
        break;
    case 1:
        if (*len + 1 < cap) {
            memmove(buf + at + 1, buf + at, *len - at);
            buf[at] = c;
            (*len)++;
        }
        break;
    case 2:
        if (*len) {
            memmove(buf + at, buf + at + 1, *len - at - 1);
            (*len)--;
        }
        break;
    case 3: *len = at; break;
    default: {
        size_t span = 1 + s_rand() % 16;
        if (at + span <= *len && *len + span < cap) {
            memmove(buf + at + span, buf + at, *len - at);
            (*len) += span;
        }
    }
    }
}

/*  Splits a wire input into the frames of one message after any routing id (frames point into
    data).  A header never holds a NUL byte (the decoder refuses one), so the input splits at the
    first NUL: the bytes before it are the header frame (all of the input when it has none, so a
    bare header is an input as it is).  After the NUL come the tensor frames, each a 2-byte
    little-endian length and then that many bytes (fewer when the input ends first).  Fills at
    most cap frames and returns how many it filled. */
static inline size_t s_wire_split(const uint8_t *data, size_t size, const void **frames,
                                  size_t *sizes, size_t cap) {
    const uint8_t *nul = size ? memchr(data, '\0', size) : NULL;
    size_t n = 0, at = nul ? (size_t)(nul - data) + 1 : size;
    if (cap == 0)
        return 0;
    frames[n] = data;
    sizes[n++] = nul ? (size_t)(nul - data) : size;
    while (n < cap && size - at >= 2) {
        size_t len = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        len = len < size - at ? len : size - at;
        frames[n] = data + at;
        sizes[n++] = len;
        at += len;
    }
    return n;
}

#endif
