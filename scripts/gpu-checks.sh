#!/usr/bin/env bash
# The GPU checks of docs/gpu.md in one run, for a machine with a GPU: every GPU test program (the MPI ones under
# mpiexec on 2 and 3 processes sharing the GPUs), then compute-sanitizer's memcheck and racecheck, one test case per
# run so that no program's longest case holds the others back, all in parallel until a deadline. Prints a line per
# run and a summary; the logs go to OUT (default /tmp/hitch-gpu-checks).
#
#   scripts/gpu-checks.sh [BIN] [SECONDS]
#
# BIN: a build directory (its tests/cuda is searched) or a folder holding the test programs (default: build);
# SECONDS: the deadline of the whole run (default 900). JOBS (default: the cores) runs at a time; TOOLS (default
# "memcheck racecheck") the sanitizer tools, "" for none; MPIEXEC (default mpiexec). A run still going at the
# deadline is stopped and reported as such: its log says how far it got.
set -uo pipefail
bin="${1:-build}"
seconds="${2:-900}"
jobs="${JOBS:-$(nproc)}"
tools="${TOOLS-memcheck racecheck}"
mpiexec="${MPIEXEC:-mpiexec}"
out="${OUT:-/tmp/hitch-gpu-checks}"
end=$(($(date +%s) + seconds))
[[ -d "$bin/tests/cuda" ]] && bin="$bin/tests/cuda"
mapfile -t programs < <(find "$bin" -type f -perm -u+x -name 'hitch_test_cuda_*' ! -name '*_host*' | sort)
if [[ ${#programs[@]} -eq 0 ]]; then
  echo "gpu-checks: no hitch_test_cuda_* programs under $bin (build them: make test, or cmake --build with CUDA)" >&2
  exit 2
fi
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)"
if [[ -n "$tools" && -z "$sanitizer" ]]; then
  echo "gpu-checks: compute-sanitizer not found; the sanitizer runs are left out" >&2
  tools=""
fi
rm -rf "$out" && mkdir -p "$out"
nvidia-smi -L > "$out/gpus.txt" 2>&1 || echo "gpu-checks: nvidia-smi failed (no GPU?)" >&2

# One line per run: a name, then the command. The MPI programs: 2 and 3 processes, except cuda::nccl's (2).
{
  for p in "${programs[@]}"; do
    name="$(basename "$p")"
    case "$name" in
      hitch_test_cuda_nccl_mpi) echo "$name.np2 $mpiexec -n 2 $p" ;;
      *_mpi) echo "$name.np2 $mpiexec -n 2 $p"; echo "$name.np3 $mpiexec -n 3 $p" ;;
      *) echo "$name $p" ;;
    esac
  done
  for tool in $tools; do
    for p in "${programs[@]}"; do
      name="$(basename "$p")"
      [[ "$name" == *_mpi || "$name" == hitch_test_cuda_nccl_multi ]] && continue
      cases="$("$p" --list-test-names-only 2>/dev/null)"
      (($? == 77)) && continue  # no GPU: nothing to list (Catch2 exits with the count of the cases it lists)
      i=0
      while IFS= read -r case_name; do
        [[ -z "$case_name" ]] && continue
        i=$((i + 1))
        printf '%s\n' "$tool.$name.$i $sanitizer --tool $tool --error-exitcode 1 $p \"$(printf '%s' "$case_name" |
          sed 's/[][*\\,"]/\\&/g')\""
      done < <(printf '%s\n' "$cases" | sed 's/^ *//')
    done
  done
} > "$out/runs.txt"

run_one() {
  local name="$1"
  shift
  local left=$((end - $(date +%s)))
  if ((left < 5)); then
    echo "$name: not started (deadline)" | tee -a "$out/summary.txt"
    return
  fi
  local t0
  t0=$(date +%s)
  HITCH_TIMEOUT_S="${HITCH_TIMEOUT_S:-60}" timeout -k 5 "$((left - 2))" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local what="passed"
  ((rc == 77)) && what="skipped (no GPU)"
  ((rc == 124 || rc == 137)) && what="stopped at the deadline"
  ((rc != 0 && rc != 77 && rc != 124 && rc != 137)) && what="FAILED (exit $rc)"
  echo "$name: $what, $(($(date +%s) - t0)) s" | tee -a "$out/summary.txt"
}
export -f run_one
export end out
# The tests first (xargs keeps their order), the sanitizer runs after them.
while IFS= read -r line; do
  printf '%s\0' "$line"
done < "$out/runs.txt" | xargs -0 -P "$jobs" -I{} bash -c 'run_one {}'

echo "== summary ($out/summary.txt)"
for w in passed "skipped (no GPU)" "stopped at the deadline" FAILED "not started"; do
  echo "$w: $(grep -c ": $w" "$out/summary.txt")"
done
grep -l -E "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$out"/*.log 2>/dev/null | sed 's/^/sanitizer reports: /'
! grep -q -E ": (FAILED|stopped)" "$out/summary.txt"
