// The bandwidth-bound drills: D1 elementwise, D2 reductions and data
// movement. Each has a peer written the way anyone would write it (memcpy or
// a plain OpenMP loop), so the ratio says what Kiln's kernels add over the
// obvious code, and a floor from the bytes it must move.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "bench.h"
#include "core/compiled.h"

namespace kiln::bench {

// The GPU bench's chain (bench_drills_gpu.cpp, MLX's chain_eager): 1,000
// small ops (multiply, add, tanh) on 1,024 floats, built and evaluated per
// run through the public API. The kernels are ~10 ns each, so the time is
// the host's: building the lazy graph, scheduling it, running each node and
// freeing it. Eager, and compile'd once and called per run.
std::vector<array> host_chain(const std::vector<array>& in) {
  array x = in[0];
  for (int i = 0; i < 1000; ++i) {
    switch (i % 3) {
      case 0:
        x = x * 0.999f;
        break;
      case 1:
        x = x + 0.001f;
        break;
      default:
        x = tanh(x);
        break;
    }
  }
  return {x};
}

namespace {

// Nominal flop counts, with a transcendental counted as one flop: these
// drills are bandwidth bound by a wide margin, so the counts only place
// them on the roofline's x axis and never decide the floor.
// gelu_approx(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): 9 flops.
constexpr double kGeluFlops = 9;
// softmax: max, subtract, exp, sum, scale.
constexpr double kSoftmaxFlops = 5;

inline float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// ---- D1 elementwise ----

void add_elementwise(std::vector<DrillSpec>& out, int64_t n) {
  const double nd = static_cast<double>(n);
  const Shape shape{static_cast<int>(n)};

  out.push_back({"D1", "copy", float32, {n}, 2 * 4 * nd, 0, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input(shape, float32, 1)};
    st->out_elements = n;
    st->ref = make_float_buffer(n);
    DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return kiln::copy(in[0]); });
    c.peer_name = "memcpy";
    c.run_peer = [st, n] {
      const char* src = reinterpret_cast<const char*>(st->inputs[0].data<float>());
      char* dst = reinterpret_cast<char*>(st->ref.get());
      const size_t bytes = n * sizeof(float);
      // memcpy per thread: one memcpy alone would leave the other cores idle.
#pragma omp parallel
      {
        const size_t parts = omp_get_num_threads(), part = omp_get_thread_num();
        const size_t begin = bytes * part / parts / 64 * 64;
        const size_t end = part + 1 == parts ? bytes : bytes * (part + 1) / parts / 64 * 64;
        std::memcpy(dst + begin, src + begin, end - begin);
      }
    };
    compare_with_float_reference(c, st, 0);
    return c;
  }});

  out.push_back({"D1", "add", float32, {n}, 3 * 4 * nd, nd, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input(shape, float32, 1), random_input(shape, float32, 2)};
    st->out_elements = n;
    st->ref = make_float_buffer(n);
    DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return in[0] + in[1]; });
    c.peer_name = "omp_loop";
    c.run_peer = [st, n] {
      const float* x = st->inputs[0].data<float>();
      const float* z = st->inputs[1].data<float>();
      float* y = st->ref.get();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] + z[i];
    };
    compare_with_float_reference(c, st, 0);
    return c;
  }});

  // The compiled function is traced on its first call, which the warm-up
  // absorbs; the timed calls hit compile's cache.
  const ArrayFn fused_add_gelu = [](const std::vector<array>& in) {
    return std::vector<array>{gelu_approx(in[0] + in[1])};
  };

  // The fused rows: compile's default CPU backend, then each backend forced
  // (the interpreter and generated C++; see "compile backends" in
  // docs/performance.md).
  struct Variant {
    const char* name;
    bool fused;
    std::optional<detail::CompileBackend> backend;
  };
  const Variant variants[] = {{"add_gelu_two_ops", false, std::nullopt},
                              {"add_gelu_fused", true, std::nullopt},
                              {"add_gelu_fused_interp", true, detail::CompileBackend::interp},
                              {"add_gelu_fused_codegen", true, detail::CompileBackend::codegen}};
  for (Dtype dtype : {float32, bfloat16}) {
    const double item = static_cast<double>(size_of(dtype));
    for (const Variant& v : variants) {
      const bool fused = v.fused;
      const auto backend = v.backend;
      // Unfused, add writes x + z and gelu reads it back: its real traffic.
      const double bytes = (fused ? 3 : 5) * item * nd;
      out.push_back({"D1", v.name, dtype, {n}, bytes, (1 + kGeluFlops) * nd, [=] {
        auto st = std::make_shared<DrillState>();
        st->inputs = {random_input(shape, dtype, 1), random_input(shape, dtype, 2)};
        st->out_elements = n;
        DrillCase c;
        if (fused) {
          ArrayFn compiled = compile(fused_add_gelu);
          c = kiln_case(st, [compiled, backend](const std::vector<array>& in) {
            // Read when the graph is evaluated, right after this returns.
            if (backend) {
              detail::set_compile_backend(*backend);
            } else {
              detail::clear_compile_backend();
            }
            return compiled(in)[0];
          });
        } else {
          c = kiln_case(st, [](const std::vector<array>& in) { return gelu_approx(in[0] + in[1]); });
        }
        c.peer_name = "omp_loop_std_tanh";
        if (dtype == float32) {
          st->ref = make_float_buffer(n);
          c.run_peer = [st, n] {
            const float* x = st->inputs[0].data<float>();
            const float* z = st->inputs[1].data<float>();
            float* y = st->ref.get();
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i] + z[i]);
          };
          compare_with_float_reference(c, st, 1e-4);
        } else {
          st->ref16 = make_u16_buffer(n);
          c.run_peer = [st, n] {
            const bfloat16_t* x = st->inputs[0].data<bfloat16_t>();
            const bfloat16_t* z = st->inputs[1].data<bfloat16_t>();
            uint16_t* y = st->ref16.get();
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; ++i)
              y[i] = bfloat16_t::from_float(gelu_tanh(float(x[i]) + float(z[i])));
          };
          // The unfused version rounds x + z to bf16 before the GELU.
          compare_with_bf16_reference(c, st, 2e-2);
        }
        return c;
      }});
    }
  }
}

