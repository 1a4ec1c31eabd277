/*  test_lora.c — LoRA adapters (bt_model_add_lora, PEFT's parameterisation): the adapters'
    gradients against central finite differences of the loss in float64, a new adapter leaving
    the logits bit-identical, the adapters-off pass being the base model after training, the base
    weights untouched by the trainer, AdamW's state held for the adapters only, dropout drawing the
    same masks when activation checkpointing recomputes a layer, a merged model computing the
    adapted one's function, PEFT's folder layout written and read back, WEIGHTS carrying the
    adapters alone (a rollout model given them computes the trainer's log-probs), a restored
    trainer state holding the same adapters and moments, and sharded state over the adapters. */
#define _POSIX_C_SOURCE 200809L
#include "baton/fileio.h"
#include "baton/model.h"
#include "baton/msg.h"
#include "baton/rollout.h"
#include "baton/safetensors.h"
#include "baton/trainer.h"
#include "check.h"
#include "grpo_reference.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { S_B = 2, S_T = 7 };

static bt_model_config s_config(void) {
    bt_model_config c;
    bt_model_config_init(&c);
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 64;
    return c;
}

static bt_lora_config s_lora(int64_t rank, double alpha, double dropout) {
    bt_lora_config l;
    bt_lora_config_init(&l);
    l.rank = rank;
    l.alpha = alpha;
    l.dropout = dropout;
    return l;
}

/*  ids (S_B, S_T) and a mask with the second row's last two tokens padding. */
static void s_batch(bt_ctx *ctx, bt_tensor **ids, bt_tensor **mask) {
    int64_t h_ids[S_B * S_T], h_mask[S_B * S_T];
    for (int i = 0; i < S_B * S_T; i++) {
        h_ids[i] = (i * 37 + 11) % 256;
        h_mask[i] = !(i >= S_T && i % S_T >= S_T - 2);
    }
    const int64_t shape[] = {S_B, S_T};
    *ids = bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, h_ids);
    *mask = bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, h_mask);
}

/*  The largest |a - b| of two tensors of equal size, read as float64. */
static double s_max_diff(bt_ctx *ctx, bt_tensor *a, bt_tensor *b) {
    double d = NAN;
    CHECK_OK(bt_item(bt_max(ctx,
                            bt_reshape(ctx,
                                       bt_abs(ctx, bt_sub(ctx, bt_to_dtype(ctx, a, BT_F64),
                                                          bt_to_dtype(ctx, b, BT_F64))),
                                       1, (const int64_t[]){-1}),
                            0, false),
                     &d));
    return d;
}

static bt_tensor *s_logits(bt_model *m, bt_ctx *ctx) {
    bt_tensor *ids, *mask;
    s_batch(ctx, &ids, &mask);
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *logits = bt_model_forward(m, ctx, ids, mask);
    bt_set_grad_enabled(grad);
    return logits;
}

/*  The loss of the FD check: sum over real next tokens of w_t log p(ids[t+1]), w_t fixed
    weights in [-1, 1] (so no gradient vanishes by symmetry). */
static bt_tensor *s_loss(bt_model *m, bt_ctx *ctx) {
    bt_tensor *ids, *mask;
    s_batch(ctx, &ids, &mask);
    bt_tensor *logp = bt_model_token_logprobs(m, ctx, ids, mask, 1.0, NULL); /* (B, T-1) */
    double w[S_B * (S_T - 1)];
    for (int i = 0; i < S_B * (S_T - 1); i++)
        w[i] = (i >= S_T - 1 && i % (S_T - 1) >= S_T - 3) ? 0.0 : cos(1.7 * i + 0.3);
    const int64_t shape[] = {S_B, S_T - 1};
    bt_tensor *tw =
        bt_to_dtype(ctx, bt_from_host(ctx, BT_F64, bt_cpu(), 2, shape, w), bt_dtype_of(logp));
    return bt_sum_all(ctx, bt_mul(ctx, logp, tw));
}

/*  Fills every adapter tensor with N(0, scale^2) draws (B included, so A's gradient is not 0). */
static void s_randomise_adapters(bt_model *m, uint64_t seed, double scale) {
    bt_ctx *ctx = bt_ctx_new();
    bt_gen *gen = bt_gen_new(seed, bt_cpu());
    bool grad = bt_set_grad_enabled(false);
    for (int i = 0; i < bt_model_num_params(m); i++) {
        bt_tensor *p = bt_model_params(m)[i];
        const int64_t shape[] = {bt_dim(p, 0), bt_dim(p, 1)};
        CHECK_OK(
            bt_copy_(p, bt_mul_scalar(ctx, bt_randn(ctx, gen, bt_dtype_of(p), 2, shape), scale)));
    }
    bt_set_grad_enabled(grad);
    bt_gen_destroy(&gen);
    bt_ctx_destroy(&ctx);
}

