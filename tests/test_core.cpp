// Properties of the core machinery: laziness, deep graphs, freeing of
// intermediates, streams, async evaluation, memory limits and failures.
#include <atomic>
#include <chrono>
#include <latch>
#include <thread>

#include "core/array_desc.h"
#include "core/primitive.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::throws_error;

TEST(Core, OpsAreLazyUntilEval) {
  array a = test::random_array({64, 64});
  array b = exp(a) + a * 2.0f;
  EXPECT_FALSE(b.is_evaluated());
  EXPECT_TRUE(b.has_primitive());
  b.eval();
  EXPECT_TRUE(b.is_evaluated());
  EXPECT_FALSE(b.has_primitive());  // detached: inputs dropped once computed
  EXPECT_TRUE(b.inputs().empty());
}

TEST(Core, MillionNodeChainEvaluatesAndIsDestroyedWithoutRecursion) {
  array x = array(0.0f);
  for (int i = 0; i < 1000000; ++i) x = x + 1.0f;
  EXPECT_FLOAT_EQ(x.item<float>(), 1000000.0f);
  // Destroying an unevaluated chain of the same depth must not recurse.
  array y = array(1);
  for (int i = 0; i < 1000000; ++i) y = y * 1;
  y = array(0);
  SUCCEED();
}

// Peak active memory of a long chain of elementwise ops stays a small
// multiple of one array: each intermediate is freed as its consumer runs.
void expect_bounded_peak(int length, int elements) {
  array x = random::uniform({elements});
  x.eval();
  size_t bytes = static_cast<size_t>(elements) * 4;
  synchronize();
  reset_peak_memory();
  size_t base = get_active_memory();
  array y = x;
  for (int i = 0; i < length; ++i) y = (i % 2) ? y * 1.0001f : y + 0.5f;
  y.eval();
  size_t peak = get_peak_memory() - base;
  EXPECT_LE(peak, 3 * bytes + (1 << 20)) << "chain of " << length << " ops on " << bytes << " bytes";
}

TEST(Core, LongChainPeakMemoryIsSmallMultiple) {
  expect_bounded_peak(10000, 1 << 16);  // 10,000 ops on 256 KiB
}

TEST(Core, ChainOn64MiBPeaksAtSmallMultiple) {
  expect_bounded_peak(64, 1 << 24);  // 64 ops on 64 MiB
}

TEST(Core, ViewsShareTheBuffer) {
  array a = test::random_array({6, 8});
  a.eval();
  const float* base = a.data<float>();
  array t = transpose(a);
  array r = reshape(a, {8, 6});
  array s = slice(a, {1, 2}, {5, 8}, {2, 3});
  array b = broadcast_to(reshape(a, {1, 6, 8}), {3, 6, 8});
  eval(t, r, s, b);
  EXPECT_EQ(t.data<float>(), base);
  EXPECT_EQ(r.data<float>(), base);
  EXPECT_EQ(s.data<float>(), base + 1 * 8 + 2);
  EXPECT_EQ(b.data<float>(), base);
  EXPECT_EQ(b.strides(), (Strides{0, 8, 1}));
  EXPECT_EQ(t.strides(), (Strides{1, 8}));
  EXPECT_EQ(s.strides(), (Strides{16, 3}));
}

TEST(Core, AsyncEvalReturnsBeforeTheWorkIsDone) {
  array x = random::uniform({1 << 22});
  x.eval();
  array y = x;
  for (int i = 0; i < 300; ++i) y = y * 1.0001f + 0.0001f;
  async_eval(y);
  EXPECT_FALSE(y.is_evaluated());
  y.eval();
  EXPECT_TRUE(y.is_evaluated());
}

// A primitive that blocks until `parties` gates have been entered: two of
// them on different streams only finish if the streams run concurrently.
class Gate : public Primitive {
 public:
  Gate(Stream s, std::shared_ptr<std::latch> latch) : Primitive(s), latch_(std::move(latch)) {}
  void eval_cpu(const std::vector<array>& inputs, array& out) override {
    latch_->count_down();
    bool ok = false;
    for (int i = 0; i < 500 && !ok; ++i) {
      ok = latch_->try_wait();
      if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!ok) throw Error("[gate] the other stream never ran concurrently");
    detail::allocate(out, "gate");
    *reinterpret_cast<float*>(detail::data_ptr(out)) = 1.0f;
  }
  void eval_gpu(const std::vector<array>&, array&) override { throw Error("[gate] cpu only"); }
  const char* name() const override { return "Gate"; }

 private:
  std::shared_ptr<std::latch> latch_;
};

