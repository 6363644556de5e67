// Builds a pipeline chunk of any model family from its ModelConfig: the one place that names concrete
// model classes. Families register a builder under their ModelConfig::family name; "gpt" and "bert" are
// built in.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/language_model.h"

namespace tessera::model {

using ModelChunkBuilder = std::function<std::unique_ptr<LanguageModelChunk>(
    const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
    const ModelChunk& chunk)>;

// Adds (or replaces) the builder of `family`. Not thread-safe: register before building.
void register_model_family(const std::string& family, ModelChunkBuilder builder);
std::vector<std::string> model_families();

// Declares the chunk's parameters in `params`. Throws an Error naming the family and the known ones
// when config.family has no builder.
std::unique_ptr<LanguageModelChunk> build_model_chunk(
    const ModelConfig& config, ParameterSet& params,
    const parallel::TensorParallelContext& tp = parallel::TensorParallelContext::single_process(),
    const ModelChunk& chunk = {});

}  // namespace tessera::model
