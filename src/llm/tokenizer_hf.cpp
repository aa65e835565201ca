// Hugging Face tokenizer.json (BPE models) -> Tokenizer::Impl. The parts of
// the pipeline read: normalizer (Prepend / Replace, the SentencePiece
// spelling; NFC/NFKC are accepted and not applied), pre_tokenizer (Split
// regexes, Digits, ByteLevel, Metaspace, Sequence of them), model (vocab,
// merges, byte_fallback, ignore_merges, unk_token), added_tokens,
// post_processor (TemplateProcessing: which special tokens frame a text) and
// decoder (Strip of the dummy prefix). tokenizer_config.json supplies the
// bos/eos names and the chat template.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "llm/tokenizer_impl.h"

namespace kiln::llm {

namespace {

using json = nlohmann::json;
const char* const kOrigin = "Tokenizer::from_json";
const std::string kMetaspace = "\xE2\x96\x81";

[[noreturn]] void unsupported(const std::string& what, const json& j) {
  throw Error(std::string(kOrigin) + ": unsupported " + what + " " + j.dump().substr(0, 200));
}

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void read_pre_tokenizer(const json& p, Tokenizer::Impl& m) {
  if (p.is_null()) return;
  std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& q : p.at("pretokenizers")) read_pre_tokenizer(q, m);
  } else if (type == "Split") {
    if (p.value("behavior", "") != "Isolated" || p.value("invert", false)) unsupported("Split behaviour", p);
    const json& pat = p.at("pattern");
    std::string re = pat.contains("Regex") ? pat["Regex"].get<std::string>()
                                           : regex_escape(pat.at("String").get<std::string>());
    m.pre.push_back(std::make_unique<Regex>(re));
  } else if (type == "Digits") {
    m.pre.push_back(std::make_unique<Regex>(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)"));
  } else if (type == "ByteLevel") {
    m.byte_level = true;
    m.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) m.pre.push_back(std::make_unique<Regex>(kGpt2Regex));
  } else if (type == "Metaspace") {
    m.byte_level = false;
    m.escape_spaces = true;
    std::string scheme = p.value("prepend_scheme", p.value("add_prefix_space", true) ? "always" : "never");
    m.space_prefix = scheme != "never";
    m.prefix_first_only = scheme == "first";
    m.prefix_unless_space = true;
    m.split_on_metaspace = p.value("split", true);
  } else {
    unsupported("pre_tokenizer", p);
  }
}

void read_normalizer(const json& n, Tokenizer::Impl& m) {
  if (n.is_null()) return;
  std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const auto& q : n.at("normalizers")) read_normalizer(q, m);
  } else if (type == "Prepend") {
    if (n.at("prepend") != kMetaspace) unsupported("Prepend", n);
    m.space_prefix = true;
  } else if (type == "Replace") {
    if (!n.at("pattern").contains("String") || n["pattern"]["String"] != " " || n.at("content") != kMetaspace) {
      unsupported("Replace", n);
    }
    m.escape_spaces = true;
  } else if (type != "NFC" && type != "NFKC") {
    unsupported("normalizer", n);
  }
}

// The special tokens TemplateProcessing puts around a single sequence.
void read_post_processor(const json& p, Tokenizer::Impl& m) {
  if (p.is_null()) return;
  std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const auto& q : p.at("processors")) read_post_processor(q, m);
  } else if (type == "TemplateProcessing") {
    bool seen_text = false;
    for (const auto& piece : p.at("single")) {
      if (piece.contains("Sequence")) {
        seen_text = true;
        continue;
      }
      std::string name = piece.at("SpecialToken").at("id");
      const json& tok = p.at("special_tokens").at(name);
      int32_t id = tok.at("ids").at(0);
      (seen_text ? m.eos : m.bos) = id;
      (seen_text ? m.add_eos : m.add_bos) = true;
    }
  } else if (type != "ByteLevel") {
    unsupported("post_processor", p);
  }
}

