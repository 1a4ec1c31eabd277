/*  test_rng.c — core/rng against splitmix64 written out here from its paper (Steele, Lea, Flood
    2014) and the reference outputs of Vigna's splitmix64.c: the stream, the keyed draws, and the
    draws of the three modules that had their own copy (PBT's choices, the mixture's source draw,
    the arithmetic source's problems), so fixed-seed runs draw the numbers they always drew. */
#include "baton/rng.h"

#include "check.h"

#include <stdio.h>

/*  The reference generator, as the paper gives it. */
static uint64_t s_ref_next(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t s_ref_finalize(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/*  Published outputs of splitmix64 seeded with 1234567. */
static void test_stream_matches_the_reference_outputs(void) {
    const uint64_t want[] = {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                             4593380528125082431ULL, 16408922859458223821ULL};
    uint64_t state = 1234567;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(bt_rng_next(&state) == want[i]);
}

static void test_stream_mix_and_finalize_agree_with_the_formula(void) {
    uint64_t a = 42, b = 42;
    for (int i = 0; i < 1000; i++) {
        uint64_t before = a;
        uint64_t got = bt_rng_next(&a);
        CHECK(got == s_ref_next(&b));
        CHECK(a == b);
        CHECK(bt_rng_mix(before) == got); /* mix(z) is the stream's output after state z */
        CHECK(bt_rng_finalize(before * 0x2545F4914F6CDD1DULL) ==
              s_ref_finalize(before * 0x2545F4914F6CDD1DULL));
    }
}

/*  PBT's draws (run.c): [0, 1) from the stream seeded by run.seed and the step. */
static void test_unit_draws_are_pbts(void) {
    uint64_t a = 7u * 1000003u + 24u, b = a;
    for (int i = 0; i < 1000; i++) {
        double u = bt_rng_unit(bt_rng_next(&a));
        CHECK(u == (double)(s_ref_next(&b) >> 11) * 0x1.0p-53);
        CHECK(u >= 0 && u < 1);
    }
    CHECK(bt_rng_unit(0) == 0);
    CHECK(bt_rng_unit(UINT64_MAX) == 1 - 0x1p-53);
}

/*  The mixture's draw d of a seed: finalize(finalize(seed * golden + c) + d), 53 high bits. */
static void test_mixture_draws(void) {
    uint64_t seed = 5;
    for (uint64_t d = 0; d < 100; d++) {
        uint64_t r =
            bt_rng_finalize(bt_rng_finalize(seed * 0x9E3779B97F4A7C15ull + 0x5bd1e995u) + d);
        uint64_t z = s_ref_finalize(s_ref_finalize(seed * 0x9E3779B97F4A7C15ull + 0x5bd1e995u) + d);
        CHECK(bt_rng_unit(r) == (double)(z >> 11) * 0x1.0p-53);
    }
}

static void test_keyed_uniform_is_open_on_both_ends(void) {
    for (uint64_t k = 0; k < 1000; k++) {
        double u = bt_rng_uniform(bt_rng_key(3, k));
        CHECK(u > 0 && u < 1);
        uint64_t state = bt_rng_key(3, k);
        CHECK(u == ((double)(s_ref_next(&state) >> 11) + 0.5) * 0x1p-53);
    }
    CHECK(bt_rng_key(1, 2) != bt_rng_key(2, 1)); /* a key is ordered */
}

int main(void) {
    test_stream_matches_the_reference_outputs();
    test_stream_mix_and_finalize_agree_with_the_formula();
    test_unit_draws_are_pbts();
    test_mixture_draws();
    test_keyed_uniform_is_open_on_both_ends();
    return check_exit();
}
