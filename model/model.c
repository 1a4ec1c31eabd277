/*  model.c — the Llama-family decoder: config.json, parameters, full and cached forward passes,
    model directories.  Reference: Hugging Face transformers, models/llama/modeling_llama.py. */
#define _POSIX_C_SOURCE 200809L

#include "baton/model.h"
#include "baton/fileio.h"
#include "baton/rng.h"
#include "baton/safetensors.h"
#include "baton/tokenizer.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_NAME_MAX 64
#define S_PER_LAYER                                                                                \
    12 /* parameters per decoder layer, at most (Qwen2's 3 biases; Qwen3's 2 norms) */
#define S_CONFIG_MAX (1 << 20)     /* largest config.json read, in bytes */
#define S_POSITION_MAX 2147483647. /* upper clamp for positions */
#define S_HEAD_DIM_MAX 1024        /* head_dim a scaled rope table is computed for */

/* ---- config.json ------------------------------------------------------------------------------
 */

void bt_model_config_init(bt_model_config *cfg) {
    *cfg = (bt_model_config){
        .vocab_size = 259,
        .hidden_size = 64,
        .intermediate_size = 176,
        .num_hidden_layers = 2,
        .num_attention_heads = 4,
        .num_key_value_heads = 4,
        .rms_norm_eps = 1e-6,
        .rope_theta = 10000.0,
        .max_position_embeddings = 1024,
        .tie_word_embeddings = false,
        .bos_token_id = 256,
        .eos_token_id = 257,
        .pad_token_id = 258,
    };
}

static bt_status s_check_token(const char *src, const char *key, int64_t id, int64_t vocab) {
    if (id < -1 || id >= vocab)
        return bt_fail(BT_EINVAL, "%s: %s: expected an integer in [0, %lld) or null, got %lld", src,
                       key, (long long)vocab, (long long)id);
    return BT_OK;
}

static bt_status s_validate(const bt_model_config *c, const char *src) {
    const struct {
        const char *key;
        int64_t value;
    } positive[] = {{"vocab_size", c->vocab_size},
                    {"hidden_size", c->hidden_size},
                    {"intermediate_size", c->intermediate_size},
                    {"num_hidden_layers", c->num_hidden_layers},
                    {"num_attention_heads", c->num_attention_heads},
                    {"max_position_embeddings", c->max_position_embeddings}};
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
        if (positive[i].value < 1)
            return bt_fail(BT_EINVAL, "%s: %s: expected a positive integer, got %lld", src,
                           positive[i].key, (long long)positive[i].value);
    if (c->head_dim < 0 || c->head_dim % 2)
        return bt_fail(BT_EINVAL, "%s: head_dim: expected an even positive integer, got %lld", src,
                       (long long)c->head_dim);
    if (c->head_dim == 0 &&
        (c->hidden_size % c->num_attention_heads || (c->hidden_size / c->num_attention_heads) % 2))
        return bt_fail(BT_EINVAL,
                       "%s: num_attention_heads: expected an integer dividing hidden_size (%lld) "
                       "into an even head_dim, got %lld",
                       src, (long long)c->hidden_size, (long long)c->num_attention_heads);
    if (c->num_key_value_heads < 1 || c->num_attention_heads % c->num_key_value_heads)
        return bt_fail(BT_EINVAL,
                       "%s: num_key_value_heads: expected an integer dividing "
                       "num_attention_heads (%lld), got %lld",
                       src, (long long)c->num_attention_heads, (long long)c->num_key_value_heads);
    if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
        return bt_fail(BT_EINVAL, "%s: rms_norm_eps: expected a positive number, got %g", src,
                       c->rms_norm_eps);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return bt_fail(BT_EINVAL, "%s: rope_theta: expected a positive number, got %g", src,
                       c->rope_theta);
    if (c->sliding_window < 0 ||
        (c->sliding_window > 0 && (c->qkv_bias || c->qk_norm || c->gemma == 1)))
        return bt_fail(BT_EINVAL,
                       "%s: sliding_window: expected a positive integer with model_type mistral "
                       "or gemma2, or 0 (none), got %lld",
                       src, (long long)c->sliding_window);
    if (c->gemma < 0 || c->gemma > 2 || (c->gemma && (c->qkv_bias || c->qk_norm || c->mistral)))
        return bt_fail(BT_EINVAL,
                       "%s: model_type: gemma and gemma2 do not combine with qwen2, qwen3 or "
                       "mistral",
                       src);
    const struct {
        const char *key;
        double value;
    } gemma2[] = {{"query_pre_attn_scalar", c->query_pre_attn_scalar},
                  {"attn_logit_softcapping", c->attn_logit_softcapping},
                  {"final_logit_softcapping", c->final_logit_softcapping}};
    for (size_t i = 0; i < sizeof gemma2 / sizeof gemma2[0]; i++)
        if (!(gemma2[i].value >= 0) || !isfinite(gemma2[i].value) ||
            (gemma2[i].value > 0 && c->gemma != 2))
            return bt_fail(BT_EINVAL,
                           "%s: %s: expected a positive number with model_type gemma2, or 0 "
                           "(none), got %g",
                           src, gemma2[i].key, gemma2[i].value);
    bt_status st = s_check_token(src, "bos_token_id", c->bos_token_id, c->vocab_size);
    if (st == BT_OK)
        st = s_check_token(src, "eos_token_id", c->eos_token_id, c->vocab_size);
    if (st == BT_OK)
        st = s_check_token(src, "pad_token_id", c->pad_token_id, c->vocab_size);
    return st;
}

bt_status bt_model_config_validate(const bt_model_config *cfg) {
    return s_validate(cfg, "config.json");
}

/*  What a JSON value is, for error messages. */
static void s_describe(const cJSON *item, char *buf, size_t len) {
    if (cJSON_IsNumber(item))
        snprintf(buf, len, "%.17g", item->valuedouble);
    else if (cJSON_IsString(item))
        snprintf(buf, len, "\"%.40s\"", item->valuestring);
    else if (cJSON_IsBool(item))
        snprintf(buf, len, "%s", cJSON_IsTrue(item) ? "true" : "false");
    else if (cJSON_IsNull(item))
        snprintf(buf, len, "null");
    else
        snprintf(buf, len, "%s", cJSON_IsArray(item) ? "an array" : "an object");
}

static bt_status s_type_error(const char *src, const char *key, const char *expected,
                              const cJSON *found) {
    char got[64];
    s_describe(found, got, sizeof got);
    return bt_fail(BT_EFORMAT, "%s: %s: expected %s, got %s", src, key, expected, got);
}

static bool s_is_integer(const cJSON *item) {
    return cJSON_IsNumber(item) && item->valuedouble == floor(item->valuedouble) &&
           fabs(item->valuedouble) < 9007199254740992.0;
}

/*  Leaves *out alone when key is absent and not required. */
static bt_status s_get_int(const cJSON *root, const char *src, const char *key, bool required,
                           int64_t *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!item && !required)
        return BT_OK;
    if (!item)
        return bt_fail(BT_EFORMAT, "%s: %s: expected an integer, got nothing (missing key)", src,
                       key);
    if (!s_is_integer(item))
        return s_type_error(src, key, "an integer", item);
    *out = (int64_t)item->valuedouble;
    return BT_OK;
}

static bt_status s_get_number(const cJSON *root, const char *src, const char *key, double *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!item)
        return BT_OK;
    if (!cJSON_IsNumber(item))
        return s_type_error(src, key, "a number", item);
    *out = item->valuedouble;
    return BT_OK;
}

static bt_status s_get_bool(const cJSON *root, const char *src, const char *key, bool *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!item)
        return BT_OK;
    if (!cJSON_IsBool(item))
        return s_type_error(src, key, "true or false", item);
    *out = cJSON_IsTrue(item);
    return BT_OK;
}

/*  A token id: an integer, null (none, -1) or a list whose first id is kept. */
static bt_status s_get_token(const cJSON *root, const char *src, const char *key, int64_t *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsArray(item) && cJSON_GetArraySize(item) > 0)
        item = cJSON_GetArrayItem(item, 0);
    if (!item || cJSON_IsNull(item)) {
        *out = -1;
        return BT_OK;
    }
    if (!s_is_integer(item))
        return s_type_error(src, key, "an integer, a list of integers or null", item);
    *out = (int64_t)item->valuedouble;
    return BT_OK;
}

/*  The model_type of config.json, or "llama" when absent (NULL when not a string). */
static const char *s_model_type(const cJSON *root) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    return !type ? "llama" : cJSON_IsString(type) ? type->valuestring : NULL;
}

static bool s_is_type(const cJSON *root, const char *name) {
    const char *type = s_model_type(root);
    return type && strcmp(type, name) == 0;
}

/*  Gemma's MLP activation: hidden_activation, else hidden_act (transformers' GemmaMLP reads the
    first when set); only the tanh approximation of gelu is implemented, and a bare "gelu" (exact
    in current transformers, tanh in the first Gemma releases) is ambiguous, so refused. */
static bt_status s_check_gemma_act(const cJSON *root, const char *src) {
    const char *key = "hidden_activation";
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!act || cJSON_IsNull(act)) {
        key = "hidden_act";
        act = cJSON_GetObjectItemCaseSensitive(root, key);
    }
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "gelu_pytorch_tanh") == 0))
        return s_type_error(src, key, "\"gelu_pytorch_tanh\"", act);
    return BT_OK;
}

/*  Gemma 2's layer_types, when given, must be its default: sliding_attention on even layers,
    full_attention on odd ones (Gemma2DecoderLayer's is_sliding = not layer_idx % 2). */
static bt_status s_check_layer_types(const cJSON *root, const char *src) {
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (!types || cJSON_IsNull(types))
        return BT_OK;
    int i = 0;
    for (const cJSON *t = cJSON_IsArray(types) ? types->child : NULL; t; t = t->next, i++) {
        const char *want = i % 2 ? "full_attention" : "sliding_attention";
        if (!cJSON_IsString(t) || strcmp(t->valuestring, want) != 0) {
            char key[32];
            snprintf(key, sizeof key, "layer_types[%d]", i);
            return s_type_error(src, key,
                                i % 2 ? "\"full_attention\" (alternating layers)"
                                      : "\"sliding_attention\" (alternating layers)",
                                t);
        }
    }
    if (!cJSON_IsArray(types))
        return s_type_error(src, "layer_types", "a list", types);
    return BT_OK;
}

/*  A number or null (none, 0); leaves *out alone when key is absent. */
static bt_status s_get_cap(const cJSON *root, const char *src, const char *key, double *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsNull(item))
        *out = 0;
    return cJSON_IsNull(item) ? BT_OK : s_get_number(root, src, key, out);
}

/*  Rejects the Hugging Face options this decoder does not implement. */
static bt_status s_check_supported(const cJSON *root, const char *src) {
    const char *types[] = {"llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2"};
    bool known = false;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        known = known || s_is_type(root, types[i]);
    if (!known)
        return s_type_error(src, "model_type",
                            "\"llama\", \"qwen2\", \"qwen3\", \"mistral\", \"gemma\" or "
                            "\"gemma2\"",
                            cJSON_GetObjectItemCaseSensitive(root, "model_type"));
    if (s_is_type(root, "gemma") || s_is_type(root, "gemma2")) {
        BT_TRY(s_check_gemma_act(root, src));
        BT_TRY(s_check_layer_types(root, src));
    } else {
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
        if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
            return s_type_error(src, "hidden_act", "\"silu\"", act);
    }
    const char *off[] = {"attention_bias", "mlp_bias", "use_sliding_window"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, off[i]);
        if (item && !cJSON_IsFalse(item) && !cJSON_IsNull(item))
            return s_type_error(src, off[i], "false or null (not supported)", item);
    }
    return BT_OK;
}

static bt_status s_parse_fields(const cJSON *root, const char *src, bt_model_config *c) {
    bt_status st = s_check_supported(root, src);
    if (st == BT_OK)
        st = s_get_int(root, src, "vocab_size", true, &c->vocab_size);
    if (st == BT_OK)
        st = s_get_int(root, src, "hidden_size", true, &c->hidden_size);
    if (st == BT_OK)
        st = s_get_int(root, src, "intermediate_size", true, &c->intermediate_size);
    if (st == BT_OK)
        st = s_get_int(root, src, "num_hidden_layers", true, &c->num_hidden_layers);
    if (st == BT_OK)
        st = s_get_int(root, src, "num_attention_heads", true, &c->num_attention_heads);
    c->num_key_value_heads = c->num_attention_heads;
    if (st == BT_OK)
        st = s_get_int(root, src, "num_key_value_heads", false, &c->num_key_value_heads);
    if (st == BT_OK)
        st = s_get_number(root, src, "rms_norm_eps", &c->rms_norm_eps);
    if (st == BT_OK)
        st = s_get_number(root, src, "rope_theta", &c->rope_theta);
    if (st == BT_OK)
        st = s_get_int(root, src, "max_position_embeddings", false, &c->max_position_embeddings);
    if (st == BT_OK)
        st = bt_rope_scaling_parse(cJSON_GetObjectItemCaseSensitive(root, "rope_scaling"), src,
                                   &c->rope_scaling);
    if (st == BT_OK)
        st = s_get_bool(root, src, "tie_word_embeddings", &c->tie_word_embeddings);
    if (st == BT_OK)
        st = s_get_token(root, src, "bos_token_id", &c->bos_token_id);
    if (st == BT_OK)
        st = s_get_token(root, src, "eos_token_id", &c->eos_token_id);
    if (st == BT_OK)
        st = s_get_token(root, src, "pad_token_id", &c->pad_token_id);
    const cJSON *window = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (cJSON_IsNull(window))
        c->sliding_window = 0;
    if (st == BT_OK && (c->mistral || c->gemma == 2) && window && !cJSON_IsNull(window)) {
        st = s_get_int(root, src, "sliding_window", false, &c->sliding_window);
        if (st == BT_OK && c->sliding_window < 1)
            st = bt_fail(BT_EINVAL,
                         "%s: sliding_window: expected a positive integer or null, got "
                         "%lld",
                         src, (long long)c->sliding_window);
    }
    if (st == BT_OK && c->gemma == 2)
        st = s_get_number(root, src, "query_pre_attn_scalar", &c->query_pre_attn_scalar);
    if (st == BT_OK && c->gemma == 2)
        st = s_get_cap(root, src, "attn_logit_softcapping", &c->attn_logit_softcapping);
    if (st == BT_OK && c->gemma == 2)
        st = s_get_cap(root, src, "final_logit_softcapping", &c->final_logit_softcapping);
    const cJSON *head_dim = cJSON_GetObjectItemCaseSensitive(root, "head_dim");
    if (st == BT_OK && head_dim && !cJSON_IsNull(head_dim)) {
        if (!s_is_integer(head_dim))
            st = s_type_error(src, "head_dim", "an integer", head_dim);
        else if (c->num_attention_heads < 1 ||
                 (int64_t)head_dim->valuedouble != c->hidden_size / c->num_attention_heads)
            c->head_dim = (int64_t)head_dim->valuedouble;
        else
            c->head_dim = 0; /* the default */
    }
    return st;
}

