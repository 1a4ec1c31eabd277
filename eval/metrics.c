/*  metrics.c — unbiased pass@k and its standard error, maj@k, quantiles, mean and std. */
#include "baton/metrics.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

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

double bt_pass_at_k_hist_stderr(const int64_t *hist, int64_t n, int64_t k) {
    /* two passes over the histogram: the mean, then the squared deviations from it */
    int64_t examples = 0;
    for (int64_t c = 0; c <= n; c++)
        examples += hist[c];
    if (examples == 0)
        return NAN;
    if (examples == 1)
        return 0.0;
    double mean = bt_pass_at_k_hist(hist, n, k), ss = 0.0;
    for (int64_t c = 0; c <= n; c++) {
        if (hist[c] == 0)
            continue;
        double d = bt_pass_at_k(n, c, k) - mean;
        ss += (double)hist[c] * d * d;
    }
    return sqrt(ss / (double)(examples - 1)) / sqrt((double)examples);
}

int bt_majority_vote(const char *const *answers, int n) {
    int best = -1, best_count = 0;
    for (int i = 0; i < n; i++) {
        if (!answers[i])
            continue;
        bool first = true;
        for (int j = 0; j < i && first; j++)
            first = !answers[j] || strcmp(answers[j], answers[i]) != 0;
        if (!first)
            continue;
        int count = 1;
        for (int j = i + 1; j < n; j++)
            count += answers[j] && strcmp(answers[j], answers[i]) == 0;
        if (count > best_count) { /* strictly more: a tie keeps the earlier answer */
            best = i;
            best_count = count;
        }
    }
    return best;
}

int64_t bt_hist_quantile(const int64_t *hist, int64_t bins, double q) {
    int64_t total = 0;
    for (int64_t v = 0; v < bins; v++)
        total += hist[v];
    if (total == 0)
        return -1;
    /* nearest rank: ceil(q * total), clamped to 1..total */
    double r = q * (double)total;
    int64_t rank = q > 0 ? (int64_t)ceil(r - r * 1e-12) : 1;
    rank = rank < 1 ? 1 : rank > total ? total : rank;
    int64_t seen = 0;
    for (int64_t v = 0; v < bins; v++) {
        seen += hist[v];
        if (seen >= rank)
            return v;
    }
    return bins - 1; /* not reached */
}

void bt_mean_std(double sum, double sumsq, int64_t n, double *mean, double *std, double *stderr_) {
    double m = NAN, s = NAN, se = NAN;
    if (n > 0) {
        m = sum / (double)n;
        /* sample variance: (sumsq - n * mean^2) / (n - 1) */
        double var = n > 1 ? (sumsq - sum * m) / (double)(n - 1) : 0.0;
        s = var > 0.0 ? sqrt(var) : 0.0;
        se = s / sqrt((double)n);
    }
    if (mean)
        *mean = m;
    if (std)
        *std = s;
    if (stderr_)
        *stderr_ = se;
}
