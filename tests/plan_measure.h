/*  plan_measure.h — one real GRPO step of a config's trainer on the worst batch the config allows,
    with its device's allocator peak: what the planner (plan.h) predicts.  Header-only; used by
    tests/test_plan.c (CPU, the shim's memory tracking) and bench/bench_plan.c (CUDA, for
    bench/gpu_check.sh).  Checks with check.h's CHECK and CHECK_OK: include check.h first. */
#ifndef BATON_TESTS_PLAN_MEASURE_H
#define BATON_TESTS_PLAN_MEASURE_H
#include "baton/config.h"
#include "baton/messages.h"
#include "baton/model.h"
#include "baton/plan.h"
#include "baton/tensor.h"
#include "baton/trainer.h"

#include <stdlib.h>

/*  The worst batch the config allows: every prompt P tokens, every completion max_new_tokens,
    a group's prompts identical (shared prefixes).  Caller frees *adv. */
static inline void plan_full_batch(const bt_config *cfg, int64_t P, bt_rollout_batch *b,
                                   double **adv) {
    int64_t G = cfg->grpo.group_size, n_prompts = cfg->grpo.prompts_per_step;
    int64_t L = cfg->grpo.max_new_tokens, n = n_prompts * G;
    CHECK_OK(bt_rollout_batch_alloc(b, n_prompts, G, P, L));
    b->temperature = 1.0;
    b->version = 0;
    *adv = malloc((size_t)n * sizeof **adv);
    for (int64_t c = 0; c < n; c++) {
        int32_t *p = b->prompt_tokens + c * P, *t = b->tokens + c * L;
        p[0] = 256;
        for (int64_t i = 1; i < P; i++)
            p[i] = (int32_t)('0' + ((c / G) * 7 + i * 3) % 10);
        for (int64_t j = 0; j < L; j++) {
            t[j] = (int32_t)('0' + (c * 5 + j * 11) % 10);
            b->logprobs[c * L + j] = -2.0f;
        }
        b->prompt_lens[c] = P;
        b->lengths[c] = L;
        (*adv)[c] = c % 2 ? 1.0 : -1.0;
    }
}

/*  Peak bytes on dev over building cfg's model and trainer (as workers/worker.c does) and one GRPO
    step with plan's micro-batch on plan_full_batch, less what dev held before.  On the CPU the
    calling thread's tracking is on throughout.  *params gets the model's parameter elements,
    counted from its tensors. */
static inline double plan_measure(const bt_config *cfg, const bt_plan *plan, bt_device dev,
                                  int64_t *params) {
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double *adv = NULL;
    plan_full_batch(cfg, plan->prompt_len, &b, &adv);
    bool cpu = dev.type == BT_DEVICE_CPU;
    size_t before = 0, peak = 0;
    if (cpu)
        CHECK_OK(bt_memory_tracking_begin());
    CHECK_OK(bt_device_memory(dev, &before, NULL, NULL));
    bt_model *m = bt_model_new(&cfg->model, dev, 7);
    CHECK(m != NULL);
    *params = 0;
    for (int i = 0; m && i < bt_model_num_params(m); i++)
        *params += bt_numel(bt_model_params(m)[i]);
    if (m && cfg->run.precision == BT_CONFIG_PRECISION_BF16)
        CHECK_OK(bt_model_set_precision(m, BT_BF16));
    if (m)
        bt_model_set_activation_checkpointing(m, cfg->grpo.activation_checkpointing == 1);
    bt_trainer_config tc;
    bt_trainer_config_init(&tc);
    bt_config_adamw(cfg, &tc.adamw);
    tc.micro_batch = plan->micro_batch;
    tc.batching = cfg->grpo.batching;
    tc.pack_tokens = cfg->grpo.pack_tokens;
    tc.share_prefix = cfg->grpo.share_prefix;
    tc.reference = cfg->grpo.kl_coef > 0;
    bt_trainer_t *tr = m ? bt_trainer_new(&m, &tc) : NULL;
    CHECK(tr != NULL);
    bt_grpo_config gc;
    bt_config_grpo(cfg, &gc);
    bt_trainer_stats stats;
    if (tr)
        CHECK_OK(bt_trainer_grpo_step(tr, &b, adv, 1e-4, &gc, &stats));
    CHECK_OK(bt_device_memory(dev, NULL, &peak, NULL));
    bt_trainer_destroy(&tr);
    if (cpu)
        bt_memory_tracking_end();
    free(adv);
    bt_rollout_batch_release(&b);
    return (double)peak - (double)before;
}
#endif
