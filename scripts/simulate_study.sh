#!/usr/bin/env bash
# The scaling study of docs/scaling.md: runs hitch-simulate for every table there (JSON lines into
# docs/img/simulate/), then draws the figures (docs/img/simulate_*.png) with gnuplot.
#   scripts/simulate_study.sh [BUILD_DIR]          run everything (about an hour of one core), then draw
#   scripts/simulate_study.sh --plots BUILD_DIR    draw from the JSON lines already there
# Needs hitch-simulate (cmake --build BUILD_DIR --target hitch-simulate), python3 and gnuplot.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
plots_only=0
if [[ "${1:-}" == "--plots" ]]; then plots_only=1; shift; fi
build="${1:-$top/build}"
sim="$build/bench/hitch-simulate"
data="$top/docs/img/simulate"
img="$top/docs/img"
mkdir -p "$data"

run() {  # run OUT ARGS...: one study's JSON lines
  local out="$data/$1.jsonl"
  shift
  echo "hitch-simulate $*" >&2
  nice "$sim" "$@" >"$out"
}

if [[ $plots_only -eq 0 ]]; then
  [[ -x "$sim" ]] || { echo "simulate_study: $sim not found (build the hitch-simulate target)" >&2; exit 1; }
  # Schedules against p and message size: one switch, 5 us, 100 Gbit/s, one buffer shared by every rank.
  S=(--topology single_switch --latency-us 5 --gbit 100 --timing-only
     --schedule ring,recursive_doubling,rabenseifner,binary_tree,double_binary_tree)
  run schedules_p "${S[@]}" --ranks 2,4,8,16,32,64,128,256,512,1024 --bytes 4096,65536,1048576
  run schedules_p16m "${S[@]}" --ranks 2,4,8,16,32,64,128,256 --bytes 16777216
  run schedules_n "${S[@]}" --ranks 16,256 --bytes 1024,4096,16384,65536,262144,1048576,4194304,16777216
  run schedules_buffered "${S[@]}" --switching buffered --ranks 16,256,1024 --bytes 1048576
  run schedules_buffered16m "${S[@]}" --switching buffered --ranks 16,256 --bytes 16777216
  # automatic against the fastest schedule. Its first call calibrates on the simulated network (1.9 GB sent per rank
  # at p = 16, 17 s of wall time), so p stays at 16 and below.
  run automatic --topology single_switch --latency-us 5 --gbit 100 --timing-only \
    --schedule automatic,ring,recursive_doubling,rabenseifner,binary_tree,double_binary_tree \
    --ranks 4,8,16 --bytes 4096,262144,16777216
  run automatic_nodes --topology nodes --ranks-per-node 8 --intra-gbit 1200 --intra-latency-us 2 --gbit 50 \
    --latency-us 5 --timing-only --schedule automatic,ring,recursive_doubling,rabenseifner,double_binary_tree,hierarchical \
    --ranks 16 --bytes 4096,262144,16777216
  # Goyal et al. 2017: ResNet-50, 8 GPUs a server, 50 Gbit/s Ethernet, up to 256 GPUs.
  G=(--model resnet50 --compute-ms 225 --topology nodes --ranks-per-node 8 --intra-gbit 160 --intra-latency-us 5
     --gbit 50 --latency-us 10 --schedule hierarchical_rabenseifner)
  run goyal "${G[@]}" --ranks 8,16,32,64,128,256
  run goyal_nooverlap "${G[@]}" --ranks 8,16,32,64,128,256 --no-overlap
  run goyal_jitter2 "${G[@]}" --ranks 8,256 --jitter-cv 0.02 --steps 4
  run goyal_jitter5 "${G[@]}" --ranks 8,256 --jitter-cv 0.05 --steps 4
  # Sergeev and Del Balso 2018 (Horovod): 4 GPUs a server, 25 Gbit/s RoCE, up to 128 GPUs, 64 MB fusion buffer.
  H=(--bucket-mb 64 --topology nodes --ranks-per-node 4 --intra-gbit 96 --intra-latency-us 5 --gbit 25
     --latency-us 3 --schedule ring)
  for m in "resnet101 490" "inception_v3 460"; do
    set -- $m
    run "horovod_$1" --model "$1" --compute-ms "$2" "${H[@]}" --ranks 1,4,8,16,32,64,128
    run "horovod_$1_nooverlap" --model "$1" --compute-ms "$2" "${H[@]}" --ranks 1,4,8,16,32,64,128 --no-overlap
    run "horovod_$1_jitter2" --model "$1" --compute-ms "$2" "${H[@]}" --ranks 1,128 --jitter-cv 0.02 --steps 4
    run "horovod_$1_jitter5" --model "$1" --compute-ms "$2" "${H[@]}" --ranks 1,128 --jitter-cv 0.05 --steps 4
  done
  # Compressors: ResNet-50 on 16 ranks (2 machines of 8), 100 ms of compute a step, at 10 and 100 Gbit/s.
  for g in 10 100; do
    run "codecs_$g" --model resnet50 --compute-ms 100 --topology nodes --ranks-per-node 8 --gbit "$g" --latency-us 10 \
      --intra-gbit 160 --intra-latency-us 5 --ranks 16 --schedule automatic \
      --compressor none,fp16,bf16,onebit,qsgd,terngrad,topk,randomk
  done
  # automatic's model (given the network's constants, no calibration) at 64 to 1,024 ranks.
  S2=(--timing-only --schedule
      automatic_model,ring,recursive_doubling,rabenseifner,binary_tree,double_binary_tree,parameter_server,hierarchical,hierarchical_rabenseifner)
  run automatic_large_switch "${S2[@]}" --topology single_switch --latency-us 5 --gbit 100 \
    --ranks 64,128,256,512,1024 --bytes 4096,65536,262144,1048576
  run automatic_large_nodes "${S2[@]}" --topology nodes --ranks-per-node 8 --intra-gbit 1200 --intra-latency-us 2 \
    --gbit 50 --latency-us 5 --ranks 64,256,1024 --bytes 4096,262144,4194304
  run automatic_large_fat_tree "${S2[@]}" --topology fat_tree --ranks-per-leaf 16 --oversubscription 4 \
    --latency-us 5 --gbit 100 --ranks 64,256,1024 --bytes 4096,262144,4194304
  # Against real runs on this machine (comm::local, threads): three runs, docs/scaling.md gives their medians.
  for i in 1 2 3; do
    run "compare_local_$i" --compare-local --ranks 2,3,4 --bytes 65536,1048576,16777216 \
      --schedule ring,recursive_doubling,rabenseifner
  done
  # Stragglers: the last rank computes 2x slower; hitch::data_parallel with each policy.
  for p in 64 256; do
    run "stragglers_$p" --model uniform:1000000 --compute-ms 50 --engine data_parallel --switching buffered \
      --topology single_switch \
      --gbit 10 --latency-us 10 --ranks "$p" --schedule ring --steps 17 --straggler 2 \
      --policy hard,local_sgd,ssp,backup_workers
    run "stragglers_${p}_none" --model uniform:1000000 --compute-ms 50 --engine data_parallel \
      --switching buffered --topology single_switch --gbit 10 --latency-us 10 --ranks "$p" --schedule ring --steps 17 \
      --policy hard,local_sgd,ssp,backup_workers
  done
  # The parameter-server policies with shards cut by ranges instead of whole layers.
  R=(--model uniform:1000000 --compute-ms 50 --engine data_parallel --switching buffered --topology single_switch
     --gbit 10 --latency-us 10 --ranks 64,256 --schedule ring --steps 17 --policy ssp,backup_workers --sharding range)
  run stragglers_range "${R[@]}" --straggler 2
  run stragglers_range_none "${R[@]}"
