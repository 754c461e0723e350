// Must not compile with GG_TYPED_FAIL (first error: the line below), must compile without.
// expect: attention: query and key sizes differ (16 vs 8)
#include "dsl/typed.h"

using namespace gg;
namespace ty = gg::dsl::typed;
using ty::Batch;
using ty::Dim;
using ty::Seq;
using ty::T;

void model(Graph& g) {
  auto x = ty::input<Batch, Seq, Dim<64>>(g, "x", {4, 16});  // x: (B, S, 64)
  auto q = ty::split_heads<4>(ty::linear<64>(x, "query"));  // (B, 4, S, 16)
#ifdef GG_TYPED_FAIL
  auto k = ty::split_heads<8>(ty::linear<64>(x, "key"));    // (B, 8, S, 8): heads mixed up
  auto r = ty::attention(q, k, k);
  (void)r;
#else
  auto k = ty::split_heads<4>(ty::linear<64>(x, "key"));
  auto r = ty::attention(q, k, k);
  (void)r;
#endif
}
