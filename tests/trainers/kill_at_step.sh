#!/bin/bash
# kill_at_step.sh METRICS STEP COMMAND...: runs COMMAND (an mpiexec and its ranks) and ends it and every process
# under it at once with SIGKILL, as a machine that loses power would, once METRICS has the line of step STEP.
# Exit status 0 when it was killed there, 1 when the command ended first or step STEP never came (5 minutes).
metrics=$1
step=$2
shift 2
# Every process under $1 (mpiexec, its proxy and the ranks, which the proxy puts in process groups of their own).
tree() {
  echo "$1"
  for child in $(ps -o pid= --ppid "$1"); do tree "$child"; done
}
kill_tree() {
  kill -9 $(tree "$1") 2>/dev/null
}
"$@" &
pid=$!
for _ in $(seq 1 6000); do
  if grep -q "^{\"step\":$step," "$metrics" 2>/dev/null; then
    kill_tree "$pid"
    wait "$pid" 2>/dev/null
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "kill_at_step: the command ended before step $step" >&2
    exit 1
  fi
  sleep 0.02
done
kill_tree "$pid"
echo "kill_at_step: no step $step in $metrics after 5 minutes" >&2
exit 1
