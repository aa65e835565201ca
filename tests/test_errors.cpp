// Error semantics: failed arrays can be evaluated again, empty (moved-from)
// handles throw, and messages name the op the user called with the shapes.
#include <type_traits>

#include "core/array_desc.h"
#include "core/primitive.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::throws_error;

// Internal constructors must not be reachable from braces.
static_assert(!std::is_constructible_v<array, std::shared_ptr<ArrayDesc>>);
static_assert(!std::is_convertible_v<std::shared_ptr<ArrayDesc>, array>);

TEST(Errors, BracesMakeAnEmptyFloat32Array) {
  array a({});
  EXPECT_EQ(a.shape(), (Shape{0}));
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ((a + 1.0f).shape(), (Shape{0}));
  array b = test::random_array({3});
  b = {};
  EXPECT_EQ(b.shape(), (Shape{0}));
  // Non-empty lists keep their element type.
  EXPECT_EQ(array({1, 2}).dtype(), int32);
  EXPECT_EQ(array({1.5, 2.0}).dtype(), float64);
  EXPECT_EQ(array({1.5f, 2.0f}).dtype(), float32);
}

TEST(Errors, MovedFromArrayThrows) {
  array a = test::random_array({2, 3});
  array b = std::move(a);
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  const std::vector<std::string> want{"[array]", "moved from"};
  EXPECT_TRUE(throws_error([&] { (void)a.shape(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.shape(0); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.dtype(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.size(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.ndim(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.nbytes(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.itemsize(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.strides(); }, want));
  EXPECT_TRUE(throws_error([&] { a.eval(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.item<float>(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.data<float>(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.is_evaluated(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.has_primitive(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.is_row_contiguous(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.inputs(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)a.primitive(); }, want));
  EXPECT_TRUE(throws_error([&] { (void)exp(a); }, want));
  EXPECT_TRUE(throws_error([&] { (void)(a + b); }, want));
  EXPECT_TRUE(throws_error([&] { (void)(b * a); }, want));
  EXPECT_TRUE(throws_error([&] { eval(b, a); }, {"[eval]", "moved from"}));
  EXPECT_TRUE(throws_error([&] { async_eval(a); }, {"[async_eval]", "moved from"}));
  // Assigning a new value makes it usable again.
  a = b * 2.0f;
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
}

TEST(Errors, MessagesNameTheOpTheUserCalled) {
  EXPECT_TRUE(throws_error([] { zeros({2, -1}); }, {"[zeros]", "(2,-1)"}));
  EXPECT_TRUE(throws_error([] { ones({-3}); }, {"[ones]", "(-3)"}));
  EXPECT_TRUE(throws_error([] { full({-3}, array(1.0f)); }, {"[full]", "(-3)"}));
  EXPECT_TRUE(throws_error([] { full({3}, array({1.0f, 2.0f})); }, {"[full]", "(3)", "(2) float32"}));
  array a = test::random_array({3, 4});
  array lo = test::random_array({5});
  EXPECT_TRUE(throws_error([&] { clip(a, lo, std::nullopt); }, {"[clip]", "(3,4)", "(5)"}));
  EXPECT_TRUE(throws_error([&] { clip(a, std::nullopt, lo); }, {"[clip]", "(3,4)", "(5)"}));
  EXPECT_TRUE(throws_error([] { random::normal({-2}); }, {"[random.normal]", "(-2)"}));
  EXPECT_TRUE(throws_error([] { random::normal({2}, float32, 0, 1, array({1, 2, 3}, uint32)); },
                           {"[random.normal]", "key"}));
  EXPECT_TRUE(throws_error([] { random::split(array({1.0f, 2.0f})); }, {"[random.split]", "key", "(2) float32"}));
  EXPECT_TRUE(throws_error([] { random::bernoulli(array(0.5f), Shape{-2}); }, {"[random.bernoulli]", "(-2)"}));
  EXPECT_TRUE(throws_error([] { random::bernoulli(array({0.5f, 0.2f}), Shape{3}); }, {"[random.bernoulli]", "(3)"}));
}

// An allocation that fails while a graph is evaluated names the array it was
// for (shape and dtype), not just a byte count.
TEST(Errors, EvalTimeAllocationFailureNamesShapeAndDtype) {
  array big = zeros({1 << 30, 1 << 30});  // 2^62 bytes
  EXPECT_TRUE(throws_error([&] { big.eval(); }, {"4611686018427387904 bytes", "(1073741824,1073741824) float32"}));
  array small = exp(test::random_array({4}));
  EXPECT_EQ(small.size(), 4u);
  small.eval();
}

// A failure is not permanent: once the cause is gone (here, the memory
// limit raised), evaluating the same arrays again computes them.
TEST(Errors, FailedArraysCanBeEvaluatedAgain) {
  array x = test::random_array({1 << 22});
  x.eval();
  synchronize();
  clear_cache();
  size_t old = set_memory_limit(get_active_memory() + (8 << 20));  // x * 2 needs 16 MiB
  array big = x * 2.0f;
  array consumer = sum(big + 1.0f);
  array other = exp(array(1.0f));
  EXPECT_TRUE(throws_error([&] { eval(consumer, other); }, {"memory limit"}));
  EXPECT_TRUE(throws_error([&] { big.eval(); }, {"memory limit"}));
  set_memory_limit(old);
  EXPECT_FLOAT_EQ(other.item<float>(), std::exp(1.0f));
  double want = 0;
  for (double v : test::to_double(x)) want += v * 2 + 1;
  EXPECT_NEAR(consumer.item<float>(), want, 1e-3 * std::fabs(want) + 1.0);
  EXPECT_TRUE(big.is_evaluated());
  EXPECT_FALSE(consumer.has_primitive());
}

// Two outputs, x + 1 and x - 1; the first run throws.
class FailsOncePair : public Primitive {
 public:
  explicit FailsOncePair(Stream s) : Primitive(s) {}
  static inline int runs = 0;
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    if (runs++ == 0) throw Error("[fails_once] first run fails");
    const float* x = reinterpret_cast<const float*>(detail::data_ptr(inputs[0]));
    for (int k = 0; k < 2; ++k) {
      detail::allocate(outputs[k], "fails_once");
      float* y = reinterpret_cast<float*>(detail::data_ptr(outputs[k]));
      for (size_t i = 0; i < outputs[k].size(); ++i) y[i] = x[i] + (k == 0 ? 1.0f : -1.0f);
    }
  }
  void eval_gpu(const std::vector<array>&, std::vector<array>&) override { throw Error("[fails_once] cpu only"); }
  const char* name() const override { return "FailsOncePair"; }
};

// Both outputs of a failed multi-output node fail, and both run again.
TEST(Errors, FailedMultiOutputNodeRunsAgain) {
  array x = test::random_array({5});
  FailsOncePair::runs = 0;
  auto outs = array::make_arrays({{5}, {5}}, {float32, float32}, std::make_shared<FailsOncePair>(to_stream({})),
                                 {contiguous(x)});
  array consumer = outs[0] * 2.0f;
  EXPECT_TRUE(throws_error([&] { consumer.eval(); }, {"[fails_once] first run fails"}));
  EXPECT_TRUE(outs[1].is_evaluated());  // failed with its sibling
  outs[1].eval();
  EXPECT_EQ(FailsOncePair::runs, 2);
  std::vector<double> xv = test::to_double(x), a = test::to_double(outs[0]), b = test::to_double(outs[1]),
                      c = test::to_double(consumer);
  EXPECT_EQ(FailsOncePair::runs, 2);  // the consumer's eval reused the outputs
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_FLOAT_EQ(a[i], xv[i] + 1);
    EXPECT_FLOAT_EQ(b[i], xv[i] - 1);
    EXPECT_FLOAT_EQ(c[i], 2 * (xv[i] + 1));
  }
}

}  // namespace
}  // namespace kiln
