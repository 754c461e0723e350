// The element functions of the element-wise primitives, written once as generic functors
// that serve both `float` and ops/simd.h's batch: the op kernels (elementwise.cpp) and the
// fused element-wise steps (fuse.cpp) both run these, so a fused chain computes the same
// bits as the ops one by one.
#pragma once

#include "simd.h"

namespace gg::fn {

struct add {
  template <class T, class U> auto operator()(T x, U y) const { return x + y; }
};
struct sub {
  template <class T, class U> auto operator()(T x, U y) const { return x - y; }
};
struct mul {
  template <class T, class U> auto operator()(T x, U y) const { return x * y; }
};
struct div {
  template <class T, class U> auto operator()(T x, U y) const { return x / y; }
};
struct maximum {
  template <class T> T operator()(T x, T y) const { return simd::max(x, y); }
};
// x * -1, not -x: xsimd's batch negation is 0 - x, which loses the sign of zero
struct neg {
  template <class T> T operator()(T x) const { return x * -1.f; }
};
struct exp {
  template <class T> T operator()(T x) const { return simd::exp(x); }
};
struct log {
  template <class T> T operator()(T x) const { return simd::log(x); }
};
struct sqrt {
  template <class T> T operator()(T x) const { return simd::sqrt(x); }
};
struct tanh {
  template <class T> T operator()(T x) const { return simd::tanh(x); }
};
struct erf {
  template <class T> T operator()(T x) const { return simd::erf(x); }
};

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
