// Tests for dsl/nn.cpp's noise, random_uniform and random_normal: their moments over
// 100,000 draws, fresh draws at each run, the same draws for the same state of the
// executor's generator (what a resumed run restores), and the reparameterization
// mu + sigma * eps: no gradient flows into the noise, and the gradients of mu and sigma
// are those of the same graph with the noise fed as a fixed input.
//
// Each statistical tolerance is 5 standard errors of its statistic under the intended
// distribution (a correct generator fails one with probability below 1e-6; the seeds are
// fixed, so a test is repeatable either way).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autodiff/gradcheck.h"
#include "dsl/nn.h"
#include "ops/runtime/executor.h"

namespace {

using namespace gg;
using namespace gg::dsl;

constexpr std::int64_t kDraws = 100000;

// The values of `x` in one run of an executor seeded with `seed`.
std::vector<float> draw(Graph& g, Expr x, std::uint64_t seed) {
  ParamStore ps;
  Executor ex(g, {x.id}, ps, seed);
  ex.run();
  return ex.get(x.id).to_vector();
}

struct Moments {
  double mean = 0, sd = 0, skew = 0, excess_kurtosis = 0;
};

Moments moments(const std::vector<float>& v) {
  const double n = double(v.size());
  Moments m;
  for (float x : v) m.mean += x;
  m.mean /= n;
  double m2 = 0, m3 = 0, m4 = 0;
  for (float x : v) {
    const double d = x - m.mean;
    m2 += d * d, m3 += d * d * d, m4 += d * d * d * d;
  }
  m2 /= n, m3 /= n, m4 /= n;
  m.sd = std::sqrt(m2);
  m.skew = m3 / (m2 * m.sd);
  m.excess_kurtosis = m4 / (m2 * m2) - 3;
  return m;
}

double fraction(const std::vector<float>& v, double lo, double hi) {
  return double(std::count_if(v.begin(), v.end(), [&](float x) { return x >= lo && x < hi; })) / double(v.size());
}

}  // namespace

TEST_CASE("random_normal: mean 0, sd 1, normal shape over 100,000 draws") {
  Graph g;
  Expr z = random_normal(g, {kDraws / 100, 100});
  CHECK(z.shape() == Shape{kDraws / 100, 100});
  const std::vector<float> v = draw(g, z, 11);
  const double n = double(v.size());
  CHECK(std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }));
  CHECK(*std::max_element(v.begin(), v.end()) <= 5.8f);  // |z| <= sqrt(-2 log 2^-24) = 5.77
  CHECK(*std::min_element(v.begin(), v.end()) >= -5.8f);
  const Moments m = moments(v);
  // Standard errors of a standard normal sample: mean 1/sqrt(n), sd 1/sqrt(2n),
  // skewness sqrt(6/n), excess kurtosis sqrt(24/n).
  CHECK(std::abs(m.mean) <= 5 / std::sqrt(n));
  CHECK(std::abs(m.sd - 1) <= 5 / std::sqrt(2 * n));
  CHECK(std::abs(m.skew) <= 5 * std::sqrt(6 / n));
  CHECK(std::abs(m.excess_kurtosis) <= 5 * std::sqrt(24 / n));
  // Mass within 1 and 2 sd, 0.682689 and 0.954500; binomial standard error sqrt(p (1 - p) / n).
  for (auto [k, p] : {std::pair{1.0, 0.682689492}, std::pair{2.0, 0.954499736}}) {
    INFO("within " << k << " sd");
    CHECK(std::abs(fraction(v, -k, k) - p) <= 5 * std::sqrt(p * (1 - p) / n));
  }
  // Neighbours uncorrelated (the two uniform draws are independent streams of one
  // generator): the correlation of independent pairs has standard error 1/sqrt(n).
  double c = 0;
  for (std::size_t i = 0; i + 1 < v.size(); ++i) c += (v[i] - m.mean) * (v[i + 1] - m.mean);
  CHECK(std::abs(c / (n - 1) / (m.sd * m.sd)) <= 5 / std::sqrt(n));
}

TEST_CASE("random_uniform: inside [lo, hi], flat over 100,000 draws") {
  Graph g;
  const float lo = -2.f, hi = 3.f;
  Expr u = random_uniform(g, {kDraws}, lo, hi);
  const std::vector<float> v = draw(g, u, 12);
  const double n = double(v.size()), w = hi - lo;
  CHECK(*std::min_element(v.begin(), v.end()) >= lo);
  CHECK(*std::max_element(v.begin(), v.end()) <= hi);
  const Moments m = moments(v);
  // mean (lo + hi) / 2, standard error w / sqrt(12 n); variance w^2 / 12, standard error
  // sqrt((mu4 - sigma^4) / n) with mu4 = w^4 / 80.
  CHECK(std::abs(m.mean - 0.5 * (lo + hi)) <= 5 * w / std::sqrt(12 * n));
  CHECK(std::abs(m.sd * m.sd - w * w / 12) <= 5 * std::sqrt((std::pow(w, 4) / 80 - std::pow(w * w / 12, 2)) / n));
  // Ten equal bins, each with probability 0.1.
  for (int b = 0; b < 10; ++b) {
    INFO("bin " << b);
    CHECK(std::abs(fraction(v, lo + w * b / 10, lo + w * (b + 1) / 10) - 0.1) <= 5 * std::sqrt(0.09 / n));
  }
  // The default is [0, 1); lo < hi is required, at the user's line.
  Expr d = random_uniform(g, {1000});
  const std::vector<float> dv = draw(g, d, 13);
  CHECK(*std::min_element(dv.begin(), dv.end()) >= 0.f);
  CHECK(*std::max_element(dv.begin(), dv.end()) < 1.f);
  CHECK_THROWS_WITH_AS(random_uniform(g, {3}, 1.f, 1.f), doctest::Contains("test_random.cpp:"), GraphError);
}

