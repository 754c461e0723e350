// Tests for autodiff/grad_stats.cpp: gradient statistics, and the structural-zero
// analysis on each of its three reasons (and on gradients that are not zero).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autodiff/grad.h"
#include "autodiff/grad_stats.h"
#include "ops/ir/build.h"
#include "ops/runtime/executor.h"

using namespace gg;

TEST_CASE("grad_stats: per parameter norm, max |g|, zero fraction; global norm before and after clipping") {
  Tensor a({4}), b({2});
  std::vector<float> ga = {3.f, 0.f, -4.f, 0.f}, gb = {0.f, 12.f};
  std::vector<ParamGrad> pg = {{"a", &a, ga}, {"b", &b, gb}};
  GradStats s = grad_stats(pg);
  REQUIRE(s.params.size() == 2);
  CHECK(s.params[0].name == "a");
  CHECK(s.params[0].norm == doctest::Approx(5.0));
  CHECK(s.params[0].max_abs == 4.0);
  CHECK(s.params[0].zero_fraction == 0.5);
  CHECK(s.params[1].norm == doctest::Approx(12.0));
  CHECK(s.params[1].zero_fraction == 0.5);
  CHECK(s.global_norm == doctest::Approx(13.0));
  CHECK(s.clipped_norm == s.global_norm);

  GradStats c = grad_stats(pg, 1.0);
  CHECK(c.global_norm == doctest::Approx(13.0));
  CHECK(c.clipped_norm == doctest::Approx(1.0).epsilon(1e-5));
  // That clipped_norm is what train/'s clip_grad_norm leaves: tests/train/test_optim.cpp.
}

TEST_CASE("grad_stats counts non-finite entries apart") {
  Tensor a({3});
  std::vector<float> ga = {std::nanf(""), 2.f, std::numeric_limits<float>::infinity()};
  std::vector<ParamGrad> pg = {{"a", &a, ga}};
  GradStats s = grad_stats(pg);
  CHECK(s.params[0].nonfinite == 2);
  CHECK(s.params[0].norm == 2.0);
  CHECK(s.params[0].max_abs == 2.0);
}

namespace {
// scores = q k^T, k = x W_k + b_k, q = x W_q + b_q; loss = sum(softmax(scores) * w).
// The key bias adds q . b_k to every entry of a query's row: cancelled by the softmax.
struct TinyAttention {
  Graph g;
  NodeId wq, bq, wk, bk, unused, loss;
  TinyAttention(bool mask, bool detach = false) {
    NodeId x = op::input(g, "x", {2, 3, 4});  // x: (B, T, D)
    wq = op::param(g, "wq", {4, 4}, Init{});
    bq = op::param(g, "bq", {4}, Init{});
    wk = op::param(g, "wk", {4, 4}, Init{});
    bk = op::param(g, "bk", {4}, Init{});
    unused = op::param(g, "unused", {4}, Init{});
    NodeId q = op::add(g, op::matmul(g, x, wq), bq);  // q: (B, T, D)
    NodeId k = op::add(g, op::matmul(g, x, wk), bk);  // k: (B, T, D)
    NodeId s = op::mul(g, op::matmul(g, q, k, false, true), op::scalar(g, 0.5f));  // s: (B, T, T)
    if (mask)
      s = op::where(g, op::constant(g, {1, 0, 0, 1, 1, 0, 1, 1, 1}, {3, 3}), s,
                    op::scalar(g, -std::numeric_limits<float>::infinity()));
    NodeId mx = op::max(g, s, 2, true);
    if (detach) mx = op::stop_gradient(g, mx);  // as dsl::softmax builds it
    NodeId e = op::exp(g, op::sub(g, s, mx));
    NodeId p = op::div(g, e, op::sum(g, e, 2, true));  // p: (B, T, T)
    NodeId w = op::constant(g, {0.3f, -1.f, 2.f, 0.5f, 1.5f, -0.7f, 0.2f, 0.9f, -1.2f}, {3, 3});
    loss = op::sum(g, op::reshape(g, op::mul(g, p, w), {-1}), 0);
  }
};
}  // namespace

