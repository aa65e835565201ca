// `kiln train-model` (llm_cli.h): the default model of `kiln generate`.
//
// A small Llama-architecture model (the shape of default_config(): byte
// ids 0..255 as the vocabulary, 4 layers, dim 256, 8 query / 4 KV heads,
// SwiGLU 704) trained with Kiln on text every Debian system ships (the
// licence texts of base-files in /usr/share/common-licenses, 260 KB, by
// default), then saved as GGUF with llama.cpp's names
// (`make model` writes build/kiln-default.gguf, which `kiln generate` with no
// -m loads). The loss is llm::Model's own forward pass over the parameter
// arrays, so the trained weights run through exactly the inference code;
// AdamW with a warmup and a cosine decay, next-byte cross entropy on random
// windows of the text, a held-out tail for the reported validation loss.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/llm.h"
#include "kiln/optimizers.h"
#include "llm_cli.h"

namespace kiln::cli {
namespace {

using llm::ModelConfig;
using llm::TensorMap;

// The parameters of a fresh model, by Hugging Face name: normal(0, 0.02)
// matrices, the output projections scaled down by sqrt(2 * layers) as
// GPT-2 does, norms 1. Tied embeddings (vocab 256 costs little).
TensorMap init_params(const ModelConfig& c, uint64_t seed) {
  TensorMap t;
  uint64_t n = 0;
  const float out_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.num_layers));
  auto normal = [&](Shape shape, float std) {
    return random::normal(shape, float32, 0.0f, std, random::key(seed * 7919 + ++n));
  };
  const int hd = c.resolved_head_dim(), D = c.hidden_size, F = c.intermediate_size;
  t.emplace("model.embed_tokens.weight", normal({c.vocab_size, D}, 0.02f));
  t.emplace("model.norm.weight", ones({D}));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.emplace(p + "input_layernorm.weight", ones({D}));
    t.emplace(p + "post_attention_layernorm.weight", ones({D}));
    t.emplace(p + "self_attn.q_proj.weight", normal({c.num_heads * hd, D}, 0.02f));
    t.emplace(p + "self_attn.k_proj.weight", normal({c.num_kv_heads * hd, D}, 0.02f));
    t.emplace(p + "self_attn.v_proj.weight", normal({c.num_kv_heads * hd, D}, 0.02f));
    t.emplace(p + "self_attn.o_proj.weight", normal({D, c.num_heads * hd}, out_std));
    t.emplace(p + "mlp.gate_proj.weight", normal({F, D}, 0.02f));
    t.emplace(p + "mlp.up_proj.weight", normal({F, D}, 0.02f));
    t.emplace(p + "mlp.down_proj.weight", normal({D, F}, out_std));
  }
  return t;
}

// Mean next-byte cross entropy of the model made of `params` on a batch
// [B, T + 1] of byte ids.
array loss_of(const ModelConfig& c, const nn::Params& params, const array& batch) {
  const TensorMap t(params.begin(), params.end());
  const llm::Model model = llm::Model::from_tensors(c, t);
  std::vector<nn::KVCache> caches = model.make_caches();
  const int T = batch.shape(1) - 1;
  const array inputs = slice(batch, {0, 0}, {batch.shape(0), T});
  const array targets = slice(batch, {0, 1}, {batch.shape(0), T + 1});
  const array logits = model.forward(inputs, caches);  // [B, T, vocab] float32
  const array picked = squeeze(take_along_axis(logits, expand_dims(targets, -1), -1), -1);
  return mean(logsumexp(logits, -1) - picked);
}

// A file's bytes; a directory's regular files (not links), sorted by name,
// one after the other.
std::string read_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::ostringstream s;
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    if (!f) throw Error("kiln train-model: cannot read " + p.string());
    s << f.rdbuf() << '\n';
  }
  return s.str();
}

}  // namespace

