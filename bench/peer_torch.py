#!/usr/bin/env python3
"""bench/peer_torch.py — the PyTorch-eager peer of bench_rollout: the same Llama weights (a model
directory written by baton: config.json and model.safetensors) and the same workload (prompts and
per-sequence response lengths, workload.json), generated the way a competent PyTorch user writes
Hugging Face-style generation: one static batch, left-padded, a preallocated KV cache, greedy
decoding under torch.inference_mode, every row computed until the longest is done.  Prints one
JSON line: seconds, useful tokens per second, and each sequence's tokens (bench_rollout checks
them against baton's greedy tokens).

    python3 bench/peer_torch.py MODEL_DIR WORKLOAD_JSON THREADS
"""
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
import llama_ref  # noqa: E402  (the safetensors reader)


def load_safetensors(path):
    """The tensors of a float32 model.safetensors, read by the numpy reference's loader."""
    return {k: torch.from_numpy(v.astype("float32")) for k, v in llama_ref.load(path).items()}


class Llama:
    def __init__(self, model_dir):
        self.cfg = json.load(open(f"{model_dir}/config.json"))
        w = load_safetensors(f"{model_dir}/model.safetensors")
        c = self.cfg
        self.H, self.Hkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.D = c.get("head_dim") or c["hidden_size"] // self.H
        self.eps = c["rms_norm_eps"]
        self.embed = w["model.embed_tokens.weight"]
        self.head = w.get("lm_head.weight", self.embed)
        self.norm = w["model.norm.weight"]
        self.layers = []
        for l in range(c["num_hidden_layers"]):
            p = f"model.layers.{l}."
            self.layers.append({k: w[p + k + ".weight"] for k in (
                "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")})
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.D, 2, dtype=torch.float32) / self.D))
        self.inv_freq = inv

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos):  # x (B, H, T, D), pos (B, T)
        f = pos[:, None, :, None].float() * self.inv_freq  # (B, 1, T, D/2)
        cos, sin = torch.cat([f.cos(), f.cos()], -1), torch.cat([f.sin(), f.sin()], -1)
        h = self.D // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def forward(self, ids, pos, k_cache, v_cache, start, allowed):
        """ids (B, T) at columns [start, start + T) of the caches; allowed (B, 1, T, start + T)."""
        B, T = ids.shape
        x = self.embed[ids]
        for l, w in enumerate(self.layers):
            h = self.rms(x, w["input_layernorm"])
            q = (h @ w["self_attn.q_proj"].T).view(B, T, self.H, self.D).transpose(1, 2)
            k = (h @ w["self_attn.k_proj"].T).view(B, T, self.Hkv, self.D).transpose(1, 2)
            v = (h @ w["self_attn.v_proj"].T).view(B, T, self.Hkv, self.D).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            k_cache[l][:, :, start:start + T] = k
            v_cache[l][:, :, start:start + T] = v
            K, V = k_cache[l][:, :, :start + T], v_cache[l][:, :, :start + T]
            if self.Hkv != self.H:
                K = K.repeat_interleave(self.H // self.Hkv, 1)
                V = V.repeat_interleave(self.H // self.Hkv, 1)
            scores = (q @ K.transpose(-1, -2)) / math.sqrt(self.D)  # torch 1.13: no fused SDPA
            y = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ V
            x = x + y.transpose(1, 2).reshape(B, T, -1) @ w["self_attn.o_proj"].T
            h = self.rms(x, w["post_attention_layernorm"])
            g = torch.nn.functional.silu(h @ w["mlp.gate_proj"].T) * (h @ w["mlp.up_proj"].T)
            x = x + g @ w["mlp.down_proj"].T
        return self.rms(x[:, -1], self.norm) @ self.head.T  # (B, V): the last column's logits


def generate(m, prompts, lengths):
    B, Tp, M = len(prompts), max(len(p) for p in prompts), max(lengths)
    ids = torch.zeros(B, Tp, dtype=torch.long)
    real = torch.zeros(B, Tp + M, dtype=torch.bool)
    for b, p in enumerate(prompts):  # left padding
        ids[b, Tp - len(p):] = torch.tensor(p)
        real[b, Tp - len(p):Tp] = True
    pos = (real[:, :Tp].long().cumsum(1) - 1).clamp(min=0)
    shape = (B, m.Hkv, Tp + M, m.D)
    k_cache = [torch.zeros(shape) for _ in m.layers]
    v_cache = [torch.zeros(shape) for _ in m.layers]
    causal = torch.ones(Tp, Tp, dtype=torch.bool).tril()
    allowed = (causal[None] & real[:, None, :Tp]) | torch.eye(Tp, dtype=torch.bool)[None]
    logits = m.forward(ids, pos, k_cache, v_cache, 0, allowed[:, None])
    out = [[] for _ in range(B)]
    next_pos = pos[:, -1] + 1
    for s in range(M):
        tok = logits.argmax(-1)
        for b in range(B):
            if s < lengths[b]:
                out[b].append(int(tok[b]))
        if s + 1 == M:
            break
        real[:, Tp + s] = True
        allowed = real[:, None, None, :Tp + s + 1]
        logits = m.forward(tok[:, None], next_pos[:, None], k_cache, v_cache, Tp + s, allowed)
        next_pos = next_pos + 1
    return out


def main():
    model_dir, workload, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(threads)
    w = json.load(open(workload))
    m = Llama(model_dir)
    with torch.inference_mode():
        generate(m, w["prompts"][:2], [2, 2])  # warm-up
        t0 = time.perf_counter()
        out = generate(m, w["prompts"], w["lengths"])
        t = time.perf_counter() - t0
    useful = sum(w["lengths"])
    print(json.dumps({"peer": "torch_eager", "torch": torch.__version__, "threads": threads,
                      "seconds": t, "useful_tokens_per_s": useful / t, "tokens": out}))


if __name__ == "__main__":
    main()
