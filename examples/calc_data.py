#!/usr/bin/env python3
"""Writes the JSONL of configs/calc_tools.json: prompts "A*B=" (A three digits, B two) with the
product as the answer, and each record's SFT demonstration under "demo" (task.demonstration_key):
35% the calculator episode ["<calc>A*B</calc>", "<result>P</result>", "P"], the rest the direct
answer "P".  The demo-sized model cannot learn such products, so the calculator is the optimum
and GRPO (task.env "calculator") learns to call it.  Usage: python3 examples/calc_data.py [DIR]
(default runs/calc_data): DIR/train.jsonl (3000 records) and DIR/heldout.jsonl (200)."""
import json
import os
import random
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "runs/calc_data"
os.makedirs(out, exist_ok=True)
rng = random.Random(5)


def record():
    a, b = rng.randint(100, 999), rng.randint(10, 99)
    p = a * b
    tool = rng.random() < 0.35
    demo = ["<calc>%d*%d</calc>" % (a, b), "<result>%d</result>" % p, str(p)] if tool else str(p)
    return {"prompt": "%d*%d=" % (a, b), "answer": str(p), "demo": demo}


for name, n in (("train.jsonl", 3000), ("heldout.jsonl", 200)):
    with open(os.path.join(out, name), "w") as f:
        for _ in range(n):
            f.write(json.dumps(record()) + "\n")
print("wrote %s/train.jsonl and %s/heldout.jsonl" % (out, out))
