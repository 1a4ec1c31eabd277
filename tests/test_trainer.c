/*  test_trainer.c — the rollout, trainer and evaluator cores on a tiny Llama model: the GRPO step's
    loss against bt_grpo_loss on independently built tensors and against its closed form at ratio 1,
    the completion mask against unpadded per-row log-probs, exact micro-batch accumulation, the
    same gradients and statistics from every batching mode (pad, bucket, pack) and with each group's
    prompt shared (grpo.share_prefix), data-parallel ranks against one trainer, SFT learning,
   rollout records against recomputation, evaluation shards, weight transfer, and bf16 autocast
   training (float32 master weights and AdamW state, float32-like loss curves). */
#include "baton/evaluator.h"
#include "baton/grpo.h"
#include "baton/model.h"
#include "baton/rollout.h"
#include "baton/source.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"
#include "baton/trainer.h"
#include "check.h"
#include "grpo_reference.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------------------- */

/*  The GRPO settings these tests were written against, stated here rather than taken from a
    library default (a config's are in config/config.c's key table): GRPO's kl_coef 0.04 with k3,
    DAPO's clip-higher, token-mean aggregation, Dr. GRPO's max_tokens 1024 for token_sum_norm. */

static bt_model_config s_tiny_config(void) {
    bt_model_config cfg;
    bt_model_config_init(&cfg);
    cfg.hidden_size = 32;
    cfg.intermediate_size = 64;
    cfg.num_hidden_layers = 2;
    cfg.num_attention_heads = 4;
    cfg.num_key_value_heads = 2;
    cfg.max_position_embeddings = 64;
    return cfg;
}

static bt_model *s_tiny_model(uint64_t seed) {
    bt_model_config cfg = s_tiny_config();
    bt_model *m = bt_model_new(&cfg, bt_cpu(), seed);
    CHECK(m != NULL);
    return m;
}

static bt_trainer_t *s_trainer_batching(uint64_t seed, int64_t micro_batch, bool reference,
                                        bt_batching batching, int64_t pack_tokens,
                                        bool share_prefix) {
    bt_model *m = s_tiny_model(seed);
    bt_trainer_config cfg;
    bt_trainer_config_init(&cfg);
    cfg.micro_batch = micro_batch;
    cfg.reference = reference;
    cfg.batching = batching;
    cfg.pack_tokens = pack_tokens;
    cfg.share_prefix = share_prefix;
    bt_trainer_t *t = bt_trainer_new(&m, &cfg);
    CHECK(t != NULL);
    CHECK(m == NULL); /* ownership taken */
    return t;
}

/*  The default batching ("bucket", prompts shared). */
static bt_trainer_t *s_trainer(uint64_t seed, int64_t micro_batch, bool reference) {
    bt_trainer_config cfg;
    bt_trainer_config_init(&cfg);
    return s_trainer_batching(seed, micro_batch, reference, cfg.batching, cfg.pack_tokens,
                              cfg.share_prefix);
}

/*  Log-probs at temperature of row (prompt ++ completion) alone, unpadded (B = 1): out[j] is the
    log-prob of completion token j.  An independent computation of what the trainer and the
    sampler must agree on. */
static void s_row_logprobs(bt_model *m, const int32_t *prompt, int64_t P, const int32_t *comp,
                           int64_t L, double temperature, float *out) {
    if (L == 0)
        return;
    bt_ctx *ctx = bt_ctx_new();
    int64_t T = P + L, ids[64], ones[64];
    CHECK(T <= 64);
    for (int64_t t = 0; t < T; t++) {
        ids[t] = t < P ? prompt[t] : comp[t - P];
        ones[t] = 1;
    }
    const int64_t shape[] = {1, T};
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *lp = bt_model_token_logprobs(
        m, ctx, bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ids),
        bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ones), temperature, NULL); /* (1, T-1) */
    bt_set_grad_enabled(grad);
    float all[64];
    CHECK_OK(bt_to_host(lp, all, (size_t)(T - 1) * sizeof *all));
    for (int64_t j = 0; j < L; j++)
        out[j] = all[P - 1 + j];
    bt_ctx_destroy(&ctx);
}

/*  A hand-made batch of 8 rows: prompt lengths 1..5 and completion lengths 0..5 (one empty),
    tokens from a fixed pattern, the last completion ending in EOS; behaviour log-probs are those
    of m at temperature, so the first GRPO step has ratio 1. */
static const int64_t s_plen[8] = {3, 5, 2, 4, 1, 5, 3, 2};
static const int64_t s_clen[8] = {2, 0, 4, 1, 5, 3, 2, 4};

static void s_hand_batch(bt_model *m, double temperature, bt_rollout_batch *b) {
    CHECK_OK(bt_rollout_batch_alloc(b, 4, 2, 5, 5));
    b->temperature = temperature;
    b->version = 0;
    for (int64_t c = 0; c < 8; c++) {
        int32_t *p = b->prompt_tokens + c * b->max_prompt_len;
        int32_t *t = b->tokens + c * b->max_new_tokens;
        p[0] = 256; /* BOS */
        for (int64_t i = 1; i < s_plen[c]; i++)
            p[i] = (int32_t)('0' + (c * 7 + i * 3) % 10);
        for (int64_t j = 0; j < s_clen[c]; j++)
            t[j] = (int32_t)('0' + (c * 5 + j * 11) % 10);
        if (c == 7)
            t[s_clen[c] - 1] = 257; /* EOS */
        b->prompt_lens[c] = s_plen[c];
        b->lengths[c] = s_clen[c];
        s_row_logprobs(m, p, s_plen[c], t, s_clen[c], temperature,
                       b->logprobs + c * b->max_new_tokens);
    }
}

static const double s_adv[8] = {1.0, -0.5, 0.25, -1.5, 0.75, -0.25, 2.0, -1.0};

/*  max |a - b| / max |b| over every parameter of two models. */
static double s_weights_rel_diff(bt_model *a, bt_model *b) {
    bt_weights wa, wb;
    bt_weights_init(&wa);
    bt_weights_init(&wb);
    CHECK_OK(bt_weights_export(a, 0, &wa));
    CHECK_OK(bt_weights_export(b, 0, &wb));
    double diff = 0, scale = 1e-30;
    for (int i = 0; i < wa.n && i < wb.n; i++) {
        CHECK(wa.dtype[i] == BT_F32 && wb.dtype[i] == BT_F32); /* float32 models */
        const float *fa = wa.data[i], *fb = wb.data[i];
        for (int64_t k = 0; k < wa.numel[i]; k++) {
            diff = fmax(diff, fabs((double)fa[k] - (double)fb[k]));
            scale = fmax(scale, fabs((double)fb[k]));
        }
    }
    bt_weights_release(&wa);
    bt_weights_release(&wb);
    return diff / scale;
}

/* ---- (a) the GRPO step's loss --------------------------------------------------------------- */

static void test_grpo_loss_matches(void) {
    const double temperature = 0.8;
    /* "pad" lays the batch out as the tensors below, so the two agree to the last bit; other
       layouts agree to float rounding (test_batching) */
    bt_trainer_t *tr = s_trainer_batching(11, 8, true, BT_BATCHING_PAD, 0, true);
    bt_model *m = bt_trainer_policy(tr);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    s_hand_batch(m, temperature, &b);

    /* The same loss built here: right-padded (8, 8) ids, mask 1 at t = P-1 .. P+L-2. */
    const int64_t B = 8, T = 8; /* the longest row: 5 + 3 */
    int64_t ids[8 * 8], mask[8 * 8], lengths[8];
    float cmask[8 * 7] = {0}, old[8 * 7] = {0}, adv32[8];
    for (int64_t c = 0; c < B; c++) {
        for (int64_t t = 0; t < T; t++) {
            int64_t P = s_plen[c], L = s_clen[c];
            ids[c * T + t] =
                t < P ? b.prompt_tokens[c * 5 + t] : (t < P + L ? b.tokens[c * 5 + t - P] : 258);
            mask[c * T + t] = t < P + L;
        }
        for (int64_t j = 0; j < s_clen[c]; j++) {
            cmask[c * (T - 1) + s_plen[c] - 1 + j] = 1.0f;
            old[c * (T - 1) + s_plen[c] - 1 + j] = b.logprobs[c * 5 + j];
        }
        lengths[c] = s_clen[c];
        adv32[c] = (float)s_adv[c];
    }
    bt_ctx *ctx = bt_ctx_new();
    const int64_t s2[] = {B, T}, s1[] = {B, T - 1};
    bt_tensor *tids = bt_from_host(ctx, BT_I64, bt_cpu(), 2, s2, ids);
    bt_tensor *tmask = bt_from_host(ctx, BT_I64, bt_cpu(), 2, s2, mask);
    bt_tensor *tc = bt_from_host(ctx, BT_F32, bt_cpu(), 2, s1, cmask);
    bt_tensor *told = bt_from_host(ctx, BT_F32, bt_cpu(), 2, s1, old);
    bt_tensor *tadv = bt_from_host(ctx, BT_F32, bt_cpu(), 1, &B, adv32);
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *ent = NULL;
    bt_tensor *logp = bt_model_token_logprobs(m, ctx, tids, tmask, temperature, &ent);
    bt_set_grad_enabled(grad);
    bt_grpo_config gc = bt_test_grpo_config(); /* kl_coef 0.04 against the (identical) reference */
    double norm = bt_grpo_normaliser(&gc, lengths, B);
    CHECK(norm == 21.0);
    bt_grpo_stats ref_stats = {0};
    double expect = NAN;
    CHECK_OK(bt_item(
        bt_grpo_loss(ctx, &gc, logp, told, logp, tadv, tc, NULL, ent, norm, &ref_stats), &expect));

    bt_trainer_stats st;
    CHECK_OK(bt_trainer_grpo_step(tr, &b, s_adv, 1e-3, &gc, &st));
    /* the batch's loss_mask is all ones (bt_rollout_batch_alloc's): the loss of every completion
       token, as bt_grpo_loss computes it from the tensors above, to the last bit */
    CHECK(st.loss == expect);
    /* closed form at rho = 1 and zero KL: -sum_i A_i L_i / sum_i L_i */
    double closed = 0;
    for (int c = 0; c < 8; c++)
        closed -= (double)(float)s_adv[c] * (double)s_clen[c] / 21.0;
    CHECK_NEAR(st.loss, closed, 1e-6);
    CHECK_NEAR(st.ratio_mean, 1.0, 1e-6);
    CHECK_NEAR(st.ratio_max, 1.0, 1e-6);
    CHECK(st.clip_frac == 0.0);
    CHECK_NEAR(st.kl, 0.0, 1e-6);
    CHECK_NEAR(st.entropy, ref_stats.entropy_sum / ref_stats.tokens, 1e-12);
    CHECK(st.tokens == 21.0 && st.sequences == 8);
    CHECK(st.version == 1 && bt_trainer_version(tr) == 1);
    CHECK(st.grad_norm > 0);

    /* The policy moved and the reference did not: a second step sees rho != 1 and KL > 0. */
    CHECK(s_weights_rel_diff(bt_trainer_policy(tr), bt_trainer_reference(tr)) > 1e-4);
    CHECK_OK(bt_trainer_grpo_step(tr, &b, s_adv, 1e-3, &gc, &st));
    CHECK(st.kl > 0 && fabs(st.ratio_mean - 1.0) > 1e-6);

    /* kl_coef > 0 without a reference is refused */
    bt_trainer_t *plain = s_trainer(11, 8, false);
    CHECK(bt_trainer_grpo_step(plain, &b, s_adv, 1e-3, &gc, &st) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "reference");
    bt_trainer_destroy(&plain);
    bt_trainer_destroy(&plain); /* idempotent */

    bt_ctx_destroy(&ctx);
    bt_rollout_batch_release(&b);
    bt_trainer_destroy(&tr);
    CHECK(tr == NULL);
}

