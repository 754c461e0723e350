// Tests for ops/runtime/executor.cpp and the ParamStore (ops/ir/tensor.cpp): inputs fed by name with
// errors that name the input, parameters that persist across runs and are shared between
// executors, an arena sized before the first run and smaller than the unshared total,
// plans holding only what the outputs need, the random op and i32 constants.
#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"

using namespace gg;

namespace {

using gg::test::contains;

// The message of the GraphError that `f` throws ("" when none is).
const auto error_of = [](auto&& f) { return gg::test::error_of<GraphError>(f); };

}  // namespace

TEST_CASE("inputs are fed by name; mistakes name the input") {
  Graph g;
  NodeId x = op::input(g, "tokens.x", {2, 3}); const int lx = __LINE__;
  NodeId ids = op::input(g, "ids", {4}, DType::i32);
  NodeId y = op::mul(g, x, op::scalar(g, 2.f));
  NodeId table = op::constant(g, {1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  NodeId e = op::gather(g, table, ids);
  ParamStore ps;
  Executor ex(g, {y, e}, ps);
  CHECK(ex.has_input("tokens.x"));
  CHECK(ex.has_input("ids"));
  CHECK_FALSE(ex.has_input("nope"));

  SUBCASE("wrong name") {
    std::string msg = error_of([&] { ex.set_input("tokens.y", Tensor({2, 3})); });
    CHECK(contains(msg, "no input 'tokens.y'"));
    CHECK(contains(msg, "did you mean 'tokens.x'?"));
  }
  SUBCASE("wrong shape") {
    std::string msg = error_of([&] { ex.set_input("tokens.x", Tensor({3, 2})); });
    CHECK(contains(msg, "input 'tokens.x' declared at test_executor.cpp:" + std::to_string(lx)));
    CHECK(contains(msg, "f32(2, 3)"));
    CHECK(contains(msg, "was fed f32(3, 2)"));
    const std::vector<float> five(5, 1.f);
    msg = error_of([&] { ex.set_input("tokens.x", std::span<const float>(five)); });
    CHECK(contains(msg, "as f32(2, 3) was fed 5 f32 values"));
  }
  SUBCASE("wrong dtype") {
    std::string msg = error_of([&] { ex.set_input("ids", Tensor({4}, DType::f32)); });
    CHECK(contains(msg, "input 'ids'"));
    CHECK(contains(msg, "as i32(4,) was fed f32(4,)"));
    const std::vector<float> four(4, 1.f);
    msg = error_of([&] { ex.set_input("ids", std::span<const float>(four)); });
    CHECK(contains(msg, "input 'ids' declared at test_executor.cpp:"));
    CHECK(contains(msg, "as i32(4,) was fed 4 f32 values"));
    const std::vector<std::int32_t> six(6, 1);
    msg = error_of([&] { ex.set_input("tokens.x", std::span<const std::int32_t>(six)); });
    CHECK(contains(msg, "as f32(2, 3) was fed 6 i32 values"));
  }
  SUBCASE("an input never fed") {
    const std::vector<std::int32_t> iv = {0, 1, 2, 3};
    ex.set_input("ids", std::span<const std::int32_t>(iv));
    std::string msg = error_of([&] { ex.run(); });
    CHECK(contains(msg, "input 'tokens.x' declared at test_executor.cpp:" + std::to_string(lx) + " was not fed"));
  }
  SUBCASE("fed correctly, values flow; feeding again replaces them") {
    const std::vector<std::int32_t> iv = {3, 0, 3, 1};
    const std::vector<float> xv = {1, 2, 3, 4, 5, 6};
    ex.set_input("ids", std::span<const std::int32_t>(iv));
    ex.set_input("tokens.x", std::span<const float>(xv));
    ex.run();
    const std::vector<float> want_y = {2, 4, 6, 8, 10, 12};
    const std::vector<float> want_e = {7, 8, 1, 2, 7, 8, 3, 4};
    CHECK(ex.get(y).to_vector() == want_y);
    CHECK(ex.get(e).to_vector() == want_e);
    CHECK(ex.get(e).shape() == Shape{4, 2});
    ex.set_input("tokens.x", Tensor::f32({2, 3}, std::vector<float>{0, 0, 0, 0, 0, 1}));
    ex.run();
    CHECK(ex.value(y).f()[5] == 2.f);
    CHECK(ex.value(y).f()[0] == 0.f);
    // Inputs (leaves) stay readable too.
    CHECK(ex.value(x).f()[5] == 1.f);
  }
}

TEST_CASE("parameters persist across runs and are shared through the store") {
  Graph g;
  NodeId x = op::input(g, "x", {3});
  NodeId w = op::param(g, "w", {3}, Init{Init::ones});
  NodeId y = op::mul(g, x, w);
  NodeId total = op::sum(g, y, 0);
  ParamStore ps;
  CHECK_FALSE(ps.has("w"));

  // A plan may be built before the store holds the parameter; running needs it.
  Executor ex1(g, {total, y}, ps);
  ex1.set_input("x", Tensor::f32({3}, std::vector<float>{1, 2, 3}));
  std::string msg = error_of([&] { ex1.run(); });
  CHECK(contains(msg, "parameter 'w'"));
  CHECK(contains(msg, "has no value"));

  ps.init_missing(g, 0);
  REQUIRE(ps.has("w"));
  CHECK(ps.count() == 3);
  ex1.run();
  CHECK(ex1.scalar(total) == 6.f);

  Executor ex2(g, {total}, ps);  // a second executor on the same store
  ex2.set_input("x", Tensor::f32({3}, std::vector<float>{1, 1, 1}));
  ex2.run();
  CHECK(ex2.scalar(total) == 3.f);

  // Updating the store in place changes the next run of both.
  ps.at("w").f()[0] = 10.f;
  ex1.run();
  ex2.run();
  CHECK(ex1.scalar(total) == 15.f);  // 10*1 + 2 + 3
  CHECK(ex2.scalar(total) == 12.f);
  CHECK(ex1.value(w).f()[0] == 10.f);  // a parameter is readable through the plan

  // Replacing the tensor in the store is picked up as well.
  ps.set("w", Tensor::f32({3}, std::vector<float>{0, 0, 2}));
  ex1.run();
  CHECK(ex1.scalar(total) == 6.f);
  CHECK(ex1.get(y).to_vector() == std::vector<float>{0, 0, 6});

  // init_missing leaves existing values alone.
  ps.init_missing(g, 123);
  CHECK(ps.at("w").f()[2] == 2.f);

  // A store tensor of the wrong shape is reported at run time.
  ps.set("w", Tensor({4}));
  msg = error_of([&] { ex1.run(); });
  CHECK(contains(msg, "parameter 'w' is (4,) in the store but (3,) in the graph"));
}

TEST_CASE("ParamStore::init_missing: deterministic by seed and name") {
  Graph g;
  op::param(g, "a", {50}, Init{Init::normal, 1.f, 0.5f});
  op::param(g, "b", {50}, Init{Init::uniform, -2.f, -1.f});
  op::param(g, "c", {2, 2}, Init{Init::zeros});
  ParamStore p1, p2, p3;
  p1.init_missing(g, 7);
  p2.init_missing(g, 7);
  p3.init_missing(g, 8);
  CHECK(p1.at("a").to_vector() == p2.at("a").to_vector());
  CHECK(p1.at("a").to_vector() != p3.at("a").to_vector());
  CHECK(p1.at("a").to_vector() != p1.at("b").to_vector());
  double mean = 0;
  for (float v : p1.at("a").to_vector()) mean += v / 50.0;
  CHECK(mean == doctest::Approx(1.0).epsilon(0.3));
  for (float v : p1.at("b").to_vector()) {
    CHECK(v >= -2.f);
    CHECK(v < -1.f);
  }
  for (float v : p1.at("c").to_vector()) CHECK(v == 0.f);
  CHECK(p1.count() == 104);
  CHECK_THROWS_AS(p1.at("missing"), GraphError);
}

TEST_CASE("the arena is sized before the first run and reuses buffers") {
  // A chain of 20 element-wise ops on (64, 64): each intermediate dies right after the
  // next op, so two or three buffers suffice.
  Graph g;
  NodeId x = op::input(g, "x", {64, 64});
  NodeId h = x;
  for (int i = 0; i < 20; ++i) h = i % 2 ? op::tanh(g, h) : op::mul(g, h, op::scalar(g, 0.9f));
  ParamStore ps;
  Executor ex(g, {h}, ps, 0, {.fuse = false});  // fusion would keep no intermediate at all (test_fuse.cpp)
  const std::size_t one = 64 * 64 * 4;
  CHECK(ex.unshared_bytes() == 20 * one);
  CHECK(ex.arena_bytes() >= 2 * one);
  CHECK(ex.arena_bytes() <= 3 * one);
  const std::size_t before = ex.arena_bytes();

  std::vector<float> xv(64 * 64);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 13) * 0.1f - 0.6f;
  ex.set_input("x", std::span<const float>(xv));
  ex.run();
  CHECK(ex.arena_bytes() == before);
  // Reuse did not corrupt the values: compare with the same chain done on floats.
  Tensor out = ex.get(h);
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    double v = xv[i];
    for (int k = 0; k < 20; ++k) v = k % 2 ? std::tanh(v) : v * double(0.9f);
    bad += std::abs(out.f()[i] - v) > 1e-5;
  }
  CHECK(bad == 0);

  // A value read late (a residual connection) keeps its buffer alive.
  Graph g2;
  NodeId a = op::input(g2, "a", {256});
  NodeId b = op::exp(g2, a);
  NodeId c = b;
  for (int i = 0; i < 6; ++i) c = op::neg(g2, c);
  NodeId r = op::sub(g2, c, b);  // b is still needed here: c == b, so r == 0
  Executor ex2(g2, {r}, ps, 0, {.simplify = false, .fuse = false});  // the passes would cancel or fuse the negations
  CHECK(ex2.arena_bytes() < ex2.unshared_bytes());
  std::vector<float> av(256);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = float(i) / 256.f;
  ex2.set_input("a", std::span<const float>(av));
  ex2.run();
  for (float v : ex2.get(r).to_vector()) CHECK(v == 0.f);
}

