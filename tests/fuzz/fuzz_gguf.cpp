// libFuzzer target: the GGUF parser (kiln::gguf::File) and MLX's load_gguf
// on arbitrary bytes. Any outcome but a kiln::Error or a loaded file (a
// crash, a sanitizer report, an allocation past libFuzzer's limit) is a bug.
#include "fuzz_input.h"
#include "kiln/gguf.h"
#include "kiln/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::InputFile in(data, size);
  try {
    kiln::gguf::File f(in.path());
    for (const auto& info : f.tensors()) {
      try {
        kiln::array a = f.tensor(info);
        a.eval();
      } catch (const kiln::Error&) {
      }
    }
  } catch (const kiln::Error&) {
  }
  try {
    auto loaded = kiln::load_gguf(in.path());
    for (auto& [name, a] : loaded.first) a.eval();
  } catch (const kiln::Error&) {
  }
  return 0;
}