/*  In float64 (bt_model_cast), d loss / d theta of autograd against the central difference
    (L(theta + h) - L(theta - h)) / 2h, h = 1e-5, at elements of every adapter tensor of every
    layer and target.  The difference's error is O(h^2 L''') + O(eps L / h), about 1e-9 here. */
static void test_gradients_match_finite_differences(void) {
    bt_model_config c = s_config();
    bt_model *m = bt_model_new(&c, bt_cpu(), 5);
    bt_lora_config l = s_lora(3, 6.0, 0.0);
    CHECK_OK(bt_model_add_lora(m, &l, 9));
    CHECK(bt_model_num_params(m) == 2 * 2 * BT_LORA_TARGETS); /* layers x targets x (A, B) */
    CHECK_OK(bt_model_cast(m, BT_F64));
    s_randomise_adapters(m, 4, 0.3);
    bt_ctx *ctx = bt_ctx_new();
    bt_tensor *loss = s_loss(m, ctx);
    CHECK(bt_dtype_of(loss) == BT_F64);
    CHECK_OK(bt_backward(loss));
    for (int i = 0; i < bt_model_num_base_params(m); i++) /* the base is frozen */
        CHECK(!bt_requires_grad(bt_model_base_params(m)[i]));

    const double h = 1e-5;
    double worst_abs = 0, worst_rel = 0;
    int checked = 0;
    for (int i = 0; i < bt_model_num_params(m); i++) {
        bt_tensor *p = bt_model_params(m)[i];
        int64_t n = bt_numel(p);
        double *grad = malloc((size_t)n * sizeof *grad), *value = malloc((size_t)n * sizeof *value);
        CHECK_OK(bt_to_host(bt_grad(ctx, p), grad, (size_t)n * sizeof *grad));
        CHECK_OK(bt_to_host(p, value, (size_t)n * sizeof *value));
        for (int64_t e = (i * 5) % 3; e < n; e += n / 3 + 1) { /* three elements per tensor */
            double at[2];
            for (int s = 0; s < 2; s++) {
                double saved = value[e];
                value[e] = saved + (s ? -h : h);
                bool g = bt_set_grad_enabled(false);
                CHECK_OK(bt_copy_(p, bt_from_host(ctx, BT_F64, bt_cpu(), 2,
                                                  (const int64_t[]){bt_dim(p, 0), bt_dim(p, 1)},
                                                  value)));
                CHECK_OK(bt_item(s_loss(m, ctx), &at[s]));
                bt_set_grad_enabled(g);
                value[e] = saved;
            }
            double fd = (at[0] - at[1]) / (2 * h), diff = fabs(fd - grad[e]);
            worst_abs = fmax(worst_abs, diff);
            worst_rel = fmax(worst_rel, diff / fmax(fabs(fd), 1e-3));
            CHECK(diff <= 1e-7 + 1e-6 * fabs(fd));
            CHECK(fabs(fd) > 0 || i % 2 == 0); /* B's gradient is never 0 here */
            checked++;
        }
        bool g = bt_set_grad_enabled(false);
        CHECK_OK(bt_copy_(p, bt_from_host(ctx, BT_F64, bt_cpu(), 2,
                                          (const int64_t[]){bt_dim(p, 0), bt_dim(p, 1)}, value)));
        bt_set_grad_enabled(g);
        free(grad);
        free(value);
    }
    printf("{\"test\":\"lora_fd\",\"elements\":%d,\"max_abs_err\":%.3g,\"max_rel_err\":%.3g}\n",
           checked, worst_abs, worst_rel);
    CHECK(checked >= 3 * bt_model_num_params(m));
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
}

/*  B = 0: a new adapter's logits are the base model's to the last bit, decode included; A is
    U(-1/sqrt(in), 1/sqrt(in)) as PEFT's kaiming_uniform_(a = sqrt(5)) draws it. */
