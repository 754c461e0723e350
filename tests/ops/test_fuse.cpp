// Tests for ops/passes/fuse.cpp: which nodes the element-wise fusion pass groups (chains of one
// shape with one-element operands; never a value read twice, an output, a checked node, or
// another shape), and the executor's switch: with fusion on, every output equals the
// unfused plan's bit for bit (each member runs its op's own element function on the same
// SIMD/scalar split), on awkward sizes and at 1 and 2 threads, with a smaller arena.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/passes/fuse.h"
#include "ops/passes/fuse_compiled.h"
#include "ops/cpu/parallel.h"
#include "tests/test_util.h"

using namespace gg;

namespace {


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

TEST_CASE("fuse: a value read twice inside its group joins it; outputs and values read outside end a group") {
  Graph g;
  NodeId x = op::input(g, "x", {4, 8});
  NodeId row = op::input(g, "row", {8});
  NodeId e = op::exp(g, x);
  NodeId twice = op::add(g, op::mul(g, e, e), e);  // e read by two members: interior
  NodeId kept = op::tanh(g, twice);                // an output: a root
  NodeId after = op::neg(g, kept);
  NodeId bcast = op::add(g, after, row);           // a (8) row operand: a group input
  NodeId other = op::exp(g, row);                  // another row space: never with x's
  NodeId out = op::mul(g, bcast, other);
  Fusion f = fuse_elementwise(g, ancestors(g, {kept, out}), {kept, out});
  REQUIRE(f.groups.size() == 2);
  CHECK(f.groups[0].members == std::vector<NodeId>{e, g.node(twice).inputs[0], twice, kept});
  CHECK(f.groups[0].flat);
  CHECK(f.groups[1].members == std::vector<NodeId>{after, bcast, out});
  CHECK(!f.groups[1].flat);  // a broadcast operand: run row by row
  CHECK(f.groups[1].inputs == std::vector<NodeId>{kept, row, other});
  CHECK(f.group_of[std::size_t(other)] == -1);  // alone: its reader works over (4, 8) rows
}

TEST_CASE("fuse: softmax, its row statistics and a mask are one group storing only the result") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3, 5, 5});
  NodeId mask = op::input(g, "mask", {1, 1, 5, 5});
  NodeId masked = op::where(g, mask, x, op::scalar(g, -INFINITY));
  NodeId m = op::max(g, masked, -1, true);
  NodeId e = op::exp(g, op::sub(g, masked, m));  // masked read twice, both in the group
  NodeId p = op::div(g, e, op::sum(g, e, -1, true));
  Fusion f = fuse_elementwise(g, ancestors(g, {p}), {p});
  REQUIRE(f.groups.size() == 1);
  const FusedGroup& grp = f.groups[0];
  CHECK(grp.root == p);
  CHECK(grp.members.size() == 6);  // where, max, sub, exp, sum, div
  CHECK(grp.lead == Shape{2, 3, 5});
  CHECK(grp.n == 5);
  CHECK(grp.inputs.size() == 3);  // mask, x, the scalar
  // The mask (1, 1, 5, 5) steps over the third lead dim only; x has whole rows.
  CHECK(grp.reads[0].lead_stride == std::vector<std::int64_t>{0, 0, 5});
  CHECK(grp.reads[0].inner == 1);
  CHECK(grp.reads[1].lead_stride == std::vector<std::int64_t>{75, 25, 5});
  CHECK(grp.reads[2].inner == 0);
  CHECK(grp.reads[0].step == -1);  // read through per-row offsets
  CHECK(grp.reads[1].step == 5);   // row r at r * 5
  CHECK(grp.reads[2].step == 0);   // one value for every row
  CHECK(grp.program[1].op == OpKind::max);
  CHECK(grp.program[1].reduced);
  // Every member operand is an earlier member: nothing reads a buffer not yet computed.
  for (std::size_t k = 0; k < grp.program.size(); ++k) {
    const int operands[3] = {grp.program[k].a, grp.program[k].b, grp.program[k].c};
    for (int i = 0; i < op_arity(grp.program[k].op); ++i) CHECK(operands[i] < int(k));
  }
}

