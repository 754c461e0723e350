// Tests for ops/ir/tangent.cpp: the structure of a tangent (zero, and the axes along which it
// is constant) through broadcasting, movement, matmul, masks, and the x - max(x) cancellation.
#include <doctest/doctest.h>

#include <limits>
#include <map>

#include "ops/ir/build.h"
#include "ops/ir/tangent.h"

using namespace gg;

namespace {
// The tangent structure of every node after `from`, seeded at param `p`.
std::map<NodeId, TangentShape> carry(const Graph& g, NodeId p) {
  std::map<NodeId, TangentShape> t;
  t[p] = seed_tangent(g, p);
  for (NodeId id = p + 1; id < g.size(); ++id) {
    std::vector<const TangentShape*> in;
    for (NodeId i : g.node(id).inputs) in.push_back(t.count(i) ? &t[i] : nullptr);
    t[id] = propagate_tangent(g, id, in);
  }
  return t;
}
using C = std::vector<char>;
}  // namespace

TEST_CASE("tangent: a bias broadcast over rows is constant along them, through reshape and permute") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3, 4});
  NodeId b = op::param(g, "b", {4}, Init{});
  NodeId y = op::add(g, x, b);                           // (2, 3, 4): constant along 0 and 1
  NodeId r = op::reshape(g, y, {2, 3, 2, 2});            // axes 0, 1 intact
  NodeId p = op::permute(g, r, {0, 2, 1, 3});            // (2, 2, 3, 2)
  NodeId e = op::exp(g, y);                              // a factor that varies everywhere
  auto t = carry(g, b);
  CHECK(t[y].constant == C{1, 1, 0});
  CHECK(t[r].constant == C{1, 1, 0, 0});
  CHECK(t[p].constant == C{1, 0, 1, 0});
  CHECK(t[e].constant == C{0, 0, 0});
  CHECK(t[x].zero);
}

TEST_CASE("tangent: matmul keeps the varying operand's row axis; a -inf mask keeps it; x - max(x) cancels it") {
  Graph g;
  NodeId q = op::input(g, "q", {2, 3, 4});
  NodeId b = op::param(g, "b", {4}, Init{});
  NodeId k = op::add(g, op::input(g, "k", {2, 3, 4}), b);   // constant along 0, 1
  NodeId s = op::matmul(g, q, k, false, true);               // (2, 3, 3): constant along the key axis
  NodeId m = op::where(g, op::constant(g, {1, 0, 0, 1, 1, 0, 1, 1, 1}, {3, 3}), s,
                       op::scalar(g, -std::numeric_limits<float>::infinity()));
  NodeId z = op::where(g, op::constant(g, {1, 0, 0, 1, 1, 0, 1, 1, 1}, {3, 3}), s, op::scalar(g, 0.f));
  NodeId d = op::sub(g, m, op::max(g, m, 2, true));
  NodeId wrong_axis = op::sub(g, m, op::max(g, m, 1, true));
  auto t = carry(g, b);
  CHECK(t[s].constant == C{0, 0, 1});
  CHECK(t[m].constant == C{0, 0, 1});  // -inf + c = -inf
  CHECK(t[z].constant == C{0, 0, 0});  // 0 + c is not 0: the fill breaks the shift
  CHECK(t[d].zero);
  CHECK(t[d].cancelled);
  CHECK_FALSE(t[wrong_axis].zero);
}

TEST_CASE("tangent: ops with no gradient stop it, without calling it a cancellation") {
  Graph g;
  NodeId p = op::param(g, "p", {3}, Init{});
  NodeId c = op::compare(g, p, op::scalar(g, 0.f), Cmp::gt);
  NodeId a = op::argmax(g, p, 0);
  auto t = carry(g, p);
  CHECK(t[c].zero);
  CHECK_FALSE(t[c].cancelled);
  CHECK(t[a].zero);
}

TEST_CASE("tangent: stop_gradient has a zero tangent; x - stop_gradient(max(x)) still cancels a shift") {
  Graph g;
  NodeId p = op::param(g, "p", {3}, Init{});
  NodeId d = op::stop_gradient(g, op::exp(g, p));
  NodeId y = op::mul(g, d, op::input(g, "x", {3}));
  NodeId b = op::param(g, "b", {2, 1}, Init{});
  NodeId s = op::add(g, op::input(g, "s", {2, 4}), b);  // constant along axis 1
  NodeId c = op::sub(g, s, op::stop_gradient(g, op::max(g, s, 1, true)));
  auto t = carry(g, p);
  CHECK(t[d].zero);
  CHECK_FALSE(t[d].cancelled);
  CHECK(t[y].zero);
  auto u = carry(g, b);
  CHECK(u[s].constant == C{0, 1});
  CHECK(u[c].zero);
  CHECK(u[c].cancelled);
}
