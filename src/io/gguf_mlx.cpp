// MLX's load_gguf / save_gguf (semantics and differences in
// include/kiln/io.h), built on the GGUF parser and writer of kiln::gguf.
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "io/array_bytes.h"
#include "io/gguf_parse.h"
#include "kiln/io.h"
#include "kiln/ops.h"

namespace kiln {

namespace {

using gguf::TensorType;
using gguf::Value;

// A uint64 only fits Kiln as int64.
int64_t checked_int64(uint64_t v, const std::string& where) {
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw Error("[load_gguf] " + where + " holds the uint64 " + std::to_string(v) + ", which int64 cannot");
  }
  return static_cast<int64_t>(v);
}

template <typename To, typename From>
array vector_array(const std::vector<From>& v, Dtype dtype) {
  std::vector<To> w(v.begin(), v.end());
  return array(w, Shape{static_cast<int>(w.size())}, dtype);
}

GGUFMetaData convert_value(const Value& value, const std::string& where) {
  return std::visit(
      [&](const auto& x) -> GGUFMetaData {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::string>>) {
          return x;
        } else if constexpr (std::is_same_v<T, uint16_t>) {
          return array(static_cast<uint32_t>(x), uint32);
        } else if constexpr (std::is_same_v<T, int16_t>) {
          return array(static_cast<int32_t>(x), int32);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          return array(checked_int64(x, where), int64);
        } else if constexpr (std::is_same_v<T, double>) {
          return array(static_cast<float>(x), float32);
        } else if constexpr (std::is_arithmetic_v<T>) {
          return array(x);
        } else if constexpr (std::is_same_v<T, std::vector<Value>>) {
          throw Error("[load_gguf] " + where +
                      " is an array of arrays, which load_gguf does not read (as MLX); use kiln::gguf::File");
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          return array(x, Shape{static_cast<int>(x.size())}, bool_);
        } else if constexpr (std::is_same_v<T, std::vector<uint16_t>>) {
          return vector_array<uint32_t>(x, uint32);
        } else if constexpr (std::is_same_v<T, std::vector<int16_t>>) {
          return vector_array<int32_t>(x, int32);
        } else if constexpr (std::is_same_v<T, std::vector<uint64_t>>) {
          std::vector<int64_t> w;
          for (uint64_t e : x) w.push_back(checked_int64(e, where));
          return vector_array<int64_t>(w, int64);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          return vector_array<float>(x, float32);
        } else {
          using E = typename T::value_type;
          return vector_array<E>(x, dtype_of<E>);
        }
      },
      value.data);
}

// MLX's affine triple of a Q4_0 / Q4_1 / Q8_0 tensor: the quants repacked
// LSB-first into uint32 words, one float16 scale and bias per block of 32.
void load_affine(const gguf::detail::Parsed& p, const gguf::TensorInfo& info, GGUFLoad& out) {
  const uint8_t* src = p.file->data() + p.data_offset + info.offset;
  const int bits = info.type == TensorType::q8_0 ? 8 : 4;
  const int block_bytes = info.type == TensorType::q4_0 ? 18 : info.type == TensorType::q4_1 ? 20 : 34;
  size_t blocks = info.nbytes / static_cast<size_t>(block_bytes);
  std::vector<uint8_t> packed(blocks * 32 * bits / 8);
  std::vector<float16_t> scales(blocks), biases(blocks);
  for (size_t b = 0; b < blocks; ++b, src += block_bytes) {
    float16_t d, m;
    std::memcpy(&d.bits, src, 2);
    scales[b] = d;
    uint8_t* q = packed.data() + b * 32 * bits / 8;
    if (info.type == TensorType::q8_0) {
      biases[b] = float16_t(-128.f * static_cast<float>(d));
      for (int j = 0; j < 32; ++j) q[j] = src[2 + j] ^ 0x80;  // int8 + 128
      continue;
    }
    const uint8_t* qs = src + (info.type == TensorType::q4_1 ? 4 : 2);
    if (info.type == TensorType::q4_1) {
      std::memcpy(&m.bits, src + 2, 2);
      biases[b] = m;
    } else {
      biases[b] = float16_t(-8.f * static_cast<float>(d));
    }
    // ggml: byte j holds weight j (low nibble) and weight j + 16 (high).
    for (int j = 0; j < 16; j += 2) {
      q[j / 2] = static_cast<uint8_t>((qs[j] & 0x0f) | ((qs[j + 1] & 0x0f) << 4));
      q[8 + j / 2] = static_cast<uint8_t>((qs[j] >> 4) | (qs[j + 1] & 0xf0));
    }
  }
  Shape wshape = info.shape, sshape = info.shape;
  wshape.back() = wshape.back() / 32 * bits;  // rows are whole 32-weight blocks; no int overflow
  sshape.back() /= 32;
  std::vector<uint32_t> words(packed.size() / 4);
  if (!words.empty()) std::memcpy(words.data(), packed.data(), packed.size());
  const std::string& name = info.name;
  const std::string suffix = ".weight";
  bool has_suffix = name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string prefix = has_suffix ? name.substr(0, name.size() - suffix.size()) : name;
  std::pair<std::string, array> entries[] = {{name, array(words, wshape, uint32)},
                                             {prefix + ".scales", array(scales, sshape, float16)},
                                             {prefix + ".biases", array(biases, sshape, float16)}};
  for (auto& [key, a] : entries) {
    if (!out.first.emplace(key, a).second) {
      throw Error("[load_gguf] " + p.file->path() + ": duplicate array name " + key +
                  " (the affine scales / biases of quantized " + name + " clash with a tensor)");
    }
  }
}

}  // namespace

