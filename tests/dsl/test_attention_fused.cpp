// The fused attention (ops/primitives/attention.cpp, taken by dsl::attention): values and
// the gradients of q, k and v equal the composition's (AttentionOptions::fused = false)
// within f32 round-off, for every mask the rule allows, cross-attention, head sizes 1 to 64
// and odd lengths; the weights are neither planned nor computed unless read; the switch,
// dropout and second derivatives take the composition or refuse by name.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "autodiff/grad_stats.h"
#include "dsl/nn.h"
#include "ops/cpu/threads.h"
#include "ops/runtime/config.h"
#include "tests/dsl/dsl_test_util.h"

using namespace gg;
using namespace gg::dsl;

namespace {

// One attention over inputs q (..., Tq, hs), k (..., Tk, hs), v (..., Tk, hv) and an optional
// constant mask, a weighted sum of its output as the loss, and the gradients of q, k, v.
struct Setup {
  Shape q, k, v;
  std::optional<Shape> mask;
  std::vector<float> mask_values;  // empty: 0/1 drawn with a quarter zeros
  bool causal = false;             // the mask is causal_mask(Tq) (needs Tq == Tk)
  bool scale = true;
};

struct Built {
  Graph g;
  Expr out, weights, loss;
  std::vector<NodeId> grads;
};

void build(Built& b, const Setup& s, bool fused, bool read_weights = false) {
  Graph& g = b.g;
  Expr q = input(g, "q", s.q), k = input(g, "k", s.k), v = input(g, "v", s.v);
  AttentionOptions o;
  o.scale = s.scale;
  o.fused = fused;
  if (s.causal) {
    o.mask = causal_mask(g, s.q[s.q.size() - 2]);
  } else if (s.mask) {
    std::vector<float> m = s.mask_values;
    if (m.empty()) {
      m = test::vals(numel(*s.mask), 0.f, 1.f, 17);
      for (float& x : m) x = x < 0.25f ? 0.f : 1.f;
    }
    o.mask = constant(g, m, *s.mask);
  }
  AttentionResult r = attention(q, k, v, o);
  b.out = r.out;
  b.weights = r.weights;
  b.loss = test::weighted_sum(r.out);
  if (read_weights) b.loss = b.loss + test::weighted_sum(r.weights, 5);
  b.grads = grad(g, b.loss.id, {q.id, k.id, v.id});
}

std::map<std::string, Tensor> inputs_for(const Setup& s) {
  return {{"q", test::tensor(s.q, -1.f, 1.f, 1)}, {"k", test::tensor(s.k, -1.f, 1.f, 2)},
          {"v", test::tensor(s.v, -1.f, 1.f, 3)}};
}

std::vector<std::vector<float>> run(Built& b, const Setup& s, std::vector<NodeId> extra = {}) {
  ParamStore ps;
  std::vector<NodeId> outs{b.out.id, b.loss.id};
  outs.insert(outs.end(), b.grads.begin(), b.grads.end());
  outs.insert(outs.end(), extra.begin(), extra.end());
  Executor ex(b.g, outs, ps);
  for (auto& [name, t] : inputs_for(s)) ex.set_input(name, t);
  ex.run();
  std::vector<std::vector<float>> r;
  for (NodeId id : outs) r.push_back(ex.get(id).to_vector());
  return r;
}

bool uses(const Graph& g, OpKind k) {
  for (const Node& n : g.nodes())
    if (n.op == k) return true;
  return false;
}

// Values of the fused and the composed attention agree within f32 round-off, element by
// element (relative to the size of the terms: the values are O(1)).
void check_same(const Setup& s) {
  Built f, c;
  build(f, s, true);
  build(c, s, false);
  CHECK(uses(f.g, OpKind::attention));
  CHECK_FALSE(uses(c.g, OpKind::attention));
  const auto got = run(f, s), want = run(c, s);
  const char* what[] = {"out", "loss", "dq", "dk", "dv"};
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(what[i]);
    REQUIRE(got[i].size() == want[i].size());
    double worst = 0;
    std::size_t at = 0;
    for (std::size_t j = 0; j < want[i].size(); ++j) {
      const double e = std::abs(double(got[i][j]) - double(want[i][j])) / (1 + std::abs(double(want[i][j])));
      if (!(e <= worst)) worst = e, at = j;  // NaN counts as worst
    }
    INFO("worst relative difference " << worst << " at " << at << ": " << got[i][at] << " vs " << want[i][at]);
    CHECK(worst < (i == 1 ? 1e-4 : 2e-5));  // the loss sums every output
  }
}

}  // namespace

