#!/usr/bin/env python3
"""MLX as the peer of `kiln bench`: every drill MLX has an op for, same drill,
name, dtype and shape as Kiln's row (drill/name/dtype/AxBxC), on MLX's CPU
(the mlx[cpu] wheel) or its GPU (the mlx + mlx-cuda wheels).

Two ways to run it:

    kiln bench --mlx                 # kiln starts this script with --serve and asks
                                     # for each row right after timing its own side
    python3 bench/peers/mlx_peers.py --json mlx.json --device gpu D2/rms_norm/bfloat16/4096x4096 ...
    kiln bench --device gpu --peers mlx.json

--serve reads one JSON request per line on stdin, {"key": KEY, "reps": R,
"budget_s": S}, and answers one line on stdout, {"time_us": T} or
{"time_us": null, "why": ...}; its first line is {"mlx": VERSION, "device": D}.

Timing is Kiln's (tools/kiln/bench_runner.cpp, time_median): one run = build
the op on the inputs and mx.eval it, the previous output dropped first; warm-up
runs until 50 ms have passed (at most 5), then up to R runs within S seconds;
the median (a first run longer than S is the time). kiln bench gives a row at
most 60 s here (or 4 S) and restarts this process when MLX takes longer. On
the GPU, input sets rotate so that together they exceed the 50 MB L2 (Kiln's
GPU rows do the same). MLX at its best: fused rows go through
mx.compile; the quantized rows use MLX's own formats at the nearest settings
(llama.cpp's Q4_0 / Q8_0 blocks are what MLX's GGUF loader turns into affine
4- / 8-bit with group 32; MLX has no K-quant product, so those rows get none).
"""
import argparse
import gc
import json
import math
import statistics
import sys
import time

try:
    import mlx.core as mx
except ImportError:
    sys.exit("mlx_peers.py: mlx is not installed (pip install mlx[cpu], or mlx + mlx-cuda on a GPU)")

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16, "tf32": mx.float32}
GPU = False


def rand(shape, dtype, lo=-1.0, hi=1.0, seed=0):
    a = mx.random.uniform(lo, hi, shape, key=mx.random.key(seed)).astype(dtype)
    mx.eval(a)
    return a


def gelu_tanh(x):
    return 0.5 * x * (1.0 + mx.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def add_gelu(x, z):
    return gelu_tanh(x + z)


_add_gelu_compiled = mx.compile(add_gelu)


def chain(x):
    """The HOST rows: 1,000 small ops (multiply, add, tanh) on one vector."""
    for i in range(1000):
        x = x * 0.999 if i % 3 == 0 else x + 0.001 if i % 3 == 1 else mx.tanh(x)
    return x


_chain_compiled = mx.compile(chain)


def _quantized(mode, bits, group):
    """(make, fn) for a quantized product: x [m, k] against weights [n, k]."""
    def make(dt, shape):
        m, k, n = shape if len(shape) == 3 else (1, *shape)
        w = rand([n, k], mx.bfloat16, -0.05, 0.05, 31)
        if mode == "affine":
            q = mx.quantize(w, group_size=group, bits=bits)
        else:
            q = mx.quantize(w, mode=mode)
        mx.eval(*q)
        x = rand([m, k], dt, -1, 1, 32)
        return [x, *q]

    def fn(x, wq, s, b=None):
        if mode == "affine":
            return mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=group, bits=bits)
        return mx.quantized_matmul(x, wq, s, transpose=True, mode=mode)
    return make, fn


def _sdpa(causal):
    def make(dt, shape):
        if len(shape) == 4 and shape[0] == 1:  # prefill [1, heads, seq, d]
            _, h, s, d = shape
            return [rand([1, h, s, d], dt, seed=i) for i in range(3)]
        hq, hkv, kv, d = shape                  # decode [heads, kv_heads, kv, d]
        return [rand([1, hq, 1, d], dt, seed=1), rand([1, hkv, kv, d], dt, seed=2), rand([1, hkv, kv, d], dt, seed=3)]

    def fn(q, k, v):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5,
                                                    mask="causal" if causal else None)
    return make, fn


