// D2 rows of the fast ops on the CPU: rms_norm, layer_norm and rope, fp32
// and bf16, [4096, 4096] of elements (rope as [1, 32, 4096, 128]: heads x
// positions x head_dim). Bandwidth-bound: the floor is one read of x and
// one write of y. The peers are the plain OpenMP loops anyone would write
// (rope's with a precomputed cos/sin table, as model code does); MLX's
// numbers come with --mlx (bench/peers/mlx_peers.py, a child process).
#include <omp.h>

#include <cmath>
#include <memory>

#include "bench.h"

namespace kiln::bench {
namespace {

// The peer's output for either dtype: float32 rows into st->ref, bf16 rows
// into st->ref16 (rounded to nearest even, as Kiln rounds).
struct PeerOut {
  float* f32 = nullptr;
  uint16_t* b16 = nullptr;
  void put(int64_t i, float v) const {
    if (f32) f32[i] = v;
    else b16[i] = bfloat16_t::from_float(v);
  }
};

PeerOut peer_out(const std::shared_ptr<DrillState>& st, Dtype t, int64_t n) {
  if (t == float32) {
    st->ref = make_float_buffer(n);
    return {st->ref.get(), nullptr};
  }
  st->ref16 = make_u16_buffer(n);
  return {nullptr, st->ref16.get()};
}

// x[i] as float for either dtype.
struct PeerIn {
  const float* f32 = nullptr;
  const bfloat16_t* b16 = nullptr;
  float operator[](int64_t i) const { return f32 ? f32[i] : static_cast<float>(b16[i]); }
};

PeerIn peer_in(const array& a) {
  if (a.dtype() == float32) return {a.data<float>(), nullptr};
  return {nullptr, a.data<bfloat16_t>()};
}

void finish_case(DrillCase& c, const std::shared_ptr<DrillState>& st, Dtype t, double f32_tol) {
  if (t == float32) compare_with_float_reference(c, st, f32_tol);
  else compare_with_bf16_reference(c, st, 2e-2);
}

}  // namespace

void add_fast_drills(std::vector<DrillSpec>& out, bool quick) {
  const int64_t m = quick ? 1024 : 4096, k = m;
  const double elems = static_cast<double>(m) * k;
  const Shape shape{static_cast<int>(m), static_cast<int>(k)};
  for (Dtype t : {float32, bfloat16}) {
    const double item = static_cast<double>(size_of(t));
    out.push_back({"D2", "rms_norm", t, {m, k}, item * (2 * elems + k), 4 * elems, [=] {
      auto st = std::make_shared<DrillState>();
      st->inputs = {random_input(shape, t, 21), random_input({static_cast<int>(k)}, t, 22, 0.5f, 1.5f)};
      st->out_elements = m * k;
      PeerOut y = peer_out(st, t, m * k);
      DrillCase c = kiln_case(st, [](const std::vector<array>& in) { return fast::rms_norm(in[0], in[1], 1e-5f); });
      c.peer_name = "omp_loop";
      c.run_peer = [st, y, m, k] {
        PeerIn x = peer_in(st->inputs[0]), w = peer_in(st->inputs[1]);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < m; ++r) {
          float ss = 0;
#pragma omp simd reduction(+ : ss)
          for (int64_t j = 0; j < k; ++j) ss += x[r * k + j] * x[r * k + j];
          const float inv = 1.0f / std::sqrt(ss / k + 1e-5f);
          for (int64_t j = 0; j < k; ++j) y.put(r * k + j, x[r * k + j] * inv * w[j]);
        }
      };
      finish_case(c, st, t, 1e-5);
      return c;
    }});
    out.push_back({"D2", "layer_norm", t, {m, k}, item * (2 * elems + 2 * k), 7 * elems, [=] {
      auto st = std::make_shared<DrillState>();
      st->inputs = {random_input(shape, t, 23), random_input({static_cast<int>(k)}, t, 24, 0.5f, 1.5f),
                    random_input({static_cast<int>(k)}, t, 25)};
      st->out_elements = m * k;
      PeerOut y = peer_out(st, t, m * k);
      DrillCase c = kiln_case(
          st, [](const std::vector<array>& in) { return fast::layer_norm(in[0], in[1], in[2], 1e-5f); });
      c.peer_name = "omp_loop";
      c.run_peer = [st, y, m, k] {
        PeerIn x = peer_in(st->inputs[0]), w = peer_in(st->inputs[1]), b = peer_in(st->inputs[2]);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < m; ++r) {
          float s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t j = 0; j < k; ++j) s += x[r * k + j];
          const float mean = s / k;
          float v = 0;
#pragma omp simd reduction(+ : v)
          for (int64_t j = 0; j < k; ++j) v += (x[r * k + j] - mean) * (x[r * k + j] - mean);
          const float inv = 1.0f / std::sqrt(v / k + 1e-5f);
          for (int64_t j = 0; j < k; ++j) y.put(r * k + j, (x[r * k + j] - mean) * inv * w[j] + b[j]);
        }
      };
      finish_case(c, st, t, 1e-4);
      return c;
    }});
    const int heads = 32, head_dim = 128, positions = static_cast<int>(elems / (heads * head_dim));
    out.push_back({"D2", "rope", t, {1, heads, positions, head_dim}, item * 2 * elems, 6 * elems, [=] {
      auto st = std::make_shared<DrillState>();
      st->inputs = {random_input({1, heads, positions, head_dim}, t, 26)};
      st->out_elements = static_cast<size_t>(elems);
      PeerOut y = peer_out(st, t, static_cast<int64_t>(elems));
      // The peer's table: cos/sin [positions, head_dim / 2], built once
      // outside the timing, as a model builds it once per sequence.
      const int half = head_dim / 2;
      auto cs = std::shared_ptr<float[]>(new float[static_cast<size_t>(positions) * half * 2]);
      for (int p = 0; p < positions; ++p) {
        for (int i = 0; i < half; ++i) {
          const double th = p * std::pow(10000.0, -static_cast<double>(i) / half);
          cs[(static_cast<size_t>(p) * half + i) * 2] = static_cast<float>(std::cos(th));
          cs[(static_cast<size_t>(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(th));
        }
      }
      DrillCase c = kiln_case(
          st, [](const std::vector<array>& in) { return fast::rope(in[0], 128, false, 10000.0f, 1.0f, 0); });
      c.peer_name = "omp_loop_table";
      c.run_peer = [st, y, cs, heads, positions, half] {
        PeerIn x = peer_in(st->inputs[0]);
        const int64_t rows = static_cast<int64_t>(heads) * positions, d = 2 * half;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
          const float* tab = cs.get() + (r % positions) * half * 2;
          for (int i = 0; i < half; ++i) {
            const float x1 = x[r * d + i], x2 = x[r * d + i + half], c0 = tab[2 * i], s0 = tab[2 * i + 1];
            y.put(r * d + i, x1 * c0 - x2 * s0);
            y.put(r * d + i + half, x1 * s0 + x2 * c0);
          }
        }
      };
      // Angles up to 4096 rad: a float32 table and Kiln's double recurrence
      // differ by ~4096 ulp of float in the angle.
      finish_case(c, st, t, 2e-3);
      return c;
    }});
  }
}

}  // namespace kiln::bench
