#include "infer/chat_template.h"

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "infer/text_generation_api.h"

namespace tessera::infer {
namespace {

// The Jinja texts of the known templates as models ship them (whitespace inside tags and quote style do
// not matter: both sides are normalised by jinja_shape before comparing).
struct KnownChatTemplate {
  ChatTemplateKind kind;
  const char* jinja;
};
const KnownChatTemplate kKnownChatTemplates[] = {
    // ChatML as Hugging Face's documentation and most ChatML models give it.
    {ChatTemplateKind::ChatMl,
     R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})"},
    {ChatTemplateKind::ChatMl,
     R"({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})"},
    // Meta-Llama-3-8B-Instruct's (and -70B's), with and without the eos_token of a closed conversation.
    {ChatTemplateKind::Llama3,
     R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})"},
    {ChatTemplateKind::Llama3,
     R"({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% else %}{{ eos_token }}{% endif %})"},
    {ChatTemplateKind::Llama3,
     R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }})"},
};

bool jinja_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// A Jinja text in a form where equal templates compare equal: tags without the whitespace outside their
// string literals, with one quote style and with literal newlines in strings written as \n; the text
// between tags as Hugging Face's renderer outputs it (trim_blocks and lstrip_blocks on, "-" markers
// applied); comments dropped. `features` gets the statements, filters and calls the tags use.
std::string jinja_shape(const std::string& text, std::set<std::string>* features) {
  struct Piece {
    bool tag = false;
    char type = 0;  // '{' expression, '%' statement
    std::string text;
    bool trim_before = false, trim_after = false;
    std::string raw;  // as written, for the features it uses
  };
  std::vector<Piece> pieces;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find('{', at);
    const bool tag_here = open != std::string::npos && open + 1 < text.size() &&
                          (text[open + 1] == '{' || text[open + 1] == '%' || text[open + 1] == '#');
    if (!tag_here) {
      const size_t end = open == std::string::npos ? text.size() : open + 1;
      if (pieces.empty() || pieces.back().tag) pieces.push_back({});
      pieces.back().text += text.substr(at, end - at);
      at = end;
      continue;
    }
    if (open > at) {
      if (pieces.empty() || pieces.back().tag) pieces.push_back({});
      pieces.back().text += text.substr(at, open - at);
    }
    const char type = text[open + 1];
    const std::string close = type == '{' ? "}}" : "%}";
    Piece p{true, type, "", false, false, ""};
    if (type == '#') {  // a comment outputs nothing (its quotes are not strings) but still trims
      const size_t end = text.find("#}", open + 2);
      if (end == std::string::npos) throw Error("unterminated Jinja comment at byte " + std::to_string(open));
      p.type = '%';
      p.trim_before = text[open + 2] == '-';
      p.trim_after = end > open + 2 && text[end - 1] == '-';
      pieces.push_back(p);
      at = end + 2;
      continue;
    }
    size_t i = open + 2;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) p.trim_before = text[i++] == '-';
    char quote = 0;
    std::string inner;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (quote) {
        p.raw += c;
        if (c == '\\' && i + 1 < text.size()) {
          p.raw += text[i + 1];
          inner += c;
          inner += text[++i];
        } else if (c == quote) {
          inner += '\'';
          quote = 0;
        } else {
          inner += c == '\n' ? std::string("\\n") : std::string(1, c);
        }
        continue;
      }
      if (text.compare(i, 2, close) == 0) break;
      p.raw += c;
      if (c == '"' || c == '\'') {
        quote = c;
        inner += '\'';
      } else if (!jinja_space(c)) {
        inner += c;
      }
    }
    if (i >= text.size()) throw Error("unterminated Jinja tag at byte " + std::to_string(open));
    at = i + 2;
    if (!inner.empty() && inner.back() == '-') p.trim_after = true, inner.pop_back();
    if (!inner.empty() && inner.back() == '+') inner.pop_back();
    p.text = inner;
    pieces.push_back(p);
  }
  // What the renderer does to the text between tags.
  for (size_t k = 0; k < pieces.size(); ++k) {
    Piece& p = pieces[k];
    if (p.tag) continue;
    const Piece* before = k > 0 ? &pieces[k - 1] : nullptr;
    const Piece* after = k + 1 < pieces.size() ? &pieces[k + 1] : nullptr;
    if (before && before->trim_after) {
      size_t n = 0;
      while (n < p.text.size() && jinja_space(p.text[n])) ++n;
      p.text.erase(0, n);
    } else if (before && before->type == '%' && !p.text.empty() && p.text[0] == '\n') {  // trim_blocks
      p.text.erase(0, 1);
    }
    if (after && after->trim_before) {
      while (!p.text.empty() && jinja_space(p.text.back())) p.text.pop_back();
    } else if (after && after->type == '%') {  // lstrip_blocks: blanks from the line's start to the tag
      size_t n = p.text.size();
      while (n > 0 && (p.text[n - 1] == ' ' || p.text[n - 1] == '\t')) --n;
      if (n == 0 || p.text[n - 1] == '\n') p.text.erase(n);
    }
  }
  std::string shape;
  for (const Piece& p : pieces) {
    if (!p.tag) {
      shape += p.text;
      continue;
    }
    if (p.text.empty()) continue;  // a comment
    shape += p.type == '{' ? "{{" + p.text + "}}" : "{%" + p.text + "%}";
    if (!features) continue;
    // What the tag uses: its statement, filters ("| trim") and calls ("raise_exception()").
    const std::string& raw = p.raw;
    auto word_at = [&](size_t from) {
      size_t e = from;
      while (e < raw.size() && (std::isalnum(static_cast<unsigned char>(raw[e])) || raw[e] == '_')) ++e;
      return raw.substr(from, e - from);
    };
    if (p.type == '%') {
      size_t b = 0;
      while (b < raw.size() && (jinja_space(raw[b]) || raw[b] == '-' || raw[b] == '+')) ++b;
      const std::string statement = word_at(b);
      if (!statement.empty() && statement.rfind("end", 0) != 0 && statement != "else")
        features->insert("{% " + statement + " %}");
    }
    static const std::set<std::string> keywords = {"if", "elif", "in", "not", "and", "or", "is", "for", "set"};
    char quote = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (quote) {
        if (raw[i] == '\\') ++i;
        else if (raw[i] == quote) quote = 0;
        continue;
      }
      if (raw[i] == '"' || raw[i] == '\'') {
        quote = raw[i];
      } else if (raw[i] == '|' && (i + 1 >= raw.size() || raw[i + 1] != '|')) {
        size_t b = i + 1;
        while (b < raw.size() && jinja_space(raw[b])) ++b;
        const std::string filter = word_at(b);
        if (!filter.empty()) features->insert("| " + filter);
      } else if (raw[i] == '(' && i > 0) {
        size_t b = i;
        while (b > 0 && (std::isalnum(static_cast<unsigned char>(raw[b - 1])) || raw[b - 1] == '_' || raw[b - 1] == '.')) --b;
        const std::string name = raw.substr(b, i - b);
        if (!name.empty() && !keywords.count(name)) features->insert(name + "()");
      }
    }
  }
  return shape;
}

