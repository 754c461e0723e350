// The reference transformer block (pre-LN, as dsl::transformer_block) written out with
// compile-time dimensions: the width, heads and head size are in the types, batch and
// sequence are run-time. The graph it builds is the untyped block's, node for node (the
// program checks: to_text equal but for line numbers), so autodiff and the trainer take it
// as is. Each step carries the math's shape in its type; a slip such as
//   auto k = split_heads<8>(linear<kWidth>(h, "key"));      // (B, 8, S, 8) against q's 16
// is a compile error: 'gg::shape_error<gg::text{"attention: query and key sizes differ
// (16 vs 8)"}> error' has incomplete type. Exits 1 if the two graphs differ.
#include <fmt/format.h>

#include <regex>

#include "dsl/typed.h"

using namespace gg;
using namespace gg::dsl::typed;

constexpr std::int64_t kWidth = 64, kHeads = 4, kHeadSize = kWidth / kHeads;
using X = T<Batch, Seq, Dim<kWidth>>;                         // the residual stream
using Heads = T<Batch, Dim<kHeads>, Seq, Dim<kHeadSize>>;     // one sequence per head

// x + attn(norm1(x)), then x + fc2(gelu(fc1(norm2(x)))); names as dsl::transformer_block.
static X block(X x, const std::string& name, const dsl::AttentionOptions& attn) {
  Graph& g = x.graph();
  dsl::Scope scope(g, name);
  X h = layer_norm(x, "norm1");
  {
    dsl::Scope a(g, "attn");
    Heads q = split_heads<kHeads>(linear<kWidth>(h, "query"));  // q: (B, H, S, hs)
    Heads k = split_heads<kHeads>(linear<kWidth>(h, "key"));    // k: (B, H, S, hs)
    Heads v = split_heads<kHeads>(linear<kWidth>(h, "value"));  // v: (B, H, S, hs)
    auto r = attention(q, k, v, attn);                          // r.weights: (B, H, S, S)
    X merged = merge_heads(r.out);                              // (B, S, H hs)
    h = linear<kWidth>(merged, "proj");
  }
  x = x + h;
  h = layer_norm(x, "norm2");
  dsl::Scope mlp(g, "mlp");
  T<Batch, Seq, Dim<4 * kWidth>> wide = gelu(linear<4 * kWidth>(h, "fc1"));  // (B, S, 4C)
  return x + linear<kWidth>(wide, "fc2");
}

// The listing without line numbers (the two declarations are on different lines) and
// without the composites' own lines (a typed composite is built in another file).
static std::string listing(dsl::Expr root) {
  return std::regex_replace(std::regex_replace(to_text(*root.g, {root.id}), std::regex(R"( > \S+)"), ""),
                            std::regex(R"((\.(cpp|h)):\d+)"), "$1");  // nor the composites' own lines
}

int main() {
  const std::int64_t B = 2, S = 5;
  Graph typed_graph, plain_graph;

  auto x = input<Batch, Seq, Dim<kWidth>>(typed_graph, "x", {B, S});
  X y = block(x, "blocks.0", {.mask = dsl::causal_mask(typed_graph, S)});

  dsl::Expr px = dsl::input(plain_graph, "x", {B, S, kWidth});
  dsl::BlockOptions opt;
  opt.n_head = kHeads;
  opt.attn.mask = dsl::causal_mask(plain_graph, S);
  dsl::Expr py = dsl::transformer_block(px, "blocks.0", opt);

  const bool same = listing(y) == listing(py);
  fmt::print("typed block: {} -> {}, {} nodes\n", to_string(x.shape()), to_string(y.shape()),
             typed_graph.size());
  fmt::print("same graph as dsl::transformer_block: {}\n", same ? "yes" : "NO");
  if (!same) fmt::print("typed:\n{}\nuntyped:\n{}", listing(y), listing(py));
  return same ? 0 : 1;
}
