/*  bench_share_prefix.c — the trainer's shared-prefix pass (grpo.share_prefix) against the
    unshared one (issue 18, section 4): one GRPO step (forward, the reference's no-grad forward for
    the KL term, loss, backward, clip, AdamW) on GROUPS groups of 8 completions of one prompt,
    prompts of 256 tokens, responses of 64, "bucket" batching with micro_batch 8 (one group a
    micro-batch either way), on a model of hidden HIDDEN with LAYERS layers (8 heads, SwiGLU
    2.6875 x hidden as Llama's 11008 / 4096, vocab 259).  Tokens/s counts the batch's tokens as
    the unshared layout holds them (G * (P + R) a group) per second of the best step, so the ratio
    is the ratio of step times.  The two trainers take turns and start from the same weights; the
    loss of their first steps is printed as a check that they compute the same update.  Prints one
    JSON line per layout.
    Usage: bench_share_prefix [GROUPS [ROUNDS [HIDDEN LAYERS]]] (2, 2, 512, 8: about 4 minutes on
    2 cores).  Threads: BATON_THREADS, else libtorch's default. */
#include "../tests/grpo_reference.h"
#include "baton/blas.h"
#include "baton/grpo.h"
#include "baton/model.h"
#include "baton/rng.h"
#include "baton/rollout.h"
#include "baton/tensor.h"
#include "baton/trainer.h"
#include "bench_shape.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { S_G = 8, S_PROMPT = 256, S_RESPONSE = 64 };

static void s_fail(const char *what) {
    fprintf(stderr, "bench_share_prefix: %s: %s\n", what, bt_last_error());
    exit(1);
}

/*  groups * S_G completions, each group's prompt shared by its completions; random bytes from a
    fixed key, behaviour log-probs near a uniform policy's, advantages in [-1, 1). */
static void s_batch(int64_t groups, bt_rollout_batch *b, double *adv) {
    if (bt_rollout_batch_alloc(b, groups, S_G, S_PROMPT, S_RESPONSE) != BT_OK)
        s_fail("batch");
    b->temperature = 1.0;
    uint64_t state = 18;
    for (int64_t c = 0; c < b->n; c++) {
        int32_t *p = b->prompt_tokens + c * S_PROMPT;
        b->prompt_lens[c] = S_PROMPT;
        b->lengths[c] = S_RESPONSE;
        for (int64_t i = 0; i < S_PROMPT; i++)
            p[i] = c % S_G ? p[i - S_PROMPT] : (int32_t)(bt_rng_next(&state) % 256);
        for (int64_t j = 0; j < S_RESPONSE; j++) {
            b->tokens[c * S_RESPONSE + j] = (int32_t)(bt_rng_next(&state) % 256);
            b->logprobs[c * S_RESPONSE + j] = (float)(-log(259.0) + 0.05);
        }
        adv[c] = 2.0 * bt_rng_unit(bt_rng_next(&state)) - 1.0;
    }
}

int main(int argc, char **argv) {
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    int64_t groups = argc > 1 ? atoll(argv[1]) : 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 2;
    int64_t hidden = argc > 4 ? atoll(argv[3]) : 512, layers = argc > 4 ? atoll(argv[4]) : 8;
    if (groups < 1 || rounds < 1 || hidden < 64 || hidden % 64 || layers < 1) {
        fprintf(stderr, "usage: bench_share_prefix [GROUPS >= 1 [ROUNDS >= 1 [HIDDEN (a multiple "
                        "of 64) LAYERS]]]\n");
        return 2;
    }
    if (bt_threads_from_env() != BT_OK)
        s_fail("environment");
    bt_model_config mc = bench_llama_shape(hidden, layers, 0, S_PROMPT + S_RESPONSE);

    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double *adv = malloc((size_t)(groups * S_G) * sizeof *adv);
    if (!adv)
        s_fail("out of memory");
    s_batch(groups, &b, adv);
    double tokens = (double)(b.n * (S_PROMPT + S_RESPONSE));
    const char *const names[2] = {"unshared", "shared"};
    bt_trainer_t *tr[2];
    for (int k = 0; k < 2; k++) {
        bt_model *m = bt_model_new(&mc, bt_cpu(), 7);
        bt_trainer_config tc;
        bt_trainer_config_init(&tc);
        tc.micro_batch = S_G;
        tc.reference = true;
        tc.share_prefix = k == 1;
        tr[k] = m ? bt_trainer_new(&m, &tc) : NULL;
        if (!tr[k])
            s_fail("trainer");
    }
    bt_grpo_config gc = bt_test_grpo_config(); /* kl_coef 0.04: the reference runs too */
    double best[2] = {INFINITY, INFINITY}, total[2] = {0}, first_loss[2] = {0};
    bt_trainer_stats st[2];
    for (int r = 0; r <= rounds; r++) { /* round 0 warms up (page faults, thread pools) */
        for (int k = 0; k < 2; k++) {
            double t0 = bt_now();
            if (bt_trainer_grpo_step(tr[k], &b, adv, 1e-5, &gc, &st[k]) != BT_OK)
                s_fail(names[k]);
            double dt = bt_now() - t0;
            if (r == 0)
                first_loss[k] = st[k].loss;
            if (r == 0)
                continue;
            total[k] += dt;
            best[k] = fmin(best[k], dt);
        }
    }
    for (int k = 0; k < 2; k++)
        printf("{\"bench\":\"share_prefix\",\"layout\":\"%s\",\"threads\":%d,\"hidden\":%lld,"
               "\"layers\":%lld,\"prompt\":%d,\"response\":%d,\"group\":%d,\"sequences\":%lld,"
               "\"tokens\":%.0f,\"slots\":%.0f,\"shared\":%.0f,\"step_s_best\":%.3f,"
               "\"step_s_mean\":%.3f,\"tokens_per_s\":%.0f,\"speedup_vs_unshared\":%.3f,"
               "\"first_loss\":%.9g,\"loss_rel_diff\":%.3g}\n",
               names[k], bt_get_num_threads(), (long long)hidden, (long long)layers, S_PROMPT,
               S_RESPONSE, S_G, (long long)b.n, tokens, st[k].slots, st[k].shared, best[k],
               total[k] / rounds, tokens / best[k], best[0] / best[k], first_loss[k],
               fabs(first_loss[k] - first_loss[0]) / fmax(fabs(first_loss[0]), 1e-30));
    for (int k = 0; k < 2; k++)
        bt_trainer_destroy(&tr[k]);
    bt_rollout_batch_release(&b);
    free(adv);
    return 0;
}
