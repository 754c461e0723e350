// Tests for dsl/nn.cpp: every composite checked with gg::gradcheck (habit 8: composites
// are checked the same way as primitives), forward values against double-precision
// formulas, masks onto 3-D and 4-D scores, and shape errors reported at the user's line.
#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "autodiff/gradcheck.h"
#include "dsl/nn.h"
#include "ops/runtime/executor.h"

namespace {

using namespace gg;
using namespace gg::dsl;

std::vector<float> vals(std::int64_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// sum(out * w), w fixed random with mixed signs.
Expr weighted_sum(Expr out, unsigned seed = 99) {
  std::vector<float> w = vals(numel(out.shape()), 0.5f, 1.5f, seed);
  for (std::size_t i = 0; i < w.size(); i += 2) w[i] = -w[i];
  return sum_all(out * constant(*out.g, w, out.shape()));
}

// Every param of the graph, as Exprs.
std::vector<Expr> params_of(Graph& g) {
  std::vector<Expr> ps;
  for (NodeId i = 0; i < g.size(); ++i)
    if (g.node(i).op == OpKind::param && g.find(g.node(i).name, OpKind::param) == i) ps.push_back({&g, i});
  return ps;
}

// Creates the graph's params and gives them non-degenerate values: norm weights near 1,
// everything else uniform in [-a, a).
void randomize(Graph& g, ParamStore& ps, float a = 0.5f, unsigned seed = 1) {
  ps.init_missing(g, seed);
  for (auto& [name, t] : ps.all()) {
    std::vector<float> v = vals(t.numel(), -a, a, seed++);
    const bool norm_weight = name.find("norm") != std::string::npos && name.ends_with(".weight");
    if (norm_weight)
      for (float& x : v) x = 1.f + 0.4f * x;
    t = Tensor::f32(t.shape(), v);
  }
}

// gradcheck of `loss` w.r.t. every param of the graph and the given inputs.
void check_grads(Graph& g, Expr loss, ParamStore& ps, const std::map<std::string, Tensor>& inputs,
                 std::vector<Expr> extra_wrt = {}, GradcheckOptions o = {}) {
  std::vector<NodeId> wrt;
  for (Expr p : params_of(g)) wrt.push_back(p.id);
  for (Expr e : extra_wrt) wrt.push_back(e.id);
  REQUIRE(!wrt.empty());
  GradcheckResult r = gradcheck(g, loss.id, wrt, ps, inputs, o);
  INFO("worst: " << r.worst << " (|err| " << r.worst_abs << ", " << r.checked << " checked)");
  CHECK(r.ok);
  CHECK(r.checked > 0);
}

Tensor tensor(Shape s, float lo, float hi, unsigned seed) { return Tensor::f32(s, vals(numel(s), lo, hi, seed)); }

// Runs outs with the given inputs and returns their values.
std::vector<Tensor> run(Graph& g, std::vector<Expr> outs, ParamStore& ps, const std::map<std::string, Tensor>& inputs,
                        std::uint64_t seed = 0) {
  std::vector<NodeId> ids;
  for (Expr e : outs) ids.push_back(e.id);
  Executor ex(g, ids, ps, seed);
  for (auto& [n, t] : inputs)
    if (ex.has_input(n)) ex.set_input(n, t);
  ex.run();
  std::vector<Tensor> r;
  for (NodeId id : ids) r.push_back(ex.get(id));
  return r;
}

using gg::test::contains;

}  // namespace

// ---- gradient checks of every composite ------------------------------------------------

TEST_CASE("gradcheck: linear with and without bias") {
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    Graph g;
    Expr x = input(g, "x", {2, 3, 4});
    Expr y = linear(x, 5, "fc", bias);
    CHECK(y.shape() == Shape{2, 3, 5});
    CHECK((g.find("fc.bias", OpKind::param) >= 0) == bias);
    ParamStore ps;
    randomize(g, ps);
    check_grads(g, weighted_sum(tanh(y)), ps, {{"x", tensor({2, 3, 4}, -1, 1, 3)}}, {x});
  }
}

TEST_CASE("gradcheck: softmax and log_softmax over the last and the first axis") {
  for (int axis : {-1, 0}) {
    CAPTURE(axis);
    Graph g;
    Expr x = input(g, "x", {3, 5});
    Expr loss = weighted_sum(softmax(x, axis), 1) + weighted_sum(log_softmax(x, axis), 2);
    ParamStore ps;
    GradcheckResult r = gradcheck(g, loss.id, {x.id}, ps, {{"x", tensor({3, 5}, -2, 2, 4)}});
    INFO(r.worst);
    CHECK(r.ok);
  }
}

// The node kinds grad() adds (nodes after `before` that the gradients need).
std::map<OpKind, int> grad_ops(const Graph& g, NodeId before, const std::vector<Expr>& gs) {
  std::vector<NodeId> ids;
  for (const Expr& e : gs) ids.push_back(e.id);
  std::map<OpKind, int> n;
  for (NodeId id : ancestors(g, ids))
    if (id >= before) ++n[g.node(id).op];
  return n;
}

