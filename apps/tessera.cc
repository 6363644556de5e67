// The `tessera` command: one binary, one subcommand per job (train, generate and tokenize today;
// preprocess, serve, eval, convert and plan as they land).
#include <malloc.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/check.h"
#include "core/thread_policy.h"

namespace {

constexpr const char* kUsage =
    "usage: tessera <command> [flags]\n"
    "\n"
    "commands:\n"
    "  train             train a GPT model (Megatron-LM flags; tessera train --help lists them)\n"
    "  pretrain_bert     train a BERT: masked LM and sentence order (= train --model-family bert)\n"
    "  samples           the samples training sees, from train's flags, as JSON lines or a listing\n"
    "  finetune          fine-tune a pretrained model: RACE, and MEGATRON-CNTRL's three stages (--task CNTRL-...)\n"
    "  generate          continue prompts with a trained checkpoint (key/value cache; greedy, top-k, top-p)\n"
    "  serve             Megatron's text generation REST server (PUT /api, POST /completions)\n"
    "  eval              zero-shot evaluation: WIKITEXT103 perplexity, LAMBADA accuracy\n"
    "  tokenize          text on stdin to token ids on stdout (--decode: the reverse)\n"
    "  tokenizer train   train a SentencePiece BPE or unigram model, or a BERT WordPiece vocab.txt, on text files\n"
    "  preprocess        jsonl or plain text to Megatron .bin/.idx datasets\n"
    "  split-sentences   the sentences of jsonl documents, as preprocess --split-sentences splits them\n"
    "  merge-datasets    concatenate .bin/.idx datasets\n"
    "  convert           checkpoints to and from Hugging Face (GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM,\n"
    "                    BertForPreTraining, MegatronBertForPreTraining)\n"
    "  plan              memory, iteration time and throughput of a run before launching it; --search for layouts\n"
    "  msdp              multi-stage prompting for knowledgeable dialogue (Megatron's tasks/msdp; msdp preprocess)\n"
    "  cntrl preprocess  MEGATRON-CNTRL's training data: RAKE keywords, ConceptNet knowledge, ranker labels\n"
    "  cntrl generate    MEGATRON-CNTRL's stories, sentence by sentence, with keyword control\n";

}  // namespace

int main(int argc, char** argv) {
  // How OpenMP's workers wait between kernels (core/thread_policy.h): may re-execute the program.
  tessera::settle_openmp_wait_policy(argv);
  // Activations are allocated and freed every micro-batch; keep freed blocks in the heap instead of
  // returning them to the OS, or every step pays for page faults on hundreds of MB.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args == std::vector<std::string>{"help"}) {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "help") {  // `tessera help train` is `tessera train --help`
    command = args[0];
    args = {"--help"};
  }
  try {
    if (command == "train") return tessera::apps::train_command(args);
    if (command == "pretrain_bert") return tessera::apps::pretrain_bert_command(args);  // Megatron's pretrain_bert.py
    if (command == "samples") return tessera::apps::samples_command(args);
    if (command == "finetune") return tessera::apps::finetune_command(args);
    if (command == "generate") return tessera::apps::generate_command(args);
    if (command == "serve") return tessera::apps::serve_command(args);
    if (command == "eval") return tessera::apps::eval_command(args);
    if (command == "tokenize") return tessera::apps::tokenize_command(args);
    if (command == "tokenizer") return tessera::apps::tokenizer_command(args);
    if (command == "preprocess") return tessera::apps::preprocess_command(args);
    if (command == "split-sentences") return tessera::apps::split_sentences_command(args);
    if (command == "merge-datasets") return tessera::apps::merge_datasets_command(args);
    if (command == "convert") return tessera::apps::convert_command(args);
    if (command == "debug-forward") return tessera::apps::debug_forward_command(args);
    if (command == "plan") return tessera::apps::plan_command(args);
    if (command == "msdp") return tessera::apps::msdp_command(args);
    if (command == "cntrl") return tessera::apps::cntrl_command(args);
    std::cerr << "tessera: unknown command '" << command << "'\n" << kUsage;
    return 2;
  } catch (const tessera::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
