// fast::swiglu_quantized_matmul and fast::add_rms_norm_quantized_matmul
// (include/kiln/fast.h): a decode step's product with the elementwise op
// that feeds it, one FusedBlockQMV node where the GPU kernel applies
// (quant_blocks_qmv_i8.cu computes x in the product's prologue), the plain
// ops elsewhere. Why: on the GPU every kernel of a decoded token costs 1.5-2
// us of latency whatever its bytes (docs/performance.md, session 32), and a
// layer's norms and SwiGLU are three such kernels.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/ops_util.h"
#include "core/primitives.h"
#include "kiln/fast.h"
#include "kiln/ops.h"

namespace kiln {
namespace fast {
namespace {

std::atomic<int> fusion_override{-1};

bool fusion_on() {
  static const bool env_on = [] {
    const char* e = std::getenv("KILN_FUSED_QMV");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  const int o = fusion_override.load(std::memory_order_relaxed);
  return o < 0 ? env_on : o == 1;
}

// The block format the fused kernel takes for this product, if any: a GPU
// stream, Q4_0 / Q8_0 / Q4_K bytes w [N, row bytes] (transposed), one row
// of x of K values (a multiple of 256) in float32 / float16 / bfloat16.
std::optional<BlockFormat> fused_format(const array& a, const array& b, const array& w, const array& scales,
                                        const std::optional<array>& biases, bool transpose, const std::string& mode,
                                        Stream s) {
  if (!fusion_on() || s.device.type != Device::gpu || !transpose || biases || scales.size() != 0) return std::nullopt;
  BlockFormat f;
  if (mode == "q4_0")
    f = BlockFormat::q4_0;
  else if (mode == "q8_0")
    f = BlockFormat::q8_0;
  else if (mode == "q4_k")
    f = BlockFormat::q4_k;
  else
    return std::nullopt;
  const Dtype t = a.dtype();
  if ((t != float32 && t != float16 && t != bfloat16) || b.dtype() != t || a.shape() != b.shape() || a.ndim() < 1) {
    return std::nullopt;
  }
  const int64_t k = a.shape(-1);
  const BlockLayout& l = block_layout(f);
  if (k == 0 || k % 256 != 0 || static_cast<int64_t>(a.size()) != k || w.dtype() != uint8 || w.ndim() != 2 ||
      w.shape(0) == 0 || w.shape(1) != k / l.block * l.bytes) {
    return std::nullopt;
  }
  return f;
}

// Runs f, naming `op` in a kiln::Error raised by the ops it builds.
template <typename F>
auto naming(const char* op, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(std::string("[") + op + "] " + e.what());
  }
}

Shape product_shape(const array& x, const array& w) {
  Shape shape = x.shape();
  shape.back() = w.shape(0);
  return shape;
}

}  // namespace

array swiglu_quantized_matmul(const array& gate, const array& up, const array& w, const array& scales,
                              const std::optional<array>& biases, bool transpose, std::optional<int> group_size,
                              std::optional<int> bits, const std::string& mode, StreamOrDevice s_) {
  return naming("swiglu_quantized_matmul", [&] {
    Stream s = to_stream(s_);
    // in: ..., w (the last input, so that the transformations see it).
    auto product = [=](const array& x, const array& wq) {
      return quantized_matmul(x, wq, scales, biases, transpose, group_size, bits, mode, s);
    };
    FastFallback fallback = [product, s](const std::vector<array>& in) {
      return std::vector<array>{product(multiply(silu(in[0], s), in[1], s), in.back())};
    };
    const std::optional<BlockFormat> f = fused_format(gate, up, w, scales, biases, transpose, mode, s);
    if (!f) return fallback({gate, up, w})[0];
    product(gate, w);  // the product's own argument checks
    auto outs = array::make_arrays(
        {product_shape(gate, w)}, {gate.dtype()},
        std::make_shared<FusedBlockQMV>(s, std::move(fallback), FusedBlockQMV::Kind::swiglu, *f, 0.0f), {gate, up, w});
    return outs[0];
  });
}

std::pair<array, array> add_rms_norm_quantized_matmul(const array& x, const array& residual,
                                                      const std::optional<array>& weight, float eps, const array& w,
                                                      const array& scales, const std::optional<array>& biases,
                                                      bool transpose, std::optional<int> group_size,
                                                      std::optional<int> bits, const std::string& mode,
                                                      StreamOrDevice s_) {
  return naming("add_rms_norm_quantized_matmul", [&]() -> std::pair<array, array> {
    Stream s = to_stream(s_);
    auto product = [=](const array& v, const array& wq) {
      return quantized_matmul(v, wq, scales, biases, transpose, group_size, bits, mode, s);
    };
    const bool has_weight = weight.has_value();
    FastFallback fallback = [product, has_weight, eps, s](const std::vector<array>& in) {
      std::optional<array> nw;
      if (has_weight) nw = in[2];
      auto [h, y] = add_rms_norm(in[0], in[1], nw, eps, s);
      return std::vector<array>{h, product(y, in.back())};
    };
    std::optional<BlockFormat> f = fused_format(x, residual, w, scales, biases, transpose, mode, s);
    // The norm's weight of x's dtype and shape [K]; the row within the sizes
    // whose sums the fused kernel takes as fast_norm.cu does.
    const int64_t k = x.ndim() ? x.shape(-1) : 0, vec = k / std::max<int64_t>(1, 16 / size_of(x.dtype()));
    if (!weight || weight->dtype() != x.dtype() || weight->ndim() != 1 || weight->shape(0) != k ||
        k % (16 / size_of(x.dtype())) != 0 || vec < 256 || vec > 2048) {
      f = std::nullopt;
    }
    if (!f) {
      std::vector<array> in = {x, residual};
      if (weight) in.push_back(*weight);
      in.push_back(w);
      auto out = fallback(in);
      return {out[0], out[1]};
    }
    product(x, w);  // the product's own argument checks
    auto outs = array::make_arrays(
        {x.shape(), product_shape(x, w)}, {x.dtype(), x.dtype()},
        std::make_shared<FusedBlockQMV>(s, std::move(fallback), FusedBlockQMV::Kind::add_rms_norm, *f, eps),
        {x, residual, contiguous(*weight, s), w});
    return {outs[0], outs[1]};
  });
}

}  // namespace fast

namespace detail {
void set_fused_qmv_override(int on) { fast::fusion_override.store(on, std::memory_order_relaxed); }
}  // namespace detail

void FusedBlockQMV::eval_cpu(const std::vector<array>&, std::vector<array>&) {
  // The ops build this node for GPU streams only.
  throw Error(std::string("[") + name() + "] has no CPU kernel (built for GPU streams only)");
}

bool FusedBlockQMV::is_equivalent(const Primitive& o) const {
  auto* p = dynamic_cast<const FusedBlockQMV*>(&o);
  return p && p->kind_ == kind_ && p->format_ == format_ && p->eps_ == eps_;
}

std::string FusedBlockQMV::describe() const {
  std::ostringstream m;
  m << "FusedBlockQMV(" << (kind_ == Kind::swiglu ? "swiglu" : "add_rms_norm") << ", " << block_layout(format_).name;
  if (kind_ == Kind::add_rms_norm) m << ", eps=" << eps_;
  m << ")";
  return m.str();
}

}  // namespace kiln
