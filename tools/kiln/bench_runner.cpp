// Runs `kiln bench`: ceilings first, then every selected drill (Kiln, then
// its peer on the same inputs), one table row as each finishes (--quick: the
// whole table at the end), then the JSON and the plot.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <regex>

#include "bench.h"

namespace kiln::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <typename T>
std::shared_ptr<T> make_touched_buffer(size_t n) {
  const size_t bytes = std::max<size_t>((n * sizeof(T) + 63) / 64 * 64, 64);
  T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] = T{};
  return std::shared_ptr<T>(p, [](T* q) { std::free(q); });
}

// Largest |kiln - peer| over max |peer| on up to 65536 evenly spaced
// elements; infinity when the sizes disagree or a value is not finite.
template <typename ToFloat>
double sample_difference(const array& kiln_out, size_t n, ToFloat reference) {
  if (kiln_out.size() != n) return std::numeric_limits<double>::infinity();
  array f = contiguous(astype(kiln_out, float32));
  f.eval();
  const float* got = f.data<float>();
  const size_t step = std::max<size_t>(1, n / 65536);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; i += step) {
    const double want = reference(i);
    const double diff = std::fabs(static_cast<double>(got[i]) - want);
    if (!std::isfinite(diff)) return std::numeric_limits<double>::infinity();
    max_diff = std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(want));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

// Threads for the peers: OpenMP loops and OpenBLAS.
void set_peer_threads(int n) {
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

// The roofline fraction: the floor (bytes at the measured bandwidth, or flops
// at the measured peak, whichever takes longer) over the measured time.
void score(BenchRow& row, const Ceilings& ceil, Dtype dtype, bool int8) {
  if (!row.time_us || row.device != "cpu") return;  // the ceilings are the CPU's
  const double memory_floor = row.bytes / (ceil.bandwidth_gbps() * 1e9);
  const double compute_floor = row.flops / (ceil.peak_gflops(dtype, int8) * 1e9);
  row.bound = compute_floor > memory_floor ? "compute" : "memory";
  row.roof_fraction = std::max(memory_floor, compute_floor) / (*row.time_us * 1e-6);
}

// The best of two measurements of each ceiling.
Ceilings higher_of(Ceilings a, const Ceilings& b) {
  a.copy_gbps = std::max(a.copy_gbps, b.copy_gbps);
  a.triad_gbps = std::max(a.triad_gbps, b.triad_gbps);
  a.copy_nt_gbps = std::max(a.copy_nt_gbps, b.copy_nt_gbps);
  a.triad_nt_gbps = std::max(a.triad_nt_gbps, b.triad_nt_gbps);
  a.read_gbps = std::max(a.read_gbps, b.read_gbps);
  a.fp32_gflops = std::max(a.fp32_gflops, b.fp32_gflops);
  a.bf16_gflops = std::max(a.bf16_gflops, b.bf16_gflops);
  a.amx_bf16_gflops = std::max(a.amx_bf16_gflops, b.amx_bf16_gflops);
  a.int8_gops = std::max(a.int8_gops, b.int8_gops);
  return a;
}

std::string describe(const DrillSpec& s) {
  return key_of(s.drill, s.name, dtype_name(s.dtype), s.shape);
}

// Measures one drill: Kiln first, then the peer on the same inputs.
BenchRow measure(const DrillSpec& spec, const BenchOptions& opts) {
  BenchRow row;
  row.drill = spec.drill;
  row.name = spec.name;
  row.device = opts.device;
  row.dtype = dtype_name(spec.dtype);
  row.shape = spec.shape;
  row.bytes = spec.bytes;
  row.flops = spec.flops;
  const double budget = opts.quick ? kQuickSideBudgetSeconds : kSideBudgetSeconds;

  DrillCase c;
  try {
    c = spec.prepare();
    // The peers' OpenMP loops (and the ceilings) leave a thread pool on this
    // thread; Kiln's kernels run in the pool of its stream worker. With more
    // libgomp threads than cores, libgomp cuts its spinning at barriers to
    // almost nothing, so every fork / join of Kiln's then waited on a futex
    // wake-up: small GEMMs (256^3) read 360 us here against 180 us alone.
    // Released, the pool is rebuilt by the next peer that needs it.
    omp_pause_resource_all(omp_pause_soft);
    Timing t = time_median(c.run_kiln, opts.reps, budget);
    row.time_us = t.median_us;
    row.reps = t.reps;
  } catch (const std::exception& e) {
    row.error = e.what();
  }
  if (!row.error.empty() && !c.run_kiln) return row;  // not even the inputs could be made

  // The peers are CPU code; against a GPU kernel they would compare machines.
  if (c.run_peer && opts.device == "cpu") {
    row.peer = c.peer_name;
    row.peer_time_us = time_median(c.run_peer, opts.reps, budget).median_us;
    if (row.time_us) {
      row.peer_ratio = *row.peer_time_us / *row.time_us;
      if (c.peer_difference) {
        try {
          row.peer_difference = c.peer_difference();
          row.peer_agrees = *row.peer_difference <= c.tolerance;
        } catch (const std::exception& e) {
          row.error = std::string("comparing with the peer: ") + e.what();
        }
      }
    }
  }

  if (row.time_us) {
    const double seconds = *row.time_us * 1e-6;
    row.gbps = spec.bytes / seconds / 1e9;
    row.gflops = spec.flops / seconds / 1e9;
  }
  return row;
}

}  // namespace

