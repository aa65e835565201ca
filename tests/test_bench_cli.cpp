// Runs the built `kiln` command line: `kiln info`, and `kiln bench --quick`
// to check that every drill executes and that its byte and flop accounting
// matches the work its shape and dtype imply. Timings themselves are not
// tested (benchmarks are not tests), only that they are consistent.
#ifdef KILN_CLI_PATH

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include <tuple>

#include "kiln/device.h"
#include "kiln/version.h"

namespace {

using nlohmann::json;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CommandResult run_cli(const std::string& args) {
  CommandResult r;
  const std::string cmd = std::string("'") + KILN_CLI_PATH + "' " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "kiln_bench_cli_" + std::to_string(getpid()) + "_" + name;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

double product(const json& shape) {
  double p = 1;
  for (const auto& d : shape) p *= d.get<double>();
  return p;
}

// D5 decoder_layer [hidden, intermediate, heads, kv_heads, kv] (head dim 128, vocab 256): the
// parameters of q, k, v, o, gate, up, down, the embedding, the logits and three norms.
double decoder_layer_params(const json& s) {
  const double h = s[0], inter = s[1], q = 128 * s[2].get<double>(), kvw = 128 * s[3].get<double>();
  return h * (q + 2 * kvw) + q * h + 3 * h * inter + 2 * 256 * h + 3 * h;
}

// Bytes each drill must move, from its shape and dtype alone: every input
// read once, every output written once (the unfused D1 pays for writing
// x + z and reading it back).
double expected_bytes(const json& row) {
  const std::string name = row["name"];
  const double item = row["dtype"] == "bfloat16" ? 2 : 4;
  const json& s = row["shape"];
  if (name == "copy") return 2 * item * product(s);
  // add_gelu_fused, and the same row forced to each compile backend.
  if (name == "add" || name.rfind("add_gelu_fused", 0) == 0) return 3 * item * product(s);
  if (name == "add_gelu_two_ops") return 5 * item * product(s);
  // HOST chains [ops, n]: the vector read once and the result written once.
  if (name == "chain_eager" || name == "chain_compiled") return 2 * item * s[1].get<double>();
  // Attention: prefill [1, H, S, D] reads q, k, v and writes the output;
  // decode [Hq, Hkv, kv, D] reads K and V once (plus q and the output).
  if (name == "sdpa_prefill" || name == "sdpa_prefill_causal") return 4 * item * product(s);
  if (name == "sdpa_decode_gqa") {
    const double hq = s[0], hkv = s[1], kv = s[2], d = s[3];
    return item * (2 * hkv * kv * d + 2 * hq * d);
  }
  if (name == "rope") return 2 * item * product(s);  // [B, heads, positions, head_dim]
  // conv2d_3x3 [N, H, W, C, O]: the input, the [O, 3, 3, C] weight and the output once.
  if (name == "conv2d_3x3") {
    const double pixels = s[0].get<double>() * s[1].get<double>() * s[2].get<double>(), c = s[3], o = s[4];
    return item * (pixels * c + 9 * o * c + pixels * o);
  }
  const double a = s[0].get<double>(), b = s[1].get<double>();
  if (name == "row_sum" || name == "row_max" || name == "row_sum_cpu_kernel") return item * (a * b + a);
  if (name == "col_sum") return item * (a * b + b);
  if (name == "softmax" || name == "transpose" || name == "concatenate") return 2 * item * a * b;
  if (name == "broadcast_add") return item * (2 * a * b + b);
  if (name == "rms_norm") return item * (2 * a * b + b);          // x, y and the weight
  if (name == "layer_norm") return item * (2 * a * b + 2 * b);    // and the bias
  if (name == "sgemm" || name == "bf16_gemm") {
    const double m = a, k = b, n = s[2].get<double>();
    return item * (m * k + k * n + m * n);
  }
  if (name == "sgemv" || name == "bf16_gemv") return item * (a * b + a + b);  // W[K, N], x[K], y[N]
  // D4 [M, K, N]: the packed weights plus bf16 scales and biases per group of 64.
  if (name.rfind("qmv_affine", 0) == 0 || name.rfind("qmm_affine", 0) == 0) {
    const double k = b, n = s[2].get<double>(), bits = name.back() - '0';
    return k * n * bits / 8 + 2 * 2 * n * (k / 64);
  }
  // D4 in MLX's microscaling modes: the packed codes plus one scale byte per 32 values.
  if (name.rfind("qmv_mxfp", 0) == 0) {
    const double k = b, n = s[2].get<double>(), bits = name.back() - '0';
    return k * n * bits / 8 + n * (k / 32);
  }
  // D4 on llama.cpp blocks: w [N, K] as (block weights, block bytes), x[K] and y[N] float32.
  for (auto [q, block, bytes] : {std::tuple{"qmv_q4_0", 32, 18}, {"qmv_q8_0", 32, 34}, {"qmv_q4_k", 256, 144},
                                 {"qmv_q6_k", 256, 210}}) {
    if (name == q) return b * (a / block) * bytes + item * (a + b);
  }
  // D4 prefill on llama.cpp blocks: shape [M, K, N], x [M, K] and y [M, N] float32.
  for (auto [q, block, bytes] : {std::tuple{"qmm_q4_0", 32, 18}, {"qmm_q8_0", 32, 34}, {"qmm_q4_k", 256, 144}}) {
    if (name == q) {
      const double m = s[0].get<double>(), k = s[1].get<double>(), n = s[2].get<double>();
      return n * (k / block) * bytes + 4 * (m * k + m * n);
    }
  }
  // D5 decoder_layer (bf16): the weights, then the K/V cache read once.
  if (name == "decoder_layer") return 2 * decoder_layer_params(s) + 2 * 2 * 128 * s[3].get<double>() * s[4].get<double>();
  ADD_FAILURE() << "no byte accounting known for drill " << name;
  return 0;
}

// Flops where the count is exact rather than nominal (transcendentals make
// GELU's and softmax's counts a convention; those are only checked to be > 0).
std::optional<double> expected_flops(const json& row) {
  const std::string name = row["name"];
  const json& s = row["shape"];
  if (name == "copy" || name == "transpose" || name == "concatenate") return 0.0;
  if (name == "chain_eager" || name == "chain_compiled") return product(s);  // one flop per element per op
  if (name == "add") return product(s);
  if (name == "row_sum" || name == "row_max" || name == "col_sum" || name == "broadcast_add" ||
      name == "row_sum_cpu_kernel")
    return product(s);
  if (name == "sgemm" || name == "bf16_gemm") return 2 * product(s);
  if (name == "sgemv" || name == "bf16_gemv") return 2 * product(s);
  if (name == "conv2d_3x3") return 2 * 9 * product(s);
  // Q K^T and P V: 2 S^2 D flops each per head, the causal half counted.
  if (name == "sdpa_prefill") return 4 * product(s) * s[2].get<double>();
  if (name == "sdpa_prefill_causal") return 2 * product(s) * s[2].get<double>();
  if (name == "sdpa_decode_gqa") return 4 * s[0].get<double>() * s[2].get<double>() * s[3].get<double>();
  if (name.rfind("qmv_affine", 0) == 0 || name.rfind("qmm_affine", 0) == 0) return 2 * product(s);
  if (name.rfind("qmv_", 0) == 0 || name.rfind("qmm_q", 0) == 0) return 2 * product(s);
  if (name == "decoder_layer") return 2 * decoder_layer_params(s) + 4 * 128 * s[2].get<double>() * s[4].get<double>();
  return std::nullopt;
}

void expect_near_relative(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-6 * std::max(std::fabs(want), 1.0)) << what;
}

TEST(BenchCli, InfoPrintsVersionAndDevices) {
  CommandResult r = run_cli("info");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(kiln::version()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu"), std::string::npos) << r.output;
}

TEST(BenchCli, QuickBenchRunsEveryDrillWithConsistentAccounting) {
  const std::string json_path = temp_file("quick.json"), svg_path = temp_file("quick.svg");
  CommandResult r = run_cli("bench --quick --reps 2 --json '" + json_path + "' --plot '" + svg_path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json doc = read_json(json_path);

  const json& ceilings = doc.at("ceilings");
  for (const char* key : {"copy_gbps", "triad_gbps", "bandwidth_gbps", "fp32_gflops"})
    EXPECT_GT(ceilings.at(key).get<double>(), 0) << key;

  // Every drill of issue 3, in each dtype it runs in.
  const std::set<std::pair<std::string, std::string>> expected = {
      {"copy", "float32"},          {"add", "float32"},
      {"add_gelu_two_ops", "float32"}, {"add_gelu_two_ops", "bfloat16"},
      {"add_gelu_fused", "float32"},   {"add_gelu_fused", "bfloat16"},
      {"row_sum", "float32"},       {"row_max", "float32"},
      {"col_sum", "float32"},       {"softmax", "float32"},
      {"transpose", "float32"},     {"broadcast_add", "float32"},
      {"concatenate", "float32"},   {"sgemm", "float32"},
      {"bf16_gemm", "bfloat16"},    {"sgemv", "float32"},
      {"bf16_gemv", "bfloat16"},    {"conv2d_3x3", "float32"},
      {"add_gelu_fused_cpu_kernel", "float32"}, {"row_sum_cpu_kernel", "float32"},
  };
  std::set<std::pair<std::string, std::string>> seen;
  std::map<std::string, int> row_sum_shapes;

  for (const json& row : doc.at("rows")) {
    const std::string label = row.dump();
    seen.insert({row.at("name").get<std::string>(), row.at("dtype").get<std::string>()});
    EXPECT_TRUE(row.at("error").is_null()) << label;
    EXPECT_EQ(row.at("device"), "cpu") << label;
    const double time_us = row.at("time_us").get<double>();
    ASSERT_GT(time_us, 0) << label;

    // GB/s and GFLOP/s are bytes and flops over the median time.
    const double bytes = expected_bytes(row);
    expect_near_relative(row.at("bytes").get<double>(), bytes, "bytes: " + label);
    expect_near_relative(row.at("gbps").get<double>() * time_us * 1e3, bytes, "gbps: " + label);
    const double flops = row.at("gflops").get<double>() * time_us * 1e3;
    expect_near_relative(flops, row.at("flops").get<double>(), "gflops: " + label);
    if (auto exact = expected_flops(row)) {
      expect_near_relative(flops, *exact, "flops: " + label);
    } else {
      EXPECT_GT(flops, 0) << label;
    }

    const double roof = row.at("roof_fraction").get<double>();
    EXPECT_GT(roof, 0) << label;
    EXPECT_LE(roof, 1.5) << label;

    if (row.at("peer").is_null()) {
      EXPECT_TRUE(row.at("peer_time_us").is_null()) << label;
      EXPECT_TRUE(row.at("peer_ratio").is_null()) << label;
    } else {
      const double peer_us = row.at("peer_time_us").get<double>();
      EXPECT_GT(peer_us, 0) << label;
      EXPECT_NEAR(row.at("peer_ratio").get<double>(), peer_us / time_us, 1e-9 * peer_us / time_us) << label;
      EXPECT_TRUE(row.at("peer_agrees").get<bool>()) << label;
    }
    if (row.at("name") == "row_sum") ++row_sum_shapes[row.at("shape").dump()];
  }
  for (const auto& drill : expected) EXPECT_TRUE(seen.count(drill)) << drill.first << " " << drill.second;
  EXPECT_EQ(row_sum_shapes.size(), 3u) << "row_sum runs over three shapes";
  // The fp32 GEMM and matvec have OpenBLAS as their peer in the same run.
  for (const json& row : doc.at("rows"))
    if (row.at("name") == "sgemm" || row.at("name") == "sgemv") EXPECT_FALSE(row.at("peer").is_null()) << row.dump();

  std::ifstream svg(svg_path);
  std::stringstream svg_text;
  svg_text << svg.rdbuf();
  EXPECT_NE(svg_text.str().find("<svg"), std::string::npos);
  EXPECT_NE(svg_text.str().find("sgemm"), std::string::npos);
  std::remove(json_path.c_str());
  std::remove(svg_path.c_str());
}

TEST(BenchCli, FilterSelectsDrillsAndRejectsBadInput) {
  const std::string json_path = temp_file("filter.json");
  CommandResult r = run_cli("bench --quick --reps 1 --filter '^D5/sgemv/' --json '" + json_path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json doc = read_json(json_path);
  ASSERT_FALSE(doc.at("rows").empty());
  for (const json& row : doc.at("rows")) EXPECT_EQ(row.at("name"), "sgemv") << row.dump();
  std::remove(json_path.c_str());

  EXPECT_EQ(run_cli("bench --quick --filter 'no_such_drill'").exit_code, 2);
  EXPECT_EQ(run_cli("bench --quick --filter '['").exit_code, 2);
  EXPECT_NE(run_cli("bench --device tpu").exit_code, 0);
}

TEST(BenchCli, GpuDeviceFailsClearlyWithoutAGpu) {
  EXPECT_EQ(run_cli("bench --quick --peers no_such_peers.json").exit_code, 2);  // a missing peers file
  if (kiln::is_available(kiln::Device::gpu)) GTEST_SKIP() << "a GPU is present: `kiln bench --device gpu` would run in full";
  CommandResult r = run_cli("bench --quick --device gpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--device gpu"), std::string::npos) << r.output;
}

bool have_python3() { return std::system("python3 -c pass >/dev/null 2>&1") == 0; }

// --mlx's plumbing, with a stand-in for bench/peers/mlx_peers.py that speaks
// the same protocol (one JSON request per line in, one answer per line out)
// and answers fixed times, so it runs where MLX is not installed.
TEST(BenchCli, MlxPeerTimesEachRowInAChildProcess) {
  if (!have_python3()) GTEST_SKIP() << "no python3";
  const std::string script = temp_file("fake_mlx.py"), json_path = temp_file("mlx.json"), log = temp_file("mlx.log");
  {
    std::ofstream f(script);
    f << "import json, sys\n"
         "print(json.dumps({'mlx': 'fake', 'device': 'cpu'}), flush=True)\n"
         "for line in sys.stdin:\n"
         "    req = json.loads(line)\n"
         "    open('" << log << "', 'a').write(req['key'] + '\\n')\n"
         "    ok = req['key'].startswith('D1/add/')\n"
         "    print(json.dumps({'time_us': 1234.5} if ok else {'time_us': None, 'why': 'none'}), flush=True)\n";
  }
  CommandResult r = run_cli("bench --quick --reps 1 --filter '^D1/(add|copy)/' --mlx --mlx-script '" + script +
                            "' --json '" + json_path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MLX peer: mlx fake on the cpu"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mlx/kiln"), std::string::npos) << r.output;
  const json doc = read_json(json_path);
  int with_mlx = 0;
  for (const json& row : doc.at("rows")) {
    if (row.at("name") == "add") {
      ++with_mlx;
      EXPECT_DOUBLE_EQ(row.at("mlx_time_us").get<double>(), 1234.5) << row.dump();
      EXPECT_NEAR(row.at("mlx_ratio").get<double>(), 1234.5 / row.at("time_us").get<double>(), 1e-9);
      EXPECT_DOUBLE_EQ(row.at("peers").at("mlx_cpu").get<double>(), 1234.5) << row.dump();
    } else {
      EXPECT_TRUE(row.at("mlx_time_us").is_null()) << row.dump();
    }
  }
  EXPECT_EQ(with_mlx, 1);
  // The child was asked for every row, by drill/name/dtype/shape.
  std::ifstream asked(log);
  std::string first;
  std::getline(asked, first);
  EXPECT_EQ(first, "D1/copy/float32/1048576");

  // A peer that cannot start, or dies mid-run, costs the column, not the bench.
  r = run_cli("bench --quick --reps 1 --filter '^D1/add/' --mlx --mlx-script /no/such/script.py");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no MLX peer"), std::string::npos) << r.output;
  {
    std::ofstream f(script);
    f << "import json, sys\nprint(json.dumps({'mlx': 'fake', 'device': 'cpu'}), flush=True)\nsys.stdin.readline()\n";
  }
  r = run_cli("bench --quick --reps 1 --filter '^D1/(add|copy)/' --mlx --mlx-script '" + script + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& path : {script, json_path, log}) std::remove(path.c_str());
}

// The real script against MLX, where the build tree's peer venv (made by
// `make bench`) or python3 has it.
TEST(BenchCli, MlxPeerScriptTimesRealMlx) {
  std::string python = std::string(KILN_CLI_PATH).substr(0, std::string(KILN_CLI_PATH).rfind('/')) + "/peer-venv/bin/python";
  if (std::system(("'" + python + "' -c 'import mlx.core' >/dev/null 2>&1").c_str()) != 0) python = "python3";
  if (std::system(("'" + python + "' -c 'import mlx.core' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "mlx is not installed (make bench installs it into build/peer-venv)";
  const std::string json_path = temp_file("mlx_real.json");
  CommandResult r = run_cli("bench --quick --reps 1 --filter '^D(1/add|2/rms_norm|4/qmv_affine4)/' --mlx --mlx-python '" +
                            python + "' --json '" + json_path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json doc = read_json(json_path);
  ASSERT_FALSE(doc.at("rows").empty());
  for (const json& row : doc.at("rows"))
    EXPECT_GT(row.at("mlx_time_us").get<double>(), 0) << row.dump() << r.output;
  std::remove(json_path.c_str());
}

}  // namespace

#endif  // KILN_CLI_PATH
