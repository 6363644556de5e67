#include "ckpt/megatron_names.h"

#include <gtest/gtest.h>

namespace tessera::ckpt {
namespace {

std::string tessera_name(const std::string& key) {
  const MegatronKey k = megatron_key(key);
  EXPECT_EQ(k.kind, MegatronKey::Kind::Weight) << key;
  return k.name;
}

TEST(MegatronNames, MegatronCoreLocalSpecNamesAreTesseras) {
  for (const char* name : {"embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
                           "decoder.layers.3.self_attention.linear_qkv.weight", "decoder.layers.0.mlp.linear_fc2.bias",
                           "decoder.layers.1.input_layernorm.weight", "decoder.final_layernorm.bias",
                           "output_layer.weight"})
    EXPECT_EQ(tessera_name(name), name);
  const MegatronKey k = megatron_key("decoder.layers.12.pre_mlp_layernorm.weight");
  EXPECT_EQ(k.layer, 12);
  EXPECT_EQ(k.rest, "pre_mlp_layernorm.weight");
}

TEST(MegatronNames, TransformerEngineFusedNormsAreTheNorms) {
  EXPECT_EQ(tessera_name("decoder.layers.2.self_attention.linear_qkv.layer_norm_weight"),
            "decoder.layers.2.input_layernorm.weight");
  EXPECT_EQ(tessera_name("decoder.layers.2.self_attention.linear_qkv.layer_norm_bias"),
            "decoder.layers.2.input_layernorm.bias");
  EXPECT_EQ(tessera_name("decoder.layers.0.mlp.linear_fc1.layer_norm_weight"), "decoder.layers.0.pre_mlp_layernorm.weight");
  EXPECT_EQ(megatron_key("decoder.layers.0.mlp.linear_fc1._extra_state").kind, MegatronKey::Kind::NotAWeight);
  EXPECT_EQ(megatron_key("rotary_pos_emb.inv_freq").kind, MegatronKey::Kind::NotAWeight);
}

TEST(MegatronNames, RouterBuffers) {
  // The expert bias is a weight (the model's) but a buffer outside Megatron's optimizer; the token counts
  // Megatron-Core before 0.11 saved beside it are not a weight.
  EXPECT_EQ(tessera_name("decoder.layers.1.mlp.router.expert_bias"), "decoder.layers.1.mlp.router.expert_bias");
  EXPECT_TRUE(megatron_buffer_key("decoder.layers.1.mlp.router.expert_bias"));
  EXPECT_TRUE(megatron_buffer_key("mtp.layers.0.transformer_layer.mlp.router.expert_bias"));
  EXPECT_FALSE(megatron_buffer_key("decoder.layers.1.mlp.router.weight"));
  EXPECT_EQ(megatron_key("decoder.layers.1.mlp.router.local_tokens_per_expert").kind, MegatronKey::Kind::NotAWeight);
}

TEST(MegatronNames, LegacyLanguageModelNames) {
  EXPECT_EQ(tessera_name("language_model.embedding.word_embeddings.weight"), "embedding.word_embeddings.weight");
  EXPECT_EQ(tessera_name("language_model.encoder.layers.5.self_attention.query_key_value.weight"),
            "decoder.layers.5.self_attention.linear_qkv.weight");
  // Before "self_attention": "attention"; before the norm renaming: *_layernorm; before "encoder": "transformer".
  EXPECT_EQ(tessera_name("language_model.transformer.layers.1.attention.dense.bias"),
            "decoder.layers.1.self_attention.linear_proj.bias");
  EXPECT_EQ(tessera_name("language_model.encoder.layers.0.post_attention_layernorm.weight"),
            "decoder.layers.0.pre_mlp_layernorm.weight");
  EXPECT_EQ(tessera_name("language_model.encoder.layers.0.post_attention_norm.bias"),
            "decoder.layers.0.pre_mlp_layernorm.bias");
  EXPECT_EQ(tessera_name("language_model.encoder.layers.0.input_norm.weight"), "decoder.layers.0.input_layernorm.weight");
  EXPECT_EQ(tessera_name("language_model.encoder.layers.0.mlp.dense_h_to_4h.weight"), "decoder.layers.0.mlp.linear_fc1.weight");
  EXPECT_EQ(tessera_name("language_model.encoder.layers.0.mlp.dense_4h_to_h.weight"), "decoder.layers.0.mlp.linear_fc2.weight");
  EXPECT_EQ(tessera_name("language_model.encoder.final_norm.weight"), "decoder.final_layernorm.weight");
  EXPECT_EQ(tessera_name("language_model.encoder.final_layernorm.bias"), "decoder.final_layernorm.bias");
  EXPECT_EQ(tessera_name("language_model.output_layer.weight"), "output_layer.weight");
  EXPECT_EQ(megatron_key("word_embeddings_for_head.weight").kind, MegatronKey::Kind::TiedCopy);
}

TEST(MegatronNames, BertNamesOfBothSchemes) {
  // Megatron-Core's BertModel: Tessera's names, the layer stack under "decoder." as a GPT's.
  EXPECT_EQ(tessera_name("encoder.layers.1.self_attention.linear_qkv.weight"),
            "decoder.layers.1.self_attention.linear_qkv.weight");
  for (const char* name : {"lm_head.dense.weight", "lm_head.layer_norm.bias", "output_layer.bias", "pooler.dense.weight",
                           "binary_head.bias", "embedding.tokentype_embeddings.weight"})
    EXPECT_EQ(tessera_name(name), name);
  // The legacy BertModel: language_model.{embedding, encoder, pooler}, lm_head.{dense, norm, bias}.
  EXPECT_EQ(tessera_name("language_model.pooler.dense.bias"), "pooler.dense.bias");
  EXPECT_EQ(tessera_name("lm_head.bias"), "output_layer.bias");
  EXPECT_EQ(tessera_name("lm_head.norm.weight"), "lm_head.layer_norm.weight");
  EXPECT_EQ(tessera_name("lm_head.layernorm.bias"), "lm_head.layer_norm.bias");
  EXPECT_EQ(tessera_name("language_model.encoder.final_norm.weight"), "decoder.final_layernorm.weight");
  EXPECT_EQ(megatron_stack_name("encoder.layers.0.mlp.linear_fc1.weight"), "decoder.layers.0.mlp.linear_fc1.weight");
  EXPECT_EQ(megatron_stack_name("lm_head.dense.weight"), "lm_head.dense.weight");
  EXPECT_EQ(megatron_split("output_layer.bias", false), MegatronSplit::Rows);
  EXPECT_EQ(megatron_split("binary_head.weight", false), MegatronSplit::Replicated);
  // What tells a BERT's checkpoint from a GPT's (the args do not).
  for (const char* key : {"lm_head.bias", "binary_head.weight", "language_model.pooler.dense.weight", "pooler.dense.bias",
                          "encoder.layers.0.mlp.linear_fc1.weight", "language_model.embedding.tokentype_embeddings.weight"})
    EXPECT_TRUE(megatron_bert_key(key)) << key;
  for (const char* key : {"language_model.encoder.layers.0.mlp.dense_h_to_4h.weight", "decoder.layers.mlp.linear_fc1.weight",
                          "output_layer.weight", "embedding.word_embeddings.weight"})
    EXPECT_FALSE(megatron_bert_key(key)) << key;
}

TEST(MegatronNames, UnknownKeysKeepTheirNameForTheUnusedReport) {
  EXPECT_EQ(tessera_name("lm_head.dense.weight"), "lm_head.dense.weight");
  EXPECT_EQ(megatron_key("decoder.layers.x.foo").layer, -1);
}

TEST(MegatronNames, SplitsAsMegatronsParallelLayers) {
  EXPECT_EQ(megatron_split("embedding.word_embeddings.weight", false), MegatronSplit::Rows);
  EXPECT_EQ(megatron_split("output_layer.weight", true), MegatronSplit::Rows);
  EXPECT_EQ(megatron_split("decoder.layers.0.self_attention.linear_qkv.bias", false), MegatronSplit::Rows);
  EXPECT_EQ(megatron_split("decoder.layers.0.mlp.linear_fc1.weight", false), MegatronSplit::Rows);
  EXPECT_EQ(megatron_split("decoder.layers.0.mlp.linear_fc1.weight", true), MegatronSplit::GatedRows);
  EXPECT_EQ(megatron_split("decoder.layers.0.self_attention.linear_proj.weight", false), MegatronSplit::Columns);
  EXPECT_EQ(megatron_split("decoder.layers.0.mlp.linear_fc2.weight", false), MegatronSplit::Columns);
  EXPECT_EQ(megatron_split("decoder.layers.0.mlp.linear_fc2.bias", false), MegatronSplit::Replicated);
  EXPECT_EQ(megatron_split("decoder.layers.0.input_layernorm.weight", false), MegatronSplit::Replicated);
  EXPECT_EQ(megatron_split("embedding.position_embeddings.weight", false), MegatronSplit::Replicated);
}

TEST(MegatronNames, ExpertsUnderTheirGlobalNumbers) {
  bool expert = false;
  // Expert rank 1 of 2, 4 local experts each: local 3 is global 7, in both of Megatron's forms.
  EXPECT_EQ(megatron_global_expert_key("decoder.layers.2.mlp.experts.local_experts.3.linear_fc1.weight", 1, 4, &expert),
            "decoder.layers.2.mlp.experts.local_experts.7.linear_fc1.weight");
  EXPECT_TRUE(expert);
  EXPECT_EQ(megatron_global_expert_key("decoder.layers.2.mlp.experts.linear_fc2.weight3", 1, 4, &expert),
            "decoder.layers.2.mlp.experts.local_experts.7.linear_fc2.weight");
  EXPECT_TRUE(expert);
  EXPECT_EQ(megatron_global_expert_key("decoder.layers.2.mlp.router.weight", 1, 4, &expert),
            "decoder.layers.2.mlp.router.weight");
  EXPECT_FALSE(expert);
  EXPECT_EQ(megatron_global_expert_key("decoder.layers.2.mlp.experts.linear_fc1._extra_state", 1, 4, &expert),
            "decoder.layers.2.mlp.experts.linear_fc1._extra_state");
  EXPECT_FALSE(expert);
  EXPECT_EQ(megatron_split("decoder.layers.2.mlp.experts.local_experts.7.linear_fc1.weight", true),
            MegatronSplit::GatedRows);
  EXPECT_EQ(megatron_split("decoder.layers.2.mlp.experts.local_experts.7.linear_fc2.weight", true),
            MegatronSplit::Columns);
  EXPECT_EQ(megatron_split("decoder.layers.2.mlp.router.weight", true), MegatronSplit::Replicated);
}

}  // namespace
}  // namespace tessera::ckpt
