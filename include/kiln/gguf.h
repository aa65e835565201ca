#pragma once
// GGUF v3 (llama.cpp's model file format): a zero-copy reader over a
// read-only memory map of the file, and a writer whose files are byte for
// byte those of gguf-py's GGUFWriter given the same keys and tensors in the
// same order.
//
// The file: "GGUF", version (u32, 3), tensor count (u64), metadata count
// (u64); the metadata, each a key (u64 length + UTF-8 bytes), a value type
// (u32) and the value (strings as u64 length + bytes, arrays as element type
// u32 + count u64 + elements; arrays nest); the tensor infos, each a name,
// the number of dims (u32), the dims (u64 each, innermost first: ggml's
// order, the reverse of Kiln's), the ggml type (u32) and the offset (u64)
// from the start of the data section; zero padding to the alignment (the
// u32 value "general.alignment", 32 when absent); the tensor data, each
// tensor on an aligned offset and padded with zeros to the alignment.
//
// Tensors come out as arrays that wrap the mapping (array::external_read_only:
// no copy, never written or donated); each keeps the mapping alive, so the
// arrays outlive the File. Types: F32, F16, BF16, F64, I8, I32, I64 load as
// the Kiln dtype of the same name; the block formats Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K load as uint8 arrays of llama.cpp's
// bytes, shape [..., K / block * block_bytes], to be used with their mode
// string ("q4_0", ...) exactly as quantize(w, ..., mode) returns them and
// quantized_matmul / dequantize take them (see quantize in kiln/ops.h).
// I16 loads as int16. The other ggml types (Q8_1, Q8_K, the IQ formats, ...)
// are listed by tensors() but tensor() throws for them.
//
// Every problem with a file (truncated, counts, lengths or offsets that the
// file cannot hold, unknown types, duplicate names, misaligned tensors) is a
// kiln::Error that names the file and the problem; nothing is allocated that
// the file's size does not justify.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/array.h"

namespace kiln::gguf {

// GGUF's metadata value types (their numbers are the file's codes).
enum class ValueType : uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  bool_ = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};
const char* value_type_name(ValueType t);

// A metadata value: a scalar, a string, or an array. An array holds
// elements of one type: a std::vector of that C++ type, or of Value when
// the elements are themselves arrays (each a Value holding a vector).
struct Value {
  using Data = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                            std::vector<Value>, uint64_t, int64_t, double, std::vector<uint8_t>,
                            std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
                            std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>, std::vector<bool>,
                            std::vector<std::string>, std::vector<uint64_t>, std::vector<int64_t>,
                            std::vector<double>>;
  Data data;

  Value() = default;
  // Any alternative of Data, taken as is (Value(uint32_t{32}) is a u32;
  // a string literal is a string).
  template <typename T, typename = std::enable_if_t<std::is_constructible_v<Data, T&&> &&
                                                    !std::is_same_v<std::decay_t<T>, Value> &&
                                                    !std::is_same_v<std::decay_t<T>, const char*>>>
  Value(T&& v) : data(std::forward<T>(v)) {}  // NOLINT(implicit)
  Value(const char* s) : data(std::string(s)) {}  // NOLINT(implicit)

  ValueType type() const;
  // The element type of an array (array for nested arrays); throws for a
  // value that is not an array.
  ValueType element_type() const;
  // The number of elements of an array; throws for a value that is not one.
  size_t size() const;

  template <typename T>
  bool is() const {
    return std::holds_alternative<T>(data);
  }
  // The value as T, which must be its exact type (a u32 is not an i32);
  // otherwise a kiln::Error naming both types.
  template <typename T>
  const T& get() const {
    if (const T* p = std::get_if<T>(&data)) return *p;
    throw_wrong_type(index_of<T>());
  }
  // Any integer scalar (u8..i64, bool) as int64_t, when it fits; throws
  // otherwise. For counts and ids, whose width varies between writers.
  int64_t to_int() const;
  // Any float or integer scalar as double.
  double to_double() const;

  bool operator==(const Value& other) const { return data == other.data; }

 private:
  template <typename T, size_t I = 0>
  static constexpr size_t index_of() {
    if constexpr (std::is_same_v<std::variant_alternative_t<I, Data>, T>) {
      return I;
    } else {
      return index_of<T, I + 1>();
    }
  }
  [[noreturn]] void throw_wrong_type(size_t wanted_index) const;
};

// ggml's tensor types (the file's codes).
enum class TensorType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  bf16 = 30,
};
// "F32", "Q4_K", ... as ggml names them; "type N" for codes Kiln does not know.
std::string tensor_type_name(TensorType t);
// The Kiln dtype of a plain type (F32, F16, BF16, F64, I8, I32, I64).
std::optional<Dtype> dtype_of(TensorType t);
// The mode string of a block format Kiln has ("q4_0", ..., "q6_k").
std::optional<std::string> block_mode(TensorType t);
// The type a Kiln array is written as: its dtype's type, or the block
// format of `mode` for uint8 block rows; a kiln::Error for what GGUF
// cannot hold (bool, uint8 / uint32 without a mode).
TensorType tensor_type_of(Dtype dtype, const std::string& mode = "");

struct TensorInfo {
  std::string name;
  TensorType type;
  Shape shape;      // in Kiln's order: GGUF's dims reversed
  uint64_t offset;  // from the start of the data section
  uint64_t nbytes;  // bytes of data in the file
};

class File {
 public:
  // Maps and parses the file; throws kiln::Error naming it on any problem.
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&&) noexcept;
  File& operator=(File&&) noexcept;

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t data_offset() const;  // where the data section starts in the file

  // The metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const;
  const Value* find(const std::string& key) const;  // nullptr when absent
  // The value of key; a kiln::Error naming the file and key when absent.
  const Value& at(const std::string& key) const;
  // The value of key as T (its exact type; see Value::get).
  template <typename T>
  const T& get(const std::string& key) const {
    return at(key).get<T>();
  }

  // The tensor infos in file order.
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
  // The tensor as an array over the mapping (no copy): the dtype of a plain
  // type, uint8 block rows for a block format (mode: block_mode(info.type)).
  // A kiln::Error for the types Kiln cannot hold (Q8_K, IQ*, ...).
  array tensor(const std::string& name) const;
  // By info.name: the file's own validated info is used.
  array tensor(const TensorInfo& info) const;

  // The mapped bytes of the whole file (for checks that arrays are views).
  const void* mapping() const;
  size_t mapping_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Builds a file in memory order: metadata and tensors are written in the
// order they were added, as gguf-py's GGUFWriter writes them (its
// constructor's "general.architecture" is an ordinary first key here).
// The alignment is the u32 value of "general.alignment" when added, else 32.
class Writer {
 public:
  // Appends a metadata key; a duplicate key, or an array of arrays with an
  // element that is not an array, is a kiln::Error. Empty arrays are
  // written (gguf-py refuses them).
  void add(const std::string& key, Value value);
  // Appends a tensor: an array of a plain dtype (float32, float16,
  // bfloat16, float64, int8, int32, int64), or uint8 block rows with their
  // mode ("q4_0", ...; the last axis in bytes). Evaluated when written.
  void add_tensor(const std::string& name, const array& a, const std::string& mode = "");
  // Writes the file (truncating it); a kiln::Error naming it on failure.
  void write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, Value>> metadata_;
  struct PendingTensor {
    std::string name;
    array data;
    TensorType type;
    Shape shape;  // Kiln order, in weights (not bytes) for block formats
  };
  std::vector<PendingTensor> tensors_;
};

}  // namespace kiln::gguf
