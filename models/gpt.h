// The reference transformer language model (docs/reference-model.md), declared with the
// DSL: token (+ position) embedding, pre-LayerNorm blocks, final norm, a tied or untied
// head and the cross-entropy loss with ignored targets. Parameter names and layouts are the
// spec's, so weights travel to and from PyTorch unchanged. Its options are one table
// (GptConfig::table()), from which the spec's JSON config, the command-line flags and
// the checkpoint metadata all come.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../dsl/nn.h"
#include "../io/safetensors.h"
#include "../train/model.h"
#include "../train/options.h"

namespace gg::models {

struct GptConfig {
  std::int64_t vocab_size = 65, block_size = 64, n_layer = 4, n_head = 4, n_embd = 128;
  bool bias = true;
  enum class Pos { learned, sinusoidal } pos_encoding = Pos::learned;
  bool tie_weights = true;
  dsl::GeluKind gelu = dsl::GeluKind::erf;
  float layernorm_eps = 1e-5f;
  // Beyond the spec (0 / true there; optional in a config file): dropout on attention
  // weights, the 1/sqrt(hs) scale.
  float dropout = 0.f;
  bool attn_scale = true;
  static const train::OptionTable<GptConfig>& table();
};

// Parses the spec's config JSON (every spec key required, unknown keys refused, the two
// extra keys optional); `source` names it in errors ("model.json: key 'n_head': ...").
GptConfig parse_gpt_config(const std::string& json_text, const std::string& source);
GptConfig load_gpt_config(const std::string& path);
std::string to_json(const GptConfig& c);

struct Gpt {
  dsl::Expr logits;              // (B, T, V)
  dsl::Expr loss;                // scalar (only with targets)
  std::vector<dsl::Expr> params; // every parameter, in the spec's table order
  std::vector<dsl::Expr> attn_weights;  // per block: its attention weights (B, H, T, T), rows sum to 1
};

// The model on tokens (B, T) i32, T <= block_size; with targets (B, T) i32 (-1 = ignore)
// also the loss. training turns dropout on. The residual projections (attn.proj, mlp.fc2)
// start at N(0, 0.02 / sqrt(2 n_layer)) (GPT-2); every command builds this same model.
// Throws GraphError for an impossible config (e.g. n_embd not divisible by n_head).
Gpt build_gpt(const GptConfig& c, dsl::Expr tokens, std::optional<dsl::Expr> targets, bool training = false);
// The same, declaring inputs "tokens" and (with_loss) "targets" of shape (B, T).
Gpt build_gpt(Graph& g, const GptConfig& c, std::int64_t B, std::int64_t T, bool with_loss = true,
              bool training = false);

// The GPT as a trainable model: batches hold "tokens" and, for a loss, "targets"; outputs
// "logits". Kind "gpt", options from the table.
train::Model gpt_model(const GptConfig& c);

// The parameter table (names and shapes, the spec's order), from declaring the model.
std::vector<train::ParamInfo> gpt_params(const GptConfig& c);

// Tokens and targets of one or more batches, checked against the config: T <= block_size,
// tokens in [0, V), targets in [-1, V), each batch with a target that is not -1.
// Reads "tokens"/"targets" [B, T] (or [N, B, T] when `stacked`), I32 or I64.
// Throws InputError naming the file.
std::vector<train::Batch> read_gpt_batches(const io::File& f, const GptConfig& c, bool stacked);

}  // namespace gg::models
