// The compositions of dsl/transformer.h, each a few calls into dsl/nn.h with shape comments.
#include "dsl/transformer.h"

#include <fmt/format.h>

namespace gg::dsl {

AttentionResult cross_attention(Expr x, Expr memory, std::int64_t n_head, const std::string& name, bool bias,
                                const AttentionOptions& opt, std::optional<Init> proj_init, Loc loc) {
  Graph& g = *x.g;
  UserSite site(g, loc);
  Scope scope(g, name);
  if (x.rank() != 3 || memory.rank() != 3 || x.dim(0) != memory.dim(0))
    fail_at_call(g, "cross_attention", loc,
                 fmt::format("wants x (B, Tq, D) and memory (B, Tk, Dm) with the same B, got {} ('{}') and {} ('{}')",
                             to_string(x.shape()), x.name(), to_string(memory.shape()), memory.name()));
  const std::int64_t D = x.dim(2);
  if (n_head <= 0 || D % n_head != 0)
    fail_at_call(g, "cross_attention", loc, fmt::format("n_embd {} is not divisible by n_head {}", D, n_head));
  Expr q = split_heads(linear(x, D, "query", bias, {}, loc), n_head, loc);       // q: (B, H, Tq, hs)
  Expr k = split_heads(linear(memory, D, "key", bias, {}, loc), n_head, loc);    // k: (B, H, Tk, hs)
  Expr v = split_heads(linear(memory, D, "value", bias, {}, loc), n_head, loc);  // v: (B, H, Tk, hs)
  AttentionResult r = attention(q, k, v, opt, loc);  // r.out: (B, H, Tq, hs), r.weights: (B, H, Tq, Tk)
  r.out = linear(merge_heads(r.out, loc), D, "proj", bias, proj_init, loc);       // (B, Tq, D)
  return r;
}

Expr decoder_block(Expr x, Expr memory, const std::string& name, const TransformerOptions& opt,
                   std::optional<Expr> memory_mask, Loc loc) {
  Graph& g = *x.g;
  UserSite site(g, loc);
  Scope scope(g, name);
  const std::int64_t T = x.dim(-2), D = x.dim(-1);
  const AttentionOptions self{.mask = causal_mask(g, T, loc), .dropout = opt.dropout, .training = opt.training};
  const AttentionOptions cross{.mask = memory_mask, .dropout = opt.dropout, .training = opt.training};
  Expr h = layer_norm(x, "norm1", opt.eps, opt.bias, loc);                                           // h: (B, Tq, D)
  x = x + multi_head_attention(h, opt.n_head, "self_attn", opt.bias, self, opt.resid_init, loc).out;
  h = layer_norm(x, "norm2", opt.eps, opt.bias, loc);
  x = x + cross_attention(h, memory, opt.n_head, "cross_attn", opt.bias, cross, opt.resid_init, loc).out;
  h = layer_norm(x, "norm3", opt.eps, opt.bias, loc);
  Scope mlp(g, "mlp");
  h = gelu(linear(h, 4 * D, "fc1", opt.bias, {}, loc), opt.gelu, loc);  // h: (B, Tq, 4D)
  return x + linear(h, D, "fc2", opt.bias, opt.resid_init, loc);        // (B, Tq, D)
}

Expr encoder(Expr x, std::int64_t n_layer, const std::string& name, const TransformerOptions& opt,
             std::optional<Expr> mask, Loc loc) {
  Graph& g = *x.g;
  UserSite site(g, loc);
  Scope scope(g, name);
  BlockOptions bo{.n_head = opt.n_head, .bias = opt.bias, .gelu = opt.gelu, .eps = opt.eps,
                  .attn = {.mask = mask, .dropout = opt.dropout, .training = opt.training},
                  .resid_init = opt.resid_init};
  for (std::int64_t i = 0; i < n_layer; ++i) x = transformer_block(x, std::to_string(i), bo, loc);  // x: (B, Ts, D)
  return layer_norm(x, "norm_f", opt.eps, opt.bias, loc);
}

Expr decoder(Expr x, Expr memory, std::int64_t n_layer, const std::string& name, const TransformerOptions& opt,
             std::optional<Expr> memory_mask, Loc loc) {
  Graph& g = *x.g;
  UserSite site(g, loc);
  Scope scope(g, name);
  for (std::int64_t i = 0; i < n_layer; ++i)
    x = decoder_block(x, memory, std::to_string(i), opt, memory_mask, loc);  // x: (B, Tq, D)
  return layer_norm(x, "norm_f", opt.eps, opt.bias, loc);
}

Expr positional_encoding_2d(Graph& g, std::int64_t rows, std::int64_t cols, std::int64_t d_model, Loc loc) {
  UserSite site(g, loc);
  if (rows < 1 || cols < 1 || d_model < 4 || d_model % 4 != 0)
    fail_at_call(g, "positional_encoding_2d", loc,
                 fmt::format("wants rows, cols >= 1 and d_model divisible by 4, got {} x {} and d_model {}", rows,
                             cols, d_model));
  NameScope scope(g, "positional_encoding_2d");
  const std::int64_t half = d_model / 2;
  Expr r = reshape(positional_encoding(g, rows, half, loc), {rows, 1, half}, loc);  // r: (rows, 1, d/2)
  Expr c = reshape(positional_encoding(g, cols, half, loc), {1, cols, half}, loc);  // c: (1, cols, d/2)
  Expr grid = concat({expand(r, {rows, cols, half}, loc), expand(c, {rows, cols, half}, loc)}, -1, loc);
  return reshape(grid, {rows * cols, d_model}, loc);  // (rows cols, d_model), patch r * cols + c
}

Expr positional_embedding_2d(Graph& g, std::int64_t rows, std::int64_t cols, std::int64_t d_model,
                             const std::string& name, std::optional<Init> init, Loc loc) {
  UserSite site(g, loc);
  if (rows < 1 || cols < 1 || d_model < 1)
    fail_at_call(g, "positional_embedding_2d", loc,
                 fmt::format("wants rows, cols, d_model >= 1, got {} x {} and d_model {}", rows, cols, d_model));
  Scope scope(g, name);
  return param(g, "weight", {rows * cols, d_model}, init.value_or(normal_init(0.02f)), loc);  // (rows cols, d_model)
}

}  // namespace gg::dsl
