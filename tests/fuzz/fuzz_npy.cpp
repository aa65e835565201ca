// libFuzzer target: the .npy reader on arbitrary bytes (magic, version,
// header dict, dtype, shape, data size); only kiln::Error may come out.
#include "fuzz_input.h"
#include "kiln/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::InputFile in(data, size);
  try {
    kiln::array a = kiln::load(in.path());
    a.eval();
  } catch (const kiln::Error&) {
  }
  return 0;
}
