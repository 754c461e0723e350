// Tests for ops/fuse.cpp: which nodes the element-wise fusion pass groups (chains of one
// shape with one-element operands; never a value read twice, an output, a checked node, or
// another shape), and the executor's switch: with fusion on, every output equals the
// unfused plan's bit for bit (each member runs its op's own element function on the same
// SIMD/scalar split), on awkward sizes and at 1 and 2 threads, with a smaller arena.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/build.h"
#include "ops/executor.h"
#include "ops/fuse.h"
#include "ops/parallel.h"

using namespace gg;

namespace {

std::vector<float> values(std::int64_t n, float scale, int salt) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = scale * float(std::sin(0.73 * double(i) + salt));
  return v;
}

// Runs outs with fusion off and on (threads: 1 and 2); all four runs must agree bit for bit.
// Returns the fused plan's arena bytes and the unfused one's.
std::pair<std::size_t, std::size_t> same_fused_and_not(const Graph& g, const std::vector<NodeId>& outs,
                                                       const std::vector<std::pair<std::string, std::vector<float>>>& feeds) {
  ParamStore ps;
  ps.init_missing(g, 3);
  std::vector<std::vector<float>> first;
  std::size_t bytes[2] = {};
  const int before = num_threads();
  for (int threads : {1, 2})
    for (bool fuse : {false, true}) {
      set_num_threads(threads);
      Executor ex(g, outs, ps, 1, {.simplify = true, .fuse = fuse});
      bytes[fuse] = ex.arena_bytes();
      if (fuse) CHECK(!ex.fusion().groups.empty());
      for (const auto& [name, v] : feeds) ex.set_input(name, v);
      ex.run();
      for (std::size_t o = 0; o < outs.size(); ++o) {
        const Tensor t = ex.get(outs[o]);
        if (first.size() <= o) first.push_back(t.to_vector());
        INFO("output " << o << " threads " << threads << " fuse " << fuse);
        CHECK(std::memcmp(t.data(), first[o].data(), first[o].size() * 4) == 0);
      }
    }
  set_num_threads(before);
  return {bytes[1], bytes[0]};
}

}  // namespace

TEST_CASE("fuse: a chain of one shape with scalar operands is one group, its interior never stored") {
  Graph g;
  NodeId x = op::input(g, "x", {4, 8});
  NodeId y = op::input(g, "y", {4, 8});
  NodeId a = op::mul(g, x, op::scalar(g, 0.5f));  // interior
  NodeId b = op::tanh(g, op::add(g, a, y));       // add interior, tanh interior
  NodeId out = op::exp(g, op::neg(g, b));         // root
  Fusion f = fuse_elementwise(g, ancestors(g, {out}), {out});
  REQUIRE(f.groups.size() == 1);
  const FusedGroup& grp = f.groups[0];
  CHECK(grp.root == out);
  CHECK(grp.members.size() == 5);  // mul, add, tanh, neg, exp
  CHECK(grp.inputs.size() == 3);  // x, the scalar, y
  CHECK(grp.inputs[0] == x);
  CHECK(grp.inputs[2] == y);
  CHECK(grp.program.front().op == OpKind::mul);
  CHECK(grp.program.back().op == OpKind::exp);
  CHECK(f.group_of[std::size_t(x)] == -1);
}

TEST_CASE("fuse: values read twice, outputs, checked nodes and other shapes end a group") {
  Graph g;
  NodeId x = op::input(g, "x", {4, 8});
  NodeId row = op::input(g, "row", {8});
  NodeId e = op::exp(g, x);
  NodeId twice = op::add(g, op::mul(g, e, e), e);  // e read by two nodes: stored
  NodeId kept = op::tanh(g, twice);                // an output: stored
  NodeId after = op::neg(g, kept);
  NodeId bcast = op::add(g, after, row);           // a row operand: not in this subset
  Fusion f = fuse_elementwise(g, ancestors(g, {kept, bcast}), {kept, bcast});
  REQUIRE(f.groups.size() == 1);
  CHECK(f.groups[0].members.size() == 3);  // e*e, the add, the tanh: a kept node may end a group
  CHECK(f.groups[0].root == kept);
  CHECK(f.group_of[std::size_t(e)] == -1);
  CHECK(f.group_of[std::size_t(after)] == -1);  // alone: its reader is not fusible
  CHECK(f.group_of[std::size_t(bcast)] == -1);
}

TEST_CASE("fuse: fused plans give the unfused values bit for bit on awkward sizes, at 1 and 2 threads") {
  for (std::int64_t n : {3, 7, 15, 17, 33, 1000, 5000, 70001}) {
    CAPTURE(n);
    Graph g;
    NodeId x = op::input(g, "x", {n});
    NodeId y = op::input(g, "y", {n});
    NodeId s = op::param(g, "s", {1}, {});
    // GELU-like: 0.5 x (1 + erf(x / sqrt 2)), then every other element-wise op.
    NodeId gelu = op::mul(g, op::mul(g, op::scalar(g, 0.5f), x),
                          op::add(g, op::scalar(g, 1.f), op::erf(g, op::div(g, x, op::scalar(g, 1.4142135f)))));
    NodeId z = op::sub(g, op::exp(g, op::tanh(g, gelu)), op::sqrt(g, op::add(g, op::mul(g, y, y), s)));
    NodeId out = op::maximum(g, op::log(g, op::add(g, op::exp(g, z), op::scalar(g, 1e-3f))), op::neg(g, y));
    auto [fused, plain] = same_fused_and_not(g, {out, gelu}, {{"x", values(n, 3.f, 0)}, {"y", values(n, 2.f, 1)}});
    if (n >= 1000) CHECK(fused < plain);
  }
}

TEST_CASE("fuse: GG_FUSE=0 turns the pass off for executors built afterwards") {
  Graph g;
  NodeId x = op::input(g, "x", {64});
  NodeId out = op::exp(g, op::neg(g, x));
  ParamStore ps;
  CHECK(!Executor(g, {out}, ps).fusion().groups.empty());
  setenv("GG_FUSE", "0", 1);
  CHECK(Executor(g, {out}, ps).fusion().groups.empty());
  unsetenv("GG_FUSE");
  CHECK(Executor(g, {out}, ps, 0, {.fuse = false}).fusion().groups.empty());
}
