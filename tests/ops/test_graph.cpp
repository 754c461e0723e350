// Tests for ops/ir/graph.cpp and ops/ir/build.cpp: building a graph records nodes and computes
// nothing; each node carries its op, inputs, inferred shape and dtype, its scoped name
// and the user's source line; the to_text / to_dot listings and ancestors().
// Shape errors live in test_shape_errors.cpp; values in the per-family kernel tests.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/test_util.h"

#include <algorithm>
#include <source_location>
#include <sstream>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/passes/simplify.h"
#include "ops/runtime/executor.h"
#include "ops/ir/graph.h"

using namespace gg;

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

using gg::test::contains;

DotOptions dot_options(std::optional<bool> collapse, std::vector<std::string> expand = {}, std::size_t above = 150) {
  DotOptions o;
  o.collapse = collapse;
  o.expand = std::move(expand);
  o.collapse_above = above;
  return o;
}

std::size_t count_of(const std::string& s, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("op list: names and arities come from op_list.def") {
  CHECK(std::string(op_name(OpKind::input)) == "input");
  CHECK(std::string(op_name(OpKind::matmul)) == "matmul");
  CHECK(std::string(op_name(OpKind::scatter_add)) == "scatter_add");
  CHECK(op_arity(OpKind::add) == 2);
  CHECK(op_arity(OpKind::where) == 3);
  CHECK(op_arity(OpKind::exp) == 1);
  CHECK(op_arity(OpKind::concat) == -1);
  CHECK(op_arity(OpKind::param) == 0);
  CHECK(std::string(cmp_name(Cmp::lt)) == "lt");
  CHECK(std::string(cmp_name(Cmp::ne)) == "ne");
  // Every op has a shape rule; only leaves without values lack a kernel (and see test_records.cpp).
  for (int k = 0; k < op_count; ++k) {
    INFO(std::string(op_name(OpKind(k))));
    const bool has_infer = op_rule(OpKind(k)).infer != nullptr;
    const bool has_kernel = op_rule(OpKind(k)).kernel != nullptr;
    const bool bound = OpKind(k) == OpKind::input || OpKind(k) == OpKind::param || OpKind(k) == OpKind::constant;
    CHECK(has_infer);
    CHECK(has_kernel != bound);
  }
}

TEST_CASE("shape helpers") {
  CHECK(to_string(Shape{}) == "()");
  CHECK(to_string(Shape{3}) == "(3,)");
  CHECK(to_string(Shape{2, 4, 8}) == "(2, 4, 8)");
  CHECK(numel(Shape{}) == 1);
  CHECK(numel(Shape{2, 0, 3}) == 0);
  CHECK(numel(Shape{2, 4, 8}) == 64);
  CHECK(strides_of(Shape{2, 4, 8}) == Shape{32, 8, 1});
  CHECK(std::string(to_string(DType::i32)) == "i32");
  CHECK(op::broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4});
  CHECK(op::broadcast_shapes({}, {5}) == Shape{5});
  int bad = 0;
  CHECK_FALSE(op::broadcast_shapes({2, 4, 4}, {2, 3}, &bad).has_value());
  CHECK(bad == -1);
  CHECK_FALSE(op::broadcast_shapes({5, 4}, {3, 4}, &bad).has_value());
  CHECK(bad == -2);
}

TEST_CASE("building a graph computes nothing") {
  Graph g;
  // An index that is out of range and a log of a negative number: only a run would notice.
  NodeId table = op::constant(g, {1, 2, 3, 4}, {2, 2});
  NodeId idx = op::constant(g, {7}, {1}, DType::i32);
  NodeId picked = op::gather(g, table, idx);
  NodeId bad_log = op::log(g, op::scalar(g, -1.f));
  NodeId x = op::input(g, "x", {2, 2});  // never fed
  NodeId y = op::add(g, x, picked);
  CHECK(g.size() == 7);
  CHECK(g.node(picked).shape == Shape{1, 2});
  CHECK(g.node(y).shape == Shape{2, 2});
  CHECK(g.node(bad_log).shape == Shape{});
  // Only running fails, and it names the problem.
  ParamStore ps;
  Executor ex(g, {picked}, ps);
  CHECK_THROWS_AS(ex.run(), GraphError);
}

