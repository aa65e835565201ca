// Prefill in chunks, then one token per step. Greedy decoding keeps the
// argmax on the device and queues step t+1 (async_eval) before reading
// token t back, so the host's read-back and callback overlap the device's
// next step; a host sampler needs the logits first and cannot overlap.
#include <chrono>
#include <optional>

#include "kiln/llm.h"
#include "kiln/ops.h"

namespace kiln::llm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerateStats generate(const Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                       const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) throw Error("[llm::generate] the prompt has no tokens");
  if (opt.prefill_chunk <= 0) {
    throw Error("[llm::generate] prefill_chunk must be positive, got " + std::to_string(opt.prefill_chunk));
  }
  const int vocab = model.config().vocab_size;
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab) {
      throw Error("[llm::generate] prompt token " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(vocab));
    }
  }
  std::optional<StreamContext> ctx;
  if (!std::holds_alternative<std::monostate>(opt.stream)) ctx.emplace(opt.stream);
  std::vector<nn::KVCache> caches = model.make_caches();
  GenerateStats stats;
  stats.prompt_tokens = static_cast<int>(prompt.size());
  if (opt.max_tokens <= 0) return stats;

  // logits [1, 1, vocab] -> the next token: a lazy int32 [1, 1] when
  // greedy, else sampled on the host from evaluated logits.
  auto next_token = [&](const array& logits) {
    if (!opt.sampler) return astype(argmax(logits, -1), int32);
    array flat = reshape(logits, {vocab});
    eval(flat);
    return array(std::vector<int32_t>{opt.sampler(flat.data<float>(), vocab)}, {1, 1});
  };
  auto stop = [&](int32_t id) { return opt.is_stop && opt.is_stop(id); };

  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(prompt.size());
  array logits = array(0.0f);
  for (int begin = 0; begin < n; begin += opt.prefill_chunk) {
    const int end = std::min(n, begin + opt.prefill_chunk);
    array chunk(std::vector<int32_t>(prompt.begin() + begin, prompt.begin() + end), {1, end - begin});
    logits = model.forward(chunk, caches, /*last_only=*/true);
    if (end < n) {
      // Compute this chunk's keys and values before building the next one's graph.
      std::vector<array> kv;
      for (auto& c : caches) kv.insert(kv.end(), {*c.key_buffer(), *c.value_buffer()});
      eval(kv);
    }
  }
  array y = next_token(logits);
  int32_t tok = y.item<int32_t>();
  stats.prompt_seconds = seconds_since(t0);
  if (!on_token(tok) || stop(tok)) return stats;

  const auto t1 = std::chrono::steady_clock::now();
  auto step = [&](const array& last) { return next_token(model.forward(last, caches, /*last_only=*/true)); };
  // Greedy: `pending` is the step the device is running while the host
  // builds the one after it and reads the pending token back.
  std::optional<array> pending;
  if (!opt.sampler && opt.max_tokens > 1) {
    pending = step(y);
    async_eval(*pending);
  }
  for (int i = 1; i < opt.max_tokens; ++i) {
    array cur = opt.sampler ? step(y) : *pending;
    if (!opt.sampler && i + 1 < opt.max_tokens) {
      pending = step(cur);
      async_eval(*pending);
    }
    tok = cur.item<int32_t>();
    ++stats.decode_tokens;
    y = cur;
    if (!on_token(tok) || stop(tok)) break;
  }
  stats.decode_seconds = seconds_since(t1);
  return stats;
}

}  // namespace kiln::llm