TEST_CASE("fused attention equals the composition: no mask, odd lengths, head sizes 1, 8, 64") {
  for (std::int64_t hs : {1, 8, 64})
    for (std::int64_t T : {1, 3, 47}) {
      CAPTURE(hs);
      CAPTURE(T);
      check_same({.q = {2, 3, T, hs}, .k = {2, 3, T, hs}, .v = {2, 3, T, hs}});
    }
}

TEST_CASE("fused attention equals the composition: causal, across several blocks") {
  for (std::int64_t hs : {1, 8, 64})
    for (std::int64_t T : {1, 3, 47, 130}) {
      CAPTURE(hs);
      CAPTURE(T);
      check_same({.q = {2, 2, T, hs}, .k = {2, 2, T, hs}, .v = {2, 2, T, hs}, .causal = true});
    }
  // One batch index (key blocks shared out among several tasks for dq) and many (one task each).
  check_same({.q = {1, 1, 200, 8}, .k = {1, 1, 200, 8}, .v = {1, 1, 200, 8}, .causal = true});
  check_same({.q = {4, 5, 70, 4}, .k = {4, 5, 70, 4}, .v = {4, 5, 70, 4}, .causal = true});
}

TEST_CASE("fused attention equals the composition: padding, (Tq, Tk), (B, Tq, Tk) and (B, H, Tq, Tk) masks") {
  // (B, 1, Tk): padding, the same for every query; the last batch's keys half padding.
  std::vector<float> pad(2 * 75, 1.f);
  for (int j = 40; j < 75; ++j) pad[std::size_t(75 + j)] = 0.f;
  check_same({.q = {2, 3, 75, 8}, .k = {2, 3, 75, 8}, .v = {2, 3, 75, 8}, .mask = Shape{2, 1, 75}, .mask_values = pad});
  // (Tq, Tk), (B, Tq, Tk), (B, H, Tq, Tk) and (B, 1, Tq, Tk): drawn, a quarter zeros.
  check_same({.q = {2, 3, 70, 8}, .k = {2, 3, 70, 8}, .v = {2, 3, 70, 8}, .mask = Shape{70, 70}});
  check_same({.q = {2, 3, 70, 8}, .k = {2, 3, 70, 8}, .v = {2, 3, 70, 8}, .mask = Shape{2, 70, 70}});
  check_same({.q = {2, 3, 70, 8}, .k = {2, 3, 70, 8}, .v = {2, 3, 70, 8}, .mask = Shape{2, 3, 70, 70}});
  check_same({.q = {2, 3, 70, 8}, .k = {2, 3, 70, 8}, .v = {2, 3, 70, 8}, .mask = Shape{2, 1, 70, 70}});
  // Whole blocks masked and whole blocks kept: a band mask over 150 keys.
  std::vector<float> band(150 * 150);
  for (int i = 0; i < 150; ++i)
    for (int j = 0; j < 150; ++j) band[std::size_t(i * 150 + j)] = j <= i && j > i - 70 ? 1.f : 0.f;
  check_same({.q = {1, 2, 150, 8}, .k = {1, 2, 150, 8}, .v = {1, 2, 150, 8}, .mask = Shape{150, 150},
              .mask_values = band});
}

