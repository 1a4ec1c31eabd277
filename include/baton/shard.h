/*  shard.h — how a dataset is cut into shards for several evaluation workers: contiguous ranges
    sized in proportion to each worker's measured speed.  Pure computation.
    Threading: any thread.  Lifetime: nothing to create or destroy. */
#ifndef BATON_SHARD_H
#define BATON_SHARD_H

#include <stdint.h>

#define BT_SHARD_MAX 256 /* shards of one split */

#ifdef __cplusplus
extern "C" {
#endif

/*  Splits total items into n in [1, BT_SHARD_MAX] contiguous shards, shard i getting a share
   proportional to speeds[i] (items per second; a speed that is not a positive number counts as the
   mean of the known ones, or 1 when none is known), by largest remainder over whole blocks of align
   items: every shard but the one holding the tail starts and ends at a multiple of align.  With at
   least n blocks every shard gets one or more (each missing one taken from the largest share), so
   a worker once measured slow still gets work and its speed is measured again; with fewer,
   counts[i] may be 0.  The counts add up to total. */
void bt_shard_split(int64_t total, int64_t align, const double *speeds, int n, int64_t *counts);

#ifdef __cplusplus
}
#endif
#endif
