// The records of the element-wise primitives (op_list.def's unary and binary families),
// one struct each, everything about the op in one block: its element function, written
// once as a generic functor that serves both `float` and ops/cpu/simd.h's batch (the op's
// kernel, the fused groups' interpreter and the compiled groups all run it, so a fused
// chain computes the same bits as the ops one by one), its value in double (the reference
// interpreter's), its gradient rule as graph and its tangent rule. elementwise.cpp makes
// each struct's OpRule; the op's builder and DSL functions are generated from the op list.
#pragma once

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/ir/build.h"
#include "ops/ir/op_rule.h"
#include "ops/cpu/simd.h"
#include "ops/ir/tangent.h"

namespace gg::fn {

// ---- add ---------------------------------------------------------------------------
// d/da (a + b) = 1, d/db (a + b) = 1
struct add {
  template <class T, class U> auto operator()(T x, U y) const { return x + y; }
  static double f64(double x, double y) { return x + y; }
  static void grad(GradArgs& a) {
    a.gin[0] = a.gout;
    a.gin[1] = a.gout;
  }
  static constexpr TangentRule tangent = tangent_additive;
  // x + 0 = 0 + x = x
  static NodeId identity(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs&) {
    if (constant_all(t.node(ins[1]), 0.f) && same_value_as(t, n, ins[0]) >= 0) return ins[0];
    if (constant_all(t.node(ins[0]), 0.f) && same_value_as(t, n, ins[1]) >= 0) return ins[1];
    return -1;
  }
  static constexpr bool transcendental = false;
};

// ---- sub ---------------------------------------------------------------------------
// d/da (a - b) = 1, d/db (a - b) = -1
struct sub {
  template <class T, class U> auto operator()(T x, U y) const { return x - y; }
  static double f64(double x, double y) { return x - y; }
  static void grad(GradArgs& a) {
    a.gin[0] = a.gout;
    if (a.needs[1]) a.gin[1] = op::neg(a.g, a.gout);
  }
  // Additive, but X - max(X, k, keepdim) cancels a shift of X constant along k (tangent.h).
  static constexpr TangentRule tangent = tangent_sub;
  // x - 0 = x
  static NodeId identity(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs&) {
    return constant_all(t.node(ins[1]), 0.f) ? same_value_as(t, n, ins[0]) : -1;
  }
  static constexpr bool transcendental = false;
};

// ---- mul ---------------------------------------------------------------------------
// d/da (a * b) = b, d/db (a * b) = a
struct mul {
  template <class T, class U> auto operator()(T x, U y) const { return x * y; }
  static double f64(double x, double y) { return x * y; }
  static void grad(GradArgs& a) {
    if (a.needs[0]) a.gin[0] = op::mul(a.g, a.gout, a.in(1));
    if (a.needs[1]) a.gin[1] = op::mul(a.g, a.gout, a.in(0));
  }
  static constexpr TangentRule tangent = tangent_pointwise<0b11>;  // linear in each operand
  // x * 1 = 1 * x = x
  static NodeId identity(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs&) {
    if (constant_all(t.node(ins[1]), 1.f) && same_value_as(t, n, ins[0]) >= 0) return ins[0];
    if (constant_all(t.node(ins[0]), 1.f) && same_value_as(t, n, ins[1]) >= 0) return ins[1];
    return -1;
  }
  static constexpr bool transcendental = false;
};

// ---- div ---------------------------------------------------------------------------
// d/da (a / b) = 1 / b, d/db (a / b) = -a / b^2 = -out / b
struct div {
  template <class T, class U> auto operator()(T x, U y) const { return x / y; }
  static double f64(double x, double y) { return x / y; }
  static void grad(GradArgs& a) {
    if (a.needs[0]) a.gin[0] = op::div(a.g, a.gout, a.in(1));
    if (a.needs[1]) a.gin[1] = op::neg(a.g, op::mul(a.g, a.gout, op::div(a.g, a.node, a.in(1))));
  }
  static constexpr TangentRule tangent = tangent_pointwise<0b01>;  // linear in the numerator
  // x / 1 = x
  static NodeId identity(const Graph& t, const Node& n, std::vector<NodeId>& ins, Attrs&) {
    return constant_all(t.node(ins[1]), 1.f) ? same_value_as(t, n, ins[0]) : -1;
  }
  static constexpr bool transcendental = false;
};

// ---- maximum -----------------------------------------------------------------------
// d/da max(a, b) = [a >= b], d/db max(a, b) = [a < b]  (ties go to a)
struct maximum {
  template <class T> T operator()(T x, T y) const { return simd::max(x, y); }
  static double f64(double x, double y) { return x < y ? y : x; }
  static void grad(GradArgs& a) {
    if (a.needs[0]) a.gin[0] = op::mul(a.g, a.gout, op::compare(a.g, a.in(0), a.in(1), Cmp::ge));
    if (a.needs[1]) a.gin[1] = op::mul(a.g, a.gout, op::compare(a.g, a.in(0), a.in(1), Cmp::lt));
  }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = false;
};

// ---- neg ---------------------------------------------------------------------------
// d/dx (-x) = -1
struct neg {
  // x * -1, not -x: xsimd's batch negation is 0 - x, which loses the sign of zero
  template <class T> T operator()(T x) const { return x * -1.f; }
  static double f64(double x) { return -x; }
  static void grad(GradArgs& a) { a.gin[0] = op::neg(a.g, a.gout); }
  static constexpr TangentRule tangent = tangent_additive;
  // -(-x) = x
  static NodeId identity(const Graph& t, const Node&, std::vector<NodeId>& ins, Attrs&) {
    const Node& x = t.node(ins[0]);
    return x.op == OpKind::neg && !x.attrs.no_grad ? x.inputs[0] : -1;
  }
  static constexpr bool transcendental = false;
};

// ---- exp ---------------------------------------------------------------------------
// d/dx exp(x) = exp(x)
struct exp {
  template <class T> T operator()(T x) const { return simd::exp(x); }
  static double f64(double x) { return std::exp(x); }
  static void grad(GradArgs& a) { a.gin[0] = op::mul(a.g, a.gout, a.node); }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- log ---------------------------------------------------------------------------
// d/dx log(x) = 1 / x
struct log {
  template <class T> T operator()(T x) const { return simd::log(x); }
  static double f64(double x) { return std::log(x); }
  static void grad(GradArgs& a) { a.gin[0] = op::div(a.g, a.gout, a.in(0)); }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- sqrt --------------------------------------------------------------------------
// d/dx sqrt(x) = 1 / (2 sqrt(x))
struct sqrt {
  template <class T> T operator()(T x) const { return simd::sqrt(x); }
  static double f64(double x) { return std::sqrt(x); }
  static void grad(GradArgs& a) { a.gin[0] = op::div(a.g, a.gout, op::mul(a.g, op::scalar(a.g, 2.f), a.node)); }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = false;  // correctly rounded in both forms
};

// ---- tanh --------------------------------------------------------------------------
// d/dx tanh(x) = 1 - tanh(x)^2
struct tanh {
  template <class T> T operator()(T x) const { return simd::tanh(x); }
  static double f64(double x) { return std::tanh(x); }
  static void grad(GradArgs& a) {
    NodeId one = op::scalar(a.g, 1.f);
    a.gin[0] = op::mul(a.g, a.gout, op::sub(a.g, one, op::mul(a.g, a.node, a.node)));
  }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- erf ---------------------------------------------------------------------------
// d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2)
struct erf {
  template <class T> T operator()(T x) const { return simd::erf(x); }
  static double f64(double x) { return std::erf(x); }
  static void grad(GradArgs& a) {
    NodeId x = a.in(0);
    NodeId c = op::scalar(a.g, float(2.0 / std::sqrt(std::numbers::pi)));
    NodeId e = op::exp(a.g, op::neg(a.g, op::mul(a.g, x, x)));
    a.gin[0] = op::mul(a.g, a.gout, op::mul(a.g, c, e));
  }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- sigmoid -----------------------------------------------------------------------
// d/dx sigmoid(x) = sigmoid(x) (1 - sigmoid(x))
struct sigmoid {
  // exp(-x) overflows to inf for x < -88.7: 1 / inf = 0, the limit
  template <class T> T operator()(T x) const { return T(1.f) / (T(1.f) + simd::exp(x * -1.f)); }
  static double f64(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  static void grad(GradArgs& a) {
    NodeId one = op::scalar(a.g, 1.f);
    a.gin[0] = op::mul(a.g, a.gout, op::mul(a.g, a.node, op::sub(a.g, one, a.node)));
  }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- relu --------------------------------------------------------------------------
// d/dx relu(x) = [x > 0]  (0 at 0, as PyTorch)
struct relu {
  // max(0, x), 0 first: both forms (a > b ? a : b, and maxps) then give x when x is NaN,
  // and -0 for -0, as PyTorch's relu.
  template <class T> T operator()(T x) const { return simd::max(T(0.f), x); }
  static double f64(double x) { return 0.0 > x ? 0.0 : x; }
  static void grad(GradArgs& a) {
    a.gin[0] = op::mul(a.g, a.gout, op::compare(a.g, a.in(0), op::scalar(a.g, 0.f), Cmp::gt));
  }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = false;  // exact in both forms
};

// ---- softplus ----------------------------------------------------------------------
// d/dx softplus(x) = sigmoid(x)
struct softplus {
  // log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): exp never overflows, and from x = 15
  // on the second term is below half an ulp of x, so the value is x, as PyTorch's
  // softplus(beta=1, threshold=20) gives for x > 20 (below that, PyTorch's log1p(exp(x))
  // and this agree to f32 round-off).
  template <class T> T operator()(T x) const {
    return simd::max(x, T(0.f)) + simd::log1p(simd::exp(simd::abs(x) * -1.f));
  }
  static double f64(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }
  static void grad(GradArgs& a) { a.gin[0] = op::mul(a.g, a.gout, op::sigmoid(a.g, a.in(0))); }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- abs ---------------------------------------------------------------------------
// d/dx |x| = sign(x) = [x > 0] - [x < 0]  (0 at 0, as PyTorch)
struct abs {
  template <class T> T operator()(T x) const { return simd::abs(x); }
  static double f64(double x) { return std::abs(x); }
  static void grad(GradArgs& a) {
    NodeId zero = op::scalar(a.g, 0.f);
    NodeId sign = op::sub(a.g, op::compare(a.g, a.in(0), zero, Cmp::gt), op::compare(a.g, a.in(0), zero, Cmp::lt));
    a.gin[0] = op::mul(a.g, a.gout, sign);
  }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = false;  // clears the sign bit in both forms
};

// ---- sin ---------------------------------------------------------------------------
// d/dx sin(x) = cos(x)
struct sin {
  template <class T> T operator()(T x) const { return simd::sin(x); }
  static double f64(double x) { return std::sin(x); }
  static void grad(GradArgs& a) { a.gin[0] = op::mul(a.g, a.gout, op::cos(a.g, a.in(0))); }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- cos ---------------------------------------------------------------------------
// d/dx cos(x) = -sin(x)
struct cos {
  template <class T> T operator()(T x) const { return simd::cos(x); }
  static double f64(double x) { return std::cos(x); }
  static void grad(GradArgs& a) { a.gin[0] = op::neg(a.g, op::mul(a.g, a.gout, op::sin(a.g, a.in(0)))); }
  static constexpr TangentRule tangent = tangent_pointwise<0>;
  static constexpr bool transcendental = true;
};

// ---- selection: compare and where (their rules are in elementwise.cpp) --------------

// 1.0 where a <op> b holds, else 0.0; with a NaN operand every comparison is false but
// ne (as in C++). Op: 0 lt, 1 le, 2 gt, 3 ge, 4 eq, 5 ne (the order of gg::Cmp).
template <int Op>
struct compare {
  template <class T> T operator()(T a, T b) const {
    if constexpr (Op == 0) return simd::one_where(a < b);
    else if constexpr (Op == 1) return simd::one_where(a <= b);
    else if constexpr (Op == 2) return simd::one_where(a > b);
    else if constexpr (Op == 3) return simd::one_where(a >= b);
    else if constexpr (Op == 4) return simd::one_where(a == b);
    else return simd::one_where(simd::not_equal(a, b));
  }
};
// cond != 0 ? a : b, a NaN cond counting as true: written as cond == 0 ? b : a, since
// == is false for NaN in both the scalar and the batch form.
struct where {
  template <class T> T operator()(T cond, T a, T b) const { return simd::select(cond == T(0.f), b, a); }
};

}  // namespace gg::fn

namespace gg {

// The record struct of an element-wise primitive of op_list.def, by its kind: `type` is
// fn::name (none for the other families).
template <OpKind K>
struct element_of {};
#define GG_ELEMENT_leaf(name)
#define GG_ELEMENT_other(name)
#define GG_ELEMENT_unary(name) \
  template <>                  \
  struct element_of<OpKind::name> { using type = fn::name; };
#define GG_ELEMENT_binary(name) GG_ELEMENT_unary(name)
#define OP(name, arity, family) GG_ELEMENT_##family(name)
#include "ops/ir/op_list.def"
#undef OP
#undef GG_ELEMENT_leaf
#undef GG_ELEMENT_other
#undef GG_ELEMENT_unary
#undef GG_ELEMENT_binary

// Whether op k's SIMD body and scalar tail may round apart (exp, log, tanh, erf, ...), so
// that where a run splits between them must be the unary kernel's.
#define GG_TRANSCENDENTAL_leaf(name) false,
#define GG_TRANSCENDENTAL_other(name) false,
#define GG_TRANSCENDENTAL_unary(name) fn::name::transcendental,
#define GG_TRANSCENDENTAL_binary(name) fn::name::transcendental,
constexpr bool transcendental(OpKind k) {
  constexpr bool t[] = {
#define OP(name, arity, family) GG_TRANSCENDENTAL_##family(name)
#include "ops/ir/op_list.def"
#undef OP
  };
  return t[int(k)];
}
#undef GG_TRANSCENDENTAL_leaf
#undef GG_TRANSCENDENTAL_other
#undef GG_TRANSCENDENTAL_unary
#undef GG_TRANSCENDENTAL_binary

}  // namespace gg
