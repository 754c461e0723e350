// Tests for autodiff/optim.cpp: SGD (with and without momentum) and AdamW against the
// PyTorch formulas of the reference-model spec ("Training step") evaluated in double,
// gradient clipping, optimizer state round trips and the cosine learning-rate schedule.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "autodiff/optim.h"

namespace {

using namespace gg;
using dvec = std::vector<double>;

// Two parameters: "w" (2, 2) (decays under AdamW) and "b" (3,) (does not).
struct Fixture {
  ParamStore store;
  std::vector<std::vector<float>> grads{std::vector<float>(4), std::vector<float>(3)};
  Fixture() {
    store.set("w", Tensor::f32({2, 2}, std::vector<float>{0.5f, -1.25f, 2.f, 0.75f}));
    store.set("b", Tensor::f32({3}, std::vector<float>{-0.3f, 0.9f, 1.5f}));
  }
  // Deterministic gradients for step t (1-based), different each step.
  void set_grads(int t) {
    for (std::size_t i = 0; i < 4; ++i) grads[0][i] = float(std::sin(1.3 * double(i) + 0.7 * t) * (1 + 0.5 * t));
    for (std::size_t i = 0; i < 3; ++i) grads[1][i] = float(std::cos(0.9 * double(i) - 0.4 * t) * 0.3);
  }
  std::vector<ParamGrad> pg() { return {{"w", &store.at("w"), grads[0]}, {"b", &store.at("b"), grads[1]}}; }
  dvec values(const std::string& n) {
    dvec v;
    for (float f : store.at(n).fspan()) v.push_back(f);
    return v;
  }
};

void check_close(const std::vector<float>& got, const dvec& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << "[" << i << "]: got " << got[i] << " want " << want[i]);
    CHECK(std::abs(double(got[i]) - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

}  // namespace

TEST_CASE("Sgd without momentum: p -= lr * g over 3 steps") {
  Fixture f;
  dvec w = f.values("w"), b = f.values("b");
  Sgd opt;
  const double lr = 0.1;
  for (int t = 1; t <= 3; ++t) {
    f.set_grads(t);
    opt.step(f.pg(), lr);
    for (std::size_t i = 0; i < 4; ++i) w[i] -= lr * f.grads[0][i];
    for (std::size_t i = 0; i < 3; ++i) b[i] -= lr * f.grads[1][i];
  }
  CHECK(opt.steps() == 3);
  check_close(f.store.at("w").to_vector(), w, 1e-6, "w");
  check_close(f.store.at("b").to_vector(), b, 1e-6, "b");
  CHECK(opt.state().empty());
}

TEST_CASE("Sgd with momentum: buf = m buf + g (buf = g at step 1), p -= lr * buf") {
  Fixture f;
  dvec w = f.values("w"), b = f.values("b");
  dvec bw(4), bb(3);
  const double lr = 0.05, m = 0.9;
  Sgd opt(m);
  for (int t = 1; t <= 3; ++t) {
    f.set_grads(t);
    opt.step(f.pg(), lr);
    for (std::size_t i = 0; i < 4; ++i) {
      bw[i] = t == 1 ? f.grads[0][i] : m * bw[i] + f.grads[0][i];
      w[i] -= lr * bw[i];
    }
    for (std::size_t i = 0; i < 3; ++i) {
      bb[i] = t == 1 ? f.grads[1][i] : m * bb[i] + f.grads[1][i];
      b[i] -= lr * bb[i];
    }
  }
  check_close(f.store.at("w").to_vector(), w, 1e-6, "w");
  check_close(f.store.at("b").to_vector(), b, 1e-6, "b");
  auto st = opt.state();
  REQUIRE(st.count("momentum.w"));
  check_close(st.at("momentum.w").to_vector(), bw, 1e-6, "momentum.w");
}

TEST_CASE("AdamW: decoupled decay on 2-D params only, bias-corrected Adam, 3 steps") {
  Fixture f;
  dvec w = f.values("w"), b = f.values("b");
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
  AdamW opt({.beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd});
  dvec mw(4), vw(4), mb(3), vb(3);
  // PyTorch torch.optim.AdamW, in double.
  auto ref = [&](dvec& p, dvec& m, dvec& v, const std::vector<float>& g, int t, bool decays) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decays) p[i] -= lr * wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
      p[i] -= lr * (m[i] / (1 - std::pow(b1, t))) / (std::sqrt(v[i] / (1 - std::pow(b2, t))) + eps);
    }
  };
  for (int t = 1; t <= 3; ++t) {
    f.set_grads(t);
    opt.step(f.pg(), lr);
    ref(w, mw, vw, f.grads[0], t, true);
    ref(b, mb, vb, f.grads[1], t, false);
    INFO("step " << t);
    check_close(f.store.at("w").to_vector(), w, 2e-6, "w");
    check_close(f.store.at("b").to_vector(), b, 2e-6, "b");
  }
  CHECK(opt.steps() == 3);
  auto st = opt.state();
  REQUIRE(st.count("adam_m.w"));
  REQUIRE(st.count("adam_v.b"));
  check_close(st.at("adam_m.w").to_vector(), mw, 1e-6, "adam_m.w");
  check_close(st.at("adam_v.b").to_vector(), vb, 1e-6, "adam_v.b");

  SUBCASE("the 1-D parameter really gets no decay (same run with weight_decay 0 agrees on b)") {
    Fixture f2;
    AdamW nodecay({.beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = 0});
    for (int t = 1; t <= 3; ++t) {
      f2.set_grads(t);
      nodecay.step(f2.pg(), lr);
    }
    CHECK(f2.store.at("b").to_vector() == f.store.at("b").to_vector());
    CHECK(f2.store.at("w").to_vector() != f.store.at("w").to_vector());
  }
}