static void test_new_adapters_leave_the_model_unchanged(void) {
    bt_model_config c = s_config();
    bt_model *base = bt_model_new(&c, bt_cpu(), 5), *m = bt_model_new(&c, bt_cpu(), 5);
    bt_lora_config l = s_lora(4, 8.0, 0.1);
    CHECK_OK(bt_model_add_lora(m, &l, 1));
    CHECK(bt_model_add_lora(m, &l, 1) == BT_EINVAL); /* once */
    bt_ctx *ctx = bt_ctx_new();
    CHECK(s_max_diff(ctx, s_logits(m, ctx), s_logits(base, ctx)) == 0.0);

    bt_tensor *A = bt_model_find_param(m, "model.layers.1.mlp.down_proj.lora_A.weight");
    bt_tensor *B = bt_model_find_param(m, "model.layers.1.mlp.down_proj.lora_B.weight");
    CHECK(A && B && bt_dim(A, 0) == 4 && bt_dim(A, 1) == c.intermediate_size);
    CHECK(B && bt_dim(B, 0) == c.hidden_size && bt_dim(B, 1) == 4);
    float a[4 * 24];
    CHECK_OK(bt_to_host(A, a, sizeof a));
    double bound = 1.0 / sqrt(24.0), lo = 1, hi = -1, mean = 0;
    for (int i = 0; i < 4 * 24; i++) {
        lo = fmin(lo, a[i]);
        hi = fmax(hi, a[i]);
        mean += a[i] / (4 * 24.0);
    }
    CHECK(lo >= -bound && hi <= bound && lo < -0.8 * bound && hi > 0.8 * bound);
    CHECK(fabs(mean) < 0.3 * bound); /* uniform: mean 0, sd bound / sqrt(3 * 96) */
    CHECK(bt_model_find_param(m, "model.layers.0.self_attn.q_proj.weight") ==
          bt_model_base_params(m)[2]);
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&base);
    bt_model_destroy(&m);
}

/*  A supervised batch of 4 rows: BOS, digits, then digits to learn. */
static void s_sft_batch(bt_rollout_batch *b) {
    bt_rollout_batch_init(b);
    CHECK_OK(bt_rollout_batch_alloc(b, 4, 1, 4, 4));
    b->temperature = 1.0;
    for (int64_t r = 0; r < 4; r++) {
        int32_t *p = b->prompt_tokens + r * b->max_prompt_len,
                *t = b->tokens + r * b->max_new_tokens;
        p[0] = 256;
        for (int i = 1; i < 4; i++)
            p[i] = (int32_t)('0' + (r * 3 + i) % 10);
        for (int j = 0; j < 4; j++)
            t[j] = (int32_t)('a' + (r + j) % 5);
        b->prompt_lens[r] = 4;
        b->lengths[r] = 4;
    }
}

/*  The trainer on a LoRA policy: AdamW holds moments for the adapters alone (the state has no
    base tensor), the base weights end where they started, the adapters-off pass is the base
    model bit for bit, and the KL term is taken against it (0 before training, > 0 after). */
static void test_trainer_trains_the_adapters_alone(void) {
    bt_model_config c = s_config();
    bt_model *base = bt_model_new(&c, bt_cpu(), 5), *m = bt_model_new(&c, bt_cpu(), 5);
    bt_lora_config l = s_lora(4, 8.0, 0.0);
    CHECK_OK(bt_model_add_lora(m, &l, 2));
    int adapters = bt_model_num_params(m);
    bt_trainer_config tc;
    bt_trainer_config_init(&tc);
    tc.reference = true;
    bt_trainer_t *tr = bt_trainer_new(&m, &tc);
    CHECK(tr && !m);
    bt_model *policy = bt_trainer_policy(tr);
    CHECK(bt_trainer_reference(tr) == NULL); /* no second copy */

    bt_rollout_batch b;
    s_sft_batch(&b);
    bt_ctx *ctx = bt_ctx_new();
    bt_grpo_config gc = bt_test_grpo_config(); /* kl_coef 0.04 */
    const double adv[4] = {1.0, -1.0, 0.5, -0.5};
    bt_trainer_stats st;
    CHECK_OK(bt_trainer_grpo_step(tr, &b, adv, 1e-2, &gc, &st));
    CHECK(st.kl == 0.0); /* B was 0: policy = base */
    for (int k = 0; k < 5; k++)
        CHECK_OK(bt_trainer_sft_step(tr, &b, 1e-2, &st));
    CHECK(s_max_diff(ctx, s_logits(policy, ctx), s_logits(base, ctx)) > 1e-3); /* it learned */
    CHECK(bt_model_set_adapters_enabled(policy, false));
    CHECK(s_max_diff(ctx, s_logits(policy, ctx), s_logits(base, ctx)) == 0.0);
    CHECK(!bt_model_set_adapters_enabled(policy, true));
    for (int i = 0; i < bt_model_num_base_params(base); i++)
        CHECK(s_max_diff(ctx, bt_model_base_params(policy)[i], bt_model_base_params(base)[i]) == 0);
    CHECK_OK(bt_trainer_grpo_step(tr, &b, adv, 1e-2, &gc, &st));
    CHECK(st.kl > 0);

    bt_msg_t *state = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_trainer_state_to_msg(tr, state));
    int moments = 0, other = 0;
    for (int i = 0; i < bt_msg_tensor_count(state); i++) {
        const char *name = bt_msg_tensor_at(state, i).name;
        if (strncmp(name, "exp_avg", 7) == 0)
            moments++;
        if (!strstr(name, ".lora_A.weight") && !strstr(name, ".lora_B.weight"))
            other++;
    }
    CHECK(moments == 2 * adapters && other == 0);
    bt_msg_destroy(&state);
    bt_rollout_batch_release(&b);
    bt_ctx_destroy(&ctx);
    bt_trainer_destroy(&tr);
    bt_model_destroy(&base);
}

