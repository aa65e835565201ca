#!/usr/bin/env bash
# Kiln against llama.cpp on the CPU, same files, same thread count, run
# alternately (issue 12's CPU comparison; docs/llm.md has the results).
#
# Builds llama.cpp's llama-bench (CPU backend, -march=native) from the
# llama.cpp tree that llama-cpp-python's source distribution vendors, writes
# random-weight GGUF files of a Llama shape with make_llama_gguf.py (both
# programs load them; no vocabulary, both feed token ids), and times pp and
# tg with each program in turn, printing each table and the machine's load.
#
#   bench/peers/llama_cpp_cpu.sh [WORK_DIR]          (default /tmp/kiln-llama-peer)
#   SHAPE=llama3-1b TYPES="q4_0 q8_0 q4_k" P=64 N=32 REPS=3 ROUNDS=2 KILN=build/kiln
#
# Needs pip (llama-cpp-python's sdist, gguf, numpy), cmake, ninja and a C++
# compiler; the machine should be otherwise idle while it times.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-/tmp/kiln-llama-peer}
kiln=${KILN:-$here/../../build/kiln}
shape=${SHAPE:-llama3-1b}
types=${TYPES:-q4_0 q8_0 q4_k}
threads=${THREADS:-$(nproc)}
mkdir -p "$work"

if [ ! -x "$work/lb/bin/llama-bench" ]; then
  pip download -q llama-cpp-python --no-deps --no-binary :all: -d "$work/dl"
  tar -C "$work" -xzf "$(ls "$work"/dl/llama_cpp_python-*.tar.gz | head -1)"
  src=$(ls -d "$work"/llama_cpp_python-*/vendor/llama.cpp | head -1)
  cmake -S "$src" -B "$work/lb" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
  cmake --build "$work/lb" --target llama-bench -j "$(nproc)"
fi
python3 -c "import gguf, numpy" 2>/dev/null || pip install -q gguf numpy

echo "llama.cpp: $(ls -d "$work"/llama_cpp_python-* | head -1 | xargs basename)"
"$kiln" bench --filter row_sum 2>/dev/null | grep -E "memory bandwidth" || true
for t in $types; do
  f="$work/$shape-$t.gguf"
  [ -f "$f" ] || python3 "$here/make_llama_gguf.py" "$f" "$t" "$shape"
  for round in $(seq "${ROUNDS:-2}"); do
    echo "== $t round $round, load $(cut -d' ' -f1 /proc/loadavg)"
    "$kiln" bench llm -m "$f" -p "${P:-64}" -n "${N:-32}" -r "${REPS:-3}" 2>/dev/null | tail -2
    echo "   load $(cut -d' ' -f1 /proc/loadavg)"
    "$work/lb/bin/llama-bench" -m "$f" -p "${P:-64}" -n "${N:-32}" -r "${REPS:-3}" -t "$threads" 2>/dev/null |
      grep -E "^\| (llama|model)" | tail -2
  done
done
