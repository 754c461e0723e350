// Tests for the shape rules' error messages (ops/*.cpp infer functions): every mistake is
// a GraphError thrown while the graph is built, and its text names the op, this file and
// the line of the call, the node's scoped name, both shapes and the disagreeing dims.
// (The mask-onto-scores error of attention is a DSL test.)
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/ir/graph.h"

using namespace gg;

namespace {

// Runs `build`, which must throw GraphError, and returns the message.
std::string error_of(Graph& g, const std::function<void()>& build) {
  const auto before = g.size();
  try {
    build();
  } catch (const GraphError& e) {
    CHECK(g.size() == before);  // the failing node was not appended
    return e.what();
  } catch (...) {
    FAIL("threw something other than GraphError");
  }
  FAIL("no GraphError thrown");
  return {};
}

// Checks that `msg` contains every part.
void check_parts(const std::string& msg, const std::vector<std::string>& parts) {
  INFO("message: " << msg);
  for (const auto& p : parts) {
    INFO("expected part: " << p);
    CHECK(msg.find(p) != std::string::npos);
  }
}

// The message's head: "<op> at test_shape_errors.cpp:<line> ('<name>'): ".
std::string head(const std::string& op, int line, const std::string& name = "") {
  return op + " at test_shape_errors.cpp:" + std::to_string(line) + (name.empty() ? "" : " ('" + name + "')") + ": ";
}

// Checks that `msg` starts with the head for (op, line, name) and contains every part.
void check_msg(const std::string& msg, const std::string& op, int line, const std::string& name,
               const std::vector<std::string>& parts) {
  INFO("message: " << msg);
  CHECK(msg.rfind(head(op, line, name), 0) == 0);
  check_parts(msg, parts);
}

}  // namespace

TEST_CASE("matmul: inner dims differ") {
  Graph g;
  NodeId x = op::input(g, "x", {4, 16, 64});
  NodeId w = op::param(g, "blocks.1.attn.w_query", {48, 192}, Init{});
  int line = 0;
  std::string msg = error_of(g, [&] {
    NameScope s(g, "blocks.1.attn.query");
    line = __LINE__; op::matmul(g, x, w);
  });
  CHECK(msg.rfind("matmul at test_shape_errors.cpp:" + std::to_string(line) + " ('blocks.1.attn.query'): ", 0) == 0);
  check_parts(msg, {"inner dims differ: (4, 16, 64) @ (48, 192): 64 vs 48", "blocks.1.attn.w_query"});

  SUBCASE("with transposes the message marks the transposed operand") {
    NodeId a = op::input(g, "a", {5, 3});
    NodeId b = op::input(g, "b", {4, 6});
    std::string m2 = error_of(g, [&] { line = __LINE__; op::matmul(g, a, b, true, true); });
    check_msg(m2, "matmul", line, "", {"inner dims differ: (5, 3)^T @ (4, 6)^T: 5 vs 6"});
  }
  SUBCASE("operands of rank < 2") {
    NodeId v = op::input(g, "v", {64});
    std::string m3 = error_of(g, [&] { line = __LINE__; op::matmul(g, v, w); });
    check_msg(m3, "matmul", line, "", {"at least 2 dims", "(64,) ('v')", "(48, 192) ('blocks.1.attn.w_query')"});
  }
}

TEST_CASE("matmul: batch dims do not broadcast") {
  Graph g;
  NodeId a = op::input(g, "a", {2, 3, 4, 5});
  NodeId b = op::input(g, "b", {4, 5, 6});
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "mm"); line = __LINE__; op::matmul(g, a, b); });
  check_msg(msg, "matmul", line, "mm", {"batch dims do not broadcast", "(2, 3, 4, 5) ('a')",
                    "(4, 5, 6) ('b')", "batch dim -1"});
}

