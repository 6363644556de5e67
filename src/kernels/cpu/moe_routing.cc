// Mixture-of-experts routing on the CPU, fp32 (Megatron-Core's router.py and moe_utils.py).
//
// Tokens are independent, so the per-token work runs one row per thread, with the row's own sums
// (over its E experts or k choices) taken serially in a fixed order. What sums over tokens (the losses,
// the counts) is formed per row in parallel and then added serially in row order, and scatters give
// each token its rows in ascending order: no result depends on the thread count. The arithmetic a GPU
// kernel must share (the sigmoid, the top-k tie order, the gradients, the jitter's multiplier) is
// kernels/math/moe_routing.h, with the softmax weights of kernels/math/softmax.h.
#include "kernels/cpu/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "core/profiler.h"
#include "kernels/math/dropout.h"
#include "kernels/math/moe_router_rows.h"
#include "kernels/math/moe_routing.h"
#include "kernels/math/softmax.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

// Checked before any parallel region: an exception must not escape one.
void check_indices(const char* kernel, const int32_t* idx, int64_t n, int64_t experts) {
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK(idx[i] >= 0 && idx[i] < experts, kernel, ": expert index ", idx[i], " at ", i,
                  " is outside [0, ", experts, ")");
}

void check_topk(const char* kernel, int64_t topk, int64_t experts) {
  TESSERA_CHECK(experts >= 1 && topk >= 1 && topk <= experts, kernel, ": top-", topk, " of ", experts, " experts");
}

void check_tokens(const char* kernel, const int32_t* token, int64_t rows, int64_t tokens) {
  for (int64_t r = 0; r < rows; ++r)
    TESSERA_CHECK(token[r] >= 0 && token[r] < tokens, kernel, ": token ", token[r], " of row ", r,
                  " is outside [0, ", tokens, ")");
}

// coeff * E / (k * G * tokens_per_group^2): the loss per unit of sum_g sum_i P_gi n_gi.
}  // namespace

double aux_scale(int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group) {
  const double tpg = static_cast<double>(tokens_per_group);
  return static_cast<double>(experts) / (static_cast<double>(topk) * static_cast<double>(groups) * tpg * tpg);
}

float aux_gradient_scale(int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group, float coeff,
                         float dloss) {
  return static_cast<float>(static_cast<double>(coeff) * dloss * aux_scale(experts, groups, topk, tokens_per_group));
}

float z_loss_gradient_scale(float coeff, int64_t total_tokens, float dloss) {
  return static_cast<float>(static_cast<double>(coeff) * dloss / static_cast<double>(total_tokens));
}

void check_z_loss(const char* kernel, int64_t tokens, int64_t experts, int64_t total_tokens) {
  TESSERA_CHECK(experts >= 1 && total_tokens >= 1 && total_tokens >= tokens, kernel, ": ", tokens,
                " local tokens of ", total_tokens, ", ", experts, " experts");
}

void check_groups(const char* kernel, int64_t tokens, int64_t experts, int64_t groups, int64_t topk) {
  check_topk(kernel, topk, experts);
  TESSERA_CHECK(groups >= 1 && tokens % groups == 0, kernel, ": ", tokens, " tokens are not ", groups, " groups");
}

void check_aux(const char* kernel, int64_t tokens, int64_t experts, int64_t groups, int64_t topk,
               int64_t tokens_per_group) {
  check_groups(kernel, tokens, experts, groups, topk);
  TESSERA_CHECK(tokens_per_group >= 1 && tokens_per_group >= tokens / groups, kernel, ": ", tokens_per_group,
                " tokens per group, fewer than the ", tokens / groups, " local ones");
}

void check_router_options(const char* kernel, const TopkRouterOptions& opt, int64_t experts, bool expert_bias) {
  check_topk(kernel, opt.topk, experts);
  TESSERA_CHECK(!expert_bias || opt.score != RouterScoreFunction::Softmax, kernel,
                ": an expert bias needs the sigmoid score function (as Megatron)");
  if (!opt.grouped()) return;  // group-limited routing's rules (the arguments refuse them first, by flag name)
  const int64_t G = opt.num_groups, g = opt.group_topk, k = opt.topk;
  TESSERA_CHECK(G >= 1 && experts % G == 0 && g >= 1 && g <= G && k % g == 0 && k / g <= experts / G, kernel,
                ": top-", k, " of ", experts, " experts in ", G, " groups, ", g, " groups kept");
}


