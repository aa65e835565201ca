#!/usr/bin/env python3
"""llama.cpp's outputs on the tiny GGUF models of make_models.py, for the
LlamaCppOracle tests of tests/test_llm_oracle.cpp.

For each architecture of make_models.CONFIGS and each TYPE in f32 f16 q8_0 q4_0:
  OUT/ARCH/TYPE.gguf       written by make_models.write_gguf (gguf-py)
  OUT/ARCH/llama_cpp.json  {"prompt", "kv_f32", TYPE: {"greedy": 32 ids, "logits": the last
                           prompt position's logits}} from llama-cpp-python

llama.cpp runs on the CPU with a context of 64, logits of every position
(logits_all=True) and, where the binding takes type_k/type_v, a float32 KV
cache ("kv_f32": true; else its default float16 cache). Greedy = the argmax
of each step's logits, computed here from llm.scores, so that no sampler
setting of the binding is involved.

Needs llama-cpp-python, numpy, gguf and safetensors:
  pip install llama-cpp-python gguf safetensors numpy
Exit status 77 (and a message) when a package is missing.

Usage: llama_cpp_ref.py OUT
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    from llama_cpp import Llama
except ImportError as e:  # the C++ test skips on 77
    print(f"missing python package: {e.name}", file=sys.stderr)
    sys.exit(77)
import make_models  # exits 77 itself without numpy, gguf or safetensors

GGML_TYPE_F32 = 0


def load(path):
    common = dict(model_path=path, n_ctx=64, logits_all=True, seed=0, verbose=False)
    try:
        return Llama(type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, **common), True
    except TypeError:  # a binding without KV cache types
        return Llama(**common), False


def run(path):
    """The last prompt position's logits and N_GREEDY greedy ids."""
    llm, kv_f32 = load(path)
    llm.eval(make_models.PROMPT)
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    first = logits.tolist()
    ids = []
    for _ in range(make_models.N_GREEDY):
        tok = int(np.argmax(logits))
        ids.append(tok)
        llm.eval([tok])
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return first, ids, kv_f32


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    rng = np.random.default_rng(4321)
    for arch, cfg in make_models.CONFIGS.items():
        weights = make_models.random_weights(cfg, rng)
        os.makedirs(os.path.join(out, arch), exist_ok=True)
        ref = {"prompt": make_models.PROMPT}
        for tname, qtype in make_models.GGUF_TYPES.items():
            path = os.path.join(out, arch, f"{tname}.gguf")
            make_models.write_gguf(path, arch, cfg, weights, qtype)
            logits, ids, ref["kv_f32"] = run(path)
            ref[tname] = {"greedy": ids, "logits": logits}
        with open(os.path.join(out, arch, "llama_cpp.json"), "w") as f:
            json.dump(ref, f)
    print(f"wrote {', '.join(make_models.CONFIGS)} models and llama.cpp's outputs to {out}")


if __name__ == "__main__":
    main()
