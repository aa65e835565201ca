// Cases of the fast ops (include/kiln/fast.h): the fused node on float32 /
// float16 / bfloat16 against the op in float64 (which is the fallback), the
// transforms through the fallback or, for rope, the fused inverse rotation.
#include "harness.h"

namespace kiln::harness {

void register_fast() {
  auto rms = [](const Arrays& x) { return Arrays{fast::rms_norm(x[0], x[1], 1e-5f)}; };
  add({.op = "fast::rms_norm", .primitive = "RMSNorm", .name = "(4,7) weight", .fn = rms,
       .inputs = {in({4, 7}), in({7}, 0.5, 1.5)}, .diff = {0, 1}, .grad2 = true});
  add({.op = "fast::rms_norm", .primitive = "RMSNorm", .name = "(2,3,65) no weight",
       .fn = [](const Arrays& x) { return Arrays{fast::rms_norm(x[0], std::nullopt, 1e-6f)}; },
       .inputs = {in({2, 3, 65})}, .diff = {0}});
  auto add_rms = [](const Arrays& x) {
    auto [h, y] = fast::add_rms_norm(x[0], x[1], x[2], 1e-5f);
    return Arrays{h, y};
  };
  add({.op = "fast::add_rms_norm", .primitive = "AddRMSNorm", .name = "(3,2,9) weight", .fn = add_rms,
       .inputs = {in({3, 2, 9}), in({3, 2, 9}), in({9}, 0.5, 1.5)}, .diff = {0, 1, 2}, .grad2 = true});
  add({.op = "fast::add_rms_norm", .primitive = "AddRMSNorm", .name = "(4,65) no weight",
       .fn = [](const Arrays& x) {
         auto [h, y] = fast::add_rms_norm(x[0], x[1], std::nullopt, 1e-6f);
         return Arrays{h, y};
       },
       .inputs = {in({4, 65}), in({4, 65})}, .diff = {0, 1}});
  add({.op = "fast::layer_norm", .primitive = "LayerNorm", .name = "(4,7) weight bias",
       .fn = [](const Arrays& x) { return Arrays{fast::layer_norm(x[0], x[1], x[2], 1e-5f)}; },
       .inputs = {in({4, 7}), in({7}, 0.5, 1.5), in({7})}, .diff = {0, 1, 2}, .grad2 = true});
  add({.op = "fast::layer_norm", .primitive = "LayerNorm", .name = "(3,33) no affine",
       .fn = [](const Arrays& x) { return Arrays{fast::layer_norm(x[0], std::nullopt, std::nullopt, 1e-5f)}; },
       .inputs = {in({3, 33})}, .diff = {0}});
  add({.op = "fast::rope", .primitive = "RoPE", .name = "(2,3,5,8) half-split offset 3",
       .fn = [](const Arrays& x) { return Arrays{fast::rope(x[0], 8, false, 10000.0f, 1.0f, 3)}; },
       .inputs = {in({2, 3, 5, 8})}, .diff = {0}, .grad2 = true});
  add({.op = "fast::rope", .primitive = "RoPE", .name = "(2,3,5,9) traditional dims 6 scale 0.5",
       .fn = [](const Arrays& x) { return Arrays{fast::rope(x[0], 6, true, 500.0f, 0.5f, 1)}; },
       .inputs = {in({2, 3, 5, 9})}, .diff = {0}});
  add({.op = "fast::rope", .primitive = "RoPE", .name = "(2,4,6) freqs, offsets per batch",
       .fn = [](const Arrays& x) { return Arrays{fast::rope(x[0], 6, false, std::nullopt, 1.0f, x[2], x[1])}; },
       // Angles pos / freq of a few radians: finite differences in freqs stay accurate.
       .inputs = {in({2, 4, 6}), in({3}, 4.0, 12.0), fixed({2}, int32, 0, 12)}, .diff = {0, 1}});

  // A user-written kernel, x * x + y: fast::cpu_kernel on the CPU and
  // fast::cuda_kernel under the GPU check (custom kernels have no
  // transformations: nothing is differentiable and vmap is off).
  auto square_add = [](const Arrays& x) {
    const Dtype t = x[0].dtype();
    const int n = static_cast<int>(x[0].size());
    const std::vector<std::pair<std::string, fast::TemplateArg>> targs = {
        {"T", t}, {"Acc", t == float64 ? float64 : float32}, {"Size", n}};
    if (default_device() == Device::gpu) {
      static const auto k = fast::cuda_kernel("harness_square_add", {"x", "y"}, {"out"}, R"(
        const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
        if (i < Size) out[i] = static_cast<T>(static_cast<Acc>(x[i]) * static_cast<Acc>(x[i]) + static_cast<Acc>(y[i]));
      )");
      return Arrays{k(x, {x[0].shape()}, {t}, {n, 1, 1}, {256, 1, 1}, targs, std::nullopt, false, {})[0]};
    }
    static const auto k = fast::cpu_kernel("harness_square_add", {"x", "y"}, {"out"}, R"(
        const int64_t i = thread_position_in_grid;
        if (i < Size) out[i] = static_cast<T>(static_cast<Acc>(x[i]) * static_cast<Acc>(x[i]) + static_cast<Acc>(y[i]));
    )");
    return Arrays{k(x, {x[0].shape()}, {t}, {n, 1, 1}, {64, 1, 1}, targs, std::nullopt, false, {})[0]};
  };
  add({.op = "fast::cpu_kernel", .primitive = "CustomKernel", .name = "(5,67) x*x+y", .fn = square_add,
       .inputs = {in({5, 67}), in({5, 67})},
       .ref = [](const Arrays& x) {  // plain ops on the float64 inputs
         return std::vector<std::vector<double>>{values(add(multiply(x[0], x[0]), x[1]))};
       },
       .vmap = false});
}

}  // namespace kiln::harness
