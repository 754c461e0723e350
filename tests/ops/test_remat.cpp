// Tests for ops/passes/remat.h: which values the pass copies, where it puts the copies, what it
// never copies, and that the rematerialized graph computes the same bits in less memory.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/passes/remat.h"

using namespace gg;

namespace {

constexpr std::int64_t kN = 32768;  // above the default size threshold

// `count` element-wise steps on x that do not read `v`: the forward pass between a value's
// early and late readers.
NodeId filler(Graph& g, NodeId x, int count) {
  for (int i = 0; i < count; ++i) x = op::add(g, x, op::scalar(g, float(i + 1)));
  return x;
}

std::vector<float> ramp(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = 0.001f * float(i % 1000) - 0.5f;
  return v;
}

// Runs `g` for `outs` on x = ramp with remat on or off; the outputs' values and the arena.
struct Run {
  std::vector<std::vector<float>> values;
  std::size_t arena = 0;
};
Run run(const Graph& g, const std::vector<NodeId>& outs, bool remat) {
  ParamStore ps;
  ps.init_missing(g, 3);
  Executor ex(g, outs, ps, 0, {.simplify = false, .fuse = false, .remat = remat});
  ex.set_input("x", std::span<const float>(ramp(kN)));
  ex.run();
  Run r;
  for (NodeId o : outs) r.values.push_back(ex.get(o).to_vector());
  r.arena = ex.arena_bytes();
  return r;
}

}  // namespace

TEST_CASE("remat: a value read early and late is copied right before its first late reader") {
  Graph g;
  NodeId x = op::input(g, "x", {kN});
  NodeId keep = op::exp(g, x);                      // alive to the end: read at the very end
  NodeId v = op::mul(g, keep, op::scalar(g, 2.f));  // read early and late
  NodeId early = op::sqrt(g, op::mul(g, v, v));
  NodeId mid = filler(g, early, 20);
  // A wide stretch in the middle, where the memory peaks: three values at once, and v.
  NodeId w1 = op::exp(g, mid), w2 = op::neg(g, mid), w3 = op::sqrt(g, mid);
  mid = op::add(g, op::add(g, w1, w2), w3);
  NodeId late = op::add(g, mid, v);                 // the late reader
  NodeId out = op::add(g, late, keep);
  Rematerialized r = rematerialize(g, {out, keep});  // keep is an output: alive to the end
  CHECK(r.stats.copied == 1);
  CHECK(r.stats.moved == 0);
  const Graph& h = r.graph;
  const NodeId late2 = r.map[std::size_t(late)];
  const NodeId copy = h.node(late2).inputs[1];
  CHECK(copy == late2 - 1);                         // emitted right before its reader
  CHECK(copy != r.map[std::size_t(v)]);
  CHECK(h.node(copy).op == OpKind::mul);
  CHECK(h.node(copy).inputs[0] == r.map[std::size_t(keep)]);
  // The original is read only by its early reader now.
  for (NodeId id = 0; id < h.size(); ++id)
    for (NodeId in : h.node(id).inputs)
      if (in == r.map[std::size_t(v)]) CHECK(id < r.map[std::size_t(mid)]);
  // Same bits, less memory.
  const Run off = run(g, {out, keep}, false), on = run(g, {out, keep}, true);
  CHECK(off.values == on.values);
  CHECK(on.arena < off.arena);
}

TEST_CASE("remat: a chain is copied back to values that are still alive, and an original with no early reader is dropped") {
  Graph g;
  NodeId x = op::input(g, "x", {kN});
  NodeId a = op::exp(g, x);
  NodeId b = op::mul(g, a, op::scalar(g, 0.5f));  // b, c: read only through d's copy
  NodeId c = op::tanh(g, b);
  NodeId d = op::add(g, c, op::scalar(g, 1.f));   // read early and late
  NodeId e = op::mul(g, d, d);
  NodeId mid = filler(g, e, 20);
  NodeId late = op::mul(g, mid, d);
  NodeId late2 = op::add(g, late, a);
  Rematerialized r = rematerialize(g, {late2, a});  // a is an output: alive to the end
  CHECK(r.stats.copied == 3);  // d, and c and b under it
  const Run off = run(g, {late2, a}, false), on = run(g, {late2, a}, true);
  CHECK(off.values == on.values);

  // A value read only late is moved there: nothing reads the original.
  Graph g2;
  NodeId x2 = op::input(g2, "x", {kN});
  NodeId s = op::sqrt(g2, op::exp(g2, x2));
  NodeId only_late = op::mul(g2, s, op::scalar(g2, 3.f));
  NodeId m2 = filler(g2, s, 20);
  NodeId o2 = op::add(g2, m2, only_late);
  Rematerialized r2 = rematerialize(g2, {o2});
  CHECK(r2.stats.moved == 1);
  CHECK(r2.map[std::size_t(only_late)] == -1);
  CHECK(run(g2, {o2}, false).values == run(g2, {o2}, true).values);
}

