// The bench's text table and its JSON file.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench.h"

namespace kiln::bench {
namespace {

using Json = nlohmann::ordered_json;

Json or_null(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

std::string format_or_dash(const std::optional<double>& v, const char* fmt) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

void print_ceilings(const Ceilings& c, bool quick) {
  std::printf("Ceilings of this machine (%d thread%s):\n", c.threads, c.threads == 1 ? "" : "s");
  std::printf("  memory bandwidth  copy %.1f GB/s, triad %.1f GB/s (STREAM, %.0f MiB per array)", c.copy_gbps,
              c.triad_gbps, c.stream_array_bytes / (1 << 20));
  if (c.copy_nt_gbps > 0) std::printf("; streaming stores copy %.1f, triad %.1f", c.copy_nt_gbps, c.triad_nt_gbps);
  if (c.read_gbps > 0) std::printf("; reading alone %.1f", c.read_gbps);
  std::printf(" -> roofline bandwidth %.1f GB/s\n", c.bandwidth_gbps());
  std::printf("  fp32 peak         %.1f GFLOP/s (%s FMA loop in registers)\n", c.fp32_gflops, c.fp32_isa.c_str());
  if (c.bf16_gflops > 0)
    std::printf("  bf16 peak         %.1f GFLOP/s (%s dot products in registers)\n", c.bf16_gflops, c.bf16_isa.c_str());
  else
    std::printf("  bf16 peak         none (no AVX512-BF16)\n");
  if (c.amx_bf16_gflops > 0)
    std::printf("  AMX bf16 peak     %.1f GFLOP/s (tile dot products, no memory traffic)\n", c.amx_bf16_gflops);
  if (c.int8_gops > 0)
    std::printf("  int8 peak         %.1f GOP/s (avx512vnni dot products in registers; the qmm_ rows of block formats)\n",
                c.int8_gops);
  std::printf("  bf16 rows are measured against %.1f GFLOP/s, the fastest of these\n", c.peak_gflops(bfloat16));
  std::printf("  peers             %s\n", openblas_core_note().c_str());
  if (quick)
    std::printf("  --quick: small cache-resident sizes; the numbers check the machinery, not the machine\n");
  std::printf("roof = max(bytes / bandwidth, flops / peak) / time; peer/kiln > 1 means Kiln is faster\n\n");
}

// Fixed columns; names and shapes are the widest that the drills produce.
constexpr const char* kRowFormat = "%-5s %-17s %-9s %-14s %11s %8s %9s %5s  %-18s %11s %9s";

// print_table_header(with_mlx) decides the columns of the rows printed after it.
static bool g_mlx_column = false;

void print_table_header(bool with_mlx) {
  g_mlx_column = with_mlx;
  std::printf(kRowFormat, "drill", "name", "dtype", "shape", "median us", "GB/s", "GFLOP/s", "roof", "peer",
              "peer us", "peer/kiln");
  if (with_mlx) std::printf(" %9s", "mlx/kiln");
  std::printf("\n");
  std::fflush(stdout);
}

void print_row(const BenchRow& r) {
  std::string ratio = format_or_dash(r.peer_ratio, "%.2f");
  if (!r.peer_agrees) ratio += " !";  // Kiln's output and the peer's disagree
  std::printf(kRowFormat, r.drill.c_str(), r.name.c_str(), r.dtype.c_str(), shape_string(r.shape).c_str(),
              format_or_dash(r.time_us, "%.1f").c_str(), format_or_dash(r.gbps, "%.1f").c_str(),
              format_or_dash(r.gflops, "%.1f").c_str(), format_or_dash(r.roof_fraction, "%.2f").c_str(),
              r.peer.empty() ? "-" : r.peer.c_str(), format_or_dash(r.peer_time_us, "%.1f").c_str(), ratio.c_str());
  if (g_mlx_column) std::printf(" %9s", format_or_dash(r.mlx_ratio, "%.2f").c_str());
  std::printf("\n");
  if (!r.error.empty()) std::printf("      error: %s\n", r.error.c_str());
  std::fflush(stdout);
}

void write_json(const std::string& path, const Ceilings& c, const std::vector<BenchRow>& rows,
                const BenchOptions& opts) {
  Json ceilings = {
      {"threads", c.threads},
      {"copy_gbps", c.copy_gbps},
      {"triad_gbps", c.triad_gbps},
      {"copy_nt_gbps", c.copy_nt_gbps},
      {"triad_nt_gbps", c.triad_nt_gbps},
      {"read_gbps", c.read_gbps},
      {"bandwidth_gbps", c.bandwidth_gbps()},
      {"stream_array_bytes", c.stream_array_bytes},
      {"fp32_gflops", c.fp32_gflops},
      {"fp32_isa", c.fp32_isa},
      {"bf16_gflops", c.bf16_gflops > 0 ? Json(c.bf16_gflops) : Json(nullptr)},
      {"bf16_isa", c.bf16_isa.empty() ? Json(nullptr) : Json(c.bf16_isa)},
      {"bf16_roofline_gflops", c.peak_gflops(bfloat16)},
      {"amx_bf16_gflops", c.amx_bf16_gflops > 0 ? Json(c.amx_bf16_gflops) : Json(nullptr)},
      {"int8_gops", c.int8_gops > 0 ? Json(c.int8_gops) : Json(nullptr)},
      {"openblas", openblas_core_note()},
  };
  if (!c.gpu_name.empty()) {
    ceilings["gpu"] = c.gpu_name;
    ceilings["tf32_gflops"] = c.tf32_gflops;
  }
  Json out_rows = Json::array();
  for (const BenchRow& r : rows) {
    out_rows.push_back({
        {"drill", r.drill},
        {"name", r.name},
        {"device", r.device},
        {"dtype", r.dtype},
        {"shape", r.shape},
        {"time_us", or_null(r.time_us)},
        {"gbps", or_null(r.gbps)},
        {"gflops", or_null(r.gflops)},
        {"roof_fraction", or_null(r.roof_fraction)},
        {"peer", r.peer.empty() ? Json(nullptr) : Json(r.peer)},
        {"peer_time_us", or_null(r.peer_time_us)},
        {"peer_ratio", or_null(r.peer_ratio)},
        {"mlx_time_us", or_null(r.mlx_time_us)},
        {"mlx_ratio", or_null(r.mlx_ratio)},
        // Beyond the keys of issue 3: the accounting behind gbps and
        // gflops, and how the row was obtained.
        {"bytes", r.bytes},
        {"flops", r.flops},
        {"bound", r.bound.empty() ? Json(nullptr) : Json(r.bound)},
        {"reps", r.reps},
        {"peer_difference", or_null(r.peer_difference)},
        {"peer_agrees", r.peer_difference ? Json(r.peer_agrees) : Json(nullptr)},
        {"error", r.error.empty() ? Json(nullptr) : Json(r.error)},
    });
    if (!r.all_peers.empty()) {
      Json peers = Json::object();
      for (const auto& [name, us] : r.all_peers) peers[name] = us;
      out_rows.back()["peers"] = peers;
    }
  }
  Json doc = {
      {"kiln_version", version()},
      {"device", opts.device},
      {"quick", opts.quick},
      {"reps", opts.reps},
      {"ceilings", ceilings},
      {"rows", out_rows},
  };
  std::ofstream f(path);
  if (!f) throw Error("cannot write the JSON file " + path);
  f << doc.dump(2) << "\n";
  if (!f) throw Error("failed writing the JSON file " + path);
}


std::string key_of(const std::string& drill, const std::string& name, const std::string& dtype,
                   const std::vector<int64_t>& shape) {
  return drill + "/" + name + "/" + dtype + "/" + shape_string(shape);
}

// Peers' rows, written by bench/peers/gpu_peers.py: {"rows": [{drill, name,
// dtype, shape, peer, time_us}, ...]}. Each Kiln row takes the fastest peer,
// its own in-run peer included.
void join_peers(std::vector<BenchRow>& rows, const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot read the peers file " + path);
  auto doc = nlohmann::json::parse(f);
  std::map<std::string, std::vector<std::pair<std::string, double>>> by_key;
  for (const auto& r : doc.at("rows")) {
    if (r.at("time_us").is_null()) continue;
    by_key[key_of(r.at("drill"), r.at("name"), r.at("dtype"), r.at("shape").get<std::vector<int64_t>>())]
        .push_back({r.at("peer").get<std::string>(), r.at("time_us").get<double>()});
  }
  for (BenchRow& row : rows) {
    auto it = by_key.find(key_of(row.drill, row.name, row.dtype, row.shape));
    if (it == by_key.end()) continue;
    if (!row.peer.empty() && row.peer_time_us) row.all_peers.insert(row.all_peers.begin(), {row.peer, *row.peer_time_us});
    row.all_peers.insert(row.all_peers.end(), it->second.begin(), it->second.end());
    auto best = std::min_element(it->second.begin(), it->second.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    // The file's fastest peer replaces the row's own only where it is faster.
    if (row.peer_time_us && *row.peer_time_us <= best->second) continue;
    row.peer = best->first;
    row.peer_time_us = best->second;
    row.peer_difference.reset();  // the comparison of outputs was with the row's own peer
    row.peer_agrees = true;
    if (row.time_us) row.peer_ratio = best->second / *row.time_us;
  }
}

void print_peer_table(const std::vector<BenchRow>& rows) {
  std::map<std::string, int> names;
  for (const BenchRow& r : rows)
    for (const auto& [p, t] : r.all_peers) names.emplace(p, 0);
  if (names.empty()) return;
  std::printf("\nEvery peer, microseconds (kiln first):\n%-5s %-17s %-9s %-14s %11s", "drill", "name", "dtype", "shape",
              "kiln");
  for (const auto& [p, i] : names) std::printf(" %13s", p.c_str());
  std::printf("\n");
  for (const BenchRow& r : rows) {
    if (r.all_peers.empty()) continue;
    std::printf("%-5s %-17s %-9s %-14s %11.1f", r.drill.c_str(), r.name.c_str(), r.dtype.c_str(),
                shape_string(r.shape).c_str(), r.time_us.value_or(NAN));
    for (const auto& [p, i] : names) {
      double t = NAN;
      for (const auto& [q, tq] : r.all_peers)
        if (q == p) t = tq;
      std::printf(" %13.1f", t);
    }
    std::printf("\n");
  }
}

}  // namespace kiln::bench