fi

command -v gnuplot >/dev/null || { echo "simulate_study: gnuplot not found (apt-get install gnuplot)" >&2; exit 1; }
tsv="$(mktemp -d)"
trap 'rm -rf "$tsv"' EXIT

# Virtual and model time per (bytes, schedule) against p, one file per size and schedule.
python3 - "$data" "$tsv" <<'EOF'
import json, sys, os, collections
data, out = sys.argv[1], sys.argv[2]
rows = []
for name in ("schedules_p", "schedules_p16m"):
    path = os.path.join(data, name + ".jsonl")
    if os.path.exists(path):
        rows += [json.loads(l) for l in open(path) if l.startswith("{")]
series = collections.defaultdict(list)
for d in rows:
    series[(d["bytes"], d["schedule"])].append((d["p"], d["virtual_s"] * 1e6, d["model_s"] * 1e6))
for (b, s), pts in series.items():
    with open(os.path.join(out, f"p_{b}_{s}.tsv"), "w") as f:
        for p, v, m in sorted(pts):
            f.write(f"{p}\t{v}\t{m}\n")
path = os.path.join(data, "schedules_n.jsonl")
if os.path.exists(path):
    series = collections.defaultdict(list)
    for d in (json.loads(l) for l in open(path) if l.startswith("{")):
        series[(d["p"], d["schedule"])].append((d["bytes"], d["virtual_s"] * 1e6, d["model_s"] * 1e6))
    for (p, s), pts in series.items():
        with open(os.path.join(out, f"n_{p}_{s}.tsv"), "w") as f:
            for b, v, m in sorted(pts):
                f.write(f"{b}\t{v}\t{m}\n")
# Efficiency against p for the reproductions.
for name in ("goyal", "goyal_nooverlap", "horovod_resnet101", "horovod_resnet101_nooverlap", "horovod_inception_v3",
             "horovod_inception_v3_nooverlap"):
    path = os.path.join(data, name + ".jsonl")
    if not os.path.exists(path):
        continue
    with open(os.path.join(out, name + ".tsv"), "w") as f:
        for d in (json.loads(l) for l in open(path) if l.startswith("{")):
            f.write(f"{d['p']}\t{100 * d['relative_efficiency']}\n")
