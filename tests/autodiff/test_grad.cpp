// Tests for autodiff/grad.cpp: gradient node names, errors, zeros for unrelated wrt,
// the printable gradient graph, second derivatives (grad of grad) of scalar functions
// against their analytic second derivatives, and a Hessian-vector product of a small
// MLP against finite differences of its gradient.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "ops/ir/build.h"
#include "ops/runtime/executor.h"

namespace {

using namespace gg;

Tensor t32(Shape s, std::vector<float> v) { return Tensor::f32(std::move(s), v); }

// A thin handle so that the formulas below read like math; only ops builders underneath
// (this layer's tests do not use the DSL).
struct E {
  Graph* g;
  NodeId id;
  const Node& node() const { return g->node(id); }
  const Shape& shape() const { return node().shape; }
  const std::string& name() const { return node().name; }
};
E operator+(E a, E b) { return {a.g, op::add(*a.g, a.id, b.id)}; }
E operator-(E a, E b) { return {a.g, op::sub(*a.g, a.id, b.id)}; }
E operator*(E a, E b) { return {a.g, op::mul(*a.g, a.id, b.id)}; }
E operator/(E a, E b) { return {a.g, op::div(*a.g, a.id, b.id)}; }
E operator*(float a, E b) { return {b.g, op::mul(*b.g, op::scalar(*b.g, a), b.id)}; }
E operator+(float a, E b) { return {b.g, op::add(*b.g, op::scalar(*b.g, a), b.id)}; }
E operator/(float a, E b) { return {b.g, op::div(*b.g, op::scalar(*b.g, a), b.id)}; }
E exp(E x) { return {x.g, op::exp(*x.g, x.id)}; }
E log(E x) { return {x.g, op::log(*x.g, x.id)}; }
E sqrt(E x) { return {x.g, op::sqrt(*x.g, x.id)}; }
E tanh(E x) { return {x.g, op::tanh(*x.g, x.id)}; }
E erf(E x) { return {x.g, op::erf(*x.g, x.id)}; }
E matmul(E a, E b, bool ta = false, bool tb = false) { return {a.g, op::matmul(*a.g, a.id, b.id, ta, tb)}; }
E sum_all(E x) {
  if (x.shape().empty()) return x;
  return {x.g, op::sum(*x.g, op::reshape(*x.g, x.id, {-1}), 0)};
}
E param(Graph& g, const std::string& name, Shape s) { return {&g, op::param(g, name, std::move(s), Init{})}; }
E input(Graph& g, const std::string& name, Shape s) { return {&g, op::input(g, name, std::move(s))}; }
E constant(Graph& g, std::vector<float> v, Shape s) { return {&g, op::constant(g, std::move(v), std::move(s))}; }
std::vector<E> grad(E out, const std::vector<E>& wrt) {
  std::vector<NodeId> ids;
  for (const E& w : wrt) ids.push_back(w.id);
  std::vector<E> r;
  for (NodeId id : gg::grad(*out.g, out.id, ids)) r.push_back({out.g, id});
  return r;
}

}  // namespace

TEST_CASE("grad names the gradient of a param grad(<param name>)") {
  Graph g;
  E w = param(g, "layer.w", {2, 3});
  E b = param(g, "layer.b", {3});
  E x = input(g, "x", {4, 2});
  E loss = sum_all(tanh(matmul(x, w) + b));
  std::vector<E> gs = grad(loss, {w, b, x});
  REQUIRE(gs.size() == 3);
  CHECK(gs[0].name() == "grad(layer.w)");
  CHECK(gs[1].name() == "grad(layer.b)");
  CHECK(gs[2].name() == "grad(x)");
  CHECK(gs[0].shape() == Shape{2, 3});
  CHECK(gs[1].shape() == Shape{3});
  CHECK(gs[2].shape() == Shape{4, 2});

  SUBCASE("the gradient graph prints with grad(...) names") {
    const std::string text = to_text(g, {gs[0].id, gs[1].id});
    INFO(text);
    CHECK(text.find("# grad(layer.w)") != std::string::npos);
    CHECK(text.find("# grad(layer.b)") != std::string::npos);
    CHECK(text.find("matmul") != std::string::npos);
    CHECK(text.find("test_grad.cpp:") != std::string::npos);
    // Every node the gradient adds (after the forward graph) carries a grad(...) name.
    for (NodeId id : ancestors(g, {gs[0].id, gs[1].id}))
      if (id > loss.id) CHECK_MESSAGE(g.node(id).name.rfind("grad(", 0) == 0, "node %" << id << " '" << g.node(id).name << "'");
  }
}

