// Read-only whole-file memory maps for the model-file readers.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/array_bytes.h"

namespace kiln::io {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const std::string& op) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(op + " cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(op + " " + path + " is not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(op + " cannot map " + path + ": " + std::strerror(err));
    }
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

array mapped_array(const std::shared_ptr<const MappedFile>& file, size_t offset, const Shape& shape, Dtype dtype) {
  // An empty array may sit at the very end (or in an empty file): point it
  // at the mapping's start, which is never dereferenced.
  const uint8_t* base = file->data();
  static const uint64_t kEmpty = 0;
  const void* p = base ? static_cast<const void*>(base + offset) : &kEmpty;
  // Kernels load whole elements: data not on an element boundary (which
  // only files that do not align their tensors have) is copied instead.
  if (reinterpret_cast<uintptr_t>(p) % size_of(dtype) != 0) {
    size_t n = 1;
    for (int d : shape) n *= static_cast<size_t>(d);
    return make_array(static_cast<const char*>(p), n, shape, dtype);
  }
  return array::external_read_only(p, shape, dtype, [keep = file](void*) {});
}

}  // namespace kiln::io
