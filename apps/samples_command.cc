// `tessera samples`: the samples a training run would see, from the same flags. The flags of `train` (or,
// with --model-family bert, of `pretrain_bert`) go through train's parser and build_batch_sources, the
// trainer's own dataset builder, so the samples printed are the samples trained on: sample i of the
// train split is the i-th sample of the run (in iteration i / global batch, or where a batch-size ramp
// puts it), on whichever rank takes it.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "core/check.h"
#include "data/blended_dataset.h"
#include "core/file_io.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer_factory.h"
#include "train/args/arguments.h"
#include "train/training_data.h"

namespace tessera::apps {

namespace {

constexpr const char* kSamplesUsage =
    "usage: tessera samples <the flags of tessera train> [--split train|valid|test] [--first N] [--count M]\n"
    "                       [--output FILE] [--decode] [--world-size N]\n"
    "\n"
    "Builds the datasets as tessera train does from the same flags and prints samples N .. N+M-1 of a split\n"
    "with Megatron's field names (GPT: tokens, labels, loss_mask, position_ids; BERT, with --model-family\n"
    "bert: text, types, labels (-1 where not predicted), is_random, padding_mask, loss_mask, truncated).\n"
    "\n"
    "  --split train|valid|test  which split (default train); any other value is train's --split, the\n"
    "                            shares of the documents (e.g. --split 949,50,1 --split valid)\n"
    "  --first N                 the first sample (default 0)\n"
    "  --count M                 how many samples (default 1)\n"
    "  --output FILE             write JSON lines to FILE instead of a listing on standard output\n"
    "  --decode                  the detokenised text beside the ids (tokens_decoded, text_decoded)\n"
    "  --world-size N            the ranks of the training run, for its layout flags (default 1)\n"
    "\n"
    "tessera train --help lists the training flags.\n";

struct SamplesFlags {
  data::Split split = data::Split::kTrain;
  int64_t first = 0, count = 1, world_size = 1;
  std::string output;
  bool decode = false;
};

int64_t integer_flag(const std::string& flag, const std::string& value, int64_t min) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) throw Error(str_cat(flag, "=", value, ": must be an integer"));
  if (v < min) throw Error(str_cat(flag, "=", value, ": must be at least ", min));
  return v;
}

std::optional<data::Split> split_named(const std::string& name) {
  for (data::Split s : {data::Split::kTrain, data::Split::kValid, data::Split::kTest})
    if (name == data::split_name(s)) return s;
  return std::nullopt;
}

// Takes samples' own flags out of `args` ("--flag value" or "--flag=value"), leaving train's flags.
SamplesFlags take_samples_flags(std::vector<std::string>& args) {
  SamplesFlags f;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    if (name == "--decode" && eq == std::string::npos) {
      f.decode = true;
      continue;
    }
    const bool ours = name == "--first" || name == "--count" || name == "--output" || name == "--world-size" ||
                      name == "--split";
    if (!ours) {
      rest.push_back(arg);
      continue;
    }
    const bool inline_value = eq != std::string::npos;
    if (!inline_value && i + 1 == args.size()) throw Error(str_cat(name, ": needs a value"));
    const std::string value = inline_value ? arg.substr(eq + 1) : args[i + 1];
    if (name == "--split" && !split_named(value)) {  // train's --split: the shares of the documents
      rest.push_back(arg);
      continue;
    }
    if (!inline_value) ++i;
    if (name == "--split") f.split = *split_named(value);
    if (name == "--first") f.first = integer_flag(name, value, 0);
    if (name == "--count") f.count = integer_flag(name, value, 1);
    if (name == "--world-size") f.world_size = integer_flag(name, value, 1);
    if (name == "--output") f.output = value;
  }
  args = rest;
  return f;
}

// The field the model reads as its input: GPT's tokens, BERT's text.
const train::SampleField& input_field(const train::MegatronSample& s) { return s.front(); }

std::string decoded(const data::Tokenizer& tokenizer, const train::SampleField& field) {
  const std::vector<int32_t> ids(field.values.begin(), field.values.end());
  return tokenizer.decode(ids);
}

nlohmann::ordered_json json_line(const train::MegatronSample& s, const data::Tokenizer* tokenizer) {
  nlohmann::ordered_json j;
  for (const train::SampleField& f : s) {
    if (f.scalar) {
      j[f.name] = f.values.front();
    } else {
      j[f.name] = f.values;
    }
    if (tokenizer && &f == &input_field(s)) j[f.name + "_decoded"] = decoded(*tokenizer, f);
  }
  return j;
}

// "  name:" padded so that the values line up.
std::string label(const std::string& name) {
  std::string line = "  " + name + ":";
  line.resize(std::max<size_t>(line.size(), 16), ' ');
  return line;
}

void print_listing(std::ostream& out, const std::string& split, int64_t index, const train::MegatronSample& s,
                   const data::Tokenizer* tokenizer) {
  out << split << " sample " << index << ":\n";
  for (const train::SampleField& f : s) {
    std::string line = label(f.name);
    for (int64_t v : f.values) line += str_cat(" ", v);
    out << line << "\n";
  }
  if (tokenizer)  // quoted, so that newlines and edges of the text show
    out << label("decoded") << " "
        << nlohmann::json(decoded(*tokenizer, input_field(s))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
}

}  // namespace

int samples_command(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << kSamplesUsage;
      return 0;
    }
  std::vector<std::string> train_args = args;
  const SamplesFlags f = take_samples_flags(train_args);
  const train::TrainArguments a = train::parse_train_arguments(train_args, f.world_size);
  const auto sources = train::build_batch_sources(a);
  const std::string split = data::split_name(f.split);
  const auto& source = sources[static_cast<size_t>(f.split)];
  if (!source) {
    if (!a.data_path.empty())
      throw Error(str_cat("--split=", split, ": the ", split, " split has no documents (--split ", a.split, ")"));
    throw Error(str_cat("--split=", split, ": the ", split, " split has no dataset (no ",
                        data::kSplitDataPathFlags[static_cast<size_t>(f.split)], ")"));
  }
  if (f.first > source->size() - f.count)  // not first + count, which overflows for --first near 2^63
    throw Error(str_cat("--count=", f.count, ": samples from --first=", f.first, " run past the ", split,
                        " split's ", source->size(), " samples"));
  const std::unique_ptr<data::Tokenizer> tokenizer =
      f.decode ? data::build_tokenizer(train::tokenizer_options(a)) : nullptr;

  std::unique_ptr<AtomicOutputFile> file;  // an error part way leaves no partial --output
  if (!f.output.empty()) file = std::make_unique<AtomicOutputFile>(f.output, "--output=" + f.output);
  for (int64_t i = f.first; i < f.first + f.count; ++i) {
    const train::MegatronSample s = source->megatron_sample(i);
    if (file) {
      // A sample's text may start or end inside a multi-byte character: such bytes become U+FFFD.
      file->stream() << json_line(s, tokenizer.get()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                     << "\n";
    } else {
      print_listing(std::cout, split, i, s, tokenizer.get());
    }
  }
  if (file) file->commit();
  return 0;
}

}  // namespace tessera::apps