/* ---- (b) the completion mask ---------------------------------------------------------------- */

static void test_completion_mask(void) {
    /* SFT at temperature 1 with lr 0: the loss is -sum(log-probs of the completion tokens) / 21,
       each computed here on its row alone.  A mask off by one position, or one covering a prompt
       token, gives another sum. */
    bt_trainer_t *tr = s_trainer(5, 3, false);
    bt_model *m = bt_trainer_policy(tr);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    s_hand_batch(m, 1.0, &b);
    double nll = 0;
    for (int64_t c = 0; c < 8; c++)
        for (int64_t j = 0; j < s_clen[c]; j++)
            nll -= b.logprobs[c * 5 + j];
    bt_trainer_stats st;
    CHECK_OK(bt_trainer_sft_step(tr, &b, 0.0, &st));
    CHECK_NEAR(st.loss, nll / 21.0, 1e-5);
    CHECK(st.tokens == 21.0);

    /* GRPO at ratio 1: every masked position holds the right token's log-prob (rho = 1 exactly
       there, to float rounding) and exactly 21 positions are masked. */
    bt_grpo_config gc = bt_test_grpo_config();
    gc.kl_coef = 0;
    CHECK_OK(bt_trainer_grpo_step(tr, &b, s_adv, 0.0, &gc, &st));
    CHECK(st.tokens == 21.0);
    CHECK_NEAR(st.ratio_max, 1.0, 1e-5);
    CHECK_NEAR(st.ratio_mean, 1.0, 1e-6);

    /* a prompt longer than its row is refused, naming the completion */
    b.prompt_lens[3] = 6;
    CHECK(bt_trainer_sft_step(tr, &b, 0.0, &st) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "completion 3");
    bt_rollout_batch_release(&b);
    bt_trainer_destroy(&tr);
}

/* ---- (b') multi-turn episodes: environment tokens in the completion ------------------------- */

/*  s_grad_trainer's trainer (AdamW's first moments are the step's gradients, weights unmoved) on
    a model of one decoder layer: an environment token reaches a gradient only through that
    layer's attention. */
static bt_trainer_t *s_episode_trainer(void) {
    bt_model_config mc = s_tiny_config();
    mc.num_hidden_layers = 1;
    bt_model *m = bt_model_new(&mc, bt_cpu(), 61), *other = bt_model_new(&mc, bt_cpu(), 62);
    bt_trainer_config cfg;
    bt_trainer_config_init(&cfg);
    cfg.adamw.beta1 = 0.0;
    cfg.adamw.weight_decay = 0.0;
    cfg.max_grad_norm = 0.0;
    cfg.micro_batch = 3; /* groups of two episodes: the second group split over micro-batches */
    cfg.reference = true;
    bt_trainer_t *t = bt_trainer_new(&m, &cfg);
    CHECK(t != NULL);
    CHECK_OK(bt_weights_copy(bt_trainer_policy(t), other)); /* policy != reference: KL > 0 */
    bt_model_destroy(&other);
    return t;
}

static double s_grad_rel_diff(bt_trainer_t *a, bt_trainer_t *b);

/*  Parameter i's gradient of trainer t's last step (AdamW's record of it) in host memory; *n
    its elements.  Caller frees. */
static float *s_grad(bt_trainer_t *t, int i, size_t *n) {
    bt_tensor *g = NULL, *v = NULL;
    CHECK_OK(bt_adamw_moments(bt_trainer_optimizer(t), i, &g, &v));
    *n = (size_t)bt_numel(g);
    float *h = malloc(*n * sizeof *h);
    CHECK_OK(bt_to_host(g, h, *n * sizeof *h));
    return h;
}

/*  Whether the last steps of a and b had the same gradients, bit for bit. */
static bool s_same_grads(bt_trainer_t *a, bt_trainer_t *b) {
    bool same = true;
    for (int i = 0; i < bt_model_num_params(bt_trainer_policy(a)); i++) {
        size_t n, nb;
        float *ha = s_grad(a, i, &n), *hb = s_grad(b, i, &nb);
        same = same && n == nb && memcmp(ha, hb, n * sizeof *ha) == 0;
        free(ha);
        free(hb);
    }
    return same;
}

/*  Four episodes in two groups (one prompt each): model turn 0 (3 tokens), an observation (2
    tokens, loss_mask 0), model turn 1 (3 tokens); episode 3 ends with one more observation token.
    Behaviour log-probs are the policy's at the model tokens (rho = 1 there) and 50 at the
    environment's, which would make rho = e^-50-ish if it were read. */
enum { S_EP_N = 4, S_EP_L = 9, S_EP_P = 3 };
static const uint8_t s_ep_mask[S_EP_L] = {1, 1, 1, 0, 0, 1, 1, 1, 0};
static const uint8_t s_ep_turn[S_EP_L] = {0, 0, 0, 0, 0, 1, 1, 1, 1};

static void s_episode_batch(bt_model *m, bt_rollout_batch *b) {
    CHECK_OK(bt_rollout_batch_alloc(b, 2, 2, S_EP_P, S_EP_L));
    b->temperature = 1.0;
    for (int64_t c = 0; c < S_EP_N; c++) {
        int32_t *p = b->prompt_tokens + c * S_EP_P, *t = b->tokens + c * S_EP_L;
        float *lp = b->logprobs + c * S_EP_L;
        b->prompt_lens[c] = S_EP_P;
        b->lengths[c] = c == 3 ? 9 : 8;
        b->n_turns[c] = 2;
        p[0] = 256;
        for (int64_t i = 1; i < S_EP_P; i++)
            p[i] = (int32_t)('a' + (c / 2 * 5 + i) % 26);
        for (int64_t j = 0; j < b->lengths[c]; j++) {
            t[j] = (int32_t)(32 + (c * 13 + j * 7) % 90);
            b->loss_mask[c * S_EP_L + j] = s_ep_mask[j];
            b->turn[c * S_EP_L + j] = s_ep_turn[j];
        }
        s_row_logprobs(m, p, S_EP_P, t, b->lengths[c], 1.0, lp);
        for (int64_t j = 0; j < b->lengths[c]; j++)
            if (!s_ep_mask[j])
                lp[j] = 50.0f;
    }
}

/*  The trainer side of multi-turn episodes, by hand.  (a) At rho = 1 without KL the loss is the
    closed form over the 24 model tokens alone, -sum A_token / 24 (token mean) and the mean of
    each episode's own mean over its 6 model tokens (seq mean), per episode and per turn (advantages
    (n, BT_MAX_TURNS)); the statistics count 24 tokens and see rho = 1, not the observations' e^-50.
    (b) With KL, entropy and every aggregation: changing what an environment slot holds (its
    behaviour log-prob, the id of episode 3's last token, which nothing attends to afterwards)
    leaves loss and gradients the same bit for bit; changing an observation id in the middle
    changes the gradients (later model tokens attend to it), by more than 1e-4 relative. */
static void test_episode_mask(void) {
    bt_trainer_t *tr[3] = {s_episode_trainer(), s_episode_trainer(), s_episode_trainer()};
    bt_rollout_batch b[3];
    for (int k = 0; k < 3; k++) {
        bt_rollout_batch_init(&b[k]);
        s_episode_batch(bt_trainer_policy(tr[0]), &b[k]);
    }
    const double ep_adv[S_EP_N] = {1.0, -1.0, 0.5, -0.25};
    double turn_adv[S_EP_N * BT_MAX_TURNS] = {0};
    for (int c = 0; c < S_EP_N; c++) {
        turn_adv[c * BT_MAX_TURNS] = 0.3 * (c + 1);
        turn_adv[c * BT_MAX_TURNS + 1] = -0.7 + 0.2 * c;
    }
    bt_grpo_config gc = bt_test_grpo_config();
    gc.kl_coef = 0.0;
    for (int per_turn = 0; per_turn < 2; per_turn++) {
        b[0].has_turn_rewards = per_turn;
        const double *adv = per_turn ? turn_adv : ep_adv;
        for (int agg = 0; agg < 2; agg++) {
            gc.loss_agg = agg ? BT_LOSS_AGG_SEQ_MEAN : BT_LOSS_AGG_TOKEN_MEAN;
            double want = 0;
            for (int c = 0; c < S_EP_N; c++)
                for (int j = 0; j < b[0].lengths[c]; j++) {
                    double a = per_turn ? turn_adv[c * BT_MAX_TURNS + s_ep_turn[j]] : ep_adv[c];
                    want -= s_ep_mask[j] ? (double)(float)a / (agg ? 6.0 * S_EP_N : 24.0) : 0.0;
                }
            bt_trainer_stats st;
            CHECK_OK(bt_trainer_grpo_step(tr[0], &b[0], adv, 0.0, &gc, &st));
            CHECK_NEAR(st.loss, want, 1e-6);
            CHECK(st.tokens == 24.0 && st.sequences == 4);
            CHECK_NEAR(st.ratio_min, 1.0, 1e-5);
            CHECK_NEAR(st.ratio_max, 1.0, 1e-5);
            CHECK(st.mismatch_kl < 1e-6 && st.clip_frac == 0.0);
        }
    }
    b[0].turn[2 * S_EP_L + 6] = 2; /* a token of turn 2 in an episode of 2 turns: refused */
    b[0].has_turn_rewards = true;
    bt_trainer_stats sft;
    CHECK(bt_trainer_grpo_step(tr[0], &b[0], turn_adv, 0.0, &gc, &sft) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "completion 2: token 6 of turn 2, of 2 turns");
    b[0].turn[2 * S_EP_L + 6] = 1;
    b[0].has_turn_rewards = false;
    CHECK_OK(bt_trainer_sft_step(tr[0], &b[0], 0.0, &sft));
    CHECK(sft.tokens == 24.0); /* SFT trains the model's tokens only, too */

    /* b[1]: the environment's slots hold other values; b[2]: an observation id mid-episode */
    for (int64_t j = 0; j < S_EP_L; j++)
        if (!s_ep_mask[j])
            b[1].logprobs[0 * S_EP_L + j] = -30.0f;
    b[1].tokens[3 * S_EP_L + 8] = (b[1].tokens[3 * S_EP_L + 8] + 1) % 256; /* episode 3's end */
    b[2].tokens[1 * S_EP_L + 3] = (b[2].tokens[1 * S_EP_L + 3] + 1) % 256;
    const bt_loss_agg aggs[3] = {BT_LOSS_AGG_TOKEN_MEAN, BT_LOSS_AGG_SEQ_MEAN,
                                 BT_LOSS_AGG_TOKEN_SUM_NORM};
    double moved = 1.0;
    for (int a = 0; a < 3; a++) {
        gc = bt_test_grpo_config();
        gc.kl_coef = 0.05;
        gc.entropy_coef = 0.01;
        gc.loss_agg = aggs[a];
        gc.max_tokens = 16;
        bt_trainer_stats st[3];
        for (int k = 0; k < 3; k++)
            CHECK_OK(bt_trainer_grpo_step(tr[k], &b[k], ep_adv, 0.0, &gc, &st[k]));
        CHECK(st[0].kl > 0 && st[0].entropy > 0 && st[0].tokens == 24.0);
        CHECK(st[1].loss == st[0].loss && st[1].kl == st[0].kl && st[1].entropy == st[0].entropy &&
              st[1].ratio_min == st[0].ratio_min);
        CHECK(s_same_grads(tr[1], tr[0]));
        CHECK(st[2].loss != st[0].loss); /* the model tokens after it see another context */
        moved = fmin(moved, s_grad_rel_diff(tr[2], tr[0]));
    }
    printf(
        "episodes: an observation id changed mid-episode moves the gradients by %.3g "
        "(relative L2, the least over parameters and aggregations); at the episode's end, by 0\n",
        moved);
    CHECK(moved > 1e-4);
    for (int k = 0; k < 3; k++) {
        bt_rollout_batch_release(&b[k]);
        bt_trainer_destroy(&tr[k]);
    }
}

