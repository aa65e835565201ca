// compile's GPU code generator without a GPU (CTest label `cuda`; needs only
// NVRTC): the sources generated for regions that hold every op on every
// dtype, every cast, and each kernel plan (flat, vectorized, strided with
// 32- and 64-bit indices, scalars by value and in memory) compile with
// NVRTC for sm_90, the H200's architecture, and no multiply-add of two ops
// is contracted into an FMA. Codegen errors show up here, on a build
// machine, before a GPU run.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/compiled_codegen.h"
#include "backend/cuda/jit.h"
#include "compile_ops.h"
#include "core/compiled.h"

namespace kiln::test {
namespace {

using cuda::codegen::KernelPlan;

const Stream kGpu{0, Device::gpu};

FusedStep step(FusedStep::Kind kind, uint8_t op, Dtype in, Dtype out, int a, int b = -1, int c = -1) {
  FusedStep s{};
  s.kind = kind;
  s.op = op;
  s.in_dtype = in;
  s.out_dtype = out;
  s.args[0] = a;
  s.args[1] = b;
  s.args[2] = c;
  return s;
}

// Every unary and binary op defined on t, chained on two inputs of dtype t;
// comparisons select between the chain and an input, so each step is read.
Compiled every_op_region(Dtype t) {
  std::vector<FusedStep> steps;
  int cur = 0;
  auto next = [&] { return 2 + static_cast<int>(steps.size()) - 1; };
  for (UnaryOp op : unary_ops_on(t)) {
    steps.push_back(step(FusedStep::Kind::unary, static_cast<uint8_t>(op), t, t, cur));
    cur = next();
  }
  for (BinaryOp op : binary_ops_on(t)) {
    if (is_comparison(op)) {
      steps.push_back(step(FusedStep::Kind::binary, static_cast<uint8_t>(op), t, bool_, cur, 1));
      steps.push_back(step(FusedStep::Kind::select, 0, t, t, next(), cur, 1));
    } else {
      steps.push_back(step(FusedStep::Kind::binary, static_cast<uint8_t>(op), t, t, cur, 1));
    }
    cur = next();
  }
  return Compiled(kGpu, {t, t}, steps);
}

void expect_compiles(const Compiled& c, const KernelPlan& plan) {
  const std::string src = cuda::codegen::kernel_source(c, plan);
  try {
    cuda::jit_compile(src, cuda::codegen::kKernelName, 90, "compile");
  } catch (const Error& e) {
    ADD_FAILURE() << c.structure() << " [" << plan.key() << "]: " << e.what() << "\n--- source ---\n" << src;
  }
}

KernelPlan plan(std::string inputs, int vec, int ndim, bool wide) {
  KernelPlan p;
  p.inputs = std::move(inputs);
  p.vec = vec;
  p.ndim = ndim;
  p.wide_index = wide;
  return p;
}

TEST(CudaCompileCodegen, EveryOpOnEveryDtypeCompiles) {
  const KernelPlan plans[] = {plan("cc", 4, 0, false), plan("gv", 1, 2, false), plan("cs", 1, 0, true),
                              plan("gg", 1, 3, true)};
  int k = 0;
  for (Dtype t : all_dtypes()) {
    SCOPED_TRACE(dtype_name(t));
    Compiled c = every_op_region(t);
    expect_compiles(c, plans[k++ % 4]);
  }
  // float32 and bfloat16 through every plan.
  for (Dtype t : {float32, bfloat16}) {
    Compiled c = every_op_region(t);
    for (const auto& p : plans) expect_compiles(c, p);
  }
}

TEST(CudaCompileCodegen, EveryCastCompiles) {
  // Input k has dtype k; each is cast to every dtype and the results feed a
  // sum in float32, so every cast is live.
  const auto& dts = all_dtypes();
  const int nin = static_cast<int>(dts.size());
  std::vector<FusedStep> steps;
  int acc = -1;
  for (int i = 0; i < nin; ++i) {
    for (Dtype to : dts) {
      steps.push_back(step(FusedStep::Kind::cast, 0, dts[i], to, i));
      int v = nin + static_cast<int>(steps.size()) - 1;
      if (to != float32) {
        steps.push_back(step(FusedStep::Kind::cast, 0, to, float32, v));
        v = nin + static_cast<int>(steps.size()) - 1;
      }
      if (acc >= 0) {
        steps.push_back(step(FusedStep::Kind::binary, static_cast<uint8_t>(BinaryOp::add), float32, float32, acc, v));
        v = nin + static_cast<int>(steps.size()) - 1;
      }
      acc = v;
    }
  }
  Compiled c(kGpu, dts, steps);
  std::string inputs(nin, 'c');
  expect_compiles(c, plan(inputs, 2, 0, false));
  inputs[3] = 'g';
  inputs[5] = 'v';
  inputs[7] = 's';
  expect_compiles(c, plan(inputs, 1, 4, false));
}

// Why the barrier is there: a multiply feeding the next op's add must stay
// a rounded multiply and an add, as in two unfused kernels. Without the
// barrier NVRTC emits fma.rn (checked by hand when it was written).
TEST(CudaCompileCodegen, NoContractionAcrossOps) {
  for (Dtype t : {float32, float64}) {
    const auto mul = static_cast<uint8_t>(BinaryOp::multiply), add = static_cast<uint8_t>(BinaryOp::add);
    Compiled c(kGpu, {t, t},
               {step(FusedStep::Kind::binary, mul, t, t, 0, 1), step(FusedStep::Kind::binary, add, t, t, 2, 0)});
    const std::string ptx = cuda::jit_ptx(cuda::codegen::kernel_source(c, plan("cc", 1, 0, false)),
                                          cuda::codegen::kKernelName, 90, "compile");
    const std::string w = t == float32 ? "f32" : "f64";
    EXPECT_NE(ptx.find("mul." + w), std::string::npos) << ptx;
    EXPECT_NE(ptx.find("add." + w), std::string::npos) << ptx;
    EXPECT_EQ(ptx.find("fma.rn." + w), std::string::npos) << ptx;
  }
}

TEST(CudaCompileCodegen, SourceIsDeterministicAndNamesThePlan) {
  Compiled c = every_op_region(float16);
  KernelPlan p = plan("cg", 1, 2, false);
  const std::string a = cuda::codegen::kernel_source(c, p);
  EXPECT_EQ(a, cuda::codegen::kernel_source(c, p));
  EXPECT_NE(a.find(p.key()), std::string::npos);
  EXPECT_NE(a, cuda::codegen::kernel_source(c, plan("cg", 1, 2, true)));
}

}  // namespace
}  // namespace kiln::test
