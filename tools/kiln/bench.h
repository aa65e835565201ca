#pragma once
// `kiln bench`: the kernel lab. It measures this machine's ceilings (memory
// bandwidth, compute peaks), times every drill of DESIGN.md that exists so
// far against them and against a peer doing the same work, and reports a
// table, JSON and an SVG roofline.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::bench {

struct BenchOptions {
  std::string filter;       // regex over "drill/name/dtype/shape"; empty keeps everything
  std::string device = "cpu";
  int threads = 0;          // 0: Kiln's default (every core)
  int reps = 5;
  std::string json_path;
  std::string plot_path;
  bool quick = false;       // small sizes: checks the accounting, not the machine
  std::string peers_path;   // rows of a bench/peers/ script to join (gpu_peers.py, mlx_peers.py --json)
  bool mlx = false;         // --mlx: time MLX on every row it has an op for, right after Kiln
  std::string mlx_python = "python3";
  std::string mlx_script;   // empty: bench/peers/mlx_peers.py of the source tree
};

// What the machine can do, measured at the start of the run (--quick: the
// better of a measurement before and one after the drills).
struct Ceilings {
  double copy_gbps = 0;     // STREAM copy, counting 2 x 8 bytes per element
  double triad_gbps = 0;    // STREAM triad, counting 3 x 8 bytes per element
  double copy_nt_gbps = 0;  // the same two with streaming stores (CPU only; 0 with --quick)
  double triad_nt_gbps = 0;
  double read_gbps = 0;     // reading alone (a sum, four streams per thread; CPU only; 0 with --quick)
  double stream_array_bytes = 0;
  double fp32_gflops = 0;
  std::string fp32_isa;     // "avx512f" or "avx2"
  double bf16_gflops = 0;   // AVX512-BF16 dot products; 0 where the CPU has none
  std::string bf16_isa;
  double amx_bf16_gflops = 0;  // AMX tile dot products; 0 where absent or not permitted
  double int8_gops = 0;        // AVX512-VNNI u8 x s8 dot products (vpdpbusd); 0 where absent
  int threads = 1;
  std::string gpu_name;     // --device gpu: the GPU; copy_gbps is then its device copy
  double tf32_gflops = 0;   // --device gpu: cuBLASLt tf32 rate
  // The roofline's bandwidth: the best of copy and triad, with normal and
  // with streaming stores, so that a kernel streaming as well as STREAM
  // scores 1.0 whichever shape and stores it has.
  double bandwidth_gbps() const { return std::max({copy_gbps, triad_gbps, copy_nt_gbps, triad_nt_gbps}); }
  // Compute peak for a kernel whose multiplies run in `dtype`: the fastest
  // way this CPU has to multiply that dtype. A bf16 kernel may use AMX tiles,
  // AVX512-BF16 dot products or widen to fp32 FMAs (on some CPUs the
  // dot-product instruction is the slowest of the three), so it is measured
  // against the best of them.
  // Rows whose products run on 8-bit codes (the block formats' QMM, x
  // rounded to 8 bits) are measured against the int8 dot-product peak.
  double peak_gflops(Dtype dtype, bool int8 = false) const {
    if (int8) return std::max(int8_gops, peak_gflops(dtype));
    if (dtype != bfloat16) return fp32_gflops;
    return std::max({fp32_gflops, bf16_gflops, amx_bf16_gflops});
  }
};

Ceilings measure_ceilings(int threads, bool quick);

// One prepared measurement: inputs already evaluated, closures ready to time.
struct DrillCase {
  std::function<void()> run_kiln;  // builds the lazy graph, then kiln::eval
  std::string peer_name;           // empty: no peer does this work here
  std::function<void()> run_peer;
  // After both ran: the largest |kiln - peer| over max |peer| on a sample
  // of the outputs, so a fast but wrong kernel does not go unnoticed.
  std::function<double()> peer_difference;
  double tolerance = 1e-4;
};

// A drill at one size. Preparing allocates the inputs, so it is deferred
// until the filter has selected the drill.
struct DrillSpec {
  std::string drill;           // "D1", "D2", "D3", "D5", "DM"
  std::string name;            // "add_gelu_fused", "row_sum", "sgemm", ...
  Dtype dtype = float32;
  std::vector<int64_t> shape;  // GEMM: [M, K, N]; matvec: [K, N]
  double bytes = 0;            // each input read once, each output written once
  double flops = 0;
  std::function<DrillCase()> prepare;
  bool int8_products = false;  // scored against Ceilings::int8_gops (peak_gflops)
};

