// Must not compile with GG_TYPED_FAIL (first error: the line below), must compile without.
// expect: grouped_query_attention: 6 query heads do not share 4 key/value heads evenly
#include "dsl/typed.h"

using namespace gg;
namespace ty = gg::dsl::typed;
using ty::Batch;
using ty::Dim;
using ty::Seq;
using ty::T;

void model(Graph& g) {
  auto x = ty::input<Batch, Seq, Dim<48>>(g, "x", {4, 16});  // x: (B, S, 48)

#ifdef GG_TYPED_FAIL
  auto y = ty::grouped_query_attention<6, 4>(x, "attn");
  (void)y;
#else
  auto y = ty::grouped_query_attention<6, 3>(x, "attn");
  (void)y;
#endif
}
