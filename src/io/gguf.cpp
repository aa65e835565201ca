// GGUF v3 reader (format in include/kiln/gguf.h). The parser trusts no
// number in the file: every read checks the bytes left, every count is
// bounded by the bytes its elements need at least, dims are checked for
// overflow, and tensor data must lie inside the file, so a hostile file
// gets a kiln::Error before anything is allocated for it.
#include <cstring>
#include <limits>

#include "core/block_format.h"
#include "io/gguf_parse.h"

namespace kiln::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read little-endian
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS: llama.cpp reads no more
constexpr int kMaxNesting = 16;          // arrays of arrays of ...: deeper is hostile

struct TypeTraits {
  const char* name;
  int block;  // elements per block (1 for plain types)
  int bytes;  // bytes per block; 0: not a ggml type
};

// ggml's types by code (GGML_QUANT_SIZES); gaps are codes ggml retired.
constexpr TypeTraits kTypes[] = {
    {"F32", 1, 4},        {"F16", 1, 2},       {"Q4_0", 32, 18},    {"Q4_1", 32, 20},   {"", 0, 0},
    {"", 0, 0},           {"Q5_0", 32, 22},    {"Q5_1", 32, 24},    {"Q8_0", 32, 34},   {"Q8_1", 32, 40},
    {"Q2_K", 256, 84},    {"Q3_K", 256, 110},  {"Q4_K", 256, 144},  {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
    {"Q8_K", 256, 292},   {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74}, {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110}, {"IQ2_S", 256, 82},  {"IQ4_XS", 256, 136}, {"I8", 1, 1},
    {"I16", 1, 2},        {"I32", 1, 4},       {"I64", 1, 8},       {"F64", 1, 8},      {"IQ1_M", 256, 56},
    {"BF16", 1, 2},       {"", 0, 0},          {"", 0, 0},          {"", 0, 0},         {"TQ1_0", 256, 54},
    {"TQ2_0", 256, 66},   {"", 0, 0},          {"", 0, 0},          {"", 0, 0},         {"MXFP4", 32, 17},
    {"NVFP4", 64, 36},    {"Q1_0", 128, 18},
};
constexpr uint32_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);

const TypeTraits* traits(TensorType t) {
  auto code = static_cast<uint32_t>(t);
  return code < kNumTypes && kTypes[code].bytes ? &kTypes[code] : nullptr;
}