TEST_CASE("softmax, log_softmax and cross_entropy: nothing is built for the gradient of the row max") {
  // The shift by max(x) cancels (softmax is shift-invariant): its max is detached, so the
  // max rule's compare(x, max) * g_max, and the neg and sum that form g_max, are never built.
  for (int which = 0; which < 3; ++which) {
    CAPTURE(which);
    Graph g;
    Expr x = input(g, "x", {2, 3, 5});
    Expr loss = which == 0   ? weighted_sum(softmax(x))
                : which == 1 ? weighted_sum(log_softmax(x))
                             : cross_entropy(x, input(g, "t", {2, 3}, DType::i32));
    const NodeId before = g.size();
    std::vector<NodeId> maxes;  // the row max and its detached view
    for (NodeId id = 0; id < before; ++id)
      if (g.node(id).attrs.no_grad && g.node(g.node(id).inputs[0]).op == OpKind::max)
        maxes.insert(maxes.end(), {id, g.node(id).inputs[0]});
    CHECK(maxes.size() == 2);
    std::vector<Expr> gs = grad(loss, {x});
    std::map<OpKind, int> ops = grad_ops(g, before, gs);
    CHECK(ops[OpKind::compare] == 0);
    CHECK(ops[OpKind::max] == 0);
    // No gradient node reads the max: nothing was built for its path.
    for (NodeId id : ancestors(g, {gs[0].id}))
      if (id >= before)
        for (NodeId in : g.node(id).inputs)
          CHECK_MESSAGE(std::find(maxes.begin(), maxes.end(), in) == maxes.end(), to_text_line(g, id));
  }
}

TEST_CASE("gradcheck: second derivatives of softmax and log_softmax through the detached max") {
  for (int axis : {-1, 0}) {
    CAPTURE(axis);
    Graph g;
    Expr x = input(g, "x", {3, 4});
    Expr loss = weighted_sum(softmax(x, axis), 1) + weighted_sum(log_softmax(x, axis), 2);
    Expr g1 = grad(loss, {x})[0];
    Expr f = weighted_sum(g1 * g1, 3);  // a scalar of the gradient, differentiated again
    ParamStore ps;
    GradcheckResult r = gradcheck(g, f.id, {x.id}, ps, {{"x", tensor({3, 4}, -2, 2, 8)}});
    INFO(r.worst);
    CHECK(r.ok);
  }
}

TEST_CASE("gradcheck: layer_norm with and without bias") {
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    Graph g;
    Expr x = input(g, "x", {2, 3, 6});
    Expr y = layer_norm(x, "ln", 1e-5f, bias);
    CHECK((g.find("ln.bias", OpKind::param) >= 0) == bias);
    ParamStore ps;
    randomize(g, ps);
    check_grads(g, weighted_sum(y), ps, {{"x", tensor({2, 3, 6}, -2, 2, 5)}}, {x});
  }
}

TEST_CASE("gradcheck: gelu, erf and tanh forms") {
  for (GeluKind k : {GeluKind::erf, GeluKind::tanh}) {
    CAPTURE(int(k));
    Graph g;
    Expr x = input(g, "x", {3, 4});
    ParamStore ps;
    GradcheckResult r = gradcheck(g, weighted_sum(gelu(x, k)).id, {x.id}, ps, {{"x", tensor({3, 4}, -3, 3, 6)}});
    INFO(r.worst);
    CHECK(r.ok);
  }
}

TEST_CASE("silu: x * sigmoid(x), two nodes, against its formula and central differences") {
  Graph g;
  Expr x = input(g, "x", {3, 4});
  const NodeId before = g.size();
  Expr y = silu(x);
  CHECK(g.size() - before == 2);  // sigmoid, mul
  CHECK(g.node(y.id).op == OpKind::mul);
  ParamStore ps;
  const Tensor xv = tensor({3, 4}, -6, 6, 8);
  const Tensor out = run(g, {y}, ps, {{"x", xv}})[0];
  for (std::int64_t i = 0; i < 12; ++i) {
    const double v = xv.f()[i];
    CHECK(out.f()[i] == doctest::Approx(v / (1 + std::exp(-v))).epsilon(1e-6).scale(1e-6));
  }
  GradcheckResult r = gradcheck(g, weighted_sum(y).id, {x.id}, ps, {{"x", xv}});
  INFO(r.worst);
  CHECK(r.ok);
}

TEST_CASE("gradcheck: cross_entropy with ignored targets") {
  Graph g;
  Expr logits = input(g, "logits", {2, 3, 5});
  Expr targets = input(g, "targets", {2, 3}, DType::i32);
  Expr loss = cross_entropy(logits, targets);
  CHECK(loss.shape().empty());
  ParamStore ps;
  std::map<std::string, Tensor> in = {{"logits", tensor({2, 3, 5}, -2, 2, 7)},
                                      {"targets", Tensor::i32({2, 3}, std::vector<std::int32_t>{4, -1, 0, 2, -1, 2})}};
  GradcheckResult r = gradcheck(g, loss.id, {logits.id}, ps, in);
  INFO(r.worst);
  CHECK(r.ok);
  // Rows with an ignored target get exactly zero gradient.
  Expr d = grad(loss, {logits})[0];
  Tensor dv = run(g, {d}, ps, in)[0];
  for (int row : {1, 4})
    for (int c = 0; c < 5; ++c) CHECK(dv.f()[row * 5 + c] == 0.f);
  double rowsum = 0;
  for (int c = 0; c < 5; ++c) rowsum += dv.f()[c];
  CHECK(std::abs(rowsum) < 1e-6);  // softmax - onehot sums to 0
}

TEST_CASE("gradcheck: embedding with repeated indices") {
  Graph g;
  Expr idx = input(g, "idx", {2, 3}, DType::i32);
  Expr e = embedding(idx, 5, 4, "emb");
  CHECK(e.shape() == Shape{2, 3, 4});
  ParamStore ps;
  randomize(g, ps);
  check_grads(g, weighted_sum(tanh(e)), ps, {{"idx", Tensor::i32({2, 3}, std::vector<std::int32_t>{1, 3, 1, 4, 1, 0})}});
}

