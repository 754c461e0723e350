// Tests for the primitives' records (ops/ir/op_rule.h): every record is complete for its
// family, and every unary element-wise record, whatever it is, passes the same checks
// on the sample domain of tests/sample_graphs.h: its SIMD kernel against its scalar
// element function on awkward sizes, its value against its f64 rule, fused against
// unfused bit for bit, and 1 against 2 threads. A new unary primitive is covered by its
// unary_ranges() entry (which also gives it its gradient check).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "ops/ir/build.h"
#include "ops/ir/eval_f64.h"
#include "ops/runtime/executor.h"
#include "ops/ir/op_rule.h"
#include "ops/cpu/parallel.h"
#include "tests/sample_graphs.h"
#include "tests/test_util.h"

using namespace gg;
using gg::test::ulps;

namespace {

const std::int64_t kSizes[] = {1, 3, 7, 15, 17, 33, 1000};

// The values of `outs` with the executor's options `o`, x fed with `v`.
std::vector<Tensor> run(const Graph& g, const std::vector<NodeId>& outs, const std::vector<float>& v, const Shape& s,
                        ExecutorOptions o = {}) {
  ParamStore ps;
  Executor ex(g, outs, ps, 1, o);
  ex.set_input("x", Tensor::f32(s, v));
  ex.run();
  std::vector<Tensor> r;
  for (NodeId id : outs) r.push_back(ex.get(id));
  return r;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), std::size_t(a.numel()) * 4) == 0;
}

}  // namespace

TEST_CASE("op list: one line a primitive, each with a complete record") {
  // op_count is the number of OP lines in the list: nothing else to update for a new op.
  std::ifstream list(std::string(GG_SOURCE_DIR) + "/ops/ir/op_list.def");
  REQUIRE(list);
  int lines = 0;
  for (std::string line; std::getline(list, line);) lines += line.rfind("OP(", 0) == 0;
  CHECK(lines == op_count);
  for (int k = 0; k < op_count; ++k) {
    const OpKind kind = OpKind(k);
    const OpRule& r = op_rule(kind);
    INFO(op_name(kind));
    CHECK(bool(r.infer));
    CHECK(bool(r.f64));
    CHECK(bool(r.kernel) == (r.cls != OpClass::bound_leaf));
    CHECK((r.cls == OpClass::bound_leaf || r.cls == OpClass::noise) == (op_arity(kind) == 0));
    // Element-wise arithmetic ops, and only they, carry an element function for fused groups.
    CHECK(bool(r.elem) == (r.cls == OpClass::elementwise));
    if (r.elem) {
      CHECK(bool(r.elem->scalar));
      CHECK(bool(r.elem->map) == (op_arity(kind) == 1));
      CHECK(bool(r.elem->zip) == (op_arity(kind) == 2));
      CHECK(bool(r.grad));
      CHECK(bool(r.tangent));
    }
  }
}

TEST_CASE("every unary element-wise record: kernel against its scalar function and its f64 rule, awkward sizes") {
  std::uint32_t seed = 1;
  for (int k = 0; k < op_count; ++k) {
    const OpKind kind = OpKind(k);
    const OpRule& r = op_rule(kind);
    if (r.cls != OpClass::elementwise || op_arity(kind) != 1) continue;
    INFO(op_name(kind));
    REQUIRE_MESSAGE(sample::unary_ranges().count(kind), "no unary_ranges() entry in tests/sample_graphs.h");
    const sample::Domain d = sample::unary_ranges().at(kind);
    const double tol = r.elem->transcendental ? 4 : 0;  // xsimd's body vs libm's tail; IEEE ops exact
    for (std::int64_t n : kSizes) {
      const Shape s{3, n};
      Graph g;
      NodeId x = op::input(g, "x", s);
      NodeId y = g.add(kind, {x});
      const std::vector<float> v = sample::vals(numel(s), d, seed++);
      const Tensor out = run(g, {y}, v, s)[0];
      const F64Value ref = eval_f64(g, {y}, {{"x", F64Value{s, DType::f32, std::vector<double>(v.begin(), v.end())}}})[0];
      double worst_scalar = 0, worst_f64 = 0;
      for (std::int64_t i = 0; i < numel(s); ++i) {
        worst_scalar = std::max(worst_scalar, ulps(out.f()[i], double(r.elem->scalar(v[std::size_t(i)], 0.f))));
        worst_f64 = std::max(worst_f64, ulps(out.f()[i], ref.v[std::size_t(i)]));
      }
      INFO("n = " << n);
      CHECK(worst_scalar <= tol);
      CHECK(worst_f64 <= 4);
    }
  }
}

TEST_CASE("every unary element-wise record: fused into a chain gives the unfused bits, at 1 and 2 threads") {
  const int saved = num_threads();
  for (int k = 0; k < op_count; ++k) {
    const OpKind kind = OpKind(k);
    if (op_class(kind) != OpClass::elementwise || op_arity(kind) != 1) continue;
    INFO(op_name(kind));
    const sample::Domain d = sample::unary_ranges().at(kind);
    for (const Shape& s : {Shape{20001}, Shape{37, 48}, Shape{5, 17}}) {
      INFO("shape " << to_string(s));
      // x * 0.5 -> op -> + x: one group with the op interior (flat or by rows).
      Graph g;
      NodeId x = op::input(g, "x", s);
      NodeId y = op::add(g, g.add(kind, {op::mul(g, x, op::scalar(g, 0.5f))}), x);
      const std::vector<float> v = sample::vals(numel(s), d, 7);
      std::vector<Tensor> res;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        res.push_back(run(g, {y}, v, s, {.fuse = true})[0]);
        res.push_back(run(g, {y}, v, s, {.fuse = false})[0]);
      }
      for (const Tensor& t : res) CHECK(same_bits(t, res[0]));
    }
  }
  set_num_threads(saved);
}