// ---- D2 reductions (fp32) ----

void add_row_reduction(std::vector<DrillSpec>& out, const std::string& name, int64_t m, int64_t k) {
  const double elems = static_cast<double>(m) * k;
  out.push_back({"D2", name, float32, {m, k}, 4 * (elems + m), elems, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input({static_cast<int>(m), static_cast<int>(k)}, float32, 3)};
    st->out_elements = m;
    st->ref = make_float_buffer(m);
    const bool is_max = name == "row_max";
    DrillCase c = kiln_case(st, [is_max](const std::vector<array>& in) {
      return is_max ? kiln::max(in[0], -1) : kiln::sum(in[0], -1);
    });
    c.peer_name = "omp_loop";
    c.run_peer = [st, m, k, is_max] {
      const float* x = st->inputs[0].data<float>();
      float* y = st->ref.get();
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
        const float* row = x + r * k;
        float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
        if (is_max) {
#pragma omp simd reduction(max : acc)
          for (int64_t j = 0; j < k; ++j) acc = std::max(acc, row[j]);
        } else {
#pragma omp simd reduction(+ : acc)
          for (int64_t j = 0; j < k; ++j) acc += row[j];
        }
        y[r] = acc;
      }
    };
    // Sums of 2^22 terms in a different order differ in the last bits.
    compare_with_float_reference(c, st, is_max ? 0 : 1e-4);
    return c;
  }});
}

void add_reductions(std::vector<DrillSpec>& out, bool quick) {
  const std::vector<std::pair<int64_t, int64_t>> row_sum_shapes =
      quick ? std::vector<std::pair<int64_t, int64_t>>{{1024, 1024}, {16384, 64}, {16, 65536}}
            : std::vector<std::pair<int64_t, int64_t>>{{8192, 8192}, {1 << 20, 64}, {16, 1 << 22}};
  for (auto [m, k] : row_sum_shapes) add_row_reduction(out, "row_sum", m, k);
  const int64_t side = quick ? 1024 : 8192;
  add_row_reduction(out, "row_max", side, side);

  {
    const int64_t m = side, k = side;
    const double elems = static_cast<double>(m) * k;
    out.push_back({"D2", "col_sum", float32, {m, k}, 4 * (elems + k), elems, [=] {
      auto st = std::make_shared<DrillState>();
      st->inputs = {random_input({static_cast<int>(m), static_cast<int>(k)}, float32, 4)};
      st->out_elements = k;
      st->ref = make_float_buffer(k);
      DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return kiln::sum(in[0], 0); });
      c.peer_name = "omp_loop";
      c.run_peer = [st, m, k] {
        const float* x = st->inputs[0].data<float>();
        float* y = st->ref.get();
        // Each thread owns a band of columns and walks down the rows, so the
        // inner loop is contiguous and vectorises.
#pragma omp parallel
        {
          const int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
          const int64_t begin = k * part / parts, end = k * (part + 1) / parts;
          for (int64_t j = begin; j < end; ++j) y[j] = 0;
          for (int64_t r = 0; r < m; ++r) {
            const float* row = x + r * k;
#pragma omp simd
            for (int64_t j = begin; j < end; ++j) y[j] += row[j];
          }
        }
      };
      compare_with_float_reference(c, st, 1e-4);
      return c;
    }});
  }

  {
    const int64_t m = quick ? 1024 : 4096, k = m;
    const double elems = static_cast<double>(m) * k;
    out.push_back({"D2", "softmax", float32, {m, k}, 2 * 4 * elems, kSoftmaxFlops * elems, [=] {
      auto st = std::make_shared<DrillState>();
      st->inputs = {random_input({static_cast<int>(m), static_cast<int>(k)}, float32, 5)};
      st->out_elements = m * k;
      st->ref = make_float_buffer(m * k);
      DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return kiln::softmax(in[0], -1); });
      c.peer_name = "omp_loop_std_exp";
      c.run_peer = [st, m, k] {
        const float* x = st->inputs[0].data<float>();
        float* y = st->ref.get();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < m; ++r) {
          const float* in = x + r * k;
          float* o = y + r * k;
          float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
          for (int64_t j = 0; j < k; ++j) mx = std::max(mx, in[j]);
          float total = 0;
          for (int64_t j = 0; j < k; ++j) total += (o[j] = std::exp(in[j] - mx));
          const float scale = 1.0f / total;
#pragma omp simd
          for (int64_t j = 0; j < k; ++j) o[j] *= scale;
        }
      };
      compare_with_float_reference(c, st, 1e-4);
      return c;
    }});
  }
}

