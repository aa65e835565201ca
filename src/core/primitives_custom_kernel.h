#pragma once
// The primitive of fast::cuda_kernel and fast::cpu_kernel (include/kiln/fast.h).
//
// A node holds the kernel's generated source (signature and body, written
// by core/custom_kernel.cpp) and its launch; each backend adds its own
// preamble (types, elem_to_loc), compiles through its JIT service, caches
// by the full source and launches. One source per dtype combination: the
// signature names the element types.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/primitive.h"

namespace kiln {

// Which of an input's name_shape, name_strides, name_ndim the body uses.
struct KernelShapeInfo {
  bool shape = false, strides = false, ndim = false;
  bool operator==(const KernelShapeInfo&) const = default;
};

// The most dimensions an input whose shape or strides a kernel reads may
// have (the size of the by-value shape and stride arrays).
inline constexpr int kKernelMaxNdim = 10;

// An input's name_shape, name_strides and name_ndim arguments, laid out as
// the generated signature's kiln::Shape, kiln::Strides and int (on both
// backends).
struct KernelShapeArgs {
  int32_t shape[kKernelMaxNdim] = {};
  int64_t strides[kKernelMaxNdim] = {};
  int ndim = 0;
};

// Fills `storage` from an input's shape and the strides its kernel sees,
// and passes append(void*) a pointer to each of the arguments the body uses,
// in the signature's order (shape, strides, ndim). `storage` must stay put
// until the kernel ran. The op layer checked the number of dimensions.
template <typename Append>
void pack_shape_args(const KernelShapeInfo& info, const Shape& shape, const Strides& strides, KernelShapeArgs& storage,
                     Append&& append) {
  storage.ndim = static_cast<int>(shape.size());
  if (info.shape) {
    for (size_t k = 0; k < shape.size(); ++k) storage.shape[k] = shape[k];
    append(static_cast<void*>(storage.shape));
  }
  if (info.strides) {
    for (size_t k = 0; k < strides.size(); ++k) storage.strides[k] = strides[k];
    append(static_cast<void*>(storage.strides));
  }
  if (info.ndim) append(static_cast<void*>(&storage.ndim));
}

class CustomKernel : public Primitive {
 public:
  CustomKernel(Stream s, std::string kernel_name, std::string source, std::array<int, 3> grid,
               std::array<int, 3> threadgroup, std::vector<KernelShapeInfo> shape_infos, bool ensure_row_contiguous,
               std::optional<float> init_value, int shared_memory, std::vector<Shape> output_shapes)
      : Primitive(s), kernel_name_(std::move(kernel_name)), source_(std::move(source)), grid_(grid),
        threadgroup_(threadgroup), shape_infos_(std::move(shape_infos)), ensure_row_contiguous_(ensure_row_contiguous),
        init_value_(init_value), shared_memory_(shared_memory), output_shapes_(std::move(output_shapes)) {}

  using Primitive::eval_cpu;
  using Primitive::eval_gpu;
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;
  const char* name() const override { return "CustomKernel"; }

  // No transformation rules (MLX's custom kernels have none): each throws.
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override;
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override;
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,
                                                       const std::vector<int>& axes) override;
  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override;
  bool is_equivalent(const Primitive& o) const override;
  std::string describe() const override;

  const std::string& kernel_name() const { return kernel_name_; }
  const std::string& source() const { return source_; }

 private:
  std::string kernel_name_;  // the extern "C" symbol of the kernel
  std::string source_;
  std::array<int, 3> grid_, threadgroup_;
  std::vector<KernelShapeInfo> shape_infos_;
  bool ensure_row_contiguous_;
  std::optional<float> init_value_;
  int shared_memory_;
  std::vector<Shape> output_shapes_;
};

}  // namespace kiln