TEST_CASE("fuse: sum without keepdim, rows over the limit and other lead dims start new groups") {
  Graph g;
  NodeId x = op::input(g, "x", {3, 9000});
  NodeId y = op::input(g, "y", {3, 9000});
  NodeId a = op::exp(g, op::add(g, x, y));               // flat: the rows are too long for a row group
  NodeId s = op::sum(g, op::mul(g, a, a), -1, true);      // the reduction is not fused
  NodeId z = op::input(g, "z", {4, 6});
  NodeId r = op::sum(g, op::exp(g, z), -1, false);        // no keepdim: not fused
  NodeId zt = op::permute(g, z, {1, 0});
  NodeId t = op::mul(g, op::neg(g, zt), op::exp(g, zt));
  Fusion f = fuse_elementwise(g, ancestors(g, {s, r, t}), {s, r, t});
  REQUIRE(f.groups.size() == 2);
  CHECK(f.groups[0].flat);
  CHECK(f.groups[0].members.size() == 3);  // add, exp, mul
  CHECK(f.group_of[std::size_t(s)] == -1);
  CHECK(f.group_of[std::size_t(r)] == -1);
  CHECK(f.group_of[std::size_t(g.node(r).inputs[0])] == -1);
  CHECK(f.groups[1].root == t);
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
    auto [fused, plain] =
        same_fused_and_not(g, {out, gelu}, {{"x", test::wave(n, 3.f, 0, 0.73)}, {"y", test::wave(n, 2.f, 1, 0.73)}});
    if (n >= 1000) CHECK(fused < plain);
  }
}

TEST_CASE("fuse: row groups give the unfused values bit for bit: every op and broadcast form, odd row lengths") {
  // n = 7 and 65 are not multiples of the SIMD width: transcendental members run over
  // blocks of rows starting on register boundaries; 8 and 64 are.
  for (std::int64_t n : {7, 8, 64, 65}) {
    for (bool transcendental : {false, true}) {
      CAPTURE(n);
      CAPTURE(transcendental);
      Graph g;
      NodeId x = op::input(g, "x", {2, 3, 5, n});
      NodeId y = op::input(g, "y", {2, 3, 5, n});
      NodeId w = op::input(g, "w", {n});           // a weight row
      NodeId stat = op::input(g, "stat", {2, 3, 5, 1});  // a row statistic
      NodeId mask = op::input(g, "mask", {1, 1, 5, n});  // a mask over the last two dims
      NodeId bmask = op::input(g, "bmask", {2, 1, 1, n}); // a mask per batch
      NodeId half = op::scalar(g, 0.5f);
      auto un = [&](NodeId v) { return transcendental ? op::tanh(g, op::exp(g, op::neg(g, v))) : op::sqrt(g, op::mul(g, v, v)); };
      // Full members against each operand form, both sides.
      NodeId a = op::add(g, op::mul(g, x, w), op::sub(g, stat, y));
      NodeId b = op::div(g, op::maximum(g, a, half), op::add(g, op::scalar(g, 2.f), op::mul(g, w, w)));
      NodeId c = op::where(g, mask, b, op::neg(g, y));
      NodeId d = op::where(g, op::compare(g, bmask, half, Cmp::gt), c, stat);
      NodeId e = op::mul(g, un(d), op::compare(g, x, y, Cmp::le));
      // Row reductions, reduced members, a transcendental on a reduced member, expand.
      NodeId mx = op::max(g, e, -1, true);
      NodeId sm = op::sum(g, op::sub(g, e, mx), -1, true);
      NodeId red = transcendental ? op::log(g, op::add(g, op::exp(g, sm), stat)) : op::sub(g, op::mul(g, sm, sm), stat);
      NodeId wide = op::expand(g, red, {2, 3, 5, n});
      NodeId out = op::sub(g, op::mul(g, wide, e), op::expand(g, half, {2, 3, 5, n}));
      NodeId rowsum = op::sum(g, op::mul(g, out, x), -1, true);  // a reduced root
      Fusion f = fuse_elementwise(g, ancestors(g, {out, rowsum}), {out, rowsum});
      // (n): 2 + w * w; the (2, 3, 5, n) row space up to `out` (bmask > 0.5, of shape
      // (2, 1, 1, n), is an input: alone, not a group); rowsum's mul and sum.
      REQUIRE(f.groups.size() == 3);
      CHECK(f.groups[0].lead == Shape{});
      CHECK(f.groups[1].root == out);
      CHECK(f.groups[1].members.size() == (transcendental ? 23u : 21u));
      CHECK(!f.groups[1].flat);
      CHECK(f.groups[2].members.size() == 2);
      const std::int64_t N = 2 * 3 * 5 * n;
      same_fused_and_not(g, {out, rowsum},
                         {{"x", test::wave(N, 3.f, 0, 0.73)},
                          {"y", test::wave(N, 2.f, 1, 0.73)},
                          {"w", test::wave(n, 1.5f, 2, 0.73)},
                          {"stat", test::wave(30, 1.f, 3, 0.73)},
                          {"mask", test::wave(5 * n, 1.f, 4, 0.73)},
                          {"bmask", test::wave(2 * n, 1.f, 5, 0.73)}});
    }
  }
}

