// Tests of the planning passes on a graph that gives every pass work (a repeated
// subexpression, attention's head split and merge around a causal mask, a product followed
// by an erf). Each pass alone, as a function from one plan to the next (ops/passes/plan.h):
// what it adds, the invariants it keeps, and the plan unchanged when its switch is off.
// Then the whole executor, one switch at a time: the pass's own count says it ran (or not),
// and the values are the same bits either way.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/passes/fuse_compiled.h"
#include "ops/passes/plan.h"
#include "tests/test_util.h"

using namespace gg;

namespace {
constexpr std::int64_t B = 2, T = 16, H = 2, hs = 8, C = H * hs;

struct Model {
  Graph g;
  std::vector<NodeId> outs;
};

void build(Model& m) {
  Graph& g = m.g;
  auto split = [&](NodeId x) { return op::permute(g, op::reshape(g, x, {B, T, H, hs}), {0, 2, 1, 3}); };
  NodeId x = op::input(g, "x", {B, T, C});
  NodeId w = op::input(g, "w", {C, 2 * C});
  // The same exp twice (simplify merges them).
  NodeId q = split(op::tanh(g, x)), k = split(op::mul(g, op::exp(g, x), op::scalar(g, 0.5f))), v = split(op::exp(g, x));
  std::vector<float> causal(std::size_t(T * T));
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < T; ++j) causal[std::size_t(i * T + j)] = j <= i ? 1.f : 0.f;
  NodeId mask = op::constant(g, causal, {T, T});
  NodeId s = op::mul(g, op::matmul(g, q, k, false, true), op::scalar(g, 0.25f));
  s = op::where(g, mask, s, op::scalar(g, -INFINITY));
  NodeId e = op::exp(g, op::sub(g, s, op::max(g, s, -1, true)));
  NodeId y = op::matmul(g, op::div(g, e, op::sum(g, e, -1, true)), v);  // (B, H, T, hs)
  NodeId merged = op::reshape(g, op::permute(g, y, {0, 2, 1, 3}), {B * T, C});
  NodeId h = op::matmul(g, merged, w);  // (B * T, 2C), then an erf: the product's epilogue
  NodeId gelu = op::mul(g, h, op::add(g, op::erf(g, op::mul(g, h, op::scalar(g, 0.7f))), op::scalar(g, 1.f)));
  m.outs = {gelu, op::sum(g, op::exp(g, x), 0, false)};
}

// Runs the plan ex of m and returns its outputs' values.
std::vector<std::vector<float>> run(const Model& m, Executor& ex) {
  ex.set_input("x", std::span<const float>(test::wave(B * T * C, 1.f, 5, 0.37)));
  ex.set_input("w", std::span<const float>(test::wave(C * 2 * C, 0.3f, 7, 0.11)));
  ex.run();
  std::vector<std::vector<float>> v;
  for (NodeId o : m.outs) v.push_back(ex.get(o).to_vector());
  return v;
}

ExecutorOptions all_on() {
  ExecutorOptions o;
  for (const std::string& n : executor_switch_names()) set_executor_switch(o, n, true);
  o.compiled = true;
  o.detect_anomaly = false;
  return o;
}

// How much of its work a pass did in the plan ex.
std::size_t pass_count(const Executor& ex, const std::string& pass) {
  if (pass == "simplify" || pass == "remat") return ex.planned_graph().size();
  if (pass == "fuse") return ex.fusion().groups.size();
  if (pass == "slice") return ex.slice_chains();
  if (pass == "masked") return ex.masked_products() + ex.masked_groups();
  if (pass == "in-place") return ex.in_place_permutes();
  if (pass == "epilogue") return ex.epilogue_groups();
  std::size_t compiled = 0;
  for (const FusedGroup& grp : ex.fusion().groups) compiled += grp.compiled >= 0;
  return compiled;
}
}  // namespace

namespace {
// Every node of order after the nodes it reads.
bool topological(const Plan& p) {
  std::vector<char> seen(std::size_t(p.g().size()), 0);
  for (NodeId id : p.order) {
    for (NodeId in : p.g().node(id).inputs)
      if (!seen[std::size_t(in)]) return false;
    seen[std::size_t(id)] = 1;
  }
  return true;
}

// The plan before pass `name` runs, with every switch on.
Plan plan_before(const Graph& g, const std::vector<NodeId>& outs, const std::string& name) {
  Plan p = plan_start(g, outs, all_on());
  for (const PlanPass& pass : plan_passes()) {
    if (pass.name == name) return p;
    p = pass.run(std::move(p), all_on());
  }
  FAIL("no pass " << name);
  return p;
}

// The options with one pass's switch off.
ExecutorOptions off(const std::string& name) {
  ExecutorOptions o = all_on();
  if (name != "locals" && name != "memory") REQUIRE(set_executor_switch(o, name, false));
  return o;
}
}  // namespace

