// Tokenizers against Hugging Face `tokenizers` and `sentencepiece`: the
// python side (tests/python/tokenizer_ref.py) trains small tokenizers offline
// and writes their files, GGUF-style specs and reference ids; every text must
// encode to the same ids, through tokenizer.json and through the spec, and
// decode back to itself. Skipped when python3 lacks those packages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "kiln/tokenizer.h"
#include "test_util.h"

using namespace kiln::llm;
using nlohmann::json;

namespace {

// The reference files, made once per run and removed at exit; "" when
// python cannot make them.
struct RefDir {
  std::string path;
  RefDir() {
    if (std::system("python3 -c 'import tokenizers, sentencepiece' >/dev/null 2>&1") != 0) return;
    auto d = std::filesystem::temp_directory_path() / ("kiln_tok_" + std::to_string(::getpid()));
    std::string cmd = "python3 " KILN_SOURCE_DIR "/tests/python/tokenizer_ref.py " + d.string();
    if (std::system(cmd.c_str()) == 0) path = d.string();
  }
  ~RefDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
};

const std::string& ref_dir() {
  static const RefDir dir;
  return dir.path;
}

#define REQUIRE_REF()                                                                         \
  if (ref_dir().empty()) GTEST_SKIP() << "python3 with tokenizers + sentencepiece not found " \
                                         "(pip install tokenizers sentencepiece)"

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TokenizerSpec spec_from(const json& j) {
  TokenizerSpec s;
  s.model = j.at("model").get<std::string>();
  s.pre = j.at("pre").get<std::string>();
  s.tokens = j.at("tokens").get<std::vector<std::string>>();
  if (j.contains("scores")) s.scores = j["scores"].get<std::vector<float>>();
  s.token_type = j.at("token_type").get<std::vector<int32_t>>();
  if (j.contains("merges")) s.merges = j["merges"].get<std::vector<std::string>>();
  s.bos_id = j.value("bos_id", -1);
  s.eos_id = j.value("eos_id", -1);
  s.unk_id = j.value("unk_id", -1);
  return s;
}

std::string show(const std::string& s) { return json(s).dump(); }

// Every reference text: same ids as the reference, and decode(ids) == text.
void check_against_reference(const Tokenizer& tok, const std::string& name, bool parse_special, bool add_special) {
  json ref = read_json(ref_dir() + "/" + name + ".ref.json");
  const auto& texts = ref.at("texts");
  int mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::string text = texts[i].get<std::string>();
    auto want = ref["ids"][i].get<std::vector<int32_t>>();
    auto got = tok.encode(text, add_special, parse_special);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << name << " text " << i << " " << show(text).substr(0, 200) << ": got " << json(got).dump()
                    << ", want " << json(want).dump();
    }
    // decode(encode(x)) == x, after the bos that add_special put first.
    std::vector<int32_t> body(got.begin() + (add_special && tok.add_bos() && !got.empty() ? 1 : 0), got.end());
    // (The dummy prefix after a special token stays in the text, as in HF.)
    if (name == "spm_hf" && text.rfind("<s>", 0) == 0) {
      EXPECT_EQ(tok.decode(body), "<s>  parsed </s>");
      continue;
    }
    // Metaspace gives " x" and "x" the same ids: no round trip for the former.
    if (name == "spm_meta" && (text.rfind("<s>", 0) == 0 || text.rfind(" ", 0) == 0)) continue;
    EXPECT_EQ(tok.decode(body), text) << name << " text " << i;
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << texts.size() << " texts differ";
}

class ByteLevel : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(ByteLevel, TokenizerJsonMatchesHuggingFace) {
  REQUIRE_REF();
  Tokenizer tok = Tokenizer::from_file(ref_dir() + "/" + GetParam() + ".json");
  check_against_reference(tok, GetParam(), /*parse_special=*/true, /*add_special=*/true);
}

TEST_P(ByteLevel, GgufSpecMatchesHuggingFace) {
  REQUIRE_REF();
  Tokenizer tok(spec_from(read_json(ref_dir() + "/" + GetParam() + ".spec.json")));
  check_against_reference(tok, GetParam(), /*parse_special=*/true, /*add_special=*/true);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, ByteLevel, ::testing::Values("gpt2", "llama3", "qwen2", "smollm"));

