// Compute-optimal model size (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models",
// approach 3): the fitted loss L(N, D) = E + A / N^alpha + B / D^beta minimised under C = 6 N D.
#pragma once

#include "model/config.h"

namespace tessera::plan {

struct ChinchillaLaw {
  double E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28;
};

double chinchilla_loss(double parameters, double tokens, const ChinchillaLaw& law = {});

struct ComputeOptimal {
  double compute_flops = 0, parameters = 0, tokens = 0, loss = 0;
};
// N_opt = G (C/6)^(beta/(alpha+beta)), D_opt = (C/6) / N_opt, G = (alpha A / (beta B))^(1/(alpha+beta)).
ComputeOptimal compute_optimal(double compute_flops, const ChinchillaLaw& law = {});

// A GPT of about `parameters` parameters with the shape of the large published models: head dimension
// 128, depth about hidden / 128 (GPT-3 175B: 12288 / 96), heads a multiple of 8 and layers of 4
// once that large. Vocabulary, sequence
// length and architecture flags come from `base`.
model::ModelConfig shape_for_parameters(double parameters, const model::ModelConfig& base);

}  // namespace tessera::plan
