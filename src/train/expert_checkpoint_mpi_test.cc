// Expert parallelism under mpirun, for checkpoints and the gradient norm. A small model is declared by
// hand as a mixture-of-experts model holds it: per layer dense weights (split over the tensor group or
// replicated) and one set of weights per expert (named by the global expert index, on its expert rank
// only, split over the expert tensor group or whole). Checkpoints saved at one (tp, pp, ep, etp) layout
// load at another with every value and Adam moment exact, with AdamW and the distributed optimizer on
// either side; a damaged or missing expert file or tensor is an error that names it. And the global
// gradient norm (which clipping uses) of AdamW and of the distributed optimizer equals the
// single-process norm of the same full gradients.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "ckpt/checkpoint.h"
#include "comm/mpi_test_main.h"
#include "optim/distributed_optimizer.h"
#include "train/gradient_groups.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using GradReduce = model::ParameterSpec::GradReduce;

constexpr int kLayers = 2, kExperts = 4, kHidden = 6, kFfn = 4, kVocab = 8;

struct Layout {
  int tp = 1, pp = 1, ep = 1, etp = 1;
  bool fits(int world) const {
    return world % (tp * pp) == 0 && world % (etp * ep * pp) == 0 && kExperts % ep == 0 && kLayers % pp == 0;
  }
  comm::ParallelLayout at(int world) const { return {world, tp, pp, 1, ep, etp}; }
  std::string str() const { return str_cat("tp", tp, " pp", pp, " ep", ep, " etp", etp); }
};

// A parameter of full shape `full`, split over `size` ranks along dimension `dim` of `view` (a view of
// the full tensor: [2, F, H] for a SwiGLU fc1 of [2F, H], so that each rank holds a part of both halves),
// as model/modules.cc splits over the tensor group. size 1 or dim < 0: whole.
model::ParameterSpec spec(const std::string& name, Shape full, bool expert, Shape view = {}, int dim = -1,
                          int rank = 0, int size = 1) {
  model::ParameterSpec s{name, full, model::Init::Zeros, 0.0f, dim >= 0};
  s.expert = expert;
  s.grad_reduce = expert ? GradReduce::ExpertDataParallel : GradReduce::DataParallel;
  if (dim < 0 || size == 1) return s;
  const int64_t length = view[dim] / size;
  s.sharding = {full, view, dim, rank * length, length};
  // The rank's tensor: a range of rows when the view folds the rows, else of dimension dim itself.
  s.shape[view.size() == full.size() ? dim : 0] /= size;
  return s;
}

// This rank's part of the model: the layers of its stage, and of each layer the experts of its expert rank.
void declare(model::ParameterSet& params, const comm::ParallelState& state) {
  const comm::ParallelLayout& l = state.layout();
  const comm::RankCoordinates c = state.coordinates();
  const int tp = l.tensor_model_parallel_size, etp = l.expert_tensor_parallel();
  const int ep = l.expert_model_parallel_size, pp = l.pipeline_model_parallel_size;
  if (c.pp == 0)
    params.add(spec("embedding.word_embeddings.weight", {kVocab, kHidden}, false, {kVocab, kHidden}, 0, c.tp, tp));
  const int per_stage = kLayers / pp, per_rank = kExperts / ep;
  for (int layer = c.pp * per_stage; layer < (c.pp + 1) * per_stage; ++layer) {
    const std::string p = str_cat("decoder.layers.", layer, ".");
    params.add(spec(p + "input_layernorm.weight", {kHidden}, false));
    params.add(spec(p + "self_attention.linear_qkv.weight", {3 * kHidden, kHidden}, false, {3, kHidden, kHidden}, 1,
                    c.tp, tp));
    params.add(
        spec(p + "self_attention.linear_proj.weight", {kHidden, kHidden}, false, {kHidden, kHidden}, 1, c.tp, tp));
    params.add(spec(p + "mlp.router.weight", {kExperts, kHidden}, false));
    for (int e = c.ep * per_rank; e < (c.ep + 1) * per_rank; ++e) {
      const std::string x = str_cat(p, "mlp.experts.local_experts.", e, ".");
      params.add(spec(x + "linear_fc1.weight", {2 * kFfn, kHidden}, true, {2, kFfn, kHidden}, 1, c.etp, etp));
      params.add(spec(x + "linear_fc2.weight", {kHidden, kFfn}, true, {kHidden, kFfn}, 1, c.etp, etp));
      params.add(spec(x + "linear_fc2.bias", {kHidden}, true));  // whole on every expert tensor rank
    }
  }
  if (c.pp == pp - 1) params.add(spec("decoder.final_layernorm.weight", {kHidden}, false));
}

