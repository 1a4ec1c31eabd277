/*  model.h — Llama-family decoder-only transformer: config.json, parameters, forward passes, the KV
    cache, and model directories (config.json + model.safetensors + tokenizer_config.json).
    Threading: a model and a cache belong to one thread at a time.  Lifetime: a model lives until
    bt_model_destroy(); its parameters live in the model's own context, a cache in its own.

    Shapes: B batch, T sequence, C hidden_size, V vocab_size, H attention heads, Hkv key/value
   heads, D head_dim = C / H.  Token ids are BT_I64.  A mask (B, T) of any integer or bool dtype
   marks real tokens with 1 and padding with 0; padding may sit anywhere (left for generation, right
   for training).  A padded token is never attended to by another token, and gets the position of
   the last real token before it (0 if none), so real tokens see exactly what they would see
   unpadded. */
#ifndef BATON_MODEL_H
#define BATON_MODEL_H

#include "baton/rope_scaling.h"
#include "baton/status.h"
#include "baton/tensor.h"
#include "baton/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*  The fields of a Hugging Face LlamaConfig, under the same names. */
typedef struct bt_model_config {
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads; /* divides num_attention_heads; fewer = grouped-query attention */
    double rms_norm_eps;
    double rope_theta;
    int64_t max_position_embeddings;
    bt_rope_scaling rope_scaling; /* config.json's rope_scaling (kind none: absent) */
    bool tie_word_embeddings;     /* lm_head shares model.embed_tokens.weight */
    bool qkv_bias;                /* q/k/v projections have biases: Qwen2 (model_type "qwen2") */
    bool qk_norm;         /* RMSNorm of each query and key head: Qwen3 (model_type "qwen3") */
    int64_t head_dim;     /* 0: hidden_size / num_attention_heads (Qwen3 sets its own) */
    int64_t bos_token_id; /* -1 when none */
    int64_t eos_token_id; /* -1 when none */
    int64_t pad_token_id; /* -1 when none */
    bool mistral;         /* model_type "mistral": Llama's layout, with sliding_window when set */
    /*  A query at position i attends only to keys at positions j with i - j < sliding_window (the
        window holds the query and the sliding_window - 1 tokens before it, as transformers masks
        j <= i - sliding_window); 0 (config.json null): none.  Mistral's every layer, Gemma 2's
        even ones; any other config that sets it saves as "mistral". */
    int64_t sliding_window;
    /*  Gemma: 1 for model_type "gemma", 2 for "gemma2"; 0 neither.  Both scale the embeddings
        by sqrt(hidden_size), every RMSNorm by (1 + weight), use gelu-tanh in the MLP and tie the
        embeddings (their checkpoints' default).  Gemma 2 also normalises each layer's attention
        and MLP outputs (post_attention_layernorm, post_feedforward_layernorm; the MLP's input
        goes through pre_feedforward_layernorm), slides the window on even layers, scales the
        scores by query_pre_attn_scalar^-0.5 and caps the scores and the logits below. */
    int gemma;
    double query_pre_attn_scalar;   /* Gemma 2: scores * this^-0.5; 0: head_dim */
    double attn_logit_softcapping;  /* Gemma 2: scores -> cap tanh(scores / cap); 0: none */
    double final_logit_softcapping; /* Gemma 2: logits -> cap tanh(logits / cap); 0: none */
} bt_model_config;

/*  The attention head width: head_dim, or hidden_size / num_attention_heads when 0. */
int64_t bt_model_head_dim(const bt_model_config *cfg);

/*  Defaults for the byte-level tokenizer: vocab 259 (BOS 256, EOS 257, PAD 258), hidden 64,
    intermediate 176, 2 layers, 4 heads, 4 key/value heads, eps 1e-6, theta 10000, 1024 positions,
    untied head. */
void bt_model_config_init(bt_model_config *cfg);
/*  BT_EINVAL naming the first bad field, e.g. "config.json: num_key_value_heads: expected an
    integer dividing num_attention_heads (4), got 3". */
