/*  metrics.h — evaluation metrics computed from counts: unbiased pass@k and its standard error,
    majority vote (maj@k), histogram quantiles, mean and standard error.
    Threading: pure functions.  Lifetime: nothing to create or destroy. */
#ifndef BATON_METRICS_H
#define BATON_METRICS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  Unbiased pass@k from n samples of which c are correct (Chen et al. 2021):
    1 - C(n-c, k) / C(n, k), in the stable product form 1 - prod_{i=n-c+1..n} (1 - k/i);
    1 when n - c < k.  Requires 0 <= c <= n and 1 <= k <= n (else NaN). */
double bt_pass_at_k(int64_t n, int64_t c, int64_t k);

/*  Mean pass@k over examples given as a histogram: hist[c] examples had c of n correct
    (c = 0..n).  NaN when there are no examples. */
double bt_pass_at_k_hist(const int64_t *hist, int64_t n, int64_t k);

/*  Standard error over examples of pass@k: the sample standard deviation (n-1 in the denominator)
    of the per-example values bt_pass_at_k(n, c, k), weighted by hist[c], over sqrt(examples), as
    lm-evaluation-harness reports acc_stderr.  0 for one example; NaN when there are none. */
double bt_pass_at_k_hist_stderr(const int64_t *hist, int64_t n, int64_t k);

/*  maj@k: the index of the first occurrence of the most frequent of n answers (compared as
    strings; NULL means no answer was extracted and does not vote).  Ties go to the answer whose
    first occurrence comes first.  -1 when every answer is NULL or n <= 0.  O(n^2) comparisons. */
int bt_majority_vote(const char *const *answers, int n);

/*  Nearest-rank quantile of integer values given as a histogram, hist[v] = count of value v,
    v = 0..bins-1: the smallest v whose cumulative count reaches rank ceil(q * total) (q * total is
    first lowered by a relative 1e-12, so that 0.07 of 100 values is rank 7, not 8).  q <= 0 gives
    the smallest value present, q >= 1 the largest.  -1 when the histogram is empty. */
int64_t bt_hist_quantile(const int64_t *hist, int64_t bins, double q);

/*  From n values' sum and sum of squares: the mean, the sample standard deviation (n-1 in the
    denominator; 0 when n == 1) and the standard error of the mean std / sqrt(n), as
    lm-evaluation-harness's acc_stderr.  NaN for all three when n == 0.  Any out pointer may be
    NULL.  One-pass formula: it loses precision when std is tiny next to |mean| (relative error
    about 1e-16 * mean^2 / variance); a negative variance from rounding is taken as 0. */
void bt_mean_std(double sum, double sumsq, int64_t n, double *mean, double *std, double *stderr_);

#ifdef __cplusplus
}
#endif
#endif
