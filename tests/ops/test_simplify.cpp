// Tests for ops/passes/simplify.cpp: node counts before and after for each rule (common
// subexpressions, constant folding, identities, dead nodes), what must never merge
// (random nodes, parameters and inputs of different names), names and lines kept, the id
// map, and the executor's switch (same values with the pass on and off).
// Gradient graphs through the pass: tests/autodiff/test_simplify_grad.cpp.
#include <doctest/doctest.h>

#include <cstdlib>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/passes/simplify.h"

using namespace gg;

namespace {

int count_op(const Graph& g, OpKind k) {
  int n = 0;
  for (const Node& x : g.nodes()) n += x.op == k;
  return n;
}

}  // namespace

TEST_CASE("simplify: the same expression written twice is computed once") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId w = op::param(g, "W", {3, 4}, {});
  NodeId a = op::tanh(g, op::matmul(g, x, w));
  NodeId b = op::tanh(g, op::matmul(g, x, w));
  NodeId out = op::add(g, a, b);
  Simplified s = simplify(g, {out});
  CHECK(s.stats.before == 7);
  CHECK(s.stats.after == 5);  // x, W, matmul, tanh, add
  CHECK(s.stats.merged == 2);
  CHECK(count_op(s.graph, OpKind::matmul) == 1);
  CHECK(count_op(s.graph, OpKind::tanh) == 1);
  CHECK(s.map[std::size_t(a)] == s.map[std::size_t(b)]);
  const Node& sum = s.graph.node(s.roots[0]);
  CHECK(sum.inputs[0] == sum.inputs[1]);
}

TEST_CASE("simplify: attributes, constant data and names keep nodes apart") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId y = op::input(g, "y", {2, 3});
  std::vector<NodeId> outs = {
      op::sum(g, x, 0), op::sum(g, x, 1),                                      // different axes
      op::exp(g, x), op::exp(g, y),                                            // inputs of different names
      op::mul(g, x, op::constant(g, {1, 2, 3}, {3})), op::mul(g, x, op::constant(g, {1, 2, 4}, {3})),  // data
      op::compare(g, x, y, Cmp::lt), op::compare(g, x, y, Cmp::le),           // attributes
  };
  Simplified s = simplify(g, outs);
  CHECK(s.stats.merged == 0);
  CHECK(s.stats.after == s.stats.before);
  std::vector<NodeId> seen;
  for (NodeId r : s.roots) {
    CHECK(std::find(seen.begin(), seen.end(), r) == seen.end());
    seen.push_back(r);
  }
}

TEST_CASE("simplify: random nodes are never merged; parameters of one name are") {
  Graph g;
  NodeId r1 = op::random(g, {4});
  NodeId r2 = op::random(g, {4});
  NodeId w1 = op::param(g, "w", {4}, {});
  NodeId w2 = op::param(g, "w", {4}, {});
  NodeId v = op::param(g, "v", {4}, {});
  NodeId out = op::add(g, op::add(g, op::mul(g, r1, w1), op::mul(g, r2, w2)), v);
  Simplified s = simplify(g, {out});
  CHECK(count_op(s.graph, OpKind::random) == 2);
  CHECK(count_op(s.graph, OpKind::param) == 2);  // w once, v once
  CHECK(s.map[std::size_t(w1)] == s.map[std::size_t(w2)]);
  CHECK(s.map[std::size_t(r1)] != s.map[std::size_t(r2)]);
}

TEST_CASE("simplify: constants fold, computed by the op's own kernel") {
  Graph g;
  NodeId x = op::input(g, "x", {3});
  NodeId c = op::sub(g, op::scalar(g, 1.f), op::mul(g, op::scalar(g, 0.5f), op::scalar(g, 0.5f)));  // 0.75
  NodeId e = op::exp(g, op::constant(g, {0, 1, 2}, {3}));
  NodeId out = op::add(g, op::mul(g, x, c), e);
  Simplified s = simplify(g, {out});
  CHECK(s.stats.folded == 3);  // mul, sub, exp
  CHECK(count_op(s.graph, OpKind::exp) == 0);
  CHECK(s.stats.after == 5);  // x, 0.75, mul, exp's constant, add
  const Node& k = s.graph.node(s.map[std::size_t(c)]);
  REQUIRE(k.op == OpKind::constant);
  CHECK((*k.attrs.data)[0] == 0.75f);

  ParamStore ps;
  Executor on(g, {out}, ps, 0, {.simplify = true}), off(g, {out}, ps, 0, {.simplify = false});
  for (Executor* ex : {&on, &off}) {
    ex->set_input("x", std::vector<float>{1, 2, 3});
    ex->run();
  }
  for (int i = 0; i < 3; ++i) CHECK(on.value(out).f()[i] == off.value(out).f()[i]);
}

