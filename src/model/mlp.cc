#include "model/mlp.h"

#include "kernels/activations.h"
#include "kernels/precision.h"

namespace tessera::model {
namespace {

struct MlpRecord final : SavedTensors {
  Tensor fc1, act;
  void visit(const std::function<void(Tensor&, bool)>& f) override {
    f(fc1, true);
    f(act, true);
  }
  // The activation is read in backward only by fc2's dW product (the activation's backward reads fc1).
  void visit_gemm_inputs(const std::function<void(Tensor&)>& f) override { f(act); }
};

}  // namespace

namespace {
int64_t width(const ModelConfig& config, const MlpOptions& options) {
  return options.ffn_hidden_size > 0 ? options.ffn_hidden_size : config.ffn_hidden_size;
}
}  // namespace

Mlp::Mlp(const ModelConfig& config, const std::string& prefix, ParameterSet& params,
         const parallel::TensorParallelContext& tp, const MlpOptions& options)
    : config_(config),
      ffn_local_(width(config, options) / tp.size()),
      // SwiGLU's fc1 is [gate; up]: each rank takes the same columns of both halves.
      fc1_(params, prefix + "linear_fc1", config.hidden_size,
           config.swiglu ? Shape{2, width(config, options)} : Shape{width(config, options)}, config.swiglu ? 1 : 0,
           config.add_bias_linear, config.init_method_std, tp, config.params_dtype, options.reduce),
      fc2_(params, prefix + "linear_fc2", width(config, options), config.hidden_size, config.add_bias_linear,
           output_init_std(config), tp, config.params_dtype, options.reduce) {}

std::unique_ptr<SavedTensors> Mlp::make_record() const { return std::make_unique<MlpRecord>(); }

Tensor Mlp::activate(const Tensor& fc1, DType rounding) const {
  const int64_t rows = fc1.dim(0);
  Tensor act = Tensor::empty({rows, ffn_local_});
  if (config_.swiglu)
    kernels::swiglu_forward(fc1, act, rounding);
  else
    kernels::gelu_forward(fc1, act, rounding);
  return act;
}

void Mlp::activation_backward(const Tensor& fc1, const Tensor& dact, const Tensor& dfc1) const {
  if (config_.swiglu)
    kernels::swiglu_backward(fc1, dact, dfc1);
  else
    kernels::gelu_backward(fc1, dact, dfc1);
}

Tensor Mlp::forward(const Tensor& x, bool x_rounded, const SublayerContext&, SavedTensors& record) const {
  auto& rec = static_cast<MlpRecord&>(record);
  // The activation feeds only fc2's GEMMs (and is kept in 16 bits for backward): rounded as it is made.
  const DType rounding = kernels::gemm_rounding(config_.params_dtype);
  rec.fc1 = fc1_.forward(x, x_rounded);
  rec.act = activate(rec.fc1, rounding);
  return fc2_.forward(rec.act, rounding != DType::F32);
}

Tensor Mlp::backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext&, SavedTensors& record,
                     bool rec_rounded) const {
  auto& rec = static_cast<MlpRecord&>(record);
  Tensor dact = fc2_.backward(dy, rec.act, rec_rounded);
  Tensor dfc1 = Tensor::empty(rec.fc1.shape());
  activation_backward(rec.fc1, dact, dfc1);
  dact = Tensor();
  return fc1_.backward(dfc1, x, x_rounded);
}

Tensor Mlp::decode(const Tensor& x, const DecodeLayout&, KvCache&) const {
  return fc2_.forward(activate(fc1_.forward(x), DType::F32));
}

}  // namespace tessera::model
