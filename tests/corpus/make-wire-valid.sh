#!/bin/sh
# make-wire-valid.sh — writes tests/corpus/wire-valid: one valid message of every type, in the
# fuzz input layout of tests/fuzz.h (header, then for tensors a NUL and each frame as a 2-byte
# little-endian length and its bytes).  test_wire expects every file accepted; fuzz_wire uses them
# as seeds.  Run from anywhere: sh tests/corpus/make-wire-valid.sh
set -eu
out="$(dirname "$0")/wire-valid"
mkdir -p "$out"

# One tensor frame of $1 bytes (each 0x2a): the length, then the bytes.
frame() {
    printf "\\$(printf %03o $(($1 & 255)))\\$(printf %03o $(($1 >> 8)))"
    head -c "$1" /dev/zero | tr '\000' '\052'
}

# A message: file name, header, then the byte size of each tensor frame.
message() {
    name=$1 header=$2
    shift 2
    {
        printf '%s' "$header"
        [ $# -eq 0 ] || printf '\000'
        for size in "$@"; do frame "$size"; done
    } >"$out/$name"
}

message hello '{"v":1,"type":"HELLO","run":"","id":0,"f":{"role":"rollout","name":"w0","host":"node-3","pid":4242,"device":"cuda:1","threads":8,"proto":1}}'
message welcome '{"v":1,"type":"WELCOME","run":"arith","id":1,"f":{"worker":3,"heartbeat_ms":500},"tensors":[{"name":"config","dtype":"U8","shape":[13]}]}' 13
message ping '{"v":1,"type":"PING","run":"arith","id":2}'
message ping_spaced '{ "v": 1, "type": "PING", "run": "arith", "id": 2,
  "f": {}, "tensors": [] }
'
message task '{"v":1,"type":"TASK","run":"arith","id":3,"f":{"task":4,"kind":"rollout","version":3,"temperature":0.7,"greedy":false,"model.hidden_size":64},"tensors":[{"name":"prompts","dtype":"I64","shape":[2]}]}' 16
message result '{"v":1,"type":"RESULT","run":"arith","id":4,"f":{"task":4,"stats.loss":-0.25,"stats.finite":true},"tensors":[{"name":"tokens","dtype":"I32","shape":[2,3]},{"name":"logprobs","dtype":"F32","shape":[2,3]},{"name":"empty","dtype":"F64","shape":[0,4]},{"name":"scalar","dtype":"BF16","shape":[]}]}' 24 24 0 2
message fail '{"v":1,"type":"FAIL","run":"arith","id":5,"f":{"task":4,"error":"out of memory: caf\u00e9 \u2603 \ud83d\ude00"}}'
message weights '{"v":1,"type":"WEIGHTS","run":"arith","id":6,"f":{"version":7},"tensors":[{"name":"model.embed_tokens.weight","dtype":"F32","shape":[4,2]},{"name":"model.norm.weight","dtype":"F32","shape":[2]}]}' 32 8
message stop '{"v":1,"type":"STOP","run":"arith","id":7}'
message bye '{"v":1,"type":"BYE","run":"arith","id":8}'
message invalid '{"v":1,"type":"INVALID","run":"arith","id":9,"f":{"reason":"unknown peer: send HELLO first"}}'
