#!/usr/bin/env python3
"""The PyTorch DistributedDataParallel peer of hitch-mnist: the same MLP (784-512-256-10, He init), the same data
(Fashion-MNIST, normalised by the training set's mean and std), the same global batch split over the processes,
the same optimizer (SGD, momentum 0.9, weight decay 5e-4 on weights, cosine decay per step) and epochs, gloo
backend on CPU, one thread per process (as hitch-mnist's ranks use one BLAS thread each).

    python3 bench/ddp_mnist.py --ranks 2 --epochs 2 --batch-size 128

The last line is JSON with the same keys as hitch-mnist's (example "mnist-torch-ddp").
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir):
    def find(stem):
        for name in (stem + ".gz", stem):
            path = os.path.join(data_dir, name)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(os.path.join(data_dir, stem))
    x_train = read_idx(find("train-images-idx3-ubyte")).astype(np.float32) / 255.0
    y_train = read_idx(find("train-labels-idx1-ubyte")).astype(np.int64)
    x_test = read_idx(find("t10k-images-idx3-ubyte")).astype(np.float32) / 255.0
    y_test = read_idx(find("t10k-labels-idx1-ubyte")).astype(np.int64)
    mean, std = x_train.mean(), x_train.std()
    norm = lambda x: torch.from_numpy(((x - mean) / std).reshape(len(x), -1))
    return norm(x_train), torch.from_numpy(y_train), norm(x_test), torch.from_numpy(y_test)


def worker(rank, args, result):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load(args.data)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    ddp = DDP(model)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=args.lr, momentum=0.9)
    local_batch = args.batch_size // args.ranks
    shard = len(x_train) // args.ranks
    steps_per_epoch = math.ceil(shard / local_batch)
    total_steps = steps_per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))
    loss_fn = nn.CrossEntropyLoss()
    train_seconds = 0.0
    samples = 0
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed + epoch)
        perm = torch.randperm(len(x_train), generator=g)[rank * shard:(rank + 1) * shard]
        for first in range(0, shard, local_batch):
            idx = perm[first:first + local_batch]
            xb, yb = x_train[idx], y_train[idx]
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            train_seconds += time.perf_counter() - start
            samples += len(idx) * args.ranks
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    seconds = torch.tensor([train_seconds])
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if rank == 0:
        result.update(test_accuracy=accuracy, train_seconds=seconds.item(), samples=samples)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--port", type=int, default=29517)
    args = parser.parse_args()
    with mp.Manager() as manager:
        result = manager.dict()
        mp.spawn(worker, args=(args, result), nprocs=args.ranks, join=True)
        r = dict(result)
    print(json.dumps({"example": "mnist-torch-ddp", "model": "mlp", "ranks": args.ranks, "optimizer": "momentum",
                      "compressor": "none", "sync": "hard", "allreduce": "gloo", "epochs": args.epochs,
                      "batch_size": args.batch_size, "test_accuracy": r["test_accuracy"],
                      "train_seconds": r["train_seconds"], "samples_per_s": r["samples"] / r["train_seconds"]}))


if __name__ == "__main__":
    main()
