// Tests for ops/ir/eval_f64.cpp: the double-precision reference interpreter agrees with the
// f32 executor on every node of every primitive's sample graph (the gradient checker's
// table, tests/sample_graphs.h), and refuses what it cannot reproduce.
#include <doctest/doctest.h>

#include <cmath>

#include "ops/ir/build.h"
#include "ops/ir/eval_f64.h"
#include "ops/runtime/executor.h"
#include "tests/sample_graphs.h"

using namespace gg;
using namespace gg::sample;

TEST_CASE("eval_f64 agrees with the f32 executor on every node of every primitive's sample graph") {
  const auto table = gradcheck_table();
  CHECK(int(table.size()) == op_count);
  for (auto& [kind, build] : table) {
    CAPTURE(op_name(kind));
    Graph g;
    Case c;
    build(g, c);
    if (kind == OpKind::random) continue;  // refused: see below
    std::vector<NodeId> all = ancestors(g, {c.loss});
    Executor ex(g, all, c.params);
    for (auto& [name, t] : c.inputs) ex.set_input(name, t);
    ex.run();
    std::vector<F64Value> ref = eval_f64(g, all, f64_leaves(c.params, c.inputs));
    REQUIRE(ref.size() == all.size());
    bool saw_op = false;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const Node& n = g.node(all[i]);
      saw_op = saw_op || n.op == kind;
      CAPTURE(all[i]);
      CAPTURE(op_name(n.op));
      Tensor t = ex.get(all[i]);
      REQUIRE(ref[i].shape == t.shape());
      REQUIRE(ref[i].dtype == t.dtype());
      for (std::int64_t j = 0; j < t.numel(); ++j) {
        const double f = t.dtype() == DType::i32 ? double(t.i()[j]) : double(t.f()[j]);
        const double d = ref[i].v[std::size_t(j)];
        if (std::abs(f - d) > 1e-5 * (1 + std::abs(d))) FAIL_CHECK("element " << j << ": f32 " << f << " vs f64 " << d);
      }
    }
    CHECK(saw_op);
  }
}

TEST_CASE("eval_f64 computes in double: a sum f32 rounds away is kept") {
  Graph g;
  NodeId x = op::input(g, "x", {3});
  NodeId s = op::sum(g, x, 0);
  F64Leaves l{{"x", F64Value{{3}, DType::f32, {1.0, 1e-12, -1.0}}}};
  CHECK(eval_f64(g, {s}, l)[0].v[0] == doctest::Approx(1e-12).epsilon(1e-6));
}

TEST_CASE("eval_f64 refuses what it cannot evaluate, naming the node") {
  SUBCASE("a random node") {
    Graph g;
    NodeId r = op::random(g, {2});
    try {
      eval_f64(g, {r}, {});
      FAIL("no error");
    } catch (const GraphError& e) {
      CHECK(std::string(e.what()).find("random") != std::string::npos);
    }
  }
  SUBCASE("a missing or mis-shaped parameter") {
    Graph g;
    NodeId p = op::param(g, "w", {2, 2}, Init{});
    CHECK_THROWS_WITH_AS(eval_f64(g, {p}, {}), doctest::Contains("no value for parameter 'w'"), GraphError);
    F64Leaves l{{"w", F64Value{{4}, DType::f32, {1, 2, 3, 4}}}};
    CHECK_THROWS_WITH_AS(eval_f64(g, {p}, l), doctest::Contains("f32(2, 2) in the graph but f32(4,)"), GraphError);
  }
  SUBCASE("an index out of range") {
    Graph g;
    NodeId x = op::input(g, "x", {3, 2});
    NodeId i = op::constant(g, {0, 3}, {2}, DType::i32);
    NodeId y = op::gather(g, x, i, 0);
    F64Leaves l{{"x", F64Value{{3, 2}, DType::f32, {1, 2, 3, 4, 5, 6}}}};
    CHECK_THROWS_WITH_AS(eval_f64(g, {y}, l), doctest::Contains("index 3 at position 1 is out of range [0, 3)"),
                         GraphError);
  }
  SUBCASE("an output that is not a node") {
    Graph g;
    CHECK_THROWS_AS(eval_f64(g, {5}, {}), GraphError);
  }
}

TEST_CASE("eval_f64 and the executor pass a stop_gradient node's value through unchanged") {
  Graph g;
  NodeId x = op::input(g, "x", {3});
  NodeId d = op::stop_gradient(g, op::mul(g, x, x));
  F64Leaves l{{"x", F64Value{{3}, DType::f32, {0.5, -1.0, 2.0}}}};
  std::vector<F64Value> v = eval_f64(g, {d}, l);
  CHECK(v[0].v == std::vector<double>{0.25, 1.0, 4.0});
  ParamStore ps;
  Executor ex(g, {d}, ps);
  const std::vector<float> xv = {0.5f, -1.f, 2.f};
  ex.set_input("x", xv);
  ex.run();
  CHECK(ex.get(d).to_vector() == std::vector<float>{0.25f, 1.f, 4.f});
}
