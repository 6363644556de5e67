#include "ckpt/hf_bert.h"

#include <cstring>
#include <set>

#include "ckpt/hf_layout.h"
#include "core/check.h"

namespace tessera::ckpt {
using nlohmann::json;
using TensorMap = std::map<std::string, Tensor>;
using hf_layout::Qkv;

namespace {

bool post_ln(const model::ModelConfig& c) { return c.apply_residual_connection_post_layernorm; }

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.host_f32(), b.host_f32(), a.nbytes()) == 0;
}

// HF's old TensorFlow-era LayerNorm names (gamma/beta), as transformers renames them on load.
std::string modern_name(const std::string& name) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name.find("LayerNorm") != std::string::npos && ends_with(".gamma"))
    return name.substr(0, name.size() - 6) + ".weight";
  if (name.find("LayerNorm") != std::string::npos && ends_with(".beta"))
    return name.substr(0, name.size() - 5) + ".bias";
  return name;
}

// Tessera names <-> Hugging Face names. `to_hf` chooses the direction; `src` holds the tensors of the
// source side, the result those of the other side.
TensorMap map_bert(const model::ModelConfig& c, const TensorMap& src, bool to_hf, bool gradients) {
  bert_hf_architecture(c);  // representable
  TensorMap out;
  std::set<std::string> used;
  const char* side = to_hf ? "checkpoint" : "Hugging Face model";
  auto has = [&](const std::string& name) { return src.count(name) > 0; };
  auto get = [&](const std::string& name) -> const Tensor& {
    used.insert(name);
    auto it = src.find(name);
    TESSERA_CHECK(it != src.end(), "convert: the ", side, " has no tensor ", name);
    return it->second;
  };
  auto rename = [&](const std::string& tessera, const std::string& hf) {
    if (to_hf) out[hf] = get(tessera);
    else out[tessera] = get(hf);
  };
  auto both = [&](const std::string& tessera, const std::string& hf) {
    for (const char* p : {".weight", ".bias"}) rename(tessera + p, hf + p);
  };
  const int64_t groups = c.num_query_groups, per_group = c.query_heads_per_group(), d = c.kv_channels;
  const int64_t h = c.hidden_size, vocab = c.padded_vocab_size;

  const std::string e = "bert.embeddings.";
  rename("embedding.word_embeddings.weight", e + "word_embeddings.weight");
  if (c.bert_binary_head) {
    rename("embedding.tokentype_embeddings.weight", e + "token_type_embeddings.weight");
    rename("embedding.position_embeddings.weight", e + "position_embeddings.weight");
  } else if (to_hf) {
    rename("embedding.position_embeddings.weight", e + "position_embeddings.weight");
    if (!gradients) out[e + "token_type_embeddings.weight"] = Tensor::zeros({2, h});
  } else {
    // Token type 0's row joins the position embeddings (adding Tessera's zero rows changes no bit).
    Tensor pos = get(e + "position_embeddings.weight").clone();
    if (has(e + "token_type_embeddings.weight")) {
      const Tensor& types = get(e + "token_type_embeddings.weight");
      TESSERA_CHECK(types.ndim() == 2 && types.dim(1) == h && pos.ndim() == 2 && pos.dim(1) == h, "convert: ",
                    e, "token_type_embeddings.weight is ", shape_str(types.shape()), ", expected [types, ", h, "]");
      for (int64_t p = 0; p < pos.dim(0); ++p)
        for (int64_t j = 0; j < h; ++j) pos.host_f32()[p * h + j] += types.host_f32()[j];
    }
    out["embedding.position_embeddings.weight"] = pos;
  }

  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string t = str_cat("encoder.layers.", i, "."), l = str_cat("bert.encoder.layer.", i, ".");
    for (const char* p : {"weight", "bias"}) {
      const std::string tn = t + "self_attention.linear_qkv." + p;
      const std::string q = l + "attention.self.query." + p, k = l + "attention.self.key." + p,
                        v = l + "attention.self.value." + p;
      if (to_hf) {
        Qkv x = hf_layout::split_qkv(get(tn), groups, per_group, d);
        out[q] = x.q, out[k] = x.k, out[v] = x.v;
      } else {
        out[tn] = hf_layout::merge_qkv({get(q), get(k), get(v)}, groups, per_group, d);
      }
    }
    both(t + "self_attention.linear_proj", l + "attention.output.dense");
    both(t + "mlp.linear_fc1", l + "intermediate.dense");
    both(t + "mlp.linear_fc2", l + "output.dense");
    if (post_ln(c)) {
      if (i == 0) both(t + "input_layernorm", e + "LayerNorm");
      both(t + "pre_mlp_layernorm", l + "attention.output.LayerNorm");
      both(i + 1 < c.num_layers ? str_cat("encoder.layers.", i + 1, ".input_layernorm") : "encoder.final_layernorm",
           l + "output.LayerNorm");
    } else {
      both(t + "input_layernorm", l + "attention.ln");
      both(t + "pre_mlp_layernorm", l + "ln");
    }
  }
  if (!post_ln(c)) both("encoder.final_layernorm", "bert.encoder.ln");

  both("lm_head.dense", "cls.predictions.transform.dense");
  both("lm_head.layer_norm", "cls.predictions.transform.LayerNorm");
  if (to_hf || has("cls.predictions.bias") || !has("cls.predictions.decoder.bias")) {
    rename("output_layer.bias", "cls.predictions.bias");
  } else {
    rename("output_layer.bias", "cls.predictions.decoder.bias");
  }
  if (c.bert_binary_head) {
    both("pooler.dense", "bert.pooler.dense");
    both("binary_head", "cls.seq_relationship");
  }

  if (!to_hf) {
    // The decoder is tied: copies HF files may carry must be the tied tensors.
    const std::pair<const char*, const char*> tied[] = {
        {"cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"},
        {"cls.predictions.decoder.bias", "cls.predictions.bias"}};
    for (const auto& [copy, of] : tied) {
      if (!has(copy) || !has(of)) continue;
      TESSERA_CHECK(bit_equal(get(copy), get(of)), "convert: ", copy, " differs from ", of,
                    "; Tessera's BERT ties its output layer to the word embeddings");
    }
    used.insert("bert.embeddings.position_ids");  // a buffer older transformers saved
    const Tensor& words = out.at("embedding.word_embeddings.weight");
    TESSERA_CHECK(words.ndim() == 2 && words.dim(0) == vocab && words.dim(1) == h, "convert: ", e,
                  "word_embeddings.weight is ", shape_str(words.shape()), ", expected [", vocab, ", ", h, "]");
    TESSERA_CHECK(out.at("output_layer.bias").shape() == Shape({vocab}), "convert: the output bias is ",
                  shape_str(out.at("output_layer.bias").shape()), ", expected [", vocab, "]");
  }

  std::string unused;
  for (const auto& entry : src)
    if (!used.count(entry.first)) unused += " " + entry.first;
  TESSERA_CHECK(unused.empty(), "convert: the ", side, " has tensors ", bert_hf_architecture(c),
                " does not use:", unused);
  return out;
}

}  // namespace

