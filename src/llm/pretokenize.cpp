// Pre-tokenization: Hugging Face's split regexes run as they are with PCRE2
// (UTF + UCP gives \p{L}, \p{N} and Unicode \s; lookahead is native), JIT
// compiled, and GPT-2's byte alphabet that byte-level BPE works in.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "kiln/error.h"
#include "llm/tokenizer_impl.h"

namespace kiln::llm {

const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}  // namespace

std::vector<std::string> pre_tokenizer_regexes(const std::string& pre) {
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") return {kGpt2Regex};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "falcon3" || pre == "dbrx" ||
      pre == "smaug-bpe") {
    return {kLlama3Regex};
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "megrez") return {kQwen2Regex};
  // SmolLM: Digits(individual_digits) then GPT-2's ByteLevel regex.
  if (pre == "smollm") return {R"(\p{N})", kGpt2Regex};
  throw Error("Tokenizer: unsupported tokenizer.ggml.pre \"" + pre +
              "\" (known: default, gpt-2, llama-bpe, llama3, qwen2, smollm, falcon3, dbrx, smaug-bpe, deepseek-r1-qwen)");
}

Regex::Regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw Error("Tokenizer: bad pre-tokenizer regex at offset " + std::to_string(offset) + ": " +
                reinterpret_cast<char*>(msg) + " in \"" + pattern + "\"");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is unavailable
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::split(std::string_view text, std::vector<std::string_view>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, last = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, 0, md, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH: the rest is one gap
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e == b) {  // an empty match splits nothing: step over one character
      pos = b + utf8_char_len(text, b);
      continue;
    }
    if (b > last) out.push_back(text.substr(last, b - last));
    out.push_back(text.substr(b, e - b));
    pos = last = e;
  }
  if (last < text.size()) out.push_back(text.substr(last));
  pcre2_match_data_free(md);
}

namespace {

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Printable bytes stand for themselves; the others (controls, space, DEL,
// NBSP, soft hyphen) take code points from U+0100 on, in byte order.
struct ByteAlphabet {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> to_byte{};  // code point -> byte, -1 if none
  ByteAlphabet() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      int cp = printable ? b : next++;
      to_unicode[b] = utf8_encode(static_cast<uint32_t>(cp));
      to_byte[cp] = b;
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return alphabet().to_unicode[b]; }

bool unicode_to_bytes(std::string_view token, std::string& out) {
  const auto& a = alphabet();
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    auto c = static_cast<unsigned char>(token[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;  // the alphabet stops at U+0143: two bytes at most
    }
    if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return false;
    bytes += static_cast<char>(a.to_byte[cp]);
  }
  out += bytes;
  return true;
}

size_t utf8_char_len(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

}  // namespace kiln::llm
