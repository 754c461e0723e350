// Element-wise primitives: add, sub, mul, div, maximum, neg, exp, log, sqrt, tanh, erf,
// compare and where. Each op's shape rule, kernel and gradient rule sit together; the
// kernels are generic lambdas run by ops/simd.h over float batches with a scalar tail.
// Binary ops broadcast like numpy; gradients keep the output's shape (the reverse pass
// sums them down to each input's shape).
#include <cmath>
#include <numbers>

#include "ops/kernel_util.h"
#include "ops/elementwise_fn.h"
#include "ops/simd.h"

namespace gg {
namespace {

using detail::broadcast_rows;
using detail::describe;

// ---- shared shape rules ------------------------------------------------------------

// Output shape of broadcasting inputs a and b (any dtype check is the caller's).
Shape broadcast_or_fail(const Graph& g, const Node& n, NodeId a, NodeId b) {
  int bad = 0;
  auto s = op::broadcast_shapes(g.node(a).shape, g.node(b).shape, &bad);
  if (!s) {
    const Shape& sa = g.node(a).shape;
    const Shape& sb = g.node(b).shape;
    auto dim_of = [&](const Shape& x) {
      std::int64_t i = std::int64_t(x.size()) + bad;
      return i >= 0 ? x[std::size_t(i)] : 1;
    };
    g.fail(n, fmt::format("shapes do not broadcast: {} vs {}: dim {}: {} vs {}", describe(g, a),
                          describe(g, b), bad, dim_of(sa), dim_of(sb)));
  }
  return *s;
}

void infer_binary(const Graph& g, Node& n) {
  detail::require_dtype(g, n, 0, DType::f32, "left operand");
  detail::require_dtype(g, n, 1, DType::f32, "right operand");
  n.shape = broadcast_or_fail(g, n, n.inputs[0], n.inputs[1]);
  n.dtype = DType::f32;
}

void infer_unary(const Graph& g, Node& n) {
  detail::require_dtype(g, n, 0, DType::f32, "operand");
  n.shape = g.node(n.inputs[0]).shape;
  n.dtype = DType::f32;
}

// ---- shared kernels ----------------------------------------------------------------

template <class F>
void binary_kernel(const KernelArgs& a, F f) {
  const float* x = a.in[0].f();
  const float* y = a.in[1].f();
  float* o = a.out.f();
  broadcast_rows<2>(*a.out.shape, {a.in[0].shape, a.in[1].shape},
                    [&](std::int64_t oo, const std::array<std::int64_t, 2>& off, std::int64_t n,
                        const std::array<std::int64_t, 2>& inner) {
    const float* xr = x + off[0];
    const float* yr = y + off[1];
    float* orow = o + oo;
    if (inner[0] && inner[1]) simd::zip(std::size_t(n), orow, xr, yr, f);
    else if (inner[0]) simd::zip_scalar_right(std::size_t(n), orow, xr, *yr, f);
    else if (inner[1]) simd::zip_scalar_left(std::size_t(n), orow, *xr, yr, f);
    else {
      float v = f(*xr, *yr);
      for (std::int64_t i = 0; i < n; ++i) orow[i] = v;
    }
  });
}

template <class F>
void unary_kernel(const KernelArgs& a, F f) {
  const float* x = a.in[0].f();
  float* o = a.out.f();
  // Chunks in whole registers: only the last element(s) take the scalar tail, whatever
  // the thread count (the tail's libm results differ from the batch's in the last ulp).
  const std::int64_t n = a.out.numel(), w = std::int64_t(simd::width);
  parallel_for((n + w - 1) / w, 8192 / w, [&](std::int64_t b, std::int64_t e) {
    const std::int64_t lo = b * w, hi = std::min(n, e * w);
    simd::map(std::size_t(hi - lo), o + lo, x + lo, f);
  });
}

}  // namespace

// ---- add ---------------------------------------------------------------------------
// d/da (a + b) = 1, d/db (a + b) = 1
const OpRule add_rule = {
    infer_binary,
    [](const KernelArgs& a) { binary_kernel(a, fn::add{}); },
    [](GradArgs& a) {
      a.gin[0] = a.gout;
      a.gin[1] = a.gout;
    }};

// ---- sub ---------------------------------------------------------------------------
// d/da (a - b) = 1, d/db (a - b) = -1
const OpRule sub_rule = {
    infer_binary,
    [](const KernelArgs& a) { binary_kernel(a, fn::sub{}); },
    [](GradArgs& a) {
      a.gin[0] = a.gout;
      if (a.needs[1]) a.gin[1] = op::neg(a.g, a.gout);
    }};

// ---- mul ---------------------------------------------------------------------------
// d/da (a * b) = b, d/db (a * b) = a
const OpRule mul_rule = {
    infer_binary,
    [](const KernelArgs& a) { binary_kernel(a, fn::mul{}); },
    [](GradArgs& a) {
      if (a.needs[0]) a.gin[0] = op::mul(a.g, a.gout, a.in(1));
      if (a.needs[1]) a.gin[1] = op::mul(a.g, a.gout, a.in(0));
    }};

// ---- div ---------------------------------------------------------------------------
// d/da (a / b) = 1 / b, d/db (a / b) = -a / b^2 = -out / b
const OpRule div_rule = {
    infer_binary,
    [](const KernelArgs& a) { binary_kernel(a, fn::div{}); },
    [](GradArgs& a) {
      if (a.needs[0]) a.gin[0] = op::div(a.g, a.gout, a.in(1));
      if (a.needs[1]) a.gin[1] = op::neg(a.g, op::mul(a.g, a.gout, op::div(a.g, a.node, a.in(1))));
    }};

// ---- maximum -----------------------------------------------------------------------
// d/da max(a, b) = [a >= b], d/db max(a, b) = [a < b]  (ties go to a)
const OpRule maximum_rule = {
    infer_binary,
    [](const KernelArgs& a) { binary_kernel(a, fn::maximum{}); },
    [](GradArgs& a) {
      if (a.needs[0]) a.gin[0] = op::mul(a.g, a.gout, op::compare(a.g, a.in(0), a.in(1), Cmp::ge));
      if (a.needs[1]) a.gin[1] = op::mul(a.g, a.gout, op::compare(a.g, a.in(0), a.in(1), Cmp::lt));
    }};

// ---- neg ---------------------------------------------------------------------------
// d/dx (-x) = -1
const OpRule neg_rule = {
    infer_unary,
    [](const KernelArgs& a) { unary_kernel(a, fn::neg{}); },  // x * -1 (keeps the sign of zero)
    [](GradArgs& a) { a.gin[0] = op::neg(a.g, a.gout); }};

// ---- exp ---------------------------------------------------------------------------
// d/dx exp(x) = exp(x)
const OpRule exp_rule = {
    infer_unary,
    [](const KernelArgs& a) { unary_kernel(a, fn::exp{}); },
    [](GradArgs& a) { a.gin[0] = op::mul(a.g, a.gout, a.node); }};

// ---- log ---------------------------------------------------------------------------
// d/dx log(x) = 1 / x
const OpRule log_rule = {
    infer_unary,
    [](const KernelArgs& a) { unary_kernel(a, fn::log{}); },
    [](GradArgs& a) { a.gin[0] = op::div(a.g, a.gout, a.in(0)); }};

// ---- sqrt --------------------------------------------------------------------------
// d/dx sqrt(x) = 1 / (2 sqrt(x))
const OpRule sqrt_rule = {
    infer_unary,
    [](const KernelArgs& a) { unary_kernel(a, fn::sqrt{}); },
    [](GradArgs& a) {
      a.gin[0] = op::div(a.g, a.gout, op::mul(a.g, op::scalar(a.g, 2.f), a.node));
    }};

// ---- tanh --------------------------------------------------------------------------
// d/dx tanh(x) = 1 - tanh(x)^2
const OpRule tanh_rule = {
    infer_unary,
    [](const KernelArgs& a) { unary_kernel(a, fn::tanh{}); },
    [](GradArgs& a) {
      NodeId one = op::scalar(a.g, 1.f);
      a.gin[0] = op::mul(a.g, a.gout, op::sub(a.g, one, op::mul(a.g, a.node, a.node)));
    }};

// ---- erf ---------------------------------------------------------------------------
// d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2)
const OpRule erf_rule = {
    infer_unary,
    [](const KernelArgs& a) { unary_kernel(a, fn::erf{}); },
    [](GradArgs& a) {
      NodeId x = a.in(0);
      NodeId c = op::scalar(a.g, float(2.0 / std::sqrt(std::numbers::pi)));
      NodeId e = op::exp(a.g, op::neg(a.g, op::mul(a.g, x, x)));
      a.gin[0] = op::mul(a.g, a.gout, op::mul(a.g, c, e));
    }};

// ---- compare -----------------------------------------------------------------------
// A step function: no gradient flows through it.
namespace {
// i32 operands: a scalar loop (index comparisons are small).
void compare_rows_i32(const KernelArgs& a) {
  const std::int32_t* x = a.in[0].i();
  const std::int32_t* y = a.in[1].i();
  float* o = a.out.f();
  const Cmp c = a.node.attrs.cmp;
  broadcast_rows<2>(*a.out.shape, {a.in[0].shape, a.in[1].shape},
                    [&](std::int64_t oo, const std::array<std::int64_t, 2>& off, std::int64_t n,
                        const std::array<std::int64_t, 2>& inner) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::int32_t u = x[off[0] + i * inner[0]], v = y[off[1] + i * inner[1]];
      bool r = c == Cmp::lt ? u < v : c == Cmp::le ? u <= v : c == Cmp::gt ? u > v
             : c == Cmp::ge ? u >= v : c == Cmp::eq ? u == v : u != v;
      o[oo + i] = r ? 1.f : 0.f;
    }
  });
}

