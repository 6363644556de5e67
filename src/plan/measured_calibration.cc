#include "plan/measured_calibration.h"

#include <cmath>
#include <set>

#include "core/check.h"
#include "plan/planner.h"

namespace tessera::plan {
namespace {

constexpr double kBytesPerGB = 1e9;  // nccl-tests' GB/s

// The keys of an object that are not in `known`: an Error naming the first, with the object's name.
void refuse_unknown_fields(const nlohmann::json& j, const char* object, const std::set<std::string>& known) {
  TESSERA_CHECK(j.is_object(), "\"", object, "\": expected a JSON object, got ", j.dump());
  std::string names;
  for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
  for (const auto& [key, value] : j.items())
    TESSERA_CHECK(known.count(key) > 0, "\"", object, "\" field \"", key, "\": unknown (known: ", names, ")");
}

// The number at `key`, which must be positive (or >= 0 with `zero_ok`); `fallback` when absent.
double json_number(const nlohmann::json& j, const char* object, const char* key, double fallback, bool zero_ok = false) {
  if (!j.contains(key)) return fallback;
  const nlohmann::json& v = j.at(key);
  TESSERA_CHECK(v.is_number(), "\"", object, "\" field \"", key, "\": expected a number, got ", v.dump());
  const double x = v.get<double>();
  TESSERA_CHECK(std::isfinite(x) && (zero_ok ? x >= 0 : x > 0), "\"", object, "\" field \"", key, "\"=", x,
                zero_ok ? ": must be >= 0" : ": must be positive");
  return x;
}

int64_t json_whole(const nlohmann::json& j, const char* object, const char* key, int64_t fallback) {
  if (!j.contains(key)) return fallback;
  const nlohmann::json& v = j.at(key);
  TESSERA_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, "\"", object, "\" field \"", key,
                "\": expected a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

bool json_boolean(const nlohmann::json& j, const char* object, const char* key, bool fallback) {
  if (!j.contains(key)) return fallback;
  TESSERA_CHECK(j.at(key).is_boolean(), "\"", object, "\" field \"", key, "\": expected true or false, got ",
                j.at(key).dump());
  return j.at(key).get<bool>();
}

std::string format_number(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

// One micro-batch on one GPU: the layout a measured step ran.
Layout one_gpu_layout(Layout l) {
  l.tp = l.pp = l.dp = l.cp = 1;
  l.ep = 1, l.etp = 0;
  l.virtual_stages = 1;
  l.sequence_parallel = false;
  l.distributed_optimizer = l.overlap_grad_reduce = l.overlap_param_gather = false;
  l.global_batch_size = l.micro_batch_size;
  l.token_slices.clear();
  l.zero_bubble = pipeline::ZeroBubble::Off;
  return l;
}

}  // namespace

NcclBusBandwidths nccl_bus_bandwidths_from_json(const nlohmann::json& j) {
  refuse_unknown_fields(j, "nccl",
                 {"intra_node_busbw_gbps", "inter_node_busbw_gbps", "inter_node_ranks_per_node", "intra_node_latency_us",
                  "inter_node_latency_us", "measured_with"});
  NcclBusBandwidths n;
  n.intra_node_busbw = json_number(j, "nccl", "intra_node_busbw_gbps", 0) * kBytesPerGB;
  n.inter_node_busbw = json_number(j, "nccl", "inter_node_busbw_gbps", 0) * kBytesPerGB;
  n.inter_node_ranks_per_node = static_cast<int>(json_whole(j, "nccl", "inter_node_ranks_per_node", 0));
  n.intra_node_latency = j.contains("intra_node_latency_us") ? json_number(j, "nccl", "intra_node_latency_us", 0, true) * 1e-6 : -1;
  n.inter_node_latency = j.contains("inter_node_latency_us") ? json_number(j, "nccl", "inter_node_latency_us", 0, true) * 1e-6 : -1;
  TESSERA_CHECK(n.inter_node_ranks_per_node == 0 || n.inter_node_busbw > 0,
                "\"nccl\" field \"inter_node_ranks_per_node\": given without \"inter_node_busbw_gbps\"");
  return n;
}

std::vector<std::string> apply_nccl_bus_bandwidths(DeviceSpec& d, const NcclBusBandwidths& n) {
  std::vector<std::string> notes;
  if (n.intra_node_busbw > 0) {
    notes.push_back(str_cat("intra-node links: NCCL all-reduce busbw ", format_number("%.1f", n.intra_node_busbw / kBytesPerGB),
                            " GB/s (table: ", format_number("%.1f", d.intra_node_bandwidth / kBytesPerGB), ")"));
    d.intra_node_bandwidth = n.intra_node_busbw;
  }
  if (n.inter_node_busbw > 0) {
    const int per_node = n.inter_node_ranks_per_node > 0 ? n.inter_node_ranks_per_node : d.devices_per_node;
    const double share = n.inter_node_busbw / per_node;
    notes.push_back(str_cat("inter-node links: NCCL all-reduce busbw ", format_number("%.1f", n.inter_node_busbw / kBytesPerGB),
                            " GB/s over nodes of ", per_node, " GPUs = ", format_number("%.2f", share / kBytesPerGB),
                            " GB/s per GPU (table: ", format_number("%.2f", d.inter_node_bandwidth / kBytesPerGB), ")"));
    d.inter_node_bandwidth = share;
  }
  if (n.intra_node_latency >= 0) d.intra_node_latency = n.intra_node_latency;
  if (n.inter_node_latency >= 0) d.inter_node_latency = n.inter_node_latency;
  return notes;
}

MeasuredStep measured_step_from_json(const nlohmann::json& j) {
  const char* o = "measured_step";
  refuse_unknown_fields(j, o,
                 {"source", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                  "kv_channels", "seq_length", "padded_vocab_size", "swiglu", "hidden_dropout", "attention_dropout",
                  "micro_batch_size", "precision", "use_flash_attn", "elapsed_time_per_iteration_ms",
                  "throughput_per_gpu_tflops"});
  for (const char* key : {"num_layers", "hidden_size", "num_attention_heads", "seq_length", "padded_vocab_size"})
    TESSERA_CHECK(j.contains(key), "\"", o, "\": field \"", key, "\" is missing (the measured model's --",
                  std::string(key) == "padded_vocab_size" ? "padded vocabulary" : key, ")");
  model::ModelConfig c;
  c.num_layers = json_whole(j, o, "num_layers", 0);
  c.hidden_size = json_whole(j, o, "hidden_size", 0);
  c.num_attention_heads = json_whole(j, o, "num_attention_heads", 0);
  c.seq_length = c.max_position_embeddings = json_whole(j, o, "seq_length", 0);
  c.padded_vocab_size = c.vocab_size = json_whole(j, o, "padded_vocab_size", 0);
  c.ffn_hidden_size = json_whole(j, o, "ffn_hidden_size", 4 * c.hidden_size);
  c.num_query_groups = json_whole(j, o, "num_query_groups", c.num_attention_heads);
  c.kv_channels = json_whole(j, o, "kv_channels", c.hidden_size / c.num_attention_heads);
  c.swiglu = json_boolean(j, o, "swiglu", false);
  c.hidden_dropout = static_cast<float>(json_number(j, o, "hidden_dropout", 0.1, true));
  c.attention_dropout = static_cast<float>(json_number(j, o, "attention_dropout", 0.1, true));
  TESSERA_CHECK(c.hidden_dropout < 1 && c.attention_dropout < 1, "\"", o, "\": a dropout must be below 1");
  Layout l;
  l.micro_batch_size = json_whole(j, o, "micro_batch_size", 1);
  const std::string precision = j.value("precision", std::string("bf16"));
  TESSERA_CHECK(precision == "bf16" || precision == "fp16" || precision == "fp32", "\"", o,
                "\" field \"precision\"=", precision, ": must be bf16, fp16 or fp32");
  l.precision = precision == "bf16" ? Precision::Bf16 : precision == "fp16" ? Precision::Fp16 : Precision::Fp32;
  c.params_dtype = l.precision == Precision::Fp32 ? DType::F32 : l.precision == Precision::Bf16 ? DType::BF16 : DType::F16;
  l.flash_attention = json_boolean(j, o, "use_flash_attn", false);
  const bool ms = j.contains("elapsed_time_per_iteration_ms"), tf = j.contains("throughput_per_gpu_tflops");
  TESSERA_CHECK(ms != tf, "\"", o, "\": give one of \"elapsed_time_per_iteration_ms\" and \"throughput_per_gpu_tflops\"",
                ms ? " (both were given)" : "");
  MeasuredStep s = measured_step_of_run(c, l, json_number(j, o, "elapsed_time_per_iteration_ms", 0),
                                        json_number(j, o, "throughput_per_gpu_tflops", 0));
  if (j.contains("source")) s.source = j.at("source").is_string() ? j.at("source").get<std::string>() : j.at("source").dump();
  return s;
}

MeasuredStep measured_step_of_run(const model::ModelConfig& c, const Layout& run, double milliseconds, double tflops) {
  TESSERA_CHECK((milliseconds > 0) != (tflops > 0), "a measured step: give its time or its TFLOP/s (one of them)");
  MeasuredStep s;
  s.model = c;
  s.layout = one_gpu_layout(run);
  s.seconds = milliseconds > 0 ? milliseconds / 1e3
                               : model::model_flops_per_iteration(c, s.layout.micro_batch_size) / (tflops * 1e12);
  s.source = milliseconds > 0 ? str_cat(format_number("%g", milliseconds), " ms per iteration")
                              : str_cat(format_number("%g", tflops), " TFLOP/s per GPU");
  return s;
}

double predicted_step_seconds(const DeviceSpec& d, const MeasuredStep& s) {
  ClusterSpec one;
  one.device = d;
  one.num_devices = 1;
  return make_plan(s.model, s.layout, one, {}).time.total();
}

DeviceSpec fit_gemm_efficiency(const DeviceSpec& d, const MeasuredStep& s, std::vector<std::string>* notes) {
  TESSERA_CHECK(d.gemm_rates.empty(), "measured_step: device ", d.name,
                " has measured GEMM rates (tessera plan --calibrate), which a measured step does not rescale: "
                "use a table device (\"base\") with it");
  TESSERA_CHECK(d.peak_flops > 0, "measured_step: device ", d.name, " has no peak_flops to take a fraction of");
  const std::string what = str_cat("measured_step (", s.source, ", ", format_number("%.4g", s.seconds * 1e3), " ms)");
  auto at = [&](double efficiency) {
    DeviceSpec e = d;
    e.gemm_efficiency = efficiency;
    return predicted_step_seconds(e, s);
  };
  constexpr double kLowest = 1e-3;
  const double fastest = at(1.0), slowest = at(kLowest);
  TESSERA_CHECK(fastest <= s.seconds, what, ": faster than the planner's ", format_number("%.4g", fastest * 1e3),
                " ms at 100% of ", d.name, "'s peak ", format_number("%.0f", d.peak_flops / 1e12),
                " TFLOP/s: check the peak (\"peak_flops\") and that the step's model fields are the measured run's");
  TESSERA_CHECK(slowest >= s.seconds, what, ": slower than the planner's ", format_number("%.4g", slowest * 1e3),
                " ms at 0.1% of peak: not a GEMM efficiency; check the step's model fields");
  // The predicted time falls as the efficiency rises: bisect in log(efficiency) to a relative 1e-12.
  double lo = std::log(kLowest), hi = 0;
  for (int i = 0; i < 80 && hi - lo > 1e-13; ++i) {
    const double mid = (lo + hi) / 2;
    (at(std::exp(mid)) > s.seconds ? lo : hi) = mid;
  }
  DeviceSpec fitted = d;
  fitted.gemm_efficiency = std::exp(hi);
  if (notes)
    notes->push_back(str_cat("GEMM efficiency: ", format_number("%.3f", fitted.gemm_efficiency), " (table: ",
                             format_number("%.3f", d.gemm_efficiency), "), so that one GPU's step of the measured model takes ",
                             format_number("%.4g", s.seconds * 1e3), " ms as measured (", s.source, "; the table predicted ",
                             format_number("%.4g", at(d.gemm_efficiency) * 1e3), " ms)"));
  return fitted;
}

}  // namespace tessera::plan
