#pragma once
// The op harness (issue 8, after ggml's test-backend-ops): every public op
// registers its cases once, and one runner checks each case
//   cpu  - the CPU result on every dtype and layout against a float64
//          reference (an explicit loop, or the op itself in float64);
//   gpu  - the GPU (Device::gpu) against the CPU on the same inputs;
//   vjp  - <u, J v> from finite differences against <vjp(u), v>;
//   jvp  - jvp(v) against central finite differences;
//   vmap - vmap over a leading batch of 3 (and in_axis 1 / out_axis 1 with
//          the other inputs unbatched) against a loop and stack;
//   grad2 - grad of <grad f, w> against finite differences of <grad f, w>.
// Registering a case: see tests/harness/README.md.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_layouts.h"

namespace kiln::harness {

using Arrays = std::vector<array>;
using OpFn = std::function<Arrays(const Arrays&)>;
// Flattened row-major values of each output, computed from the inputs
// (given as float64 arrays holding the same values as the tested ones).
using RefFn = std::function<std::vector<std::vector<double>>(const Arrays&)>;

// One input of a case.
struct Input {
  Shape shape;
  double lo = -2.0, hi = 2.0;  // value range (integers are floored)
  // nullopt: the case's dtype (the dtype under test); else fixed (indices, masks, keys).
  std::optional<Dtype> dtype;
  // Built by hand instead of from the range (e.g. a random key); not laid out.
  std::function<array()> make;
};

struct Case {
  std::string op;         // the public op, e.g. "take_along_axis"
  std::string primitive;  // its primitive, "Unary:exp" for enum families
  std::string name;       // what this case varies (shapes, axes)
  OpFn fn;
  std::vector<Input> inputs;
  std::vector<Dtype> dtypes = {float32, float16, bfloat16, float64};
  RefFn ref;  // empty: fn on the float64 inputs
  bool layouts = true;        // every layout of tests/test_layouts.h, else contiguous only
  std::vector<int> diff;      // differentiable inputs (checked by vjp/jvp/grad2)
  bool jvp = true;            // jvp checked (when diff is not empty)
  bool vmap = true;           // vmap checked (needs at least one input)
  bool grad2 = false;         // grad of grad checked
  double fd_rtol = 1e-5;      // finite-difference tolerance (relative to the scale)
  double rtol_scale = 1.0;    // multiplies the dtype's forward tolerance
  std::string known_failure;  // non-empty: expected to fail, with why (reported, not fatal)
  // Where the CPU computes a documented approximation the GPU does not (the
  // CPU rounds x to 8 bits in block-format quantized_matmul): a bound on
  // |CPU - GPU| per output element (from the float64 inputs), added to the
  // gpu check's tolerance.
  RefFn gpu_slack;
};

std::vector<Case>& registry();
// Registers a case; returns it so a registration reads as one statement.
Case& add(Case c);

// Registration of each family (tests/harness/cases_*.cpp).
void register_elementwise();
void register_reduce();
void register_shape();
void register_index();
void register_gather();  // gather / scatter family, dynamic slices, as_strided, view
void register_creation();
void register_composite();  // ops written with other ops: primitive "composite"
void register_sort();       // sorting, selection and scans
void register_fast();       // include/kiln/fast.h
void register_attention();  // fast::scaled_dot_product_attention
void register_quant();      // quantize, dequantize, quantized_matmul, gather_qmm
void register_quant_blocks();  // llama.cpp block formats (cases_quant_blocks.cpp)
void register_quant_fp();      // MLX's microscaling modes, to_fp8 / from_fp8 (cases_quant_fp.cpp)
void register_conv();          // convolutions (cases_conv.cpp)
void register_linalg();        // kiln::linalg, einsum, random::multivariate_normal
void register_numpy_extras();  // windows, median, gather_mm, hadamard ... (cases_numpy_extras.cpp)
void register_complex();       // complex64 ops and kiln::fft (cases_complex.cpp)
void register_fp8();           // scaled_matmul (cases_fp8.cpp)
// All of the above, once.
void register_all();

// Inputs: of the case's dtype in [lo, hi), or of a fixed dtype.
inline Input in(Shape s, double lo = -2.0, double hi = 2.0) { return Input{std::move(s), lo, hi, std::nullopt, {}}; }
inline Input fixed(Shape s, Dtype t, double lo, double hi) { return Input{std::move(s), lo, hi, t, {}}; }

// Reference helpers for cases.
std::vector<double> values(const array& a);  // row-major doubles
// a's values broadcast (numpy rules) to shape `out`, row-major.
std::vector<double> broadcast_values(const array& a, const Shape& out);
Shape broadcast_shape(const Shape& a, const Shape& b);
// Elementwise references of one and two inputs (b broadcast to a's shape by numpy rules).
RefFn ref_unary(std::function<double(double)> f);
RefFn ref_binary(std::function<double(double, double)> f);

// The result of running one check of one case.
enum class Outcome { kNotRun, kPass, kFail };
struct Result {
  Outcome cpu = Outcome::kNotRun, gpu = Outcome::kNotRun, vjp = Outcome::kNotRun, jvp = Outcome::kNotRun,
          vmap = Outcome::kNotRun, grad2 = Outcome::kNotRun;
  std::vector<std::string> failures;  // messages of the failed checks
};

struct RunOptions {
  bool cpu = true;         // report the CPU forward check
  bool gpu = false;        // GPU against CPU (when a GPU is present)
  bool transforms = true;  // vjp, jvp, vmap, grad2
  Device transform_device = Device::cpu;  // where the transformed graphs run
};
Result run_case(const Case& c, const RunOptions& opts);

// Primitive names (with ":op" for Unary/Binary/Reduce) that must each have
// a case, and the ones the registry covers.
std::vector<std::string> required_primitives();
// The primitive names found in the graph fn builds (to check that a case
// exercises the primitive it declares).
std::vector<std::string> graph_primitives(const Arrays& outputs);

std::string coverage_table(const std::vector<Case>& cases, const std::vector<Result>& results);

}  // namespace kiln::harness
