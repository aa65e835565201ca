#pragma once
// Next-token sampling on host logits, llama.cpp's chain in llama.cpp's order:
//   penalties (repetition / frequency / presence over the last n tokens)
//   -> top-k -> top-p -> min-p -> temperature -> draw from the softmax.
// temperature <= 0 is greedy: the argmax after the penalties.
// The draw uses a 32-bit Mersenne Twister seeded with `seed` and our own
// inverse-CDF walk (not std::discrete_distribution), so a seed gives the same
// tokens with every standard library.
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace kiln::llm {

struct SamplerParams {
  float temperature = 0.8f;        // <= 0: greedy
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off; > 1 discourages repeats
  float frequency_penalty = 0.0f;  // subtracted count times
  float presence_penalty = 0.0f;   // subtracted once if present
  int32_t repeat_last_n = 64;      // penalty window; 0: off, -1: the whole history
  uint32_t seed = 0x5eed;
};

// One vocabulary entry in the chain. p is filled by softmax().
struct TokenCandidate {
  int32_t id;
  float logit;
  float p;
};

// The stages, usable one by one (each keeps at least min_keep candidates).
// They leave the survivors sorted by logit, descending, except apply_penalties
// and apply_temperature, which keep the order they are given.
namespace sampling {
std::vector<TokenCandidate> candidates(std::span<const float> logits);
// llama.cpp's rule: a positive logit is divided by repeat, a negative one
// multiplied; then count * frequency + (count > 0) * presence is subtracted.
void apply_penalties(std::vector<TokenCandidate>& c, std::span<const int32_t> recent, float repeat,
                     float frequency, float presence);
void apply_top_k(std::vector<TokenCandidate>& c, int32_t k, size_t min_keep = 1);
// Keeps the smallest prefix (by probability) whose mass reaches p.
void apply_top_p(std::vector<TokenCandidate>& c, float p, size_t min_keep = 1);
// Keeps candidates with probability >= min_p * the largest probability.
void apply_min_p(std::vector<TokenCandidate>& c, float min_p, size_t min_keep = 1);
void apply_temperature(std::vector<TokenCandidate>& c, float temperature);
void softmax(std::vector<TokenCandidate>& c);
int32_t greedy(const std::vector<TokenCandidate>& c);
// Draws with u uniform in [0, 1) by walking the cumulative probabilities.
int32_t draw(const std::vector<TokenCandidate>& c, double u);
}  // namespace sampling

class Sampler {
 public:
  explicit Sampler(SamplerParams params = {});
  // Samples a token id from one row of logits (vocabulary size entries).
  // Does not record it: call accept() with the token actually used.
  int32_t sample(std::span<const float> logits);
  // Adds a token to the penalty history (prompt tokens too, if wanted).
  void accept(int32_t token);
  // Clears the history and reseeds.
  void reset();
  const SamplerParams& params() const { return params_; }

 private:
  SamplerParams params_;
  std::mt19937 rng_;
  std::deque<int32_t> history_;
};

}  // namespace kiln::llm