TEST_CASE("a plan holds only the ancestors of its outputs") {
  Graph g;
  NodeId x = op::input(g, "x", {4});
  NodeId unrelated_in = op::input(g, "other", {4});
  NodeId a = op::exp(g, x);
  NodeId unrelated = op::log(g, unrelated_in);
  NodeId b = op::neg(g, a);
  NodeId after = op::add(g, b, unrelated);
  ParamStore ps;
  Executor ex(g, {b}, ps);
  const std::vector<NodeId> want = {x, a, b};
  CHECK(ex.order() == want);
  CHECK_FALSE(ex.has_input("other"));
  // The unrelated input need not (and cannot) be fed.
  CHECK_THROWS_AS(ex.set_input("other", Tensor({4})), GraphError);
  ex.set_input("x", Tensor({4}));
  CHECK_NOTHROW(ex.run());
  CHECK(ex.value(b).f()[0] == -1.f);

  SUBCASE("value() of something not kept throws") {
    std::string msg = error_of([&] { ex.value(a); });  // an intermediate
    CHECK(contains(msg, "node %" + std::to_string(a) + " is not an output of this plan"));
    CHECK_THROWS_AS(ex.value(unrelated), GraphError);  // not in the plan at all
    CHECK_THROWS_AS(ex.value(after), GraphError);
    CHECK_THROWS_AS(ex.value(-1), GraphError);
    CHECK_THROWS_AS(ex.value(g.size()), GraphError);
    CHECK_THROWS_AS(ex.get(a), GraphError);
  }
  SUBCASE("several outputs") {
    Executor ex2(g, {after, a}, ps);
    CHECK(ex2.order().size() == std::size_t(g.size()));
    CHECK(ex2.order().back() == after);
  }
}