Timing time_median(const std::function<void()>& fn, int reps, double budget_seconds) {
  // Warm-up: caches, page faults of fresh buffers, compile's first trace,
  // the allocator's cache; short kernels get a few rounds.
  double last = seconds_of(fn), warm = last;
  for (int i = 0; i < 4 && warm < 0.05; ++i) warm += last = seconds_of(fn);
  const int runs = std::clamp(static_cast<int>(budget_seconds / std::max(last, 1e-9)), 1, std::max(reps, 1));
  std::vector<double> us(runs);
  for (double& t : us) t = seconds_of(fn) * 1e6;
  std::sort(us.begin(), us.end());
  const double median = runs % 2 ? us[runs / 2] : 0.5 * (us[runs / 2 - 1] + us[runs / 2]);
  return {median, runs};
}

array random_input(const Shape& shape, Dtype dtype, uint64_t seed, float lo, float hi) {
  array a = random::uniform(array(lo), array(hi), shape, dtype, random::key(seed));
  a.eval();
  return a;
}

DrillCase kiln_case(const std::shared_ptr<DrillState>& st, std::function<array(const std::vector<array>&)> make) {
  DrillCase c;
  // The previous output is dropped before the graph is built so its buffer
  // can be reused, as it would be in a loop of real work.
  c.run_kiln = [st, make = std::move(make)] {
    st->out.reset();
    array y = make(st->inputs);
    kiln::eval(y);
    st->out = y;
  };
  return c;
}

void compare_with_float_reference(DrillCase& c, const std::shared_ptr<DrillState>& st, double tolerance) {
  c.tolerance = tolerance;
  c.peer_difference = [st] {
    const float* ref = st->ref.get();
    return sample_difference(*st->out, st->out_elements, [ref](size_t i) { return ref[i]; });
  };
}

void compare_with_bf16_reference(DrillCase& c, const std::shared_ptr<DrillState>& st, double tolerance) {
  c.tolerance = tolerance;
  c.peer_difference = [st] {
    const uint16_t* ref = st->ref16.get();
    return sample_difference(*st->out, st->out_elements,
                             [ref](size_t i) { return bfloat16_t::to_float(ref[i]); });
  };
}

std::shared_ptr<float> make_float_buffer(size_t n) { return make_touched_buffer<float>(n); }
std::shared_ptr<uint16_t> make_u16_buffer(size_t n) { return make_touched_buffer<uint16_t>(n); }

bool compile_filter(const BenchOptions& opts, std::regex* filter) {
  try {
    *filter = std::regex(opts.filter.empty() ? std::string(".*") : opts.filter);
    return true;
  } catch (const std::regex_error& e) {
    std::fprintf(stderr, "kiln bench: --filter '%s' is not a valid regex: %s\n", opts.filter.c_str(), e.what());
    return false;
  }
}