TEST(Tokenizer, SentencePieceSpecMatchesSentencePiece) {
  REQUIRE_REF();
  Tokenizer tok(spec_from(read_json(ref_dir() + "/spm.spec.json")));
  check_against_reference(tok, "spm", /*parse_special=*/false, /*add_special=*/false);
  // With add_special the bos comes first (Llama 2 adds it, no eos).
  auto ids = tok.encode("Hello world");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), tok.bos());
  EXPECT_NE(ids.back(), tok.eos());
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "Hello world");
}

TEST(Tokenizer, SentencePieceTokenizerJsonMatchesHuggingFace) {
  REQUIRE_REF();
  // Llama 2's tokenizer.json form: Prepend/Replace normalizer, merges, byte
  // fallback, <s> from the post-processor, a Strip decoder.
  Tokenizer tok = Tokenizer::from_file(ref_dir() + "/spm_hf.json");
  EXPECT_EQ(tok.id_to_token(tok.bos()), "<s>");
  EXPECT_EQ(tok.id_to_token(tok.eos()), "</s>");
  check_against_reference(tok, "spm_hf", /*parse_special=*/true, /*add_special=*/true);
}

TEST(Tokenizer, MetaspaceTokenizerJsonMatchesHuggingFace) {
  REQUIRE_REF();
  // Mistral v0.3's form: Metaspace(prepend_scheme = "first", split = false).
  Tokenizer tok = Tokenizer::from_file(ref_dir() + "/spm_meta.json");
  check_against_reference(tok, "spm_meta", /*parse_special=*/true, /*add_special=*/true);
}

TEST(Tokenizer, SentencePieceByteFallbackAndPieces) {
  REQUIRE_REF();
  Tokenizer tok(spec_from(read_json(ref_dir() + "/spm.spec.json")));
  // A character the model never saw becomes its UTF-8 bytes, <0xXX> tokens.
  std::string rare = "\xF0\x9F\xA6\x84";  // U+1F984
  auto ids = tok.encode(rare, false);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(tok.id_to_token(id));
  ASSERT_GE(pieces.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(pieces.end() - 4, pieces.end()),
            (std::vector<std::string>{"<0xF0>", "<0x9F>", "<0xA6>", "<0x84>"}));
  EXPECT_EQ(tok.token_to_piece(ids.back()), "\x84");
  EXPECT_EQ(tok.decode(ids), rare);
  // Spaces are U+2581 in the vocabulary and plain spaces in pieces.
  auto w = tok.encode(" the", false);
  EXPECT_EQ(tok.decode(w), " the");
}

TEST(Tokenizer, SpecialTokensSplitOnlyWhenAsked) {
  REQUIRE_REF();
  Tokenizer tok = Tokenizer::from_file(ref_dir() + "/qwen2.json");
  auto end = tok.token_to_id("<|im_end|>");
  ASSERT_TRUE(end.has_value());
  auto parsed = tok.encode("hi<|im_end|>", false, /*parse_special=*/true);
  ASSERT_EQ(parsed.back(), *end);
  auto plain = tok.encode("hi<|im_end|>", false, /*parse_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), *end), 0);
  EXPECT_EQ(tok.decode(plain), "hi<|im_end|>");
  EXPECT_EQ(tok.decode(parsed, /*skip_special=*/true), "hi");
  EXPECT_TRUE(tok.is_eog(*end));
  EXPECT_TRUE(tok.is_eog(tok.eos()));
  EXPECT_FALSE(tok.is_eog(parsed.front()));
}

TEST(Tokenizer, Llama3AddsBosFromThePostProcessor) {
  REQUIRE_REF();
  Tokenizer tok = Tokenizer::from_file(ref_dir() + "/llama3.json");
  ASSERT_GE(tok.bos(), 0);
  EXPECT_EQ(tok.id_to_token(tok.bos()), "<|begin_of_text|>");
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.encode("x").front(), tok.bos());
  EXPECT_NE(tok.encode("x", /*add_special=*/false).front(), tok.bos());
}

