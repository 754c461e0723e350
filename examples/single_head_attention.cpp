// Single-head self-attention, step by step: batch 2, sequence 4, d_model 8.
// Builds the graph (nothing runs yet), prints the shapes, runs it, checks that every
// row of attention weights sums to 1, applies a causal and a padding mask, and prints
// the gradient graph of a loss with respect to W_Q.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "dsl/nn.h"
#include "ops/runtime/executor.h"

using namespace gg;
using namespace gg::dsl;

// Checks every row of weights (B, T, T) sums to 1 and masked entries are 0.
static bool rows_sum_to_one(const View& w) {
  const Shape& s = *w.shape;
  const std::int64_t rows = s[0] * s[1], T = s[2];
  for (std::int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (std::int64_t k = 0; k < T; ++k) total += w.f()[r * T + k];
    if (std::abs(total - 1.0) > 1e-5) return false;
  }
  return true;
}

int main() {
  const std::int64_t B = 2, T = 4, D = 8;
  Graph g;
  Expr x = input(g, "x", {B, T, D});                                   // x: (B, T, D)
  Expr keep = input(g, "keep", {B, T});                                // keep: (B, T), 1 = real token
  auto plain = single_head_attention(x, D, "attn");                    // no mask
  auto causal = single_head_attention(x, D, "attn", {.mask = causal_mask(g, T)});
  auto padded = single_head_attention(x, D, "attn", {.mask = padding_mask(keep)});
  fmt::print("output  {}\nweights {}\n", to_string(plain.out.shape()), to_string(plain.weights.shape()));

  ParamStore params;
  params.init_missing(g, 42);
  Executor ex(g, {plain.out.id, plain.weights.id, causal.weights.id, padded.weights.id}, params);
  std::vector<float> xs(std::size_t(B * T * D));
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37f * float(i));
  ex.set_input("x", xs);
  ex.set_input("keep", std::vector<float>{1, 1, 1, 1, 1, 1, 1, 0});  // batch 1: last token is padding
  ex.run();

  bool ok = rows_sum_to_one(ex.value(plain.weights.id)) && rows_sum_to_one(ex.value(causal.weights.id)) &&
            rows_sum_to_one(ex.value(padded.weights.id));
  const float* cw = ex.value(causal.weights.id).f();
  const float* pw = ex.value(padded.weights.id).f();
  for (std::int64_t q = 0; q < T; ++q)
    for (std::int64_t k = q + 1; k < T; ++k) ok = ok && cw[q * T + k] == 0.f;  // no peeking ahead
  for (std::int64_t q = 0; q < T; ++q) ok = ok && pw[(T + q) * T + (T - 1)] == 0.f;  // batch 1 ignores its pad
  fmt::print("attention rows sum to 1, causal and padding masks hold: {}\n", ok ? "yes" : "NO");
  fmt::print("causal weights, batch 0:\n");
  for (std::int64_t q = 0; q < T; ++q)
    fmt::print("  [{:.4f}]\n", fmt::join(cw + q * T, cw + q * T + T, ", "));

  // A loss and its gradient with respect to W_Q, as more graph.
  Expr loss = mean_all(causal.out * causal.out);
  Expr w_q{&g, g.find("attn.W_Q", OpKind::param)};
  Expr d_wq = grad(loss, {w_q})[0];
  fmt::print("\ngradient graph of loss w.r.t. W_Q ({} nodes):\n{}", ancestors(g, {d_wq.id}).size(),
             to_text(g, {d_wq.id}));
  return ok ? 0 : 1;
}
