// nn and optimizers on the GPU (CTest label `cuda`): the loss, the
// gradients of every parameter and one SGD update of a small transformer
// computed with Device::gpu as the default device match the CPU's.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optimizers.h"
#include "test_util.h"

namespace kiln::test {
namespace {

struct TinyLm : nn::Module {
  TinyLm() : emb(std::make_shared<nn::Embedding>(13, 32)), block(std::make_shared<nn::TransformerBlock>(32, 4)) {
    register_module("emb", &emb);
    register_module("block", &block);
  }
  array operator()(const array& tokens) {
    array mask = nn::MultiHeadAttention::create_additive_causal_mask(tokens.shape(1));
    return emb->as_linear((*block)((*emb)(tokens), mask));
  }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::TransformerBlock> block;
};

// Loss, gradients and the parameters after one SGD step, on `device`.
std::vector<std::pair<std::string, array>> train_step(TinyLm& model, const nn::Params& start, const array& x,
                                                      const array& y, Device device) {
  Device previous = default_device();
  set_default_device(device);
  model.update(start);
  auto loss_and_grad = nn::value_and_grad(model, [&model](const std::vector<array>& in) {
    return nn::losses::cross_entropy(model(in[0]), in[1], std::nullopt, -1, 0.0f, "mean");
  });
  auto [loss, grads] = loss_and_grad({x, y});
  // SGD, not Adam: Adam's first step is sign(g) * lr, which turns rounding
  // differences of near-zero gradients into full-size steps.
  optimizers::SGD opt(0.1f, 0.9f, 0.01f);
  opt.update(model, grads);
  std::vector<std::pair<std::string, array>> out{{"loss", loss}};
  for (auto& [name, g] : grads) out.emplace_back("grad " + name, g);
  for (auto& [name, p] : model.parameters()) out.emplace_back("param " + name, p);
  std::vector<array> all;
  for (auto& [name, a] : out) all.push_back(a);
  eval(all);
  set_default_device(previous);
  return out;
}

TEST(GpuNN, TransformerStepMatchesCpu) {
  if (!is_available(Device::gpu)) GTEST_SKIP() << "no GPU available for the cuda suite";
  TinyLm model;
  nn::Params start = model.parameters();
  array x = astype(random_array({3, 10}, float32, 0, 13), int32);
  array y = astype(random_array({3, 10}, float32, 0, 13), int32);
  auto cpu = train_step(model, start, x, y, Device::cpu);
  auto gpu = train_step(model, start, x, y, Device::gpu);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].first, gpu[i].first);
    auto want = to_double(cpu[i].second);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    EXPECT_TRUE(all_close(gpu[i].second, want, 1e-3, 1e-4 * scale)) << cpu[i].first;
  }
}

}  // namespace
}  // namespace kiln::test