TEST(Core, StreamsRunConcurrently) {
  Stream s1 = new_stream(Device::cpu);
  Stream s2 = new_stream(Device::cpu);
  auto latch = std::make_shared<std::latch>(2);
  array a(Shape{}, float32, std::make_shared<Gate>(s1, latch), {});
  array b(Shape{}, float32, std::make_shared<Gate>(s2, latch), {});
  async_eval(a);
  async_eval(b);
  EXPECT_FLOAT_EQ((a + b).item<float>(), 2.0f);
}

TEST(Core, CrossStreamDependencies) {
  Stream s1 = new_stream(Device::cpu);
  Stream s2 = new_stream(Device::cpu);
  array x = test::random_array({257, 129});
  array a = exp(x, s1);
  array b = multiply(a, array(2.0f), s2);     // needs s1's result
  array c = add(b, sum(a, 1, true, s2), s1);  // needs both
  array d = subtract(c, a, s2);
  eval(d);
  auto xv = test::to_double(x);
  auto dv = test::to_double(d);
  for (int i = 0; i < 257; ++i) {
    double row = 0;
    for (int j = 0; j < 129; ++j) row += std::exp(xv[i * 129 + j]);
    for (int j = 0; j < 129; ++j) {
      double e = std::exp(xv[i * 129 + j]);
      ASSERT_NEAR(dv[i * 129 + j], 2 * e + row - e, 1e-4 * std::fabs(row));
    }
  }
  synchronize();
}

TEST(Core, ManyThreadsEvaluateSharedGraphs) {
  array x = test::random_array({1000});
  array shared = exp(x) * 3.0f;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      array y = shared + static_cast<float>(t);
      if (std::fabs(sum(y).item<float>() - sum(shared).item<float>() - 1000.0f * t) < 1.0f) ++ok;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 8);
}

TEST(Core, MemoryLimitThrowsAndKeepsArraysIntact) {
  array keep = test::random_array({1000});
  keep.eval();
  double before = sum(keep).item<double>();
  clear_cache();
  size_t old = set_memory_limit(get_active_memory() + (8 << 20));
  array big = ones({64 << 20}, float32);  // 256 MiB
  EXPECT_TRUE(throws_error([&] { big.eval(); }, {"memory limit"}));
  set_memory_limit(old);
  EXPECT_DOUBLE_EQ(sum(keep).item<double>(), before);
  EXPECT_GT(get_memory_limit(), size_t{1} << 40);
}

TEST(Core, MemoryCountersTrackBuffers) {
  synchronize();  // earlier tests' nodes are released by now
  clear_cache();
  size_t base = get_active_memory();
  {
    array a = ones({1 << 20});
    a.eval();
    EXPECT_GE(get_active_memory(), base + (4u << 20));
  }
  // eval returns after the stream worker let go of its handles: no wait.
  EXPECT_EQ(get_active_memory(), base);
  EXPECT_GE(get_cache_memory(), 4u << 20);  // kept for reuse
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
}

TEST(Core, CacheLimitBoundsTheBufferCache) {
  synchronize();
  clear_cache();
  const size_t previous = set_cache_limit(1u << 20);
  EXPECT_EQ(previous, get_memory_limit());  // the default: the memory limit
  {
    array big = ones({1 << 20}), small = ones({1000});
    eval(big, small);
  }
  EXPECT_LE(get_cache_memory(), 1u << 20);  // the 4 MB buffer went back to the system
  EXPECT_GT(get_cache_memory(), 0u);        // the small one is cached
  EXPECT_EQ(set_cache_limit(0), 1u << 20);
  EXPECT_EQ(get_cache_memory(), 0u);  // 0 disables the cache
  set_cache_limit(previous);
  EXPECT_EQ(set_wired_limit(123), 0u);  // recorded only
  EXPECT_EQ(set_wired_limit(0), 123u);
}

TEST(Core, FailedEvalIsReportedToConsumersAndReaders) {
  array a = test::random_array({4, 5});
  array bad = take(a, array({1, 7}), 0);
  array consumer = bad * 2.0f;
  EXPECT_TRUE(throws_error([&] { consumer.eval(); }, {"take", "out of range", "(4,5)"}));
  EXPECT_TRUE(throws_error([&] { bad.data<float>(); }, {"take", "index 7"}));
  EXPECT_TRUE(throws_error([&] { bad.item<float>(); }, {"item"}));
}

TEST(Core, GpuWithoutBackendThrowsClearly) {
  if (is_available(Device::gpu)) GTEST_SKIP() << "a GPU is present";
  EXPECT_TRUE(throws_error([] { add(array(1.0f), array(2.0f), Device::gpu); }, {"gpu", "CUDA"}));
  EXPECT_TRUE(throws_error([] { set_default_device(Device::gpu); }, {"gpu"}));
  EXPECT_TRUE(throws_error([] { new_stream(Device::gpu); }, {"gpu"}));
}

