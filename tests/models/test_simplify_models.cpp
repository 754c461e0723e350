// The simplification pass (ops/passes/simplify.h) changes no result: the reference GPT and a few
// composites give the same loss, outputs and every parameter's gradient with the pass on
// and off, bit for bit (the pass folds constants with the kernels the executor would run
// and never reassociates), and the pass leaves no common subexpression behind.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "models/gpt.h"
#include "ops/passes/simplify.h"
#include "tests/models/gpt_case.h"

using namespace gg;
using namespace gg::dsl;

namespace {

// Runs `outs` with the pass off and on on the same weights, inputs and seed; every value
// must be equal bit for bit. Returns the two node counts planned.
std::pair<std::size_t, std::size_t> same_off_and_on(const Graph& g, const std::vector<NodeId>& outs,
                                                    const std::vector<std::pair<std::string, Tensor>>& feeds) {
  ParamStore ps;
  ps.init_missing(g, 11);
  Executor off(g, outs, ps, 5, {.simplify = false}), on(g, outs, ps, 5, {.simplify = true});
  for (Executor* ex : {&off, &on}) {
    for (const auto& [name, t] : feeds) ex->set_input(name, t);
    ex->run();
  }
  for (NodeId o : outs) {
    const Tensor a = off.get(o), b = on.get(o);
    REQUIRE(a.shape() == b.shape());
    INFO("output %" << o << " '" << g.node(o).name << "'");
    CHECK(std::memcmp(a.data(), b.data(), std::size_t(a.numel()) * 4) == 0);
  }
  return {off.order().size(), on.order().size()};
}

using gg::test::pattern_tokens;

}  // namespace

TEST_CASE("simplify: the reference GPT's loss, logits and gradients are unchanged by the pass") {
  for (const char* config : gg::test::kGoldenConfigs)
    for (bool training : {false, true}) {
      CAPTURE(config);
      CAPTURE(training);
      const auto gpt = gg::test::gpt_case(config, training);
      const Graph& g = gpt->g;
      const std::vector<NodeId>& outs = gpt->outs;
      auto [off, on] = same_off_and_on(g, outs, gpt->feeds);
      CHECK(on < off);
      // Nothing left to merge: the pass reaches its fixed point in one walk.
      Simplified s = simplify(g, outs);
      Simplified again = simplify(s.graph, s.roots);
      CHECK(s.stats.merged > 0);
      CHECK(again.stats.merged == 0);
      CHECK(again.stats.after == s.stats.after);
    }
}

TEST_CASE("simplify: composites give the same values and gradients with the pass on and off") {
  Graph g;
  Expr x = input(g, "x", {2, 5, 8});
  Expr y = input(g, "y", {2, 5}, DType::i32);
  BlockOptions opt;
  opt.n_head = 2;
  opt.attn.mask = causal_mask(g, 5);
  Expr h = transformer_block(x, "block", opt);
  Expr n = layer_norm(h, "norm");
  Expr sm = softmax(gelu(n, GeluKind::tanh));
  Expr logits = linear(n, 6, "head");
  Expr loss = cross_entropy(logits, y) + mean_all(sm * sm);
  std::vector<Expr> params;
  for (const Node& node : g.nodes())
    if (node.is_param()) params.push_back(Expr{&g, g.find(node.name, OpKind::param)});
  std::vector<NodeId> outs{loss.id, sm.id};
  for (const Expr& d : gg::dsl::grad(loss, params)) outs.push_back(d.id);
  Tensor xv({2, 5, 8});
  for (std::int64_t i = 0; i < xv.numel(); ++i) xv.f()[i] = float((i * 37) % 17) / 8.f - 1.f;
  auto [off, on] = same_off_and_on(g, outs, {{"x", xv}, {"y", pattern_tokens(2, 5, 6, 1)}});
  CHECK(on < off);
}