TEST(Tokenizer, StreamDecoderHoldsBackPartialCharacters) {
  REQUIRE_REF();
  for (const char* name : {"gpt2.json", "spm.spec.json"}) {
    std::string path = ref_dir() + "/" + name;
    Tokenizer tok = std::string(name) == "gpt2.json" ? Tokenizer::from_file(path)
                                                   : Tokenizer(spec_from(read_json(path)));
    std::string text = " 日本語 👨‍👩‍👧‍👦 e\u0301 ok \xF0\x9F\xA6\x84!";
    auto ids = tok.encode(text, false);
    // Byte tokens split characters: some token must end mid-character.
    bool split_somewhere = false;
    for (int32_t id : ids) {
      std::string p = tok.token_to_piece(id);
      split_somewhere |= !p.empty() && (static_cast<unsigned char>(p.back()) & 0x80) &&
                         (static_cast<unsigned char>(p.back()) & 0xC0) != 0x80;
      split_somewhere |= !p.empty() && (static_cast<unsigned char>(p[0]) & 0xC0) == 0x80;
    }
    EXPECT_TRUE(split_somewhere) << name;
    StreamDecoder dec(tok, /*skip_special=*/false, /*starts_text=*/true);
    std::string out;
    for (int32_t id : ids) {
      std::string part = dec.put(id);
      // Every part is whole characters.
      for (size_t i = 0; i < part.size();) {
        auto c = static_cast<unsigned char>(part[i]);
        size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        ASSERT_LE(i + n, part.size()) << name;
        i += n;
      }
      out += part;
    }
    out += dec.flush();
    EXPECT_EQ(out, tok.decode(ids)) << name;
    EXPECT_EQ(out, text) << name;
    // Continuing a prompt, the first piece keeps the dummy prefix's space.
    StreamDecoder cont(tok);
    std::string all;
    for (int32_t id : ids) all += cont.put(id);
    all += cont.flush();
    EXPECT_EQ(all, (std::string(name) == "gpt2.json" ? "" : " ") + text) << name;
  }
}

TEST(Tokenizer, EncodesFromManyThreads) {
  REQUIRE_REF();
  // The word cache is shared: threads encoding the same texts agree.
  Tokenizer tok = Tokenizer::from_file(ref_dir() + "/llama3.json");
  json ref = read_json(ref_dir() + "/llama3.ref.json");
  std::vector<std::string> texts;
  for (const auto& t : ref["texts"]) texts.push_back(t.get<std::string>());
  std::vector<std::vector<std::vector<int32_t>>> got(4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (size_t i = 0; i < texts.size(); ++i) {
        got[w].push_back(tok.encode(texts[(i + 97 * w) % texts.size()], true, /*parse_special=*/true));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) {
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(got[w][i], ref["ids"][(i + 97 * w) % texts.size()].get<std::vector<int32_t>>()) << w << " " << i;
    }
  }
}

TEST(Tokenizer, StreamDecoderFlushesInvalidTails) {
  REQUIRE_REF();
  Tokenizer tok = Tokenizer::from_file(ref_dir() + "/gpt2.json");
  // The first byte of a 3-byte character alone, then nothing.
  auto ids = tok.encode("\xE6\x97\xA5", false);
  int32_t lead = -1;
  for (int32_t id : ids) {
    if (tok.token_to_piece(id) == "\xE6") lead = id;
  }
  if (lead < 0) {
    auto t = tok.token_to_id("\xC3\xA6");  // byte 0xE6 in GPT-2's alphabet
    ASSERT_TRUE(t.has_value());
    lead = *t;
  }
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.put(lead), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.put(*tok.token_to_id("a")), "a");
}

