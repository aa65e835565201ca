// `kiln generate` and `kiln bench llm` (llm_cli.h). A model comes from a
// .gguf file (its tokenizer from the tokenizer.ggml.* metadata), a Hugging
// Face directory (tokenizer.json when present), or, with no -m, a random
// Llama built in memory with a byte-level tokenizer (one id per byte).
#include "llm_cli.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#ifdef KILN_HAS_CUDA
#include "backend/cuda/graph_encoder.h"
#endif
#include "kiln/gguf.h"
#include "kiln/kiln.h"
#include "kiln/llm.h"
#include "kiln/sampler.h"
#include "kiln/tokenizer.h"

namespace kiln::cli {
namespace {

// This process's peak resident set (VmHWM of /proc/self/status: its own
// pages, not those of the host compiler it may run for compile's kernels);
// 0 where the file does not exist.
long peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) * 1024;
  }
  return 0;
}

using llm::Model;
using llm::Tokenizer;

struct Loaded {
  Model model;
  std::optional<Tokenizer> tokenizer;  // none: bytes are ids
  std::string name;
  bool random = false;
};

StreamOrDevice device_of(const std::string& device) {
  if (device == "gpu") {
    if (!is_available(Device::gpu)) throw Error("--device gpu: no GPU backend in this build or no GPU");
    return Device::gpu;
  }
  return Device::cpu;
}

// "random:SHAPE[:TYPE]": a random-weight model of a known shape, built in
// memory on the default device (shapes: llama3-8b, llama3-1b; types: f32,
// f16, bf16 or a block format), for timing a model size no file is at hand for.
Loaded load_random_shape(const std::string& spec, StreamOrDevice where) {
  const std::string rest = spec.substr(7);
  const size_t colon = rest.find(':');
  const std::string shape = rest.substr(0, colon);
  std::string type = colon == std::string::npos ? "bf16" : rest.substr(colon + 1);
  for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));  // Q4_K as GGUF spells it
  llm::ModelConfig c = default_config();
  c.vocab_size = 128256;
  c.rope_theta = 500000.0f;
  if (shape == "llama3-8b") {
    c.hidden_size = 4096, c.intermediate_size = 14336, c.num_layers = 32, c.num_heads = 32, c.num_kv_heads = 8;
  } else if (shape == "llama3-1b") {
    c.hidden_size = 2048, c.intermediate_size = 8192, c.num_layers = 16, c.num_heads = 32, c.num_kv_heads = 8;
    c.tie_word_embeddings = true;
  } else {
    throw Error("-m " + spec + ": unknown shape '" + shape + "' (llama3-8b, llama3-1b)");
  }
  const bool is_float = type == "f32" || type == "f16" || type == "bf16";
  const Dtype dt = type == "f32" ? float32 : type == "f16" ? float16 : bfloat16;
  struct Restore {  // the default device, also when building the model throws
    Device previous = default_device();
    ~Restore() { set_default_device(previous); }
  } restore;
  if (auto* d = std::get_if<Device>(&where)) set_default_device(*d);
  std::fprintf(stderr, "kiln: %s: RANDOM weights of the %s shape (%s), built in memory\n", spec.c_str(),
               shape.c_str(), type.c_str());
  return {Model::random(c, 0, is_float ? dt : bfloat16, is_float ? "none" : type), std::nullopt, spec, true};
}

// The default model's file: $KILN_DEFAULT_MODEL ("random" for the random
// model), else kiln-default.gguf next to this executable (what `make
// model` writes into the build directory) or in ../share/kiln (where `make
// install` puts it); empty when there is none.
std::string default_model_path() {
  namespace fs = std::filesystem;
  if (const char* e = std::getenv("KILN_DEFAULT_MODEL")) return std::string(e) == "random" ? "" : e;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const fs::path& p : {exe.parent_path() / "kiln-default.gguf",
                            exe.parent_path().parent_path() / "share" / "kiln" / "kiln-default.gguf"}) {
    if (fs::exists(p, ec)) return p.string();
  }
  return "";
}

Loaded load_model(const std::string& path, StreamOrDevice where = Device::cpu);