/*  SFT on an episode (bt_rollout_demonstrations of a tool episode): the loss is, by hand, the
    mean NLL of the 24 model tokens alone (the policy's own log-probs from s_row_logprobs); what
    an observation slot holds where nothing attends to it afterwards (episode 3's last id, the
    behaviour log-probs) changes neither loss nor gradient, bit for bit; an observation id mid
    episode changes the gradients only through attention (the later model tokens' context). */
static void test_sft_episode_mask(void) {
    bt_trainer_t *tr[3] = {s_episode_trainer(), s_episode_trainer(), s_episode_trainer()};
    bt_rollout_batch b[3];
    for (int k = 0; k < 3; k++) {
        bt_rollout_batch_init(&b[k]);
        s_episode_batch(bt_trainer_policy(tr[0]), &b[k]);
    }
    double want = 0;
    for (int c = 0; c < S_EP_N; c++)
        for (int j = 0; j < b[0].lengths[c]; j++)
            want -= s_ep_mask[j] ? (double)b[0].logprobs[c * S_EP_L + j] / 24.0 : 0.0;
    b[1].tokens[3 * S_EP_L + 8] = (b[1].tokens[3 * S_EP_L + 8] + 1) % 256; /* episode 3's end */
    for (int64_t j = 0; j < S_EP_L; j++)
        if (!s_ep_mask[j])
            b[1].logprobs[j] = -30.0f;
    b[2].tokens[1 * S_EP_L + 3] = (b[2].tokens[1 * S_EP_L + 3] + 1) % 256;
    bt_trainer_stats st[3];
    for (int k = 0; k < 3; k++)
        CHECK_OK(bt_trainer_sft_step(tr[k], &b[k], 0.0, &st[k]));
    CHECK_NEAR(st[0].loss, want, 1e-5);
    CHECK(st[0].tokens == 24.0);
    CHECK(st[1].loss == st[0].loss && s_same_grads(tr[1], tr[0]));
    double moved = s_grad_rel_diff(tr[2], tr[0]);
    printf("sft episodes: loss %.6f (by hand %.6f); an observation id mid-episode moves the "
           "gradients by %.3g, at the episode's end by 0\n",
           st[0].loss, want, moved);
    CHECK(st[2].loss != st[0].loss && moved > 1e-4);
    for (int k = 0; k < 3; k++) {
        bt_rollout_batch_release(&b[k]);
        bt_trainer_destroy(&tr[k]);
    }
}

/* ---- (c) micro-batches ---------------------------------------------------------------------- */

static void test_micro_batches(void) {
    bt_trainer_t *t2 = s_trainer(21, 2, true), *t8 = s_trainer(21, 8, true);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    s_hand_batch(bt_trainer_policy(t2), 1.0, &b);
    bt_grpo_config gc = bt_test_grpo_config();
    gc.loss_agg = BT_LOSS_AGG_SEQ_MEAN;
    bt_trainer_stats s2, s8;
    for (int step = 0; step < 3; step++) { /* steps 2 and 3 have rho != 1 and clipping */
        gc.loss_agg = step == 2 ? BT_LOSS_AGG_TOKEN_MEAN : BT_LOSS_AGG_SEQ_MEAN;
        CHECK_OK(bt_trainer_grpo_step(t2, &b, s_adv, 1e-2, &gc, &s2));
        CHECK_OK(bt_trainer_grpo_step(t8, &b, s_adv, 1e-2, &gc, &s8));
        CHECK_REL(s2.loss, s8.loss, 1e-5);
        CHECK_REL(s2.grad_norm, s8.grad_norm, 1e-5);
        CHECK(s2.clip_frac == s8.clip_frac);
    }
    CHECK(s8.clip_frac > 0);
    double rel = s_weights_rel_diff(bt_trainer_policy(t2), bt_trainer_policy(t8));
    CHECK(rel < 1e-5);
    bt_rollout_batch_release(&b);
    bt_trainer_destroy(&t2);
    bt_trainer_destroy(&t8);
}

/* ---- (c'') batching: "pad", "bucket" and "pack" make the same update --------------------------
 */

/*  24 completions in 6 groups of 4 with a long-tailed spread of lengths, as RL batches have: one
    prompt of 2..12 tokens per group, completions of 0 (an empty one) to 40 tokens, most short.
    Behaviour log-probs are those of m, shifted by up to +-0.3 so that rho != 1 and both clips
    fire. */
static const int64_t s_spread_plen[6] = {5, 12, 2, 8, 3, 10};
static const int64_t s_spread_clen[24] = {0, 3, 40, 5,  2, 7, 1, 17, 4, 6, 29, 3,
                                          9, 2, 5,  40, 1, 8, 3, 12, 6, 1, 22, 4};

static void s_spread_batch(bt_model *m, double temperature, bt_rollout_batch *b, double *adv) {
    CHECK_OK(bt_rollout_batch_alloc(b, 6, 4, 12, 40));
    b->temperature = temperature;
    for (int64_t c = 0; c < 24; c++) {
        int32_t *p = b->prompt_tokens + c * b->max_prompt_len;
        int32_t *t = b->tokens + c * b->max_new_tokens;
        float *lp = b->logprobs + c * b->max_new_tokens;
        b->prompt_lens[c] = s_spread_plen[c / 4];
        b->lengths[c] = s_spread_clen[c];
        p[0] = 256; /* BOS */
        for (int64_t i = 1; i < b->prompt_lens[c]; i++)
            p[i] = (int32_t)('0' + (c / 4 * 7 + i * 3) % 10);
        for (int64_t j = 0; j < b->lengths[c]; j++)
            t[j] = (int32_t)(32 + (c * 37 + j * 11) % 90);
        s_row_logprobs(m, p, b->prompt_lens[c], t, b->lengths[c], temperature, lp);
        for (int64_t j = 0; j < b->lengths[c]; j++)
            lp[j] += 0.3f * (float)(((c * 5 + j * 3) % 7) - 3) / 3.0f;
        adv[c] = (double)((c * 7) % 9) / 4.0 - 1.0;
    }
}

/*  A trainer whose AdamW has beta1 0 and steps at lr 0: after a step its first moments are the
    step's gradients (summed over micro-batches, unclipped) and the weights have not moved, so the
    trainers of every mode see the same weights at every step.  The policy starts from other
    weights than the reference (seed 52 vs 51), so the KL term and its gradient are not zero. */
static bt_trainer_t *s_grad_trainer(bt_batching batching, int64_t micro_batch, int64_t pack_tokens,
                                    bool share_prefix) {
    bt_model *m = s_tiny_model(51);
    bt_trainer_config cfg;
    bt_trainer_config_init(&cfg);
    cfg.adamw.beta1 = 0.0;
    cfg.adamw.weight_decay = 0.0;
    cfg.max_grad_norm = 0.0;
    cfg.micro_batch = micro_batch;
    cfg.batching = batching;
    cfg.pack_tokens = pack_tokens;
    cfg.share_prefix = share_prefix;
    cfg.reference = true;
    bt_trainer_t *t = bt_trainer_new(&m, &cfg);
    CHECK(t != NULL);
    bt_model *other = s_tiny_model(52);
    CHECK_OK(bt_weights_copy(bt_trainer_policy(t), other));
    bt_model_destroy(&other);
    return t;
}

/*  The largest, over parameters, of |g_a - g_b| / |g_b| (L2 norms): the gradients of a's and b's
    last steps. */
static double s_grad_rel_diff(bt_trainer_t *a, bt_trainer_t *b) {
    double worst = 0;
    for (int i = 0; i < bt_model_num_params(bt_trainer_policy(a)); i++) {
        size_t n, nb;
        float *ha = s_grad(a, i, &n), *hb = s_grad(b, i, &nb);
        CHECK(n == nb);
        double diff = 0, norm = 0;
        for (size_t k = 0; k < n; k++) {
            diff += ((double)ha[k] - hb[k]) * ((double)ha[k] - hb[k]);
            norm += (double)hb[k] * hb[k];
        }
        CHECK(norm > 0);
        worst = fmax(worst, sqrt(diff / fmax(norm, 1e-300)));
        free(ha);
        free(hb);
    }
    return worst;
}

static void s_check_same_stats(const bt_trainer_stats *a, const bt_trainer_stats *b) {
    CHECK_REL(a->loss, b->loss, 1e-5);
    CHECK_REL(a->pg_loss, b->pg_loss, 1e-5);
    CHECK_REL(a->kl, b->kl, 1e-5);
    CHECK_REL(a->clip_frac, b->clip_frac, 1e-5);
    CHECK_REL(a->ratio_mean, b->ratio_mean, 1e-5);
    CHECK_REL(a->ratio_std, b->ratio_std, 1e-5);
    CHECK_REL(a->ratio_max, b->ratio_max, 1e-5);
    CHECK_REL(a->ratio_min, b->ratio_min, 1e-5);
    CHECK_REL(a->mismatch_kl, b->mismatch_kl, 1e-5);
    CHECK_REL(a->entropy, b->entropy, 1e-5);
    CHECK_REL(a->grad_norm, b->grad_norm, 1e-5);
    CHECK(a->tokens == b->tokens && a->sequences == b->sequences && a->version == b->version);
    CHECK(a->lr == b->lr);
}

/*  Prompt and completion tokens of b: what the unshared layout computes besides padding. */
static double s_real_tokens(const bt_rollout_batch *b) {
    double real = 0;
    for (int64_t c = 0; c < b->n; c++)
        real += (double)(b->prompt_lens[c] + b->lengths[c]);
    return real;
}

/*  GRPO steps of trainers tr[0..n) on b with each loss aggregation, KL, entropy and both clips
    active; tr[n-1] is the control, whose advantage of completion 10 is 1% off.  Checks that every
    statistic of tr[1..n-1) equals tr[0]'s and that their gradients agree with tr[0]'s to 1e-5
    relative, while the control's differ by more than 1e-4 (so the comparison would see a sequence
    attending across its neighbours or a wrong per-sequence weight); st[0..n) gets the first
    aggregation's statistics. */
static void s_steps_agree(const char *what, bt_trainer_t *const *tr, int n,
                          const bt_rollout_batch *b, const double *adv, bt_trainer_stats *st) {
    double adv_off[64], worst = 0, control = 1;
    CHECK(b->n <= 64 && n <= 8);
    memcpy(adv_off, adv, (size_t)b->n * sizeof *adv);
    adv_off[10] *= 1.01;
    const bt_loss_agg aggs[3] = {BT_LOSS_AGG_TOKEN_MEAN, BT_LOSS_AGG_SEQ_MEAN,
                                 BT_LOSS_AGG_TOKEN_SUM_NORM};
    for (int a = 0; a < 3; a++) {
        bt_grpo_config gc = bt_test_grpo_config();
        gc.kl_coef = 0.05;
        gc.entropy_coef = 0.01;
        gc.loss_agg = aggs[a];
        gc.max_tokens = 40;
        bt_trainer_stats here[8];
        for (int k = 0; k < n; k++)
            CHECK_OK(
                bt_trainer_grpo_step(tr[k], b, k == n - 1 ? adv_off : adv, 0.0, &gc, &here[k]));
        CHECK(here[0].kl > 0 && here[0].clip_frac > 0 && here[0].entropy > 0);
        for (int k = 1; k < n - 1; k++) {
            s_check_same_stats(&here[k], &here[0]);
            worst = fmax(worst, s_grad_rel_diff(tr[k], tr[0]));
        }
        control = fmin(control, s_grad_rel_diff(tr[n - 1], tr[0]));
        if (a == 0)
            memcpy(st, here, (size_t)n * sizeof *st);
    }
    printf("%s: GRPO gradients differ by %.3g at most (relative L2 per parameter); a 1%% change "
           "of one advantage: %.3g\n",
           what, worst, control);
    CHECK(worst < 1e-5);
    CHECK(control > 1e-4);
}

