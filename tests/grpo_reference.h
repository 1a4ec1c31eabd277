/*  grpo_reference.h — the GRPO settings the numerical tests and benchmarks were written against,
    stated once here rather than taken from a library default (a run's defaults are config/config.c's
    key table): GRPO's kl_coef 0.04 with k3, DAPO's clip-higher, token-mean aggregation, Dr. GRPO's
    max_tokens 1024 for token_sum_norm.  Header-only; tests/ and bench/ include it. */
#ifndef BATON_TESTS_GRPO_REFERENCE_H
#define BATON_TESTS_GRPO_REFERENCE_H
#include "baton/grpo.h"

static inline bt_grpo_config bt_test_grpo_config(void) {
    return (bt_grpo_config){.clip_low = 0.2,
                            .clip_high = 0.28,
                            .kl_coef = 0.04,
                            .kl_estimator = BT_KL_K3,
                            .entropy_coef = 0.0,
                            .loss_agg = BT_LOSS_AGG_TOKEN_MEAN,
                            .max_tokens = 1024,
                            .adv_norm = BT_ADV_NORM_STD,
                            .decoupled = false,
                            .behav_weight_cap = 5.0,
                            .turn_gamma = 1.0};
}
#endif