// f32 operands: the binary ops' SIMD rows, one kernel per comparison.
void compare_f32(const KernelArgs& a) {
  switch (a.node.attrs.cmp) {
    case Cmp::lt: return binary_kernel(a, fn::compare<0>{});
    case Cmp::le: return binary_kernel(a, fn::compare<1>{});
    case Cmp::gt: return binary_kernel(a, fn::compare<2>{});
    case Cmp::ge: return binary_kernel(a, fn::compare<3>{});
    case Cmp::eq: return binary_kernel(a, fn::compare<4>{});
    case Cmp::ne: return binary_kernel(a, fn::compare<5>{});
  }
}
static_assert(int(Cmp::lt) == 0 && int(Cmp::le) == 1 && int(Cmp::gt) == 2 && int(Cmp::ge) == 3 &&
              int(Cmp::eq) == 4 && int(Cmp::ne) == 5);
}  // namespace

const OpRule compare_rule = {
    [](const Graph& g, Node& n) {
      const Node& a = g.node(n.inputs[0]);
      const Node& b = g.node(n.inputs[1]);
      if (a.dtype != b.dtype)
        g.fail(n, fmt::format("operands differ in dtype: {} {} vs {} {}", to_string(a.dtype),
                              describe(g, n.inputs[0]), to_string(b.dtype), describe(g, n.inputs[1])));
      n.shape = broadcast_or_fail(g, n, n.inputs[0], n.inputs[1]);
      n.dtype = DType::f32;
    },
    [](const KernelArgs& a) {
      if (a.in[0].dtype == DType::i32) compare_rows_i32(a);
      else compare_f32(a);
    },
    nullptr};

