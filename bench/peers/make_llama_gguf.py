#!/usr/bin/env python3
"""Writes a random-weight GGUF of a Llama shape that both `kiln bench llm`
and llama.cpp's `llama-bench` load, for timing decode on the same file
(bench/peers/llama_cpp_cpu.sh).

The blocks are random bytes with small finite fp16 scales (Q4_0, Q8_0,
Q4_K), or normal(0, 0.02) for f32/f16/bf16: the speed of a product does not
depend on the values, and writing random blocks takes seconds where
quantizing 1.2 G floats in numpy takes many minutes. Norms are ones. The
file has no vocabulary (tokenizer.ggml.model "no_vocab"): both benches feed
token ids, not text.

Usage: make_llama_gguf.py OUT.gguf TYPE [SHAPE]
  TYPE  q4_0 | q8_0 | q4_k | f16 | f32
  SHAPE llama3-1b (default: Llama-3.2-1B, tied embeddings) | llama3-3b | llama3-8b
Needs numpy and gguf (pip install gguf numpy).
"""
import sys

import numpy as np
import gguf

SHAPES = {  # dim, ffn, layers, heads, kv heads, tied
    "llama3-1b": (2048, 8192, 16, 32, 8, True),
    "llama3-3b": (3072, 8192, 28, 24, 8, True),
    "llama3-8b": (4096, 14336, 32, 32, 8, False),
}
VOCAB = 128256
Q = gguf.GGMLQuantizationType
TYPES = {"q4_0": (Q.Q4_0, 32, 18), "q8_0": (Q.Q8_0, 32, 34), "q4_k": (Q.Q4_K, 256, 144),
         "f16": (Q.F16, 1, 2), "f32": (Q.F32, 1, 4)}
FILE_TYPE = {"q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_M, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "f32": gguf.LlamaFileType.ALL_F32}


def matrix(rng, rows, cols, kind):
    qtype, qk, nbytes = TYPES[kind]
    if kind in ("f16", "f32"):
        return (0.02 * rng.standard_normal((rows, cols), dtype=np.float32)).astype(
            np.float16 if kind == "f16" else np.float32), None
    blocks = rng.integers(0, 256, size=(rows, cols // qk, nbytes), dtype=np.uint8)
    scales = rng.uniform(1e-4, 2e-3, size=(rows, cols // qk, 2)).astype(np.float16)
    blocks[:, :, 0:2] = scales[:, :, 0:1].view(np.uint8).reshape(rows, cols // qk, 2)
    if kind == "q4_k":  # d and dmin
        blocks[:, :, 2:4] = scales[:, :, 1:2].view(np.uint8).reshape(rows, cols // qk, 2)
    return blocks.reshape(rows, cols // qk * nbytes), qtype


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in TYPES:
        sys.exit(__doc__)
    out, kind = sys.argv[1], sys.argv[2]
    shape = sys.argv[3] if len(sys.argv) > 3 else "llama3-1b"
    D, F, L, H, KV, tied = SHAPES[shape]
    hd = D // H
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"random {shape} {kind}")
    w.add_block_count(L)
    w.add_context_length(8192)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(FILE_TYPE[kind])
    w.add_tokenizer_model("no_vocab")

    def add(name, rows, cols):
        data, qtype = matrix(rng, rows, cols, kind)
        w.add_tensor(name, data, raw_dtype=qtype)

    add("token_embd.weight", VOCAB, D)
    if not tied:
        add("output.weight", VOCAB, D)
    w.add_tensor("output_norm.weight", np.ones(D, dtype=np.float32))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(D, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(D, dtype=np.float32))
        add(p + "attn_q.weight", H * hd, D)
        add(p + "attn_k.weight", KV * hd, D)
        add(p + "attn_v.weight", KV * hd, D)
        add(p + "attn_output.weight", D, H * hd)
        add(p + "ffn_gate.weight", F, D)
        add(p + "ffn_up.weight", F, D)
        add(p + "ffn_down.weight", D, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
