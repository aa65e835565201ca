// Chat templates written out by hand for the common families, giving what
// the Hugging Face Jinja templates of those models give for plain
// system / user / assistant conversations (tool calls and multimodal content
// are out of scope). The family is recognised by marker strings in the
// template text; model-specific details (ChatML's default system prompt,
// Qwen 3's think blocks) are read from that text as well.
#include <algorithm>
#include <regex>

#include "kiln/error.h"
#include "llm/tokenizer_impl.h"

namespace kiln::llm {

namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

const char* kind_name(ChatTemplate k) {
  switch (k) {
    case ChatTemplate::chatml: return "chatml";
    case ChatTemplate::llama3: return "llama3";
    case ChatTemplate::llama2: return "llama2";
    case ChatTemplate::mistral: return "mistral";
    case ChatTemplate::none: break;
  }
  return "none";
}

void check_roles(const std::vector<ChatMessage>& messages, bool system_allowed, ChatTemplate kind) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    bool ok = r == "user" || r == "assistant" || (r == "system" && system_allowed);
    if (!ok) {
      throw Error(std::string("apply_chat_template(") + kind_name(kind) + "): message " + std::to_string(i) +
                  " has role \"" + r + "\"" + (system_allowed ? "" : " (this family has no system role)"));
    }
  }
}

// [INST] families: after an optional leading system message, roles must
// alternate user / assistant (the templates raise otherwise).
void check_alternation(const std::vector<ChatMessage>& messages, size_t first, ChatTemplate kind) {
  for (size_t i = first; i < messages.size(); ++i) {
    bool want_user = (i - first) % 2 == 0;
    if ((messages[i].role == "user") != want_user) {
      throw Error(std::string("apply_chat_template(") + kind_name(kind) +
                  "): conversation roles must alternate user/assistant/user/..., message " + std::to_string(i) +
                  " is \"" + messages[i].role + "\"");
    }
  }
}

std::string strip_newlines(const std::string& s, bool left, bool right) {
  size_t b = left ? s.find_first_not_of('\n') : 0;
  if (b == std::string::npos) return "";
  size_t e = right ? s.find_last_not_of('\n') + 1 : s.size();
  return s.substr(b, e - b);
}

// Qwen 3's template: "<think>r</think>c" -> reasoning r, content c, each
// without the newlines around it.
void split_reasoning(std::string& content, std::string& reasoning) {
  size_t end = content.find("</think>");
  if (end == std::string::npos) return;
  std::string before = strip_newlines(content.substr(0, end), false, true);
  size_t open = before.rfind("<think>");
  reasoning = strip_newlines(open == std::string::npos ? before : before.substr(open + 7), true, true);
  content = strip_newlines(content.substr(content.rfind("</think>") + 8), true, false);
}

std::string chatml(const std::string& tmpl, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  // Qwen 2 / SmolLM 2 write a system prompt of their own when the
  // conversation has none: `'<|im_start|>system\nYou are ...<|im_end|>\n'`.
  static const std::regex default_system(R"(<\|im_start\|>system\\n([^'"{}+]*)<\|im_end\|>)");
  std::smatch m;
  if (!messages.empty() && messages[0].role != "system" && std::regex_search(tmpl, m, default_system)) {
    out += "<|im_start|>system\n" + m[1].str() + "<|im_end|>\n";
  }
  // Qwen 3: assistant turns after the last user message carry a think block.
  bool thinks = tmpl.find("</think>") != std::string::npos;
  size_t last_user = messages.empty() ? 0 : messages.size() - 1;  // the template's default
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user") {
      last_user = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& msg = messages[i];
    std::string content = msg.content;
    if (thinks && msg.role == "assistant") {
      std::string reasoning;
      split_reasoning(content, reasoning);
      if (i > last_user && (i + 1 == messages.size() || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content + "<|im_end|>\n";
        continue;
      }
    }
    out += "<|im_start|>" + msg.role + "\n" + content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos) {
  std::string out = messages.empty() ? "" : bos;
  for (const auto& msg : messages) {
    out += "<|start_header_id|>" + msg.role + "<|end_header_id|>\n\n" + trim(msg.content) + "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string llama2(const std::vector<ChatMessage>& messages, const std::string& bos, const std::string& eos) {
  size_t first = !messages.empty() && messages[0].role == "system" ? 1 : 0;
  check_alternation(messages, first, ChatTemplate::llama2);
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    std::string content = messages[i].content;
    if (i == first && first == 1) content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
    if (messages[i].role == "user") {
      out += bos + "[INST] " + trim(content) + " [/INST]";
    } else {
      out += " " + trim(content) + " " + eos;
    }
  }
  return out;
}

std::string mistral(const std::vector<ChatMessage>& messages, const std::string& bos, const std::string& eos) {
  check_alternation(messages, 0, ChatTemplate::mistral);
  std::string out = bos;
  for (const auto& msg : messages) {
    out += msg.role == "user" ? "[INST] " + msg.content + " [/INST]" : msg.content + eos;
  }
  return out;
}

}  // namespace

ChatTemplate detect_chat_template(std::string_view text, std::string_view architecture) {
  auto has = [&](const char* s) { return text.find(s) != std::string_view::npos; };
  if (has("<|im_start|>")) return ChatTemplate::chatml;
  if (has("<|start_header_id|>")) return ChatTemplate::llama3;
  if (has("[INST]")) return has("<<SYS>>") ? ChatTemplate::llama2 : ChatTemplate::mistral;
  if (text.empty() && architecture.substr(0, 4) == "qwen") return ChatTemplate::chatml;
  return ChatTemplate::none;
}

ChatTemplate Tokenizer::chat_template_kind() const {
  ChatTemplate k = detect_chat_template(impl_->chat_template);
  if (k != ChatTemplate::none || !impl_->chat_template.empty()) return k;
  // No template text: the vocabulary's turn markers tell the family.
  if (token_to_id("<|start_header_id|>")) return ChatTemplate::llama3;
  if (token_to_id("<|im_start|>")) return ChatTemplate::chatml;
  return ChatTemplate::none;
}

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return apply_chat_template(chat_template_kind(), messages, add_generation_prompt);
}

std::string Tokenizer::apply_chat_template(ChatTemplate kind, const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const {
  auto text = [&](int32_t id) { return id >= 0 ? impl_->tokens[id] : std::string(); };
  switch (kind) {
    case ChatTemplate::chatml:
      check_roles(messages, true, kind);
      return chatml(impl_->chat_template, messages, add_generation_prompt);
    case ChatTemplate::llama3:
      check_roles(messages, true, kind);
      return llama3(messages, add_generation_prompt, text(bos()));
    case ChatTemplate::llama2:
      check_roles(messages, true, kind);
      return llama2(messages, text(bos()), text(eos()));
    case ChatTemplate::mistral:
      check_roles(messages, false, kind);
      return mistral(messages, text(bos()), text(eos()));
    case ChatTemplate::none: break;
  }
  throw Error("apply_chat_template: no known chat template family (chat_template is " +
              (impl_->chat_template.empty() ? std::string("empty") : "\"" + impl_->chat_template.substr(0, 80) + "...\"") +
              "; known: chatml, llama3, llama2, mistral)");
}

}  // namespace kiln::llm