TEST_CASE("gradcheck: masked_fill with a causal mask, then softmax") {
  Graph g;
  Expr s = input(g, "s", {2, 3, 3});
  Expr w = softmax(masked_fill(s, causal_mask(g, 3)));
  ParamStore ps;
  std::map<std::string, Tensor> in = {{"s", tensor({2, 3, 3}, -2, 2, 8)}};
  GradcheckResult r = gradcheck(g, weighted_sum(w).id, {s.id}, ps, in);
  INFO(r.worst);
  CHECK(r.ok);
  Tensor wv = run(g, {w}, ps, in)[0];
  for (int b = 0; b < 2; ++b)
    for (int q = 0; q < 3; ++q)
      for (int k = q + 1; k < 3; ++k) CHECK(wv.f()[(b * 3 + q) * 3 + k] == 0.f);
}

TEST_CASE("gradcheck: attention (plain, scaled and unscaled, with a causal mask)") {
  for (bool scale : {true, false}) {
    CAPTURE(scale);
    Graph g;
    Expr q = input(g, "q", {2, 3, 4}), k = input(g, "k", {2, 3, 4}), v = input(g, "v", {2, 3, 4});
    AttentionOptions o;
    o.scale = scale;
    if (scale) o.mask = causal_mask(g, 3);
    AttentionResult r = attention(q, k, v, o);
    CHECK(r.out.shape() == Shape{2, 3, 4});
    CHECK(r.weights.shape() == Shape{2, 3, 3});
    ParamStore ps;
    std::map<std::string, Tensor> in = {
        {"q", tensor({2, 3, 4}, -1, 1, 9)}, {"k", tensor({2, 3, 4}, -1, 1, 10)}, {"v", tensor({2, 3, 4}, -1, 1, 11)}};
    Expr loss = weighted_sum(r.out, 1) + weighted_sum(r.weights, 2);
    GradcheckResult res = gradcheck(g, loss.id, {q.id, k.id, v.id}, ps, in);
    INFO(res.worst);
    CHECK(res.ok);
  }
}

TEST_CASE("gradcheck: single_head_attention with and without the output projection") {
  for (bool proj : {false, true}) {
    CAPTURE(proj);
    Graph g;
    Expr x = input(g, "x", {2, 3, 4});
    AttentionResult r = single_head_attention(x, 3, "attn", {.mask = causal_mask(g, 3)}, proj);
    CHECK(r.out.shape() == Shape{2, 3, proj ? 4 : 3});
    CHECK((g.find("attn.W_O", OpKind::param) >= 0) == proj);
    ParamStore ps;
    randomize(g, ps, 0.8f);
    check_grads(g, weighted_sum(r.out), ps, {{"x", tensor({2, 3, 4}, -1, 1, 12)}}, {x});
  }
}

TEST_CASE("gradcheck: multi_head_attention with 2 heads") {
  Graph g;
  Expr x = input(g, "x", {2, 3, 4});
  AttentionResult r = multi_head_attention(x, 2, "attn", true, {.mask = causal_mask(g, 3)});
  CHECK(r.out.shape() == Shape{2, 3, 4});
  CHECK(r.weights.shape() == Shape{2, 2, 3, 3});
  CHECK(params_of(g).size() == 8);  // query/key/value/proj weight + bias
  ParamStore ps;
  randomize(g, ps, 0.8f);
  check_grads(g, weighted_sum(r.out), ps, {{"x", tensor({2, 3, 4}, -1, 1, 13)}}, {x});
}

TEST_CASE("gradcheck: transformer_block (B 2, T 3, D 4, 2 heads)") {
  for (GeluKind k : {GeluKind::erf, GeluKind::tanh}) {
    CAPTURE(int(k));
    Graph g;
    Expr x = input(g, "x", {2, 3, 4});
    BlockOptions o;
    o.n_head = 2;
    o.gelu = k;
    o.attn.mask = causal_mask(g, 3);
    Expr y = transformer_block(x, "blocks.0", o);
    CHECK(y.shape() == Shape{2, 3, 4});
    CHECK(g.find("blocks.0.mlp.fc1.weight", OpKind::param) >= 0);
    CHECK(g.find("blocks.0.attn.query.weight", OpKind::param) >= 0);
    CHECK(g.find("blocks.0.norm2.bias", OpKind::param) >= 0);
    ParamStore ps;
    randomize(g, ps, 0.5f);
    check_grads(g, weighted_sum(y), ps, {{"x", tensor({2, 3, 4}, -1, 1, 14)}}, {x});
  }
}

// ---- forward values against double-precision formulas --------------------------------

TEST_CASE("softmax: rows sum to 1, match the formula, and 1000s do not overflow") {
  Graph g;
  Expr x = input(g, "x", {3, 5});
  Expr s = softmax(x), ls = log_softmax(x);
  std::vector<float> xv = vals(10, -3, 3, 15);
  for (float v : {1000.f, 999.f, 998.f, 1000.5f, 990.f}) xv.push_back(v);
  ParamStore ps;
  auto out = run(g, {s, ls}, ps, {{"x", Tensor::f32({3, 5}, xv)}});
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    double mx = -1e300, z = 0, total = 0;
    for (int c = 0; c < 5; ++c) mx = std::max(mx, double(xv[std::size_t(r * 5 + c)]));
    for (int c = 0; c < 5; ++c) z += std::exp(double(xv[std::size_t(r * 5 + c)]) - mx);
    for (int c = 0; c < 5; ++c) {
      const double want = std::exp(double(xv[std::size_t(r * 5 + c)]) - mx) / z;
      const float got = out[0].f()[r * 5 + c];
      CHECK(std::isfinite(got));
      CHECK(got == doctest::Approx(want).epsilon(1e-5).scale(1e-6));
      CHECK(out[1].f()[r * 5 + c] == doctest::Approx(std::log(want)).epsilon(1e-5).scale(1e-5));
      total += got;
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
  }
}