/*  Sum of |gradient| differences of two models' adapters after one backward each. */
static double s_grad_diff(bt_model *a, bt_model *b, bt_ctx *ctx) {
    double worst = 0;
    for (int i = 0; i < bt_model_num_params(a); i++)
        worst = fmax(worst, s_max_diff(ctx, bt_grad(ctx, bt_model_params(a)[i]),
                                       bt_grad(ctx, bt_model_params(b)[i])));
    return worst;
}

/*  Dropout: training forwards drop (two differ), no-grad forwards do not (they equal the plain
    model's), and activation checkpointing's recomputation draws the same masks, so its
    gradients are the plain pass's. */
static void test_dropout_is_deterministic_under_checkpointing(void) {
    bt_model_config c = s_config();
    bt_lora_config l = s_lora(4, 8.0, 0.5);
    bt_model *m[3];
    for (int k = 0; k < 3; k++) {
        m[k] = bt_model_new(&c, bt_cpu(), 5);
        CHECK_OK(bt_model_add_lora(m[k], &l, 3));
        s_randomise_adapters(m[k], 8, 0.2);
    }
    bt_lora_config l0 = s_lora(4, 8.0, 0.0);
    bt_model *plain = bt_model_new(&c, bt_cpu(), 5);
    CHECK_OK(bt_model_add_lora(plain, &l0, 3));
    s_randomise_adapters(plain, 8, 0.2);
    bt_model_set_activation_checkpointing(m[1], true);
    bt_ctx *ctx = bt_ctx_new();
    CHECK(s_max_diff(ctx, s_logits(m[0], ctx), s_logits(plain, ctx)) == 0.0);
    for (int k = 0; k < 2; k++)
        CHECK_OK(bt_backward(s_loss(m[k], ctx)));
    CHECK(s_grad_diff(m[0], m[1], ctx) < 1e-5);
    CHECK_OK(bt_backward(s_loss(plain, ctx)));
    CHECK(s_grad_diff(m[0], plain, ctx) > 1e-3); /* it dropped */
    /* the next training forward draws new masks */
    bt_tensor *ids, *mask;
    s_batch(ctx, &ids, &mask);
    bt_tensor *first = bt_model_forward(m[2], ctx, ids, mask);
    bt_tensor *second = bt_model_forward(m[2], ctx, ids, mask);
    CHECK(s_max_diff(ctx, first, second) > 1e-4);
    /* the same under bf16 autocast (run.precision bf16), whose dropout draws in the activations'
       dtype: the recomputation reruns the first run's casts and masks */
    bt_model *bf[2];
    for (int k = 0; k < 2; k++) {
        bf[k] = bt_model_new(&c, bt_cpu(), 5);
        CHECK_OK(bt_model_add_lora(bf[k], &l, 3));
        s_randomise_adapters(bf[k], 8, 0.2);
        CHECK_OK(bt_model_set_precision(bf[k], BT_BF16));
        bt_model_set_activation_checkpointing(bf[k], k == 1);
        CHECK_OK(bt_backward(s_loss(bf[k], ctx)));
    }
    CHECK(s_grad_diff(bf[0], bf[1], ctx) < 1e-5);
    CHECK(s_grad_diff(bf[0], plain, ctx) > 1e-3); /* real gradients, with their own masks */
    for (int k = 0; k < 2; k++)
        bt_model_destroy(&bf[k]);
    bt_ctx_destroy(&ctx);
    for (int k = 0; k < 3; k++)
        bt_model_destroy(&m[k]);
    bt_model_destroy(&plain);
}

