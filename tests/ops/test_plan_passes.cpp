// Before/after tests of the planning passes, one switch at a time: a graph that gives every
// pass work (a repeated subexpression, attention's head split and merge around a causal
// mask, a product followed by an erf), planned with all passes on and with one of them off.
// The pass's own count says it ran (or not), and the values are the same bits either way.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/passes/fuse_compiled.h"
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
