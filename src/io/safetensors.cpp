// .safetensors reader and writer (format in include/kiln/io.h). The header
// is JSON, parsed with nlohmann-json; the data is copied into arrays. Kiln
// runs on little-endian hosts only (x86-64), so the bytes go as they are.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/array_bytes.h"
#include "kiln/io.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

const char* safetensors_dtype(Dtype t) {
  switch (t) {
    case bool_: return "BOOL";
    case uint8: return "U8";
    case uint32: return "U32";
    case int8: return "I8";
    case int32: return "I32";
    case int64: return "I64";
    case float16: return "F16";
    case bfloat16: return "BF16";
    case float32: return "F32";
    case float64: return "F64";
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
  std::map<std::string, array> sorted;
  std::vector<array> to_eval;
  for (auto& [name, a] : arrays) {
    if (name == "__metadata__") throw Error("[save_safetensors] the name __metadata__ is reserved");
    array c = contiguous(a);
    sorted.emplace(name, c);
    to_eval.push_back(c);
  }
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
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("[load_safetensors] cannot open " + file);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) bad_file(file, "shorter than its 8-byte header length");
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  if (header_size > bytes.size() - 8) bad_file(file, "header length " + std::to_string(header_size) + " past the end");
  const char* data = bytes.data() + 8 + header_size;
  const size_t data_size = bytes.size() - 8 - header_size;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(static_cast<const char*>(bytes.data() + 8), data);
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
      Dtype dtype;
      if (!dtype_from_name(entry.at("dtype").get<std::string>(), &dtype)) {
        bad_file(file, name + " has unsupported dtype " + entry.at("dtype").dump());
      }
      Shape shape;
      size_t count = 1;
      for (auto& d : entry.at("shape")) {
        int64_t n = d.get<int64_t>();
        if (n < 0 || n > INT32_MAX) bad_file(file, name + " has a bad dimension " + d.dump());
        // More elements than data bytes can never fit; checking here also
        // keeps the product from overflowing.
        if (n > 0 && count > data_size / static_cast<size_t>(n)) bad_file(file, name + " is larger than the file");
        shape.push_back(static_cast<int>(n));
        count *= static_cast<size_t>(n);
      }
      auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != count * size_of(dtype)) {
        bad_file(file, name + " has data_offsets " + entry.at("data_offsets").dump() + " that do not fit its " +
                           std::to_string(count) + " " + dtype_name(dtype) + " elements in " +
                           std::to_string(data_size) + " data bytes");
      }
      result.first.insert_or_assign(name, io::make_array(data + offsets[0], count, shape, dtype));
    } catch (const nlohmann::json::exception& e) {
      bad_file(file, "entry " + name + " is malformed: " + e.what());
    }
  }
  return result;
}

}  // namespace kiln
