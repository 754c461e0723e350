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

}  // namespace gg::fn
