/*  test_shard.c — dataset shards sized by worker speed: counts add up, follow the speeds, keep
    block alignment, and treat unknown speeds as the mean of the known ones. */
#include "baton/shard.h"
#include "check.h"

#include <stdint.h>

/*  Checks the invariants every split must hold: sum, alignment of every boundary but the tail. */
static void s_check_split(int64_t total, int64_t align, const int64_t *counts, int n) {
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        CHECK(counts[i] >= 0);
        sum += counts[i];
        if (sum < total) /* every boundary before the end sits on a block */
            CHECK(sum % align == 0);
    }
    CHECK(sum == total);
}

int main(void) {
    int64_t c[8];
    /* equal speeds: equal shares, the remainder to the first shards */
    double eq[3] = {1, 1, 1};
    bt_shard_split(200, 1, eq, 3, c);
    s_check_split(200, 1, c, 3);
    CHECK(c[0] == 67 && c[1] == 67 && c[2] == 66);

    /* a worker three times as fast gets three times the share */
    double fast_slow[2] = {3.0, 1.0};
    bt_shard_split(200, 1, fast_slow, 2, c);
    s_check_split(200, 1, c, 2);
    CHECK(c[0] == 150 && c[1] == 50);

    /* unknown speeds (0, NaN, negative) count as the mean of the known ones: 2 */
    double unknown[4] = {1.0, 0.0, 3.0, NAN};
    bt_shard_split(600, 1, unknown, 4, c);
    s_check_split(600, 1, c, 4);
    CHECK(c[0] == 75 && c[1] == 150 && c[2] == 225 && c[3] == 150);
    double none[2] = {0, -1};
    bt_shard_split(10, 1, none, 2, c);
    CHECK(c[0] == 5 && c[1] == 5);

    /* blocks of 16: boundaries on multiples of 16, the partial block to the last shard with any */
    double sp[3] = {1, 2, 1};
    bt_shard_split(100, 16, sp, 3, c); /* 7 blocks: shares 1.75, 3.5, 1.75 -> 2, 3, 2 */
    s_check_split(100, 16, c, 3);
    CHECK(c[0] == 32 && c[1] == 48 && c[2] == 20);

    /* more shards than blocks: some get nothing, none gets a negative count */
    double many[5] = {1, 1, 1, 1, 1};
    bt_shard_split(20, 16, many, 5, c);
    s_check_split(20, 16, c, 5);
    int nonzero = 0;
    for (int i = 0; i < 5; i++)
        nonzero += c[i] > 0;
    CHECK(nonzero == 2);

    /* a worker measured 1000 times slower still gets work (one item), so it is measured again */
    double slow[3] = {1000, 1000, 1};
    bt_shard_split(6, 1, slow, 3, c);
    s_check_split(6, 1, c, 3);
    CHECK(c[0] + c[1] == 5 && c[2] == 1);

    /* random speeds and sizes: each share within one block of its proportional value */
    uint64_t x = 12345;
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + (int)(x % 8);
        int64_t total = (int64_t)((x >> 8) % 1000), align = 1 + (int64_t)((x >> 20) % 20);
        double speeds[8], sum = 0;
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            speeds[i] = 0.1 + (double)(x >> 40) / (double)(1ULL << 24) * 10.0;
            sum += speeds[i];
        }
        bt_shard_split(total, align, speeds, n, c);
        s_check_split(total, align, c, n);
        int64_t blocks = (total + align - 1) / align;
        for (int i = 0; i < n; i++) { /* the minimum of one block moves at most n - 1 blocks */
            CHECK(fabs((double)c[i] - (double)total * speeds[i] / sum) <= (1.0 + n) * (double)align);
            CHECK(blocks < n || c[i] >= 1);
        }
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    return check_exit();
}
