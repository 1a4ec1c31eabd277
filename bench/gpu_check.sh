#!/usr/bin/env bash
# gpu_check.sh — the checks that need a GPU, as one script for a machine that has one (run from the
# repository root; prints JSON lines, one per check, and keeps going after a failed check):
#   1. build against the CUDA libtorch of the pip PyTorch there (torch.utils.cmake_prefix_path),
#      with NCCL when found; Debian packages the machine lacks are unpacked from .deb files in
#      $BATON_DEBS (default build-debs/, which `make gpu-debs` fills on a Debian machine; carry
#      it to the GPU machine) with dpkg -x;
#   2. the demo on cuda:0, shortened (BATON_GPU_STEPS, default 50 GRPO steps), then the same in
#      bf16 (run.precision=bf16: autocast forward passes, float32 master weights), with its time
#      and accuracy beside float32's;
#   3. two data-parallel trainer ranks over NCCL when two GPUs exist (one GPU: a single rank);
#   4. the logits of randomly initialised tiny LlamaForCausalLM, Qwen2ForCausalLM,
#      MistralForCausalLM (a sliding window of 3 over the 6 tokens), GemmaForCausalLM and
#      Gemma2ForCausalLM (window 3 on even layers, capped scores and logits) models built with the
#      transformers package there against baton's on the same safetensors, on cuda:0 and on the
#      CPU (max |diff| < 1e-4 in float32);
#   5. issue 18's realistic rollout workload (bench_rollout: the engine, the static path and the
#      PyTorch-eager peer) on cuda:0 in float32 and in bf16;
#   6. issue 19's sharded training state over NCCL: bench_zero's stages on cuda (two ranks when two
#      GPUs exist) and demo runs with workers.shard gradients and parameters;
#   7. issue 19's memory planner: `baton plan` for the demo on cuda:0 in float32 and bf16, its
#      trainer prediction beside the CUDA allocator peak of one measured GRPO step (bench_plan).
#   8. LoRA (issue 19 §3): a short LoRA run on cuda:0 (model.lora.rank 4, SFT then GRPO) writes a
#      policy folder of the base and PEFT's adapter files; the peft package there opens the
#      adapters on the base (PeftModel.from_pretrained) and its logits must equal baton's
#      (bench_logits on the policy folder, cuda:0 and CPU), and `baton export --merge`'s folder,
#      opened by transformers, must give them too (max |diff| < 1e-4 in float32).
#   9. issue 20 on cuda:0: a short run's train lines carry the CUDA allocator's figures
#      (cuda_allocated_mb, cuda_reserved_mb > 0, allocated <= reserved), and the tensorboard package
#      there reads its run.tensorboard event files: every train scalar equals metrics.jsonl's value
#      at its global_step (float32).
# Record the figures in bench/RESULTS.md ("GPU checks").
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/baton-gpu}
mkdir -p "$OUT"
STEPS=${BATON_GPU_STEPS:-50}
PY=${BATON_PYTHON:-python3}
say() { printf '{"check":"%s","ok":%s,"detail":"%s"}\n' "$1" "$2" "$3"; }

