// Tests for autodiff/gradcheck.cpp and, through it, every primitive's gradient rule:
// a table keyed by op kind holds one small sample graph per primitive (design habit 8).
// A primitive of ops/ir/op_list.def without an entry fails the coverage test by name.
// Losses are sum(out * fixed random weights), so no gradient is trivially uniform.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "autodiff/gradcheck.h"
#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/ir/op_rule.h"
#include "tests/sample_graphs.h"

using namespace gg;
using namespace gg::sample;

TEST_CASE("gradcheck table: every primitive of op_list.def has an entry") {
  const auto table = gradcheck_table();
  int missing = 0;
  for (int k = 0; k < op_count; ++k) {
    const OpKind kind = OpKind(k);
    if (!table.count(kind)) {
      ++missing;
      FAIL_CHECK("no gradcheck entry for primitive '" << op_name(kind) << "': add one to gradcheck_table()");
    }
  }
  CHECK(missing == 0);
  CHECK(int(table.size()) == op_count);
}

TEST_CASE("gradcheck table: every primitive's gradient rule agrees with central differences") {
  const auto table = gradcheck_table();
  for (int k = 0; k < op_count; ++k) {
    const OpKind kind = OpKind(k);
    auto it = table.find(kind);
    if (it == table.end()) continue;  // reported by the coverage test
    CAPTURE(op_name(kind));
    Graph g;
    Case c;
    it->second(g, c);
    INFO(c.note);
    REQUIRE(c.loss >= 0);
    REQUIRE(g.node(c.loss).shape.empty());
    CHECK_MESSAGE(uses_op(g, c.loss, kind), "the entry for '" << op_name(kind) << "' does not use it");
    const OpRule& rule = op_rule(kind);
    if (c.kind == Case::leaf) {
      CHECK(op_arity(kind) == 0);
      CHECK(!rule.grad);
    }
    if (c.kind == Case::refused) {
      CHECK(bool(rule.grad));  // a rule, so that no gradient passes through silently as if constant
      CHECK_THROWS_AS(grad(g, c.loss, c.wrt), GraphError);
      continue;
    }
    if (c.kind == Case::no_grad) {
      CHECK(!rule.grad);  // no gradient flows through it
      std::vector<NodeId> gs = grad(g, c.loss, c.wrt);
      Executor ex(g, gs, c.params, 3);
      for (auto& [name, t] : c.inputs) ex.set_input(name, t);
      ex.run();
      for (std::size_t i = 0; i < gs.size(); ++i) {
        Tensor t = ex.get(gs[i]);
        CHECK(t.shape() == g.node(c.wrt[i]).shape);
        for (float v : t.fspan()) CHECK(v == 0.f);
      }
      if (kind == OpKind::random) continue;  // fresh noise each run: no central differences
    }
    GradcheckResult res = gradcheck(g, c.loss, c.wrt, c.params, c.inputs);
    INFO("worst: " << res.worst << " (|err| " << res.worst_abs << ")");
    CHECK(res.ok);
    CHECK(res.checked > 0);
  }
}

TEST_CASE("gradcheck restores the parameters and inputs it perturbs") {
  Graph g;
  Case c;
  NodeId p = param_rand(g, c, "p", {2, 3});
  NodeId x = op::input(g, "x", {2, 3});
  c.inputs["x"] = Tensor::f32({2, 3}, vals(6, -1, 1, 9));
  NodeId loss = weighted_sum(g, op::mul(g, op::tanh(g, p), x));
  const std::vector<float> before = c.params.at("p").to_vector();
  GradcheckResult res = gradcheck(g, loss, {p, x}, c.params, c.inputs);
  CHECK(res.ok);
  CHECK(res.checked == 12);
  CHECK(c.params.at("p").to_vector() == before);
}

TEST_CASE("gradcheck samples large tensors at max_elements positions") {
  Graph g;
  Case c;
  NodeId p = param_rand(g, c, "p", {10, 20});
  NodeId loss = weighted_sum(g, op::exp(g, op::mul(g, p, op::scalar(g, 0.5f))));
  GradcheckOptions o;
  o.max_elements = 17;
  GradcheckResult res = gradcheck(g, loss, {p}, c.params, {}, o);
  CHECK(res.ok);
  CHECK(res.checked == 17);
}