TEST_CASE("nodes record op, inputs, shape, dtype, scoped name and source line") {
  Graph g;
  NodeId a = op::input(g, "a", {2, 3});
  NodeId b = op::input(g, "ids", {4}, DType::i32);
  NodeId c = op::param(g, "w", {3, 5}, Init{Init::normal, 0.f, 0.02f});

  SUBCASE("leaves") {
    const Node& na = g.node(a);
    CHECK(na.op == OpKind::input);
    CHECK(na.inputs.empty());
    CHECK(na.shape == Shape{2, 3});
    CHECK(na.dtype == DType::f32);
    CHECK(na.name == "a");
    CHECK(g.node(b).dtype == DType::i32);
    CHECK(g.node(c).op == OpKind::param);
    CHECK(g.node(c).attrs.init.kind == Init::normal);
    CHECK(g.node(c).attrs.init.b == doctest::Approx(0.02f));
  }

  SUBCASE("an op node") {
    NodeId m = op::matmul(g, a, c, false, false);
    const Node& nm = g.node(m);
    CHECK(nm.op == OpKind::matmul);
    CHECK(nm.inputs == std::vector<NodeId>{a, c});
    CHECK(nm.shape == Shape{2, 5});
    CHECK(nm.dtype == DType::f32);
    CHECK(nm.name.empty());  // no scope open
    CHECK(m == g.size() - 1);
  }

  SUBCASE("the source line is the caller's") {
    NodeId e = op::exp(g, a); const int line = __LINE__;
    CHECK(int(g.node(e).loc.line()) == line);
    CHECK(site_string(g.node(e).loc) == "test_graph.cpp:" + std::to_string(line));
    NodeId k = op::input(g, "k", {1}); const int line2 = __LINE__;
    CHECK(int(g.node(k).loc.line()) == line2);
    CHECK(line2 != line);
  }

  SUBCASE("name scopes nest and restore") {
    NodeId q, p, inner_leaf, after;
    {
      NameScope s1(g, "blocks.1");
      CHECK(g.scope() == "blocks.1");
      {
        NameScope s2(g, "attn");
        NameScope s3(g, "query");
        q = op::matmul(g, a, c);
        inner_leaf = op::input(g, "mask", {2, 5});
        CHECK(g.scoped("") == "blocks.1.attn.query");
      }
      p = op::exp(g, a);
      {
        NameScope r(g, "grad(x)", true);  // replace: the scope is exactly the name
        CHECK(g.scope() == "grad(x)");
      }
      CHECK(g.scope() == "blocks.1");
    }
    after = op::neg(g, a);
    CHECK(g.node(q).name == "blocks.1.attn.query");
    CHECK(g.node(inner_leaf).name == "blocks.1.attn.query.mask");
    CHECK(g.node(p).name == "blocks.1");
    CHECK(g.node(after).name.empty());
    CHECK(g.scope().empty());
    CHECK(g.find("blocks.1.attn.query.mask", OpKind::input) == inner_leaf);
    CHECK(g.find("blocks.1.attn.query.mask", OpKind::param) == -1);
    g.set_name(after, "renamed");
    CHECK(g.node(after).name == "renamed");
  }

  SUBCASE("a user site overrides the builders' lines; the outermost wins") {
    const auto outer = std::source_location::current();
    NodeId x1, x2, x3;
    {
      UserSite us(g, outer);
      x1 = op::exp(g, a);
      {
        UserSite inner(g, std::source_location::current());  // ignored: not outermost
        x2 = op::neg(g, a);
      }
      {
        const auto forced = std::source_location::current();
        UserSite replaced(g, forced, true);
        x3 = op::neg(g, a);
        CHECK(g.node(x3).loc.line() == forced.line());
      }
    }
    CHECK(g.node(x1).loc.line() == outer.line());
    CHECK(g.node(x2).loc.line() == outer.line());
    CHECK(!g.user_loc().has_value());
    NodeId x4 = op::neg(g, a); const unsigned line = __LINE__;
    CHECK(g.node(x4).loc.line() == line);
  }

  SUBCASE("re-declaring a parameter returns the first node") {
    NodeId again = op::param(g, "w", {3, 5}, Init{});
    CHECK(again == c);
  }
}