/*  The same batch through every batching mode, unshared (grpo.share_prefix off): the gradients of
    GRPO steps (each loss
    aggregation, with KL, entropy and both clips active) and of an SFT step, and the step's
    statistics, agree with "pad" to 1e-5 relative, while the token slots computed fall.  The
    comparison resolves a 1% change of one completion's advantage (a control trainer), so it would
    see a sequence attending across its neighbours or a wrong per-sequence weight. */
static void test_batching(void) {
    enum { MODES = 4 };
    bt_trainer_t *tr[MODES + 1] = {
        s_grad_trainer(BT_BATCHING_PAD, 5, 0, false),
        s_grad_trainer(BT_BATCHING_BUCKET, 5, 0, false),
        s_grad_trainer(BT_BATCHING_PACK, 5, 0, false),   /* 5 rows of 52 tokens per micro-batch */
        s_grad_trainer(BT_BATCHING_PACK, 5, 100, false), /* 1 row per micro-batch */
        s_grad_trainer(BT_BATCHING_PAD, 5, 0, false)};   /* the control */
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double adv[24], worst = 0;
    s_spread_batch(bt_trainer_policy(tr[0]), 0.9, &b, adv);
    double real = s_real_tokens(&b);
    bt_trainer_stats st[MODES + 1];
    s_steps_agree("batching modes vs pad", tr, MODES + 1, &b, adv, st);
    /* padding: pad > bucket > pack, and every slot is a token or padding */
    printf("token slots for %.0f tokens: pad %.0f, bucket %.0f, pack %.0f and %.0f\n", real,
           st[0].slots, st[1].slots, st[2].slots, st[3].slots);
    CHECK(st[0].slots > st[1].slots && st[1].slots > st[2].slots);
    CHECK(st[2].slots >= real && st[3].slots >= real);
    bt_trainer_stats sft[MODES];
    for (int k = 0; k < MODES; k++)
        CHECK_OK(bt_trainer_sft_step(tr[k], &b, 0.0, &sft[k]));
    for (int k = 1; k < MODES; k++) {
        CHECK_REL(sft[k].loss, sft[0].loss, 1e-5);
        CHECK_REL(sft[k].grad_norm, sft[0].grad_norm, 1e-5);
        worst = fmax(worst, s_grad_rel_diff(tr[k], tr[0]));
    }
    printf("batching modes vs pad: SFT gradients differ by %.3g at most\n", worst);
    CHECK(worst < 1e-5);
    bt_rollout_batch_release(&b);
    for (int k = 0; k <= MODES; k++)
        bt_trainer_destroy(&tr[k]);
}

/*  The spread batch with completion 9's prompt changed: group 2 (prompt 2 tokens) becomes the
    runs {8}, {9}, {10, 11}, so a group whose prompts differ shares only what is the same. */
static void s_spread_batch_mixed(bt_model *m, double temperature, bt_rollout_batch *b,
                                 double *adv) {
    s_spread_batch(m, temperature, b, adv);
    int32_t *p = b->prompt_tokens + 9 * b->max_prompt_len;
    p[1] = (int32_t)('0' + (p[1] - '0' + 1) % 10);
    s_row_logprobs(m, p, b->prompt_lens[9], b->tokens + 9 * b->max_new_tokens, b->lengths[9],
                   temperature, b->logprobs + 9 * b->max_new_tokens);
}

/*  grpo.activation_checkpointing "layer": one GRPO step (KL, entropy, shared prompts, the default
    batching) with the policy's layers recomputed in backward leaves every weight as the plain
    step does, to 1e-6 (largest difference over largest value, per parameter). */
static void test_activation_checkpointing(void) {
    bt_trainer_t *tr[2] = {s_grad_trainer(BT_BATCHING_BUCKET, 5, 0, true),
                           s_grad_trainer(BT_BATCHING_BUCKET, 5, 0, true)};
    bt_model_set_activation_checkpointing(bt_trainer_policy(tr[1]), true);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double adv[24];
    s_spread_batch_mixed(bt_trainer_policy(tr[0]), 0.9, &b, adv);
    bt_grpo_config gc = bt_test_grpo_config();
    gc.kl_coef = 0.05;
    gc.entropy_coef = 0.01;
    bt_trainer_stats st[2];
    for (int k = 0; k < 2; k++)
        CHECK_OK(bt_trainer_grpo_step(tr[k], &b, adv, 1e-2, &gc, &st[k]));
    s_check_same_stats(&st[1], &st[0]);
    bt_ctx *ctx = bt_ctx_new();
    double worst = 0;
    bt_model *p0 = bt_trainer_policy(tr[0]), *p1 = bt_trainer_policy(tr[1]);
    for (int i = 0; i < bt_model_num_params(p0); i++) {
        bt_tensor *d = bt_abs(ctx, bt_sub(ctx, bt_model_params(p1)[i], bt_model_params(p0)[i]));
        double diff = 0, top = 0;
        CHECK_OK(bt_item(bt_max(ctx, bt_reshape(ctx, d, 1, (int64_t[]){-1}), 0, false), &diff));
        CHECK_OK(bt_item(
            bt_max(ctx, bt_reshape(ctx, bt_abs(ctx, bt_model_params(p0)[i]), 1, (int64_t[]){-1}), 0,
                   false),
            &top));
        worst = fmax(worst, diff / top);
    }
    printf("activation checkpointing: weights after a GRPO step differ by %.3g at most (max abs "
           "diff / max abs)\n",
           worst);
    CHECK(worst < 1e-6);
    bt_ctx_destroy(&ctx);
    bt_rollout_batch_release(&b);
    bt_trainer_destroy(&tr[0]);
    bt_trainer_destroy(&tr[1]);
}

/*  grpo.share_prefix: GRPO steps with each group's prompt computed once give the unshared pass's
    loss, gradients (every parameter) and statistics to 1e-5 relative, for every loss aggregation
    with KL (the reference differs from the policy) and entropy terms, under every batching and
    with groups cut by micro_batch 3 (items of 3 and 1 completions), while the slots fall by the
    prompt tokens shared.  SFT steps do not share: bit-identical. */
static void test_share_prefix(void) {
    enum { N = 7 };
    bt_trainer_t *tr[N] = {
        s_grad_trainer(BT_BATCHING_PAD, 5, 0, false),   /* the reference: unshared */
        s_grad_trainer(BT_BATCHING_PAD, 5, 0, true),    /* groups of 4, one a row */
        s_grad_trainer(BT_BATCHING_BUCKET, 5, 0, true), /* the default batching */
        s_grad_trainer(BT_BATCHING_BUCKET, 3, 0, true), /* groups cut into 3 + 1 */
        s_grad_trainer(BT_BATCHING_PACK, 5, 0, true),   /* several items a row */
        s_grad_trainer(BT_BATCHING_PACK, 5, 100, true), /* one row a micro-batch */
        s_grad_trainer(BT_BATCHING_PAD, 5, 0, true)};   /* the control */
    /* prompt tokens not recomputed: 3 * P a group of 4 (2 * P cut into 3 + 1) over the groups of
       5, 12, 8, 3 and 10 tokens, and 2 for group 2's run {10, 11} of 2 tokens */
    const double want_shared[N] = {0, 116, 116, 78, 116, 116, 116};
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    double adv[24];
    s_spread_batch_mixed(bt_trainer_policy(tr[0]), 0.9, &b, adv);
    double real = s_real_tokens(&b);
    bt_trainer_stats st[N];
    s_steps_agree("share_prefix vs unshared", tr, N, &b, adv, st);
    printf("share_prefix: token slots %.0f unshared (pad), shared: pad %.0f, bucket %.0f and %.0f "
           "(micro_batch 3), pack %.0f and %.0f\n",
           st[0].slots, st[1].slots, st[2].slots, st[3].slots, st[4].slots, st[5].slots);
    for (int k = 0; k < N; k++) /* every slot a token or padding, each shared prompt once */
        CHECK(st[k].shared == want_shared[k] && st[k].slots >= real - want_shared[k] &&
              (k == 0 || st[k].slots < st[0].slots));
    bt_trainer_stats sft[2];
    for (int k = 0; k < 2; k++)
        CHECK_OK(bt_trainer_sft_step(tr[k], &b, 0.0, &sft[k]));
    CHECK(sft[1].loss == sft[0].loss && sft[1].slots == sft[0].slots && sft[1].shared == 0);
    CHECK(s_grad_rel_diff(tr[1], tr[0]) == 0.0);
    bt_rollout_batch_release(&b);
    for (int k = 0; k < N; k++)
        bt_trainer_destroy(&tr[k]);
}

/* ---- (c') data parallelism: K Gloo ranks make one trainer's update ----------------------------
 */

/*  The ranks sum their gradients in another order than one trainer does, so gradients agree to
    float rounding; AdamW's first steps scale each element by about lr / |g|, which turns those
    rounding differences in tiny elements into weight differences proportional to lr (1e-2: up to
    1.1e-5 relative with 3 ranks; 1e-3: 1.1e-6).  So this test steps at lr 1e-3, and at 1e-4 on
    the spread batch, whose 22 rows (and shared prompts, which sum their gradients in yet another
    order) reach 1.6e-5 at 1e-3 (3e-6 unshared) and 1.6e-6 at 1e-4. */
#define S_DP_LR 1e-3

typedef struct s_rank {
    int rank, world, port;
    const char *tag; /* the batch's, for the group's store prefix */
    bt_rollout_batch *batch;
    const double *adv;
    double lr;
    bt_trainer_t *tr;
    bt_trainer_stats grpo[2], sft;
    bt_status st;
} s_rank;

/*  One rank: a trainer made from a different seed than rank 0's (the sync must fix that), joined
    to the group, two GRPO steps (the second with rho != 1) and one SFT step. */
static void *s_rank_main(void *arg) {
    s_rank *r = arg;
    bt_set_num_threads(1);
    r->tr = s_trainer(r->rank == 0 ? 41 : 900 + (uint64_t)r->rank, 2, true);
    char prefix[16];
    snprintf(prefix, sizeof prefix, "t%d%s", r->world, r->tag);
    bt_group_config gc = {.store_host = "127.0.0.1",
                          .store_port = r->port,
                          .prefix = prefix,
                          .rank = r->rank,
                          .world = r->world,
                          .local_addr = "127.0.0.1",
                          .device = bt_cpu(),
                          .timeout_ms = 60000};
    bt_group *g = bt_group_new(&gc);
    r->st = g ? BT_OK : BT_EIO;
    bt_trainer_set_group(r->tr, g);
    if (r->st == BT_OK)
        r->st = bt_trainer_sync(r->tr, 0);
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.05;
    for (int step = 0; step < 2 && r->st == BT_OK; step++)
        r->st = bt_trainer_grpo_step(r->tr, r->batch, r->adv, r->lr, &cfg, &r->grpo[step]);
    if (r->st == BT_OK)
        r->st = bt_trainer_sft_step(r->tr, r->batch, r->lr, &r->sft);
    bt_trainer_set_group(r->tr, NULL);
    bt_group_destroy(&g);
    return NULL;
}

static void s_check_stats(const bt_trainer_stats *a, const bt_trainer_stats *b) {
    CHECK_REL(a->loss, b->loss, 1e-5);
    CHECK_REL(a->grad_norm, b->grad_norm, 1e-5);
    CHECK_REL(a->kl + 1e-3, b->kl + 1e-3, 1e-5);
    CHECK_REL(a->entropy, b->entropy, 1e-5);
    CHECK_REL(a->ratio_max, b->ratio_max, 1e-5);
    CHECK(a->tokens == b->tokens && a->version == b->version);
}

