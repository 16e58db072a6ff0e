#!/usr/bin/env bash
# make demo: the Fashion-MNIST MLP trained data-parallel on 2 MPI ranks with hitch's default policies (momentum
# SGD, no compression, hard sync, automatic all-reduce), a few epochs, progress shown, a PNG of the curves written,
# and the final JSON line printed.
set -euo pipefail
build="${1:-build}"
out="${DEMO_OUT:-$build/demo}"
mkdir -p "$out"
mpiexec -n 2 "$build/examples/mnist/hitch-mnist" --epochs 5 \
  --metrics "$out/metrics.jsonl" --plot "$out/fashion-mnist-mlp.png"