GGUFLoad load_gguf(const std::string& file, StreamOrDevice s) {
  const std::string op = "[load_gguf]";
  gguf::detail::Parsed p = gguf::detail::parse(file, op);
  GGUFLoad out;
  for (const auto& [key, value] : p.metadata) out.second.emplace(key, convert_value(value, file + ": " + key));
  for (const auto& info : p.tensors) {
    if (info.type == TensorType::q4_0 || info.type == TensorType::q4_1 || info.type == TensorType::q8_0) {
      load_affine(p, info, out);
      continue;
    }
    array a = gguf::detail::tensor_array(p, info, op);
    if (auto mode = gguf::block_mode(info.type)) {
      a = dequantize(a, array({}), std::nullopt, std::nullopt, std::nullopt, *mode, std::nullopt, float16, s);
    }
    if (!out.first.emplace(info.name, a).second) {
      throw Error(op + " " + file + ": duplicate array name " + info.name);
    }
  }
  return out;
}

namespace {

template <typename T>
Value scalar_or_vector(const array& a) {
  const T* p = a.data<T>();
  if (a.ndim() == 0) return Value(*p);
  return Value(std::vector<T>(p, p + a.size()));
}

Value metadata_value(const std::string& key, const array& value) {
  if (value.ndim() > 1) {
    throw Error("[save_gguf] metadata " + key + " has " + std::to_string(value.ndim()) +
                " dims; only 0-d and 1-d arrays can be saved");
  }
  if (value.size() == 0) throw Error("[save_gguf] metadata " + key + " is an empty array");
  array a = contiguous(value);
  a.eval();
  switch (a.dtype()) {
    case bool_: {
      const bool* p = a.data<bool>();
      if (a.ndim() == 0) return Value(*p);
      return Value(std::vector<bool>(p, p + a.size()));
    }
    case uint8: return scalar_or_vector<uint8_t>(a);
    case uint32: return scalar_or_vector<uint32_t>(a);
    case int8: return scalar_or_vector<int8_t>(a);
    case int32: return scalar_or_vector<int32_t>(a);
    case int64: return scalar_or_vector<int64_t>(a);
    case float32: return scalar_or_vector<float>(a);
    case float64: return scalar_or_vector<double>(a);
    default:
      throw Error("[save_gguf] metadata " + key + " has dtype " + dtype_name(a.dtype()) +
                  ", which GGUF metadata cannot hold");
  }
}

}  // namespace

void save_gguf(std::string file, std::unordered_map<std::string, array> array_map,
               std::unordered_map<std::string, GGUFMetaData> meta_data) {
  if (file.size() < 5 || file.compare(file.size() - 5, 5, ".gguf") != 0) file += ".gguf";
  gguf::Writer w;
  std::map<std::string, GGUFMetaData> meta(meta_data.begin(), meta_data.end());
  for (const auto& [key, value] : meta) {
    if (auto* str = std::get_if<std::string>(&value)) {
      w.add(key, *str);
    } else if (auto* strs = std::get_if<std::vector<std::string>>(&value)) {
      w.add(key, *strs);
    } else if (auto* a = std::get_if<array>(&value)) {
      w.add(key, metadata_value(key, *a));
    } else {
      throw Error("[save_gguf] metadata " + key + " holds no value");
    }
  }
  std::map<std::string, array> arrays(array_map.begin(), array_map.end());
  for (const auto& [name, a] : arrays) {
    static const Dtype kTensorDtypes[] = {float32, float16, bfloat16, float64, int8, int32, int64};
    if (std::find(std::begin(kTensorDtypes), std::end(kTensorDtypes), a.dtype()) == std::end(kTensorDtypes)) {
      throw Error("[save_gguf] array " + name + " has dtype " + dtype_name(a.dtype()) + ", which GGUF cannot hold");
    }
    w.add_tensor(name, a);
  }
  w.write(file);
}

}  // namespace kiln
