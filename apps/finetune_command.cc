// `tessera finetune --task RACE | CNTRL-RANKER | CNTRL-KEYWORDS | CNTRL-GENERATOR`: Megatron's tasks/main.py,
// one process (tasks/finetune.h).
#include <iostream>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "tasks/finetune.h"
#include "train/args/argument_rules.h"

namespace tessera::apps {

int finetune_command(const std::vector<std::string>& args) {
  tasks::FinetuneArguments a;
  a.micro_batch_size = 4;
  a.lr = 1e-5f;
  a.adam.weight_decay = 0.01f;  // Megatron's default; its RACE example gives --weight-decay 1.0e-1
  CLI::App app{"Fine-tune a pretrained model on a task (Megatron's tasks/main.py)", "tessera finetune"};
  app.add_option("--task", a.task,
                 "RACE or CNTRL-RANKER (a BERT, multiple choice), CNTRL-KEYWORDS or CNTRL-GENERATOR (a GPT)")
      ->required();
  app.add_option("--train-data", a.train_data,
                 "RACE directories (RACE/train/middle ...) or `tessera cntrl preprocess` files to train on")
      ->expected(1, -1);
  app.add_option("--valid-data", a.valid_data, "Directories or files to evaluate on, each on its own")
      ->expected(1, -1);
  app.add_option("--pretrained-checkpoint", a.pretrained_checkpoint,
                 "A BERT (pretrain_bert --save) or GPT (train --save) checkpoint, or a fine-tuned one");
  app.add_option("--ranker-choices", a.ranker_choices, "CNTRL-RANKER: knowledge sentences per training question");
  app.add_option("--save", a.save, "Save a checkpoint here after every epoch");
  app.add_option("--epochs", a.epochs, "Passes over the training data (0: evaluate only)");
  app.add_option("--micro-batch-size", a.micro_batch_size, "Questions (multiple choice) or sequences per step");
  app.add_flag("--keep-last", a.keep_last, "Keep the last, partial micro-batch of an epoch");
  app.add_option("--seq-length", a.seq_length, "Sequence length (default: the pretrained model's)");
  app.add_option("--lr", a.lr, "Peak learning rate");
  app.add_option("--min-lr", a.min_lr, "Learning rate at the end of the decay");
  app.add_option("--lr-decay-style", a.lr_decay_style, "constant, linear or cosine");
  app.add_option("--lr-warmup-fraction", a.lr_warmup_fraction, "Warm-up as a fraction of the iterations");
  app.add_option("--weight-decay", a.adam.weight_decay, "AdamW weight decay");
  app.add_option("--clip-grad", a.adam.clip_grad, "Gradient clipping by global norm (0: off)");
  app.add_option("--adam-beta1", a.adam.beta1, "Adam beta1");
  app.add_option("--adam-beta2", a.adam.beta2, "Adam beta2");
  app.add_option("--adam-eps", a.adam.eps, "Adam epsilon");
  app.add_option("--hidden-dropout", a.hidden_dropout, "Dropout on hidden states and the pooled [CLS]");
  app.add_option("--attention-dropout", a.attention_dropout, "Dropout on attention probabilities");
  app.add_option("--tokenizer-type", a.tokenizer_type,
                 "The tokenizer (default: the pretrained checkpoint's)");
  app.add_option("--vocab-file", a.vocab_file, "Vocabulary file (default: the pretrained checkpoint's)");
  app.add_option("--merge-file", a.merge_file, "GPT-2 BPE merges (default: the pretrained checkpoint's)");
  app.add_option("--tokenizer-model", a.tokenizer_model, "SentencePiece model (default: the pretrained checkpoint's)");
  app.add_option("--seed", a.seed, "Initialisation, dropout and shuffling seed")->check(train::rules::seed_rule);
  app.add_option("--log-interval", a.log_interval, "Iterations per log line");
  if (!parse_command_line(app, args, "finetune")) return 0;
  tasks::finetune(a, [](const std::string& line) { std::cout << line << std::endl; });
  return 0;
}

}  // namespace tessera::apps
