// Tests for ops/primitives/elementwise.cpp: the forward kernels of add, sub, mul, div, maximum, neg,
// exp, log, sqrt, tanh, erf, compare and where, run through the Executor and compared
// with plain double-precision references, on awkward sizes (SIMD body and scalar tail)
// and numpy broadcasting patterns; and the same results with 1 and 2 threads (simd.h is
// included only to pick inputs where the SIMD and scalar paths round differently).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "tests/test_util.h"
#include "ops/runtime/executor.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd.h"

using namespace gg;
using gg::test::ulps;

namespace {

const std::int64_t kSizes[] = {1, 3, 7, 15, 17, 33, 1000};
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_values(std::int64_t n, float lo, float hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// Flat index into a tensor of shape `in` broadcast (numpy rules) to `out`, for output index i.
std::int64_t bcast_index(const Shape& out, const Shape& in, std::int64_t i) {
  std::int64_t idx = 0, stride = 1;
  const int lead = int(out.size()) - int(in.size());
  for (int d = int(out.size()) - 1; d >= 0; --d) {
    const std::int64_t c = i % out[std::size_t(d)];
    i /= out[std::size_t(d)];
    const int id = d - lead;
    if (id >= 0) {
      if (in[std::size_t(id)] != 1) idx += c * stride;
      stride *= in[std::size_t(id)];
    }
  }
  return idx;
}

struct Feed {
  std::string name;
  Tensor t;
};

// Runs a one-output plan with the given inputs and returns the output.
Tensor eval(const Graph& g, NodeId out, const std::vector<Feed>& feeds) {
  ParamStore ps;
  Executor ex(g, {out}, ps);
  for (const Feed& f : feeds) ex.set_input(f.name, f.t);
  ex.run();
  return ex.get(out);
}

using BinaryBuild = NodeId (*)(Graph&, NodeId, NodeId);
using BinaryRef = double (*)(double, double);
struct BinaryOp {
  const char* name;
  BinaryBuild build;
  BinaryRef ref;
};
const BinaryOp kBinary[] = {
    {"add", [](Graph& g, NodeId a, NodeId b) { return op::add(g, a, b); }, [](double x, double y) { return x + y; }},
    {"sub", [](Graph& g, NodeId a, NodeId b) { return op::sub(g, a, b); }, [](double x, double y) { return x - y; }},
    {"mul", [](Graph& g, NodeId a, NodeId b) { return op::mul(g, a, b); }, [](double x, double y) { return x * y; }},
    {"div", [](Graph& g, NodeId a, NodeId b) { return op::div(g, a, b); }, [](double x, double y) { return x / y; }},
    {"maximum", [](Graph& g, NodeId a, NodeId b) { return op::maximum(g, a, b); },
     [](double x, double y) { return x > y ? x : y; }},
};

// The broadcasting patterns, as functions of a size n.
struct Pattern {
  const char* name;
  Shape a, b;
};
std::vector<Pattern> patterns(std::int64_t n) {
  const std::int64_t t = n <= 33 ? n : 17;  // keeps (B, T, T) small
  return {
      {"(n) + (n)", {n}, {n}},
      {"(N,C) + (C)", {3, n}, {n}},
      {"(C) + (N,C)", {n}, {3, n}},
      {"(N,1) * (1,C)", {4, 1}, {1, n}},
      {"(N,1) * (1,C) transposed", {n, 1}, {1, 3}},
      {"(C) + scalar", {n}, {}},
      {"scalar + (C)", {}, {n}},
      {"(B,1,T) vs (B,T,T)", {2, 1, t}, {2, t, t}},
      {"(B,T,T) vs (B,1,T)", {2, t, t}, {2, 1, t}},
      {"leading dims (2,3,C) + (3,C)", {2, 3, n}, {3, n}},
      {"(4,1,C) + (3,1)", {4, 1, n}, {3, 1}},
      {"(2,1,3,1) + (1,4,1,C)", {2, 1, 3, 1}, {1, 4, 1, n}},
      {"(1,) + scalar", {1}, {}},
  };
}

}  // namespace

// Whether comparison c holds for u and v, as C++ evaluates it (NaN: false but for ne).
template <class T>
bool cmp_holds(Cmp c, T u, T v) {
  switch (c) {
    case Cmp::lt: return u < v;
    case Cmp::le: return u <= v;
    case Cmp::gt: return u > v;
    case Cmp::ge: return u >= v;
    case Cmp::eq: return u == v;
    case Cmp::ne: return u != v;
  }
  return false;
}

TEST_CASE("binary ops match double references on every broadcasting pattern") {
  std::uint32_t seed = 1;
  for (std::int64_t n : kSizes)
    for (const Pattern& p : patterns(n))
      for (const BinaryOp& bop : kBinary) {
        INFO(std::string(bop.name) << " " << std::string(p.name) << " n=" << n << " " << to_string(p.a) << " , " << to_string(p.b));
        Graph g;
        NodeId a = op::input(g, "a", p.a);
        NodeId b = op::input(g, "b", p.b);
        NodeId y = bop.build(g, a, b);
        const Shape want_shape = *op::broadcast_shapes(p.a, p.b);
        REQUIRE(g.node(y).shape == want_shape);
        auto va = random_values(numel(p.a), -3.f, 3.f, seed++);
        auto vb = random_values(numel(p.b), 0.5f, 2.f, seed++);  // away from 0 for div
        if (std::string(bop.name) != "div")
          for (std::size_t i = 0; i < vb.size(); i += 2) vb[i] = -vb[i];
        Tensor out = eval(g, y, {{"a", Tensor::f32(p.a, va)}, {"b", Tensor::f32(p.b, vb)}});
        REQUIRE(out.shape() == want_shape);
        std::int64_t bad = 0;
        for (std::int64_t i = 0; i < out.numel(); ++i) {
          const double want = bop.ref(va[std::size_t(bcast_index(want_shape, p.a, i))],
                                      vb[std::size_t(bcast_index(want_shape, p.b, i))]);
          // One IEEE operation on floats: the result is the correctly rounded double.
          if (out.f()[i] != float(want)) {
            if (bad++ < 3) MESSAGE("at " << i << ": got " << out.f()[i] << ", want " << want);
          }
        }
        CHECK(bad == 0);
      }
}

TEST_CASE("unary ops match double references on awkward sizes") {
  struct UnaryOp {
    const char* name;
    NodeId (*build)(Graph&, NodeId);
    double (*ref)(double);
    float lo, hi;
    double max_ulps;  // libm and xsimd are a few ulps from the exact value; IEEE ops are exact
  };
  const UnaryOp ops[] = {
      {"neg", [](Graph& g, NodeId x) { return op::neg(g, x); }, [](double x) { return -x; }, -5.f, 5.f, 0},
      {"exp", [](Graph& g, NodeId x) { return op::exp(g, x); }, [](double x) { return std::exp(x); }, -20.f, 20.f, 4},
      {"log", [](Graph& g, NodeId x) { return op::log(g, x); }, [](double x) { return std::log(x); }, 1e-3f, 50.f, 4},
      {"sqrt", [](Graph& g, NodeId x) { return op::sqrt(g, x); }, [](double x) { return std::sqrt(x); }, 0.f, 100.f, 0},
      {"tanh", [](Graph& g, NodeId x) { return op::tanh(g, x); }, [](double x) { return std::tanh(x); }, -6.f, 6.f, 4},
      {"erf", [](Graph& g, NodeId x) { return op::erf(g, x); }, [](double x) { return std::erf(x); }, -4.f, 4.f, 4},
  };
  std::uint32_t seed = 100;
  for (const UnaryOp& u : ops)
    for (std::int64_t n : kSizes)
      for (const Shape& s : {Shape{n}, Shape{3, n}, Shape{n, 2, 1}}) {
        INFO(std::string(u.name) << " shape " << to_string(s));
        Graph g;
        NodeId x = op::input(g, "x", s);
        NodeId y = u.build(g, x);
        CHECK(g.node(y).shape == s);
        auto v = random_values(numel(s), u.lo, u.hi, seed++);
        Tensor out = eval(g, y, {{"x", Tensor::f32(s, v)}});
        double worst = 0;
        std::int64_t worst_at = 0;
        for (std::int64_t i = 0; i < out.numel(); ++i) {
          const double e = ulps(out.f()[i], u.ref(v[std::size_t(i)]));
          if (!(e <= worst)) {  // also catches NaN
            worst = std::isnan(e) ? 1e30 : e;
            worst_at = i;
          }
        }
        INFO("worst at " << worst_at << ": x=" << v[std::size_t(worst_at)] << " got " << out.f()[worst_at]);
        CHECK(worst <= u.max_ulps);
      }
}

TEST_CASE("unary ops on special values, in the SIMD body and in the tail") {
  // 16 values then 3 more: with 4-, 8- or 16-wide registers some land in the tail.
  const std::vector<float> x = {-kInf, -100.f, -0.f, 0.f, 1.f, 89.f, 1e-30f, -1e-30f, 20.f, -20.f, 2.f,
                                0.5f,  3.f,    4.f,  5.f, -5.f, -kInf, 0.f, 89.f};
  Graph g;
  const Shape s{std::int64_t(x.size())};
  NodeId in = op::input(g, "x", s);
  NodeId e = op::exp(g, in), th = op::tanh(g, in), ef = op::erf(g, in), ng = op::neg(g, in);
  ParamStore ps;
  Executor ex(g, {e, th, ef, ng}, ps);
  ex.set_input("x", Tensor::f32(s, x));
  ex.run();
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i] << " at " << i);
    const float ve = ex.value(e).f()[i], vt = ex.value(th).f()[i], vf = ex.value(ef).f()[i];
    CHECK(ulps(ve, std::exp(double(x[i]))) <= 4);  // exp(-inf) = 0, exp(89) = inf in float
    CHECK(ulps(vt, std::tanh(double(x[i]))) <= 4);
    CHECK(ulps(vf, std::erf(double(x[i]))) <= 4);
    CHECK(ex.value(ng).f()[i] == -x[i]);
    CHECK(std::signbit(ex.value(ng).f()[i]) != std::signbit(x[i]));
  }
  CHECK(ex.value(e).f()[0] == 0.f);
  CHECK(ex.value(e).f()[5] == kInf);
  CHECK(ex.value(e).f()[16] == 0.f);
  CHECK(ex.value(th).f()[0] == -1.f);
  CHECK(ex.value(ef).f()[0] == -1.f);

  // log and sqrt at their edges.
  Graph g2;
  const std::vector<float> y = {0.f, 1.f, kInf, 4.f, 0.25f, 1e-30f, 2.f, 3.f, 5.f, 6.f, 7.f, 8.f, 9.f, 10.f, 11.f, 12.f, 0.f, 1.f, 16.f};
  const Shape s2{std::int64_t(y.size())};
  NodeId in2 = op::input(g2, "y", s2);
  NodeId lg = op::log(g2, in2), sq = op::sqrt(g2, in2);
  Executor ex2(g2, {lg, sq}, ps);
  ex2.set_input("y", Tensor::f32(s2, y));
  ex2.run();
  for (std::size_t i = 0; i < y.size(); ++i) {
    INFO("y = " << y[i] << " at " << i);
    CHECK(ulps(ex2.value(lg).f()[i], std::log(double(y[i]))) <= 4);
    CHECK(ex2.value(sq).f()[i] == float(std::sqrt(double(y[i]))));
  }
  CHECK(ex2.value(lg).f()[0] == -kInf);
  CHECK(ex2.value(lg).f()[16] == -kInf);
  CHECK(ex2.value(lg).f()[1] == 0.f);
}

