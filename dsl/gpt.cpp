// build_gpt(): the reference model, top to bottom as the spec writes it.
#include "dsl/gpt.h"

#include <fmt/format.h>

#include <cmath>

namespace gg::dsl {

std::vector<std::pair<std::string, Shape>> gpt_param_shapes(const GptConfig& c) {
  const std::int64_t D = c.n_embd, V = c.vocab_size;
  std::vector<std::pair<std::string, Shape>> p;
  p.push_back({"tok_emb.weight", {V, D}});
  if (c.pos_encoding == GptConfig::Pos::learned) p.push_back({"pos_emb.weight", {c.block_size, D}});
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string b = fmt::format("blocks.{}.", i);
    auto lin = [&](const std::string& n, std::int64_t out, std::int64_t in) {
      p.push_back({b + n + ".weight", {out, in}});
      if (c.bias) p.push_back({b + n + ".bias", {out}});
    };
    auto norm = [&](const std::string& n) {
      p.push_back({b + n + ".weight", {D}});
      if (c.bias) p.push_back({b + n + ".bias", {D}});
    };
    norm("norm1");
    lin("attn.query", D, D);
    lin("attn.key", D, D);
    lin("attn.value", D, D);
    lin("attn.proj", D, D);
    norm("norm2");
    lin("mlp.fc1", 4 * D, D);
    lin("mlp.fc2", D, 4 * D);
  }
  p.push_back({"norm_f.weight", {D}});
  if (c.bias) p.push_back({"norm_f.bias", {D}});
  if (!c.tie_weights) p.push_back({"head.weight", {V, D}});
  return p;
}

Gpt build_gpt(Graph& g, const GptConfig& c, std::int64_t B, std::int64_t T, bool with_loss, bool training) {
  Gpt m;
  const std::int64_t D = c.n_embd, V = c.vocab_size;
  if (T > c.block_size || T < 1)
    throw GraphError(fmt::format("gpt: sequence length {} must be in [1, block_size = {}]", T, c.block_size));
  m.tokens = input(g, "tokens", {B, T}, DType::i32);                       // tokens: (B, T)
  Expr x = embedding(m.tokens, V, D, "tok_emb");                           // x: (B, T, D)
  if (c.pos_encoding == GptConfig::Pos::learned) {
    Scope s(g, "pos_emb");
    Expr p = param(g, "weight", {c.block_size, D}, normal_init(0.02f));    // p: (block_size, D)
    x = x + slice(p, 0, 0, T);
  } else {
    x = x + slice(positional_encoding(g, c.block_size, D), 0, 0, T);
  }
  BlockOptions bo;
  bo.n_head = c.n_head;
  bo.bias = c.bias;
  bo.gelu = c.gelu;
  bo.eps = c.layernorm_eps;
  bo.attn.mask = causal_mask(g, T);
  bo.attn.dropout = c.dropout;
  bo.attn.training = training;
  bo.attn.scale = c.attn_scale;
  for (std::int64_t i = 0; i < c.n_layer; ++i) x = transformer_block(x, fmt::format("blocks.{}", i), bo);
  x = layer_norm(x, "norm_f", c.layernorm_eps, c.bias);                    // x: (B, T, D)
  Expr w = c.tie_weights ? Expr{&g, g.find("tok_emb.weight", OpKind::param)}
                         : param(g, "head.weight", {V, D}, normal_init(0.02f));  // w: (V, D)
  {
    Scope s(g, "head");
    m.logits = matmul(x, w, false, true);                                  // logits: (B, T, V)
  }
  if (with_loss) {
    m.targets = input(g, "targets", {B, T}, DType::i32);
    m.loss = cross_entropy(m.logits, m.targets);
    g.set_name(m.loss.id, "loss");
  }
  for (auto& [name, shape] : gpt_param_shapes(c)) m.params.push_back({&g, g.find(name, OpKind::param)});
  return m;
}

}  // namespace gg::dsl
