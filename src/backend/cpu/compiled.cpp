// The CPU kernel of compile's fused regions: a blocked interpreter. The
// output is cut into tiles of kTile elements; for each tile the region's
// ops run one after another over small scratch buffers that stay in L1,
// each op a vectorizable loop through a function pointer chosen once per
// region (no per-element dispatch). Tiles are split across threads.
//
// Values are held in their compute type (compute_t: float for the 16-bit
// floats, rounded to the value's dtype after every op so that results match
// the unfused kernels bit for bit). Contiguous inputs whose storage type is
// the compute type are read in place, and the last op writes straight into
// the output when its type is the compute type.
#include <cstdlib>
#include <cstring>

#include "backend/cpu/avx512_target.h"
#include "backend/cpu/cast.h"
#include "backend/cpu/compiled_codegen.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/op_functors.h"
#include "backend/cpu/simd_math.h"
#include "backend/common/layout.h"
#include "backend/cpu/threading.h"
#include "core/compiled.h"

namespace kiln {

namespace {

constexpr int64_t kTile = 2048;
constexpr int64_t kSlotBytes = kTile * 8;

using cpu::compute_t;

// The compute representation of a value of storage type T. The 16-bit
// conversions are the branch-free ones of kernel_math.inc (bit-exact with
// dtype.h's) so that these loops vectorize.
template <typename T>
inline compute_t<T> stored(compute_t<T> v) {
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    return cpu::simd::round_bf16(v);
  } else if constexpr (std::is_same_v<T, float16_t>) {
    return cpu::simd::round_f16(v);
  } else {
    return v;
  }
}

template <typename T>
inline compute_t<T> to_compute(T v) {
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    return cpu::simd::bf16_to_float(v.bits);
  } else if constexpr (std::is_same_v<T, float16_t>) {
    return cpu::simd::f16_to_float(v.bits);
  } else {
    return v;
  }
}

template <typename T>
inline T to_storage(compute_t<T> v) {
  T out{};
  if constexpr (std::is_same_v<T, bfloat16_t>) {
    out.bits = cpu::simd::float_to_bf16(v);
  } else if constexpr (std::is_same_v<T, float16_t>) {
    out.bits = cpu::simd::float_to_f16(v);
  } else {
    out = v;
  }
  return out;
}

using StepFn = void (*)(void* out, const void* a, const void* b, const void* c, int64_t n);

template <typename T, typename F>
void unary_step(void* out, const void* a, const void*, const void*, int64_t n) {
  using C = compute_t<T>;
  const C* x = static_cast<const C*>(a);
  C* o = static_cast<C*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = stored<T>(static_cast<C>(F{}(x[i])));
}

template <typename T, typename O, typename F>
void binary_step(void* out, const void* a, const void* b, const void*, int64_t n) {
  using C = compute_t<T>;
  using OC = compute_t<O>;
  const C* x = static_cast<const C*>(a);
  const C* y = static_cast<const C*>(b);
  OC* o = static_cast<OC*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = stored<O>(static_cast<OC>(F{}(x[i], y[i])));
}

template <typename T>
void select_step(void* out, const void* a, const void* b, const void* c, int64_t n) {
  using C = compute_t<T>;
  const bool* p = static_cast<const bool*>(a);
  const C* x = static_cast<const C*>(b);
  const C* y = static_cast<const C*>(c);
  C* o = static_cast<C*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = p[i] ? x[i] : y[i];
}

template <typename From, typename To>
void cast_step(void* out, const void* a, const void*, const void*, int64_t n) {
  using CF = compute_t<From>;
  using CT = compute_t<To>;
  const CF* x = static_cast<const CF*>(a);
  CT* o = static_cast<CT*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<CT>(cpu::convert<To>(x[i]));
}

// The same kernels compiled for AVX-512 (16 floats a vector), chosen at run
// time when cpu_target() allows it: the fused chains are compute-heavy
// (gelu, exp) and twice the lanes matter here.
namespace wide {
template <typename T, typename F>
KILN_AVX512_WIDE void unary_step(void* out, const void* a, const void*, const void*, int64_t n) {
  using C = compute_t<T>;
  const C* x = static_cast<const C*>(a);
  C* o = static_cast<C*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = stored<T>(static_cast<C>(F{}(x[i])));
}

template <typename T, typename O, typename F>
KILN_AVX512_WIDE void binary_step(void* out, const void* a, const void* b, const void*, int64_t n) {
  using C = compute_t<T>;
  using OC = compute_t<O>;
  const C* x = static_cast<const C*>(a);
  const C* y = static_cast<const C*>(b);
  OC* o = static_cast<OC*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = stored<O>(static_cast<OC>(F{}(x[i], y[i])));
}

template <typename T>
KILN_AVX512_WIDE void select_step(void* out, const void* a, const void* b, const void* c, int64_t n) {
  using C = compute_t<T>;
  const bool* p = static_cast<const bool*>(a);
  const C* x = static_cast<const C*>(b);
  const C* y = static_cast<const C*>(c);
  C* o = static_cast<C*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = p[i] ? x[i] : y[i];
}

template <typename From, typename To>
KILN_AVX512_WIDE void cast_step(void* out, const void* a, const void*, const void*, int64_t n) {
  using CF = compute_t<From>;
  using CT = compute_t<To>;
  const CF* x = static_cast<const CF*>(a);
  CT* o = static_cast<CT*>(out);
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<CT>(cpu::convert<To>(x[i]));
}

}  // namespace wide