TEST_CASE("plan passes: the pipeline runs its passes in order, and make_plan is that pipeline") {
  Model m;
  build(m);
  std::vector<std::string> names;
  for (const PlanPass& pass : plan_passes()) names.emplace_back(pass.name);
  CHECK(names == std::vector<std::string>{"fuse", "slice", "locals", "in-place", "masked", "epilogue", "memory"});
  const Plan a = make_plan(m.g, m.outs, all_on());
  const Plan b = plan_before(m.g, m.outs, "memory");
  const Plan c = plan_memory(b, all_on());
  CHECK(a.order == c.order);
  CHECK(a.offset == c.offset);
  CHECK(a.arena_bytes == c.arena_bytes);
  CHECK_THROWS_WITH_AS(plan_start(m.g, {m.g.size()}, all_on()), doctest::Contains("is not a node of this graph"),
                       GraphError);
}

TEST_CASE("plan pass start: simplified, in topological order, with the given graph's ids mapped") {
  Model m;
  build(m);
  const Plan on = plan_start(m.g, m.outs, all_on());
  ExecutorOptions o = all_on();
  o.simplify = o.remat = false;
  const Plan raw = plan_start(m.g, m.outs, o);
  CHECK(&raw.g() == &m.g);
  CHECK(on.g().size() < m.g.size());  // the repeated exp merged
  CHECK(topological(on));
  CHECK(topological(raw));
  for (NodeId id = 0; id < m.g.size(); ++id) CHECK(raw.planned_id(id) == id);
  for (std::size_t k = 0; k < m.outs.size(); ++k) CHECK(on.outputs[k] == on.planned_id(m.outs[k]));
  CHECK(on.planned_id(-1) == -1);
}

TEST_CASE("plan pass fuse: groups run at their root, each member in one group") {
  Model m;
  build(m);
  const Plan before = plan_before(m.g, m.outs, "fuse");
  const Plan after = plan_fusion(before, all_on());
  REQUIRE(!after.fusion.groups.empty());
  for (std::size_t gi = 0; gi < after.fusion.groups.size(); ++gi)
    for (NodeId mem : after.fusion.groups[gi].members) {
      CHECK(after.group_at(mem) == int(gi));
      CHECK(after.step_of[std::size_t(mem)] <= after.step_of[std::size_t(after.fusion.groups[gi].root)]);
      CHECK(after.g().node(mem).op != OpKind::matmul);
    }
  CHECK(after.order == before.order);
  CHECK(plan_fusion(before, off("fuse")).fusion.groups.empty());
}

TEST_CASE("plan pass slice: chains of steps over one batch prefix, the order still topological") {
  Model m;
  build(m);
  const Plan before = plan_before(m.g, m.outs, "slice");
  const Plan after = plan_slices(before, all_on());
  REQUIRE(!after.chains.empty());
  CHECK(topological(after));
  std::vector<NodeId> a = before.order, b = after.order;  // a permutation of the same nodes
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  CHECK(a == b);
  for (std::size_t s = 0; s < after.order.size(); ++s) CHECK(after.step_of[std::size_t(after.order[s])] == int(s));
  for (const ChainSpan& c : after.chains) {
    CHECK(c.first < c.last);
    CHECK(c.slices == B * H);  // attention's (batch, head) slices
    CHECK(after.g().node(after.order[c.first]).op == OpKind::matmul);
  }
  const Plan same = plan_slices(before, off("slice"));
  CHECK(same.chains.empty());
  CHECK(same.order == before.order);
}

TEST_CASE("plan pass locals: a chain's scratch holds values only its own steps read, without overlap") {
  Model m;
  build(m);
  const Plan before = plan_before(m.g, m.outs, "locals");
  const Plan after = plan_locals(before, all_on());
  const Graph& g = after.g();
  std::size_t locals = 0;
  for (const ChainSpan& c : after.chains) {
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;  // [offset, end) in the scratch
    for (std::size_t s = c.first; s <= c.last; ++s) {
      const NodeId id = after.order[s];
      const std::int64_t off = after.local_off[std::size_t(id)];
      if (off < 0) continue;
      ++locals;
      spans.emplace_back(off, off + numel(g.node(id).shape) / c.slices * 4);
      CHECK(std::size_t(spans.back().second) <= c.scratch_bytes);
      for (NodeId r : after.order)  // every reader inside the chain
        for (NodeId in : g.node(r).inputs)
          if (in == id) {
            const int gi = after.group_at(r);
            const int at = after.step_of[std::size_t(gi >= 0 ? after.fusion.groups[std::size_t(gi)].root : r)];
            CHECK(at >= int(c.first));
            CHECK(at <= int(c.last));
          }
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t k = 1; k < spans.size(); ++k) CHECK(spans[k - 1].second <= spans[k].first);
  }
  CHECK(locals > 0);  // attention's scores and weights
}