TEST_CASE("fused attention equals the composition: cross-attention (Tq != Tk), other value size, 2-D and 3-D") {
  check_same({.q = {2, 3, 5, 8}, .k = {2, 3, 70, 8}, .v = {2, 3, 70, 8}});
  check_same({.q = {2, 3, 70, 8}, .k = {2, 3, 5, 8}, .v = {2, 3, 5, 8}, .mask = Shape{2, 1, 5}});
  check_same({.q = {2, 3, 9, 8}, .k = {2, 3, 131, 8}, .v = {2, 3, 131, 8}, .mask = Shape{9, 131}});
  check_same({.q = {2, 9, 8}, .k = {2, 131, 8}, .v = {2, 131, 5}, .mask = Shape{2, 9, 131}});  // hv 5
  check_same({.q = {33, 8}, .k = {65, 8}, .v = {65, 3}, .mask = Shape{33, 65}});               // (Tq, Tk) alone
  check_same({.q = {2, 3, 17, 8}, .k = {2, 3, 17, 8}, .v = {2, 3, 17, 8}, .scale = false});
}

TEST_CASE("fused attention: an i32 padding mask as the composition reads it") {
  for (bool fused : {true, false}) {
    Graph g;
    Expr q = input(g, "q", {2, 2, 6, 4}), k = input(g, "k", {2, 2, 6, 4}), v = input(g, "v", {2, 2, 6, 4});
    Expr keep = constant(g, {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, {2, 6}, DType::i32);
    AttentionOptions o;
    o.mask = padding_mask(keep);
    o.fused = fused;
    AttentionResult r = attention(q, k, v, o);
    CHECK(uses(g, OpKind::attention) == fused);
    ParamStore ps;
    Executor ex(g, {r.out.id}, ps);
    ex.set_input("q", test::tensor({2, 2, 6, 4}, -1, 1, 1));
    ex.set_input("k", test::tensor({2, 2, 6, 4}, -1, 1, 2));
    std::vector<float> vv = test::vals(96, -1, 1, 3);
    for (int h = 0; h < 2; ++h)  // batch 0's padded keys carry huge values: any leak shows
      for (int j = 4; j < 6; ++j)
        for (int c = 0; c < 4; ++c) vv[std::size_t((h * 6 + j) * 4 + c)] = 1e6f;
    ex.set_input("v", Tensor::f32({2, 2, 6, 4}, vv));
    ex.run();
    const Tensor out = ex.get(r.out.id);
    for (float x : out.fspan()) {
      INFO("fused " << fused);
      CHECK(std::abs(x) < 2.f);
    }
  }
}

TEST_CASE("fused attention: the (Tq, Tk) weights are not planned unless a program reads them") {
  Setup s{.q = {2, 2, 47, 8}, .k = {2, 2, 47, 8}, .v = {2, 2, 47, 8}, .causal = true};
  Built b;
  build(b, s, true);
  ParamStore ps;
  std::vector<NodeId> outs{b.out.id, b.loss.id};
  outs.insert(outs.end(), b.grads.begin(), b.grads.end());
  Executor ex(b.g, outs, ps);
  const Graph& pg = ex.planned_graph();
  int attention = 0, back = 0;
  for (NodeId id : ex.order()) {
    const Node& n = b.g.node(id);
    attention += n.op == OpKind::attention;
    back += n.op == OpKind::attention_back;
    INFO(to_text_line(b.g, id));
    CHECK(n.shape != Shape{2, 2, 47, 47});  // scores, weights or their gradients (the mask is (1, 1, 47, 47))
  }
  CHECK(attention == 1);
  CHECK(back == 1);
  for (const Node& n : pg.nodes()) CHECK(n.shape != Shape{2, 2, 47, 47});
  // The arena of the composition holds (B, H, T, T) values; the fused one's does not.
  Built c;
  build(c, s, false);
  std::vector<NodeId> couts{c.out.id, c.loss.id};
  couts.insert(couts.end(), c.grads.begin(), c.grads.end());
  Executor cex(c.g, couts, ps);
  CHECK(ex.arena_bytes() < cex.arena_bytes());
}

TEST_CASE("fused attention: a program that reads the weights gets them, and their gradient flows") {
  Setup s{.q = {2, 2, 30, 8}, .k = {2, 2, 30, 8}, .v = {2, 2, 30, 8}, .causal = true};
  Built f, c;
  build(f, s, true, /*read_weights=*/true);
  build(c, s, false, /*read_weights=*/true);
  CHECK(uses(f.g, OpKind::attention));
  const auto got = run(f, s, {f.weights.id}), want = run(c, s, {c.weights.id});
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("output " << i);
    REQUIRE(got[i].size() == want[i].size());
    for (std::size_t j = 0; j < want[i].size(); ++j)
      CHECK(std::abs(got[i][j] - want[i][j]) <= 2e-5f * (1 + std::abs(want[i][j])) + (i == 1 ? 1e-4f : 0.f));
  }
}

