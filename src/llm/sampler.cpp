// The sampler chain (include/kiln/sampler.h). Candidates are sorted once, by
// top-k (a partial sort of the k best) or by the first stage that needs the
// order; ties keep the lower id first so every stage is deterministic.
#include "kiln/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "kiln/error.h"

namespace kiln::llm {
namespace sampling {
namespace {

bool before(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void sort_desc(std::vector<TokenCandidate>& c) {
  if (!std::is_sorted(c.begin(), c.end(), before)) std::sort(c.begin(), c.end(), before);
}

void require_nonempty(const std::vector<TokenCandidate>& c, const char* op) {
  if (c.empty()) throw Error(std::string("sampling::") + op + ": no candidates");
}

}  // namespace

std::vector<TokenCandidate> candidates(std::span<const float> logits) {
  if (logits.empty()) throw Error("sampling::candidates: empty logits");
  std::vector<TokenCandidate> c(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) c[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
  return c;
}

void apply_penalties(std::vector<TokenCandidate>& c, std::span<const int32_t> recent, float repeat,
                     float frequency, float presence) {
  if (recent.empty() || (repeat == 1.0f && frequency == 0.0f && presence == 0.0f)) return;
  if (!(repeat > 0.0f)) throw Error("sampling::apply_penalties: repeat penalty must be > 0, got " + std::to_string(repeat));
  std::unordered_map<int32_t, int> count;
  for (int32_t t : recent) ++count[t];
  for (auto& x : c) {
    auto it = count.find(x.id);
    if (it == count.end()) continue;
    x.logit = x.logit <= 0.0f ? x.logit * repeat : x.logit / repeat;
    x.logit -= static_cast<float>(it->second) * frequency + presence;
  }
}

void apply_top_k(std::vector<TokenCandidate>& c, int32_t k, size_t min_keep) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) {
    return;
  }
  size_t keep = std::max(static_cast<size_t>(k), min_keep);
  keep = std::min(keep, c.size());
  std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(keep), c.end(), before);
  c.resize(keep);
}

void softmax(std::vector<TokenCandidate>& c) {
  require_nonempty(c, "softmax");
  float mx = -std::numeric_limits<float>::infinity();
  for (auto& x : c) mx = std::max(mx, x.logit);
  double sum = 0.0;
  for (auto& x : c) {
    x.p = std::exp(x.logit - mx);
    sum += x.p;
  }
  for (auto& x : c) x.p = static_cast<float>(x.p / sum);
}

void apply_top_p(std::vector<TokenCandidate>& c, float p, size_t min_keep) {
  if (p >= 1.0f || c.empty()) return;
  sort_desc(c);
  softmax(c);
  double cum = 0.0;
  size_t keep = c.size();
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c[i].p;
    if (cum >= p && i + 1 >= min_keep) {
      keep = i + 1;
      break;
    }
  }
  c.resize(keep);
}

void apply_min_p(std::vector<TokenCandidate>& c, float min_p, size_t min_keep) {
  if (min_p <= 0.0f || c.empty()) return;
  sort_desc(c);
  // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p): no softmax needed.
  float threshold = c.front().logit + std::log(min_p);
  size_t keep = 1;
  while (keep < c.size() && c[keep].logit >= threshold) ++keep;
  c.resize(std::min(c.size(), std::max(keep, min_keep)));
}

void apply_temperature(std::vector<TokenCandidate>& c, float temperature) {
  if (!(temperature > 0.0f)) {
    throw Error("sampling::apply_temperature: temperature must be > 0 (use greedy), got " + std::to_string(temperature));
  }
  for (auto& x : c) x.logit /= temperature;
}

int32_t greedy(const std::vector<TokenCandidate>& c) {
  require_nonempty(c, "greedy");
  return std::min_element(c.begin(), c.end(), before)->id;
}

int32_t draw(const std::vector<TokenCandidate>& c, double u) {
  require_nonempty(c, "draw");
  double cum = 0.0;
  for (const auto& x : c) {
    cum += x.p;
    if (u < cum) return x.id;
  }
  // Rounding left the total just under 1: the last candidate with mass.
  for (auto it = c.rbegin(); it != c.rend(); ++it) {
    if (it->p > 0.0f) return it->id;
  }
  return c.back().id;
}

}  // namespace sampling

Sampler::Sampler(SamplerParams params) : params_(params), rng_(params.seed) {
  if (!(params_.repeat_penalty > 0.0f)) {
    throw Error("Sampler: repeat_penalty must be > 0, got " + std::to_string(params_.repeat_penalty));
  }
  if (params_.repeat_last_n < -1) {
    throw Error("Sampler: repeat_last_n must be >= -1, got " + std::to_string(params_.repeat_last_n));
  }
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n == 0) return;
  history_.push_back(token);
  if (params_.repeat_last_n > 0 && history_.size() > static_cast<size_t>(params_.repeat_last_n)) history_.pop_front();
}

void Sampler::reset() {
  history_.clear();
  rng_.seed(params_.seed);
}

int32_t Sampler::sample(std::span<const float> logits) {
  using namespace sampling;
  std::vector<TokenCandidate> c = candidates(logits);
  std::vector<int32_t> recent(history_.begin(), history_.end());
  apply_penalties(c, recent, params_.repeat_penalty, params_.frequency_penalty, params_.presence_penalty);
  if (params_.temperature <= 0.0f) return greedy(c);
  apply_top_k(c, params_.top_k);
  apply_top_p(c, params_.top_p);
  apply_min_p(c, params_.min_p);
  apply_temperature(c, params_.temperature);
  softmax(c);
  // 32 random bits -> [0, 1): exact in a double, never 1.
  double u = static_cast<double>(rng_()) / 4294967296.0;
  return draw(c, u);
}

}  // namespace kiln::llm
