// The reference transformer language model of spec/reference-model.md, declared with the
// DSL: token (+ position) embedding, pre-LayerNorm blocks, final norm, a tied or untied
// head and the cross-entropy loss with ignored targets. Parameter names and layouts are
// the spec's, so weights travel to and from PyTorch unchanged.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nn.h"

namespace gg::dsl {

struct GptConfig {
  std::int64_t vocab_size = 65, block_size = 64, n_layer = 4, n_head = 4, n_embd = 128;
  bool bias = true;
  enum class Pos { learned, sinusoidal } pos_encoding = Pos::learned;
  bool tie_weights = true;
  GeluKind gelu = GeluKind::erf;
  float layernorm_eps = 1e-5f;
  // Beyond the spec (0 / true there): dropout on attention weights, the 1/sqrt(hs) scale.
  float dropout = 0.f;
  bool attn_scale = true;
};

struct Gpt {
  Expr tokens;   // input "tokens": (B, T) i32
  Expr targets;  // input "targets": (B, T) i32, -1 = ignore (only with a loss)
  Expr logits;   // (B, T, V)
  Expr loss;     // scalar (only with a loss)
  std::vector<Expr> params;  // every parameter, in the spec's table order
};

// Builds the model for batches of (B, T) tokens, T <= block_size. training turns dropout on.
// Throws GraphError for an impossible config (e.g. n_embd not divisible by n_head).
Gpt build_gpt(Graph& g, const GptConfig& c, std::int64_t B, std::int64_t T, bool with_loss = true,
              bool training = false);

// The spec's parameter table for a config: names and shapes, in table order.
std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c);

}  // namespace gg::dsl