TEST_CASE("simplify: the identities go") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId one = op::scalar(g, 1.f), zero = op::scalar(g, 0.f);
  SUBCASE("x*1, 1*x, x+0, 0+x, x-0, x/1") {
    NodeId y = op::div(g, op::sub(g, op::add(g, op::add(g, op::mul(g, op::mul(g, x, one), one), zero), zero), zero), one);
    NodeId z = op::mul(g, one, y);
    Simplified s = simplify(g, {op::exp(g, z)});
    CHECK(s.stats.identities == 7);
    CHECK(s.stats.after == 2);  // x, exp
  }
  SUBCASE("x*1 that broadcasts x to a larger shape stays") {
    NodeId y = op::mul(g, op::input(g, "s", {3}), op::constant(g, std::vector<float>(6, 1.f), {2, 3}));
    Simplified s = simplify(g, {y});
    CHECK(s.stats.identities == 0);
    CHECK(s.graph.node(s.roots[0]).shape == Shape{2, 3});
  }
  SUBCASE("reshape, permute, expand, slice to the same shape") {
    // (op::reshape and op::expand to the same shape return x itself: add the nodes directly)
    NodeId y = g.add(OpKind::reshape, {x}, [] { Attrs a; a.dims = {2, 3}; return a; }());
    y = op::permute(g, y, {0, 1});
    y = g.add(OpKind::expand, {y}, [] { Attrs a; a.dims = {2, 3}; return a; }());
    y = op::slice(g, y, 1, 0, 3);
    y = op::sum(g, y, 0, true);
    y = op::reshape(g, y, {3});
    y = op::sum(g, op::reshape(g, y, {3, 1}), 1, true);  // over an axis of size 1
    Simplified s = simplify(g, {op::exp(g, y)});
    CHECK(s.stats.identities == 5);  // reshape, permute, expand, slice, sum
    CHECK(s.stats.after == 4);       // x, sum, one reshape to (3, 1), exp
    CHECK(count_op(s.graph, OpKind::reshape) == 1);
  }
  SUBCASE("transposed twice, reshaped twice") {
    NodeId t = op::permute(g, op::permute(g, x, {1, 0}), {1, 0});
    NodeId r = op::reshape(g, op::reshape(g, x, {3, 2}), {6});
    Simplified s = simplify(g, {op::exp(g, t), op::exp(g, r)});
    CHECK(count_op(s.graph, OpKind::permute) == 0);
    CHECK(count_op(s.graph, OpKind::reshape) == 1);
    CHECK(s.graph.node(s.map[std::size_t(t)]).op == OpKind::input);
    CHECK(s.graph.node(s.map[std::size_t(r)]).inputs[0] == s.map[std::size_t(x)]);
  }
  SUBCASE("three permutes compose into one") {
    Graph h;
    NodeId a = op::input(h, "a", {2, 3, 4});
    NodeId p = op::permute(h, op::permute(h, op::permute(h, a, {1, 2, 0}), {1, 2, 0}), {2, 1, 0});
    Simplified s = simplify(h, {p});
    CHECK(count_op(s.graph, OpKind::permute) == 1);
    CHECK(s.graph.node(s.roots[0]).shape == h.node(p).shape);
    ParamStore ps;
    Executor on(h, {p}, ps, 0, {.simplify = true}), off(h, {p}, ps, 0, {.simplify = false});
    std::vector<float> v(24);
    for (int i = 0; i < 24; ++i) v[std::size_t(i)] = float(i);
    for (Executor* ex : {&on, &off}) {
      ex->set_input("a", v);
      ex->run();
    }
    for (int i = 0; i < 24; ++i) CHECK(on.value(p).f()[i] == off.value(p).f()[i]);
  }
}

TEST_CASE("simplify: nodes no root needs are dropped; names and both lines are kept") {
  Graph g;
  NodeId x = op::input(g, "x", {2});
  NodeId unused = op::exp(g, x);
  NodeId y = op::tanh(g, x);
  g.set_name(y, "first");
  NodeId y2 = op::tanh(g, x);
  g.set_name(y2, "second");
  NodeId out = op::add(g, y, y2);
  Simplified s = simplify(g, {out});
  CHECK(s.map[std::size_t(unused)] == -1);
  CHECK(s.stats.after == 3);
  const Node& t = s.graph.node(s.map[std::size_t(y2)]);
  CHECK(t.name == "first");
  CHECK(t.loc.line() == g.node(y).loc.line());
  CHECK(t.inner_loc.line() == g.node(y).inner_loc.line());
}