std::string bert_hf_architecture(const model::ModelConfig& c) {
  TESSERA_CHECK(c.family == "bert", "convert: not a bert-family model: '", c.family, "'");
  TESSERA_CHECK(c.normalization == model::Normalization::LayerNorm && !c.swiglu &&
                    c.position_embedding == model::PositionEmbedding::LearnedAbsolute && c.add_bias_linear &&
                    !c.untie_embeddings_and_output_weights && c.num_query_groups == c.num_attention_heads &&
                    c.kv_channels * c.num_attention_heads == c.hidden_size,
                "convert: this BERT has no Hugging Face equivalent: BertForPreTraining and "
                "MegatronBertForPreTraining have LayerNorm, GELU, learned absolute positions, biases, a tied "
                "output layer and multi-head attention with head size hidden / heads");
  TESSERA_CHECK(c.num_tokentypes == (c.bert_binary_head ? 2 : 0), "convert: BERT ",
                c.bert_binary_head ? "with" : "without", " the binary head has ", c.bert_binary_head ? 2 : 0,
                " token types, not ", c.num_tokentypes);
  return str_cat(post_ln(c) ? "Bert" : "MegatronBert", c.bert_binary_head ? "ForPreTraining" : "ForMaskedLM");
}

json bert_hf_config(const model::ModelConfig& c, const json& tessera_args) {
  return {{"architectures", {bert_hf_architecture(c)}},
          {"model_type", post_ln(c) ? "bert" : "megatron-bert"},
          {"vocab_size", c.padded_vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"intermediate_size", c.ffn_hidden_size},
          {"hidden_act", "gelu_new"},
          {"hidden_dropout_prob", model::json_float(c.hidden_dropout)},
          {"attention_probs_dropout_prob", model::json_float(c.attention_dropout)},
          {"max_position_embeddings", c.max_position_embeddings},
          {"type_vocab_size", 2},
          {"initializer_range", model::json_float(c.init_method_std)},
          {"layer_norm_eps", model::json_float(c.norm_epsilon)},
          {"position_embedding_type", "absolute"},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"},
          {"tessera_args", tessera_args}};
}

TensorMap bert_to_hugging_face(const model::ModelConfig& c, const TensorMap& tessera, bool gradients) {
  return map_bert(c, tessera, /*to_hf=*/true, gradients);
}

TensorMap bert_from_hugging_face(const model::ModelConfig& c, const TensorMap& hf) {
  TensorMap named;
  for (const auto& [name, t] : hf) named[modern_name(name)] = t;
  return map_bert(c, named, /*to_hf=*/false, false);
}

}  // namespace tessera::ckpt
