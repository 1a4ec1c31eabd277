/*  shard.c — proportional, block-aligned dataset shards; see shard.h. */
#include "baton/shard.h"

#include "baton/status.h"

#include <math.h>

void bt_shard_split(int64_t total, int64_t align, const double *speeds, int n, int64_t *counts) {
    BT_ASSERT(n >= 1 && n <= BT_SHARD_MAX && total >= 0 && align >= 1);
    double known = 0, sum = 0;
    int n_known = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(speeds[i]) && speeds[i] > 0) {
            known += speeds[i];
            n_known++;
        }
    double fill = n_known ? known / n_known : 1.0;
    for (int i = 0; i < n; i++)
        sum += isfinite(speeds[i]) && speeds[i] > 0 ? speeds[i] : fill;
    int64_t blocks = (total + align - 1) / align, given = 0;
    double rem[BT_SHARD_MAX];
    for (int i = 0; i < n; i++) { /* floor of each share, then the remainders by size */
        double s = isfinite(speeds[i]) && speeds[i] > 0 ? speeds[i] : fill;
        double share = (double)blocks * s / sum;
        counts[i] = (int64_t)floor(share);
        rem[i] = share - (double)counts[i];
        given += counts[i];
    }
    for (; given < blocks; given++) {
        int best = 0;
        for (int i = 1; i < n; i++)
            best = rem[i] > rem[best] ? i : best;
        counts[best]++;
        rem[best] = -1;
    }
    if (blocks >= n) /* every worker gets work, so a worker once measured slow is measured again */
        for (int i = 0; i < n; i++)
            if (counts[i] == 0) {
                int most = 0;
                for (int j = 1; j < n; j++)
                    most = counts[j] > counts[most] ? j : most;
                counts[most]--;
                counts[i]++;
            }
    int64_t start = 0; /* blocks to items; the shard reaching the end takes the partial block */
    for (int i = 0; i < n; i++) {
        int64_t end = (start + counts[i]) * align;
        end = end > total ? total : end;
        counts[i] = end - start * align > 0 ? end - start * align : 0;
        start += (counts[i] + align - 1) / align;
    }
}