int64_t global_index(const model::Parameter& p, int64_t local) {
  return p.spec.sharding.sharded() ? p.spec.sharding.global_index(local) : local;
}

// A value that tells tensors and elements apart, exact in fp32: what = 0 the parameter, 1 and 2 its moments.
float value_of(const std::string& name, int64_t global, int what) {
  const size_t h = std::hash<std::string>{}(str_cat(name, "#", what));
  return static_cast<float>(h % 16381) + static_cast<float>(global) / 256.0f;
}

struct Model {
  model::ParameterSet params;
  std::unique_ptr<GroupedGradBuckets> buckets;
  std::unique_ptr<optim::AdamWOptimizer> adamw;
  std::unique_ptr<optim::DistributedOptimizer> distributed;

  Model(const comm::ParallelState& state, bool distributed_optimizer) {
    declare(params, state);
    params.allocate(0);
    // Small buckets, so that expert parameters are cut into pieces and bucket tails.
    buckets = std::make_unique<GroupedGradBuckets>(params, state, 7, distributed_optimizer, /*model_has_experts=*/true);
    if (distributed_optimizer)
      distributed =
          std::make_unique<optim::DistributedOptimizer>(params, optim::AdamWConfig{}, buckets->optimizer_groups());
    else
      adamw = std::make_unique<optim::AdamWOptimizer>(params, optim::AdamWConfig{});
  }
  optim::Optimizer& optimizer() const {
    if (distributed) return *distributed;
    return *adamw;
  }

  // Values and moments from value_of, through the pieces the optimizer reports; 5 steps taken.
  void fill() const {
    optimizer().set_steps(5);
    for (const model::Parameter& p : params.params())
      for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] = value_of(p.spec.name, global_index(p, i), 0);
    const optim::MomentShard m = optimizer().moments();
    for (const optim::MomentPiece& piece : m.pieces)
      for (int64_t k = 0; k < piece.length; ++k) {
        const int64_t g = global_index(*piece.param, piece.begin + k);
        m.exp_avg.f32()[piece.state + k] = value_of(piece.param->spec.name, g, 1);
        m.exp_avg_sq.f32()[piece.state + k] = value_of(piece.param->spec.name, g, 2);
      }
  }

  // Loads as the trainer does: the distributed optimizer takes its shard of the full-layout moments.
  void load(const fs::path& dir) {
    optim::AdamWOptimizer full(params, optim::AdamWConfig{});
    ckpt::load_checkpoint(dir.string(), params, adamw ? adamw.get() : &full);
    if (distributed) distributed->load_full_state(full);
  }

  // Every element of every parameter and of this rank's moments is value_of's.
  void expect_filled() const {
    for (const model::Parameter& p : params.params())
      for (int64_t i = 0; i < p.value.numel(); ++i)
        ASSERT_EQ(p.value.f32()[i], value_of(p.spec.name, global_index(p, i), 0)) << p.spec.name << " element " << i;
    const optim::MomentShard m = optimizer().moments();
    int64_t covered = 0;
    for (const optim::MomentPiece& piece : m.pieces)
      for (int64_t k = 0; k < piece.length; ++k, ++covered) {
        const int64_t g = global_index(*piece.param, piece.begin + k);
        ASSERT_EQ(m.exp_avg.f32()[piece.state + k], value_of(piece.param->spec.name, g, 1))
            << "exp_avg of " << piece.param->spec.name << " element " << piece.begin + k;
        ASSERT_EQ(m.exp_avg_sq.f32()[piece.state + k], value_of(piece.param->spec.name, g, 2))
            << "exp_avg_sq of " << piece.param->spec.name << " element " << piece.begin + k;
      }
    EXPECT_EQ(covered, m.exp_avg.numel());
    EXPECT_EQ(optimizer().steps(), 5);
  }
};