int run_bench(const BenchOptions& opts) {
  if (opts.device == "gpu") {
    if (!is_available(Device::gpu)) {
      std::fprintf(stderr, "kiln bench: --device gpu: this build has no GPU backend or no GPU is present\n");
      return 2;
    }
    set_default_device(Device::gpu);
#ifdef KILN_HAS_CUDA
    return run_gpu_bench(opts);
#endif
  }
  if (!opts.peers_path.empty() && !std::ifstream(opts.peers_path)) {
    std::fprintf(stderr, "kiln bench: cannot read the peers file %s\n", opts.peers_path.c_str());
    return 2;
  }
  std::regex filter;
  if (!compile_filter(opts, &filter)) return 2;
  if (opts.threads > 0) set_cpu_threads(opts.threads);
  const int threads = cpu_threads();
  set_peer_threads(threads);

  std::vector<DrillSpec> specs;
  add_memory_drills(specs, opts.quick);
  add_custom_kernel_drills(specs, opts.quick);
  add_linalg_drills(specs, opts.quick);
  add_fast_drills(specs, opts.quick);
  add_attention_drills(specs, opts.quick);
  add_quant_drills(specs, opts.quick);
  add_quant_block_drills(specs, opts.quick);
  std::erase_if(specs, [&](const DrillSpec& s) { return !std::regex_search(describe(s), filter); });
  if (specs.empty()) {
    std::fprintf(stderr, "kiln bench: no drill matches --filter '%s' (drills are named drill/name/dtype/shape, "
                         "e.g. D1/add_gelu_fused/float32/67108864)\n", opts.filter.c_str());
    return 2;
  }

  std::unique_ptr<MlxPeer> mlx = start_mlx_peer(opts);
  Ceilings ceilings = measure_ceilings(threads, opts.quick);
  std::vector<BenchRow> rows;
  if (!opts.quick) {
    // Rows appear as they finish: the full run takes minutes.
    print_ceilings(ceilings, opts.quick);
    print_table_header(mlx != nullptr);
    for (const DrillSpec& spec : specs) {
      rows.push_back(measure(spec, opts));
      if (mlx) mlx->time_row(rows.back(), opts.reps, kSideBudgetSeconds);
      score(rows.back(), ceilings, spec.dtype, spec.int8_products);
      print_row(rows.back());
      clear_cache();  // each drill's inputs are gone now; return their memory too
    }
  } else {
    // The quick ceilings take a fraction of a second and a moment of load
    // from other processes can spoil them, so they are measured again after
    // the drills and the better of the two is the ceiling; the table waits.
    for (const DrillSpec& spec : specs) {
      rows.push_back(measure(spec, opts));
      if (mlx) mlx->time_row(rows.back(), opts.reps, kQuickSideBudgetSeconds);
      clear_cache();
    }
    ceilings = higher_of(ceilings, measure_ceilings(threads, opts.quick));
    print_ceilings(ceilings, opts.quick);
    print_table_header(mlx != nullptr);
    for (size_t i = 0; i < rows.size(); ++i) {
      score(rows[i], ceilings, specs[i].dtype, specs[i].int8_products);
      print_row(rows[i]);
    }
  }

  if (!opts.peers_path.empty()) {
    try {
      join_peers(rows, opts.peers_path);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln bench: %s\n", e.what());
      return 2;
    }
  }
  if (!opts.peers_path.empty() || mlx) print_peer_table(rows);

  int failed = 0, disagreeing = 0;
  for (const BenchRow& r : rows) {
    failed += !r.error.empty();
    disagreeing += !r.peer_agrees;
  }
  if (disagreeing)
    std::printf("\n%d row(s) marked '!': Kiln's output differs from the peer's beyond the tolerance.\n", disagreeing);
  if (failed) std::printf("%d drill(s) failed in Kiln (see 'error').\n", failed);

  try {
    if (!opts.json_path.empty()) write_json(opts.json_path, ceilings, rows, opts);
    if (!opts.plot_path.empty()) write_roofline_svg(opts.plot_path, ceilings, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln bench: %s\n", e.what());
    return 2;
  }
  return failed || disagreeing ? 1 : 0;
}

}  // namespace kiln::bench