TEST_CASE("remat: a cheap value read late by element-wise readers far apart gets a copy before each") {
  Graph g;
  NodeId x = op::input(g, "x", {kN});
  NodeId keep = op::exp(g, x);                      // an output: alive to the end
  NodeId v = op::mul(g, keep, op::scalar(g, 2.f));  // one full-size input, alive at every reader
  NodeId mid = filler(g, op::sqrt(g, op::mul(g, v, v)), 20);
  NodeId late1 = op::add(g, mid, v);
  NodeId late2 = op::mul(g, filler(g, late1, 20), v);
  NodeId out = op::add(g, late2, keep);
  Rematerialized r = rematerialize(g, {out, keep});
  CHECK(r.stats.copied == 2);
  const Graph& h = r.graph;
  const NodeId l1 = r.map[std::size_t(late1)], l2 = r.map[std::size_t(late2)];
  const NodeId c1 = h.node(l1).inputs[1], c2 = h.node(l2).inputs[1];
  CHECK(c1 == l1 - 1);  // each emitted right before its reader: fused into the reader's group,
  CHECK(c2 == l2 - 1);  // never stored
  CHECK(c1 != c2);
  CHECK(h.node(c2).inputs[0] == r.map[std::size_t(keep)]);
  CHECK(run(g, {out, keep}, false).values == run(g, {out, keep}, true).values);
}

TEST_CASE("remat: late readers share one copy when one of them is not element-wise") {
  Graph g;
  NodeId x = op::input(g, "x", {kN});
  NodeId keep = op::exp(g, x);
  NodeId v = op::mul(g, keep, op::scalar(g, 2.f));
  NodeId mid = filler(g, op::sqrt(g, op::mul(g, v, v)), 20);
  NodeId total = op::sum(g, v, 0);  // a reduction reads the copy from memory: it is stored once
  NodeId late2 = op::mul(g, filler(g, op::add(g, mid, total), 20), v);
  NodeId out = op::add(g, late2, keep);
  Rematerialized r = rematerialize(g, {out, keep});
  CHECK(r.stats.copied == 1);
  const Graph& h = r.graph;
  CHECK(h.node(r.map[std::size_t(total)]).inputs[0] == h.node(r.map[std::size_t(late2)]).inputs[1]);
  CHECK(run(g, {out, keep}, false).values == run(g, {out, keep}, true).values);
}

TEST_CASE("remat: a value last read a few nodes before a copy needs it is kept alive for the copy") {
  Graph g;
  NodeId x = op::input(g, "x", {64, kN / 64});
  NodeId h = op::permute(g, x, {1, 0});         // not element-wise: never recomputed
  NodeId u = op::mul(g, h, op::scalar(g, 2.f));  // read early and late
  NodeId mid = filler(g, op::exp(g, u), 20);
  NodeId last_h = op::add(g, mid, h);            // h's last reader
  NodeId late_u = op::mul(g, op::neg(g, last_h), u);  // two nodes on
  Rematerialized r = rematerialize(g, {late_u});
  CHECK(r.stats.copied == 1);
  const NodeId copy = r.graph.node(r.map[std::size_t(late_u)]).inputs[1];
  CHECK(r.graph.node(copy).inputs[0] == r.map[std::size_t(h)]);  // reads h, kept alive until then
  CHECK(rematerialize(g, {late_u}, {.extend = 0}).stats.copied == 0);
  CHECK(run(g, {late_u}, false).values == run(g, {late_u}, true).values);
}

TEST_CASE("remat: never copies kept or checked values, small values, matmuls or chains too deep") {
  SUBCASE("a root or a checked node keeps its value") {
    Graph g;
    NodeId x = op::input(g, "x", {kN});
    NodeId v = op::exp(g, x);
    NodeId early = op::neg(g, v);
    NodeId late = op::add(g, filler(g, early, 20), v);
    CHECK(rematerialize(g, {late, v}).stats.copied == 0);
    g.add_check(v, "test", [](const View&) { return std::string(); });
    Rematerialized r = rematerialize(g, {late});
    CHECK(r.stats.copied == 0);
    REQUIRE(r.graph.checks().size() == 1);
    CHECK(r.graph.checks()[0].node == r.map[std::size_t(v)]);
  }
  SUBCASE("small values and short gaps") {
    Graph g;
    NodeId x = op::input(g, "x", {64});
    NodeId v = op::exp(g, x);
    NodeId late = op::add(g, filler(g, op::neg(g, v), 20), v);
    CHECK(rematerialize(g, {late}).stats.copied == 0);
    CHECK(rematerialize(g, {late}, {.min_elements = 1}).stats.copied == 1);
    CHECK(rematerialize(g, {late}, {.min_elements = 1, .min_gap = 100}).stats.copied == 0);
  }
  SUBCASE("a matmul is not recomputed, so what needs it stays") {
    Graph g;
    NodeId x = op::input(g, "x", {128, 256});
    NodeId w = op::param(g, "w", {256, 256}, Init{});
    NodeId y = op::matmul(g, x, w);  // dead after v
    NodeId v = op::exp(g, y);
    NodeId late = op::add(g, filler(g, op::neg(g, v), 20), v);
    CHECK(rematerialize(g, {late}).stats.copied == 0);
  }
  SUBCASE("depth") {
    Graph g;
    NodeId x = op::input(g, "x", {kN});
    NodeId v = op::exp(g, x);  // x: a leaf, always alive
    for (int i = 0; i < 6; ++i) v = op::exp(g, op::exp(g, v));
    NodeId late = op::add(g, filler(g, op::neg(g, v), 20), v);
    CHECK(rematerialize(g, {late}, {.max_depth = 4}).stats.copied == 0);
    CHECK(rematerialize(g, {late}, {.max_depth = 20}).stats.copied == 13);
  }
}
