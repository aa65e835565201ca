// libFuzzer target: load_safetensors on arbitrary bytes (header JSON,
// dtypes, shapes, offsets); only kiln::Error may come out.
#include "fuzz_input.h"
#include "kiln/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::InputFile in(data, size);
  try {
    auto loaded = kiln::load_safetensors(in.path());
    for (auto& [name, a] : loaded.first) a.eval();
  } catch (const kiln::Error&) {
  }
  return 0;
}