// Storage -> compute representation, contiguous.
using LoadFn = void (*)(void* dst, const void* src, int64_t n);
template <typename T>
void load_contiguous(void* dst, const void* src, int64_t n) {
  const T* s = static_cast<const T*>(src);
  compute_t<T>* d = static_cast<compute_t<T>*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = to_compute(s[i]);
}
// Compute representation -> storage, contiguous.
template <typename T>
void store_contiguous(void* dst, const void* src, int64_t n) {
  const compute_t<T>* s = static_cast<const compute_t<T>*>(src);
  T* d = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = to_storage<T>(s[i]);
}
// One element (for broadcast scalars) and strided runs.
using FillFn = void (*)(void* dst, const void* src, int64_t n);
template <typename T>
void fill(void* dst, const void* src, int64_t n) {
  compute_t<T> v = static_cast<compute_t<T>>(*static_cast<const T*>(src));
  compute_t<T>* d = static_cast<compute_t<T>*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = v;
}
using StridedFn = void (*)(void* dst, const void* src, int64_t n, int64_t stride);
template <typename T>
void load_strided(void* dst, const void* src, int64_t n, int64_t stride) {
  const T* s = static_cast<const T*>(src);
  compute_t<T>* d = static_cast<compute_t<T>*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<compute_t<T>>(s[i * stride]);
}

template <typename T>
constexpr bool in_place_v = std::is_same_v<T, compute_t<T>>;

}  // namespace

struct Compiled::CpuProgram {
  struct Input {
    Dtype dtype;
    size_t itemsize;
    bool direct;  // storage == compute representation
    LoadFn load;
    FillFn fill;
    StridedFn strided;
    int slot;
  };
  struct Step {
    StepFn fn;
    int out;     // value index
    int args[3];
    int slot;    // scratch slot of the result (-1: the output buffer)
  };
  std::vector<Input> inputs;
  std::vector<Step> steps;
  int n_slots = 0;
  bool out_direct = false;  // the last step writes into the output buffer
  LoadFn store = nullptr;   // compute -> output storage, when not direct
};

namespace {

template <bool Wide>
StepFn step_fn_for(const FusedStep& s) {
  StepFn fn = nullptr;
  switch (s.kind) {
    case FusedStep::Kind::unary:
      cpu::dispatch_all(s.in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        cpu::with_unary_op<compute_t<T>>(static_cast<UnaryOp>(s.op),
                                         [&](auto f) { fn = Wide ? &wide::unary_step<T, decltype(f)> : &unary_step<T, decltype(f)>; });
      });
      if (!fn) {
        throw Error(std::string("[") + unary_op_name(static_cast<UnaryOp>(s.op)) + "] unsupported dtype " +
                    dtype_name(s.in_dtype));
      }
      break;
    case FusedStep::Kind::binary:
      cpu::dispatch_all(s.in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        cpu::with_binary_op<compute_t<T>>(
            static_cast<BinaryOp>(s.op), [&](auto f) { fn = Wide ? &wide::binary_step<T, T, decltype(f)> : &binary_step<T, T, decltype(f)>; },
            [&](auto f) { fn = Wide ? &wide::binary_step<T, bool, decltype(f)> : &binary_step<T, bool, decltype(f)>; });
      });
      if (!fn) {
        throw Error(std::string("[") + binary_op_name(static_cast<BinaryOp>(s.op)) + "] unsupported dtype " +
                    dtype_name(s.in_dtype));
      }
      break;
    case FusedStep::Kind::select:
      cpu::dispatch_all(s.in_dtype, [&](auto tag) { using T = typename decltype(tag)::type;
        fn = Wide ? &wide::select_step<T> : &select_step<T>; });
      break;
    case FusedStep::Kind::cast:
      cpu::dispatch_all(s.in_dtype, [&](auto ft) {
        cpu::dispatch_all(s.out_dtype, [&](auto tt) {
          using F = typename decltype(ft)::type;
          using To = typename decltype(tt)::type;
          fn = Wide ? &wide::cast_step<F, To> : &cast_step<F, To>;
        });
      });
      break;
  }
  return fn;
}

