// Tests for recurrent models written with the DSL (dsl/expr.h's StepScope): a GRU unrolled
// over its steps, each step in a step scope, shares its weights across the steps; a shared
// weight re-declared under a plain per-step scope is an error naming both declarations; the
// gradient's node names stay short; to_dot draws the steps as runs of boxes, one step
// expandable; and the unrolled GRU's gradient passes gradcheck.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "dsl/nn.h"
#include "tests/dsl/dsl_test_util.h"
#include "tests/test_util.h"

using namespace gg;
using namespace gg::dsl;

namespace {
using gg::test::contains;

// One GRU step (PyTorch's equations), x: (B, I), h: (B, H) -> (B, H):
//   r = sigmoid(W_ir x + W_hr h), z = sigmoid(W_iz x + W_hz h),
//   n = tanh(W_in x + r * (W_hn h)), h' = (1 - z) * n + z * h.
Expr gru_step(Expr x, Expr h) {
  const std::int64_t H = h.dim(-1);
  Expr r = sigmoid(linear(x, H, "gru.ir") + linear(h, H, "gru.hr"));
  Expr z = sigmoid(linear(x, H, "gru.iz") + linear(h, H, "gru.hz"));
  Expr n = tanh(linear(x, H, "gru.in") + r * linear(h, H, "gru.hn"));
  return (1.f - z) * n + z * h;
}

// x: (B, T, I) unrolled over T steps from h = 0, each step in StepScope "step.<t>".
Expr unrolled_gru(Expr x, std::int64_t H) {
  Graph& g = *x.g;
  const std::int64_t B = x.dim(0), T = x.dim(1), I = x.dim(2);
  Expr h = constant(g, std::vector<float>(std::size_t(B * H), 0.f), {B, H});
  for (std::int64_t t = 0; t < T; ++t) {
    StepScope step(g, fmt::format("step.{}", t));
    h = gru_step(reshape(slice(x, 1, t, t + 1), {B, I}), h);
  }
  return h;
}

std::vector<std::string> param_names(Graph& g) {
  std::vector<std::string> names;
  for (const Expr& p : params(g)) names.push_back(p.name());
  return names;
}
}  // namespace

TEST_CASE("a weight re-declared under a step scope is the same weight at every step, not a copy") {
  Graph g;
  Expr x = input(g, "x", {2, 5, 3});  // x: (B, T, I)
  Expr h = unrolled_gru(x, 4);
  // Six linears with a weight and a bias each, whatever the number of steps.
  const std::vector<std::string> names = param_names(g);
  INFO(fmt::format("{}", fmt::join(names, ", ")));
  CHECK(names.size() == 12);
  CHECK(std::count(names.begin(), names.end(), "gru.ir.weight") == 1);
  for (const std::string& n : names) CHECK_FALSE(contains(n, "step"));
  // The nodes are named by their step: the picture and the listing group by it.
  CHECK(h.name() == "step.4");
  std::set<std::string> scopes;
  for (const Node& n : g.nodes()) scopes.insert(n.name);
  CHECK(scopes.count("step.0.gru.hr") == 1);
  CHECK(scopes.count("step.4.gru.hn") == 1);
}

namespace {
// An Elman step, h' = tanh(W_ih x + W_hh h): x (B, I), h (B, H) -> (B, H). The two linears
// in two statements: the order of a + b's operands, and so of the declarations, is unspecified.
int ih_line = 0;
Expr rnn_step(Expr x, Expr h) {
  ih_line = __LINE__ + 1;
  Expr in = linear(x, h.dim(-1), "rnn.ih");
  return tanh(in + linear(h, h.dim(-1), "rnn.hh"));
}
}  // namespace

TEST_CASE("step scopes: nested in a layer's scope, weights declared before the loop, steps by index") {
  Graph g;
  Expr x = input(g, "x", {2, 3});
  Expr h = input(g, "h", {2, 4});
  SUBCASE("inside a plain scope, the layer's name prefixes the weights and the step's the nodes") {
    Scope enc(g, "enc");
    for (int t = 0; t < 3; ++t) {
      StepScope step(g, "step", t);  // "step.<t>"
      CHECK(g.scope() == "enc.step." + std::to_string(t));
      CHECK(g.step_scope() == g.scope());
      h = rnn_step(x, h);
    }
    CHECK(h.name() == "enc.step.2");
    CHECK(param_names(g) == std::vector<std::string>{"enc.rnn.ih.weight", "enc.rnn.ih.bias", "enc.rnn.hh.weight",
                                                     "enc.rnn.hh.bias"});
    CHECK(g.step_scopes() == std::vector<std::string>{"enc.step.0", "enc.step.1", "enc.step.2"});
  }
  SUBCASE("a weight declared by name before the loop is the one every step uses") {
    Expr w = param(g, "rnn.hh.weight", {4, 4}, normal_init(0.1f));
    for (int t = 0; t < 3; ++t) {
      StepScope step(g, "step", t);
      h = rnn_step(x, h);
    }
    CHECK(params(g).size() == 4);
    CHECK(params(g)[0].id == w.id);
  }
  SUBCASE("a plain scope inside a step prefixes both, and the weight is still shared") {
    for (int t = 0; t < 2; ++t) {
      StepScope step(g, "step", t);
      Scope cell(g, "cell");
      h = rnn_step(x, h);
    }
    CHECK(param_names(g) == std::vector<std::string>{"cell.rnn.ih.weight", "cell.rnn.ih.bias", "cell.rnn.hh.weight",
                                                     "cell.rnn.hh.bias"});
    CHECK(h.name() == "step.1.cell");
  }
  SUBCASE("a plain scope per layer around the same names still gives each layer its weights") {
    for (int t = 0; t < 2; ++t) {
      StepScope step(g, "step", t);
      h = rnn_step(x, h);
    }
    Scope top(g, "layer2");
    rnn_step(x, h);
    CHECK(params(g).size() == 8);
  }
  SUBCASE("a step needs a name") { CHECK_THROWS_AS(StepScope(g, ""), GraphError); }
}

