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
/*  The key of (key, field): chain it to key a tuple, bt_rng_key(bt_rng_key(seed, step), item). */
uint64_t bt_rng_key(uint64_t key, uint64_t field);
/*  A uniform double in (0, 1), never 0 or 1, from the 53 high bits of bt_rng_mix(key). */
double bt_rng_uniform(uint64_t key);

#ifdef __cplusplus
}
#endif
#endif