TEST_CASE("gradient names on an unrolled RNN stay short: one value the gradient flows into, not a list") {
  // The user's GRU-like loop with no step scopes: the two products are named (as linear()
  // names them), the step's arithmetic between them is not.
  Graph g;
  const std::int64_t B = 2, T = 32, I = 3, H = 4;
  E x = input(g, "x", {B, T, I});  // x: (B, T, I)
  E w_ih = param(g, "rnn.ih.weight", {H, I}), w_hh = param(g, "rnn.hh.weight", {H, H});
  E h = input(g, "h0", {B, H});  // h: (B, H)
  for (std::int64_t t = 0; t < T; ++t) {
    E xt{&g, op::reshape(g, op::slice(g, x.id, 1, t, t + 1), {B, I})};
    E xi{}, hh{};
    {
      NameScope s(g, "rnn.ih");
      xi = matmul(xt, w_ih, false, true);  // (B, H)
    }
    {
      NameScope s(g, "rnn.hh");
      hh = matmul(h, w_hh, false, true);  // (B, H)
    }
    E z{&g, op::sigmoid(g, (xi + hh).id)};
    h = z * h + (1.f + -1.f * z) * tanh(xi + hh * z);
  }
  E loss = sum_all(h);
  const NodeId first = g.size();
  std::vector<E> gs = grad(loss, {w_ih, w_hh, x});
  CHECK(gs[0].name() == "grad(rnn.ih.weight)");
  CHECK(gs[1].name() == "grad(rnn.hh.weight)");
  std::size_t longest = 0;
  std::string worst;
  for (NodeId id = first; id < g.size(); ++id) {
    const std::string& n = g.node(id).name;
    if (n.size() > longest) longest = n.size(), worst = n;
    CHECK_MESSAGE(n.find(',') == std::string::npos, "%" << id << " '" << n << "'");
  }
  INFO(worst);
  CHECK(longest <= 24);  // "grad(rnn.hh.weight)" and the like
}

TEST_CASE("grad of a non-scalar output needs a seed") {
  Graph g;
  E w = param(g, "w", {3});
  E y = exp(w);
  CHECK_THROWS_AS(gg::grad(g, y.id, {w.id}), GraphError);
  try {
    gg::grad(g, y.id, {w.id});
  } catch (const GraphError& e) {
    CHECK(std::string(e.what()).find("(3,)") != std::string::npos);
  }
  SUBCASE("with a seed of the output's shape it works: d/dw sum(seed * exp(w)) = seed * exp(w)") {
    E seed = constant(g, {1.f, 2.f, 3.f}, {3});
    NodeId gw = gg::grad(g, y.id, {w.id}, seed.id)[0];
    ParamStore ps;
    ps.set("w", t32({3}, {0.f, 1.f, -1.f}));
    Executor ex(g, {gw}, ps);
    ex.run();
    const float* v = ex.value(gw).f();
    CHECK(v[0] == doctest::Approx(1.0));
    CHECK(v[1] == doctest::Approx(2.0 * std::exp(1.0)));
    CHECK(v[2] == doctest::Approx(3.0 * std::exp(-1.0)));
  }
  SUBCASE("a seed of the wrong shape throws") {
    E seed = constant(g, {1.f, 2.f}, {2});
    CHECK_THROWS_AS(gg::grad(g, y.id, {w.id}, seed.id), GraphError);
  }
}

