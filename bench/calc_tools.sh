#!/usr/bin/env bash
# bench/calc_tools.sh — the full calculator run of issue 21 (configs/calc_tools.json; the short
# version is tests/test_tool_rl.c): SFT on tool episodes and direct answers, then GRPO with the
# built-in calculator.  Prints one JSON line per RL step from the run's train lines: step,
# success (reward_mean: the fraction of episodes whose last turn is the product) and
# tool_call_rate (turns_mean - 1 at task.max_turns 2), then a summary line.
#
#   bench/calc_tools.sh [BATON] [--set KEY=VALUE ...]     (BATON default ./build/baton)
set -euo pipefail
baton=${1:-./build/baton}
shift || true
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 examples/calc_data.py "$work/data" >/dev/null
start=$(date +%s)
"$baton" run configs/calc_tools.json --run-dir "$work/run" \
  --set task.train="$work/data/train.jsonl" --set task.eval="$work/data/heldout.jsonl" "$@" \
  >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
python3 - "$work/run/metrics.jsonl" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
rows = []
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j.get("kind") == "train" and "turns_mean" in j:
        rows.append({"step": j["step"], "success": round(j["reward_mean"], 4),
                     "tool_call_rate": round(j["turns_mean"] - 1, 4)})
for r in rows:
    print(json.dumps(r))
first, last = rows[0], rows[-1]
print(json.dumps({"summary": True, "steps": len(rows), "success_start": first["success"],
                  "success_end": last["success"], "tool_call_rate_start": first["tool_call_rate"],
                  "tool_call_rate_end": last["tool_call_rate"], "wall_s": int(sys.argv[2])}))
PY
