// Neural-network compositions built from the primitives: nothing here has a kernel or a
// gradient rule of its own; gradients come from the primitives they are made of.
// Each function opens a name scope (its `name`) and records the caller's line.
#pragma once

#include <optional>

#include "expr.h"

namespace gg::dsl {

// y = x @ W^T + b, W: (out, in) as PyTorch stores it, b: (out). x: (..., in) -> (..., out).
// Default init: W ~ N(0, 0.02), b = 0.
Expr linear(Expr x, std::int64_t out_features, const std::string& name, bool bias = true,
            std::optional<Init> w_init = {}, Loc loc = Loc::current());

// Softmax over `axis`, with the max subtracted first (the max trick).
Expr softmax(Expr x, std::int64_t axis = -1, Loc loc = Loc::current());
Expr log_softmax(Expr x, std::int64_t axis = -1, Loc loc = Loc::current());

// (x - mean) / sqrt(var + eps) * weight + bias over the last axis (biased variance).
// Params "<name>.weight" (ones) and, with bias, "<name>.bias" (zeros).
Expr layer_norm(Expr x, const std::string& name, float eps = 1e-5f, bool bias = true, Loc loc = Loc::current());

// x / sqrt(mean(x^2) + eps) * weight over the last axis: RMSNorm, as LLaMA writes it (no
// centering, no bias). Param "<name>.weight" (ones).
Expr rms_norm(Expr x, const std::string& name, float eps = 1e-6f, Loc loc = Loc::current());

enum class GeluKind { erf, tanh };
// 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation.
Expr gelu(Expr x, GeluKind kind = GeluKind::erf, Loc loc = Loc::current());

// x * sigmoid(x): SiLU (swish), the gate of SwiGLU's silu(x W1) * (x W3).
Expr silu(Expr x, Loc loc = Loc::current());

// Mean over non-ignored positions of -log_softmax(logits)[target].
// logits: (..., V) f32, targets: (...) i32; targets equal to ignore_index do not count.
// At run time a batch whose targets are all ignore_index throws GraphError (instead of a
// NaN loss; a value check, see Graph::add_check), and so does a target outside [0, V)
// that is not ignore_index.
Expr cross_entropy(Expr logits, Expr targets, int ignore_index = -1, Loc loc = Loc::current());

// weight: (num, dim) ~ N(0, 0.02) named "<name>.weight"; index (...) i32 -> (..., dim).
Expr embedding(Expr index, std::int64_t num, std::int64_t dim, const std::string& name, Loc loc = Loc::current());

// The sinusoidal table P: (max_len, d_model), P[p, 2k] = sin(p w_k), P[p, 2k+1] = cos(p w_k),
// w_k = exp(-(2k) ln(10000) / d_model). A constant (no parameter).
Expr positional_encoding(Graph& g, std::int64_t max_len, std::int64_t d_model, Loc loc = Loc::current());

// Image patches as a sequence: images (B, C, H, W) (or (B, H, W), one channel) cut into
// non-overlapping p x p patches, row by row -> (B, (H/p)(W/p), C p p), each patch's
// values ordered channel, row, column. H and W must be multiples of p.
Expr patches(Expr images, std::int64_t p, Loc loc = Loc::current());
// patches() followed by linear(..., d_model, name, bias, w_init): the ViT input, (B, N, d_model).
// Default init as linear's: W ~ N(0, 0.02), b = 0.
Expr patch_embedding(Expr images, std::int64_t p, std::int64_t d_model, const std::string& name, bool bias = true,
                     std::optional<Init> w_init = {}, Loc loc = Loc::current());

// Masks hold 1 where attention is allowed and 0 where it is not (f32; masked_fill also
// takes i32). The one rule, for every rank: scores are (Tq, Tk), (B, Tq, Tk) or
// (B, H, Tq, Tk) (queries and keys may differ in length, as in cross-attention), and a
// mask is
//   (Tq, Tk)             the same for every batch (and head), e.g. causal_mask;
//   (B, 1, Tk)           per batch, the same for every query, e.g. padding_mask;
//   (B, Tq, Tk)          per batch, e.g. causal_mask(g, T) * padding_mask(keep);
//   (B, 1|H, Tq, Tk)     4-D scores only: per batch and (with H) per head, as is.
// Any dim may be 1 (broadcast). A 3-D mask always applies per batch: against 4-D scores
// it gets a head axis (B, 1, Tq, Tk), never numpy's trailing alignment, which would line
// B up with the heads. A mask that does not follow the rule is a GraphError naming both
// shapes; in particular a 3-D mask whose first dim is the number of heads (H, Tq, Tk),
// which broadcasting would accept as per-head, is refused instead of guessed (write
// (1, H, Tq, Tk)). Ranks 1 and above the scores' are refused.
// causal_mask: (T, T), 1 where key <= query.
Expr causal_mask(Graph& g, std::int64_t T, Loc loc = Loc::current());
// From keep (B, Tk) -- f32, or i32 token validity (1 = real token, 0 = padding) -- to
// an f32 (B, 1, Tk) mask.
Expr padding_mask(Expr keep, Loc loc = Loc::current());
// From i32 token ids (B, Tk): 1 where ids != pad_id, as an f32 (B, 1, Tk) mask.
Expr padding_mask_from_ids(Expr ids, std::int64_t pad_id, Loc loc = Loc::current());
// scores where mask is nonzero, -inf where it is 0, the mask applied by the rule above.
Expr masked_fill(Expr scores, Expr mask, Loc loc = Loc::current());

// Noise drawn anew at each run from the executor's generator (Executor::rng(): the one a
// train::Model seeds and a checkpoint stores, so a resumed run draws the same noise). It is
// a leaf of the gradient: nothing flows into it, and mu + sigma * random_normal(g, shape)
// (the reparameterization) has the gradients of mu and sigma with the noise held fixed.
// random_uniform: lo + (hi - lo) u, u uniform in [0, 1) (hi itself only by rounding); lo < hi.
Expr random_uniform(Graph& g, Shape shape, float lo = 0.f, float hi = 1.f, Loc loc = Loc::current());
// Standard normal (mean 0, variance 1) by Box-Muller from two uniform draws u1, u2:
// sqrt(-2 log(1 - u1)) cos(2 pi u2). The tails end at |z| = 5.8 (1 - u1 >= 2^-24), which a
// true normal passes with probability 8e-9.
Expr random_normal(Graph& g, Shape shape, Loc loc = Loc::current());

// Inverted dropout: zeroes each element with probability p and scales the rest by
// 1 / (1 - p); the identity when !training or p == 0.
Expr dropout(Expr x, float p, bool training, Loc loc = Loc::current());

struct AttentionOptions {
  std::optional<Expr> mask;  // 1 = attend, 0 = masked; filled with -inf before the softmax
  float dropout = 0.f;       // on the weights, after the softmax and before V
  bool training = false;
  bool scale = true;         // multiply scores by head_size^-0.5 (off for the ablation)
  // The fused primitive pair (ops/primitives/attention.cpp: by blocks of keys with an online
  // softmax, the (Tq, Tk) weights never stored, memory linear in T) for `out` (true), or its
  // composition of primitives (false). Unset: a FusedAttention scope open on the graph
  // decides, else GG_FUSED_ATTENTION, else the size: fused above fused_attention_keys
  // keys, where it is faster than the composition's plan and its memory linear in T (at
  // fewer keys the composition's batch-slice chains and masked products ran faster:
  // docs/long-context.md). The fused path is never taken with dropout on the weights while
  // training (the composition draws and applies the mask), nor when q, k and v differ in
  // batch dims; then `out` is the composition's.
  std::optional<bool> fused = std::nullopt;
};

// When nothing else decides (AttentionOptions::fused), attention with more keys than this is fused.
inline constexpr std::int64_t fused_attention_keys = 512;

struct AttentionResult {
  Expr out;      // (..., Tq, hs)
  Expr weights;  // (..., Tq, Tk), every row sums to 1 (before dropout)
};

// softmax(q k^T * hs^-0.5 [masked]) [dropout] @ v.  q: (..., Tq, hs), k and v: (..., Tk, hs)
// (Tq == Tk for self-attention) -> out (..., Tq, hs), weights (..., Tq, Tk); the mask
// follows the rule above (a row with every key masked gives NaN weights and output).
// `out` comes from the fused primitive pair where AttentionOptions::fused allows it, and
// `weights` always from the composition: its nodes are planned and computed only when a
// program reads them (a heatmap), for a plan prunes what its outputs do not need.
AttentionResult attention(Expr q, Expr k, Expr v, const AttentionOptions& opt = {}, Loc loc = Loc::current());

// Single-head self-attention: q = x W_Q, k = x W_K, v = x W_V (no bias), W_*: (d_model, d_k)
// named "<name>.W_Q" etc; with out_proj, out = attention(...) @ W_O, W_O: (d_k, d_model).
// x: (B, T, d_model) -> out (B, T, d_k or d_model), weights (B, T, T).
AttentionResult single_head_attention(Expr x, std::int64_t d_k, const std::string& name,
                                      const AttentionOptions& opt = {}, bool out_proj = false,
                                      Loc loc = Loc::current());

// The heads of a projected sequence and back: split_heads (B, T, D) -> (B, H, T, D/H)
// (D must divide by n_head), merge_heads (B, H, T, hs) -> (B, T, H hs), its inverse.
Expr split_heads(Expr x, std::int64_t n_head, Loc loc = Loc::current());
Expr merge_heads(Expr x, Loc loc = Loc::current());

// Multi-head self-attention as in the reference model: linear "query", "key", "value"
// (D -> D), heads split to (B, H, T, hs), attention, heads concatenated, linear "proj"
// (its weight drawn from proj_init, default N(0, 0.02)).
// x: (B, T, D) -> out (B, T, D), weights (B, H, T, T). Cross-attention: dsl/transformer.h.
AttentionResult multi_head_attention(Expr x, std::int64_t n_head, const std::string& name, bool bias = true,
                                     const AttentionOptions& opt = {}, std::optional<Init> proj_init = {},
                                     Loc loc = Loc::current());

// Rotary position embedding (RoPE) of queries or keys x (..., T, hs), hs even: row t, at
// position p = start + t, has each pair (x[i], x[i + hs/2]), i < hs/2, rotated by the angle
// p * base^(-2i / hs):  out = x * cos + rotate_half(x) * sin,  rotate_half(x) = (-x2, x1)
// for the halves x1, x2 of the last axis. That is the half-split layout of GPT-NeoX and of
// LLaMA as Hugging Face writes it (RoFormer's and Meta's LLaMA code rotate adjacent pairs
// (x[2i], x[2i+1]) instead: the same model up to a fixed permutation of q's and k's
// features). The angles are a constant (T, hs) table, no parameter.
Expr rotary_embedding(Expr x, std::int64_t start = 0, float base = 10000.f, Loc loc = Loc::current());

struct GroupedQueryOptions {
  std::int64_t n_head = 4;     // query heads
  std::int64_t n_kv_head = 2;  // key/value heads, dividing n_head: 1 is multi-query, n_head multi-head
  bool bias = false;           // in the four linears
  bool rotary = true;          // rotary_embedding on q and k (positions from 0)
  float rope_base = 10000.f;
  AttentionOptions attn{};     // mask (e.g. causal_mask), dropout, training, scale
  std::optional<Init> proj_init{};  // of "proj"'s weight; default N(0, 0.02)
};

// Grouped-query self-attention: linear "query" (D -> D), "key" and "value"
// (D -> n_kv_head * hs, hs = D / n_head), heads split, q and k rotated (opt.rotary), each
// group of n_head / n_kv_head consecutive query heads reading one key/value head (query head
// h reads kv head h / (n_head / n_kv_head), LLaMA's repeat_kv), attention, heads merged,
// linear "proj". x: (B, T, D) -> out (B, T, D), weights (B, n_head, T, T).
AttentionResult grouped_query_attention(Expr x, const std::string& name, const GroupedQueryOptions& opt = {},
                                        Loc loc = Loc::current());

struct BlockOptions {
  std::int64_t n_head = 4;
  bool bias = true;
  GeluKind gelu = GeluKind::erf;
  float eps = 1e-5f;
  AttentionOptions attn;  // mask, dropout, training, scale
  // Weights of the projections into the residual stream (attn.proj, mlp.fc2); default
  // N(0, 0.02). GPT-2 scales them by 1/sqrt(2 n_layer).
  std::optional<Init> resid_init;
};

// Pre-LayerNorm block: x + attn(norm1(x)), then x + fc2(gelu(fc1(norm2(x)))) with a 4x MLP.
// x: (B, T, D) -> (B, T, D).
Expr transformer_block(Expr x, const std::string& name, const BlockOptions& opt = {}, Loc loc = Loc::current());

}  // namespace gg::dsl
