// The LLM runtime against mlx-lm on the tiny models tests/llm/make_models.py
// writes (Llama 3 with llama3 RoPE scaling, Qwen 2, Qwen 3): the same greedy
// ids at fp32 from the Hugging Face layout and from GGUF f32; GGUF f16 /
// q8_0 / q4_0 logits within a stated tolerance of mlx-lm run on the same
// weights dequantized. Skipped with a message where python3 lacks numpy,
// safetensors, gguf or mlx-lm. The LlamaCppOracle tests at the end do the same
// against llama.cpp where llama-cpp-python is importable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/llm.h"

using namespace kiln;
using namespace kiln::llm;

namespace {

namespace fs = std::filesystem;

class LlmOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("kiln_llm_models_" + std::to_string(::getpid()))).string();
    const std::string cmd = "python3 " + std::string(KILN_SOURCE_DIR) + "/tests/llm/make_models.py " + dir_;
    const int rc = std::system(cmd.c_str());
    status_ = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (status_ == 77) GTEST_SKIP() << "python3 lacks numpy/safetensors/gguf/mlx-lm (pip install \"mlx[cpu]\" mlx-lm gguf)";
    ASSERT_EQ(status_, 0) << "tests/llm/make_models.py failed";
  }

  static nlohmann::json ref(const std::string& arch) {
    std::ifstream in(dir_ + "/" + arch + "/ref.json");
    return nlohmann::json::parse(in);
  }
  static std::string path(const std::string& arch, const std::string& file) { return dir_ + "/" + arch + "/" + file; }

  static inline std::string dir_;
  static inline int status_ = 0;
};

const char* const kArchs[] = {"llama", "qwen2", "qwen3"};

std::vector<int32_t> greedy(const Model& m, const std::vector<int32_t>& prompt, int n) {
  GenerateOptions opt;
  opt.max_tokens = n;
  std::vector<int32_t> out;
  generate(m, prompt, opt, [&](int32_t id) {
    out.push_back(id);
    return true;
  });
  return out;
}

// max |kiln - reference| over the last prompt position's logits.
float logits_error(const Model& m, const nlohmann::json& r, const std::string& key) {
  std::vector<int32_t> prompt = r["prompt"];
  auto caches = m.make_caches();
  array logits = reshape(m.forward(array(prompt, {1, static_cast<int>(prompt.size())}), caches, true), {-1});
  std::vector<float> want = r[key];
  return max(abs(logits - array(want, {static_cast<int>(want.size())}))).item<float>();
}

}  // namespace

TEST_F(LlmOracle, HuggingFaceLayoutGivesMlxLmsGreedyIds) {
  for (const char* arch : kArchs) {
    const nlohmann::json r = ref(arch);
    Model m = Model::load(path(arch, "hf"));
    EXPECT_EQ(greedy(m, r["prompt"], 32), r["greedy"].get<std::vector<int32_t>>()) << arch;
    EXPECT_LT(logits_error(m, r, "logits"), 1e-3f) << arch;
  }
}

TEST_F(LlmOracle, GgufF32GivesTheSameIdsAsTheHuggingFaceLayout) {
  for (const char* arch : kArchs) {
    const nlohmann::json r = ref(arch);
    Model m = Model::load(path(arch, "f32.gguf"));
    EXPECT_EQ(m.config().architecture, arch);
    EXPECT_EQ(m.config().rope_traditional, std::string(arch) == "llama");
    EXPECT_EQ(greedy(m, r["prompt"], 32), r["greedy"].get<std::vector<int32_t>>()) << arch;
    EXPECT_LT(logits_error(m, r, "logits_f32"), 1e-3f) << arch;
  }
}

TEST_F(LlmOracle, QuantizedGgufLogitsAreNearTheDequantizedReference) {
  // f16 runs its activations in float16 (the reference in float32);
  // q8_0 / q4_0 dequantize in registers with float32 activations.
  const std::vector<std::pair<std::string, float>> tolerances = {{"f16", 5e-2f}, {"q8_0", 2e-3f}, {"q4_0", 2e-3f}};
  for (const char* arch : kArchs) {
    const nlohmann::json r = ref(arch);
    for (const auto& [type, tol] : tolerances) {
      Model m = Model::load(path(arch, type + ".gguf"));
      EXPECT_LT(logits_error(m, r, "logits_" + type), tol) << arch << " " << type;
    }
  }
}

// ---- llama.cpp (llama-cpp-python) as the oracle ----
//
// tests/llm/llama_cpp_ref.py writes the same kind of tiny models as GGUF
// (gguf-py) and llama.cpp's greedy ids and logits on them. f32 and f16: the
// same 32 greedy ids as Kiln. Logits of the last prompt position: f32
// within 1e-3 (a float32 KV cache) or 1e-2 (llama.cpp's float16 cache,
// where the binding cannot choose); f16 within 5e-2 (both run activations
// in float16, rounded at different points); q8_0 / q4_0 within 5e-2, since
// llama.cpp's CPU path quantizes the activations to Q8_0 blocks before each
// dot product where Kiln keeps them in float32 (the weight blocks are the
// same bytes).

namespace {

class LlamaCppOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("kiln_llama_cpp_models_" + std::to_string(::getpid()))).string();
    const std::string cmd = "python3 " + std::string(KILN_SOURCE_DIR) + "/tests/llm/llama_cpp_ref.py " + dir_;
    const int rc = std::system(cmd.c_str());
    status_ = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (status_ == 77) {
      GTEST_SKIP() << "llama_cpp is not importable (pip install llama-cpp-python gguf safetensors numpy)";
    }
    ASSERT_EQ(status_, 0) << "tests/llm/llama_cpp_ref.py failed";
  }

  static nlohmann::json ref(const std::string& arch) {
    std::ifstream in(dir_ + "/" + arch + "/llama_cpp.json");
    return nlohmann::json::parse(in);
  }
  static Model model(const std::string& arch, const std::string& type) {
    return Model::load(dir_ + "/" + arch + "/" + type + ".gguf");
  }

  static inline std::string dir_;
  static inline int status_ = 0;
};

float logits_error_vs(const Model& m, const nlohmann::json& r, const std::string& type) {
  std::vector<int32_t> prompt = r["prompt"];
  auto caches = m.make_caches();
  array logits = reshape(m.forward(array(prompt, {1, static_cast<int>(prompt.size())}), caches, true), {-1});
  std::vector<float> want = r[type]["logits"];
  return max(abs(logits - array(want, {static_cast<int>(want.size())}))).item<float>();
}

}  // namespace

TEST_F(LlamaCppOracle, F32AndF16GiveLlamaCppsGreedyIds) {
  for (const char* arch : kArchs) {
    const nlohmann::json r = ref(arch);
    const float f32_tolerance = r["kv_f32"].get<bool>() ? 1e-3f : 1e-2f;
    for (const auto& [type, tol] : std::vector<std::pair<std::string, float>>{{"f32", f32_tolerance}, {"f16", 5e-2f}}) {
      Model m = model(arch, type);
      EXPECT_EQ(greedy(m, r["prompt"], 32), r[type]["greedy"].get<std::vector<int32_t>>()) << arch << " " << type;
      EXPECT_LT(logits_error_vs(m, r, type), tol) << arch << " " << type;
    }
  }
}

TEST_F(LlamaCppOracle, QuantizedLogitsAreNearLlamaCpps) {
  for (const char* arch : kArchs) {
    const nlohmann::json r = ref(arch);
    for (const std::string type : {"q8_0", "q4_0"}) {
      EXPECT_LT(logits_error_vs(model(arch, type), r, type), 5e-2f) << arch << " " << type;
    }
  }
}
