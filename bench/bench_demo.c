/*  bench_demo.c — the default demo in one process, without sockets: a small Llama model learns
    2-digit addition from bytes, first by a short supervised warm start that stops while held-out
    greedy accuracy is still low, then by GRPO.  Prints JSON lines: one per evaluation
    {"bench":"demo","phase","step","accuracy","reward_mean","elapsed_s"} and a final summary.
    Settings: the table below; each can be overridden by BATON_DEMO_<NAME> (e.g.
    BATON_DEMO_SEED=2).  For tuning: BATON_DEMO_SAVE_SFT=DIR saves the model after the warm start,
    BATON_DEMO_LOAD=DIR starts GRPO from a saved model (no warm start).  Threads: BATON_THREADS,
   else libtorch's default (1 here). */
#define _POSIX_C_SOURCE 200809L
#include "../tests/grpo_reference.h"
#include "baton/blas.h"
#include "baton/evaluator.h"
#include "baton/grpo.h"
#include "baton/model.h"
#include "baton/rollout.h"
#include "baton/source.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"
#include "baton/trainer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct s_settings {
    double seed;
    /* model */
    double hidden, intermediate, layers, heads, kv_heads;
    /* task */
    double digits;
    /* supervised warm start: stops after sft_steps or once accuracy >= sft_stop_acc (0: off) */
    double sft_steps, sft_batch, sft_lr, sft_warmup, sft_stop_acc, sft_eval_every;
    /* GRPO */
    double rl_steps, prompts_per_step, group_size, temperature, max_new_tokens, rl_lr, kl_coef,
        clip_low, clip_high, drop_zero_var, micro_batch, max_grad_norm, weight_decay, beta2,
        adv_norm_std, rl_warmup, rl_min_lr, beta1;
    /* evaluation: the first eval_count held-out examples, greedy */
    double eval_count, eval_every;
    double verbose; /* 1: a JSON line per training step too */
} s_settings;

static s_settings s_set = {
    .seed = 1,
    .hidden = 128,
    .intermediate = 352,
    .layers = 4,
    .heads = 4,
    .kv_heads = 4,
    .digits = 2,
    .sft_steps = 300,
    .sft_batch = 64,
    .sft_lr = 1e-3,
    .sft_warmup = 20,
    .sft_stop_acc = 0.25,
    .sft_eval_every = 10,
    .rl_steps = 200,
    .prompts_per_step = 32,
    .group_size = 8,
    .temperature = 1.0,
    .max_new_tokens = 6,
    .rl_lr = 3e-4,
    .rl_warmup = 0,
    .rl_min_lr = 3e-5, /* cosine decay to here at rl_steps */
    .kl_coef = 0.0,
    .clip_low = 0.2,
    .clip_high = 0.28,
    .drop_zero_var = 1,
    .micro_batch = 256,
    .max_grad_norm = 1.0,
    .weight_decay = 0.0,
    .beta1 = 0.9,
    .beta2 = 0.999,
    .adv_norm_std = 1,
    .eval_count = 200,
    .eval_every = 10,
    .verbose = 0,
};

