// Tests for dsl/typed.h: typed and untyped declarations of the same model give the same
// graph (to_text equal but for line numbers), the result types of each typed op (checked
// at compile time, so this file compiling is the "must compile" half; tests/typed_fail/
// holds the "must not compile" half), the run-time check when an Expr becomes a typed
// handle, and run-time dimensions keeping the build-time check at the user's line.
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <type_traits>

#include "dsl/typed.h"

namespace {

using namespace gg;
using namespace gg::dsl;
namespace ty = gg::dsl::typed;
using ty::Batch;
using ty::Dim;
using ty::Seq;
using ty::T;

// to_text without the line numbers (the typed and untyped lines differ by construction);
// the file names stay, so a node recorded at typed.h instead of this file shows up.
std::string listing(Expr root) {
  return std::regex_replace(std::regex_replace(to_text(*root.g, {root.id}), std::regex(R"( > \S+)"), ""),
                            std::regex(R"((\.(cpp|h)):\d+)"), "$1");  // nor the composites' own lines
}

// --- Result types (compile time) ---------------------------------------------------------

using X = T<Batch, Seq, Dim<64>>;

static_assert(std::is_same_v<decltype(ty::matmul(std::declval<X>(), std::declval<T<Dim<64>, Dim<48>>>())),
                             T<Batch, Seq, Dim<48>>>);
// Batch dims broadcast: (H, M, K) @ (B, 1, K, N) -> (B, H, M, N).
static_assert(std::is_same_v<decltype(ty::matmul(std::declval<T<Dim<4>, Seq, Dim<16>>>(),
                                                 std::declval<T<Batch, Dim<1>, Dim<16>, Seq>>())),
                             T<Batch, Dim<4>, Seq, Seq>>);
// Element-wise: a fixed size beats a run-time one, Dim<1> broadcasts, the shorter operand is
// aligned from the right, two different run-time tags give Any.
static_assert(std::is_same_v<decltype(std::declval<X>() + std::declval<T<Dim<64>>>()), X>);
static_assert(std::is_same_v<decltype(std::declval<T<Batch, Dim<1>, Dim<64>>>() * std::declval<T<Seq, Dim<1>>>()),
                             X>);
static_assert(std::is_same_v<decltype(std::declval<T<Batch, Seq>>() - std::declval<T<Dim<1>, Dim<5>>>()),
                             T<Batch, Dim<5>>>);
static_assert(std::is_same_v<decltype(std::declval<T<Batch>>() / std::declval<T<Seq>>()), T<ty::Any>>);
static_assert(std::is_same_v<decltype(ty::linear<256>(std::declval<X>(), "fc")), T<Batch, Seq, Dim<256>>>);
static_assert(std::is_same_v<decltype(ty::split_heads<4>(std::declval<X>())), T<Batch, Dim<4>, Seq, Dim<16>>>);
static_assert(std::is_same_v<decltype(ty::merge_heads(std::declval<T<Batch, Dim<4>, Seq, Dim<16>>>())), X>);
static_assert(std::is_same_v<decltype(ty::transpose(std::declval<X>())), T<Batch, Dim<64>, Seq>>);
static_assert(std::is_same_v<decltype(ty::transpose<0, 1>(std::declval<X>())), T<Seq, Batch, Dim<64>>>);
static_assert(std::is_same_v<decltype(ty::permute<0, 2, 1, 3>(std::declval<T<Batch, Seq, Dim<4>, Dim<16>>>())),
                             T<Batch, Dim<4>, Seq, Dim<16>>>);
static_assert(std::is_same_v<decltype(ty::attention(std::declval<T<Batch, Dim<4>, Seq, Dim<16>>>(),
                                                    std::declval<T<Batch, Dim<4>, Seq, Dim<16>>>(),
                                                    std::declval<T<Batch, Dim<4>, Seq, Dim<8>>>())
                                          .weights),
                             T<Batch, Dim<4>, Seq, Seq>>);
static_assert(std::is_same_v<decltype(ty::multi_head_attention<4>(std::declval<X>(), "attn").out), X>);
static_assert(std::is_same_v<decltype(ty::transformer_block<4>(std::declval<X>(), "blk")), X>);
static_assert(std::is_same_v<decltype(ty::embedding<100, 64>(std::declval<T<Batch, Seq>>(), "tok")), X>);
// Slice: the axis becomes Dim<End - Begin>, also along a run-time axis.
static_assert(std::is_same_v<decltype(ty::slice<2, 16, 48>(std::declval<X>())), T<Batch, Seq, Dim<32>>>);
static_assert(std::is_same_v<decltype(ty::slice<-2, 0, 3>(std::declval<X>())), T<Batch, Dim<3>, Dim<64>>>);
// Concat: fixed sizes along the axis add up; a run-time one there gives Any; elsewhere a
// fixed size wins over a run-time one.
static_assert(std::is_same_v<decltype(ty::concat<-1>(std::declval<X>(), std::declval<T<Batch, Seq, Dim<16>>>())),
                             T<Batch, Seq, Dim<80>>>);
static_assert(std::is_same_v<decltype(ty::concat<1>(std::declval<X>(), std::declval<T<Batch, Dim<4>, Dim<64>>>(),
                                                    std::declval<X>())),
                             T<Batch, ty::Any, Dim<64>>>);
static_assert(std::is_same_v<decltype(ty::concat<1>(std::declval<T<Batch, Dim<3>, ty::Any>>(),
                                                    std::declval<T<Batch, Dim<4>, Dim<64>>>())),
                             T<Batch, Dim<7>, Dim<64>>>);
// maximum broadcasts as the operators do.
static_assert(std::is_same_v<decltype(ty::maximum(std::declval<X>(), std::declval<T<Dim<64>>>())), X>);
static_assert(std::is_same_v<decltype(ty::maximum(std::declval<T<Batch, Dim<1>>>(), std::declval<T<Dim<5>>>())),
                             T<Batch, Dim<5>>>);
// Per-axis reductions drop the axis, or keep it as Dim<1>.
static_assert(std::is_same_v<decltype(ty::sum<1>(std::declval<X>())), T<Batch, Dim<64>>>);
static_assert(std::is_same_v<decltype(ty::sum<-1, true>(std::declval<X>())), T<Batch, Seq, Dim<1>>>);
static_assert(std::is_same_v<decltype(ty::mean<-1>(std::declval<X>())), T<Batch, Seq>>);
static_assert(std::is_same_v<decltype(ty::max<0>(std::declval<X>())), T<Seq, Dim<64>>>);
static_assert(std::is_same_v<decltype(ty::sum<0>(std::declval<T<Dim<7>>>())), T<>>);
// Shape-preserving element-wise functions.
static_assert(std::is_same_v<decltype(ty::relu(std::declval<X>())), X>);
static_assert(std::is_same_v<decltype(ty::softplus(std::declval<X>())), X>);
static_assert(std::is_same_v<decltype(ty::silu(std::declval<X>())), X>);

// --- Same graph as the untyped DSL ---------------------------------------------------------

TEST_CASE("a typed MLP builds the same graph as the untyped one") {
  Graph g1, g2;
  Expr x1 = input(g1, "x", {5, 3});
  Expr y1 = input(g1, "y", {5, 1});
  Expr pred1 = linear(tanh(linear(x1, 8, "fc1")), 1, "fc2");
  Expr loss1 = mean_all((pred1 - y1) * (pred1 - y1));

  auto x2 = ty::input<Batch, Dim<3>>(g2, "x", {5});
  auto y2 = ty::input<Batch, Dim<1>>(g2, "y", {5});
  T<Batch, Dim<1>> pred2 = ty::linear<1>(ty::tanh(ty::linear<8>(x2, "fc1")), "fc2");
  T<> loss2 = ty::mean_all((pred2 - y2) * (pred2 - y2));

  CHECK(listing(loss2) == listing(loss1));
  CHECK(listing(loss2).find("typed.h") == std::string::npos);  // every node at the user's line
  CHECK(listing(loss2).find("test_typed.cpp") != std::string::npos);
}

TEST_CASE("typed transformer_block equals the untyped one, masks and gradients included") {
  Graph g1, g2;
  BlockOptions opt;
  opt.n_head = 4;
  Expr x1 = input(g1, "x", {2, 5, 64});
  opt.attn.mask = causal_mask(g1, 5);
  Expr out1 = transformer_block(x1, "blk", opt);
  Expr loss1 = mean_all(out1 * out1);
  std::vector<Expr> grads1 = grad(loss1, params(g1));

  auto x2 = ty::input<Batch, Seq, Dim<64>>(g2, "x", {2, 5});
  BlockOptions opt2;
  opt2.attn.mask = causal_mask(g2, 5);
  T<Batch, Seq, Dim<64>> out2 = ty::transformer_block<4>(x2, "blk", opt2);
  T<> loss2 = ty::mean_all(out2 * out2);
  std::vector<Expr> grads2 = grad(loss2, params(g2));

  CHECK(listing(loss2) == listing(loss1));
  REQUIRE(grads1.size() == grads2.size());
  CHECK(listing(grads2.front()) == listing(grads1.front()));
}

TEST_CASE("typed rms_norm, rotary_embedding and grouped_query_attention equal the untyped ones, gradients included") {
  Graph g1, g2;
  Expr x1 = input(g1, "x", {2, 5, 64});
  GroupedQueryOptions opt{.n_head = 8, .n_kv_head = 2, .attn = {.mask = causal_mask(g1, 5)}};
  AttentionResult a1 = grouped_query_attention(rms_norm(x1, "norm"), "attn", opt);
  Expr r1 = rotary_embedding(split_heads(a1.out, 4), 2);
  Expr loss1 = mean_all(r1 * r1);
  std::vector<Expr> grads1 = grad(loss1, params(g1));

  auto x2 = ty::input<Batch, Seq, Dim<64>>(g2, "x", {2, 5});
  GroupedQueryOptions opt2{.attn = {.mask = causal_mask(g2, 5)}};
  auto a2 = ty::grouped_query_attention<8, 2>(ty::rms_norm(x2, "norm"), "attn", opt2);
  static_assert(std::is_same_v<decltype(a2.weights), T<Batch, Dim<8>, Seq, Seq>>);
  T<Batch, Dim<4>, Seq, Dim<16>> r2 = ty::rotary_embedding(ty::split_heads<4>(a2.out), 2);
  T<> loss2 = ty::mean_all(r2 * r2);
  std::vector<Expr> grads2 = grad(loss2, params(g2));

  CHECK(listing(loss2) == listing(loss1));
  REQUIRE(grads1.size() == grads2.size());
  CHECK(listing(grads2.front()) == listing(grads1.front()));
}

TEST_CASE("heads split by typed reshape and permute equal split_heads and merge_heads") {
  Graph g1, g2;
  Expr x1 = input(g1, "x", {2, 5, 64});
  Expr h1 = split_heads(linear(x1, 64, "query"), 4);                            // (B, 4, S, 16)
  Expr out1 = merge_heads(attention(h1, h1, h1).out);                           // (B, S, 64)

  auto x2 = ty::input<Batch, Seq, Dim<64>>(g2, "x", {2, 5});
  auto q = ty::linear<64>(x2, "query");                                        // (B, S, 64)
  auto h2 = ty::permute<0, 2, 1, 3>(ty::reshape<T<Batch, Seq, Dim<4>, Dim<16>>>(q));  // (B, 4, S, 16)
  auto a = ty::attention(h2, h2, h2).out;                                       // (B, 4, S, 16)
  auto out2 = ty::reshape<T<Batch, Seq, Dim<64>>>(ty::permute<0, 2, 1, 3>(a));  // (B, S, 64)

  CHECK(listing(out2) == listing(out1));
  CHECK(out2.shape() == Shape{2, 5, 64});
  // The typed split_heads / merge_heads give the same again.
  Graph g3;
  auto x3 = ty::input<Batch, Seq, Dim<64>>(g3, "x", {2, 5});
  auto h3 = ty::split_heads<4>(ty::linear<64>(x3, "query"));
  T<Batch, Seq, Dim<64>> out3 = ty::merge_heads(ty::attention(h3, h3, h3).out);
  CHECK(listing(out3) == listing(out1));
}

TEST_CASE("matmul, broadcasting, layer_norm and softmax match the untyped DSL") {
  Graph g1, g2;
  Expr x1 = input(g1, "x", {3, 7, 64});
  Expr w1 = param(g1, "w", {64, 48});
  Expr b1 = param(g1, "b", {48});
  Expr y1 = softmax(layer_norm(matmul(x1, w1) + b1, "ln")) * 2.f - 1.f;
  Expr s1 = transpose(y1) / 3.f;

  auto x2 = ty::input<Batch, Seq, Dim<64>>(g2, "x", {3, 7});
  auto w2 = ty::param<Dim<64>, Dim<48>>(g2, "w");
  auto b2 = ty::param<Dim<48>>(g2, "b");
  T<Batch, Seq, Dim<48>> y2 = ty::softmax(ty::layer_norm(ty::matmul(x2, w2) + b2, "ln")) * 2.f - 1.f;
  T<Batch, Dim<48>, Seq> s2 = ty::transpose(y2) / 3.f;
  CHECK(listing(s2) == listing(s1));
}

TEST_CASE("typed slice, concat, maximum, per-axis reductions and the new element-wise functions match the untyped DSL") {
  Graph g1, g2;
  // One node a statement: the order of a call's arguments is unspecified, and the
  // listings compare node by node.
  Expr x1 = input(g1, "x", {3, 7, 64});
  Expr b1 = param(g1, "b", {64});
  Expr lo1 = slice(x1, -1, 0, 16);
  Expr hi1 = relu(slice(x1, 2, 32, 48));
  Expr h1 = concat({lo1, hi1}, -1);  // (B, S, 32)
  Expr p1 = softplus(h1);
  Expr q1 = abs(sin(h1));
  Expr m1 = maximum(p1, q1 + cos(h1));
  Expr s1 = sum(m1, 1, true);
  Expr d1 = sum(m1, 1);
  Expr r1 = mean(m1, -1, true);
  Expr c1 = max(silu(m1), 1, true);
  Expr w1 = sum(maximum(x1, b1), 2, true);
  Expr y1 = s1 + r1;  // (B, S, 32) by broadcasting
  y1 = y1 + c1 * w1;
  Expr e1 = mean_all(d1);
  Expr loss1 = mean_all(y1) + e1;

  auto x2 = ty::input<Batch, Seq, Dim<64>>(g2, "x", {3, 7});
  auto b2 = ty::param<Dim<64>>(g2, "b");
  T<Batch, Seq, Dim<16>> lo2 = ty::slice<-1, 0, 16>(x2);
  T<Batch, Seq, Dim<16>> hi2 = ty::relu(ty::slice<2, 32, 48>(x2));
  T<Batch, Seq, Dim<32>> h2 = ty::concat<-1>(lo2, hi2);
  auto p2 = ty::softplus(h2);
  auto q2 = ty::abs(ty::sin(h2));
  T<Batch, Seq, Dim<32>> m2 = ty::maximum(p2, q2 + ty::cos(h2));
  T<Batch, Dim<1>, Dim<32>> s2 = ty::sum<1, true>(m2);
  T<Batch, Dim<32>> d2 = ty::sum<1>(m2);
  T<Batch, Seq, Dim<1>> r2 = ty::mean<-1, true>(m2);
  T<Batch, Dim<1>, Dim<32>> c2 = ty::max<1, true>(ty::silu(m2));
  T<Batch, Seq, Dim<1>> w2 = ty::sum<2, true>(ty::maximum(x2, b2));
  auto y2 = s2 + r2;
  static_assert(std::is_same_v<decltype(y2), T<Batch, Seq, Dim<32>>>);
  y2 = y2 + c2 * w2;
  T<> e2 = ty::mean_all(d2);
  T<> loss2 = ty::mean_all(y2) + e2;

  CHECK(listing(loss2) == listing(loss1));
  CHECK(listing(loss2).find("typed.h") == std::string::npos);  // concat: at its latest operand's line
}

TEST_CASE("typed random_normal and random_uniform: their type's shape, and the untyped graph") {
  Graph g1, g2;
  Expr n1 = random_normal(g1, {4, 8});
  Expr u1 = random_uniform(g1, {8}, -1.f, 2.f);
  Expr loss1 = mean_all(n1 * u1);
  auto n2 = ty::random_normal<Batch, Dim<8>>(g2, {4});
  auto u2 = ty::random_uniform<Dim<8>>(g2, {}, -1.f, 2.f);
  T<> loss2 = ty::mean_all(n2 * u2);
  CHECK(n2.shape() == Shape{4, 8});
  CHECK(listing(loss2) == listing(loss1));
  CHECK_THROWS_WITH_AS((ty::random_normal<Batch, Dim<8>>(g2)), doctest::Contains("run-time dimension"), GraphError);
}

// --- Expr to typed handle, and run-time dimensions ---------------------------------------------

TEST_CASE("an Expr becomes a typed handle only if its rank and fixed dims agree") {
  Graph g;
  Expr x = input(g, "x", {4, 16, 64});
  T<Batch, Seq, Dim<64>> ok(x);
  CHECK(ok.shape() == Shape{4, 16, 64});
  CHECK(Expr(ok).id == x.id);
  try {
    T<Batch, Seq, Dim<48>> bad(x);
    FAIL("no error");
  } catch (const GraphError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("test_typed.cpp:") != std::string::npos);
    CHECK(m.find("'x'") != std::string::npos);
    CHECK(m.find("(4, 16, 64)") != std::string::npos);
    CHECK(m.find("dim 2 is 64, not 48") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS((T<Batch, Dim<64>>(x)), doctest::Contains("rank 3, not 2"), GraphError);
  CHECK_THROWS_AS((T<Batch, Dim<64>>(Expr{})), GraphError);
  CHECK_THROWS_WITH_AS((ty::input<Batch, Seq, Dim<64>>(g, "y", {4})), doctest::Contains("run-time dimension"),
                       GraphError);
}

TEST_CASE("run-time dimensions keep the build-time check, at the user's line") {
  Graph g;
  auto a = ty::input<Batch, Dim<8>>(g, "a", {2});
  auto b = ty::input<Batch, Dim<8>>(g, "b", {3});
  try {
    (void)(a + b);
    FAIL("no error");
  } catch (const GraphError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("test_typed.cpp:") != std::string::npos);
    CHECK(m.find("typed.h") == std::string::npos);
  }
  // A run-time inner dimension: matmul checks it when the graph is built.
  auto u = ty::input<Batch, Seq>(g, "u", {2, 5});
  auto w = ty::param<Dim<6>, Dim<3>>(g, "w");
  CHECK_THROWS_WITH_AS(ty::matmul(u, w), doctest::Contains("test_typed.cpp:"), GraphError);
  // split_heads of a run-time width: checked at build time too.
  auto v = ty::input<Batch, Seq, ty::Any>(g, "v", {2, 5, 10});
  CHECK_THROWS_WITH_AS(ty::split_heads<4>(v), doctest::Contains("divisible"), GraphError);
}

}  // namespace
