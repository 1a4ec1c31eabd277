/*  test_metrics.c — unbiased pass@k against the closed form with exact binomials, the published
    example, and its edge cases. */
#include "baton/metrics.h"
#include "check.h"

/*  C(n, k) exactly in double for the small n used here. */
static double s_choose(int64_t n, int64_t k) {
    if (k < 0 || k > n)
        return 0;
    double r = 1;
    for (int64_t i = 1; i <= k; i++)
        r = r * (double)(n - k + i) / (double)i;
    return r;
}

int main(void) {
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
    return check_exit();
}