// Without the python oracles: hand-made vocabularies with known answers.
TEST(Tokenizer, HandMadeByteLevelMergesByRank) {
  TokenizerSpec s;  // GPT-2's alphabet: printable bytes are themselves, the rest U+0100...
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = printable ? b : next++;
    std::string u = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                              : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    s.tokens.push_back(u);
  }
  const std::string G = "\xC4\xA0";  // U+0120: the space
  for (std::string t : {"ll", "he", "hell", "hello", "\xC4\xA0hello"}) s.tokens.push_back(t);
  s.merges = {"l l", "h e", "he ll", "hell o", G + " hello"};
  Tokenizer tok(s);
  EXPECT_EQ(tok.encode("hello hello"), (std::vector<int32_t>{259, 260}));
  EXPECT_EQ(tok.encode("hellx"), (std::vector<int32_t>{258, 'x'}));
  EXPECT_EQ(tok.encode(" \n"), (std::vector<int32_t>{' ', '\n'}));  // no merge: the bytes themselves
  EXPECT_EQ(tok.token_to_piece(260), " hello");
  EXPECT_EQ(tok.decode(tok.encode("ab\xF0\x9F\x98\x80 hello")), "ab\xF0\x9F\x98\x80 hello");
}

TEST(Tokenizer, HandMadeSentencePieceMergesByScore) {
  TokenizerSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.token_type = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    s.tokens.push_back(hex);
    s.token_type.push_back(6);
  }
  const std::string M = "\xE2\x96\x81";  // U+2581
  std::vector<std::pair<std::string, float>> pieces = {
      {M, -10}, {"h", -10}, {"e", -10}, {"l", -10}, {"o", -10}, {M + "h", -1},
      {"he", -2}, {"ll", -3}, {M + "he", -0.5f}, {"llo", -4}, {M + "hello", -5}};
  s.scores.assign(s.tokens.size(), 0.0f);
  for (auto& [p, score] : pieces) {
    s.tokens.push_back(p);
    s.token_type.push_back(1);
    s.scores.push_back(score);
  }
  s.bos_id = 1;
  s.eos_id = 2;
  s.unk_id = 0;
  Tokenizer tok(s);
  // ▁h (-1) first, then ▁he (-0.5), ll (-3), llo (-4), ▁hello (-5).
  EXPECT_EQ(tok.encode("hello"), (std::vector<int32_t>{1, 269}));
  EXPECT_EQ(tok.encode("hello", false), (std::vector<int32_t>{269}));
  // é is not in the vocabulary: its UTF-8 bytes C3 A9 as byte tokens.
  EXPECT_EQ(tok.encode("h\xC3\xA9", false), (std::vector<int32_t>{264, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.decode(tok.encode("h\xC3\xA9 hello", false)), "h\xC3\xA9 hello");
  EXPECT_EQ(tok.decode(tok.encode("hello"), /*skip_special=*/false), "<s> hello");  // as HF's Strip decoder
  EXPECT_TRUE(tok.is_eog(2));
}

TEST(Tokenizer, BadInputsAreErrors) {
  TokenizerSpec s;
  s.model = "gpt2";
  s.tokens = {"a", "b", "ab"};
  s.merges = {"a b"};
  Tokenizer tok(s);
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{2}));
  EXPECT_TRUE(kiln::test::throws_error([&] { tok.decode(std::vector<int32_t>{7}); }, {"Tokenizer", "7", "3"}));
  EXPECT_TRUE(kiln::test::throws_error([&] { tok.token_to_piece(-1); }, {"Tokenizer", "-1"}));
  TokenizerSpec bad = s;
  bad.model = "wordpiece";
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer t(bad); }, {"wordpiece", "gpt2", "llama"}));
  bad = s;
  bad.pre = "no-such-pre";
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer t(bad); }, {"no-such-pre"}));
  bad = s;
  bad.scores = {1.0f};
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer t(bad); }, {"1 scores", "3 tokens"}));
  bad = s;
  bad.eos_id = 5;
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer t(bad); }, {"eos", "5"}));
  bad = s;
  bad.model = "llama";
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer t(bad); }, {"scores"}));
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer::from_json("{not json"); }, {"from_json", "JSON"}));
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer::from_json(R"({"model":{"type":"WordPiece"}})"); },
                                       {"WordPiece"}));
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer::from_file("/no/such/tokenizer.json"); }, {"/no/such"}));
  // Ids that are not small integers: a float, a huge one, a negative one.
  for (const char* id : {"1.5", "1e40", "2147483647", "-1"}) {
    const std::string text = std::string(R"({"model":{"type":"BPE","vocab":{"a":0,"b":)") + id + R"(},"merges":[]}})";
    EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer::from_json(text); }, {"from_json", "\"b\"", "2^24"})) << id;
  }
}