def _decoder_layer():
    """D5 decoder_layer [hidden, intermediate, heads, kv_heads, kv]: one decode step (position kv - 1)
    of one Llama layer in bf16 with embedding and logits over a 256-word vocabulary, as an MLX user
    writes it (mlx-lm's shape: the K/V cache updated by slice assignment, mx.fast ops)."""
    def make(dt, shape):
        h, inter, heads, kv_heads, kv = shape
        hd, vocab = 128, 256

        def w(o, i, seed):
            return (mx.random.normal([o, i], key=mx.random.key(seed)) * 0.02).astype(dt)
        ws = [w(vocab, h, 1), w(heads * hd, h, 2), w(kv_heads * hd, h, 3), w(kv_heads * hd, h, 4),
              w(h, heads * hd, 5), w(inter, h, 6), w(inter, h, 7), w(h, inter, 8), w(vocab, h, 9)]
        norms = [mx.ones([h], dt) for _ in range(3)]
        caches = [rand([1, kv_heads, kv, hd], dt, seed=10), rand([1, kv_heads, kv, hd], dt, seed=11)]
        mx.eval(*ws, *norms)
        return ws + norms + caches

    def fn(embed, wq, wk, wv, wo, wg, wu, wd, wlm, n1, n2, n3, kc, vc):
        hd = kc.shape[-1]
        heads, kv_heads, pos = wq.shape[0] // hd, wk.shape[0] // hd, kc.shape[2] - 1
        x = embed[7].reshape(1, 1, -1)
        hn = mx.fast.rms_norm(x, n1, 1e-5)
        q = (hn @ wq.T).reshape(1, 1, heads, hd).transpose(0, 2, 1, 3)
        k = (hn @ wk.T).reshape(1, 1, kv_heads, hd).transpose(0, 2, 1, 3)
        v = (hn @ wv.T).reshape(1, 1, kv_heads, hd).transpose(0, 2, 1, 3)
        q = mx.fast.rope(q, hd, traditional=False, base=500000.0, scale=1.0, offset=pos)
        k = mx.fast.rope(k, hd, traditional=False, base=500000.0, scale=1.0, offset=pos)
        kc[:, :, pos:pos + 1, :] = k
        vc[:, :, pos:pos + 1, :] = v
        a = mx.fast.scaled_dot_product_attention(q, kc, vc, scale=hd ** -0.5)
        x = x + a.transpose(0, 2, 1, 3).reshape(1, 1, -1) @ wo.T
        hn = mx.fast.rms_norm(x, n2, 1e-5)
        g = hn @ wg.T
        x = x + ((g * mx.sigmoid(g)) * (hn @ wu.T)) @ wd.T
        return (mx.fast.rms_norm(x, n3, 1e-5) @ wlm.T).astype(mx.float32)
    return make, fn


def _two(shape_a, shape_b):
    return lambda dt, s: [rand(shape_a(s), dt, seed=1), rand(shape_b(s), dt, seed=2)]


def _one(lo=-1.0, hi=1.0):
    return lambda dt, s: [rand(s, dt, lo, hi, seed=1)]


