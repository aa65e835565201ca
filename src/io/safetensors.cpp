// .safetensors reader and writer (format in include/kiln/io.h). The header
// is JSON, parsed with nlohmann-json; the arrays wrap the memory-mapped
// file. Kiln runs on little-endian hosts only (x86-64), so the bytes go as
// they are.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/array_bytes.h"
#include "io/mapped_file.h"
#include "kiln/io.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

const char* safetensors_dtype(Dtype t) {
  switch (t) {
    case bool_: return "BOOL";
    case uint8: return "U8";
    case uint16: return "U16";
    case uint32: return "U32";
    case uint64: return "U64";
    case int8: return "I8";
    case int16: return "I16";
    case int32: return "I32";
    case int64: return "I64";
    case float16: return "F16";
    case bfloat16: return "BF16";
    case float32: return "F32";
    case float64: return "F64";
    case complex64: return "C64";
    case float8_e4m3fn: return "F8_E4M3";
    case float8_e5m2: return "F8_E5M2";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, Dtype* out) {
  for (int i = 0; i < kNumDtypes; ++i) {
    Dtype t = static_cast<Dtype>(i);
    if (name == safetensors_dtype(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

[[noreturn]] void bad_file(const std::string& file, const std::string& why) {
  throw Error("[load_safetensors] " + file + ": " + why);
}

}  // namespace

void save_safetensors(std::string file, std::unordered_map<std::string, array> arrays,
                      std::unordered_map<std::string, std::string> metadata) {
  if (file.find('.', file.find_last_of('/') + 1) == std::string::npos) file += ".safetensors";
  // Wider elements first, then by name (the safetensors package's order):
  // with the header padded to 8 bytes every array is then aligned to its
  // element size, so the memory-mapped loader can use it in place.
  std::vector<std::pair<std::string, array>> sorted;
  std::vector<array> to_eval;
  for (auto& [name, a] : arrays) {
    if (name == "__metadata__") throw Error("[save_safetensors] the name __metadata__ is reserved");
    array c = contiguous(a);
    sorted.emplace_back(name, c);
    to_eval.push_back(c);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    return x.second.itemsize() != y.second.itemsize() ? x.second.itemsize() > y.second.itemsize() : x.first < y.first;
  });
  eval(to_eval);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    std::map<std::string, std::string> meta(metadata.begin(), metadata.end());
    header["__metadata__"] = meta;
  }
  size_t offset = 0;
  for (auto& [name, a] : sorted) {
    header[name] = {{"dtype", safetensors_dtype(a.dtype())},
                    {"shape", a.shape()},
                    {"data_offsets", {offset, offset + a.nbytes()}}};
    offset += a.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  if (!out) throw Error("[save_safetensors] cannot open " + file + " for writing");
  uint64_t header_size = text.size();
  out.write(reinterpret_cast<const char*>(&header_size), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (auto& [name, a] : sorted) {
    out.write(static_cast<const char*>(io::raw_bytes(a)), static_cast<std::streamsize>(a.nbytes()));
  }
  if (!out) throw Error("[save_safetensors] writing " + file + " failed");
}

SafetensorsLoad load_safetensors(const std::string& file, StreamOrDevice) {
  auto mapped = io::MappedFile::open(file, "[load_safetensors]");
  const char* bytes = reinterpret_cast<const char*>(mapped->data());
  const size_t size = mapped->size();
  if (size < 8) bad_file(file, "shorter than its 8-byte header length");
  uint64_t header_size;
  std::memcpy(&header_size, bytes, 8);
  if (header_size > size - 8) bad_file(file, "header length " + std::to_string(header_size) + " past the end");
  const size_t data_start = 8 + header_size;
  const size_t data_size = size - data_start;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + data_start);
  } catch (const nlohmann::json::exception& e) {
    bad_file(file, std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) bad_file(file, "header is not a JSON object");
  SafetensorsLoad result;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_null()) continue;  // MLX writes null when there is none
      if (!entry.is_object()) bad_file(file, "__metadata__ is not an object");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) bad_file(file, "metadata value of " + k + " is not a string");
        result.second[k] = v.get<std::string>();
      }
      continue;
    }
    try {
      const std::string dtype_str = entry.at("dtype").get<std::string>();
      Dtype dtype;
      if (!dtype_from_name(dtype_str, &dtype)) {
        bad_file(file, name + " has dtype " + dtype_str + ", which Kiln has no dtype for");
      }
      Shape shape;
      size_t count = 1;
      const auto& dims = entry.at("shape");
      if (!dims.is_array()) bad_file(file, "entry " + name + " is malformed: its shape is not an array");
      for (auto& d : dims) {
        // An integer, not a float (nlohmann would convert 1e40 to int64_t
        // by a cast whose overflow is undefined).
        if (!d.is_number_integer()) bad_file(file, name + " has a dimension that is not an integer: " + d.dump());
        int64_t n = d.get<int64_t>();
        if (n < 0 || n > INT32_MAX) bad_file(file, name + " has a bad dimension " + d.dump());
        // More elements than data bytes can never fit; checking here also
        // keeps the product from overflowing.
        if (n > 0 && count > data_size / static_cast<size_t>(n)) bad_file(file, name + " is larger than the file");
        shape.push_back(static_cast<int>(n));
        count *= static_cast<size_t>(n);
      }
      const auto& offs = entry.at("data_offsets");
      if (!offs.is_array()) bad_file(file, "entry " + name + " is malformed: its data_offsets are not an array");
      for (auto& o : offs) {
        if (!o.is_number_unsigned()) {
          bad_file(file, name + " has data_offsets " + entry.at("data_offsets").dump() + " that are not byte offsets");
        }
      }
      auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != count * size_of(dtype)) {
        bad_file(file, name + " has data_offsets " + entry.at("data_offsets").dump() + " that do not fit its " +
                           std::to_string(count) + " " + dtype_str + " elements in " + std::to_string(data_size) +
                           " data bytes");
      }
      const size_t at = data_start + offsets[0];
      if (dtype == bool_) {
        // A bool byte other than 0 or 1 is undefined behaviour to read.
        for (size_t i = 0; i < count; ++i) {
          if (mapped->data()[at + i] > 1) bad_file(file, name + " has a BOOL byte that is neither 0 nor 1");
        }
      }
      result.first.insert_or_assign(name, io::mapped_array(mapped, at, shape, dtype));
    } catch (const nlohmann::json::exception& e) {
      bad_file(file, "entry " + name + " is malformed: " + e.what());
    }
  }
  return result;
}