/*  bt_model_merge_lora: W + (alpha / r) B A computes the adapted model's logits, as a plain model
    (no adapters left, its base weights trained again). */
static void test_merge_computes_the_same_function(void) {
    bt_model_config c = s_config();
    bt_model *m = bt_model_new(&c, bt_cpu(), 5);
    bt_lora_config l = s_lora(2, 4.0, 0.0);
    l.targets = (1u << BT_LORA_Q_PROJ) | (1u << BT_LORA_V_PROJ) | (1u << BT_LORA_DOWN_PROJ);
    CHECK_OK(bt_model_add_lora(m, &l, 2));
    CHECK(bt_model_num_params(m) == 2 * 3 * 2);
    s_randomise_adapters(m, 6, 0.3);
    bt_ctx *ctx = bt_ctx_new();
    bt_tensor *adapted = s_logits(m, ctx);
    CHECK_OK(bt_model_merge_lora(m));
    CHECK(!bt_model_lora(m) && bt_model_num_params(m) == bt_model_num_base_params(m));
    CHECK(bt_requires_grad(bt_model_params(m)[0]));
    bt_model *base = bt_model_new(&c, bt_cpu(), 5);
    double moved = s_max_diff(ctx, s_logits(base, ctx), adapted),
           err = s_max_diff(ctx, s_logits(m, ctx), adapted);
    printf("{\"test\":\"lora_merge\",\"adapter_effect\":%.3g,\"merged_err\":%.3g}\n", moved, err);
    CHECK(moved > 1e-3 && err < 1e-5);
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&m);
    bt_model_destroy(&base);
}

/*  A policy trained with LoRA (5 SFT steps), for the folder, sync and resume tests. */
static bt_trainer_t *s_trained(bt_lora_config l) {
    bt_model_config c = s_config();
    bt_model *m = bt_model_new(&c, bt_cpu(), 5);
    CHECK_OK(bt_model_add_lora(m, &l, 2));
    bt_trainer_config tc;
    bt_trainer_config_init(&tc);
    bt_trainer_t *tr = bt_trainer_new(&m, &tc);
    bt_rollout_batch b;
    s_sft_batch(&b);
    bt_trainer_stats st;
    for (int k = 0; k < 5; k++)
        CHECK_OK(bt_trainer_sft_step(tr, &b, 1e-2, &st));
    bt_rollout_batch_release(&b);
    return tr;
}

static char *s_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = calloc(1, 1 << 16);
    if (f && text)
        CHECK(fread(text, 1, (1 << 16) - 1, f) > 0);
    if (f)
        fclose(f);
    return text;
}

/*  bt_model_save of a LoRA model: the base beside PEFT's adapter folder (PEFT's tensor names,
    no ".default"; adapter_config.json's LoraConfig fields); bt_model_load gives the same logits;
    merged and saved, the plain folder gives them too. */