// ---- where -------------------------------------------------------------------------
// d/da where(c, a, b) = [c], d/db where(c, a, b) = [not c]
const OpRule where_rule = {
    [](const Graph& g, Node& n) {
      detail::require_dtype(g, n, 0, DType::f32, "condition");
      detail::require_dtype(g, n, 1, DType::f32, "value if true");
      detail::require_dtype(g, n, 2, DType::f32, "value if false");
      Shape ab = broadcast_or_fail(g, n, n.inputs[1], n.inputs[2]);
      int bad = 0;
      auto s = op::broadcast_shapes(g.node(n.inputs[0]).shape, ab, &bad);
      if (!s)
        g.fail(n, fmt::format("condition {} does not broadcast onto {}: dim {}", describe(g, n.inputs[0]),
                              to_string(ab), bad));
      n.shape = *s;
      n.dtype = DType::f32;
    },
    [](const KernelArgs& a) {
      const float* c = a.in[0].f();
      const float* x = a.in[1].f();
      const float* y = a.in[2].f();
      float* o = a.out.f();
      broadcast_rows<3>(*a.out.shape, {a.in[0].shape, a.in[1].shape, a.in[2].shape},
                        [&](std::int64_t oo, const std::array<std::int64_t, 3>& off, std::int64_t n,
                            const std::array<std::int64_t, 3>& in) {
        simd::zip3(std::size_t(n), o + oo, c + off[0], in[0], x + off[1], in[1], y + off[2], in[2], fn::where{});
      });
    },
    [](GradArgs& a) {
      NodeId zero = op::scalar(a.g, 0.f);
      if (a.needs[1]) a.gin[1] = op::where(a.g, a.in(0), a.gout, zero);
      if (a.needs[2]) a.gin[2] = op::where(a.g, a.in(0), zero, a.gout);
    }};

}  // namespace gg