TEST_CASE("fuse: groups are convex and store one value: no path leaves a group and comes back") {
  Graph g;
  NodeId x = op::input(g, "x", {6, 10});
  NodeId m = op::max(g, x, -1, true);
  NodeId e = op::exp(g, op::sub(g, x, m));
  NodeId s = op::sum(g, e, -1, true);
  NodeId outside = op::matmul(g, e, op::input(g, "k", {10, 10}));  // e read outside: a root
  NodeId p = op::div(g, op::add(g, e, outside), s);
  NodeId q = op::mul(g, p, op::exp(g, p));
  const std::vector<NodeId> order = ancestors(g, {q});
  Fusion f = fuse_elementwise(g, order, {q});
  REQUIRE(!f.groups.empty());
  CHECK(f.group_of[std::size_t(e)] >= 0);
  CHECK(f.groups[std::size_t(f.group_of[std::size_t(e)])].root == e);
  // Forward reachability from each group's members through non-members must not reach a member.
  for (std::size_t gi = 0; gi < f.groups.size(); ++gi) {
    std::vector<char> seen(std::size_t(g.size()), 0);
    for (NodeId id : order) {
      bool from_group = false;
      for (NodeId in : g.node(id).inputs) from_group = from_group || seen[std::size_t(in)] || f.group_of[std::size_t(in)] == int(gi);
      if (f.group_of[std::size_t(id)] == int(gi)) {
        CHECK(!std::any_of(g.node(id).inputs.begin(), g.node(id).inputs.end(), [&](NodeId in) { return bool(seen[std::size_t(in)]); }));
      } else if (from_group) {
        seen[std::size_t(id)] = 1;
      }
    }
    // Only the root and stored members are read outside the group, after the root.
    for (NodeId id : order)
      for (NodeId in : g.node(id).inputs)
        if (f.group_of[std::size_t(in)] == int(gi) && f.group_of[std::size_t(id)] != int(gi)) {
          CHECK((in == f.groups[gi].root || std::count(f.groups[gi].stored.begin(), f.groups[gi].stored.end(), in) == 1));
          CHECK(id > f.groups[gi].root);
        }
  }
  same_fused_and_not(g, {q}, {{"x", test::wave(60, 2.f, 0, 0.73)}, {"k", test::wave(100, 0.3f, 1, 0.73)}});
}