TEST_CASE("layer_norm: output has mean 0 and variance 1 per row (weight 1, bias 0)") {
  Graph g;
  Expr x = input(g, "x", {4, 8});
  Expr y = layer_norm(x, "ln");
  ParamStore ps;
  ps.init_missing(g, 0);
  CHECK(ps.at("ln.weight").to_vector() == std::vector<float>(8, 1.f));
  CHECK(ps.at("ln.bias").to_vector() == std::vector<float>(8, 0.f));
  std::vector<float> xv = vals(32, -1, 1, 16);
  for (std::size_t i = 0; i < 32; ++i) xv[i] = 3.f * xv[i] + float(i / 8) * 2.f;  // different means per row
  Tensor yv = run(g, {y}, ps, {{"x", Tensor::f32({4, 8}, xv)}})[0];
  for (int r = 0; r < 4; ++r) {
    double m = 0, v = 0, xm = 0, xvar = 0;
    for (int c = 0; c < 8; ++c) m += yv.f()[r * 8 + c], xm += xv[std::size_t(r * 8 + c)];
    m /= 8, xm /= 8;
    for (int c = 0; c < 8; ++c) {
      v += (yv.f()[r * 8 + c] - m) * (yv.f()[r * 8 + c] - m);
      xvar += (xv[std::size_t(r * 8 + c)] - xm) * (xv[std::size_t(r * 8 + c)] - xm);
    }
    v /= 8, xvar /= 8;
    CHECK(std::abs(m) < 1e-5);
    CHECK(v == doctest::Approx(xvar / (xvar + 1e-5)).epsilon(1e-4));
    for (int c = 0; c < 8; ++c)  // the formula, in double
      CHECK(yv.f()[r * 8 + c] == doctest::Approx((xv[std::size_t(r * 8 + c)] - xm) / std::sqrt(xvar + 1e-5)).epsilon(1e-4).scale(1e-4));
  }
}

TEST_CASE("gelu: erf form and tanh approximation against their formulas") {
  const std::vector<float> pts = {-3.f, -1.f, -0.5f, 0.f, 0.3f, 0.5f, 1.f, 2.f, 3.f};
  Graph g;
  Expr x = input(g, "x", {std::int64_t(pts.size())});
  Expr ge = gelu(x, GeluKind::erf), gt = gelu(x, GeluKind::tanh);
  ParamStore ps;
  auto out = run(g, {ge, gt}, ps, {{"x", Tensor::f32({std::int64_t(pts.size())}, pts)}});
  const double c = std::sqrt(2.0 / std::numbers::pi);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const double v = pts[i];
    CAPTURE(v);
    const double want_erf = 0.5 * v * (1 + std::erf(v / std::numbers::sqrt2));
    const double want_tanh = 0.5 * v * (1 + std::tanh(c * (v + 0.044715 * v * v * v)));
    // float rounding of 1 + erf / 1 + tanh near -1 costs ~1e-7 absolute
    CHECK(std::abs(out[0].f()[i] - want_erf) <= 2e-7 + 1e-6 * std::abs(want_erf));
    CHECK(std::abs(out[1].f()[i] - want_tanh) <= 2e-7 + 1e-6 * std::abs(want_tanh));
  }
  // The two forms differ (by ~4e-4 at x = -3): the test tells them apart.
  CHECK(std::abs(out[0].f()[0] - out[1].f()[0]) > 2e-4);
}

TEST_CASE("cross_entropy equals the mean over non-ignored positions of -log softmax[target]") {
  Graph g;
  Expr logits = input(g, "logits", {2, 3, 5});
  Expr targets = input(g, "targets", {2, 3}, DType::i32);
  Expr loss = cross_entropy(logits, targets);
  const std::vector<float> lv = vals(30, -3, 3, 17);
  const std::vector<std::int32_t> tv = {4, -1, 0, 2, -1, 3};
  ParamStore ps;
  float got = run(g, {loss}, ps, {{"logits", Tensor::f32({2, 3, 5}, lv)}, {"targets", Tensor::i32({2, 3}, tv)}})[0].f()[0];
  double total = 0;
  int n = 0;
  for (int r = 0; r < 6; ++r) {
    if (tv[std::size_t(r)] < 0) continue;
    double mx = -1e300, z = 0;
    for (int c = 0; c < 5; ++c) mx = std::max(mx, double(lv[std::size_t(r * 5 + c)]));
    for (int c = 0; c < 5; ++c) z += std::exp(lv[std::size_t(r * 5 + c)] - mx);
    total += -(lv[std::size_t(r * 5 + tv[std::size_t(r)])] - mx - std::log(z));
    ++n;
  }
  CHECK(n == 4);
  CHECK(got == doctest::Approx(total / n).epsilon(1e-5));

  SUBCASE("targets of the wrong dtype or shape are refused at declaration") {
    Expr bad = input(g, "bad", {2, 3});
    CHECK_THROWS_AS(cross_entropy(logits, bad), GraphError);
    Expr bad2 = input(g, "bad2", {2, 5}, DType::i32);
    CHECK_THROWS_AS(cross_entropy(logits, bad2), GraphError);
  }
}

