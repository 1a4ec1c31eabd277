/*  rope_scaling.h — config.json's `rope_scaling`: the rotary frequencies of a model run past (or
    trained beyond) its original context, the kinds Hugging Face models ship: linear (position
    interpolation), dynamic (NTK-aware, by the sequence length), yarn and llama3.  Each is
    computed as transformers' modeling_rope_utils defines it.
    Threading: plain values and functions.  Lifetime: a value with no heap parts. */
#ifndef BATON_ROPE_SCALING_H
#define BATON_ROPE_SCALING_H

#include "baton/status.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bt_rope_scaling_kind {
    BT_ROPE_SCALING_NONE = 0, /* absent, null, or "default" */
    BT_ROPE_SCALING_LINEAR,   /* inv_freq / factor */
    BT_ROPE_SCALING_DYNAMIC,  /* theta raised with the sequence length past the original context */
    BT_ROPE_SCALING_YARN,     /* interpolated and extrapolated frequencies blended by a ramp, and
                                 cos/sin scaled by attention_factor */
    BT_ROPE_SCALING_LLAMA3    /* low frequencies / factor, high ones kept, a smooth band between */
} bt_rope_scaling_kind;

typedef struct bt_rope_scaling {
    bt_rope_scaling_kind kind;
    double factor;                            /* > 0 (1 for none) */
    int64_t original_max_position_embeddings; /* yarn, llama3; 0: max_position_embeddings */
    double low_freq_factor, high_freq_factor; /* llama3 */
    double beta_fast, beta_slow;              /* yarn (32, 1) */
    double attention_factor;                  /* yarn: 0 = 0.1 ln(factor) + 1 */
    int truncate;                             /* yarn: round the correction range (1) */
} bt_rope_scaling;

struct cJSON;
/*  Reads config.json's "rope_scaling" object (absent or null: none) into *out.  The kind is its
    "rope_type" (or the older "type"); an unknown kind, a missing or non-positive factor, llama3
    without its three keys, or a key the kind does not take (yarn's mscale, mscale_all_dim) is
    refused by name: "SRC: rope_scaling.rope_type: expected one of default, linear, dynamic,
    yarn, llama3, got \"longrope\"". */
bt_status bt_rope_scaling_parse(const struct cJSON *item, const char *src, bt_rope_scaling *out);
/*  The JSON object config.json holds for s (NULL for none: the caller writes nothing). */
struct cJSON *bt_rope_scaling_to_json(const bt_rope_scaling *s);

/*  The rotary inverse frequencies inv[0 .. head_dim / 2) and the cos/sin scale (*attention, 1
    except yarn) of a model of rope theta and max_position_embeddings max_pos under s, for a
    forward pass whose positions reach seq_len - 1 (only dynamic reads it).  Computed in double from
    transformers' definitions. */
void bt_rope_scaling_inv_freq(const bt_rope_scaling *s, double theta, int64_t head_dim,
                              int64_t max_pos, int64_t seq_len, double *inv, double *attention);

#ifdef __cplusplus
}
#endif
#endif
