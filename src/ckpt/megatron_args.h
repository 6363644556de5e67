// The model a Megatron-LM checkpoint holds, read from the argparse.Namespace of flags that Megatron saves
// in every model_optim_rng.pt ("args", after its validate_args, so derived sizes such as ffn_hidden_size,
// kv_channels and padded_vocab_size are filled in). Fields are Megatron's argument names; a field a
// newer Megatron renamed is read under both names (norm_epsilon / layernorm_epsilon). What Tessera's GPT
// cannot compute (shared experts, QK norm, interleaved or scaled rotary embeddings, LayerNorm-1p,
// squared ReLU, a QKV bias without the other biases) is refused by its argument name, before any tensor
// is merged; a difference that changes numbers but not shapes (exact erf GELU where Tessera has the tanh
// form) is stated as a note.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/torch_file.h"
#include "model/config.h"

namespace tessera::ckpt {

struct MegatronArgs {
  model::ModelConfig config;  // vocab_size: the tokenizer's where the args tell it, else padded_vocab_size
  bool group_query_attention = false;
  int64_t make_vocab_size_divisible_by = 128;
  // The layout that saved the checkpoint (virtual: model chunks per pipeline rank, 1 without interleaving).
  int64_t tensor_parallel = 1, pipeline_parallel = 1, virtual_pipeline = 1;
  int64_t expert_parallel = 1;  // mixture of experts: each expert rank holds num_experts / this of them
  int64_t expert_tensor_parallel = 1;  // args.expert_tensor_parallel_size (the tensor-parallel size when unset)
  // Training state and the tokenizer, as Megatron recorded them (-1 / empty where absent).
  int64_t consumed_train_samples = -1, seed = -1;
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model;
  int64_t null_vocab_size = -1;  // NullTokenizer's --vocab-size (its ids run to that value: one more token)
  bool fp16 = false, bf16 = false;
  bool bert_binary_head = true;  // args.bert_binary_head (--bert-no-binary-head): read for a BERT only
  bool openai_gelu = false;
  std::vector<std::string> notes;  // what converts but not exactly (printed by the command)
};

// `where` begins every error ("DIR/iter_0000010/mp_rank_00_000/model_optim_rng.pt: args").
MegatronArgs read_megatron_args(const StateNode& args, const std::string& where);

// The args are a BERT's: Megatron's args do not say which model they trained (the script did), so the
// readers call this when the checkpoint's keys are a BERT's (megatron_bert_key). The family becomes "bert",
// with the binary head and its two token types as args.bert_binary_head says; `where` names the file.
void set_megatron_bert(MegatronArgs& a, const std::string& where);

}  // namespace tessera::ckpt