TEST_CASE("clip_grad_norm returns the norm before clipping and scales by min(1, c / (norm + 1e-6))") {
  std::vector<float> ga = {3.f, 0.f, -4.f}, gb = {12.f};  // norm = sqrt(9 + 16 + 144) = 13
  Tensor pa({3}), pb({1});
  auto pg = [&] { return std::vector<ParamGrad>{{"a", &pa, ga}, {"b", &pb, gb}}; };

  SUBCASE("clipping to 6.5 halves every gradient") {
    const double norm = clip_grad_norm(pg(), 6.5);
    CHECK(norm == doctest::Approx(13.0).epsilon(1e-12));
    const double s = 6.5 / (13.0 + 1e-6);
    CHECK(ga[0] == doctest::Approx(3 * s).epsilon(1e-6));
    CHECK(ga[1] == 0.f);
    CHECK(ga[2] == doctest::Approx(-4 * s).epsilon(1e-6));
    CHECK(gb[0] == doctest::Approx(12 * s).epsilon(1e-6));
    double after = 0;
    for (float v : ga) after += double(v) * v;
    after += double(gb[0]) * gb[0];
    CHECK(std::sqrt(after) == doctest::Approx(6.5).epsilon(1e-6));
  }
  SUBCASE("a max_norm above the norm leaves gradients unchanged (scale capped at 1)") {
    CHECK(clip_grad_norm(pg(), 100.0) == doctest::Approx(13.0));
    CHECK(ga == std::vector<float>{3.f, 0.f, -4.f});
    CHECK(gb == std::vector<float>{12.f});
  }
  SUBCASE("max_norm <= 0 never clips") {
    CHECK(clip_grad_norm(pg(), 0.0) == doctest::Approx(13.0));
    CHECK(clip_grad_norm(pg(), -1.0) == doctest::Approx(13.0));
    CHECK(ga == std::vector<float>{3.f, 0.f, -4.f});
    CHECK(gb == std::vector<float>{12.f});
  }
  SUBCASE("norm is accumulated in double") {
    std::vector<float> big(1000, 1e-3f);
    Tensor pbig({1000});
    std::vector<ParamGrad> one = {{"big", &pbig, big}};
    CHECK(clip_grad_norm(one, 0) == doctest::Approx(std::sqrt(1000.0) * double(1e-3f)).epsilon(1e-12));
  }
}

