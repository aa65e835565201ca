#pragma once
// A read-only memory map of a whole file, shared by the arrays that wrap
// it: the model-file readers (GGUF, safetensors) hand out arrays over the
// mapping with no copy, each holding a reference so the mapping lives as
// long as the last of them.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/array.h"

namespace kiln::io {

class MappedFile {
 public:
  // Maps `path` read-only; `op` ("[load_gguf]") prefixes the kiln::Error
  // thrown when the file cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path, const std::string& op);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// A read-only array of `shape` and `dtype` over `nbytes` bytes at `offset`
// in the mapping (the caller has checked that they lie inside it); the
// array keeps the mapping alive.
array mapped_array(const std::shared_ptr<const MappedFile>& file, size_t offset, const Shape& shape, Dtype dtype);

}  // namespace kiln::io