void read_decoder(const json& d, Tokenizer::Impl& m) {
  if (d.is_null()) return;
  std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (const auto& q : d.at("decoders")) read_decoder(q, m);
  } else if (type == "Strip") {
    if (d.value("content", "") == " " && d.value("start", 0) > 0) m.strip_leading_space = true;
  } else if (type == "Metaspace") {
    std::string scheme = d.value("prepend_scheme", d.value("add_prefix_space", true) ? "always" : "never");
    m.strip_leading_space = scheme != "never";
  }
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return {};
  const json& v = cfg[key];
  return v.is_string() ? v.get<std::string>() : v.value("content", "");
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  json j, cfg;
  try {
    j = json::parse(tokenizer_json);
    if (!tokenizer_config_json.empty()) cfg = json::parse(tokenizer_config_json);
  } catch (const json::exception& e) {
    throw Error(std::string(kOrigin) + ": not JSON: " + e.what());
  }
  try {
    const json& model = j.at("model");
    if (model.value("type", "BPE") != "BPE") unsupported("model type", model.value("type", ""));
    m.byte_level = false;
    read_normalizer(j.value("normalizer", json()), m);
    read_pre_tokenizer(j.value("pre_tokenizer", json()), m);
    m.ignore_merges = model.value("ignore_merges", false);
    m.byte_fallback = model.value("byte_fallback", false);

    // Ids are integers below 2^24 (a float or a huge id would convert with
    // undefined behaviour, and size the table from the file's say-so).
    auto token_id = [](const json& v, const std::string& what) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (int64_t{1} << 24)) {
        throw Error(std::string(kOrigin) + ": the id of \"" + what + "\" is not an integer in [0, 2^24): " + v.dump());
      }
      return static_cast<int32_t>(v.get<int64_t>());
    };
    std::vector<std::pair<std::string, int32_t>> entries;
    for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it) {
      entries.emplace_back(it.key(), token_id(it.value(), it.key()));
    }
    const json added = j.value("added_tokens", json::array());
    int32_t n = 0;
    for (auto& [t, id] : entries) n = std::max(n, id + 1);
    for (const auto& a : added) n = std::max(n, token_id(a.at("id"), a.value("content", std::string("added token"))) + 1);
    m.tokens.assign(n, "");
    m.types.assign(n, TokenType::normal);
    for (auto& [t, id] : entries) {
      if (id < 0) throw Error(std::string(kOrigin) + ": negative id for \"" + t + "\"");
      m.tokens[id] = t;
      if (!m.byte_level && t.size() == 6 && t.compare(0, 3, "<0x") == 0) m.types[id] = TokenType::byte;
    }
    for (const auto& a : added) {
      int32_t id = a.at("id");
      m.tokens[id] = a.at("content").get<std::string>();
      m.types[id] = a.value("special", false) ? TokenType::control : TokenType::user_defined;
    }
    read_post_processor(j.value("post_processor", json()), m);
    read_decoder(j.value("decoder", json()), m);

    std::string unk = model.value("unk_token", json()).is_string() ? model["unk_token"].get<std::string>() : "";
    auto find = [&](const std::string& t) -> int32_t {
      for (int32_t i = 0; i < n; ++i) {
        if (m.tokens[i] == t) return i;
      }
      return -1;
    };
    if (!unk.empty()) m.unk = find(unk);
    if (std::string b = config_token(cfg, "bos_token"); !b.empty()) m.bos = find(b);
    if (std::string e = config_token(cfg, "eos_token"); !e.empty()) m.eos = find(e);
    if (std::string p = config_token(cfg, "pad_token"); !p.empty()) m.pad = find(p);
    if (m.eos < 0) {
      for (const char* t : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>"}) {
        if ((m.eos = find(t)) >= 0) break;
      }
    }
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
      m.chat_template = cfg["chat_template"].get<std::string>();
    }
    m.finish(kOrigin);

    const json& merges = model.value("merges", json::array());
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& e = merges[r];
      if (e.is_array()) {
        m.add_merge(e.at(0).get<std::string>(), e.at(1).get<std::string>(), static_cast<int32_t>(r));
      } else {
        std::string s = e;
        size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) throw Error(std::string(kOrigin) + ": merge \"" + s + "\" has no space");
        m.add_merge(s.substr(0, sp), s.substr(sp + 1), static_cast<int32_t>(r));
      }
    }
  } catch (const json::exception& e) {
    throw Error(std::string(kOrigin) + ": malformed tokenizer.json: " + e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  auto slurp = [](const std::string& path, std::string& out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    return true;
  };
  std::string text, config;
  if (!slurp(tokenizer_json_path, text)) throw Error("Tokenizer::from_file: cannot read " + tokenizer_json_path);
  size_t slash = tokenizer_json_path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "" : tokenizer_json_path.substr(0, slash + 1);
  slurp(dir + "tokenizer_config.json", config);
  return from_json(text, config);
}

}  // namespace kiln::llm
