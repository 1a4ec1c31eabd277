/*  rng.c — splitmix64 used counter-based: a draw is a function of its key alone. */
#include "baton/rng.h"

#define S_GOLDEN 0x9e3779b97f4a7c15ULL

uint64_t bt_rng_finalize(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t bt_rng_mix(uint64_t z) {
    return bt_rng_finalize(z + S_GOLDEN);
}

uint64_t bt_rng_next(uint64_t *state) {
    return bt_rng_finalize(*state += S_GOLDEN);
}

uint64_t bt_rng_key(uint64_t key, uint64_t field) {
    return bt_rng_mix(bt_rng_mix(key) ^ field);
}

double bt_rng_uniform(uint64_t key) {
    return ((double)(bt_rng_mix(key) >> 11) + 0.5) * 0x1p-53; /* (k + 1/2) / 2^53, k < 2^53 */
}

double bt_rng_unit(uint64_t bits) {
    return (double)(bits >> 11) * 0x1p-53; /* k / 2^53, k < 2^53 */
}
