#!/bin/sh
# Runs the "[.small_shm]" case of hitch_test_allreduce_shm_faults on 2 ranks under a private /dev/shm of 24 MiB (a
# mount namespace of its own: the machine's /dev/shm is untouched). Exit 77 (skipped) where this process may not make
# one (not root, or no CAP_SYS_ADMIN).
# usage: run_small_shm.sh MPIEXEC PROGRAM
unshare -m sh -c 'mount -t tmpfs -o size=24m tmpfs /dev/shm' 2>/dev/null || { echo "no private /dev/shm here: skipped"; exit 77; }
exec unshare -m sh -c "mount -t tmpfs -o size=24m tmpfs /dev/shm && exec \"$1\" -n 2 \"$2\" '[.small_shm]'"
