// Tests for autodiff/hvp.cpp: Hessian-vector products against an exact Hessian and
// against central differences of the gradient evaluated in double (ops/ir/eval_f64.h).
#include <doctest/doctest.h>

#include <cmath>

#include "autodiff/grad.h"
#include "autodiff/hvp.h"
#include "ops/ir/build.h"
#include "ops/ir/eval_f64.h"
#include "ops/runtime/executor.h"
#include "tests/sample_graphs.h"

using namespace gg;
using namespace gg::sample;

TEST_CASE("hvp of a quadratic: 0.5 |A p|^2 has Hessian A^T A") {
  Graph g;
  Case c;
  const std::vector<float> av = {1, 2, 0, -1, 3, 1};  // A: (2, 3)
  NodeId p = param_with(g, c, "p", {3, 1}, {0.5f, -1.f, 2.f});
  NodeId ap = op::matmul(g, op::constant(g, av, {2, 3}), p);  // (2, 1)
  NodeId loss = op::mul(g, op::scalar(g, 0.5f), op::sum(g, op::reshape(g, op::mul(g, ap, ap), {-1}), 0));
  NodeId v = op::input(g, "v", {3, 1});
  std::vector<NodeId> hv = hvp(g, loss, {p}, {v});
  REQUIRE(hv.size() == 1);
  CHECK(g.node(hv[0]).name == "hvp(p)");
  CHECK(g.node(hv[0]).shape == Shape{3, 1});
  Executor ex(g, hv, c.params);
  const std::vector<float> vv = {1.f, -2.f, 0.5f};
  ex.set_input("v", vv);
  ex.run();
  Tensor got = ex.get(hv[0]);
  for (int i = 0; i < 3; ++i) {  // (A^T A v)_i
    double want = 0;
    for (int r = 0; r < 2; ++r) {
      double av_r = 0;
      for (int k = 0; k < 3; ++k) av_r += av[std::size_t(r * 3 + k)] * vv[std::size_t(k)];
      want += av[std::size_t(r * 3 + i)] * av_r;
    }
    CHECK(got.f()[i] == doctest::Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("hvp agrees with central differences of the f64 gradient on a small tanh network") {
  Graph g;
  Case c;
  NodeId w1 = param_rand(g, c, "w1", {3, 4});
  NodeId w2 = param_rand(g, c, "w2", {4, 2});
  NodeId x = op::input(g, "x", {5, 3});
  c.inputs["x"] = Tensor::f32({5, 3}, vals(15, -1, 1, 4));
  NodeId loss = weighted_sum(g, op::exp(g, op::matmul(g, op::tanh(g, op::matmul(g, x, w1)), w2)));
  NodeId v1 = op::constant(g, vals(12, -1, 1, 8), {3, 4});
  NodeId v2 = op::constant(g, vals(8, -1, 1, 9), {4, 2});
  std::vector<NodeId> hv = hvp(g, loss, {w1, w2}, {v1, v2});
  std::vector<NodeId> gs = grad(g, loss, {w1, w2});
  Executor ex(g, hv, c.params);
  ex.set_input("x", c.inputs["x"]);
  ex.run();

  const double eps = 1e-5;
  F64Leaves plus = f64_leaves(c.params, c.inputs), minus = plus;
  const std::vector<double> d1 = eval_f64(g, {v1}, {})[0].v, d2 = eval_f64(g, {v2}, {})[0].v;
  for (std::size_t i = 0; i < d1.size(); ++i) {
    plus["w1"].v[i] += eps * d1[i];
    minus["w1"].v[i] -= eps * d1[i];
  }
  for (std::size_t i = 0; i < d2.size(); ++i) {
    plus["w2"].v[i] += eps * d2[i];
    minus["w2"].v[i] -= eps * d2[i];
  }
  std::vector<F64Value> gp = eval_f64(g, gs, plus), gm = eval_f64(g, gs, minus);
  for (std::size_t k = 0; k < 2; ++k) {
    Tensor got = ex.get(hv[k]);
    double worst = 0, scale = 0;
    for (std::int64_t i = 0; i < got.numel(); ++i) {
      const double fd = (gp[k].v[std::size_t(i)] - gm[k].v[std::size_t(i)]) / (2 * eps);
      worst = std::max(worst, std::abs(fd - double(got.f()[i])));
      scale = std::max(scale, std::abs(fd));
    }
    INFO("param " << k << ": worst |hvp - fd| " << worst << " of scale " << scale);
    CHECK(scale > 0.1);
    CHECK(worst < 1e-4 * scale + 1e-5);
  }
}

TEST_CASE("hvp refuses vectors that do not match the parameters") {
  Graph g;
  NodeId p = op::param(g, "p", {2}, Init{});
  NodeId loss = op::sum(g, op::mul(g, p, p), 0);
  NodeId v3 = op::input(g, "v", {3});
  CHECK_THROWS_WITH_AS(hvp(g, loss, {p}, {}), doctest::Contains("1 parameters but 0 vectors"), GraphError);
  CHECK_THROWS_WITH_AS(hvp(g, loss, {p}, {v3}), doctest::Contains("v[0] is f32(3,) but parameter 'p' is f32(2,)"),
                       GraphError);
}
