// The `kiln` command line: `kiln info` (what this build is and what it runs
// on), `kiln bench` (the kernel lab, see bench.h) and the LLM commands
// `kiln generate`, `kiln bench llm`, `kiln convert`, `kiln train-model` (llm_cli.h).
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "bench.h"
#include "kiln/kiln.h"
#include "llm_cli.h"

namespace {

std::string cpu_features() {
  __builtin_cpu_init();
  std::string out;
  auto add = [&](const char* name, bool has) {
    if (has) out += (out.empty() ? "" : " ") + std::string(name);
  };
  add("avx2", __builtin_cpu_supports("avx2"));
  add("fma", __builtin_cpu_supports("fma"));
  add("avx512f", __builtin_cpu_supports("avx512f"));
  add("avx512bw", __builtin_cpu_supports("avx512bw"));
  add("avx512vl", __builtin_cpu_supports("avx512vl"));
  add("avx512bf16", __builtin_cpu_supports("avx512bf16"));
  add("avx512fp16", __builtin_cpu_supports("avx512fp16"));
  return out.empty() ? "none of note" : out;
}

int run_info() {
  std::printf("kiln %s\n", kiln::version());
  std::printf("build options:   %s\n", kiln::build_options());
  std::printf("cpu simd target: %s\n", kiln::cpu_simd_target());
  std::printf("cpu features:    %s\n", cpu_features().c_str());
  std::printf("cpu threads:     %d\n", kiln::cpu_threads());
  const bool gpu = kiln::is_available(kiln::Device::gpu);
  std::printf("devices:         cpu%s\n", gpu ? ", gpu" : "");
  std::printf("gpu:             %s\n", gpu ? "available" : "not available (no GPU backend in this build or no GPU)");
  std::printf("bench peer:      %s, %s\n", openblas_get_config(), kiln::bench::openblas_core_note().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::bench::ensure_openblas_core_fits_cpu(argv);
  CLI::App app{"kiln: lazy arrays for machine learning on CPUs and GPUs"};
  app.set_version_flag("--version", std::string(kiln::version()));
  app.require_subcommand(1);

  app.add_subcommand("info", "Print the version, build options, SIMD target, threads and devices");

  kiln::bench::BenchOptions opts;
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure this machine's ceilings, then time every drill against them and against a peer");
  bench->add_option("--filter", opts.filter, "Only drills whose drill/name/dtype/shape matches this regex")
      ->type_name("REGEX");
  bench->add_option("--device", opts.device, "Device the Kiln side runs on")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  bench->add_option("--threads", opts.threads, "Threads for Kiln and the peers (default: every core)")
      ->check(CLI::PositiveNumber);
  bench->add_option("--reps", opts.reps, "Timed repetitions per drill (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench->add_option("--json", opts.json_path, "Write {\"ceilings\": ..., \"rows\": [...]} to this file")
      ->type_name("FILE");
  bench->add_flag("--quick", opts.quick, "Small sizes: checks the accounting and that every drill runs");
  bench->add_option("--peers", opts.peers_path,
                    "Join the rows a bench/peers/ script wrote (gpu_peers.py, mlx_peers.py; fastest peer per drill)")
      ->type_name("FILE.json");
  bench->add_flag("--mlx", opts.mlx,
                  "Time MLX (bench/peers/mlx_peers.py in a child process) on every row it has an op for, right "
                  "after Kiln's side");
  bench->add_option("--mlx-python", opts.mlx_python, "Python with mlx installed, for --mlx")->capture_default_str();
  bench->add_option("--mlx-script", opts.mlx_script, "The MLX peer script (default: the source tree's)");
  bench->add_option("--plot", opts.plot_path, "Draw the roofline with every drill to this SVG file")
      ->type_name("FILE.svg");

  kiln::cli::BenchLlmOptions bench_llm;
  CLI::App* llm = bench->add_subcommand("llm", "llama-bench's pp/tg table for a model file (mean ± stdev)");
  llm->add_option("-m,--model", bench_llm.model,
                 "GGUF file, Hugging Face directory, or random:SHAPE[:TYPE] (llama3-8b / llama3-1b; f32, f16, bf16, "
                 "q8_0, q4_0, q4_k, ...: random weights of that shape; default: a small random model)");
  llm->add_option("-p,--n-prompt", bench_llm.prompt, "Prompt tokens of the pp test (0: none)")->capture_default_str();
  llm->add_option("-n,--n-gen", bench_llm.gen, "Generated tokens of the tg test (0: none)")->capture_default_str();
  llm->add_option("-r,--repetitions", bench_llm.reps, "Timed repetitions")->check(CLI::PositiveNumber)->capture_default_str();
  llm->add_option("-o,--output", bench_llm.output, "Table format")->check(CLI::IsMember({"md", "csv", "json"}))->capture_default_str();
  llm->add_option("--device", bench_llm.device, "Device")->check(CLI::IsMember({"cpu", "gpu"}))->capture_default_str();
  llm->add_flag("--no-compile", bench_llm.no_compile, "Decode op by op instead of one compiled graph per step");
  llm->add_option("--dtype", bench_llm.dtype,
                  "A quantized model's activation dtype (auto: bfloat16 on the GPU, the file's on the CPU)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16", "float16"}))
      ->capture_default_str();

  kiln::cli::GenerateCliOptions gen;
  CLI::App* generate = app.add_subcommand("generate", "Generate text with a model (streams it, then tokens/s)");
  generate->add_option("-m,--model", gen.model,
                      "GGUF file, Hugging Face directory, or random:SHAPE[:TYPE] as for bench llm (default: a small "
                      "random model)");
  generate->add_option("-p,--prompt", gen.prompt, "Prompt text")->capture_default_str();
  generate->add_option("-n,--n-predict", gen.n, "Tokens to generate")->check(CLI::PositiveNumber)->capture_default_str();
  generate->add_option("--temp", gen.temp, "Temperature (<= 0: greedy)")->capture_default_str();
  generate->add_option("--top-k", gen.top_k, "Top-k (<= 0: off)")->capture_default_str();
  generate->add_option("--top-p", gen.top_p, "Top-p (>= 1: off)")->capture_default_str();
  generate->add_option("--min-p", gen.min_p, "Min-p (<= 0: off)")->capture_default_str();
  generate->add_option("--seed", gen.seed, "Sampling seed")->capture_default_str();
  generate->add_option("--device", gen.device, "Device")->check(CLI::IsMember({"cpu", "gpu"}))->capture_default_str();
  generate->add_flag("--json", gen.json, "Print the token ids and timings as JSON instead of text");
  generate->add_flag("--chat", gen.chat, "Wrap the prompt in the model's chat template as a user message");
  generate->add_flag("--no-compile", gen.no_compile, "Build each decode step op by op instead of replaying one compiled graph");
  generate->add_option("--dtype", gen.dtype,
                       "A quantized model's activation dtype (auto: bfloat16 on the GPU, the file's on the CPU)")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16", "float16"}))
      ->capture_default_str();

  kiln::cli::ConvertOptions conv;
  CLI::App* convert = app.add_subcommand("convert", "Convert a Hugging Face directory to GGUF (quantizing) or back");
  convert->add_option("input", conv.input, "Hugging Face directory or .gguf file")->required();
  convert->add_option("output", conv.output, ".gguf file or directory")->required();
  convert->add_option("--type", conv.type, "f32, f16, bf16, or a block format for GGUF: q8_0, q4_0, q4_k, q6_k, ...")
      ->capture_default_str();

  kiln::cli::TrainModelOptions train;
  CLI::App* train_model = app.add_subcommand(
      "train-model", "Train the default model (a small byte-level Llama) on a text file and save it as GGUF (make model)");
  train_model->add_option("-o,--output", train.output, "GGUF file to write")->capture_default_str();
  train_model->add_option("--text", train.text, "Training text: a file or a directory of files (the last tenth is held out)")->capture_default_str();
  train_model->add_option("--steps", train.steps, "Optimizer steps")->capture_default_str();
  train_model->add_option("--batch", train.batch, "Windows per step")->capture_default_str();
  train_model->add_option("--context", train.context, "Bytes per window")->capture_default_str();
  train_model->add_option("--lr", train.lr, "Peak learning rate (AdamW, warmup then cosine)")->capture_default_str();
  train_model->add_option("--seed", train.seed, "Initialization and sampling seed")->capture_default_str();
  train_model->add_option("--print-every", train.print_every, "Print the loss every N steps")->capture_default_str();
  train_model->add_flag("--json", train.json, "Print a JSON summary (losses, seconds) as the last line");

  CLI11_PARSE(app, argc, argv);

  try {
    if (app.got_subcommand("info")) return run_info();
    if (app.got_subcommand("generate")) return kiln::cli::run_generate(gen);
    if (app.got_subcommand("convert")) return kiln::cli::run_convert(conv);
    if (app.got_subcommand("train-model")) return kiln::cli::run_train_model(train);
    if (bench->got_subcommand("llm")) return kiln::cli::run_bench_llm(bench_llm);
    return kiln::bench::run_bench(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    return 1;
  }
}
