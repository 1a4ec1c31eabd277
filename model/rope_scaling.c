/*  rope_scaling.c — config.json's rope_scaling and the rotary frequencies of each kind; see
    rope_scaling.h. */
#include "baton/rope_scaling.h"

#include "baton/jsonl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define S_PI 3.14159265358979323846

static const char *const s_kinds[] = {"default", "linear", "dynamic", "yarn", "llama3"};

/*  The keys each kind takes besides rope_type / type. */
static bool s_takes(bt_rope_scaling_kind kind, const char *key) {
    static const char *const linear[] = {"factor", NULL};
    static const char *const yarn[] = {"factor",
                                       "original_max_position_embeddings",
                                       "beta_fast",
                                       "beta_slow",
                                       "attention_factor",
                                       "truncate",
                                       NULL};
    static const char *const llama3[] = {"factor", "low_freq_factor", "high_freq_factor",
                                         "original_max_position_embeddings", NULL};
    const char *const *keys = kind == BT_ROPE_SCALING_YARN     ? yarn
                              : kind == BT_ROPE_SCALING_LLAMA3 ? llama3
                                                               : linear;
    for (int i = 0; keys[i]; i++)
        if (!strcmp(keys[i], key))
            return true;
    return false;
}

/*  A number member of obj into *out (absent: left); required ones must be there; all > 0. */
static bt_status s_number(const cJSON *obj, const char *src, const char *key, bool required,
                          double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v && !required)
        return BT_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) {
        char got[96] = "nothing";
        if (v)
            bt_jsonl_describe(v, got, sizeof got);
        return bt_fail(BT_EINVAL, "%s: rope_scaling.%s: expected a positive number, got %s", src,
                       key, got);
    }
    *out = v->valuedouble;
    return BT_OK;
}

static bt_status s_kind(const cJSON *item, const char *src, bt_rope_scaling_kind *out) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "rope_type");
    const char *key = "rope_type";
    if (!type) {
        type = cJSON_GetObjectItemCaseSensitive(item, "type");
        key = "type";
    }
    for (int k = 0; cJSON_IsString(type) && k < (int)(sizeof s_kinds / sizeof *s_kinds); k++)
        if (!strcmp(type->valuestring, s_kinds[k])) {
            *out = (bt_rope_scaling_kind)k;
            return BT_OK;
        }
    char got[96] = "nothing";
    if (type)
        bt_jsonl_describe(type, got, sizeof got);
    return bt_fail(BT_EINVAL,
                   "%s: rope_scaling.%s: expected one of default, linear, dynamic, yarn, llama3, "
                   "got %s",
                   src, key, got);
}

bt_status bt_rope_scaling_parse(const cJSON *item, const char *src, bt_rope_scaling *out) {
    *out = (bt_rope_scaling){
        .kind = BT_ROPE_SCALING_NONE, .factor = 1, .beta_fast = 32, .beta_slow = 1, .truncate = 1};
    if (!item || cJSON_IsNull(item))
        return BT_OK;
    if (!cJSON_IsObject(item))
        return bt_fail(BT_EINVAL, "%s: rope_scaling: expected an object or null", src);
    BT_TRY(s_kind(item, src, &out->kind));
    if (out->kind == BT_ROPE_SCALING_NONE)
        return BT_OK;
    for (const cJSON *m = item->child; m; m = m->next)
        if (strcmp(m->string, "rope_type") && strcmp(m->string, "type") &&
            !s_takes(out->kind, m->string))
            return bt_fail(BT_EINVAL, "%s: rope_scaling.%s: not a key of rope_type %s", src,
                           m->string, s_kinds[out->kind]);
    BT_TRY(s_number(item, src, "factor", true, &out->factor));
    bool llama3 = out->kind == BT_ROPE_SCALING_LLAMA3;
    double original = 0;
    BT_TRY(s_number(item, src, "original_max_position_embeddings", llama3, &original));
    out->original_max_position_embeddings = (int64_t)original;
    if (out->kind == BT_ROPE_SCALING_LLAMA3) {
        BT_TRY(s_number(item, src, "low_freq_factor", true, &out->low_freq_factor));
        BT_TRY(s_number(item, src, "high_freq_factor", true, &out->high_freq_factor));
        if (!(out->high_freq_factor > out->low_freq_factor))
            return bt_fail(BT_EINVAL,
                           "%s: rope_scaling.high_freq_factor: expected a number above "
                           "low_freq_factor (%g), got %g",
                           src, out->low_freq_factor, out->high_freq_factor);
    }
    if (out->kind == BT_ROPE_SCALING_YARN) {
        BT_TRY(s_number(item, src, "beta_fast", false, &out->beta_fast));
        BT_TRY(s_number(item, src, "beta_slow", false, &out->beta_slow));
        BT_TRY(s_number(item, src, "attention_factor", false, &out->attention_factor));
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(item, "truncate");
        if (t && !cJSON_IsBool(t))
            return bt_fail(BT_EINVAL, "%s: rope_scaling.truncate: expected true or false", src);
        out->truncate = !t || cJSON_IsTrue(t);
    }
    return BT_OK;
}

