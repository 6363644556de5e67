// Chat templates for `/v1/chat/completions`: a conversation (system, user and assistant messages) as the
// prompt text a model was tuned on, then its tokens. Hugging Face models name their template in
// tokenizer_config.json's `chat_template`, a Jinja program; tessera has no Jinja engine, so it renders
// the few templates it knows in C++ and recognises a model's Jinja text as one of them (or refuses it by
// name), rather than silently formatting a conversation differently from what the model was tuned on.
//   plain    "system: ...\nuser: ...\nassistant: ...\n" then "assistant:"  (any model; stops at "\nuser:")
//   chatml   "<|im_start|>user\n...<|im_end|>\n" then "<|im_start|>assistant\n"  (stops at <|im_end|>)
//   llama3   "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n...<|eot_id|>" (content
//            trimmed) then "<|start_header_id|>assistant<|end_header_id|>\n\n"  (stops at <|eot_id|>)
// A template's marker texts are the tokenizer's special tokens where its vocabulary has them as tokens
// (as Hugging Face encodes added special tokens), else ordinary text.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tessera::infer {

enum class ChatTemplateKind { Plain, ChatMl, Llama3 };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The template of a --chat-template value: "plain", "chatml", "llama3"; "auto": the chat_template of
// `checkpoint_config` (the tokenizer_config.json a checkpoint carries; empty: none, which gives plain);
// any other value is the path of a tokenizer_config.json or of a Jinja file. `note` says which template
// was chosen and why. A template that is none of the known ones is an Error naming it and saying that
// rendering it needs a Jinja engine (with the Jinja features it uses), which tessera does not have.
ChatTemplateKind resolve_chat_template(const std::string& value, const std::string& checkpoint_config, std::string* note);

// The known template a Jinja chat_template is, or an Error as above (`source` names where it came from).
ChatTemplateKind recognise_chat_template(const std::string& jinja, const std::string& source);

std::string chat_template_name(ChatTemplateKind kind);

class ChatTemplate {
 public:
  // Looks up the template's marker texts in the tokenizer's vocabulary once (a pass over its ids).
  ChatTemplate(ChatTemplateKind kind, const data::Tokenizer& tokenizer);

  ChatTemplateKind kind() const { return kind_; }
  // The conversation's text, ending with the assistant's turn opened (add_generation_prompt).
  std::string render(const std::vector<ChatMessage>& messages) const;
  // Its tokens: marker texts that are special tokens become their ids, the rest is the tokenizer's
  // encoding of the text between them (the end-of-document text as its token, as /v1/completions reads).
  std::vector<int32_t> encode(const std::vector<ChatMessage>& messages) const;
  // Where the assistant's turn ends: generation stops after this text (the reply leaves it out) or,
  // when it is a special token, after its id.
  const std::string& end_of_turn() const { return end_of_turn_; }
  int32_t end_of_turn_id() const;  // -1 when it is text

 private:
  ChatTemplateKind kind_;
  const data::Tokenizer& tokenizer_;
  std::string end_of_turn_;
  std::map<std::string, int32_t> special_;  // marker text -> id, for those the vocabulary has
};

}  // namespace tessera::infer