TEST_CASE("positional_encoding: sin on even, cos on odd columns, base 10000") {
  for (std::int64_t d : {6, 5}) {
    CAPTURE(d);
    Graph g;
    Expr p = positional_encoding(g, 10, d);
    CHECK(p.shape() == Shape{10, d});
    CHECK(p.node().op == OpKind::constant);
    ParamStore ps;
    Tensor pv = run(g, {p}, ps, {})[0];
    for (std::int64_t pos = 0; pos < 10; ++pos)
      for (std::int64_t i = 0; i < d; ++i) {
        const std::int64_t k = i / 2;
        const double w = 1.0 / std::pow(10000.0, double(2 * k) / double(d));
        const double want = i % 2 == 0 ? std::sin(double(pos) * w) : std::cos(double(pos) * w);
        CAPTURE(pos);
        CAPTURE(i);
        CHECK(pv.f()[pos * d + i] == doctest::Approx(want).epsilon(1e-6).scale(1e-6));
      }
  }
}

TEST_CASE("dropout: identity (same node) in eval mode; in training zeroes ~p and scales by 1/(1-p)") {
  Graph g;
  Expr x = input(g, "x", {100, 100});
  CHECK(dropout(x, 0.3f, false).id == x.id);
  CHECK(dropout(x, 0.f, true).id == x.id);
  const float p = 0.3f;
  Expr y = dropout(x, p, true);
  CHECK(y.id != x.id);
  CHECK_THROWS_AS(dropout(x, 1.f, true), GraphError);
  ParamStore ps;
  Executor ex(g, {y.id}, ps, 123);
  ex.set_input("x", std::vector<float>(10000, 2.f));
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    ex.run();
    const float* v = ex.value(y.id).f();
    int zeros = 0;
    for (int i = 0; i < 10000; ++i) {
      if (v[i] == 0.f) ++zeros;
      else CHECK(v[i] == doctest::Approx(2.0 / (1.0 - p)).epsilon(1e-6));
    }
    CHECK(double(zeros) / 10000 == doctest::Approx(p).epsilon(0.1));  // +-0.03: ~6 sigma
    if (rep == 0) first.assign(v, v + 10000);
    else CHECK(first != std::vector<float>(v, v + 10000));  // a fresh mask each run
  }
}

// ---- masks ---------------------------------------------------------------------------

namespace {

// Checks weights (..., T, T) against a double reference softmax(q k^T / sqrt(hs) masked),
// masked entries exactly 0, rows summing to 1. keep(b, h, q, k) says what is allowed.
template <class Keep>
void check_masked_weights(const Tensor& w, const Tensor& q, const Tensor& k, std::int64_t B, std::int64_t H,
                          std::int64_t T, std::int64_t hs, Keep keep) {
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        const std::int64_t row = ((b * H + h) * T + i) * T;
        std::vector<double> s(static_cast<std::size_t>(T));
        double mx = -1e300, z = 0, total = 0;
        for (std::int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < hs; ++c)
            dot += double(q.f()[((b * H + h) * T + i) * hs + c]) * k.f()[((b * H + h) * T + j) * hs + c];
          s[std::size_t(j)] = dot / std::sqrt(double(hs));
          if (keep(b, h, i, j)) mx = std::max(mx, s[std::size_t(j)]);
        }
        for (std::int64_t j = 0; j < T; ++j)
          if (keep(b, h, i, j)) z += std::exp(s[std::size_t(j)] - mx);
        for (std::int64_t j = 0; j < T; ++j) {
          const float got = w.f()[row + j];
          INFO("b " << b << " h " << h << " q " << i << " k " << j);
          if (!keep(b, h, i, j)) CHECK(got == 0.f);
          else CHECK(got == doctest::Approx(std::exp(s[std::size_t(j)] - mx) / z).epsilon(1e-5).scale(1e-6));
          total += got;
        }
        CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
      }
}

}  // namespace

TEST_CASE("masks: (T, T) causal and (B, 1, T) padding onto (B, T, T) and (B, H, T, T) scores") {
  const std::int64_t B = 2, H = 2, T = 4, hs = 3;
  const std::vector<float> keep_v = {1, 1, 1, 1, 1, 1, 0, 0};  // batch 1: last two tokens are padding
  auto causal = [](auto, auto, auto i, auto j) { return j <= i; };
  auto padded = [&](auto b, auto, auto, auto j) { return keep_v[std::size_t(b * T + j)] != 0.f; };
  for (int four_d = 0; four_d < 2; ++four_d) {
    CAPTURE(four_d);
    const std::int64_t h = four_d ? H : 1;
    Shape s = four_d ? Shape{B, H, T, hs} : Shape{B, T, hs};
    Graph g;
    Expr q = input(g, "q", s), k = input(g, "k", s), v = input(g, "v", s);
    Expr keep = input(g, "keep", {B, T});
    Expr pm = padding_mask(keep);
    CHECK(pm.shape() == Shape{B, 1, T});
    AttentionResult rc = attention(q, k, v, {.mask = causal_mask(g, T)});
    AttentionResult rp = attention(q, k, v, {.mask = pm});
    Shape ws = four_d ? Shape{B, H, T, T} : Shape{B, T, T};
    CHECK(rc.weights.shape() == ws);
    CHECK(rp.weights.shape() == ws);
    ParamStore ps;
    std::map<std::string, Tensor> in = {{"q", tensor(s, -2, 2, 20)}, {"k", tensor(s, -2, 2, 21)},
                                        {"v", tensor(s, -1, 1, 22)}, {"keep", Tensor::f32({B, T}, keep_v)}};
    auto out = run(g, {rc.weights, rp.weights}, ps, in);
    SUBCASE("causal") { check_masked_weights(out[0], in["q"], in["k"], B, h, T, hs, causal); }
    SUBCASE("padding") { check_masked_weights(out[1], in["q"], in["k"], B, h, T, hs, padded); }
  }
}

