#!/usr/bin/env python3
"""choices_ref.py - multiple choice by log-likelihood as lm-evaluation-harness scores it, on
llama_ref.py's float64 numpy forward pass: for each item, the log-likelihood of each continuation
after its context (BOS first), then acc (the argmax) and acc_norm (the argmax of the
log-likelihood over the choice's length in characters), overall and per subject (the items that
name one). Reads on stdin either the token ids the C side scores,

    [{"context": [ids], "continuations": [[ids], ...], "lengths": [chars, ...], "answer": j,
      "subject": name (optional)}, ...]

or texts, from which it builds each prompt itself,

    {"bos": id, "items": [{"context": text, "choices": [texts], "answer": j,
                           "subject": name (optional)}, ...],
     "pool": [items like those] (the exemplars' set; absent: items), "exemplars": [[j, ...], ...]
     (per item, indices into the pool), "delimiter": " ", "separator": "\\n\\n", "letters": false}

as the harness's fewshot_context does: each exemplar is its doc_to_text, target_delimiter and
doc_to_target (its right choice, or that choice's letter), joined by fewshot_delimiter (here
"separator") and followed by it, then the item's doc_to_text; the continuations are
target_delimiter + choice (or letter). With letters, doc_to_text lists the choices as "A. text"
lines after the context and ends in "Answer:" (the harness's MMLU template). Texts are tokenised
by the byte-level tokenizer: BOS, then the UTF-8 bytes. Prints {"loglik": [[...], ...], "acc": ...,
"acc_norm": ..., "subjects": {name: {"items": n, "acc": ..., "acc_norm": ...}}}.

    python3 choices_ref.py MODEL_DIR < items.json
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def doc_to_text(item, letters):
    text = item["context"]
    if letters:
        for k, choice in enumerate(item["choices"]):
            text += "\n%s. %s" % (chr(ord("A") + k), choice)
        text += "\nAnswer:"
    return text


def doc_to_choice(item, letters):
    if letters:
        return [chr(ord("A") + k) for k in range(len(item["choices"]))]
    return item["choices"]


def from_texts(req):
    """The texts request as token-id items, the prompts built here."""
    bos, delim, sep = req["bos"], req["delimiter"], req["separator"]
    letters = req.get("letters", False)
    pool = req.get("pool", req["items"])
    out = []
    for i, it in enumerate(req["items"]):
        shots = []
        for j in req.get("exemplars", [[] for _ in req["items"]])[i]:
            ex = pool[j]
            shots.append(doc_to_text(ex, letters) + delim +
                         doc_to_choice(ex, letters)[ex["answer"]])
        ctx = (sep.join(shots) + sep if shots else "") + doc_to_text(it, letters)
        conts = [delim + c for c in doc_to_choice(it, letters)]
        out.append({"context": [bos] + list(ctx.encode("utf-8")),
                    "continuations": [list(c.encode("utf-8")) for c in conts],
                    "lengths": [len(c) for c in doc_to_choice(it, letters)],
                    "answer": it["answer"], "subject": it.get("subject")})
    return out


def main():
    folder = sys.argv[1]
    req = json.load(sys.stdin)
    items = req if isinstance(req, list) else from_texts(req)
    w = llama_ref.load(folder + "/model.safetensors")
    loglik, right, right_norm, subjects = [], [], [], {}
    for it in items:
        ctx, lls = it["context"], []
        for cont in it["continuations"]:
            ids = ctx + cont
            z = llama_ref.logits(folder, ids[:-1], w)  # position t predicts ids[t + 1]
            z = z - z.max(axis=-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
            lls.append(sum(logp[len(ctx) - 1 + k, t] for k, t in enumerate(cont)))
        loglik.append(lls)
        right.append(int(np.argmax(lls)) == it["answer"])
        norm = [ll / n for ll, n in zip(lls, it["lengths"])]
        right_norm.append(int(np.argmax(norm)) == it["answer"])
        if it.get("subject") is not None:
            subjects.setdefault(it["subject"], []).append((right[-1], right_norm[-1]))
    print(json.dumps({
        "loglik": loglik, "acc": sum(right) / len(items),
        "acc_norm": sum(right_norm) / len(items),
        "subjects": {name: {"items": len(r), "acc": sum(a for a, _ in r) / len(r),
                            "acc_norm": sum(b for _, b in r) / len(r)}
                     for name, r in subjects.items()}}))


if __name__ == "__main__":
    main()
