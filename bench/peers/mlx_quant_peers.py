#!/usr/bin/env python3
"""MLX peers for the D4 rows of `kiln bench` (quantized products): the same
drill, name, dtype and shape as Kiln's rows, MLX's quantized_matmul on
affine-quantized weights (group 64, bfloat16 x / scales / biases, weights
in the [N, K] layout of a linear layer, transpose=True).

    python3 bench/peers/mlx_quant_peers.py --json mlx.json [--device cpu|gpu] [--quick] [--filter REGEX]
    kiln bench --filter D4 --peers mlx.json            # CPU rows
    kiln bench --device gpu --filter D4 --peers mlx.json

Timing: mx.eval of one product per run after warm-up, the median over runs
(about 0.5 s of runs per row) in microseconds. Input sets rotate so that
the weights do not sit in the cache between runs when one set would fit.
"""
import argparse
import json
import math
import re
import statistics
import time

import mlx.core as mx

GROUP = 64


def drills(quick):
    k, n = (1024, 2048) if quick else (4096, 14336)
    yield "qmv_affine4", 4, 1, k, n
    yield "qmv_affine8", 8, 1, k, n
    yield "qmm_affine4", 4, 64 if quick else 512, k, n


def time_us(fn, sets, budget_s=0.5):
    for i in range(sets):
        fn(i)
    times = []
    start = time.perf_counter()
    i = 0
    while len(times) < 5 or (time.perf_counter() - start < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        fn(i % sets)
        times.append(1e6 * (time.perf_counter() - t0))
        i += 1
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--filter", default="", help="regex over the drill name, e.g. qmv")
    args = ap.parse_args()
    mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
    rows = []
    for name, bits, m, k, n in drills(args.quick):
        if not re.search(args.filter, name):
            continue
        weight_bytes = n * k * bits / 8 + 2 * 2 * n * (k // GROUP)
        sets = min(max(math.ceil(256e6 / weight_bytes), 1), 8)
        weights = []
        for i in range(sets):
            mx.random.seed(42 + i)
            w = mx.random.uniform(-0.05, 0.05, (n, k)).astype(mx.bfloat16)
            q = mx.quantize(w, group_size=GROUP, bits=bits)
            mx.eval(*q)
            weights.append(q)
        x = mx.random.uniform(-1, 1, (m, k)).astype(mx.bfloat16)
        mx.eval(x)

        def run(i):
            wq, s, b = weights[i]
            mx.eval(mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=GROUP, bits=bits))

        t = time_us(run, sets)
        rows.append({"drill": "D4", "name": name, "dtype": "bfloat16", "shape": [m, k, n],
                     "peer": f"mlx_{args.device}_{mx.__version__}", "time_us": t})
        print(f"{name:12s} [{m}, {k}, {n}]  {t:10.1f} us  {weight_bytes / t / 1e3:8.1f} GB/s")
    with open(args.json, "w") as f:
        json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
