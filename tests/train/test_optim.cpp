// Tests for train/optim.cpp: SGD (with and without momentum) and AdamW against the
// PyTorch formulas of the reference-model spec ("Training step") evaluated in double,
// gradient clipping (and grad_stats' promise about it), optimizer state round trips and
// the cosine learning-rate schedule.
#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "autodiff/grad_stats.h"
#include "ops/cpu/threads.h"
#include "train/optim.h"

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

TEST_CASE("grad_stats' clipped_norm is the global norm clip_grad_norm leaves") {
  Tensor a({4}), b({2});
  std::vector<float> ga = {3.f, 0.f, -4.f, 0.f}, gb = {0.f, 12.f};
  std::vector<ParamGrad> pg = {{"a", &a, ga}, {"b", &b, gb}};
  GradStats c = grad_stats(pg, 1.0);
  CHECK(c.global_norm == doctest::Approx(13.0));
  clip_grad_norm(pg, 1.0);
  GradStats after = grad_stats(pg);
  CHECK(c.clipped_norm == doctest::Approx(after.global_norm).epsilon(1e-6));
  CHECK(c.clipped_norm == doctest::Approx(1.0).epsilon(1e-5));
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
// The message of the GraphError that `f` throws ("" when none is).
const auto error_of = [](auto&& f) { return gg::test::error_of<GraphError>(f); };
using gg::test::contains;
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
    CHECK(contains(msg, "'adam_m.b'"));
    CHECK(contains(msg, "missing"));
  }
  SUBCASE("a moment of the wrong shape names the key (so the parameter) and both shapes") {
    auto s = adam.state();
    s["adam_v.w"] = Tensor({4});
    AdamW a2;
    std::string msg = error_of([&] { a2.load_state(s, 2, shapes); });
    CHECK(contains(msg, "'adam_v.w'"));
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

namespace {
// Three parameters of awkward sizes around the pass's chunk (2.5 chunks, 1 value, 3x7),
// with gradients large enough to be clipped.
struct Big {
  ParamStore store;
  std::vector<std::vector<float>> grads;
  Big() {
    const std::vector<std::pair<std::string, Shape>> shapes = {
        {"big", {5, grad_chunk / 2}}, {"one", {1}}, {"mat", {3, 7}}};
    for (auto& [name, shape] : shapes) {
      Tensor t(shape);
      for (std::int64_t i = 0; i < t.numel(); ++i) t.f()[i] = float(std::sin(0.37 * double(i) + double(name.size())));
      store.set(name, t);
      grads.emplace_back(std::size_t(t.numel()));
    }
  }
  void set_grads(int t) {
    for (std::size_t p = 0; p < grads.size(); ++p)
      for (std::size_t i = 0; i < grads[p].size(); ++i)
        grads[p][i] = float(std::cos(0.11 * double(i) + 0.9 * t + double(p)) * (0.5 + double(p)));
  }
  std::vector<ParamGrad> pg() {
    return {{"big", &store.at("big"), grads[0]}, {"one", &store.at("one"), grads[1]}, {"mat", &store.at("mat"), grads[2]}};
  }
  std::vector<float> all() {
    std::vector<float> v;
    for (const char* n : {"big", "one", "mat"})
      for (float f : store.at(n).fspan()) v.push_back(f);
    return v;
  }
};
struct Threads {
  int before = num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(before); }
};
// The per-parameter AdamW loop the fused pass replaced, kept as the bit-exact reference.
void adamw_reference(Big& f, std::map<std::string, std::vector<float>>& m, std::map<std::string, std::vector<float>>& v,
                     int t, double lr, AdamWOptions o) {
  const float b1 = float(o.beta1), b2 = float(o.beta2);
  const float bc1 = float(1.0 - std::pow(o.beta1, double(t)));
  const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(o.beta2, double(t))));
  const float step_size = float(lr) / bc1, eps = float(o.eps), decay = float(1.0 - lr * o.weight_decay);
  for (const ParamGrad& p : f.pg()) {
    float* w = p.param->f();
    auto& mm = m.try_emplace(p.name, std::size_t(p.param->numel()), 0.f).first->second;
    auto& vv = v.try_emplace(p.name, std::size_t(p.param->numel()), 0.f).first->second;
    for (std::int64_t i = 0; i < p.param->numel(); ++i) {
      if (p.param->shape().size() >= 2) w[i] *= decay;
      mm[std::size_t(i)] = b1 * mm[std::size_t(i)] + (1.f - b1) * p.grad[std::size_t(i)];
      vv[std::size_t(i)] = b2 * vv[std::size_t(i)] + (1.f - b2) * p.grad[std::size_t(i)] * p.grad[std::size_t(i)];
      const float denom = std::sqrt(vv[std::size_t(i)]) / bc2_sqrt + eps;
      w[i] -= step_size * mm[std::size_t(i)] / denom;
    }
  }
}
}  // namespace

TEST_CASE("grad_norm: one chunked pass, equal to the double sum, the same bits at 1 and 2 threads") {
  Big f;
  f.set_grads(1);
  double want = 0;
  for (auto& g : f.grads)
    for (float x : g) want += double(x) * double(x);
  double at[2];
  for (int threads : {1, 2}) {
    Threads th(threads);
    at[threads - 1] = grad_norm(f.pg());
  }
  CHECK(at[0] == at[1]);
  CHECK(at[0] == doctest::Approx(std::sqrt(want)).epsilon(1e-12));
  CHECK(clip_scale(at[0], 0) == 1.f);
  CHECK(clip_scale(at[0], 1e9) == 1.f);
  CHECK(clip_scale(at[0], 1.0) == float(1.0 / (at[0] + 1e-6)));
}

TEST_CASE("AdamW and SGD steps with a deferred clip scale equal clip_grad_norm then step, bit for bit, at 1 and 2 threads") {
  const AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  std::vector<float> runs[4];
  for (int threads : {1, 2})
    for (bool deferred : {false, true}) {
      Threads th(threads);
      Big f;
      AdamW adam(o);
      Sgd sgd(0.9);
      for (int t = 1; t <= 3; ++t) {
        f.set_grads(t);
        Optimizer& opt = t == 2 ? static_cast<Optimizer&>(sgd) : adam;
        if (deferred) {
          const float scale = clip_scale(grad_norm(f.pg()), 2.0);
          CHECK(scale < 1.f);  // the clip does something
          opt.step(f.pg(), 1e-2, scale);
        } else {
          clip_grad_norm(f.pg(), 2.0);
          opt.step(f.pg(), 1e-2);
        }
      }
      runs[(threads - 1) * 2 + deferred] = f.all();
    }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
  CHECK(runs[0] == runs[3]);
}

TEST_CASE("AdamW's fused pass gives the bits of the per-parameter loop it replaced") {
  const AdamWOptions o{0.9, 0.99, 1e-8, 0.1};
  Big fused, ref;
  AdamW adam(o);
  std::map<std::string, std::vector<float>> m, v;
  for (int t = 1; t <= 3; ++t) {
    fused.set_grads(t);
    ref.set_grads(t);
    adam.step(fused.pg(), 1e-3);
    adamw_reference(ref, m, v, t, 1e-3, o);
  }
  CHECK(fused.all() == ref.all());
  CHECK(adam.state().at("adam_m.big").to_vector() == m.at("big"));
  CHECK(adam.state().at("adam_v.mat").to_vector() == v.at("mat"));
}