#define S_FIELD(name)                                                                              \
    { #name, &s_set.name }
static const struct {
    const char *name;
    double *value;
} s_fields[] = {
    S_FIELD(seed),           S_FIELD(hidden),        S_FIELD(intermediate),
    S_FIELD(layers),         S_FIELD(heads),         S_FIELD(kv_heads),
    S_FIELD(digits),         S_FIELD(sft_steps),     S_FIELD(sft_batch),
    S_FIELD(sft_lr),         S_FIELD(sft_warmup),    S_FIELD(sft_stop_acc),
    S_FIELD(sft_eval_every), S_FIELD(rl_steps),      S_FIELD(prompts_per_step),
    S_FIELD(group_size),     S_FIELD(temperature),   S_FIELD(max_new_tokens),
    S_FIELD(rl_lr),          S_FIELD(kl_coef),       S_FIELD(clip_low),
    S_FIELD(clip_high),      S_FIELD(drop_zero_var), S_FIELD(micro_batch),
    S_FIELD(max_grad_norm),  S_FIELD(weight_decay),  S_FIELD(eval_count),
    S_FIELD(eval_every),     S_FIELD(verbose),       S_FIELD(beta2),
    S_FIELD(adv_norm_std),   S_FIELD(rl_warmup),     S_FIELD(rl_min_lr),
    S_FIELD(beta1),
};

/*  The GRPO settings these benchmarks were written against, stated here rather than taken from a
    library default (a config's are in config/config.c's key table): GRPO's kl_coef 0.04 with k3,
    DAPO's clip-higher, token-mean aggregation, Dr. GRPO's max_tokens 1024 for token_sum_norm. */

static void s_die(const char *what) {
    fprintf(stderr, "bench_demo: %s: %s\n", what, bt_last_error());
    exit(1);
}

static void s_read_env(void) {
    for (size_t i = 0; i < sizeof s_fields / sizeof s_fields[0]; i++) {
        char key[64] = "BATON_DEMO_";
        size_t at = strlen(key);
        for (const char *p = s_fields[i].name; *p && at + 1 < sizeof key; p++)
            key[at++] = (char)toupper((unsigned char)*p);
        key[at] = '\0';
        const char *v = getenv(key);
        if (!v)
            continue;
        char *end = NULL;
        double d = strtod(v, &end);
        if (end == v || *end) {
            fprintf(stderr, "bench_demo: %s: expected a number, got \"%s\"\n", key, v);
            exit(1);
        }
        *s_fields[i].value = d;
    }
}

static double s_t0, s_compute; /* start of the run; seconds spent in model calls */

typedef struct s_demo {
    bt_tokenizer_t *tok;
    bt_source_t *task;
    bt_trainer_t *trainer;
    uint64_t seed;   /* rollout step r's TASK seed: (seed + r) << BT_JOB_SEED_BITS */
    uint64_t cursor; /* next training-stream index */
} s_demo;

/*  Greedy accuracy on the first eval_count held-out examples; prints one JSON line. */
static double s_eval(s_demo *d, const char *phase, int step, double *reward_mean) {
    bt_evaluator_config ec;
    bt_evaluator_config_init(&ec);
    ec.count = (size_t)s_set.eval_count;
    ec.max_new_tokens = (int64_t)s_set.max_new_tokens;
    bt_evaluator_sums sums;
    double t = bt_now();
    if (bt_evaluator_run(bt_trainer_policy(d->trainer), d->tok, d->task, &ec, 0, &sums) != BT_OK)
        s_die("eval");
    s_compute += bt_now() - t;
    double acc = (double)sums.correct / (double)sums.examples;
    *reward_mean = sums.reward_sum / (double)sums.completions;
    printf("{\"bench\":\"demo\",\"phase\":\"%s\",\"step\":%d,\"accuracy\":%.4f,"
           "\"reward_mean\":%.4f,\"mean_length\":%.3f,\"elapsed_s\":%.2f}\n",
           phase, step, acc, *reward_mean, sums.length_sum / (double)sums.completions,
           bt_now() - s_t0);
    fflush(stdout);
    return acc;
}

/*  Supervised warm start; returns its steps. */
static int s_sft(s_demo *d) {
    bt_lr_schedule lr = {
        .kind = BT_LR_WARMUP_LINEAR, .lr = s_set.sft_lr, .warmup_steps = (int64_t)s_set.sft_warmup};
    int n = (int)s_set.sft_batch, step = 0;
    uint64_t *idx = malloc((size_t)n * sizeof *idx);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double reward = 0;
    while (step < (int)s_set.sft_steps) {
        for (int i = 0; i < n; i++)
            idx[i] = d->cursor++;
        bt_trainer_stats st;
        double t = bt_now();
        if (bt_rollout_demonstrations(d->tok, d->task, idx, n, &b) != BT_OK ||
            bt_trainer_sft_step(d->trainer, &b, bt_lr_at(&lr, step), &st) != BT_OK)
            s_die("sft step");
        s_compute += bt_now() - t;
        step++;
        if (s_set.verbose)
            printf("{\"bench\":\"demo\",\"phase\":\"sft_train\",\"step\":%d,\"loss\":%.4f}\n", step,
                   st.loss);
        if (s_set.sft_stop_acc > 0 && step % (int)s_set.sft_eval_every == 0 &&
            s_eval(d, "sft", step, &reward) >= s_set.sft_stop_acc)
            break;
    }
    bt_rollout_batch_release(&b);
    free(idx);
    return step;
}

/*  Keeps the groups whose rewards differ (DAPO's dynamic-sampling filter, without resampling);
    compacts b and adv in place.  Returns the groups kept. */
static int64_t s_drop_flat_groups(bt_rollout_batch *b, double *adv) {
    int64_t G = b->group_size, kept = 0;
    for (int64_t g = 0; g < b->n_prompts; g++) {
        if (bt_grpo_group_has_zero_variance(b->rewards + g * G, G))
            continue;
        for (int64_t j = 0; j < G; j++) {
            int64_t from = g * G + j, to = kept * G + j;
            memmove(b->prompt_tokens + to * b->max_prompt_len,
                    b->prompt_tokens + from * b->max_prompt_len,
                    (size_t)b->max_prompt_len * sizeof *b->prompt_tokens);
            memmove(b->tokens + to * b->max_new_tokens, b->tokens + from * b->max_new_tokens,
                    (size_t)b->max_new_tokens * sizeof *b->tokens);
            memmove(b->logprobs + to * b->max_new_tokens, b->logprobs + from * b->max_new_tokens,
                    (size_t)b->max_new_tokens * sizeof *b->logprobs);
            b->prompt_lens[to] = b->prompt_lens[from];
            b->lengths[to] = b->lengths[from];
            b->rewards[to] = b->rewards[from];
            b->correct[to] = b->correct[from];
            b->finished[to] = b->finished[from];
            adv[to] = adv[from];
        }
        b->indices[kept] = b->indices[g];
        kept++;
    }
    b->n_prompts = kept;
    b->n = kept * G;
    return kept;
}

int main(int argc, char **argv) {
    (void)argc;
    bt_blas_reexec(argv); /* the kernel baton runs (blas.h) */
    if (bt_threads_from_env() != BT_OK)
        s_die("environment");
    s_read_env();
    s_t0 = bt_now();
    uint64_t seed = (uint64_t)s_set.seed;

    s_demo d = {.tok = bt_tokenizer_new_bytes()};
    bt_source_arith_config tc;
    bt_source_arith_config_init(&tc);
    tc.seed = seed;
    tc.digits = (int)s_set.digits;
    tc.operators = "+";
    if (bt_source_new_arith(&tc, &d.task) != BT_OK)
        s_die("task");

    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.hidden_size = (int64_t)s_set.hidden;
    mc.intermediate_size = (int64_t)s_set.intermediate;
    mc.num_hidden_layers = (int64_t)s_set.layers;
    mc.num_attention_heads = (int64_t)s_set.heads;
    mc.num_key_value_heads = (int64_t)s_set.kv_heads;
    mc.max_position_embeddings = 64;
    const char *load = getenv("BATON_DEMO_LOAD");
    bt_model *model = load ? bt_model_load(load, bt_cpu()) : bt_model_new(&mc, bt_cpu(), seed);
    if (!model)
        s_die("model");
    bt_trainer_config trc;
    bt_trainer_config_init(&trc);
    trc.adamw.weight_decay = s_set.weight_decay;
    trc.adamw.beta1 = s_set.beta1;
    trc.adamw.beta2 = s_set.beta2;
    trc.max_grad_norm = s_set.max_grad_norm;
    trc.micro_batch = (int64_t)s_set.micro_batch;
    trc.reference = s_set.kl_coef > 0;
    d.trainer = bt_trainer_new(&model, &trc);
    d.cursor = (uint64_t)s_set.sft_steps * (uint64_t)s_set.sft_batch * (load ? 1 : 0);
    d.seed = seed * 7919 + 1;
    if (!d.trainer)
        s_die("trainer");

    /* ---- supervised warm start ---- */
    double reward = 0;
    int sft_steps = getenv("BATON_DEMO_LOAD") ? 0 : s_sft(&d);
    if (getenv("BATON_DEMO_SAVE_SFT") &&
        bt_model_save(bt_trainer_policy(d.trainer), d.tok, getenv("BATON_DEMO_SAVE_SFT")) != BT_OK)
        s_die("save");
    double acc_start = s_eval(&d, "rl", 0, &reward);

    /* ---- GRPO ---- */
    bt_rollout_config rc;
    bt_rollout_config_init(&rc);
    rc.group_size = (int64_t)s_set.group_size;
    rc.sample.temperature = s_set.temperature;
    rc.sample.max_new_tokens = (int64_t)s_set.max_new_tokens;
    bt_grpo_config gc = bt_test_grpo_config();
    gc.kl_coef = s_set.kl_coef;
    gc.clip_low = s_set.clip_low;
    gc.clip_high = s_set.clip_high;
    gc.adv_norm = s_set.adv_norm_std ? BT_ADV_NORM_STD : BT_ADV_NORM_NONE;
    int64_t P = (int64_t)s_set.prompts_per_step;
    uint64_t *idx = malloc((size_t)P * sizeof *idx);
    double *adv = malloc((size_t)(P * rc.group_size) * sizeof *adv);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double acc = acc_start;
    int rl_steps = (int)s_set.rl_steps;
    bt_lr_schedule lr = {.kind = BT_LR_COSINE,
                         .lr = s_set.rl_lr,
                         .min_lr = s_set.rl_min_lr,
                         .warmup_steps = (int64_t)s_set.rl_warmup,
                         .total_steps = rl_steps};
    if (bt_lr_schedule_validate(&lr) != BT_OK)
        s_die("rl learning rate");
    for (int step = 1; step <= rl_steps; step++) {
        for (int64_t i = 0; i < P; i++)
            idx[i] = d.cursor++;
        double t = bt_now();
        bt_model *policy = bt_trainer_policy(d.trainer);
        if (bt_rollout_sample(policy, d.tok, d.task, idx, P, &rc, bt_trainer_version(d.trainer),
                              (d.seed + (uint64_t)step) << BT_JOB_SEED_BITS, &b) != BT_OK)
            s_die("rollout");
        double t_roll = bt_now() - t, rmean = 0;
        for (int64_t c = 0; c < b.n; c++)
            rmean += b.rewards[c] / (double)b.n;
        if (bt_grpo_advantages(b.rewards, b.n_prompts, b.group_size, gc.adv_norm, adv) != BT_OK)
            s_die("advantages");
        int64_t groups = s_set.drop_zero_var ? s_drop_flat_groups(&b, adv) : b.n_prompts;
        bt_trainer_stats st = {0};
        if (groups > 0 &&
            bt_trainer_grpo_step(d.trainer, &b, adv, bt_lr_at(&lr, step - 1), &gc, &st) != BT_OK)
            s_die("grpo step");
        s_compute += bt_now() - t;
        if (s_set.verbose)
            printf("{\"bench\":\"demo\",\"phase\":\"rl_train\",\"step\":%d,\"reward_mean\":%.4f,"
                   "\"groups\":%lld,\"loss\":%.5f,\"entropy\":%.4f,\"clip_frac\":%.4f,"
                   "\"kl\":%.5f,\"grad_norm\":%.4f,\"rollout_s\":%.3f,\"step_s\":%.3f}\n",
                   step, rmean, (long long)groups, st.loss, st.entropy, st.clip_frac, st.kl,
                   st.grad_norm, t_roll, bt_now() - t);
        if (step % (int)s_set.eval_every == 0 || step == rl_steps)
            acc = s_eval(&d, "rl", step, &reward);
    }
    double wall = bt_now() - s_t0;
    printf("{\"bench\":\"demo\",\"seed\":%llu,\"sft_steps\":%d,\"rl_steps\":%d,"
           "\"acc_rl_start\":%.4f,\"acc_end\":%.4f,\"wall_s\":%.2f,\"model_compute_s\":%.2f,"
           "\"threads\":%d}\n",
           (unsigned long long)seed, sft_steps, rl_steps, acc_start, acc, wall, s_compute,
           bt_get_num_threads());
    bt_rollout_batch_release(&b);
    free(idx);
    free(adv);
    bt_trainer_destroy(&d.trainer);
    bt_source_destroy(&d.task);
    bt_tokenizer_destroy(&d.tok);
    return 0;
}