TEST_CASE("random gives values in [0, 1) that change between runs") {
  Graph g;
  NodeId r = op::random(g, {1000});
  NodeId keep = op::compare(g, r, op::scalar(g, 0.5f), Cmp::lt);
  NodeId kept = op::sum(g, keep, 0);
  ParamStore ps;
  Executor ex(g, {r, kept}, ps, /*seed=*/42);
  ex.run();
  auto first = ex.get(r).to_vector();
  for (float v : first) {
    CHECK(v >= 0.f);
    CHECK(v < 1.f);
  }
  std::set<float> distinct(first.begin(), first.end());
  CHECK(distinct.size() > 990);
  CHECK(ex.scalar(kept) > 400.f);  // about half below 0.5
  CHECK(ex.scalar(kept) < 600.f);
  ex.run();
  auto second = ex.get(r).to_vector();
  CHECK(second != first);

  // The same seed repeats the stream; another seed does not.
  Executor same(g, {r}, ps, 42), other(g, {r}, ps, 43);
  same.run();
  other.run();
  CHECK(same.get(r).to_vector() == first);
  CHECK(other.get(r).to_vector() != first);
}

TEST_CASE("constants, including i32 ones") {
  Graph g;
  NodeId ci = op::constant(g, {3, -2, 16777216, 0}, {2, 2}, DType::i32);
  NodeId cf = op::constant(g, {0.5f, 1.5f}, {2});
  NodeId s = op::scalar(g, 4.f);
  NodeId idx = op::constant(g, {1, 0}, {2}, DType::i32);
  NodeId picked = op::gather(g, ci, idx, 1);  // swaps the columns, stays i32
  NodeId eq = op::compare(g, picked, ci, Cmp::eq);
  NodeId y = op::add(g, cf, s);
  CHECK(g.node(ci).dtype == DType::i32);
  CHECK(g.node(picked).dtype == DType::i32);
  ParamStore ps;
  Executor ex(g, {ci, picked, eq, y}, ps, 0, {.simplify = false});  // the pass would fold y (a test of its own)
  CHECK(ex.unshared_bytes() == 3 * 64);  // constants take no arena space
  ex.run();
  Tensor ti = ex.get(ci);
  CHECK(ti.dtype() == DType::i32);
  CHECK(ti.i()[0] == 3);
  CHECK(ti.i()[1] == -2);
  CHECK(ti.i()[2] == 16777216);
  CHECK(ti.i()[3] == 0);
  const std::int32_t want_picked[] = {-2, 3, 0, 16777216};
  for (int i = 0; i < 4; ++i) CHECK(ex.value(picked).i()[i] == want_picked[i]);
  for (int i = 0; i < 4; ++i) CHECK(ex.value(eq).f()[i] == 0.f);
  CHECK(ex.get(y).to_vector() == std::vector<float>{4.5f, 5.5f});
  CHECK(ex.value(s).f()[0] == 4.f);
}

