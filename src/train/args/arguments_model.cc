// The model flags, bound to the fields of TrainArguments::model, and the model's rules.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/model_factory.h"
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {
namespace {

using rules::require;
using rules::require_positive;

template <typename E>
using Names = std::vector<std::pair<std::string, E>>;

const Names<model::PositionEmbedding>& position_embedding_names() {
  static const Names<model::PositionEmbedding> names = {{"learned_absolute", model::PositionEmbedding::LearnedAbsolute},
                                                        {"rope", model::PositionEmbedding::Rope}};
  return names;
}

const Names<model::Normalization>& normalization_names() {
  static const Names<model::Normalization> names = {{"LayerNorm", model::Normalization::LayerNorm},
                                                    {"RMSNorm", model::Normalization::RMSNorm}};
  return names;
}

template <typename E>
std::string name_of(const Names<E>& names, E value) {
  for (const auto& [name, e] : names)
    if (e == value) return name;
  return std::to_string(static_cast<int>(value));
}

// An option whose values are Megatron's names for an enum's members, written into `field`. CLI11 reads
// an enum as its number, so the transform turns the name into that number; any other value is an
// error naming the flag, the value and the names, as the rules' errors do (CLI11's CheckedTransformer
// maps names too, but says "Check alibi value in {...} FAILED" and also takes the numbers).
template <typename E>
void add_enum_option(CLI::App& app, const char* flag, E& field, const Names<E>& names, const char* help) {
  std::string choices, set;  // "a, b or c" for the rule, "{a,b,c}" for --help
  for (size_t i = 0; i < names.size(); ++i) {
    choices += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i].first;
    set += (i == 0 ? "{" : ",") + names[i].first;
  }
  set += "}";
  const std::string rule = "must be " + choices;
  const std::string flag_name = flag;
  auto to_number = [names, rule, flag_name](std::string& value) {
    for (const auto& [name, e] : names)
      if (value == name) {
        value = std::to_string(static_cast<int>(e));
        return std::string();
      }
    throw Error(str_cat(flag_name, "=", value, ": ", rule));
  };
  app.add_option(flag, field, help)
      ->transform(CLI::Validator(to_number, set))
      ->type_name("TEXT")
      ->default_str(name_of(names, field));
}

}  // namespace

model::ModelConfig megatron_model_defaults() {
  model::ModelConfig c;
  c.num_query_groups = 1;  // Megatron's --num-query-groups default, used with --group-query-attention
  return c;
}

std::string megatron_name(model::PositionEmbedding p) { return name_of(position_embedding_names(), p); }
std::string megatron_name(model::Normalization n) { return name_of(normalization_names(), n); }