// ---- shape errors name the user's line --------------------------------------------------

TEST_CASE("a mask that cannot broadcast onto the scores is reported at the user's line") {
  Graph g;
  Expr scores = input(g, "scores", {2, 4, 4});
  Expr mask = input(g, "mask", {3, 1, 4});
  std::string msg;
  int line = 0;
  try { line = __LINE__; masked_fill(scores, mask); } catch (const GraphError& e) { msg = e.what(); }
  INFO(msg);
  REQUIRE(!msg.empty());
  CHECK(contains(msg, "test_nn.cpp:" + std::to_string(line)));
  CHECK(contains(msg, "(3, 1, 4)"));
  CHECK(contains(msg, "(2, 4, 4)"));

  SUBCASE("through attention(): the line of the attention call") {
    Expr q = input(g, "q", {2, 4, 8}), k = input(g, "k", {2, 4, 8}), v = input(g, "v", {2, 4, 8});
    std::string m2;
    int l2 = 0;
    try { l2 = __LINE__; attention(q, k, v, {.mask = mask}); } catch (const GraphError& e) { m2 = e.what(); }
    INFO(m2);
    CHECK(contains(m2, "test_nn.cpp:" + std::to_string(l2)));
    CHECK(contains(m2, "(3, 1, 4)"));
    CHECK(contains(m2, "(2, 4, 4)"));
  }
}

TEST_CASE("a matmul with mismatched inner dims names the op, the user's line, the scoped name and both shapes") {
  Graph g;
  Expr x = input(g, "x", {4, 16, 64});
  Expr w = input(g, "w", {48, 192});
  std::string msg;
  int line = 0;
  {
    Scope s(g, "blocks.1.attn.query");
    try { line = __LINE__; matmul(x, w); } catch (const GraphError& e) { msg = e.what(); }
  }
  INFO(msg);
  CHECK(contains(msg, "matmul at test_nn.cpp:" + std::to_string(line) + " ('blocks.1.attn.query')"));
  CHECK(contains(msg, "inner dims differ"));
  CHECK(contains(msg, "(4, 16, 64) @ (48, 192): 64 vs 48"));
}

TEST_CASE("linear on an input of the wrong width is reported at the user's line") {
  Graph g;
  Expr a = input(g, "a", {2, 4});
  Expr b = input(g, "b", {2, 5});
  int first = __LINE__; linear(a, 8, "fc");
  std::string msg;
  int line = 0;
  try { line = __LINE__; linear(b, 8, "fc"); } catch (const GraphError& e) { msg = e.what(); }
  INFO(msg);
  REQUIRE(!msg.empty());
  CHECK(contains(msg, "test_nn.cpp:" + std::to_string(line)));
  CHECK(contains(msg, "('fc.weight')"));
  CHECK(contains(msg, "(8, 5)"));
  CHECK(contains(msg, "(8, 4)"));
  CHECK(contains(msg, "test_nn.cpp:" + std::to_string(first)));  // where it was first declared

  SUBCASE("the weight used by hand with a wrong-width input: matmul error with the scoped name") {
    Expr w{&g, g.find("fc.weight", OpKind::param)};
    std::string m2;
    int l2 = 0;
    {
      Scope s(g, "fc");
      try { l2 = __LINE__; matmul(b, w, false, true); } catch (const GraphError& e) { m2 = e.what(); }
    }
    INFO(m2);
    CHECK(contains(m2, "matmul at test_nn.cpp:" + std::to_string(l2) + " ('fc')"));
    CHECK(contains(m2, "inner dims differ"));
  }
}

TEST_CASE("multi_head_attention with n_embd not divisible by n_head is refused at the user's line") {
  Graph g;
  Expr x = input(g, "x", {2, 3, 6});
  std::string msg;
  int line = 0;
  try { line = __LINE__; multi_head_attention(x, 4, "attn"); } catch (const GraphError& e) { msg = e.what(); }
  INFO(msg);
  REQUIRE(!msg.empty());
  CHECK(contains(msg, "test_nn.cpp:" + std::to_string(line)));
  CHECK(contains(msg, "not divisible"));
  CHECK(contains(msg, "6"));
  CHECK(contains(msg, "4"));
}

// ---- image patches (the tutorial's extension to images) --------------------------------

TEST_CASE("patches: (B, C, H, W) images become (B, N, C p p) patch rows, in reading order") {
  Graph g;
  Expr img = input(g, "img", {2, 3, 4, 6});  // B 2, C 3, H 4, W 6; p 2 -> 2 x 3 = 6 patches of 12 values
  Expr pt = patches(img, 2);
  CHECK(pt.shape() == Shape{2, 6, 12});
  std::vector<float> v(2 * 3 * 4 * 6);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  ParamStore ps;
  Tensor out = run(g, {pt}, ps, {{"img", Tensor::f32({2, 3, 4, 6}, v)}})[0];
  // Patch n = (pr, pc) of image b holds img[b, c, pr*2 + i, pc*2 + j] at c*4 + i*2 + j.
  for (int b = 0; b < 2; ++b)
    for (int pr = 0; pr < 2; ++pr)
      for (int pc = 0; pc < 3; ++pc)
        for (int c = 0; c < 3; ++c)
          for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
              const int n = pr * 3 + pc, k = c * 4 + i * 2 + j;
              const float want = v[std::size_t(((b * 3 + c) * 4 + pr * 2 + i) * 6 + pc * 2 + j)];
              CHECK(out.f()[(b * 6 + n) * 12 + k] == want);
            }
}