# Step time per compressor at each bandwidth.
with open(os.path.join(out, "codecs.tsv"), "w") as f:
    got = {}
    for g in (10, 100):
        path = os.path.join(data, f"codecs_{g}.jsonl")
        if os.path.exists(path):
            for d in (json.loads(l) for l in open(path) if l.startswith("{")):
                got.setdefault(d["compressor"], {})[g] = d["step_s"] * 1e3
    for i, (c, v) in enumerate(got.items()):
        f.write(f"{i}\t{c}\t{v.get(10, 0)}\t{v.get(100, 0)}\n")
# Rank 0's step time per policy, with and without the straggler.
with open(os.path.join(out, "stragglers.tsv"), "w") as f:
    got = {}
    for p in (64, 256):
        for suffix, key in (("", "slow"), ("_none", "even")):
            path = os.path.join(data, f"stragglers_{p}{suffix}.jsonl")
            if os.path.exists(path):
                for d in (json.loads(l) for l in open(path) if l.startswith("{")):
                    got.setdefault(d["policy"], {})[(p, key)] = d["rank0_step_s"] * 1e3
    for i, (pol, v) in enumerate(got.items()):
        f.write(f"{i}\t{pol}\t" + "\t".join(str(v.get(k, 0)) for k in
                                          ((64, "even"), (64, "slow"), (256, "even"), (256, "slow"))) + "\n")
EOF

cd "$tsv"
gnuplot <<EOF
set terminal pngcairo size 1200,860 font "sans,9" noenhanced
S = "ring recursive_doubling rabenseifner binary_tree double_binary_tree"
set output "$img/simulate_schedules_p.png"
set multiplot layout 2,2 title "All-reduce on one switch (alpha 5 us, 100 Gbit/s): simulated (points) and alpha-beta model (lines)"
set logscale xy
set xlabel "ranks p"
set ylabel "time (us)"
set key top left
set grid
do for [b in "4096 65536 1048576 16777216"] {
  set title sprintf("%s bytes", b)
  plot for [i=1:5] sprintf("p_%s_%s.tsv", b, word(S, i)) using 1:2 with points pt 7 ps 0.8 lc i title word(S, i), \
    for [i=1:5] sprintf("p_%s_%s.tsv", b, word(S, i)) using 1:3 with lines dt 2 lc i notitle
}
unset multiplot
set terminal pngcairo size 1200,560 font "sans,9" noenhanced
set output "$img/simulate_schedules_n.png"
set multiplot layout 1,2 title "All-reduce time against message size (points: simulated; lines: model)"
set xlabel "bytes"
do for [p in "16 256"] {
  set title sprintf("p = %s", p)
  plot for [i=1:5] sprintf("n_%s_%s.tsv", p, word(S, i)) using 1:2 with linespoints pt 7 ps 0.8 lc i title word(S, i), \
    for [i=1:5] sprintf("n_%s_%s.tsv", p, word(S, i)) using 1:3 with lines dt 2 lc i notitle
}
unset multiplot
unset logscale y
set logscale x 2
set terminal pngcairo size 1000,600 font "sans,10" noenhanced
set output "$img/simulate_reproductions.png"
set title "Scaling efficiency in the simulator against the published ~90% (Goyal) and ~88% (Horovod)"
set xlabel "GPUs"
set ylabel "efficiency (%)"
set yrange [75:101]
set key bottom left
plot "goyal.tsv" using 1:2 with linespoints pt 7 lc 1 title "ResNet-50, Goyal et al. setup, overlapped", \
     "goyal_nooverlap.tsv" using 1:2 with linespoints pt 6 dt 2 lc 1 title "  not overlapped", \
     "horovod_resnet101.tsv" using 1:2 with linespoints pt 7 lc 2 title "ResNet-101, Horovod setup, overlapped", \
     "horovod_resnet101_nooverlap.tsv" using 1:2 with linespoints pt 6 dt 2 lc 2 title "  not overlapped", \
     "horovod_inception_v3.tsv" using 1:2 with linespoints pt 7 lc 3 title "Inception V3, Horovod setup, overlapped", \
     "horovod_inception_v3_nooverlap.tsv" using 1:2 with linespoints pt 6 dt 2 lc 3 title "  not overlapped", \
     90 with lines lc 1 dt 3 title "Goyal et al.: ~90% at 256", 88 with lines lc 2 dt 3 title "Horovod: ~88% at 128"
unset logscale
set autoscale y
set yrange [0:*]
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -30
set key top right
set output "$img/simulate_compressors.png"
set title "ResNet-50 step on 16 ranks (2 machines of 8, 100 ms of compute): step time by compressor"
set xlabel ""
set ylabel "step time (ms)"
plot "codecs.tsv" using 3:xtic(2) title "10 Gbit/s", "" using 4 title "100 Gbit/s"
set output "$img/simulate_stragglers.png"
set yrange [0:150]
set key top left
set title "Rank 0's step time, 1M parameters, 50 ms compute, 10 Gbit/s: all ranks even, or the last 2x slower"
plot "stragglers.tsv" using 3:xtic(2) title "p = 64, even", "" using 4 title "p = 64, straggler", \
     "" using 5 title "p = 256, even", "" using 6 title "p = 256, straggler"
EOF
echo "simulate_study: figures in $img/simulate_*.png"
