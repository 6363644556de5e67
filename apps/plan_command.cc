// `tessera plan`: memory, iteration time and throughput of a training run before it is launched; the
// search over layouts; compute-optimal sizing; a Chrome trace of the simulated iteration; and
// calibration of this machine. It takes `tessera train`'s flags (parsed by the same parser, so a train
// command line becomes a plan by changing the subcommand) plus the cluster and planner flags below.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "core/check.h"
#include "core/file_io.h"
#include "apps/plan_calibrate.h"
#include "plan/cluster_files.h"
#include "plan/measured_calibration.h"
#include "plan/run_layout.h"
#include "plan/chinchilla.h"
#include "plan/planner.h"
#include "plan/ouroboros.h"
#include "plan/token_slicing_price.h"
#include "plan/trace.h"
#include "train/args/arguments.h"

namespace tessera::apps {
namespace {

constexpr double GiB = 1024.0 * 1024 * 1024;

struct PlanFlags {
  std::string device = "A100-80GB";
  std::vector<std::string> cluster_files;  // merged in order (plan/cluster_files.h)
  int num_devices = 0;  // 0: tp x pp x dp of the flags, or 1
  int devices_per_node = 0;
  bool search = false, json = false, calibrate = false;
  std::string trace, flops_formula = "megatron", calibrate_output = "tessera_cluster.json";
  int top = 5;
  double compute_budget = 0, device_hours = 0;
  bool use_flash_attn = false;  // GPU plans: attention without materialised scores (always so on cpu)
  std::string token_slices;     // --pipeline-token-slices: TeraPipe's token-level pipeline, priced
  double measured_iteration_ms = 0, measured_tflops = 0;  // a one-GPU step of this model, measured
};

void add_plan_flags(CLI::App& app, PlanFlags& f) {
  app.option_defaults()->always_capture_default();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--device", f.device, "Device of the built-in table: V100-32GB, A100-80GB, H100-SXM, H200, cpu");
  app.add_option("--num-devices", f.num_devices, "Devices in the cluster (default: tp x pp x dp of the flags)")
      ->check(kNonNegativeInteger);  // 0: the default; -8 was taken as it
  app.add_option("--devices-per-node", f.devices_per_node, "Devices per node (default: the device's)");
  app.add_option("--cluster", f.cluster_files,
                 "Cluster file (JSON: --calibrate's, or a device entry, NCCL bus bandwidths, a measured step); "
                 "repeat to merge several in order")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--measured-iteration-ms", f.measured_iteration_ms,
                 "Measured time of one iteration of this model on one GPU (one micro-batch): fits the GEMM efficiency");
  app.add_option("--measured-tflops-per-gpu", f.measured_tflops,
                 "Measured throughput per GPU (TFLOP/s, Megatron's log) of this model on one GPU: fits the GEMM efficiency");
  app.add_flag("--search", f.search, "Rank every layout of the model on the cluster by predicted throughput");
  app.add_option("--top", f.top, "Layouts --search prints");
  app.add_flag("--json", f.json, "Print the plan as JSON");
  app.add_option("--trace", f.trace, "Write the simulated iteration as a Chrome trace (Perfetto, chrome://tracing)");
  app.add_option("--flops-formula", f.flops_formula,
                 "megatron (the training log's) or ptdp (PTD-P's 96Bslh^2(...), counting recomputation)");
  app.add_flag("--calibrate", f.calibrate, "Measure this machine (GEMMs of the model's shapes, attention, memory, MPI)");
  app.add_option("--calibrate-output", f.calibrate_output, "Where --calibrate writes the cluster file");
  app.add_option("--compute-budget", f.compute_budget, "Compute budget in FLOPs: recommend a Chinchilla-optimal model");
  app.add_option("--device-hours", f.device_hours, "Compute budget in device-hours on the cluster");
  app.add_flag("--use-flash-attn", f.use_flash_attn, "Attention without materialised scores (always so on cpu)");
  app.add_option("--pipeline-token-slices", f.token_slices,
                 "Price TeraPipe's token-level pipeline: auto (its dynamic program), N equal slices, or lengths a,b,c");
}

// Splits the command line into the planner's flags and the rest (for `tessera train`'s parser). A value
// that does not start with "--" belongs to the flag before it.
void split_arguments(const CLI::App& plan_app, const std::vector<std::string>& args, std::vector<std::string>& plan_args,
                     std::vector<std::string>& train_args) {
  std::vector<std::string>* to = &train_args;
  for (const std::string& a : args) {
    if (a.rfind("--", 0) == 0) {
      const std::string name = a.substr(0, a.find('='));
      to = (name == "--help" || plan_app.get_option_no_throw(name) != nullptr) ? &plan_args : &train_args;
    }
    to->push_back(a);
  }
}

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& a : args)
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  return false;
}