static void test_adapter_folder(void) {
    bt_lora_config l = s_lora(4, 8.0, 0.05);
    l.targets = (1u << BT_LORA_Q_PROJ) | (1u << BT_LORA_V_PROJ) | (1u << BT_LORA_UP_PROJ);
    bt_trainer_t *tr = s_trained(l);
    bt_model *m = bt_trainer_policy(tr);
    char dir[] = "/tmp/test_lora_XXXXXX", merged[64], path[128];
    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(bt_model_save(m, NULL, dir));

    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    bt_safetensors_t *st = NULL;
    CHECK_OK(bt_safetensors_open(path, &st));
    CHECK(st && bt_safetensors_count(st) == 2 * 2 * 3);
    const bt_st_entry *e =
        st ? bt_safetensors_find(st, "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight")
           : NULL;
    CHECK(e && e->dtype == BT_F32 && e->ndim == 2 && e->shape[0] == 24 && e->shape[1] == 4);
    CHECK(st && bt_safetensors_find(st, "base_model.model.model.layers.0.self_attn.v_proj.lora_A"
                                        ".weight"));
    for (int i = 0; st && i < bt_safetensors_count(st); i++)
        CHECK(!strstr(bt_safetensors_entry(st, i)->name, "default"));
    bt_safetensors_destroy(&st);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *config = s_read_text(path);
    CHECK_STR_CONTAINS(config, "\"peft_type\":\t\"LORA\"");
    CHECK_STR_CONTAINS(config, "\"task_type\":\t\"CAUSAL_LM\"");
    CHECK_STR_CONTAINS(config, "\"r\":\t4");
    CHECK_STR_CONTAINS(config, "\"lora_alpha\":\t8");
    CHECK_STR_CONTAINS(config, "\"lora_dropout\":\t0.05");
    CHECK_STR_CONTAINS(config, "\"target_modules\":\t[\"q_proj\", \"v_proj\", \"up_proj\"]");
    CHECK_STR_CONTAINS(config, "\"bias\":\t\"none\"");
    CHECK_STR_CONTAINS(config, "\"base_model_name_or_path\":\t\"/tmp/test_lora_");
    free(config);

    bt_ctx *ctx = bt_ctx_new();
    bt_tensor *want = s_logits(m, ctx);
    bt_model *back = bt_model_load(dir, bt_cpu());
    CHECK(back && bt_model_lora(back) && bt_model_lora(back)->targets == l.targets);
    CHECK(back && bt_model_lora(back)->rank == 4 && bt_model_lora(back)->dropout == 0.05);
    CHECK(back && s_max_diff(ctx, s_logits(back, ctx), want) == 0.0);
    CHECK(back && bt_model_merge_lora(back) == BT_OK);
    snprintf(merged, sizeof merged, "%s/merged", dir);
    CHECK(back && bt_model_save(back, NULL, merged) == BT_OK);
    snprintf(path, sizeof path, "%s/adapter_config.json", merged);
    CHECK(access(path, F_OK) != 0); /* a plain Hugging Face folder */
    bt_model *plain = bt_model_load(merged, bt_cpu());
    CHECK(plain && !bt_model_lora(plain));
    double err = plain ? s_max_diff(ctx, s_logits(plain, ctx), want) : 1;
    printf("{\"test\":\"lora_export_merge\",\"max_abs_logit_err\":%.3g}\n", err);
    CHECK(err < 1e-5);

    /* a folder PEFT could not have written is refused by name */
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"use_dora\": true,"
          " \"target_modules\": [\"q_proj\"]}",
          f);
    fclose(f);
    CHECK(bt_model_load(dir, bt_cpu()) == NULL);
    CHECK_STR_CONTAINS(bt_last_error(), "use_dora: expected false (not supported), got true");
    bt_model_destroy(&plain);
    bt_model_destroy(&back);
    bt_ctx_destroy(&ctx);
    bt_trainer_destroy(&tr);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/*  WEIGHTS under LoRA carry the adapters alone: a rollout worker's model (the same base and
    adapters from run.seed) given them computes the trainer's log-probs exactly; full weights
    are refused by a LoRA model. */
static void test_weight_sync(void) {
    bt_lora_config l = s_lora(4, 8.0, 0.0);
    bt_trainer_t *tr = s_trained(l);
    bt_model *policy = bt_trainer_policy(tr);
    bt_weights w;
    bt_weights_init(&w);
    CHECK_OK(bt_weights_export(policy, bt_trainer_version(tr), &w));
    CHECK(w.n == bt_model_num_params(policy) && w.n == 2 * 2 * BT_LORA_TARGETS);
    int64_t sent = 0, full = 0;
    for (int i = 0; i < w.n; i++) {
        sent += w.numel[i];
        CHECK(strstr(w.names[i], ".lora_A.weight") || strstr(w.names[i], ".lora_B.weight"));
    }
    for (int i = 0; i < bt_model_num_base_params(policy); i++)
        full += bt_numel(bt_model_base_params(policy)[i]);
    printf("{\"test\":\"lora_sync\",\"floats_sent\":%lld,\"full_floats\":%lld}\n", (long long)sent,
           (long long)full);
    CHECK(sent * 5 < full);

    bt_model_config c = s_config();
    bt_model *rollout = bt_model_new(&c, bt_cpu(), 5);
    CHECK_OK(bt_model_add_lora(rollout, &l, 2));
    bt_ctx *ctx = bt_ctx_new();
    bt_tensor *ids, *mask;
    s_batch(ctx, &ids, &mask);
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *want = bt_model_token_logprobs(policy, ctx, ids, mask, 0.7, NULL);
    CHECK(s_max_diff(ctx, bt_model_token_logprobs(rollout, ctx, ids, mask, 0.7, NULL), want) >
          1e-4);
    CHECK_OK(bt_weights_load(rollout, &w));
    CHECK(s_max_diff(ctx, bt_model_token_logprobs(rollout, ctx, ids, mask, 0.7, NULL), want) == 0);
    bt_set_grad_enabled(grad);

    bt_model *plain = bt_model_new(&c, bt_cpu(), 5);
    bt_weights all;
    bt_weights_init(&all);
    CHECK_OK(bt_weights_export(plain, 0, &all));
    CHECK(bt_weights_load(rollout, &all) == BT_EINVAL);
    bt_weights_release(&all);
    bt_weights_release(&w);
    bt_model_destroy(&plain);
    bt_model_destroy(&rollout);
    bt_ctx_destroy(&ctx);
    bt_trainer_destroy(&tr);
}