TEST_CASE("fused attention: the option, a FusedAttention scope, the environment and the size") {
  Graph g;
  auto count = [&] {
    int n = 0;
    for (const Node& x : g.nodes()) n += x.op == OpKind::attention;
    return n;
  };
  const std::int64_t long_t = fused_attention_keys + 1;
  Expr q = input(g, "q", {1, 4, 8}), k = input(g, "k", {1, 4, 8}), v = input(g, "v", {1, 4, 8});
  Expr kl = input(g, "kl", {1, long_t, 8}), vl = input(g, "vl", {1, long_t, 8});
  const std::optional<bool> env = env_config().fused_attention;
  attention(q, k, v);    // 4 keys: the composition, unless the environment forces it
  attention(q, kl, vl);  // more than fused_attention_keys: fused, unless the environment says 0
  CHECK(count() == (env ? (*env ? 2 : 0) : 1));
  const int before = count();
  {
    FusedAttention off(g, false);
    attention(q, kl, vl);
    CHECK(count() == before);
    AttentionOptions o;
    o.fused = true;  // the option wins over the scope
    attention(q, k, v, o);
    CHECK(count() == before + 1);
  }
  {
    FusedAttention on(g, true);
    attention(q, k, v);
    CHECK(count() == before + 2);
  }
  ::setenv("GG_FUSED_ATTENTION", "0", 1);
  CHECK(read_env_config().fused_attention == std::optional<bool>(false));
  ::setenv("GG_FUSED_ATTENTION", "1", 1);
  CHECK(read_env_config().fused_attention == std::optional<bool>(true));
  ::setenv("GG_FUSED_ATTENTION", "auto", 1);
  CHECK_FALSE(read_env_config().fused_attention);
  if (env) ::setenv("GG_FUSED_ATTENTION", *env ? "1" : "0", 1);
  else ::unsetenv("GG_FUSED_ATTENTION");
}

TEST_CASE("fused attention: dropout on the weights while training keeps the composition") {
  Graph g;
  Expr q = input(g, "q", {1, 4, 8}), k = input(g, "k", {1, 4, 8}), v = input(g, "v", {1, 4, 8});
  AttentionOptions o;
  o.fused = true;
  o.dropout = 0.1f;
  o.training = true;
  attention(q, k, v, o);
  CHECK_FALSE(uses(g, OpKind::attention));
  o.training = false;  // evaluation: no dropout, the fused path
  attention(q, k, v, o);
  CHECK(uses(g, OpKind::attention));
}

TEST_CASE("fused attention: a row with every key masked gives NaN, as the composition") {
  for (bool fused : {true, false}) {
    Graph g;
    Expr q = input(g, "q", {1, 3, 4}), k = input(g, "k", {1, 3, 4}), v = input(g, "v", {1, 3, 4});
    AttentionOptions o;
    o.fused = fused;
    o.mask = constant(g, {1, 1, 0, 0, 0, 0, 1, 0, 1}, {3, 3});  // row 1: every key masked
    AttentionResult r = attention(q, k, v, o);
    ParamStore ps;
    Executor ex(g, {r.out.id}, ps);
    ex.set_input("q", test::tensor({1, 3, 4}, -1, 1, 1));
    ex.set_input("k", test::tensor({1, 3, 4}, -1, 1, 2));
    ex.set_input("v", test::tensor({1, 3, 4}, -1, 1, 3));
    ex.run();
    const Tensor out = ex.get(r.out.id);
    for (int c = 0; c < 4; ++c) {
      CHECK(std::isfinite(out.f()[c]));
      CHECK(std::isnan(out.f()[4 + c]));
      CHECK(std::isfinite(out.f()[8 + c]));
    }
  }
}

