#include "plan/planner.h"

#include <algorithm>

#include "core/check.h"
#include "pipeline/zero_bubble.h"
#include "plan/time_model.h"
#include "plan/token_slicing_price.h"

namespace tessera::plan {
namespace {

// FLOPs the recomputation adds to Megatron's forward + backward count.
double recompute_flops(const model::ModelConfig& c, const Layout& l, double megatron_flops) {
  const double batch = static_cast<double>(l.global_batch_size), s = c.seq_length, h = c.hidden_size;
  const double logits = 6.0 * batch * s * h * static_cast<double>(c.padded_vocab_size);
  if (l.recompute == Recompute::Full) return (megatron_flops - logits) / 3;  // the layers' forward again
  if (l.recompute == Recompute::Selective)  // QK^T and .V again
    return 4.0 * batch * s * s * static_cast<double>(c.num_attention_heads * c.kv_channels) * c.num_layers;
  return 0;
}

// The slices TeraPipe's dynamic program picks for a pipelined layout (its latency model over the time
// model's slice costs); empty where the layout has no pipeline or is interleaved. The search cuts in
// units of 1/32 of the sequence (a multiple of TeraPipe's 8 tokens): the program's cost grows with the
// fourth power of the units, and a search plans thousands of layouts (`--pipeline-token-slices auto`
// refines one layout at 8 tokens).
std::vector<int64_t> searched_token_slices(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const int64_t unit = std::max<int64_t>(1, c.seq_length / 32 / pipeline::kTokenSliceUnit) * pipeline::kTokenSliceUnit;
  if (l.pp == 1 || l.virtual_stages > 1 || l.cp > 1 || c.seq_length % unit != 0) return {};
  return best_token_slicing(c.seq_length, unit, stage_slice_cost(c, l, d), l.micro_batches(), l.pp);
}

}  // namespace

double ptdp_flops_per_iteration(const model::ModelConfig& c, int64_t global_batch) {
  const double s = c.seq_length, h = c.hidden_size, layers = c.num_layers, v = c.padded_vocab_size;
  return 96.0 * static_cast<double>(global_batch) * s * layers * h * h *
         (1 + s / (6 * h) + v / (16 * layers * h));
}

Plan make_plan(const model::ModelConfig& c, const Layout& l, const ClusterSpec& cluster, const PlanOptions& options) {
  const std::string problem = layout_problem(c, l, cluster.num_devices);
  TESSERA_CHECK(problem.empty(), problem);
  const DeviceSpec& d = cluster.device;
  const pipeline::ScheduleShape shape = schedule_shape(l);
  const int slices = shape.slices;
  pipeline::validate_schedule(shape);

  Plan plan;
  plan.config = c;
  plan.layout = l;
  plan.cluster = cluster;
  // Zero bubble: every rank's op list with the trainer's default costs (the lists its memory report
  // walks), built once for all stages' memory walks.
  std::vector<std::vector<pipeline::Op>> zero_bubble_ops;
  if (l.zero_bubble != pipeline::ZeroBubble::Off) zero_bubble_ops = pipeline::build_zero_bubble_schedules(shape, {});
  auto fill_memory = [&](const std::vector<int>& in_flight) {
    plan.memory.clear();
    for (int r = 0; r < l.pp; ++r)
      plan.memory.push_back(stage_memory(c, l, d, r, in_flight[r], zero_bubble_ops.empty() ? nullptr : &zero_bubble_ops[r]));
    plan.peak_memory_stage = 0;
    for (int r = 1; r < l.pp; ++r)
      if (plan.memory[r].total() > plan.memory[plan.peak_memory_stage].total()) plan.peak_memory_stage = r;
    plan.fits = plan.peak_memory() <= d.memory_bytes;
  };
  // With token slices the schedule holds slices: priced as the micro-batches their tokens make up, each
  // held slice counted at the longest slice's length.
  auto micro_batches_held = [&](std::vector<int> held) {
    if (slices == 1) return held;
    const int64_t longest = *std::max_element(l.token_slices.begin(), l.token_slices.end());
    for (int& h : held) h = static_cast<int>((h * longest + c.seq_length - 1) / c.seq_length);
    return held;
  };
  std::vector<int> in_flight(l.pp);
  for (int r = 0; r < l.pp; ++r) in_flight[r] = pipeline::theoretical_peak_in_flight(shape, r);
  fill_memory(micro_batches_held(in_flight));
  if (options.memory_only) return plan;
  plan.theoretical_bubble = l.pp > 1 ? pipeline::theoretical_bubble_fraction(shape) : 0;

  // Token slices: each slice priced at its own length and context (fixed costs included), so the
  // simulated pipeline is TeraPipe's with uneven slices.
  const PipelineCosts costs = pipeline_costs(c, l, d);
  plan.pipeline = slices == 1 ? simulate_pipeline(shape, costs, options.record_timeline)
                              : simulate_pipeline(shape, token_slice_costs(c, l, d), options.record_timeline);
  fill_memory(micro_batches_held(plan.pipeline.peak_in_flight));  // the op lists' own count (= the closed form)

  double iteration = -1;
  for (int r = 0; r < l.pp; ++r) {
    const double dp = data_parallel_seconds(c, l, d, r), opt = optimizer_seconds(c, l, d, r);
    const double end = plan.pipeline.finish[r] + dp + opt;
    if (end > iteration) {
      iteration = end;
      plan.critical_stage = r;
      // The simulator's exposed communication of an op is tensor- and expert-parallel together.
      // (and the ring's exposed exchange under context parallelism).
      double expert = 0, context = 0;
      if (!costs.expert_comm.empty())
        for (double chunk : costs.expert_comm[r]) expert += chunk * shape.micro_batches;
      if (!costs.context_comm.empty())
        for (double chunk : costs.context_comm[r]) context += chunk * shape.micro_batches;
      plan.time.compute = plan.pipeline.compute[r];
      plan.time.tensor_parallel = std::max(0.0, plan.pipeline.tp_comm[r] - expert - context);  // not below by rounding
      plan.time.expert_parallel = expert;
      plan.time.context_parallel = context;
      plan.time.pipeline_p2p = plan.pipeline.p2p[r];
      plan.time.pipeline_bubble = plan.pipeline.bubble[r];
      plan.time.data_parallel = dp;
      plan.time.optimizer = opt;
    }
  }

  const double megatron = model::model_flops_per_iteration(c, l.global_batch_size);
  plan.model_flops = options.flops_formula == FlopsFormula::Ptdp ? ptdp_flops_per_iteration(c, l.global_batch_size) : megatron;
  plan.hardware_flops = megatron + recompute_flops(c, l, megatron);
  const double device_seconds = iteration * cluster.num_devices;
  plan.tflops_per_device = plan.model_flops / device_seconds / 1e12;
  plan.hardware_tflops_per_device = plan.hardware_flops / device_seconds / 1e12;
  plan.mfu = megatron / device_seconds / d.peak_flops;
  plan.tokens_per_second = static_cast<double>(l.global_batch_size) * c.seq_length / iteration;
  return plan;
}

SearchResult search_layouts(const model::ModelConfig& c, const Layout& base, const ClusterSpec& cluster,
                            const PlanOptions& options, int64_t make_vocab_size_divisible_by,
                            const ExpertSearch& experts) {
  const int n = cluster.num_devices;
  const bool moe = c.moe.enabled();
  SearchResult result;
  PlanOptions memory_only = options;
  memory_only.memory_only = true;
  memory_only.record_timeline = false;
  // ep: the common divisors of every MoE layer's experts, or the fixed value (1 for a dense model).
  std::vector<int> eps = {moe && experts.ep > 0 ? experts.ep : 1};
  for (int ep = 2; moe && experts.ep == 0 && ep <= n; ++ep)
    if (std::all_of(c.moe.layer_experts.begin(), c.moe.layer_experts.end(), [&](int64_t e) { return e % ep == 0; }))
      eps.push_back(ep);
  // cp: the fixed value, or 1 and the divisors of the devices that cut the sequence into 2 cp chunks of
  // which each rank keeps at least kSearchMinContextTokens (tp's own divisibility is checked below).
  std::vector<int> cps = {experts.cp > 0 ? experts.cp : 1};
  // (Not with an expert capacity, which cp does not compose with.)
  for (int cp = 2; experts.cp == 0 && (!moe || c.moe.dropless()) && cp <= n; ++cp)
    if (n % cp == 0 && c.seq_length % (2 * cp) == 0 && c.seq_length / cp >= kSearchMinContextTokens) cps.push_back(cp);
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp != 0) continue;
    const model::ModelConfig ct = config_for_tp(c, tp, make_vocab_size_divisible_by);
    const bool sequence_parallel = (base.sequence_parallel || moe) && tp > 1;
    std::vector<int> etps = {moe ? experts.etp : 0};  // the fixed value (0 for a dense model: unused)
    if (moe && experts.etp == 0) etps = tp > 1 ? std::vector<int>{1, tp} : std::vector<int>{1};
    Layout family_layout = base;
    family_layout.tp = tp;
    family_layout.dp = n / tp;
    family_layout.cp = 1;
    family_layout.ep = 1;
    family_layout.etp = moe ? 1 : 0;
    family_layout.micro_batch_size = 1;
    family_layout.global_batch_size = family_layout.dp;  // only the tensor-parallel rules can fail here
    family_layout.sequence_parallel = sequence_parallel;
    if (std::string family, problem = layout_problem(ct, family_layout, n, &family); !problem.empty()) {
      result.rejected.push_back({family_layout, family, problem});  // one entry for every layout with this tp
      continue;
    }
    for (int cp : cps)
    for (int pp = 1; pp <= n / tp; ++pp) {
      if (n % (static_cast<int64_t>(tp) * cp) != 0) break;  // a searched cp that does not fit beside this tp
      if ((n / (tp * cp)) % pp != 0) continue;
      const int dp = n / (tp * cp * pp);
      // The layers the stages split: with the embedding and/or the loss counted as one (base's flags).
      const int64_t split_layers = base.layer_split(c.num_layers).counted_layers();
      if (split_layers % pp != 0) {
        Layout l = family_layout;
        l.cp = cp;
        l.pp = pp;
        l.dp = dp;
        result.rejected.push_back({l, "divisibility", str_cat("--num-layers=", c.num_layers,
                                                              split_layers != c.num_layers ? str_cat(" (", split_layers, " counted)") : std::string(),
                                                              " does not split over pp ", pp)});
        continue;
      }
      const int64_t layers_per_stage = split_layers / pp;
      for (int v = 1; v <= layers_per_stage; ++v) {
        if (layers_per_stage % v != 0 || (v > 1 && pp == 1)) continue;
        // With a pipeline, 1F1B's placement (v 1) also as ZB-H1, and two chunks per rank also as ZB-V.
        std::vector<pipeline::ZeroBubble> schedules = {pipeline::ZeroBubble::Off};
        // (ZB-V splits the layers evenly itself: not with the embedding or the loss counted.)
        if (pp > 1 && v <= 2 && (v == 1 || !base.layer_split(c.num_layers).accounts()))
          schedules.push_back(v == 1 ? pipeline::ZeroBubble::H1 : pipeline::ZeroBubble::V);
        for (pipeline::ZeroBubble zero_bubble : schedules)
        for (int64_t mbs = 1; mbs <= std::max<int64_t>(1, base.global_batch_size / dp); mbs *= 2)
          for (int etp : etps)
            for (int ep : eps) {
              // Expert layouts the search made up that are not of these devices are skipped, as pp for tp
              // (fixed ones are rejected with the rule).
              if (moe && (n / pp) % (etp * ep) != 0 && experts.ep == 0 && experts.etp == 0) continue;
              Layout l = base;
              l.tp = tp;
              l.cp = cp;
              l.pp = pp;
              l.dp = dp;
              l.ep = ep;
              l.etp = etp;
              l.virtual_stages = v;
              l.zero_bubble = zero_bubble;
              l.micro_batch_size = mbs;
              l.sequence_parallel = sequence_parallel;
              std::string family;
              std::string problem = layout_problem(ct, l, n, &family);
              if (!problem.empty()) {
                result.rejected.push_back({l, family, problem});
                continue;
              }
              Plan p = make_plan(ct, l, cluster, memory_only);
              if (!p.fits) {
                result.rejected.push_back(
                    {l, "memory",
                     str_cat("needs ", p.peak_memory() / (1 << 30), " GiB on pipeline stage ", p.peak_memory_stage,
                             " of ", cluster.device.memory_bytes / (1 << 30), " GiB")});
                continue;
              }
              result.ranked.push_back(make_plan(ct, l, cluster, options));
              // TeraPipe: the same layout with the token slices its dynamic program picks, when that cuts
              // the sequence at all.
              if (std::vector<int64_t> slices = searched_token_slices(ct, l, cluster.device);
                  zero_bubble == pipeline::ZeroBubble::Off && slices.size() > 1) {
                l.token_slices = std::move(slices);
                if (make_plan(ct, l, cluster, memory_only).fits) result.ranked.push_back(make_plan(ct, l, cluster, options));
              }
            }
      }
    }
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const Plan& a, const Plan& b) { return a.tflops_per_device > b.tflops_per_device; });
  return result;
}

}  // namespace tessera::plan