void expect_error_containing(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

ckpt::ShardPlacement placement(const comm::ParallelState& state, comm::ProcessGroup* world) {
  const comm::RankCoordinates c = state.coordinates();
  return {c.tp, c.dp, world, c.pp, c.etp, c.ep, c.edp};
}

// (saved at, loaded at), run where the world size allows both.
const std::vector<std::pair<Layout, Layout>> kCases{
    {{1, 1, 4, 1}, {1, 1, 2, 1}},  // ep 4 -> ep 2
    {{1, 1, 4, 1}, {1, 1, 1, 1}},  // ep 4 -> ep 1
    {{1, 1, 1, 1}, {1, 1, 4, 1}},  // ep 1 -> ep 4
    {{1, 1, 2, 2}, {1, 1, 1, 1}},  // etp 2 x ep 2 -> one expert tensor rank
    {{2, 1, 2, 2}, {1, 1, 4, 1}},  // tp 2 etp 2 ep 2 -> tp 1 ep 4
    {{1, 1, 1, 1}, {2, 1, 2, 2}},
    {{2, 1, 4, 1}, {1, 1, 2, 2}},  // etp 1 under tp 2 -> etp 2 under tp 1
    {{1, 2, 2, 1}, {2, 1, 4, 1}},  // pp 2 ep 2 -> pp 1 ep 4
    {{1, 1, 2, 1}, {1, 1, 1, 1}},  // at 2 ranks
    {{1, 1, 1, 2}, {1, 1, 2, 1}},
};

TEST(ExpertCheckpoint, SavedAtOneExpertLayoutLoadsExactlyAtAnother) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  const fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_expert_checkpoint_mpi_test_np", n));
  int ran = 0;
  for (const auto& [saved_at, loaded_at] : kCases) {
    if (!saved_at.fits(n) || !loaded_at.fits(n)) continue;
    // (save, load) with AdamW and with the distributed optimizer; in the first case also each into the other.
    std::vector<std::pair<bool, bool>> optimizers{{false, false}, {true, true}};
    if (ran == 0) optimizers.insert(optimizers.end(), {{true, false}, {false, true}});
    for (const auto& [save_distributed, load_distributed] : optimizers) {
      SCOPED_TRACE(str_cat("saved at ", saved_at.str(), save_distributed ? " (distributed optimizer)" : "",
                           ", loaded at ", loaded_at.str(), load_distributed ? " (distributed optimizer)" : ""));
      ++ran;
      if (world->rank() == 0) fs::remove_all(dir);
      world->barrier();
      {
        comm::ParallelState state(*world, saved_at.at(n));
        Model m(state, save_distributed);
        m.fill();
        ckpt::save_checkpoint(dir.string(), {3, 0, 0, 1, {}}, m.params, &m.optimizer(), placement(state, world.get()));
      }
      comm::ParallelState state(*world, loaded_at.at(n));
      Model m(state, load_distributed);
      m.load(dir);
      m.expect_filled();
      world->barrier();  // before the next case removes the directory
    }
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
  if (ran == 0) GTEST_SKIP() << "no pair of layouts at " << n << " rank(s)";
}

// The files of an ep 4 save: the dense ones by dense coordinates, the expert ones by expert coordinates
// (each holding its own experts), every one listed in the index; then damage is reported by file.
TEST(ExpertCheckpoint, ExpertFilesAreNamedByExpertRankAndChecked) {
  auto world = comm::make_mpi_world_group();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks (ep 4), has " << world->size();
  const fs::path root = testing::shared_scratch_dir(*world, "tessera_expert_checkpoint_files");
  if (world->rank() == 0) fs::remove_all(root);
  world->barrier();
  {
    comm::ParallelState state(*world, Layout{1, 1, 4, 1}.at(4));
    Model m(state, /*distributed_optimizer=*/true);
    m.fill();
    ckpt::save_checkpoint(root.string(), {3, 0, 0, 1, {}}, m.params, &m.optimizer(), placement(state, world.get()));
  }
  if (world->rank() == 0) {
    const fs::path dir = root / "iter_0000003";
    std::set<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir)) files.insert(entry.path().filename().string());
    // Dense: tensor rank 0 of data rank 0; every data rank its pieces. Expert: each expert rank (its own
    // edp rank 0) its experts and their moments.
    std::set<std::string> want{"index.json", "model.tp00.pp00.safetensors"};
    for (int r = 0; r < 4; ++r) {
      want.insert(str_cat("optim.tp00.pp00.dp00", r, ".safetensors"));
      want.insert(str_cat("model.etp00.pp00.ep00", r, ".safetensors"));
      want.insert(str_cat("optim.etp00.pp00.ep00", r, ".edp000.safetensors"));
    }
    EXPECT_EQ(files, want);
    const nlohmann::json index = nlohmann::json::parse(std::ifstream(dir / "index.json"));
    EXPECT_EQ(index["files"].size(), want.size() - 1);
    for (int r = 0; r < 4; ++r) {
      const std::string file = str_cat("model.etp00.pp00.ep00", r, ".safetensors");
      EXPECT_TRUE(index["files"].contains(file)) << file;
      for (int layer = 0; layer < kLayers; ++layer)
        for (int e = 0; e < kExperts; ++e) {
          const std::string name =
              str_cat("decoder.layers.", layer, ".mlp.experts.local_experts.", e, ".linear_fc1.weight");
          ASSERT_EQ(index["tensors"][name]["slices"].size(), 1u) << name;
          EXPECT_EQ(index["tensors"][name]["slices"][0]["file"] == file, e == r) << name << " in " << file;
        }
    }

    // One process, one expert rank: it reads every file.
    auto state = comm::ParallelState::single_process();
    Model m(*state, false);
    auto expect_error = [&](const std::string& needle) {
      expect_error_containing([&] { m.load(root); }, needle);
    };
    m.load(root);
    m.expect_filled();
    const fs::path f = dir / "model.etp00.pp00.ep002.safetensors";
    const std::string bytes = [&] {
      std::ifstream in(f, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    auto rewrite = [&](const std::string& contents) {
      std::ofstream(f, std::ios::binary | std::ios::trunc) << contents;
    };
    std::string damaged = bytes;
    damaged[damaged.size() - 3] ^= 0x40;
    rewrite(damaged);
    expect_error("model.etp00.pp00.ep002.safetensors is corrupt");
    rewrite(bytes.substr(0, bytes.size() - 4));
    expect_error("model.etp00.pp00.ep002.safetensors has");
    fs::remove(f);
    expect_error("model.etp00.pp00.ep002.safetensors is missing");
    rewrite(bytes);
    m.load(root);
    m.expect_filled();
    // A model with an expert the checkpoint lacks.
    model::ParameterSet more;
    declare(more, *state);
    more.add(spec("decoder.layers.1.mlp.experts.local_experts.4.linear_fc2.bias", {kHidden}, true));
    more.allocate(0);
    expect_error_containing([&] { ckpt::load_checkpoint(root.string(), more, nullptr); },
                            "has no tensor decoder.layers.1.mlp.experts.local_experts.4.linear_fc2.bias");
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(root);
}

// Gradients of the full model that are exact in fp32 and in any order of summation: multiples of 1/64.
float gradient_of(const std::string& name, int64_t global) {
  const size_t h = std::hash<std::string>{}(name);
  return static_cast<float>(static_cast<int64_t>((h + static_cast<size_t>(global) * 3) % 13) - 6) / 64.0f;
}

// Every rank's contribution: its group's sum is the full gradient.
void fill_gradients(const model::ParameterSet& params, const comm::ParallelState& state) {
  for (const model::Parameter& p : params.params()) {
    const int ranks = state.gradient_group(p.spec.grad_reduce == GradReduce::ExpertDataParallel).size();
    for (int64_t i = 0; i < p.grad.numel(); ++i) p.grad.f32()[i] = gradient_of(p.spec.name, global_index(p, i)) / ranks;
  }
}

TEST(ExpertGradNorm, EqualsTheSingleProcessNormOfTheSameGradients) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  auto single = comm::ParallelState::single_process();
  model::ParameterSet full;
  declare(full, *single);
  full.allocate(0);
  fill_gradients(full, *single);
  const double want = optim::AdamWOptimizer(full, optim::AdamWConfig{}).grad_norm();
  ASSERT_GT(want, 0.1);
  optim::AdamWConfig config;
  config.clip_grad = 0.01f;  // the norm decides the update
  int ran = 0;
  for (const Layout& l : {Layout{1, 1, 2, 1}, Layout{1, 1, 1, 2}, Layout{1, 1, 2, 2}, Layout{2, 1, 2, 2},
                          Layout{2, 1, 2, 1}, Layout{2, 1, 4, 1}, Layout{1, 1, 4, 1}, Layout{1, 2, 2, 1},
                          Layout{2, 2, 1, 1}, Layout{2, 1, 1, 2}}) {
    if (!l.fits(n) || n == 1) continue;
    SCOPED_TRACE(l.str());
    ++ran;
    comm::ParallelState state(*world, l.at(n));
    const comm::RankCoordinates c = state.coordinates();
    for (bool distributed : {false, true}) {
      SCOPED_TRACE(distributed ? "distributed optimizer" : "AdamW");
      model::ParameterSet params;
      declare(params, state);
      params.allocate(0);
      GroupedGradBuckets buckets(params, state, 7, distributed, /*model_has_experts=*/true);
      std::unique_ptr<optim::Optimizer> opt;
      if (distributed)
        opt = std::make_unique<optim::DistributedOptimizer>(params, config, buckets.optimizer_groups());
      else  // as the trainer makes it
        opt = std::make_unique<optim::AdamWOptimizer>(params, config, &state.model_parallel_group(), c.tp == 0,
                                                      &state.expert_tensor_model_pipeline_group(), c.etp == 0);
      fill_gradients(params, state);
      buckets.finish();
      EXPECT_NEAR(opt->grad_norm(), want, 1e-6 * want);
      EXPECT_NEAR(opt->step(0.1f).grad_norm, want, 1e-6 * want);
    }
  }
  if (ran == 0) GTEST_SKIP() << "no expert layout at " << n << " rank(s)";
}

}  // namespace
}  // namespace tessera::train
