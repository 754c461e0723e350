// Element-wise primitives: the rules of the unary and binary records (ops/primitives/elementwise_fn.h),
// made from each record by one template, and the selection ops compare and where written
// out. The kernels are generic functors run by ops/cpu/simd.h over float batches with a
// scalar tail.
// Binary ops broadcast like numpy; gradients keep the output's shape (the reverse pass
// sums them down to each input's shape).
#include <cmath>

#include "ops/primitives/elementwise_fn.h"
#include "ops/ir/eval_f64.h"
#include "ops/primitives/kernel_util.h"
#include "ops/cpu/simd.h"

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

// ---- the unary and binary records' rules (ops/primitives/elementwise_fn.h), one per op_list.def line

template <class F>
const ElementFns element_fns_unary = {
    [](std::size_t n, float* dst, const float* x) { simd::map(n, dst, x, F{}); },
    nullptr, nullptr, nullptr,
    [](float x, float) { return F{}(x); },
    F::transcendental};

template <class F>
const ElementFns element_fns_binary = {
    nullptr,
    [](std::size_t n, float* dst, const float* x, const float* y) { simd::zip(n, dst, x, y, F{}); },
    [](std::size_t n, float* dst, float x, const float* y) { simd::zip_scalar_left(n, dst, x, y, F{}); },
    [](std::size_t n, float* dst, const float* x, float y) { simd::zip_scalar_right(n, dst, x, y, F{}); },
    [](float x, float y) { return F{}(x, y); },
    F::transcendental};

// The record's identity rule, if it has one.
template <class F>
constexpr IdentityRule identity_of() {
  if constexpr (requires { &F::identity; }) return &F::identity;
  else return nullptr;
}

template <class F>
constexpr OpRule unary_rule() {
  return {OpClass::elementwise, infer_unary, [](const KernelArgs& a) { unary_kernel(a, F{}); }, F::grad, F::tangent,
          [](const F64Args& a) { f64::unary(a, [](double x) { return F::f64(x); }); }, &element_fns_unary<F>,
          identity_of<F>()};
}
template <class F>
constexpr OpRule binary_rule() {
  return {OpClass::elementwise, infer_binary, [](const KernelArgs& a) { binary_kernel(a, F{}); }, F::grad, F::tangent,
          [](const F64Args& a) { f64::binary(a, [](double x, double y) { return F::f64(x, y); }); },
          &element_fns_binary<F>, identity_of<F>()};
}

}  // namespace

#define GG_RULE_leaf(name)
#define GG_RULE_other(name)
#define GG_RULE_unary(name) const OpRule name##_rule = unary_rule<fn::name>();
#define GG_RULE_binary(name) const OpRule name##_rule = binary_rule<fn::name>();
#define OP(name, arity, family) GG_RULE_##family(name)
#include "ops/ir/op_list.def"
#undef OP
#undef GG_RULE_leaf
#undef GG_RULE_other
#undef GG_RULE_unary
#undef GG_RULE_binary

// ---- compare -----------------------------------------------------------------------
// A step function: no gradient flows through it.
namespace {
// Whether comparison c holds for u and v, as C++ evaluates it (NaN: false but for ne).
template <class T>
bool holds(Cmp c, T u, T v) {
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
      o[oo + i] = holds(c, u, v) ? 1.f : 0.f;
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
    OpClass::selection,
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
    nullptr,
    nullptr,
    [](const F64Args& a) {
      const Cmp c = a.n.attrs.cmp;
      f64::binary(a, [c](double x, double y) { return holds(c, x, y) ? 1.0 : 0.0; });
    },
    nullptr,
    nullptr,
    [](const Node& n) { return std::string(cmp_name(n.attrs.cmp)); }};

// ---- where -------------------------------------------------------------------------
namespace {
// A constant node all of whose values are -inf (a mask fill).
bool minus_inf_constant(const Node& n) {
  if (n.op != OpKind::constant || !n.attrs.data || n.attrs.data->empty()) return false;
  for (float v : *n.attrs.data)
    if (!(std::isinf(v) && v < 0)) return false;
  return true;
}
}  // namespace

// d/da where(c, a, b) = [c], d/db where(c, a, b) = [not c]
const OpRule where_rule = {
    OpClass::selection,
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
    },
    // A branch's constant axes, and the condition's unless the other branch is a -inf fill
    // (-inf + c = -inf).
    [](const Graph& g, const Node& n, std::span<const TangentShape* const> in, TangentShape& out) {
      out.constant.assign(n.shape.size(), 1);
      for (std::size_t i = 1; i < 3; ++i) {
        if (!tangent_varies(in[i])) continue;
        and_into(out.constant, aligned_tangent(g, n, i, in[i]));
        if (!minus_inf_constant(g.node(n.inputs[3 - i]))) and_into(out.constant, broadcast_axes(g, n, 0));
      }
    },
    [](const F64Args& a) {
      const Shape& s = a.out.shape;
      auto sc = f64::aligned_strides(s, a.in(0).shape), sa = f64::aligned_strides(s, a.in(1).shape),
           sb = f64::aligned_strides(s, a.in(2).shape);
      for (std::int64_t i = 0; i < std::int64_t(a.out.v.size()); ++i)
        a.out.v[std::size_t(i)] = a.in(0).v[std::size_t(f64::source_index(s, sc, i))] != 0.0
                                      ? a.in(1).v[std::size_t(f64::source_index(s, sa, i))]
                                      : a.in(2).v[std::size_t(f64::source_index(s, sb, i))];
    }};

}  // namespace gg