std::string read_chat_template_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "--chat-template=", path, ": not a template name (plain, chatml, llama3, auto) nor a readable file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The chat_template of a tokenizer_config.json's text ("" when it has none). Some models give a list of
// named templates ({"name", "template"}): the one named "default" is the chat template.
std::string chat_template_of_config(const std::string& text, const std::string& source) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(source, " is not JSON: ", e.what()));
  }
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) return "";
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const nlohmann::json& named : t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
  throw Error(str_cat(source, ": chat_template is neither a string nor a list holding a template named \"default\""));
}

std::string trim_jinja(const std::string& s) {  // Jinja's | trim (Python's str.strip())
  size_t b = 0, e = s.size();
  while (b < e && jinja_space(s[b])) ++b;
  while (e > b && jinja_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::string chat_template_name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::Plain: return "plain";
    case ChatTemplateKind::ChatMl: return "chatml";
    case ChatTemplateKind::Llama3: return "llama3";
  }
  return "?";
}

ChatTemplateKind recognise_chat_template(const std::string& jinja, const std::string& source) {
  std::set<std::string> features;
  std::string shape;
  try {
    shape = jinja_shape(jinja, &features);
  } catch (const Error& e) {
    throw Error(str_cat("--chat-template: the chat template of ", source, " cannot be read as Jinja: ", e.what()));
  }
  for (const KnownChatTemplate& known : kKnownChatTemplates)
    if (shape == jinja_shape(known.jinja, nullptr)) return known.kind;
  std::string used;
  for (const std::string& f : features) used += (used.empty() ? "" : ", ") + f;
  throw Error(str_cat("--chat-template: the chat template of ", source,
                      " is not one of the templates tessera renders (chatml, llama3, as their models ship them); "
                      "rendering it needs a Jinja engine, which tessera does not have (it uses ",
                      used.empty() ? std::string("Jinja text") : used,
                      "). Choose --chat-template plain, chatml or llama3 if one formats conversations as the "
                      "model was tuned to read them"));
}

