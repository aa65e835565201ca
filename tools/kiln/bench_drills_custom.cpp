// User-written kernels (fast::cpu_kernel) on the drills' work: the D1
// add+GELU of bench_drills_memory.cpp and the D2 row sum, written the way
// docs/custom_kernels.md shows, against the same OpenMP peers. The rows say
// what a custom kernel costs over a hand-written loop (the JIT builds it
// once; the warm-up absorbs the build, the timed calls hit the cache).
#include <omp.h>

#include <cmath>
#include <memory>

#include "bench.h"

namespace kiln::bench {
namespace {

inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// The GELU of add_gelu's peer, one thread per element, with the tanh a
// custom kernel should call (kiln::math::tanh vectorizes; std::tanh, the
// peer's, is a scalar library call: 755 ms against 23.5-24.4 here).
const char* kAddGelu = R"(
    const int64_t i = thread_position_in_grid;
    const float v = x[i] + z[i];
    out[i] = 0.5f * v * (1.0f + kiln::math::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
)";

// A thread per row; 16 partial sums so the compiler vectorizes the loop.
const char* kRowSum = R"(
    const int64_t row = thread_position_in_grid;
    const int64_t k = x_shape[1];
    const float* p = x + row * k;
    float acc[16] = {};
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
      for (int u = 0; u < 16; ++u) acc[u] += p[j + u];
    }
    float total = 0;
    for (int u = 0; u < 16; ++u) total += acc[u];
    for (; j < k; ++j) total += p[j];
    out[row] = total;
)";

}  // namespace

void add_custom_kernel_drills(std::vector<DrillSpec>& out, bool quick) {
  {
    const int64_t n = quick ? int64_t{1} << 20 : int64_t{1} << 26;
    const double nd = static_cast<double>(n);
    // 9 nominal flops for the GELU (bench_drills_memory.cpp) and the add.
    out.push_back({"D1", "add_gelu_fused_cpu_kernel", float32, {n}, 3 * 4 * nd, 10 * nd, [=] {
      auto st = std::make_shared<DrillState>();
      const Shape shape{static_cast<int>(n)};
      st->inputs = {random_input(shape, float32, 1), random_input(shape, float32, 2)};
      st->out_elements = n;
      st->ref = make_float_buffer(n);
      auto k = fast::cpu_kernel("bench_add_gelu", {"x", "z"}, {"out"}, kAddGelu);
      DrillCase c = kiln_case(st, [k, n, shape](const std::vector<array>& in) {
        return k(in, {shape}, {float32}, {static_cast<int>(n), 1, 1}, {1 << 16, 1, 1}, {}, std::nullopt, false, {})[0];
      });
      c.peer_name = "omp_loop_std_tanh";
      c.run_peer = [st, n] {
        const float* x = st->inputs[0].data<float>();
        const float* z = st->inputs[1].data<float>();
        float* y = st->ref.get();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i] + z[i]);
      };
      compare_with_float_reference(c, st, 1e-4);
      return c;
    }});
  }
  const int64_t m = quick ? 1024 : 8192, k = m;
  const double elems = static_cast<double>(m) * k;
  out.push_back({"D2", "row_sum_cpu_kernel", float32, {m, k}, 4 * (elems + m), elems, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input({static_cast<int>(m), static_cast<int>(k)}, float32, 3)};
    st->out_elements = m;
    st->ref = make_float_buffer(m);
    auto kernel = fast::cpu_kernel("bench_row_sum", {"x"}, {"out"}, kRowSum);
    DrillCase c = kiln_case(st, [kernel, m](const std::vector<array>& in) {
      return kernel(in, {{static_cast<int>(m)}}, {float32}, {static_cast<int>(m), 1, 1}, {16, 1, 1}, {}, std::nullopt,
                    false, {})[0];
    });
    c.peer_name = "omp_loop";
    c.run_peer = [st, m, k] {
      const float* x = st->inputs[0].data<float>();
      float* y = st->ref.get();
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t j = 0; j < k; ++j) acc += x[r * k + j];
        y[r] = acc;
      }
    };
    compare_with_float_reference(c, st, 1e-4);
    return c;
  }});
}

}  // namespace kiln::bench