bt_status bt_model_config_validate(const bt_model_config *cfg);
/*  Parses and validates config.json text.  Missing optional keys take Hugging Face's defaults
    (num_key_value_heads = num_attention_heads, rms_norm_eps 1e-6, rope_theta 10000,
    max_position_embeddings 2048, tie_word_embeddings false, token ids none; Gemma's: head_dim 256,
    max_position_embeddings 8192, tie_word_embeddings true; Gemma 2's also sliding_window 4096,
    query_pre_attn_scalar 256, attn_logit_softcapping 50, final_logit_softcapping 30, null
    softcaps none); an eos_token_id list keeps its first id.  Qwen2's use_sliding_window true,
    and a Gemma activation other than gelu_pytorch_tanh (hidden_activation, else hidden_act),
    are refused.  Errors are BT_EFORMAT or BT_EINVAL and start with source (a file name). */
bt_status bt_model_config_parse(const char *json, const char *source, bt_model_config *out);
bt_status bt_model_config_load(const char *path, bt_model_config *out);
/*  config.json text with the model_type and architectures of cfg ("llama" LlamaForCausalLM,
    "qwen2", "qwen3", "mistral" (also when sliding_window is set), "gemma", "gemma2"), its fields
    (sliding_window, hidden_activation, Gemma 2's scalar and softcaps included) and
    "torch_dtype": "float32".  Caller owns the result; free() it.  NULL when out of memory. */
char *bt_model_config_to_json(const bt_model_config *cfg);
bt_status bt_model_config_save(const bt_model_config *cfg, const char *path);

typedef struct bt_model bt_model;

/*  A model with random weights: every matrix drawn from N(0, 0.02^2), every norm weight 1 (Gemma:
    0, which its (1 + weight) makes a scale of 1), drawn on the CPU from seed (so the weights do
    not depend on device) and moved to device.  Parameters require grad.  Caller owns the
    result; destroy with bt_model_destroy().  NULL on failure, with the reason in
    bt_last_error(). */
bt_model *bt_model_new(const bt_model_config *cfg, bt_device device, uint64_t seed);
void bt_model_destroy(bt_model **self_p);
/*  Borrowed: valid while self lives. */
const bt_model_config *bt_model_get_config(const bt_model *self);
bt_device bt_model_device(const bt_model *self);
/*  The precision of the forward passes (run.precision): BT_F32 (the default: everything in
    float32) or BT_BF16, which runs every forward pass under autocast to bfloat16 on the model's
    device type (bt_autocast_enter): matrix products in bfloat16, the parameters, the residual
    stream, norms and the returned logits in float32.  The parameters stay float32 either way
    (AdamW updates float32 master weights); run backward passes outside the forward, as the
    trainer does.  BT_EINVAL for another dtype. */
bt_status bt_model_set_precision(bt_model *self, bt_dtype compute);
bt_dtype bt_model_precision(const bt_model *self);
/*  Activation checkpointing (grpo.activation_checkpointing "layer"; off by default): a full forward
    pass with grad mode on keeps only each decoder layer's input and recomputes the layer during
    backward (bt_checkpoint), so its activations are held one layer at a time; gradients are those
    of the plain pass to float rounding.  The only random op, LoRA dropout, draws its masks from
    the pass's key, so the recomputation draws the same masks and is exact.  No-grad passes
   (rollouts, decode, the KL reference) are unchanged. */
void bt_model_set_activation_checkpointing(bt_model *self, bool on);

/*  Parameters that are not all resident (workers.shard "parameters", ZeRO-3).  Unit l < L is
    decoder layer l's parameters, unit L (L = num_hidden_layers) all the others (embedding, final
    norm, head).  With units set, a forward pass calls gather(user, L) first, then for each layer
    gather(user, l) before reading its weights and release(user, l, false) after its forward; a
    pass recording gradients runs every layer as a checkpoint (bt_checkpoint_hooked: the layer is
    gathered again when backward recomputes it) and calls release(user, l, true) once backward
    went through it, its parameters' .grad then complete for this pass.  Unit L is left gathered
    for the caller to release: its gradients come last, after the embedding's.  The callbacks run
    on the thread that runs backward; an error they return fails the pass.  NULL: every weight
    resident (the default).  Borrowed: *units must outlive its use. */
