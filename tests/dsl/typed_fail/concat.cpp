// Must not compile with GG_TYPED_FAIL (first error: the line below), must compile without.
// expect: concat: dimension 2 differs (64 vs 48)
#include "dsl/typed.h"

using namespace gg;
namespace ty = gg::dsl::typed;
using ty::Batch;
using ty::Dim;
using ty::Seq;
using ty::T;

void model(Graph& g) {
  auto x = ty::input<Batch, Seq, Dim<64>>(g, "x", {4, 16});  // x: (B, S, 64)

#ifdef GG_TYPED_FAIL
  auto y = ty::concat<1>(x, ty::input<Batch, Seq, Dim<48>>(g, "prefix", {4, 2}));  // along S, widths differ
  (void)y;
#else
  auto y = ty::concat<1>(x, ty::input<Batch, Seq, Dim<64>>(g, "prefix", {4, 2}));  // (B, S, 64)
  (void)y;
#endif
}
