// Cases of fast::scaled_dot_product_attention: the fused primitive on every
// float dtype and layout against the op on float64 inputs (its plain-op
// fallback), and the transformations, which run through that fallback.
#include "harness.h"

namespace kiln::harness {

void register_attention() {
  auto sdpa = [](std::string name, std::string mode, bool mask, bool sinks, std::vector<Input> inputs,
                 std::vector<int> diff) {
    OpFn fn = [mode, mask, sinks](const Arrays& x) {
      std::optional<array> m, s;
      if (mask) m = x[3];
      if (sinks) s = x.back();
      return Arrays{fast::scaled_dot_product_attention(x[0], x[1], x[2], 0.35f, mode, m, s)};
    };
    return add({.op = "scaled_dot_product_attention",
                .primitive = "ScaledDotProductAttention",
                .name = std::move(name),
                .fn = std::move(fn),
                .inputs = std::move(inputs),
                .diff = std::move(diff),
                .rtol_scale = 2.0});
  };
  sdpa("decode, 4 q heads over 2 kv heads", "", false, false, {in({1, 4, 1, 16}), in({1, 2, 9, 16}), in({1, 2, 9, 16})},
       {0, 1, 2});
  sdpa("causal, q shorter than k, MQA", "causal", false, false,
       {in({1, 2, 5, 16}), in({1, 1, 8, 16}), in({1, 1, 8, 12})}, {0, 1, 2});
  sdpa("bool mask broadcast (5,8)", "", true, false,
       {in({2, 2, 5, 8}), in({2, 2, 8, 8}), in({2, 2, 8, 8}), fixed({5, 8}, bool_, 0, 1)}, {0, 1, 2});
  sdpa("additive mask (2,1,8) and sinks", "", true, true,
       {in({1, 2, 3, 16}), in({1, 1, 8, 16}), in({1, 1, 8, 16}), in({2, 1, 8}), in({2})}, {0, 1, 2, 3, 4});
}

}  // namespace kiln::harness
