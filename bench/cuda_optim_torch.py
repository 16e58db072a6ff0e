#!/usr/bin/env python3
"""PyTorch's fused Adam (torch.optim.Adam(fused=True)) on ResNet-50's parameter tensors, next to a device-to-device
copy of the same number of floats, for comparison with hitch-bench-cuda-optim (bench/cuda_optim.cu).

    python3 bench/cuda_optim_torch.py [--repeats N]

Prints one JSON object per line, in hitch-bench-cuda-optim's form (impl "torch.adam" / "torch.adamw", mode "fused";
28 bytes per parameter; fraction of the copy's bandwidth). Without torch, or without a CUDA device, prints a line
saying so and exits 0.
"""
import argparse
import json
import sys


def resnet50_sizes():
    """(name, size, bias_or_norm) of ResNet-50's 161 tensors, as bench/resnet50.hpp lists them."""
    t = []

    def conv(name, cin, cout, k):
        t.append((name + ".weight", cout * cin * k * k, False))

    def bn(name, c):
        t.append((name + ".weight", c, True))
        t.append((name + ".bias", c, True))

    conv("conv1", 3, 64, 7)
    bn("bn1", 64)
    cin = 64
    for s, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        out = width * 4
        for b in range(blocks):
            p = "layer%d.%d" % (s + 1, b)
            conv(p + ".conv1", cin, width, 1)
            bn(p + ".bn1", width)
            conv(p + ".conv2", width, width, 3)
            bn(p + ".bn2", width)
            conv(p + ".conv3", width, out, 1)
            bn(p + ".bn3", out)
            if b == 0:
                conv(p + ".downsample.0", cin, out, 1)
                bn(p + ".downsample.1", out)
            cin = out
    t.append(("fc.weight", 1000 * 2048, False))
    t.append(("fc.bias", 1000, True))
    return t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print(json.dumps({"bench": "cuda_optim_torch", "skipped": "torch is not installed"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "cuda_optim_torch", "skipped": "no CUDA device"}))
        return 0

    dev = torch.device("cuda")
    tensors = resnet50_sizes()
    total = sum(n for _, n, _ in tensors)
    assert len(tensors) == 161 and total == 25557032, (len(tensors), total)
    gen = torch.Generator(device=dev).manual_seed(1)

    def median_ms(fn):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeats):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 10.0)
        times.sort()
        return times[len(times) // 2]

    src = torch.empty(total, device=dev)
    dst = torch.empty(total, device=dev)
    copy_ms = median_ms(lambda: dst.copy_(src))
    copy_gbs = 8.0 * total / (copy_ms * 1e6)
    name = torch.cuda.get_device_name(dev)

    for impl, make in (("torch.adam", lambda p: torch.optim.Adam(p, lr=1e-4, weight_decay=1e-4, fused=True)),
                       ("torch.adamw", lambda p: torch.optim.AdamW(p, lr=1e-4, fused=True))):
        params = []
        for _, n, _ in tensors:
            p = torch.nn.Parameter((torch.rand(n, device=dev, generator=gen) - 0.5) * 0.1)
            p.grad = (torch.rand(n, device=dev, generator=gen) - 0.5) * 2e-3
            params.append(p)
        opt = make(params)
        ms = median_ms(opt.step)
        gbs = 28.0 * total / (ms * 1e6)
        print(json.dumps({"bench": "cuda_optim", "impl": impl, "mode": "fused", "device": name, "params": total,
                          "tensors": len(tensors), "median_ms": round(ms, 4), "GBs": round(gbs, 1),
                          "copy_GBs": round(copy_gbs, 1), "fraction": round(gbs / copy_gbs, 3),
                          "torch": torch.__version__}))
        del opt, params
    return 0


if __name__ == "__main__":
    sys.exit(main())
