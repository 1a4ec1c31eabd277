/*  plan.c — the memory planner (plan.h): bytes per role from the config and the model's shape.
    Every figure is a count of the tensors the code named beside it allocates; docs/architecture.md
    ("Memory planner") records what is counted and the error measured against c10's allocator. */
#include "baton/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define S_F32 4.0
#define S_BF16 2.0
#define S_PREFIX_MAX 64  /* model/generate.c: shared prompts held for admission at once */
#define S_EVAL_BATCH 256 /* workers/evaluator.c: sequences per bt_generate call */

static int64_t s_max(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static int64_t s_min(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/*  Parameter elements of one decoder layer and of the whole model (model.c, s_model_alloc). */
static int64_t s_layer_params(const bt_model_config *m) {
    int64_t C = m->hidden_size, I = m->intermediate_size, D = bt_model_head_dim(m);
    int64_t HD = m->num_attention_heads * D, KD = m->num_key_value_heads * D;
    int64_t n = 2 * C + HD * C + 2 * KD * C + C * HD + 3 * I * C;
    if (m->qkv_bias)
        n += HD + 2 * KD;
    if (m->qk_norm)
        n += 2 * D;
    return n;
}

static int64_t s_params(const bt_model_config *m) {
    int64_t VC = m->vocab_size * m->hidden_size;
    return VC + m->num_hidden_layers * s_layer_params(m) + m->hidden_size +
           (m->tie_word_embeddings ? 0 : VC);
}

/*  Elements of the LoRA adapters (model.lora): r (in + out) per targeted linear per layer; 0 when
    LoRA is off. */
static int64_t s_adapter_params(const bt_model_config *m, const bt_lora_config *lo) {
    if (lo->rank <= 0)
        return 0;
    int64_t C = m->hidden_size, I = m->intermediate_size, D = bt_model_head_dim(m);
    int64_t HD = m->num_attention_heads * D, KD = m->num_key_value_heads * D;
    const int64_t in_out[BT_LORA_TARGETS] = {C + HD, C + KD, C + KD, HD + C, C + I, C + I, I + C};
    int64_t n = 0;
    for (int t = 0; t < BT_LORA_TARGETS; t++)
        if (lo->targets & (1u << t))
            n += lo->rank * in_out[t];
    return n * m->num_hidden_layers;
}

/*  Elements of the matrices autocast casts to bfloat16 (every linear's weight; the embedding is
    looked up in float32). */
static int64_t s_matmul_params(const bt_model_config *m) {
    int64_t C = m->hidden_size, I = m->intermediate_size, D = bt_model_head_dim(m);
    int64_t HD = m->num_attention_heads * D, KD = m->num_key_value_heads * D;
    return m->num_hidden_layers * (2 * HD * C + 2 * KD * C + 3 * I * C) +
           m->vocab_size * m->hidden_size;
}

/*  The trainer keeps a KL reference when a KL penalty may apply (workers/worker.c). */
static bool s_has_reference(const bt_config *cfg) {
    return cfg->grpo.kl_coef > 0 ||
           (cfg->pbt.enabled && (cfg->pbt.explore_mask & (1 << BT_PBT_KL_COEF)));
}

int64_t bt_plan_prompt_bound(const bt_config *cfg, const bt_model_config *model) {
    int64_t extra =
        (int64_t)strlen(cfg->task.chat_template) + (int64_t)strlen(cfg->task.system_prompt);
    if (cfg->task.kind == BT_CONFIG_TASK_ARITHMETIC)
        return 1 + 2 * cfg->task.digits + 2 + extra; /* BOS "a" op "b" "=" (data/source.c) */
    return s_max(1, model->max_position_embeddings - bt_config_completion_width(cfg));
}

/*  Bytes one decoder layer's forward keeps for a micro-batch of R rows of width T with grad on:
    each shim op's output lives in the pass's context (bt_ctx) until the micro-batch ends, and
    autograd keeps what an op saves inside (model.c s_block, tensor/aten_shim.cpp).  a: bytes of an
    activation element (float32, or bfloat16 for a product under autocast). */
static double s_layer_bytes(const bt_model_config *m, int64_t R, int64_t T, bool bf16) {
    double C = (double)m->hidden_size, I = (double)m->intermediate_size;
    double D = (double)bt_model_head_dim(m), H = (double)m->num_attention_heads;
    double HD = H * D, KD = (double)m->num_key_value_heads * D, N = (double)R * (double)T;
    double lo = bf16 ? S_BF16 : S_F32; /* products' outputs and their inputs' casts */
    /* two RMSNorms: the normalised y (saved by w * y) and the output, float32; the residual
       stream: h = x + attn, x' = h + mlp, and the merged heads' copy, float32 */
    double per_token = S_F32 * (2 * 2 * C + 3 * C);
    /* products: q, k, v, o_proj, gate, up, down outputs */
    per_token += lo * (HD + 2 * KD + C + 3 * I);
    /* rope outputs (q, k), attention's output, silu and the gated product */
    per_token += lo * (HD + KD + HD + 2 * I);
    /* bt_attention: the copies of q (scaled), k and v (repeated to H heads) that matmul saves */
    per_token += lo * 3 * HD;
    if (bf16) /* the casts of each product's input: x for q, k, v; merged heads; x for gate, up;
                 the gated product */
        per_token += S_BF16 * (C + C + C + I);
    if (m->qkv_bias)
        per_token += lo * (HD + 2 * KD);
    if (m->qk_norm)
        per_token += S_F32 * 2 * (HD + KD);
    /* softmax's output (R, H, T, T) and the mask masked_fill_ saves (R, 1, T, T) bool */
    double scores = (double)R * H * (double)T * (double)T * (bf16 ? S_BF16 : S_F32) +
                    (double)R * (double)T * (double)T;
    return N * per_token + scores;
}

double bt_plan_trainer_activations(const bt_config *cfg, const bt_model_config *m, int64_t R,
                                   int64_t T) {
    bool bf16 = cfg->run.precision == BT_CONFIG_PRECISION_BF16;
    double N = (double)R * (double)T, C = (double)m->hidden_size, V = (double)m->vocab_size;
    double D = (double)bt_model_head_dim(m), L = (double)m->num_hidden_layers;
    double layer = s_layer_bytes(m, R, T, bf16);
    /* the pass: embedding output, rotary tables (R, 1, T, D) cos and sin, the mask (R, 1, T, T) */
    double pass = N * C * S_F32 + 2 * N * D * S_F32 + (double)R * (double)T * (double)T;
    /* sharded weights run every layer as a checkpoint (bt_model_set_units) */
    bool recompute =
        cfg->grpo.activation_checkpointing || cfg->workers.shard == BT_SHARD_PARAMETERS;
    double layers = recompute ? L * N * C * S_F32 + layer /* layer inputs, one layer recomputed */
                              : L * layer;
    /* the head: final norm (y, out), the logits, /temperature, log_softmax, and the entropy's
       exp and product, float32 (V per token each) */
    double head = N * (2 * C * S_F32 + 5 * V * S_F32) + (bf16 ? N * C * S_BF16 : 0);
    /* backward's largest transient: the head's gradients, three (N, V) at once */
    double transient = 3 * N * V * S_F32;
    double act = pass + layers + head + transient;
    if (s_has_reference(cfg)) /* the reference's no-grad pass, kept in the same context */
        act += L * N * (C * 7 + 4 * (double)m->intermediate_size) * S_F32 + 4 * N * V * S_F32;
    return act;
}

/*  The largest micro-batch's shape for micro-batch mb: items of k sequences (a shared prompt and
    k completions of Lr tokens, or one sequence), one item a row but under "pack" (equal widths
    fill one row each), at most mb sequences per micro-batch (model.c s_plan_make). */
static void s_micro_shape(const bt_config *cfg, int64_t P, int64_t Lr, int64_t ranks, int64_t mb,
                          int64_t *R, int64_t *T) {
    int64_t G = cfg->grpo.group_size;
    int64_t n = (cfg->grpo.prompts_per_step * G + ranks - 1) / ranks; /* a rank's sequences */
    int64_t k = cfg->grpo.share_prefix ? s_min(G, mb) : 1;
    int64_t items = (n + k - 1) / k, w = s_max(2, P + k * Lr);
    int64_t rows = cfg->grpo.batching == BT_BATCHING_PACK ? mb : s_max(1, mb / k);
    if (cfg->grpo.batching == BT_BATCHING_PACK && cfg->grpo.pack_tokens > 0)
        rows = s_max(1, cfg->grpo.pack_tokens / w);
    *R = s_max(1, s_min(rows, items));
    *T = w;
}

static void s_total(bt_plan_role *r) {
    r->total = r->weights + r->grads + r->moments + r->reference + r->kv_cache + r->activations;
}

/*  A generating worker: the policy's weights (and their bf16 casts), S decode slots of width
    max_len, the prefix store of the shared prompts, one step's logits. */
static void s_generator(const bt_model_config *m, bool bf16, int64_t S, int64_t max_len,
                        int64_t shared, int64_t P, bt_plan_role *r) {
    double kv_elem = bf16 ? S_BF16 : S_F32;
    double per_slot_col = 2.0 * (double)m->num_hidden_layers * (double)m->num_key_value_heads *
                          (double)bt_model_head_dim(m) * kv_elem;
    *r = (bt_plan_role){0};
    r->weights = (double)s_params(m) * S_F32 + (bf16 ? (double)s_matmul_params(m) * S_BF16 : 0);
    r->kv_cache = per_slot_col * (double)S * (double)max_len;
    if (shared > 0)
        r->kv_cache += per_slot_col * (double)s_min(s_max(shared, 1), S_PREFIX_MAX) * (double)P;
    r->activations = 3.0 * (double)S * (double)m->vocab_size * S_F32;
    s_total(r);
}

static void s_trainer(const bt_config *cfg, const bt_model_config *m, int64_t P, int64_t L,
                      int64_t ranks, int64_t mb, bt_plan *out) {
    bool bf16 = cfg->run.precision == BT_CONFIG_PRECISION_BF16;
    /* W: what training changes, the weights or with LoRA the adapters alone (the base is then
       frozen and resident on every rank whatever the stage, and the KL reference is the base) */
    double adapters = (double)s_adapter_params(m, &cfg->lora) * S_F32;
    double base = adapters > 0 ? (double)s_params(m) * S_F32 : 0;
    double W = adapters > 0 ? adapters : (double)s_params(m) * S_F32, N = (double)ranks;
    double layer =
        adapters > 0 ? adapters / (double)m->num_hidden_layers : (double)s_layer_params(m) * S_F32;
    double rest = W - (double)m->num_hidden_layers * layer;
    bt_plan_role *r = &out->trainer;
    *r = (bt_plan_role){0};
    int64_t R, T;
    s_micro_shape(cfg, P, L, ranks, mb, &R, &T);
    out->rows = R;
    out->width = T;
    switch (cfg->workers.shard) {
    case BT_SHARD_NONE:
        r->weights = W;
        r->grads = W;
        r->moments = 2 * W;
        break;
    case BT_SHARD_OPTIMIZER: /* whole gradients, all-reduced; the rank's slice copied */
        r->weights = W;
        r->grads = W + W / N;
        r->moments = 2 * W / N;
        break;
    case BT_SHARD_GRADIENTS: /* backward accumulates whole gradients, reduce-scattered after the
                                last micro-batch into the rank's shard (workers/trainer.c) */
        r->weights = W;
        r->grads = W + W / N;
        r->moments = 2 * W / N;
        break;
    case BT_SHARD_PARAMETERS: /* ZeRO-3 (workers/trainer.c): the rank's master slice, and
                                 during a pass one layer and the rest (embedding, final norm,
                                 head) gathered with their gradients; rank 0, the largest, also
                                 holds the whole weights between jobs (it publishes them) */
        r->weights = W / N + W;
        r->grads = W / N + layer + rest;
        r->moments = 2 * W / N;
        break;
    }
    if (bf16) /* autocast's casts, cached for the forward (one layer's when gathered per layer) */
        r->weights +=
            (double)s_matmul_params(m) * S_BF16 /
            (cfg->workers.shard == BT_SHARD_PARAMETERS ? (double)m->num_hidden_layers : 1);
    r->weights += base;
    if (s_has_reference(cfg) && adapters == 0) /* a whole, frozen copy on every rank */
        r->reference = W;
    r->activations = bt_plan_trainer_activations(cfg, m, R, T);
    s_total(r);
}

/*  The most one device holds when the run's workers are spread over gpus devices one at a time:
    the ceil(workers / gpus) largest workers together. */
static double s_device_peak(const bt_plan *p, const bt_config *cfg, int64_t gpus) {
    int64_t counts[3] = {p->ranks, cfg->workers.rollout, cfg->workers.eval};
    double sizes[3] = {p->trainer.total, p->rollout.total, p->eval.total};
    int64_t workers = counts[0] + counts[1] + counts[2];
    if (gpus <= 0)
        gpus = workers;
    int64_t per = (workers + gpus - 1) / gpus;
    double peak = 0;
    for (int64_t taken = 0; taken < per;) { /* largest first */
        int best = -1;
        for (int i = 0; i < 3; i++)
            if (counts[i] > 0 && (best < 0 || sizes[i] > sizes[best]))
                best = i;
        if (best < 0)
            break;
        int64_t n = s_min(counts[best], per - taken);
        peak += (double)n * sizes[best];
        taken += n;
        counts[best] = 0;
    }
    return peak;
}

/*  The plan at micro-batch mb, for prompts of P tokens and completions of L
    (bt_config_completion_width). */
static void s_plan_at(const bt_config *cfg, const bt_model_config *m, const bt_plan_input *in,
                      int64_t P, int64_t L, int64_t mb, bt_plan *out) {
    bool bf16 = cfg->run.precision == BT_CONFIG_PRECISION_BF16;
    out->micro_batch = mb;
    s_trainer(cfg, m, P, L, out->ranks, mb, out);
    int64_t G = cfg->grpo.group_size, B = cfg->grpo.prompts_per_step * G;
    s_generator(m, bf16, B, P + L - 1, G > 1 ? cfg->grpo.prompts_per_step : 0, P, &out->rollout);
    /* episodes evaluate at their width too */
    int64_t eval_new = s_max(cfg->eval.max_new_tokens, L > cfg->grpo.max_new_tokens ? L : 1);
    s_generator(m, bf16, S_EVAL_BATCH, P + eval_new - 1, 0, P, &out->eval);
    if (cfg->workers.rollout == 0)
        out->rollout = (bt_plan_role){0};
    if (cfg->workers.eval == 0)
        out->eval = (bt_plan_role){0};
    out->device_peak = s_device_peak(out, cfg, in->gpus);
    int64_t workers = out->ranks + cfg->workers.rollout + cfg->workers.eval;
    out->trainer_device =
        in->gpus <= 0 || in->gpus >= workers ? out->trainer.total : out->device_peak;
    out->judged = in->device_bytes > 0;
    out->fits = out->judged && out->device_peak <= in->device_bytes;
}

bt_status bt_plan_make(const bt_config *cfg, const bt_model_config *model, const bt_plan_input *in,
                       bt_plan *out, char *err, size_t len) {
    *out = (bt_plan){0};
    if (model->hidden_size < 1 || model->num_hidden_layers < 1 || model->vocab_size < 1 ||
        model->num_attention_heads < 1 || model->num_key_value_heads < 1) {
        snprintf(err, len, "plan: the model's shape is incomplete");
        return BT_EINVAL;
    }
    int64_t P = in->prompt_len > 0 ? in->prompt_len : bt_plan_prompt_bound(cfg, model);
    int64_t L = bt_config_completion_width(cfg);
    int64_t mb = in->micro_batch > 0 ? in->micro_batch : s_max(cfg->grpo.micro_batch, 1);
    out->params = s_params(model);
    out->prompt_len = P;
    out->ranks = s_max(cfg->workers.trainer, 1);
    out->max_micro_batch = -1;
    if (in->device_bytes > 0) { /* the largest that fits: the peak grows with the micro-batch */
        int64_t n = (cfg->grpo.prompts_per_step * cfg->grpo.group_size + out->ranks - 1) /
                    out->ranks,
                best = 0;
        bt_plan probe = *out;
        for (int64_t lo = 1, hi = n; lo <= hi;) {
            int64_t mid = lo + (hi - lo) / 2;
            s_plan_at(cfg, model, in, P, L, mid, &probe);
            if (probe.trainer_device <= in->device_bytes) {
                best = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        out->max_micro_batch = best;
    }
    if (in->micro_batch <= 0 && cfg->grpo.micro_batch == 0) /* "auto": the largest that fits */
        mb = out->max_micro_batch > 0 ? out->max_micro_batch : 1;
    s_plan_at(cfg, model, in, P, L, mb, out);
    return BT_OK;
}
