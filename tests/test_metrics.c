/*  test_metrics.c — evaluation metrics against independent computations: pass@k against the closed
    form with exact binomials and against enumerating every k-subset of the samples, the published
    example and edge cases; maj@k; histogram quantiles against sorting the values; mean, std and
    standard errors against a direct two-pass computation. */
#include "baton/metrics.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>

/*  C(n, k) exactly in double for the small n used here. */
static double s_choose(int64_t n, int64_t k) {
    if (k < 0 || k > n)
        return 0;
    double r = 1;
    for (int64_t i = 1; i <= k; i++)
        r = r * (double)(n - k + i) / (double)i;
    return r;
}

/*  A deterministic uniform double in [0, 1) (splitmix64). */
static double s_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static int s_cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/*  Mean and sample std of x[0, n) by two passes: the mean, then squared deviations from it. */
static void s_two_pass(const double *x, int64_t n, double *mean, double *std) {
    double sum = 0.0, ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    *mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += (x[i] - *mean) * (x[i] - *mean);
    *std = n > 1 ? sqrt(ss / (double)(n - 1)) : 0.0;
}

static void test_pass_at_k(void) {
    /* REFERENCES.md: n = 16, c = 4, k = 8 -> 0.962 */
    CHECK_NEAR(bt_pass_at_k(16, 4, 8), 0.962, 5e-4);
    for (int64_t n = 1; n <= 20; n++)
        for (int64_t c = 0; c <= n; c++)
            for (int64_t k = 1; k <= n; k++)
                CHECK_NEAR(bt_pass_at_k(n, c, k), 1.0 - s_choose(n - c, k) / s_choose(n, k), 1e-12);
    CHECK(bt_pass_at_k(5, 0, 3) == 0.0);
    CHECK(bt_pass_at_k(5, 3, 3) == 1.0);            /* n - c < k */
    CHECK_NEAR(bt_pass_at_k(10, 3, 1), 0.3, 1e-15); /* pass@1 is the fraction correct */
    CHECK(isnan(bt_pass_at_k(4, 5, 1)) && isnan(bt_pass_at_k(4, 1, 5)) &&
          isnan(bt_pass_at_k(4, 1, 0)));
    /* a stable answer where the binomials overflow doubles */
    double big = bt_pass_at_k(2000, 1, 1000);
    CHECK_NEAR(big, 0.5, 1e-12);
    int64_t hist[5] = {2, 0, 1, 0, 1}; /* 4 examples, n = 4 */
    CHECK_NEAR(bt_pass_at_k_hist(hist, 4, 2), (2 * 0.0 + 1 * bt_pass_at_k(4, 2, 2) + 1 * 1.0) / 4.0,
               1e-15);
    int64_t none[3] = {0, 0, 0};
    CHECK(isnan(bt_pass_at_k_hist(none, 2, 1)));
}

/*  pass@k is the chance that a k-subset of the n samples, drawn without replacement, holds at least
    one correct one: samples 0..c-1 are correct; every k-subset is a bitmask with k bits set. */
static void test_pass_at_k_enumerated(void) {
    for (int n = 1; n <= 10; n++)
        for (int c = 0; c <= n; c++)
            for (int k = 1; k <= n; k++) {
                unsigned correct = (1u << c) - 1;
                long subsets = 0, hits = 0;
                for (unsigned mask = 0; mask < 1u << n; mask++) {
                    if (__builtin_popcount(mask) != k)
                        continue;
                    subsets++;
                    hits += (mask & correct) != 0;
                }
                CHECK_NEAR(bt_pass_at_k(n, c, k), (double)hits / (double)subsets, 1e-12);
            }
}