/*  K = 2 and 3 ranks (trainers of the default config: micro-batch 2, prompts shared) against one
    trainer, one's two GRPO steps and an SFT step on batch b with advantages adv.  Ranks other
    than 0 start from other seeds: the sync must make their weights, moments and references rank
    0's. */
static void s_data_parallel(int port, const char *tag, bt_rollout_batch *b, const double *adv,
                            double lr, bt_trainer_t *one) {
    bt_grpo_config cfg = bt_test_grpo_config();
    cfg.kl_coef = 0.05;
    bt_trainer_stats grpo[2], sft;
    for (int step = 0; step < 2; step++)
        CHECK_OK(bt_trainer_grpo_step(one, b, adv, lr, &cfg, &grpo[step]));
    CHECK_OK(bt_trainer_sft_step(one, b, lr, &sft));
    double worst = 0;
    for (int world = 2; world <= 3; world++) {
        s_rank ranks[3];
        pthread_t th[3];
        for (int r = 0; r < world; r++) {
            ranks[r] = (s_rank){.rank = r,
                                .world = world,
                                .port = port,
                                .tag = tag,
                                .batch = b,
                                .adv = adv,
                                .lr = lr};
            CHECK(pthread_create(&th[r], NULL, s_rank_main, &ranks[r]) == 0);
        }
        for (int r = 0; r < world; r++)
            pthread_join(th[r], NULL);
        for (int r = 0; r < world; r++) {
            CHECK_OK(ranks[r].st);
            for (int step = 0; step < 2; step++)
                s_check_stats(&ranks[r].grpo[step], &grpo[step]);
            s_check_stats(&ranks[r].sft, &sft);
            double rel = s_weights_rel_diff(bt_trainer_policy(ranks[r].tr), bt_trainer_policy(one));
            worst = fmax(worst, rel);
            CHECK(rel < 1e-5);
            CHECK(bt_trainer_version(ranks[r].tr) == 3);
            /* ranks stay bit-identical to each other: they apply the same summed gradients */
            CHECK(s_weights_rel_diff(bt_trainer_policy(ranks[r].tr),
                                     bt_trainer_policy(ranks[0].tr)) == 0.0);
        }
        for (int r = world - 1; r >= 0; r--)
            bt_trainer_destroy(&ranks[r].tr);
    }
    printf("data parallel (%s batch, lr %g): 2 and 3 ranks' weights within %.3g of one trainer's\n",
           tag, lr, worst);
}

/*  The hand batch has 8 rows with ragged lengths and a prompt each; K = 3 splits it 2/3/3, so the
    shares and their micro-batches differ from the single trainer's (micro-batch 8).  The first 22
    rows of the mixed spread batch (groups of 4 sharing prompts), trained by one unshared trainer,
    split 11/11 and 7/7/8, which cuts groups: each rank shares what its rows share. */
static void test_data_parallel(void) {
    int port = 0;
    bt_store *store = bt_store_serve(0, &port);
    CHECK(store != NULL && port > 0);
    bt_trainer_t *one = s_trainer(41, 8, true);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    s_hand_batch(bt_trainer_policy(one), 1.0, &b);
    s_data_parallel(port, "hand", &b, s_adv, S_DP_LR, one);
    bt_trainer_destroy(&one);
    one = s_trainer_batching(41, 8, true, BT_BATCHING_BUCKET, 0, false);
    double adv[24];
    s_spread_batch_mixed(bt_trainer_policy(one), 0.9, &b, adv);
    b.n = 22;
    s_data_parallel(port, "spread", &b, adv, S_DP_LR / 10, one);
    bt_rollout_batch_release(&b);
    bt_trainer_destroy(&one);
    bt_store_destroy(&store);
}

/* ---- sharded training state (workers.shard, ZeRO stages 1 and 2) ---------------------------- */

#define S_Z_STEPS 20
#define S_Z_SAVE 10

/*  One rank of a sharded (or replicated) run: steps [from, S_Z_STEPS) of GRPO on the hand batch,
    the loss aggregation cycling through all three, a KL penalty, gradients clipped to a norm the
    steps exceed, micro-batches of 2 rows, an SFT step every seventh; after step S_Z_SAVE its
    state into saved (when not NULL); restored from restore first (when not NULL). */
typedef struct s_zrank {
    int rank, world, port;
    const char *prefix;
    bt_shard shard;
    bool lora; /* adapters of rank 4 on every target, the base frozen */
    const bt_rollout_batch *batch;
    const bt_msg_t *restore;
    bt_msg_t *saved;
    bt_trainer_t *tr;
    int clipped; /* steps whose gradient norm exceeded the clip */
    bt_status st;
    char error[256]; /* the rank's last error when st is not BT_OK */
} s_zrank;

static void *s_zrank_main(void *arg) {
    s_zrank *r = arg;
    bt_set_num_threads(1);
    bt_model *m = s_tiny_model(41);
    bt_lora_config lc;
    bt_lora_config_init(&lc);
    lc.rank = 4;
    if (r->lora && bt_model_add_lora(m, &lc, 7) != BT_OK)
        bt_model_destroy(&m); /* the trainer then fails to build */
    bt_trainer_config tc;
    bt_trainer_config_init(&tc);
    tc.micro_batch = 2;
    tc.reference = true;
    tc.max_grad_norm = 0.05;
    tc.shard = r->shard;
    r->tr = bt_trainer_new(&m, &tc);
    r->st = r->tr ? BT_OK : BT_EINVAL;
    bt_group *g = NULL;
    if (r->st == BT_OK && r->world > 1) {
        bt_group_config gc = {.store_host = "127.0.0.1",
                              .store_port = r->port,
                              .prefix = r->prefix,
                              .rank = r->rank,
                              .world = r->world,
                              .local_addr = "127.0.0.1",
                              .device = bt_cpu(),
                              .timeout_ms = 60000};
        g = bt_group_new(&gc);
        r->st = g ? BT_OK : BT_EIO;
        bt_trainer_set_group(r->tr, g);
        if (r->st == BT_OK)
            r->st = bt_trainer_sync(r->tr, 0);
    }
    int from = 0;
    if (r->st == BT_OK && r->restore) {
        r->st = bt_trainer_state_from_msg(r->restore, S_Z_SAVE, r->tr);
        from = S_Z_SAVE;
    }
    static const bt_loss_agg aggs[3] = {BT_LOSS_AGG_TOKEN_MEAN, BT_LOSS_AGG_SEQ_MEAN,
                                        BT_LOSS_AGG_TOKEN_SUM_NORM};
    for (int step = from; step < S_Z_STEPS && r->st == BT_OK; step++) {
        bt_grpo_config cfg = bt_test_grpo_config();
        cfg.kl_coef = 0.05;
        cfg.loss_agg = aggs[step % 3];
        bt_trainer_stats stats;
        r->st = step % 7 == 6 ? bt_trainer_sft_step(r->tr, r->batch, 3e-3, &stats)
                              : bt_trainer_grpo_step(r->tr, r->batch, s_adv, 3e-3, &cfg, &stats);
        r->clipped += stats.grad_norm > tc.max_grad_norm;
        if (r->st == BT_OK && r->saved && step + 1 == S_Z_SAVE)
            r->st = bt_trainer_state_to_msg(r->tr, r->saved);
    }
    if (r->st != BT_OK)
        snprintf(r->error, sizeof r->error, "%s", bt_last_error());
    bt_trainer_set_group(r->tr, NULL);
    bt_group_destroy(&g);
    return NULL;
}

/*  world ranks of a run with shard; their trainers into tr (rank 0 first; the caller destroys
    them), their states after step S_Z_SAVE merged into *saved when saved is not NULL. */
static void s_zrun_lora(int port, const char *prefix, bt_shard shard, int world, bool lora,
                        const bt_rollout_batch *b, const bt_msg_t *restore, bt_msg_t **saved,
                        bt_trainer_t **tr) {
    s_zrank ranks[4];
    pthread_t th[4];
    for (int r = 0; r < world; r++) {
        ranks[r] = (s_zrank){.rank = r,
                             .world = world,
                             .port = port,
                             .prefix = prefix,
                             .shard = shard,
                             .lora = lora,
                             .batch = b,
                             .restore = restore,
                             .saved = saved ? bt_msg_new(BT_MSG_RESULT) : NULL};
        CHECK(pthread_create(&th[r], NULL, s_zrank_main, &ranks[r]) == 0);
    }
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < world; r++) {
        if (ranks[r].st != BT_OK)
            fprintf(stderr, "%s rank %d: %s\n", prefix, r, ranks[r].error);
        CHECK(ranks[r].st == BT_OK);
        CHECK(lora || ranks[r].clipped >= 3); /* the clip is exercised */
        CHECK(bt_trainer_version(ranks[r].tr) == S_Z_STEPS);
        bt_model *m = bt_trainer_policy(ranks[r].tr);
        if (r > 0 && shard == BT_SHARD_PARAMETERS) /* between jobs only rank 0 holds weights */
            for (int i = 0; i < bt_model_num_params(m); i++)
                CHECK(bt_numel(bt_model_params(m)[i]) == 0);
        else if (r > 0) /* every rank gathers the same weights */
            CHECK(s_weights_rel_diff(m, bt_trainer_policy(ranks[0].tr)) == 0.0);
        tr[r] = ranks[r].tr;
    }
    if (saved) {
        for (int r = 1; r < world; r++) {
            CHECK_OK(bt_trainer_state_merge(ranks[0].saved, ranks[r].saved));
            bt_msg_destroy(&ranks[r].saved);
        }
        *saved = ranks[0].saved;
    }
}

static void s_zrun(int port, const char *prefix, bt_shard shard, int world,
                   const bt_rollout_batch *b, const bt_msg_t *restore, bt_msg_t **saved,
                   bt_trainer_t **tr) {
    s_zrun_lora(port, prefix, shard, world, false, b, restore, saved, tr);
}

static void s_ztrainers_destroy(bt_trainer_t **tr, int world) {
    for (int r = world - 1; r >= 0; r--)
        bt_trainer_destroy(&tr[r]);
}

/*  Every stage with 1, 2 and 4 ranks makes the replicated single trainer's update over 20 steps
    (1e-5 relative), and with the same number of ranks the optimizer stage is the replicated run
    bit for bit (the same all-reduce, then AdamW elementwise on a slice).  A state saved by 4
    ranks with sharded gradients resumes on 4 (bit for bit), on 2 sharded ranks and on 1
    replicated trainer, each finishing where the uninterrupted run does. */