// ---- data movement (fp32) ----

void add_data_movement(std::vector<DrillSpec>& out, bool quick) {
  const int64_t m = quick ? 1024 : 8192, k = m;
  const double elems = static_cast<double>(m) * k;
  const Shape shape{static_cast<int>(m), static_cast<int>(k)};

  out.push_back({"DM", "transpose", float32, {m, k}, 2 * 4 * elems, 0, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input(shape, float32, 6)};
    st->out_elements = m * k;
    st->ref = make_float_buffer(m * k);
    // transpose alone is a view; contiguous makes it write the new layout.
    DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return contiguous(transpose(in[0])); });
    c.peer_name = "omp_blocked_loop";
    c.run_peer = [st, m, k] {
      const float* x = st->inputs[0].data<float>();
      float* y = st->ref.get();
      // 64 x 64 tiles: both the rows read and the rows written stay in L1.
      constexpr int64_t kTile = 64;
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t i0 = 0; i0 < m; i0 += kTile)
        for (int64_t j0 = 0; j0 < k; j0 += kTile)
          for (int64_t j = j0; j < std::min(j0 + kTile, k); ++j)
            for (int64_t i = i0; i < std::min(i0 + kTile, m); ++i) y[j * m + i] = x[i * k + j];
    };
    compare_with_float_reference(c, st, 0);
    return c;
  }});

  out.push_back({"DM", "broadcast_add", float32, {m, k}, 4 * (2 * elems + k), elems, [=] {
    auto st = std::make_shared<DrillState>();
    st->inputs = {random_input(shape, float32, 7), random_input({static_cast<int>(k)}, float32, 8)};
    st->out_elements = m * k;
    st->ref = make_float_buffer(m * k);
    DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return in[0] + in[1]; });
    c.peer_name = "omp_loop";
    c.run_peer = [st, m, k] {
      const float* x = st->inputs[0].data<float>();
      const float* b = st->inputs[1].data<float>();
      float* y = st->ref.get();
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) y[r * k + j] = x[r * k + j] + b[j];
      }
    };
    compare_with_float_reference(c, st, 0);
    return c;
  }});

  // Two [m, k/2] halves side by side: along the last axis every output row
  // interleaves both inputs, the harder case for a copy kernel.
  out.push_back({"DM", "concatenate", float32, {m, k}, 2 * 4 * elems, 0, [=] {
    auto st = std::make_shared<DrillState>();
    const Shape half{static_cast<int>(m), static_cast<int>(k / 2)};
    st->inputs = {random_input(half, float32, 9), random_input(half, float32, 10)};
    st->out_elements = m * k;
    st->ref = make_float_buffer(m * k);
    DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return concatenate({in[0], in[1]}, 1); });
    c.peer_name = "omp_memcpy_rows";
    c.run_peer = [st, m, k] {
      const float* a = st->inputs[0].data<float>();
      const float* b = st->inputs[1].data<float>();
      float* y = st->ref.get();
      const int64_t h = k / 2;
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < m; ++r) {
        std::memcpy(y + r * k, a + r * h, h * sizeof(float));
        std::memcpy(y + r * k + h, b + r * h, h * sizeof(float));
      }
    };
    compare_with_float_reference(c, st, 0);
    return c;
  }});
}

// ---- HOST: what the framework costs per op ----

void add_host_chain(std::vector<DrillSpec>& out) {
  const int n = 1024;
  for (bool compiled : {false, true}) {
    out.push_back({"HOST", compiled ? "chain_compiled" : "chain_eager", float32, {1000, n}, 8.0 * n, 1000.0 * n, [=] {
                     auto st = std::make_shared<DrillState>();
                     st->inputs = {random_input({n}, float32, 5)};
                     auto step = compiled ? compile(host_chain) : ArrayFn(host_chain);
                     return kiln_case(st, [step](const std::vector<array>& in) { return step(in)[0]; });
                   }});
  }
}

}  // namespace

void add_memory_drills(std::vector<DrillSpec>& out, bool quick) {
  add_host_chain(out);
  add_elementwise(out, quick ? int64_t{1} << 20 : int64_t{1} << 26);
  add_reductions(out, quick);
  add_data_movement(out, quick);
}

}  // namespace kiln::bench