TEST_CASE("a wrt that the output does not depend on gets zeros of its shape") {
  Graph g;
  E w = param(g, "w", {2, 2});
  E unused = param(g, "unused", {3, 2});
  E x = input(g, "x", {4});
  E loss = sum_all(w * w);
  E later = param(g, "later", {2});  // declared after the output
  std::vector<E> gs = grad(loss, {w, unused, x, later});
  CHECK(gs[1].name() == "grad(unused)");
  ParamStore ps;
  ps.set("w", t32({2, 2}, {1, 2, 3, 4}));
  ps.set("unused", t32({3, 2}, {1, 1, 1, 1, 1, 1}));
  ps.set("later", t32({2}, {5, 6}));
  Executor ex(g, {gs[0].id, gs[1].id, gs[2].id, gs[3].id}, ps);
  ex.run();
  Tensor gw = ex.get(gs[0].id);
  CHECK(gw.to_vector() == std::vector<float>{2, 4, 6, 8});
  for (int k = 1; k < 4; ++k) {
    Tensor t = ex.get(gs[std::size_t(k)].id);
    CHECK(t.shape() == gs[std::size_t(k)].shape());
    for (float v : t.fspan()) CHECK(v == 0.f);
  }
}

TEST_CASE("gradients of a node used twice accumulate") {
  Graph g;
  E x = param(g, "x", {});
  E y = x * x + 3.f * x + exp(x);  // dy/dx = 2x + 3 + e^x
  E d = grad(y, {x})[0];
  ParamStore ps;
  ps.set("x", t32({}, {0.7f}));
  Executor ex(g, {d.id}, ps);
  ex.run();
  CHECK(ex.scalar(d.id) == doctest::Approx(2 * 0.7 + 3 + std::exp(0.7)).epsilon(1e-6));
}

namespace {

struct Second {
  const char* name;
  std::function<E(E)> f;
  std::function<double(double)> d2;  // analytic second derivative
  std::vector<float> at;             // three points
};

}  // namespace

TEST_CASE("second derivatives: grad of grad matches the analytic f''") {
  const double sqpi = std::sqrt(std::numbers::pi);
  const std::vector<Second> fs = {
      {"x^3", [](E x) { return x * x * x; }, [](double x) { return 6 * x; }, {-1.3f, 0.4f, 2.f}},
      {"exp(x)", [](E x) { return exp(x); }, [](double x) { return std::exp(x); }, {-1.f, 0.2f, 1.5f}},
      {"tanh(x)", [](E x) { return tanh(x); },
       [](double x) { double t = std::tanh(x); return -2 * t * (1 - t * t); }, {-1.2f, 0.3f, 0.9f}},
      {"x*exp(x)", [](E x) { return x * exp(x); }, [](double x) { return (x + 2) * std::exp(x); },
       {-2.5f, 0.f, 1.1f}},
      {"log(x)", [](E x) { return log(x); }, [](double x) { return -1 / (x * x); }, {0.5f, 1.f, 3.f}},
      {"erf(x)", [](E x) { return erf(x); },
       [sqpi](double x) { return -4 * x / sqpi * std::exp(-x * x); }, {-0.8f, 0.3f, 1.4f}},
      {"sqrt(x)", [](E x) { return sqrt(x); }, [](double x) { return -0.25 * std::pow(x, -1.5); },
       {0.3f, 1.f, 4.f}},
      {"1/x", [](E x) { return 1.f / x; }, [](double x) { return 2 / (x * x * x); }, {-2.f, 0.5f, 1.7f}},
      {"x*x*tanh(x) - x/(1+x*x)", [](E x) { return x * x * tanh(x) - x / (1.f + x * x); },
       [](double x) {
         double t = std::tanh(x), s = 1 - t * t;  // (x^2 t)'' = 2t + 4x s - 2x^2 t s
         double a = 2 * t + 4 * x * s - 2 * x * x * t * s;
         double b = (2 * x * x * x - 6 * x) / std::pow(1 + x * x, 3);  // (x/(1+x^2))''
         return a - b;
       },
       {-0.9f, 0.6f, 1.3f}},
  };
  for (const Second& s : fs) {
    CAPTURE(s.name);
    for (int shaped = 0; shaped < 2; ++shaped) {
      CAPTURE(shaped);
      Graph g;
      // x: (3,) param, or () input evaluated at each point in turn.
      E x = shaped ? param(g, "x", {3}) : input(g, "x", {});
      E f = sum_all(s.f(x));
      E g1 = grad(f, {x})[0];              // f'(x), elementwise
      E g2 = grad(sum_all(g1), {x})[0];    // f''(x), elementwise
      CHECK(g2.shape() == x.shape());
      ParamStore ps;
      if (shaped) {
        ps.set("x", t32({3}, s.at));
        Executor ex(g, {g2.id}, ps);
        ex.run();
        for (int i = 0; i < 3; ++i) {
          const double want = s.d2(s.at[std::size_t(i)]);
          CAPTURE(s.at[std::size_t(i)]);
          CHECK(double(ex.value(g2.id).f()[i]) == doctest::Approx(want).epsilon(1e-4).scale(1.0));
        }
      } else {
        Executor ex(g, {g2.id}, ps);
        for (float p : s.at) {
          CAPTURE(p);
          ex.set_input("x", std::vector<float>{p});
          ex.run();
          CHECK(double(ex.scalar(g2.id)) == doctest::Approx(s.d2(p)).epsilon(1e-4).scale(1.0));
        }
      }
    }
  }
}

