// Tokenizer: special-token splitting, the BPE merge loop shared by both
// families, decoding, and construction from a GGUF-style TokenizerSpec.
//
// The merge loop is llama.cpp's / tokenizers' one: symbols in a linked list,
// candidate pairs in a priority queue ordered by (priority, position); a
// popped pair is used only if both symbols are still what they were when it
// was queued. Priority is the merge rank (byte-level, HF merges) or minus the
// merged piece's score (SentencePiece). Words are cached.
#include <algorithm>
#include <queue>

#include "kiln/error.h"
#include "llm/tokenizer_impl.h"

namespace kiln::llm {

namespace {

const std::string kMetaspace = "\xE2\x96\x81";  // U+2581

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, from.size(), from) == 0) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

// <0xXX> -> XX, else -1.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

void Tokenizer::Impl::finish(const char* origin) {
  if (tokens.empty()) throw Error(std::string(origin) + ": empty vocabulary");
  types.resize(tokens.size(), TokenType::normal);
  std::fill(std::begin(byte_ids), std::end(byte_ids), -1);
  ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    ids.emplace(tokens[i], static_cast<int32_t>(i));
    int b = parse_byte_token(tokens[i]);
    if (b >= 0 && (types[i] == TokenType::byte || !byte_level)) byte_ids[b] = static_cast<int32_t>(i);
    if (types[i] == TokenType::control || types[i] == TokenType::user_defined) {
      if (!tokens[i].empty()) specials[static_cast<uint8_t>(tokens[i][0])].push_back(static_cast<int32_t>(i));
    }
  }
  for (auto& bucket : specials) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](int32_t a, int32_t b) { return tokens[a].size() > tokens[b].size(); });
  }
  auto n = static_cast<int32_t>(tokens.size());
  for (auto [name, v] : std::initializer_list<std::pair<const char*, int32_t>>{
           {"bos", bos}, {"eos", eos}, {"eot", eot}, {"unk", unk}, {"pad", pad}}) {
    if (v < -1 || v >= n) {
      throw Error(std::string(origin) + ": " + name + " id " + std::to_string(v) + " outside the vocabulary of " +
                  std::to_string(n));
    }
  }
  auto add_eog = [&](int32_t id) {
    if (id >= 0 && std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
  };
  add_eog(eos);
  add_eog(eot);
  for (const char* t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>", "</s>",
                        "<end_of_turn>", "<|end_of_text|>"}) {
    auto it = ids.find(t);
    if (it != ids.end() && types[it->second] == TokenType::control) add_eog(it->second);
  }
}

void Tokenizer::Impl::add_merge(const std::string& left, const std::string& right, int32_t rank) {
  auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
  if (l == ids.end() || r == ids.end() || m == ids.end()) return;  // a merge of unknown tokens is never used
  merges.emplace(pair_key(l->second, r->second), std::pair{rank, m->second});
}

void Tokenizer::Impl::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = ids.find(word);
    if (it != ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id;  // -1: a character outside the vocabulary
    int prev, next;
    size_t off, len;
  };
  std::vector<Sym> sym;
  for (size_t i = 0; i < word.size();) {
    size_t n = byte_level ? byte_to_unicode(static_cast<uint8_t>(word[i])).size() : utf8_char_len(word, i);
    auto it = ids.find(word.substr(i, n));
    sym.push_back({it == ids.end() ? -1 : it->second, static_cast<int>(sym.size()) - 1,
                   static_cast<int>(sym.size()) + 1, i, n});
    i += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Cand {
    double priority;
    int left, right;
    int32_t left_id, right_id, merged;
    bool operator<(const Cand& o) const {  // std::priority_queue pops the largest
      return priority != o.priority ? priority > o.priority : left > o.left;
    }
  };
  std::priority_queue<Cand> queue;
  auto propose = [&](int l, int r) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    if (merge_by_score) {
      auto it = ids.find(word.substr(sym[l].off, sym[l].len + sym[r].len));
      if (it == ids.end()) return;
      TokenType t = types[it->second];
      if (t != TokenType::normal && t != TokenType::user_defined) return;
      float s = it->second < static_cast<int32_t>(scores.size()) ? scores[it->second] : 0.0f;
      queue.push({-static_cast<double>(s), l, r, sym[l].id, sym[r].id, it->second});
    } else {
      auto it = merges.find(pair_key(sym[l].id, sym[r].id));
      if (it == merges.end()) return;
      queue.push({static_cast<double>(it->second.first), l, r, sym[l].id, sym[r].id, it->second.second});
    }
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) propose(static_cast<int>(i), static_cast<int>(i) + 1);
  while (!queue.empty()) {
    Cand c = queue.top();
    queue.pop();
    Sym& l = sym[c.left];
    Sym& r = sym[c.right];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.id != c.left_id || r.id != c.right_id) continue;
    l.id = c.merged;
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.len = 0;
    propose(l.prev, c.left);
    propose(c.left, l.next);
  }
  for (int i = 0; i >= 0; i = sym[i].next) {
    const Sym& s = sym[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    bool all_bytes = byte_fallback;
    for (size_t k = 0; all_bytes && k < s.len; ++k) all_bytes = byte_ids[static_cast<uint8_t>(word[s.off + k])] >= 0;
    if (all_bytes) {
      for (size_t k = 0; k < s.len; ++k) out.push_back(byte_ids[static_cast<uint8_t>(word[s.off + k])]);
    } else if (unk >= 0) {
      // Consecutive unknown characters give one unk (HF's fuse_unk).
      bool fused = s.prev >= 0 && sym[s.prev].id < 0 && !out.empty() && out.back() == unk;
      if (!fused) out.push_back(unk);
    }
  }
}