static void test_pass_at_k_stderr(void) {
    uint64_t rng = 42;
    enum { N = 8 };
    for (int trial = 0; trial < 50; trial++) {
        int64_t hist[N + 1] = {0};
        int64_t examples = 1 + (int64_t)(s_uniform(&rng) * 40);
        double values[64][N]; /* (examples, k - 1): pass@k of each example, expanded */
        for (int64_t e = 0; e < examples; e++) {
            int c = (int)(s_uniform(&rng) * (N + 1));
            hist[c]++;
            for (int k = 1; k <= N; k++)
                values[e][k - 1] = bt_pass_at_k(N, c, k);
        }
        for (int k = 1; k <= N; k++) {
            double column[64], mean, std;
            for (int64_t e = 0; e < examples; e++)
                column[e] = values[e][k - 1];
            s_two_pass(column, examples, &mean, &std);
            CHECK_NEAR(bt_pass_at_k_hist(hist, N, k), mean, 1e-12);
            CHECK_NEAR(bt_pass_at_k_hist_stderr(hist, N, k), std / sqrt((double)examples), 1e-12);
        }
    }
    int64_t one[3] = {0, 1, 0}, none[3] = {0, 0, 0}, all_same[3] = {0, 0, 7};
    CHECK(bt_pass_at_k_hist_stderr(one, 2, 1) == 0.0);
    CHECK(bt_pass_at_k_hist_stderr(all_same, 2, 1) == 0.0);
    CHECK(isnan(bt_pass_at_k_hist_stderr(none, 2, 1)));
    /* hand example: pass@1 values 0, 0, 1, 1 -> std sqrt(1/3), stderr sqrt(1/3) / 2 */
    int64_t half[2] = {2, 2};
    CHECK_NEAR(bt_pass_at_k_hist_stderr(half, 1, 1), sqrt(1.0 / 3.0) / 2.0, 1e-15);
}

static void test_majority_vote(void) {
    const char *single[] = {"85"};
    CHECK(bt_majority_vote(single, 1) == 0);
    const char *plain[] = {"1", "2", "2", "3", "2", "1"};
    CHECK(bt_majority_vote(plain, 6) == 1); /* "2" three times, first at 1 */
    const char *tie[] = {"7", "9", "9", "7"};
    CHECK(bt_majority_vote(tie, 4) == 0); /* 2 each: "7" occurs first */
    const char *tie2[] = {"9", "7", "7", "9", "5"};
    CHECK(bt_majority_vote(tie2, 5) == 0);
    const char *nulls[] = {NULL, NULL, "4", NULL, "5", "4"};
    CHECK(bt_majority_vote(nulls, 6) == 2); /* NULLs never win, however many */
    const char *null_first[] = {NULL, "4"};
    CHECK(bt_majority_vote(null_first, 2) == 1);
    const char *all_null[] = {NULL, NULL, NULL};
    CHECK(bt_majority_vote(all_null, 3) == -1);
    CHECK(bt_majority_vote(all_null, 0) == -1);
    const char *strings[] = {"-3", "3", "3 ", "3"};
    CHECK(bt_majority_vote(strings, 4) == 1); /* whole strings: "3 " is another answer */
    const char *later[] = {"a", "b", "b", "a", "b"};
    CHECK(bt_majority_vote(later, 5) == 1); /* a later first occurrence wins with more votes */
}

/*  Quantiles of random histograms against the sorted expanded values, with ranks ceil(j * N / 100)
    computed in integers for q = j / 100. */