TEST_CASE("binary ops: shapes do not broadcast") {
  Graph g;
  NodeId a = op::input(g, "a", {2, 4, 4});
  NodeId b = op::input(g, "b", {2, 3});
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "resid"); line = __LINE__; op::add(g, a, b); });
  CHECK(msg.rfind(head("add", line, "resid"), 0) == 0);
  check_parts(msg, {"shapes do not broadcast: (2, 4, 4) ('a') vs (2, 3) ('b'): dim -1: 4 vs 3"});

  // The disagreeing dim is reported where it is, not always the last one.
  NodeId c = op::input(g, "c", {5, 3, 7});
  NodeId d = op::input(g, "d", {4, 7});
  msg = error_of(g, [&] { line = __LINE__; op::mul(g, c, d); });
  check_msg(msg, "mul", line, "", {"(5, 3, 7) ('c') vs (4, 7) ('d'): dim -2: 3 vs 4"});
  msg = error_of(g, [&] { line = __LINE__; op::maximum(g, c, d); });
  check_msg(msg, "maximum", line, "", {"dim -2: 3 vs 4"});
  msg = error_of(g, [&] { line = __LINE__; op::compare(g, c, d, Cmp::lt); });
  check_msg(msg, "compare", line, "", {"dim -2: 3 vs 4"});
}

TEST_CASE("element-wise ops want f32; compare wants matching dtypes") {
  Graph g;
  NodeId f = op::input(g, "f", {3});
  NodeId i = op::input(g, "ids", {3}, DType::i32);
  int line = 0;
  std::string msg = error_of(g, [&] { line = __LINE__; op::sub(g, f, i); });
  check_msg(msg, "sub", line, "", {"right operand must be f32, got i32 (3,) ('ids')"});
  msg = error_of(g, [&] { line = __LINE__; op::exp(g, i); });
  check_msg(msg, "exp", line, "", {"operand must be f32, got i32"});
  msg = error_of(g, [&] { line = __LINE__; op::compare(g, f, i, Cmp::eq); });
  check_msg(msg, "compare", line, "", {"operands differ in dtype: f32 (3,) ('f') vs i32 (3,) ('ids')"});
  msg = error_of(g, [&] { line = __LINE__; op::sum(g, i, 0); });
  check_msg(msg, "sum", line, "", {"must be f32"});
}

TEST_CASE("where: the condition does not broadcast") {
  Graph g;
  NodeId c = op::input(g, "cond", {2, 3});
  NodeId a = op::input(g, "a", {2, 4});
  NodeId b = op::scalar(g, 0.f);
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "masked"); line = __LINE__; op::where(g, c, a, b); });
  check_msg(msg, "where", line, "masked", {"condition (2, 3) ('cond') does not broadcast onto (2, 4)",
                    "dim -1"});
  // The two values must broadcast too.
  NodeId v = op::input(g, "v", {3});
  NodeId one = op::scalar(g, 1.f);
  msg = error_of(g, [&] { line = __LINE__; op::where(g, one, a, v); });
  check_msg(msg, "where", line, "", {"(2, 4) ('a') vs (3,) ('v'): dim -1: 4 vs 3"});
}

TEST_CASE("reshape: element counts differ") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "heads"); line = __LINE__; op::reshape(g, x, {4, 2}); });
  CHECK(msg.rfind(head("reshape", line, "heads"), 0) == 0);
  check_parts(msg, {"element count differs: (2, 3) ('x') has 6 elements, target (4, 2) has 8"});
  msg = error_of(g, [&] { line = __LINE__; op::reshape(g, x, {4, -1}); });
  check_msg(msg, "reshape", line, "", {"cannot infer -1 in (4, -1): (2, 3) ('x') has 6 elements"});
  msg = error_of(g, [&] { line = __LINE__; op::reshape(g, x, {-1, -1}); });
  check_msg(msg, "reshape", line, "", {"one -1 at most"});
}

