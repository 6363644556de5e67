// Hugging Face interchange for the `bert` model family (Megatron-Core's BertModel), used by
// hf_convert.cc (`tessera convert`):
//
//   post-LN (--apply-residual-connection-post-layernorm)  <->  BertForPreTraining / BertForMaskedLM
//   pre-LN (Megatron's default)                           <->  MegatronBertForPreTraining / ...ForMaskedLM
//
// ForPreTraining with the binary head (the pooler and the sentence-order classifier), ForMaskedLM
// without it (--bert-no-binary-head): HF's ForMaskedLM classes have neither the pooler nor
// seq_relationship. Names and layouts:
//  * Megatron's grouped QKV rows <-> attention.self.query / key / value (HF Linear is [out, in] as Tessera).
//  * Post-LN: Tessera's layer computes z = LN1(x), h = z + attn(z), u = LN2(h), y = u + mlp(u) and the
//    encoder ends with the final LN, which is HF BERT's LN(x + sublayer(x)) chain with the norms shifted
//    by one: bert.embeddings.LayerNorm = layer 0's input_layernorm, layer i's attention.output.LayerNorm
//    = its pre_mlp_layernorm, layer i's output.LayerNorm = layer i+1's input_layernorm (the last layer's:
//    encoder.final_layernorm).
//  * Pre-LN (MegatronBert): attention.ln = input_layernorm, ln = pre_mlp_layernorm, bert.encoder.ln =
//    encoder.final_layernorm; MegatronBert's embeddings have no LayerNorm.
//  * Heads: cls.predictions.transform.dense / .LayerNorm = lm_head.dense / .layer_norm,
//    cls.predictions.bias = output_layer.bias (the decoder weight is tied to the word embeddings and not
//    written; on import a cls.predictions.decoder.weight / .bias must equal the tied tensors),
//    bert.pooler.dense = pooler.dense, cls.seq_relationship = binary_head.
//  * Token types: HF's embeddings always have them. Without the binary head Tessera has none: export
//    writes two zero rows (so any token_type_ids give Tessera's model), import adds row 0 to the position
//    embeddings (exact for token type 0, and bit-exact for Tessera's zero rows).
//  * The vocabulary keeps Tessera's padding, as for GPT (config.json vocab_size = padded_vocab_size):
//    Tessera's softmax runs over the padded rows, so dropping them would change the model's MLM
//    probabilities and loss. (NVIDIA's Megatron-BERT checkpoints on the Hub do the same: 29056 rows for
//    the 28996-token cased vocabulary.) A Hugging Face model without tessera_args imports unpadded.
// Every mapping is an exact permutation (plus the zero rows), so Tessera -> HF -> Tessera is bit-exact.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/config.h"

namespace tessera::ckpt {

// The architecture a bert-family model exports as; an Error naming what has no Hugging Face equivalent
// (RMSNorm, SwiGLU, rope, no biases, grouped-query attention, a head size other than hidden / heads).
std::string bert_hf_architecture(const model::ModelConfig& c);

// config.json of the export, with the run's arguments under "tessera_args".
nlohmann::json bert_hf_config(const model::ModelConfig& c, const nlohmann::json& tessera_args);

// Tessera's tensors (or their gradients; `gradients` leaves out the zero token-type rows, which have no
// Tessera gradient) under their Hugging Face names, and back.
std::map<std::string, Tensor> bert_to_hugging_face(const model::ModelConfig& c,
                                                   const std::map<std::string, Tensor>& tessera,
                                                   bool gradients = false);
std::map<std::string, Tensor> bert_from_hugging_face(const model::ModelConfig& c,
                                                     const std::map<std::string, Tensor>& hf);

}  // namespace tessera::ckpt
