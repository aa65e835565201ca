#!/usr/bin/env python3
"""Writes tiny random-weight models of each architecture Kiln's LLM runtime
reads, with reference outputs, for tests/test_llm_oracle.cpp.

For each of llama (Llama 3 with "llama3" RoPE scaling, GQA), qwen2 (q/k/v
biases, tied embeddings) and qwen3 (q/k norms, head_dim != hidden/heads):
  OUT/ARCH/hf/            config.json + model.safetensors (float32)
  OUT/ARCH/TYPE.gguf      the same weights through gguf-py, TYPE in f32 f16 q8_0 q4_0
                          (Q/K rows permuted for llama as llama.cpp's converter does)
  OUT/ARCH/ref.json       mlx-lm's outputs: "prompt", "greedy" (32 ids at fp32),
                          "logits" (last prompt position of the HF model) and
                          "logits_TYPE" (the same for the GGUF weights dequantized)

Needs numpy, safetensors, gguf and mlx-lm with mlx[cpu]:
  pip install "mlx[cpu]" mlx-lm gguf safetensors numpy
Exit status 77 (and a message) when a package is missing.

Usage: make_models.py OUT
"""
import json
import os
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from safetensors.numpy import save_file
    if __name__ == "__main__":  # tests/llm/llama_cpp_ref.py imports the writers without mlx
        import mlx.core as mx
        from mlx_lm.utils import load_model
        from mlx_lm.models.cache import make_prompt_cache
except ImportError as e:  # the C++ test skips on 77
    print(f"missing python package: {e.name}", file=sys.stderr)
    sys.exit(77)

VOCAB = 320
PROMPT = [1, 17, 250, 33, 5, 99, 300, 42, 7, 128, 64, 201]
N_GREEDY = 32
GGUF_TYPES = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
}

CONFIGS = {
    "llama": dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                  max_position_embeddings=8192, tie_word_embeddings=False,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0, original_max_position_embeddings=1024)),
    "qwen2": dict(model_type="qwen2", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  max_position_embeddings=4096, tie_word_embeddings=True),
    "qwen3": dict(model_type="qwen3", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, max_position_embeddings=4096, tie_word_embeddings=False,
                  attention_bias=False),
}


def random_weights(cfg, rng):
    D, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", D // H)

    def mat(rows, cols):  # std 1/sqrt(cols): logits of order 1, well apart for greedy
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, D)).astype(np.float32),
         "model.norm.weight": norm(D)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(VOCAB, D)
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(D)
        w[p + "post_attention_layernorm.weight"] = norm(D)
        w[p + "self_attn.q_proj.weight"] = mat(H * hd, D)
        w[p + "self_attn.k_proj.weight"] = mat(KV * hd, D)
        w[p + "self_attn.v_proj.weight"] = mat(KV * hd, D)
        w[p + "self_attn.o_proj.weight"] = mat(D, H * hd)
        w[p + "mlp.gate_proj.weight"] = mat(F, D)
        w[p + "mlp.up_proj.weight"] = mat(F, D)
        w[p + "mlp.down_proj.weight"] = mat(D, F)
        if cfg["model_type"] == "qwen2":
            for n, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                w[p + f"self_attn.{n}_proj.bias"] = (0.1 * rng.standard_normal(rows)).astype(np.float32)
        if cfg["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
    return w


def write_hf(path, cfg, weights):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(cfg, vocab_size=VOCAB, architectures=["ForCausalLM"]), f, indent=1)
    save_file(weights, os.path.join(path, "model.safetensors"))


def mlx_outputs(path, n_greedy):
    """Last-position logits of the prompt and n_greedy greedy ids, with mlx-lm."""
    model, _ = load_model(__import__("pathlib").Path(path))
    cache = make_prompt_cache(model)
    logits = model(mx.array([PROMPT]), cache=cache)[0, -1]
    first = logits.astype(mx.float32)
    ids = []
    for _ in range(n_greedy):
        tok = int(mx.argmax(logits).item())
        ids.append(tok)
        logits = model(mx.array([[tok]]), cache=cache)[0, -1]
    return np.array(first).tolist(), ids


# llama.cpp's convert_hf_to_gguf.py: Q/K rows of "llama" reordered so rotary pairs are adjacent.
def permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(name):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    parts = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    _, _, layer, rest = name.split(".", 3)
    base, suffix = rest.rsplit(".", 1)
    return f"blk.{layer}.{parts[base]}.{suffix}"


def llama3_rope_factors(cfg):
    s, base = cfg["rope_scaling"], cfg["rope_theta"]
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    low_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
    factors = []
    for f in freqs:
        wl = 2 * np.pi / f
        if wl < high_wl:
            factors.append(1.0)
        elif wl > low_wl:
            factors.append(s["factor"])
        else:
            smooth = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"])
            factors.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def byte_tokenizer(writer):
    """GPT-2 byte-level vocabulary: the 256 byte symbols, one merge, an end token, fillers."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    symbol = dict(zip(bs, map(chr, cs)))
    tokens = [symbol[b] for b in range(256)] + ["Ġt", "<|endoftext|>"]
    tokens += [f"<|unused{i}|>" for i in range(VOCAB - len(tokens))]
    types = [1] * 257 + [3] * (VOCAB - 257)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["Ġ t"])
    writer.add_eos_token_id(257)


def write_gguf(path, arch, cfg, weights, qtype):
    """Writes the GGUF file; returns the weights as llama.cpp will see them, dequantized, in HF layout."""
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", D // H)
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(D)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(int(qtype) if qtype != gguf.GGMLQuantizationType.F32 else 0)
    byte_tokenizer(w)
    if "rope_scaling" in cfg:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(cfg))
    seen = {}
    for name, t in weights.items():
        if arch == "llama" and name.endswith("q_proj.weight"):
            t = permute(t, H)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            t = permute(t, KV)
        if t.ndim == 2 and qtype not in (gguf.GGMLQuantizationType.F32,):
            if qtype == gguf.GGMLQuantizationType.F16:
                q = t.astype(np.float16)
                w.add_tensor(gguf_name(name), q)
                back = q.astype(np.float32)
            else:
                q = gguf.quants.quantize(t, qtype)
                w.add_tensor(gguf_name(name), q, raw_dtype=qtype)
                back = gguf.quants.dequantize(q, qtype).astype(np.float32).reshape(t.shape)
        else:
            w.add_tensor(gguf_name(name), t)
            back = t
        if arch == "llama" and name.endswith("q_proj.weight"):
            back = unpermute(back, H)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            back = unpermute(back, KV)
        seen[name] = back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return seen


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    rng = np.random.default_rng(1234)
    for arch, cfg in CONFIGS.items():
        weights = random_weights(cfg, rng)
        write_hf(os.path.join(out, arch, "hf"), cfg, weights)
        logits, ids = mlx_outputs(os.path.join(out, arch, "hf"), N_GREEDY)
        ref = {"prompt": PROMPT, "greedy": ids, "logits": logits}
        for tname, qtype in GGUF_TYPES.items():
            dequantized = write_gguf(os.path.join(out, arch, f"{tname}.gguf"), arch, cfg, weights, qtype)
            with tempfile.TemporaryDirectory() as tmp:
                write_hf(tmp, cfg, dequantized)
                ref["logits_" + tname] = mlx_outputs(tmp, 0)[0]
        with open(os.path.join(out, arch, "ref.json"), "w") as f:
            json.dump(ref, f)
    print(f"wrote {', '.join(CONFIGS)} models to {out}")


if __name__ == "__main__":
    main()