TEST_CASE("Graph::add checks arity and input ids") {
  Graph g;
  NodeId a = op::input(g, "a", {2});
  const auto before = g.size();
  CHECK_THROWS_AS(g.add(OpKind::add, {a}), GraphError);
  CHECK_THROWS_AS(g.add(OpKind::exp, {a + 5}), GraphError);
  CHECK_THROWS_AS(g.add(OpKind::exp, {-1}), GraphError);
  CHECK(g.size() == before);  // a failed build leaves the graph as it was
  try {
    g.add(OpKind::add, {a}, {}, "s");
    FAIL("no error");
  } catch (const GraphError& e) {
    CHECK(contains(e.what(), "add at test_graph.cpp:"));
    CHECK(contains(e.what(), "('s')"));
    CHECK(contains(e.what(), "takes 2 inputs, got 1"));
  }
}

TEST_CASE("to_text lists one line per node with op, shape, name and file:line") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 4, 8}); const int lx = __LINE__;
  NodeId w = op::param(g, "w", {8, 8}, Init{Init::ones});
  NodeId unused = op::input(g, "unused", {3});
  NodeId m, s;
  int lm = 0;
  {
    NameScope ns(g, "blocks.0.attn.query");
    m = op::matmul(g, x, w, false, true); lm = __LINE__;
  }
  s = op::sum(g, m, -1, true);
  const int ls = __LINE__ - 1;

  std::string all = to_text(g);
  auto lines = lines_of(all);
  REQUIRE(lines.size() == 5);
  CHECK(contains(lines[0], "%0 = input"));
  CHECK(contains(lines[0], "f32(2, 4, 8)"));
  CHECK(contains(lines[0], "# x "));
  CHECK(contains(lines[0], "test_graph.cpp:" + std::to_string(lx)));
  CHECK(contains(lines[1], "%1 = param [init=ones]"));
  CHECK(contains(lines[1], "f32(8, 8)"));
  CHECK(contains(lines[2], "%2 = input"));
  CHECK(contains(lines[2], "f32(3,)"));
  CHECK(contains(lines[3], "%3 = matmul %0, %1 [trans_b]"));
  CHECK(contains(lines[3], "f32(2, 4, 8)"));
  CHECK(contains(lines[3], "# blocks.0.attn.query "));
  CHECK(contains(lines[3], "test_graph.cpp:" + std::to_string(lm)));
  CHECK(contains(lines[4], "%4 = sum %3 [axis=2, keepdim]"));  // the axis is normalized
  CHECK(contains(lines[4], "f32(2, 4, 1)"));
  CHECK(contains(lines[4], "# - "));  // unnamed
  CHECK(contains(lines[4], "test_graph.cpp:" + std::to_string(ls)));

  // With roots, only what they need.
  auto some = lines_of(to_text(g, {s}));
  CHECK(some.size() == 4);
  CHECK_FALSE(contains(to_text(g, {s}), "unused"));
  CHECK(lines_of(to_text(g, {unused})).size() == 1);

  // i32 dtype and other attributes.
  NodeId ids = op::input(g, "ids", {5}, DType::i32);
  NodeId gth = op::gather(g, w, ids, 0);
  NodeId cmp = op::compare(g, x, op::scalar(g, 0.5f), Cmp::ge);
  NodeId sl = op::slice(g, x, 1, 1, -1);
  std::string more = to_text(g, {gth, cmp, sl});
  CHECK(contains(more, ": i32(5,)"));
  CHECK(contains(more, "gather %1, %" + std::to_string(ids) + " [axis=0]"));
  CHECK(contains(more, "[ge]"));
  CHECK(contains(more, "[0.5]"));
  CHECK(contains(more, "[axis=1, 1:3]"));
}

