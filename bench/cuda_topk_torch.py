#!/usr/bin/env python3
"""torch.topk of |v| on the GPU for comparison with hitch-bench-cuda-topk (bench/cuda_topk.cu): the same bucket size,
density and kind of values, timed the same way (median over repeats of the mean of 10 calls, CUDA events).

    python3 bench/cuda_topk_torch.py [--n N] [--density D] [--repeats R]

Prints one JSON object per line in hitch-bench-cuda-topk's form ("kind":"select", "impl":"torch.topk", and
"torch.sort" for a full torch.sort of |v|). Without torch, or without a CUDA device, prints a line saying so and
exits 0.
"""
import argparse
import json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=25_000_000)
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print(json.dumps({"bench": "cuda_topk_torch", "skipped": "torch is not installed"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "cuda_topk_torch", "skipped": "no CUDA device"}))
        return 0
    n = args.n
    k = max(1, min(n, round(args.density * n)))
    gen = torch.Generator(device="cuda").manual_seed(7)
    # Gradient-like values as hitch-bench-cuda-topk makes them: mostly small, 1% twenty times larger, 2% zeros.
    a = torch.rand(n, device="cuda", generator=gen) - 0.5
    b = torch.rand(n, device="cuda", generator=gen)
    c = torch.rand(n, device="cuda", generator=gen)
    v = 2e-3 * a * (1.0 + a * a * 8.0) * torch.where(b < 0.01, 20.0, 1.0)
    v = torch.where(c < 0.02, torch.zeros_like(v), v)

    def time_ms(f):
        f()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(args.repeats):
            start.record()
            for _ in range(10):
                f()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 10.0)
        times.sort()
        return times[len(times) // 2]

    name = torch.cuda.get_device_name()
    for impl, f in (("torch.topk", lambda: torch.topk(v.abs(), k, sorted=False)),
                    ("torch.sort", lambda: torch.sort(v.abs(), descending=True))):
        print(json.dumps({"bench": "cuda_topk", "kind": "select", "impl": impl, "device": name, "n": n, "k": k,
                          "median_ms": round(time_ms(f), 4), "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
