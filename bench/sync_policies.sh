#!/usr/bin/env bash
# Sync policies side by side (docs/benchmarks.md, "Sync policies"): hitch-mnist's Fashion-MNIST MLP on 4 workers,
# the same epochs under each --sync policy, each once as it is and once with rank 3 slowed (--slow-rank 3
# --slow-ms X). Draws ONE chart of test accuracy against wall time, a line per run (gnuplot, as the trainer's
# --plot; slowed runs dashed in their policy's colour), and prints a table: policy, slowed?, final test accuracy,
# seconds to the target accuracy, rank 0's steps per second (with the last rank slowed, what the fast workers
# keep), mean staleness and dropped gradients. Accuracy and times are rank 0's, from its metrics file
# (step lines, then the run's summary line), which stays under the output directory with the chart.
#
#   bench/sync_policies.sh [build dir]
#
# Environment (defaults in brackets):
#   POLICIES  the --sync names to run ["hard local_sgd soft async ssp easgd backup", and hogwild on threads]; a new
#             policy is one more name here, and its options, if it needs any beside the trainer's defaults, one more
#             entry of policy_options below
#   EPOCHS [5]  RANKS [4]  SLOW_MS [50; 0 skips the slowed runs]  TARGET [0.85]
#   SLOW_RANK the slowed rank [the last one], or any: each step a worker drawn at random (a transient straggler)
#   EVAL_EVERY  test accuracy every this many steps as well as at each epoch's end, the chart's points [100]
#   LAUNCH    mpi: mpiexec -n RANKS; threads: --threads RANKS (comm::local, one process) [mpi]
#   EXTRA     more trainer options for every run ["--lr 0.05"]
#   OUT       where the metrics files, the chart and the table go [<build dir>/sync-policies]
set -euo pipefail
build="${1:-build}"
mnist="$build/examples/mnist/hitch-mnist"
out="${OUT:-$build/sync-policies}"
epochs="${EPOCHS:-5}"
ranks="${RANKS:-4}"
slow_ms="${SLOW_MS:-50}"
slow_rank="${SLOW_RANK:-$((${RANKS:-4} - 1))}"
target="${TARGET:-0.85}"
launch="${LAUNCH:-mpi}"
default_policies="hard local_sgd soft async ssp easgd backup"
[[ "$launch" == threads ]] && default_policies+=" hogwild"
read -r -a policies <<<"${POLICIES:-$default_policies}"
eval_every="${EVAL_EVERY:-100}"
read -r -a extra <<<"${EXTRA:---lr 0.05}"

# Options of a policy beyond --sync NAME (the trainer's defaults otherwise).
# Asynchronous updates add momentum of their own (Mitliagkas et al. 2016): those policies run with less.
declare -A policy_options=(
  [local_sgd]="--local-sgd-period 8"
  [soft]="--soft-c 1 --staleness-scaling on --momentum 0.5"
  [async]="--momentum 0.5"
  [ssp]="--ssp-bound 3 --momentum 0.5"
  [easgd]="--easgd-period 4 --easgd-form asynchronous"
  [backup]="--backups 1"
  [hogwild]="--momentum 0.5"
)

[[ -x "$mnist" ]] || { echo "sync_policies.sh: $mnist is not built (cmake --build $build --target hitch-mnist)" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "sync_policies.sh: gnuplot is needed for the chart (Debian: gnuplot-nox)" >&2; exit 2; }
case "$launch" in
  mpi) launcher=(mpiexec -n "$ranks" "$mnist") ;;
  threads) launcher=("$mnist" --threads "$ranks") ;;
  *) echo "sync_policies.sh: LAUNCH must be mpi or threads, got '$launch'" >&2; exit 2 ;;
esac
mkdir -p "$out"