TEST_CASE("axis out of range") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  int line = 0;
  SUBCASE("sum") {
    std::string msg = error_of(g, [&] { line = __LINE__; op::sum(g, x, 3); });
    check_msg(msg, "sum", line, "", {"axis 3 out of range for (2, 3) ('x') of rank 2"});
    msg = error_of(g, [&] { line = __LINE__; op::max(g, x, -3, true); });
    check_msg(msg, "max", line, "", {"axis -3 out of range for (2, 3) ('x') of rank 2"});
    NodeId sc = op::scalar(g, 1.f);
    msg = error_of(g, [&] { line = __LINE__; op::sum(g, sc, 0); });
    check_msg(msg, "sum", line, "", {"cannot reduce a scalar ()"});
  }
  SUBCASE("slice") {
    std::string msg = error_of(g, [&] { line = __LINE__; op::slice(g, x, 2, 0, 1); });
    check_msg(msg, "slice", line, "", {"axis 2 out of range for (2, 3) ('x') of rank 2"});
    msg = error_of(g, [&] { NameScope s(g, "sl"); line = __LINE__; op::slice(g, x, 1, 1, 5); });
    check_msg(msg, "slice", line, "sl", {"range [1, 5) outside axis 1 of size 3 in (2, 3) ('x')"});
    msg = error_of(g, [&] { line = __LINE__; op::slice(g, x, 1, 2, 1); });
    check_msg(msg, "slice", line, "", {"range [2, 1) outside axis 1"});
    msg = error_of(g, [&] { line = __LINE__; op::slice(g, x, 0, -5, 1); });
    check_msg(msg, "slice", line, "", {"outside axis 0 of size 2"});
  }
  SUBCASE("concat") {
    std::string msg = error_of(g, [&] { line = __LINE__; op::concat(g, {x, x}, 2); });
    check_msg(msg, "concat", line, "", {"axis 2 out of range for (2, 3) ('x') of rank 2"});
  }
  SUBCASE("gather") {
    NodeId i = op::input(g, "i", {4}, DType::i32);
    std::string msg = error_of(g, [&] { line = __LINE__; op::gather(g, x, i, -3); });
    check_msg(msg, "gather", line, "", {"axis -3 out of range for (2, 3) ('x') of rank 2"});
  }
}

TEST_CASE("concat: inputs disagree outside the axis") {
  Graph g;
  NodeId a = op::input(g, "a", {2, 3});
  NodeId b = op::input(g, "b", {2, 4});
  NodeId c = op::input(g, "c", {2, 3, 1});
  NodeId d = op::input(g, "d", {2, 3}, DType::i32);
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "cat"); line = __LINE__; op::concat(g, {a, b}, 0); });
  check_msg(msg, "concat", line, "cat", {"input 1 (2, 4) ('b') does not match input 0 (2, 3) ('a') outside axis 0: dim 1: 4 vs 3"});
  msg = error_of(g, [&] { line = __LINE__; op::concat(g, {a, c}, 1); });
  check_msg(msg, "concat", line, "", {"input 1 (2, 3, 1) ('c')", "ranks differ"});
  msg = error_of(g, [&] { line = __LINE__; op::concat(g, {a, d}, 0); });
  check_msg(msg, "concat", line, "", {"input 1 is i32, input 0 is f32"});
  msg = error_of(g, [&] { line = __LINE__; op::concat(g, {}, 0); });
  check_msg(msg, "concat", line, "", {"needs at least one input"});
  // Along axis 1 the same pair is fine.
  CHECK(g.node(op::concat(g, {a, b}, 1)).shape == Shape{2, 7});
}

TEST_CASE("gather and scatter_add: index dtype and shapes") {
  Graph g;
  NodeId table = op::param(g, "wte", {10, 4}, Init{});
  NodeId fidx = op::input(g, "fidx", {2, 3});
  NodeId idx = op::input(g, "idx", {2, 3}, DType::i32);
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "embed"); line = __LINE__; op::gather(g, table, fidx); });
  check_msg(msg, "gather", line, "embed", {"index (2, 3) ('fidx') must be i32, got f32"});
  NodeId sc = op::scalar(g, 1.f);
  msg = error_of(g, [&] { line = __LINE__; op::gather(g, sc, idx); });
  check_msg(msg, "gather", line, "", {"cannot index a scalar"});

  NodeId src = op::input(g, "src", {2, 3, 4});
  msg = error_of(g, [&] { line = __LINE__; op::scatter_add(g, src, fidx, 0, 10); });
  check_msg(msg, "scatter_add", line, "", {"index (2, 3) ('fidx') must be i32, got f32"});
  NodeId idx2 = op::input(g, "idx2", {3, 3}, DType::i32);
  msg = error_of(g, [&] { NameScope s(g, "sa"); line = __LINE__; op::scatter_add(g, src, idx2, 0, 10); });
  check_msg(msg, "scatter_add", line, "sa", {"source (2, 3, 4) ('src') does not hold index (3, 3) ('idx2') at axis 0"});
  msg = error_of(g, [&] { line = __LINE__; op::scatter_add(g, src, idx, 2, 10); });
  check_msg(msg, "scatter_add", line, "", {"axis 2 with index (2, 3) ('idx') does not fit source (2, 3, 4) ('src')"});
  msg = error_of(g, [&] { line = __LINE__; op::scatter_add(g, src, idx, 0, 0); });
  check_msg(msg, "scatter_add", line, "", {"output size 0 along axis 0 must be >= 1"});
  NodeId isrc = op::input(g, "isrc", {2, 3}, DType::i32);
  msg = error_of(g, [&] { line = __LINE__; op::scatter_add(g, isrc, idx, 0, 4); });
  check_msg(msg, "scatter_add", line, "", {"source must be f32, got i32"});
  // The valid forms build.
  CHECK(g.node(op::gather(g, table, idx)).shape == Shape{2, 3, 4});
  CHECK(g.node(op::scatter_add(g, src, idx, 0, 10)).shape == Shape{10, 4});
}

