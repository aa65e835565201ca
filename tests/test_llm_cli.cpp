// The LLM commands of the built `kiln`: generate on the default random
// model (text and --json), bench llm's table formats, and convert between a
// Hugging Face directory and GGUF (logits kept within the quantization's
// error). Timings are not tested, only that they are reported.
#ifdef KILN_CLI_PATH

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/llm.h"
#include "quant_blocks_ref.h"

using namespace kiln;

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out;   // stdout
};

// `env` prefixes the command; by default the random model stands in for a
// missing -m even where `make model` wrote build/kiln-default.gguf.
Result run(const std::string& args, const std::string& env = "KILN_DEFAULT_MODEL=random") {
  Result r;
  FILE* pipe = popen((env + " '" + KILN_CLI_PATH + "' " + args + " 2>/dev/null").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("kiln_llm_cli_" + std::to_string(getpid()) + "_" + name)).string();
}

}  // namespace

TEST(LlmCli, GenerateOnTheDefaultRandomModel) {
  Result r = run("generate -n 6 -p 'Hi there' --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["random_weights"].get<bool>());
  EXPECT_EQ(j["prompt_ids"].size(), 8u);  // one id per byte
  EXPECT_EQ(j["ids"].size(), 6u);
  EXPECT_EQ(j["decode_tokens"].get<int>(), 5);
  EXPECT_GT(j["decode_tokens_per_second"].get<double>(), 0.0);

  EXPECT_GT(j["peak_rss_bytes"].get<long>(), 0);

  // Greedy is deterministic: the same ids again (and op by op), and text mode reports speeds.
  EXPECT_EQ(nlohmann::json::parse(run("generate -n 6 -p 'Hi there' --json").out)["ids"], j["ids"]);
  EXPECT_EQ(nlohmann::json::parse(run("generate -n 6 -p 'Hi there' --json --no-compile").out)["ids"], j["ids"]);
  // Sampling through the host sampler chain is reproducible by seed.
  const std::string sampled = "generate -n 8 -p 'Hi there' --json --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed ";
  const auto s1 = nlohmann::json::parse(run(sampled + "7").out);
  EXPECT_EQ(s1["ids"].size(), 8u);
  EXPECT_EQ(nlohmann::json::parse(run(sampled + "7").out)["ids"], s1["ids"]);
  Result text = run("generate -n 4 -p abc");
  ASSERT_EQ(text.code, 0);
  EXPECT_EQ(text.out.rfind("abc", 0), 0u);
  EXPECT_NE(text.out.find("decode: 3 tokens"), std::string::npos) << text.out;
  EXPECT_NE(run("generate -n 4 -m /nonexistent.gguf").code, 0);
}

// `kiln train-model` (make model): a few steps on a small text lower the
// held-out loss, the GGUF it writes loads as the default model, and its
// logits are those of the training forward pass (the loss the trainer
// reports is recomputed from the file).
TEST(LlmCli, TrainModelWritesTheDefaultModel) {
  const std::string text = temp_path("train.txt"), out = temp_path("trained.gguf");
  {
    std::ofstream f(text);
    for (int i = 0; i < 60; ++i) f << "the quick brown fox jumps over the lazy dog " << i % 7 << ".\n";
  }
  Result r = run("train-model --text " + text + " -o " + out + " --steps 40 --batch 8 --context 32 --lr 3e-3 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  EXPECT_LT(j["final_validation_loss"].get<double>(), j["initial_validation_loss"].get<double>() - 1.5);
  ASSERT_TRUE(fs::exists(out));

  Result g = run("generate -n 8 -p 'the quick' --json", "KILN_DEFAULT_MODEL=" + out);
  ASSERT_EQ(g.code, 0) << g.out;
  const auto gj = nlohmann::json::parse(g.out);
  EXPECT_FALSE(gj["random_weights"].get<bool>());
  EXPECT_EQ(gj["ids"].size(), 8u);

  // The file's model on the text's first window: next-byte loss close to
  // what training reached (the same forward pass, read back from GGUF).
  llm::Model m = llm::Model::load(out);
  std::vector<int32_t> ids;
  for (char ch : std::string("the quick brown fox jumps over the lazy dog 3.\nthe quick brown fox jumps"))
    ids.push_back(static_cast<uint8_t>(ch));
  const int T = static_cast<int>(ids.size()) - 1;
  array toks(std::vector<int32_t>(ids.begin(), ids.end() - 1), Shape{1, T}, int32);
  std::vector<nn::KVCache> caches = m.make_caches();
  array logits = m.forward(toks, caches);
  array targets(std::vector<int32_t>(ids.begin() + 1, ids.end()), Shape{1, T}, int32);
  array loss = mean(logsumexp(logits, -1) - squeeze(take_along_axis(logits, expand_dims(targets, -1), -1), -1));
  EXPECT_LT(loss.item<float>(), j["initial_validation_loss"].get<double>() - 1.5);
  fs::remove(text);
  fs::remove(out);
}

TEST(LlmCli, BenchLlmPrintsPpAndTgRows) {
  Result r = run("bench llm -p 16 -n 4 -r 2 -o json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["test"], "pp16");
  EXPECT_EQ(rows[1]["test"], "tg4");
  for (const auto& row : rows) EXPECT_GT(row["avg_ts"].get<double>(), 0.0);
  Result md = run("bench llm -p 8 -n 2 -r 1");
  ASSERT_EQ(md.code, 0);
  EXPECT_NE(md.out.find("| pp8 |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| tg2 |"), std::string::npos) << md.out;
}

TEST(LlmCli, ConvertRoundTripsThroughGguf) {
  // In this process, the block formats' products take x as it is: the q8_0
  // file is compared with its float copy written back, weights only (the
  // CPU's default 8-bit rounding of x has its bounds in
  // test_quant_blocks_int8.cpp).
  test::CpuBlockXExact exact_x;
  // A random Llama with GQA in Hugging Face layout.
  llm::ModelConfig c;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  llm::TensorMap t;
  int n = 0;
  auto w = [&](Shape s) { return random::normal(s, float32, 0.0f, 0.3f, random::key(++n)); };
  const int D = c.hidden_size, F = c.intermediate_size, hd = D / c.num_heads;
  t.emplace("model.embed_tokens.weight", w({c.vocab_size, D}));
  t.emplace("model.norm.weight", ones({D}));
  t.emplace("lm_head.weight", w({c.vocab_size, D}));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.emplace(p + "input_layernorm.weight", ones({D}));
    t.emplace(p + "post_attention_layernorm.weight", ones({D}));
    t.emplace(p + "self_attn.q_proj.weight", w({c.num_heads * hd, D}));
    t.emplace(p + "self_attn.k_proj.weight", w({c.num_kv_heads * hd, D}));
    t.emplace(p + "self_attn.v_proj.weight", w({c.num_kv_heads * hd, D}));
    t.emplace(p + "self_attn.o_proj.weight", w({D, c.num_heads * hd}));
    t.emplace(p + "mlp.gate_proj.weight", w({F, D}));
    t.emplace(p + "mlp.up_proj.weight", w({F, D}));
    t.emplace(p + "mlp.down_proj.weight", w({D, F}));
  }
  const std::string hf = temp_path("hf");
  fs::create_directories(hf);
  std::ofstream(hf + "/config.json") << R"({"model_type": "llama", "vocab_size": 96, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})";
  save_safetensors(hf + "/model.safetensors", std::unordered_map<std::string, array>(t.begin(), t.end()));

  const std::vector<int32_t> prompt = {5, 17, 3, 88, 41, 9, 60};
  auto logits = [&](const std::string& path) {
    llm::Model m = llm::Model::load(path);
    auto caches = m.make_caches();
    array l = m.forward(array(prompt, {1, static_cast<int>(prompt.size())}), caches);
    eval(l);
    return l;
  };
  const array want = logits(hf);
  const float scale = max(abs(want)).item<float>();
  auto diff = [](const array& a, const array& b) { return max(abs(a - b)).item<float>(); };
  // q8_0's own rounding moves the logits by up to a few percent of their
  // range; converting back to float32 writes exactly the dequantized weights.
  for (const auto& [type, tol] : std::vector<std::pair<std::string, float>>{{"f32", 1e-4f}, {"q8_0", 0.1f * scale}}) {
    const std::string g = temp_path(type + ".gguf");
    Result r = run("convert " + hf + " " + g + " --type " + type);
    ASSERT_EQ(r.code, 0) << r.out;
    const array from_gguf = logits(g);
    EXPECT_LT(diff(from_gguf, want), tol) << type;
    const std::string back = temp_path(type + "_back");
    ASSERT_EQ(run("convert " + g + " " + back + " --type f32").code, 0);
    EXPECT_LT(diff(logits(back), from_gguf), 1e-3f) << type << " back to Hugging Face layout";
    // --dtype: a quantized file runs bf16 / f16 activations; a float one refuses another dtype.
    Result b = run("bench llm -m " + g + " -p 8 -n 2 -r 1 -o json --dtype bfloat16");
    if (type == "q8_0") {
      ASSERT_EQ(b.code, 0) << b.out;
      const auto rows = nlohmann::json::parse(b.out);
      ASSERT_EQ(rows.size(), 2u);
      EXPECT_EQ(rows[1]["activation_dtype"], "bfloat16");
      Result gen = run("generate -m " + g + " -n 3 -p '!#,' --json --dtype float16");
      ASSERT_EQ(gen.code, 0) << gen.out;
      EXPECT_EQ(nlohmann::json::parse(gen.out)["ids"].size(), 3u);
    } else {
      EXPECT_NE(b.code, 0) << b.out;
    }
    fs::remove(g);
    fs::remove_all(back);
  }
  EXPECT_NE(run("convert " + hf + " " + temp_path("out_dir")).code, 0);  // neither side GGUF
  fs::remove_all(hf);
}

#endif  // KILN_CLI_PATH