TEST_CASE("fuse: a group's inputs live until its root runs, however early their member reader sits") {
  Graph g;
  NodeId x = op::input(g, "x", {8, 64});
  NodeId k = op::input(g, "k", {64, 64});
  NodeId t = op::matmul(g, x, k);                         // stored: a group input
  NodeId m = op::exp(g, t);                               // t's only reader, a member
  NodeId u = op::matmul(g, op::neg(g, x), k);             // planned after m, as large as t
  NodeId root = op::add(g, m, op::max(g, u, -1, true));   // the group's step: reads t here
  Fusion f = fuse_elementwise(g, ancestors(g, {root}), {root});
  REQUIRE(f.groups.size() == 1);
  CHECK(f.groups[0].members == std::vector<NodeId>{m, g.node(root).inputs[1], root});
  // Were t freed after m's place in the order, u would take its buffer before the group runs.
  same_fused_and_not(g, {root}, {{"x", test::wave(8 * 64, 1.f, 0, 0.73)}, {"k", test::wave(64 * 64, 0.2f, 1, 0.73)}});
}

TEST_CASE("fuse: a member read after its group's root is stored too; one read before the root ends the group") {
  Graph g;
  NodeId x = op::input(g, "x", {6, 20});
  NodeId k = op::input(g, "k", {20, 20});
  NodeId m = op::max(g, x, -1, true);
  NodeId e = op::exp(g, op::sub(g, x, m));
  NodeId s = op::sum(g, e, -1, true);
  NodeId p = op::div(g, e, s);                            // the root
  NodeId back = op::mul(g, op::matmul(g, e, k), m);       // reads e and m after the root
  const std::vector<NodeId> order = ancestors(g, {p, back});
  Fusion f = fuse_elementwise(g, order, {p, back});
  REQUIRE(f.groups.size() == 1);
  CHECK(f.groups[0].members.size() == 5);  // max, sub, exp, sum, div
  CHECK(f.groups[0].stored == std::vector<NodeId>{m, e});
  CHECK(f.groups[0].program[0].stored);
  CHECK(!f.groups[0].program[1].stored);
  same_fused_and_not(g, {p, back}, {{"x", test::wave(120, 3.f, 0, 0.73)}, {"k", test::wave(400, 0.5f, 1, 0.73)}});
  // Read before the root (the matmul comes first in the order): e cannot join p's group.
  Graph h;
  NodeId hx = op::input(h, "x", {6, 20});
  NodeId he = op::exp(h, hx);
  NodeId early = op::matmul(h, he, op::input(h, "k", {20, 20}));
  NodeId hp = op::div(h, he, op::add(h, early, op::sum(h, he, -1, true)));
  Fusion fh = fuse_elementwise(h, ancestors(h, {hp}), {hp});
  CHECK(fh.group_of[std::size_t(he)] == -1);
  CHECK(fh.group_of[std::size_t(hp)] >= 0);
}

TEST_CASE("fuse: GG_FUSE=0 turns the pass off: the environment's config, and the option it sets") {
  Graph g;
  NodeId x = op::input(g, "x", {64});
  NodeId out = op::exp(g, op::neg(g, x));
  ParamStore ps;
  CHECK(!Executor(g, {out}, ps, 0, {.fuse = true}).fusion().groups.empty());
  setenv("GG_FUSE", "0", 1);
  const EnvConfig env = read_env_config();
  unsetenv("GG_FUSE");
  CHECK(!env.fuse);
  CHECK(read_env_config().fuse);
  CHECK(Executor(g, {out}, ps, 0, {.fuse = env.fuse}).fusion().groups.empty());
}