# ---- 1. dependencies and build -------------------------------------------------------------------
PREFIX=$OUT/debroot
DEBS=${BATON_DEBS:-$ROOT/build-debs}
if ls "$DEBS"/*.deb >/dev/null 2>&1; then
  mkdir -p "$PREFIX"
  for d in "$DEBS"/*.deb; do dpkg -x "$d" "$PREFIX"; done
  export CPATH="$PREFIX/usr/include:${CPATH:-}"
  export LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}"
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_PATH="$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}"
  # the .pc files name /usr as their prefix: point them at the unpacked tree
  for pc in "$PREFIX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i "s|^prefix=/usr|prefix=$PREFIX/usr|" "$pc"
  done
fi
TORCH_DIR=$($PY -c 'import os, torch; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))' 2>/dev/null)
NGPU=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ -z "$TORCH_DIR" ]; then say build false "no pip PyTorch with cmake files"; exit 1; fi
if cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$TORCH_DIR" \
     -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCJSON_INCLUDE_DIR="$PREFIX/usr/include" \
     >"$OUT/cmake.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >"$OUT/build.log" 2>&1; then
  say build true "torch $TORCH_DIR, gpus $NGPU, $(grep -o 'NCCL: [A-Z]*' "$OUT/cmake.log" | head -1)"
else
  say build false "see $OUT/cmake.log and $OUT/build.log"; exit 1
fi
B=$ROOT/build-gpu
./build-gpu/baton info >"$OUT/info.txt" 2>&1

# ---- 2. the demo on cuda:0 -------------------------------------------------------------------------
# the last held-out accuracy of a run directory, or null
accuracy() {
  grep '"dataset":"heldout"' "$1/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '"accuracy":[0-9.]*' \
    | cut -d: -f2 | grep . || echo null
}
SECONDS=0
DEMO_S=null
if "$B/baton" run configs/arith.json --run-dir "$OUT/demo" --set run.device=cuda:0 \
     --set grpo.steps="$STEPS" >"$OUT/demo.log" 2>&1; then
  DEMO_S=$SECONDS
  say demo true "$STEPS steps on cuda:0 in $SECONDS s, accuracy $(accuracy "$OUT/demo")"
else
  say demo false "see $OUT/demo.log"
fi

# ---- 2b. the demo on cuda:0 in bf16 ------------------------------------------------------------------
SECONDS=0
if "$B/baton" run configs/arith.json --run-dir "$OUT/demo-bf16" --set run.device=cuda:0 \
     --set run.precision=bf16 --set grpo.steps="$STEPS" >"$OUT/demo-bf16.log" 2>&1; then
  BF16_S=$SECONDS
  # mean tokens_per_s of the train lines (sampling throughput), for float32 and bf16
  tps() {
    grep '"kind":"train"' "$1/metrics.jsonl" 2>/dev/null | grep -o '"tokens_per_s":[0-9.e+-]*' \
      | cut -d: -f2 | awk '{s += $1; n++} END {if (n) printf "%.1f", s / n; else print "null"}'
  }
  printf '{"check":"demo_bf16","ok":true,"steps":%s,"seconds":%s,"seconds_float32":%s,' \
    "$STEPS" "$BF16_S" "$DEMO_S"
  printf '"accuracy":%s,"accuracy_float32":%s,"tokens_per_s":%s,"tokens_per_s_float32":%s}\n' \
    "$(accuracy "$OUT/demo-bf16")" "$(accuracy "$OUT/demo")" "$(tps "$OUT/demo-bf16")" \
    "$(tps "$OUT/demo")"
else
  say demo_bf16 false "see $OUT/demo-bf16.log"
fi

# ---- 3. NCCL trainer ranks ---------------------------------------------------------------------------
RANKS=$(( NGPU >= 2 ? 2 : 1 ))
if "$B/baton" run configs/arith.json --run-dir "$OUT/ranks" --set run.device=cuda:0 \
     --set grpo.steps=10 --set workers.trainer=$RANKS --set sft.steps=20 >"$OUT/ranks.log" 2>&1; then
  say nccl_ranks true "$RANKS rank(s), $(grep -c '"train"' "$OUT/ranks/metrics.jsonl") steps"
else
  say nccl_ranks false "see $OUT/ranks.log"
fi

# ---- 4. logits against transformers --------------------------------------------------------------------
for arch in llama qwen2 mistral gemma gemma2; do
  "$PY" - "$arch" "$OUT/tiny-$arch" >"$OUT/hf-$arch.json" 2>"$OUT/hf-$arch.log" <<'EOF'
import json, sys, torch, transformers
arch, out = sys.argv[1], sys.argv[2]
common = dict(vocab_size=259, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
torch.manual_seed(0)
gemma = dict(common, head_dim=16, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
             attn_implementation="eager")
if arch == "llama":
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
elif arch == "qwen2":
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common, use_sliding_window=False))
elif arch == "mistral":
    model = transformers.MistralForCausalLM(transformers.MistralConfig(**common, sliding_window=3,
                                                                       attn_implementation="eager"))
elif arch == "gemma":
    model = transformers.GemmaForCausalLM(transformers.GemmaConfig(**gemma))
else:
    model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        **gemma, sliding_window=3, query_pre_attn_scalar=24, attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0))
model = model.float().eval()
model.save_pretrained(out, safe_serialization=True)
ids = torch.tensor([[256, 49, 43, 55, 61, 3]])
with torch.no_grad():
    print(json.dumps(model(ids).logits[0].tolist()))
EOF
  for dev in cpu cuda:0; do
    if "$B/bench_logits" "$OUT/tiny-$arch" "$dev" 256 49 43 55 61 3 >"$OUT/baton-$arch-$dev.json" 2>&1; then
      diff=$("$PY" -c "
import json, sys
a = json.load(open('$OUT/hf-$arch.json')); b = json.load(open('$OUT/baton-$arch-$dev.json'))['logits']
print(max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)))" 2>&1)
      ok=$("$PY" -c "print('true' if float('$diff') < 1e-4 else 'false')" 2>/dev/null || echo false)
      say "logits_${arch}_$dev" "$ok" "max |diff| $diff vs transformers"
    else
      say "logits_${arch}_$dev" false "see $OUT/baton-$arch-$dev.json"
    fi
  done
done

# ---- 5. the realistic rollout workload on cuda:0 ------------------------------------------------------
for prec in f32 bf16; do
  if BATON_DEVICE=cuda:0 BENCH_PRECISION=$prec BENCH_PEER=$([ $prec = f32 ] && echo 1 || echo 0) \
     BATON_SOURCE_DIR="$ROOT" timeout 900 "$B/bench_rollout" >"$OUT/rollout-$prec.jsonl" 2>"$OUT/rollout-$prec.log"; then
    say "rollout_$prec" true "$(tr '\n' ' ' <"$OUT/rollout-$prec.jsonl" | sed 's/"/\x27/g' | cut -c1-1500)"
  else
    say "rollout_$prec" false "see $OUT/rollout-$prec.log"
  fi
done

# ---- 6. sharded training state (workers.shard) over NCCL ---------------------------------------------
# bench_zero with its ranks on cuda:0.. (two when two GPUs exist): the optimizer share per rank,
# CUDA's allocator peak per step and the step time for each stage; then short demo runs with
# sharded gradients and sharded weights on as many ranks
ZRANKS=$([ "$NGPU" -ge 2 ] && echo "1 2" || echo "1")
if BENCH_DEVICE=cuda BENCH_RANKS="$ZRANKS" timeout 900 "$B/bench_zero" 3 >"$OUT/zero.jsonl" 2>"$OUT/zero.log"; then
  say zero_cuda true "$(tr '\n' ' ' <"$OUT/zero.jsonl" | sed 's/"/\x27/g' | cut -c1-3000)"
else
  say zero_cuda false "see $OUT/zero.log"
fi
for stage in gradients parameters; do
  if "$B/baton" run configs/arith.json --run-dir "$OUT/sharded-$stage" --set run.device=cuda:0 \
       --set grpo.steps=10 --set workers.trainer=$RANKS --set workers.shard=$stage \
       --set sft.steps=20 >"$OUT/sharded-$stage.log" 2>&1; then
    say "nccl_shard_$stage" true "$RANKS rank(s), $(grep -c '"train"' "$OUT/sharded-$stage/metrics.jsonl") steps, held-out $(accuracy "$OUT/sharded-$stage")"
  else
    say "nccl_shard_$stage" false "see $OUT/sharded-$stage.log"
  fi
done

# ---- 7. the memory planner against CUDA's allocator peak ------------------------------------------
# `baton plan` prints the trainer's predicted bytes; bench_plan runs one GRPO step of the same
# config's trainer on its worst batch and reads bt_device_memory's peak on cuda:0 (CUDA's caching
# allocator, allocated bytes), with the planner's figure beside it
for prec in float32 bf16; do
  "$B/baton" plan configs/arith.json --set run.device=cuda:0 --set run.precision=$prec \
    >"$OUT/plan-$prec.txt" 2>&1
  if BENCH_DEVICE=cuda:0 "$B/bench_plan" configs/arith.json run.device=cuda:0 \
       run.precision=$prec >"$OUT/plan-$prec.jsonl" 2>"$OUT/plan-$prec.log"; then
    say plan_$prec true "baton plan trainer: $(awk '$1=="trainer" && $2 ~ /^[0-9]+$/ {print $9}' \
      "$OUT/plan-$prec.txt") MiB; $(sed 's/"/\x27/g' "$OUT/plan-$prec.jsonl")"
  else
    say plan_$prec false "see $OUT/plan-$prec.log"
  fi
done

# ---- 8. LoRA adapters against peft ----------------------------------------------------------------------
LORA=$OUT/lora
if "$B/baton" run configs/arith.json --run-dir "$LORA" --overwrite --set run.device=cuda:0 \
     --set model.lora.rank=4 --set model.lora.alpha=16 --set sft.steps=20 --set grpo.steps=5 \
     --set grpo.kl_coef=0.04 >"$OUT/lora.log" 2>&1 \
   && "$B/baton" export --merge "$LORA" "$OUT/lora-merged" >>"$OUT/lora.log" 2>&1; then
  # the base and the adapters in folders of their own: transformers applies an adapter_config.json
  # it finds beside the base by itself
  mkdir -p "$OUT/lora-base" "$OUT/lora-adapter"
  cp "$LORA/model/config.json" "$LORA/model/model.safetensors" "$OUT/lora-base/"
  cp "$LORA/model/adapter_config.json" "$LORA/model/adapter_model.safetensors" "$OUT/lora-adapter/"
  "$PY" - "$OUT" >"$OUT/peft.json" 2>"$OUT/peft.log" <<'EOF'
import json, sys, torch, transformers, peft
out = sys.argv[1]
ids = torch.tensor([[256, 49, 43, 55, 61, 3]])
base = transformers.LlamaForCausalLM.from_pretrained(out + "/lora-base", torch_dtype=torch.float32)
model = peft.PeftModel.from_pretrained(base, out + "/lora-adapter").eval()
merged = transformers.LlamaForCausalLM.from_pretrained(out + "/lora-merged",
                                                       torch_dtype=torch.float32).eval()
with torch.no_grad():
    a, m = model(ids).logits[0], merged(ids).logits[0]
    with model.disable_adapter():
        b = model(ids).logits[0]
print(json.dumps({"peft": a.tolist(), "merged_max_diff": (a - m).abs().max().item(),
                  "adapter_effect": (a - b).abs().max().item()}))
EOF
  for dev in cpu cuda:0; do
    if "$B/bench_logits" "$LORA/model" "$dev" 256 49 43 55 61 3 >"$OUT/baton-lora-$dev.json" 2>&1; then
      detail=$("$PY" -c "
import json
p = json.load(open('$OUT/peft.json')); b = json.load(open('$OUT/baton-lora-$dev.json'))['logits']
d = max(abs(x - y) for ra, rb in zip(p['peft'], b) for x, y in zip(ra, rb))
ok = d < 1e-4 and p['merged_max_diff'] < 1e-4 and p['adapter_effect'] > 1e-3
print('true' if ok else 'false', 'max |diff| %g vs peft, merged vs peft %g, adapters move logits by %g'
      % (d, p['merged_max_diff'], p['adapter_effect']))" 2>&1)
      ok=${detail%% *}
      [ "$ok" = true ] || ok=false
      say "lora_peft_$dev" "$ok" "${detail#* }"
    else
      say "lora_peft_$dev" false "see $OUT/baton-lora-$dev.json and $OUT/peft.log"
    fi
  done
else
  say lora_peft false "see $OUT/lora.log"
fi

# ---- 9. resource figures on CUDA, TensorBoard's own reader --------------------------------------------
TB=$OUT/tb-run
if "$B/baton" run configs/arith.json --run-dir "$TB" --overwrite --set run.device=cuda:0 \
     --set sft.steps=5 --set grpo.steps=5 --set run.tensorboard=true >"$OUT/tb.log" 2>&1; then
  detail=$("$PY" - "$TB" 2>&1 <<'EOF'
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
lines = [json.loads(l) for l in open(run + "/metrics.jsonl")]
train = [l for l in lines if l["kind"] == "train"]
cuda = all(0 < l["cuda_allocated_mb"] <= l["cuda_reserved_mb"] for l in train)
acc = EventAccumulator(run + "/tb/main", size_guidance={"scalars": 0}).Reload()
worst, n = 0.0, 0
for l in train:
    for k, v in l.items():
        if k in ("step", "global_step") or not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        got = {e.step: e.value for e in acc.Scalars("train/" + k)}.get(l["global_step"])
        worst = max(worst, abs(got - v) / max(1.0, abs(v))) if got is not None else float("inf")
        n += 1
print("true" if cuda and worst < 1e-6 else "false",
      "cuda fields on %d train lines: %s; %d scalars read by tensorboard, worst rel diff %g"
      % (len(train), cuda, n, worst))
EOF
)
  ok=${detail%% *}
  [ "$ok" = true ] || ok=false
  say tensorboard_cuda "$ok" "${detail#* }"
else
  say tensorboard_cuda false "see $OUT/tb.log"
fi
