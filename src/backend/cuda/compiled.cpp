// compile's fused elementwise regions on the GPU (Compiled::eval_gpu).
//
// Why it is shaped so: a region (core/compiled.h) is one generated kernel
// (compiled_codegen.h) that reads each input once and writes the output
// once, where the unfused ops would round-trip every intermediate through
// device memory. The kernel is specialized on the inputs' layouts (flat
// index for contiguous inputs, 16-byte vector accesses when they are all
// aligned; index arithmetic over the collapsed shape for broadcast and
// strided ones, in 32-bit where it fits), built once per layout by the GPU
// JIT service (NVRTC, memory and disk cache: jit.h) and kept by the node,
// and launched with cudaLaunchKernel on the node's stream, so the stream
// capture records it into the batch's CUDA graph like any kernel. Host
// scalars go by value (no upload). Bandwidth-bound: `kiln bench`'s D1
// add+GELU row (GPU) and HOST/chain row for compiled steps measure it.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/compiled_codegen.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/jit.h"
#include "core/compiled.h"

namespace kiln {
namespace {

constexpr const char* kOp = "compile";
constexpr int kBlock = 256;

// Strides of `in` as an operand of the output shape (broadcast dims: 0).
Strides broadcast_strides(const array& in, const Shape& shape) {
  const auto& d = *in.desc();
  const int nd = static_cast<int>(shape.size()), ni = static_cast<int>(d.shape.size());
  Strides st(nd, 0);
  for (int i = 0; i < ni; ++i) {
    const int o = nd - ni + i;
    st[o] = d.shape[i] == 1 && shape[o] != 1 ? 0 : d.strides[i];
  }
  return st;
}

// The collapsed shape and strides of the 'g' operands: dims of size 1
// dropped, neighbours merged where every operand (the row-major output
// included, so only contiguous runs merge) chains.
struct Collapsed {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides;  // per 'g' operand
};
Collapsed collapse(const Shape& shape, const std::vector<Strides>& operands) {
  Strides rm = row_major_strides(shape);
  Collapsed c;
  c.strides.resize(operands.size());
  std::vector<int64_t> out_strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !c.shape.empty() && out_strides.back() == rm[d] * shape[d];
    for (size_t k = 0; k < operands.size() && merge; ++k) merge = c.strides[k].back() == operands[k][d] * shape[d];
    if (merge) {
      c.shape.back() *= shape[d];
      out_strides.back() = rm[d];
      for (size_t k = 0; k < operands.size(); ++k) c.strides[k].back() = operands[k][d];
    } else {
      c.shape.push_back(shape[d]);
      out_strides.push_back(rm[d]);
      for (size_t k = 0; k < operands.size(); ++k) c.strides[k].push_back(operands[k][d]);
    }
  }
  return c;
}

unsigned grid_for(int64_t n, int per_thread) { return cuda::grid_for(n, per_thread, kBlock); }

// The widest vector (elements) every contiguous operand can be accessed
// with: 16 bytes of the widest type, where all pointers are aligned to it.
int vector_width(const std::vector<const void*>& ptrs, const std::vector<size_t>& itemsizes, int64_t n) {
  size_t widest = 1;
  for (size_t s : itemsizes) widest = std::max(widest, s);
  const int vec = static_cast<int>(16 / widest);
  if (vec < 2 || n < vec) return 1;
  for (size_t k = 0; k < ptrs.size(); ++k) {
    if (reinterpret_cast<uintptr_t>(ptrs[k]) % (vec * itemsizes[k]) != 0) return 1;
  }
  return vec;
}

struct alignas(8) ScalarBits {
  unsigned char b[8];
};

}  // namespace

