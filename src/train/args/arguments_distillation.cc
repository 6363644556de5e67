// The knowledge-distillation flags (Megatron-DeepSpeed's --kd, --kd-temp, --kd-alpha-ce, --kd-beta-ce,
// --load-teacher; and Tessera's --kd-stop-iteration for DeepSpeed-MoE's staged distillation) and their
// rules, the teacher's among them: its checkpoint is read here (its index only), so a teacher that cannot
// be built in this run's layout, or that does not share the student's vocabulary, is refused before any
// work.
#include <CLI/CLI.hpp>

#include <cmath>

#include "ckpt/checkpoint.h"
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {
namespace {

using rules::require;

// The teacher's recorded configuration, made this run's: the student's sequence length, padded
// vocabulary and precision (a run's settings, not the model's), each rule naming the teacher's value.
model::ModelConfig teacher_config(const TrainArguments& a) {
  const std::string& dir = a.load_teacher;
  const char* flag = "--load-teacher";
  require(ckpt::latest_checkpointed_iteration(dir) >= 0, flag, dir,
          "holds no checkpoint (no latest_checkpointed_iteration.txt naming a saved iteration)");
  const nlohmann::json recorded = ckpt::latest_checkpoint_args(dir);
  require(recorded.is_object() && recorded.contains("model"), flag, dir,
          "its checkpoint records no model configuration to build the teacher from");
  model::ModelConfig t;
  try {
    t = model::config_from_json(recorded.at("model"));
  } catch (const Error& e) {
    throw Error(str_cat(flag, "=", dir, ": ", e.what()));
  }
  const model::ModelConfig& s = a.model;
  const auto teacher = [&](const std::string& rule) { return str_cat("the teacher's ", rule); };
  require(t.family == "gpt", flag, dir, teacher(str_cat("model family is ", t.family, "; --kd distils a GPT")));
  // One vocabulary: the KL compares the two distributions id by id, over the same padded vocabulary
  // (a teacher saved with other padding would have rows this layout's loading keeps as initialised).
  require(t.vocab_size == s.vocab_size, flag, dir,
          teacher(str_cat("vocabulary has ", t.vocab_size, " ids, the student's ", s.vocab_size,
                          ": they must share the tokenizer")));
  require(t.padded_vocab_size == s.padded_vocab_size, flag, dir,
          teacher(str_cat("padded vocabulary is ", t.padded_vocab_size, ", the student's ", s.padded_vocab_size,
                          ": set --make-vocab-size-divisible-by so that they are equal")));
  // What this run's tensor and expert groups split (the teacher is built in the student's layout).
  const int64_t tp = a.tensor_model_parallel_size, ep = a.expert_model_parallel_size;
  const int64_t etp = a.expert_tensor_parallel_size;
  const auto divisible = [&](int64_t value, const char* what, int64_t by, const char* by_flag) {
    require(value % by == 0, flag, dir, teacher(str_cat(what, " (", value, ") must be divisible by ", by_flag, "=", by)));
  };
  divisible(t.num_attention_heads, "attention heads", tp, "--tensor-model-parallel-size");
  divisible(t.num_query_groups, "query groups", tp, "--tensor-model-parallel-size");
  divisible(t.ffn_hidden_size, "ffn hidden size", tp, "--tensor-model-parallel-size");
  if (t.moe.enabled()) {
    for (int64_t e : t.moe.layer_experts)
      if (e > 0) divisible(e, "experts of a layer", ep, "--expert-model-parallel-size");
    divisible(t.moe.ffn_hidden_size, "expert ffn hidden size", etp, "--expert-tensor-parallel-size");
    divisible(t.moe.shared_expert_intermediate_size, "shared expert size", tp, "--tensor-model-parallel-size");
    require(tp == 1 || a.sequence_parallel, flag, dir,
            teacher("experts need --sequence-parallel with --tensor-model-parallel-size > 1 (each tensor rank "
                    "routes its sequence shard)"));
  }
  require(t.position_embedding != model::PositionEmbedding::LearnedAbsolute ||
              t.max_position_embeddings >= s.seq_length,
          flag, dir,
          teacher(str_cat("learned position embeddings cover ", t.max_position_embeddings,
                          " positions, fewer than --seq-length=", s.seq_length)));
  t.seq_length = s.seq_length;
  t.params_dtype = s.params_dtype;
  return t;
}

}  // namespace

void add_distillation_flags(CLI::App& app, TrainArguments& a) {
  app.add_flag("--kd", a.kd, "Knowledge distillation: add beta * tau^2 * KL(teacher || student) to the loss");
  app.add_option("--kd-temp", a.kd_temp, "Softmax temperature tau of the KD term");
  app.add_option("--kd-alpha-ce", a.kd_alpha_ce, "Weight alpha of the student's LM (cross-entropy) loss under --kd");
  app.add_option("--kd-beta-ce", a.kd_beta_ce, "Weight beta of the KD term");
  app.add_option("--load-teacher", a.load_teacher,
                 "Tessera checkpoint of the teacher, built from the configuration it records");
  app.add_option("--kd-stop-iteration", a.kd_stop_iteration,
                 "Staged KD: distil for this many iterations, then train on the LM loss alone (0: throughout)");
}

void finalize_distillation(TrainArguments& a) {
  if (!a.kd) {
    require(a.load_teacher.empty(), "--load-teacher", a.load_teacher, "needs --kd");
    require(a.kd_stop_iteration == 0, "--kd-stop-iteration", a.kd_stop_iteration, "needs --kd");
    require(a.kd_temp == 1.0f, "--kd-temp", a.kd_temp, "needs --kd");
    require(a.kd_alpha_ce == 1.0f, "--kd-alpha-ce", a.kd_alpha_ce, "needs --kd");
    require(a.kd_beta_ce == 1.0f, "--kd-beta-ce", a.kd_beta_ce, "needs --kd");
    return;
  }
  require(!a.load_teacher.empty(), "--kd", "set", "needs --load-teacher DIR (the teacher's checkpoint)");
  require(std::isfinite(a.kd_temp) && a.kd_temp > 0, "--kd-temp", a.kd_temp, "must be positive");
  require(std::isfinite(a.kd_alpha_ce) && a.kd_alpha_ce >= 0, "--kd-alpha-ce", a.kd_alpha_ce, "must be >= 0");
  require(std::isfinite(a.kd_beta_ce) && a.kd_beta_ce >= 0, "--kd-beta-ce", a.kd_beta_ce, "must be >= 0");
  require(a.kd_alpha_ce > 0 || a.kd_beta_ce > 0, "--kd-alpha-ce", a.kd_alpha_ce,
          "and --kd-beta-ce=0 leave nothing to train on");
  require(a.kd_stop_iteration >= 0, "--kd-stop-iteration", a.kd_stop_iteration, "must be >= 0 (0: distil throughout)");
  require(a.model.family == "gpt", "--kd", "set",
          str_cat("distils a GPT's next-token distribution; --model-family=", a.model.family, " has none"));
  a.teacher_model = teacher_config(a);
}

}  // namespace tessera::train
