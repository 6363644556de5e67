// `tessera train`: every rank of the job (or the one process) runs this.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "comm/mpi_process_group.h"
#include "core/check.h"
#include "core/process_memory.h"
#include "plan/calibration.h"
#include "plan/planner.h"
#include "plan/run_layout.h"
#include "plan/token_slicing_price.h"
#include "train/args/arguments.h"
#include "train/trainer.h"

namespace tessera::apps {

namespace {

// The cluster the plan line uses: ./tessera_cluster.json when `tessera plan --calibrate` wrote one here for
// this very run (model shapes, tp, micro-batch, precision, CPU, threads, ranks), else the built-in cpu
// guess; `source` says which, and why a calibration was ignored.
plan::ClusterSpec cluster_for_plan(const model::ModelConfig& c, const plan::Layout& l, int ranks, std::string& source) {
  const char* calibrated = "tessera_cluster.json";
  plan::ClusterSpec builtin{plan::find_device("cpu"), ranks};
  source = "uncalibrated cpu; run tessera plan --calibrate here";
  if (!std::filesystem::exists(calibrated)) return builtin;
  plan::ClusterSpec file = plan::read_cluster_file(calibrated);
  if (file.calibrated_for.is_null()) {
    source = str_cat("uncalibrated cpu: ignoring ", calibrated, ", which does not say what it calibrated; run tessera "
                     "plan --calibrate again");
    return builtin;
  }
  const std::vector<std::string> differ =
      plan::calibration_mismatches(file.calibrated_for, plan::calibration_key(c, l, ranks));
  if (!differ.empty()) {
    std::string list;
    for (const std::string& d : differ) list += str_cat(list.empty() ? "" : "; ", d);
    source = str_cat("uncalibrated cpu: ignoring ", calibrated, ", calibrated for another run (", list, ")");
    return builtin;
  }
  source = calibrated;
  file.num_devices = ranks;
  return file;
}

// The planner's prediction for this run, with its precision, optimizer and layout, printed beside the
// first log line's measurement. A plan that cannot be made is reported, never fatal to the training run.
std::string plan_note(const train::TrainArguments& a, double measured_ms) try {
  const plan::Layout l = plan::layout_of_run(a);
  std::string source;
  const plan::ClusterSpec cluster = cluster_for_plan(a.model, l, static_cast<int>(a.world_size), source);
  const plan::Plan p = plan::make_plan(a.model, l, cluster, {});
  auto one_decimal = [](double x) { return std::round(x * 10) / 10; };
  return str_cat(" plan (", source, "; ", plan::describe(l), " ", plan::to_string(l.precision),
                 "): elapsed time per iteration (ms): predicted ", one_decimal(p.time.total() * 1e3), ", measured ",
                 one_decimal(measured_ms), " | peak memory per rank (MiB): predicted ",
                 one_decimal(p.peak_memory() / (1 << 20)), ", measured (peak RSS) ",
                 one_decimal(peak_resident_bytes() / (1 << 20)));
} catch (const std::exception& e) {
  return str_cat(" plan: no prediction (", e.what(), ")");
}

// The cost --pipeline-token-slices auto gives TeraPipe's dynamic program: the planner's slice cost
// (plan/token_slicing_price.h) for this run's layout on the cluster the plan line uses, calibrated when
// tessera_cluster.json was written for this run; the stated model if the planner cannot price the run.
train::TokenSliceCosts planner_token_slice_cost(const train::TrainArguments& a) try {
  const plan::Layout l = plan::layout_of_run(a);
  std::string source;
  const plan::ClusterSpec cluster = cluster_for_plan(a.model, l, static_cast<int>(a.world_size), source);
  return {plan::stage_slice_cost(a.model, l, cluster.device), str_cat("the planner's time model (", source, ")")};
} catch (const std::exception& e) {
  train::TokenSliceCosts stated = train::stated_token_slice_cost(a);
  stated.source += str_cat(", as the planner could not price the run: ", e.what());
  return stated;
}

// Rank 0's automatic slicing on every rank: each chose from its own view of tessera_cluster.json, which
// on several machines need not be the same file. Every choice is in units that pass the flag's rules.
void share_token_slices(train::TrainArguments& a, comm::ProcessGroup& world) {
  if (a.pipeline_token_slices != "auto" || world.size() == 1) return;
  Tensor t = Tensor::zeros({a.model.seq_length + 1}, DType::I64);  // the count, then the lengths
  t.host_i64()[0] = static_cast<int64_t>(a.token_slices.size());
  std::copy(a.token_slices.begin(), a.token_slices.end(), t.host_i64() + 1);
  world.broadcast(t, 0);
  a.token_slices.assign(t.host_i64() + 1, t.host_i64() + 1 + t.host_i64()[0]);
}

// `tessera pretrain_bert` is Megatron's pretrain_bert.py: train's flags and loop with --model-family bert.
// Its help and its errors' pointer to the help name the command the user typed.
std::string as_pretrain_bert(std::string text) {
  const std::string train = "tessera train", bert = "tessera pretrain_bert";
  for (size_t at = text.find(train); at != std::string::npos; at = text.find(train, at + bert.size()))
    text.replace(at, train.size(), bert);
  if (text.starts_with(bert + ":") && text.find('\n') != std::string::npos)  // the help's line: train's description
    text = bert + ": train a BERT, masked LM and sentence order (tessera train --model-family bert)" +
           text.substr(text.find('\n'));
  return text;
}

// Every rank parses and validates the same flags, so a bad flag fails identically everywhere: rank 0
// reports it and all ranks exit 1 without having communicated. A failure after that (one rank's
// checkpoint file, say) may leave other ranks inside a collective, so it aborts the whole job.
int run_train(const std::vector<std::string>& args, bool pretrain_bert) {
  comm::MpiRuntime mpi;
  std::unique_ptr<comm::ProcessGroup> world = comm::make_mpi_world_group();
  const bool reporter = world->rank() == 0;
  train::TrainArguments parsed;
  try {
    parsed = train::parse_train_arguments(args, world->size(), planner_token_slice_cost);
  } catch (const train::HelpRequested& help) {
    if (reporter) std::cout << (pretrain_bert ? as_pretrain_bert(help.text) : help.text);
    return 0;
  } catch (const Error& e) {
    if (reporter) std::cerr << "error: " << (pretrain_bert ? as_pretrain_bert(e.what()) : e.what()) << std::endl;
    return 1;
  }
  comm::set_collective_timeout(std::chrono::minutes(parsed.distributed_timeout_minutes));
  try {
    share_token_slices(parsed, *world);
    const train::TrainArguments planned = parsed;
    train::Trainer trainer(std::move(parsed), world.get());
    trainer.first_interval_note = [&planned](double measured_ms) { return plan_note(planned, measured_ms); };
    trainer.train();
    // As Megatron: an exit (signal, --exit-interval, --exit-duration-in-mins) ends the program here.
    if (!trainer.exit_condition_met()) trainer.evaluate_after_training();
  } catch (const train::RerunExit& e) {  // every rank stops together, with Megatron's exit code
    return e.code();
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    comm::abort_all(std::string("error: ") + e.what());
  }
  return 0;
}

}  // namespace

int train_command(const std::vector<std::string>& args) { return run_train(args, false); }

int pretrain_bert_command(const std::vector<std::string>& args) {
  std::vector<std::string> bert = {"--model-family", "bert"};
  bert.insert(bert.end(), args.begin(), args.end());
  return run_train(bert, true);
}

}  // namespace tessera::apps