TEST_CASE("gradcheck: patch_embedding of one-channel images, and a bad patch size is refused at the user's line") {
  Graph g;
  Expr img = input(g, "img", {2, 4, 4});
  Expr y = patch_embedding(img, 2, 5, "patch");  // (2, 4, 5)
  CHECK(y.shape() == Shape{2, 4, 5});
  ParamStore ps;
  randomize(g, ps);
  check_grads(g, weighted_sum(tanh(y)), ps, {{"img", tensor({2, 4, 4}, -1, 1, 8)}}, {img});

  Graph g2;
  Expr bad = input(g2, "img", {2, 5, 4});
  const int line = __LINE__ + 2;
  try {
    patches(bad, 2);
    FAIL("no error");
  } catch (const GraphError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(contains(m, "patches at test_nn.cpp:" + std::to_string(line)));
    CHECK(contains(m, "patch size 2 does not divide the image size 5x4"));
  }
}

// ---- the mask rule: per batch, for every rank --------------------------------------------

namespace {
// Attention weights of q = k = 0 (so every allowed key gets the same weight), v = 0.
Tensor uniform_weights(Shape qs, Shape ks, std::function<Expr(Graph&)> make_mask,
                       const std::map<std::string, Tensor>& extra = {}) {
  Graph g;
  Expr q = input(g, "q", qs), k = input(g, "k", ks), v = input(g, "v", ks);
  AttentionResult r = attention(q, k, v, {.mask = make_mask(g)});
  ParamStore ps;
  std::map<std::string, Tensor> in = extra;
  in.emplace("q", Tensor(qs));
  in.emplace("k", Tensor(ks));
  in.emplace("v", Tensor(ks));
  return run(g, {r.weights}, ps, in)[0];
}
std::vector<float> row(const Tensor& w, std::int64_t offset, std::int64_t n) {
  return {w.f() + offset, w.f() + offset + n};
}
}  // namespace

TEST_CASE("masks: causal * padding (B, T, T) onto (B, H, T, T) scores applies per batch, also when B == n_head") {
  const std::int64_t T = 3;
  for (std::int64_t B : {2, 3}) {
    const std::int64_t H = 2;  // B == H, then B != H
    CAPTURE(B);
    std::vector<std::int32_t> keep(static_cast<std::size_t>(B * T), 1);
    keep[std::size_t((B - 1) * T + 1)] = keep[std::size_t((B - 1) * T + 2)] = 0;  // last batch: 1 real token
    Tensor w = uniform_weights({B, H, T, 4}, {B, H, T, 4}, [&](Graph& g) {
      Expr m = causal_mask(g, T) * padding_mask(input(g, "keep", {B, T}, DType::i32));
      CHECK(m.shape() == Shape{B, T, T});
      return m;
    }, {{"keep", Tensor::i32({B, T}, keep)}});
    for (std::int64_t h = 0; h < H; ++h) {
      CAPTURE(h);
      // The last batch, last query row: only key 0 is real.
      CHECK(row(w, (((B - 1) * H + h) * T + 2) * T, T) == std::vector<float>{1, 0, 0});
      // The first batch, last query row: causal only, all three keys.
      for (float x : row(w, ((0 * H + h) * T + 2) * T, T)) CHECK(x == doctest::Approx(1.0 / 3));
    }
  }
}

TEST_CASE("masks: queries and keys of different lengths (cross-attention), every mask rank") {
  const std::int64_t B = 2, H = 2, Tq = 2, Tk = 3;
  const std::vector<float> keep = {1, 1, 1, 1, 1, 0};
  SUBCASE("(B, 1, Tk) padding onto (B, H, Tq, Tk)") {
    Tensor w = uniform_weights({B, H, Tq, 4}, {B, H, Tk, 4},
                               [&](Graph& g) { return padding_mask(input(g, "keep", {B, Tk})); },
                               {{"keep", Tensor::f32({B, Tk}, keep)}});
    CHECK(w.shape() == Shape{B, H, Tq, Tk});
    CHECK(row(w, ((1 * H + 1) * Tq + 1) * Tk, Tk) == std::vector<float>{0.5f, 0.5f, 0});
    CHECK(row(w, ((0 * H + 1) * Tq + 1) * Tk, Tk)[2] == doctest::Approx(1.0 / 3));
  }
  SUBCASE("(Tq, Tk) onto (B, Tq, Tk)") {
    Tensor w = uniform_weights({B, Tq, 4}, {B, Tk, 4}, [&](Graph& g) {
      return constant(g, {1, 0, 0, 1, 1, 0}, {Tq, Tk});
    });
    CHECK(row(w, (1 * Tq + 1) * Tk, Tk) == std::vector<float>{0.5f, 0.5f, 0});
    CHECK(row(w, 0, Tk) == std::vector<float>{1, 0, 0});
  }
  SUBCASE("(B, Tq, Tk) onto (B, H, Tq, Tk) and 4-D (B, 1, Tq, Tk) passed through") {
    std::vector<float> m = {1, 1, 1, 1, 1, 1, /* batch 1 */ 1, 0, 0, 0, 1, 0};
    for (Shape ms : {Shape{B, Tq, Tk}, Shape{B, 1, Tq, Tk}}) {
      Tensor w = uniform_weights({B, H, Tq, 4}, {B, H, Tk, 4}, [&](Graph& g) { return constant(g, m, ms); });
      CHECK(row(w, ((1 * H + 1) * Tq + 0) * Tk, Tk) == std::vector<float>{1, 0, 0});
      CHECK(row(w, ((1 * H + 0) * Tq + 1) * Tk, Tk) == std::vector<float>{0, 1, 0});
    }
  }
}

