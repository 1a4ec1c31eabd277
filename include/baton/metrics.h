/*  metrics.h — evaluation metrics computed from counts: unbiased pass@k.
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

#ifdef __cplusplus
}
#endif
#endif