cJSON *bt_rope_scaling_to_json(const bt_rope_scaling *s) {
    if (s->kind == BT_ROPE_SCALING_NONE)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "rope_type", s_kinds[s->kind]);
    cJSON_AddNumberToObject(o, "factor", s->factor);
    if (s->original_max_position_embeddings > 0)
        cJSON_AddNumberToObject(o, "original_max_position_embeddings",
                                (double)s->original_max_position_embeddings);
    if (s->kind == BT_ROPE_SCALING_LLAMA3) {
        cJSON_AddNumberToObject(o, "low_freq_factor", s->low_freq_factor);
        cJSON_AddNumberToObject(o, "high_freq_factor", s->high_freq_factor);
    }
    if (s->kind == BT_ROPE_SCALING_YARN) {
        cJSON_AddNumberToObject(o, "beta_fast", s->beta_fast);
        cJSON_AddNumberToObject(o, "beta_slow", s->beta_slow);
        if (s->attention_factor > 0)
            cJSON_AddNumberToObject(o, "attention_factor", s->attention_factor);
        cJSON_AddBoolToObject(o, "truncate", s->truncate);
    }
    return o;
}

/*  YaRN's dimension at which a frequency makes `rotations` turns over the original context. */
static double s_correction_dim(double rotations, int64_t dim, double theta, double max_pos) {
    return (double)dim * log(max_pos / (rotations * 2 * S_PI)) / (2 * log(theta));
}

/*  YaRN (Peng et al. 2023): dimensions below the correction range keep their frequency
    (extrapolation), those above it are divided by factor (interpolation), a linear ramp between. */
static void s_yarn(const bt_rope_scaling *s, double theta, int64_t dim, int64_t max_pos,
                   double *inv, double *attention) {
    double original =
        (double)(s->original_max_position_embeddings > 0 ? s->original_max_position_embeddings
                                                         : max_pos);
    double low = s_correction_dim(s->beta_fast, dim, theta, original);
    double high = s_correction_dim(s->beta_slow, dim, theta, original);
    if (s->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = fmax(low, 0);
    high = fmin(high, (double)(dim - 1));
    if (low == high)
        high += 0.001;
    for (int64_t i = 0; i < dim / 2; i++) {
        double extrapolated = inv[i], interpolated = inv[i] / s->factor;
        double ramp = fmin(fmax(((double)i - low) / (high - low), 0), 1);
        double keep = 1 - ramp; /* the share of the extrapolated frequency */
        inv[i] = interpolated * (1 - keep) + extrapolated * keep;
    }
    *attention = s->attention_factor > 0 ? s->attention_factor
                 : s->factor <= 1        ? 1.0
                                         : 0.1 * log(s->factor) + 1.0;
}

/*  Llama 3.1: wavelengths longer than original / low_freq_factor are divided by factor, shorter
    than original / high_freq_factor kept, and the band between blended smoothly. */
static void s_llama3(const bt_rope_scaling *s, int64_t dim, double *inv) {
    double original = (double)s->original_max_position_embeddings;
    double low_wavelen = original / s->low_freq_factor,
           high_wavelen = original / s->high_freq_factor;
    for (int64_t i = 0; i < dim / 2; i++) {
        double wavelen = 2 * S_PI / inv[i];
        if (wavelen > low_wavelen) {
            inv[i] /= s->factor;
        } else if (wavelen >= high_wavelen) {
            double smooth = (original / wavelen - s->low_freq_factor) /
                            (s->high_freq_factor - s->low_freq_factor);
            inv[i] = (1 - smooth) * inv[i] / s->factor + smooth * inv[i];
        }
    }
}

void bt_rope_scaling_inv_freq(const bt_rope_scaling *s, double theta, int64_t head_dim,
                              int64_t max_pos, int64_t seq_len, double *inv, double *attention) {
    *attention = 1.0;
    if (s->kind == BT_ROPE_SCALING_DYNAMIC && seq_len > max_pos) /* NTK-aware: a larger theta */
        theta *= pow(s->factor * (double)seq_len / (double)max_pos - (s->factor - 1),
                     (double)head_dim / (double)(head_dim - 2));
    for (int64_t i = 0; i < head_dim / 2; i++)
        inv[i] = 1.0 / pow(theta, (double)(2 * i) / (double)head_dim);
    if (s->kind == BT_ROPE_SCALING_LINEAR)
        for (int64_t i = 0; i < head_dim / 2; i++)
            inv[i] /= s->factor;
    else if (s->kind == BT_ROPE_SCALING_YARN)
        s_yarn(s, theta, head_dim, max_pos, inv, attention);
    else if (s->kind == BT_ROPE_SCALING_LLAMA3)
        s_llama3(s, head_dim, inv);
}
