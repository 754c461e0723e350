// Must not compile with GG_TYPED_FAIL (first error: the line below), must compile without.
// expect: split_heads: 64 features do not split into 6 heads
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
  auto h = ty::split_heads<6>(ty::linear<64>(x, "query"));
  (void)h;
#else
  auto h = ty::split_heads<4>(ty::linear<64>(x, "query"));  // (B, 4, S, 16)
  (void)h;
#endif
}
