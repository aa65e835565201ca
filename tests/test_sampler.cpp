// The sampler chain: each stage on small hand-made logits with exact
// expectations, then the chain's order, the penalty window, the seed and the
// frequencies of the random draw.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kiln/error.h"
#include "kiln/sampler.h"
#include "test_util.h"

using namespace kiln::llm;
namespace s = kiln::llm::sampling;

namespace {

std::vector<int32_t> ids_of(const std::vector<TokenCandidate>& c) {
  std::vector<int32_t> out;
  for (const auto& x : c) out.push_back(x.id);
  return out;
}

std::vector<float> logits_of_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

SamplerParams plain(uint32_t seed = 7) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

}  // namespace

TEST(Sampler, Penalties) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f};
  auto c = s::candidates(logits);
  std::vector<int32_t> recent = {0, 1, 1};
  s::apply_penalties(c, recent, 2.0f, 0.5f, 0.25f);
  EXPECT_FLOAT_EQ(c[0].logit, 2.0f / 2.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(c[1].logit, -1.0f * 2.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(c[2].logit, 0.5f);
  EXPECT_FLOAT_EQ(c[3].logit, 3.0f);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{0, 1, 2, 3}));  // order kept
}

TEST(Sampler, TopKKeepsTheBestWithTiesByLowerId) {
  auto c = s::candidates(std::vector<float>{1, 5, 3, 5, 2});
  s::apply_top_k(c, 3);
  EXPECT_EQ(ids_of(c), (std::vector<int32_t>{1, 3, 2}));
  auto d = s::candidates(std::vector<float>{1, 5, 3});
  s::apply_top_k(d, 0);  // off
  EXPECT_EQ(d.size(), 3u);
  s::apply_top_k(d, 1, /*min_keep=*/2);
  EXPECT_EQ(ids_of(d), (std::vector<int32_t>{1, 2}));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  auto probs = logits_of_probs({0.15, 0.5, 0.05, 0.3});
  auto keep = [&](float p) {
    auto c = s::candidates(probs);
    s::apply_top_p(c, p);
    return ids_of(c);
  };
  EXPECT_EQ(keep(0.4f), (std::vector<int32_t>{1}));
  EXPECT_EQ(keep(0.75f), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(keep(0.85f), (std::vector<int32_t>{1, 3, 0}));
  EXPECT_EQ(keep(1.0f).size(), 4u);  // off, order untouched
  auto c = s::candidates(probs);
  s::apply_top_p(c, 0.4f, /*min_keep=*/3);
  EXPECT_EQ(c.size(), 3u);
}

TEST(Sampler, MinPIsRelativeToTheBest) {
  auto probs = logits_of_probs({0.15, 0.5, 0.05, 0.3});
  auto keep = [&](float m) {
    auto c = s::candidates(probs);
    s::apply_min_p(c, m);
    return ids_of(c);
  };
  EXPECT_EQ(keep(0.2f), (std::vector<int32_t>{1, 3, 0}));  // >= 0.1
  EXPECT_EQ(keep(0.5f), (std::vector<int32_t>{1, 3}));     // >= 0.25
  EXPECT_EQ(keep(0.7f), (std::vector<int32_t>{1}));        // >= 0.35
  EXPECT_EQ(keep(0.0f).size(), 4u);
}

TEST(Sampler, TemperatureSoftmaxGreedyDraw) {
  auto c = s::candidates(std::vector<float>{1.0f, 2.0f});
  s::apply_temperature(c, 0.5f);
  EXPECT_FLOAT_EQ(c[0].logit, 2.0f);
  EXPECT_FLOAT_EQ(c[1].logit, 4.0f);
  auto d = s::candidates(std::vector<float>{0.0f, std::log(3.0f)});
  s::softmax(d);
  EXPECT_NEAR(d[0].p, 0.25f, 1e-7);
  EXPECT_NEAR(d[1].p, 0.75f, 1e-7);
  EXPECT_EQ(s::draw(d, 0.0), 0);
  EXPECT_EQ(s::draw(d, 0.2), 0);
  EXPECT_EQ(s::draw(d, 0.26), 1);
  EXPECT_EQ(s::draw(d, 0.999999), 1);
  EXPECT_EQ(s::greedy(s::candidates(std::vector<float>{1, 4, 4, 2})), 1);
  EXPECT_TRUE(kiln::test::throws_error([&] { s::apply_temperature(c, 0.0f); }, {"temperature"}));
  EXPECT_TRUE(kiln::test::throws_error([&] { s::candidates(std::vector<float>{}); }, {"empty"}));
  EXPECT_TRUE(kiln::test::throws_error([&] { s::draw({}, 0.5); }, {"draw"}));
}

TEST(Sampler, GreedyWithARepetitionWindow) {
  SamplerParams p;
  p.temperature = 0.0f;
  p.repeat_penalty = 1.1f;
  p.repeat_last_n = 2;
  Sampler smp(p);
  std::vector<float> logits = {3.0f, 2.9f, 1.0f};
  EXPECT_EQ(smp.sample(logits), 0);
  smp.accept(0);
  EXPECT_EQ(smp.sample(logits), 1);  // 3 / 1.1 < 2.9
  smp.accept(1);
  smp.accept(2);  // the window of 2 no longer holds token 0
  EXPECT_EQ(smp.sample(logits), 0);
  smp.reset();
  EXPECT_EQ(smp.sample(logits), 0);
}

TEST(Sampler, ChainOrderTopKBeforeTemperature) {
  // top_k = 1 leaves only the argmax, however hot the temperature.
  SamplerParams p = plain();
  p.top_k = 1;
  p.temperature = 100.0f;
  Sampler smp(p);
  std::vector<float> logits = {0.1f, 0.3f, 0.2f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(smp.sample(logits), 1);
  // min_p sees the distribution before temperature: 0.05 / 0.5 < 0.2 drops
  // token 2 even though temperature 10 would flatten it to near 0.25.
  SamplerParams q = plain();
  q.min_p = 0.2f;
  q.temperature = 10.0f;
  Sampler smq(q);
  auto probs = logits_of_probs({0.15, 0.5, 0.05, 0.3});
  for (int i = 0; i < 200; ++i) EXPECT_NE(smq.sample(probs), 2);
}

TEST(Sampler, SeedIsReproducible) {
  auto probs = logits_of_probs({0.1, 0.2, 0.3, 0.4});
  auto run = [&](uint32_t seed) {
    Sampler smp(plain(seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(smp.sample(probs));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
  Sampler smp(plain(42));
  auto first = smp.sample(probs);
  smp.reset();
  EXPECT_EQ(smp.sample(probs), first);
}

TEST(Sampler, DrawFrequenciesFollowTheDistribution) {
  const int n = 40000;
  std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  for (float temp : {1.0f, 2.0f}) {
    SamplerParams params = plain(1234);
    params.temperature = temp;
    Sampler smp(params);
    auto logits = logits_of_probs(p);
    std::map<int32_t, int> count;
    for (int i = 0; i < n; ++i) ++count[smp.sample(logits)];
    // Temperature t: p_i^(1/t), renormalised.
    double z = 0;
    for (double x : p) z += std::pow(x, 1.0 / temp);
    for (int i = 0; i < 4; ++i) {
      double want = std::pow(p[i], 1.0 / temp) / z;
      double sigma = std::sqrt(want * (1 - want) / n);
      EXPECT_NEAR(count[i] / double(n), want, 5 * sigma) << "token " << i << " temperature " << temp;
    }
  }
}

TEST(Sampler, BadParametersAreErrors) {
  SamplerParams p;
  p.repeat_penalty = 0.0f;
  EXPECT_TRUE(kiln::test::throws_error([&] { Sampler s(p); }, {"Sampler", "repeat_penalty"}));
  p = SamplerParams();
  p.repeat_last_n = -2;
  EXPECT_TRUE(kiln::test::throws_error([&] { Sampler s(p); }, {"repeat_last_n", "-2"}));
}