typedef struct bt_model_units {
    bt_status (*gather)(void *user, int unit);
    bt_status (*release)(void *user, int unit, bool grads);
    void *user;
} bt_model_units;
void bt_model_set_units(bt_model *self, const bt_model_units *units);
/*  The unit of parameter i (as above). */
int bt_model_param_unit(const bt_model *self, int i);

/*  The trained parameters.  Without LoRA, every weight, in a fixed order:
   model.embed_tokens.weight, then per layer N model.layers.N.{input_layernorm, self_attn.q_proj,
   self_attn.k_proj, self_attn.v_proj, self_attn.o_proj, post_attention_layernorm, mlp.gate_proj,
   mlp.up_proj, mlp.down_proj}.weight (Qwen2's q/k/v biases after v_proj, Qwen3's q_norm and k_norm
   after o_proj, Gemma 2's pre_feedforward_layernorm and post_feedforward_layernorm after
   post_attention_layernorm), then model.norm.weight and, unless tied, lm_head.weight. With
   LoRA (bt_model_add_lora) the adapters alone, which is all that training changes (so the
   optimizer, its checkpointed state and WEIGHTS see the adapters only), and the frozen base weights
   are the base params below. Borrowed: valid while self lives (until bt_model_add_lora,
   bt_model_merge_lora or bt_model_cast); writing into them (bt_copy_ under no-grad) changes the
   model. */
int bt_model_num_params(const bt_model *self);
bt_tensor *const *bt_model_params(const bt_model *self);
const char *bt_model_param_name(const bt_model *self, int i);
/*  True when parameter i is read only by matrix products (the projections, an untied lm_head),
    the operands autocast casts to the model's precision; false for the embedding (also when tied:
    its lookup reads it as it is), the norm weights and the biases; with LoRA every parameter (an
    adapter). */
bool bt_model_param_is_matmul(const bt_model *self, int i);
/*  The dtype bt_model_save writes: the dtype of the stored weights the model was loaded from
    (model.embed_tokens.weight's, so a bf16 checkpoint saves as bf16), BT_F32 for bt_model_new;
    the parameters themselves are float32 either way.  The setter takes BT_F32, BT_BF16 or
    BT_F16 (BT_EINVAL else). */
bt_dtype bt_model_save_dtype(const bt_model *self);
bt_status bt_model_set_save_dtype(bt_model *self, bt_dtype dtype);
/*  The parameter called name, adapters and base weights alike, or NULL. */
bt_tensor *bt_model_find_param(const bt_model *self, const char *name);
/*  Every base weight, in the order above, LoRA or not.  Borrowed as bt_model_params. */
int bt_model_num_base_params(const bt_model *self);
bt_tensor *const *bt_model_base_params(const bt_model *self);
const char *bt_model_base_param_name(const bt_model *self, int i);

/* ---- LoRA (Hu et al. 2021), parameterised as Hugging Face PEFT's LoraLayer -------------------
    A targeted linear y = x W^T becomes y = x W^T + (alpha / rank) * dropout(x) A^T B^T with A
    (rank, in) drawn as PEFT does (kaiming_uniform_ with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in)))
    and B (out, rank) zeros, so a new adapter leaves the model's function unchanged.  The base
    weights stop requiring grad.  Adapter names: model.layers.N.self_attn.q_proj.lora_A.weight,
    ...lora_B.weight, per layer in target order, A before B.
    Dropout applies only in full forwards with grad mode on (training), with adapters enabled;
    its masks are keyed by (seed, the model's count of such forwards, layer, target), so the
    recomputation of activation checkpointing draws the same masks as the first run and the two
    give the same gradients.  No-grad passes (rollouts, decode, the KL reference) never drop. */
typedef enum bt_lora_target {
    BT_LORA_Q_PROJ = 0,
    BT_LORA_K_PROJ = 1,
    BT_LORA_V_PROJ = 2,
    BT_LORA_O_PROJ = 3,
    BT_LORA_GATE_PROJ = 4,
    BT_LORA_UP_PROJ = 5,
    BT_LORA_DOWN_PROJ = 6,
    BT_LORA_TARGETS = 7 /* how many */
} bt_lora_target;
/*  "q_proj", ... "down_proj" (PEFT's target_modules names), by value, then NULL. */
extern const char *const bt_lora_target_names[BT_LORA_TARGETS + 1];
const char *bt_lora_target_name(bt_lora_target target);
/*  BT_EINVAL when name is none of them. */
bt_status bt_lora_target_parse(const char *name, bt_lora_target *out);