runs=()  # metrics files, in the order run
for policy in "${policies[@]}"; do
  read -r -a own <<<"${policy_options[$policy]:-}"
  variants=(fair)
  [[ "$slow_ms" != 0 ]] && variants+=(slow)
  for variant in "${variants[@]}"; do
    name="$policy"
    slow=()
    if [[ "$variant" == slow ]]; then
      name="${policy}_slow"
      slow=(--slow-rank "$slow_rank" --slow-ms "$slow_ms")
    fi
    command=("${launcher[@]}" --model mlp --epochs "$epochs" --batch-size 128 --eval-every "$eval_every"
             "${extra[@]}" --sync "$policy" "${own[@]}" "${slow[@]}" --metrics "$out/$name.jsonl" --no-progress-bar)
    echo "# $name: ${command[*]}"
    # A run that fails is reported and left out of the chart and the table; the others go on.
    if "${command[@]}" >"$out/$name.log" 2>&1; then
      tail -n 1 "$out/$name.log"
      runs+=("$out/$name.jsonl")
    else
      echo "# $name failed:"; tail -n 3 "$out/$name.log"
    fi
  done
done
[[ ${#runs[@]} -gt 0 ]] || { echo "sync_policies.sh: no run finished" >&2; exit 1; }

# Per run: the accuracy points (elapsed_s, accuracy) for gnuplot, a row of the table, and a gnuplot plot clause.
python3 - "$out" "$target" "${runs[@]}" <<'EOF'
import json, sys
out, target, files = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
colours = {}
rows, clauses = [], []
for f in files:
    points, summary, steps, last = [], None, 0, 0.0
    for line in open(f):
        if not line.strip():
            continue
        j = json.loads(line)
        if "step" not in j:
            summary = j  # the run's summary line ends the file (docs/metrics.md)
            continue
        steps, last = steps + 1, j["elapsed_s"]
        if j["accuracy"] is not None:
            points.append((j["elapsed_s"], j["accuracy"]))
    if summary is None:
        continue
    policy, slowed = summary["sync"], summary["slow_rank"] != -1  # -2: --slow-rank any
    dat = f[: -len(".jsonl")] + ".dat"
    with open(dat, "w") as d:
        for t, a in points:
            d.write(f"{t} {a}\n")
    reached = next((t for t, a in points if a >= target), None)
    steps_per_s = steps / last if last > 0 else 0.0
    rows.append((policy, "yes" if slowed else "no", summary["test_accuracy"],
                 "-" if reached is None else f"{reached:.1f}", steps_per_s, summary["staleness_mean"],
                 summary["dropped_gradients"]))
    colour = colours.setdefault(policy, len(colours) + 1)
    who = "a random worker" if summary["slow_rank"] == -2 else f"rank {summary['slow_rank']}"
    title = policy + (f" ({who} +{summary['slow_ms']:g} ms/step)" if slowed else "")
    clauses.append(f"'{dat}' using 1:2 with linespoints lc {colour} dt {2 if slowed else 1} pt 7 title '{title}'")
with open(f"{out}/chart.gp", "w") as g:
    g.write("set terminal pngcairo size 1250,650 font ',10' noenhanced\n")
    g.write(f"set output '{out}/sync_policies.png'\n")
    g.write("set title 'Fashion-MNIST MLP: test accuracy against wall time, one line per sync policy'\n")
    g.write("set xlabel 'seconds since the first step'\nset ylabel 'test accuracy'\nset grid\n")
    g.write("set key outside right top\nset xrange [0:*]\n")
    g.write("plot " + ", \\\n     ".join(clauses) + "\n")
header = ("policy", "slowed", "test accuracy", f"s to {target:g}", "rank 0 steps/s", "staleness", "dropped")
table = [header] + [(p, s, f"{a:.4f}", t, f"{r:.1f}", f"{st:.2f}", str(d)) for p, s, a, t, r, st, d in rows]
widths = [max(len(row[i]) for row in table) for i in range(len(header))]
with open(f"{out}/table.txt", "w") as t:
    for row in table:
        t.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")
EOF
gnuplot "$out/chart.gp"
cat "$out/table.txt"
echo "wrote $out/sync_policies.png"