void topk_router_forward(const float* logits, int64_t tokens, int64_t experts, const TopkRouterOptions& opt,
                         const float* expert_bias, int32_t* indices, float* probs) {
  TESSERA_PROFILE_SCOPE("topk_router_forward");
  const int64_t k = opt.topk, E = experts;
  check_router_options("topk_router_forward", opt, E, expert_bias != nullptr);
  const int64_t G = opt.grouped() ? opt.num_groups : 0, gk = opt.grouped() ? opt.group_topk : 0;
#pragma omp parallel if (parallel : parallel_worth(2 * tokens * E))
  {
    std::vector<float> scores(E), sel(E), vals(k), group_scores(G), group_vals(gk), part_vals(k);
    std::vector<int32_t> group_idx(gk), part_idx(k);
    const math::RouterRowScratch scratch{scores.data(),    sel.data(),       vals.data(),      group_scores.data(),
                                         group_vals.data(), part_vals.data(), group_idx.data(), part_idx.data()};
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t)
      math::router_forward_row(logits + t * E, E, opt, expert_bias, scratch, indices + t * k, probs + t * k);
  }
}

// Recomputes the forward's probabilities from the logits and the chosen experts, in the same order.
void topk_router_backward(const float* logits, const int32_t* indices, const float* dprobs, int64_t tokens,
                          int64_t experts, const TopkRouterOptions& opt, float* dlogits) {
  TESSERA_PROFILE_SCOPE("topk_router_backward");
  const int64_t k = opt.topk, E = experts;
  check_topk("topk_router_backward", k, E);
  check_indices("topk_router_backward", indices, tokens * k, E);
#pragma omp parallel if (parallel : parallel_worth(4 * tokens * E))
  {
    std::vector<float> full(E), gfull(E), p(k), g(k);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t)
      math::router_backward_row(logits + t * E, indices + t * k, dprobs + t * k, E, opt, full.data(), gfull.data(),
                                p.data(), g.data(), dlogits + t * E);
  }
}

void aux_loss_counts(const float* logits, int64_t tokens, int64_t experts, int64_t topk, RouterScoreFunction score,
                     int64_t groups, float* counts) {
  TESSERA_PROFILE_SCOPE("aux_loss_counts");
  check_groups("aux_loss_counts", tokens, experts, groups, topk);
  std::vector<int32_t> top(static_cast<size_t>(tokens * topk));
#pragma omp parallel if (parallel : parallel_worth(2 * tokens * experts))
  {
    std::vector<float> p(experts), vals(topk);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      math::aux_scores_row(logits + t * experts, experts, score, p.data());
      math::topk_row(p.data(), experts, topk, vals.data(), top.data() + t * topk);
    }
  }
  std::fill(counts, counts + groups * experts, 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < topk; ++j) counts[(t % groups) * experts + top[t * topk + j]] += 1.0f;
}

double aux_loss_term_sum(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                         RouterScoreFunction score) {
  TESSERA_PROFILE_SCOPE("aux_loss_forward");
  std::vector<double> per_token(static_cast<size_t>(tokens));  // sum_i p_ti n_{g(t) i}
#pragma omp parallel if (parallel : parallel_worth(2 * tokens * experts))
  {
    std::vector<float> p(experts);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      per_token[t] = math::aux_loss_token(logits + t * experts, counts + (t % groups) * experts, experts, score,
                                          p.data());
    }
  }
  double sum = 0;
  for (double r : per_token) sum += r;
  return sum;
}

double aux_loss_value(double term_sum, int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group,
                      float coeff) {
  // E * sum / (k G tpg^2) is exactly 1 under perfect balance (uniform scores), so the loss is then coeff.
  return static_cast<double>(coeff) * (term_sum * aux_scale(experts, groups, topk, tokens_per_group));
}

double aux_loss_forward(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                        int64_t topk, RouterScoreFunction score, int64_t tokens_per_group, float coeff) {
  check_aux("aux_loss_forward", tokens, experts, groups, topk, tokens_per_group);
  return aux_loss_value(aux_loss_term_sum(logits, counts, tokens, experts, groups, score), experts, groups, topk,
                        tokens_per_group, coeff);
}

void aux_loss_backward(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                       int64_t topk, RouterScoreFunction score, int64_t tokens_per_group, float coeff, float dloss,
                       float* dlogits) {
  TESSERA_PROFILE_SCOPE("aux_loss_backward");
  check_aux("aux_loss_backward", tokens, experts, groups, topk, tokens_per_group);
  // dL/dp_ti = c n_{g(t) i}: the counts are constants.
  const float c = static_cast<float>(static_cast<double>(coeff) * dloss *
                                     aux_scale(experts, groups, topk, tokens_per_group));
#pragma omp parallel if (parallel : parallel_worth(2 * tokens * experts))
  {
    std::vector<float> p(experts);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t)
      math::aux_loss_backward_row(logits + t * experts, counts + (t % groups) * experts, experts, score, c, p.data(),
                                  dlogits + t * experts);
  }
}