# name -> (make(dtype, shape) -> inputs, fn(*inputs) -> output)
DRILLS = {
    # MLX's Python API has no copy op (mx.contiguous of a contiguous array is
    # the array itself); x + 0 reads and writes the same bytes.
    "copy": (_one(), lambda x: x + 0),
    "add": (_two(lambda s: s, lambda s: s), mx.add),
    "add_gelu_two_ops": (_two(lambda s: s, lambda s: s), add_gelu),
    "add_gelu_fused": (_two(lambda s: s, lambda s: s), _add_gelu_compiled),
    "add_gelu_fused_cpu_kernel": (_two(lambda s: s, lambda s: s), _add_gelu_compiled),
    "add_gelu_fused_interp": (_two(lambda s: s, lambda s: s), _add_gelu_compiled),
    "add_gelu_fused_codegen": (_two(lambda s: s, lambda s: s), _add_gelu_compiled),
    "broadcast_add": (_two(lambda s: s, lambda s: s[1:]), mx.add),
    "strided_add": (_two(lambda s: s, lambda s: s), lambda x, z: x + z.T),
    "transpose": (_one(), lambda x: mx.contiguous(x.T)),
    "concatenate": (_two(lambda s: [s[0], s[1] // 2], lambda s: [s[0], s[1] - s[1] // 2]),
                    lambda x, z: mx.concatenate([x, z], axis=1)),
    "row_sum": (_one(), lambda x: mx.sum(x, axis=-1)),
    "row_sum_cpu_kernel": (_one(), lambda x: mx.sum(x, axis=-1)),
    "add_gelu_fused_cuda_kernel": (_two(lambda s: s, lambda s: s), _add_gelu_compiled),
    "row_sum_cuda_kernel": (_one(), lambda x: mx.sum(x, axis=-1)),
    "row_max": (_one(), lambda x: mx.max(x, axis=-1)),
    "col_sum": (_one(), lambda x: mx.sum(x, axis=0)),
    "sum_all": (_one(), lambda x: mx.sum(x)),
    "softmax": (_one(-3, 3), lambda x: mx.softmax(x, axis=-1, precise=x.dtype != mx.float32)),
    "rms_norm": (lambda dt, s: [rand(s, dt, -3, 3, 1), rand(s[-1:], dt, 0.5, 1.5, 2)],
                 lambda x, w: mx.fast.rms_norm(x, w, 1e-5)),
    "layer_norm": (lambda dt, s: [rand(s, dt, -3, 3, 1), rand(s[-1:], dt, 0.5, 1.5, 2), rand(s[-1:], dt, seed=3)],
                   lambda x, w, b: mx.fast.layer_norm(x, w, b, 1e-5)),
    "rope": (_one(-3, 3), lambda x: mx.fast.rope(x, x.shape[-1], traditional=False, base=10000.0, scale=1.0,
                                                  offset=0)),
    # D3 / D5 products: [m, k, n] (CPU matvec rows: [k, n] with x [1, k])
    "sgemm": (_two(lambda s: s[:2], lambda s: s[1:]), mx.matmul),
    "bf16_gemm": (_two(lambda s: s[:2], lambda s: s[1:]), mx.matmul),
    "matmul": (_two(lambda s: s[:2], lambda s: s[1:]), mx.matmul),
    "sgemv": (_two(lambda s: [1, s[0]], lambda s: s), mx.matmul),
    "bf16_gemv": (_two(lambda s: [1, s[0]], lambda s: s), mx.matmul),
    # GPU gemv rows: a linear layer, weights [n, k]
    "gemv": (lambda dt, s: [rand(s[:2], dt, seed=1), rand([s[2], s[1]], dt, -0.05, 0.05, 2)],
             lambda x, w: x @ w.T),
    # conv2d_3x3 [batch, h, w, c_in, c_out], NHWC, weights [c_out, 3, 3, c_in]
    "conv2d_3x3": (lambda dt, s: [rand(s[:4], dt, seed=1), rand([s[4], 3, 3, s[3]], dt, seed=2)],
                   lambda x, w: mx.conv2d(x, w, stride=1, padding=1)),
    "chain_eager": (lambda dt, s: [rand(s[1:], dt, seed=5)], chain),
    "chain_compiled": (lambda dt, s: [rand(s[1:], dt, seed=5)], _chain_compiled),
    "decoder_layer": _decoder_layer(),
    "sdpa_prefill": _sdpa(False),
    "sdpa_prefill_causal": _sdpa(True),
    "sdpa_decode_gqa": _sdpa(False),
    "qmv_affine4": _quantized("affine", 4, 64),
    "qmv_affine8": _quantized("affine", 8, 64),
    "qmm_affine4": _quantized("affine", 4, 64),
    "qmv_mxfp4": _quantized("mxfp4", 4, 32),
    "qmv_mxfp8": _quantized("mxfp8", 8, 32),
    "qmv_q4_0": _quantized("affine", 4, 32),
    "qmv_q8_0": _quantized("affine", 8, 32),
    "qmm_q4_0": _quantized("affine", 4, 32),
    "qmm_q8_0": _quantized("affine", 8, 32),
}


def parse_key(key):
    drill, name, dtype, shape = key.split("/")
    return drill, name, dtype, [int(v) for v in shape.split("x")]


def input_bytes(inputs):
    return sum(a.nbytes for a in inputs)


def time_us(run, reps, budget_s):
    """Kiln's time_median: warm-up, then up to reps runs within the budget; the median."""
    def once():
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0
    last = warm = once()
    if last > budget_s:  # one run is over the budget: that run is the time
        return 1e6 * last
    for _ in range(4):
        if warm >= 0.05:
            break
        last = once()
        warm += last
    runs = min(max(int(budget_s / max(last, 1e-9)), 1), max(reps, 1))
    return statistics.median(1e6 * once() for _ in range(runs))


def measure(key, reps, budget_s):
    drill, name, dtype, shape = parse_key(key)
    if name not in DRILLS:
        return None, f"MLX has no peer for {name}"
    if dtype not in DTYPES:
        return None, f"no MLX dtype {dtype}"
    make, fn = DRILLS[name]
    dt = DTYPES[dtype]
    first = make(dt, shape)
    sets = [first]
    if GPU:  # rotate past the L2 as Kiln's GPU rows do
        per_set = max(input_bytes(first), 1)
        for _ in range(1, min(max(math.ceil(256e6 / per_set), 1), 8)):
            sets.append(make(dt, shape))
    state = {"i": 0, "out": None}

    def run():
        state["out"] = None
        inputs = sets[state["i"] % len(sets)]
        state["i"] += 1
        y = fn(*inputs)
        mx.eval(y)
        state["out"] = y

    try:
        t = time_us(run, reps, budget_s)
    finally:
        state["out"] = None
        del sets, first
        gc.collect()
        mx.clear_cache()
    return t, None


def serve():
    print(json.dumps({"mlx": mx.__version__, "device": "gpu" if GPU else "cpu"}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            t, why = measure(req["key"], int(req.get("reps", 10)), float(req.get("budget_s", 15.0)))
            ans = {"time_us": t} if t is not None else {"time_us": None, "why": why}
        except Exception as e:  # report it and serve the next row
            ans = {"time_us": None, "why": f"{type(e).__name__}: {e}"}
        print(json.dumps(ans), flush=True)


def main():
    global GPU
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("keys", nargs="*", help="rows to time, drill/name/dtype/shape (--json mode)")
    ap.add_argument("--serve", action="store_true", help="answer kiln bench's requests on stdin / stdout")
    ap.add_argument("--json", help="write the rows as a --peers file")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget", type=float, default=15.0)
    args = ap.parse_args()
    GPU = args.device == "gpu"
    mx.set_default_device(mx.gpu if GPU else mx.cpu)
    if args.serve:
        return serve()
    if not args.json:
        ap.error("give --serve, or --json FILE and the keys to time")
    rows = []
    for key in args.keys:
        t, why = measure(key, args.reps, args.budget)
        drill, name, dtype, shape = parse_key(key)
        print(f"{key:44s} mlx_{args.device} " + (f"{t:10.1f} us" if t is not None else why), flush=True)
        rows.append({"drill": drill, "name": name, "dtype": dtype, "shape": shape,
                     "peer": f"mlx_{args.device}", "time_us": t})
        with open(args.json, "w") as f:
            json.dump({"mlx": mx.__version__, "device": args.device, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
