#if __has_include(<cudnn_graph.h>)
#include "kernels/cuda/cudnn_sdpa_graph.h"

#include <map>
#include <string>

#include "core/check.h"

namespace tessera::kernels::cuda::cudnn {
namespace {

using Dims = std::vector<int64_t>;

// Builds one graph's tensors and nodes, each finalized as it is made (so an error names the node).
class Builder {
 public:
  Builder(const SdpaDims& d, const char* graph) : d_(d), graph_(graph) {}

  // A tensor the run binds (`uid`), or an intermediate cuDNN keeps to itself (virtual, a fresh uid).
  const Descriptor& tensor(const char* name, int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides,
                           bool is_virtual = false, bool by_value = false) {
    Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, str_cat(graph_, ": tensor ", name));
    t.set_data_type(TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), type)
        .set_int64s(TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS), dims)
        .set_int64s(TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_STRIDES), strides)
        .set_int64(TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), uid)
        .set_int64(TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), 16)
        .set_bool(TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL), is_virtual);
    if (by_value) t.set_bool(TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_IS_BY_VALUE), true);
    t.finalize();
    g_.tensors.push_back(std::move(t));
    return g_.tensors.back();
  }
  const Descriptor& virtual_tensor(const char* name, cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return tensor(name, next_virtual_++, type, dims, strides, true);
  }
  // A [1, 1, 1, 1] fp32 constant passed by value (the variant pack points at a host float); one descriptor
  // per uid, however many nodes read it.
  const Descriptor& scalar(const char* name, int64_t uid) {
    auto it = scalars_.find(uid);
    if (it != scalars_.end()) return *it->second;
    const Descriptor& t = tensor(name, uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
    scalars_[uid] = &t;
    return t;
  }

  // y = mode(x[, b][, t]); `axis` for GEN_INDEX, `precision` the node's math type.
  void pointwise(const char* name, cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b,
                 const Descriptor& y, const Descriptor* t = nullptr, int64_t axis = -1,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT) {
    Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, str_cat(graph_, ": pointwise mode of ", name));
    pw.set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set_data_type(TESSERA_CUDNN_ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC), precision);
    if (axis >= 0) pw.set_int64(TESSERA_CUDNN_ATTR(CUDNN_ATTR_POINTWISE_AXIS), axis);
    pw.finalize();
    Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, str_cat(graph_, ": node ", name));
    op.set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), pw)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), x)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC), y);
    if (b) op.set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC), *b);
    if (t) op.set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), *t);
    op.finalize();
    g_.tensors.push_back(std::move(pw));  // the node refers to it
    g_.operations.push_back(std::move(op));
  }

  // c = a b over the batch of (batch, heads) matrices, fp32 accumulation.
  void matmul(const char* name, const Descriptor& a, const Descriptor& b, const Descriptor& c) {
    Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR, str_cat(graph_, ": matmul type of ", name));
    mm.set_data_type(TESSERA_CUDNN_ATTR(CUDNN_ATTR_MATMUL_COMP_TYPE), CUDNN_DATA_FLOAT).finalize();
    Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, str_cat(graph_, ": node ", name));
    op.set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_ADESC), a)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_BDESC), b)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_CDESC), c)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_DESC), mm)
        .finalize();
    g_.tensors.push_back(std::move(mm));
    g_.operations.push_back(std::move(op));
  }

  // y = op over the dimensions where y has extent 1 and x does not.
  void reduction(const char* name, cudnnReduceTensorOp_t reduce, const Descriptor& x, const Descriptor& y) {
    Descriptor rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, str_cat(graph_, ": reduction type of ", name));
    rd.set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
        .set_data_type(TESSERA_CUDNN_ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_DATA_FLOAT)
        .finalize();
    Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, str_cat(graph_, ": node ", name));
    op.set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), x)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC), y)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC), rd)
        .finalize();
    g_.tensors.push_back(std::move(rd));
    g_.operations.push_back(std::move(op));
  }

  // y = x viewed with y's dimensions and strides (a transpose, no copy).
  void reshape(const char* name, const Descriptor& x, const Descriptor& y) {
    Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, str_cat(graph_, ": node ", name));
    op.set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_XDESC), x)
        .set_descriptor(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_YDESC), y)
        .finalize();
    g_.operations.push_back(std::move(op));
  }

  // Tessera's [seq, batch, heads, head_dim] activations as cuDNN's [batch, heads, seq, head_dim].
  Dims q_dims() const { return {d_.batch, d_.heads, d_.seq, d_.head_dim}; }
  Dims q_strides() const { return {d_.heads * d_.head_dim, d_.head_dim, d_.batch * d_.heads * d_.head_dim, 1}; }
  Dims kv_dims() const { return {d_.batch, d_.kv_heads, d_.kv_seq, d_.head_dim}; }
  Dims kv_strides() const {
    return {d_.kv_heads * d_.head_dim, d_.head_dim, d_.batch * d_.kv_heads * d_.head_dim, 1};
  }
  // K and V transposed ([batch, kv_heads, head_dim, kv_seq]): the same memory, the last two strides swapped.
  Dims kv_t_dims() const { return {d_.batch, d_.kv_heads, d_.head_dim, d_.kv_seq}; }
  Dims kv_t_strides() const {
    return {d_.kv_heads * d_.head_dim, d_.head_dim, 1, d_.batch * d_.kv_heads * d_.head_dim};
  }
  // The scores [batch, heads, seq, kv_seq] (virtual: never in memory), and transposed.
  Dims s_dims() const { return {d_.batch, d_.heads, d_.seq, d_.kv_seq}; }
  Dims s_strides() const { return {d_.heads * d_.seq * d_.kv_seq, d_.seq * d_.kv_seq, d_.kv_seq, 1}; }
  Dims s_t_dims() const { return {d_.batch, d_.heads, d_.kv_seq, d_.seq}; }
  Dims s_t_strides() const { return {d_.heads * d_.seq * d_.kv_seq, d_.seq * d_.kv_seq, 1, d_.kv_seq}; }
  // A value per query row [batch, heads, seq, 1]: Tessera's lse layout [batch, heads, seq].
  Dims row_dims() const { return {d_.batch, d_.heads, d_.seq, 1}; }
  Dims row_strides() const { return {d_.heads * d_.seq, d_.seq, 1, 1}; }

  // The scores of Q and K^T, scaled, masked where causal: the forward's and the backward's first nodes.
  const Descriptor& masked_scores(const Descriptor& q, const Descriptor& k_t) {
    const Descriptor& s = virtual_tensor("S", CUDNN_DATA_FLOAT, s_dims(), s_strides());
    matmul("S = Q K^T", q, k_t, s);
    const Descriptor& scale = scalar("scale", kScale);
    const Descriptor& scaled = virtual_tensor("S * scale", CUDNN_DATA_FLOAT, s_dims(), s_strides());
    pointwise("S * scale", CUDNN_POINTWISE_MUL, s, &scale, scaled);
    if (!d_.causal) return scaled;
    const Descriptor& row = virtual_tensor("row index", CUDNN_DATA_INT32, s_dims(), s_strides());
    pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, row, nullptr, 2);
    const Descriptor& col = virtual_tensor("column index", CUDNN_DATA_INT32, s_dims(), s_strides());
    pointwise("column index", CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, col, nullptr, 3);
    const Descriptor& keep = virtual_tensor("row >= column", CUDNN_DATA_BOOLEAN, s_dims(), s_strides());
    pointwise("row >= column", CUDNN_POINTWISE_CMP_GE, row, &col, keep, nullptr, -1, CUDNN_DATA_BOOLEAN);
    const Descriptor& minus_inf = scalar("-inf", kNegativeInfinity);
    const Descriptor& masked = virtual_tensor("causal S", CUDNN_DATA_FLOAT, s_dims(), s_strides());
    pointwise("causal mask", CUDNN_POINTWISE_BINARY_SELECT, scaled, &minus_inf, masked, &keep);
    return masked;
  }

  SdpaGraph take() { return std::move(g_); }

  const SdpaDims& d_;

 private:
  const char* graph_;
  SdpaGraph g_;
  std::map<int64_t, const Descriptor*> scalars_;
  int64_t next_virtual_ = 1000;
};

