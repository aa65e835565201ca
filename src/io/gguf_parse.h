#pragma once
// The GGUF parser shared by kiln::gguf::File and load_gguf: it validates
// the whole file up front (every count, length, dim and offset against the
// bytes the file has) so that the readers above it only index what exists.
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/mapped_file.h"
#include "kiln/gguf.h"

namespace kiln::gguf::detail {

struct Parsed {
  std::shared_ptr<const io::MappedFile> file;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<std::pair<std::string, Value>> metadata;
  std::unordered_map<std::string, size_t> key_index;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> tensor_index;
};

// Maps and parses `path`; every problem is a kiln::Error "<op> <path>: ...".
Parsed parse(const std::string& path, const std::string& op);

// The plain-typed tensor as an array over the mapping, or its uint8 block
// rows ([..., rows bytes]) for a block format Kiln has; `op` prefixes the
// error for the types Kiln cannot hold.
array tensor_array(const Parsed& p, const TensorInfo& info, const std::string& op);

}  // namespace kiln::gguf::detail