// One row of the report.
struct BenchRow {
  std::string drill, name, device, dtype;
  std::vector<int64_t> shape;
  double bytes = 0, flops = 0;
  int reps = 0;
  std::optional<double> time_us, gbps, gflops, roof_fraction;
  std::string bound;  // "memory" or "compute": which side of the floor is larger
  std::string peer;
  std::optional<double> peer_time_us, peer_ratio, peer_difference;
  bool peer_agrees = true;
  std::vector<std::pair<std::string, double>> all_peers;  // --peers, --mlx: every peer's microseconds
  std::optional<double> mlx_time_us, mlx_ratio;           // --mlx: MLX's time, MLX's / Kiln's
  std::string error;  // set when Kiln failed to run the drill
};

// Times `fn`: warm-up, then up to `reps` runs (fewer where one run is so
// slow that all of them would blow the per-row time budget); returns the
// median in microseconds and the number of runs it took.
struct Timing {
  double median_us = 0;
  int reps = 0;
};
Timing time_median(const std::function<void()>& fn, int reps, double budget_seconds);

// The drills, at the full sizes of issue 3 or the --quick ones.
void add_memory_drills(std::vector<DrillSpec>& out, bool quick);  // D1, D2, data movement
void add_linalg_drills(std::vector<DrillSpec>& out, bool quick);  // D3 GEMM, D5 matvec
void add_fast_drills(std::vector<DrillSpec>& out, bool quick);    // D2 rms_norm, layer_norm, rope
void add_attention_drills(std::vector<DrillSpec>& out, bool quick);  // D5 attention
void add_quant_drills(std::vector<DrillSpec>& out, bool quick);   // D4 quantized matvec / matmul
void add_quant_block_drills(std::vector<DrillSpec>& out, bool quick);  // D4 QMV on llama.cpp blocks
void add_custom_kernel_drills(std::vector<DrillSpec>& out, bool quick);  // D1, D2 as fast::cpu_kernel
// HOST chain_eager/chain_compiled on both backends (and MLX's chain_eager):
// 1,000 small ops (multiply, add, tanh in turn) on the one input.
std::vector<array> host_chain(const std::vector<array>& in);
// Random llama.cpp blocks of `mode` for w [n, k] with small finite scales, evaluated.
array random_block_weights(const std::string& mode, int64_t n, int64_t k, uint64_t seed);

// D5 decoder_layer: one decode step (batch 1, bf16) through one Llama-3-8B
// layer (hidden 4096, 32 query / 8 KV heads of 128, MLP 14336; --quick: a
// small one) with `kv` cached positions, built by llm::Model::random with a
// 256-token vocabulary (embedding and logits ~1% of the bytes) and run as
// the runtime runs it: Model::decode_step, compiled. inputs = {token,
// position kv - 1, key buffer, value buffer}; bytes = the weights plus the
// K/V read once (the floor the issue names: weights / bandwidth, plus the
// cache).
struct DecoderLayerCase {
  std::shared_ptr<const void> model;  // keeps the llm::Model alive
  std::function<std::vector<array>(const std::vector<array>&)> step, eager_step;
  std::vector<array> inputs;
};
DecoderLayerCase make_decoder_layer(int kv, bool quick);
std::vector<int64_t> decoder_layer_shape(int kv, bool quick);  // [hidden, intermediate, heads, kv_heads, kv]
void decoder_layer_cost(int kv, bool quick, double& bytes, double& flops);

// Helpers shared by the drill files.
// Uniform random values in [lo, hi), evaluated.
array random_input(const Shape& shape, Dtype dtype, uint64_t seed, float lo = -3.0f, float hi = 3.0f);

// Inputs, the latest Kiln output and the peer's output of one case.
struct DrillState {
  std::vector<array> inputs;
  std::optional<array> out;
  std::shared_ptr<float> ref;      // peer output, float32
  std::shared_ptr<uint16_t> ref16;  // peer output, bfloat16 bits
  size_t out_elements = 0;
};
// A case whose Kiln side builds `make(inputs)` and evaluates it.
DrillCase kiln_case(const std::shared_ptr<DrillState>& st,
                    std::function<array(const std::vector<array>&)> make);