// Removes `flag` (as "--flag V" or "--flag=V", the last one winning) from args and returns its value, 0
// when absent. The search fixes ep and etp from these instead of the parser, whose rules check them
// against the flags' own tp x pp ranks.
int take_int_flag(std::vector<std::string>& args, const std::string& flag) {
  std::string value;
  for (size_t i = 0; i < args.size();) {
    if (args[i] == flag && i + 1 < args.size()) {
      value = args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i + 2));
    } else if (args[i].rfind(flag + "=", 0) == 0) {
      value = args[i].substr(flag.size() + 1);
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  if (value.empty()) return 0;
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TESSERA_CHECK(used == value.size() && n > 0, flag, "=", value, ": must be a positive integer");
  return n;
}

// `tessera train` requires flags that a plan does not use; supply harmless ones when they are absent.
std::vector<std::string> with_training_defaults(std::vector<std::string> args) {
  if (!has_flag(args, "--train-iters") && !has_flag(args, "--train-samples"))
    args.insert(args.end(), {"--train-iters", "1"});
  if (!has_flag(args, "--lr")) args.insert(args.end(), {"--lr", "1e-4"});
  if (!has_flag(args, "--tokenizer-type")) args.insert(args.end(), {"--tokenizer-type", "NullTokenizer"});
  // Full recomputation is priced as uniform groups, so a plan need not choose the method.
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--recompute-granularity" && args[i + 1] == "full" && !has_flag(args, "--recompute-method"))
      args.insert(args.end(), {"--recompute-method", "uniform"});
  if (!has_flag(args, "--mock-data") && !has_flag(args, "--data-path")) {
    bool null_tokenizer = true;
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--tokenizer-type") null_tokenizer = args[i + 1] == "NullTokenizer";
    if (null_tokenizer) args.push_back("--mock-data");
    else args.insert(args.end(), {"--data-path", "unused-by-plan"});
  }
  return args;
}

// Bytes in the unit that shows them: a toy model's 1.2 MiB were "0" GiB, GPT-3's stages stay in GiB.
std::string bytes_str(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  for (; bytes >= 1024 && u < 4; ++u) bytes /= 1024;
  return str_cat(std::round(bytes * 100) / 100, " ", units[u]);
}

// A count with three significant digits and Megatron's suffixes: 121K, 1.1M, 175B ("0.000121B" before).
std::string count_str(double n) {
  const char* suffixes[] = {"", "K", "M", "B", "T"};
  int s = 0;
  for (; n >= 999.5 && s < 4; ++s) n /= 1000;  // 999.5 would print as 1e+03
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%s", n, suffixes[s]);
  return text;
}

// The fewest and most experts of an MoE layer (a pyramid has more in later layers).
int64_t min_experts(const model::MoeConfig& m) {
  int64_t fewest = 0;
  for (int64_t e : m.layer_experts)
    if (e > 0 && (fewest == 0 || e < fewest)) fewest = e;
  return fewest;
}
int64_t max_experts(const model::MoeConfig& m) { return *std::max_element(m.layer_experts.begin(), m.layer_experts.end()); }

