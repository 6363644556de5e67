#include "plan/chinchilla.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace tessera::plan {

double chinchilla_loss(double parameters, double tokens, const ChinchillaLaw& law) {
  return law.E + law.A / std::pow(parameters, law.alpha) + law.B / std::pow(tokens, law.beta);
}

ComputeOptimal compute_optimal(double compute_flops, const ChinchillaLaw& law) {
  TESSERA_CHECK(compute_flops > 0, "compute budget ", compute_flops, " FLOPs must be positive");
  const double g = std::pow(law.alpha * law.A / (law.beta * law.B), 1 / (law.alpha + law.beta));
  ComputeOptimal out;
  out.compute_flops = compute_flops;
  out.parameters = g * std::pow(compute_flops / 6, law.beta / (law.alpha + law.beta));
  out.tokens = compute_flops / 6 / out.parameters;
  out.loss = chinchilla_loss(out.parameters, out.tokens, law);
  return out;
}

model::ModelConfig shape_for_parameters(double parameters, const model::ModelConfig& base) {
  model::ModelConfig c = base;
  // 12 l h^2 per layer stack with l = h / 128: h = (128 N / 12)^(1/3). Heads (of 128 dimensions) and
  // layers are rounded to multiples of 8 and 4 once that large, so that tensor and pipeline parallelism
  // have divisors to choose from.
  auto round_to = [](double x, int64_t multiple) {
    return x < multiple ? std::max<int64_t>(1, std::llround(x)) : std::llround(x / multiple) * multiple;
  };
  const int64_t heads = round_to(std::cbrt(128 * parameters / 12) / 128, 8), hidden = heads * 128;
  c.hidden_size = hidden;
  c.num_layers = round_to(parameters / (12.0 * hidden * hidden), 4);
  c.num_attention_heads = hidden / 128;
  c.num_query_groups = c.num_attention_heads;
  c.kv_channels = 128;
  c.ffn_hidden_size = c.swiglu ? (hidden * 8 / 3 + 63) / 64 * 64 : 4 * hidden;
  return c;
}

}  // namespace tessera::plan
