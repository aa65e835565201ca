#!/usr/bin/env python3
"""MLX peer of `kiln bench`'s D5 attention rows on the CPU: the same shapes
as tools/kiln/bench_drills_attention.cpp, timed as the median of `--reps`
runs of mx.fast.scaled_dot_product_attention (after a warm-up), with the
same accounting (causal FLOPs counted as half; decode as K/V bytes read).

    python3 bench/peers/mlx_sdpa.py [--quick] [--device cpu|gpu] [--reps 5]
"""
import argparse
import statistics
import time

import mlx.core as mx


def rows(quick):
    seq, heads = (256, 2) if quick else (1024, 8)
    for name, causal in (("sdpa_prefill_causal", True), ("sdpa_prefill", False)):
        flops = 4.0 * heads * seq * seq * 128 * (0.5 if causal else 1.0)
        yield name, [1, heads, seq, 128], (heads, heads, seq, seq), causal, 0.0, flops
    for kv in ((512, 2048) if quick else (4096, 32768)):
        yield "sdpa_decode_gqa", [32, 8, kv, 128], (32, 8, 1, kv), False, 2.0 * (2 * 8 * kv * 128 + 2 * 32 * 128), 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    for name, shape, (hq, hkv, lq, lk), causal, nbytes, flops in rows(args.quick):
        q = mx.random.uniform(-1, 1, (1, hq, lq, 128)).astype(mx.bfloat16)
        k = mx.random.uniform(-1, 1, (1, hkv, lk, 128)).astype(mx.bfloat16)
        v = mx.random.uniform(-1, 1, (1, hkv, lk, 128)).astype(mx.bfloat16)
        mx.eval(q, k, v)
        mask = "causal" if causal else None

        def run():
            mx.eval(mx.fast.scaled_dot_product_attention(q, k, v, scale=128 ** -0.5, mask=mask))

        run()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        rate = f"{nbytes / t / 1e9:8.2f} GB/s" if nbytes else f"{flops / t / 1e9:8.2f} GFLOP/s"
        print(f"D5/{name}/bfloat16/{'x'.join(map(str, shape)):18s} mlx {1e6 * t:12.1f} us  {rate}", flush=True)


if __name__ == "__main__":
    main()