nlohmann::json plan_json(const plan::Plan& p, const std::string& formula) {
  nlohmann::json memory = nlohmann::json::array();
  for (size_t r = 0; r < p.memory.size(); ++r) {
    const plan::MemoryBreakdown& m = p.memory[r];
    memory.push_back({{"stage", r}, {"parameters", m.parameters}, {"gradients", m.gradients}, {"optimizer", m.optimizer},
                      {"activations", m.activations}, {"communication", m.communication}, {"reserved", m.reserved},
                      {"total", m.total()}, {"in_flight_micro_batches", m.in_flight}});
  }
  const plan::IterationTime& t = p.time;
  const plan::Layout& l = p.layout;
  return {{"layout",
           {{"tensor_model_parallel_size", l.tp}, {"context_parallel_size", l.cp},
            {"pipeline_model_parallel_size", l.pp}, {"data_parallel_size", l.dp},
            {"expert_model_parallel_size", l.ep}, {"expert_tensor_parallel_size", l.expert_tp()},
            {"expert_data_parallel_size", l.edp()}, {"virtual_stages", l.virtual_stages}, {"sequence_parallel", l.sequence_parallel},
            {"micro_batch_size", l.micro_batch_size}, {"global_batch_size", l.global_batch_size},
            {"micro_batches", l.micro_batches()}, {"recompute", plan::to_string(l.recompute)},
            {"distributed_optimizer", l.distributed_optimizer}, {"precision", plan::to_string(l.precision)},
            {"token_slices", l.token_slices},
            {"zero_bubble", l.zero_bubble == pipeline::ZeroBubble::H1  ? "zb-h1"
                            : l.zero_bubble == pipeline::ZeroBubble::V ? "zb-v"
                                                                       : "off"}}},
          {"device", p.cluster.device.name},
          {"num_devices", p.cluster.num_devices},
          {"parameters", p.config.parameter_count()},
          {"memory_per_rank_bytes", memory},
          {"peak_memory_bytes", p.peak_memory()},
          {"peak_memory_stage", p.peak_memory_stage},
          {"fits", p.fits},
          {"device_memory_bytes", p.cluster.device.memory_bytes},
          {"iteration_seconds",
           {{"compute", t.compute}, {"tensor_parallel_communication", t.tensor_parallel},
            {"expert_parallel_communication", t.expert_parallel},
            {"context_parallel_communication", t.context_parallel}, {"pipeline_p2p", t.pipeline_p2p},
            {"pipeline_bubble", t.pipeline_bubble}, {"data_parallel_reduction", t.data_parallel},
            {"optimizer", t.optimizer}, {"total", t.total()}}},
          {"critical_stage", p.critical_stage},
          {"bubble_fraction_simulated", t.pipeline_bubble / std::max(t.compute + t.tensor_parallel, 1e-30)},
          {"bubble_fraction_theory", p.theoretical_bubble},
          {"flops_formula", formula},
          {"throughput_per_gpu_tflops", p.tflops_per_device},
          {"hardware_tflops_per_gpu", p.hardware_tflops_per_device},
          {"mfu", p.mfu},
          {"tokens_per_second", p.tokens_per_second}};
}