TEST_CASE("a reshape is a view of its input's buffer, and keeps that buffer alive") {
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  NodeId w = op::param(g, "w", {6}, {});
  NodeId a = op::exp(g, x);                   // a: (2, 3) in the arena
  NodeId r = op::reshape(g, a, {6});          // r: a view of a
  NodeId rx = op::reshape(g, x, {3, 2});      // a view of the input's storage
  NodeId rw = op::reshape(g, w, {2, 3});      // a parameter's reshape is copied (rebound each run)
  NodeId b = op::neg(g, x);                   // must not take a's buffer while r is still read
  NodeId c = op::add(g, op::mul(g, r, op::reshape(g, b, {6})), w);
  ParamStore ps;
  ps.set("w", Tensor::f32({6}, std::vector<float>{1, 2, 3, 4, 5, 6}));
  Executor ex(g, {c, rx, rw, r}, ps);
  const std::vector<float> xs{0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f};
  ex.set_input("x", xs);
  ex.run();
  for (int i = 0; i < 6; ++i) {
    INFO("i = " << i);
    CHECK(ex.value(c).f()[i] == doctest::Approx(std::exp(xs[std::size_t(i)]) * -xs[std::size_t(i)] + float(i + 1)));
    CHECK(ex.value(rx).f()[i] == xs[std::size_t(i)]);
    CHECK(ex.value(rw).f()[i] == float(i + 1));
  }
  CHECK(ex.value(rx).data == ex.value(x).data);
  CHECK(ex.value(r).f()[5] == doctest::Approx(std::exp(-0.6f)));
  ps.at("w").f()[0] = 10.f;  // the store changes; the copied reshape follows at the next run
  ex.run();
  CHECK(ex.value(rw).f()[0] == 10.f);
}

// ---- mistakes throw GraphError (never abort), and name what is wrong --------------------

TEST_CASE("Tensor::f32 / Tensor::i32 with the wrong number of values throw, naming both counts and the shape") {
  std::string msg = error_of([] { Tensor::f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5}); });
  CHECK(contains(msg, "5 values"));
  CHECK(contains(msg, "6"));
  CHECK(contains(msg, "(2, 3)"));
  msg = error_of([] { Tensor::i32({4}, std::vector<std::int32_t>{1, 2}); });
  CHECK(contains(msg, "2 values"));
  CHECK(contains(msg, "(4,)"));
}