namespace {

namespace fs = std::filesystem;

void merge_shard(SafetensorsLoad& into, SafetensorsLoad&& shard, const std::string& shard_file) {
  for (auto& [name, a] : shard.first) {
    if (!into.first.emplace(name, a).second) {
      throw Error("[load_safetensors_sharded] " + name + " is in more than one shard (again in " + shard_file + ")");
    }
  }
  for (auto& [k, v] : shard.second) into.second.emplace(k, v);
}

SafetensorsLoad load_index(const fs::path& index, StreamOrDevice s) {
  const std::string op = "[load_safetensors_sharded] " + index.string();
  std::ifstream in(index);
  if (!in) throw Error(op + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(op + ": not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw Error(op + ": has no \"weight_map\" object");
  }
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto& [name, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) throw Error(op + ": the shard of " + name + " is not a string");
    by_shard[shard.get<std::string>()].push_back(name);
  }
  SafetensorsLoad out;
  for (auto& [shard, names] : by_shard) {
    const std::string path = (index.parent_path() / shard).string();
    SafetensorsLoad part = load_safetensors(path, s);
    for (const auto& name : names) {
      if (!part.first.count(name)) throw Error(op + ": " + name + " is not in its shard " + path);
    }
    merge_shard(out, std::move(part), path);
  }
  return out;
}

}  // namespace

SafetensorsLoad load_safetensors_sharded(const std::string& path, StreamOrDevice s) {
  const fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) {
    if (!fs::exists(p, ec)) throw Error("[load_safetensors_sharded] " + path + " does not exist");
    return load_index(p, s);
  }
  if (fs::exists(p / "model.safetensors.index.json", ec)) return load_index(p / "model.safetensors.index.json", s);
  if (fs::exists(p / "model.safetensors", ec)) return load_safetensors((p / "model.safetensors").string(), s);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  }
  if (files.empty()) throw Error("[load_safetensors_sharded] " + path + " holds no .safetensors file");
  std::sort(files.begin(), files.end());
  SafetensorsLoad out;
  for (const auto& f : files) merge_shard(out, load_safetensors(f, s), f);
  return out;
}

}  // namespace kiln