static void test_sharded(void) {
    int port = 0;
    bt_store *store = bt_store_serve(0, &port);
    CHECK(store != NULL && port > 0);
    bt_model *m = s_tiny_model(41);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    s_hand_batch(m, 1.0, &b);
    bt_model_destroy(&m);
    static const char *const names[4] = {"none", "optimizer", "gradients", "parameters"};
    static const int worlds[3] = {1, 2, 4};
    bt_trainer_t *one[4], *replicated[3][4];
    s_zrun(port, "z-one", BT_SHARD_NONE, 1, &b, NULL, NULL, one);
    char prefix[32];
    double worst = 0;
    for (int w = 0; w < 3; w++) {
        snprintf(prefix, sizeof prefix, "z-none-%d", worlds[w]);
        s_zrun(port, prefix, BT_SHARD_NONE, worlds[w], &b, NULL, NULL, replicated[w]);
    }
    bt_msg_t *saved = NULL;
    bt_trainer_t *whole[4]; /* gradients, 4 ranks: the uninterrupted run of the resumes */
    for (int stage = BT_SHARD_OPTIMIZER; stage <= BT_SHARD_PARAMETERS; stage++)
        for (int w = 0; w < 3; w++) {
            bt_trainer_t *tr[4];
            snprintf(prefix, sizeof prefix, "z-%s-%d", names[stage], worlds[w]);
            bool keep = stage == BT_SHARD_GRADIENTS && worlds[w] == 4;
            s_zrun(port, prefix, (bt_shard)stage, worlds[w], &b, NULL, keep ? &saved : NULL, tr);
            double rel = s_weights_rel_diff(bt_trainer_policy(tr[0]), bt_trainer_policy(one[0]));
            double same =
                s_weights_rel_diff(bt_trainer_policy(tr[0]), bt_trainer_policy(replicated[w][0]));
            printf("shard %s, %d ranks: weights after %d steps within %.3g of one trainer's, "
                   "%.3g of %d replicated ranks'\n",
                   names[stage], worlds[w], S_Z_STEPS, rel, same, worlds[w]);
            CHECK(rel < 1e-5);
            worst = fmax(worst, rel);
            if (stage == BT_SHARD_OPTIMIZER)
                CHECK(same == 0.0);
            if (keep)
                memcpy(whole, tr, sizeof whole);
            else
                s_ztrainers_destroy(tr, worlds[w]);
        }
    CHECK(saved != NULL);
    /* the saved state: rank 0's weights and all four ranks' moment shards */
    int shards = 0;
    for (int i = 0; saved && i < bt_msg_tensor_count(saved); i++)
        shards += strstr(bt_msg_tensor_at(saved, i).name, "-of-00004") != NULL;
    CHECK(shards == 8);
    static const struct {
        bt_shard shard;
        int world;
    } resumes[4] = {{BT_SHARD_GRADIENTS, 4},
                    {BT_SHARD_OPTIMIZER, 2},
                    {BT_SHARD_NONE, 1},
                    {BT_SHARD_PARAMETERS, 2}};
    for (int k = 0; k < 4 && saved; k++) {
        bt_trainer_t *tr[4];
        snprintf(prefix, sizeof prefix, "z-resume-%d", k);
        s_zrun(port, prefix, resumes[k].shard, resumes[k].world, &b, saved, NULL, tr);
        double rel = s_weights_rel_diff(bt_trainer_policy(tr[0]), bt_trainer_policy(whole[0]));
        printf("saved by 4 ranks (gradients) at step %d, resumed on %d (%s): step %d within "
               "%.3g of the uninterrupted run\n",
               S_Z_SAVE, resumes[k].world, names[resumes[k].shard], S_Z_STEPS, rel);
        CHECK(k == 0 ? rel == 0.0 : rel < 1e-5);
        s_ztrainers_destroy(tr, resumes[k].world);
    }
    /* LoRA: the adapters sharded, gathered a layer at a time over a frozen base (whose
       embedding needs no gradient: the layers still run as checkpoints) */
    bt_trainer_t *lone[4], *lsharded[4];
    s_zrun_lora(port, "z-lora-1", BT_SHARD_NONE, 1, true, &b, NULL, NULL, lone);
    s_zrun_lora(port, "z-lora-4", BT_SHARD_PARAMETERS, 4, true, &b, NULL, NULL, lsharded);
    double lrel = s_weights_rel_diff(bt_trainer_policy(lsharded[0]), bt_trainer_policy(lone[0]));
    printf("LoRA adapters with sharded weights on 4 ranks: within %.3g of one trainer's\n", lrel);
    CHECK(lrel < 1e-5);
    s_ztrainers_destroy(lsharded, 4);
    s_ztrainers_destroy(lone, 1);
    printf("sharded stages: worst %.3g of one trainer's weights\n", worst);
    bt_msg_destroy(&saved);
    s_ztrainers_destroy(whole, 4);
    for (int w = 0; w < 3; w++)
        s_ztrainers_destroy(replicated[w], worlds[w]);
    s_ztrainers_destroy(one, 1);
    bt_rollout_batch_release(&b);
    bt_store_destroy(&store);
}

/* ---- (d) SFT, then (e) rollouts, (f) evaluation and (g) weights on the trained model ------- */

static bt_source_t *s_task(void) {
    bt_source_arith_config tc;
    bt_source_arith_config_init(&tc);
    tc.seed = 3;
    tc.digits = 1;
    tc.heldout_size = 10;
    bt_source_t *task = NULL;
    CHECK_OK(bt_source_new_arith(&tc, &task));
    return task;
}

static const uint64_t s_idx[6] = {0, 1, 2, 3, 4, 5};

static void test_sft_learns(bt_trainer_t *tr, const bt_tokenizer_t *tok, bt_source_t *task) {
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    CHECK_OK(bt_rollout_demonstrations(tok, task, s_idx, 6, &b));
    /* the demonstrations: BOS + prompt, answer + EOS */
    bt_source_example ex;
    bt_source_example_init(&ex);
    CHECK_OK(bt_source_train_example(task, 2, &ex));
    CHECK(b.n == 6 && b.group_size == 1);
    CHECK(b.prompt_lens[2] == (int64_t)strlen(ex.prompt) + 1 &&
          b.prompt_tokens[2 * b.max_prompt_len] == 256);
    CHECK(b.lengths[2] == (int64_t)strlen(ex.answer) + 1);
    CHECK(b.tokens[2 * b.max_new_tokens + b.lengths[2] - 1] == 257);
    CHECK(b.tokens[2 * b.max_new_tokens] == ex.answer[0]);
    bt_source_example_release(&ex);

    bt_trainer_stats st;
    double first = 0, last = 0;
    for (int step = 0; step < 80; step++) {
        CHECK_OK(bt_trainer_sft_step(tr, &b, 1e-2, &st));
        if (step == 0)
            first = st.loss;
        last = st.loss;
    }
    CHECK(first > 4.0); /* about ln(259) at the start */
    CHECK(last < first / 20);
    CHECK(bt_trainer_version(tr) == 80);
    bt_rollout_batch_release(&b);
}

static void test_rollout(bt_model *m, const bt_tokenizer_t *tok, bt_source_t *task) {
    bt_rollout_config rc;
    bt_rollout_config_init(&rc);
    rc.group_size = 4;
    rc.sample.temperature = 0.7;
    rc.sample.max_new_tokens = 4;
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    CHECK_OK(bt_rollout_sample(m, tok, task, s_idx, 6, &rc, 42, 9, &b));
    CHECK(b.n == 24 && b.n_prompts == 6 && b.group_size == 4 && b.version == 42);
    CHECK(b.temperature == 0.7 && b.max_new_tokens == 4);
    int correct = 0, some_eos = 0;
    double worst = 0;
    bt_source_example ex;
    bt_source_example_init(&ex);
    for (int64_t c = 0; c < b.n; c++) {
        CHECK_OK(bt_source_train_example(task, b.indices[c / 4], &ex));
        CHECK(b.indices[c / 4] == s_idx[c / 4]);
        /* group layout: row c holds the prompt of example c / 4 */
        int32_t enc[16];
        size_t n_enc = 0;
        CHECK_OK(bt_tokenizer_encode(tok, ex.prompt, strlen(ex.prompt), true, enc, 16, &n_enc));
        CHECK(b.prompt_lens[c] == (int64_t)n_enc);
        CHECK(memcmp(b.prompt_tokens + c * b.max_prompt_len, enc, n_enc * sizeof *enc) == 0);
        /* the reward of the decoded text */
        const int32_t *t = b.tokens + c * b.max_new_tokens;
        char text[8];
        size_t len = 0;
        CHECK_OK(bt_tokenizer_decode(tok, t, (size_t)b.lengths[c], text, sizeof text, &len));
        bt_reward_detail d;
        CHECK(b.rewards[c] == bt_source_reward(task, ex.answer, text, len, &d));
        CHECK(b.correct[c] == d.correct);
        correct += d.correct;
        /* finished <=> ends in EOS; truncated rows are max_new_tokens long */
        bool eos = b.lengths[c] > 0 && t[b.lengths[c] - 1] == 257;
        CHECK(b.finished[c] == eos);
        CHECK(eos || b.lengths[c] == 4);
        some_eos += eos;
        /* behaviour log-probs against the unpadded recomputation at the same temperature */
        float lp[8];
        s_row_logprobs(m, enc, (int64_t)n_enc, t, b.lengths[c], 0.7, lp);
        for (int64_t j = 0; j < b.lengths[c]; j++)
            worst = fmax(worst, fabs((double)lp[j] - (double)b.logprobs[c * 4 + j]));
    }
    bt_source_example_release(&ex);
    CHECK(worst < 1e-4);
    CHECK(correct > 0 && some_eos > 0);

    /* completion j of a prompt id draws from (step, id, j) alone: the same prompts split into
       two jobs of the step (other job numbers in the seed's low bits, other batches) give the
       same completions; another step gives others.  At temperature 3, so that they vary. */
    bt_rollout_batch part;
    bt_rollout_batch_init(&part);
    rc.sample.temperature = 3.0;
    CHECK_OK(bt_rollout_sample(m, tok, task, s_idx, 6, &rc, 42, 9, &b));
    for (int job = 0; job < 2; job++) {
        int64_t first = job ? 2 : 0, n = job ? 4 : 2;
        CHECK_OK(bt_rollout_sample(m, tok, task, s_idx + first, n, &rc, 42, 9 + (uint64_t)(job + 1),
                                   &part));
        for (int64_t c = 0; c < part.n; c++) {
            int64_t w = first * 4 + c; /* the row of the whole batch */
            CHECK(part.lengths[c] == b.lengths[w]);
            CHECK(memcmp(part.tokens + c * 4, b.tokens + w * 4, 4 * sizeof *b.tokens) == 0);
            for (int64_t j = 0; j < part.lengths[c]; j++)
                CHECK_NEAR(part.logprobs[c * 4 + j], b.logprobs[w * 4 + j], 1e-5);
        }
    }
    CHECK_OK(
        bt_rollout_sample(m, tok, task, s_idx, 6, &rc, 42, 9 + (1 << BT_JOB_SEED_BITS), &part));
    CHECK(memcmp(part.tokens, b.tokens, (size_t)b.n * 4 * sizeof *b.tokens) != 0);
    bt_rollout_batch_release(&part);
    bt_rollout_batch_release(&b);
}

static void s_check_sums_equal(const bt_evaluator_sums *a, const bt_evaluator_sums *b) {
    CHECK(a->examples == b->examples && a->completions == b->completions);
    CHECK(a->correct == b->correct && a->truncated == b->truncated);
    CHECK(a->reward_sum == b->reward_sum && a->length_sum == b->length_sum);
    CHECK(memcmp(a->correct_hist, b->correct_hist, sizeof a->correct_hist) == 0);
}