TEST_CASE("simplify: value checks follow their node") {
  Graph g;
  NodeId x = op::input(g, "x", {2});
  NodeId y = op::mul(g, x, op::scalar(g, 1.f));  // an identity: the check moves to x
  g.add_check(y, "check", [](const View& v) { return v.f()[0] < 0 ? std::string("negative") : std::string(); });
  NodeId out = op::exp(g, y);
  ParamStore ps;
  Executor ex(g, {out}, ps, 0, {.simplify = true});
  ex.set_input("x", std::vector<float>{-1, 1});
  CHECK_THROWS_WITH_AS(ex.run(), "check: negative", GraphError);
}

TEST_CASE("executor: the pass is on by default, off with the option or GG_SIMPLIFY=0") {
  Graph g;
  NodeId x = op::input(g, "x", {2});
  NodeId out = op::add(g, op::exp(g, x), op::exp(g, x));
  ParamStore ps;
  Executor on(g, {out}, ps);
  Executor off(g, {out}, ps, 0, {.simplify = false});
  CHECK(on.order().size() == 3);
  CHECK(off.order().size() == 4);
  CHECK(on.planned_graph().size() == 3);
  ::setenv("GG_SIMPLIFY", "0", 1);
  const EnvConfig env = read_env_config();  // what ExecutorOptions' defaults are read from
  ::unsetenv("GG_SIMPLIFY");
  Executor env_off(g, {out}, ps, 0, {.simplify = env.simplify});
  CHECK(env_off.order().size() == 4);
  for (Executor* ex : {&on, &off, &env_off}) {
    ex->set_input("x", std::vector<float>{0, 1});
    ex->run();
    CHECK(ex->value(out).f()[1] == doctest::Approx(2 * 2.718281828));
  }
  CHECK(on.value(out).f()[1] == off.value(out).f()[1]);
  CHECK_THROWS_WITH_AS(on.value(op::exp(g, x)), doctest::Contains("not an output"), GraphError);
}

TEST_CASE("simplify keeps stop_gradient: never merged with the same node that passes gradients, never dropped") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId m = op::max(g, x, 1, true);                             // m: (2, 1)
  NodeId plain = op::reshape(g, op::reshape(g, m, {2}), {2, 1});  // an identity: becomes m
  NodeId d1 = op::stop_gradient(g, m);
  NodeId d2 = op::stop_gradient(g, m);                            // the same detached node: merged with d1
  NodeId r = op::reshape(g, d1, {2});                             // a reshape of the detached m: not of m
  NodeId n1 = op::neg(g, op::stop_gradient(g, op::neg(g, x)));    // neg(detach(neg(x))) is not x
  Simplified s = simplify(g, {plain, d1, d2, r, n1});
  const NodeId sp = s.roots[0], s1 = s.roots[1], s2 = s.roots[2], sr = s.roots[3], sn = s.roots[4];
  CHECK(s.graph.node(sp).op == OpKind::max);
  CHECK_FALSE(s.graph.node(sp).attrs.no_grad);
  CHECK(s.graph.node(s1).op == OpKind::reshape);
  CHECK(s.graph.node(s1).attrs.no_grad);
  CHECK(s.graph.node(s1).inputs[0] == sp);
  CHECK(s1 == s2);
  CHECK(s.graph.node(sr).inputs[0] == s1);
  CHECK(s.graph.node(sn).op == OpKind::neg);
  CHECK(s.graph.node(s.graph.node(sn).inputs[0]).attrs.no_grad);
}

TEST_CASE("simplify for a plan drops stop_gradient marks: a detached value is the value") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId m = op::max(g, x, 1, true);
  NodeId d = op::stop_gradient(g, m);
  NodeId y = op::sub(g, x, d);                                  // softmax's x - max, max detached
  NodeId n1 = op::neg(g, op::stop_gradient(g, op::neg(g, x)));  // neg(detach(neg(x))): x, once unmarked
  Simplified s = simplify(g, {y, n1}, {.keep_stop_gradient = false});
  const Node& sy = s.graph.node(s.roots[0]);
  CHECK(sy.op == OpKind::sub);
  CHECK(s.graph.node(sy.inputs[1]).op == OpKind::max);  // nothing between the max and its reader
  CHECK(s.graph.node(s.roots[1]).op == OpKind::input);
  for (NodeId i = 0; i < s.graph.size(); ++i) CHECK_FALSE(s.graph.node(i).attrs.no_grad);
  // The default keeps the mark.
  Simplified k = simplify(g, {y, n1});
  CHECK(k.graph.node(k.graph.node(k.roots[0]).inputs[1]).attrs.no_grad);
}