double z_loss_term_sum(const float* logits, int64_t tokens, int64_t experts) {
  TESSERA_PROFILE_SCOPE("z_loss_forward");
  std::vector<double> sq(static_cast<size_t>(tokens));
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * tokens * experts))
  for (int64_t t = 0; t < tokens; ++t) {
    const double l = math::router_row_lse(logits + t * experts, experts);
    sq[t] = l * l;
  }
  double sum = 0;
  for (double v : sq) sum += v;
  return sum;
}

double z_loss_value(double term_sum, float coeff, int64_t total_tokens) {
  return static_cast<double>(coeff) * term_sum / static_cast<double>(total_tokens);
}

double z_loss_forward(const float* logits, int64_t tokens, int64_t experts, float coeff, int64_t total_tokens) {
  check_z_loss("z_loss_forward", tokens, experts, total_tokens);
  return z_loss_value(z_loss_term_sum(logits, tokens, experts), coeff, total_tokens);
}

void z_loss_backward(const float* logits, int64_t tokens, int64_t experts, float coeff, int64_t total_tokens,
                     float dloss, float* dlogits) {
  TESSERA_PROFILE_SCOPE("z_loss_backward");
  check_z_loss("z_loss_backward", tokens, experts, total_tokens);
  const float c = z_loss_gradient_scale(coeff, total_tokens, dloss);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * tokens * experts))
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = logits + t * experts;
    const float lse = math::router_row_lse(x, experts);
    float* dx = dlogits + t * experts;
    for (int64_t i = 0; i < experts; ++i) dx[i] += math::z_loss_dlogit(x[i], lse, c);
  }
}

ExpertRowList expert_rows(const int32_t* indices, const float* probs, int64_t tokens, int64_t topk, int64_t experts,
                          int64_t capacity, TokenDropPolicy policy, bool pad) {
  TESSERA_PROFILE_SCOPE("expert_rows");
  check_topk("expert_rows", topk, experts);
  const int64_t entries = tokens * topk;
  check_indices("expert_rows", indices, entries, experts);
  // Each expert's routing entries (slots t * k + j) in ascending slot, hence token, order: a counting
  // sort by expert.
  std::vector<int64_t> begin(experts + 1, 0);
  for (int64_t s = 0; s < entries; ++s) ++begin[indices[s] + 1];
  for (int64_t e = 0; e < experts; ++e) begin[e + 1] += begin[e];
  std::vector<int32_t> by_expert(static_cast<size_t>(entries));
  {
    std::vector<int64_t> next(begin.begin(), begin.end() - 1);
    for (int64_t s = 0; s < entries; ++s) by_expert[next[indices[s]]++] = static_cast<int32_t>(s);
  }
  // Capacity beyond the tokens drops nothing (Megatron's capacity mask is then all ones).
  const int64_t cap = capacity < 0 ? -1 : std::min(capacity, tokens);
  // Drop order under Probs: higher prob first, a NaN last, equal probs to the lower token (stable sort).
  auto prob_key = [&](int32_t s) { return std::isnan(probs[s]) ? -INFINITY : probs[s]; };

  struct Row {
    int32_t token, slot;
  };
  std::vector<std::vector<Row>> rows(experts);
#pragma omp parallel for schedule(dynamic) if (parallel : parallel_worth(16 * entries))
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<int32_t> kept(by_expert.begin() + begin[e], by_expert.begin() + begin[e + 1]);
    if (cap >= 0 && static_cast<int64_t>(kept.size()) > cap) {
      if (policy == TokenDropPolicy::Probs) {
        std::stable_sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return prob_key(a) > prob_key(b); });
        kept.resize(cap);
        std::sort(kept.begin(), kept.end());
      } else {
        kept.resize(cap);  // already by token
      }
    }
    std::vector<Row>& out = rows[e];
    for (int32_t s : kept) out.push_back({static_cast<int32_t>(s / topk), s});
    if (pad && cap >= 0 && static_cast<int64_t>(out.size()) < cap) {
      // Every routed entry was kept; fill with the lowest tokens not routed to e.
      const int64_t need = cap - static_cast<int64_t>(out.size());
      size_t next_routed = 0;
      std::vector<Row> fill;
      for (int32_t t = 0; t < tokens && static_cast<int64_t>(fill.size()) < need; ++t) {
        while (next_routed < kept.size() && kept[next_routed] / topk < t) ++next_routed;
        if (next_routed < kept.size() && kept[next_routed] / topk == t) continue;
        fill.push_back({t, -1});
      }
      out.insert(out.end(), fill.begin(), fill.end());
      std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) {
        return a.token != b.token ? a.token < b.token : a.slot < b.slot;
      });
    }
  }

  ExpertRowList list;
  list.counts.resize(experts);
  for (int64_t e = 0; e < experts; ++e) list.routed.push_back(begin[e + 1] - begin[e]);
  for (int64_t e = 0; e < experts; ++e) {
    list.counts[e] = static_cast<int64_t>(rows[e].size());
    for (const Row& r : rows[e]) {
      list.token.push_back(r.token);
      list.slot.push_back(r.slot);
      list.prob.push_back(r.slot < 0 ? 0.0f : probs[r.slot]);
    }
  }
  return list;
}

