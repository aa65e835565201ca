// Harness cases of the creation ops (Arange, and full / eye built on
// Broadcast and Binary) and of random numbers (RandomBits: the CPU and the
// GPU draw the same bits; no gradients).
#include <atomic>

#include "harness/harness.h"
#include "test_util.h"

namespace kiln::harness {
namespace {

const std::vector<Dtype> kNumeric = {float32, float16, bfloat16, int32};

// A fresh key per call (vmap stacks three of them).
array next_key() {
  static std::atomic<uint64_t> seed{7};
  return random::key(seed++);
}

// A case with no inputs: forward only, once per dtype.
void creation_case(const char* op, const char* prim, const std::string& name, std::function<array(Dtype)> f,
                   std::function<std::vector<double>()> ref, std::vector<Dtype> dtypes = kNumeric) {
  // The dtype under test reaches fn through a zero-size probe input.
  add({.op = op,
       .primitive = prim,
       .name = name,
       .fn = [f](const Arrays& x) { return Arrays{f(x[0].dtype())}; },
       .inputs = {in({0})},
       .dtypes = std::move(dtypes),
       .ref = [ref](const Arrays&) { return std::vector<std::vector<double>>{ref()}; },
       .layouts = false,
       .vmap = false});
}

std::vector<double> arange_ref(double start, double step, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(start + i * step);
  return v;
}

}  // namespace

void register_creation() {
  creation_case("arange", "Arange", "0..7", [](Dtype t) { return arange(0.0, 7.0, t); },
                [] { return arange_ref(0, 1, 7); });
  creation_case("arange", "Arange", "-1.5..2 step 0.5", [](Dtype t) { return arange(-1.5, 2.0, 0.5, t); },
                [] { return arange_ref(-1.5, 0.5, 7); }, {float32, float16, bfloat16});
  creation_case("arange", "Arange", "5..-4 step -3 int", [](Dtype) { return arange(5, -4, -3); },
                [] { return std::vector<double>{5, 2, -1}; }, {int32});
  creation_case("arange", "Arange", "empty", [](Dtype t) { return arange(3.0, 3.0, t); },
                [] { return std::vector<double>{}; });
  creation_case("linspace", "Arange", "0..1 num 5", [](Dtype t) { return linspace(0.0, 1.0, 5, t); },
                [] { return std::vector<double>{0, 0.25, 0.5, 0.75, 1}; }, {float32, float16, bfloat16});
  creation_case("linspace", "Arange", "num 1", [](Dtype t) { return linspace(2.0, 5.0, 1, t); },
                [] { return std::vector<double>{2}; });
  creation_case("eye", "Binary:equal", "3x4 k 1", [](Dtype t) { return eye(3, 4, 1, t); }, [] {
    std::vector<double> v(12, 0.0);
    for (int i = 0; i < 3; ++i) {
      if (i + 1 < 4) v[i * 4 + i + 1] = 1;
    }
    return v;
  });
  creation_case("eye", "Binary:equal", "2", [](Dtype t) { return eye(2, t); }, [] { return std::vector<double>{1, 0, 0, 1}; });
  creation_case("zeros", "Broadcast", "(2,3)", [](Dtype t) { return zeros({2, 3}, t); },
                [] { return std::vector<double>(6, 0.0); });
  creation_case("ones", "Broadcast", "(3)", [](Dtype t) { return ones({3}, t); }, [] { return std::vector<double>(3, 1.0); });

  // zeros_like / ones_like: the input's shape and dtype, a zero derivative.
  for (bool one : {false, true}) {
    add({.op = one ? "ones_like" : "zeros_like",
         .primitive = "Broadcast",
         .name = "(3,5)",
         .fn = [one](const Arrays& x) { return Arrays{one ? ones_like(x[0]) : zeros_like(x[0])}; },
         .inputs = {in({3, 5})},
         .dtypes = kNumeric,
         .ref = ref_unary([one](double) { return one ? 1.0 : 0.0; }),
         .diff = {0}});
  }
  add({.op = "broadcast_arrays",
       .primitive = "Broadcast",
       .name = "(3,1),(4) -> two (3,4)",
       .fn = [](const Arrays& x) { return broadcast_arrays({x[0], x[1]}); },
       .inputs = {in({3, 1}), in({4})},
       .dtypes = kNumeric,
       .diff = {0, 1}});

  // full from an array of values: differentiable in the values.
  add({.op = "full",
       .primitive = "Broadcast",
       .name = "(2,3,4) from (3,1)",
       .fn = [](const Arrays& x) { return Arrays{full({2, 3, 4}, x[0])}; },
       .inputs = {in({3, 1})},
       .dtypes = kNumeric,
       .diff = {0},
       .grad2 = true});
  add({.op = "full",
       .primitive = "Broadcast",
       .name = "(0,2) from ()",
       .fn = [](const Arrays& x) { return Arrays{full({0, 2}, x[0])}; },
       .inputs = {in({})},
       .dtypes = kNumeric,
       .diff = {0}});

  // Random numbers: a key input (batched by vmap into several keys). The
  // reference is the op itself: the point is the CPU/GPU identity and the
  // batched rule.
  auto key_input = Input{{2}, 0, 0, uint32, next_key};
  auto random_case = [&](const char* op, const std::string& name, std::function<array(const array&)> f) {
    add({.op = op,
         .primitive = "RandomBits",
         .name = name,
         .fn = [f](const Arrays& x) { return Arrays{f(x[0])}; },
         .inputs = {key_input},
         .dtypes = {uint32},
         .layouts = false});
  };
  random_case("random::bits", "(3,5)", [](const array& k) { return random::bits({3, 5}, k); });
  random_case("random::bits", "(7) odd", [](const array& k) { return random::bits({7}, k); });
  random_case("random::split", "3 keys", [](const array& k) { return random::split(k, 3); });
  random_case("random::uniform", "(4,3)", [](const array& k) { return random::uniform({4, 3}, float32, k); });
  random_case("random::normal", "(5)", [](const array& k) { return random::normal({5}, float32, 0.0f, 1.0f, k); });
  random_case("random::randint", "(2,3)",
              [](const array& k) { return random::randint(array(-5), array(9), {2, 3}, int32, k); });
  random_case("random::bernoulli", "(6)", [](const array& k) { return random::bernoulli(array(0.3f), {6}, k); });
  random_case("random::truncated_normal", "(4,3) in [-1, 2]", [](const array& k) {
    return random::truncated_normal(array(-1.0f), array(2.0f), {4, 3}, float32, k);
  });
  random_case("random::truncated_normal", "bounds' shape", [](const array& k) {
    return random::truncated_normal(array({-1.0f, 0.0f, 0.5f}), array(1.5f), float32, k);
  });
  random_case("random::gumbel", "(5,2)", [](const array& k) { return random::gumbel({5, 2}, float32, k); });
  random_case("random::categorical", "(3,7) axis -1", [](const array& k) {
    return random::categorical(reshape(arange(21.0f), {3, 7}) * array(0.1f), -1, k);
  });
  random_case("random::categorical", "shape (4,3)", [](const array& k) {
    return random::categorical(reshape(arange(21.0f), {3, 7}) * array(0.1f), 1, Shape{4, 3}, k);
  });
  random_case("random::categorical", "5 samples", [](const array& k) {
    return random::categorical(reshape(arange(21.0f), {7, 3}) * array(0.1f), 0, 5, k);
  });
  random_case("random::laplace", "(6) loc 1 scale 2", [](const array& k) {
    return random::laplace({6}, float32, 1.0f, 2.0f, k);
  });
  random_case("random::permutation", "n 9", [](const array& k) { return random::permutation(9, k); });
  random_case("random::permutation", "(4,5) axis 1", [](const array& k) {
    return random::permutation(reshape(arange(20.0f), {4, 5}), 1, k);
  });
}

}  // namespace kiln::harness