TEST_CASE("plan pass in-place: the permutes the chains' products do without, read from or written into") {
  Model m;
  build(m);
  const Plan before = plan_before(m.g, m.outs, "in-place");
  const Plan after = plan_in_place(before, all_on());
  const Graph& g = after.g();
  std::size_t reads = 0, writes = 0;
  for (NodeId id : after.order) {
    const InPlace& ip = after.in_place[std::size_t(id)];
    if (ip.to < 0) continue;
    if (ip.writes) {  // a product writing into the permute that reads it
      ++writes;
      CHECK(g.node(id).op == OpKind::matmul);
      CHECK(g.node(ip.to).op == OpKind::permute);
      CHECK(g.node(ip.to).inputs[0] == id);
      CHECK(after.in_place_step[std::size_t(ip.to)] == 1);
    } else {  // a permute whose readers read its input
      ++reads;
      CHECK(g.node(id).op == OpKind::permute);
      CHECK(ip.to == g.node(id).inputs[0]);
      CHECK(after.in_place_step[std::size_t(id)] == 1);
    }
    CHECK(ip.axis_stride.back() == 1);
  }
  CHECK(reads > 0);   // the head split of q, k and v
  CHECK(writes > 0);  // the head merge
  const Plan same = plan_in_place(before, off("in-place"));
  CHECK(std::count(same.in_place_step.begin(), same.in_place_step.end(), 1) == 0);
}

TEST_CASE("plan pass masked: the chains' products that skip the causal mask's zeros") {
  Model m;
  build(m);
  const Plan before = plan_before(m.g, m.outs, "masked");
  const Plan after = plan_masked(before, all_on());
  std::size_t skipping = 0;
  for (std::size_t id = 0; id < after.masked.products.size(); ++id)
    if (after.masked.products[id].kind != MaskedProduct::none) {
      ++skipping;
      CHECK(after.g().node(NodeId(id)).op == OpKind::matmul);
      CHECK(after.g().node(after.masked.products[id].mask).op == OpKind::constant);
    }
  CHECK(skipping > 0);  // weights @ v
  CHECK(plan_masked(before, off("masked")).masked.products.empty());
}

TEST_CASE("plan pass epilogue: a product's next step, a group with an erf reading it row for row") {
  Model m;
  build(m);
  const Plan before = plan_before(m.g, m.outs, "epilogue");
  const Plan after = plan_epilogues(before, all_on());
  const Graph& g = after.g();
  std::size_t found = 0;
  for (NodeId id : after.order)
    if (const NodeId r = after.epilogue_for[std::size_t(id)]; r >= 0) {
      ++found;
      CHECK(g.node(id).op == OpKind::matmul);
      const int gi = after.group_at(r);
      REQUIRE(gi >= 0);
      CHECK(after.fusion.groups[std::size_t(gi)].root == r);
      CHECK(after.step_of[std::size_t(r)] > after.step_of[std::size_t(id)]);
    }
  CHECK(found == 1);  // the GELU after the last product
  const Plan same = plan_epilogues(before, off("epilogue"));
  CHECK(std::count_if(same.epilogue_for.begin(), same.epilogue_for.end(), [](NodeId r) { return r >= 0; }) == 0);
}