void gather_token_rows(const float* x, const int32_t* token, float* out, int64_t rows, int64_t hidden, int64_t tokens) {
  TESSERA_PROFILE_SCOPE("gather_token_rows");
  check_tokens("gather_token_rows", token, rows, tokens);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * hidden))
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x + static_cast<int64_t>(token[r]) * hidden, hidden, out + r * hidden);
}

void scatter_add_token_rows(const float* src, const int32_t* token, const float* weight, float* y, int64_t rows,
                            int64_t hidden, int64_t tokens) {
  TESSERA_PROFILE_SCOPE("scatter_add_token_rows");
  check_tokens("scatter_add_token_rows", token, rows, tokens);
  // The rows of each token in ascending order (a counting sort), so that tokens, not rows, split over
  // the threads: no two threads write one token, and its sum is in a fixed order.
  std::vector<int64_t> begin(tokens + 1, 0);
  for (int64_t r = 0; r < rows; ++r) ++begin[token[r] + 1];
  for (int64_t t = 0; t < tokens; ++t) begin[t + 1] += begin[t];
  std::vector<int64_t> order(static_cast<size_t>(rows));
  {
    std::vector<int64_t> next(begin.begin(), begin.end() - 1);
    for (int64_t r = 0; r < rows; ++r) order[next[token[r]]++] = r;
  }
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * hidden))
  for (int64_t t = 0; t < tokens; ++t) {
    float* yt = y + t * hidden;
    for (int64_t i = begin[t]; i < begin[t + 1]; ++i) {
      const int64_t r = order[i];
      const float w = weight ? weight[r] : 1.0f;
      const float* s = src + r * hidden;
#pragma omp simd
      for (int64_t c = 0; c < hidden; ++c) yt[c] += w * s[c];
    }
  }
}

void token_row_dots(const float* dy, const int32_t* token, const float* src, float* dweight, int64_t rows,
                    int64_t hidden, int64_t tokens) {
  TESSERA_PROFILE_SCOPE("token_row_dots");
  check_tokens("token_row_dots", token, rows, tokens);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * hidden))
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = dy + static_cast<int64_t>(token[r]) * hidden;
    const float* b = src + r * hidden;
    double s = 0;  // in column order, not a SIMD reduction's: the GPU's thread sums in this order too
    for (int64_t c = 0; c < hidden; ++c) s += static_cast<double>(a[c]) * b[c];
    dweight[r] = static_cast<float>(s);
  }
}

void check_jitter(float eps, const DropoutRegion& r) {
  TESSERA_CHECK(eps >= 0.0f && eps < 1.0f, "jitter_multiply: eps must be in [0, 1), got ", eps);
  TESSERA_CHECK(r.seq >= 0 && r.batch >= 0 && r.hidden >= 0 && r.seq_offset >= 0 && r.sample_offset >= 0,
                "jitter_multiply: negative region size or offset");
  TESSERA_CHECK(r.seq_offset + r.seq <= r.seq_total, "jitter_multiply: region rows [", r.seq_offset, ", ",
                r.seq_offset + r.seq, ") exceed seq_total ", r.seq_total);
}

void jitter_multiply(const float* x, float* y, float eps, uint64_t seed, uint64_t stream, const DropoutRegion& r) {
  TESSERA_PROFILE_SCOPE("jitter_multiply");
  check_jitter(eps, r);
  const int64_t rows = r.seq * r.batch;
  if (eps == 0.0f) {  // every multiplier is 1: nothing to draw
    if (x != y) std::copy_n(x, rows * r.hidden, y);
    return;
  }
  const PhiloxStream rng(seed, stream);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * r.hidden))
  for (int64_t row = 0; row < rows; ++row) {
    // Along h the global index is consecutive, so one Philox block serves 4 neighbours.
    const uint64_t g0 = math::dropout_element(r, row / r.batch, row % r.batch, 0);
    const float* xr = x + row * r.hidden;
    float* yr = y + row * r.hidden;
    Philox4x32::Block block{};
    uint64_t have = ~uint64_t{0};
    for (int64_t h = 0; h < r.hidden; ++h) {
      const uint64_t g = g0 + static_cast<uint64_t>(h);
      if ((g >> 2) != have) {
        have = g >> 2;
        block = rng.block(have);
      }
      yr[h] = xr[h] * math::jitter_factor(block.v[g & 3], eps);
    }
  }
}

}  // namespace tessera::kernels::cpu
