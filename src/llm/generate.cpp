// Prefill in chunks, then one token per step through a Decoder. Greedy
// decoding keeps the argmax on the device and queues step t+1 (async_eval)
// before reading token t back, so the host's read-back and callback overlap
// the device's next step; a host sampler needs the logits first and cannot
// overlap.
//
// The compiled step's inputs are moved out of the Decoder into the call and
// dropped after it, so the graph's slice_update nodes are the buffers' only
// owners and write the new token in place. Its token and next position are
// written the same way, into slots the Decoder keeps (kSlots of each, taken
// in turn): a step then reads and writes the same addresses as the step
// kSlots before it, which is what lets the GPU replay its CUDA graph instead
// of recording it (backend/cuda/graph_plan.h). A slot can be written only
// when nobody holds its last token any more: greedy generation holds token
// t while it queues step t + 1 (two slots would do), three leave a caller
// room to keep one more.
#include <chrono>
#include <optional>

#include "kiln/compile.h"
#include "kiln/llm.h"
#include "kiln/ops.h"

namespace kiln::llm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Decoder::Decoder(const Model& model, std::vector<nn::KVCache> caches, bool compiled, int step)
    : model_(&model), compiled_(compiled), step_(step) {
  if (caches.empty() || caches[0].empty()) throw Error("[llm::Decoder] needs prefilled caches");
  if (step <= 0) throw Error("[llm::Decoder] step must be positive, got " + std::to_string(step));
  offset_ = caches[0].offset();
  if (!compiled) {
    caches_ = std::move(caches);
    return;
  }
  for (const nn::KVCache& c : caches) {
    if (c.offset() != offset_) throw Error("[llm::Decoder] the caches hold different numbers of tokens");
    buffers_.push_back(*c.key_buffer());
    buffers_.push_back(*c.value_buffer());
  }
  caches.clear();  // the buffers' only owner is now this Decoder
  position_ = array(std::vector<int32_t>{offset_}, {1});
  std::shared_ptr<int> traces = traces_;
  fn_ = compile([&model, traces](const std::vector<array>& in) {
    ++*traces;
    // in: token, position, the slots this step writes its token and the
    // next position into (see step()), then the buffers.
    std::vector<array> step_in = {in[0], in[1]};
    step_in.insert(step_in.end(), in.begin() + 4, in.end());
    std::vector<array> out = model.decode_step(step_in);
    const array best = astype(argmax(out[0], -1), int32);
    const array next = slice_update(in[2], best, {0, 0}, {best.shape(0), 1});
    const array position = slice_update(in[3], in[1] + array(1, int32), {0}, {1});
    out.insert(out.begin() + 1, {next, position});
    return out;  // logits, argmax, position + 1, buffers
  });
}

int Decoder::capacity() const {
  if (!compiled_) return caches_[0].key_buffer()->shape(2);
  return buffers_[0].shape(2);
}

void Decoder::grow() {
  for (array& b : buffers_) {
    b = concatenate({b, zeros({b.shape(0), b.shape(1), step_, b.shape(3)}, b.dtype())}, 2);
  }
}

std::pair<array, array> Decoder::step(const array& token) {
  if (!compiled_) {
    ++*traces_;
    array logits = model_->forward(token, caches_, /*last_only=*/true);
    ++offset_;
    return {logits, astype(argmax(logits, -1), int32)};
  }
  if (offset_ >= capacity()) grow();
  const int batch = token.ndim() == 2 ? token.shape(0) : 1;
  if (slots_.empty() || slots_[0].shape(0) != batch) {
    slots_.clear();
    for (int r = 0; r < kSlots; ++r) {
      slots_.push_back(zeros({batch, 1}, int32));
      slots_.push_back(zeros({1}, int32));
    }
  }
  const size_t k = 2 * static_cast<size_t>(offset_ % kSlots);
  std::vector<array> in = {token, *position_, std::move(slots_[k]), std::move(slots_[k + 1])};
  for (array& b : buffers_) in.push_back(std::move(b));
  buffers_.clear();
  std::vector<array> out = fn_(in);
  in.clear();
  position_ = out[2];
  slots_[k] = out[1];
  slots_[k + 1] = out[2];
  buffers_.assign(out.begin() + 3, out.end());
  ++offset_;
  return {out[0], out[1]};
}

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
  Decoder decoder(model, std::move(caches), opt.compile);
  // Greedy takes the step's own argmax; a host sampler reads the logits.
  auto step = [&](const array& last) {
    const auto s0 = std::chrono::steady_clock::now();
    auto [step_logits, best] = decoder.step(last);
    stats.decode_build_seconds += seconds_since(s0);
    return opt.sampler ? next_token(step_logits) : best;
  };
  auto queue = [&](const array& a) {
    const auto s0 = std::chrono::steady_clock::now();
    async_eval(a);
    stats.decode_eval_seconds += seconds_since(s0);
  };
  // Greedy: `pending` is the step the device is running while the host
  // builds the one after it and reads the pending token back.
  std::optional<array> pending;
  if (!opt.sampler && opt.max_tokens > 1) {
    pending = step(y);
    queue(*pending);
  }
  for (int i = 1; i < opt.max_tokens; ++i) {
    array cur = opt.sampler ? step(y) : *pending;
    if (!opt.sampler && i + 1 < opt.max_tokens) {
      pending = step(cur);
      queue(*pending);
    }
    const auto s0 = std::chrono::steady_clock::now();
    tok = cur.item<int32_t>();
    stats.decode_wait_seconds += seconds_since(s0);
    ++stats.decode_tokens;
    // Greedy holds no token past its step: the CUDA-graph plans of the
    // steps two back reuse their buffers (three replayed graphs in turn).
    if (opt.sampler) y = cur;
    if (!on_token(tok) || stop(tok)) break;
  }
  stats.decode_seconds = seconds_since(t1);
  return stats;
}

}  // namespace kiln::llm