Loaded load_default_model(StreamOrDevice where) {
  const std::string file = default_model_path();
  if (!file.empty()) {
    std::fprintf(stderr, "kiln: no -m given: using the default model %s (trained by `make model`; byte-level)\n",
                 file.c_str());
    return load_model(file, where);
  }
  std::fprintf(stderr,
               "kiln: no -m given and no default model (`make model` trains one in a few minutes): using a "
               "RANDOM-WEIGHT Llama-architecture model built in memory (4 layers, dim 256, byte-level tokenizer); "
               "its text is noise. Pass -m FILE.gguf or a Hugging Face directory.\n");
  return {Model::random(default_config(), 0), std::nullopt, "random-llama-4L-256", true};
}

Loaded load_model(const std::string& path, StreamOrDevice where) {
  if (path.rfind("random:", 0) == 0) return load_random_shape(path, where);
  if (path.empty()) return load_default_model(where);
  namespace fs = std::filesystem;
  const std::string name = fs::path(path).filename().string();
  if (fs::path(path).extension() == ".gguf") {
    gguf::File f(path);
    std::optional<Tokenizer> tok;
    if (f.find("tokenizer.ggml.tokens")) tok.emplace(llm::tokenizer_spec_from_gguf(f));
    return {Model::from_gguf(f), std::move(tok), name, false};
  }
  std::optional<Tokenizer> tok;
  if (fs::exists(fs::path(path) / "tokenizer.json")) tok.emplace(Tokenizer::from_file((fs::path(path) / "tokenizer.json").string()));
  return {Model::load(path), std::move(tok), name, false};
}

// The runtime's choices for a device. --dtype: a quantized model's
// activation dtype (Model::set_activation_dtype); auto: bfloat16 on the GPU
// (its tensor-core QMV and attention kernels, half the KV cache), the
// model's own on the CPU (float32 for GGUF blocks, as llama.cpp).
// Float-weight models keep their weights' dtype. On the GPU the q/k/v and
// gate/up matrices are stacked (Model::fuse_projections; on the CPU that
// would copy a mapped file's weights).
void prepare(Loaded& m, const std::string& dtype, const std::string& device) {
  std::optional<StreamContext> on_gpu;
  if (device == "gpu") {
    on_gpu.emplace(Device::gpu);
    m.model.fuse_projections();
  }
  if (dtype == "auto") {
    if (device == "gpu" && m.model.quantized()) m.model.set_activation_dtype(bfloat16);
  } else {
    m.model.set_activation_dtype(dtype == "float32" ? float32 : dtype == "float16" ? float16 : bfloat16);
  }
  if (m.model.activation_dtype()) {
    std::fprintf(stderr, "kiln: activations in %s\n", dtype_name(*m.model.activation_dtype()));
  }
}

}  // namespace

llm::ModelConfig default_config() {
  llm::ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 256;
  c.hidden_size = 256;
  c.intermediate_size = 704;
  c.num_layers = 4;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.rope_theta = 10000.0f;
  return c;
}

