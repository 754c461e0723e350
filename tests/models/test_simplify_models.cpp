// The simplification pass (ops/simplify.h) changes no result: the reference GPT and a few
// composites give the same loss, outputs and every parameter's gradient with the pass on
// and off, bit for bit (the pass folds constants with the kernels the executor would run
// and never reassociates), and the pass leaves no common subexpression behind.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "models/gpt.h"
#include "ops/simplify.h"

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

Tensor tokens(std::int64_t B, std::int64_t T, std::int32_t V, int salt) {
  Tensor t({B, T}, DType::i32);
  for (std::int64_t i = 0; i < B * T; ++i) t.i()[i] = std::int32_t((i * 7 + salt) % V);
  return t;
}

}  // namespace

TEST_CASE("simplify: the reference GPT's loss, logits and gradients are unchanged by the pass") {
  for (const char* config : {"tests/golden/ref_basic.config.json", "tests/golden/ref_odd.config.json",
                             "tests/golden/ref_sinus.config.json"})
    for (bool training : {false, true}) {  // training: dropout's random nodes, drawn in the same order
      CAPTURE(config);
      CAPTURE(training);
      models::GptConfig c = models::load_gpt_config(config);
      if (training) c.dropout = 0.1f;
      Graph g;
      models::Gpt m = models::build_gpt(g, c, 2, c.block_size, true, training);
      std::vector<NodeId> wrt, outs{m.loss.id, m.logits.id};
      for (auto& p : m.params) wrt.push_back(p.id);
      for (NodeId d : gg::grad(g, m.loss.id, wrt)) outs.push_back(d);
      auto [off, on] = same_off_and_on(g, outs, {{"tokens", tokens(2, c.block_size, std::int32_t(c.vocab_size), 0)},
                                                 {"targets", tokens(2, c.block_size, std::int32_t(c.vocab_size), 3)}});
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
  auto [off, on] = same_off_and_on(g, outs, {{"x", xv}, {"y", tokens(2, 5, 6, 1)}});
  CHECK(on < off);
}
