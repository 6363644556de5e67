#include "model/grouped_mlp.h"

#include "model/weight_gradient_store.h"

#include <algorithm>

#include "kernels/grouped_linear.h"
#include "kernels/precision.h"

namespace tessera::model {
namespace {

struct GroupedMlpRecord final : SavedTensors {
  Tensor fc1, act;  // [experts, padded rows, ...]
  void visit(const std::function<void(Tensor&, bool)>& f) override {
    f(fc1, true);
    f(act, true);
  }
};

// One linear layer of every expert: its weights, biases and their gradients, in the experts' order
// (biases empty where the layer has none, or where this rank's output leaves them out).
struct LayerTensors {
  std::vector<Tensor> w, b, dw, db;
};

template <typename Linear>
LayerTensors layer_tensors(const std::vector<const Mlp*>& experts, const Linear& (Mlp::*layer)() const,
                           bool with_bias) {
  LayerTensors t;
  for (const Mlp* e : experts) {
    const Linear& l = (e->*layer)();
    t.w.push_back(l.weight()->value);
    t.dw.push_back(l.weight()->grad);
    if (l.bias()) {
      if (with_bias) t.b.push_back(l.bias()->value);
      t.db.push_back(l.bias()->grad);
    }
  }
  return t;
}

int64_t padded_rows(const std::vector<int64_t>& counts) {
  return counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
}

// The rows as [experts, padded rows, d]: a view where every expert has the padded count, else a copy.
Tensor padded(const Tensor& rows, const std::vector<int64_t>& counts, int64_t m) {
  const auto groups = static_cast<int64_t>(counts.size());
  if (rows.dim(0) == groups * m) return rows.view({groups, m, rows.dim(1)});
  return kernels::pad_row_groups(rows, counts, m);
}

// The inverse of padded: each expert's first counts[j] rows, as [sum counts, d].
Tensor unpadded(const Tensor& p, const std::vector<int64_t>& counts) {
  const int64_t total = p.dim(0) * p.dim(1);
  int64_t rows = 0;
  for (int64_t c : counts) rows += c;
  if (rows == total) return p.view({total, p.dim(2)});
  Tensor out = Tensor::empty({rows, p.dim(2)});
  kernels::unpad_row_groups(p, counts, out);
  return out;
}

}  // namespace

GroupedMlp::GroupedMlp(const ModelConfig& config, std::vector<const Mlp*> experts)
    : config_(config), experts_(std::move(experts)) {
  TESSERA_CHECK(!experts_.empty(), "GroupedMlp: no experts");
}

std::unique_ptr<SavedTensors> GroupedMlp::make_record() const { return std::make_unique<GroupedMlpRecord>(); }

Tensor GroupedMlp::forward(const Tensor& rows, const std::vector<int64_t>& counts, bool rows_rounded,
                           SavedTensors& record) const {
  auto& rec = static_cast<GroupedMlpRecord&>(record);
  TESSERA_CHECK(counts.size() == experts_.size(), "GroupedMlp: ", counts.size(), " row counts for ", experts_.size(),
                " experts");
  const auto groups = static_cast<int64_t>(experts_.size());
  const int64_t m = padded_rows(counts), h = config_.hidden_size;
  if (m == 0) return Tensor::zeros({0, h});
  const DType input_type = config_.params_dtype, rounding = kernels::gemm_rounding(input_type);
  const LayerTensors fc1 = layer_tensors(experts_, &Mlp::fc1, true);
  const LayerTensors fc2 = layer_tensors(experts_, &Mlp::fc2, experts_[0]->fc2().output_has_bias());
  const Tensor x = padded(rows, counts, m);
  rec.fc1 = Tensor::empty({groups, m, fc1.w[0].dim(0)});
  kernels::grouped_linear_forward(x, fc1.w, fc1.b, rec.fc1, input_type, rows_rounded);
  const Tensor act = experts_[0]->activate(rec.fc1.view({groups * m, rec.fc1.dim(2)}), rounding);
  rec.act = act.view({groups, m, act.dim(1)});
  Tensor y = Tensor::empty({groups, m, h});
  kernels::grouped_linear_forward(rec.act, fc2.w, fc2.b, y, input_type, rounding != DType::F32);
  return unpadded(y, counts);
}

Tensor GroupedMlp::backward(const Tensor& dy, const Tensor& rows, const std::vector<int64_t>& counts, bool rows_rounded,
                            SavedTensors& record, bool rec_rounded) const {
  auto& rec = static_cast<GroupedMlpRecord&>(record);
  const auto groups = static_cast<int64_t>(experts_.size());
  const int64_t m = padded_rows(counts), h = config_.hidden_size;
  if (m == 0) return Tensor::zeros({0, h});
  const DType input_type = config_.params_dtype;
  const LayerTensors fc1 = layer_tensors(experts_, &Mlp::fc1, true);
  const LayerTensors fc2 = layer_tensors(experts_, &Mlp::fc2, true);
  // Padded rows have dy = 0: their dact, dfc1 and every gradient contribution are zeros.
  // Zero bubble: the experts' weight and bias gradients in the W pass (model/weight_gradient_store.h).
  WeightGradientStore* store = deferred_weight_gradients();
  const auto grouped_backward = [&](const Tensor& dout, const Tensor& in, const LayerTensors& l, const Tensor& din,
                                    bool in_rounded) {
    if (!store) return kernels::grouped_linear_backward(dout, in, l.w, din, l.dw, l.db, input_type, in_rounded);
    kernels::grouped_linear_backward(dout, in, l.w, din, {}, {}, input_type, in_rounded);
    store->defer([=] { kernels::grouped_linear_backward(dout, in, l.w, Tensor(), l.dw, l.db, input_type, in_rounded); },
                 {dout, in});
  };
  Tensor dact = Tensor::empty(rec.act.shape());
  grouped_backward(padded(dy, counts, m), rec.act, fc2, dact, rec_rounded);
  Tensor dfc1 = Tensor::empty(rec.fc1.shape());
  experts_[0]->activation_backward(rec.fc1.view({groups * m, rec.fc1.dim(2)}), dact.view({groups * m, dact.dim(2)}),
                                   dfc1.view({groups * m, dfc1.dim(2)}));
  dact = Tensor();
  Tensor dx = Tensor::empty({groups, m, h});
  grouped_backward(dfc1, padded(rows, counts, m), fc1, dx, rows_rounded);
  rec = GroupedMlpRecord();
  return unpadded(dx, counts);
}

}  // namespace tessera::model