void print_plan(const plan::Plan& p) {
  const model::ModelConfig& c = p.config;
  const plan::Layout& l = p.layout;
  const plan::DeviceSpec& d = p.cluster.device;
  std::printf("model: %s parameters, %lld layers, hidden %lld, %lld heads (%lld query groups), ffn %lld, seq %lld, "
              "padded vocab %lld\n",
              count_str(static_cast<double>(c.parameter_count())).c_str(), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.num_query_groups), static_cast<long long>(c.ffn_hidden_size),
              static_cast<long long>(c.seq_length), static_cast<long long>(c.padded_vocab_size));
  const model::MoeConfig& moe = c.moe;
  if (moe.enabled())
    std::printf("experts: %lld of %lld layers are MoE (%lld to %lld experts), top-%lld, expert ffn %lld%s%s, capacity %s\n",
                static_cast<long long>(moe.num_moe_layers()), static_cast<long long>(c.num_layers),
                static_cast<long long>(min_experts(moe)), static_cast<long long>(max_experts(moe)),
                static_cast<long long>(moe.router.topk), static_cast<long long>(moe.ffn_hidden_size),
                moe.shared_expert_intermediate_size > 0 ? str_cat(", shared expert ", moe.shared_expert_intermediate_size).c_str() : "",
                moe.residual ? ", residual MoE" : "", moe.dropless() ? "dropless" : str_cat(moe.capacity_factor).c_str());
  std::printf("cluster: %d x %s (%d per node), %.0f GiB and %.1f TFLOP/s peak each\n", p.cluster.num_devices,
              d.name.c_str(), d.devices_per_node, d.memory_bytes / GiB, d.peak_flops / 1e12);
  std::printf("layout: tensor %d, pipeline %d, data %d, virtual stages %d, sequence parallel %s, recompute %s, "
              "distributed optimizer %s, %s, micro batch %lld, global batch %lld (%lld micro-batches per replica)\n",
              l.tp, l.pp, l.dp, l.virtual_stages, l.sequence_parallel ? "on" : "off", plan::to_string(l.recompute).c_str(),
              l.distributed_optimizer ? "on" : "off", plan::to_string(l.precision).c_str(),
              static_cast<long long>(l.micro_batch_size), static_cast<long long>(l.global_batch_size),
              static_cast<long long>(l.micro_batches()));
  if (l.cp > 1)
    std::printf("context parallel %d: each rank holds %lld tokens of a sequence (2 chunks of %lld), attention around "
                "the ring of %d ranks\n",
                l.cp, static_cast<long long>(c.seq_length / l.cp), static_cast<long long>(c.seq_length / (2 * l.cp)), l.cp);
  if (l.zero_bubble != pipeline::ZeroBubble::Off)
    std::printf("zero bubble: %s, each backward split into B (input gradient) and W (weight gradients), W "
                "filling the bubble; activations held from F to W\n",
                l.zero_bubble == pipeline::ZeroBubble::V ? "ZB-V (2 chunks per rank in a V, the output layer on rank 0)"
                                                         : "ZB-H1 (1F1B's placement)");
  if (!l.token_slices.empty())
    std::printf("token slices (TeraPipe): %zu per sequence, %s tokens; the simulated schedule is 1F1B over them\n",
                l.token_slices.size(), plan::token_slices_string(l).c_str());
  if (moe.enabled())
    std::printf("expert layout: expert tensor %d, expert parallel %d, expert data %d (%s dispatcher)\n", l.expert_tp(),
                l.ep, l.edp(), l.allgather_dispatcher ? "allgather" : "alltoall");
  std::printf("\nmemory per rank:\n  %-6s %10s %10s %10s %12s %10s %10s %10s %10s\n", "stage", "parameters", "gradients",
              "optimizer", "activations", "comm", "reserved", "total", "in-flight");
  std::set<int> shown = {0, l.pp - 1, p.peak_memory_stage};
  if (l.pp <= 8)
    for (int r = 0; r < l.pp; ++r) shown.insert(r);
  for (int r : shown) {
    const plan::MemoryBreakdown& m = p.memory[r];
    std::printf("  %-6d %10s %10s %10s %12s %10s %10s %10s %10d\n", r, bytes_str(m.parameters).c_str(),
                bytes_str(m.gradients).c_str(), bytes_str(m.optimizer).c_str(), bytes_str(m.activations).c_str(),
                bytes_str(m.communication).c_str(), bytes_str(m.reserved).c_str(), bytes_str(m.total()).c_str(),
                m.in_flight);
  }
  std::printf("  peak %s on stage %d: %s in %s\n", bytes_str(p.peak_memory()).c_str(), p.peak_memory_stage,
              p.fits ? "fits" : "DOES NOT FIT", bytes_str(d.memory_bytes).c_str());
  const plan::IterationTime& t = p.time;
  const double total = t.total();
  auto row = [&](const char* name, double seconds) {
    std::printf("  %-34s %12.3f ms %6.1f%%\n", name, seconds * 1e3, 100 * seconds / total);
  };
  std::printf("\niteration time (the rank that finishes last: pipeline stage %d):\n", p.critical_stage);
  row("compute", t.compute);
  row("tensor-parallel communication", t.tensor_parallel);
  if (moe.enabled()) row("expert-parallel communication", t.expert_parallel);
  if (l.cp > 1) row("context-parallel ring (exposed)", t.context_parallel);
  row("pipeline p2p", t.pipeline_p2p);
  row("pipeline bubble (simulated)", t.pipeline_bubble);
  row("data-parallel reduction (exposed)", t.data_parallel);
  row("optimizer", t.optimizer);
  std::printf("  %-34s %12.3f ms\n", "total", total * 1e3);
  if (l.pp > 1)
    std::printf("  bubble: simulated %.1f%% of compute, theory %s = %.1f%%\n",
                100 * t.pipeline_bubble / std::max(t.compute + t.tensor_parallel, 1e-30),
                l.zero_bubble == pipeline::ZeroBubble::Off ? "(p-1)/(v*m)" : "(the schedule at F = B = W)",
                100 * p.theoretical_bubble);
  std::printf("\nelapsed time per iteration (ms): %.1f\n", total * 1e3);
  std::printf("throughput per GPU (TFLOP/s/GPU): %.1f\n", p.tflops_per_device);
  std::printf("hardware FLOPs per GPU with recomputation (TFLOP/s/GPU): %.1f\n", p.hardware_tflops_per_device);
  std::printf("MFU: %.1f%%\ntokens per second: %.0f\n", 100 * p.mfu, p.tokens_per_second);
}

