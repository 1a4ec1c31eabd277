/*  bench_pack.c — the trainer's batching modes ("pad", "bucket", "pack") on one GRPO batch with a
    realistic spread of lengths: prompts of 20..80 tokens (one per group of 8), responses drawn
    from a log-normal (median 96 tokens, sigma 1) clipped to max_new_tokens 512.  For each mode:
    the fraction of the trainer's token slots that are padding, and real tokens (prompt +
    completion) per second of a full GRPO step (forward, loss, backward, clip, AdamW) on the demo
    model (configs/arith.json's shape, with room for 592 positions), with the ratio to "pad"
    measured in the same run.  The modes take turns, so they see the same machine load.  Prints
    one JSON line per mode.
    Usage: bench_pack [SEQUENCES [ROUNDS]] (64 and 3: about 40 s on 2 cores).
    Threads: BATON_THREADS, else libtorch's default. */
#include "../tests/grpo_reference.h"
#include "baton/blas.h"
#include "baton/grpo.h"
#include "baton/model.h"
#include "baton/rollout.h"
#include "baton/tensor.h"
#include "baton/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { S_GROUP = 8, S_MAX_PROMPT = 80, S_MAX_NEW = 512, S_MODES = 3 };

static const char *const s_modes[S_MODES] = {"pad", "bucket", "pack"};

/*  The GRPO settings these benchmarks were written against, stated here rather than taken from a
    library default (a config's are in config/config.c's key table): GRPO's kl_coef 0.04 with k3,
    DAPO's clip-higher, token-mean aggregation, Dr. GRPO's max_tokens 1024 for token_sum_norm. */

static void s_die(const char *what) {
    fprintf(stderr, "bench_pack: %s: %s\n", what, bt_last_error());
    exit(1);
}

/*  xorshift64: the batch does not depend on libtorch's generator. */
static uint64_t s_rng = 0x9E3779B97F4A7C15ull;
static double s_uniform(void) {
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return ((double)(s_rng >> 11) + 0.5) / 9007199254740992.0;
}
static double s_normal(void) { /* Box-Muller */
    return sqrt(-2.0 * log(s_uniform())) * cos(6.283185307179586 * s_uniform());
}

/*  n completions in groups of S_GROUP; advantages in [-1.5, 1.5]. */
static void s_batch(int64_t n, bt_rollout_batch *b, double *adv) {
    if (bt_rollout_batch_alloc(b, n / S_GROUP, S_GROUP, S_MAX_PROMPT, S_MAX_NEW) != BT_OK)
        s_die("batch");
    b->temperature = 1.0;
    for (int64_t c = 0; c < n; c++) {
        int32_t *p = b->prompt_tokens + c * b->max_prompt_len;
        if (c % S_GROUP == 0) { /* a new prompt */
            b->prompt_lens[c] = 20 + (int64_t)(s_uniform() * 61);
            for (int64_t i = 0; i < b->prompt_lens[c]; i++)
                p[i] = (int32_t)(s_uniform() * 256);
        } else {
            b->prompt_lens[c] = b->prompt_lens[c - 1];
            for (int64_t i = 0; i < b->prompt_lens[c]; i++)
                p[i] = p[i - b->max_prompt_len];
        }
        double len = exp(log(96.0) + s_normal());
        b->lengths[c] = len < 1 ? 1 : (len > S_MAX_NEW ? S_MAX_NEW : (int64_t)len);
        for (int64_t j = 0; j < b->lengths[c]; j++) {
            b->tokens[c * b->max_new_tokens + j] = (int32_t)(s_uniform() * 256);
            b->logprobs[c * b->max_new_tokens + j] = (float)(-5.5 + 0.1 * s_normal());
        }
        adv[c] = 3.0 * s_uniform() - 1.5;
    }
}

int main(int argc, char **argv) {
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    int64_t n = argc > 1 ? atoll(argv[1]) : 64;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (n < S_GROUP || n % S_GROUP || rounds < 1) {
        fprintf(stderr, "usage: bench_pack [SEQUENCES (a multiple of %d) [ROUNDS >= 1]]\n",
                S_GROUP);
        return 2;
    }
    if (bt_threads_from_env() != BT_OK)
        s_die("environment");

    bt_model_config mc; /* configs/arith.json's model */
    bt_model_config_init(&mc);
    mc.hidden_size = 128;
    mc.intermediate_size = 352;
    mc.num_hidden_layers = 4;
    mc.num_attention_heads = 4;
    mc.num_key_value_heads = 4;
    mc.max_position_embeddings = S_MAX_PROMPT + S_MAX_NEW;

    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double *adv = malloc((size_t)n * sizeof *adv);
    if (!adv)
        s_die("out of memory");
    s_batch(n, &b, adv);
    double real = 0;
    for (int64_t c = 0; c < n; c++)
        real += (double)(b.prompt_lens[c] + b.lengths[c]);

    bt_trainer_t *tr[S_MODES];
    for (int k = 0; k < S_MODES; k++) {
        bt_model *m = bt_model_new(&mc, bt_cpu(), 7);
        bt_trainer_config tc;
        bt_trainer_config_init(&tc);
        tc.micro_batch = 16;
        tc.batching = (bt_batching)k;
        tc.share_prefix = false; /* the batchings alone: bench_share_prefix measures sharing */
        tr[k] = m ? bt_trainer_new(&m, &tc) : NULL;
        if (!tr[k])
            s_die("trainer");
    }
    bt_grpo_config gc = bt_test_grpo_config();
    gc.kl_coef = 0.0; /* as the demo config */

    double best[S_MODES], total[S_MODES] = {0}, slots[S_MODES] = {0};
    for (int r = 0; r <= rounds; r++) { /* round 0 warms up (page faults, thread pools) */
        for (int k = 0; k < S_MODES; k++) {
            bt_trainer_stats st;
            double t0 = bt_now();
            if (bt_trainer_grpo_step(tr[k], &b, adv, 1e-5, &gc, &st) != BT_OK)
                s_die(s_modes[k]);
            double dt = bt_now() - t0;
            slots[k] = st.slots;
            if (r == 0)
                continue;
            total[k] += dt;
            best[k] = r == 1 || dt < best[k] ? dt : best[k];
        }
    }
    for (int k = 0; k < S_MODES; k++)
        printf("{\"bench\":\"pack\",\"mode\":\"%s\",\"threads\":%d,\"sequences\":%lld,"
               "\"real_tokens\":%.0f,\"slots\":%.0f,\"padding\":%.4f,\"step_s_best\":%.3f,"
               "\"step_s_mean\":%.3f,\"tokens_per_s\":%.0f,\"speedup_vs_pad\":%.3f,"
               "\"padding_vs_pad\":%.3f}\n",
               s_modes[k], bt_get_num_threads(), (long long)n, real, slots[k],
               1.0 - real / slots[k], best[k], total[k] / rounds, real / best[k], best[0] / best[k],
               (slots[k] - real) / (slots[0] - real));
    for (int k = 0; k < S_MODES; k++)
        bt_trainer_destroy(&tr[k]);
    bt_rollout_batch_release(&b);
    free(adv);
    return 0;
}