TEST_CASE("an executor refuses output ids that are not nodes of its graph") {
  Graph g;
  NodeId x = op::input(g, "x", {2});
  ParamStore ps;
  std::string msg = error_of([&] { Executor ex(g, {x, 7}, ps); });
  CHECK(contains(msg, "%7"));
  CHECK(contains(msg, "not a node of this graph"));
  CHECK(contains(error_of([&] { Executor ex(g, {-1}, ps); }), "%-1"));
  // value()/get() of a node the plan did not keep is an error too.
  NodeId y = op::exp(g, x);
  NodeId z = op::exp(g, y);
  Executor ex(g, {z}, ps);
  ex.set_input("x", std::vector<float>{1, 2});
  ex.run();
  CHECK(contains(error_of([&] { (void)ex.value(y); }), "not an output of this plan"));
  CHECK(contains(error_of([&] { (void)ex.get(99); }), "not an output of this plan"));
}

TEST_CASE("feeding an input the plan does not need says so; an unknown name suggests the closest declared ones") {
  Graph g;
  NodeId tokens = op::input(g, "tokens", {2});
  NodeId labels = op::input(g, "labels", {2});
  (void)labels;
  NodeId y = op::exp(g, tokens);
  ParamStore ps;
  Executor ex(g, {y}, ps);
  std::string msg = error_of([&] { ex.set_input("labels", std::vector<float>{1, 2}); });
  CHECK(contains(msg, "'labels'"));
  CHECK(contains(msg, "declared"));
  CHECK(contains(msg, "not used by the requested outputs"));
  msg = error_of([&] { ex.set_input("token", std::vector<float>{1, 2}); });
  CHECK(contains(msg, "no input 'token'"));
  CHECK(contains(msg, "did you mean 'tokens'?"));
  msg = error_of([&] { ex.set_input("zzzzzzzzzzz", std::vector<float>{1, 2}); });
  CHECK(contains(msg, "no input 'zzzzzzzzzzz'"));
  CHECK(!contains(msg, "did you mean"));
}

TEST_CASE("a value check attached to a node runs after the node is computed and throws its message") {
  Graph g;
  NodeId x = op::input(g, "x", {3});
  NodeId y = op::mul(g, x, op::scalar(g, 2.f));
  auto positive = [](const View& v) -> std::string {
    for (std::int64_t i = 0; i < v.numel(); ++i)
      if (v.f()[i] <= 0.f) return fmt::format("value {} at {} is not positive", v.f()[i], i);
    return {};
  };
  g.add_check(y, "my_layer at model.cpp:7 ('y')", positive);
  g.add_check(x, "my_input at model.cpp:3 ('x')", positive);
  ParamStore ps;
  Executor ex(g, {y}, ps);
  ex.set_input("x", std::vector<float>{1, 2, 3});
  ex.run();
  CHECK(ex.get(y).to_vector() == std::vector<float>{2, 4, 6});
  ex.set_input("x", std::vector<float>{1, -2, 3});
  CHECK(error_of([&] { ex.run(); }) == "my_input at model.cpp:3 ('x'): value -2 at 1 is not positive");
  // A plan without the checked node does not run its check.
  NodeId z = op::exp(g, x);
  g.add_check(z, "never", [](const View&) -> std::string { return "fails"; });
  Executor ex2(g, {y}, ps);
  ex2.set_input("x", std::vector<float>{1, 2, 3});
  CHECK_NOTHROW(ex2.run());
}

TEST_CASE("a Tensor with a negative dimension and sum_to a shape that does not broadcast throw GraphError") {
  CHECK(contains(error_of([] { Tensor t({-1, 2}); }), "negative dimension in shape (-1, 2)"));
  Graph g;
  NodeId x = op::input(g, "x", {2, 3});
  std::string msg = error_of([&] { op::sum_to(g, x, {5}); });
  CHECK(contains(msg, "(5,) does not broadcast to (2, 3)"));
  CHECK(contains(error_of([&] { op::sum_to(g, 42, {5}); }), "%42 is not a node of this graph"));
}

TEST_CASE("aligned allocations: 64-byte and, from 2 MB on, 2 MB alignment; a size that would wrap around throws") {
  void* small = aligned_alloc64(100);
  CHECK(reinterpret_cast<std::uintptr_t>(small) % 64 == 0);
  aligned_free(small);
  void* large = aligned_alloc_large(std::size_t(3) << 20);
  CHECK(reinterpret_cast<std::uintptr_t>(large) % (std::size_t(2) << 20) == 0);
  static_cast<char*>(large)[(std::size_t(3) << 20) - 1] = 1;  // the whole size is there
  aligned_free(large);
  void* below = aligned_alloc_large(1000);  // below 2 MB: an ordinary allocation
  CHECK(reinterpret_cast<std::uintptr_t>(below) % 64 == 0);
  aligned_free(below);
  CHECK_THROWS_AS(aligned_alloc64(SIZE_MAX), std::bad_alloc);
  CHECK_THROWS_AS(aligned_alloc_large(SIZE_MAX), std::bad_alloc);
  CHECK_THROWS_AS(aligned_alloc_large(SIZE_MAX - 100), std::bad_alloc);
}

