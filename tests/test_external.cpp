// Arrays over memory Kiln does not own: no copy, the deleter runs once, and
// a read-only buffer is never written (no op donates it to its output).
#include <vector>

#include "test_util.h"

namespace kiln {
namespace {

TEST(External, WrapsWithoutCopyAndRunsTheDeleterOnce) {
  std::vector<float> host = {1, 2, 3, 4, 5, 6};
  int deleted = 0;
  {
    array a(host.data(), {2, 3}, float32, [&deleted](void*) { ++deleted; });
    EXPECT_EQ(a.data<float>(), host.data());
    EXPECT_FLOAT_EQ(sum(a).item<float>(), 21.f);
    array v = transpose(a);
    v.eval();
    EXPECT_EQ(deleted, 0);
  }
  EXPECT_EQ(deleted, 1);
}

TEST(External, ReadOnlyIsNeverWrittenInPlace) {
  std::vector<float> host(4096);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.25f;
  const std::vector<float> before = host;
  array y = [&] {
    // The only handle to x is the node's input: an op could take its buffer.
    array x = array::external_read_only(host.data(), {4096}, float32);
    EXPECT_EQ(x.data<float>(), host.data());
    return exp(negative(x)) + x * 2.0f;
  }();
  y.eval();
  EXPECT_EQ(host, before);
  auto got = test::to_double(y);
  for (size_t i = 0; i < host.size(); i += 97) EXPECT_NEAR(got[i], std::exp(-before[i]) + 2 * before[i], 1e-4);
  // Compiled (fused) kernels and slice updates must not write it either.
  array z = [&] {
    array x = array::external_read_only(host.data(), {64, 64}, float32);
    auto f = compile([](const std::vector<array>& in) { return std::vector<array>{in[0] * 3.0f + 1.0f}; });
    array u = f({x})[0];
    array w = slice_update(array::external_read_only(host.data(), {64, 64}, float32), zeros({2, 2}), {0, 0}, {2, 2});
    return u + w;
  }();
  z.eval();
  EXPECT_EQ(host, before);
}

TEST(External, RejectsBadWraps) {
  EXPECT_THROW(array(nullptr, {3}, float32, nullptr), Error);
  float x = 1;
  EXPECT_THROW(array(&x, {-1}, float32, nullptr), Error);
  array empty(nullptr, {0}, float32, nullptr);
  EXPECT_EQ(empty.size(), 0u);
}

}  // namespace
}  // namespace kiln
