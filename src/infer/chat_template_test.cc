#include "infer/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/testing.h"

namespace tessera::infer {
namespace {

// One id per character of kChars, then ChatML's two markers as special tokens and the end of document:
// its encode reads no special token in text (as a slow Hugging Face tokenizer's model does not), so the
// template must put their ids in itself.
class MarkerTokenizer final : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char ch : text) {
      const size_t at = kChars.find(ch);
      TESSERA_CHECK(at != std::string_view::npos, "no id for '", ch, "'");
      ids.push_back(static_cast<int32_t>(at));
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += id == kStart ? "<|im_start|>" : id == kEnd ? "<|im_end|>" : id == kEod ? "<eod>" : std::string(1, kChars[id]);
    return s;
  }
  int32_t vocab_size() const override { return kEod + 1; }
  int32_t eod() const override { return kEod; }
  std::string_view name() const override { return "MarkerTokenizer"; }
  static constexpr std::string_view kChars = "abcdefghijklmnopqrstuvwxyz \n:<|>_";
  static constexpr int32_t kStart = 33, kEnd = 34, kEod = 35;
};

std::vector<int32_t> ids_of(const MarkerTokenizer& tok, const std::string& text) { return tok.encode(text); }

using ::tessera::testing::error_of;

const std::vector<ChatMessage> kConversation = {{"system", "be brief"}, {"user", " hi "}};

TEST(ChatTemplate, RendersEachTemplateAsItsModelsDo) {
  MarkerTokenizer tok;
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::Plain, tok).render(kConversation), "system: be brief\nuser:  hi \nassistant:");
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::ChatMl, tok).render(kConversation),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n hi <|im_end|>\n<|im_start|>assistant\n");
  // Llama 3's template trims each content.
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::Llama3, tok).render(kConversation),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nbe brief<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, MarkersAreSpecialTokensWhereTheVocabularyHasThem) {
  MarkerTokenizer tok;
  const ChatTemplate chatml(ChatTemplateKind::ChatMl, tok);
  std::vector<int32_t> expected = {MarkerTokenizer::kStart};
  for (const std::string& part : {std::string("user\nhi"), std::string()}) {
    const std::vector<int32_t> ids = ids_of(tok, part);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  expected.push_back(MarkerTokenizer::kEnd);
  for (int32_t id : ids_of(tok, "\n")) expected.push_back(id);
  expected.push_back(MarkerTokenizer::kStart);
  for (int32_t id : ids_of(tok, "assistant\n")) expected.push_back(id);
  EXPECT_EQ(chatml.encode({{"user", "hi"}}), expected);
  EXPECT_EQ(chatml.end_of_turn(), "<|im_end|>");
  EXPECT_EQ(chatml.end_of_turn_id(), MarkerTokenizer::kEnd);
  // Llama 3's markers are not in this vocabulary: they stay text (here, characters the encoder lacks).
  const ChatTemplate plain(ChatTemplateKind::Plain, tok);
  EXPECT_EQ(plain.end_of_turn(), "\nuser:");
  EXPECT_EQ(plain.end_of_turn_id(), -1);
  EXPECT_EQ(plain.encode({{"user", "hi"}}), ids_of(tok, "user: hi\nassistant:"));
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::Llama3, tok).end_of_turn_id(), -1);
}

TEST(ChatTemplate, RecognisesTheKnownJinjaTextsWhateverTheirLayout) {
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' "
      "+ '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  EXPECT_EQ(recognise_chat_template(chatml, "test"), ChatTemplateKind::ChatMl);
  // Spaces inside tags, the other quote style, lines between block tags (trim_blocks), a comment.
  const std::string relaid =
      "{# ChatML #}\n{% for message in messages %}\n{{ \"<|im_start|>\" + message[ 'role' ] + \"\\n\" + "
      "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}\n{%- if add_generation_prompt -%}\n"
      "  {{ '<|im_start|>assistant\\n' }}\n{%- endif %}";
  EXPECT_EQ(recognise_chat_template(relaid, "test"), ChatTemplateKind::ChatMl);
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
      "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  EXPECT_EQ(recognise_chat_template(llama3, "test"), ChatTemplateKind::Llama3);
  // Text between tags is output: a template that writes more is another template.
  EXPECT_NE(error_of([&] { recognise_chat_template("Chat:\n" + chatml, "test"); }), "");
}

TEST(ChatTemplate, RefusesOtherTemplatesByNameWithTheJinjaTheyUse) {
  const std::string mistral =
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% if message['role'] == 'user' %}"
      "{{ '[INST] ' + message['content'] | trim + ' [/INST]' }}{% endif %}{% endfor %}";
  const std::string message = error_of([&] { recognise_chat_template(mistral, "tokenizer_config.json"); });
  EXPECT_NE(message.find("the chat template of tokenizer_config.json is not one of the templates tessera renders"),
            std::string::npos) << message;
  EXPECT_NE(message.find("needs a Jinja engine"), std::string::npos) << message;
  EXPECT_NE(message.find("raise_exception()"), std::string::npos) << message;
  EXPECT_NE(message.find("| trim"), std::string::npos) << message;
  EXPECT_NE(message.find("{% for %}"), std::string::npos) << message;
  EXPECT_NE(message.find("--chat-template plain, chatml or llama3"), std::string::npos) << message;
  EXPECT_NE(error_of([&] { recognise_chat_template("{{ unterminated", "x"); }).find("cannot be read as Jinja"),
            std::string::npos);
}

TEST(ChatTemplate, ResolvesNamesAutoAndFiles) {
  std::string note;
  EXPECT_EQ(resolve_chat_template("chatml", "", &note), ChatTemplateKind::ChatMl);
  EXPECT_EQ(resolve_chat_template("auto", "", &note), ChatTemplateKind::Plain);
  EXPECT_NE(note.find("carries no tokenizer_config.json"), std::string::npos) << note;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("chat_template_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string config = (dir / "tokenizer_config.json").string(), none = (dir / "none.json").string();
  std::ofstream(config) << R"({"tokenizer_class": "X", "chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"})";
  std::ofstream(none) << R"({"tokenizer_class": "X"})";
  EXPECT_EQ(resolve_chat_template("auto", config, &note), ChatTemplateKind::ChatMl);
  EXPECT_EQ(note, "chatml (the checkpoint's chat_template)");
  EXPECT_EQ(resolve_chat_template(config, "", &note), ChatTemplateKind::ChatMl);
  EXPECT_EQ(resolve_chat_template("auto", none, &note), ChatTemplateKind::Plain);
  EXPECT_NE(note.find("has no chat_template"), std::string::npos) << note;
  EXPECT_NE(error_of([&] { resolve_chat_template("vicuna", "", &note); }).find("not a template name"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::infer
