// Gradient graphs through the simplification pass (ops/passes/simplify.h): the forward values the
// gradient rules reuse stay shared (one exp for exp and its gradient), an expression
// written twice gives the same simplified gradient as the shared one, and gradient nodes
// are named after the parameter or named node they flow into, with the composite's line.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autodiff/grad.h"
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

// sum(tanh(x @ W) (+) tanh(x @ W)), the second term rebuilt when `twice`, else shared.
struct TanhModel {
  Graph g;
  NodeId loss, dw;
  explicit TanhModel(bool twice) {
    NodeId x = op::input(g, "x", {2, 3});
    NodeId w = op::param(g, "W", {3, 4}, {Init::normal, 0.f, 1.f});
    NodeId a = op::tanh(g, op::matmul(g, x, w));
    NodeId b = twice ? op::tanh(g, op::matmul(g, x, w)) : a;
    loss = op::sum(g, op::sum(g, op::mul(g, a, b), 1), 0);
    dw = grad(g, loss, {w})[0];
  }
};

}  // namespace

TEST_CASE("simplify: grad(exp(x)) computes exp once; tanh's gradient reads tanh's output") {
  Graph g;
  NodeId x = op::param(g, "x", {5}, {Init::normal, 0.f, 1.f});
  NodeId y = op::exp(g, x);
  NodeId loss = op::sum(g, y, 0);
  NodeId gx = grad(g, loss, {x})[0];
  Simplified s = simplify(g, {loss, gx});
  CHECK(count_op(s.graph, OpKind::exp) == 1);
  const Node& gnode = s.graph.node(s.roots[1]);  // mul(expand(1), exp(x))
  CHECK(gnode.op == OpKind::mul);
  CHECK(std::find(gnode.inputs.begin(), gnode.inputs.end(), s.map[std::size_t(y)]) != gnode.inputs.end());

  Graph h;
  NodeId z = op::param(h, "z", {5}, {});
  NodeId t = op::tanh(h, z);
  NodeId gz = grad(h, op::sum(h, t, 0), {z})[0];
  Simplified st = simplify(h, {gz});
  CHECK(count_op(st.graph, OpKind::tanh) == 1);
}

TEST_CASE("simplify: tanh(x @ W) written twice gives the gradient graph of the shared form") {
  TanhModel twice(true), shared(false);
  Simplified a = simplify(twice.g, {twice.loss, twice.dw});
  Simplified b = simplify(shared.g, {shared.loss, shared.dw});
  CHECK(a.stats.before > b.stats.before);
  CHECK(count_op(a.graph, OpKind::tanh) == 1);
  CHECK(count_op(a.graph, OpKind::matmul) == count_op(b.graph, OpKind::matmul));
  CHECK(a.stats.after <= b.stats.after);
  ParamStore ps;
  ps.init_missing(twice.g, 7);
  std::vector<float> xv{0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f};
  Executor on(twice.g, {twice.dw}, ps, 0, {.simplify = true}), off(twice.g, {twice.dw}, ps, 0, {.simplify = false});
  for (Executor* ex : {&on, &off}) {
    ex->set_input("x", xv);
    ex->run();
  }
  for (int i = 0; i < 12; ++i) CHECK(on.value(twice.dw).f()[i] == off.value(twice.dw).f()[i]);
}

TEST_CASE("grad: nodes are named after the named node or parameter the gradient flows into") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId w = op::param(g, "W", {3, 4}, {});
  NodeId h = op::tanh(g, op::matmul(g, x, w));  // unnamed matmul and tanh
  NodeId loss = op::sum(g, op::sum(g, h, 1), 0);
  g.set_name(loss, "loss");
  const NodeId before = g.size();
  grad(g, loss, {w});
  for (NodeId id = before; id < g.size(); ++id) {
    INFO("%" << id << " " << g.node(id).name);
    CHECK(g.node(id).name.find('%') == std::string::npos);  // never an id the listing may not show
  }
  // Everything below the loss flows into W (the only parameter): grad(W), not grad(%2).
  CHECK(g.node(g.size() - 1).name == "grad(W)");
}
