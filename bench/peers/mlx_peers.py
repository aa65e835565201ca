#!/usr/bin/env python3
"""MLX peers of `kiln bench`'s D2 fast-op rows (rms_norm, layer_norm, rope; fp32 and bf16):
mx.fast.* on MLX's default device (the CPU with the mlx[cpu] wheel, the GPU with mlx-cuda),
same drill, name, dtype and shape as Kiln's rows, JSON rows like gpu_peers.py's
(peer "mlx_cpu" or "mlx_gpu").

    python3 bench/peers/mlx_peers.py --json mlx_peers.json [--filter REGEX] [--quick] [--device cpu|gpu]
    kiln bench --device gpu --peers mlx_peers.json     # joins the GPU rows

Timing: a warm-up, then rounds of back-to-back evaluations (about 0.2 s a round),
the median of the rounds' mean time per run. The output of a run is dropped before
the next, so MLX can reuse its buffers as it would in a loop of real work.
"""
import argparse
import json
import re
import statistics
import sys
import time

try:
    import mlx.core as mx
except ImportError:
    sys.exit("mlx_peers.py: mlx is not installed (pip install mlx[cpu], or mlx + mlx-cuda on a GPU)")


def time_us(fn, rounds=7):
    mx.eval(fn())
    t0 = time.perf_counter()
    mx.eval(fn())
    once = max(time.perf_counter() - t0, 1e-6)
    runs = min(max(int(0.2 / once), 1), 2000)
    per_run = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(runs):
            mx.eval(fn())
        per_run.append(1e6 * (time.perf_counter() - t0) / runs)
    return statistics.median(per_run)


def rand(shape, dtype, lo=-3.0, hi=3.0, seed=0):
    a = mx.random.uniform(lo, hi, shape, key=mx.random.key(seed)).astype(dtype)
    mx.eval(a)
    return a


def drills(quick):
    side = 1024 if quick else 4096
    pos = side * side // (32 * 128)
    out = []
    for name, dt in (("float32", mx.float32), ("bfloat16", mx.bfloat16)):
        x = lambda dt=dt: rand([side, side], dt, seed=1)
        out.append(("D2", "rms_norm", name, [side, side],
                    lambda dt=dt, x=x: (x(), rand([side], dt, 0.5, 1.5, 2)),
                    lambda x, w: mx.fast.rms_norm(x, w, 1e-5)))
        out.append(("D2", "layer_norm", name, [side, side],
                    lambda dt=dt, x=x: (x(), rand([side], dt, 0.5, 1.5, 3), rand([side], dt, seed=4)),
                    lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5)))
        out.append(("D2", "rope", name, [1, 32, pos, 128],
                    lambda dt=dt: (rand([1, 32, pos, 128], dt, seed=5),),
                    lambda x: mx.fast.rope(x, 128, traditional=False, base=10000.0, scale=1.0, offset=0)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True)
    ap.add_argument("--filter", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", choices=["cpu", "gpu"], default=None)
    args = ap.parse_args()
    if args.device:
        mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    device = "gpu" if mx.default_device() == mx.gpu else "cpu"
    flt = re.compile(args.filter or ".*")
    rows = []
    for drill, name, dt, shape, make, fn in drills(args.quick):
        key = f"{drill}/{name}/{dt}/{'x'.join(map(str, shape))}"
        if not flt.search(key):
            continue
        inputs = make()
        us = time_us(lambda: fn(*inputs))
        bytes_moved = 2 * inputs[0].nbytes
        rows.append({"drill": drill, "name": name, "dtype": dt, "shape": shape, "peer": f"mlx_{device}",
                     "time_us": us})
        print(f"{key:40s} mlx_{device} {us:10.1f} us  {bytes_moved / us / 1e3:7.1f} GB/s", flush=True)
        with open(args.json, "w") as f:
            json.dump({"mlx": mx.__version__, "device": device, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