TEST_CASE("optimizer state()/load_state() round trip gives bit-identical next steps") {
  auto run = [](Optimizer& a, Optimizer& b, Optimizer& fresh) {
    Fixture fa;
    for (int t = 1; t <= 2; ++t) {
      fa.set_grads(t);
      a.step(fa.pg(), 0.05);
    }
    // b resumes from a's state with a copy of a's parameters; `fresh` starts without state.
    Fixture fb, fc;
    fb.store = fa.store;
    fc.store = fa.store;
    b.load_state(a.state(), a.steps(), param_shapes(fa.store));
    CHECK(b.steps() == 2);
    for (int t = 3; t <= 4; ++t) {
      fa.set_grads(t);
      fb.set_grads(t);
      fc.set_grads(t);
      a.step(fa.pg(), 0.05);
      b.step(fb.pg(), 0.05);
      fresh.step(fc.pg(), 0.05);
    }
    CHECK(fb.store.at("w").to_vector() == fa.store.at("w").to_vector());
    CHECK(fb.store.at("b").to_vector() == fa.store.at("b").to_vector());
    CHECK(b.steps() == a.steps());
    // Without the state the result differs: the round trip is what made them equal.
    CHECK(fc.store.at("w").to_vector() != fa.store.at("w").to_vector());
  };
  SUBCASE("Sgd with momentum") {
    Sgd a(0.9), b(0.9), c(0.9);
    run(a, b, c);
    CHECK(a.state().size() == 2);
  }
  SUBCASE("AdamW") {
    AdamW a({.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
    AdamW b({.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
    AdamW c({.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
    run(a, b, c);
    CHECK(a.state().size() == 4);
  }
}

TEST_CASE("cosine_lr: linear warm-up, cosine decay, lr_min after the end") {
  const double mx = 1e-3, mn = 1e-5;
  const std::int64_t warm = 10, total = 110;
  CHECK(cosine_lr(0, warm, total, mx, mn) == doctest::Approx(mx / 10));
  CHECK(cosine_lr(4, warm, total, mx, mn) == doctest::Approx(mx * 5 / 10));
  CHECK(cosine_lr(9, warm, total, mx, mn) == doctest::Approx(mx));
  CHECK(cosine_lr(warm, warm, total, mx, mn) == doctest::Approx(mx));  // decay starts at lr_max
  CHECK(cosine_lr(60, warm, total, mx, mn) == doctest::Approx((mx + mn) / 2));
  const double t = 75.0 / 100.0;
  CHECK(cosine_lr(85, warm, total, mx, mn) == doctest::Approx(mn + 0.5 * (1 + std::cos(std::numbers::pi * t)) * (mx - mn)));
  CHECK(cosine_lr(total - 1, warm, total, mx, mn) > mn);
  CHECK(cosine_lr(total - 1, warm, total, mx, mn) < mn + 1e-3 * (mx - mn));
  CHECK(cosine_lr(total, warm, total, mx, mn) == doctest::Approx(mn));
  CHECK(cosine_lr(total + 50, warm, total, mx, mn) == mn);
  // Monotone: non-decreasing during warm-up, non-increasing after.
  for (std::int64_t s = 1; s < warm; ++s) CHECK(cosine_lr(s, warm, total, mx, mn) > cosine_lr(s - 1, warm, total, mx, mn));
  for (std::int64_t s = warm + 1; s <= total; ++s)
    CHECK(cosine_lr(s, warm, total, mx, mn) <= cosine_lr(s - 1, warm, total, mx, mn));
  SUBCASE("no warm-up") {
    CHECK(cosine_lr(0, 0, 100, mx, mn) == doctest::Approx(mx));
    CHECK(cosine_lr(50, 0, 100, mx, mn) == doctest::Approx((mx + mn) / 2));
    CHECK(cosine_lr(100, 0, 100, mx, mn) == doctest::Approx(mn));
  }
}

namespace {
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const GraphError& e) {
    return e.what();
  }
  FAIL("no GraphError thrown");
  return {};
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("load_state is checked against the parameters: kind, keys, shapes, steps") {
  Fixture f;
  const ParamShapes shapes = param_shapes(f.store);
  AdamW adam;
  Sgd sgd(0.9), plain;
  for (int t = 1; t <= 2; ++t) {
    f.set_grads(t);
    adam.step(f.pg(), 0.01);
    sgd.step(f.pg(), 0.01);
  }
  SUBCASE("the optimizer's own state loads") {
    AdamW a2;
    a2.load_state(adam.state(), 2, shapes);
    CHECK(a2.steps() == 2);
    Sgd s2(0.9);
    s2.load_state(sgd.state(), 2, shapes);
    CHECK(s2.steps() == 2);
    Sgd p2;
    p2.load_state(plain.state(), 5, shapes);  // no buffers without momentum
  }
  SUBCASE("another optimizer's state is refused, naming both kinds") {
    AdamW a2;
    std::string msg = error_of([&] { a2.load_state(sgd.state(), 2, shapes); });
    CHECK(contains(msg, "sgd"));
    CHECK(contains(msg, "adamw"));
    Sgd s2(0.9);
    msg = error_of([&] { s2.load_state(adam.state(), 2, shapes); });
    CHECK(contains(msg, "sgd"));
    CHECK(contains(msg, "adamw"));
    // Plain SGD's state (no tensors) at step 1000: AdamW misses its moments.
    msg = error_of([&] { a2.load_state(plain.state(), 1000, shapes); });
    CHECK(contains(msg, "adam_m.b"));
    CHECK(contains(msg, "'b'"));
    CHECK(contains(msg, "missing"));
  }
  SUBCASE("a moment of the wrong shape names the parameter, the key and both shapes") {
    auto s = adam.state();
    s["adam_v.w"] = Tensor({4});
    AdamW a2;
    std::string msg = error_of([&] { a2.load_state(s, 2, shapes); });
    CHECK(contains(msg, "adam_v.w"));
    CHECK(contains(msg, "'w'"));
    CHECK(contains(msg, "(4,)"));
    CHECK(contains(msg, "(2, 2)"));
  }
  SUBCASE("an unexpected key, a missing key, negative steps") {
    auto s = adam.state();
    s["adam_m.ghost"] = Tensor({3});
    AdamW a2;
    CHECK(contains(error_of([&] { a2.load_state(s, 2, shapes); }), "adam_m.ghost"));
    auto s2 = sgd.state();
    s2.erase("momentum.w");
    Sgd m2(0.9);
    std::string msg = error_of([&] { m2.load_state(s2, 2, shapes); });
    CHECK(contains(msg, "momentum.w"));
    CHECK(contains(msg, "missing"));
    CHECK(contains(error_of([&] { a2.load_state(adam.state(), -1, shapes); }), "-1"));
  }
}

TEST_CASE("step() and clip_grad_norm refuse a gradient whose size differs from its parameter's") {
  Fixture f;
  std::vector<float> short_grad(3);
  std::vector<ParamGrad> pg = {{"w", &f.store.at("w"), short_grad}};
  AdamW adam;
  Sgd sgd(0.9);
  for (Optimizer* o : std::initializer_list<Optimizer*>{&adam, &sgd}) {
    std::string msg = error_of([&] { o->step(pg, 0.1); });
    CHECK(contains(msg, "'w'"));
    CHECK(contains(msg, "3"));
    CHECK(contains(msg, "4"));
  }
  CHECK(contains(error_of([&] { clip_grad_norm(pg, 1.0); }), "'w'"));
}

TEST_CASE("step() refuses a parameter whose loaded moments have another shape, instead of reading past them") {
  Fixture f;
  AdamW adam;
  f.set_grads(1);
  adam.step(f.pg(), 0.01);
  AdamW a2;
  a2.load_state(adam.state(), 1, param_shapes(f.store));
  Tensor w3({3});
  std::vector<float> g3(3, 0.1f);
  std::vector<ParamGrad> pg = {{"w", &w3, g3}};
  std::string msg = error_of([&] { a2.step(pg, 0.01); });
  CHECK(contains(msg, "adam_m.w"));
  CHECK(contains(msg, "(2, 2)"));
  CHECK(contains(msg, "(3,)"));
}
