// fast::cpu_kernel on the CPU (include/kiln/fast.h, core/custom_kernel.cpp).
//
// Why it is shaped so: the generated source is a body function and an
// extern "C" entry point that loops over a range of flat grid indices.
// It is built by the CPU JIT service that compile uses (compiled_codegen.h:
// one build/cache/dlopen path) after the preamble below, and the range is
// split with parallel_for like every CPU kernel. The body is inlined into
// the loop, so an elementwise body vectorizes like a hand-written loop.
// The preamble's 16-bit float types convert through kernel_math.inc, the
// conversions of the library's own kernels.
#include <cstring>

#include "backend/cpu/compiled_codegen.h"
#include "backend/cpu/fast_rows.h"
#include "backend/cpu/simd_math.h"
#include "backend/cpu/threading.h"
#include "core/host_cast.h"
#include "core/primitives_custom_kernel.h"

namespace kiln {
namespace {

constexpr const char* kOp = "fast::cpu_kernel";

// Types and helpers every custom CPU kernel sees (namespace kiln, plus
// float16_t and bfloat16_t unqualified).
const std::string& preamble() {
  static const std::string text = [] {
    std::string s = "#include <algorithm>\n#include <bit>\n#include <cmath>\n#include <cstdint>\n#include <cstring>\n"
                    "#include <limits>\n#include <type_traits>\n\nnamespace km {\n";
    s += cpu::codegen::kernel_math_source();
    s += "}  // namespace km\n\nnamespace kiln {\n"
         "struct float16_t {\n"
         "  uint16_t bits;\n"
         "  float16_t() = default;\n"
         "  float16_t(float f) : bits(km::float_to_f16(f)) {}\n"
         "  operator float() const { return km::f16_to_float(bits); }\n"
         "};\n"
         "struct bfloat16_t {\n"
         "  uint16_t bits;\n"
         "  bfloat16_t() = default;\n"
         "  bfloat16_t(float f) : bits(km::float_to_bf16(f)) {}\n"
         "  operator float() const { return km::bf16_to_float(bits); }\n"
         "};\n"
         "constexpr int kMaxNdim = " + std::to_string(kKernelMaxNdim) + ";\n"
         "struct Shape {\n"
         "  int32_t v[kMaxNdim];\n"
         "  int32_t operator[](int i) const { return v[i]; }\n"
         "  const int32_t* data() const { return v; }\n"
         "};\n"
         "struct Strides {\n"
         "  int64_t v[kMaxNdim];\n"
         "  int64_t operator[](int i) const { return v[i]; }\n"
         "  const int64_t* data() const { return v; }\n"
         "};\n"
         "// A thread's position (or the grid's size): x, y, z, and the flat index.\n"
         "struct GridIndex {\n"
         "  int64_t x, y, z, flat;\n"
         "  operator int64_t() const { return flat; }\n"
         "};\n"
         "// The offset of row-major element `elem` in an array of these strides.\n"
         "inline int64_t elem_to_loc(int64_t elem, const int32_t* shape, const int64_t* strides, int ndim) {\n"
         "  int64_t loc = 0;\n"
         "  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {\n"
         "    loc += (elem % shape[i]) * strides[i];\n"
         "    elem /= shape[i];\n"
         "  }\n"
         "  return loc;\n"
         "}\n"
         "inline int64_t elem_to_loc(int64_t elem, const Shape& shape, const Strides& strides, int ndim) {\n"
         "  return elem_to_loc(elem, shape.data(), strides.data(), ndim);\n"
         "}\n"
         "// Float math that vectorizes: the library's own branch-free exp and tanh\n"
         "// (the exp / tanh ops' values, bit for bit); std::exp / std::tanh are\n"
         "// scalar library calls, about ten times slower in a loop.\n"
         "namespace math {\n"
         "inline float exp(float x) { return km::exp(x); }\n"
         "inline float tanh(float x) { return km::tanh(x); }\n"
         "}  // namespace math\n"
         "}  // namespace kiln\n\nusing kiln::bfloat16_t;\nusing kiln::float16_t;\n\n";
    return s;
  }();
  return text;
}

using EntryFn = void (*)(void* const* args, const int64_t* grid, int64_t begin, int64_t end);

template <typename U>
void fill_bits(void* dst, const void* value, size_t n) {
  U v;
  std::memcpy(&v, value, sizeof(U));
  std::fill_n(static_cast<U*>(dst), n, v);
}

// Sets every element of out to `value` converted to out's dtype.
void fill(array& out, float value) {
  unsigned char bits[8];
  detail::host_cast(&value, float32, bits, out.dtype(), 1);
  void* dst = detail::data_ptr(out);
  switch (out.itemsize()) {
    case 1: fill_bits<uint8_t>(dst, bits, out.size()); break;
    case 2: fill_bits<uint16_t>(dst, bits, out.size()); break;
    case 4: fill_bits<uint32_t>(dst, bits, out.size()); break;
    default: fill_bits<uint64_t>(dst, bits, out.size()); break;
  }
}

}  // namespace

void CustomKernel::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  std::string why;
  auto fn = reinterpret_cast<EntryFn>(cpu::codegen::jit_symbol(preamble() + source_, kernel_name_.c_str(), &why));
  if (!fn) throw Error(std::string("[") + kOp + "] kernel " + kernel_name_ + " could not be built: " + why);

  // Argument storage: addresses must stay put, so reserve first.
  std::vector<cpu::RowMajorInput> copies;
  std::vector<KernelShapeArgs> shape_args;
  copies.reserve(inputs.size());
  shape_args.reserve(inputs.size());
  std::vector<void*> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& d = *inputs[i].desc();
    bool copy = ensure_row_contiguous_ && !detail::is_row_contiguous(d.shape, d.strides);
    copies.push_back(copy ? cpu::row_major_input_of(inputs[i], kOp) : cpu::RowMajorInput{nullptr, detail::data_ptr(inputs[i])});
    args.push_back(const_cast<char*>(copies.back().data));
    shape_args.emplace_back();
    pack_shape_args(shape_infos_[i], d.shape, copy ? row_major_strides(d.shape) : d.strides, shape_args.back(),
                    [&](void* p) { args.push_back(p); });
  }
  for (auto& out : outputs) {
    detail::allocate(out, kOp);
    if (init_value_) fill(out, *init_value_);
    args.push_back(detail::data_ptr(out));
  }
  const int64_t grid[3] = {grid_[0], grid_[1], grid_[2]};
  const int64_t threads = grid[0] * grid[1] * grid[2];
  const int64_t grain = static_cast<int64_t>(threadgroup_[0]) * threadgroup_[1] * threadgroup_[2];
  cpu::parallel_for(threads, grain, [&](int64_t b, int64_t e) { fn(args.data(), grid, b, e); });
}

}  // namespace kiln
