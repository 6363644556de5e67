#include "model/modules.h"

#include "core/philox.h"
#include "kernels/linear.h"
#include "kernels/norms.h"

namespace tessera::model {

uint64_t dropout_stream(int64_t iteration, int64_t layer_number, int site) {
  return mix_stream(mix_stream(static_cast<uint64_t>(iteration), static_cast<uint64_t>(layer_number)),
                    static_cast<uint64_t>(site));
}

Linear::Linear(ParameterSet& params, const std::string& prefix, int64_t in, int64_t out, bool bias,
               float init_std)
    : in_(in), out_(out) {
  weight_ = params.add({prefix + ".weight", {out, in}, Init::Normal, init_std, true});
  if (bias) bias_ = params.add({prefix + ".bias", {out}, Init::Zeros, 0.0f, false});
}

Tensor Linear::forward(const Tensor& x) const {
  int64_t rows = x.numel() / in_;
  Tensor y = Tensor::empty({rows, out_});
  kernels::linear_forward(x.f32(), weight_->value.f32(), bias_ ? bias_->value.f32() : nullptr, y.f32(), rows,
                          in_, out_);
  return y;
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x, bool want_dx) const {
  int64_t rows = x.numel() / in_;
  Tensor dx = want_dx ? Tensor::empty({rows, in_}) : Tensor();
  kernels::linear_backward(dy.f32(), x.f32(), weight_->value.f32(), want_dx ? dx.f32() : nullptr,
                           weight_->grad.f32(), bias_ ? bias_->grad.f32() : nullptr, rows, in_, out_);
  return dx;
}

Norm::Norm(ParameterSet& params, const std::string& prefix, const GptConfig& config)
    : kind_(config.normalization), eps_(config.norm_epsilon), hidden_(config.hidden_size) {
  weight_ = params.add({prefix + ".weight", {hidden_}, Init::Ones, 0.0f, false});
  if (kind_ == Normalization::LayerNorm) bias_ = params.add({prefix + ".bias", {hidden_}, Init::Zeros, 0.0f, false});
}

void Norm::forward(const Tensor& x, Tensor& y, Tensor& mean, Tensor& rstd) const {
  int64_t rows = x.numel() / hidden_;
  y = Tensor::empty({rows, hidden_});
  rstd = Tensor::empty({rows});
  if (kind_ == Normalization::LayerNorm) {
    mean = Tensor::empty({rows});
    kernels::layernorm_forward(x.f32(), weight_->value.f32(), bias_->value.f32(), y.f32(), mean.f32(), rstd.f32(),
                               rows, hidden_, eps_);
  } else {
    kernels::rmsnorm_forward(x.f32(), weight_->value.f32(), y.f32(), rstd.f32(), rows, hidden_, eps_);
  }
}

void Norm::backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                    const Tensor& dx) const {
  int64_t rows = x.numel() / hidden_;
  if (kind_ == Normalization::LayerNorm) {
    kernels::layernorm_backward(dy.f32(), x.f32(), weight_->value.f32(), mean.f32(), rstd.f32(), dx.f32(),
                                weight_->grad.f32(), bias_->grad.f32(), rows, hidden_);
  } else {
    kernels::rmsnorm_backward(dy.f32(), x.f32(), weight_->value.f32(), rstd.f32(), dx.f32(), weight_->grad.f32(),
                              rows, hidden_);
  }
}

}  // namespace tessera::model