TEST_CASE("planning switches by name: every one settable, unknown names refused") {
  gg::ExecutorOptions o;
  for (const std::string& name : gg::executor_switch_names()) {
    gg::ExecutorOptions one;
    for (const std::string& n : gg::executor_switch_names()) REQUIRE(gg::set_executor_switch(one, n, true));
    CHECK(gg::switches_off(one).empty());
    REQUIRE(gg::set_executor_switch(one, name, false));
    CHECK(gg::switches_off(one) == name);
    CHECK(gg::set_executor_switch(o, name, false));
  }
  CHECK(gg::switches_off(o) == "simplify,remat,fuse,slice,masked,in-place,epilogue");
  CHECK(!o.simplify);
  CHECK(!o.epilogue);
  const gg::ExecutorOptions before = o;
  CHECK(!gg::set_executor_switch(o, "fusion", true));
  CHECK(gg::switches_off(o) == gg::switches_off(before));
}

TEST_CASE("timing only: a plan leaves out the kinds of work it is told to, and runs whole again after") {
  // x (4, 8) @ w (8, 16), exp(p) * 2 as the product's epilogue, a column sum, a value check.
  Graph g;
  NodeId x = op::input(g, "x", {4, 8});
  NodeId w = op::input(g, "w", {8, 16});
  NodeId p = op::matmul(g, x, w);
  NodeId e = op::mul(g, op::exp(g, p), op::scalar(g, 2.f));
  NodeId s = op::sum(g, e, 0);
  g.add_check(p, "the product", [](const View& v) -> std::string {
    for (std::int64_t i = 0; i < v.numel(); ++i)
      if (v.f()[i] > 1.f) return "above 1";
    return {};
  });
  ParamStore ps;
  Executor ex(g, {s}, ps);
  REQUIRE(ex.epilogue_groups() == 1);
  ex.set_input("x", std::vector<float>(32, 0.01f));
  ex.set_input("w", std::vector<float>(128, 0.5f));
  // Which op kinds ran in one profiled run with `kinds` left out.
  auto ran = [&](unsigned kinds) {
    ex.set_skip_for_timing(kinds);
    CHECK(ex.skip_for_timing() == kinds);
    Executor fresh(g, {s}, ps);  // a new profile each time
    fresh.set_input("x", std::vector<float>(32, kinds ? 1.f : 0.01f));  // 1: the product fails its check
    fresh.set_input("w", std::vector<float>(128, 0.5f));
    fresh.set_skip_for_timing(kinds);
    fresh.set_profile(true);
    fresh.run();  // checks are not run while work is left out
    const std::string report = fresh.profile_report();
    std::set<std::string> kinds_ran;
    for (std::string op : {"matmul", "fused", "sum"})
      if (contains(report, op)) kinds_ran.insert(op);
    return kinds_ran;
  };
  CHECK(ran(0) == std::set<std::string>{"matmul", "sum"});            // the epilogue inside the product
  CHECK(ran(skip_products) == std::set<std::string>{"fused", "sum"});  // the epilogue alone
  CHECK(ran(skip_groups) == std::set<std::string>{"matmul", "sum"});   // the product without it
  CHECK(ran(skip_ops) == std::set<std::string>{"matmul"});  // its epilogue inside the product's time
  CHECK(ran(skip_products | skip_groups | skip_ops).empty());
  // Whole again: every value right, checks run.
  ex.set_skip_for_timing(0);
  ex.run();
  const float each = 4 * 2 * std::exp(8 * 0.01f * 0.5f);
  for (float v : ex.get(s).to_vector()) CHECK(v == doctest::Approx(each).epsilon(1e-6));
  ex.set_input("x", std::vector<float>(32, 1.f));
  CHECK(error_of([&] { ex.run(); }) == "the product: above 1");
  // Every kind by name, each its own bit.
  unsigned all = 0;
  for (const auto& [name, kind] : skip_work_names()) {
    CHECK((all & kind) == 0);
    all |= kind;
  }
  CHECK(skip_work_names().size() == 5);
  CHECK(all == (skip_products | skip_groups | skip_ops | skip_chain_products | skip_chain_groups));
}