void print_search(const plan::SearchResult& r, int top, bool json, const std::string& formula) {
  if (json) {
    nlohmann::json ranked = nlohmann::json::array(), rejected = nlohmann::json::array();
    for (size_t i = 0; i < r.ranked.size() && static_cast<int>(i) < top; ++i) ranked.push_back(plan_json(r.ranked[i], formula));
    for (const plan::Rejected& x : r.rejected)
      rejected.push_back({{"layout", plan::describe(x.layout)}, {"family", x.family}, {"reason", x.reason}});
    std::cout << nlohmann::json{{"fitting_layouts", r.ranked.size()}, {"ranked", ranked}, {"rejected", rejected}}.dump(2)
              << std::endl;
    return;
  }
  // An MoE model's table has one more column: the expert-parallel communication; so has a search whose
  // shown layouts use context parallelism: the ring's exposed exchange.
  const bool moe = !r.ranked.empty() && r.ranked.front().config.moe.enabled();
  bool context = false;
  for (size_t i = 0; i < r.ranked.size() && static_cast<int>(i) < top; ++i) context |= r.ranked[i].layout.cp > 1;
  std::printf("%zu layouts fit; the best %d by predicted throughput:\n", r.ranked.size(),
              std::min<int>(top, static_cast<int>(r.ranked.size())));
  // The layout column as wide as its longest entry: token slices (slices=...) can run past 62 characters.
  int width = 62;
  for (size_t i = 0; i < r.ranked.size() && static_cast<int>(i) < top; ++i)
    width = std::max(width, static_cast<int>(plan::describe(r.ranked[i].layout).size()));
  std::printf("  %-4s %-*s %8s %6s %12s %10s | %8s %8s %8s %8s %8s %8s%s%s\n", "rank", width, "layout", "TFLOP/s", "MFU",
              "iteration", "peak mem", "compute", "tp comm", "p2p", "bubble", "dp", "optim", moe ? "  ep comm" : "",
              context ? "  cp comm" : "");
  for (size_t i = 0; i < r.ranked.size() && static_cast<int>(i) < top; ++i) {
    const plan::Plan& p = r.ranked[i];
    const plan::IterationTime& t = p.time;
    const double total = t.total();
    auto pct = [&](double x) { return str_cat(std::round(1000 * x / total) / 10, "%"); };
    char expert[16] = "";
    if (moe) std::snprintf(expert, sizeof expert, " %8s", pct(t.expert_parallel).c_str());
    char ring[16] = "";
    if (context) std::snprintf(ring, sizeof ring, " %8s", pct(t.context_parallel).c_str());
    std::printf("  %-4zu %-*s %8.1f %5.1f%% %10.3f s %10s | %8s %8s %8s %8s %8s %8s%s%s\n", i + 1, width,
                plan::describe(p.layout).c_str(), p.tflops_per_device, 100 * p.mfu, total,
                bytes_str(p.peak_memory()).c_str(),
                pct(t.compute).c_str(), pct(t.tensor_parallel).c_str(), pct(t.pipeline_p2p).c_str(),
                pct(t.pipeline_bubble).c_str(), pct(t.data_parallel).c_str(), pct(t.optimizer).c_str(), expert, ring);
  }
  std::map<std::string, std::vector<const plan::Rejected*>> families;
  for (const plan::Rejected& x : r.rejected) families[x.family].push_back(&x);
  std::printf("rejected %zu layouts:\n", r.rejected.size());
  for (const auto& [family, list] : families) {
    std::printf("  %s: %zu, e.g.\n", family.c_str(), list.size());
    // A few distinct (tp, pp) examples of the family, each in full (micro-batch, virtual stages,
    // recomputation...): "tp8 pp64" alone seemed to contradict a winner with the same tp and pp.
    std::set<std::pair<int, int>> seen;
    for (const plan::Rejected* x : list) {
      if (!seen.insert({x->layout.tp, x->layout.pp}).second) continue;
      std::printf("    %s: %s\n", plan::describe(x->layout).c_str(), x->reason.c_str());
      if (seen.size() == 4) break;
    }
  }
}

nlohmann::json token_slicing_json(const plan::TokenSlicingPrice& s) {
  return {{"slices", s.slices}, {"pipeline_seconds", s.sliced}, {"unsliced_pipeline_seconds", s.unsliced},
          {"speedup", s.unsliced / s.sliced}, {"kv_cache_bytes_per_micro_batch", s.cache_bytes}};
}

void print_token_slicing(const plan::TokenSlicingPrice& s, const plan::Plan& p, const std::string& flag) {
  std::string lengths;
  for (int64_t l : s.slices) {
    if (!lengths.empty()) lengths += ',';
    lengths += std::to_string(l);
  }
  std::printf("token-level pipeline (TeraPipe, --pipeline-token-slices %s): %zu slices [%s]\n", flag.c_str(),
              s.slices.size(), lengths.c_str());
  std::printf("  pipeline latency %.4g s against %.4g s unsliced (GPipe over %lld micro-batches on %d stages): "
              "%.2fx faster\n",
              s.sliced, s.unsliced, static_cast<long long>(p.layout.micro_batches()), p.layout.pp,
              s.unsliced / s.sliced);
  std::printf("  key/value caches: %.4g MiB per micro-batch on a stage (each layer's keys and values of the whole "
              "sequence, from the first slice's forward to the last slice's backward: keys and values the "
              "plan's activation memory counts already; their gradients take as much again during the micro-batch's backward)\n",
              s.cache_bytes / (1024.0 * 1024.0));
}