TEST_CASE("to_dot draws the nodes and one edge per input") {
  Graph g;
  NodeId a = op::input(g, "a", {3});
  NodeId b = op::param(g, "b", {3}, Init{});
  NodeId c = op::mul(g, a, b);
  NodeId d = op::add(g, c, a);
  NodeId lonely = op::input(g, "lonely", {1});
  std::string dot = to_dot(g, {d});
  CHECK(dot.rfind("digraph", 0) == 0);
  CHECK(dot.back() == '\n');
  CHECK(contains(dot, "}\n"));
  CHECK(count_of(dot, "->") == 4);
  CHECK(contains(dot, "n0 -> n2;"));
  CHECK(contains(dot, "n1 -> n2;"));
  CHECK(contains(dot, "n2 -> n3;"));
  CHECK(contains(dot, "n0 -> n3;"));
  CHECK(contains(dot, "%3 add"));
  CHECK(contains(dot, "f32(3,)"));
  CHECK_FALSE(contains(dot, "n" + std::to_string(lonely) + " ["));
  CHECK(contains(to_dot(g), "n" + std::to_string(lonely) + " ["));
}

TEST_CASE("ancestors: the roots and what they depend on, in increasing order") {
  Graph g;
  NodeId a = op::input(g, "a", {2});      // 0
  NodeId b = op::input(g, "b", {2});      // 1
  NodeId c = op::exp(g, a);               // 2
  NodeId d = op::neg(g, b);               // 3
  NodeId e = op::add(g, c, c);            // 4 (diamond onto c)
  NodeId f = op::mul(g, e, a);            // 5
  NodeId h = op::sub(g, d, d);            // 6
  CHECK(ancestors(g, {f}) == std::vector<NodeId>{a, c, e, f});
  CHECK(ancestors(g, {h}) == std::vector<NodeId>{b, d, h});
  CHECK(ancestors(g, {h, c}) == std::vector<NodeId>{a, b, c, d, h});
  CHECK(ancestors(g, {a}) == std::vector<NodeId>{a});
  CHECK(ancestors(g, {}).size() == std::size_t(g.size()));
}

TEST_CASE("to_text: inside a composite, the user's line then the composite's own line") {
  Graph g;
  NodeId x = op::input(g, "x", {2});
  NodeId direct = op::exp(g, x);
  const unsigned user_line = std::source_location::current().line() + 1;
  UserSite user(g, std::source_location::current());  // the user's call of a composite
  NodeId inner;
  {
    UserSite composite(g, std::source_location::current());  // a line inside the composite
    inner = op::tanh(g, x);
  }
  const unsigned composite_line = user_line + 3;
  CHECK(g.node(direct).inner_loc.line() == g.node(direct).loc.line());
  CHECK(g.node(inner).loc.line() == user_line);
  CHECK(g.node(inner).inner_loc.line() == composite_line);
  const std::string line = to_text_line(g, inner);
  CHECK(contains(line, fmt::format("test_graph.cpp:{} > test_graph.cpp:{}", user_line, composite_line)));
  CHECK_FALSE(contains(to_text_line(g, direct), ">"));
  CHECK(line == lines_of(to_text(g, {inner})).back() + "\n");
}

TEST_CASE("to_dot: one cluster per name scope, collapsible, a scope expandable") {
  Graph g;
  NodeId x = op::input(g, "x", {4});
  NodeId h = x;
  for (int b = 0; b < 2; ++b) {
    NameScope block(g, fmt::format("blocks.{}", b));
    {
      NameScope attn(g, "attn");
      h = op::mul(g, h, op::param(g, "w", {4}, Init{}));
      h = op::tanh(g, h);
      g.set_name(h, g.scoped("out"));
    }
    NameScope mlp(g, "mlp");
    h = op::exp(g, op::add(g, h, op::param(g, "b", {4}, Init{})));
  }
  const NodeId out = h;
  const std::string open = to_dot(g, {out}, dot_options(false));
  CHECK(count_of(open, "subgraph cluster_") == 6);  // blocks.0, blocks.0.attn, blocks.0.mlp, and block 1's
  CHECK(contains(open, "label=\"blocks.1.attn\""));
  CHECK(count_of(open, "shape=box3d") == 0);
  CHECK(count_of(open, "%" + std::to_string(out) + " exp") == 1);

  const std::string closed = to_dot(g, {out}, dot_options(true));
  CHECK(count_of(closed, "shape=box3d") == 2);  // one box per block
  CHECK(count_of(closed, "subgraph cluster_") == 0);
  CHECK(contains(closed, "blocks.0\\n(6 nodes)"));
  CHECK(count_of(closed, "->") == 2);  // x -> blocks.0 -> blocks.1
  // Large graphs collapse by default.
  CHECK(count_of(to_dot(g, {out}, dot_options(std::nullopt, {}, 5)), "shape=box3d") == 2);
  CHECK(count_of(to_dot(g, {out}), "shape=box3d") == 0);

  const std::string one = to_dot(g, {out}, dot_options(true, {"blocks.1.attn"}));
  CHECK(contains(one, "label=\"blocks.1\";"));       // opened to show the scope asked for
  CHECK(contains(one, "label=\"blocks.1.attn\";"));
  CHECK(contains(one, "blocks.1.mlp\\n(3 nodes)"));  // its sibling stays a box
  CHECK(contains(one, "blocks.0\\n(6 nodes)"));
  CHECK_THROWS_WITH_AS(to_dot(g, {out}, dot_options(std::nullopt, {"blocks.1.atn"})),
                       "to_dot: no scope 'blocks.1.atn' among the drawn nodes; did you mean 'blocks.1.attn'?",
                       GraphError);
}