// Chat templates: the families' Hugging Face templates rendered by jinja2
// (tests/python/chat_template_ref.py) against apply_chat_template.
TEST(ChatTemplate, MatchesTheJinjaTemplates) {
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 has no jinja2";
  auto path = std::filesystem::temp_directory_path() / ("kiln_chat_" + std::to_string(::getpid()) + ".json");
  ASSERT_EQ(std::system(("python3 " KILN_SOURCE_DIR "/tests/python/chat_template_ref.py " + path.string()).c_str()), 0);
  json ref = read_json(path.string());
  std::filesystem::remove(path);
  std::map<std::string, ChatTemplate> want_kind = {
      {"llama3", ChatTemplate::llama3}, {"llama31", ChatTemplate::llama3}, {"qwen25", ChatTemplate::chatml},
      {"qwen3", ChatTemplate::chatml},
      {"smollm2", ChatTemplate::chatml}, {"chatml", ChatTemplate::chatml}, {"llama2", ChatTemplate::llama2},
      {"mistral", ChatTemplate::mistral}, {"gemma", ChatTemplate::gemma}};
  for (auto& [name, family] : ref.items()) {
    TokenizerSpec spec;
    spec.tokens = {family["bos"].get<std::string>(), family["eos"].get<std::string>(), "a", "b"};
    spec.token_type = {3, 3, 1, 1};
    spec.bos_id = 0;
    spec.eos_id = 1;
    spec.chat_template = family["template"].get<std::string>();
    Tokenizer tok(spec);
    EXPECT_EQ(tok.chat_template_kind(), want_kind.at(name)) << name;
    for (const auto& c : family["cases"]) {
      std::vector<ChatMessage> messages;
      for (const auto& m : c["messages"]) {
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      std::string got = tok.apply_chat_template(messages, c["add_generation_prompt"].get<bool>());
      EXPECT_EQ(got, c["text"].get<std::string>()) << name << " " << c["messages"].dump();
    }
  }
}

TEST(ChatTemplate, DetectionAndErrors) {
  EXPECT_EQ(detect_chat_template("{{ '<|im_start|>' + role }}"), ChatTemplate::chatml);
  EXPECT_EQ(detect_chat_template("", "qwen2"), ChatTemplate::chatml);
  EXPECT_EQ(detect_chat_template("", "gemma2"), ChatTemplate::gemma);
  EXPECT_EQ(detect_chat_template("", "llama"), ChatTemplate::none);
  EXPECT_EQ(detect_chat_template("{{ '[INST] ' }}"), ChatTemplate::mistral);
  TokenizerSpec spec;
  spec.tokens = {"<s>", "</s>", "<|start_header_id|>"};
  spec.token_type = {3, 3, 3};
  Tokenizer tok(spec);
  // No template text: the vocabulary's markers decide.
  EXPECT_EQ(tok.chat_template_kind(), ChatTemplate::llama3);
  std::vector<ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  EXPECT_TRUE(kiln::test::throws_error([&] { tok.apply_chat_template(ChatTemplate::llama2, bad); },
                                       {"llama2", "alternate", "message 1"}));
  std::vector<ChatMessage> sys = {{"system", "s"}, {"user", "u"}};
  EXPECT_TRUE(kiln::test::throws_error([&] { tok.apply_chat_template(ChatTemplate::mistral, sys); },
                                       {"mistral", "system"}));
  std::vector<ChatMessage> odd = {{"narrator", "x"}};
  EXPECT_TRUE(kiln::test::throws_error([&] { tok.apply_chat_template(ChatTemplate::chatml, odd); }, {"narrator"}));
  TokenizerSpec plain;
  plain.tokens = {"a"};
  EXPECT_TRUE(kiln::test::throws_error([&] { Tokenizer(plain).apply_chat_template(sys); },
                                       {"apply_chat_template", "no known chat template"}));
}
