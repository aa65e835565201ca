#pragma once
// What a Tokenizer holds, whichever file it was built from: the vocabulary,
// how text is cut into words (pre-tokenization) and how words are merged.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/tokenizer.h"

namespace kiln::llm {

// One compiled PCRE2 pattern (UTF + UCP, invalid UTF-8 never matches).
class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Hugging Face's Split(behavior = Isolated): every match is a piece and so
  // is every stretch of text between matches.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  void* code_;
};

// The pre-tokenizer regexes of the byte-level families (llama.cpp's
// tokenizer.ggml.pre names); throws for a name it does not know.
std::vector<std::string> pre_tokenizer_regexes(const std::string& pre);
extern const char* const kGpt2Regex;

// GPT-2's printable stand-ins for the 256 byte values.
const std::string& byte_to_unicode(uint8_t b);
// Maps a byte-level token back to bytes; false if some character is not in
// the alphabet (then the token is taken as raw text).
bool unicode_to_bytes(std::string_view token, std::string& out);

// Length of the UTF-8 sequence starting at s[i] (1 for an invalid byte).
size_t utf8_char_len(std::string_view s, size_t i);

struct Tokenizer::Impl {
  // byte_level: GPT-2 style bytes -> alphabet, merges by rank.
  // Otherwise SentencePiece style: U+2581 for spaces, merges of UTF-8
  // characters, by rank (HF merges) or by score (GGUF "llama").
  bool byte_level = true;
  bool merge_by_score = false;
  bool ignore_merges = false;  // a word found whole in the vocabulary is one token (Llama 3)
  bool byte_fallback = false;  // unknown characters become <0xXX> tokens
  bool add_prefix_space = false;  // byte-level: a space before text that lacks one
  bool escape_spaces = false;     // SentencePiece: ' ' -> U+2581
  bool space_prefix = false;      // SentencePiece: dummy prefix U+2581 before each text fragment
  bool split_on_metaspace = false;  // HF Metaspace(split = true): words start at U+2581
  bool strip_leading_space = false;  // decode drops the dummy prefix's space

  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::unordered_map<std::string, int32_t> ids;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::vector<std::unique_ptr<Regex>> pre;  // applied in turn, each splitting the pieces of the last
  int32_t byte_ids[256];                    // <0xXX> tokens, -1 where absent

  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  std::vector<int32_t> eog;
  // Tokens matched in the text before pre-tokenization, by first byte,
  // longest first.
  std::vector<int32_t> specials[256];
  std::string chat_template;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  // Fills ids, byte_ids, eog and specials from tokens/types (call once the
  // vocabulary is in place); checks the special ids are in range.
  void finish(const char* origin);
  void add_merge(const std::string& left, const std::string& right, int32_t rank);
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const;
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
  std::string piece(int32_t id) const;
};

}  // namespace kiln::llm