int run_train_model(const TrainModelOptions& o) {
  const std::string text = read_text(o.text);
  const int T = o.context, B = o.batch;
  if (static_cast<int>(text.size()) < 4 * (T + 1)) {
    throw Error("kiln train-model: " + o.text + " has " + std::to_string(text.size()) + " bytes; need at least " +
                std::to_string(4 * (T + 1)) + " for --context " + std::to_string(T));
  }
  if (o.steps < 1 || B < 1 || T < 2) throw Error("kiln train-model: --steps, --batch and --context must be positive");
  ModelConfig c = default_config();
  c.max_position_embeddings = std::max(c.max_position_embeddings, T);
  // The last tenth of the text is held out for the validation loss.
  const int held = std::max<int>(static_cast<int>(text.size()) / 10, T + 1);
  const int train_end = static_cast<int>(text.size()) - held;
  std::mt19937_64 rng(o.seed);
  auto window_batch = [&](int lo, int hi, int rows) {
    std::vector<int32_t> ids(static_cast<size_t>(rows) * (T + 1));
    std::uniform_int_distribution<int> start(lo, hi - (T + 1));
    for (int r = 0; r < rows; ++r) {
      const int s = start(rng);
      for (int j = 0; j <= T; ++j) ids[static_cast<size_t>(r) * (T + 1) + j] = static_cast<uint8_t>(text[s + j]);
    }
    return array(ids, Shape{rows, T + 1}, int32);
  };

  nn::Params params;
  for (auto& [name, a] : init_params(c, o.seed)) params.emplace(name, a);
  const std::vector<std::string> names = [&] {
    std::vector<std::string> v;
    for (const auto& [name, a] : params) v.push_back(name);
    return v;
  }();
  auto loss_fn = [&](const std::vector<array>& in) {
    nn::Params p;
    for (size_t i = 0; i < names.size(); ++i) p.emplace(names[i], in[i + 1]);
    return std::vector<array>{loss_of(c, p, in[0])};
  };
  std::vector<int> argnums(names.size());
  for (size_t i = 0; i < names.size(); ++i) argnums[i] = static_cast<int>(i + 1);
  auto loss_and_grad = value_and_grad(loss_fn, argnums);

  const int warmup = std::min(o.steps / 10 + 1, 100);
  auto schedule = optimizers::join_schedules(
      {optimizers::linear_schedule(0.0f, o.lr, warmup), optimizers::cosine_decay(o.lr, o.steps - warmup, o.lr / 10)},
      {warmup});
  optimizers::AdamW opt(schedule, {0.9f, 0.95f}, 1e-8f, 0.01f);

  size_t count = 0;
  for (const auto& [name, a] : params) count += a.size();
  std::fprintf(stderr,
               "kiln train-model: %zu parameters (%d layers, dim %d, byte vocabulary), %s (%zu bytes, last %d held "
               "out), batch %d x %d bytes, %d steps, AdamW lr %g\n",
               count, c.num_layers, c.hidden_size, o.text.c_str(), text.size(), held, B, T, o.steps, o.lr);
  const array val_batch = window_batch(train_end, static_cast<int>(text.size()), std::max(B, 8));
  auto validation = [&] {
    array l = loss_of(c, params, val_batch);
    eval(l);
    return l.item<float>();
  };
  const float val0 = validation();
  const auto t0 = std::chrono::steady_clock::now();
  float last = 0.0f;
  for (int step = 1; step <= o.steps; ++step) {
    std::vector<array> in;
    in.push_back(window_batch(0, train_end, B));
    for (const std::string& n : names) in.push_back(params.at(n));
    auto [values, grads] = loss_and_grad(in);
    nn::Params g;
    for (size_t i = 0; i < names.size(); ++i) g.emplace(names[i], grads[i]);
    params = opt.apply_gradients(g, params);
    std::vector<array> todo{values[0]};
    for (auto& [n, a] : params) todo.push_back(a);
    eval(todo);
    last = values[0].item<float>();
    if (step == 1 || step % o.print_every == 0 || step == o.steps) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "  step %4d  loss %.3f  (%.1f s)\n", step, last, s);
    }
  }
  const float val1 = validation();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "kiln train-model: held-out loss %.3f -> %.3f nats/byte in %.0f s\n", val0, val1, secs);

  llm::Checkpoint cp;
  cp.config = c;
  for (auto& [name, a] : params) cp.tensors.emplace(name, a);
  write_gguf_checkpoint(cp, o.output, "f32");
  if (o.json) {
    std::printf("{\"initial_validation_loss\": %.6f, \"final_validation_loss\": %.6f, \"final_train_loss\": %.6f, "
                "\"steps\": %d, \"seconds\": %.3f}\n",
                val0, val1, last, o.steps, secs);
  }
  return 0;
}

}  // namespace kiln::cli