TEST_CASE("structurally_zero_grads: a per-row constant before a softmax (the key bias) is flagged") {
  for (int variant = 0; variant < 4; ++variant) {
    const bool mask = variant & 1, detach = variant & 2;
    CAPTURE(mask);
    CAPTURE(detach);
    TinyAttention m(mask, detach);
    std::vector<ZeroGrad> z = structurally_zero_grads(m.g, m.loss, {m.wq, m.bq, m.wk, m.bk, m.unused});
    REQUIRE(z.size() == 2);
    CHECK(z[0].name == "bk");
    CHECK(z[0].reason.find("shift invariance") != std::string::npos);
    CHECK(z[0].reason.find("sub at test_grad_stats.cpp:") != std::string::npos);
    CHECK(z[0].reason.find("stop_gradient") == std::string::npos);  // the detached max is part of the idiom
    CHECK(z[1].name == "unused");
    CHECK(z[1].reason == "no path: the loss does not read it");

    // And the gradients agree: d loss / d bk is 0 up to rounding, the others are not.
    ParamStore ps;
    ps.init_missing(m.g, 3);
    for (const char* n : {"wq", "wk"}) {
      std::mt19937 rng(5);
      std::normal_distribution<float> d(0.f, 0.7f);
      for (float& v : ps.at(n).fspan()) v = d(rng);
    }
    for (const char* n : {"bq", "bk"})
      for (float& v : ps.at(n).fspan()) v = 0.8f;
    std::vector<NodeId> gs = grad(m.g, m.loss, {m.bq, m.bk});
    Executor ex(m.g, gs, ps);
    std::vector<float> xv(24);
    for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(float(i));
    ex.set_input("x", xv);
    ex.run();
    double nq = 0, nk = 0;
    const Tensor tq = ex.get(gs[0]), tk = ex.get(gs[1]);
    for (float v : tq.fspan()) nq += std::abs(v);
    for (float v : tk.fspan()) nk += std::abs(v);
    CHECK(nq > 1e-2);
    CHECK(nk < 1e-5);
  }
}

TEST_CASE("structurally_zero_grads: paths only through ops with no gradient") {
  Graph g;
  NodeId p = op::param(g, "p", {3}, Init{});
  NodeId r = op::param(g, "r", {3}, Init{});
  NodeId x = op::input(g, "x", {3});
  NodeId step = op::compare(g, p, op::scalar(g, 0.f), Cmp::gt);                     // step function of p
  NodeId hit = op::compare(g, op::argmax(g, r, 0), op::constant(g, {1}, {}, DType::i32), Cmp::eq);  // of r
  NodeId loss = op::sum(g, op::add(g, op::mul(g, step, x), op::mul(g, hit, x)), 0);
  std::vector<ZeroGrad> z = structurally_zero_grads(g, loss, {p, r});
  REQUIRE(z.size() == 2);
  CHECK(z[0].name == "p");
  CHECK(z[0].reason.rfind("every path passes through an op with no gradient: compare at test_grad_stats.cpp:", 0) == 0);
  CHECK(z[1].name == "r");
  CHECK(z[1].reason.find("argmax at") != std::string::npos);
}

TEST_CASE("structurally_zero_grads leaves real gradients alone") {
  Graph g;
  NodeId p = op::param(g, "p", {2, 3}, Init{});
  NodeId b = op::param(g, "b", {3}, Init{});
  // A bias constant along the softmax axis only in some rows is not a shift: b varies along it.
  NodeId s = op::add(g, p, b);
  NodeId e = op::exp(g, op::sub(g, s, op::max(g, s, 1, true)));
  NodeId loss = op::sum(g, op::reshape(g, op::mul(g, e, op::constant(g, {1, 2, 3, 4, 5, 6}, {2, 3})), {-1}), 0);
  CHECK(structurally_zero_grads(g, loss, {p, b}).empty());
  // A per-row bias (2, 1) is a shift along axis 1: flagged.
  Graph g2;
  NodeId p2 = op::param(g2, "p", {2, 3}, Init{});
  NodeId c2 = op::param(g2, "c", {2, 1}, Init{});
  NodeId s2 = op::add(g2, p2, c2);
  NodeId e2 = op::exp(g2, op::sub(g2, s2, op::max(g2, s2, 1, true)));
  NodeId l2 = op::sum(g2, op::reshape(g2, op::mul(g2, e2, op::constant(g2, {1, 2, 3, 4, 5, 6}, {2, 3})), {-1}), 0);
  std::vector<ZeroGrad> z = structurally_zero_grads(g2, l2, {p2, c2});
  REQUIRE(z.size() == 1);
  CHECK(z[0].name == "c");
}

TEST_CASE("structurally_zero_grads refuses a node that is not a parameter") {
  Graph g;
  NodeId x = op::input(g, "x", {2});
  NodeId l = op::sum(g, x, 0);
  CHECK_THROWS_WITH_AS(structurally_zero_grads(g, l, {x}), doctest::Contains("parameters only"), GraphError);
  CHECK_THROWS_AS(structurally_zero_grads(g, 99, {}), GraphError);
}

TEST_CASE("structurally_zero_grads: a parameter seen only through stop_gradient") {
  Graph g;
  NodeId p = op::param(g, "p", {3}, Init{});
  NodeId q = op::param(g, "q", {3}, Init{});
  NodeId loss = op::sum(g, op::mul(g, op::stop_gradient(g, op::exp(g, p)), q), 0);
  std::vector<ZeroGrad> z = structurally_zero_grads(g, loss, {p, q});
  REQUIRE(z.size() == 1);
  CHECK(z[0].name == "p");
  CHECK(z[0].reason.rfind("every path passes through stop_gradient: reshape at test_grad_stats.cpp:", 0) == 0);
}