TEST_CASE("third derivative of x^4 through three grad() calls") {
  Graph g;
  E x = param(g, "x", {2});
  E f = sum_all(x * x * x * x);
  E d1 = grad(f, {x})[0];
  E d2 = grad(sum_all(d1), {x})[0];
  E d3 = grad(sum_all(d2), {x})[0];  // 24 x
  ParamStore ps;
  ps.set("x", t32({2}, {0.5f, -1.25f}));
  Executor ex(g, {d3.id}, ps);
  ex.run();
  CHECK(ex.value(d3.id).f()[0] == doctest::Approx(12.0).epsilon(1e-5));
  CHECK(ex.value(d3.id).f()[1] == doctest::Approx(-30.0).epsilon(1e-5));
}

TEST_CASE("Hessian-vector product of a 3->4->1 tanh MLP matches finite differences of the gradient") {
  Graph g;
  E x = input(g, "x", {5, 3});                               // x: (N, 3)
  E y = input(g, "y", {5, 1});                               // y: (N, 1)
  E W1 = param(g, "W1", {4, 3}), b1 = param(g, "b1", {4});  // fc1: 3 -> 4
  E W2 = param(g, "W2", {1, 4}), b2 = param(g, "b2", {1});  // fc2: 4 -> 1
  E h = tanh(matmul(x, W1, false, true) + b1);               // h: (N, 4)
  E pred = matmul(h, W2, false, true) + b2;                  // pred: (N, 1)
  E r = pred - y;
  E loss = sum_all(r * r);
  std::vector<E> gs = grad(loss, {W1, W2});
  E v1 = input(g, "v1", {4, 3}), v2 = input(g, "v2", {1, 4});
  E gv = sum_all(gs[0] * v1) + sum_all(gs[1] * v2);  // <grad, v>
  std::vector<E> hv = grad(gv, {W1, W2});            // H v, both blocks

  auto fill = [](std::size_t n, float a, float b) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = a * std::sin(b * float(i) + 0.3f);
    return v;
  };
  ParamStore ps;
  ps.set("W1", t32({4, 3}, fill(12, 0.8f, 1.7f)));
  ps.set("b1", t32({4}, fill(4, 0.3f, 2.3f)));
  ps.set("W2", t32({1, 4}, fill(4, 0.9f, 0.9f)));
  ps.set("b2", t32({1}, {0.1f}));
  const std::vector<float> v1s = fill(12, 1.f, 0.61f), v2s = fill(4, 1.f, 1.9f);
  Executor ex(g, {gs[0].id, gs[1].id, hv[0].id, hv[1].id}, ps);
  ex.set_input("x", fill(15, 1.2f, 0.77f));
  ex.set_input("y", fill(5, 0.5f, 1.3f));
  ex.set_input("v1", v1s);
  ex.set_input("v2", v2s);
  ex.run();
  const std::vector<float> hv1 = ex.get(hv[0].id).to_vector(), hv2 = ex.get(hv[1].id).to_vector();

  // (grad(W + h v) - grad(W - h v)) / 2h, in double from float evaluations.
  const Tensor W1_0 = ps.at("W1"), W2_0 = ps.at("W2");
  const double step = 1e-2;
  auto grads_at = [&](double sgn) {
    Tensor a = W1_0, b = W2_0;
    for (std::size_t i = 0; i < 12; ++i) a.f()[i] = float(double(W1_0.f()[i]) + sgn * step * v1s[i]);
    for (std::size_t i = 0; i < 4; ++i) b.f()[i] = float(double(W2_0.f()[i]) + sgn * step * v2s[i]);
    ps.at("W1") = a;
    ps.at("W2") = b;
    ex.run();
    std::vector<double> out;
    const Tensor t0 = ex.get(gs[0].id), t1 = ex.get(gs[1].id);
    for (float f : t0.fspan()) out.push_back(f);
    for (float f : t1.fspan()) out.push_back(f);
    return out;
  };
  std::vector<double> gp = grads_at(+1), gm = grads_at(-1);
  std::vector<double> fd(16), an(16);
  double scale = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    fd[i] = (gp[i] - gm[i]) / (2 * step);
    an[i] = i < 12 ? hv1[i] : hv2[i - 12];
    scale = std::max(scale, std::abs(fd[i]));
  }
  REQUIRE(scale > 0.1);  // a non-trivial curvature
  for (std::size_t i = 0; i < 16; ++i) {
    CAPTURE(i);
    CHECK(an[i] == doctest::Approx(fd[i]).epsilon(1e-2).scale(scale));
    CHECK(std::abs(an[i] - fd[i]) <= 1e-2 * scale);
  }
}

