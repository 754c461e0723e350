// Golden test of the unary element-wise functions against PyTorch in float32
// (tests/golden/unary.safetensors, written by tools/make_golden_unary.py; conventions in
// tests/golden/README.md): relu, softplus, abs, sin, cos and sigmoid (primitives) and silu
// (dsl/nn.h), on inputs with both signed zeros, values near zero, softplus's threshold
// and exp's underflow, and arguments of sin and cos up to 1000. Values and the gradients
// of sum(f(x) * cotangent) must be within kUlps units in the last place of PyTorch's;
// subnormal results count as equal (flushing one is fine), and so do zeros of either sign.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "dsl/nn.h"
#include "io/safetensors.h"
#include "ops/runtime/executor.h"
#include "tests/test_util.h"

namespace {

using namespace gg;
using namespace gg::dsl;

// Measured: 2 ulp at worst (the gradients of softplus, sin, cos and silu; the values
// within 1), xsimd's exp, log1p, sin and cos against PyTorch's.
constexpr double kUlps = 3;

struct Function {
  const char* name;
  std::function<Expr(Expr)> f;
};

}  // namespace

TEST_CASE("golden: relu, softplus, abs, sin, cos, sigmoid and silu against PyTorch float32, values and gradients") {
  const io::File file = io::read_safetensors(test::golden("unary.safetensors"));
  const std::vector<float> xv = file.get_f32("x"), cot = file.get_f32("cotangent");
  const std::int64_t n = std::int64_t(xv.size());
  const std::vector<Function> fns = {
      {"relu", [](Expr x) { return relu(x); }},       {"softplus", [](Expr x) { return softplus(x); }},
      {"abs", [](Expr x) { return abs(x); }},         {"sin", [](Expr x) { return sin(x); }},
      {"cos", [](Expr x) { return cos(x); }},         {"sigmoid", [](Expr x) { return sigmoid(x); }},
      {"silu", [](Expr x) { return silu(x); }},
  };
  for (const Function& fn : fns) {
    const std::string name = fn.name;
    CAPTURE(name);
    Graph g;
    Expr x = input(g, "x", {n});
    Expr y = fn.f(x);
    Expr dx = grad(sum_all(y * constant(g, cot, {n})), {x})[0];
    ParamStore ps;
    Executor ex(g, {y.id, dx.id}, ps);
    ex.set_input("x", xv);
    ex.run();
    for (const auto& [what, id, key] : {std::tuple{std::string("value"), y.id, name},
                                        std::tuple{std::string("gradient"), dx.id, "grad." + name}}) {
      const std::vector<float> want = file.get_f32(key);
      const Tensor got = ex.get(id);
      REQUIRE(got.numel() == n);
      double worst = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float a = got.f()[i], b = want[std::size_t(i)];
        const double d = (a == 0.f && b == 0.f) ? 0.0 : test::ulps(a, double(b));
        if (d > kUlps) FAIL_CHECK(what << " at x = " << xv[std::size_t(i)] << ": " << a << " vs PyTorch's " << b << " (" << d << " ulp)");
        worst = std::max(worst, d);
      }
      MESSAGE(name << " " << what << ": worst " << worst << " ulp");
    }
  }
}