ChatTemplateKind resolve_chat_template(const std::string& value, const std::string& checkpoint_config, std::string* note) {
  for (ChatTemplateKind kind : {ChatTemplateKind::Plain, ChatTemplateKind::ChatMl, ChatTemplateKind::Llama3})
    if (value == chat_template_name(kind)) {
      *note = value;
      return kind;
    }
  ChatTemplateKind kind;
  if (value == "auto") {
    if (checkpoint_config.empty()) {
      *note = "plain (the checkpoint carries no tokenizer_config.json; --chat-template chooses another)";
      return ChatTemplateKind::Plain;
    }
    const std::string jinja = chat_template_of_config(read_chat_template_file(checkpoint_config), checkpoint_config);
    if (jinja.empty()) {
      *note = "plain (the checkpoint's tokenizer_config.json has no chat_template; --chat-template chooses another)";
      return ChatTemplateKind::Plain;
    }
    kind = recognise_chat_template(jinja, "the checkpoint's tokenizer_config.json (" + checkpoint_config + ")");
    *note = chat_template_name(kind) + " (the checkpoint's chat_template)";
    return kind;
  }
  // A file: a tokenizer_config.json, or the Jinja text itself.
  const std::string text = read_chat_template_file(value);
  // JSON starts with "{" and a quote; Jinja's tags with "{{", "{%" or "{#".
  const std::string trimmed = trim_jinja(text);
  const bool json_file = trimmed.size() > 1 && trimmed[0] == '{' && trimmed[1] != '{' && trimmed[1] != '%' && trimmed[1] != '#';
  const std::string jinja = json_file ? chat_template_of_config(text, value) : text;
  TESSERA_CHECK(!jinja.empty(), "--chat-template=", value, ": the file has no chat_template");
  kind = recognise_chat_template(jinja, value);
  *note = chat_template_name(kind) + " (" + value + ")";
  return kind;
}

ChatTemplate::ChatTemplate(ChatTemplateKind kind, const data::Tokenizer& tokenizer) : kind_(kind), tokenizer_(tokenizer) {
  std::vector<std::string> markers;
  switch (kind) {
    case ChatTemplateKind::Plain: end_of_turn_ = "\nuser:"; break;
    case ChatTemplateKind::ChatMl:
      end_of_turn_ = "<|im_end|>";
      markers = {"<|im_start|>", "<|im_end|>"};
      break;
    case ChatTemplateKind::Llama3:
      end_of_turn_ = "<|eot_id|>";
      markers = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
      break;
  }
  if (markers.empty()) return;
  const std::set<std::string> wanted(markers.begin(), markers.end());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    try {
      const std::string text = tokenizer.token_text(id);
      if (wanted.count(text) && !special_.count(text)) special_[text] = id;
    } catch (const std::exception&) {  // an id with no text (a reserved one)
    }
  }
}

int32_t ChatTemplate::end_of_turn_id() const {
  const auto found = special_.find(end_of_turn_);
  return found == special_.end() ? -1 : found->second;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string text;
  switch (kind_) {
    case ChatTemplateKind::Plain:
      for (const ChatMessage& m : messages) text += m.role + ": " + m.content + "\n";
      return text + "assistant:";
    case ChatTemplateKind::ChatMl:
      for (const ChatMessage& m : messages) text += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return text + "<|im_start|>assistant\n";
    case ChatTemplateKind::Llama3:
      text = "<|begin_of_text|>";
      for (const ChatMessage& m : messages)
        text += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim_jinja(m.content) + "<|eot_id|>";
      return text + "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  return text;
}

std::vector<int32_t> ChatTemplate::encode(const std::vector<ChatMessage>& messages) const {
  const std::string text = render(messages);
  std::vector<int32_t> ids;
  size_t at = 0;
  // The text between special markers is encoded as one piece, as Hugging Face splits a text at its
  // special tokens only; the earliest marker first (the longest where two start at the same byte).
  while (at <= text.size()) {
    size_t next = std::string::npos;
    const std::string* marker = nullptr;
    for (const auto& [m, id] : special_) {
      const size_t found = text.find(m, at);
      if (found < next || (found == next && found != std::string::npos && m.size() > marker->size())) {
        next = found;
        marker = &m;
      }
    }
    const std::vector<int32_t> part = encode_with_eod(tokenizer_, std::string_view(text).substr(at, next == std::string::npos ? std::string::npos : next - at));
    ids.insert(ids.end(), part.begin(), part.end());
    if (next == std::string::npos) break;
    ids.push_back(special_.at(*marker));
    at = next + marker->size();
  }
  return ids;
}

}  // namespace tessera::infer