TEST_CASE("fused attention: the same bits at 1 and 2 threads") {
  Setup s{.q = {1, 2, 300, 8}, .k = {1, 2, 300, 8}, .v = {1, 2, 300, 8}, .causal = true};
  const int threads = num_threads();
  std::vector<std::vector<float>> at[2];
  for (int t : {1, 2}) {
    set_num_threads(t);
    Built b;
    build(b, s, true);
    at[t - 1] = run(b, s);
  }
  set_num_threads(threads);
  REQUIRE(at[0].size() == at[1].size());
  for (std::size_t i = 0; i < at[0].size(); ++i) {
    INFO("output " << i);
    CHECK(std::memcmp(at[0][i].data(), at[1][i].data(), at[0][i].size() * 4) == 0);
  }
}

TEST_CASE("fused attention: gradients against f64 central differences") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Graph g;
    ParamStore ps;
    Expr q = param(g, "q", {2, 7, 4}), k = param(g, "k", {2, 7, 4}), v = param(g, "v", {2, 7, 3});
    AttentionOptions o;
    o.fused = true;
    if (causal) o.mask = causal_mask(g, 7);
    Expr loss = test::weighted_sum(attention(q, k, v, o).out);
    CHECK(uses(g, OpKind::attention));
    test::randomize(g, ps, 1.f);
    test::check_grads(g, loss, ps, {});
  }
}

TEST_CASE("fused attention: second derivatives refuse by name; the composition gives them") {
  for (bool fused : {true, false}) {
    Graph g;
    Expr q = param(g, "q", {1, 4, 4}), k = param(g, "k", {1, 4, 4}), v = param(g, "v", {1, 4, 4});
    AttentionOptions o;
    o.fused = fused;
    Expr loss = test::weighted_sum(attention(q, k, v, o).out);
    std::vector<Expr> ps{q, k, v};
    std::vector<Expr> vs{constant(g, test::vals(16, -1, 1, 1), {1, 4, 4}), constant(g, test::vals(16, -1, 1, 2), {1, 4, 4}),
                         constant(g, test::vals(16, -1, 1, 3), {1, 4, 4})};
    if (fused) {
      try {
        hvp(loss, ps, vs);
        FAIL("hvp through the fused attention did not refuse");
      } catch (const GraphError& e) {
        const std::string m = e.what();
        CHECK(m.find("attention_back") != std::string::npos);
        CHECK(m.find("second derivatives") != std::string::npos);
        CHECK(m.find("GG_FUSED_ATTENTION=0") != std::string::npos);
        CHECK(m.size() <= 300);
      }
    } else {
      CHECK(hvp(loss, ps, vs).size() == 3);
    }
  }
}

TEST_CASE("fused attention: the key bias's gradient is still zero by construction (the softmax's shift invariance)") {
  for (bool fused : {true, false}) {
    Graph g;
    FusedAttention choice(g, fused);
    Expr x = input(g, "x", {2, 5, 8});
    Expr loss = test::weighted_sum(multi_head_attention(x, 2, "attn", true, {.mask = causal_mask(g, 5)}).out);
    CHECK(uses(g, OpKind::attention) == fused);
    std::vector<NodeId> ps;
    for (Expr p : params(g)) ps.push_back(p.id);
    const std::vector<ZeroGrad> z = structurally_zero_grads(g, loss.id, ps);
    REQUIRE(z.size() == 1);
    CHECK(z[0].name == "attn.key.bias");
    CHECK(z[0].reason.find("shift invariance") != std::string::npos);
  }
}
