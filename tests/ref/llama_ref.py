#!/usr/bin/env python3
"""llama_ref.py - an independent numpy forward pass of a Llama / Qwen2 / Qwen3 / Mistral / Gemma
model folder (config.json + model.safetensors in float32), written from the Hugging Face modelling
code's definitions, not from baton's: RMSNorm, rotary embeddings by rotate_half, grouped-query
causal attention (Qwen2: q/k/v biases; Qwen3: head_dim of its own and an RMSNorm of each query and
key head before the rotation; Mistral: a sliding window, key j masked for query i when
i - j >= sliding_window), SwiGLU (Gemma: embeddings times sqrt(hidden_size) in float32, RMSNorm
scaled by 1 + weight, gelu-tanh in place of silu, tied head; Gemma 2 besides: norms of the
attention and MLP outputs, scores scaled by query_pre_attn_scalar^-0.5 and capped to
cap * tanh(s / cap) before the mask, the window on even layers only, capped logits), and the
rotary scalings of config.json's rope_scaling.
Prints the logits of one sequence of token ids as a JSON array of rows.

    python3 llama_ref.py MODEL_DIR ID [ID ...]
"""
import json
import math
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info["dtype"]
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    """transformers' gelu_pytorch_tanh (PytorchGELUTanh)."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_inv_freq(cfg, dim, seq_len):
    """Rotary inverse frequencies and the cos/sin scale, as transformers' modeling_rope_utils
    defines them for config.json's rope_scaling (default, linear, dynamic, yarn, llama3)."""
    base = cfg.get("rope_theta", 10000.0)
    max_pos = cfg.get("max_position_embeddings", 2048)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    factor = rs.get("factor", 1.0)
    if kind == "dynamic":  # NTK-aware: the base grows with the sequence past the context
        seq_len = max(seq_len, max_pos)
        base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** (np.arange(0, dim, 2) / dim))
    if kind in ("default", "dynamic"):
        return inv, 1.0
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "yarn":
        original = rs.get("original_max_position_embeddings") or max_pos
        beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
        attention = rs.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0

        def correction_dim(rotations):
            return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
        extrapolation_factor = 1 - ramp
        return (inv / factor) * (1 - extrapolation_factor) + inv * extrapolation_factor, attention
    if kind == "llama3":
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / rs["low_freq_factor"], old / rs["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - rs["low_freq_factor"]) / (
            rs["high_freq_factor"] - rs["low_freq_factor"])
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled), 1.0
    raise SystemExit("llama_ref.py: rope_scaling %r is not one it knows" % kind)


def logits(folder, ids, w=None):
    """The logits (len(ids), vocab) of one sequence, float64."""
    cfg = json.load(open(folder + "/config.json"))
    w = w if w is not None else load(folder + "/model.safetensors")
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv, eps = cfg.get("num_key_value_heads", H), cfg.get("rms_norm_eps", 1e-6)
    D = cfg.get("head_dim") or C // H
    T = len(ids)
    kind = cfg.get("model_type")
    gemma, gemma2 = kind in ("gemma", "gemma2"), kind == "gemma2"
    window = cfg.get("sliding_window", 4096) if kind in ("mistral", "gemma2") else None
    scaling = cfg.get("query_pre_attn_scalar", 256) ** -0.5 if gemma2 else None
    attn_cap = cfg.get("attn_logit_softcapping", 50.0) if gemma2 else None  # Gemma2Config's
    final_cap = cfg.get("final_logit_softcapping", 30.0) if gemma2 else None
    norm = (lambda x, w, eps: rms_norm(x, 1 + w, eps)) if gemma else rms_norm
    act = gelu_tanh if gemma else (lambda g: g / (1 + np.exp(-g)))
    causal = np.triu(np.full((T, T), -np.inf), 1)
    local = causal
    if window:  # MistralModel, Gemma2: key j masked for query i when j <= i - sliding_window
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        local = np.where(i - j >= window, -np.inf, causal)
    inv, attention = rope_inv_freq(cfg, D, T)
    freqs = np.outer(np.arange(T), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb) * attention, np.sin(emb) * attention
    x = w["model.embed_tokens.weight"][ids]
    if gemma:  # GemmaModel: the normaliser in the hidden states' dtype (float32)
        x = x * float(np.float32(math.sqrt(C)))
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = norm(x, w[p + "input_layernorm.weight"], eps)
        proj = {}
        for n in ("q", "k", "v"):
            y = h @ w[p + "self_attn.%s_proj.weight" % n].T
            if p + "self_attn.%s_proj.bias" % n in w:
                y = y + w[p + "self_attn.%s_proj.bias" % n]
            proj[n] = y
        q = proj["q"].reshape(T, H, D).transpose(1, 0, 2)
        k = proj["k"].reshape(T, Hkv, D).transpose(1, 0, 2)
        v = proj["v"].reshape(T, Hkv, D).transpose(1, 0, 2)
        if p + "self_attn.q_norm.weight" in w:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, H // Hkv, axis=0)
        v = np.repeat(v, H // Hkv, axis=0)
        s = q @ k.transpose(0, 2, 1) * (scaling if gemma2 else 1 / np.sqrt(D))
        if attn_cap:
            s = np.tanh(s / attn_cap) * attn_cap
        s = s + (local if not gemma2 or l % 2 == 0 else causal)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s = s / s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(T, H * D)
        a = a @ w[p + "self_attn.o_proj.weight"].T
        if gemma2:
            x = x + norm(a, w[p + "post_attention_layernorm.weight"], eps)
            h = norm(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        else:
            x = x + a
            h = norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        f = (act(g) * up) @ w[p + "mlp.down_proj.weight"].T
        x = x + (norm(f, w[p + "post_feedforward_layernorm.weight"], eps) if gemma2 else f)
    x = norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    out = x @ head.T
    return np.tanh(out / final_cap) * final_cap if final_cap else out


if __name__ == "__main__":
    print(json.dumps(logits(sys.argv[1], [int(t) for t in sys.argv[2:]]).tolist()))