// The flags that define the model (not its layout): `tessera train`'s, and those `generate`, `serve` and
// `eval` accept from a Megatron launch script.
void add_model_flags(CLI::App& app, TrainArguments& a) {
  model::ModelConfig& c = a.model;
  app.add_option("--num-layers", c.num_layers, "Number of transformer layers");
  app.add_option("--hidden-size", c.hidden_size, "Transformer hidden size");
  app.add_option("--num-attention-heads", c.num_attention_heads, "Number of attention heads");
  app.add_option("--ffn-hidden-size", c.ffn_hidden_size, "MLP hidden size (default 4h, or 8h/3 rounded to 64 with SwiGLU)");
  app.add_option("--kv-channels", c.kv_channels, "Head dimension (default hidden / heads)");
  app.add_flag("--group-query-attention", a.group_query_attention, "Use grouped-query attention");
  app.add_option("--num-query-groups", c.num_query_groups, "Key/value heads with --group-query-attention");
  app.add_option("--seq-length", c.seq_length, "Sequence length");
  app.add_option("--encoder-seq-length", a.encoder_seq_length,
                 "Megatron's other name of the sequence length (GPT, BERT): the same as --seq-length, which it "
                 "must equal when both are given")
      ->default_str("");
  app.add_option("--max-position-embeddings", c.max_position_embeddings, "Positions of the learned embedding (default seq length)");
  add_enum_option(app, "--position-embedding-type", c.position_embedding, position_embedding_names(),
                  "learned_absolute or rope");
  app.add_flag("--no-position-embedding", a.no_position_embedding,
               "Megatron's deprecated switch: no effect with --position-embedding-type rope, refused otherwise");
  app.add_option("--rotary-base", c.rotary_base, "Base of the rotary frequencies");
  app.add_option("--rotary-percent", c.rotary_percent, "Fraction of each head rotated by RoPE");
  app.add_flag("--use-rope-scaling", a.use_rope_scaling, "Llama 3.x RoPE frequency scaling");
  app.add_option("--rope-scaling-factor", c.rope_scaling_factor, "Factor of --use-rope-scaling")->capture_default_str();
  app.add_option("--rotary-seq-len-interpolation-factor", a.rotary_seq_len_interpolation_factor,
                 "Linear RoPE scaling: positions divided by this factor");
  app.add_flag("--qk-layernorm", c.qk_layernorm, "Normalise each head's query and key before RoPE");
  add_enum_option(app, "--normalization", c.normalization, normalization_names(), "LayerNorm or RMSNorm");
  app.add_option("--norm-epsilon", c.norm_epsilon, "Epsilon of the norms");
  app.add_flag("--swiglu", c.swiglu, "SwiGLU MLP instead of GELU");
  app.add_flag("--untie-embeddings-and-output-weights", c.untie_embeddings_and_output_weights,
               "Separate output layer instead of the word embedding");
  // Megatron's flag is the negation of the field (argparse's store_false into add_bias_linear).
  app.add_flag_callback("--disable-bias-linear", [&c] { c.add_bias_linear = false; }, "No biases in linear layers");
  app.add_option("--hidden-dropout", c.hidden_dropout, "Dropout after attention and MLP");
  app.add_option("--attention-dropout", c.attention_dropout, "Dropout of attention probabilities");
  app.add_option("--init-method-std", c.init_method_std, "Std of the normal initialisation");
  app.add_option("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by, "Pad the vocabulary to a multiple of this");
  app.add_flag("--apply-residual-connection-post-layernorm", c.apply_residual_connection_post_layernorm,
               "Residuals from the norms' outputs (the original BERT ordering) instead of pre-LN");
  app.add_option("--model-family", c.family, "gpt or bert (tessera pretrain_bert sets bert)");
  // Megatron's flag is the negation of the field (store_false into bert_binary_head).
  app.add_flag_callback("--bert-no-binary-head", [&c] { c.bert_binary_head = false; },
                        "BERT without the pooler and the sentence-order head");
  add_moe_flags(app, a);
  add_mla_flags(app, a);
  add_mtp_flags(app, a);
}

// The rules of the model alone; those that involve the layout (divisibility by the tensor-parallel
// size) are finalize_parallel_layout's, and the vocabulary sizes finalize_data's.
void finalize_model(TrainArguments& a) {
  model::ModelConfig& c = a.model;
  require_positive("--num-layers", c.num_layers);
  require_positive("--hidden-size", c.hidden_size);
  require_positive("--num-attention-heads", c.num_attention_heads);
  // Megatron's --encoder-seq-length: for these models, where there is no separate encoder, the sequence
  // length (its argument parsing copies one into the other).
  if (a.encoder_seq_length != -1) {
    require_positive("--encoder-seq-length", a.encoder_seq_length);
    if (c.seq_length == 0) c.seq_length = a.encoder_seq_length;
    require(c.seq_length == a.encoder_seq_length, "--encoder-seq-length", a.encoder_seq_length,
            str_cat("must equal --seq-length=", c.seq_length,
                    " (both are the sequence length of this model; give one of them)"));
  }
  require_positive("--seq-length", c.seq_length);
  if (c.kv_channels == 0) {
    require(c.hidden_size % c.num_attention_heads == 0, "--hidden-size", c.hidden_size,
            str_cat("must be divisible by --num-attention-heads=", c.num_attention_heads,
                    " (or set --kv-channels)"));
    c.kv_channels = c.hidden_size / c.num_attention_heads;
  }
  require_positive("--kv-channels", c.kv_channels);
  if (a.group_query_attention) {
    require_positive("--num-query-groups", c.num_query_groups);
    require(c.num_attention_heads % c.num_query_groups == 0, "--num-query-groups", c.num_query_groups,
            str_cat("must divide --num-attention-heads=", c.num_attention_heads));
  } else {
    c.num_query_groups = c.num_attention_heads;
  }
  if (c.ffn_hidden_size == 0)
    c.ffn_hidden_size = c.swiglu ? static_cast<int64_t>(4.0 * static_cast<double>(c.hidden_size) * 2 / 3 / 64) * 64
                                 : 4 * c.hidden_size;
  require_positive("--ffn-hidden-size", c.ffn_hidden_size);

  const bool rope = c.position_embedding == model::PositionEmbedding::Rope;
  require(!a.no_position_embedding || rope, "--no-position-embedding", "true",
          str_cat("is deprecated (as in Megatron): give --position-embedding-type; with ",
                  megatron_name(c.position_embedding), " the model has a position embedding"));
  if (c.max_position_embeddings == 0) c.max_position_embeddings = c.seq_length;
  if (!rope)
    require(c.max_position_embeddings >= c.seq_length, "--max-position-embeddings", c.max_position_embeddings,
            str_cat("must be >= --seq-length=", c.seq_length, " with learned absolute positions"));
  require(c.rotary_percent > 0 && c.rotary_percent <= 1, "--rotary-percent", c.rotary_percent, "must be in (0, 1]");
  require(!rope || static_cast<int64_t>(static_cast<double>(c.kv_channels) * c.rotary_percent) >= 2,
          "--rotary-percent", c.rotary_percent, "rotates fewer than 2 dimensions of each head");
  require(c.rotary_base > 0, "--rotary-base", c.rotary_base, "must be positive");
  // Both scalings change the same frequencies; Megatron applies either, Tessera refuses the pair.
  require(!(a.use_rope_scaling && a.rotary_seq_len_interpolation_factor != 0), "--rotary-seq-len-interpolation-factor",
          a.rotary_seq_len_interpolation_factor, "cannot be combined with --use-rope-scaling");
  if (a.use_rope_scaling) {
    require(rope, "--use-rope-scaling", "set", "needs --position-embedding-type rope");
    require(std::isfinite(c.rope_scaling_factor) && c.rope_scaling_factor > 0, "--rope-scaling-factor",
            c.rope_scaling_factor, "must be positive");
    c.rope_scaling = model::RopeScaling::Llama3;  // Megatron's fixed bands: 1, 4 and 8192 (ModelConfig's)
  } else if (a.rotary_seq_len_interpolation_factor != 0) {
    require(rope, "--rotary-seq-len-interpolation-factor", a.rotary_seq_len_interpolation_factor,
            "needs --position-embedding-type rope");
    require(a.rotary_seq_len_interpolation_factor > 0, "--rotary-seq-len-interpolation-factor",
            a.rotary_seq_len_interpolation_factor, "must be positive");
    c.rope_scaling = model::RopeScaling::Linear;
    c.rope_scaling_factor = static_cast<double>(a.rotary_seq_len_interpolation_factor);
  }
  rules::require_positive_finite("--norm-epsilon", c.norm_epsilon);
  require(c.hidden_dropout >= 0 && c.hidden_dropout < 1, "--hidden-dropout", c.hidden_dropout, "must be in [0, 1)");
  require(c.attention_dropout >= 0 && c.attention_dropout < 1, "--attention-dropout", c.attention_dropout,
          "must be in [0, 1)");
  rules::require_positive_finite("--init-method-std", c.init_method_std);
  const std::vector<std::string> families = model::model_families();
  std::string known;
  for (const std::string& f : families) known += (known.empty() ? "" : ", ") + f;
  require(std::find(families.begin(), families.end(), c.family) != families.end(), "--model-family", c.family,
          "must be one of " + known);
  if (c.family == "bert") {
    // Megatron's BertModel: segments (token types) only with the binary head.
    c.num_tokentypes = c.bert_binary_head ? 2 : 0;
    require(!rope, "--position-embedding-type", "rope", "BERT uses learned_absolute positions");
    require(!c.untie_embeddings_and_output_weights, "--untie-embeddings-and-output-weights", "set",
            "BERT ties its output layer to the word embeddings");
  }
  require_positive("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by);
  finalize_moe_model(a);
  finalize_mla_model(a);
  finalize_mtp_model(a);
}

}  // namespace tessera::train