TEST_CASE("noise: fresh at each run, the same for the same state of the executor's generator") {
  Graph g;
  Expr z = random_normal(g, {64});
  Expr u = random_uniform(g, {64}, -1.f, 1.f);
  ParamStore ps;
  Executor ex(g, {z.id, u.id}, ps, 5);
  ex.run();
  const std::vector<float> z1 = ex.get(z.id).to_vector(), u1 = ex.get(u.id).to_vector();
  // The generator's state between the runs, as a checkpoint stores it (as text).
  std::stringstream saved;
  saved << ex.rng();
  ex.run();
  const std::vector<float> z2 = ex.get(z.id).to_vector(), u2 = ex.get(u.id).to_vector();
  CHECK(z2 != z1);
  CHECK(u2 != u1);

  SUBCASE("another executor with the same seed draws the same noise") {
    Executor same(g, {z.id, u.id}, ps, 5);
    same.run();
    CHECK(same.get(z.id).to_vector() == z1);
    CHECK(same.get(u.id).to_vector() == u1);
    Executor other(g, {z.id, u.id}, ps, 6);
    other.run();
    CHECK(other.get(z.id).to_vector() != z1);
  }
  SUBCASE("a run after restoring the generator's state draws what the run after that state drew") {
    Executor resumed(g, {z.id, u.id}, ps, 99);
    saved >> resumed.rng();
    resumed.run();
    CHECK(resumed.get(z.id).to_vector() == z2);
    CHECK(resumed.get(u.id).to_vector() == u2);
  }
}

TEST_CASE("reparameterization mu + sigma * eps: no gradient into the noise, mu's and sigma's are eps held fixed") {
  const Shape s{16, 8};
  std::vector<float> w(128);  // the loss's weights, of both signs
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = float(std::sin(0.7 * double(i) + 1)) + (i % 3 ? 0.5f : -0.5f);
  ParamStore ps;
  ps.set("mu", Tensor::f32({8}, std::vector<float>{0.1f, -0.3f, 0.5f, 0.2f, -0.7f, 0.4f, 0.0f, -0.1f}));
  ps.set("sigma", Tensor::f32({8}, std::vector<float>{0.5f, 1.2f, 0.3f, 0.8f, 0.6f, 1.5f, 0.9f, 0.4f}));
  // loss(eps) = sum(w * tanh(mu + sigma * eps)); eps: (16, 8)
  auto build = [&](Graph& g, Expr eps) {
    Expr mu = param(g, "mu", {8});
    Expr sigma = param(g, "sigma", {8});
    return std::pair{sum_all(tanh(mu + sigma * eps) * constant(g, w, s)), std::vector<Expr>{mu, sigma}};
  };

  // With the noise drawn in the graph: the gradients and the noise of one run.
  Graph g;
  Expr eps = random_normal(g, s);
  auto [loss, wrt] = build(g, eps);
  const NodeId before = g.size();
  std::vector<Expr> grads = grad(loss, wrt);
  for (NodeId i = before; i < g.size(); ++i) {  // nothing differentiates the noise's cos, log or sqrt
    INFO(op_name(g.node(i).op));
    CHECK(g.node(i).op != OpKind::sin);
    CHECK(g.node(i).op != OpKind::random);
  }
  Executor ex(g, {eps.id, grads[0].id, grads[1].id}, ps, 3);
  ex.run();
  const Tensor e = ex.get(eps.id), g_mu = ex.get(grads[0].id), g_sigma = ex.get(grads[1].id);

  // Analytically: d/dmu_j = sum_i w_ij (1 - t_ij^2), d/dsigma_j = sum_i w_ij (1 - t_ij^2) eps_ij,
  // t = tanh(mu + sigma * eps), with this run's eps.
  const Tensor& mu = ps.at("mu");
  const Tensor& sigma = ps.at("sigma");
  for (std::int64_t j = 0; j < 8; ++j) {
    double dmu = 0, dsigma = 0;
    for (std::int64_t i = 0; i < 16; ++i) {
      const double x = e.f()[i * 8 + j], t = std::tanh(double(mu.f()[j]) + double(sigma.f()[j]) * x);
      dmu += w[std::size_t(i * 8 + j)] * (1 - t * t);
      dsigma += w[std::size_t(i * 8 + j)] * (1 - t * t) * x;
    }
    INFO("j = " << j);
    CHECK(g_mu.f()[j] == doctest::Approx(dmu).epsilon(1e-5).scale(1));
    CHECK(g_sigma.f()[j] == doctest::Approx(dsigma).epsilon(1e-5).scale(1));
  }

  // The same graph with that noise fed as an input: central differences agree, and so do
  // the gradients bit for bit.
  Graph fed;
  Expr eps_in = input(fed, "eps", s);
  auto [fed_loss, fed_wrt] = build(fed, eps_in);
  const std::map<std::string, Tensor> inputs{{"eps", e}};
  GradcheckResult r = gradcheck(fed, fed_loss.id, {fed_wrt[0].id, fed_wrt[1].id}, ps, inputs);
  INFO("worst: " << r.worst);
  CHECK(r.ok);
  CHECK(r.checked == 16);
  std::vector<Expr> fed_grads = grad(fed_loss, fed_wrt);
  Executor fx(fed, {fed_grads[0].id, fed_grads[1].id}, ps);
  fx.set_input("eps", e);
  fx.run();
  CHECK(fx.get(fed_grads[0].id).to_vector() == g_mu.to_vector());
  CHECK(fx.get(fed_grads[1].id).to_vector() == g_sigma.to_vector());
}
