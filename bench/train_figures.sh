#!/usr/bin/env bash
# The training figures of docs/benchmarks.md ("Training"), each run's final JSON line to stdout (prefixed by the
# command that produced it) and per-step metrics under $OUT. Fashion-MNIST from /usr/share/datasets/fashion-mnist.
#
#   bench/train_figures.sh [build dir] [which: all|accuracy|ranks|compressors|large_batch]
set -euo pipefail
build="${1:-build}"
which="${2:-all}"
out="${OUT:-$build/train-figures}"
mkdir -p "$out"
mnist="$build/examples/mnist/hitch-mnist"
run() {  # name, then the command
  local name="$1"; shift
  echo "# $name: $*"
  # A run that fails (a diverged large-batch run stops at its first non-finite gradient) is reported, not fatal.
  "$@" --metrics "$out/$name.jsonl" --no-progress-bar 2>&1 | grep -v '^Abort' | tail -n 1 || true
}
if [[ "$which" == all || "$which" == accuracy ]]; then
  run mlp_2ranks mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 128 --lr 0.05
  run cnn_2ranks mpiexec -n 2 "$mnist" --model cnn --epochs 8 --batch-size 128 --lr 0.05
fi
if [[ "$which" == all || "$which" == ranks ]]; then
  run mlp_1rank mpiexec -n 1 "$mnist" --model mlp --epochs 10 --batch-size 128 --lr 0.05
  [[ -f "$out/mlp_2ranks.jsonl" ]] || run mlp_2ranks mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 128 --lr 0.05
fi
if [[ "$which" == all || "$which" == compressors ]]; then
  for c in fp16 bf16 onebit threshold topk dgc randomk qsgd terngrad powersgd; do
    extra=()
    case "$c" in
      topk|dgc) extra=(--density 0.01) ;;
      randomk) extra=(--density 0.5) ;;
      threshold) extra=(--tau 0.1) ;;
    esac
    run "mlp_2ranks_$c" mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 128 --lr 0.05 --compressor "$c" "${extra[@]}"
  done
  # The settings that did not work, for the record (docs/benchmarks.md lists them under the table).
  mlp=(mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 128 --lr 0.05)
  run mlp_2ranks_onebit_group0 "${mlp[@]}" --compressor onebit --onebit-group 0
  run mlp_2ranks_randomk_0.25 "${mlp[@]}" --compressor randomk --density 0.25
  run mlp_2ranks_terngrad_noclip "${mlp[@]}" --compressor terngrad --terngrad-clip 0
  for tau in 0.0001 0.001 0.003 0.01 0.03 0.06 0.2 0.4; do
    run "mlp_2ranks_threshold_$tau" "${mlp[@]}" --compressor threshold --tau "$tau"
  done
fi
if [[ "$which" == all || "$which" == large_batch ]]; then
  # Goyal et al. 2017: batch 256 at lr 0.05 (the reference), then batch 8192 = 32 x 256 at 32 x 0.05 = 1.6 with a
  # 2-epoch linear warm-up from lr / 10, with momentum SGD and with LARS (You et al. 2017: global lr in the range
  # the paper uses, trust coefficient 0.001), all for the same 10 epochs.
  run large_b256 mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 256 --lr 0.05
  run large_b8192_momentum mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 8192 --lr 1.6 --warmup-epochs 2
  run large_b8192_lars mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 8192 --lr 1.6 --warmup-epochs 2 --optimizer lars --lars-eta 0.001
  run large_b8192_lars_lr8 mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 8192 --lr 8 --warmup-epochs 2 --optimizer lars --lars-eta 0.001
  run large_b8192_lars_lr16 mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 8192 --lr 16 --warmup-epochs 2 --optimizer lars --lars-eta 0.001
  # Below the linear rule: where momentum SGD at batch 8192 stops diverging.
  for lr in 0.8 0.4 0.2 0.1; do
    run "large_b8192_momentum_lr$lr" mpiexec -n 2 "$mnist" --model mlp --epochs 10 --batch-size 8192 --lr "$lr" --warmup-epochs 2
  done
fi
