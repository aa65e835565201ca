#pragma once
// Primitive: one class per op family. A node's primitive computes its
// output from its inputs, on the CPU (eval_cpu, in src/backend/cpu) or on a
// GPU (eval_gpu, in src/backend/cuda or the stub that throws).
#include <memory>
#include <string>
#include <vector>

#include "kiln/array.h"

namespace kiln {

class Primitive {
 public:
  explicit Primitive(Stream stream) : stream_(stream) {}
  virtual ~Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;

  virtual void eval_cpu(const std::vector<array>& inputs, array& out) = 0;
  virtual void eval_gpu(const std::vector<array>& inputs, array& out) = 0;
  virtual const char* name() const = 0;
  // Same computation given the same inputs (used by compile's CSE).
  virtual bool is_equivalent(const Primitive& other) const { return false; }

  Stream stream() const { return stream_; }

 private:
  Stream stream_;
};

}  // namespace kiln