// Sets the check of Kiln's output against the peer's (st->ref or st->ref16):
// largest |kiln - peer| over max |peer|, on a sample, must stay within tolerance.
void compare_with_float_reference(DrillCase& c, const std::shared_ptr<DrillState>& st, double tolerance);
void compare_with_bf16_reference(DrillCase& c, const std::shared_ptr<DrillState>& st, double tolerance);
// 64-byte aligned, first-touched in parallel so the peer's timing does not
// include page faults.
std::shared_ptr<float> make_float_buffer(size_t n);
std::shared_ptr<uint16_t> make_u16_buffer(size_t n);

// Reporting.
std::string shape_string(const std::vector<int64_t>& shape);
// "drill/name/dtype/AxBxC", how --filter, --peers files and the MLX peer name a row.
std::string key_of(const std::string& drill, const std::string& name, const std::string& dtype,
                   const std::vector<int64_t>& shape);
void print_ceilings(const Ceilings& c, bool quick);
// with_mlx: the table gets a last column, MLX's time over Kiln's (--mlx).
void print_table_header(bool with_mlx = false);
void print_row(const BenchRow& row);
void write_json(const std::string& path, const Ceilings& c, const std::vector<BenchRow>& rows,
                const BenchOptions& opts);
// Peers' rows written by a bench/peers/ script ({"rows": [{drill, name,
// dtype, shape, peer, time_us}, ...]}): each row takes the fastest peer of
// the same drill, name, dtype and shape; print_peer_table lists them all.
void join_peers(std::vector<BenchRow>& rows, const std::string& path);
void print_peer_table(const std::vector<BenchRow>& rows);
void write_roofline_svg(const std::string& path, const Ceilings& c, const std::vector<BenchRow>& rows);

// MLX in a child process (bench_mlx.cpp): `python script --serve --device
// cpu|gpu`, asked to time each row right after Kiln did. When it cannot
// start (no python, mlx not installed) available() is false and status()
// says why; the bench then runs without the column.
class MlxPeer {
 public:
  MlxPeer(const std::string& python, const std::string& script, const std::string& device);
  ~MlxPeer();
  MlxPeer(const MlxPeer&) = delete;
  MlxPeer& operator=(const MlxPeer&) = delete;
  bool available() const { return ok_; }
  const std::string& status() const { return status_; }
  // MLX's median for drill/name/dtype/shape; nullopt (and why) when MLX has
  // no such op or the child failed.
  std::optional<double> time_us(const std::string& key, int reps, double budget_s, std::string* why = nullptr);
  // Times the row's drill and records it in mlx_time_us, mlx_ratio, all_peers.
  void time_row(BenchRow& row, int reps, double budget_s);

 private:
  void start();
  // A line from the child; false at EOF or after timeout_ms (-1: no limit).
  bool read_line(std::string& line, int timeout_ms = -1);
  void stop(bool kill_child = false);
  std::string python_, script_, device_, peer_name_;
  bool ok_ = false;
  int pid_ = -1;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
  std::string status_;
};
// The longest a row may take on MLX's side (or 4x the side budget, if more).
constexpr double kMlxRowLimitSeconds = 60.0;
// The MLX peer of --mlx for opts.device, or null (with a line on stderr
// saying why) when --mlx is off or MLX cannot start.
std::unique_ptr<MlxPeer> start_mlx_peer(const BenchOptions& opts);

// Time budget of one side of a row (Kiln's, a peer's), so that a slow kernel
// shows up in minutes rather than hours.
constexpr double kSideBudgetSeconds = 15.0;
constexpr double kQuickSideBudgetSeconds = 2.0;

// OpenBLAS, the GEMM peer, falls back to SSE3 kernels on CPUs it does not
// recognise; this re-executes the program with OPENBLAS_CORETYPE set to the
// best core the CPU supports when that happened. Call first thing in main.
void ensure_openblas_core_fits_cpu(char** argv);
// Which OpenBLAS core runs the peers, and why.
std::string openblas_core_note();

// The whole command; returns the process exit code.
int run_bench(const BenchOptions& opts);
// The --filter regex (".*" when empty); prints why and returns false when
// it does not parse.
bool compile_filter(const BenchOptions& opts, std::regex* filter);
#ifdef KILN_HAS_CUDA
// --device gpu (bench_drills_gpu.cpp), once a GPU is known to be present.
int run_gpu_bench(const BenchOptions& opts);
#endif

}  // namespace kiln::bench
