// The subcommands of the `tessera` binary; each takes its arguments without the subcommand name and
// returns the process exit status.
#pragma once

#include <string>
#include <vector>

namespace tessera::apps {

int train_command(const std::vector<std::string>& args);
int pretrain_bert_command(const std::vector<std::string>& args);  // = train --model-family bert
int generate_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int eval_command(const std::vector<std::string>& args);
int samples_command(const std::vector<std::string>& args);  // the samples training sees
int finetune_command(const std::vector<std::string>& args);  // `finetune --task RACE`
int tokenize_command(const std::vector<std::string>& args);
int preprocess_command(const std::vector<std::string>& args);
int split_sentences_command(const std::vector<std::string>& args);
int merge_datasets_command(const std::vector<std::string>& args);
int tokenizer_command(const std::vector<std::string>& args);  // `tokenizer train ...`
int convert_command(const std::vector<std::string>& args);
int debug_forward_command(const std::vector<std::string>& args);  // hidden: parity tests
int plan_command(const std::vector<std::string>& args);
int msdp_command(const std::vector<std::string>& args);  // `msdp [preprocess]`: Megatron's tasks/msdp
int cntrl_command(const std::vector<std::string>& args);  // `cntrl preprocess`: MEGATRON-CNTRL's data

}  // namespace tessera::apps