typedef struct bt_lora_config {
    int64_t rank;     /* r; 0: LoRA off */
    double alpha;     /* lora_alpha: the update is scaled by alpha / rank */
    double dropout;   /* lora_dropout, in [0, 1) */
    uint32_t targets; /* bit (1u << t) per bt_lora_target */
} bt_lora_config;
/*  rank 0, alpha 8, dropout 0, every target (PEFT LoraConfig's defaults but r, which is 8). */
void bt_lora_config_init(bt_lora_config *cfg);

/*  Adds adapters with cfg to the targeted linears of every layer, A drawn from seed (on the CPU,
    so every worker given the same seed draws the same A).  BT_EINVAL for a rank < 1, dropout
    outside [0, 1), no target, or a model that has adapters already. */
bt_status bt_model_add_lora(bt_model *self, const bt_lora_config *cfg, uint64_t seed);
/*  Borrowed; NULL without adapters. */
const bt_lora_config *bt_model_lora(const bt_model *self);
/*  Adapters on (the default) or off: off, every pass computes the base model alone, which is the
    KL reference of a LoRA policy (no second copy).  Returns the previous setting. */
bool bt_model_set_adapters_enabled(bt_model *self, bool on);
/*  Folds every adapter into its base weight, W += (alpha / rank) B A, and drops the adapters: the
    model becomes a plain one (base weights require grad again) computing the same function. */
bt_status bt_model_merge_lora(bt_model *self);
/*  What PEFT's adapter_model.safetensors puts before the model's names (PeftModel wraps the
    causal LM): base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight. */
#define BT_LORA_PEFT_PREFIX "base_model.model."
/*  PEFT's adapter folder in dir (created if needed): adapter_model.safetensors (F32, PEFT's names:
    base_model.model. + the adapter names above, no adapter name such as ".default") and
    adapter_config.json (peft_type "LORA", task_type "CAUSAL_LM", r, lora_alpha, lora_dropout,
    target_modules, bias "none", base_model_name_or_path base_name), so PeftModel.from_pretrained
    opens it on the base model.  BT_EINVAL without adapters. */
bt_status bt_model_save_adapters(const bt_model *self, const char *dir, const char *base_name);
/*  adapter_config.json's text for cfg (base_name NULL: "").  Caller owns the result; free() it.
    NULL when out of memory. */
char *bt_lora_config_to_json(const bt_lora_config *cfg, const char *base_name);
/*  Adds the adapters of such a folder (written by PEFT or baton) to a model without adapters:
    every tensor present with its shape, else BT_EFORMAT naming it; rsLoRA, DoRA, biases and
    fan_in_fan_out are refused. */
bt_status bt_model_load_adapters(bt_model *self, const char *dir);
/*  Converts every parameter (base and adapters) to dtype, BT_F32 or BT_F64, keeping which require
    grad: float64 makes every pass run in float64, for numerical checks (finite differences).  The
    old tensors stay in the model's context until it is destroyed. */
bt_status bt_model_cast(bt_model *self, bt_dtype dtype);

/*  Logits (B, T, V) F32 of ids (B, T) under mask (B, T), both on the model's device, computed at
   the model's precision and returned as float32.  Recorded by autograd when grad mode is on.  The
   result lives in ctx. */
bt_tensor *bt_model_forward(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *mask);
/*  Log-probs (B, T-1) F32 of the given next tokens: element t is log P(ids[:, t+1] | ids[:, <= t])
    under log_softmax(logits / temperature).  temperature > 0; 1 leaves the logits as they are.
    When entropy is not NULL, *entropy gets the entropy (B, T-1) of the same distributions.
    Elements whose target ids[:, t+1] is padding are computed all the same: mask them out. */
bt_tensor *bt_model_token_logprobs(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *mask,
                                   double temperature, bt_tensor **entropy);