TEST_CASE("maximum with infinities and a constant operand") {
  Graph g;
  const std::vector<float> a = {-kInf, 1.f, -2.f, kInf, 0.f, -kInf, 3.f};
  NodeId x = op::input(g, "x", {7});
  NodeId zero = op::scalar(g, 0.f);
  NodeId relu = op::maximum(g, x, zero);
  NodeId floor = op::maximum(g, op::constant(g, {-1.f}, {1}), x);
  ParamStore ps;
  Executor ex(g, {relu, floor}, ps);
  ex.set_input("x", std::span<const float>(a));
  ex.run();
  const float want_relu[] = {0, 1, 0, kInf, 0, 0, 3};
  const float want_floor[] = {-1, 1, -1, kInf, 0, -1, 3};
  for (int i = 0; i < 7; ++i) {
    INFO(i);
    CHECK(ex.value(relu).f()[i] == want_relu[i]);
    CHECK(ex.value(floor).f()[i] == want_floor[i]);
  }
}

TEST_CASE("compare: all six kinds on f32 and i32, with broadcasting") {
  const Cmp kinds[] = {Cmp::lt, Cmp::le, Cmp::gt, Cmp::ge, Cmp::eq, Cmp::ne};
  auto holds = [](Cmp c, double u, double v) { return cmp_holds(c, u, v); };
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-2, 2);  // ties are frequent
  for (DType dt : {DType::f32, DType::i32})
    for (std::int64_t n : kSizes)
      for (const Pattern& p : {Pattern{"same", {n}, {n}}, Pattern{"(N,C) vs (C)", {3, n}, {n}},
                               Pattern{"(N,1) vs (1,C)", {n, 1}, {1, 4}}, Pattern{"vs scalar", {n}, {}},
                               Pattern{"(B,1,T) vs (B,T,1)", {2, 1, std::min<std::int64_t>(n, 33)},
                                       {2, std::min<std::int64_t>(n, 33), 1}}})
        for (Cmp c : kinds) {
          INFO(std::string(to_string(dt)) << " " << std::string(cmp_name(c)) << " " << std::string(p.name) << " n=" << n);
          Graph g;
          NodeId a = op::input(g, "a", p.a, dt);
          NodeId b = op::input(g, "b", p.b, dt);
          NodeId y = op::compare(g, a, b, c);
          CHECK(g.node(y).dtype == DType::f32);
          std::vector<std::int32_t> ia(std::size_t(numel(p.a))), ib(std::size_t(numel(p.b)));
          for (auto& v : ia) v = small(rng);
          for (auto& v : ib) v = small(rng);
          std::vector<float> fa(ia.begin(), ia.end()), fb(ib.begin(), ib.end());
          for (auto& v : fa) v *= 0.5f;  // halves: still exact, still tie often
          for (auto& v : fb) v *= 0.5f;
          Tensor out = dt == DType::f32
                           ? eval(g, y, {{"a", Tensor::f32(p.a, fa)}, {"b", Tensor::f32(p.b, fb)}})
                           : eval(g, y, {{"a", Tensor::i32(p.a, ia)}, {"b", Tensor::i32(p.b, ib)}});
          const Shape os = *op::broadcast_shapes(p.a, p.b);
          REQUIRE(out.shape() == os);
          std::int64_t bad = 0;
          for (std::int64_t i = 0; i < out.numel(); ++i) {
            const std::size_t ja = std::size_t(bcast_index(os, p.a, i)), jb = std::size_t(bcast_index(os, p.b, i));
            const bool want = dt == DType::f32 ? holds(c, fa[ja], fb[jb]) : holds(c, ia[ja], ib[jb]);
            if (out.f()[i] != (want ? 1.f : 0.f)) ++bad;
          }
          CHECK(bad == 0);
        }
}