TEST_CASE("gradcheck can fail: it catches a gradient that disagrees with the function") {
  SUBCASE("zero tolerances reject even a correct gradient's rounding error") {
    Graph g;
    Case c;
    NodeId x = param_rand(g, c, "x", {4}, 0.5f, 2.f);
    NodeId loss = weighted_sum(g, op::mul(g, x, x));
    GradcheckResult good = gradcheck(g, loss, {x}, c.params);
    INFO(good.worst);
    CHECK(good.ok);
    GradcheckOptions strict;
    strict.atol = 0;
    strict.rtol = 0;
    GradcheckResult bad = gradcheck(g, loss, {x}, c.params, {}, strict);
    CHECK_FALSE(bad.ok);
    CHECK(bad.worst_abs > 0);
    CHECK(bad.worst.find("x[") != std::string::npos);
  }
  SUBCASE("a jump inside the step: analytic 1 vs numeric about -49") {
    // f(x) = where(x > 0, x, x + 1): the analytic gradient is 1, the function jumps by 1 at 0.
    Graph g;
    Case c;
    NodeId x = param_with(g, c, "x", {3}, {0.001f, 0.5f, -0.7f});
    NodeId pos = op::compare(g, x, op::scalar(g, 0.f), Cmp::gt);
    NodeId f = op::where(g, pos, x, op::add(g, x, op::scalar(g, 1.f)));
    NodeId loss = op::sum(g, f, 0);
    GradcheckResult res = gradcheck(g, loss, {x}, c.params);
    INFO(res.worst);
    CHECK_FALSE(res.ok);
    CHECK(res.worst.rfind("x[0]", 0) == 0);
    CHECK(res.worst_abs > 10);
  }
  SUBCASE("a gradient that ignores a path: compare's zero derivative vs a smooth surrogate") {
    // loss = sum(x * [x > c]) has gradient [x > c] analytically, but with c inside one step
    // of x the numeric derivative sees the jump of size x.
    Graph g;
    Case c;
    NodeId x = param_with(g, c, "x", {2}, {1.0f, 2.0f});
    NodeId step = op::compare(g, x, op::constant(g, {1.005f, 0.f}, {2}), Cmp::gt);
    NodeId loss = op::sum(g, op::mul(g, x, step), 0);
    GradcheckResult res = gradcheck(g, loss, {x}, c.params);
    CHECK_FALSE(res.ok);
  }
}

TEST_CASE("gradcheck_params: f32 gradients of a small model against f64 central differences") {
  Graph g;
  Case c;
  NodeId w1 = param_rand(g, c, "w1", {4, 6});
  NodeId b1 = param_rand(g, c, "b1", {6});
  NodeId w2 = param_rand(g, c, "w2", {6, 3});
  NodeId x = op::input(g, "x", {5, 4});
  c.inputs["x"] = Tensor::f32({5, 4}, vals(20, -1, 1, 3));
  NodeId h = op::tanh(g, op::add(g, op::matmul(g, x, w1), b1));
  NodeId loss = weighted_sum(g, op::exp(g, op::matmul(g, h, w2)));
  const std::vector<float> before = c.params.at("w1").to_vector();
  ParamCheckOptions o;
  o.max_elements = 5;
  std::vector<ParamCheck> r = gradcheck_params(g, loss, {w1, b1, w2}, c.params, c.inputs, o);
  REQUIRE(r.size() == 3);
  CHECK(r[0].name == "w1");
  CHECK(r[0].shape == Shape{4, 6});
  CHECK(r[0].checked == 6);  // 5 spread + the largest |g| (unless it is among them)
  CHECK(r[1].checked >= 5);
  for (const ParamCheck& p : r) {
    INFO(p.name << ": rel " << p.worst_rel << " at " << p.worst_index << ": " << p.analytic << " vs " << p.numeric);
    CHECK(p.ok);
    CHECK(p.worst_rel < 1e-4);      // f32 rounding of the analytic gradient only
    CHECK(p.worst_rel_f64 < 1e-6);  // the rules themselves, run in double
    CHECK(p.worst_index >= 0);
  }
  CHECK(c.params.at("w1").to_vector() == before);
}

TEST_CASE("gradcheck_params catches a gradient that disagrees with the function") {
  // f(x) = where(x > 0, x, x + 1): analytic 1, but the f64 step crosses the jump at 0.
  Graph g;
  Case c;
  NodeId x = param_with(g, c, "x", {3}, {1e-7f, 0.5f, -0.7f});
  NodeId f = op::where(g, op::compare(g, x, op::scalar(g, 0.f), Cmp::gt), x, op::add(g, x, op::scalar(g, 1.f)));
  std::vector<ParamCheck> r = gradcheck_params(g, op::sum(g, f, 0), {x}, c.params);
  REQUIRE(r.size() == 1);
  CHECK_FALSE(r[0].ok);
  CHECK(r[0].worst_index == 0);
  CHECK(r[0].analytic == 1.0);
  CHECK(r[0].numeric < -1000);  // the jump of -1 over 2h
}

TEST_CASE("gradcheck_params refuses what it cannot check") {
  Graph g;
  Case c;
  NodeId p = param_rand(g, c, "p", {2});
  NodeId x = op::input(g, "x", {2});
  SUBCASE("an input instead of a parameter") {
    NodeId loss = op::sum(g, op::mul(g, p, x), 0);
    CHECK_THROWS_WITH_AS(gradcheck_params(g, loss, {x}, c.params, {{"x", Tensor({2})}}),
                         doctest::Contains("checks parameters only"), GraphError);
  }
  SUBCASE("a graph with random nodes") {
    NodeId loss = op::sum(g, op::mul(g, p, op::random(g, {2})), 0);
    CHECK_THROWS_WITH_AS(gradcheck_params(g, loss, {p}, c.params), doctest::Contains("refuses random nodes"),
                         GraphError);
  }
}