// Bounds-checked little-endian reads from the mapping; failures name the
// file and the byte where the problem is.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& where) : data_(data), size_(size), where_(where) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(where_ + ": " + why + " (at byte " + std::to_string(pos_) + ")");
  }
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  template <typename T>
  T read(const char* what) {
    if (left() < sizeof(T)) fail(std::string("truncated: ") + what + " runs past the end of the file");
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    uint64_t n = read<uint64_t>(what);
    if (n > left()) {
      fail(std::string(what) + " of length " + std::to_string(n) + " runs past the end of the file");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& where_;
};

// The fewest bytes one element of type t occupies in the file.
size_t min_element_bytes(ValueType t) {
  switch (t) {
    case ValueType::uint8:
    case ValueType::int8:
    case ValueType::bool_: return 1;
    case ValueType::uint16:
    case ValueType::int16: return 2;
    case ValueType::uint32:
    case ValueType::int32:
    case ValueType::float32: return 4;
    case ValueType::string:
    case ValueType::uint64:
    case ValueType::int64:
    case ValueType::float64: return 8;
    case ValueType::array: return 12;  // element type + count
  }
  return 0;
}

template <typename T>
std::vector<T> read_numbers(Cursor& c, uint64_t n) {
  std::vector<T> v(n);
  for (auto& x : v) x = c.read<T>("an array element");
  return v;
}

Value read_value(Cursor& c, ValueType type, int depth);

Value read_array(Cursor& c, int depth) {
  auto et = static_cast<ValueType>(c.read<uint32_t>("an array's element type"));
  uint64_t n = c.read<uint64_t>("an array's length");
  size_t min_bytes = min_element_bytes(et);
  if (min_bytes == 0) c.fail("unknown array element type " + std::to_string(static_cast<uint32_t>(et)));
  if (n > c.left() / min_bytes) {
    c.fail("an array of " + std::to_string(n) + " " + value_type_name(et) + " runs past the end of the file");
  }
  switch (et) {
    case ValueType::uint8: return read_numbers<uint8_t>(c, n);
    case ValueType::int8: return read_numbers<int8_t>(c, n);
    case ValueType::uint16: return read_numbers<uint16_t>(c, n);
    case ValueType::int16: return read_numbers<int16_t>(c, n);
    case ValueType::uint32: return read_numbers<uint32_t>(c, n);
    case ValueType::int32: return read_numbers<int32_t>(c, n);
    case ValueType::float32: return read_numbers<float>(c, n);
    case ValueType::uint64: return read_numbers<uint64_t>(c, n);
    case ValueType::int64: return read_numbers<int64_t>(c, n);
    case ValueType::float64: return read_numbers<double>(c, n);
    case ValueType::bool_: {
      std::vector<bool> v(n);
      for (uint64_t i = 0; i < n; ++i) v[i] = c.read<uint8_t>("an array element") != 0;
      return v;
    }
    case ValueType::string: {
      std::vector<std::string> v(n);
      for (auto& s : v) s = c.read_string("a string in an array");
      return v;
    }
    case ValueType::array: {
      if (depth >= kMaxNesting) c.fail("arrays nested deeper than " + std::to_string(kMaxNesting));
      std::vector<Value> v(n);
      for (auto& x : v) x = read_array(c, depth + 1);
      return v;
    }
  }
  c.fail("unknown array element type");
}

Value read_value(Cursor& c, ValueType type, int depth) {
  switch (type) {
    case ValueType::uint8: return c.read<uint8_t>("a value");
    case ValueType::int8: return c.read<int8_t>("a value");
    case ValueType::uint16: return c.read<uint16_t>("a value");
    case ValueType::int16: return c.read<int16_t>("a value");
    case ValueType::uint32: return c.read<uint32_t>("a value");
    case ValueType::int32: return c.read<int32_t>("a value");
    case ValueType::float32: return c.read<float>("a value");
    case ValueType::uint64: return c.read<uint64_t>("a value");
    case ValueType::int64: return c.read<int64_t>("a value");
    case ValueType::float64: return c.read<double>("a value");
    case ValueType::bool_: return c.read<uint8_t>("a value") != 0;
    case ValueType::string: return c.read_string("a string value");
    case ValueType::array: return read_array(c, depth);
  }
  c.fail("unknown value type " + std::to_string(static_cast<uint32_t>(type)));
}

TensorInfo read_tensor_info(Cursor& c) {
  TensorInfo info;
  info.name = c.read_string("a tensor name");
  uint32_t ndims = c.read<uint32_t>("a tensor's dim count");
  if (ndims > kMaxDims) {
    c.fail("tensor " + info.name + " has " + std::to_string(ndims) + " dims (GGUF allows " +
           std::to_string(kMaxDims) + ")");
  }
  std::vector<uint64_t> dims(ndims);
  for (auto& d : dims) d = c.read<uint64_t>("a tensor dim");
  info.type = static_cast<TensorType>(c.read<uint32_t>("a tensor type"));
  info.offset = c.read<uint64_t>("a tensor offset");
  const TypeTraits* t = traits(info.type);
  if (!t) c.fail("tensor " + info.name + " has unknown ggml type " + std::to_string(static_cast<uint32_t>(info.type)));
  uint64_t count = 1;
  for (uint64_t d : dims) {
    if (d > static_cast<uint64_t>(std::numeric_limits<int>::max()) || __builtin_mul_overflow(count, d, &count)) {
      c.fail("tensor " + info.name + " has a dim " + std::to_string(d) + " too large");
    }
  }
  if (t->block > 1 && ndims == 0) c.fail("tensor " + info.name + " of block type " + t->name + " has no dims");
  if (ndims > 0 && dims[0] % static_cast<uint64_t>(t->block) != 0) {
    c.fail("tensor " + info.name + " of type " + t->name + " has a row of " + std::to_string(dims[0]) +
           " elements, not a multiple of its block of " + std::to_string(t->block));
  }
  if (__builtin_mul_overflow(count / static_cast<uint64_t>(t->block), static_cast<uint64_t>(t->bytes), &info.nbytes)) {
    c.fail("tensor " + info.name + " is too large");
  }
  for (int i = static_cast<int>(ndims) - 1; i >= 0; --i) info.shape.push_back(static_cast<int>(dims[i]));
  return info;
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::uint8: return "uint8";
    case ValueType::int8: return "int8";
    case ValueType::uint16: return "uint16";
    case ValueType::int16: return "int16";
    case ValueType::uint32: return "uint32";
    case ValueType::int32: return "int32";
    case ValueType::float32: return "float32";
    case ValueType::bool_: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::uint64: return "uint64";
    case ValueType::int64: return "int64";
    case ValueType::float64: return "float64";
  }
  return "unknown";
}

// Data's alternatives: the 13 types in ValueType order (index 9 is the
// array of arrays), then the arrays of the 12 other element types in
// ValueType order.
ValueType Value::type() const {
  return data.index() < 13 && data.index() != 9 ? static_cast<ValueType>(data.index()) : ValueType::array;
}

ValueType Value::element_type() const {
  size_t i = data.index();
  if (i == 9) return ValueType::array;
  if (i < 13) throw Error(std::string("[gguf::Value] a ") + value_type_name(type()) + " value is not an array");
  i -= 13;
  return static_cast<ValueType>(i < 9 ? i : i + 1);
}