TEST_CASE("compare on large i32 values is exact") {
  // Values that differ by 1 above 2^24 are equal as floats: an i32 kernel must not convert.
  Graph g;
  const std::vector<std::int32_t> a = {16777217, 2147483647, -2147483647, 5};
  const std::vector<std::int32_t> b = {16777216, 2147483646, -2147483646, 5};
  NodeId x = op::input(g, "a", {4}, DType::i32);
  NodeId y = op::input(g, "b", {4}, DType::i32);
  NodeId eq = op::compare(g, x, y, Cmp::eq);
  NodeId gt = op::compare(g, x, y, Cmp::gt);
  ParamStore ps;
  Executor ex(g, {eq, gt}, ps);
  ex.set_input("a", std::span<const std::int32_t>(a));
  ex.set_input("b", std::span<const std::int32_t>(b));
  ex.run();
  const float want_eq[] = {0, 0, 0, 1}, want_gt[] = {1, 1, 0, 0};
  for (int i = 0; i < 4; ++i) {
    INFO(i);
    CHECK(ex.value(eq).f()[i] == want_eq[i]);
    CHECK(ex.value(gt).f()[i] == want_gt[i]);
  }
}

TEST_CASE("where picks by condition != 0, with broadcasting") {
  std::mt19937 rng(11);
  const float conds[] = {0.f, 1.f, -1.f, 0.5f, 0.f, -0.f, 2.f};
  std::uniform_int_distribution<int> pick(0, 6);
  for (std::int64_t n : kSizes) {
    const std::int64_t t = std::min<std::int64_t>(n, 33);
    struct W {
      const char* name;
      Shape c, a, b;
    };
    for (const W& w : {W{"same", {n}, {n}, {n}},
                       W{"mask (B,1,T) onto (B,T,T), scalar fill", {2, 1, t}, {2, t, t}, {}},
                       W{"mask (T,T) onto (B,H,T,T)", {t, t}, {2, 3, t, t}, {1}},
                       W{"scalar cond", {}, {3, n}, {n}},
                       W{"(N,1) cond, (1,C) a, (N,C) b", {4, 1}, {1, n}, {4, n}}}) {
      INFO(std::string(w.name) << " n=" << n);
      Graph g;
      NodeId c = op::input(g, "c", w.c);
      NodeId a = op::input(g, "a", w.a);
      NodeId b = op::input(g, "b", w.b);
      NodeId y = op::where(g, c, a, b);
      const Shape os = *op::broadcast_shapes(w.c, *op::broadcast_shapes(w.a, w.b));
      REQUIRE(g.node(y).shape == os);
      std::vector<float> vc(std::size_t(numel(w.c)));
      for (auto& v : vc) v = conds[pick(rng)];
      auto va = random_values(numel(w.a), 1.f, 2.f, std::uint32_t(n));      // positive
      auto vb = random_values(numel(w.b), -2.f, -1.f, std::uint32_t(n + 1));  // negative
      if (!vb.empty()) vb[0] = -kInf;
      Tensor out = eval(g, y, {{"c", Tensor::f32(w.c, vc)}, {"a", Tensor::f32(w.a, va)}, {"b", Tensor::f32(w.b, vb)}});
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < out.numel(); ++i) {
        const bool cond = vc[std::size_t(bcast_index(os, w.c, i))] != 0.f;
        const float want = cond ? va[std::size_t(bcast_index(os, w.a, i))] : vb[std::size_t(bcast_index(os, w.b, i))];
        if (out.f()[i] != want) ++bad;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("compare and where: NaN, infinities and signed zeros on every stride pattern, bit for bit") {
  // Plain scalar references: compare is false with a NaN operand except ne; where takes a
  // when cond != 0, so a NaN cond takes a and -0 takes b. Outputs compared as bits.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float special[] = {nan, kInf, -kInf, 0.f, -0.f, 1.f, -1.f, 0.5f, nan, 2.f};
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> pick(0, 9);
  auto fill = [&](const Shape& s) {
    std::vector<float> v(std::size_t(numel(s)));
    for (auto& x : v) x = special[pick(rng)];
    return v;
  };
  auto bits = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  };
  const Cmp kinds[] = {Cmp::lt, Cmp::le, Cmp::gt, Cmp::ge, Cmp::eq, Cmp::ne};
  auto holds = [](Cmp c, float u, float v) { return cmp_holds(c, u, v); };
  for (std::int64_t n : kSizes) {
    const std::int64_t t = std::min<std::int64_t>(n, 33);
    struct Case {
      const char* name;
      Shape c, a, b;  // compare uses (c, a); where uses all three
    };
    for (const Case& k : {Case{"same", {n}, {n}, {n}},
                          Case{"(T,T) onto (B,H,T,T)", {t, t}, {2, 3, t, t}, {}},
                          Case{"(B,1,T) onto (B,T,T)", {2, 1, t}, {2, t, t}, {2, t, t}},
                          Case{"(1,1,T,T) onto (B,H,T,T)", {1, 1, t, t}, {2, 2, t, t}, {1}},
                          Case{"scalar, vector, vector", {}, {n}, {n}},
                          Case{"vector, scalar, vector", {n}, {}, {n}},
                          Case{"vector, vector, scalar", {n}, {n}, {}},
                          Case{"vector, scalar, scalar", {n}, {}, {}},
                          Case{"scalar, scalar, vector", {}, {}, {n}},
                          Case{"scalar, vector, scalar", {}, {n}, {}},
                          Case{"(N,1), (1,C), (N,C)", {4, 1}, {1, n}, {4, n}},
                          Case{"all scalars", {}, {}, {}}}) {
      INFO(std::string(k.name) << " n=" << n);
      const std::vector<float> vc = fill(k.c), va = fill(k.a), vb = fill(k.b);
      for (Cmp c : kinds) {
        INFO(std::string(cmp_name(c)));
        Graph g;
        NodeId y = op::compare(g, op::input(g, "x", k.c), op::input(g, "a", k.a), c);
        Tensor out = eval(g, y, {{"x", Tensor::f32(k.c, vc)}, {"a", Tensor::f32(k.a, va)}});
        const Shape os = *op::broadcast_shapes(k.c, k.a);
        std::int64_t bad = 0;
        for (std::int64_t i = 0; i < out.numel(); ++i) {
          const bool want = holds(c, vc[std::size_t(bcast_index(os, k.c, i))], va[std::size_t(bcast_index(os, k.a, i))]);
          bad += bits(out.f()[i]) != bits(want ? 1.f : 0.f);
        }
        CHECK(bad == 0);
      }
      Graph g;
      NodeId y = op::where(g, op::input(g, "c", k.c), op::input(g, "a", k.a), op::input(g, "b", k.b));
      Tensor out = eval(g, y, {{"c", Tensor::f32(k.c, vc)}, {"a", Tensor::f32(k.a, va)}, {"b", Tensor::f32(k.b, vb)}});
      const Shape os = *op::broadcast_shapes(k.c, *op::broadcast_shapes(k.a, k.b));
      REQUIRE(out.shape() == os);
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < out.numel(); ++i) {
        const float cv = vc[std::size_t(bcast_index(os, k.c, i))];
        const float want = cv != 0.f ? va[std::size_t(bcast_index(os, k.a, i))] : vb[std::size_t(bcast_index(os, k.b, i))];
        bad += bits(out.f()[i]) != bits(want);
      }
      CHECK(bad == 0);
    }
  }
}

// Values of x where f's batch (xsimd) result differs from its scalar (libm) result in
// the last ulp: wherever such a value falls in the tail in one thread count and in the
// batch body in another, the results would differ.
template <class F>
std::vector<float> batch_vs_scalar_differs(F f, float lo, float hi) {
  auto cand = random_values(std::int64_t(64 * simd::width), lo, hi, 77);
  std::vector<float> out(cand.size());
  simd::map(cand.size(), out.data(), cand.data(), f);  // a multiple of the width: all batch
  std::vector<float> differ;
  for (std::size_t i = 0; i < cand.size(); ++i)
    if (out[i] != f(cand[i])) differ.push_back(cand[i]);
  if (differ.empty()) differ = cand;  // a scalar build: any values will do
  return differ;
}

TEST_CASE("element-wise results are identical with 1 and 2 threads") {
  // Large enough that every kernel splits its work between threads, with sizes that do
  // not divide evenly (a chunk boundary would fall inside a SIMD register).
  const int saved = num_threads();
  SUBCASE("unary ops, at values where the SIMD and scalar paths differ") {
    struct U {
      const char* name;
      NodeId (*build)(Graph&, NodeId);
      std::vector<float> values;
    };
    const U ops[] = {
        {"exp", [](Graph& g, NodeId x) { return op::exp(g, x); },
         batch_vs_scalar_differs([](auto x) { return simd::exp(x); }, -8.f, 8.f)},
        {"log", [](Graph& g, NodeId x) { return op::log(g, x); },
         batch_vs_scalar_differs([](auto x) { return simd::log(x); }, 0.01f, 8.f)},
        {"tanh", [](Graph& g, NodeId x) { return op::tanh(g, x); },
         batch_vs_scalar_differs([](auto x) { return simd::tanh(x); }, -4.f, 4.f)},
        {"erf", [](Graph& g, NodeId x) { return op::erf(g, x); },
         batch_vs_scalar_differs([](auto x) { return simd::erf(x); }, -3.f, 3.f)},
    };
    for (const U& u : ops)
      for (std::int64_t n : {20001, 16411, 40003}) {
        INFO(std::string(u.name) << " n = " << n);
        const Shape s{n};
        std::vector<float> v(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = u.values[i % u.values.size()];
        Graph g;
        NodeId x = op::input(g, "x", s);
        NodeId y = u.build(g, x);
        std::vector<Tensor> res;
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          res.push_back(eval(g, y, {{"x", Tensor::f32(s, v)}}));
        }
        CHECK(std::memcmp(res[0].data(), res[1].data(), std::size_t(n) * 4) == 0);
      }
  }
  SUBCASE("a mixed graph") {
    Graph g;
    const Shape big{20001}, rows{2001, 17}, row{17};
    NodeId x = op::input(g, "x", big);
    NodeId m = op::input(g, "m", rows);
    NodeId r = op::input(g, "r", row);
    std::vector<NodeId> outs = {
        op::exp(g, x),  op::log(g, op::add(g, op::mul(g, x, x), op::scalar(g, 1.f))),
        op::tanh(g, x), op::erf(g, x), op::sqrt(g, op::maximum(g, x, op::scalar(g, 0.f))),
        op::neg(g, x),  op::div(g, m, r), op::sub(g, r, m), op::compare(g, m, r, Cmp::gt),
        op::where(g, op::compare(g, m, r, Cmp::lt), m, op::exp(g, r)),
    };
    auto vx = random_values(numel(big), -8.f, 8.f, 3);
    auto vm = random_values(numel(rows), -2.f, 2.f, 4);
    auto vr = random_values(numel(row), 0.5f, 1.5f, 5);
    auto run_with = [&](int threads) {
      set_num_threads(threads);
      ParamStore ps;
      Executor ex(g, outs, ps);
      ex.set_input("x", Tensor::f32(big, vx));
      ex.set_input("m", Tensor::f32(rows, vm));
      ex.set_input("r", Tensor::f32(row, vr));
      ex.run();
      std::vector<Tensor> res;
      for (NodeId o : outs) res.push_back(ex.get(o));
      return res;
    };
    auto one = run_with(1);
    auto two = run_with(2);
    for (std::size_t k = 0; k < outs.size(); ++k) {
      INFO("output " << k << ": " << std::string(op_name(g.node(outs[k]).op)));
      REQUIRE(one[k].numel() == two[k].numel());
      CHECK(std::memcmp(one[k].data(), two[k].data(), std::size_t(one[k].numel()) * 4) == 0);
    }
    // And the threaded result is right, not merely repeatable.
    for (std::int64_t i : {std::int64_t(0), std::int64_t(10000), std::int64_t(10001), std::int64_t(20000)})
      CHECK(ulps(two[0].f()[i], std::exp(double(vx[std::size_t(i)]))) <= 4);
  }
  set_num_threads(saved);
}
