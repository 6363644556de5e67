// The two JSON files of a Hugging Face model directory that `tessera convert --loader hf` reads before any
// tensor: config.json (which architecture, which sizes) and model.safetensors.index.json (which shard
// files). They are parsed here, apart from the conversion (hf_convert.h), so that they can be tested and
// fuzzed on their own (fuzz/hf_config_fuzzer.cc, fuzz/hf_shard_index_fuzzer.cc). Any text gives a value or a
// tessera::Error naming `path` and what is wrong, never another exception.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"

namespace tessera::ckpt {

// config.json's architectures[0]: GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM (a Llama whose every
// feed-forward slot is a mixture of experts: config.moe); BertForPreTraining or BertForMaskedLM
// (post-LN BERT), MegatronBertForPreTraining or MegatronBertForMaskedLM (pre-LN BERT), Qwen3ForCausalLM,
// Qwen3MoeForCausalLM, DeepseekV3ForCausalLM, DeepseekV2ForCausalLM (hf_moe.h). The BERT heads
// (ForPreTraining: with the pooler and the sentence-order head) are config.bert_binary_head.
enum class HfFamily { Gpt2, Llama, Mixtral, Bert, MegatronBert, Qwen3, Qwen3Moe, DeepseekV3, DeepseekV2 };

struct HfConfig {
  HfFamily family;
  model::ModelConfig config;  // every size positive, heads divisible by query groups, parameters < 2^53
};

// config.json: the Tessera configuration it describes; its "tessera_args" model when it has one (a model
// Tessera exported), else its Hugging Face fields.
HfConfig parse_hf_config(const std::string& text, const std::string& path);

// model.safetensors.index.json: the shard files its "weight_map" names, in first-seen order, each a plain
// file name (not empty, no '/' or NUL, not "." or "..").
std::vector<std::string> parse_hf_shard_index(const std::string& text, const std::string& path);

}  // namespace tessera::ckpt
