#pragma once
// Reading and writing arrays to files, with MLX's C++ signatures (mlx/io.h).
//
// .npy / .npz: numpy's formats. save writes format 1.0 (little-endian, C
// order, the data on a 64-byte boundary); load reads 1.0, 2.0 and 3.0,
// big-endian and Fortran-order files too. bfloat16, which numpy lacks, is
// written as 'V2' (as MLX does). savez writes a zip of NAME.npy members,
// stored, as numpy.savez; load_npz reads stored and deflated members
// (numpy.savez_compressed). Differences from MLX: load reads the file
// eagerly (MLX loads lazily); savez / load_npz are MLX's Python savez / load
// of an .npz, which its C++ API does not have.
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

// Evaluates a and writes it to an .npy file (".npy" is appended when file
// has no extension, as MLX does).
void save(std::string file, array a);
// The array of an .npy file; a malformed file or a dtype Kiln lacks is a
// kiln::Error naming the file.
array load(std::string file, StreamOrDevice s = {});
// Writes the arrays to an .npz file (".npz" appended when file has no
// extension), members in key order.
void savez(std::string file, std::unordered_map<std::string, array> arrays);
// The arrays of an .npz file, keyed by member name without ".npy".
std::unordered_map<std::string, array> load_npz(const std::string& file, StreamOrDevice s = {});

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
