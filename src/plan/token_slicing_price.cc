#include "plan/token_slicing_price.h"

#include <algorithm>
#include <memory>

#include "core/check.h"
#include "model/activation_memory.h"
#include "model/token_sliced_chunk.h"
#include "plan/memory_model.h"
#include "plan/time_model.h"

namespace tessera::plan {

namespace {

// Seconds one layer spends on the attention of `length` queries to `context` cached keys (forward,
// backward) beyond its own causal block.
AttentionTimes context_attention(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int64_t length,
                                 int64_t context) {
  if (context == 0) return {};
  return core_attention_times(c, l, d, static_cast<double>(length), static_cast<double>(context));
}

// The model as one slice of `length` tokens runs it: the main model only, since multi-token prediction's
// modules run once over the whole sequence after the last slice (mtp_times at the whole length).
model::ModelConfig slice_model(const model::ModelConfig& c, int64_t length) {
  model::ModelConfig sliced = c;
  sliced.seq_length = length;
  sliced.mtp_num_layers = 0;
  return sliced;
}

}  // namespace

double sliced_mtp_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const MtpTimes m = mtp_times(c, l, d);
  return m.forward_compute + m.forward_comm + m.backward_compute + m.backward_comm;
}

PipelineCosts slice_pipeline_costs(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int64_t length,
                                   int64_t context) {
  PipelineCosts costs = pipeline_costs(slice_model(c, length), l, d);
  const AttentionTimes a = context_attention(c, l, d, length, context);
  for (int r = 0; r < l.pp; ++r)
    for (int j = 0; j < l.virtual_stages; ++j) {
      const double layers = static_cast<double>(chunk_layer_numbers(c, l, r, j).size());
      costs.forward_compute[r][j] += layers * a.forward;
      costs.backward_compute[r][j] += layers * (a.backward + (l.recompute == Recompute::Full ? a.forward : 0));
    }
  return costs;
}

std::vector<PipelineCosts> token_slice_costs(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  std::vector<PipelineCosts> out;
  int64_t context = 0;
  for (int64_t length : l.token_slices) {
    out.push_back(slice_pipeline_costs(c, l, d, length, context));
    context += length;
  }
  // Multi-token prediction: the modules' forward over the whole sequence follows the last slice's head
  // (its forward op), their backward precedes that slice's head backward (its backward op).
  if (c.mtp_num_layers > 0 && !out.empty()) {
    const MtpTimes m = mtp_times(c, l, d);
    const pipeline::ChunkId head = pipeline::chunk_at(schedule_shape(l), l.pp * l.virtual_stages - 1);
    PipelineCosts& last = out.back();
    last.forward_compute[head.stage][head.chunk] += m.forward_compute;
    last.forward_comm[head.stage][head.chunk] += m.forward_comm;
    last.backward_compute[head.stage][head.chunk] += m.backward_compute;
    last.backward_comm[head.stage][head.chunk] += m.backward_comm;
  }
  return out;
}

SliceCost stage_slice_cost(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const double layers_per_stage = static_cast<double>(c.num_layers) / l.pp;
  // The stage's time at context 0 is the time model's for a shorter sequence; a slice's context adds
  // only attention (its queries against the cached keys). Memoised per length: the dynamic program asks
  // for every (length, context).
  auto unsliced = std::make_shared<std::vector<double>>();
  auto transfer = std::make_shared<std::vector<double>>();
  return [=](int64_t length, int64_t context) {
    if (static_cast<int64_t>(unsliced->size()) <= length) {
      unsliced->resize(length + 1, -1.0);
      transfer->resize(length + 1, 0.0);
    }
    double& base = (*unsliced)[length];
    if (base < 0) {
      const PipelineCosts costs = pipeline_costs(slice_model(c, length), l, d);
      base = 0;
      for (size_t stage = 0; stage < costs.forward_compute.size(); ++stage) {
        double stage_seconds = 0;
        for (size_t chunk = 0; chunk < costs.forward_compute[stage].size(); ++chunk)
          stage_seconds += costs.forward_compute[stage][chunk] + costs.forward_comm[stage][chunk] +
                           costs.backward_compute[stage][chunk] + costs.backward_comm[stage][chunk];
        base = std::max(base, stage_seconds);
      }
      (*transfer)[length] = 2 * costs.p2p_transfer;
    }
    const AttentionTimes a = context_attention(c, l, d, length, context);
    return base + (*transfer)[length] + layers_per_stage * (a.forward + a.backward);
  };
}

std::vector<int64_t> parse_token_slices(const std::string& value, int64_t seq_length, const SliceCost& t,
                                        int64_t micro_batches, int stages) {
  constexpr int64_t kUnit = pipeline::kTokenSliceUnit;
  if (value == "auto") {
    TESSERA_CHECK(seq_length % kUnit == 0, "--pipeline-token-slices=auto: --seq-length=", seq_length,
                  " must be a multiple of ", kUnit, " (the slicing's unit)");
    return best_token_slicing(seq_length, kUnit, t, micro_batches, stages);
  }
  return model::parse_token_slice_lengths(value, seq_length);
}

TokenSlicingPrice price_token_slicing(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const SliceCost t = stage_slice_cost(c, l, d);
  const int64_t m = l.micro_batches();
  TokenSlicingPrice out;
  out.slices = l.token_slices;
  const double mtp = sliced_mtp_seconds(c, l, d);  // whole-sequence work either way
  out.sliced = token_pipeline_latency(out.slices, t, m, l.pp, mtp);
  out.unsliced = token_pipeline_latency({c.seq_length}, t, m, l.pp, mtp);
  out.cache_bytes = model::layer_kv_elements(c, l.micro_batch_size, l.tp) * static_cast<double>(c.num_layers / l.pp) *
                    l.activation_bytes();
  return out;
}

}  // namespace tessera::plan