void check_dims(const SdpaDims& d) {
  TESSERA_CHECK(d.batch > 0 && d.heads > 0 && d.kv_heads > 0 && d.heads % d.kv_heads == 0 && d.seq > 0 &&
                    d.kv_seq > 0 && d.head_dim > 0,
                "cuDNN SDPA: batch ", d.batch, ", heads ", d.heads, ", kv_heads ", d.kv_heads, ", seq ", d.seq,
                ", kv_seq ", d.kv_seq, ", head_dim ", d.head_dim,
                ": all must be positive, heads a multiple of kv_heads");
}

}  // namespace

SdpaGraph build_sdpa_forward(const SdpaDims& dims) {
  check_dims(dims);
  Builder g(dims, "SDPA forward");
  const Descriptor& q = g.tensor("Q", kQ, CUDNN_DATA_BFLOAT16, g.q_dims(), g.q_strides());
  const Descriptor& k_t = g.tensor("K^T", kK, CUDNN_DATA_BFLOAT16, g.kv_t_dims(), g.kv_t_strides());
  const Descriptor& v = g.tensor("V", kV, CUDNN_DATA_BFLOAT16, g.kv_dims(), g.kv_strides());
  const Descriptor& s = g.masked_scores(q, k_t);
  // The softmax, keeping its log-sum-exp.
  const Descriptor& m = g.virtual_tensor("row max", CUDNN_DATA_FLOAT, g.row_dims(), g.row_strides());
  g.reduction("row max", CUDNN_REDUCE_TENSOR_MAX, s, m);
  const Descriptor& centred = g.virtual_tensor("S - max", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.pointwise("S - max", CUDNN_POINTWISE_SUB, s, &m, centred);
  const Descriptor& e = g.virtual_tensor("exp(S - max)", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.pointwise("exp(S - max)", CUDNN_POINTWISE_EXP, centred, nullptr, e);
  const Descriptor& l = g.virtual_tensor("row sum", CUDNN_DATA_FLOAT, g.row_dims(), g.row_strides());
  g.reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, e, l);
  const Descriptor& log_l = g.virtual_tensor("log(row sum)", CUDNN_DATA_FLOAT, g.row_dims(), g.row_strides());
  g.pointwise("log(row sum)", CUDNN_POINTWISE_LOG, l, nullptr, log_l);
  const Descriptor& stats = g.tensor("Stats", kStats, CUDNN_DATA_FLOAT, g.row_dims(), g.row_strides());
  g.pointwise("Stats = max + log(sum)", CUDNN_POINTWISE_ADD, m, &log_l, stats);
  // P in bf16: the second product's A operand is in the inputs' type.
  const Descriptor& p = g.virtual_tensor("P", CUDNN_DATA_BFLOAT16, g.s_dims(), g.s_strides());
  g.pointwise("P = exp / sum", CUDNN_POINTWISE_DIV, e, &l, p);
  const Descriptor& o = g.tensor("O", kO, CUDNN_DATA_BFLOAT16, g.q_dims(), g.q_strides());
  g.matmul("O = P V", p, v, o);
  return g.take();
}

SdpaGraph build_sdpa_backward(const SdpaDims& dims) {
  check_dims(dims);
  Builder g(dims, "SDPA backward");
  const bool grouped = dims.kv_heads != dims.heads;
  const Descriptor& q = g.tensor("Q", kQ, CUDNN_DATA_BFLOAT16, g.q_dims(), g.q_strides());
  const Descriptor& k_t = g.tensor("K^T", kK, CUDNN_DATA_BFLOAT16, g.kv_t_dims(), g.kv_t_strides());
  const Descriptor& v_t = g.tensor("V^T", kV, CUDNN_DATA_BFLOAT16, g.kv_t_dims(), g.kv_t_strides());
  const Descriptor& o = g.tensor("O", kO, CUDNN_DATA_BFLOAT16, g.q_dims(), g.q_strides());
  const Descriptor& d_o = g.tensor("dO", kDO, CUDNN_DATA_BFLOAT16, g.q_dims(), g.q_strides());
  const Descriptor& stats = g.tensor("Stats", kStats, CUDNN_DATA_FLOAT, g.row_dims(), g.row_strides());
  const Descriptor& d_q = g.tensor("dQ", kDQ, CUDNN_DATA_BFLOAT16, g.q_dims(), g.q_strides());
  const Descriptor& d_k = g.tensor("dK", kDK, CUDNN_DATA_BFLOAT16, g.kv_dims(), g.kv_strides());
  const Descriptor& d_v = g.tensor("dV", kDV, CUDNN_DATA_BFLOAT16, g.kv_dims(), g.kv_strides());
  const Dims dense_q_strides{dims.heads * dims.seq * dims.head_dim, dims.seq * dims.head_dim, dims.head_dim, 1};

  // D_i = sum_d dO * O, kept in a workspace tensor of ours.
  const Descriptor& d_o_o = g.virtual_tensor("dO * O", CUDNN_DATA_FLOAT, g.q_dims(), dense_q_strides);
  g.pointwise("dO * O", CUDNN_POINTWISE_MUL, d_o, &o, d_o_o);
  const Descriptor& row_dot = g.virtual_tensor("sum(dO * O)", CUDNN_DATA_FLOAT, g.row_dims(), g.row_strides());
  g.reduction("sum(dO * O)", CUDNN_REDUCE_TENSOR_ADD, d_o_o, row_dot);
  const Descriptor& one = g.scalar("1", kOne);
  const Descriptor& softmax_sum = g.tensor("D", kSoftmaxSum, CUDNN_DATA_FLOAT, g.row_dims(), g.row_strides());
  g.pointwise("D", CUDNN_POINTWISE_MUL, row_dot, &one, softmax_sum);

  // P recomputed from the forward's log-sum-exp.
  const Descriptor& s = g.masked_scores(q, k_t);
  const Descriptor& centred = g.virtual_tensor("S - Stats", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.pointwise("S - Stats", CUDNN_POINTWISE_SUB, s, &stats, centred);
  const Descriptor& p = g.virtual_tensor("P", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.pointwise("P = exp(S - Stats)", CUDNN_POINTWISE_EXP, centred, nullptr, p);

  // dV = P^T dO (per query head, then summed over each group under GQA).
  const Descriptor& p_t = g.virtual_tensor("P^T", CUDNN_DATA_BFLOAT16, g.s_t_dims(), g.s_t_strides());
  g.reshape("P^T", p, p_t);
  const Dims full_kv_dims{dims.batch, dims.heads, dims.kv_seq, dims.head_dim};
  const Dims full_kv_strides{dims.heads * dims.kv_seq * dims.head_dim, dims.kv_seq * dims.head_dim, dims.head_dim, 1};
  if (!grouped) {
    g.matmul("dV = P^T dO", p_t, d_o, d_v);
  } else {
    const Descriptor& full = g.virtual_tensor("dV per query head", CUDNN_DATA_BFLOAT16, full_kv_dims, full_kv_strides);
    g.matmul("dV per query head = P^T dO", p_t, d_o, full);
    g.reduction("dV = sum over the group", CUDNN_REDUCE_TENSOR_ADD, full, d_v);
  }

  // dS = P (dO V^T - D) * scale.
  const Descriptor& d_p = g.virtual_tensor("dP", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.matmul("dP = dO V^T", d_o, v_t, d_p);
  const Descriptor& d_p_centred = g.virtual_tensor("dP - D", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.pointwise("dP - D", CUDNN_POINTWISE_SUB, d_p, &softmax_sum, d_p_centred);
  const Descriptor& d_s_unscaled = g.virtual_tensor("P (dP - D)", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.pointwise("P (dP - D)", CUDNN_POINTWISE_MUL, d_p_centred, &p, d_s_unscaled);
  const Descriptor& scale = g.scalar("scale", kScale);  // the one masked_scores made
  const Descriptor& d_s = g.virtual_tensor("dS", CUDNN_DATA_FLOAT, g.s_dims(), g.s_strides());
  g.pointwise("dS", CUDNN_POINTWISE_MUL, d_s_unscaled, &scale, d_s);

  // dK = dS^T Q.
  const Descriptor& d_s_t = g.virtual_tensor("dS^T", CUDNN_DATA_BFLOAT16, g.s_t_dims(), g.s_t_strides());
  g.reshape("dS^T", d_s, d_s_t);
  if (!grouped) {
    g.matmul("dK = dS^T Q", d_s_t, q, d_k);
  } else {
    const Descriptor& full = g.virtual_tensor("dK per query head", CUDNN_DATA_BFLOAT16, full_kv_dims, full_kv_strides);
    g.matmul("dK per query head = dS^T Q", d_s_t, q, full);
    g.reduction("dK = sum over the group", CUDNN_REDUCE_TENSOR_ADD, full, d_k);
  }

  // dQ = dS K, accumulated in fp32 (a workspace tensor of ours), then cast.
  const Descriptor& k = g.virtual_tensor("K", CUDNN_DATA_BFLOAT16, g.kv_dims(), g.kv_strides());
  g.reshape("K from K^T", k_t, k);
  const Descriptor& accumulator =
      g.tensor("dQ accumulator", kDQAccumulator, CUDNN_DATA_FLOAT, g.q_dims(), dense_q_strides);
  g.matmul("dQ = dS K", d_s, k, accumulator);
  g.pointwise("dQ (bf16)", CUDNN_POINTWISE_IDENTITY, accumulator, nullptr, d_q);
  return g.take();
}

Descriptor operation_graph(const SdpaGraph& graph, const std::string& name, cudnnHandle_t handle) {
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor& op : graph.operations) ops.push_back(op.get());
  Descriptor g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, name + ": operation graph");
  g.set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops.size()), ops.data());
  if (handle != nullptr) g.set(TESSERA_CUDNN_ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), CUDNN_TYPE_HANDLE, 1, &handle);
  g.finalize();
  return g;
}

}  // namespace tessera::kernels::cuda::cudnn
#endif  // __has_include(<cudnn_graph.h>)
