// Tests for dsl/expr.cpp: operators with tensors and scalars on either side, the user's
// line captured through operators (the Operand conversion), leaves, reductions over all
// axes, transpose, params() and grad() on Exprs.
#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <functional>
#include <string>
#include <vector>

#include "dsl/expr.h"
#include "ops/runtime/executor.h"

using namespace gg;
using namespace gg::dsl;

namespace {
using gg::test::contains;

std::vector<float> eval(Graph& g, Expr e, const std::vector<float>& x) {
  ParamStore ps;
  Executor ex(g, {e.id}, ps);
  ex.set_input("x", x);
  ex.run();
  return ex.get(e.id).to_vector();
}
}  // namespace

TEST_CASE("operators combine tensors and scalars on either side") {
  Graph g;
  Expr x = input(g, "x", {3});
  const std::vector<float> xs{1.f, 2.f, 4.f};
  CHECK(eval(g, x + 1.f, xs) == std::vector<float>{2.f, 3.f, 5.f});
  CHECK(eval(g, 1.f - x, xs) == std::vector<float>{0.f, -1.f, -3.f});
  CHECK(eval(g, x * 2, xs) == std::vector<float>{2.f, 4.f, 8.f});
  CHECK(eval(g, 8.f / x, xs) == std::vector<float>{8.f, 4.f, 2.f});
  CHECK(eval(g, x / 2.0, xs) == std::vector<float>{0.5f, 1.f, 2.f});
  CHECK(eval(g, -x, xs) == std::vector<float>{-1.f, -2.f, -4.f});
  CHECK(eval(g, x * x - x, xs) == std::vector<float>{0.f, 2.f, 12.f});
}

TEST_CASE("an operator's shape error names the line where the user wrote the expression") {
  Graph g;
  Expr a = input(g, "a", {2, 4});
  Expr b = input(g, "b", {3});
  const int line = __LINE__ + 2;
  try {
    Expr c = a + b;
    (void)c;
    FAIL("no error");
  } catch (const GraphError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(contains(m, "add at test_expr.cpp:" + std::to_string(line)));
    CHECK(contains(m, "(2, 4) ('a') vs (3,) ('b')"));
    CHECK(contains(m, "dim -1: 4 vs 3"));
  }
}