TEST_CASE("plan pass memory: no two values alive at once share a byte of the arena") {
  Model m;
  build(m);
  for (const bool chains : {false, true}) {
    INFO("chains " << chains);
    ExecutorOptions o = all_on();
    o.slice = chains;  // without chains, the lifetimes below are the whole story
    o.epilogue = false;
    const Plan p = make_plan(m.g, m.outs, o);
    const Graph& g = p.g();
    const std::size_t N = std::size_t(g.size());
    // Lifetimes, found here independently of the pass: from a value's position to the last
    // step reading it or a view of it (a group member reads at its root's step; a chain's
    // inputs are read until its end); outputs to the end.
    auto runs_at = [&](NodeId r) {
      const int gi = p.group_at(r);
      int at = p.step_of[std::size_t(gi >= 0 ? p.fusion.groups[std::size_t(gi)].root : r)];
      for (const ChainSpan& c : p.chains)
        if (at >= int(c.first) && at <= int(c.last)) at = int(c.last);
      return at;
    };
    std::vector<int> last(N, -1);
    for (NodeId r : p.order)
      for (NodeId in : g.node(r).inputs) last[std::size_t(in)] = std::max(last[std::size_t(in)], runs_at(r));
    for (NodeId o2 : p.outputs) last[std::size_t(o2)] = INT_MAX;
    for (std::size_t s = p.order.size(); s-- > 0;) {  // a view keeps its buffer alive
      const NodeId id = p.order[s], r = p.root[std::size_t(id)];
      if (r != id) last[std::size_t(r)] = std::max({last[std::size_t(r)], last[std::size_t(id)], int(s)});
    }
    struct Life {
      int from, to;
      std::size_t off, end;
    };
    std::vector<Life> lives;
    for (NodeId id : p.order) {
      if (op_bound_leaf(g.node(id).op) || p.root[std::size_t(id)] != id || p.off_arena(id)) continue;
      const std::size_t bytes = std::size_t(numel(g.node(id).shape)) * 4;
      const int from = p.step_of[std::size_t(id)];
      lives.push_back({from, std::max(from, last[std::size_t(id)]), p.offset[std::size_t(id)], p.offset[std::size_t(id)] + bytes});
      CHECK(lives.back().end <= p.arena_bytes);
    }
    REQUIRE(lives.size() >= 5);
    std::size_t overlaps = 0;
    for (std::size_t a = 0; a < lives.size(); ++a)
      for (std::size_t b = a + 1; b < lives.size(); ++b) {
        const Life &x = lives[a], &y = lives[b];
        const bool together = x.from <= y.to && y.from <= x.to;
        overlaps += together && x.off < y.end && y.off < x.end && x.end > x.off && y.end > y.off;
      }
    CHECK(overlaps == 0);
    CHECK(p.arena_bytes < p.unshared_bytes);  // reuse happened
  }
}

TEST_CASE("plan passes: each switch off changes only its pass's work, never a value") {
  Model m;
  build(m);
  ParamStore ps;
  Executor on(m.g, m.outs, ps, 0, all_on());
  const std::vector<std::vector<float>> want = run(m, on);
  std::vector<std::string> passes = executor_switch_names();
  passes.push_back("compiled");
  for (const std::string& pass : passes) {
    INFO("pass " << pass);
    ExecutorOptions o = all_on();
    if (pass == "compiled") o.compiled = false;
    else REQUIRE(set_executor_switch(o, pass, false));
    Executor off(m.g, m.outs, ps, 0, o);
    const std::size_t with = pass_count(on, pass), without = pass_count(off, pass);
    if (pass == "simplify") CHECK(with < without);  // the repeated exp merged
    else if (pass == "remat") CHECK(with >= without);  // copies, where a late reader is worth one
    else if (pass == "compiled" && compiled_count() == 0) CHECK(with == 0);  // a scalar build
    else CHECK(with > 0);
    if (pass != "simplify" && pass != "remat") CHECK(without == 0);
    const std::vector<std::vector<float>> got = run(m, off);
    for (std::size_t k = 0; k < want.size(); ++k) {
      INFO("output " << k);
      REQUIRE(got[k].size() == want[k].size());
      CHECK(std::memcmp(got[k].data(), want[k].data(), want[k].size() * 4) == 0);
    }
  }
}

TEST_CASE("plan passes: anomaly mode and timing skips run the same plan's steps") {
  Model m;
  build(m);
  ParamStore ps;
  Executor ex(m.g, m.outs, ps, 0, all_on());
  const std::vector<std::vector<float>> want = run(m, ex);
  ex.set_detect_anomaly(true);  // every step apart: chains, in-place permutes and epilogues too
  CHECK(run(m, ex) == want);
  ex.set_detect_anomaly(false);
  for (const auto& [name, kinds] : skip_work_names()) {
    INFO("without " << name);
    ex.set_skip_for_timing(kinds);
    run(m, ex);  // values wrong by design; it runs, and runs its checks never
  }
  ex.set_skip_for_timing(0);
  ex.set_profile(true);
  CHECK(run(m, ex) == want);
  CHECK(ex.profile_steps_report(100).find("sliced chain") != std::string::npos);
  CHECK(ex.profile_report().find("fused") != std::string::npos);
}
