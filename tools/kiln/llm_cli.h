#pragma once
// `kiln generate`, `kiln bench llm`, `kiln convert` and `kiln train-model`:
// the LLM runtime's commands (include/kiln/llm.h).
#include <string>

#include "kiln/llm.h"

namespace kiln::cli {

struct GenerateCliOptions {
  std::string model;  // empty: a random-weight Llama built in memory
  std::string prompt = "Once upon a time";
  int n = 64;
  float temp = 0.0f;  // <= 0: greedy on the device
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  unsigned seed = 0x5eed;
  std::string device = "cpu";
  bool json = false;
  bool chat = false;
  bool no_compile = false;  // decode op by op instead of one compiled graph per step
  std::string dtype = "auto";  // a quantized model's activations: auto | float32 | bfloat16 | float16
};
int run_generate(const GenerateCliOptions& opt);

struct BenchLlmOptions {
  std::string model;
  int prompt = 512;
  int gen = 128;
  int reps = 5;
  std::string output = "md";  // md | csv | json
  std::string device = "cpu";
  bool no_compile = false;
  std::string dtype = "auto";
};
int run_bench_llm(const BenchLlmOptions& opt);

struct ConvertOptions {
  std::string input;   // Hugging Face directory or .gguf
  std::string output;  // .gguf or a directory
  std::string type = "f16";  // f32 | f16 | bf16 | q8_0 | q4_0 | q4_k | ...
};
int run_convert(const ConvertOptions& opt);

// A checkpoint as a GGUF file with llama.cpp's metadata and tensor names
// (`kiln convert`'s writer; type as ConvertOptions::type).
int write_gguf_checkpoint(const llm::Checkpoint& cp, const std::string& out, const std::string& type);

// The shape of the default model: byte ids as the vocabulary (256), 4
// layers, dim 256, 8 query / 4 KV heads, SwiGLU 704.
llm::ModelConfig default_config();

// `kiln train-model` (llm_train.cpp): trains the default model's shape on
// a text file and writes it as GGUF (`make model`).
struct TrainModelOptions {
  std::string text = "/usr/share/common-licenses";  // a file, or a directory's files (Debian's base-files ships these)
  std::string output = "kiln-default.gguf";
  int steps = 600;
  int batch = 16;
  int context = 128;
  float lr = 2e-3f;
  unsigned seed = 0;
  int print_every = 50;
  bool json = false;  // a JSON summary (losses, time) as the last line of stdout
};
int run_train_model(const TrainModelOptions& opt);

}  // namespace kiln::cli
