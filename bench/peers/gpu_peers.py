#!/usr/bin/env python3
"""GPU peers for `kiln bench --device gpu`: PyTorch eager, torch.compile and
small Triton kernels doing the same work as Kiln's GPU drills (same drill,
name, dtype and shape), timed the same way: CUDA events around back-to-back
runs (about 2 ms a round, input sets rotated where one set fits in the L2),
the median of the rounds' mean time per run.

    python3 bench/peers/gpu_peers.py --json peers.json [--filter REGEX] [--no-compile]
    kiln bench --device gpu --peers peers.json     # one table, fastest peer per row

torch.compile is timed on the bandwidth drills only (for a matmul it calls
the same cuBLAS as eager). The Triton peers are a fused add+GELU and a row
sum: the fused one shows what fusion gains over Kiln's two kernels.
"""
import argparse
import json
import math
import re
import statistics
import sys

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the peers then are torch alone
    triton = None


def time_us(fn_for_set, sets, rounds=7):
    """Median over rounds of the mean microseconds per run of fn_for_set(i)."""
    for i in range(sets):
        fn_for_set(i)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(sets):
        fn_for_set(i)
    stop.record()
    stop.synchronize()
    once_ms = max(start.elapsed_time(stop) / sets, 1e-4)
    runs = min(max(int(2.0 / once_ms), 1), 2000)
    runs = (max(runs, sets) + sets - 1) // sets * sets
    per_run = []
    for _ in range(rounds):
        start.record()
        for i in range(runs):
            fn_for_set(i % sets)
        stop.record()
        stop.synchronize()
        per_run.append(1e3 * start.elapsed_time(stop) / runs)
    return statistics.median(per_run)


def rotation_sets(bytes_per_set):
    return min(max(math.ceil(256e6 / bytes_per_set), 1), 8)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "tf32": torch.float32}


def rand(shape, dtype, lo=-3.0, hi=3.0):
    return torch.empty(shape, dtype=dtype, device="cuda").uniform_(lo, hi)


def set_tf32(on):
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):  # the newer API; mixing it with allow_tf32 is refused
        m.fp32_precision = "tf32" if on else "ieee"
    else:
        m.allow_tf32 = on
    # cuDNN convolutions default to tf32: the float32 conv2d rows must not.
    c = torch.backends.cudnn
    if hasattr(c, "conv") and hasattr(c.conv, "fp32_precision"):
        c.conv.fp32_precision = "tf32" if on else "ieee"
    else:
        c.allow_tf32 = on


def gelu_two(x, z):
    return torch.nn.functional.gelu(x + z, approximate="tanh")


