// The gradient of bf16 products (ops/ir/graph.h, Bf16Products): its products are bf16 too,
// whether or not the gradient is built inside the scope, and it agrees with the f32 gradient
// within the rounding of the operands.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "autodiff/grad.h"
#include "ops/ir/build.h"
#include "ops/runtime/executor.h"

using namespace gg;

TEST_CASE("bf16 products: the gradient's products are bf16, and it agrees with f32 within the operands' rounding") {
  auto build = [](Graph& g, bool bf16) {
    Bf16Products scope(g, bf16);
    const NodeId x = op::input(g, "x", {6, 32});
    const NodeId w = op::param(g, "w", {32, 24}, Init{Init::normal, 0.f, 0.2f});
    const NodeId v = op::param(g, "v", {24, 8}, Init{Init::normal, 0.f, 0.2f});
    const NodeId h = op::tanh(g, op::matmul(g, x, w));
    const NodeId y = op::matmul(g, h, v);
    return std::pair{op::sum(g, op::sum(g, op::mul(g, y, y), 1), 0), std::vector<NodeId>{w, v}};
  };
  Graph gf, gb;
  auto [lf, pf] = build(gf, false);
  auto [lb, pb] = build(gb, true);
  // The gradient built outside the scope: matmul's rule makes its products bf16 all the same.
  const std::vector<NodeId> df = grad(gf, lf, pf), db = grad(gb, lb, pb);
  std::int64_t products = 0, bf16 = 0;
  for (NodeId id = 0; id < gb.size(); ++id)
    if (gb.node(id).op == OpKind::matmul) ++products, bf16 += gb.node(id).attrs.bf16;
  CHECK(products >= 5);  // two forward, at least three in the gradient
  CHECK(bf16 == products);

  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> xs(6 * 32);
  for (float& v : xs) v = d(rng);
  ParamStore sf, sb;
  sf.init_missing(gf, 3);
  sb.init_missing(gb, 3);
  Executor ef(gf, df, sf), eb(gb, db, sb);
  ef.set_input("x", Tensor::f32({6, 32}, xs));
  eb.set_input("x", Tensor::f32({6, 32}, xs));
  ef.run();
  eb.run();
  for (std::size_t k = 0; k < df.size(); ++k) {
    double num = 0, den = 0;
    for (std::int64_t i = 0; i < ef.value(df[k]).numel(); ++i) {
      const double a = ef.value(df[k]).f()[i], b = eb.value(db[k]).f()[i];
      num += (a - b) * (a - b);
      den += a * a;
    }
    // Each operand off by at most 2^-8 relative, through three products deep: a few percent
    // at the very most; the norms agree far better.
    INFO("parameter " << k);
    CHECK(std::sqrt(num / den) < 0.03);
    CHECK(std::sqrt(num / den) > 0);  // and the rounding is really there
  }
}