/*  A trainer's state (checkpoints, resume) under LoRA holds the adapters and their moments: a new
    trainer restored from it holds the same adapters and moments to the bit, and the next step
    moves both alike. */
static void test_resume_restores_adapters(void) {
    bt_lora_config l = s_lora(4, 8.0, 0.0);
    bt_trainer_t *a = s_trained(l);
    bt_msg_t *state = bt_msg_new(BT_MSG_RESULT);
    CHECK_OK(bt_trainer_state_to_msg(a, state));
    bt_model_config c = s_config();
    bt_model *m = bt_model_new(&c, bt_cpu(), 5);
    CHECK_OK(bt_model_add_lora(m, &l, 77)); /* another A: the state must replace it */
    bt_trainer_config tc;
    bt_trainer_config_init(&tc);
    bt_trainer_t *b = bt_trainer_new(&m, &tc);
    CHECK_OK(bt_trainer_state_from_msg(state, bt_trainer_version(a), b));
    bt_rollout_batch batch;
    s_sft_batch(&batch);
    bt_trainer_stats st;
    CHECK_OK(bt_trainer_sft_step(a, &batch, 1e-2, &st));
    CHECK_OK(bt_trainer_sft_step(b, &batch, 1e-2, &st));
    bt_ctx *ctx = bt_ctx_new();
    bt_model *pa = bt_trainer_policy(a), *pb = bt_trainer_policy(b);
    double worst = 0;
    for (int i = 0; i < bt_model_num_params(pa); i++) {
        bt_tensor *ma[2], *mb[2];
        CHECK_OK(bt_adamw_moments(bt_trainer_optimizer(a), i, &ma[0], &ma[1]));
        CHECK_OK(bt_adamw_moments(bt_trainer_optimizer(b), i, &mb[0], &mb[1]));
        worst = fmax(worst, s_max_diff(ctx, bt_model_params(pa)[i], bt_model_params(pb)[i]));
        worst = fmax(worst, s_max_diff(ctx, ma[0], mb[0]) + s_max_diff(ctx, ma[1], mb[1]));
    }
    CHECK(worst == 0.0);
    CHECK(bt_adamw_steps(bt_trainer_optimizer(b)) == 6);
    bt_ctx_destroy(&ctx);
    bt_rollout_batch_release(&batch);
    bt_msg_destroy(&state);
    bt_trainer_destroy(&a);
    bt_trainer_destroy(&b);
}

/*  workers.shard under LoRA: the flat sharded layout is the adapters' (bt_model_params), and a
    sharded trainer (a group of one) takes the replicated trainer's steps. */
static void test_sharded_adapters(void) {
    bt_model_config c = s_config();
    bt_lora_config l = s_lora(4, 8.0, 0.0);
    bt_trainer_t *tr[2];
    for (int k = 0; k < 2; k++) {
        bt_model *m = bt_model_new(&c, bt_cpu(), 5);
        CHECK_OK(bt_model_add_lora(m, &l, 2));
        bt_trainer_config tc;
        bt_trainer_config_init(&tc);
        tc.shard = k ? BT_SHARD_GRADIENTS : BT_SHARD_NONE;
        tr[k] = bt_trainer_new(&m, &tc);
        CHECK(tr[k] != NULL);
    }
    bt_rollout_batch b;
    s_sft_batch(&b);
    bt_trainer_stats st;
    for (int step = 0; step < 3; step++)
        for (int k = 0; k < 2; k++)
            CHECK_OK(bt_trainer_sft_step(tr[k], &b, 1e-2, &st));
    bt_ctx *ctx = bt_ctx_new();
    bt_model *a = bt_trainer_policy(tr[0]), *z = bt_trainer_policy(tr[1]);
    double worst = 0, moved = 0;
    for (int i = 0; i < bt_model_num_params(a); i++) {
        worst = fmax(worst, s_max_diff(ctx, bt_model_params(a)[i], bt_model_params(z)[i]));
        moved = fmax(moved, s_max_diff(ctx, bt_model_params(z)[i],
                                       bt_mul_scalar(ctx, bt_model_params(z)[i], 0.0)));
    }
    CHECK(worst < 1e-6 && moved > 1e-3);
    bt_model *base = bt_model_new(&c, bt_cpu(), 5);
    for (int i = 0; i < bt_model_num_base_params(base); i++)
        CHECK(s_max_diff(ctx, bt_model_base_params(z)[i], bt_model_base_params(base)[i]) == 0);
    bt_model_destroy(&base);
    bt_ctx_destroy(&ctx);
    bt_rollout_batch_release(&b);
    for (int k = 0; k < 2; k++)
        bt_trainer_destroy(&tr[k]);
}