TEST_CASE("fuse: a lone row division is a group of one where a compiled program runs it; other lone ops are not") {
  Graph g;
  NodeId e = op::input(g, "e", {3, 5, 64});
  NodeId s = op::input(g, "s", {3, 5, 1});
  NodeId q = op::div(g, e, s);           // a row divided by its row value: the "FR" program
  NodeId t = op::mul(g, e, e);           // a lone flat product: its own kernel
  NodeId u = op::sub(g, e, s);           // a lone row op with no compiled program: its own kernel
  const std::vector<NodeId> outs = {q, t, u};
  Fusion f = fuse_elementwise(g, ancestors(g, outs), outs);
  if (compiled_by_default() && compiled_count() > 0) {  // compiled kernels (not a scalar build)
    REQUIRE(f.groups.size() == 1);
    CHECK(f.groups[0].root == q);
    CHECK(f.groups[0].members == std::vector<NodeId>{q});
    CHECK(f.groups[0].compiled >= 0);
    CHECK(!f.groups[0].flat);
  } else {
    CHECK(f.groups.empty());
  }
  CHECK(f.group_of[std::size_t(t)] == -1);
  CHECK(f.group_of[std::size_t(u)] == -1);
  // The group gives the division kernel's bits, at 1 and 2 threads.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(0.5f, 2.f);
  std::vector<float> ev(3 * 5 * 64), sv(3 * 5);
  for (float& v : ev) v = dist(rng);
  for (float& v : sv) v = dist(rng);
  ParamStore ps;
  std::vector<float> first;
  const int before = num_threads();
  for (int threads : {1, 2})
    for (bool fuse : {false, true}) {
      set_num_threads(threads);
      Executor ex(g, {q}, ps, 1, {.fuse = fuse});
      ex.set_input("e", ev);
      ex.set_input("s", sv);
      ex.run();
      const std::vector<float> got = ex.get(q).to_vector();
      if (first.empty()) first = got;
      CHECK(std::memcmp(got.data(), first.data(), first.size() * 4) == 0);
    }
  set_num_threads(before);
}

TEST_CASE("epilogue: a GELU after a product runs on the product's row blocks, with the separate steps' bits") {
  // x = exp(-in) lives in the arena and is last read by the product: the GELU's values,
  // written while the product still reads x for other rows, must not land on x.
  Graph g;
  NodeId in = op::input(g, "in", {2, 48, 512});
  NodeId x = op::exp(g, op::neg(g, in));
  NodeId w = op::param(g, "w", {128, 512}, Init{Init::normal, 0.f, 0.05f});
  NodeId b = op::param(g, "b", {128}, Init{Init::normal, 0.f, 0.5f});
  NodeId h = op::add(g, op::matmul(g, x, w, false, true), b);  // (2, 48, 128)
  NodeId y = op::mul(g, op::mul(g, h, op::scalar(g, 0.5f)),
                     op::add(g, op::scalar(g, 1.f), op::erf(g, op::mul(g, h, op::scalar(g, 0.70710678f)))));
  // A group with no transcendental member is no epilogue (its product's rows stay in cache
  // between the steps anyway): t = 2 p + 1 after another product p.
  NodeId w2 = op::param(g, "w2", {128, 512}, Init{Init::normal, 0.f, 0.05f});
  NodeId p = op::matmul(g, in, w2, false, true);
  NodeId t = op::add(g, op::mul(g, p, op::scalar(g, 2.f)), op::scalar(g, 1.f));
  ParamStore ps;
  ps.init_missing(g, 7);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> iv(2 * 48 * 512);
  for (float& v : iv) v = dist(rng);
  std::vector<std::vector<float>> first;
  const int before = num_threads();
  for (int threads : {1, 2})
    for (bool epilogue : {false, true})
      for (bool anomaly : {false, true}) {
        CAPTURE(threads);
        CAPTURE(epilogue);
        CAPTURE(anomaly);
        set_num_threads(threads);
        Executor ex(g, {y, t}, ps, 1, {.epilogue = epilogue});
        CHECK(ex.epilogue_groups() == (epilogue ? 1u : 0u));  // the GELU, not 2 p + 1
        ex.set_detect_anomaly(anomaly);
        ex.set_input("in", iv);
        // Many runs: on 2 threads a value landing on x would show as a race, most runs.
        int differ = 0;
        for (int run = 0; run < 20; ++run) {
          ex.run();
          for (NodeId o : {y, t}) {
            const std::vector<float> got = ex.get(o).to_vector();
            if (first.size() < 2) first.push_back(got);
            const std::vector<float>& want = first[o == y ? 0 : 1];
            differ += std::memcmp(got.data(), want.data(), want.size() * 4) != 0;
          }
        }
        CHECK(differ == 0);
      }
  set_num_threads(before);
}