int run_generate(const GenerateCliOptions& opt) {
  Loaded m = load_model(opt.model, device_of(opt.device));
  prepare(m, opt.dtype, opt.device);
  std::vector<int32_t> prompt;
  if (m.tokenizer) {
    if (opt.chat) {
      const std::string text = m.tokenizer->apply_chat_template({{"user", opt.prompt}}, true);
      prompt = m.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true);
    } else {
      prompt = m.tokenizer->encode(opt.prompt);
    }
  } else {
    if (opt.chat) throw Error("--chat needs a model with a tokenizer and a chat template");
    prompt.assign(opt.prompt.begin(), opt.prompt.end());
    for (int32_t& id : prompt) id &= 0xff;
  }

  llm::GenerateOptions g;
  g.max_tokens = opt.n;
  g.stream = device_of(opt.device);
  g.compile = !opt.no_compile;
  std::optional<llm::Sampler> sampler;
  if (opt.temp > 0) {
    llm::SamplerParams p;
    p.temperature = opt.temp;
    p.top_k = opt.top_k;
    p.top_p = opt.top_p;
    p.min_p = opt.min_p;
    p.seed = opt.seed;
    sampler.emplace(p);
    g.sampler = [&](const float* logits, int vocab) {
      const int32_t id = sampler->sample({logits, static_cast<size_t>(vocab)});
      sampler->accept(id);
      return id;
    };
  }
  if (m.tokenizer) g.is_stop = [&](int32_t id) { return m.tokenizer->is_eog(id); };

  std::optional<llm::StreamDecoder> text;
  if (m.tokenizer) text.emplace(*m.tokenizer, /*skip_special=*/true);
  std::vector<int32_t> ids;
  if (!opt.json) {
    std::fputs(opt.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  llm::GenerateStats s = llm::generate(m.model, prompt, g, [&](int32_t id) {
    ids.push_back(id);
    if (!opt.json) {
      const std::string piece = text ? text->put(id) : std::string(1, static_cast<char>(id));
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (opt.json) {
    nlohmann::json j = {{"model", m.name},
                        {"random_weights", m.random},
                        {"device", opt.device},
                        {"prompt_ids", prompt},
                        {"ids", ids},
                        {"prompt_tokens", s.prompt_tokens},
                        {"prompt_seconds", s.prompt_seconds},
                        {"prompt_tokens_per_second", s.prompt_tps()},
                        {"decode_tokens", s.decode_tokens},
                        {"decode_seconds", s.decode_seconds},
                        {"decode_tokens_per_second", s.decode_tps()},
                        {"peak_rss_bytes", peak_rss_bytes()}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (text) std::fputs(text->flush().c_str(), stdout);
  std::printf("\n\nprompt: %d tokens in %.3f s, %.1f tokens/s\n", s.prompt_tokens, s.prompt_seconds, s.prompt_tps());
  std::printf("decode: %d tokens in %.3f s, %.1f tokens/s\n", s.decode_tokens, s.decode_seconds, s.decode_tps());
  return 0;
}

namespace {

struct Sample {
  double mean = 0, stdev = 0;
};

Sample summarize(const std::vector<double>& v) {
  Sample s;
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  for (double x : v) s.stdev += (x - s.mean) * (x - s.mean);
  s.stdev = v.size() > 1 ? std::sqrt(s.stdev / (v.size() - 1)) : 0;
  return s;
}

// The CUDA encoder's host-time counters (zero without a CUDA build).
struct HostGraphTime {
  uint64_t capture_ns = 0, prepare_ns = 0, launch_ns = 0, nodes = 0, graphs = 0, replayed = 0;
  HostGraphTime operator-(const HostGraphTime& o) const {
    return {capture_ns - o.capture_ns, prepare_ns - o.prepare_ns, launch_ns - o.launch_ns,
            nodes - o.nodes,           graphs - o.graphs,         replayed - o.replayed};
  }
  HostGraphTime& operator+=(const HostGraphTime& o) {
    capture_ns += o.capture_ns, prepare_ns += o.prepare_ns, launch_ns += o.launch_ns, nodes += o.nodes,
        graphs += o.graphs, replayed += o.replayed;
    return *this;
  }
};

HostGraphTime host_graph_time() {
#ifdef KILN_HAS_CUDA
  const cuda::GraphStats g = cuda::graph_stats();
  return {g.capture_ns, g.prepare_ns, g.launch_ns, g.nodes, g.launched, g.replayed};
#else
  return {};
#endif
}

}  // namespace

int run_bench_llm(const BenchLlmOptions& opt) {
  Loaded m = load_model(opt.model, device_of(opt.device));
  prepare(m, opt.dtype, opt.device);
  const int vocab = m.model.config().vocab_size;
  std::mt19937 rng(1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (int32_t& id : t) id = static_cast<int32_t>(rng() % vocab);
    return t;
  };
  llm::GenerateOptions g;
  g.stream = device_of(opt.device);
  g.compile = !opt.no_compile;
  auto ignore = [](int32_t) { return true; };
  // pp: the prompt's prefill (its first token included, as llama-bench);
  // tg: n tokens decoded after a one-token prompt. One untimed run of each first.
  std::vector<double> pp, tg;
  HostGraphTime tg_host;
  double tg_seconds = 0.0, tg_build = 0.0, tg_eval = 0.0, tg_wait = 0.0;
  long tg_tokens = 0;
  for (int r = 0; r <= opt.reps; ++r) {
    if (opt.prompt > 0) {
      g.max_tokens = 1;
      llm::GenerateStats s = llm::generate(m.model, random_tokens(opt.prompt), g, ignore);
      if (r > 0) pp.push_back(s.prompt_tps());
    }
    if (opt.gen > 0) {
      g.max_tokens = opt.gen + 1;
      const HostGraphTime before = host_graph_time();
      llm::GenerateStats s = llm::generate(m.model, random_tokens(1), g, ignore);
      if (r > 0) {
        tg.push_back(s.decode_tps());
        tg_host += host_graph_time() - before;
        tg_seconds += s.decode_seconds;
        tg_build += s.decode_build_seconds, tg_eval += s.decode_eval_seconds, tg_wait += s.decode_wait_seconds;
        tg_tokens += s.decode_tokens;
      }
    }
  }
  // Where the GPU's decode steps spend host time: recording each step's
  // kernels into a CUDA graph, updating the cached executable, launching it
  // (the encoder's counters; the lazy graph's own construction not included).
  if (opt.device == "gpu" && tg_tokens > 0 && tg_host.graphs > 0) {
    const double per = 1e-3 / tg_tokens;
    std::fprintf(stderr,
                 "kiln: tg host time per token: %.0f us recording, %.0f us graph update, %.0f us launch; "
                 "%.0f us per token in all; %.0f kiln nodes in %.1f graphs per token, %.0f%% of them replayed\n",
                 tg_host.capture_ns * per, tg_host.prepare_ns * per, tg_host.launch_ns * per,
                 tg_seconds * 1e6 / tg_tokens, static_cast<double>(tg_host.nodes) / tg_tokens,
                 static_cast<double>(tg_host.graphs) / tg_tokens, 100.0 * tg_host.replayed / tg_host.graphs);
  }
  if (tg_tokens > 0) {
    // The host's side of a decoded token: building the step's lazy graph,
    // handing it to the device, and waiting for the token (the rest).
    std::fprintf(stderr, "kiln: tg host per token: %.0f us building the step, %.0f us evaluating it, %.0f us waiting\n",
                 tg_build * 1e6 / tg_tokens, tg_eval * 1e6 / tg_tokens, tg_wait * 1e6 / tg_tokens);
  }
  const double bytes = static_cast<double>(m.model.weight_bytes());
  char size[32];
  std::snprintf(size, sizeof size, bytes >= (1 << 30) ? "%.2f GiB" : "%.2f MiB",
                bytes / (bytes >= (1 << 30) ? double(1 << 30) : double(1 << 20)));
  struct Row {
    std::string test;
    Sample s;
  };
  std::vector<Row> rows;
  if (!pp.empty()) rows.push_back({"pp" + std::to_string(opt.prompt), summarize(pp)});
  if (!tg.empty()) rows.push_back({"tg" + std::to_string(opt.gen), summarize(tg)});
  const std::string backend = opt.device == "gpu" ? "CUDA" : "CPU";
  const int threads = cpu_threads();
  if (opt.output == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const Row& r : rows) {
      j.push_back({{"model", m.name},
                   {"random_weights", m.random},
                   {"size_bytes", m.model.weight_bytes()},
                   {"backend", backend},
                   {"activation_dtype", m.model.activation_dtype() ? dtype_name(*m.model.activation_dtype()) : "weights"},
                   {"threads", threads},
                   {"test", r.test},
                   {"reps", opt.reps},
                   {"avg_ts", r.s.mean},
                   {"stddev_ts", r.s.stdev}});
    }
    std::printf("%s\n", j.dump(1).c_str());
  } else if (opt.output == "csv") {
    std::printf("model,size_bytes,backend,threads,test,avg_ts,stddev_ts\n");
    for (const Row& r : rows) {
      std::printf("%s,%.0f,%s,%d,%s,%.3f,%.3f\n", m.name.c_str(), bytes, backend.c_str(), threads, r.test.c_str(),
                  r.s.mean, r.s.stdev);
    }
  } else {
    std::printf("| model | size | backend | threads | test | t/s |\n");
    std::printf("| --- | ---: | --- | ---: | ---: | ---: |\n");
    for (const Row& r : rows) {
      std::printf("| %s | %s | %s | %d | %s | %.2f ± %.2f |\n", m.name.c_str(), size, backend.c_str(), threads,
                  r.test.c_str(), r.s.mean, r.s.stdev);
    }
  }
  return 0;
}

}  // namespace kiln::cli