void Compiled::eval_gpu(const std::vector<array>& inputs, array& out) {
  // An input of the output's size and type that nobody else holds gives
  // its buffer: each element is read before it is written, by one thread.
  bool donated = false;
  for (const auto& in : inputs) {
    if (!donated && in.dtype() == out.dtype() && in.size() == out.size() && in.desc()->offset == 0 &&
        cuda::can_donate(in) && detail::is_row_contiguous(in.shape(), in.desc()->strides)) {
      cuda::allocate_or_donate(out, in, kOp);
      donated = true;
    }
  }
  if (!donated) cuda::allocate(out, kOp);
  const int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  const Shape& shape = out.shape();
  const int nin = static_cast<int>(inputs.size());

  cuda::codegen::KernelPlan plan;
  std::vector<const void*> ptrs(nin, nullptr);
  std::vector<ScalarBits> values(nin);
  std::vector<Strides> strided;
  std::vector<const void*> dense_ptrs;
  std::vector<size_t> dense_sizes;
  for (int i = 0; i < nin; ++i) {
    const array& in = inputs[i];
    if (in.size() == 1 && cuda::host_scalar(in, values[i].b)) {
      plan.inputs += 'v';
      continue;
    }
    ptrs[i] = cuda::in_ptr(in);
    Strides st = broadcast_strides(in, shape);
    if (in.size() == 1) {
      plan.inputs += 's';
    } else if (detail::is_row_contiguous(shape, st)) {
      plan.inputs += 'c';
      dense_ptrs.push_back(ptrs[i]);
      dense_sizes.push_back(in.itemsize());
    } else {
      plan.inputs += 'g';
      strided.push_back(std::move(st));
    }
  }
  void* out_data = cuda::out_ptr(out);
  dense_ptrs.push_back(out_data);
  dense_sizes.push_back(out.itemsize());

  std::vector<long long> meta;
  int per_thread = 4;
  if (!strided.empty()) {
    Collapsed c = collapse(shape, strided);
    plan.ndim = static_cast<int>(c.shape.size());
    meta.assign(c.shape.begin(), c.shape.end());
    int64_t reach = 0;  // the largest offset magnitude of a strided operand
    for (const auto& s : c.strides) {
      int64_t r = 0;
      for (int d = 0; d < plan.ndim; ++d) r += (c.shape[d] - 1) * std::abs(s[d]);
      reach = std::max(reach, r);
      meta.insert(meta.end(), s.begin(), s.end());
    }
    const int64_t threads = static_cast<int64_t>(grid_for(n, per_thread)) * kBlock;
    plan.wide_index = n + threads > INT_MAX || reach > INT_MAX;
  } else {
    plan.vec = vector_width(dense_ptrs, dense_sizes, n);
    per_thread = 4 * plan.vec;
    const int64_t threads = static_cast<int64_t>(grid_for(n, per_thread)) * kBlock;
    plan.wide_index = n + threads * plan.vec > INT_MAX;
  }

  int device = 0;
  KILN_CUDA_CHECK(kOp, cudaGetDevice(&device));
  auto kernel = static_cast<cudaKernel_t>(codegen_kernel("gpu" + std::to_string(device) + ":" + plan.key(), [&] {
    const std::string source = cuda::codegen::kernel_source(*this, plan);
    // KILN_VERBOSE=2 prints each generated kernel (the op math text first).
    const char* verbose = std::getenv("KILN_VERBOSE");
    if (verbose && std::string(verbose) == "2") std::fprintf(stderr, "kiln: compile: GPU kernel\n%s\n", source.c_str());
    return static_cast<void*>(cuda::jit_kernel(source, cuda::codegen::kKernelName, kOp));
  }));

  // Parameter storage: cudaLaunchKernel reads each parameter through a
  // pointer, so everything above stays put until the launch.
  long long count = n;
  unsigned zero = 0;
  std::vector<void*> params;
  for (int i = 0; i < nin; ++i) params.push_back(plan.inputs[i] == 'v' ? static_cast<void*>(values[i].b) : &ptrs[i]);
  params.push_back(&out_data);
  params.push_back(&count);
  params.push_back(&zero);
  if (plan.ndim > 0) params.push_back(meta.data());
  KILN_CUDA_CHECK(kOp, cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid_for(n, per_thread)),
                                        dim3(kBlock), params.data(), 0, cuda::current_stream()));
}

}  // namespace kiln
