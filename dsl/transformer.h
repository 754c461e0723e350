// Encoder-decoder and image pieces built on dsl/nn.h: multi-head cross-attention, the
// pre-LN decoder block, encoder and decoder stacks, and 2-D positional encodings for
// patch grids. Compositions only (no kernels, no gradient rules of their own); masks are
// passed through to attention() and masked_fill() unchanged (1 = attend, 0 = masked).
#pragma once

#include <optional>

#include "nn.h"

namespace gg::dsl {

// Multi-head cross-attention: queries from x, keys and values from memory (Tq != Tk is
// fine). Linear "query" on x, "key" and "value" on memory (Dm -> D), heads split, attention
// with opt.mask (e.g. the source padding mask (B, 1, Tk)), heads merged, linear "proj"
// (weight from proj_init, default N(0, 0.02)). Names and head layout as multi_head_attention.
// x: (B, Tq, D), memory: (B, Tk, Dm) -> out (B, Tq, D), weights (B, H, Tq, Tk).
AttentionResult cross_attention(Expr x, Expr memory, std::int64_t n_head, const std::string& name, bool bias = true,
                                const AttentionOptions& opt = {}, std::optional<Init> proj_init = {},
                                Loc loc = Loc::current());

// Options shared by decoder_block, encoder and decoder.
struct TransformerOptions {
  std::int64_t n_head = 4;
  bool bias = true;                       // in every linear and layer norm
  GeluKind gelu = GeluKind::erf;
  float eps = 1e-5f;                      // layer norm
  float dropout = 0.f;                    // on the attention weights (as transformer_block), when training
  bool training = false;
  Init resid_init = normal_init(0.02f);   // the residual projections: every attention "proj" and "mlp.fc2"
};

// Pre-LN decoder block, scopes "<name>.norm1", "self_attn", "norm2", "cross_attn", "norm3",
// "mlp.fc1", "mlp.fc2" (e.g. "dec.0.self_attn.query.weight"):
//   x = x + self_attn(norm1(x))                    causal: target t sees targets 0..t
//   x = x + cross_attn(norm2(x), memory, memory_mask)
//   x = x + fc2(gelu(fc1(norm3(x))))               4x MLP
// x: (B, Tq, D) targets, memory: (B, Tk, D) encoder output, memory_mask e.g. the source
// padding mask (B, 1, Tk) -> (B, Tq, D). Target padding needs no mask: with padding at the
// end, the causal mask already keeps real targets from seeing it.
Expr decoder_block(Expr x, Expr memory, const std::string& name, const TransformerOptions& opt = {},
                   std::optional<Expr> memory_mask = {}, Loc loc = Loc::current());

// n_layer transformer_blocks "<name>.<i>" (pre-LN, as in dsl/nn.h) with the source mask
// (e.g. padding_mask(keep): (B, 1, Ts)) on their self-attention, then layer_norm
// "<name>.norm_f". x: (B, Ts, D) -> (B, Ts, D).
Expr encoder(Expr x, std::int64_t n_layer, const std::string& name, const TransformerOptions& opt = {},
             std::optional<Expr> mask = {}, Loc loc = Loc::current());

// n_layer decoder_blocks "<name>.<i>", then layer_norm "<name>.norm_f".
// x: (B, Tq, D), memory: (B, Tk, D), memory_mask e.g. (B, 1, Tk) -> (B, Tq, D).
Expr decoder(Expr x, Expr memory, std::int64_t n_layer, const std::string& name, const TransformerOptions& opt = {},
             std::optional<Expr> memory_mask = {}, Loc loc = Loc::current());

// Sinusoidal encoding of a rows x cols patch grid, a constant (rows cols, d_model) in the
// row-major patch order of patches(): patch n = r * cols + c. Its first d_model/2 features
// are positional_encoding(rows, d_model/2)[r], the last d_model/2 are
// positional_encoding(cols, d_model/2)[c]. d_model must be divisible by 4.
Expr positional_encoding_2d(Graph& g, std::int64_t rows, std::int64_t cols, std::int64_t d_model,
                            Loc loc = Loc::current());

// The learned variant: a parameter "<name>.weight" (rows cols, d_model) in the same patch
// order, drawn from init (default N(0, 0.02)).
Expr positional_embedding_2d(Graph& g, std::int64_t rows, std::int64_t cols, std::int64_t d_model,
                             const std::string& name, std::optional<Init> init = {}, Loc loc = Loc::current());

}  // namespace gg::dsl