if triton is not None:

    @triton.jit
    def _add_gelu_kernel(x_ptr, z_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        z = tl.load(z_ptr + offs, mask=mask).to(tl.float32)
        u = x + z
        inner = 0.7978845608028654 * (u + 0.044715 * u * u * u)
        t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0  # tanh
        tl.store(y_ptr + offs, (0.5 * u * (1.0 + t)).to(y_ptr.dtype.element_ty), mask=mask)

    def triton_add_gelu(x, z):
        y = torch.empty_like(x)
        n = x.numel()
        _add_gelu_kernel[(triton.cdiv(n, 4096),)](x, z, y, n, BLOCK=4096, num_warps=8)
        return y

    @triton.jit
    def _row_sum_kernel(x_ptr, y_ptr, rows, cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
        for c0 in range(0, cols, BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            mask = (r[:, None] < rows) & (c[None, :] < cols)
            acc += tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=mask, other=0.0)
        tl.store(y_ptr + r, tl.sum(acc, axis=1), mask=r < rows)

    def triton_row_sum(x):
        rows, cols = x.shape
        y = torch.empty(rows, dtype=x.dtype, device=x.device)
        block = min(triton.next_power_of_2(cols), 4096)
        row_block = max(1, min(64, 4096 // block))
        _row_sum_kernel[(triton.cdiv(rows, row_block),)](x, y, rows, cols, ROWS=row_block, BLOCK=block, num_warps=8)
        return y


def rope_tables(positions, dims, dtype, base=10000.0):
    """cos and sin of the rotation angles, [positions, dims] (each half repeated), as Hugging Face builds them."""
    inv = 1.0 / (base ** (torch.arange(0, dims, 2, device="cuda", dtype=torch.float32) / dims))
    theta = torch.outer(torch.arange(positions, device="cuda", dtype=torch.float32), inv)
    theta = torch.cat([theta, theta], -1)
    return [theta.cos().to(dtype), theta.sin().to(dtype)]


def rope_half_split(x, cos, sin):
    """The half-split rotary embedding in eager torch (no fused rope op exists): x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def decoder_layer_inputs(h, heads, kv_heads, inter, kv, vocab=256, hd=128):
    """A Llama layer's bf16 weights (std 0.02, norms 1), its K/V cache [1, kv_heads, kv, hd] and the
    rope row of position kv - 1: what Kiln's D5 decoder_layer row holds."""
    def w(o, i):
        return torch.randn(o, i, device="cuda", dtype=torch.bfloat16) * 0.02
    bf = torch.bfloat16
    weights = [w(vocab, h), w(heads * hd, h), w(kv_heads * hd, h), w(kv_heads * hd, h), w(h, heads * hd),
               w(inter, h), w(inter, h), w(h, inter), w(vocab, h)]
    norms = [torch.ones(h, device="cuda", dtype=bf) for _ in range(3)]
    cos, sin = rope_tables(kv, hd, bf, 500000.0)
    caches = [rand([1, kv_heads, kv, hd], bf, -1, 1), rand([1, kv_heads, kv, hd], bf, -1, 1)]
    return weights + norms + caches + [cos[kv - 1:kv], sin[kv - 1:kv]]


def decoder_layer(embed, wq, wk, wv, wo, wg, wu, wd, wlm, n1, n2, n3, kc, vc, cos, sin):
    """One decode step of one layer as an eager torch user writes it with a static KV cache (written in
    place), SDPA with enable_gqa, rms_norm, half-split rope."""
    F = torch.nn.functional
    hd = kc.shape[-1]
    heads, kv_heads, pos = wq.shape[0] // hd, wk.shape[0] // hd, kc.shape[2] - 1
    x = embed[7].view(1, 1, -1)
    n = (x.shape[-1],)
    hn = F.rms_norm(x, n, n1, 1e-5)
    q = rope_half_split(F.linear(hn, wq).view(1, 1, heads, hd).transpose(1, 2), cos, sin)
    k = rope_half_split(F.linear(hn, wk).view(1, 1, kv_heads, hd).transpose(1, 2), cos, sin)
    v = F.linear(hn, wv).view(1, 1, kv_heads, hd).transpose(1, 2)
    kc[:, :, pos:pos + 1] = k
    vc[:, :, pos:pos + 1] = v
    a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
    x = x + F.linear(a.transpose(1, 2).reshape(1, 1, -1), wo)
    hn = F.rms_norm(x, n, n2, 1e-5)
    x = x + F.linear(F.silu(F.linear(hn, wg)) * F.linear(hn, wu), wd)
    return F.linear(F.rms_norm(x, n, n3, 1e-5), wlm).float()


def drills(quick):
    """(drill, name, dtype, shape, make_inputs(), torch fn, triton fn or None, compile?)"""
    n = 1 << 20 if quick else 1 << 26
    side = 1024 if quick else 8192
    out = []
    out.append(("D1", "copy", "float32", [n], lambda: [rand([n], torch.float32)], lambda x: x.clone(), None, True))
    for dt in ("float32", "bfloat16"):
        t = DTYPES[dt]
        out.append(("D1", "add", dt, [n], lambda t=t: [rand([n], t), rand([n], t)], torch.add, None, True))
        out.append(("D1", "add_gelu_two_ops", dt, [n], lambda t=t: [rand([n], t), rand([n], t)], gelu_two,
                    triton_add_gelu if triton else None, True))
    out.append(("DM", "broadcast_add", "float32", [side, side],
                lambda: [rand([side, side], torch.float32), rand([side], torch.float32)], torch.add, None, True))
    out.append(("DM", "strided_add", "float32", [side, side],
                lambda: [rand([side, side], torch.float32), rand([side, side], torch.float32)],
                lambda x, z: x + z.t(), None, True))
    out.append(("DM", "transpose", "float32", [side, side], lambda: [rand([side, side], torch.float32)],
                lambda x: x.t().contiguous(), None, True))
    shapes = [(1024, 1024), (16384, 64), (16, 65536)] if quick else [(8192, 8192), (1 << 20, 64), (16, 1 << 22)]
    for m, k in shapes:
        out.append(("D2", "row_sum", "float32", [m, k], lambda m=m, k=k: [rand([m, k], torch.float32)],
                    lambda x: x.sum(-1), triton_row_sum if triton else None, True))
    sq = lambda: [rand([side, side], torch.float32)]
    out.append(("D2", "row_max", "float32", [side, side], sq, lambda x: x.amax(-1), None, True))
    out.append(("D2", "col_sum", "float32", [side, side], sq, lambda x: x.sum(0), None, True))
    out.append(("D2", "sum_all", "float32", [side, side], sq, lambda x: x.sum(), None, True))
    sm = 1024 if quick else 4096
    for dt in ("float32", "bfloat16"):
        out.append(("D2", "softmax", dt, [sm, sm], lambda t=DTYPES[dt]: [rand([sm, sm], t)],
                    lambda x: torch.softmax(x, -1), None, True))
    for dt in ("float32", "bfloat16"):
        t = DTYPES[dt]
        out.append(("D2", "rms_norm", dt, [sm, sm], lambda t=t: [rand([sm, sm], t), rand([sm], t)],
                    lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-5), None, True))
        out.append(("D2", "layer_norm", dt, [sm, sm], lambda t=t: [rand([sm, sm], t), rand([sm], t), rand([sm], t)],
                    lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5), None, True))
        pos = sm * sm // (32 * 128)
        out.append(("D2", "rope", dt, [1, 32, pos, 128], lambda t=t, pos=pos: [rand([1, 32, pos, 128], t)] +
                    rope_tables(pos, 128, t), rope_half_split, None, True))
    squares = [256, 512] if quick else [1024, 2048, 4096, 8192]
    for dt in ("bfloat16", "float16", "float32", "tf32"):
        t = DTYPES[dt]
        problems = [(s, s, s) for s in squares]
        for k, nn in ((4096, 4096), (4096, 14336)):
            for m in (1, 16, 128, 512):
                problems.append((m, k // 8 if quick else k, nn // 8 if quick else nn))
        for m, k, nn in problems:
            sets = rotation_sets(t.itemsize * (m * k + k * nn + m * nn))
            out.append(("D3", "matmul", dt, [m, k, nn],
                        lambda m=m, k=k, nn=nn, t=t, sets=sets: [[rand([m, k], t), rand([k, nn], t)] for _ in range(sets)],
                        torch.matmul, None, False))
    # D3 conv2d, a ResNet 3x3 layer: cuDNN on channels-last tensors (the
    # memory layout of Kiln's [N, H, W, C] operands).
    cn, chw = (2, 14) if quick else (32, 56)
    for dt in ("bfloat16", "float32"):
        t = DTYPES[dt]
        out.append(("D3", "conv2d_3x3", dt, [cn, chw, chw, 64, 64],
                    lambda t=t: [rand([cn, chw, chw, 64], t).permute(0, 3, 1, 2),
                                 rand([64, 3, 3, 64], t).permute(0, 3, 1, 2)],
                    lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), None, False))
    gemv_shapes = [(512, 512), (512, 1792)] if quick else [(4096, 4096), (4096, 14336), (8192, 8192)]
    for k, nn in gemv_shapes:
        for m in (1, 2, 4, 8):
            sets = rotation_sets(2 * (m * k + k * nn + m * nn))
            out.append(("D5", "gemv", "bfloat16", [m, k, nn],
                        lambda m=m, k=k, nn=nn, sets=sets: [[rand([m, k], torch.bfloat16),
                                                             rand([nn, k], torch.bfloat16, -0.05, 0.05)]
                                                            for _ in range(sets)],
                        torch.nn.functional.linear, None, False))
    # D5 attention: torch's SDPA (flash backend for bf16). Decode gives
    # torch K/V with 8 heads and enable_gqa=True: no expanded copy, the same
    # bytes Kiln reads (torch without GQA support expands K/V to 32 heads).
    seq, heads = (512, 8) if quick else (4096, 32)
    for name, causal in (("sdpa_prefill_causal", True), ("sdpa_prefill", False)):
        out.append(("D5", name, "bfloat16", [1, heads, seq, 128],
                    lambda: [rand([1, heads, seq, 128], torch.bfloat16, -1, 1) for _ in range(3)],
                    lambda q, k, v, causal=causal: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=causal), None, False))
    for kv in ((512, 2048) if quick else (4096, 32768)):
        sets = rotation_sets(2 * 2 * 8 * kv * 128)
        out.append(("D5", "sdpa_decode_gqa", "bfloat16", [32, 8, kv, 128],
                    lambda kv=kv, sets=sets: [[rand([1, 32, 1, 128], torch.bfloat16, -1, 1),
                                               rand([1, 8, kv, 128], torch.bfloat16, -1, 1),
                                               rand([1, 8, kv, 128], torch.bfloat16, -1, 1)] for _ in range(sets)],
                    lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                    None, False))
    # D5 decoder_layer: Kiln's row is one compiled decode step of a Llama-3-8B layer (kv 4096).
    dims = (1024, 8, 2, 2816, 512) if quick else (4096, 32, 8, 14336, 4096)
    out.append(("D5", "decoder_layer", "bfloat16", [dims[0], dims[3], dims[1], dims[2], dims[4]],
                lambda: decoder_layer_inputs(*dims), decoder_layer, None, True))
    # D4 fp8_gemm: torch._scaled_mm on e4m3 operands, bf16 out, b the
    # transposed view of a row-major [N, K] weight (the layout cuBLASLt's FP8
    # path takes); per-tensor scales, and 1x128 (a) / 128x128 (b) block
    # scales in the layouts torch wants (scale_a M-major, scale_b K-block
    # major). Kiln's rows: `kiln bench --device gpu` D4 fp8_gemm.
    fs = 1024 if quick else 8192
    fb = fs // 128
    if hasattr(torch, "float8_e4m3fn"):
        e4m3 = torch.float8_e4m3fn

        def fp8_set(block):
            a = rand([fs, fs], torch.float32, -1, 1).to(e4m3)
            b = rand([fs, fs], torch.float32, -1, 1).to(e4m3).t()
            if block:
                sa = rand([fb, fs], torch.float32, 0.5, 2).t()
                sb = rand([fb, fb], torch.float32, 0.5, 2).t()
            else:
                sa = torch.tensor(0.5, device="cuda")
                sb = torch.tensor(2.0, device="cuda")
            return [a, b, sa, sb]

        for label, block in (("e4m3_tensor", False), ("e4m3_block", True)):
            out.append(("D4", "fp8_gemm", label, [fs, fs, fs],
                        lambda block=block: [fp8_set(block) for _ in range(2)],
                        lambda a, b, sa, sb: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
                        None, False))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True)
    ap.add_argument("--filter", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (it compiles each drill first)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_peers.py: no CUDA GPU")
    flt = re.compile(args.filter or ".*")
    rows = []
    for drill, name, dt, shape, make, fn, tri, compiles in drills(args.quick):
        key = f"{drill}/{name}/{dt}/{'x'.join(map(str, shape))}"
        if not flt.search(key):
            continue
        set_tf32(dt == "tf32")
        inputs = make()
        sets = inputs if isinstance(inputs[0], list) else [inputs]
        peers = [("torch_eager", fn)]
        if compiles and not args.no_compile:
            peers.append(("torch_compile", torch.compile(fn, dynamic=False)))
        if tri is not None:
            peers.append(("triton", tri))
        times = {}
        for peer, f in peers:
            try:
                us = time_us(lambda i, f=f: f(*sets[i]), len(sets))
            except Exception as e:  # a peer that fails leaves its cell empty
                print(f"{key} {peer}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            times[peer] = us
            rows.append({"drill": drill, "name": name, "dtype": dt, "shape": shape, "peer": peer, "time_us": us})
        rate = ""
        if name == "fp8_gemm" and times:
            rate = f"  ({2.0 * shape[0] * shape[1] * shape[2] / min(times.values()) / 1e6:.1f} TFLOP/s)"
        print(f"{key:40s} " + "  ".join(f"{p} {t:9.1f} us" for p, t in times.items()) + rate, flush=True)
        del inputs, sets
        torch.cuda.empty_cache()
        # Rewritten after every drill: a run cut short still leaves its rows.
        doc = {"torch": torch.__version__, "triton": triton.__version__ if triton else None,
               "device": torch.cuda.get_device_name(), "rows": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    set_tf32(False)


if __name__ == "__main__":
    main()
