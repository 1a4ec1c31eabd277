/*  metrics.c — unbiased pass@k. */
#include "baton/metrics.h"

#include <math.h>

double bt_pass_at_k(int64_t n, int64_t c, int64_t k) {
    if (c < 0 || c > n || k < 1 || k > n)
        return NAN;
    if (n - c < k)
        return 1.0;
    /* Chen et al. 2021, numerically stable: 1 - prod_{i=n-c+1}^{n} (1 - k / i) */
    double prod = 1.0;
    for (int64_t i = n - c + 1; i <= n; i++)
        prod *= 1.0 - (double)k / (double)i;
    return 1.0 - prod;
}

double bt_pass_at_k_hist(const int64_t *hist, int64_t n, int64_t k) {
    double sum = 0.0;
    int64_t examples = 0;
    for (int64_t c = 0; c <= n; c++) {
        if (hist[c] == 0)
            continue;
        sum += (double)hist[c] * bt_pass_at_k(n, c, k);
        examples += hist[c];
    }
    return examples ? sum / (double)examples : NAN;
}