StepFn step_fn(const FusedStep& s) {
  static const bool wide = cpu::cpu_target() >= cpu::CpuTarget::avx512;
  return wide ? step_fn_for<true>(s) : step_fn_for<false>(s);
}

std::shared_ptr<Compiled::CpuProgram> build_program(const Compiled& c) {
  auto p = std::make_shared<Compiled::CpuProgram>();
  int nin = static_cast<int>(c.input_dtypes().size());
  const auto& steps = c.steps();
  int nsteps = static_cast<int>(steps.size());
  int slots = 0;
  for (Dtype t : c.input_dtypes()) {
    Compiled::CpuProgram::Input in{};
    in.dtype = t;
    in.itemsize = size_of(t);
    cpu::dispatch_all(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      in.direct = in_place_v<T>;
      in.load = &load_contiguous<T>;
      in.fill = &fill<T>;
      in.strided = &load_strided<T>;
    });
    in.slot = slots++;
    p->inputs.push_back(in);
  }
  // Scratch slots for step results, reused once a value is dead.
  std::vector<int> last_use(nin + nsteps, -1);
  for (int k = 0; k < nsteps; ++k) {
    for (int a : steps[k].args) {
      if (a >= 0) last_use[a] = k;
    }
  }
  std::vector<int> free_slots;
  std::vector<int> slot_of(nin + nsteps, -1);
  Dtype out_dtype = c.value_dtype(nin + nsteps - 1);
  cpu::dispatch_all(out_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    p->out_direct = in_place_v<T>;
    p->store = &store_contiguous<T>;
  });
  for (int k = 0; k < nsteps; ++k) {
    Compiled::CpuProgram::Step s{};
    s.fn = step_fn(steps[k]);
    s.out = nin + k;
    for (int i = 0; i < 3; ++i) s.args[i] = steps[k].args[i];
    if (k == nsteps - 1 && p->out_direct) {
      s.slot = -1;
    } else if (!free_slots.empty()) {
      s.slot = free_slots.back();
      free_slots.pop_back();
    } else {
      s.slot = slots++;
    }
    slot_of[nin + k] = s.slot;
    // Free the slots of step results that die here (after taking ours).
    for (int i = 0; i < 3; ++i) {
      int a = steps[k].args[i];
      if (a >= nin && last_use[a] == k && slot_of[a] >= 0) {
        bool dup = false;
        for (int j = 0; j < i; ++j) dup = dup || steps[k].args[j] == a;
        if (!dup) free_slots.push_back(slot_of[a]);
      }
    }
    p->steps.push_back(s);
  }
  p->n_slots = slots;
  return p;
}

// How an input is read for the output shape.
struct InputPlan {
  enum Mode { contiguous, scalar, strided } mode;
  const char* base;  // element 0 of the input
  layout::Layout<2> layout;  // strided: [0] row-major output strides, [1] the input's
};

InputPlan plan_input(const array& in, const Shape& out_shape) {
  InputPlan p{};
  const auto& d = *in.desc();
  p.base = detail::data_ptr(in);
  if (d.size == 1) {
    p.mode = InputPlan::scalar;
    return p;
  }
  int nd = static_cast<int>(out_shape.size()), ni = static_cast<int>(d.shape.size());
  Strides st(nd, 0);
  for (int i = 0; i < ni; ++i) {
    int o = nd - ni + i;
    st[o] = d.shape[i] == 1 && out_shape[o] != 1 ? 0 : d.strides[i];
  }
  if (detail::is_row_contiguous(out_shape, st)) {
    p.mode = InputPlan::contiguous;
    return p;
  }
  p.mode = InputPlan::strided;
  Strides rm = row_major_strides(out_shape);
  p.layout = layout::collapse<2>(out_shape, {&rm, &st});
  return p;
}

