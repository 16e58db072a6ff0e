#!/usr/bin/env bash
# hitch-mnist against PyTorch DistributedDataParallel (gloo, CPU), side by side on the same machine: the same MLP,
# data, global batch, optimizer and epochs on 2 processes with one thread each. Prints both JSON lines and the
# ratio of samples per second. Needs a Python with torch and numpy: PYTHON=/path/to/python (default python3).
#
#   bench/compare_ddp.sh [build dir] [epochs] [repeats]
set -euo pipefail
build="${1:-build}"
epochs="${2:-2}"
repeats="${3:-3}"
python="${PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! "$python" -c "import torch, numpy" 2>/dev/null; then
  echo "compare_ddp: $python has no torch/numpy; set PYTHON to one that has (pip install torch numpy)" >&2
  exit 2
fi
last() { tail -n 1 | sed -n '/^{/p'; }
rate() { sed -E 's/.*"samples_per_s": *([0-9.eE+-]+).*/\1/'; }
for i in $(seq "$repeats"); do
  h=$(mpiexec -n 2 "$build/examples/mnist/hitch-mnist" --epochs "$epochs" --batch-size 128 --lr 0.1 \
        --no-progress-bar --blas-threads 1 | last)
  t=$(OMP_NUM_THREADS=1 "$python" "$here/ddp_mnist.py" --ranks 2 --epochs "$epochs" --batch-size 128 --lr 0.1 | last)
  echo "$h"
  echo "$t"
  awk -v a="$(echo "$h" | rate)" -v b="$(echo "$t" | rate)" \
    'BEGIN { printf "{\"bench\":\"ddp_compare\",\"hitch_samples_per_s\":%.1f,\"torch_samples_per_s\":%.1f,\"ratio\":%.3f}\n", a, b, a / b }'
done
