#pragma once
// Internals of kiln::compile: the fused elementwise primitive (`Compiled`),
// the placeholder primitive of traced inputs, and hooks the tests use to
// look at what tracing did.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/primitives.h"

namespace kiln {

// One op of a fused region. Values are numbered: the region's inputs
// 0..n_inputs-1, then step k produces value n_inputs + k. The last step's
// value is the region's output.
struct FusedStep {
  enum class Kind : uint8_t { unary, binary, select, cast };
  Kind kind;
  uint8_t op;       // UnaryOp or BinaryOp
  Dtype in_dtype;   // operand dtype (select: the x/y dtype; cast: the source)
  Dtype out_dtype;  // result dtype
  int args[3];      // value indices (-1 unused)
};

// A maximal DAG of elementwise ops (Unary, Binary, Select, Copy-as-cast),
// evaluated in one pass: inputs (any layout, broadcast to the output shape
// right-aligned with size-1 dims) are read once, the output written once;
// intermediates live in small per-thread tiles.
class Compiled : public Primitive {
 public:
  Compiled(Stream s, std::vector<Dtype> input_dtypes, std::vector<FusedStep> steps);
  ~Compiled() override;
  KILN_PRIMITIVE_BODY(Compiled)
  bool is_equivalent(const Primitive& o) const override;

  const std::vector<Dtype>& input_dtypes() const { return input_dtypes_; }
  const std::vector<FusedStep>& steps() const { return steps_; }
  Dtype value_dtype(int v) const {
    int n = static_cast<int>(input_dtypes_.size());
    return v < n ? input_dtypes_[v] : steps_[v - n].out_dtype;
  }
  // A readable, canonical description of the region (also its cache key).
  std::string structure() const;

  // Backend state built on first use (the CPU's tile program).
  struct CpuProgram;

  // The generated CPU kernel for one input layout pattern (see
  // compiled_codegen.h), built by `build` on first use; null when the
  // generated code cannot run it.
  void* codegen_kernel(const std::string& layouts, const std::function<void*()>& build);

 private:
  std::vector<Dtype> input_dtypes_;
  std::vector<FusedStep> steps_;
  std::once_flag cpu_once_;
  std::shared_ptr<CpuProgram> cpu_;
  std::mutex codegen_mutex_;
  std::map<std::string, void*> codegen_kernels_;
};

// The inputs of a traced function: never evaluated.
class Placeholder : public Primitive {
 public:
  using Primitive::Primitive;
  KILN_PRIMITIVE_BODY(Placeholder)
};

namespace detail {
// What the most recent trace did (for tests and debugging).
struct CompileStats {
  int traced_nodes = 0;      // op nodes that depend on the inputs, as traced
  int simplified_nodes = 0;  // after no-op removal, CSE and dead-code removal
  int fused_regions = 0;     // Compiled nodes created
  int final_nodes = 0;       // nodes of the replayed tape
  int constants = 0;         // arrays captured by fn
};
// How the CPU runs fused regions: the blocked interpreter, generated C++
// (falling back to the interpreter where it cannot), or `automatic`, the
// measured rule (compiled_codegen.cpp). KILN_COMPILE_BACKEND=interp|codegen|auto
// picks it; set_compile_backend overrides the environment (tests).
enum class CompileBackend { interp, codegen, automatic };
CompileBackend compile_backend();
void set_compile_backend(CompileBackend b);
void clear_compile_backend();

// What the code generator did so far in this process.
struct CodegenCounters {
  int64_t compiler_runs = 0;  // host compiler invocations
  int64_t disk_loads = 0;     // kernels loaded from the disk cache without compiling
  int64_t failures = 0;       // kernels that could not be built (the interpreter ran them)
};
CodegenCounters codegen_counters();
// Forgets the in-memory kernel cache (the disk cache stays), so that the
// next compile of a structure goes to the disk cache (tests).
void clear_codegen_memory_cache();

// What the GPU JIT service (backend/cuda/jit.h: compile's fused kernels and
// fast::cuda_kernel) did so far in this process; zeros without CUDA.
struct GpuJitCounters {
  int64_t nvrtc_builds = 0;  // sources compiled by NVRTC
  int64_t disk_loads = 0;    // cubins read from the disk cache instead
};
GpuJitCounters gpu_jit_counters();

// Number of traces done so far by every compiled function.
int64_t compile_trace_count();
CompileStats last_compile_stats();
}  // namespace detail

}  // namespace kiln
