// nn::KVCache and nn::RotatingKVCache: contents against the tokens fed in,
// and the in-place append (the buffer keeps its address and memory stays
// flat between chunk growths).
#include <algorithm>
#include <set>
#include <vector>

#include "kiln/kv_cache.h"
#include "kiln/memory.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(KVCache, AppendsInPlaceWithoutGrowingMemory) {
  const int B = 1, H = 2, D = 8;
  nn::KVCache cache;  // chunks of 256 tokens: 100 steps fit in the first
  std::vector<std::vector<double>> all_k;  // host copies: arrays would hold memory
  const void* first_ptr = nullptr;
  size_t settled_memory = 0;
  for (int step = 0; step < 100; ++step) {
    if (step == 2) settled_memory = get_active_memory();
    if (step > 2) EXPECT_EQ(get_active_memory(), settled_memory) << "step " << step;
    array k = random_array({B, H, 1, D}), v = random_array({B, H, 1, D});
    all_k.push_back(to_double(k));
    {
      auto [keys, values] = cache.update_and_fetch(k, v);
      eval(keys, values);
      ASSERT_EQ(keys.shape(), (Shape{B, H, step + 1, D}));
      EXPECT_TRUE(all_close(slice(values, {0, 0, step, 0}, {B, H, step + 1, D}), to_double(v), 0, 0));
    }
    const void* ptr = cache.key_buffer()->data<float>();
    if (step == 0) first_ptr = ptr;
    EXPECT_EQ(ptr, first_ptr) << "the key buffer moved at step " << step;
  }
  std::vector<double> want;  // [B, H, T, D] from the per-step [B, H, 1, D]
  for (int h = 0; h < H; ++h) {
    for (const auto& k : all_k) want.insert(want.end(), k.begin() + h * D, k.begin() + (h + 1) * D);
  }
  auto [keys, values] = cache.keys_and_values();
  EXPECT_TRUE(all_close(keys, want, 0, 0));
  EXPECT_EQ(cache.offset(), 100);
}

TEST(KVCache, GrowsInChunksAndTrims) {
  nn::KVCache cache(16);
  std::vector<array> all_k;
  std::set<const void*> buffers;
  for (int step = 0; step < 40; ++step) {
    const int n = step == 0 ? 5 : 1;  // a prefill, then decode steps
    array k = random_array({2, 3, n, 4}), v = random_array({2, 3, n, 4});
    all_k.push_back(k);
    auto [keys, values] = cache.update_and_fetch(k, v);
    eval(keys, values);
    buffers.insert(cache.key_buffer()->data<float>());
    EXPECT_EQ(cache.key_buffer()->shape(2) % 16, 0);
  }
  EXPECT_EQ(cache.offset(), 44);
  EXPECT_EQ(cache.key_buffer()->shape(2), 48);
  EXPECT_LE(buffers.size(), 3u);  // one buffer per chunk size: 16, 32, 48
  auto [keys, values] = cache.keys_and_values();
  EXPECT_TRUE(all_close(keys, to_double(concatenate(all_k, 2)), 0, 0));
  EXPECT_EQ(cache.trim(4), 4);
  EXPECT_EQ(cache.keys_and_values().first.shape(2), 40);
  EXPECT_TRUE(throws_error([&] { cache.update_and_fetch(random_array({2, 3, 1, 5}), random_array({2, 3, 1, 5})); },
                           {"[KVCache]", "(2,3,1,5)"}));
}

// Token t is stored as the value t; the set of cached tokens after each
// step must be the first `keep` tokens and the latest max_size - keep.
void check_window(const array& keys, int offset, int max_size, int keep) {
  std::vector<double> got = to_double(keys);
  std::set<int> have;
  for (size_t i = 0; i < got.size(); i += 1) have.insert(static_cast<int>(got[i]));
  std::set<int> want;
  for (int t = 0; t < offset; ++t) {
    if (offset <= max_size || t < keep || t >= offset - (max_size - keep)) want.insert(t);
  }
  EXPECT_EQ(have, want) << "offset " << offset;
  EXPECT_EQ(static_cast<int>(got.size()), std::min(offset, max_size));
}

array token_range(int begin, int n) { return reshape(arange(begin, begin + n), {1, 1, n, 1}); }

TEST(RotatingKVCache, KeepsSinksAndTheLatestWindow) {
  for (int prefill : {0, 5, 12}) {
    const int max_size = 8, keep = 2;
    nn::RotatingKVCache cache(max_size, keep, 4);
    int offset = 0;
    if (prefill) {
      cache.update_and_fetch(token_range(0, prefill), token_range(0, prefill));
      offset = prefill;
    }
    const void* ring = nullptr;
    for (int step = 0; step < 30; ++step) {
      auto [keys, values] = cache.update_and_fetch(token_range(offset, 1), token_range(offset, 1));
      ++offset;
      eval(keys, values);
      SCOPED_TRACE("prefill " + std::to_string(prefill) + " step " + std::to_string(step));
      // The first prefill keeps max_size - 1 old tokens plus the new ones.
      check_window(keys, offset, max_size, keep);
      if (cache.key_buffer()->shape(2) == max_size) {
        const void* p = cache.key_buffer()->data<int32_t>();
        if (ring && offset > max_size + 1) EXPECT_EQ(p, ring) << "the ring moved";
        ring = p;
      }
    }
    EXPECT_EQ(cache.size(), max_size);
    EXPECT_FALSE(cache.is_trimmable());
  }
}

// A prefill after decode steps: the cache goes back to temporal order and
// keeps max_size - 1 old tokens so each new token sees max_size of context.
TEST(RotatingKVCache, PrefillAfterRotationIsInTemporalOrder) {
  nn::RotatingKVCache cache(6, 1, 4);
  int offset = 0;
  for (; offset < 9; ++offset) cache.update_and_fetch(token_range(offset, 1), token_range(offset, 1));
  auto [keys, values] = cache.update_and_fetch(token_range(offset, 3), token_range(offset, 3));
  std::vector<double> got = to_double(keys);
  // sink 0, then the latest 4 old tokens (5..8), then 9, 10, 11.
  EXPECT_EQ(got, (std::vector<double>{0, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_TRUE(throws_error([] { nn::RotatingKVCache(4, 4); }, {"[RotatingKVCache]", "keep"}));
}

}  // namespace
}  // namespace kiln::test
