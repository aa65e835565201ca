// GGUF writer: the bytes of gguf-py's GGUFWriter (header, metadata and
// tensor infos in the order added, zero padding to the alignment after the
// infos and after every tensor, offsets counted in padded sizes).
#include <cstring>
#include <fstream>

#include "core/block_format.h"
#include "io/array_bytes.h"
#include "kiln/gguf.h"
#include "kiln/ops.h"

namespace kiln::gguf {

namespace {

constexpr int kMaxDims = 4;

class Bytes {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  const std::vector<uint8_t>& bytes() const { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Writes the value without its type code (arrays: element type, count,
// elements), as gguf-py's _pack_val with add_vtype=False.
void put_value(Bytes& b, const Value& v, const std::string& key) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          b.put<uint8_t>(x ? 1 : 0);
        } else if constexpr (std::is_arithmetic_v<T>) {
          b.put<T>(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          b.put_string(x);
        } else {
          b.put<uint32_t>(static_cast<uint32_t>(v.element_type()));
          b.put<uint64_t>(x.size());
          for (const auto& e : x) {
            using E = std::decay_t<decltype(e)>;
            if constexpr (std::is_same_v<E, Value>) {
              if (e.type() != ValueType::array) {
                throw Error("[gguf::Writer] " + key + ": an array of arrays holds a " + value_type_name(e.type()));
              }
              put_value(b, e, key);
            } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
              b.put<uint8_t>(e ? 1 : 0);
            } else if constexpr (std::is_same_v<E, std::string>) {
              b.put_string(e);
            } else {
              b.put<E>(e);
            }
          }
        }
      },
      v.data);
}

uint64_t padded(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

void Writer::add(const std::string& key, Value value) {
  for (const auto& [k, v] : metadata_) {
    if (k == key) throw Error("[gguf::Writer] duplicate metadata key " + key);
  }
  if (key == "general.alignment") {
    if (!value.is<uint32_t>()) {
      throw Error(std::string("[gguf::Writer] general.alignment must be a uint32, got a ") +
                  value_type_name(value.type()));
    }
    uint32_t a = value.get<uint32_t>();
    if (a == 0 || (a & (a - 1)) != 0) {
      throw Error("[gguf::Writer] general.alignment " + std::to_string(a) + " is not a power of two");
    }
  }
  // Serializing now checks nested arrays while the caller is at hand.
  Bytes check;
  put_value(check, value, key);
  metadata_.emplace_back(key, std::move(value));
}

void Writer::add_tensor(const std::string& name, const array& a, const std::string& mode) {
  for (const auto& t : tensors_) {
    if (t.name == name) throw Error("[gguf::Writer] duplicate tensor name " + name);
  }
  if (a.ndim() > kMaxDims) {
    throw Error("[gguf::Writer] tensor " + name + " has " + std::to_string(a.ndim()) + " dims (GGUF allows " +
                std::to_string(kMaxDims) + ")");
  }
  TensorType type = tensor_type_of(a.dtype(), mode);
  Shape shape = a.shape();
  if (auto m = block_mode(type)) {
    const BlockLayout* layout = nullptr;
    for (const auto& l : kBlockLayouts) {
      if (*m == l.name) layout = &l;
    }
    if (shape.empty() || shape.back() % layout->bytes != 0) {
      throw Error("[gguf::Writer] tensor " + name + " of mode " + *m + " needs rows of whole " +
                  std::to_string(layout->bytes) + "-byte blocks, got shape " + [&] {
                    std::string s = "(";
                    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
                    return s + ")";
                  }());
    }
    shape.back() = shape.back() / layout->bytes * layout->block;
  }
  tensors_.push_back({name, a, type, shape});
}

void Writer::write(const std::string& path) const {
  uint64_t alignment = 32;
  for (const auto& [k, v] : metadata_) {
    if (k == "general.alignment") alignment = v.get<uint32_t>();
  }
  std::vector<array> data;
  for (const auto& t : tensors_) data.push_back(contiguous(t.data));
  eval(data);

  Bytes head;
  head.put<uint32_t>(0x46554747);
  head.put<uint32_t>(3);
  head.put<uint64_t>(tensors_.size());
  head.put<uint64_t>(metadata_.size());
  for (const auto& [k, v] : metadata_) {
    head.put_string(k);
    head.put<uint32_t>(static_cast<uint32_t>(v.type()));
    put_value(head, v, k);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    head.put_string(t.name);
    head.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) head.put<uint64_t>(static_cast<uint64_t>(*d));
    head.put<uint32_t>(static_cast<uint32_t>(t.type));
    head.put<uint64_t>(offset);
    offset += padded(data[i].nbytes(), alignment);
  }

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("[gguf::Writer] cannot open " + path + " for writing");
  const std::vector<char> zeros(alignment, 0);
  auto pad = [&](uint64_t n) {
    out.write(zeros.data(), static_cast<std::streamsize>(padded(n, alignment) - n));
  };
  out.write(reinterpret_cast<const char*>(head.bytes().data()), static_cast<std::streamsize>(head.bytes().size()));
  pad(head.bytes().size());
  for (const auto& a : data) {
    out.write(static_cast<const char*>(io::raw_bytes(a)), static_cast<std::streamsize>(a.nbytes()));
    pad(a.nbytes());
  }
  if (!out) throw Error("[gguf::Writer] writing " + path + " failed");
}

}  // namespace kiln::gguf