TEST_CASE("masks: a shape that does not follow the rule is an error naming both shapes") {
  Graph g;
  Expr scores = input(g, "scores", {2, 4, 3, 3});  // (B 2, H 4, Tq 3, Tk 3)
  auto msg_of = [&](Shape ms) {
    Expr m = input(g, "m", ms);
    try {
      masked_fill(scores, m);
    } catch (const GraphError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // A (H, Tq, Tk) mask lines up with the heads under broadcasting, but a 3-D mask is per batch.
  std::string msg = msg_of({4, 3, 3});
  INFO(msg);
  CHECK(contains(msg, "(4, 3, 3)"));
  CHECK(contains(msg, "(2, 4, 3, 3)"));
  CHECK(contains(msg, "(1, H, Tq, Tk)"));  // the hint: how to write a per-head mask
  for (Shape bad : {Shape{3}, Shape{2, 4, 3, 3, 1}, Shape{3, 2}, Shape{2, 2, 3, 3}}) {
    std::string m2 = msg_of(bad);
    INFO(m2);
    CHECK(contains(m2, to_string(bad)));
    CHECK(contains(m2, "(2, 4, 3, 3)"));
  }
}

TEST_CASE("padding_mask from i32 validity or from token ids and a pad id") {
  Graph g;
  Expr ids = input(g, "ids", {2, 3}, DType::i32);
  Expr valid = input(g, "valid", {2, 3}, DType::i32);
  Expr from_ids = padding_mask_from_ids(ids, 0);
  Expr from_valid = padding_mask(valid);
  CHECK(from_ids.shape() == Shape{2, 1, 3});
  CHECK(from_ids.dtype() == DType::f32);
  CHECK(from_valid.dtype() == DType::f32);
  ParamStore ps;
  auto out = run(g, {from_ids, from_valid}, ps,
                 {{"ids", Tensor::i32({2, 3}, std::vector<std::int32_t>{5, 7, 0, 3, 0, 0})},
                  {"valid", Tensor::i32({2, 3}, std::vector<std::int32_t>{1, 0, 1, 1, 1, 0})}});
  CHECK(out[0].to_vector() == std::vector<float>{1, 1, 0, 1, 0, 0});
  CHECK(out[1].to_vector() == std::vector<float>{1, 0, 1, 1, 1, 0});
  CHECK_THROWS_AS(padding_mask_from_ids(input(g, "f", {2, 3}), 0), GraphError);
}

TEST_CASE("cross_entropy refuses, at run time, a batch whose targets are all the ignore index") {
  Graph g;
  Expr logits = input(g, "logits", {2, 3});
  Expr targets = input(g, "targets", {2}, DType::i32);
  Expr loss = cross_entropy(logits, targets, -1);
  ParamStore ps;
  Executor ex(g, {loss.id}, ps);
  ex.set_input("logits", Tensor(Shape{2, 3}));
  ex.set_input("targets", std::vector<std::int32_t>{-1, 2});
  ex.run();
  CHECK(ex.scalar(loss.id) == doctest::Approx(std::log(3.0)));
  ex.set_input("targets", std::vector<std::int32_t>{-1, -1});
  std::string msg;
  try { ex.run(); } catch (const GraphError& e) { msg = e.what(); }
  INFO(msg);
  CHECK(contains(msg, "cross_entropy"));
  CHECK(contains(msg, "targets"));
  CHECK(contains(msg, "every value is the ignore index -1"));
  CHECK(contains(msg, "no position to average the loss over"));
}

TEST_CASE("embedding: an id outside the table is an error at run time, not a read out of bounds") {
  Graph g;
  Expr ids = input(g, "ids", {3}, DType::i32);
  Expr e = embedding(ids, 4, 2, "wte");
  ParamStore ps;
  ps.init_missing(g, 0);
  Executor ex(g, {e.id}, ps);
  ex.set_input("ids", std::vector<std::int32_t>{0, 4, 1});
  std::string msg;
  try { ex.run(); } catch (const GraphError& e2) { msg = e2.what(); }
  CHECK(contains(msg, "index 4 at position 1 is out of range [0, 4)"));
}

TEST_CASE("cross_entropy refuses, at run time, a target outside the vocabulary that is not ignored") {
  Graph g;
  Expr logits = input(g, "logits", {2, 3});
  Expr targets = input(g, "targets", {2}, DType::i32);
  Expr loss = cross_entropy(logits, targets, -1);
  ParamStore ps;
  Executor ex(g, {loss.id}, ps);
  ex.set_input("logits", Tensor(Shape{2, 3}));
  ex.set_input("targets", std::vector<std::int32_t>{1, 3});
  std::string msg;
  try { ex.run(); } catch (const GraphError& e) { msg = e.what(); }
  CHECK(contains(msg, "target 3 at position 1 is outside [0, 3) and not the ignore index -1"));
}

TEST_CASE("sizes a composite cannot use are GraphErrors at the user's line, not allocation failures") {
  Graph g;
  Expr x = input(g, "x", {2, 3});
  auto msg_of = [](auto f) {
    try {
      f();
    } catch (const GraphError& e) {
      return std::string(e.what());
    }
    return std::string("no GraphError");
  };
  CHECK(contains(msg_of([&] { causal_mask(g, -100000000); }), "causal_mask at test_nn.cpp:"));
  CHECK(contains(msg_of([&] { positional_encoding(g, -2, 4); }), "max_len -2"));
  CHECK(contains(msg_of([&] { multi_head_attention(x, 1, "m"); }), "multi_head_attention at test_nn.cpp:"));
}
