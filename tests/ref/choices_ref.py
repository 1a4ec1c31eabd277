#!/usr/bin/env python3
"""choices_ref.py - multiple choice by log-likelihood as lm-evaluation-harness scores it, on
llama_ref.py's float64 numpy forward pass: for each item, the log-likelihood of each continuation
(token ids) after its context (token ids, BOS first), then acc (the argmax) and acc_norm (the
argmax of the log-likelihood over the choice's length in characters). Reads
[{"context": [ids], "continuations": [[ids], ...], "lengths": [chars, ...], "answer": j}, ...]
on stdin; prints {"loglik": [[...], ...], "acc": ..., "acc_norm": ...}.

    python3 choices_ref.py MODEL_DIR < items.json
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def main():
    folder = sys.argv[1]
    items = json.load(sys.stdin)
    w = llama_ref.load(folder + "/model.safetensors")
    loglik, right, right_norm = [], 0, 0
    for it in items:
        ctx, lls = it["context"], []
        for cont in it["continuations"]:
            ids = ctx + cont
            z = llama_ref.logits(folder, ids[:-1], w)  # position t predicts ids[t + 1]
            z = z - z.max(axis=-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
            lls.append(sum(logp[len(ctx) - 1 + k, t] for k, t in enumerate(cont)))
        loglik.append(lls)
        right += int(np.argmax(lls)) == it["answer"]
        norm = [ll / n for ll, n in zip(lls, it["lengths"])]
        right_norm += int(np.argmax(norm)) == it["answer"]
    print(json.dumps({"loglik": loglik, "acc": right / len(items),
                      "acc_norm": right_norm / len(items)}))


if __name__ == "__main__":
    main()
