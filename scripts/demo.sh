#!/usr/bin/env bash
# make demo: the end-to-end run on 2 MPI ranks.
set -euo pipefail
build="${1:-build}"
exec mpiexec -n 2 "$build/examples/hello/hitch-hello"
