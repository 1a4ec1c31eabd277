/*  bench_shape.h — the Llama shape several benchmarks measure: hidden C with heads of 64 (as
    many key/value heads), SwiGLU of 2.6875 C (Llama-7B's 11008 / 4096), layers layers, vocab
    (0: bt_model_config_init's) and positions positions. */
#ifndef BATON_BENCH_SHAPE_H
#define BATON_BENCH_SHAPE_H

#include "baton/model.h"

static inline bt_model_config bench_llama_shape(int64_t hidden, int64_t layers, int64_t vocab,
                                                int64_t positions) {
    bt_model_config mc;
    bt_model_config_init(&mc);
    mc.hidden_size = hidden;
    mc.intermediate_size = hidden * 43 / 16;
    mc.num_hidden_layers = layers;
    mc.num_attention_heads = hidden / 64;
    mc.num_key_value_heads = hidden / 64;
    if (vocab > 0)
        mc.vocab_size = vocab;
    mc.max_position_embeddings = positions;
    return mc;
}

#endif