// --pipeline-schedule ouroboros: its price (plan/ouroboros.h) beside 1F1B's on the same ranks, where the
// layers also split over the P stages.
int print_ouroboros(const model::ModelConfig& c, const plan::Layout& l, const plan::ClusterSpec& cluster, bool json) {
  const plan::OuroborosPlan o = plan::plan_ouroboros(c, l, cluster.device);
  double one_f_one_b = 0;  // 0: the layers do not split over P stages
  if (plan::layout_problem(c, l, cluster.num_devices).empty())
    one_f_one_b = plan::make_plan(c, l, cluster, {}).time.total();
  const int P = l.pp;
  if (json) {
    std::cout << nlohmann::json{{"modules", o.modules},
                                {"pipeline_ranks", P},
                                {"module_forward_seconds", o.module_forward},
                                {"module_backward_seconds", o.module_backward},
                                {"forward_chain_seconds", o.forward_chain},
                                {"rank_backward_seconds", o.rank_backward},
                                {"error_gradient_seconds", o.error_gradients},
                                {"rank_optimizer_seconds", o.rank_optimizer},
                                {"iteration_seconds", o.iteration},
                                {"rank_idle_seconds", o.rank_idle},
                                {"weight_copy_bytes", o.weight_copy_bytes},
                                {"activation_copy_bytes", o.activation_copy_bytes},
                                {"one_f_one_b_iteration_seconds", one_f_one_b}}
                     .dump(2)
              << std::endl;
    return 0;
  }
  std::printf("Ouroboros (--pipeline-schedule ouroboros): K = %d modules on %d pipeline ranks, rank 0 holding modules 0 "
              "and %d (the tied embedding's two ends), %lld micro-batches per iteration\n",
              o.modules, P, o.modules - 1, static_cast<long long>(l.micro_batches()));
  std::printf("  %-7s %6s %12s %13s %8s\n", "module", "rank", "forward (s)", "backward (s)", "delay");
  for (int k = 0; k < o.modules; ++k)
    std::printf("  %-7d %6d %12.4g %13.4g %8d\n", k, k == o.modules - 1 ? 0 : k, o.module_forward[k],
                o.module_backward[k], o.modules - 1 - k);
  double slowest = 0;
  for (int r = 0; r < P; ++r) slowest = std::max(slowest, o.rank_backward[r] + o.rank_optimizer[r]);
  std::printf("  iteration %.4g s = the forward chain %.4g s (every module's forward and hand-off, one after another) "
              "+ error gradients %.4g s + the slowest rank's backward and optimizer step %.4g s (every rank's "
              "backward at once)\n",
              o.iteration, o.forward_chain, o.error_gradients, slowest);
  for (int r = 0; r < P; ++r)
    std::printf("  rank %d: idle %.4g s per iteration; the delays keep %.4g MiB of earlier weights and %.4g MiB of "
                "activations of earlier mini-batches\n",
                r, o.rank_idle[r], o.weight_copy_bytes[r] / (1 << 20), o.activation_copy_bytes[r] / (1 << 20));
  if (one_f_one_b > 0)
    std::printf("  1F1B on the same %d ranks: %.4g s per iteration (Ouroboros %.2fx its speed)\n", P, one_f_one_b,
                one_f_one_b / o.iteration);
  else
    std::printf("  1F1B on the same %d ranks: --num-layers=%lld does not split over %d stages\n", P,
                static_cast<long long>(c.num_layers), P);
  return 0;
}

