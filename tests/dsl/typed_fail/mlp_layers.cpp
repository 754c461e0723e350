// Must not compile with GG_TYPED_FAIL (first error: the line below), must compile without.
// expect: matmul: inner dimensions differ (256 vs 128)
#include "dsl/typed.h"

using namespace gg;
namespace ty = gg::dsl::typed;
using ty::Batch;
using ty::Dim;
using ty::Seq;
using ty::T;

void model(Graph& g) {
  auto x = ty::input<Batch, Seq, Dim<64>>(g, "x", {4, 16});  // x: (B, S, 64)
  auto h = ty::gelu(ty::linear<256>(x, "fc1"));  // (B, S, 256)
#ifdef GG_TYPED_FAIL
  auto w2 = ty::param<Dim<128>, Dim<64>>(g, "fc2.weight");  // written for a 2x MLP
  auto y = ty::matmul(h, w2);
  (void)y;
#else
  auto w2 = ty::param<Dim<256>, Dim<64>>(g, "fc2.weight");
  auto y = ty::matmul(h, w2);
  (void)y;
#endif
}
