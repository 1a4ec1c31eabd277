#!/bin/sh
# make-secret.sh — the run's CURVE keys as the Secret baton-keys, and its config as the
# ConfigMap baton-config: sh examples/k8s/make-secret.sh configs/arith.json
# The keys are made in a temporary folder and removed once kubectl holds them.
set -eu
config=${1:?usage: make-secret.sh CONFIG}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for name in controller trainer rollout eval; do
  baton keygen "$dir" --name "$name" >/dev/null
done
kubectl create secret generic baton-keys \
  $(for f in "$dir"/*.key "$dir"/*.pub; do printf -- '--from-file=%s ' "$f"; done)
kubectl create configmap baton-config --from-file=config.json="$config"