int run_sizing(const model::ModelConfig& base, const plan::Layout& l, const plan::ClusterSpec& cluster, const PlanFlags& f,
               plan::PlanOptions options, int64_t divisible_by) {
  TESSERA_CHECK(!(f.compute_budget > 0 && f.device_hours > 0), "--compute-budget and --device-hours: give one");
  TESSERA_CHECK(!base.moe.enabled(), "--compute-budget and --device-hours size a dense GPT (Chinchilla's law): "
                "leave out --num-experts");
  // A device-hours budget becomes FLOPs at the throughput the planner predicts for the recommended model;
  // that changes the model, so iterate a few times from a 40% MFU guess.
  double achieved = 0.4 * cluster.device.peak_flops;
  plan::ComputeOptimal optimal;
  model::ModelConfig c;
  plan::SearchResult found;
  options.flops_formula = plan::FlopsFormula::Megatron;
  for (int round = 0; round < 3; ++round) {
    const double budget = f.compute_budget > 0 ? f.compute_budget : f.device_hours * 3600 * cluster.num_devices * achieved;
    optimal = plan::compute_optimal(budget);
    c = plan::shape_for_parameters(optimal.parameters, base);
    found = plan::search_layouts(c, l, cluster, options, divisible_by);
    if (found.ranked.empty() || f.compute_budget > 0) break;
    achieved = found.ranked.front().tflops_per_device * 1e12;
  }
  std::printf("compute budget: %.3g FLOPs\n", optimal.compute_flops);
  std::printf("Chinchilla-optimal (Hoffmann et al. 2022, L = 1.69 + 406.4/N^0.34 + 410.7/D^0.28, C = 6ND):\n");
  std::printf("  parameters %.3g, tokens %.3g (%.1f tokens per parameter), predicted loss %.3f\n", optimal.parameters,
              optimal.tokens, optimal.tokens / optimal.parameters, optimal.loss);
  std::printf("  a GPT of that size: %lld layers, hidden %lld, %lld heads (%.3g parameters with the vocabulary)\n",
              static_cast<long long>(c.num_layers), static_cast<long long>(c.hidden_size),
              static_cast<long long>(c.num_attention_heads), static_cast<double>(c.parameter_count()));
  if (found.ranked.empty()) {
    std::printf("  no layout of it fits on %d x %s\n", cluster.num_devices, cluster.device.name.c_str());
    return 1;
  }
  const plan::Plan& best = found.ranked.front();
  const double seconds = optimal.tokens / best.tokens_per_second;
  std::printf("  best layout on %d x %s: %s, %.1f TFLOP/s/GPU, %.0f tokens/s\n", cluster.num_devices,
              cluster.device.name.c_str(), plan::describe(best.layout).c_str(), best.tflops_per_device,
              best.tokens_per_second);
  std::printf("  time to train: %.1f days (%.0f device-hours)\n", seconds / 86400, seconds * cluster.num_devices / 3600);
  return 0;
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  PlanFlags f;
  CLI::App app{"tessera plan: memory, time and throughput of a training run before it is launched. Takes the flags of "
               "tessera train (tessera train --help) and these:",
               "tessera plan"};
  add_plan_flags(app, f);
  std::vector<std::string> plan_args, train_args;
  split_arguments(app, args, plan_args, train_args);
  if (!parse_command_line(app, plan_args, "plan")) return 0;
  TESSERA_CHECK(f.flops_formula == "megatron" || f.flops_formula == "ptdp", "--flops-formula=", f.flops_formula,
                ": must be megatron or ptdp");

  // The cluster first: the device count decides the data-parallel size that the batch rules check.
  plan::CalibratedCluster calibrated = plan::read_cluster_files(f.cluster_files, f.device);
  plan::ClusterSpec& cluster = calibrated.cluster;
  if (f.devices_per_node > 0) cluster.device.devices_per_node = f.devices_per_node;
  const bool on_cpu = cluster.device.name.rfind("cpu", 0) == 0;

  // `tessera train`'s parser checks every flag and rule of the run as if it were launched on `devices`
  // ranks (dp = devices / (tp x cp x pp)), so a plan accepts exactly the runs that train accepts.
  int64_t devices = f.num_devices > 0 ? f.num_devices : (calibrated.num_devices_given ? cluster.num_devices : 0);
  std::vector<std::string> forwarded = with_training_defaults(train_args);
  int64_t model_parallel = 1;  // tp x cp x pp of the flags (the parser validates the values themselves)
  for (size_t i = 0; i + 1 < forwarded.size(); ++i)
    if (forwarded[i] == "--tensor-model-parallel-size" || forwarded[i] == "--pipeline-model-parallel-size" ||
        forwarded[i] == "--context-parallel-size")
      model_parallel *= std::max<int64_t>(1, std::atoll(forwarded[i + 1].c_str()));
  if (devices == 0) devices = model_parallel;  // exactly the flags' model-parallel ranks unless told otherwise
  TESSERA_CHECK(devices % model_parallel == 0, "--num-devices=", devices, ": must be a multiple of tp x cp x pp = ",
                model_parallel);
  // The search and the sizing choose the layout themselves: the parser checks the model alone (dp = 1).
  const bool choose_layout = f.search || f.compute_budget > 0 || f.device_hours > 0;
  TESSERA_CHECK(f.token_slices.empty() || !choose_layout, "--pipeline-token-slices=", f.token_slices,
                ": prices the token-level pipeline of one layout; --search and sizing plan token slices by themselves");
  plan::ExpertSearch experts;
  if (choose_layout) {
    experts.ep = take_int_flag(forwarded, "--expert-model-parallel-size");
    experts.etp = take_int_flag(forwarded, "--expert-tensor-parallel-size");
    experts.cp = take_int_flag(forwarded, "--context-parallel-size");
    if (experts.cp > 0) model_parallel /= experts.cp;  // the search places cp itself
  }
  train::TrainArguments a;
  try {
    a = train::parse_train_arguments(forwarded, choose_layout ? model_parallel : devices);
  } catch (const train::HelpRequested& help) {
    std::cout << app.help() << "\n" << help.text;
    return 0;
  }
  TESSERA_CHECK(!a.layer_split.uneven(), "tessera plan prices even pipeline splits only: leave out "
                "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers");
  cluster.num_devices = static_cast<int>(devices);
  plan::Layout layout = plan::layout_of_run(a);
  if (choose_layout) layout.dp = static_cast<int>(devices / model_parallel);
  layout.flash_attention = f.use_flash_attn || on_cpu;  // Tessera's CPU attention is the flash kernel
  const model::ModelConfig config = a.model;

  if (f.calibrate) return run_calibration(config, layout, f.calibrate_output);
  if (f.measured_iteration_ms != 0 || f.measured_tflops != 0) {  // this model's step, measured on one GPU
    TESSERA_CHECK(f.measured_iteration_ms >= 0 && f.measured_tflops >= 0 && (f.measured_iteration_ms > 0) != (f.measured_tflops > 0),
                  "--measured-iteration-ms=", f.measured_iteration_ms, ", --measured-tflops-per-gpu=", f.measured_tflops,
                  ": give one of them, positive");
    TESSERA_CHECK(!calibrated.step_measured, "--measured-iteration-ms / --measured-tflops-per-gpu: a --cluster file "
                  "already has a \"measured_step\"; give one of the two");
    cluster.device = plan::fit_gemm_efficiency(
        cluster.device, plan::measured_step_of_run(config, layout, f.measured_iteration_ms, f.measured_tflops),
        &calibrated.notes);
  }
  if (!f.json)
    for (const std::string& note : calibrated.notes) std::printf("calibrated: %s\n", note.c_str());

  plan::PlanOptions options;
  options.flops_formula = f.flops_formula == "ptdp" ? plan::FlopsFormula::Ptdp : plan::FlopsFormula::Megatron;
  options.record_timeline = !f.trace.empty();
  if (f.compute_budget > 0 || f.device_hours > 0)
    return run_sizing(config, layout, cluster, f, options, a.make_vocab_size_divisible_by);
  if (f.search) {
    plan::SearchResult r =
        plan::search_layouts(config, layout, cluster, options, a.make_vocab_size_divisible_by, experts);
    print_search(r, f.top, f.json, f.flops_formula);
    if (!f.trace.empty() && !r.ranked.empty()) plan::write_chrome_trace(r.ranked.front(), f.trace);
    return r.ranked.empty() ? 1 : 0;
  }
  if (a.pipeline_schedule == "ouroboros") return print_ouroboros(config, layout, cluster, f.json);
  // --pipeline-token-slices: the plan simulates the token-level schedule with the flag's slices (auto:
  // TeraPipe's dynamic program over the time model's slice costs).
  const bool sliced = !f.token_slices.empty();
  if (sliced)
    layout.token_slices =
        plan::parse_token_slices(f.token_slices, config.seq_length, plan::stage_slice_cost(config, layout, cluster.device),
                                 layout.micro_batches(), layout.pp);
  const plan::Plan p = plan::make_plan(config, layout, cluster, options);
  plan::TokenSlicingPrice slicing;
  if (sliced) slicing = plan::price_token_slicing(p.config, p.layout, p.cluster.device);
  if (f.json) {
    nlohmann::json j = plan_json(p, f.flops_formula);
    if (sliced) j["token_slicing"] = token_slicing_json(slicing);
    if (!calibrated.notes.empty()) j["calibrated"] = calibrated.notes;
    std::cout << j.dump(2) << std::endl;
  } else {
    print_plan(p);
    if (sliced) print_token_slicing(slicing, p, f.token_slices);
  }
  if (!f.trace.empty()) {
    plan::write_chrome_trace(p, f.trace);
    if (!f.json) std::printf("wrote the simulated iteration to %s (open in https://ui.perfetto.dev)\n", f.trace.c_str());
  }
  return 0;
}

}  // namespace tessera::apps