bt_status bt_model_config_parse(const char *json, const char *source, bt_model_config *out) {
    cJSON *root = cJSON_Parse(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bt_fail(BT_EFORMAT, "%s: expected a JSON object", source);
    }
    /* Hugging Face defaults for the optional keys */
    bt_model_config c = {.rms_norm_eps = 1e-6,
                         .rope_theta = 10000.0,
                         .max_position_embeddings = 2048,
                         .tie_word_embeddings = false,
                         .qkv_bias = s_is_type(root, "qwen2"),
                         .qk_norm = s_is_type(root, "qwen3"),
                         .mistral = s_is_type(root, "mistral"),
                         .gemma = s_is_type(root, "gemma")    ? 1
                                  : s_is_type(root, "gemma2") ? 2
                                                              : 0};
    if (c.gemma) { /* GemmaConfig's and Gemma2Config's defaults */
        c.max_position_embeddings = 8192;
        c.tie_word_embeddings = true;
        c.head_dim = 256;
    }
    if (c.mistral) { /* MistralConfig's */
        c.max_position_embeddings = 4096 * 32;
        c.sliding_window = 4096;
    }
    if (c.gemma == 2) {
        c.sliding_window = 4096;
        c.query_pre_attn_scalar = 256;
        c.attn_logit_softcapping = 50.0;
        c.final_logit_softcapping = 30.0;
    }
    bt_status st = s_parse_fields(root, source, &c);
    cJSON_Delete(root);
    if (st == BT_OK)
        st = s_validate(&c, source);
    if (st == BT_OK)
        *out = c;
    return st;
}

bt_status bt_model_config_load(const char *path, bt_model_config *out) {
    char *text = NULL;
    bt_status st = bt_file_read(path, S_CONFIG_MAX, &text, NULL);
    if (st == BT_OK)
        st = bt_model_config_parse(text, path, out);
    free(text);
    return st;
}

static cJSON *s_token_json(int64_t id) {
    return id < 0 ? cJSON_CreateNull() : cJSON_CreateNumber((double)id);
}

static cJSON *s_cap_json(double cap) {
    return cap > 0 ? cJSON_CreateNumber(cap) : cJSON_CreateNull();
}