size_t Value::size() const {
  element_type();  // throws for a scalar
  return std::visit(
      [](const auto& v) -> size_t {
        if constexpr (std::is_arithmetic_v<std::decay_t<decltype(v)>>) {
          return 0;
        } else {
          return v.size();
        }
      },
      data);
}

namespace {
std::string describe(size_t index) {
  if (index < 13 && index != 9) return value_type_name(static_cast<ValueType>(index));
  if (index == 9) return "array of arrays";
  size_t e = index - 13;
  return std::string("array of ") + value_type_name(static_cast<ValueType>(e < 9 ? e : e + 1));
}
}  // namespace

void Value::throw_wrong_type(size_t wanted_index) const {
  throw Error("[gguf::Value] the value is a " + describe(data.index()) + ", not a " +
              describe(wanted_index));
}

int64_t Value::to_int() const {
  return std::visit(
      [this](const auto& v) -> int64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            throw Error("[gguf::Value] the uint64 value " + std::to_string(v) + " does not fit int64");
          }
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_integral_v<T>) {
          return static_cast<int64_t>(v);
        } else {
          throw Error(std::string("[gguf::Value] a ") + describe(data.index()) + " value is not an integer");
        }
      },
      data);
}

double Value::to_double() const {
  return std::visit(
      [this](const auto& v) -> double {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<T>) {
          return static_cast<double>(v);
        } else {
          throw Error(std::string("[gguf::Value] a ") + describe(data.index()) + " value is not a number");
        }
      },
      data);
}

std::string tensor_type_name(TensorType t) {
  const TypeTraits* tr = traits(t);
  return tr ? tr->name : "type " + std::to_string(static_cast<uint32_t>(t));
}

std::optional<Dtype> dtype_of(TensorType t) {
  switch (t) {
    case TensorType::f32: return float32;
    case TensorType::f16: return float16;
    case TensorType::bf16: return bfloat16;
    case TensorType::f64: return float64;
    case TensorType::i8: return int8;
    case TensorType::i16: return int16;
    case TensorType::i32: return int32;
    case TensorType::i64: return int64;
    default: return std::nullopt;
  }
}

namespace {
// Kiln's BlockFormat of a ggml type, by name.
std::optional<BlockFormat> block_format_of(TensorType t) {
  const TypeTraits* tr = traits(t);
  if (!tr || tr->block == 1) return std::nullopt;
  std::string lower = tr->name;
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (int i = 0; i < kBlockFormatCount; ++i) {
    if (lower == kBlockLayouts[i].name) return static_cast<BlockFormat>(i);
  }
  return std::nullopt;
}
}  // namespace

std::optional<std::string> block_mode(TensorType t) {
  auto f = block_format_of(t);
  if (!f) return std::nullopt;
  return std::string(block_layout(*f).name);
}

TensorType tensor_type_of(Dtype dtype, const std::string& mode) {
  if (!mode.empty()) {
    for (uint32_t code = 0; code < kNumTypes; ++code) {
      auto m = block_mode(static_cast<TensorType>(code));
      if (m && *m == mode) {
        if (dtype != uint8) {
          throw Error("[gguf] block format " + mode + " takes uint8 block rows, got " + dtype_name(dtype));
        }
        return static_cast<TensorType>(code);
      }
    }
    throw Error("[gguf] unknown block format mode " + mode);
  }
  switch (dtype) {
    case float32: return TensorType::f32;
    case float16: return TensorType::f16;
    case bfloat16: return TensorType::bf16;
    case float64: return TensorType::f64;
    case int8: return TensorType::i8;
    case int16: return TensorType::i16;
    case int32: return TensorType::i32;
    case int64: return TensorType::i64;
    default: throw Error(std::string("[gguf] GGUF has no tensor type for ") + dtype_name(dtype));
  }
}

