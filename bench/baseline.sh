#!/usr/bin/env bash
# bench/baseline.sh — the fixed-seed runs a refactoring is checked against (issue 16): each run's
# metrics.jsonl with the fields that measure time or memory (and the speed-sized shard split)
# removed, one compact JSON object per line, sorted — the same text tests/runs.h's runs_metrics()
# compares — and without the evaluations a wall-clock trigger fired (eval.datasets[].every_seconds:
# which step they land on is timing).  Run it at the commit before a move and after it, then diff the two folders:
#
#   bench/baseline.sh OUT_DIR [BATON]        (BATON: the baton executable, default ./build/baton)
#   BASELINE_RUNS="pbt arith" bench/baseline.sh ...   (some of the runs, in that order)
#
# Runs: configs/arith.json (the demo), configs/pbt.json, and 30 steps of the demo with two
# data-parallel trainers and grpo.max_staleness 1.  Only identical machines compare (the BLAS
# kernel changes the rounding): run both sides on the same one.
set -euo pipefail
out=${1:?usage: bench/baseline.sh OUT_DIR [BATON]}
baton=${2:-./build/baton}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

normalise() { # metrics.jsonl -> sorted lines without timing fields
  python3 - "$1" <<'EOF'
import json, sys
drop = {"time", "tokens_per_s", "eval_s", "peak_rss_mb", "shards", "shard_items"}
lines = []
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "seconds" in j.get("trigger", ""):  # fired by the wall clock: when is a timing field
        continue
    for k in drop:
        j.pop(k, None)
    lines.append(json.dumps(j, separators=(",", ":"), sort_keys=False))
print("\n".join(sorted(lines)))
EOF
}

run() { # NAME CONFIG [ARGS...]
  local name=$1 config=$2
  shift 2
  "$baton" run "$config" --run-dir "$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { tail -5 "$work/$name.log" >&2; exit 1; }
  normalise "$work/$name/metrics.jsonl" > "$out/$name.metrics"
  echo "{\"baseline\":\"$name\",\"lines\":$(wc -l < "$out/$name.metrics")}"
}

for which in ${BASELINE_RUNS:-dp_async arith pbt}; do
  case $which in
    dp_async) run dp_async configs/arith.json --set grpo.steps=30 --set workers.trainer=2 \
                --set grpo.max_staleness=1 ;;
    arith) run arith configs/arith.json ;;
    pbt) run pbt configs/pbt.json ;;
    *) echo "bench/baseline.sh: unknown run $which (dp_async, arith, pbt)" >&2; exit 2 ;;
  esac
done