TEST(Core, ThreadCountIsConfigurable) {
  int n = cpu_threads();
  set_cpu_threads(1);
  array x = test::random_array({1 << 20});
  float one = sum(x).item<float>();
  set_cpu_threads(n);
  EXPECT_NEAR(sum(x).item<float>(), one, 1e-3f * std::fabs(one) + 1e-2f);
  EXPECT_TRUE(throws_error([] { set_cpu_threads(0); }, {"set_cpu_threads"}));
}

TEST(Core, MisuseErrorsNameOpShapesAndDtypes) {
  array a = test::random_array({3, 4});
  array b = test::random_array({5}, int32);
  EXPECT_TRUE(throws_error([&] { add(a, b); }, {"[add]", "(3,4)", "(5)", "float32", "int32"}));
  EXPECT_TRUE(throws_error([&] { sum(a, 2); }, {"[sum]", "axis 2", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { reshape(a, {5, 3}); }, {"[reshape]", "(3,4)", "(5,3)"}));
  EXPECT_TRUE(throws_error([&] { matmul(a, a); }, {"[matmul]", "(3,4)"}));
  EXPECT_TRUE(throws_error([&] { a.data<int32_t>(); }, {"[data]", "int32", "float32"}));
  EXPECT_TRUE(throws_error([&] { random::uniform({2}, int32); }, {"random.uniform", "int32"}));
  EXPECT_TRUE(throws_error([&] { array(std::vector<float>{1, 2, 3}, {2, 2}); }, {"[array]", "(2,2)"}));
}


TEST(Core, EmptyArraysFlowThroughElementwiseOps) {
  EXPECT_EQ((zeros({0}) + array(1.0f)).size(), 0u);
  EXPECT_EQ((zeros({3, 0}) + array(1.0f)).shape(), (Shape{3, 0}));
  array w = where(zeros({0}, bool_), zeros({0}), zeros({0}));
  w.eval();
  EXPECT_EQ(w.size(), 0u);
  array t = abs(transpose(zeros({0, 3})));
  t.eval();
  EXPECT_EQ(t.shape(), (Shape{3, 0}));
  array m = max(zeros({0, 3}), 1);  // only the kept axis is empty
  m.eval();
  EXPECT_EQ(m.shape(), (Shape{0}));
  EXPECT_TRUE(throws_error([] { max(zeros({0, 3}), 0); }, {"[max]", "empty"}));
}

TEST(Core, HugeShapesThrowInsteadOfOverflowing) {
  EXPECT_TRUE(throws_error([] { zeros({1 << 30, 1 << 30, 4}); }, {"too large"}));
  EXPECT_TRUE(throws_error([] { zeros({1 << 30, 1 << 30, 3}); }, {"too large"}));
}

TEST(Core, UnknownStreamDoesNotPoisonTheGraph) {
  array x = test::random_array({8});
  array y = exp(x, Stream{4242, Device::cpu});
  EXPECT_TRUE(throws_error([&] { y.eval(); }, {"unknown stream"}));
  array z = exp(x) + 1.0f;  // unrelated work still runs
  EXPECT_GT(sum(z).item<float>(), 0.0f);
}

TEST(Core, IntegerOverflowWrapsWithoutUndefinedBehaviour) {
  EXPECT_EQ(square(array(65536)).item<int32_t>(), 0);
  EXPECT_EQ(negative(array(INT32_MIN)).item<int32_t>(), INT32_MIN);
  EXPECT_EQ(abs(array(int64_t{INT64_MIN})).item<int64_t>(), INT64_MIN);
  EXPECT_EQ(sum(array({INT32_MAX, 1})).item<int32_t>(), INT32_MIN);
  EXPECT_EQ(prod(array({int64_t{1} << 40, int64_t{1} << 40})).item<int64_t>(), 0);
}


TEST(Core, ResultDimensionsBeyondIntThrow) {
  EXPECT_TRUE(throws_error([] { repeat(zeros({1 << 20}), 1 << 12, 0); }, {"[repeat]", "2^31-1"}));
  EXPECT_TRUE(throws_error([] { tile(zeros({1 << 20}), {1 << 12}); }, {"[tile]", "2^31-1"}));
  EXPECT_TRUE(throws_error([] { flatten(broadcast_to(array(1.0f), {1 << 16, 1 << 16})); }, {"[flatten]"}));
}

TEST(Core, DefaultStreamIsPerDevice) {
  Stream cpu = default_stream(Device::cpu);
  EXPECT_EQ(cpu.device.type, Device::cpu);
  EXPECT_EQ(default_stream(Device::cpu).index, cpu.index);
  EXPECT_NE(new_stream(Device::cpu).index, cpu.index);
}

}  // namespace
}  // namespace kiln