char *bt_model_config_to_json(const bt_model_config *c) {
    cJSON *root = cJSON_CreateObject();
    bool mistral = !c->gemma && (c->mistral || c->sliding_window > 0);
    const char *arch = c->qk_norm      ? "Qwen3ForCausalLM"
                       : c->qkv_bias   ? "Qwen2ForCausalLM"
                       : c->gemma == 2 ? "Gemma2ForCausalLM"
                       : c->gemma      ? "GemmaForCausalLM"
                       : mistral       ? "MistralForCausalLM"
                                       : "LlamaForCausalLM";
    cJSON_AddItemToObject(root, "architectures", cJSON_CreateStringArray(&arch, 1));
    cJSON_AddStringToObject(root, "model_type",
                            c->qk_norm      ? "qwen3"
                            : c->qkv_bias   ? "qwen2"
                            : c->gemma == 2 ? "gemma2"
                            : c->gemma      ? "gemma"
                            : mistral       ? "mistral"
                                            : "llama");
    cJSON_AddNumberToObject(root, "head_dim", (double)bt_model_head_dim(c));
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    const char *act = c->gemma ? "gelu_pytorch_tanh" : "silu";
    cJSON_AddStringToObject(root, "hidden_act", act);
    if (c->gemma)
        cJSON_AddStringToObject(root, "hidden_activation", act);
    if (c->gemma == 2) {
        cJSON_AddNumberToObject(root, "query_pre_attn_scalar",
                                c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar
                                                             : (double)bt_model_head_dim(c));
        cJSON_AddItemToObject(root, "attn_logit_softcapping",
                              s_cap_json(c->attn_logit_softcapping));
        cJSON_AddItemToObject(root, "final_logit_softcapping",
                              s_cap_json(c->final_logit_softcapping));
    }
    if (mistral || c->gemma == 2)
        cJSON_AddItemToObject(root, "sliding_window",
                              c->sliding_window > 0 ? cJSON_CreateNumber((double)c->sliding_window)
                                                    : cJSON_CreateNull());
    cJSON_AddNumberToObject(root, "vocab_size", (double)c->vocab_size);
    cJSON_AddNumberToObject(root, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(root, "intermediate_size", (double)c->intermediate_size);
    cJSON_AddNumberToObject(root, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(root, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(root, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(root, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(root, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(root, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON *scaling = bt_rope_scaling_to_json(&c->rope_scaling);
    if (scaling)
        cJSON_AddItemToObject(root, "rope_scaling", scaling);
    cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddItemToObject(root, "bos_token_id", s_token_json(c->bos_token_id));
    cJSON_AddItemToObject(root, "eos_token_id", s_token_json(c->eos_token_id));
    cJSON_AddItemToObject(root, "pad_token_id", s_token_json(c->pad_token_id));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

bt_status bt_model_config_save(const bt_model_config *cfg, const char *path) {
    char *text = bt_model_config_to_json(cfg);
    if (!text)
        return bt_fail(BT_ENOMEM, "%s: out of memory", path);
    FILE *f = bt_file_create(path);
    bt_status st = BT_EIO;
    if (f)
        st = bt_file_finish(f, path, fputs(text, f) >= 0 && fputc('\n', f) != EOF);
    free(text);
    return st;
}

/* ---- parameters -------------------------------------------------------------------------------
 */

typedef struct s_layer {
    bt_tensor *input_norm;                 /* (C) */
    bt_tensor *q_proj;                     /* (H * D, C) */
    bt_tensor *k_proj;                     /* (Hkv * D, C) */
    bt_tensor *v_proj;                     /* (Hkv * D, C) */
    bt_tensor *q_bias, *k_bias, *v_bias;   /* (H * D), (Hkv * D), (Hkv * D); NULL but in Qwen2 */
    bt_tensor *q_norm, *k_norm;            /* (D); NULL but in Qwen3 */
    bt_tensor *o_proj;                     /* (C, H * D) */
    bt_tensor *post_norm;                  /* (C): post_attention_layernorm */
    bt_tensor *pre_ff_norm, *post_ff_norm; /* (C); NULL but in Gemma 2 */
    bt_tensor *gate_proj;                  /* (I, C) */
    bt_tensor *up_proj;                    /* (I, C) */
    bt_tensor *down_proj;                  /* (C, I) */
} s_layer;

typedef struct s_lora s_lora;

typedef struct s_param {
    char name[S_NAME_MAX];
    int ndim; /* 1 for a norm weight, else 2 */
    int64_t shape[2];
} s_param;

struct bt_model {
    bt_model_config cfg;
    bt_device device;
    bt_ctx *ctx; /* owns the parameters */
    int n_params;
    s_param *specs;              /* (n_params) */
    bt_tensor **params;          /* (n_params) */
    s_layer *layers;             /* (num_hidden_layers) views of params */
    bt_tensor *embed;            /* (V, C) */
    bt_tensor *norm;             /* (C) */
    bt_tensor *lm_head;          /* (V, C); the embedding when tied */
    bt_dtype compute;            /* BT_F32, or BT_BF16: forward passes under autocast */
    bt_dtype save;               /* what bt_model_save writes: the source's dtype, F32 if random */
    bool checkpoint;             /* full forwards recording grad recompute each layer in backward */
    const bt_model_units *units; /* NULL: every weight resident */
    s_lora *lora;                /* NULL without adapters */
};

static void s_add_spec(bt_model *m, int ndim, int64_t d0, int64_t d1, const char *fmt, int layer) {
    s_param *p = &m->specs[m->n_params++];
    snprintf(p->name, sizeof p->name, fmt, layer);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
}

/*  Validates cfg and lays out the parameter names and shapes; no tensor yet. */
static bt_model *s_model_alloc(const bt_model_config *cfg, bt_device device) {
    if (bt_model_config_validate(cfg) != BT_OK)
        return NULL;
    int64_t L = cfg->num_hidden_layers, C = cfg->hidden_size, V = cfg->vocab_size;
    int64_t I = cfg->intermediate_size, D = bt_model_head_dim(cfg);
    int64_t HD = cfg->num_attention_heads * D, KD = cfg->num_key_value_heads * D;
    int64_t n = 3 + S_PER_LAYER * L;
    bt_model *m = calloc(1, sizeof *m);
    if (m) {
        m->specs = calloc((size_t)n, sizeof *m->specs);
        m->params = calloc((size_t)n, sizeof *m->params);
        m->layers = calloc((size_t)L, sizeof *m->layers);
        m->ctx = bt_ctx_new();
    }
    if (!m || !m->specs || !m->params || !m->layers || !m->ctx) {
        bt_model_destroy(&m);
        bt_fail(BT_ENOMEM, "bt_model_new: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->device = device;
    m->save = BT_F32;
    s_add_spec(m, 2, V, C, "model.embed_tokens.weight", 0);
    for (int l = 0; l < (int)L; l++) {
        s_add_spec(m, 1, C, 0, "model.layers.%d.input_layernorm.weight", l);
        s_add_spec(m, 2, HD, C, "model.layers.%d.self_attn.q_proj.weight", l);
        s_add_spec(m, 2, KD, C, "model.layers.%d.self_attn.k_proj.weight", l);
        s_add_spec(m, 2, KD, C, "model.layers.%d.self_attn.v_proj.weight", l);
        if (cfg->qkv_bias) {
            s_add_spec(m, 1, HD, 0, "model.layers.%d.self_attn.q_proj.bias", l);
            s_add_spec(m, 1, KD, 0, "model.layers.%d.self_attn.k_proj.bias", l);
            s_add_spec(m, 1, KD, 0, "model.layers.%d.self_attn.v_proj.bias", l);
        }
        s_add_spec(m, 2, C, HD, "model.layers.%d.self_attn.o_proj.weight", l);
        if (cfg->qk_norm) {
            s_add_spec(m, 1, D, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            s_add_spec(m, 1, D, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        s_add_spec(m, 1, C, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        if (cfg->gemma == 2) {
            s_add_spec(m, 1, C, 0, "model.layers.%d.pre_feedforward_layernorm.weight", l);
            s_add_spec(m, 1, C, 0, "model.layers.%d.post_feedforward_layernorm.weight", l);
        }
        s_add_spec(m, 2, I, C, "model.layers.%d.mlp.gate_proj.weight", l);
        s_add_spec(m, 2, I, C, "model.layers.%d.mlp.up_proj.weight", l);
        s_add_spec(m, 2, C, I, "model.layers.%d.mlp.down_proj.weight", l);
    }
    s_add_spec(m, 1, C, 0, "model.norm.weight", 0);
    if (!cfg->tie_word_embeddings)
        s_add_spec(m, 2, V, C, "lm_head.weight", 0);
    return m;
}

/*  Points the named fields at the parameters, in the order s_model_alloc laid them out. */
static void s_model_bind(bt_model *m) {
    bt_tensor **p = m->params;
    m->embed = *p++;
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        s_layer *w = &m->layers[l];
        w->input_norm = *p++;
        w->q_proj = *p++;
        w->k_proj = *p++;
        w->v_proj = *p++;
        if (m->cfg.qkv_bias) {
            w->q_bias = *p++;
            w->k_bias = *p++;
            w->v_bias = *p++;
        }
        w->o_proj = *p++;
        if (m->cfg.qk_norm) {
            w->q_norm = *p++;
            w->k_norm = *p++;
        }
        w->post_norm = *p++;
        if (m->cfg.gemma == 2) {
            w->pre_ff_norm = *p++;
            w->post_ff_norm = *p++;
        }
        w->gate_proj = *p++;
        w->up_proj = *p++;
        w->down_proj = *p++;
    }
    m->norm = *p++;
    m->lm_head = m->cfg.tie_word_embeddings ? m->embed : *p;
}

/*  Norm weights norm (1; Gemma's 0, which its (1 + weight) makes a scale of 1), biases 0,
    matrices N(0, 0.02^2): a CPU tensor in tmp. */
static bt_tensor *s_init_random(bt_ctx *tmp, bt_gen *gen, const s_param *p, double norm) {
    size_t n = strlen(p->name);
    if (n > 5 && !strcmp(p->name + n - 5, ".bias"))
        return bt_zeros(tmp, BT_F32, bt_cpu(), 1, p->shape);
    if (p->ndim == 1)
        return bt_full(tmp, BT_F32, bt_cpu(), 1, p->shape, norm);
    return bt_mul_scalar(tmp, bt_randn(tmp, gen, BT_F32, p->ndim, p->shape), 0.02);
}

static void s_format_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (at < len)
        snprintf(buf + at, len - at, ")");
}

/*  Where a model's tensors are: model.safetensors, or the shards a model.safetensors.index.json
    names (Hugging Face's layout for large models). */
enum { S_MAX_SHARDS = 256 };
typedef struct s_source {
    bt_safetensors_t *files[S_MAX_SHARDS];
    int n;
    const char *where; /* for messages: the single file or the index */
} s_source;

/*  The stored tensor called p->name, checked and wrapped as a CPU tensor in tmp. */
static bt_tensor *s_init_from_file(bt_ctx *tmp, const s_source *src, const s_param *p) {
    const char *file = src->where;
    const bt_st_entry *e = NULL;
    for (int i = 0; i < src->n && !e; i++)
        e = bt_safetensors_find(src->files[i], p->name);
    if (!e) {
        bt_fail(BT_EFORMAT, "%s: missing tensor %s", file, p->name);
        return NULL;
    }
    if (e->dtype != BT_F32 && e->dtype != BT_F16 && e->dtype != BT_BF16) {
        bt_fail(BT_EFORMAT, "%s: %s: expected dtype F32, F16 or BF16, got %s", file, p->name,
                bt_dtype_name(e->dtype));
        return NULL;
    }
    bool same = e->ndim == p->ndim;
    for (int i = 0; same && i < p->ndim; i++)
        same = e->shape[i] == p->shape[i];
    if (!same) {
        char want[64], got[160];
        s_format_shape(want, sizeof want, p->ndim, p->shape);
        s_format_shape(got, sizeof got, e->ndim, e->shape);
        bt_fail(BT_EFORMAT, "%s: %s: expected shape %s, got %s", file, p->name, want, got);
        return NULL;
    }
    return bt_from_host(tmp, e->dtype, bt_cpu(), e->ndim, e->shape, e->data);
}

/*  Creates every parameter, from st (named file) when given, else at random from seed: F32 on the
    model's device, requiring grad. */
static bt_status s_model_fill(bt_model *m, uint64_t seed, const s_source *st) {
    bt_gen *gen = st ? NULL : bt_gen_new(seed, bt_cpu());
    bt_ctx *tmp = bt_ctx_new();
    bool grad = bt_set_grad_enabled(false);
    bt_status status = (gen || st) && tmp ? BT_OK : BT_ENOMEM;
    for (int i = 0; i < m->n_params && status == BT_OK; i++) {
        bt_tensor *t = st ? s_init_from_file(tmp, st, &m->specs[i])
                          : s_init_random(tmp, gen, &m->specs[i], m->cfg.gemma ? 0.0 : 1.0);
        if (st && i == 0 && t) /* model.embed_tokens.weight: the dtype the source stores */
            m->save = bt_dtype_of(t);
        m->params[i] = bt_clone(m->ctx, bt_to_device(tmp, bt_to_dtype(tmp, t, BT_F32), m->device));
        if (!m->params[i])
            status = st && !t ? BT_EFORMAT : BT_ETORCH;
        else
            status = bt_set_requires_grad(m->params[i], true);
        bt_ctx_reset(tmp);
    }
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&tmp);
    bt_gen_destroy(&gen);
    if (status == BT_OK)
        s_model_bind(m);
    return status;
}

bt_model *bt_model_new(const bt_model_config *cfg, bt_device device, uint64_t seed) {
    bt_model *m = s_model_alloc(cfg, device);
    if (m && s_model_fill(m, seed, NULL) != BT_OK)
        bt_model_destroy(&m);
    return m;
}

static void s_lora_free(s_lora **lora_p);

void bt_model_destroy(bt_model **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_model *m = *self_p;
    s_lora_free(&m->lora);
    bt_ctx_destroy(&m->ctx);
    free(m->specs);
    free(m->params);
    free(m->layers);
    free(m);
    *self_p = NULL;
}

const bt_model_config *bt_model_get_config(const bt_model *self) {
    return &self->cfg;
}
bt_device bt_model_device(const bt_model *self) {
    return self->device;
}
bt_status bt_model_set_precision(bt_model *self, bt_dtype compute) {
    if (compute != BT_F32 && compute != BT_BF16)
        return bt_fail(BT_EINVAL, "bt_model_set_precision: expected F32 or BF16, got %s",
                       bt_dtype_name(compute));
    self->compute = compute;
    return BT_OK;
}
bt_dtype bt_model_precision(const bt_model *self) {
    return self->compute;
}
bt_dtype bt_model_save_dtype(const bt_model *self) {
    return self->save;
}
bt_status bt_model_set_save_dtype(bt_model *self, bt_dtype dtype) {
    if (dtype != BT_F32 && dtype != BT_BF16 && dtype != BT_F16)
        return bt_fail(BT_EINVAL, "bt_model_set_save_dtype: expected F32, BF16 or F16, got %s",
                       bt_dtype_name(dtype));
    self->save = dtype;
    return BT_OK;
}
void bt_model_set_activation_checkpointing(bt_model *self, bool on) {
    self->checkpoint = on;
}
void bt_model_set_units(bt_model *self, const bt_model_units *units) {
    self->units = units;
}
int bt_model_param_unit(const bt_model *self, int i) {
    int layer;
    const char *name = bt_model_param_name(self, i);
    if (name && sscanf(name, "model.layers.%d.", &layer) == 1)
        return layer;
    return (int)self->cfg.num_hidden_layers;
}
int bt_model_num_base_params(const bt_model *self) {
    return self->n_params;
}
bt_tensor *const *bt_model_base_params(const bt_model *self) {
    return self->params;
}

const char *bt_model_base_param_name(const bt_model *self, int i) {
    return i >= 0 && i < self->n_params ? self->specs[i].name : NULL;
}

static int s_lora_num(const bt_model *m);
static bt_tensor *const *s_lora_params(const bt_model *m);
static const char *s_lora_name(const bt_model *m, int i);

int bt_model_num_params(const bt_model *self) {
    return self->lora ? s_lora_num(self) : self->n_params;
}
bt_tensor *const *bt_model_params(const bt_model *self) {
    return self->lora ? s_lora_params(self) : self->params;
}

const char *bt_model_param_name(const bt_model *self, int i) {
    return self->lora ? s_lora_name(self, i) : bt_model_base_param_name(self, i);
}

bool bt_model_param_is_matmul(const bt_model *self, int i) {
    if (self->lora) /* the adapters, each a matrix of a product */
        return true;
    BT_ASSERT(i >= 0 && i < self->n_params);
    return self->specs[i].ndim == 2 && self->params[i] != self->embed;
}

bt_tensor *bt_model_find_param(const bt_model *self, const char *name) {
    for (int i = 0; self->lora && i < s_lora_num(self); i++)
        if (strcmp(s_lora_name(self, i), name) == 0)
            return s_lora_params(self)[i];
    for (int i = 0; i < self->n_params; i++)
        if (strcmp(self->specs[i].name, name) == 0)
            return self->params[i];
    return NULL;
}

/* ---- forward ----------------------------------------------------------------------------------
 */

/*  What every layer of one pass shares. */
typedef struct s_pass {
    int64_t B, T;         /* batch, new tokens */
    bt_tensor *cos, *sin; /* (B, 1, T, D) rotary tables */
    bt_tensor *allowed;   /* (B, 1, T, Tk) which keys each query may attend to */
    bt_tensor *local;     /* (B, 1, T, Tk) allowed within the sliding window (allowed when none) */
    int64_t offset;       /* the first query's column (0 but in s_allowed's decode use) */
    bt_kv_cache *cache;   /* NULL for a full forward */
    bt_tensor *write;     /* prefill: (B) the slots the rows' keys and values go to; decode: (B *
                             Hkv) the rows of the cache's (slots * Hkv * max_len, D) view they go
                             to; extend: (B * Hkv * T) such rows */
    int64_t keys;         /* decode, extend: the columns attention reads, [0, keys) */
    bt_tensor *read;      /* extend: (B) the slots attention reads; NULL: every slot (decode) */
    int64_t n_runs;       /* decode: attention in runs of consecutive slots, run r over slots */
    const int64_t *run;   /* [run[r], run[r+1]) and columns [0, run_keys[r]); 0: one run */
    const int64_t *run_keys;
    bt_tensor **parts; /* (n_runs) scratch */
    uint64_t dropout;  /* LoRA dropout's key for this pass; 0: no dropout */
} s_pass;

struct bt_kv_cache {
    bt_ctx *ctx;
    int64_t slots, max_len, heads; /* heads: Hkv */
    int n_layers;
    bt_tensor **k, **v;   /* per layer (slots, Hkv, max_len, D) */
    int64_t *len;         /* (slots) host: tokens slot s holds, in columns [0, len) */
    int64_t columns_read; /* decode steps' attention, over slots and steps */
};

/*  (B, T, n * D) -> (B, n, T, D) */
static bt_tensor *s_split_heads(bt_ctx *ctx, bt_tensor *x, const s_pass *p, int64_t n, int64_t D) {
    const int64_t shape[] = {p->B, p->T, n, D};
    return bt_transpose(ctx, bt_reshape(ctx, x, 4, shape), 1, 2);
}

/*  (B, H, T, D) -> (B, T, H * D) */
static bt_tensor *s_merge_heads(bt_ctx *ctx, bt_tensor *y, const s_pass *p) {
    const int64_t shape[] = {p->B, p->T, -1};
    return bt_reshape(ctx, bt_transpose(ctx, y, 1, 2), 3, shape);
}

/*  Writes kv (B, Hkv, T, D) of a prefill, a decode step or an extend into store (slots, Hkv,
    max_len, D) and returns what attention reads: a prefill's own kv (its rows start at column 0),
    a decode step's columns [0, keys) of every slot, an extend's columns [0, keys) of its B slots
    (gathered: a copy of B slots' columns, not of the cache). */
static bt_tensor *s_cache_write(bt_ctx *ctx, bt_tensor *store, bt_tensor *kv, const s_pass *p) {
    kv = bt_to_dtype(ctx, kv, bt_dtype_of(store)); /* what the cache holds is what is attended */
    if (p->keys == 0) { /* prefill: rows to slots p->write, columns [0, T) */
        if (bt_index_copy_(bt_slice(ctx, store, 2, 0, p->T, 1), 0, p->write, kv) != BT_OK)
            return NULL;
        return kv;
    }
    const int64_t flat[] = {-1, bt_dim(store, 3)}, rows[] = {-1, bt_dim(kv, 3)};
    if (bt_index_copy_(bt_reshape(ctx, store, 2, flat), 0, p->write,
                       bt_reshape(ctx, kv, 2, rows)) != BT_OK)
        return NULL;
    bt_tensor *cols = bt_slice(ctx, store, 2, 0, p->keys, 1);
    return p->read ? bt_index_select(ctx, cols, 0, p->read) : cols;
}

static bt_tensor *s_lora_delta(const bt_model *m, bt_ctx *ctx, int l, bt_lora_target t,
                               bt_tensor *x, const s_pass *p);

/*  x W^T (+ b when the layer has one), on the last dimension, plus layer l's adapter on target t
    when it has one. */
static bt_tensor *s_proj(const bt_model *m, bt_ctx *ctx, const s_pass *p, int l, bt_lora_target t,
                         bt_tensor *x, bt_tensor *w, bt_tensor *b) {
    if (w && x && bt_dtype_of(w) != bt_dtype_of(x) && m->compute == BT_F32)
        w = bt_to_dtype(ctx, w, bt_dtype_of(x)); /* a frozen base held in its checkpoint's dtype */
    bt_tensor *y = bt_linear(ctx, x, w);
    y = b ? bt_add(ctx, y, b) : y;
    bt_tensor *delta = m->lora ? s_lora_delta(m, ctx, l, t, x, p) : NULL;
    return delta ? bt_add(ctx, y, delta) : y;
}

/*  Attention of q (B, H, Tq, D) over k, v (B, Hkv, Tk, D) under allowed (B, 1, Tq, Tk): fused
    unless Gemma 2 scales or caps the scores. */
static bt_tensor *s_attend(const bt_model *m, bt_ctx *ctx, bt_tensor *q, bt_tensor *k, bt_tensor *v,
                           bt_tensor *allowed) {
    const bt_model_config *c = &m->cfg;
    if (c->gemma != 2)
        return bt_attention(ctx, q, k, v, allowed);
    double scalar =
        c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar : (double)bt_model_head_dim(c);
    return bt_attention_capped(ctx, q, k, v, allowed, 1.0 / sqrt(scalar),
                               c->attn_logit_softcapping);
}

/*  Whether layer l attends within the sliding window: Mistral's every layer, Gemma 2's even ones
    (Gemma2DecoderLayer: is_sliding = not layer_idx % 2). */
static bool s_slides(const bt_model *m, int l) {
    return m->cfg.sliding_window > 0 && (m->cfg.gemma != 2 || l % 2 == 0);
}

/*  A decode step's attention run by run: each run of slots reads its own longest length. */
static bt_tensor *s_attention_runs(const bt_model *m, bt_ctx *ctx, bt_tensor *q, bt_tensor *k,
                                   bt_tensor *v, bt_tensor *allowed, const s_pass *p) {
    for (int64_t r = 0; r < p->n_runs; r++) {
        int64_t a = p->run[r], b = p->run[r + 1], n = p->run_keys[r];
        bt_tensor *kr = bt_slice(ctx, bt_slice(ctx, k, 0, a, b, 1), 2, 0, n, 1);
        bt_tensor *vr = bt_slice(ctx, bt_slice(ctx, v, 0, a, b, 1), 2, 0, n, 1);
        bt_tensor *mr = bt_slice(ctx, bt_slice(ctx, allowed, 0, a, b, 1), 3, 0, n, 1);
        p->parts[r] = s_attend(m, ctx, bt_slice(ctx, q, 0, a, b, 1), kr, vr, mr);
    }
    return bt_cat(ctx, p->parts, (int)p->n_runs, 0);
}

/*  Grouped-query self-attention of x (B, T, C) -> (B, T, C). */
static bt_tensor *s_attention(const bt_model *m, bt_ctx *ctx, int l, bt_tensor *x,
                              const s_pass *p) {
    const s_layer *w = &m->layers[l];
    int64_t H = m->cfg.num_attention_heads, Hkv = m->cfg.num_key_value_heads;
    int64_t D = bt_model_head_dim(&m->cfg);
    bt_tensor *q = s_proj(m, ctx, p, l, BT_LORA_Q_PROJ, x, w->q_proj, w->q_bias);
    bt_tensor *k = s_proj(m, ctx, p, l, BT_LORA_K_PROJ, x, w->k_proj, w->k_bias);
    bt_tensor *v = s_proj(m, ctx, p, l, BT_LORA_V_PROJ, x, w->v_proj, w->v_bias);
    q = s_split_heads(ctx, q, p, H, D);   /* (B, H, T, D) */
    k = s_split_heads(ctx, k, p, Hkv, D); /* (B, Hkv, T, D) */
    if (w->q_norm) {                      /* Qwen3: each head normalised before the rotation */
        q = bt_rms_norm(ctx, q, w->q_norm, m->cfg.rms_norm_eps);
        k = bt_rms_norm(ctx, k, w->k_norm, m->cfg.rms_norm_eps);
    }
    v = s_split_heads(ctx, v, p, Hkv, D); /* (B, Hkv, T, D) */
    q = bt_rope(ctx, q, p->cos, p->sin);
    k = bt_rope(ctx, k, p->cos, p->sin);
    if (p->cache) {
        k = s_cache_write(ctx, p->cache->k[l], k, p);
        v = s_cache_write(ctx, p->cache->v[l], v, p);
    }
    bt_tensor *allowed = s_slides(m, l) ? p->local : p->allowed;
    bt_tensor *y = p->n_runs > 1 ? s_attention_runs(m, ctx, q, k, v, allowed, p)
                                 : s_attend(m, ctx, q, k, v, allowed); /* (B, H, T, D) */
    return s_proj(m, ctx, p, l, BT_LORA_O_PROJ, s_merge_heads(ctx, y, p), w->o_proj, NULL);
}

/*  SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x)), Gemma's GeGLU with gelu-tanh in place of
    silu; x (B, T, C) -> (B, T, C). */
static bt_tensor *s_mlp(const bt_model *m, bt_ctx *ctx, int l, bt_tensor *x, const s_pass *p) {
    const s_layer *w = &m->layers[l];
    bt_tensor *gate =
        s_proj(m, ctx, p, l, BT_LORA_GATE_PROJ, x, w->gate_proj, NULL); /* (B, T, I) */
    gate = m->cfg.gemma ? bt_gelu_tanh(ctx, gate) : bt_silu(ctx, gate);
    bt_tensor *up = s_proj(m, ctx, p, l, BT_LORA_UP_PROJ, x, w->up_proj, NULL); /* (B, T, I) */
    return s_proj(m, ctx, p, l, BT_LORA_DOWN_PROJ, bt_mul(ctx, gate, up), w->down_proj, NULL);
}

/*  The model's RMSNorm of x (..., C) by weight w (C): Gemma's scales by (1 + w) (GemmaRMSNorm). */
static bt_tensor *s_norm(const bt_model *m, bt_ctx *ctx, bt_tensor *x, bt_tensor *w) {
    if (m->cfg.gemma)
        w = bt_add_scalar(ctx, w, 1.0);
    return bt_rms_norm(ctx, x, w, m->cfg.rms_norm_eps);
}

/*  Pre-norm decoder layer: x + attn(norm(x)), then h + mlp(norm(h)); Gemma 2 (Gemma2DecoderLayer)
    normalises both outputs too: x + norm(attn(norm(x))), h + norm(mlp(norm(h))).
    (B, T, C) -> (B, T, C). */
static bt_tensor *s_block(const bt_model *m, bt_ctx *ctx, int l, bt_tensor *x, const s_pass *p) {
    const s_layer *w = &m->layers[l];
    bt_tensor *a = s_attention(m, ctx, l, s_norm(m, ctx, x, w->input_norm), p);
    if (w->post_ff_norm) {
        bt_tensor *h = bt_add(ctx, x, s_norm(m, ctx, a, w->post_norm));
        bt_tensor *f = s_mlp(m, ctx, l, s_norm(m, ctx, h, w->pre_ff_norm), p);
        return bt_add(ctx, h, s_norm(m, ctx, f, w->post_ff_norm));
    }
    bt_tensor *h = bt_add(ctx, x, a);
    return bt_add(ctx, h, s_mlp(m, ctx, l, s_norm(m, ctx, h, w->post_norm), p));
}

/*  A checkpointed layer's closure, copied by bt_checkpoint: the pass's tensors (rotary tables,
    mask) live in the forward's context, which outlives its backward. */
typedef struct s_block_call {
    const bt_model *m;
    int l;
    s_pass p; /* a full forward's: no cache, no runs */
} s_block_call;

static bt_tensor *s_block_checkpointed(bt_ctx *ctx, bt_tensor *x, void *user) {
    const s_block_call *c = user;
    return s_block(c->m, ctx, c->l, x, &c->p);
}

/*  With units: the layer gathered first (again when backward recomputes it). */
static bt_tensor *s_block_gathered(bt_ctx *ctx, bt_tensor *x, void *user) {
    const s_block_call *c = user;
    const bt_model_units *u = c->m->units;
    return u->gather(u->user, c->l) == BT_OK ? s_block(c->m, ctx, c->l, x, &c->p) : NULL;
}

static bt_status s_layer_done(void *user) {
    const s_block_call *c = user;
    return c->m->units->release(c->m->units->user, c->l, false);
}

static bt_status s_layer_reduced(void *user) {
    const s_block_call *c = user;
    return c->m->units->release(c->m->units->user, c->l, true);
}

/*  Final hidden states (B, T, C), after model.norm, of ids (B, T); with checkpointing on, a full
    forward's layers are recomputed in backward (without grad bt_checkpoint just runs them); with
    units, each layer gathered for its forward and its backward (bt_model_set_units). */
static bt_tensor *s_hidden(const bt_model *m, bt_ctx *ctx, bt_tensor *ids, const s_pass *p) {
    const bt_model_units *u = m->units;
    if (u && u->gather(u->user, (int)m->cfg.num_hidden_layers) != BT_OK)
        return NULL;
    bt_tensor *x = bt_embedding(ctx, m->embed, ids); /* (B, T, C) */
    if (m->cfg.gemma) /* GemmaModel: x * sqrt(C), the factor rounded to x's dtype (float32) */
        x = bt_mul_scalar(ctx, x, (double)(float)sqrt((double)m->cfg.hidden_size));
    bool grad = bt_set_grad_enabled(false);
    bt_set_grad_enabled(grad);
    if (u && grad && x && !bt_requires_grad(x)) { /* a frozen embedding (LoRA): the layers must
        still run as checkpoints, or a plain graph would keep weights the release frees */
        x = bt_detach(ctx, x);
        if (x && bt_set_requires_grad(x, true) != BT_OK)
            return NULL;
    }
    for (int l = 0; l < (int)m->cfg.num_hidden_layers; l++) {
        if (u) {
            const s_block_call c = {.m = m, .l = l, .p = *p};
            x = bt_checkpoint_hooked(ctx, s_block_gathered, &c, sizeof c, x,
                                     (bt_checkpoint_hooks){s_layer_done, s_layer_reduced});
        } else if (m->checkpoint && !p->cache) {
            const s_block_call c = {.m = m, .l = l, .p = *p};
            x = bt_checkpoint(ctx, s_block_checkpointed, &c, sizeof c, x);
        } else {
            x = s_block(m, ctx, l, x, p);
        }
    }
    return s_norm(m, ctx, x, m->norm);
}

/*  The output head: logits (..., V) of hidden states (..., C), Gemma 2's capped to
    cap tanh(logits / cap) (final_logit_softcapping). */
static bt_tensor *s_logits(const bt_model *m, bt_ctx *ctx, bt_tensor *h) {
    bt_tensor *head = m->lm_head;
    if (head && h && bt_dtype_of(head) != bt_dtype_of(h) && m->compute == BT_F32)
        head = bt_to_dtype(ctx, head, bt_dtype_of(h)); /* held in its checkpoint's dtype */
    bt_tensor *logits = bt_linear(ctx, h, head);
    double cap = m->cfg.final_logit_softcapping;
    if (cap <= 0)
        return logits;
    return bt_mul_scalar(ctx, bt_tanh(ctx, bt_mul_scalar(ctx, logits, 1.0 / cap)), cap);
}

/*  Positions (B, T) of mask (B, T) BT_I64: base + max(cumsum(mask) - 1, 0); base (B, 1) or NULL. */
static bt_tensor *s_positions(bt_ctx *ctx, bt_tensor *mask, bt_tensor *base) {
    bt_tensor *pos =
        bt_clamp(ctx, bt_add_scalar(ctx, bt_cumsum(ctx, mask, 1), -1), 0, S_POSITION_MAX);
    return base ? bt_add(ctx, pos, base) : pos;
}

/*  The rotary tables of positions: the plain frequencies, or those of config.json's rope_scaling
    (dynamic: by the pass's sequence length, its largest position + 1). */
static bt_status s_rope_tables(const bt_model *m, bt_ctx *ctx, bt_tensor *positions, s_pass *p) {
    const bt_model_config *c = &m->cfg;
    int64_t D = bt_model_head_dim(c);
    if (c->rope_scaling.kind == BT_ROPE_SCALING_NONE)
        return bt_rope_tables(ctx, positions, D, c->rope_theta, NULL, 1.0, BT_F32, &p->cos,
                              &p->sin);
    int64_t seq_len = 0;
    if (c->rope_scaling.kind == BT_ROPE_SCALING_DYNAMIC) {
        double top = 0;
        bt_tensor *max = bt_max(ctx, bt_max(ctx, positions, 1, false), 0, false);
        if (!max || bt_item(max, &top) != BT_OK)
            return BT_ETORCH;
        seq_len = (int64_t)top + 1;
    }
    double inv[S_HEAD_DIM_MAX / 2], scale = 1.0;
    if (D > S_HEAD_DIM_MAX)
        return bt_fail(BT_EINVAL, "model: head_dim %lld exceeds %d", (long long)D, S_HEAD_DIM_MAX);
    bt_rope_scaling_inv_freq(&c->rope_scaling, c->rope_theta, D, c->max_position_embeddings,
                             seq_len, inv, &scale);
    return bt_rope_tables(ctx, positions, D, c->rope_theta, inv, scale, BT_F32, &p->cos, &p->sin);
}

/*  Allowed (B, 1, T, Tk) for queries in slots offset..offset+T-1 over keys in slots 0..Tk-1:
    causal AND the key is real (and, with seg, of the query's segment), OR the key is the query
    itself (so no row is empty).  real: (B, Tk) BT_BOOL; seg: (B, T) BT_I64 segment ids of a full
    forward (offset 0, Tk == T), or NULL. */
static bt_tensor *s_allowed(bt_ctx *ctx, bt_device dev, bt_tensor *real, bt_tensor *seg,
                            const s_pass *p, int64_t Tk) {
    const int64_t qshape[] = {p->T, 1}, kshape[] = {1, Tk}, rshape[] = {p->B, 1, 1, Tk};
    bt_tensor *qslot =
        bt_reshape(ctx, bt_add_scalar(ctx, bt_arange(ctx, BT_I64, dev, p->T), (double)p->offset), 2,
                   qshape);                                                         /* (T, 1) */
    bt_tensor *kslot = bt_reshape(ctx, bt_arange(ctx, BT_I64, dev, Tk), 2, kshape); /* (1, Tk) */
    bt_tensor *ahead = bt_sub(ctx, kslot, qslot);                                   /* (T, Tk) */
    bt_tensor *causal = bt_logical_not(ctx, bt_gt_scalar(ctx, ahead, 0));
    bt_tensor *self = bt_eq_scalar(ctx, ahead, 0);
    bt_tensor *key = bt_reshape(ctx, real, 4, rshape); /* (B, 1, 1, Tk) */
    if (seg) {                                         /* packed rows: block-diagonal */
        const int64_t sq[] = {p->B, 1, p->T, 1};
        bt_tensor *same = bt_eq(ctx, bt_reshape(ctx, seg, 4, sq), bt_reshape(ctx, seg, 4, rshape));
        key = bt_logical_and(ctx, key, same); /* (B, 1, T, Tk) */
    }
    return bt_logical_and(ctx, causal, bt_logical_or(ctx, key, self)); /* (B, 1, T, Tk) */
}

/*  allowed (B, 1, T, Tk) limited to the sliding window, when the model has one: a query at
    position i keeps the keys at positions j with i - j < sliding_window.  transformers masks the
    same (MistralModel's causal mask: j <= i - sliding_window is masked; masking_utils'
    sliding_window_overlay: kv_idx > q_idx - sliding_window is kept).  Positions, not columns, so
    padded, packed and shared-prefix rows see the window their sequence sees alone.  qpos (B, T),
    kpos (B or 1, Tk) BT_I64. */
static bt_tensor *s_window(const bt_model *m, bt_ctx *ctx, bt_tensor *allowed, bt_tensor *qpos,
                           bt_tensor *kpos) {
    if (m->cfg.sliding_window <= 0)
        return allowed;
    const int64_t qs[] = {bt_dim(qpos, 0), 1, bt_dim(qpos, 1), 1};
    const int64_t ks[] = {bt_dim(kpos, 0), 1, 1, bt_dim(kpos, 1)};
    bt_tensor *back = bt_sub(ctx, bt_reshape(ctx, qpos, 4, qs), bt_reshape(ctx, kpos, 4, ks));
    return bt_logical_and(ctx, allowed, bt_lt_scalar(ctx, back, (double)m->cfg.sliding_window));
}

/*  Allowed (B, 1, T, T) of packed rows with shared prefixes: s_allowed's block-diagonal causal
    mask, and a query whose prefix (B, T) BT_I64 names a segment also sees that segment's keys at
    or before it.  seg (B, T) BT_I64; p a full forward's pass. */
static bt_tensor *s_allowed_shared(bt_ctx *ctx, bt_device dev, bt_tensor *seg, bt_tensor *prefix,
                                   const s_pass *p) {
    const int64_t qshape[] = {p->T, 1}, kshape[] = {1, p->T};
    const int64_t sq[] = {p->B, 1, p->T, 1}, sk[] = {p->B, 1, 1, p->T};
    bt_tensor *slot = bt_arange(ctx, BT_I64, dev, p->T);
    bt_tensor *ahead = bt_sub(ctx, bt_reshape(ctx, slot, 2, kshape),
                              bt_reshape(ctx, slot, 2, qshape)); /* (T, T) */
    bt_tensor *causal = bt_logical_not(ctx, bt_gt_scalar(ctx, ahead, 0));
    bt_tensor *pq = bt_reshape(ctx, prefix, 4, sq); /* (B, 1, T, 1) */
    bt_tensor *of_prefix = bt_logical_and(ctx, bt_eq(ctx, pq, bt_reshape(ctx, seg, 4, sk)),
                                          bt_gt_scalar(ctx, pq, 0)); /* (B, 1, T, T) */
    bt_tensor *own = s_allowed(ctx, dev, bt_gt_scalar(ctx, seg, 0), seg, p, p->T);
    return bt_logical_or(ctx, own, bt_logical_and(ctx, causal, of_prefix)); /* (B, 1, T, T) */
}

/*  The output row that predicts each token of shared-prefix rows: for the token at column q
    (1..T-1) the last key before q it may attend to under allowed (B, 1, T, T), or q - 1 when it
    has none (a segment's first token without a prefix, padding).  Returns (B * (T-1)) BT_I64
    indices into the (B * T) rows of the flattened output, element (b, q-1) at b * (T-1) + q-1.
    Integer arithmetic throughout (a double scalar would promote to float). */
static bt_tensor *s_sources(bt_ctx *ctx, bt_device dev, bt_tensor *allowed, int64_t B, int64_t T) {
    const int64_t qshape[] = {T, 1}, kshape[] = {1, T}, bshape[] = {B, 1}, rows[] = {B, T};
    const int64_t one_shape[] = {1}, flat[] = {B * (T - 1)};
    bt_tensor *one = bt_full(ctx, BT_I64, dev, 1, one_shape, 1.0);
    bt_tensor *width = bt_full(ctx, BT_I64, dev, 1, one_shape, (double)T);
    bt_tensor *slot = bt_arange(ctx, BT_I64, dev, T);
    bt_tensor *key = bt_reshape(ctx, slot, 2, kshape); /* (1, T) */
    bt_tensor *before = bt_lt_scalar(ctx, bt_sub(ctx, key, bt_reshape(ctx, slot, 2, qshape)), 0);
    bt_tensor *seen = bt_to_dtype(ctx, bt_logical_and(ctx, allowed, before), BT_I64);
    bt_tensor *last =
        bt_reshape(ctx, bt_max(ctx, bt_mul(ctx, seen, bt_add(ctx, key, one)), -1, false), 2,
                   rows); /* (B, T): the last key seen before + 1, 0 for none */
    bt_tensor *src = bt_where(ctx, bt_gt_scalar(ctx, last, 0), bt_sub(ctx, last, one),
                              bt_sub(ctx, slot, one)); /* (B, T) */
    bt_tensor *base =
        bt_reshape(ctx, bt_mul(ctx, bt_arange(ctx, BT_I64, dev, B), width), 2, bshape);
    return bt_reshape(ctx, bt_add(ctx, bt_slice(ctx, src, 1, 1, T, 1), base), 1, flat);
}

static bt_status s_check_batch(const char *op, bt_tensor *ids, bt_tensor *mask) {
    if (!ids || !mask)
        return bt_last_error()[0] ? BT_EINVAL : bt_fail(BT_EINVAL, "%s: NULL ids or mask", op);
    if (bt_ndim(ids) != 2 || bt_ndim(mask) != 2 || bt_dim(ids, 0) != bt_dim(mask, 0) ||
        bt_dim(ids, 1) != bt_dim(mask, 1) || bt_dim(ids, 1) < 1)
        return bt_fail(BT_EINVAL, "%s: ids and mask must both be (B, T) with T >= 1", op);
    return BT_OK;
}

/*  A full forward's rows: padded (mask) or packed (seg and pos, with prefix when prefixes are
    shared; mask NULL). */
typedef struct s_rows {
    bt_tensor *mask;   /* (B, T) or NULL */
    bt_tensor *seg;    /* (B, T) segment ids, or NULL */
    bt_tensor *prefix; /* (B, T) the segment each token's segment continues (0: none), or NULL */
    bt_tensor *pos;    /* (B, T) positions, or NULL */
} s_rows;

static bt_status s_check_rows(const char *op, bt_tensor *ids, const s_rows *r) {
    if (r->mask)
        return s_check_batch(op, ids, r->mask);
    BT_TRY(s_check_batch(op, ids, r->seg));
    if (r->prefix)
        BT_TRY(s_check_batch(op, ids, r->prefix));
    return s_check_batch(op, ids, r->pos);
}

static uint64_t s_lora_dropout_key(bt_model *m);

/*  The full forward of bt_model_forward(_packed), under the model's autocast scope when it has
    one. */
static bt_tensor *s_forward(bt_model *m, bt_ctx *ctx, bt_tensor *ids, const s_rows *r) {
    s_pass p = {.B = bt_dim(ids, 0), .T = bt_dim(ids, 1), .dropout = s_lora_dropout_key(m)};
    bt_tensor *seg = r->seg ? bt_to_dtype(ctx, r->seg, BT_I64) : NULL;  /* (B, T) */
    bt_tensor *m64 = r->mask ? bt_to_dtype(ctx, r->mask, BT_I64) : seg; /* (B, T) */
    bt_tensor *pos = r->pos ? bt_to_dtype(ctx, r->pos, BT_I64) : s_positions(ctx, m64, NULL);
    if (s_rope_tables(m, ctx, pos, &p) != BT_OK)
        return NULL;
    p.allowed = r->prefix
                    ? s_allowed_shared(ctx, m->device, seg, bt_to_dtype(ctx, r->prefix, BT_I64), &p)
                    : s_allowed(ctx, m->device, bt_gt_scalar(ctx, m64, 0), seg, &p, p.T);
    p.local = s_window(m, ctx, p.allowed, pos, pos);
    return s_logits(m, ctx, s_hidden(m, ctx, ids, &p)); /* (B, T, V) */
}

static bt_tensor *s_forward_scoped(bt_model *self, bt_ctx *ctx, bt_tensor *ids, const s_rows *r) {
    bt_autocast scope;
    if (bt_autocast_enter(self->device, self->compute, &scope) != BT_OK)
        return NULL;
    bt_tensor *logits = s_forward(self, ctx, ids, r);
    bt_autocast_exit(&scope);
    /* log-probs, losses and sampling read float32 logits, as production trainers do */
    return self->compute == BT_F32 ? logits : bt_to_dtype(ctx, logits, BT_F32);
}

bt_tensor *bt_model_forward(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *mask) {
    const s_rows r = {.mask = mask};
    if (s_check_rows("bt_model_forward", ids, &r) != BT_OK)
        return NULL;
    return s_forward_scoped(self, ctx, ids, &r);
}

bt_tensor *bt_model_forward_packed(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *segments,
                                   bt_tensor *positions) {
    const s_rows r = {.seg = segments, .pos = positions};
    if (s_check_rows("bt_model_forward_packed", ids, &r) != BT_OK)
        return NULL;
    return s_forward_scoped(self, ctx, ids, &r);
}

bt_tensor *bt_model_forward_shared(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *segments,
                                   bt_tensor *prefix, bt_tensor *positions) {
    const s_rows r = {.seg = segments, .prefix = prefix, .pos = positions};
    if (s_check_rows("bt_model_forward_shared", ids, &r) != BT_OK)
        return NULL;
    return s_forward_scoped(self, ctx, ids, &r);
}

static bt_tensor *s_token_logprobs(bt_model *self, bt_ctx *ctx, const char *op, bt_tensor *ids,
                                   const s_rows *r, double temperature, bt_tensor **entropy) {
    if (s_check_rows(op, ids, r) != BT_OK)
        return NULL;
    int64_t B = bt_dim(ids, 0), T = bt_dim(ids, 1);
    if (T < 2 || !(temperature > 0)) {
        bt_fail(BT_EINVAL, "%s: need T >= 2 and temperature > 0, got T %lld, temperature %g", op,
                (long long)T, temperature);
        return NULL;
    }
    bt_tensor *logits = s_forward_scoped(self, ctx, ids, r); /* (B, T, V) */
    if (r->prefix) { /* a continuation's first token is predicted by its prefix's last row */
        const s_pass p = {.B = B, .T = T};
        int64_t V = bt_model_get_config(self)->vocab_size;
        const int64_t all[] = {B * T, V}, picked[] = {B, T - 1, V};
        bt_tensor *seg = bt_to_dtype(ctx, r->seg, BT_I64);
        bt_tensor *allowed =
            s_allowed_shared(ctx, self->device, seg, bt_to_dtype(ctx, r->prefix, BT_I64), &p);
        logits = bt_reshape(ctx,
                            bt_index_select(ctx, bt_reshape(ctx, logits, 2, all), 0,
                                            s_sources(ctx, self->device, allowed, B, T)),
                            3, picked); /* (B, T-1, V) */
    } else {
        logits = bt_slice(ctx, logits, 1, 0, T - 1, 1); /* (B, T-1, V) */
    }
    bt_tensor *logp = bt_log_softmax(ctx, bt_mul_scalar(ctx, logits, 1.0 / temperature), -1);
    bt_tensor *next = bt_unsqueeze(ctx, bt_slice(ctx, ids, 1, 1, T, 1), -1); /* (B, T-1, 1) */
    const int64_t shape[] = {B, T - 1};
    bt_tensor *out = bt_reshape(ctx, bt_gather(ctx, logp, 2, next), 2, shape); /* (B, T-1) */
    if (entropy) /* H = -sum_v p_v log p_v */
        *entropy = bt_neg(ctx, bt_sum(ctx, bt_mul(ctx, bt_exp(ctx, logp), logp), -1, false));
    return out;
}

bt_tensor *bt_model_token_logprobs(bt_model *self, bt_ctx *ctx, bt_tensor *ids, bt_tensor *mask,
                                   double temperature, bt_tensor **entropy) {
    const s_rows r = {.mask = mask};
    return s_token_logprobs(self, ctx, "bt_model_token_logprobs", ids, &r, temperature, entropy);
}

bt_tensor *bt_model_token_logprobs_packed(bt_model *self, bt_ctx *ctx, bt_tensor *ids,
                                          bt_tensor *segments, bt_tensor *positions,
                                          double temperature, bt_tensor **entropy) {
    const s_rows r = {.seg = segments, .pos = positions};
    return s_token_logprobs(self, ctx, "bt_model_token_logprobs_packed", ids, &r, temperature,
                            entropy);
}

bt_tensor *bt_model_token_logprobs_shared(bt_model *self, bt_ctx *ctx, bt_tensor *ids,
                                          bt_tensor *segments, bt_tensor *prefix,
                                          bt_tensor *positions, double temperature,
                                          bt_tensor **entropy) {
    const s_rows r = {.seg = segments, .prefix = prefix, .pos = positions};
    return s_token_logprobs(self, ctx, "bt_model_token_logprobs_shared", ids, &r, temperature,
                            entropy);
}

/* ---- KV cache ---------------------------------------------------------------------------------
 */

bt_kv_cache *bt_kv_cache_new(const bt_model *model, int64_t slots, int64_t max_len) {
    const bt_model_config *c = &model->cfg;
    if (slots < 1 || max_len < 1 || max_len > c->max_position_embeddings) {
        bt_fail(BT_EINVAL,
                "bt_kv_cache_new: need slots >= 1 and max_len in [1, max_position_embeddings "
                "%lld], got %lld and %lld",
                (long long)c->max_position_embeddings, (long long)slots, (long long)max_len);
        return NULL;
    }
    int L = (int)c->num_hidden_layers;
    bt_kv_cache *kv = calloc(1, sizeof *kv);
    if (kv) {
        *kv = (bt_kv_cache){.ctx = bt_ctx_new(),
                            .slots = slots,
                            .max_len = max_len,
                            .heads = c->num_key_value_heads,
                            .n_layers = L,
                            .k = calloc((size_t)L, sizeof *kv->k),
                            .v = calloc((size_t)L, sizeof *kv->v),
                            .len = calloc((size_t)slots, sizeof *kv->len)};
    }
    bool ok = kv && kv->ctx && kv->k && kv->v && kv->len;
    const int64_t shape[] = {slots, c->num_key_value_heads, max_len, bt_model_head_dim(c)};
    for (int l = 0; ok && l < L; l++) {
        kv->k[l] = bt_zeros(kv->ctx, model->compute, model->device, 4, shape);
        kv->v[l] = bt_zeros(kv->ctx, model->compute, model->device, 4, shape);
        ok = kv->k[l] && kv->v[l];
    }
    if (!ok) {
        bt_kv_cache_destroy(&kv);
        if (!bt_last_error()[0])
            bt_fail(BT_ENOMEM, "bt_kv_cache_new: out of memory");
    }
    return kv;
}

void bt_kv_cache_destroy(bt_kv_cache **self_p) {
    if (!self_p || !*self_p)
        return;
    bt_kv_cache *kv = *self_p;
    bt_ctx_destroy(&kv->ctx);
    free(kv->k);
    free(kv->v);
    free(kv->len);
    free(kv);
    *self_p = NULL;
}

int64_t bt_kv_cache_columns_read(const bt_kv_cache *self) {
    return self->columns_read;
}

int64_t bt_kv_cache_slots(const bt_kv_cache *self) {
    return self->slots;
}

int64_t bt_kv_cache_len(const bt_kv_cache *self, int64_t slot) {
    BT_ASSERT(slot >= 0 && slot < self->slots);
    return self->len[slot];
}

void bt_kv_cache_clear(bt_kv_cache *self, int64_t slot) {
    BT_ASSERT(slot >= 0 && slot < self->slots);
    self->len[slot] = 0;
}

size_t bt_kv_cache_bytes(const bt_kv_cache *self) {
    size_t bytes = 0;
    for (int l = 0; l < self->n_layers; l++)
        bytes += (size_t)(bt_numel(self->k[l]) + bt_numel(self->v[l])) *
                 bt_dtype_size(bt_dtype_of(self->k[l]));
    return bytes;
}

bt_status bt_kv_cache_copy(bt_kv_cache *dst, bt_ctx *ctx, const int64_t *to, int64_t n,
                           const bt_kv_cache *src, int64_t from) {
    BT_ASSERT(from >= 0 && from < src->slots && n >= 1 && dst->n_layers == src->n_layers);
    int64_t len = src->len[from];
    for (int64_t i = 0; i < n; i++)
        BT_ASSERT(to[i] >= 0 && to[i] < dst->slots);
    if (len > dst->max_len)
        return bt_fail(BT_ERANGE, "bt_kv_cache_copy: %lld tokens do not fit %lld columns",
                       (long long)len, (long long)dst->max_len);
    if (len > 0) {
        bt_tensor *index = bt_from_host(ctx, BT_I64, bt_device_of(dst->k[0]), 1, &n, to);
        for (int l = 0; l < dst->n_layers; l++) {
            bt_tensor *kv[2][2] = {{dst->k[l], src->k[l]}, {dst->v[l], src->v[l]}};
            for (int j = 0; j < 2; j++) {
                bt_tensor *one = bt_slice(ctx, bt_slice(ctx, kv[j][1], 0, from, from + 1, 1), 2, 0,
                                          len, 1); /* (1, Hkv, len, D) */
                const int64_t shape[] = {n, bt_dim(one, 1), len, bt_dim(one, 3)};
                BT_TRY(bt_index_copy_(bt_slice(ctx, kv[j][0], 2, 0, len, 1), 0, index,
                                      bt_expand(ctx, one, 4, shape)));
            }
        }
    }
    for (int64_t i = 0; i < n; i++)
        dst->len[to[i]] = len;
    return BT_OK;
}

bt_status bt_kv_cache_compact(bt_kv_cache *self, const bt_model *model, const int64_t *keep,
                              int64_t n) {
    BT_ASSERT(n >= 1 && n <= self->slots);
    bt_ctx *ctx = bt_ctx_new(), *tmp = bt_ctx_new();
    bt_tensor **k = calloc((size_t)self->n_layers, sizeof *k);
    bt_tensor **v = calloc((size_t)self->n_layers, sizeof *v);
    int64_t *len = calloc((size_t)n, sizeof *len);
    bt_status st =
        ctx && tmp && k && v && len ? BT_OK : bt_fail(BT_ENOMEM, "kv cache: out of memory");
    bt_tensor *index = st == BT_OK ? bt_from_host(tmp, BT_I64, model->device, 1, &n, keep) : NULL;
    for (int l = 0; l < self->n_layers && st == BT_OK; l++) {
        k[l] = bt_contiguous(ctx, bt_index_select(ctx, self->k[l], 0, index));
        v[l] = bt_contiguous(ctx, bt_index_select(ctx, self->v[l], 0, index));
        st = k[l] && v[l] ? BT_OK : BT_ENOMEM;
    }
    bt_ctx_destroy(&tmp);
    if (st != BT_OK) {
        bt_ctx_destroy(&ctx);
        free(k);
        free(v);
        free(len);
        return st;
    }
    for (int64_t i = 0; i < n; i++) {
        BT_ASSERT(keep[i] >= 0 && keep[i] < self->slots);
        len[i] = self->len[keep[i]];
    }
    bt_ctx_destroy(&self->ctx);
    free(self->k);
    free(self->v);
    free(self->len);
    *self = (bt_kv_cache){.ctx = ctx,
                          .slots = n,
                          .max_len = self->max_len,
                          .heads = self->heads,
                          .n_layers = self->n_layers,
                          .k = k,
                          .v = v,
                          .len = len,
                          .columns_read = self->columns_read};
    return BT_OK;
}

/*  Runs p (its cache, write and allowed set) over ids under the model's autocast scope and
    no-grad; returns the final hidden states (B, T, C). */
static bt_tensor *s_hidden_cached(bt_model *m, bt_ctx *ctx, bt_tensor *ids, s_pass *p,
                                  bt_tensor *positions) {
    bt_autocast scope;
    if (bt_autocast_enter(m->device, m->compute, &scope) != BT_OK)
        return NULL;
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *h = s_rope_tables(m, ctx, positions, p) == BT_OK ? s_hidden(m, ctx, ids, p) : NULL;
    bt_set_grad_enabled(grad);
    bt_autocast_exit(&scope);
    return h;
}

/*  logits (N, V) F32 of hidden rows (N, C), in the model's autocast scope. */
static bt_tensor *s_head(bt_model *m, bt_ctx *ctx, bt_tensor *h) {
    bt_autocast scope;
    if (bt_autocast_enter(m->device, m->compute, &scope) != BT_OK)
        return NULL;
    bool grad = bt_set_grad_enabled(false);
    bt_tensor *logits = s_logits(m, ctx, h);
    bt_set_grad_enabled(grad);
    bt_autocast_exit(&scope);
    return m->compute == BT_F32 ? logits : bt_to_dtype(ctx, logits, BT_F32);
}

bt_tensor *bt_model_prefill(bt_model *self, bt_kv_cache *cache, bt_ctx *ctx, bt_tensor *ids,
                            const int64_t *lens, const int64_t *slots) {
    if (!ids || bt_ndim(ids) != 2) {
        bt_fail(BT_EINVAL, "bt_model_prefill: ids must be (N, T)");
        return NULL;
    }
    int64_t N = bt_dim(ids, 0), T = bt_dim(ids, 1), C = self->cfg.hidden_size;
    if (T > cache->max_len) {
        bt_fail(BT_ERANGE, "bt_model_prefill: %lld tokens do not fit %lld columns", (long long)T,
                (long long)cache->max_len);
        return NULL;
    }
    int64_t *host = malloc((size_t)(N * T + 2 * N) * sizeof *host);
    if (!host) {
        bt_fail(BT_ENOMEM, "bt_model_prefill: out of memory");
        return NULL;
    }
    int64_t *real = host, *last = host + N * T, *where = last + N; /* (N, T), (N), (N) */
    for (int64_t i = 0; i < N; i++) {
        BT_ASSERT(lens[i] >= 1 && lens[i] <= T && slots[i] >= 0 && slots[i] < cache->slots);
        for (int64_t t = 0; t < T; t++)
            real[i * T + t] = t < lens[i];
        last[i] = i * T + lens[i] - 1;
        where[i] = slots[i];
    }
    const int64_t shape[] = {N, T};
    bt_device dev = self->device;
    s_pass p = {
        .B = N, .T = T, .cache = cache, .write = bt_from_host(ctx, BT_I64, dev, 1, &N, where)};
    bt_tensor *r = bt_from_host(ctx, BT_I64, dev, 2, shape, real);
    p.allowed = s_allowed(ctx, dev, bt_gt_scalar(ctx, r, 0), NULL, &p, T);
    const int64_t pshape[] = {1, T}, flat[] = {N * T, C};
    bt_tensor *pos = bt_expand(ctx, bt_reshape(ctx, bt_arange(ctx, BT_I64, dev, T), 2, pshape), 2,
                               shape); /* (N, T): rows start at column 0 */
    p.local = s_window(self, ctx, p.allowed, pos, pos);
    bt_tensor *h = s_hidden_cached(self, ctx, bt_to_dtype(ctx, ids, BT_I64), &p, pos);
    bt_tensor *at = bt_from_host(ctx, BT_I64, dev, 1, &N, last);
    bt_tensor *logits = s_head(self, ctx, bt_index_select(ctx, bt_reshape(ctx, h, 2, flat), 0, at));
    if (logits)
        for (int64_t i = 0; i < N; i++)
            cache->len[slots[i]] = lens[i];
    free(host);
    return logits;
}

/*  Splits slots [0, S) of a decode step, whose attention reads keys[s] columns each, into runs of
    consecutive slots, each read to its own longest: the split that minimises the columns read
    plus per_run for each run (the cost of a run's kernels, in columns), by dynamic programming
    over the split points (O(S^2) host arithmetic, against a step's O(S x columns) tensor work).
    run (n + 1) and run_keys (n) receive the runs; best and from are (S + 1) scratch.  Returns n. */
static int64_t s_decode_runs(const int64_t *keys, int64_t S, int64_t per_run, int64_t *run,
                             int64_t *run_keys, int64_t *best, int64_t *from) {
    best[0] = 0;
    for (int64_t j = 1; j <= S; j++) {
        int64_t most = 0;
        best[j] = INT64_MAX;
        for (int64_t i = j - 1; i >= 0; i--) {
            most = keys[i] > most ? keys[i] : most;
            int64_t cost = best[i] + per_run + (j - i) * most;
            if (cost < best[j]) {
                best[j] = cost;
                from[j] = i;
            }
        }
    }
    int64_t n = 0;
    for (int64_t j = S; j > 0; j = from[j])
        n++;
    run[n] = S;
    for (int64_t j = S, r = n - 1; j > 0; j = from[j], r--) {
        run[r] = from[j];
        run_keys[r] = 0;
        for (int64_t s = from[j]; s < j; s++)
            run_keys[r] = keys[s] > run_keys[r] ? keys[s] : run_keys[r];
    }
    return n;
}

/*  A run's kernels in columns of keys and values read.  CPU: a run's operator calls cost about
    20 us and a column of one slot 300-430 ns (measured on libtorch 1.13, float32, head dim 64:
    bench/RESULTS.md), about 50 columns; 64.  CUDA: a launch costs far more than a column, so a
    step is one run unless its slots' lengths differ by tens of thousands. */
static int64_t s_per_run(bt_device dev) {
    return dev.type == BT_DEVICE_CPU ? 64 : 65536;
}

bt_tensor *bt_model_decode(bt_model *self, bt_kv_cache *cache, bt_ctx *ctx, const int64_t *ids,
                           const bool *active) {
    int64_t S = cache->slots, H = cache->heads, keys = 1;
    int64_t *host = malloc((size_t)(S * H + 7 * S + 3) * sizeof *host);
    bt_tensor **parts = malloc((size_t)S * sizeof *parts);
    if (!host || !parts) {
        free(host);
        free(parts);
        bt_fail(BT_ENOMEM, "bt_model_decode: out of memory");
        return NULL;
    }
    int64_t *rows = host, *pos = host + S * H, *tok = pos + S, *need = tok + S;
    int64_t *run = need + S, *run_keys = run + S + 1, *best = run_keys + S, *from = best + S + 1;
    for (int64_t s = 0; s < S; s++) {
        /* an inactive slot writes the column past what it holds (column 0 of a free one), so
           a slot kept for its row's next turn keeps its columns; it reads column 0 only */
        int64_t len = cache->len[s], at = active[s] ? len : 0;
        int64_t write = active[s] || len < cache->max_len ? len : 0;
        if (at >= cache->max_len) {
            free(host);
            free(parts);
            bt_fail(BT_ERANGE, "bt_model_decode: slot %lld is full (%lld columns)", (long long)s,
                    (long long)cache->max_len);
            return NULL;
        }
        for (int64_t h = 0; h < H; h++)
            rows[s * H + h] = (s * H + h) * cache->max_len + write;
        pos[s] = at;
        tok[s] = active[s] ? ids[s] : 0;
        need[s] = at + 1;
        keys = at + 1 > keys ? at + 1 : keys;
    }
    bt_device dev = self->device;
    int64_t SH = S * H;
    const int64_t col[] = {S, 1}, kshape[] = {1, keys}, ashape[] = {S, 1, 1, keys};
    s_pass p = {.B = S,
                .T = 1,
                .cache = cache,
                .write = bt_from_host(ctx, BT_I64, dev, 1, &SH, rows),
                .keys = keys,
                .run = run,
                .run_keys = run_keys,
                .parts = parts};
    p.n_runs = s_decode_runs(need, S, s_per_run(dev), run, run_keys, best, from);
    bt_tensor *positions = bt_from_host(ctx, BT_I64, dev, 2, col, pos); /* (S, 1) */
    bt_tensor *kcol = bt_reshape(ctx, bt_arange(ctx, BT_I64, dev, keys), 2, kshape);
    p.allowed =
        bt_reshape(ctx, bt_logical_not(ctx, bt_gt_scalar(ctx, bt_sub(ctx, kcol, positions), 0)), 4,
                   ashape); /* key column <= the slot's position */
    p.local = s_window(self, ctx, p.allowed, positions, kcol); /* the last sliding_window */
    const int64_t flat[] = {S, self->cfg.hidden_size};
    bt_tensor *h =
        s_hidden_cached(self, ctx, bt_from_host(ctx, BT_I64, dev, 2, col, tok), &p, positions);
    bt_tensor *logits = s_head(self, ctx, bt_reshape(ctx, h, 2, flat));
    for (int64_t s = 0; logits && s < S; s++)
        cache->len[s] += active[s];
    for (int64_t r = 0; logits && r < p.n_runs; r++)
        cache->columns_read += (run[r + 1] - run[r]) * run_keys[r];
    free(host);
    free(parts);
    return logits;
}

bt_tensor *bt_model_extend(bt_model *self, bt_kv_cache *cache, bt_ctx *ctx, bt_tensor *ids,
                           const int64_t *slots) {
    if (!ids || bt_ndim(ids) != 2 || bt_dim(ids, 0) < 1 || bt_dim(ids, 1) < 1) {
        bt_fail(BT_EINVAL, "bt_model_extend: ids: expected (N, T) with N, T >= 1, got %d dims",
                ids ? bt_ndim(ids) : 0);
        return NULL;
    }
    int64_t N = bt_dim(ids, 0), T = bt_dim(ids, 1), H = cache->heads, keys = 0;
    for (int64_t i = 0; i < N; i++) {
        if (slots[i] < 0 || slots[i] >= cache->slots) {
            bt_fail(BT_EINVAL,
                    "bt_model_extend: slots[%lld]: expected a slot in [0, %lld), got %lld",
                    (long long)i, (long long)cache->slots, (long long)slots[i]);
            return NULL;
        }
        for (int64_t j = 0; j < i; j++)
            if (slots[j] == slots[i]) {
                bt_fail(BT_EINVAL,
                        "bt_model_extend: slots[%lld]: expected distinct slots, got "
                        "slot %lld again (slots[%lld])",
                        (long long)i, (long long)slots[i], (long long)j);
                return NULL;
            }
        int64_t len = cache->len[slots[i]];
        if (len + T > cache->max_len) {
            bt_fail(BT_ERANGE,
                    "bt_model_extend: slot %lld holds %lld tokens: %lld more do not fit %lld "
                    "columns",
                    (long long)slots[i], (long long)len, (long long)T, (long long)cache->max_len);
            return NULL;
        }
        keys = len + T > keys ? len + T : keys;
    }
    int64_t *host = malloc((size_t)(N * H * T + N * T + N) * sizeof *host);
    if (!host) {
        bt_fail(BT_ENOMEM, "bt_model_extend: out of memory");
        return NULL;
    }
    int64_t *rows = host, *pos = rows + N * H * T, *where = pos + N * T;
    for (int64_t i = 0; i < N; i++) {
        int64_t len = cache->len[slots[i]];
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) /* kv (N, Hkv, T, D) flattened in that order */
                rows[(i * H + h) * T + t] = (slots[i] * H + h) * cache->max_len + len + t;
        for (int64_t t = 0; t < T; t++)
            pos[i * T + t] = len + t;
        where[i] = slots[i];
    }
    bt_device dev = self->device;
    int64_t NHT = N * H * T;
    const int64_t shape[] = {N, T}, kshape[] = {1, keys}, qs[] = {N, 1, T, 1};
    const int64_t ks[] = {1, 1, 1, keys}, flat[] = {N, self->cfg.hidden_size};
    s_pass p = {.B = N,
                .T = T,
                .cache = cache,
                .write = bt_from_host(ctx, BT_I64, dev, 1, &NHT, rows),
                .keys = keys,
                .read = bt_from_host(ctx, BT_I64, dev, 1, &N, where)};
    bt_tensor *positions = bt_from_host(ctx, BT_I64, dev, 2, shape, pos); /* (N, T) */
    bt_tensor *kcol = bt_reshape(ctx, bt_arange(ctx, BT_I64, dev, keys), 2, kshape);
    p.allowed = bt_logical_not(ctx, bt_gt_scalar(ctx,
                                                 bt_sub(ctx, bt_reshape(ctx, kcol, 4, ks),
                                                        bt_reshape(ctx, positions, 4, qs)),
                                                 0)); /* (N, 1, T, keys): column <= position */
    p.local = s_window(self, ctx, p.allowed, positions, kcol);
    bt_tensor *h = s_hidden_cached(self, ctx, bt_to_dtype(ctx, ids, BT_I64), &p, positions);
    bt_tensor *logits =
        s_head(self, ctx, bt_reshape(ctx, bt_slice(ctx, h, 1, T - 1, T, 1), 2, flat));
    for (int64_t i = 0; logits && i < N; i++)
        cache->len[slots[i]] += T;
    free(host);
    return logits;
}

/* ---- model directories ------------------------------------------------------------------------
 */

int64_t bt_model_head_dim(const bt_model_config *cfg) {
    return cfg->head_dim > 0 ? cfg->head_dim : cfg->hidden_size / cfg->num_attention_heads;
}

static bt_status s_join(char *buf, size_t len, const char *dir, const char *file) {
    if ((size_t)snprintf(buf, len, "%s/%s", dir, file) >= len)
        return bt_fail(BT_EINVAL, "%s/%s: path too long", dir, file);
    return BT_OK;
}

/*  model.safetensors of every parameter as host copies in m->save. */
static bt_status s_save_weights(const bt_model *m, const char *path) {
    bt_st_tensor *ts = calloc((size_t)m->n_params, sizeof *ts);
    bt_ctx *tmp = bt_ctx_new();
    bt_status st = ts && tmp ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < m->n_params && st == BT_OK; i++) {
        size_t nbytes = (size_t)bt_numel(m->params[i]) * bt_dtype_size(m->save);
        void *data = malloc(nbytes);
        ts[i] = (bt_st_tensor){
            .name = m->specs[i].name, .dtype = m->save, .ndim = m->specs[i].ndim, .data = data};
        memcpy(ts[i].shape, m->specs[i].shape, sizeof m->specs[i].shape);
        st = data ? bt_to_host(bt_to_dtype(tmp, m->params[i], m->save), data, nbytes)
                  : bt_fail(BT_ENOMEM, "%s: out of memory", path);
        bt_ctx_reset(tmp);
    }
    bt_ctx_destroy(&tmp);
    const char *meta[] = {"format", "pt"};
    if (st == BT_OK)
        st = bt_safetensors_write(path, ts, m->n_params, meta, 1);
    for (int i = 0; ts && i < m->n_params; i++)
        free((void *)ts[i].data);
    free(ts);
    return st;
}

bt_status bt_model_save(const bt_model *self, const bt_tokenizer_t *tok, const char *dir) {
    char path[4096];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return bt_fail(BT_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
    bt_status st = s_join(path, sizeof path, dir, "config.json");
    if (st == BT_OK)
        st = bt_model_config_save(&self->cfg, path);
    if (st == BT_OK)
        st = s_join(path, sizeof path, dir, "model.safetensors");
    if (st == BT_OK)
        st = s_save_weights(self, path);
    bt_tokenizer_t *bytes = tok ? NULL : bt_tokenizer_new_bytes();
    if (st == BT_OK && !tok && !bytes)
        st = bt_fail(BT_ENOMEM, "%s: out of memory", dir);
    if (st == BT_OK)
        st = bt_tokenizer_save(tok ? tok : bytes, dir);
    bt_tokenizer_destroy(&bytes);
    if (st == BT_OK && self->lora) /* the folder holds the base too: AutoPeftModel finds it */
        st = bt_model_save_adapters(self, dir, dir);
    return st;
}

/*  Opens the shards the index at path names in its weight_map (each once), from dir. */
static bt_status s_open_shards(const char *dir, const char *path, s_source *src) {
    char *text = NULL;
    BT_TRY(bt_file_read(path, 64 << 20, &text, NULL));
    cJSON *root = cJSON_Parse(text), *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    free(text);
    bt_status st = cJSON_IsObject(map) && map->child
                       ? BT_OK
                       : bt_fail(BT_EFORMAT,
                                 "%s: expected a \"weight_map\" object of tensor "
                                 "names to shard files",
                                 path);
    for (const cJSON *e = map ? map->child : NULL; e && st == BT_OK; e = e->next) {
        const char *shard = cJSON_GetStringValue(e);
        if (!shard || !*shard || strchr(shard, '/') || !strcmp(shard, ".."))
            st = bt_fail(BT_EFORMAT, "%s: %s: expected a shard file name in the folder, got %s",
                         path, e->string, shard ? shard : "a non-string");
        bool seen = false;
        for (const cJSON *f = map->child; f != e && !seen && st == BT_OK; f = f->next)
            seen = !strcmp(cJSON_GetStringValue(f), shard);
        if (st != BT_OK || seen)
            continue;
        char file[4096];
        if (src->n == S_MAX_SHARDS)
            st = bt_fail(BT_ERANGE, "%s: more than %d shards", path, S_MAX_SHARDS);
        if (st == BT_OK)
            st = s_join(file, sizeof file, dir, shard);
        if (st == BT_OK)
            st = bt_safetensors_open(file, &src->files[src->n++]);
    }
    cJSON_Delete(root);
    return st;
}

/*  Opens dir's model.safetensors, or the shards its model.safetensors.index.json names; path and
    index are the caller's buffers of 4096 bytes (src->where points at one). */
static bt_status s_open_source(const char *dir, char *path, char *index, s_source *src) {
    BT_TRY(s_join(path, 4096, dir, "model.safetensors"));
    BT_TRY(s_join(index, 4096, dir, "model.safetensors.index.json"));
    *src = (s_source){.where = path};
    struct stat sb;
    if (stat(path, &sb) != 0 && stat(index, &sb) == 0) { /* sharded */
        src->where = index;
        return s_open_shards(dir, index, src);
    }
    bt_status st = bt_safetensors_open(path, &src->files[0]);
    src->n = st == BT_OK;
    return st;
}

bt_status bt_model_stored_dtype(const char *dir, bt_dtype *out) {
    char path[4096], index[4096];
    s_source src;
    bt_status st = s_open_source(dir, path, index, &src);
    const bt_st_entry *e = NULL;
    for (int i = 0; i < src.n && !e; i++)
        e = bt_safetensors_find(src.files[i], "model.embed_tokens.weight");
    if (st == BT_OK && !e)
        st = bt_fail(BT_EFORMAT, "%s: missing tensor model.embed_tokens.weight", src.where);
    if (st == BT_OK)
        *out = e->dtype;
    for (int i = 0; i < src.n; i++)
        bt_safetensors_destroy(&src.files[i]);
    return st;
}

bt_model *bt_model_load(const char *dir, bt_device device) {
    char path[4096], index[4096];
    bt_model_config cfg;
    if (s_join(path, sizeof path, dir, "config.json") != BT_OK ||
        bt_model_config_load(path, &cfg) != BT_OK)
        return NULL;
    s_source src;
    bt_status st = s_open_source(dir, path, index, &src);
    bt_model *m = st == BT_OK ? s_model_alloc(&cfg, device) : NULL;
    if (m && s_model_fill(m, 0, &src) != BT_OK)
        bt_model_destroy(&m);
    if (m && s_join(path, sizeof path, dir, "adapter_config.json") == BT_OK &&
        access(path, F_OK) == 0 && bt_model_load_adapters(m, dir) != BT_OK)
        bt_model_destroy(&m);
    for (int i = 0; i < src.n; i++)
        bt_safetensors_destroy(&src.files[i]);
    return m;
}

/* ---- LoRA ---------------------------------------------------------------------------------------
 */

const char *const bt_lora_target_names[BT_LORA_TARGETS + 1] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", NULL};

/*  The adapters: per layer l and target t, A (rank, in) and B (out, rank) at ab[2 (l T + t)] and
    ab[2 (l T + t) + 1], NULL when t is not targeted; params lists the present ones in that order.
 */
struct s_lora {
    bt_lora_config cfg;
    double scale;              /* alpha / rank */
    uint64_t seed;             /* dropout masks' key */
    uint64_t forwards;         /* training forwards with dropout so far: the next mask's counter */
    bool off;                  /* adapters disabled: the base model alone */
    int n;                     /* adapter tensors: 2 per targeted linear */
    bt_tensor **ab;            /* (2 L BT_LORA_TARGETS) */
    bt_tensor **params;        /* (n) */
    char (*names)[S_NAME_MAX]; /* (n) */
};

const char *bt_lora_target_name(bt_lora_target target) {
    return target >= 0 && target < BT_LORA_TARGETS ? bt_lora_target_names[target] : "?";
}

bt_status bt_lora_target_parse(const char *name, bt_lora_target *out) {
    for (int t = 0; t < BT_LORA_TARGETS; t++)
        if (name && strcmp(name, bt_lora_target_names[t]) == 0) {
            *out = (bt_lora_target)t;
            return BT_OK;
        }
    return bt_fail(BT_EINVAL,
                   "LoRA target: expected one of q_proj, k_proj, v_proj, o_proj, "
                   "gate_proj, up_proj, down_proj, got %s",
                   name ? name : "nothing");
}

void bt_lora_config_init(bt_lora_config *cfg) {
    *cfg = (bt_lora_config){
        .rank = 0, .alpha = 8.0, .dropout = 0.0, .targets = (1u << BT_LORA_TARGETS) - 1};
}

static void s_lora_free(s_lora **lora_p) {
    if (!*lora_p)
        return;
    free((*lora_p)->ab);
    free((*lora_p)->params);
    free((*lora_p)->names);
    free(*lora_p);
    *lora_p = NULL;
}

static int s_lora_num(const bt_model *m) {
    return m->lora->n;
}
static bt_tensor *const *s_lora_params(const bt_model *m) {
    return m->lora->params;
}
static const char *s_lora_name(const bt_model *m, int i) {
    return i >= 0 && i < m->lora->n ? m->lora->names[i] : NULL;
}

/*  The base weight (out, in) that target t of layer l adapts. */
static bt_tensor *s_lora_base(const bt_model *m, int l, bt_lora_target t) {
    const s_layer *w = &m->layers[l];
    bt_tensor *const by_target[BT_LORA_TARGETS] = {w->q_proj,    w->k_proj,  w->v_proj,   w->o_proj,
                                                   w->gate_proj, w->up_proj, w->down_proj};
    return by_target[t];
}

/*  Points ab at params, in the order bt_model_add_lora made them. */
static void s_lora_bind(bt_model *m) {
    s_lora *a = m->lora;
    int k = 0;
    for (int l = 0; l < (int)m->cfg.num_hidden_layers; l++)
        for (int t = 0; t < BT_LORA_TARGETS; t++) {
            bt_tensor **ab = &a->ab[2 * (l * BT_LORA_TARGETS + t)];
            bool on = a->cfg.targets & (1u << t);
            ab[0] = on ? a->params[k++] : NULL;
            ab[1] = on ? a->params[k++] : NULL;
        }
}

bt_status bt_model_add_lora(bt_model *self, const bt_lora_config *cfg, uint64_t seed) {
    if (self->lora)
        return bt_fail(BT_EINVAL, "bt_model_add_lora: the model has adapters already");
    if (cfg->rank < 1 || !(cfg->dropout >= 0 && cfg->dropout < 1) || !isfinite(cfg->alpha) ||
        !(cfg->targets & ((1u << BT_LORA_TARGETS) - 1)))
        return bt_fail(BT_EINVAL,
                       "bt_model_add_lora: expected rank >= 1, dropout in [0, 1), a finite alpha "
                       "and a target, got rank %lld, dropout %g, alpha %g, targets 0x%x",
                       (long long)cfg->rank, cfg->dropout, cfg->alpha, (unsigned)cfg->targets);
    int L = (int)self->cfg.num_hidden_layers, n = 0;
    for (int t = 0; t < BT_LORA_TARGETS; t++)
        n += cfg->targets & (1u << t) ? 2 * L : 0;
    s_lora *a = calloc(1, sizeof *a);
    if (a) {
        a->ab = calloc((size_t)(2 * L * BT_LORA_TARGETS), sizeof *a->ab);
        a->params = calloc((size_t)n, sizeof *a->params);
        a->names = calloc((size_t)n, sizeof *a->names);
    }
    bt_ctx *tmp = bt_ctx_new();
    float *host = NULL;
    bt_status st = a && a->ab && a->params && a->names && tmp
                       ? BT_OK
                       : bt_fail(BT_ENOMEM, "bt_model_add_lora: out of memory");
    bool grad = bt_set_grad_enabled(false);
    for (int l = 0, k = 0; l < L && st == BT_OK; l++)
        for (int t = 0; t < BT_LORA_TARGETS && st == BT_OK; t++) {
            if (!(cfg->targets & (1u << t)))
                continue;
            bt_tensor *w = s_lora_base(self, l, (bt_lora_target)t); /* (out, in) */
            int64_t out = bt_dim(w, 0), in = bt_dim(w, 1), r = cfg->rank;
            const int64_t ashape[] = {r, in}, bshape[] = {out, r};
            const char *group = t <= BT_LORA_O_PROJ ? "self_attn" : "mlp";
            snprintf(a->names[k], S_NAME_MAX, "model.layers.%d.%s.%s.lora_A.weight", l, group,
                     bt_lora_target_names[t]);
            snprintf(a->names[k + 1], S_NAME_MAX, "model.layers.%d.%s.%s.lora_B.weight", l, group,
                     bt_lora_target_names[t]);
            /* kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain sqrt(3 / in) */
            double bound = 1.0 / sqrt((double)in);
            free(host);
            host = malloc((size_t)(r * in) * sizeof *host);
            uint64_t key = bt_rng_key(bt_rng_key(seed, (uint64_t)l), (uint64_t)t);
            for (int64_t j = 0; host && j < r * in; j++)
                host[j] =
                    (float)((2.0 * bt_rng_uniform(bt_rng_key(key, (uint64_t)j)) - 1.0) * bound);
            bt_tensor *A = host ? bt_from_host(tmp, BT_F32, bt_cpu(), 2, ashape, host) : NULL;
            a->params[k] = bt_clone(
                self->ctx, bt_to_device(tmp, bt_to_dtype(tmp, A, bt_dtype_of(w)), self->device));
            a->params[k + 1] = bt_zeros(self->ctx, bt_dtype_of(w), self->device, 2, bshape);
            st = a->params[k] && a->params[k + 1] ? BT_OK : BT_ETORCH;
            if (st == BT_OK)
                st = bt_set_requires_grad(a->params[k], true);
            if (st == BT_OK)
                st = bt_set_requires_grad(a->params[k + 1], true);
            bt_ctx_reset(tmp);
            k += 2;
        }
    bt_set_grad_enabled(grad);
    free(host);
    bt_ctx_destroy(&tmp);
    for (int i = 0; i < self->n_params && st == BT_OK; i++)
        st = bt_set_requires_grad(self->params[i], false);
    /* the frozen base's matrices held once, in the dtype of the checkpoint they came from (the
       embedding, norms and biases stay float32: read as they are, not by a product) */
    tmp = self->save != BT_F32 ? bt_ctx_new() : NULL;
    for (int i = 0; tmp && i < self->n_params && st == BT_OK; i++)
        if (self->specs[i].ndim == 2 && self->params[i] != self->embed) {
            bt_tensor *held = bt_to_dtype(tmp, self->params[i], self->save);
            st = held ? bt_set_data(self->params[i], held) : BT_ETORCH;
            bt_ctx_reset(tmp);
        }
    bt_ctx_destroy(&tmp);
    if (st != BT_OK) {
        s_lora_free(&a);
        for (int i = 0; i < self->n_params; i++)
            bt_set_requires_grad(self->params[i], true);
        return st;
    }
    a->cfg = *cfg;
    a->n = n;
    a->scale = cfg->alpha / (double)cfg->rank;
    a->seed = bt_rng_key(seed, 0x64726f706f7574ULL); /* "dropout" */
    self->lora = a;
    s_lora_bind(self);
    return BT_OK;
}

const bt_lora_config *bt_model_lora(const bt_model *self) {
    return self->lora ? &self->lora->cfg : NULL;
}

bool bt_model_set_adapters_enabled(bt_model *self, bool on) {
    if (!self->lora)
        return false;
    bool was = !self->lora->off;
    self->lora->off = !on;
    return was;
}

/*  The key of a full forward's dropout masks: nonzero only when it drops (LoRA dropout > 0,
    adapters on, grad mode on); each such forward takes the next counter. */
static uint64_t s_lora_dropout_key(bt_model *m) {
    if (!m->lora || m->lora->off || m->lora->cfg.dropout <= 0)
        return 0;
    bool grad = bt_set_grad_enabled(true);
    bt_set_grad_enabled(grad);
    return grad ? bt_rng_key(m->lora->seed, m->lora->forwards++) | 1 : 0;
}

/*  z with P(N(0, 1) > z) = 1 - p, by bisection on the normal CDF 0.5 erfc(-z / sqrt 2). */
static double s_normal_quantile(double p) {
    double lo = -40, hi = 40;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/*  (alpha / r) dropout(x) A^T B^T of layer l's target t, x (..., in) -> (..., out); NULL when the
    target has no adapter or adapters are off (or on failure, which the caller's bt_add reports).
    Dropout keeps each element with probability 1 - p and scales it by 1 / (1 - p), the mask drawn
    from a generator seeded by (the pass's key, l, t) on x's device. */
static bt_tensor *s_lora_delta(const bt_model *m, bt_ctx *ctx, int l, bt_lora_target t,
                               bt_tensor *x, const s_pass *p) {
    const s_lora *a = m->lora;
    bt_tensor *A = a->ab[2 * (l * BT_LORA_TARGETS + t)],
              *B = a->ab[2 * (l * BT_LORA_TARGETS + t) + 1];
    if (a->off || !A)
        return NULL;
    if (p->dropout) {
        double rate = a->cfg.dropout;
        bt_gen *gen = bt_gen_new(bt_rng_key(bt_rng_key(p->dropout, (uint64_t)l), (uint64_t)t),
                                 bt_device_of(x));
        int64_t shape[BT_MAX_DIMS];
        for (int d = 0; d < bt_ndim(x); d++)
            shape[d] = bt_dim(x, d);
        bt_tensor *z = bt_randn(ctx, gen, bt_dtype_of(x), bt_ndim(x), shape);
        bt_gen_destroy(&gen);
        bt_tensor *drop = bt_logical_not(ctx, bt_gt_scalar(ctx, z, s_normal_quantile(rate)));
        x = bt_mul_scalar(ctx, bt_masked_fill(ctx, x, drop, 0.0), 1.0 / (1.0 - rate));
    }
    return bt_mul_scalar(ctx, bt_linear(ctx, bt_linear(ctx, x, A), B), a->scale);
}

bt_status bt_model_merge_lora(bt_model *self) {
    s_lora *a = self->lora;
    if (!a)
        return BT_OK;
    bt_ctx *tmp = bt_ctx_new();
    bt_status st = tmp ? BT_OK : bt_fail(BT_ENOMEM, "bt_model_merge_lora: out of memory");
    bool grad = bt_set_grad_enabled(false);
    for (int l = 0; l < (int)self->cfg.num_hidden_layers && st == BT_OK; l++)
        for (int t = 0; t < BT_LORA_TARGETS && st == BT_OK; t++) {
            bt_tensor *A = a->ab[2 * (l * BT_LORA_TARGETS + t)];
            bt_tensor *B = a->ab[2 * (l * BT_LORA_TARGETS + t) + 1];
            if (!A)
                continue;
            bt_tensor *w = s_lora_base(self, l, (bt_lora_target)t); /* (out, in) */
            /* W + (alpha / r) B A: (out, r) @ (r, in) */
            st = bt_copy_(w, bt_add(tmp, w, bt_mul_scalar(tmp, bt_matmul(tmp, B, A), a->scale)));
            bt_ctx_reset(tmp);
        }
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&tmp);
    for (int i = 0; i < self->n_params && st == BT_OK; i++)
        st = bt_set_requires_grad(self->params[i], true);
    if (st == BT_OK)
        s_lora_free(&self->lora);
    return st;
}

/*  tensors[i] replaced by a copy in dtype, in the model's context, requiring grad as before. */
static bt_status s_cast_all(bt_model *m, bt_tensor **ts, int n, bt_dtype dtype) {
    for (int i = 0; i < n; i++) {
        bool req = bt_requires_grad(ts[i]);
        bt_tensor *t = bt_clone(m->ctx, bt_detach(m->ctx, bt_to_dtype(m->ctx, ts[i], dtype)));
        if (!t)
            return BT_ETORCH;
        BT_TRY(bt_set_requires_grad(t, req));
        ts[i] = t;
    }
    return BT_OK;
}

bt_status bt_model_cast(bt_model *self, bt_dtype dtype) {
    if (dtype != BT_F32 && dtype != BT_F64)
        return bt_fail(BT_EINVAL, "bt_model_cast: expected F32 or F64, got %s",
                       bt_dtype_name(dtype));
    bool grad = bt_set_grad_enabled(false);
    bt_status st = s_cast_all(self, self->params, self->n_params, dtype);
    if (st == BT_OK && self->lora)
        st = s_cast_all(self, self->lora->params, self->lora->n, dtype);
    bt_set_grad_enabled(grad);
    s_model_bind(self);
    if (self->lora)
        s_lora_bind(self);
    return st;
}

/* ---- LoRA adapter folders (PEFT's layout) ----------------------------------------------------
 */

char *bt_lora_config_to_json(const bt_lora_config *cfg, const char *base_name) {
    /* adapter_config.json: LoraConfig's fields, the defaults of the ones baton does not use */
    cJSON *root = cJSON_CreateObject(), *targets = cJSON_CreateArray();
    for (int t = 0; t < BT_LORA_TARGETS; t++)
        if (cfg->targets & (1u << t))
            cJSON_AddItemToArray(targets, cJSON_CreateString(bt_lora_target_names[t]));
    cJSON_AddStringToObject(root, "peft_type", "LORA");
    cJSON_AddStringToObject(root, "task_type", "CAUSAL_LM");
    cJSON_AddStringToObject(root, "base_model_name_or_path", base_name ? base_name : "");
    cJSON_AddNumberToObject(root, "r", (double)cfg->rank);
    cJSON_AddNumberToObject(root, "lora_alpha", cfg->alpha);
    cJSON_AddNumberToObject(root, "lora_dropout", cfg->dropout);
    cJSON_AddItemToObject(root, "target_modules", targets);
    cJSON_AddStringToObject(root, "bias", "none");
    cJSON_AddBoolToObject(root, "fan_in_fan_out", false);
    cJSON_AddBoolToObject(root, "inference_mode", true);
    cJSON_AddBoolToObject(root, "init_lora_weights", true);
    cJSON_AddBoolToObject(root, "use_rslora", false);
    cJSON_AddBoolToObject(root, "use_dora", false);
    cJSON_AddNullToObject(root, "modules_to_save");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

bt_status bt_model_save_adapters(const bt_model *self, const char *dir, const char *base_name) {
    const s_lora *a = self->lora;
    if (!a)
        return bt_fail(BT_EINVAL, "%s: the model has no adapters", dir);
    char path[4096];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return bt_fail(BT_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
    bt_st_tensor *ts = calloc((size_t)a->n, sizeof *ts);
    char(*names)[S_NAME_MAX + 32] = calloc((size_t)a->n, sizeof *names);
    bt_status st = ts && names ? BT_OK : bt_fail(BT_ENOMEM, "%s: out of memory", dir);
    for (int i = 0; i < a->n && st == BT_OK; i++) {
        bt_tensor *p = a->params[i];
        size_t nbytes = (size_t)bt_numel(p) * sizeof(float);
        void *data = malloc(nbytes);
        snprintf(names[i], sizeof names[i], BT_LORA_PEFT_PREFIX "%s", a->names[i]);
        ts[i] = (bt_st_tensor){.name = names[i], .dtype = BT_F32, .ndim = 2, .data = data};
        ts[i].shape[0] = bt_dim(p, 0);
        ts[i].shape[1] = bt_dim(p, 1);
        st = data && bt_dtype_of(p) == BT_F32 ? bt_to_host(p, data, nbytes)
             : data ? bt_fail(BT_EUNSUPPORTED, "%s: adapters are %s, expected F32", dir,
                              bt_dtype_name(bt_dtype_of(p)))
                    : bt_fail(BT_ENOMEM, "%s: out of memory", dir);
    }
    const char *meta[] = {"format", "pt"};
    if (st == BT_OK)
        st = s_join(path, sizeof path, dir, "adapter_model.safetensors");
    if (st == BT_OK)
        st = bt_safetensors_write(path, ts, a->n, meta, 1);
    for (int i = 0; ts && i < a->n; i++)
        free((void *)ts[i].data);
    free(ts);
    free(names);
    if (st != BT_OK)
        return st;
    char *text = bt_lora_config_to_json(&a->cfg, base_name);
    st = text ? s_join(path, sizeof path, dir, "adapter_config.json")
              : bt_fail(BT_ENOMEM, "%s: out of memory", dir);
    FILE *f = st == BT_OK ? bt_file_create(path) : NULL;
    if (st == BT_OK)
        st = f ? bt_file_finish(f, path, fputs(text, f) >= 0 && fputc('\n', f) != EOF) : BT_EIO;
    free(text);
    return st;
}

/*  adapter_config.json's LoRA settings; what baton does not implement is refused by name. */
static bt_status s_parse_adapter_config(const char *path, bt_lora_config *out) {
    char *text = NULL;
    BT_TRY(bt_file_read(path, S_CONFIG_MAX, &text, NULL));
    cJSON *root = cJSON_Parse(text);
    free(text);
    bt_lora_config c;
    bt_lora_config_init(&c);
    c.targets = 0;
    bt_status st =
        cJSON_IsObject(root) ? BT_OK : bt_fail(BT_EFORMAT, "%s: expected a JSON object", path);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    if (st == BT_OK && !(cJSON_IsString(type) && strcmp(type->valuestring, "LORA") == 0))
        st = type ? s_type_error(path, "peft_type", "\"LORA\"", type)
                  : bt_fail(BT_EFORMAT, "%s: peft_type: expected \"LORA\", got nothing", path);
    if (st == BT_OK)
        st = s_get_int(root, path, "r", true, &c.rank);
    if (st == BT_OK)
        st = s_get_number(root, path, "lora_alpha", &c.alpha);
    if (st == BT_OK)
        st = s_get_number(root, path, "lora_dropout", &c.dropout);
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
    if (st == BT_OK && bias && !(cJSON_IsString(bias) && strcmp(bias->valuestring, "none") == 0))
        st = s_type_error(path, "bias", "\"none\" (not supported)", bias);
    const char *off[] = {"use_rslora", "use_dora", "fan_in_fan_out"};
    for (size_t i = 0; i < sizeof off / sizeof off[0] && st == BT_OK; i++) {
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, off[i]);
        if (item && !cJSON_IsFalse(item))
            st = s_type_error(path, off[i], "false (not supported)", item);
    }
    const cJSON *targets = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    if (st == BT_OK && !(cJSON_IsArray(targets) && cJSON_GetArraySize(targets) > 0))
        st = targets
                 ? s_type_error(path, "target_modules", "a non-empty list of names", targets)
                 : bt_fail(BT_EFORMAT, "%s: target_modules: expected a list, got nothing", path);
    for (const cJSON *e = targets ? targets->child : NULL; e && st == BT_OK; e = e->next) {
        bt_lora_target t = BT_LORA_Q_PROJ;
        if (!cJSON_IsString(e) || bt_lora_target_parse(e->valuestring, &t) != BT_OK)
            st = s_type_error(path, "target_modules",
                              "names among q_proj, k_proj, v_proj, "
                              "o_proj, gate_proj, up_proj, down_proj",
                              e);
        else
            c.targets |= 1u << t;
    }
    cJSON_Delete(root);
    if (st == BT_OK)
        *out = c;
    return st;
}

bt_status bt_model_load_adapters(bt_model *self, const char *dir) {
    char path[4096];
    bt_lora_config c;
    BT_TRY(s_join(path, sizeof path, dir, "adapter_config.json"));
    BT_TRY(s_parse_adapter_config(path, &c));
    BT_TRY(s_join(path, sizeof path, dir, "adapter_model.safetensors"));
    bt_safetensors_t *file = NULL;
    BT_TRY(bt_safetensors_open(path, &file));
    bt_status st = bt_model_add_lora(self, &c, 0);
    bt_ctx *tmp = bt_ctx_new();
    if (st == BT_OK && !tmp)
        st = bt_fail(BT_ENOMEM, "%s: out of memory", path);
    const s_source src = {.files = {file}, .n = 1, .where = path};
    bool grad = bt_set_grad_enabled(false);
    for (int i = 0; st == BT_OK && i < self->lora->n; i++) {
        bt_tensor *p = self->lora->params[i];
        s_param spec = {.ndim = 2, .shape = {bt_dim(p, 0), bt_dim(p, 1)}};
        snprintf(spec.name, sizeof spec.name, BT_LORA_PEFT_PREFIX "%s", self->lora->names[i]);
        bt_tensor *t = s_init_from_file(tmp, &src, &spec);
        st = t ? bt_copy_(p, bt_to_device(tmp, bt_to_dtype(tmp, t, bt_dtype_of(p)), self->device))
               : BT_EFORMAT;
        bt_ctx_reset(tmp);
    }
    bt_set_grad_enabled(grad);
    bt_ctx_destroy(&tmp);
    bt_safetensors_destroy(&file);
    return st;
}