/*  A LoRA model loaded from a bf16 checkpoint holds its frozen base's matrices as bf16 (half
    their bytes), the embedding and norms float32, and computes what the same model with its base
    upcast to float32 computes, bit for bit: the logits, and the adapters' gradients. */
static void test_base_in_checkpoint_dtype(void) {
    bt_model_config c = s_config();
    bt_model *src = bt_model_new(&c, bt_cpu(), 9);
    CHECK_OK(bt_model_set_save_dtype(src, BT_BF16));
    char dir[] = "/tmp/bt_lora_bf16_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(bt_model_save(src, NULL, dir));
    bt_model *half = bt_model_load(dir, bt_cpu()), *full = bt_model_load(dir, bt_cpu());
    CHECK(half && full && bt_model_save_dtype(half) == BT_BF16);
    CHECK_OK(bt_model_set_save_dtype(full, BT_F32)); /* its base stays float32 */
    bt_lora_config l = s_lora(4, 8.0, 0.0);
    CHECK_OK(bt_model_add_lora(half, &l, 3));
    CHECK_OK(bt_model_add_lora(full, &l, 3));
    s_randomise_adapters(half, 11, 0.1);
    s_randomise_adapters(full, 11, 0.1);
    size_t held = 0, upcast = 0;
    int matrices = 0;
    for (int i = 0; i < bt_model_num_base_params(half); i++) {
        bt_tensor *h = bt_model_base_params(half)[i], *f = bt_model_base_params(full)[i];
        const char *name = bt_model_base_param_name(half, i);
        bool matrix = bt_ndim(h) == 2 && strcmp(name, "model.embed_tokens.weight") != 0;
        CHECK(bt_dtype_of(h) == (matrix ? BT_BF16 : BT_F32) && bt_dtype_of(f) == BT_F32);
        matrices += matrix;
        held += (size_t)bt_numel(h) * bt_dtype_size(bt_dtype_of(h));
        upcast += (size_t)bt_numel(f) * bt_dtype_size(bt_dtype_of(f));
    }
    CHECK(matrices == 7 * (int)c.num_hidden_layers + !c.tie_word_embeddings);
    printf("LoRA base from a bf16 checkpoint: %zu bytes held, %zu as float32\n", held, upcast);
    CHECK(held < upcast && held > upcast / 2);
    bt_ctx *ctx = bt_ctx_new();
    CHECK(s_max_diff(ctx, s_logits(half, ctx), s_logits(full, ctx)) == 0.0);
    CHECK_OK(bt_backward(s_loss(half, ctx)));
    CHECK_OK(bt_backward(s_loss(full, ctx)));
    double worst = 0;
    for (int i = 0; i < bt_model_num_params(half); i++)
        worst = fmax(worst, s_max_diff(ctx, bt_grad(ctx, bt_model_params(half)[i]),
                                       bt_grad(ctx, bt_model_params(full)[i])));
    CHECK(worst == 0.0);
    bt_ctx_destroy(&ctx);
    bt_model_destroy(&half);
    bt_model_destroy(&full);
    bt_model_destroy(&src);
    CHECK_OK(bt_rmtree(dir));
}

int main(void) {
    test_gradients_match_finite_differences();
    test_new_adapters_leave_the_model_unchanged();
    test_trainer_trains_the_adapters_alone();
    test_dropout_is_deterministic_under_checkpointing();
    test_merge_computes_the_same_function();
    test_adapter_folder();
    test_weight_sync();
    test_resume_restores_adapters();
    test_sharded_adapters();
    test_base_in_checkpoint_dtype();
    return check_exit();
}
