// Must not compile with GG_TYPED_FAIL (first error: the line below), must compile without.
// expect: transformer_block: 64 features do not split into 6 heads
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
  auto y = ty::transformer_block<6>(x, "blk");
  (void)y;
#else
  auto y = ty::transformer_block<4>(x, "blk");
  (void)y;
#endif
}
