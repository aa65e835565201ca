#pragma once
// Text <-> token ids for the LLM runtime, and chat templates.
//
// Two tokenizer families, as llama.cpp and Hugging Face `tokenizers` run them:
// - byte-level BPE (GPT-2, Llama 3, Qwen 2, SmolLM): the text is split by the
//   pre-tokenizer's regexes (run with PCRE2, UTF + UCP), each piece's bytes are
//   mapped to GPT-2's printable byte alphabet and merged by merge rank;
// - SentencePiece BPE (Llama 2, Mistral): spaces become U+2581, a dummy prefix
//   space is added, adjacent pieces are merged by highest score, and characters
//   outside the vocabulary fall back to <0xXX> byte tokens.
//
// A Tokenizer is built from a Hugging Face tokenizer.json or from a
// TokenizerSpec, the plain form of GGUF's tokenizer.ggml.* metadata (so the
// runtime fills it from a GGUF file; this header knows nothing of GGUF).
//
// Differences from Hugging Face worth knowing: normalizers other than
// Prepend/Replace (the SentencePiece ones), e.g. Qwen 2's NFC, are not applied;
// added tokens' lstrip/rstrip/normalized flags are ignored; chat templates are
// not run by a Jinja engine: the common families are recognised and written
// by hand (see apply_chat_template).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::llm {

// GGUF's tokenizer.ggml.token_type values (also SentencePiece's piece types).
enum class TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

// GGUF tokenizer metadata, field for field.
struct TokenizerSpec {
  std::string model = "gpt2";       // tokenizer.ggml.model: "gpt2" (byte-level BPE) | "llama" (SentencePiece)
  std::string pre = "default";      // tokenizer.ggml.pre: "llama-bpe", "qwen2", "smollm", "gpt-2", "default", ...
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens (id = index)
  std::vector<float> scores;        // tokenizer.ggml.scores (SentencePiece merge priority); may be empty for gpt2
  std::vector<int32_t> token_type;  // tokenizer.ggml.token_type (TokenType values); empty = all normal
  std::vector<std::string> merges;  // tokenizer.ggml.merges, "left right" (gpt2 only)
  int32_t bos_id = -1;              // tokenizer.ggml.bos_token_id; -1 = none
  int32_t eos_id = -1;              // tokenizer.ggml.eos_token_id
  int32_t eot_id = -1;              // tokenizer.ggml.eot_token_id (end of turn)
  int32_t unk_id = -1;              // tokenizer.ggml.unknown_token_id
  int32_t pad_id = -1;              // tokenizer.ggml.padding_token_id
  std::optional<bool> add_bos;      // tokenizer.ggml.add_bos_token; unset = the family's default (llama.cpp's)
  std::optional<bool> add_eos;      // tokenizer.ggml.add_eos_token; unset = false
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix; unset = true for "llama"
  std::string chat_template;        // tokenizer.chat_template
};

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

// The chat template families written by hand (what the HF Jinja templates of
// those models give for plain system/user/assistant conversations).
enum class ChatTemplate {
  none,      // no recognised template
  chatml,    // <|im_start|>role\n...<|im_end|>\n (Qwen 2/2.5/3, SmolLM 2, ...)
  llama3,    // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  llama2,    // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s>
  mistral,   // <s>[INST] ... [/INST]...</s> (Mistral Instruct v0.1/v0.2)
  gemma,     // <start_of_turn>user\n...<end_of_turn>\n (Gemma 1/2; "model" for assistant)
};

// Recognises the family from a template's text (Jinja source), else from a
// GGUF general.architecture ("llama", "qwen2", "qwen3", ...); none if neither tells.
ChatTemplate detect_chat_template(std::string_view template_text, std::string_view architecture = {});

class Tokenizer {
 public:
  // Hugging Face tokenizer.json (BPE models). from_file also reads a
  // tokenizer_config.json next to it, when present, for the bos/eos/pad
  // tokens and chat_template; whether bos/eos frame a text comes from the
  // tokenizer.json's post-processor, as in `tokenizers`.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {});
  explicit Tokenizer(const TokenizerSpec& spec);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // add_special: prepend bos / append eos where the model asks for them.
  // parse_special: control and added tokens written in the text ("<|im_end|>")
  // become their ids; otherwise they are tokenized as plain text.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true, bool parse_special = false) const;
  // Concatenated pieces (the leading dummy-prefix space of SentencePiece
  // models is dropped); skip_special leaves out control tokens (bos/eos, ...).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes one token stands for (may be an incomplete UTF-8 sequence);
  // control tokens give their text ("<|eot_id|>").
  std::string token_to_piece(int32_t id) const;
  // The vocabulary entry as stored (byte-level alphabet / U+2581 forms).
  const std::string& id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;

  int32_t vocab_size() const;
  int32_t bos() const;  // -1 when the model has none
  int32_t eos() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;
  bool add_eos() const;
  // End of generation: eos, eot and the usual end-of-turn tokens present in
  // the vocabulary (<|eot_id|>, <|eom_id|>, <|im_end|>, <|endoftext|>, <|end|>, </s>, <end_of_turn>).
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;
  bool is_control(int32_t id) const;

  const std::string& chat_template() const;  // template text ("" if none)
  ChatTemplate chat_template_kind() const;   // detected from that text
  // The prompt text for a conversation (feed it to encode with
  // parse_special=true; the bos it starts with is already written out, so
  // encode with add_special=false). Throws kiln::Error when no family is known.
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;
  std::string apply_chat_template(ChatTemplate kind, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt = true) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns ids into text as they are generated: put() returns the text that is
// complete so far, holding back a trailing incomplete UTF-8 sequence until the
// tokens that finish it arrive; bytes that can never form valid UTF-8 come out
// as U+FFFD. Generated ids continue a prompt, so every piece is kept whole
// (llama.cpp's token_to_piece); with starts_text the ids are the whole text
// and, as decode() does, the SentencePiece dummy-prefix space is dropped: then
// for valid UTF-8 the concatenation of put() results and flush() equals
// tokenizer.decode(all ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false, bool starts_text = false);
  std::string put(int32_t id);
  // Whatever is held back (an incomplete sequence at the end of generation),
  // with invalid bytes replaced by U+FFFD; resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool starts_text_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace kiln::llm
