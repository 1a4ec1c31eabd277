#!/usr/bin/env python3
"""llama_ref.py - an independent numpy forward pass of a Llama / Qwen2 / Qwen3 model folder
(config.json + model.safetensors in float32), written from the Hugging Face modelling code's
definitions, not from baton's: RMSNorm, rotary embeddings by rotate_half, grouped-query causal
attention (Qwen2: q/k/v biases; Qwen3: head_dim of its own and an RMSNorm of each query and key
head before the rotation), SwiGLU. Prints the logits of one sequence of token ids as a JSON array
of rows.

    python3 llama_ref.py MODEL_DIR ID [ID ...]
"""
import json
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


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def logits(folder, ids, w=None):
    """The logits (len(ids), vocab) of one sequence, float64."""
    cfg = json.load(open(folder + "/config.json"))
    w = w if w is not None else load(folder + "/model.safetensors")
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv, eps = cfg.get("num_key_value_heads", H), cfg.get("rms_norm_eps", 1e-6)
    D = cfg.get("head_dim") or C // H
    T = len(ids)
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (np.arange(0, D, 2) / D))
    freqs = np.outer(np.arange(T), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    x = w["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
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
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
        s = s + np.triu(np.full((T, T), -np.inf), 1)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s = s / s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(T, H * D)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


if __name__ == "__main__":
    print(json.dumps(logits(sys.argv[1], [int(t) for t in sys.argv[2:]]).tolist()))
