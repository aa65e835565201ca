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
// BOOL, U8, U32, I8, I32, I64, F16, BF16, F32, F64, and F8_E4M3 / F8_E5M2
// as float8_e4m3fn / float8_e5m2 (Kiln's fp8 dtypes, saved back the same);
// I16, U16 and U64 (no Kiln dtype) are a kiln::Error naming the tensor.
// load_safetensors memory-maps the file: the arrays wrap the read-only
// mapping with no copy (array::external_read_only: never written, never
// donated), each keeping the mapping alive; an array not aligned to its
// element size in the file (other writers may do that) is copied instead.
// save_safetensors writes wider elements first, then in name order (the
// safetensors package's order), so its arrays are always aligned.
// Difference from MLX: the stream argument of load_safetensors is accepted
// and unused (the arrays are already available, MLX reads them lazily).
//
// .gguf (llama.cpp's format; kiln/gguf.h has the full reader and writer):
// load_gguf / save_gguf with MLX's semantics. Metadata: scalars become 0-d
// arrays, arrays of numbers or bools 1-d arrays, strings std::string,
// arrays of strings std::vector<std::string>; nested arrays are an error
// (as in MLX); float64 values become float32 (as in MLX). Tensors: Q4_0,
// Q4_1 and Q8_0 "NAME.weight" become MLX's affine triple NAME.weight
// (uint32), NAME.scales and NAME.biases (float16), group size 32, bits 4 or
// 8, as MLX does; the other block formats are dequantized to float16 (as
// MLX does), lazily. Differences from MLX, on purpose: F32, F16, BF16, F64,
// I8, I32 and I64 tensors load as their dtype and wrap the memory-mapped
// file with no copy (MLX copies, and has no BF16/F64/I64 here); uint16 and
// int16 metadata become uint32 / int32 arrays and uint64 values int64 when
// they fit (Kiln has no uint16, int16 or uint64 dtype), I16 tensors are an
// error; save_gguf writes metadata and tensors in key order (MLX: hash
// order), also writes bfloat16, float64 and int64 tensors and float64
// metadata, and is byte-identical to gguf-py's GGUFWriter given those keys
// in that order.
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

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
SafetensorsLoad load_safetensors(const std::string& file, StreamOrDevice s = {});
// A sharded checkpoint: `path` is a model.safetensors.index.json (its
// "weight_map" names the shard of every tensor, relative to the index's
// directory), or a directory holding one (else a single model.safetensors,
// else every *.safetensors in it). Each tensor must be in the shard the
// index names; the metadata is the union of the shards' metadata. Kiln
// addition (MLX's C++ API has none).
SafetensorsLoad load_safetensors_sharded(const std::string& path, StreamOrDevice s = {});

using GGUFMetaData = std::variant<std::monostate, array, std::string, std::vector<std::string>>;
using GGUFLoad = std::pair<std::unordered_map<std::string, array>, std::unordered_map<std::string, GGUFMetaData>>;

// The arrays and metadata of a .gguf file (see above for the conversions).
GGUFLoad load_gguf(const std::string& file, StreamOrDevice s = {});
// Writes arrays and metadata to a .gguf file (".gguf" appended when the
// name does not end with it, as MLX does). Metadata arrays must be 0-d or
// 1-d and non-empty, of bool, uint8, uint32, int8, int32, int64, float32 or
// float64; tensors of float32, float16, bfloat16, float64, int8, int32,
// int64.
void save_gguf(std::string file, std::unordered_map<std::string, array> array_map,
               std::unordered_map<std::string, GGUFMetaData> meta_data = {});

}  // namespace kiln