TEST_CASE("a shared weight re-declared under a plain scope named like a step is an error naming both") {
  Graph g;
  Expr x = input(g, "x", {2, 3});
  Expr h = input(g, "h", {2, 4});
  SUBCASE("steps first, then a plain scope") {
    {
      StepScope step(g, "step.0");
      h = rnn_step(x, h);
    }
    const int first = ih_line;
    Scope step(g, "step.1");  // the mistake: a per-step copy of each weight
    const int second = ih_line;
    const std::string m = gg::test::error_of<GraphError>([&] { rnn_step(x, h); });
    INFO(m);
    CHECK(contains(m, "param at test_recurrent.cpp:" + std::to_string(second)));
    CHECK(contains(m, "('step.1.rnn.ih.weight'): a copy of 'rnn.ih.weight', the weight the steps share"));
    CHECK(contains(m, "declared in step scope 'step.0' at test_recurrent.cpp:" + std::to_string(first)));
    CHECK(contains(m, "the plain scope 'step.1'"));
    CHECK(contains(m, "StepScope(g, \"step.1\")"));
  }
  SUBCASE("a plain scope first, then a step scope") {
    {
      Scope step(g, "step.0");
      h = rnn_step(x, h);
    }
    const int first = ih_line;
    StepScope step(g, "step.1");
    const int second = ih_line;
    const std::string m = gg::test::error_of<GraphError>([&] { rnn_step(x, h); });
    INFO(m);
    CHECK(contains(m, "param at test_recurrent.cpp:" + std::to_string(second) + " ('rnn.ih.weight')"));
    CHECK(contains(m, "declared in step scope 'step.1' to be shared by the steps"));
    CHECK(contains(m, "'step.0.rnn.ih.weight' (at test_recurrent.cpp:" + std::to_string(first) + ") is a copy"));
    CHECK(contains(m, "the plain scope 'step.0'"));
  }
}

TEST_CASE("the gradient of a 32-step GRU: short names, grouped by step") {
  Graph g;
  Expr x = input(g, "x", {2, 32, 3});  // x: (B, T, I)
  Expr h = unrolled_gru(x, 4);
  Expr loss = mean_all(h * h);
  const NodeId first = g.size();
  const std::vector<Expr> ps = params(g);
  const std::vector<Expr> gs = grad(loss, ps);
  for (std::size_t i = 0; i < ps.size(); ++i) CHECK(gs[i].name() == "grad(" + ps[i].name() + ")");
  std::size_t longest = 0;
  std::set<std::string> names;
  for (NodeId id = first; id < g.size(); ++id) {
    const std::string& n = g.node(id).name;
    longest = std::max(longest, n.size());
    names.insert(n);
  }
  CHECK(longest <= std::string("grad(step.31.gru.hn)").size());
  CHECK(names.count("grad(step.17)") == 1);          // the step's own arithmetic
  CHECK(names.count("grad(step.17.gru.hz)") == 1);   // inside a linear of the step
  CHECK(names.count("grad(gru.hz.weight)") == 1);    // the sum over the steps
}

TEST_CASE("gradcheck: a GRU unrolled over 3 steps, every shared weight and the input") {
  Graph g;
  Expr x = input(g, "x", {2, 3, 3});  // x: (B, T, I)
  Expr loss = gg::test::weighted_sum(unrolled_gru(x, 4));
  ParamStore ps;
  gg::test::randomize(g, ps, 0.5f);
  CHECK(ps.all().size() == 12);
  gg::test::check_grads(g, loss, ps, {{"x", gg::test::tensor({2, 3, 3}, -1.f, 1.f, 7)}}, {x});
}

TEST_CASE("to_dot of a 32-step GRU's whole gradient: the steps as runs of boxes, one step expandable") {
  Graph g;
  Expr x = input(g, "x", {2, 32, 3});  // x: (B, T, I)
  Expr loss = mean_all(unrolled_gru(x, 4));
  std::vector<NodeId> roots;
  for (const Expr& d : grad(loss, params(g))) roots.push_back(d.id);
  auto statements = [](const std::string& dot) {  // nodes and boxes drawn
    std::size_t n = 0;
    for (std::size_t at = dot.find(" [label="); at != std::string::npos; at = dot.find(" [label=", at + 1)) ++n;
    return n;
  };
  const std::string all = to_dot(g, roots);  // thousands of nodes: collapsed by default
  INFO(all);
  CHECK(contains(all, "label=\"step.0 .. step.31\\n(32 steps, "));
  CHECK(contains(all, "label=\"grad:step."));
  CHECK(statements(all) <= 20);
  DotOptions o;
  o.expand = {"step.5"};
  const std::string one = to_dot(g, roots, o);
  CHECK(contains(one, "label=\"step.0 .. step.4\\n(5 steps, "));
  CHECK(contains(one, "label=\"step.5\";"));
  CHECK(contains(one, "label=\"step.6 .. step.31\\n(26 steps, "));
  CHECK(contains(one, "label=\"grad:step.5\";"));
  CHECK(statements(one) <= 250);
}