namespace detail {

Parsed parse(const std::string& path, const std::string& op) {
  Parsed p;
  p.file = io::MappedFile::open(path, op);
  const std::string where = op + " " + path;
  Cursor c(p.file->data(), p.file->size(), where);
  if (c.read<uint32_t>("the magic") != kMagic) c.fail("not a GGUF file (no GGUF magic)");
  p.version = c.read<uint32_t>("the version");
  if (p.version == 0x03000000u || p.version == 0x02000000u) c.fail("big-endian GGUF files are not supported");
  if (p.version != 2 && p.version != 3) c.fail("unsupported GGUF version " + std::to_string(p.version));
  uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // A key-value pair takes at least 8 + 4 + 1 bytes, a tensor info 24.
  if (n_kv > c.left() / 13) c.fail(std::to_string(n_kv) + " metadata entries cannot fit in the file");
  if (n_tensors > c.left() / 24) c.fail(std::to_string(n_tensors) + " tensors cannot fit in the file");
  p.metadata.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("a metadata key");
    auto type = static_cast<ValueType>(c.read<uint32_t>("a value type"));
    if (p.key_index.count(key)) c.fail("duplicate metadata key " + key);
    Value v = read_value(c, type, 0);
    p.key_index.emplace(key, p.metadata.size());
    p.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (auto it = p.key_index.find("general.alignment"); it != p.key_index.end()) {
    const Value& a = p.metadata[it->second].second;
    if (!a.is<uint32_t>()) c.fail("general.alignment is a " + std::string(value_type_name(a.type())) + ", not a uint32");
    uint32_t al = a.get<uint32_t>();
    if (al == 0 || (al & (al - 1)) != 0) c.fail("general.alignment " + std::to_string(al) + " is not a power of two");
    p.alignment = al;
  }
  p.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo info = read_tensor_info(c);
    if (p.tensor_index.count(info.name)) c.fail("duplicate tensor name " + info.name);
    if (info.offset % p.alignment != 0) {
      c.fail("tensor " + info.name + " has offset " + std::to_string(info.offset) + ", not a multiple of the alignment " +
             std::to_string(p.alignment));
    }
    p.tensor_index.emplace(info.name, p.tensors.size());
    p.tensors.push_back(std::move(info));
  }
  p.data_offset = (c.pos() + p.alignment - 1) / p.alignment * p.alignment;
  const size_t data_size = p.file->size() > p.data_offset ? p.file->size() - p.data_offset : 0;
  for (const auto& t : p.tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      throw Error(where + ": tensor " + t.name + " (" + std::to_string(t.nbytes) + " bytes at data offset " +
                  std::to_string(t.offset) + ") runs past the end of the file's " + std::to_string(data_size) +
                  " data bytes");
    }
  }
  return p;
}

array tensor_array(const Parsed& p, const TensorInfo& info, const std::string& op) {
  const size_t at = p.data_offset + info.offset;
  if (auto dt = dtype_of(info.type)) return io::mapped_array(p.file, at, info.shape, *dt);
  if (auto f = block_format_of(info.type)) {
    const BlockLayout& l = block_layout(*f);
    Shape rows = info.shape;
    // In 64 bits: a row's packed width can pass int even where the tensor's
    // byte count (checked against the file) is small, e.g. with a zero dim.
    const int64_t width = static_cast<int64_t>(rows.back() / l.block) * l.bytes;
    if (width > std::numeric_limits<int>::max()) {
      throw Error(op + " " + p.file->path() + ": tensor " + info.name + " has rows of " + std::to_string(width) +
                  " packed bytes, more than an array dimension holds");
    }
    rows.back() = static_cast<int>(width);
    return io::mapped_array(p.file, at, rows, uint8);
  }
  throw Error(op + " " + p.file->path() + ": tensor " + info.name + " has type " + tensor_type_name(info.type) +
              ", which Kiln cannot hold");
}

}  // namespace detail

struct File::Impl {
  detail::Parsed parsed;
};

File::File(const std::string& path) : impl_(std::make_unique<Impl>(Impl{detail::parse(path, "[gguf]")})) {}
File::~File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;

const std::string& File::path() const { return impl_->parsed.file->path(); }
uint32_t File::version() const { return impl_->parsed.version; }
uint64_t File::alignment() const { return impl_->parsed.alignment; }
uint64_t File::data_offset() const { return impl_->parsed.data_offset; }
const std::vector<std::pair<std::string, Value>>& File::metadata() const { return impl_->parsed.metadata; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->parsed.tensors; }
const void* File::mapping() const { return impl_->parsed.file->data(); }
size_t File::mapping_size() const { return impl_->parsed.file->size(); }

const Value* File::find(const std::string& key) const {
  auto it = impl_->parsed.key_index.find(key);
  return it == impl_->parsed.key_index.end() ? nullptr : &impl_->parsed.metadata[it->second].second;
}

const Value& File::at(const std::string& key) const {
  if (const Value* v = find(key)) return *v;
  throw Error("[gguf] " + path() + " has no metadata key " + key);
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = impl_->parsed.tensor_index.find(name);
  return it == impl_->parsed.tensor_index.end() ? nullptr : &impl_->parsed.tensors[it->second];
}

array File::tensor(const std::string& name) const {
  const TensorInfo* info = find_tensor(name);
  if (!info) throw Error("[gguf] " + path() + " has no tensor " + name);
  return detail::tensor_array(impl_->parsed, *info, "[gguf]");
}

// By name: the file's own (validated) info is used, whatever `info` holds.
array File::tensor(const TensorInfo& info) const { return tensor(info.name); }

}  // namespace kiln::gguf
