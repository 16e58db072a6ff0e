#!/usr/bin/env python3
"""automatic against the fastest impl, per size, from hitch-bench-allreduce --json runs (one file per run):

    python3 bench/allreduce_ratios.py run1.jsonl run2.jsonl run3.jsonl

For each run and size: automatic / fastest (the fastest impl's median time over automatic's; 1.00 when automatic is
the fastest, the bound left out); native (hitch's wrapper of MPI's all-reduce) against mpi_allreduce (the benchmark
calling MPI_Allreduce), the faster over the slower: with the agreement check off, as the benchmark runs hitch's
schedules, native cannot know that every rank entered the call and polls MPI_Iallreduce against its deadline, which
MPICH runs with other algorithms, so this is not the same call twice; and for a run with --twin NAME the schedule
measured twice (NAME and NAME_twin), the faster over the slower: the resolution of the run's figures (the twin is
not counted among the impls automatic is compared with). Then how many sizes are within --within of the fastest in
every run.
"""
import argparse
import collections
import json


def read(path):
    by_size = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if row.get("bench") == "allreduce":
                by_size[row["bytes"]][row["impl"]] = row["median_us"]
    return by_size


def label(size):
    return f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--within", type=float, default=0.10, help="the target's margin (default 0.10)")
    args = parser.parse_args()
    met = collections.Counter()
    sizes = set()
    for path in args.runs:
        by_size = read(path)
        ratios, noise, twins = [], [], []
        for size in sorted(by_size):
            impls = by_size[size]
            sizes.add(size)
            timed = {k: v for k, v in impls.items() if k != "bound" and not k.endswith("_twin")}
            for k, v in impls.items():
                a = impls.get(k.removesuffix("_twin")) if k.endswith("_twin") else None
                if a is not None:
                    twins.append(f"{label(size)} {min(a, v) / max(a, v):.2f}")
            if "automatic" not in timed:
                ratios.append(f"{label(size)} -")
                continue
            fastest = min(timed, key=timed.get)
            ratio = timed[fastest] / timed["automatic"]
            met[size] += ratio >= 1 - args.within
            ratios.append(f"{label(size)} {ratio:.2f}" + ("" if fastest == "automatic" else f" ({fastest})"))
            if "native" in impls and "mpi_allreduce" in impls:
                a, b = impls["native"], impls["mpi_allreduce"]
                noise.append(f"{label(size)} {min(a, b) / max(a, b):.2f}")
        print(f"{path}: automatic / fastest: " + "; ".join(ratios))
        if noise:
            print(f"{path}: native (MPI_Iallreduce) vs mpi_allreduce: " + "; ".join(noise))
        if twins:
            print(f"{path}: resolution (a schedule vs its twin): " + "; ".join(twins))
    runs = len(args.runs)
    every = [s for s in sorted(sizes) if met[s] == runs]
    print(f"within {args.within:.0%} of the fastest in all {runs} runs: {len(every)} of {len(sizes)} sizes")


if __name__ == "__main__":
    main()