TEST_CASE("step scopes name the step's nodes, not its parameters; to_dot draws runs of steps as one box") {
  // An unrolled loop h = tanh(h * w) in step scopes, and a stand-in for its gradient named
  // as grad() names it (grad(step.<t>), built from the last step back).
  Graph g;
  NodeId h = op::input(g, "x", {4});
  for (int t = 0; t < 6; ++t) {
    StepScope step(g, "step", t);
    CHECK(g.scope() == fmt::format("step.{}", t));
    CHECK(g.param_scope().empty());
    NodeId w = op::param(g, "rnn.w", {4}, Init{});
    CHECK(g.node(w).name == "rnn.w");  // every step finds the same parameter
    h = op::tanh(g, op::mul(g, h, w));
  }
  CHECK(g.node(h).name == "step.5");
  CHECK(g.scope().empty());
  CHECK(g.step_scopes().size() == 6);
  NodeId d = h;
  for (int t = 5; t >= 0; --t) {
    NameScope grad(g, fmt::format("grad(step.{})", t), true);
    d = op::mul(g, op::neg(g, d), d);
  }
  CHECK(step_key("step.12") == "step.#");
  CHECK(step_key("t3x10") == "t#x#");

  const std::string closed = to_dot(g, {d}, dot_options(true));
  INFO(closed);
  CHECK(contains(closed, "label=\"step.0 .. step.5\\n(6 steps, 12 nodes)\""));
  CHECK(contains(closed, "label=\"grad:step.5 .. grad:step.0\\n(6 steps, 12 nodes)\""));
  CHECK(contains(closed, "label=\"rnn\\n(1 nodes)\""));  // the shared weight's scope, as before
  CHECK(count_of(closed, "shape=box3d") == 3);

  const std::string one = to_dot(g, {d}, dot_options(true, {"step.2"}));
  CHECK(contains(one, "label=\"step.0 .. step.1\\n(2 steps, 4 nodes)\""));
  CHECK(contains(one, "label=\"step.2\";"));  // drawn node by node
  CHECK(contains(one, "label=\"step.3 .. step.5\\n(3 steps, 6 nodes)\""));
  CHECK(contains(one, "label=\"grad:step.5 .. grad:step.3\\n(3 steps, 6 nodes)\""));
  CHECK(contains(one, "label=\"grad:step.2\";"));
  CHECK(contains(one, "label=\"grad:step.1 .. grad:step.0\\n(2 steps, 4 nodes)\""));
  CHECK(count_of(to_dot(g, {d}, dot_options(false)), "subgraph cluster_") == 13);  // every step open, and "rnn"

  // Simplification rebuilds the graph and keeps which scopes are steps.
  CHECK(simplify(g, {d}).graph.step_scopes() == g.step_scopes());
}

TEST_CASE("to_text and to_dot mark a stop_gradient node") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId m = op::max(g, x, 1, true);
  NodeId d = op::stop_gradient(g, m);
  CHECK(contains(to_text_line(g, d), "reshape %1 [stop_gradient]"));
  CHECK(contains(to_text_line(g, m), "[axis=1, keepdim]"));
  CHECK_FALSE(contains(to_text_line(g, m), "stop_gradient"));
  CHECK(contains(to_dot(g, {d}), "%2 reshape [stop_gradient]"));
}