static void test_hist_quantile(void) {
    uint64_t rng = 7;
    enum { BINS = 12, MAXN = 12 * 9 };
    for (int trial = 0; trial < 200; trial++) {
        int64_t hist[BINS] = {0}, values[MAXN], total = 0;
        for (int v = 0; v < BINS; v++) {
            hist[v] = s_uniform(&rng) < 0.4 ? 0 : (int64_t)(s_uniform(&rng) * 9);
            for (int64_t c = 0; c < hist[v]; c++)
                values[total++] = v;
        }
        if (total == 0) {
            CHECK(bt_hist_quantile(hist, BINS, 0.5) == -1);
            continue;
        }
        qsort(values, (size_t)total, sizeof *values, s_cmp_i64);
        for (int64_t j = 1; j <= 100; j++) {
            int64_t rank = (j * total + 99) / 100; /* ceil(j * total / 100) */
            CHECK(bt_hist_quantile(hist, BINS, (double)j / 100.0) == values[rank - 1]);
        }
        CHECK(bt_hist_quantile(hist, BINS, 0.0) == values[0]);
        CHECK(bt_hist_quantile(hist, BINS, -1.0) == values[0]);
        CHECK(bt_hist_quantile(hist, BINS, 1.0) == values[total - 1]);
        CHECK(bt_hist_quantile(hist, BINS, 2.0) == values[total - 1]);
    }
    int64_t hundred[2] = {100, 0}, steps[100];
    for (int v = 0; v < 100; v++)
        steps[v] = 1;                               /* the values 0..99 once each */
    CHECK(bt_hist_quantile(steps, 100, 0.07) == 6); /* rank 7, though 0.07 * 100 > 7 in doubles */
    CHECK(bt_hist_quantile(steps, 100, 0.5) == 49);
    CHECK(bt_hist_quantile(steps, 100, 0.99) == 98);
    CHECK(bt_hist_quantile(hundred, 2, 0.99) == 0);
    int64_t empty[4] = {0, 0, 0, 0};
    CHECK(bt_hist_quantile(empty, 4, 0.5) == -1);
    CHECK(bt_hist_quantile(empty, 0, 0.5) == -1);
}

static void test_mean_std(void) {
    uint64_t rng = 3;
    enum { MAXN = 500 };
    static double x[MAXN];
    for (int trial = 0; trial < 100; trial++) {
        int64_t n = 1 + (int64_t)(s_uniform(&rng) * MAXN);
        double offset = s_uniform(&rng) * 10.0 - 5.0, scale = 0.1 + s_uniform(&rng) * 100.0;
        double sum = 0.0, sumsq = 0.0;
        for (int64_t i = 0; i < n; i++) {
            x[i] = offset + scale * s_uniform(&rng);
            sum += x[i];
            sumsq += x[i] * x[i];
        }
        double mean, std, se, ref_mean, ref_std;
        bt_mean_std(sum, sumsq, n, &mean, &std, &se);
        s_two_pass(x, n, &ref_mean, &ref_std);
        CHECK_REL(mean, ref_mean, 1e-12);
        if (n == 1) {
            CHECK(std == 0.0 && se == 0.0);
            continue;
        }
        CHECK_REL(std, ref_std, 1e-9);
        CHECK_REL(se, ref_std / sqrt((double)n), 1e-9);
    }
    double mean, std, se;
    bt_mean_std(0.0, 0.0, 0, &mean, &std, &se);
    CHECK(isnan(mean) && isnan(std) && isnan(se));
    bt_mean_std(6.0, 14.0, 3, &mean, NULL, NULL); /* 1, 2, 3: NULL outputs are skipped */
    CHECK(mean == 2.0);
    bt_mean_std(6.0, 14.0, 3, NULL, &std, &se);
    CHECK_NEAR(std, 1.0, 1e-15);
    CHECK_NEAR(se, 1.0 / sqrt(3.0), 1e-15);
    double sum = 0.0, sumsq = 0.0;
    for (int i = 0; i < 3; i++) { /* 0.1 three times: sumsq - sum^2 / n rounds below 0 */
        sum += 0.1;
        sumsq += 0.1 * 0.1;
    }
    bt_mean_std(sum, sumsq, 3, &mean, &std, &se);
    CHECK(std == 0.0 && se == 0.0);
}

int main(void) {
    test_pass_at_k();
    test_pass_at_k_enumerated();
    test_pass_at_k_stderr();
    test_majority_vote();
    test_hist_quantile();
    test_mean_std();
    return check_exit();
}