TEST_CASE("reductions over all axes, mean, transpose") {
  Graph g;
  Expr x = input(g, "x", {2, 3});
  const std::vector<float> xs{1, 2, 3, 4, 5, 6};
  CHECK(sum_all(x).shape().empty());
  CHECK(eval(g, sum_all(x), xs) == std::vector<float>{21.f});
  CHECK(eval(g, mean_all(x), xs)[0] == doctest::Approx(3.5f));
  CHECK(eval(g, mean(x, 1), xs) == std::vector<float>{2.f, 5.f});
  CHECK(mean(x, 0, true).shape() == Shape{1, 3});
  Expr t = transpose(x);
  CHECK(t.shape() == Shape{3, 2});
  CHECK(eval(g, t, xs) == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(x.dim(-1) == 3);
  CHECK_THROWS_AS(x.dim(2), GraphError);
}

TEST_CASE("param() is declared once per name; params() lists each; grad() works on Exprs") {
  Graph g;
  Expr x = input(g, "x", {3});
  Expr w = param(g, "w", {3}, ones_init());
  Expr w_again = param(g, "w", {3}, ones_init());
  CHECK(w_again.id == w.id);
  CHECK_THROWS_AS(param(g, "w", {4}, ones_init()), GraphError);
  Expr v;
  {
    Scope s(g, "layer");
    v = param(g, "v", {3}, zeros_init());
  }
  CHECK(v.name() == "layer.v");
  std::vector<Expr> ps = params(g);
  REQUIRE(ps.size() == 2);
  CHECK(ps[0].name() == "w");
  CHECK(ps[1].name() == "layer.v");
  Expr loss = sum_all(x * w * w + v);
  std::vector<Expr> gs = grad(loss, ps);
  CHECK(gs[0].name() == "grad(w)");
  ParamStore store;
  store.init_missing(g, 0);
  store.at("w") = Tensor::f32({3}, std::vector<float>{1, 2, 3});
  Executor ex(g, {gs[0].id, gs[1].id}, store);
  ex.set_input("x", std::vector<float>{1, 1, 2});
  ex.run();
  CHECK(ex.get(gs[0].id).to_vector() == std::vector<float>{2, 4, 12});  // d/dw x w^2 = 2 x w
  CHECK(ex.get(gs[1].id).to_vector() == std::vector<float>{1, 1, 1});
}

TEST_CASE("argmax: i32 class indices for decoding and accuracy; no gradient flows through it") {
  Graph g;
  Expr logits = input(g, "x", {2, 3, 4});  // logits: (B, T, V)
  Expr targets = constant(g, {1, 3, 0, 2, 2, 2}, {2, 3}, DType::i32);
  Expr pred = argmax(logits, -1);  // pred: (B, T) i32
  CHECK(pred.dtype() == DType::i32);
  CHECK(pred.shape() == Shape{2, 3});
  CHECK(argmax(logits, 1, true).shape() == Shape{2, 1, 4});
  Expr accuracy = mean_all(compare(pred, targets, Cmp::eq));
  // Rows: argmax 1, 3, 0 (a tie of 0 and 2: the first), 2, 0, 3.
  const std::vector<float> x = {0, 5, 1, 2, /**/ 0, 0, 0, 1, /**/ 9, 1, 9, 1,
                                0, 1, 7, 1, /**/ 4, 3, 2, 1, /**/ -3, -2, -1, 0};
  CHECK(eval(g, accuracy, x)[0] == doctest::Approx(4.0 / 6.0));
  ParamStore ps;
  Executor ex(g, {pred.id}, ps);
  ex.set_input("x", x);
  ex.run();
  const std::int32_t want[] = {1, 3, 0, 2, 0, 3};
  for (int i = 0; i < 6; ++i) CHECK(ex.value(pred.id).i()[i] == want[i]);
  Expr d = grad(accuracy, {logits})[0];  // zeros that do not even read the logits
  Executor dex(g, {d.id}, ps);
  dex.run();
  CHECK(dex.get(d.id).to_vector() == std::vector<float>(24, 0.f));
}

namespace {
// The message of the GraphError that `f` throws ("" when none is).
const auto error_of = [](auto&& f) { return gg::test::error_of<GraphError>(f); };
}  // namespace

TEST_CASE("mixing Exprs of two graphs is a GraphError naming both nodes") {
  Graph g1, g2;
  Expr a = input(g1, "a", {2, 2});
  Expr b = input(g2, "b", {2, 2});
  Expr i = input(g2, "i", {2}, DType::i32);
  for (auto f : std::vector<std::function<void()>>{
           [&] { (void)(a + b); }, [&] { (void)(a * b); }, [&] { (void)matmul(a, b); },
           [&] { (void)where(a, a, b); }, [&] { (void)where(b, a, a); }, [&] { (void)concat({a, b}, 0); },
           [&] { (void)gather(a, i); }, [&] { (void)maximum(a, b); }, [&] { (void)compare(a, b, Cmp::lt); }}) {
    std::string msg = error_of(f);
    INFO(msg);
    CHECK(contains(msg, "'a'"));
    CHECK(contains(msg, "different graphs"));
    CHECK((contains(msg, "'b'") || contains(msg, "'i'")));
    CHECK(contains(msg, "test_expr.cpp:"));
  }
  CHECK(contains(error_of([&] { grad(sum_all(a), {b}); }), "different graphs"));
}

TEST_CASE("an op on an empty (default-constructed) Expr throws instead of crashing") {
  Graph g;
  Expr x = input(g, "x", {2});
  Expr empty;
  for (auto f : std::vector<std::function<void()>>{
           [&] { (void)(empty + 1.f); }, [&] { (void)(x + empty); }, [&] { (void)(2.f * empty); },
           [&] { (void)exp(empty); }, [&] { (void)matmul(x, empty); }, [&] { (void)-empty; },
           [&] { (void)empty.shape(); }, [&] { (void)sum_all(empty); }, [&] { (void)concat({}, 0); }}) {
    std::string msg = error_of(f);
    INFO(msg);
    CHECK(contains(msg, "empty"));
  }
}

TEST_CASE("grad() of a non-scalar points at the user's grad() call, not at the op") {
  Graph g;
  Expr x = input(g, "x", {3});
  Expr y = exp(x);
  std::string msg;
  int line = 0;
  try { line = __LINE__; grad(y, {x}); } catch (const GraphError& e) { msg = e.what(); }
  INFO(msg);
  CHECK(contains(msg, "test_expr.cpp:" + std::to_string(line)));
  CHECK(contains(msg, "(3,)"));
}

TEST_CASE("node_ids: the ids of Exprs for an executor, refusing an Expr of another graph") {
  Graph g, other;
  Expr x = input(g, "x", {2});
  Expr y = exp(x);
  Expr z = input(other, "z", {2});
  CHECK(node_ids(g, {x, y}) == std::vector<NodeId>{x.id, y.id});
  std::string msg = error_of([&] { node_ids(g, {y, z}); });
  CHECK(contains(msg, "'z'"));
  CHECK(contains(msg, "another graph"));
  CHECK(contains(error_of([&] { node_ids(g, {Expr{}}); }), "empty"));
}

TEST_CASE("stop_gradient: same value, a zero gradient to what is behind it") {
  Graph g;
  Expr w = param(g, "w", {3}, ones_init());
  Expr d = stop_gradient(w * w);
  CHECK(d.shape() == w.shape());
  Expr loss = sum_all(w * d + stop_gradient(exp(w)));  // d/dw = detach(w * w) = w^2
  std::vector<Expr> gs = grad(loss, {w});
  ParamStore store;
  store.init_missing(g, 0);
  store.at("w") = Tensor::f32({3}, std::vector<float>{1, -2, 3});
  Executor ex(g, {gs[0].id, d.id}, store);
  ex.run();
  CHECK(ex.get(gs[0].id).to_vector() == std::vector<float>{1, 4, 9});
  CHECK(ex.get(d.id).to_vector() == std::vector<float>{1, 4, 9});
  CHECK(contains(to_text(g, {d.id}), "[stop_gradient]"));
  CHECK(contains(to_text(g, {d.id}), "test_expr.cpp:"));
}
