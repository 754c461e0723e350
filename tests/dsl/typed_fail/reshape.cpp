// Must not compile with GG_TYPED_FAIL (first error: the line below), must compile without.
// expect: reshape: element counts differ (64 vs 60)
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
  auto h = ty::reshape<T<Batch, Seq, Dim<4>, Dim<15>>>(x);
  (void)h;
#else
  auto h = ty::reshape<T<Batch, Seq, Dim<4>, Dim<16>>>(x);
  (void)h;
#endif
}
