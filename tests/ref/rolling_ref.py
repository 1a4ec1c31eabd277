#!/usr/bin/env python3
"""rolling_ref.py - the rolling-window negative log-likelihood of one text, computed as
lm-evaluation-harness's loglikelihood_rolling defines it (lm_eval/utils.py,
get_rolling_token_windows, with context_len = max_len - stride + 1), on llama_ref.py's float64
numpy forward pass. Prints {"nll": ..., "tokens": ..., "windows": ...}.

    python3 rolling_ref.py MODEL_DIR MAX_LEN STRIDE PREFIX_ID ID [ID ...]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def windows(tokens, prefix, max_len, context_len):
    """(input, predicted) pairs, the harness's get_rolling_token_windows."""
    pred_len = max_len - context_len + 1
    predicted = 0
    first = min(max_len, len(tokens))
    yield [prefix] + tokens[: first - 1], tokens[:first]
    predicted += first
    while predicted < len(tokens):
        window_pred_len = min(len(tokens) - predicted, pred_len)
        window_end = predicted + window_pred_len
        yield (tokens[window_end - max_len - 1 : window_end - 1],
               tokens[window_end - window_pred_len : window_end])
        predicted += window_pred_len


def main():
    folder, max_len, stride, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    tokens = [int(t) for t in sys.argv[5:]]
    w = llama_ref.load(folder + "/model.safetensors")
    nll, count, n = 0.0, 0, 0
    for inp, pred in windows(tokens, prefix, max_len, max_len - stride + 1):
        # make_disjoint_window and _loglikelihood_tokens: the model reads (context + pred)[:-1],
        # which is inp, and its last len(pred) positions predict pred
        ids = inp
        z = llama_ref.logits(folder, ids, w)
        z = z - z.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        for j, target in enumerate(pred):
            pos = len(ids) - len(pred) + j
            nll -= logp[pos, target]
        count += len(pred)
        n += 1
    print(json.dumps({"nll": nll, "tokens": count, "windows": n}))


if __name__ == "__main__":
    main()