/*  Packed rows, for training without padding: each row holds several sequences back to back.
    segments (B, T) of any integer dtype: 0 marks padding, and the tokens of one sequence share a
    positive id that no other sequence of the row has (their column + 1, say); positions (B, T)
    of any integer dtype: each token's rotary position, 0 at the first token of its sequence.  A
    token attends to the tokens at or before it of its own segment only (a block-diagonal causal
    mask), so each sequence gets the logits it gets alone, whatever shares its row; a padding token
    attends to itself only.  Otherwise as bt_model_forward and bt_model_token_logprobs (whose
    element t predicts ids[:, t+1]: at a sequence's last token that is the next sequence's first,
    so mask it out with the rest). */
bt_tensor *bt_model_forward_packed(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *segments,
                                   bt_tensor *positions);
bt_tensor *bt_model_token_logprobs_packed(bt_model *self, bt_ctx *ctx, bt_tensor *ids,
                                          bt_tensor *segments, bt_tensor *positions,
                                          double temperature, bt_tensor **entropy);

/*  Packed rows with shared prefixes, for training G responses to one prompt: the prompt is
    computed once and each response attends to it.  prefix (B, T) of any integer dtype: on the
    tokens of a segment that continues another (a response), that segment's id (the prompt's);
    0 elsewhere.  A token attends to the tokens at or before it of its own segment and of the
    segment its prefix names, so a response that continues a prompt gets the logits it gets as
    prompt ++ response alone when its positions continue from the prompt's end (a prompt of P
    tokens at 0..P-1, each of its responses at P, P+1, ...) and the prompt lies before it.
    prefix NULL: exactly the packed pass.
    Log-probs: element t is log P(ids[:, t+1]) under the output at the last token before t+1
    that token t+1 attends to: token t within a segment, the prompt's last token at a
    response's first (one shared output row predicts the first token of every response), token t
    when there is none.  So with a prompt at columns c..c+P-1 and a response at r..r+L-1 right
    after the prompt or after another segment, element r-1+j is the log-prob of response token
    j, as in the packed pass; the elements of the prompt are as the packed pass's. */
bt_tensor *bt_model_forward_shared(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *segments,
                                   bt_tensor *prefix, bt_tensor *positions);
bt_tensor *bt_model_token_logprobs_shared(bt_model *self, bt_ctx *ctx, bt_tensor *ids,
                                          bt_tensor *segments, bt_tensor *prefix,
                                          bt_tensor *positions, double temperature,
                                          bt_tensor **entropy);

/*  Keys and values of past tokens for incremental decoding, in decode slots: per layer (slots,
    Hkv, max_len, D) in the model's precision (F32 or BF16, as autocast would cast them for
    attention), preallocated; slot s holds one sequence's first len(s) tokens in columns
    [0, len(s)), position = column.  Host bookkeeping: the lengths.  Caller owns the result;
    destroy with bt_kv_cache_destroy().  NULL on failure (max_len beyond max_position_embeddings
    included). */
typedef struct bt_kv_cache bt_kv_cache;
bt_kv_cache *bt_kv_cache_new(const bt_model *model, int64_t slots, int64_t max_len);
void bt_kv_cache_destroy(bt_kv_cache **self_p);
int64_t bt_kv_cache_slots(const bt_kv_cache *self);
int64_t bt_kv_cache_len(const bt_kv_cache *self, int64_t slot);
/*  Slot becomes empty (its length 0); its memory stays for the next sequence. */
void bt_kv_cache_clear(bt_kv_cache *self, int64_t slot);
/*  Bytes of its key and value tensors. */
size_t bt_kv_cache_bytes(const bt_kv_cache *self);
/*  Columns its decode steps' attention has read, summed over steps and slots (runs to their
    longest): the attention work done, against the sum of the live lengths it needs. */
int64_t bt_kv_cache_columns_read(const bt_kv_cache *self);
/*  Copies slot from of src (its len(from) columns) into slots to[0..n) of dst, whose lengths
    become len(from): a shared prompt computed once, given to each of its sequences.  Tensors made
    for it go in ctx. */
bt_status bt_kv_cache_copy(bt_kv_cache *dst, bt_ctx *ctx, const int64_t *to, int64_t n,
                           const bt_kv_cache *src, int64_t from);