static void test_eval_shards(bt_model *m, const bt_tokenizer_t *tok, const bt_source_t *task) {
    bt_evaluator_config ec;
    bt_evaluator_config_init(&ec);
    ec.count = 10;
    ec.batch = 3; /* several generate calls per shard */
    ec.max_new_tokens = 4;
    bt_evaluator_sums whole, a, b;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 0, &whole));
    CHECK(whole.examples == 10 && whole.completions == 10 && whole.samples == 1);
    CHECK(whole.correct_hist[0] + whole.correct_hist[1] == 10);
    CHECK(whole.correct_hist[1] == whole.correct);
    ec.count = 4;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 0, &a));
    ec.start = 4;
    ec.count = 6;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 0, &b));
    CHECK_OK(bt_evaluator_sums_add(&a, &b));
    s_check_sums_equal(&a, &whole);

    /* k = 5 samples: the histogram counts examples by correct samples */
    ec.start = 0;
    ec.count = 10;
    ec.samples = 5;
    ec.temperature = 1.0;
    ec.batch = 12;
    bt_evaluator_sums k;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 4, &k));
    int64_t ex = 0;
    for (int c = 0; c <= 5; c++)
        ex += k.correct_hist[c];
    CHECK(ex == 10 && k.completions == 50);
    CHECK(bt_evaluator_sums_add(&k, &whole) == BT_EINVAL); /* different k */

    /* sampled: each example draws from its own key, so shards [0, 3) + [3, 10), batched
       differently, add up to the whole to the bit; another key gives other samples */
    bt_evaluator_sums split, rest, other;
    ec.count = 3;
    ec.batch = 5; /* one example per generate call */
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 4, &split));
    ec.start = 3;
    ec.count = 7;
    ec.batch = 35; /* all seven in one call */
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 4, &rest));
    CHECK_OK(bt_evaluator_sums_add(&split, &rest));
    s_check_sums_equal(&split, &k);
    CHECK(split.maj_correct == k.maj_correct && split.reward_sumsq == k.reward_sumsq);
    CHECK(memcmp(split.length_hist, k.length_hist, sizeof k.length_hist) == 0);
    ec.start = 0;
    ec.count = 10;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 5, &other));
    CHECK(other.length_sum != k.length_sum ||
          memcmp(other.correct_hist, k.correct_hist, sizeof k.correct_hist) != 0);
    ec.batch = 12;

    /* bad shards and greedy k > 1 are refused */
    ec.count = 11;
    CHECK(bt_evaluator_run(m, tok, task, &ec, 4, &k) == BT_EINVAL);
    ec.count = 10;
    ec.temperature = 0;
    CHECK(bt_evaluator_run(m, tok, task, &ec, 4, &k) == BT_EINVAL);
}

static void s_logits(bt_model *m, float *out, size_t n);

/*  Generates n_rows completions of the given prompts in one call (as the evaluator does when the
    shard fits its batch: held-out examples 0 .. n_prompts, keyed by bt_evaluator_key(key, -1, i,
    j)), decoded into texts[r] (cap 16 bytes). */
static void s_generate(bt_model *m, const bt_tokenizer_t *tok, const char *const *prompts,
                       int n_prompts, int k, double temperature, uint64_t key, int64_t max_new,
                       bt_generation *g, char texts[][16]) {
    int32_t ids[64][64];
    const int32_t *rows[64];
    int64_t lens[64];
    uint64_t keys[64];
    for (int i = 0; i < n_prompts; i++) {
        size_t n = 0;
        CHECK_OK(bt_tokenizer_encode(tok, prompts[i], strlen(prompts[i]), true, ids[i], 64, &n));
        for (int j = 0; j < k; j++) {
            rows[i * k + j] = ids[i];
            lens[i * k + j] = (int64_t)n;
            keys[i * k + j] = bt_evaluator_key(key, -1, (uint64_t)i, j);
        }
    }
    bt_sample_config sc;
    bt_sample_config_init(&sc);
    sc.max_new_tokens = max_new;
    sc.temperature = temperature;
    bt_generation_init(g);
    CHECK_OK(bt_generate(m, rows, lens, n_prompts * k, &sc, temperature > 0 ? keys : NULL, g));
    for (int r = 0; r < n_prompts * k; r++) {
        size_t len = 0;
        CHECK_OK(bt_tokenizer_decode(tok, g->tokens + r * max_new, (size_t)g->lengths[r], texts[r],
                                     16, &len));
    }
}

/*  The evaluator's bookkeeping (maj@k, reward square sums, length histogram, robustness) against
    the same generations tallied here by hand, and its NLL against the model's logits. */
static void test_eval_metrics(bt_model *m, const bt_tokenizer_t *tok, const bt_source_t *task) {
    enum { N = 10, K = 5, M = 4 };
    const char *prompts[N];
    bt_source_example ex[N];
    for (int i = 0; i < N; i++) {
        bt_source_example_init(&ex[i]);
        CHECK_OK(bt_source_heldout_example(task, (size_t)i, &ex[i]));
        prompts[i] = ex[i].prompt;
    }
    bt_evaluator_config ec;
    bt_evaluator_config_init(&ec);
    ec.count = N;
    ec.samples = K;
    ec.temperature = 1.0;
    ec.max_new_tokens = M;
    ec.batch = N * K; /* one generate call */
    bt_evaluator_sums s;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 4, &s));
    bt_generation g;
    char texts[N * K][16];
    s_generate(m, tok, prompts, N, K, 1.0, 4, M, &g, texts);
    int64_t maj = 0, hist[M + 1] = {0};
    double sumsq = 0;
    for (int i = 0; i < N; i++) {
        /* majority by hand: the most frequent extracted answer, ties to the first seen */
        char answers[K][16];
        int best = -1, best_count = 0;
        for (int j = 0; j < K; j++) {
            bt_reward_detail d;
            const char *t = texts[i * K + j];
            double r = bt_source_reward(task, ex[i].answer, t, strlen(t), &d);
            sumsq += r * r;
            hist[g.lengths[i * K + j]]++;
            snprintf(answers[j], 16, "%.*s", (int)d.extracted_len, t + d.extracted_start);
        }
        for (int j = 0; j < K; j++) {
            int count = 0;
            for (int l = 0; l < K && answers[j][0]; l++)
                count += strcmp(answers[j], answers[l]) == 0;
            if (count > best_count) {
                best = j;
                best_count = count;
            }
        }
        maj += best >= 0 && strcmp(answers[best], ex[i].answer) == 0;
    }
    bt_generation_release(&g);
    CHECK(s.maj_correct == maj);
    CHECK_NEAR(s.reward_sumsq, sumsq, 1e-12);
    for (int l = 0; l <= M; l++)
        CHECK(s.length_hist[l] == hist[l]);
    CHECK(s.correct_hist[K] <= s.maj_correct + s.correct_hist[0] + N); /* sanity of the counts */

    /* robustness: each perturbation's prompts, greedy, scored by the verifier */
    ec.samples = 1;
    ec.temperature = 0;
    ec.robustness = true;
    CHECK_OK(bt_evaluator_run(m, tok, task, &ec, 0, &s));
    for (int p = 0; p < BT_PERTURB_COUNT; p++) {
        char bufs[N][64];
        const char *pp[N];
        int n = 0, right = 0;
        const char *answer[N];
        for (int i = 0; i < N; i++)
            if (bt_source_perturb(task, (size_t)i, (bt_source_perturbation)p, bufs[n], 64)) {
                answer[n] = ex[i].answer;
                pp[n] = bufs[n];
                n++;
            }
        char ptexts[N][16];
        s_generate(m, tok, pp, n, 1, 0, 0, M, &g, ptexts);
        for (int i = 0; i < n; i++) {
            bt_reward_detail d;
            bt_source_reward(task, answer[i], ptexts[i], strlen(ptexts[i]), &d);
            right += d.correct;
        }
        bt_generation_release(&g);
        CHECK(s.robust_examples[p] == n && s.robust_correct[p] == right);
    }
    CHECK(s.robust_examples[BT_PERTURB_SPACING] == N);

    /* NLL of "3" + EOS after BOS "1+2=" against log-softmax of the logits, in float64 */
    float logits[6 * 259];
    s_logits(m, logits, 6 * 259);
    double want = 0;
    const int next[2] = {'3', 257};
    for (int t = 4; t < 6; t++) { /* position t predicts token t + 1 */
        double mx = -INFINITY, z = 0;
        for (int v = 0; v < 259; v++)
            mx = fmax(mx, logits[t * 259 + v]);
        for (int v = 0; v < 259; v++)
            z += exp(logits[t * 259 + v] - mx);
        want -= logits[t * 259 + next[t - 4]] - mx - log(z);
    }
    bt_nll_item item = {.context = "1+2=", .continuation = "3", .eos = true};
    double nll = 0;
    int64_t tokens = 0;
    CHECK_OK(bt_evaluator_nll(m, tok, &item, 1, &nll, &tokens));
    CHECK(tokens == 2);
    CHECK_NEAR(nll, want, 1e-4);

    /* perplexity sums: shards starting at multiples of the chunk add up to the whole exactly */
    bt_evaluator_sums whole, part;
    bt_evaluator_sums_init(&whole, 1);
    bt_evaluator_sums_init(&part, 1);
    bt_source_arith_config tc;
    bt_source_arith_config_init(&tc);
    tc.digits = 2;
    tc.heldout_size = 40;
    bt_source_t *big = NULL;
    CHECK_OK(bt_source_new_arith(&tc, &big));
    CHECK_OK(bt_evaluator_perplexity_task(m, tok, big, 0, 40, &whole));
    bt_evaluator_sums_init(&s, 1);
    const size_t cuts[] = {0, 16, 32, 40};
    for (int i = 0; i < 3; i++) {
        bt_evaluator_sums_init(&part, 1);
        CHECK_OK(bt_evaluator_perplexity_task(m, tok, big, cuts[i], cuts[i + 1] - cuts[i], &part));
        CHECK_OK(bt_evaluator_sums_add(&s, &part));
    }
    CHECK(s.texts == 40 && s.nll_tokens == whole.nll_tokens);
    CHECK_REL(s.nll_sum, whole.nll_sum, 1e-12);
    bt_source_destroy(&big);
    for (int i = 0; i < N; i++)
        bt_source_example_release(&ex[i]);
}

/*  Logits (1, T, V) of a fixed sequence, on the host. */
static void s_logits(bt_model *m, float *out, size_t n) {
    bt_ctx *ctx = bt_ctx_new();
    const int64_t shape[] = {1, 6}, ids[6] = {256, '1', '+', '2', '=', '3'},
                  ones[6] = {1, 1, 1, 1, 1, 1};
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *lg = bt_model_forward(m, ctx, bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ids),
                                     bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ones));
    bt_set_grad_enabled(grad);
    CHECK_OK(bt_to_host(lg, out, n * sizeof *out));
    bt_ctx_destroy(&ctx);
}

