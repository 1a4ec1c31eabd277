/*  rng.h — counter-based random numbers: splitmix64 of a key and the counters that name a draw,
    so a draw depends on what it is for (run.seed, purpose, step, item, sample, token), never on
    what was drawn before it or on which worker or shard drew it (DESIGN.md, "Reproducibility").
    Threading: pure functions; any thread.  Lifetime: no state. */
#ifndef BATON_RNG_H
#define BATON_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  splitmix64 (Steele, Lea, Flood 2014): the output for state z. */
uint64_t bt_rng_mix(uint64_t z);
/*  splitmix64's finaliser alone, without the golden-ratio increment: a 64-bit hash of z,
    bt_rng_mix(z) == bt_rng_finalize(z + 0x9e3779b97f4a7c15). */
uint64_t bt_rng_finalize(uint64_t z);
/*  splitmix64 used as a stream: advances *state by the golden-ratio increment and returns the
    output for the new state (bt_rng_mix of the old one).  For a few draws in a row from one key. */
uint64_t bt_rng_next(uint64_t *state);
/*  The key of (key, field): chain it to key a tuple, bt_rng_key(bt_rng_key(seed, step), item). */
uint64_t bt_rng_key(uint64_t key, uint64_t field);
/*  A uniform double in (0, 1), never 0 or 1, from the 53 high bits of bt_rng_mix(key). */
double bt_rng_uniform(uint64_t key);
/*  A uniform double in [0, 1) from the 53 high bits of bits (bt_rng_next's or bt_rng_mix's). */
double bt_rng_unit(uint64_t bits);

#ifdef __cplusplus
}
#endif
#endif