TEST_CASE("permute: not a permutation") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3, 4});
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "tr"); line = __LINE__; op::permute(g, x, {0, 0, 1}); });
  check_msg(msg, "permute", line, "tr", {"(0, 0, 1) is not a permutation of the 3 axes of (2, 3, 4) ('x')"});
  msg = error_of(g, [&] { line = __LINE__; op::permute(g, x, {1, 0}); });
  check_msg(msg, "permute", line, "", {"(1, 0) is not a permutation of the 3 axes"});
  msg = error_of(g, [&] { line = __LINE__; op::permute(g, x, {0, 1, 3}); });
  check_parts(msg, {"(0, 1, 3) is not a permutation"});
  msg = error_of(g, [&] { line = __LINE__; op::permute(g, x, {0, -1, 2}); });
  check_parts(msg, {"(0, -1, 2) is not a permutation"});
}

TEST_CASE("expand: incompatible target") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  int line = 0;
  std::string msg = error_of(g, [&] { NameScope s(g, "ex"); line = __LINE__; op::expand(g, x, {2, 4}); });
  check_msg(msg, "expand", line, "ex", {"cannot expand (2, 3) ('x') to (2, 4): dim -1"});
  msg = error_of(g, [&] { line = __LINE__; op::expand(g, x, {5, 2, 4}); });
  check_parts(msg, {"cannot expand (2, 3) ('x') to (5, 2, 4): dim -1"});
  msg = error_of(g, [&] { line = __LINE__; op::expand(g, x, {4, 3}); });
  check_msg(msg, "expand", line, "", {"to (4, 3): dim -2"});
  msg = error_of(g, [&] { line = __LINE__; op::expand(g, x, {3}); });
  check_msg(msg, "expand", line, "", {"target has fewer dims"});
}

TEST_CASE("param re-declared with another shape") {
  Graph g;
  NodeId w = op::param(g, "w", {4, 3}, Init{}); const int first = __LINE__;
  CHECK(g.node(w).shape == Shape{4, 3});
  int line = 0;
  std::string msg = error_of(g, [&] { line = __LINE__; op::param(g, "w", {3, 4}, Init{}); });
  CHECK(msg.rfind(head("param", line, "w"), 0) == 0);
  check_parts(msg, {"parameter declared again with shape (3, 4), first as (4, 3) at test_shape_errors.cpp:" +
                    std::to_string(first)});
  // Scoped names are what is compared: the same name in another scope is another parameter.
  NameScope s(g, "other");
  CHECK(g.node(op::param(g, "w", {3, 4}, Init{})).name == "other.w");
}

TEST_CASE("leaves: names, negative dims and constant sizes") {
  Graph g;
  int line = 0;
  std::string msg = error_of(g, [&] { line = __LINE__; op::input(g, "", {2}); });
  check_msg(msg, "input", line, "", {"needs a name"});
  msg = error_of(g, [&] { line = __LINE__; op::input(g, "neg", {2, -3}); });
  check_msg(msg, "input", line, "neg", {"negative dimension in shape (2, -3)"});
  msg = error_of(g, [&] { line = __LINE__; op::constant(g, {1, 2, 3}, {2, 2}); });
  check_msg(msg, "constant", line, "", {"has 3 values for shape (2, 2)"});
}
