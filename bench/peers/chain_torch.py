#!/usr/bin/env python3
"""PyTorch eager on the chain of `kiln bench`'s HOST rows: 1,000 small ops
(multiply, add, tanh) on a fp32 vector, wall time per op until the result is
ready (torch.cuda.synchronize), median over repetitions. Also the same chain
replayed through a torch CUDA graph, for reference.

    python3 bench/peers/chain_torch.py [ops=1000] [elements=1024] [reps=20]
"""
import statistics
import sys
import time

import torch


def chain(x, ops):
    for i in range(ops):
        r = i % 3
        if r == 0:
            x = x * 0.999
        elif r == 1:
            x = x + 0.001
        else:
            x = torch.tanh(x)
    return x


def main():
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    x = torch.rand(n, device="cuda", dtype=torch.float32)
    chain(x, ops)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        chain(x, ops)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    eager = statistics.median(times) * 1e6 / ops
    print(f"torch eager  chain of {ops} ops on {n} fp32: {eager:.2f} us/op (torch {torch.__version__})")

    g = torch.cuda.CUDAGraph()
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        chain(static_x, ops)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        chain(static_x, ops)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    print(f"torch graph  replay of the same chain: {statistics.median(times) * 1e6 / ops:.2f} us/op")


if __name__ == "__main__":
    main()