/*  Keeps slots keep[0..n) (distinct), in that order, as slots 0..n-1, and frees the others'
    memory: the tail of a batch whose sequences ended computes only the live ones. */
bt_status bt_kv_cache_compact(bt_kv_cache *self, const bt_model *model, const int64_t *keep,
                              int64_t n);

/*  Prefill: ids (N, T) BT_I64, row i's first lens[i] >= 1 tokens real (right padding after), run
    through the model at positions 0.. (causal, each row alone); row i's keys and values go into
    slot slots[i] (distinct), whose length becomes lens[i].  Returns the logits (N, V) F32 at each
    row's last real token.  Runs under no-grad.  On failure the slots' contents are undefined. */
bt_tensor *bt_model_prefill(bt_model *self, bt_kv_cache *cache, bt_ctx *ctx, bt_tensor *ids,
                            const int64_t *lens, const int64_t *slots);
/*  One decode step: each slot s with active[s] appends token ids[s] at column len(s) (its
    position) and attends to its columns [0, len(s)]; returns the logits (slots, V) F32 of the
    appended tokens (rows of inactive slots are meaningless) and adds one to each active slot's
    length.  An inactive slot's columns [0, len(s)) are kept (a row between its turns).  Host work is the slots' ids and lengths; it does not grow with the sequences.
    Attention runs over consecutive slots of similar lengths, each run to its own longest
    (docs/architecture.md, "Generation"), not every slot to the longest.  BT_ERANGE (NULL) when an
    active slot is full.  Runs under no-grad. */
bt_tensor *bt_model_decode(bt_model *self, bt_kv_cache *cache, bt_ctx *ctx, const int64_t *ids,
                           const bool *active);

/*  Extend: ids (N, T) of any integer dtype, every row T >= 1 real tokens (no padding), appended
    to slots slots[i] (distinct) at their current lengths: row i's token t goes to column and
    position len(slots[i]) + t and attends to its slot's columns [0, len(slots[i]) + t] (the
    slot's past, then the new tokens causally; the sliding window by position as the other
    passes).  The slots' lengths grow by T.  Returns the logits (N, V) F32 at each row's last
    token.  For a multi-turn episode: the observation is appended to the slot that holds the
    episode's earlier turns in one call, then bt_model_decode goes on from it.  The work grows with
    N and the N slots' lengths, not with the cache's other slots (their columns are neither read
    nor written; bt_kv_cache_columns_read counts decode steps only).  BT_ERANGE when a slot would
    pass max_len, BT_EINVAL for a slot out of range or repeated: NULL, nothing changed.  On any
    other failure the slots' first len columns are intact and their lengths unchanged.  Runs under
    no-grad. */
bt_tensor *bt_model_extend(bt_model *self, bt_kv_cache *cache, bt_ctx *ctx, bt_tensor *ids,
                           const int64_t *slots);

/*  Writes dir/config.json, dir/model.safetensors (every tensor in bt_model_save_dtype, rounded
    to nearest even as torch's .to() does; Hugging Face names; lm_head.weight omitted when tied)
    and the files of tok (NULL: the byte-level tokenizer), creating dir if needed.  With adapters,
    model.safetensors is the base and the adapters go beside it in PEFT's layout
    (bt_model_save_adapters, base_model_name_or_path: dir as given). */
bt_status bt_model_save(const bt_model *self, const bt_tokenizer_t *tok, const char *dir);
/*  Reads a directory written by bt_model_save or a Hugging Face Llama checkpoint stored as one
    model.safetensors (F32, F16 or BF16, converted to F32), with the adapters of an
    adapter_config.json beside it (bt_model_load_adapters).  Every expected tensor must be present
    with its shape; the first problem is reported by name.  Caller owns the result; destroy with
    bt_model_destroy().  NULL on failure, with the reason in bt_last_error(). */
bt_model *bt_model_load(const char *dir, bt_device device);
/*  The dtype of dir's stored model.embed_tokens.weight, which bt_model_load(dir) makes the
    model's bt_model_save_dtype, from the safetensors headers alone (no tensor is read).  Errors
    as bt_model_load's. */
bt_status bt_model_stored_dtype(const char *dir, bt_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
