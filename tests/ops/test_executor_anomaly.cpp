// Tests for the executor's anomaly mode (ops/runtime/executor.h, set_detect_anomaly): the first
// node, forward or backward, that makes a NaN or an Inf is named with its inputs' ranges.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/ir/op_rule.h"

using namespace gg;

namespace {
std::string anomaly_of(Executor& ex) {
  try {
    ex.run();
  } catch (const GraphError& e) {
    return e.what();
  }
  return "";
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("anomaly mode names a log of a negative number, with its input's range") {
  Graph g;
  ParamStore ps;
  ps.set("x", Tensor::f32({3}, std::vector<float>{1.f, -2.f, 3.f}));
  NodeId x = op::param(g, "x", {3}, Init{});
  NodeId y = op::log(g, x);
  NodeId loss = op::sum(g, y, 0);
  Executor ex(g, {loss}, ps);
  ex.run();  // off by default: the NaN flows into the loss silently
  CHECK(std::isnan(ex.scalar(loss)));
  ex.set_detect_anomaly(true);
  const std::string msg = anomaly_of(ex);
  INFO(msg);
  CHECK(msg.rfind("log at test_executor_anomaly.cpp:", 0) == 0);
  CHECK(has(msg, "forward node %" + std::to_string(y) + " f32(3,) holds 1 NaN and 0 Inf of 3 values"));
  CHECK(has(msg, "input 0 %0 param f32(3,) 'x'"));
  CHECK(has(msg, "min -2 max 3, 0 NaN, 0 Inf"));
}

TEST_CASE("anomaly mode traces a NaN planted in one weight to the first node that reads it") {
  Graph g;
  ParamStore ps;
  ps.set("w1", Tensor::f32({2, 2}, std::vector<float>{0.5f, -1.f, 2.f, 0.25f}));
  ps.set("w2", Tensor::f32({2, 2}, std::vector<float>{1.f, 0.f, std::nanf(""), 1.f}));
  NodeId x = op::input(g, "x", {3, 2});
  NodeId h = op::tanh(g, op::matmul(g, x, op::param(g, "w1", {2, 2}, Init{})));  // clean
  NodeId w2 = op::param(g, "w2", {2, 2}, Init{});
  NodeId first;
  {
    NameScope s(g, "second");
    first = op::matmul(g, h, w2);  // the first reader of w2
  }
  NodeId loss = op::sum(g, op::reshape(g, op::exp(g, first), {-1}), 0);
  Executor ex(g, {loss}, ps);
  ex.set_input("x", std::vector<float>{1, 2, 3, 4, 5, 6});
  ex.set_detect_anomaly(true);
  const std::string msg = anomaly_of(ex);
  INFO(msg);
  CHECK(msg.rfind("matmul at test_executor_anomaly.cpp:", 0) == 0);
  CHECK(has(msg, "('second'): anomaly"));
  CHECK(has(msg, "forward node %" + std::to_string(first) + " f32(3, 2) holds 3 NaN"));
  CHECK(has(msg, "input 1 %" + std::to_string(w2) + " param f32(2, 2) 'w2'"));
  CHECK(has(msg, "min 0 max 1, 1 NaN, 0 Inf"));
}

TEST_CASE("anomaly mode names a backward node: the gradient of sqrt at 0 is infinite") {
  Graph g;
  ParamStore ps;
  ps.set("x", Tensor::f32({2}, std::vector<float>{0.f, 4.f}));
  NodeId x = op::param(g, "x", {2}, Init{});
  NodeId loss = op::sum(g, op::sqrt(g, x), 0);
  // d sqrt(x) = g / (2 sqrt(x)), built by hand as the gradient rule does, named as grad() names it.
  NodeId gx;
  {
    NameScope s(g, "grad(x)", true);
    gx = op::div(g, op::expand(g, op::scalar(g, 1.f), {2}), op::mul(g, op::scalar(g, 2.f), g.node(loss).inputs[0]));
  }
  Executor ex(g, {loss, gx}, ps);
  ex.set_detect_anomaly(true);
  const std::string msg = anomaly_of(ex);
  INFO(msg);
  CHECK(msg.rfind("div at test_executor_anomaly.cpp:", 0) == 0);
  CHECK(has(msg, "('grad(x)'): anomaly: the first non-finite value of this run: backward node"));
  CHECK(has(msg, "holds 0 NaN and 1 Inf of 2 values"));
}

TEST_CASE("anomaly mode lets a mask's -inf flow through where and the softmax") {
  Graph g;
  ParamStore ps;
  ps.set("s", Tensor::f32({2, 2}, std::vector<float>{0.3f, 0.9f, -0.2f, 0.4f}));
  NodeId s = op::param(g, "s", {2, 2}, Init{});
  NodeId mask = op::constant(g, {1, 0, 1, 1}, {2, 2});
  NodeId filled = op::where(g, mask, s, op::scalar(g, -std::numeric_limits<float>::infinity()));
  NodeId e = op::exp(g, op::sub(g, filled, op::max(g, filled, 1, true)));
  NodeId w = op::div(g, e, op::sum(g, e, 1, true));
  NodeId loss = op::sum(g, op::reshape(g, op::mul(g, w, w), {-1}), 0);
  Executor ex(g, {loss}, ps);
  ex.set_detect_anomaly(true);
  CHECK(anomaly_of(ex) == "");
  CHECK(std::isfinite(ex.scalar(loss)));
}

TEST_CASE("anomaly mode names a fused row group by its root, its ops and its inputs") {
  Graph g;
  ParamStore ps;
  ps.set("x", Tensor::f32({2, 3}, std::vector<float>{1.f, 2.f, 3.f, 4.f, -5.f, 6.f}));
  ps.set("w", Tensor::f32({3}, std::vector<float>{1.f, 0.5f, 2.f}));
  NodeId x = op::param(g, "x", {2, 3}, Init{});
  NodeId w = op::param(g, "w", {3}, Init{});
  NodeId rows = op::sum(g, op::log(g, x), -1, true);  // row 1 holds log(-5): NaN
  NodeId y = op::mul(g, op::expand(g, rows, {2, 3}), w);
  Executor ex(g, {y}, ps);
  REQUIRE(ex.fusion().groups.size() == 1);
  ex.set_detect_anomaly(true);
  const std::string msg = anomaly_of(ex);
  INFO(msg);
  CHECK(msg.rfind("mul at test_executor_anomaly.cpp:", 0) == 0);
  CHECK(has(msg, "forward node %" + std::to_string(y) + " f32(2, 3) holds 3 NaN and 0 Inf of 6 values"));
  CHECK(has(msg, "(the root of a fused group of 4 ops: log, sum, expand, mul; run with GG_FUSE=0 to check each one)"));
  CHECK(has(msg, "input 0 %" + std::to_string(x) + " param f32(2, 3) 'x'"));
  CHECK(has(msg, "input 1 %" + std::to_string(w) + " param f32(3,) 'w'"));
}

TEST_CASE("anomaly mode names a fused group's stored member before its root") {
  Graph g;
  ParamStore ps;
  ps.set("x", Tensor::f32({2, 3}, std::vector<float>{1.f, 2.f, 3.f, 4.f, -5.f, 6.f}));
  NodeId x = op::param(g, "x", {2, 3}, Init{});
  NodeId a = op::log(g, x);                                // NaN at -5; read after the group too
  NodeId r = op::mul(g, a, op::scalar(g, 2.f));            // the root
  NodeId later = op::matmul(g, a, op::constant(g, std::vector<float>(9, 1.f), {3, 3}));
  Executor ex(g, {r, later}, ps);
  REQUIRE(ex.fusion().groups.size() == 1);
  REQUIRE(ex.fusion().groups[0].stored == std::vector<NodeId>{a});
  ex.set_detect_anomaly(true);
  const std::string msg = anomaly_of(ex);
  INFO(msg);
  CHECK(msg.rfind("log at test_executor_anomaly.cpp:", 0) == 0);
  CHECK(has(msg, "forward node %" + std::to_string(a) + " f32(2, 3) holds 1 NaN"));
  CHECK(has(msg, "(the stored member of a fused group of 2 ops: log, mul;"));
}

TEST_CASE("GG_DETECT_ANOMALY=1 turns anomaly mode on: the environment's config, and the option it sets") {
  Graph g;
  ParamStore ps;
  NodeId c = op::scalar(g, 1.f);
  NodeId y = op::neg(g, c);
  ::setenv("GG_DETECT_ANOMALY", "1", 1);
  const bool env_on = read_env_config().detect_anomaly;
  ::setenv("GG_DETECT_ANOMALY", "0", 1);
  const bool env_off = read_env_config().detect_anomaly;
  ::unsetenv("GG_DETECT_ANOMALY");
  const bool env_unset = read_env_config().detect_anomaly;
  Executor on(g, {y}, ps, 0, {.detect_anomaly = env_on});
  Executor off(g, {y}, ps, 0, {.detect_anomaly = env_off});
  Executor unset(g, {y}, ps, 0, {.detect_anomaly = env_unset});
  CHECK(on.detect_anomaly());
  CHECK_FALSE(off.detect_anomaly());
  CHECK_FALSE(unset.detect_anomaly());
}