void Tokenizer::Impl::encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  std::string t;
  if (byte_level) {
    if (add_prefix_space && !text.empty() && text[0] != ' ') t = " ";
    t += text;
  } else {
    if (space_prefix && after_special) t = " ";
    t += text;
    if (escape_spaces) t = replace_all(t, " ", kMetaspace);
  }
  if (t.empty()) return;
  std::vector<std::string_view> pieces{t};
  for (const auto& re : pre) {
    std::vector<std::string_view> next;
    for (auto p : pieces) re->split(p, next);
    pieces.swap(next);
  }
  if (split_on_metaspace) {
    std::vector<std::string_view> next;
    for (auto p : pieces) {
      size_t start = 0;
      for (size_t i = 1; i <= p.size(); ++i) {
        if (i == p.size() || p.compare(i, kMetaspace.size(), kMetaspace) == 0) {
          next.push_back(p.substr(start, i - start));
          start = i;
        }
      }
    }
    pieces.swap(next);
  }
  for (auto p : pieces) {
    std::string word;
    if (byte_level) {
      for (char c : p) word += byte_to_unicode(static_cast<uint8_t>(c));
    } else {
      word = p;
    }
    // Long words (a SentencePiece line, a whitespace run) are not worth caching.
    bool cacheable = word.size() <= 64;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      auto it = cache.find(word);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    size_t first = out.size();
    encode_word(word, out);
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (cache.size() > (1u << 16)) cache.clear();
      cache.emplace(std::move(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
  }
}

std::string Tokenizer::Impl::piece(int32_t id) const {
  const std::string& t = tokens[id];
  TokenType type = types[id];
  if (type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown) return t;
  if (byte_level) {
    std::string out;
    return unicode_to_bytes(t, out) ? out : t;
  }
  if (type == TokenType::byte || (byte_fallback && parse_byte_token(t) >= 0)) {
    return std::string(1, static_cast<char>(parse_byte_token(t)));
  }
  return escape_spaces || space_prefix ? replace_all(t, kMetaspace, " ") : t;
}

// ---- Tokenizer ----

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer::Tokenizer(const TokenizerSpec& spec) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  size_t n = spec.tokens.size();
  if (!spec.scores.empty() && spec.scores.size() != n) {
    throw Error("Tokenizer(TokenizerSpec): " + std::to_string(spec.scores.size()) + " scores for " +
                std::to_string(n) + " tokens");
  }
  if (!spec.token_type.empty() && spec.token_type.size() != n) {
    throw Error("Tokenizer(TokenizerSpec): " + std::to_string(spec.token_type.size()) + " token types for " +
                std::to_string(n) + " tokens");
  }
  m.tokens = spec.tokens;
  m.scores = spec.scores;
  for (int32_t t : spec.token_type) {
    if (t < 1 || t > 6) throw Error("Tokenizer(TokenizerSpec): token type " + std::to_string(t) + " is not 1..6");
    m.types.push_back(static_cast<TokenType>(t));
  }
  m.bos = spec.bos_id;
  m.eos = spec.eos_id;
  m.eot = spec.eot_id;
  m.unk = spec.unk_id;
  m.pad = spec.pad_id;
  m.chat_template = spec.chat_template;
  m.add_eos = spec.add_eos.value_or(false);
  if (spec.model == "gpt2") {
    m.byte_level = true;
    for (const auto& re : pre_tokenizer_regexes(spec.pre)) m.pre.push_back(std::make_unique<Regex>(re));
    m.ignore_merges = spec.pre == "llama-bpe" || spec.pre == "llama3" || spec.pre == "llama-v3";
    // llama.cpp: BPE models add no bos unless the pre-tokenizer's family does (Llama 3).
    m.add_bos = spec.add_bos.value_or(m.ignore_merges);
    m.finish("Tokenizer(TokenizerSpec)");
    for (size_t r = 0; r < spec.merges.size(); ++r) {
      const std::string& s = spec.merges[r];
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) throw Error("Tokenizer(TokenizerSpec): merge \"" + s + "\" has no space");
      m.add_merge(s.substr(0, sp), s.substr(sp + 1), static_cast<int32_t>(r));
    }
  } else if (spec.model == "llama") {
    if (spec.scores.empty()) throw Error("Tokenizer(TokenizerSpec): model \"llama\" needs scores");
    m.byte_level = false;
    m.merge_by_score = true;
    m.byte_fallback = true;
    m.escape_spaces = true;
    m.space_prefix = spec.add_space_prefix.value_or(true);
    m.strip_leading_space = m.space_prefix;
    m.add_bos = spec.add_bos.value_or(true);
    m.finish("Tokenizer(TokenizerSpec)");
  } else {
    throw Error("Tokenizer(TokenizerSpec): unsupported tokenizer.ggml.model \"" + spec.model +
                "\" (supported: gpt2, llama)");
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  if (add_special && m.add_bos && m.bos >= 0) out.push_back(m.bos);
  bool after_special = true;
  size_t start = 0;
  auto flush_text = [&](size_t end) {
    if (end > start) {
      m.encode_text(text.substr(start, end - start), after_special, out);
      after_special = false;
    }
  };
  for (size_t i = 0; i < text.size();) {
    int32_t hit = -1;
    for (int32_t id : m.specials[static_cast<uint8_t>(text[i])]) {
      const std::string& t = m.tokens[id];
      if (!parse_special && m.types[id] == TokenType::control) continue;
      if (text.compare(i, t.size(), t) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    flush_text(i);
    out.push_back(hit);
    after_special = true;
    i += m.tokens[hit].size();
    start = i;
  }
  flush_text(text.size());
  if (add_special && m.add_eos && m.eos >= 0) out.push_back(m.eos);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_control(id)) {
      (void)id_to_token(id);  // still range-checked
      continue;
    }
    std::string p = token_to_piece(id);
    if (out.empty() && impl_->strip_leading_space && !p.empty() && p[0] == ' ' && !is_control(id)) p.erase(0, 1);
    out += p;
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  (void)id_to_token(id);
  return impl_->piece(id);
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error("Tokenizer: token id " + std::to_string(id) + " outside the vocabulary of " +
                std::to_string(vocab_size()));
  }
  return impl_->tokens[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->ids.find(std::string(token));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::unk() const { return impl_->unk; }
int32_t Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
bool Tokenizer::is_eog(int32_t id) const {
  return std::find(impl_->eog.begin(), impl_->eog.end(), id) != impl_->eog.end();
}
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->types[id] == TokenType::control;
}
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

// ---- StreamDecoder ----

namespace {

// Bytes of s from `from` that form complete characters; an invalid byte
// becomes U+FFFD. With at_end, an incomplete tail is invalid too.
std::string take_complete(std::string& s, bool at_end) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (need == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t have = 1;
    while (have < need && i + have < s.size() && (static_cast<unsigned char>(s[i + have]) & 0xC0) == 0x80) ++have;
    if (have == need) {
      out.append(s, i, need);
      i += need;
    } else if (i + have == s.size() && !at_end) {
      break;  // may still be completed by the next token
    } else {
      out += "\xEF\xBF\xBD";
      i += have;
    }
  }
  s.erase(0, i);
  return out;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::put(int32_t id) {
  int32_t one[1] = {id};
  // Until some text has come out, decode() applies the leading-space rule.
  std::string p = first_ ? tokenizer_->decode(one, skip_special_)
                         : (skip_special_ && tokenizer_->is_control(id) ? std::string() : tokenizer_->token_to_piece(id));
  if (!p.empty()) first_ = false;
  pending_ += p;
  return take_complete(pending_, false);
}

std::string StreamDecoder::flush() {
  std::string out = take_complete(pending_, true);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace kiln::llm