TEST_CASE("stop_gradient: the value passes, no gradient flows behind it") {
  Graph g;
  E w = param(g, "w", {3});
  E s = {&g, op::stop_gradient(g, w.id)};
  CHECK(g.node(s.id).attrs.no_grad);
  CHECK(s.shape() == w.shape());
  E loss = sum_all(w * s);  // d/dw sum(w * detach(w)) = detach(w) = w, not 2w
  // d loss / d s = w: the detached node itself is differentiable, and asking for it does
  // not open the path behind it. w gets one contribution (a mul), not mul + the path via s.
  std::vector<E> gs = grad(loss, {w, s});
  CHECK(gs[0].node().op == OpKind::mul);
  E only = sum_all(exp(E{&g, op::stop_gradient(g, (w * w).id)}));
  E gz = grad(only, {w})[0];  // every path is stopped: zeros
  ParamStore ps;
  ps.set("w", t32({3}, {0.5f, -2.f, 3.f}));
  Executor ex(g, {gs[0].id, gs[1].id, gz.id, s.id}, ps);
  ex.run();
  CHECK(ex.get(gs[0].id).to_vector() == std::vector<float>{0.5f, -2.f, 3.f});
  CHECK(ex.get(gs[1].id).to_vector() == std::vector<float>{0.5f, -2.f, 3.f});
  CHECK(ex.get(gz.id).to_vector() == std::vector<float>{0.f, 0.f, 0.f});
  CHECK(ex.get(s.id).to_vector() == std::vector<float>{0.5f, -2.f, 3.f});  // the value is w's
  CHECK(ancestors(g, {gz.id}).size() == 2);  // expand(0): nothing read from the forward graph
  CHECK_THROWS_WITH_AS(op::stop_gradient(g, 999), doctest::Contains("stop_gradient at test_grad.cpp:"), GraphError);
}

TEST_CASE("stop_gradient: second derivatives see it as a constant") {
  // f = sum(w^2 * detach(w)): f' = 2 w detach(w), f'' = 2 detach(w) (= 2w), not 6w.
  Graph g;
  E w = param(g, "w", {2});
  E f = sum_all(w * w * E{&g, op::stop_gradient(g, w.id)});
  E g1 = grad(f, {w})[0];
  E g2 = grad(sum_all(g1), {w})[0];
  ParamStore ps;
  ps.set("w", t32({2}, {1.5f, -0.5f}));
  Executor ex(g, {g1.id, g2.id}, ps);
  ex.run();
  CHECK(ex.get(g1.id).to_vector() == std::vector<float>{2 * 1.5f * 1.5f, 2 * 0.5f * 0.5f});
  CHECK(ex.get(g2.id).to_vector() == std::vector<float>{3.f, -1.f});
}