static void test_weights(bt_model *trained) {
    enum { N = 6 * 259 };
    static float a[N], b[N];
    s_logits(trained, a, N);

    bt_weights w;
    bt_weights_init(&w);
    CHECK_OK(bt_weights_export(trained, 80, &w));
    CHECK(w.version == 80 && w.n == bt_model_num_params(trained));
    CHECK(strcmp(w.names[0], "model.embed_tokens.weight") == 0 && w.shape[0][0] == 259);

    bt_model *other = s_tiny_model(999);
    s_logits(other, b, N);
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK_OK(bt_weights_load(other, &w));
    s_logits(other, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0); /* bit-identical */
    bt_model_destroy(&other);

    other = s_tiny_model(998);
    CHECK_OK(bt_weights_copy(other, trained));
    s_logits(other, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(bt_requires_grad(bt_model_params(other)[0])); /* still trainable */
    bt_model_destroy(&other);

    /* another shape is refused by name */
    bt_model_config cfg = s_tiny_config();
    cfg.intermediate_size = 48;
    other = bt_model_new(&cfg, bt_cpu(), 1);
    CHECK(bt_weights_load(other, &w) == BT_EINVAL);
    CHECK_STR_CONTAINS(bt_last_error(), "mlp.gate_proj");
    bt_model_destroy(&other);
    bt_weights_release(&w);
    bt_weights_release(&w); /* idempotent */
}

/*  bfloat16 of f rounded to nearest even, from its bits (torch's .to(bfloat16) for finite f). */
static uint16_t s_bf16_rne(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/*  Token log-probs (1, 5) of a fixed sequence under m, on the host. */
static void s_token_logprobs(bt_model *m, float out[5]) {
    bt_ctx *ctx = bt_ctx_new();
    const int64_t shape[] = {1, 6}, ids[6] = {256, '1', '+', '2', '=', '3'},
                  ones[6] = {1, 1, 1, 1, 1, 1};
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *lp =
        bt_model_token_logprobs(m, ctx, bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ids),
                                bt_from_host(ctx, BT_I64, bt_cpu(), 2, shape, ones), 1.0, NULL);
    bt_set_grad_enabled(grad);
    CHECK_OK(bt_to_host(lp, out, 5 * sizeof *out));
    bt_ctx_destroy(&ctx);
}

/*  Bytes of a message's tensor frames. */
static size_t s_frame_bytes(const bt_msg_t *m) {
    size_t n = 0;
    for (int i = 0; i < bt_msg_tensor_count(m); i++)
        n += bt_msg_tensor_at(m, i).nbytes;
    return n;
}

/*  The WEIGHTS a bf16 run sends, through a real message: each matrix-product weight travels as
    bfloat16 (its frame half the float32 one), rounded to nearest even from the float32 master;
    the embedding and norms stay float32.  A rollout worker at bf16 that loads them computes the
    trainer policy's log-probs bit for bit, and samples the same completions with the same
    behaviour log-probs; had the embedding travelled as bfloat16 too, they would differ.  A float32
    policy still sends float32 only. */
static void test_bf16_weights(bt_model *policy, const bt_tokenizer_t *tok, bt_source_t *task) {
    bt_weights w32, w16;
    bt_weights_init(&w32);
    bt_weights_init(&w16);
    CHECK_OK(bt_weights_export(policy, 7, &w32)); /* float32 precision */
    CHECK_OK(bt_model_set_precision(policy, BT_BF16));
    CHECK_OK(bt_weights_export(policy, 7, &w16));
    size_t matmul = 0;
    for (int i = 0; i < w32.n; i++) {
        bool mm = bt_model_param_is_matmul(policy, i);
        CHECK(w32.dtype[i] == BT_F32 && w16.dtype[i] == (mm ? BT_BF16 : BT_F32));
        CHECK(mm == (w16.ndim[i] == 2 && strcmp(w16.names[i], "model.embed_tokens.weight")));
        const float *f = w32.data[i];
        bool same = true;
        for (int64_t k = 0; k < w32.numel[i] && same; k++) {
            uint16_t h = s_bf16_rne(f[k]);
            same = mm ? !memcmp((const uint16_t *)w16.data[i] + k, &h, sizeof h)
                      : ((const float *)w16.data[i])[k] == f[k];
        }
        CHECK(same);
        matmul += mm ? (size_t)w32.numel[i] : 0;
    }
    bt_msg_t *m32 = bt_msg_new(BT_MSG_WEIGHTS), *m16 = bt_msg_new(BT_MSG_WEIGHTS);
    CHECK_OK(bt_weights_to_msg(&w32, m32));
    CHECK_OK(bt_weights_to_msg(&w16, m16));
    size_t b32 = s_frame_bytes(m32), b16 = s_frame_bytes(m16);
    printf("WEIGHTS of the tiny model: float32 %zu bytes, bf16 %zu bytes (%.3f; matrix weights "
           "%zu of %zu bytes halved)\n",
           b32, b16, (double)b16 / (double)b32, matmul * 4, b32);
    CHECK(matmul > 0 && b16 == b32 - matmul * 2);

    /* the rollout worker: another model at bf16, synced from the message */
    bt_weights got;
    bt_weights_init(&got);
    CHECK_OK(bt_weights_from_msg(m16, &got));
    bt_model *worker = s_tiny_model(997);
    CHECK_OK(bt_model_set_precision(worker, BT_BF16));
    CHECK_OK(bt_weights_load(worker, &got));
    float want[5], have[5];
    s_token_logprobs(policy, want);
    s_token_logprobs(worker, have);
    CHECK(memcmp(want, have, sizeof want) == 0);
    bt_rollout_config rc;
    bt_rollout_config_init(&rc);
    rc.group_size = 4;
    rc.sample.max_new_tokens = 6;
    bt_rollout_batch a, b;
    bt_rollout_batch_init(&a);
    bt_rollout_batch_init(&b);
    CHECK_OK(bt_rollout_sample(policy, tok, task, s_idx, 6, &rc, 7, 11, &a));
    CHECK_OK(bt_rollout_sample(worker, tok, task, s_idx, 6, &rc, 7, 11, &b));
    size_t cells = (size_t)(a.n_prompts * a.group_size * a.max_new_tokens);
    CHECK(a.max_new_tokens == b.max_new_tokens && !memcmp(a.tokens, b.tokens, cells * 4));
    CHECK(!memcmp(a.logprobs, b.logprobs, cells * sizeof *a.logprobs));

    /* the alternative: the embedding as bfloat16 as well (all of WEIGHTS halved) */
    uint16_t *e = malloc((size_t)got.numel[0] * sizeof *e);
    for (int64_t k = 0; e && k < got.numel[0]; k++)
        e[k] = s_bf16_rne(((const float *)got.data[0])[k]);
    free(got.data[0]);
    got.data[0] = e;
    got.dtype[0] = BT_BF16;
    CHECK_OK(bt_weights_load(worker, &got));
    s_token_logprobs(worker, have);
    double gap = 0;
    for (int k = 0; k < 5; k++)
        gap = fmax(gap, fabs((double)have[k] - want[k]));
    printf("log-probs after a bf16 sync: equal bit for bit; with a bf16 embedding off by %.3g\n",
           gap);
    CHECK(gap > 1e-6);

    bt_rollout_batch_release(&a);
    bt_rollout_batch_release(&b);
    bt_weights_release(&got);
    bt_model_destroy(&worker);
    bt_msg_destroy(&m32);
    bt_msg_destroy(&m16);
    bt_weights_release(&w32);
    bt_weights_release(&w16);
    CHECK_OK(bt_model_set_precision(policy, BT_F32));
}

/* ---- (h) run.precision bf16: autocast forward passes, float32 state ------------------------ */

/*  Two trainers from the same weights, one with a bf16 policy: the reference inherits the
    policy's precision; after an SFT step every parameter and AdamW moment is still float32 (the
    master weights); a short SFT run lowers the loss as float32's does (test_sft_learns' bar) and
    follows float32's loss curve within what bf16 rounding explains; a GRPO step on the bf16
    policy's own rollouts (KV-cache sampling) sees ratios of 1 to bf16 rounding, so its clipping
    stays off. */
static void test_bf16_training(const bt_tokenizer_t *tok, bt_source_t *task) {
    enum { STEPS = 60 };
    bt_trainer_t *tr[2];
    for (int k = 0; k < 2; k++) {
        bt_model *m = s_tiny_model(41);
        if (k == 1)
            CHECK_OK(bt_model_set_precision(m, BT_BF16));
        bt_trainer_config cfg;
        bt_trainer_config_init(&cfg);
        cfg.micro_batch = 4;
        cfg.reference = true;
        tr[k] = bt_trainer_new(&m, &cfg);
        CHECK(tr[k] != NULL);
    }
    CHECK(bt_model_precision(bt_trainer_reference(tr[1])) == BT_BF16);
    bt_rollout_batch b;
    bt_rollout_batch_init(&b);
    CHECK_OK(bt_rollout_demonstrations(tok, task, s_idx, 6, &b));
    double loss[2][STEPS], worst = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int k = 0; k < 2; k++) {
            bt_trainer_stats st;
            CHECK_OK(bt_trainer_sft_step(tr[k], &b, 1e-2, &st));
            loss[k][step] = st.loss;
        }
        worst = fmax(worst, fabs(loss[1][step] - loss[0][step]) / loss[0][step]);
        if (step > 0)
            continue;
        bt_model *p = bt_trainer_policy(tr[1]);
        for (int i = 0; i < bt_model_num_params(p); i++) {
            bt_tensor *m1 = NULL, *m2 = NULL;
            CHECK_OK(bt_adamw_moments(bt_trainer_optimizer(tr[1]), i, &m1, &m2));
            CHECK(bt_dtype_of(bt_model_params(p)[i]) == BT_F32);
            CHECK(m1 && m2 && bt_dtype_of(m1) == BT_F32 && bt_dtype_of(m2) == BT_F32);
        }
    }
    printf("SFT loss, float32 vs bf16: %.4f vs %.4f at step 1, %.4f vs %.4f at step %d; "
           "largest relative gap %.3g\n",
           loss[0][0], loss[1][0], loss[0][STEPS - 1], loss[1][STEPS - 1], STEPS, worst);
    /* at the start the models are the same and the loss moves by the log-probs' bf16 error */
    CHECK(fabs(loss[1][0] - loss[0][0]) <= 0.01 * loss[0][0]);
    CHECK(loss[1][STEPS - 1] < loss[1][0] / 20);
    /* the curves: the loss falls 7000-fold, and bf16's half-percent logit error shifts when it
       falls by a few percent of the loss (measured: 8% at the most) */
    CHECK(worst <= 0.2);
    CHECK(fabs(loss[1][STEPS - 1] - loss[0][STEPS - 1]) <= 0.25 * loss[0][STEPS - 1]);
    bt_rollout_batch_release(&b);

    /* the GRPO step on a fresh bf16 policy, whose log-probs (about -ln 259) show bf16's error */
    bt_trainer_destroy(&tr[1]);
    bt_model *m = s_tiny_model(43);
    CHECK_OK(bt_model_set_precision(m, BT_BF16));
    bt_trainer_config cfg;
    bt_trainer_config_init(&cfg);
    cfg.reference = true;
    tr[1] = bt_trainer_new(&m, &cfg);
    bt_rollout_config rc;
    bt_rollout_config_init(&rc);
    rc.group_size = 4;
    rc.sample.max_new_tokens = 4;
    CHECK_OK(bt_rollout_sample(bt_trainer_policy(tr[1]), tok, task, s_idx, 6, &rc, 0, 5, &b));
    double adv[24];
    for (int i = 0; i < 24; i++)
        adv[i] = (i % 3) - 1.0;
    bt_grpo_config gc = bt_test_grpo_config();
    bt_trainer_stats st;
    CHECK_OK(bt_trainer_grpo_step(tr[1], &b, adv, 1e-3, &gc, &st));
    printf("bf16 GRPO step on its own rollouts: ratio mean %.6f, max %.6f, clipped %.3g\n",
           st.ratio_mean, st.ratio_max, st.clip_frac);
    CHECK(fabs(st.ratio_mean - 1) < 0.01 && st.ratio_max < 1.05 && st.clip_frac == 0);
    for (int i = 0; i < bt_model_num_params(bt_trainer_policy(tr[1])); i++)
        CHECK(bt_dtype_of(bt_model_params(bt_trainer_policy(tr[1]))[i]) == BT_F32);
    bt_rollout_batch_release(&b);
    bt_trainer_destroy(&tr[0]);
    bt_trainer_destroy(&tr[1]);
}

int main(void) {
    bt_set_num_threads(1);
    test_grpo_loss_matches();
    test_completion_mask();
    test_episode_mask();
    test_sft_episode_mask();
    test_micro_batches();
    test_batching();
    test_share_prefix();
    test_activation_checkpointing();
    test_data_parallel();
    test_sharded();

    bt_tokenizer_t *tok = bt_tokenizer_new_bytes();
    bt_source_t *task = s_task();
    bt_trainer_t *tr = s_trainer(31, 4, false);
    test_sft_learns(tr, tok, task);
    test_rollout(bt_trainer_policy(tr), tok, task);
    test_eval_shards(bt_trainer_policy(tr), tok, task);
    test_eval_metrics(bt_trainer_policy(tr), tok, task);
    test_weights(bt_trainer_policy(tr));
    test_bf16_weights(bt_trainer_policy(tr), tok, task);
    bt_trainer_destroy(&tr);
    test_bf16_training(tok, task);
    bt_source_destroy(&task);
    bt_tokenizer_destroy(&tok);
    return check_exit();
}