// Elements [start, start + n) of the output's row-major order, read through
// the input's layout.
void gather(const Compiled::CpuProgram::Input& in, const InputPlan& plan, char* dst, int64_t start, int64_t n,
            size_t csize) {
  const auto& l = plan.layout;
  int nd = static_cast<int>(l.shape.size());
  int64_t idx[16];
  int64_t off = 0, rem = start;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % l.shape[d];
    rem /= l.shape[d];
    off += idx[d] * l.strides[1][d];
  }
  int64_t inner = l.shape[nd - 1];
  int64_t istride = l.strides[1][nd - 1];
  int64_t done = 0;
  while (done < n) {
    int64_t cnt = std::min<int64_t>(inner - idx[nd - 1], n - done);
    const char* src = plan.base + off * static_cast<int64_t>(in.itemsize);
    if (istride == 0) {
      in.fill(dst + done * csize, src, cnt);
    } else if (istride == 1) {
      in.load(dst + done * csize, src, cnt);
    } else {
      in.strided(dst + done * csize, src, cnt, istride);
    }
    done += cnt;
    // Advance to the next row.
    off += (cnt - 1) * istride;
    idx[nd - 1] += cnt - 1;
    for (int d = nd - 1; d >= 0; --d) {
      off += l.strides[1][d];
      if (++idx[d] < l.shape[d]) break;
      off -= idx[d] * l.strides[1][d];
      idx[d] = 0;
    }
  }
}

size_t compute_size(Dtype t) {
  return (t == float16 || t == bfloat16) ? 4 : size_of(t);
}

}  // namespace

void Compiled::eval_cpu(const std::vector<array>& inputs, array& out) {
  std::call_once(cpu_once_, [&] { cpu_ = build_program(*this); });
  const CpuProgram& prog = *cpu_;
  // An input of the output's size and type that nobody else holds can give
  // its buffer (tile t of the output is written after tile t is read).
  bool donated = false;
  for (const auto& in : inputs) {
    const auto& d = *in.desc();
    if (in.dtype() == out.dtype() && in.size() == out.size() && d.offset == 0 && d.buffer.use_count() == 1 &&
        in.desc().use_count() == 1 && d.buffer->donatable() && detail::is_row_contiguous(d.shape, d.strides)) {
      detail::allocate_or_donate(out, in, name());
      donated = true;
      break;
    }
  }
  if (!donated) detail::allocate(out, name());
  int64_t n = static_cast<int64_t>(out.size());
  if (n == 0) return;
  if (detail::compile_backend() != detail::CompileBackend::interp && cpu::codegen::run(*this, inputs, out)) return;
  const Shape& shape = out.shape();
  if (shape.size() > 16) throw Error("[Compiled] arrays of more than 16 dimensions are not supported");
  std::vector<InputPlan> plans;
  plans.reserve(inputs.size());
  for (const auto& in : inputs) plans.push_back(plan_input(in, shape));
  char* out_base = detail::data_ptr(out);
  size_t out_size = out.itemsize();
  int nin = static_cast<int>(prog.inputs.size());
  int nvals = nin + static_cast<int>(prog.steps.size());
  Dtype out_dtype = out.dtype();
  size_t out_csize = compute_size(out_dtype);
  int64_t tiles = (n + kTile - 1) / kTile;
  cpu::parallel_for(tiles, std::max<int64_t>(1, cpu::kElementwiseGrain / kTile), [&](int64_t tb, int64_t te) {
    char* scratch = static_cast<char*>(std::aligned_alloc(64, std::max<int64_t>(1, prog.n_slots) * kSlotBytes));
    std::vector<const void*> ptr(nvals);
    for (int64_t t = tb; t < te; ++t) {
      int64_t start = t * kTile;
      int64_t len = std::min(kTile, n - start);
      for (int i = 0; i < nin; ++i) {
        const auto& in = prog.inputs[i];
        const auto& plan = plans[i];
        char* slot = scratch + in.slot * kSlotBytes;
        switch (plan.mode) {
          case InputPlan::contiguous:
            if (in.direct) {
              ptr[i] = plan.base + start * static_cast<int64_t>(in.itemsize);
            } else {
              in.load(slot, plan.base + start * static_cast<int64_t>(in.itemsize), len);
              ptr[i] = slot;
            }
            break;
          case InputPlan::scalar:
            in.fill(slot, plan.base, len);
            ptr[i] = slot;
            break;
          case InputPlan::strided:
            gather(in, plan, slot, start, len, compute_size(in.dtype));
            ptr[i] = slot;
            break;
        }
      }
      void* result = nullptr;
      for (const auto& s : prog.steps) {
        void* o = s.slot < 0 ? static_cast<void*>(out_base + start * static_cast<int64_t>(out_size))
                             : static_cast<void*>(scratch + s.slot * kSlotBytes);
        s.fn(o, ptr[s.args[0]], s.args[1] >= 0 ? ptr[s.args[1]] : nullptr,
             s.args[2] >= 0 ? ptr[s.args[2]] : nullptr, len);
        ptr[s.out] = o;
        result = o;
      }
      if (!prog.out_direct) prog.store(out_base + start * static_cast<int64_t>(out_size), result, len);
    }
    (void)out_csize;
    std::free(scratch);
  });
}

}  // namespace kiln
