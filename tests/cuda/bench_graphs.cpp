// Per-op cost of a chain of small ops on the GPU, CUDA graphs on and off:
// builds a 1,000-op elementwise chain lazily, evaluates it, and reports the
// wall time per op of building, of eval (until the result is ready), and of
// both, for the first eval of that topology (graphs: instantiation) and for
// repeated evals (graphs: cached executable, cudaGraphExecUpdate). The same
// chain in PyTorch eager is bench/peers/chain_torch.py. The last mode runs
// the chain through compile (graphs on): a few fused NVRTC kernels instead
// of 1,000, so its cost per op is the trace-cache lookup and replay.
//
//   kiln_cuda_graph_bench [ops=1000] [elements=1024] [reps=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/graph_encoder.h"
#include "kiln/kiln.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

// x -> ((x * 0.999 + 0.001) ... ), alternating three cheap ops.
array chain(array x, int ops) {
  for (int i = 0; i < ops; ++i) {
    switch (i % 3) {
      case 0: x = multiply(x, array(0.999f), Device::gpu); break;
      case 1: x = add(x, array(0.001f), Device::gpu); break;
      default: x = tanh(x, Device::gpu); break;
    }
  }
  return x;
}

struct Timing {
  double build_us, eval_us;
};

Timing run_once(const array& x0, int ops, const ArrayFn* compiled = nullptr) {
  auto t0 = Clock::now();
  array y = compiled ? (*compiled)({x0})[0] : chain(x0, ops);
  double build = us_since(t0);
  auto t1 = Clock::now();
  eval(y);
  double ev = us_since(t1);
  return {build, ev};
}

void report(const char* mode, const char* phase, const std::vector<Timing>& t, int ops) {
  std::vector<double> b, e, s;
  for (auto& x : t) {
    b.push_back(x.build_us);
    e.push_back(x.eval_us);
    s.push_back(x.build_us + x.eval_us);
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("%-8s %-10s build %7.2f  eval %7.2f  total %7.2f us/op\n", mode, phase, med(b) / ops, med(e) / ops,
              med(s) / ops);
}

}  // namespace

int main(int argc, char** argv) {
  int ops = argc > 1 ? std::atoi(argv[1]) : 1000;
  int n = argc > 2 ? std::atoi(argv[2]) : 1024;
  int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  if (!is_available(Device::gpu)) {
    std::printf("no GPU\n");
    return 1;
  }
  array x0 = random::uniform({n}, float32, std::nullopt, Device::gpu);
  eval(x0);
  std::printf("chain of %d ops (multiply, add, tanh) on %d fp32 elements, median of %d\n", ops, n, reps);
  for (bool graphs : {false, true}) {
    cuda::graph_settings().enabled = graphs;
    const char* mode = graphs ? "graphs" : "eager";
    // First eval of this topology (for graphs: capture + instantiate).
    std::vector<Timing> first{run_once(x0, ops)};
    report(mode, "first", first, ops);
    std::vector<Timing> steady;
    for (int r = 0; r < reps; ++r) steady.push_back(run_once(x0, ops));
    report(mode, "repeated", steady, ops);
  }
  {
    cuda::graph_settings().enabled = true;
    ArrayFn compiled = compile([ops](const std::vector<array>& in) { return std::vector<array>{chain(in[0], ops)}; });
    std::vector<Timing> first{run_once(x0, ops, &compiled)};  // trace + NVRTC (or its disk cache)
    report("compiled", "first", first, ops);
    std::vector<Timing> steady;
    for (int r = 0; r < reps; ++r) steady.push_back(run_once(x0, ops, &compiled));
    report("compiled", "repeated", steady, ops);
  }
  auto st = cuda::graph_stats();
  std::printf("graph stats: launched %llu, instantiated %llu, updated %llu, nodes %llu, fallbacks %llu\n",
              static_cast<unsigned long long>(st.launched), static_cast<unsigned long long>(st.instantiated),
              static_cast<unsigned long long>(st.updated), static_cast<unsigned long long>(st.nodes),
              static_cast<unsigned long long>(st.fallbacks));
  if (st.nodes > 0) {
    std::printf("graph host time per recorded node: capture %.2f us, end+update/instantiate %.2f us, launch %.3f us\n",
                st.capture_ns * 1e-3 / st.nodes, st.prepare_ns * 1e-3 / st.nodes, st.launch_ns * 1e-3 / st.nodes);
  }
  return 0;
}
