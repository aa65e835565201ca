#pragma once
// Reading and writing arrays to files, with MLX's C++ signatures (mlx/io.h).
//
// .safetensors: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
// "__metadata__": {"key": "value"}} padded with spaces to a multiple of 8
// bytes, then the raw little-endian row-major data of each array. Dtypes:
// BOOL, U8, U32, I8, I32, I64, F16, BF16, F32, F64.
//
// Differences from MLX, on purpose: the loaded arrays are copies of the
// file's data (MLX loads lazily), so load_safetensors takes no stream;
// arrays are written in key order.
#include <string>
#include <unordered_map>
#include <utility>

#include "kiln/array.h"

namespace kiln {

using SafetensorsLoad =
    std::pair<std::unordered_map<std::string, array>, std::unordered_map<std::string, std::string>>;

// Evaluates the arrays and writes them to file (".safetensors" is appended
// when file has no extension, as MLX does).
void save_safetensors(std::string file, std::unordered_map<std::string, array> arrays,
                      std::unordered_map<std::string, std::string> metadata = {});
// The arrays and the metadata of a .safetensors file; a malformed file is a
// kiln::Error naming the file and what is wrong with it.
SafetensorsLoad load_safetensors(const std::string& file);

}  // namespace kiln
