// The model seam holds: a second model family, defined only here, is built through the factory and
// trained, saved and resumed by the unchanged trainer, pipeline and checkpoint code. Its layers' feed-forward
// slot is a module GPT does not have (a linear bottleneck without activation, with its own parameter
// names). At tp 2 x pp 2 its losses match its single-process run, and its checkpoint resumes in one
// process to the single-process run's losses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "comm/mpi_test_main.h"
#include "model/gpt_model.h"
#include "model/model_factory.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

constexpr const char* kPenaltyName = "bottleneck penalty";
constexpr float kPenalty = 1e-3f;

// y = out(in(x)): column-parallel in, row-parallel out, nothing between them; and an auxiliary loss,
// kPenalty * the sum of squares of the middle activations, as an MoE layer adds its balancing loss.
class LinearBottleneck final : public model::Sublayer {
 public:
  LinearBottleneck(const model::ModelConfig& c, const std::string& prefix, model::ParameterSet& params,
                   const parallel::TensorParallelContext& tp)
      : tp_(tp),
        in_(params, prefix + "bottleneck_in", c.hidden_size, {c.ffn_hidden_size}, 0, true, c.init_method_std, tp),
        out_(params, prefix + "bottleneck_out", c.ffn_hidden_size, c.hidden_size, true, model::output_init_std(c), tp) {}

  struct Record final : model::SavedTensors {
    Tensor middle;
    void visit(const std::function<void(Tensor&, bool)>& f) override { f(middle, true); }
  };
  std::unique_ptr<model::SavedTensors> make_record() const override { return std::make_unique<Record>(); }
  Tensor forward(const Tensor& x, bool x_rounded, const model::SublayerContext& sc, model::SavedTensors& rec) const override {
    auto& r = static_cast<Record&>(rec);
    r.middle = in_.forward(x, x_rounded);
    if (sc.ctx.losses) {
      Tensor sum = Tensor::zeros({1});
      for (int64_t i = 0; i < r.middle.numel(); ++i) sum.f32()[0] += r.middle.f32()[i] * r.middle.f32()[i];
      parallel::all_reduce_sum(sum, *tp_.group);  // this rank holds a column shard of the middle
      sc.ctx.losses->add_auxiliary(kPenaltyName, kPenalty * sum.f32()[0]);
    }
    return out_.forward(r.middle);
  }
  Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded, const model::SublayerContext& sc,
                  model::SavedTensors& rec, bool) const override {
    const Tensor& middle = static_cast<Record&>(rec).middle;
    Tensor dmiddle = out_.backward(dy, middle);
    for (int64_t i = 0; i < middle.numel(); ++i) dmiddle.f32()[i] += sc.ctx.grad_scale * 2 * kPenalty * middle.f32()[i];
    return in_.backward(dmiddle, x, x_rounded);
  }
  Tensor decode(const Tensor& x, const model::DecodeLayout&, model::KvCache&) const override {
    return out_.forward(in_.forward(x));
  }

 private:
  const parallel::TensorParallelContext& tp_;
  model::ColumnParallelLinear in_;
  model::RowParallelLinear out_;
};

void register_toy_family() {
  model::register_model_family("toy", [](const model::ModelConfig& c, model::ParameterSet& params,
                                          const parallel::TensorParallelContext& tp, const model::ModelChunk& chunk) {
    model::TransformerLayerSpec spec = model::gpt_layer_spec();
    spec.mlp = [](const model::ModelConfig& c, int64_t, const std::string& prefix, model::ParameterSet& params,
                  const parallel::TensorParallelContext& tp) {
      return std::make_unique<LinearBottleneck>(c, prefix, params, tp);
    };
    spec.auxiliary_loss_names = {kPenaltyName};
    return std::make_unique<model::GptModel>(c, params, tp, chunk, spec);
  });
}

// The family by flag (registered families are --model-family's choices), so that every rule that reads
// it sees it: a resume checks it against the checkpoint's.
TrainArguments toy_arguments(int tp, int pp, int iters, const std::string& extra, int64_t world_size) {
  return parse_train_arguments(
      split_flags(testing::pipeline_model_flags(tp, pp, 1, 8, iters, extra + " --model-family toy")), world_size);
}

TEST(ModelFamilies, UnknownFamilyIsAClearError) {
  model::ModelConfig c;
  c.family = "no-such-family";
  model::ParameterSet params;
  try {
    model::build_model_chunk(c, params);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model family 'no-such-family' is not known (known: "), std::string::npos) << what;
    for (const char* family : {"bert", "gpt"}) EXPECT_NE(what.find(family), std::string::npos) << what;
  }
}

TEST(ModelFamilies, ToyFamilyTrainsUnderTensorAndPipelineParallelismAndResumes) {
  register_toy_family();
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n < 4) GTEST_SKIP() << "needs 4 ranks (tp 2 x pp 2), has " << n;

  Trainer single(toy_arguments(1, 1, 6, "", 1));
  single.train();
  ASSERT_EQ(single.losses().size(), 6u);
  // The family's own parameters exist, GPT's MLP does not.
  EXPECT_NO_THROW(single.parameters().get("decoder.layers.0.mlp.bottleneck_in.weight"));
  EXPECT_THROW(single.parameters().get("decoder.layers.0.mlp.linear_fc1.weight"), Error);

  namespace fs = std::filesystem;
  fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_model_family_np", n));
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  Trainer parallel(toy_arguments(2, 2, 3, "--save " + dir.string(), n), world.get());
  parallel.train();
  ASSERT_EQ(parallel.losses().size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(parallel.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;
  // The auxiliary loss travelled beside the LM loss, summed over the stages that hold layers.
  const std::vector<double>& penalty = single.auxiliary_losses().at(kPenaltyName);
  const std::vector<double>& parallel_penalty = parallel.auxiliary_losses().at(kPenaltyName);
  ASSERT_EQ(penalty.size(), 6u);
  ASSERT_EQ(parallel_penalty.size(), 3u);
  EXPECT_GT(penalty[0], 0);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(parallel_penalty[i], penalty[i], 1e-5 * penalty[i]) << "iteration " << i + 1;

  // The tp 2 x pp 2 checkpoint, resumed in one process, continues as the single-process run.
  world->barrier();
  Trainer resumed(toy_arguments(1, 1, 6, "--load " + dir.string(), 1));
  EXPECT_EQ(resumed.iteration(), 3);
  resumed.train();
  ASSERT_EQ(resumed.losses().size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(resumed.losses()[i], single.losses()[3 + i], 1e-5 * std::abs(single.losses()[3 + i]))
        << "iteration " << 4 + i;
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
