// build_gpt(): the reference model, top to bottom as the spec writes it; its option table,
// config files and batch files.
#include "models/gpt.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "io/message.h"

namespace gg::models {

using namespace gg::dsl;
using train::InputError;

const train::OptionTable<GptConfig>& GptConfig::table() {
  using C = GptConfig;
  using train::choice;
  using train::opt;
  static const train::OptionTable<C> t{
      {opt("vocab_size", &C::vocab_size, "Vocabulary size").at_least(1).at_most(1 << 24),
       opt("block_size", &C::block_size, "Context length").at_least(1).at_most(1 << 20),
       opt("n_layer", &C::n_layer, "Transformer blocks").at_least(0).at_most(1024),
       opt("n_head", &C::n_head, "Attention heads").at_least(1).at_most(1 << 16),
       opt("n_embd", &C::n_embd, "Embedding width").at_least(1).at_most(1 << 16),
       opt("bias", &C::bias, "Biases in every Linear and LayerNorm"),
       choice("pos_encoding", &C::pos_encoding, {{"learned", C::Pos::learned}, {"sinusoidal", C::Pos::sinusoidal}},
              "Position encoding: a learned table or the fixed sinusoids"),
       opt("tie_weights", &C::tie_weights, "Share the token embedding with the head"),
       choice("gelu", &C::gelu, {{"erf", GeluKind::erf}, {"tanh", GeluKind::tanh}}, "GELU: exact (erf) or tanh"),
       opt("layernorm_eps", &C::layernorm_eps, "LayerNorm epsilon").above(0).at_most(1),
       opt("dropout", &C::dropout, "Dropout on attention weights").at_least(0).below(1).optional(),
       opt("attn_scale", &C::attn_scale, "Scale attention scores by head_size^-0.5").optional()},
      [](const C& c) -> std::pair<std::string, std::string> {
        if (c.n_embd % c.n_head != 0) return {"n_embd", fmt::format("{} is not divisible by n_head = {}", c.n_embd, c.n_head)};
        return {};
      }};
  return t;
}

GptConfig parse_gpt_config(const std::string& text, const std::string& source) {
  GptConfig c;
  train::read_json(text, source, {train::bind(c)}, /*require_all=*/true);
  return c;
}

GptConfig load_gpt_config(const std::string& path) {
  GptConfig c;
  train::read_json_file(path, {train::bind(c)}, /*require_all=*/true);
  return c;
}

std::string to_json(const GptConfig& c) { return GptConfig::table().to_json(&c); }

namespace {
// The softmax output of the attention scoped `scope` among the nodes from `first` on: the
// division of attention()'s softmax, (B, H, T, T) -- the one node of that op and shape
// there (transformer_block returns only its output).
Expr attention_weights_in(Graph& g, NodeId first, const std::string& scope) {
  for (NodeId id = first; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == OpKind::div && n.name == scope && n.shape.size() == 4 && n.shape[2] == n.shape[3]) return {&g, id};
  }
  GG_CHECK(false && "transformer_block has no attention weights");
  return {};
}
}  // namespace

Gpt build_gpt(const GptConfig& c, Expr tokens, std::optional<Expr> targets, bool training) {
  Graph& g = *tokens.g;
  GptConfig::table().validate(&c, "gpt");
  Gpt m;
  const std::int64_t D = c.n_embd, V = c.vocab_size, T = tokens.dim(-1);
  if (T > c.block_size || T < 1)
    throw GraphError(fmt::format("gpt: sequence length {} must be in [1, block_size = {}]", T, c.block_size));
  Expr x = embedding(tokens, V, D, "tok_emb");                              // x: (B, T, D)
  if (c.pos_encoding == GptConfig::Pos::learned) {
    Scope s(g, "pos_emb");
    Expr p = param(g, "weight", {c.block_size, D}, normal_init(0.02f));     // p: (block_size, D)
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
  // GPT-2: projections into the residual stream start smaller, by 1/sqrt(2 n_layer).
  bo.resid_init = normal_init(float(0.02 / std::sqrt(2.0 * double(std::max<std::int64_t>(1, c.n_layer)))));
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const NodeId first = g.size();
    x = transformer_block(x, fmt::format("blocks.{}", i), bo);
    m.attn_weights.push_back(attention_weights_in(g, first, fmt::format("blocks.{}.attn", i)));
  }
  x = layer_norm(x, "norm_f", c.layernorm_eps, c.bias);                     // x: (B, T, D)
  Expr w = c.tie_weights ? Expr{&g, g.find("tok_emb.weight", OpKind::param)}
                         : param(g, "head.weight", {V, D}, normal_init(0.02f));  // w: (V, D)
  {
    Scope s(g, "head");
    m.logits = matmul(x, w, false, true);                                   // logits: (B, T, V)
  }
  if (targets) {
    m.loss = cross_entropy(m.logits, *targets);
    g.set_name(m.loss.id, "loss");
  }
  m.params = params(g);
  return m;
}

Gpt build_gpt(Graph& g, const GptConfig& c, std::int64_t B, std::int64_t T, bool with_loss, bool training) {
  Expr tokens = input(g, "tokens", {B, T}, DType::i32);                     // tokens: (B, T)
  std::optional<Expr> targets;
  if (with_loss) targets = input(g, "targets", {B, T}, DType::i32);        // targets: (B, T)
  return build_gpt(c, tokens, targets, training);
}

train::Model gpt_model(const GptConfig& c) {
  GptConfig::table().validate(&c, "gpt");
  return train::Model(
      "gpt",
      [c](train::ModelInputs& in) {
        std::optional<Expr> targets;
        if (in.has("targets")) targets = in["targets"];
        Gpt m = build_gpt(c, in["tokens"], targets, in.training());
        return train::ModelOutputs{m.loss, {{"logits", m.logits}}};
      },
      to_json(c));
}

std::vector<train::ParamInfo> gpt_params(const GptConfig& c) {
  train::Model m = gpt_model(c);
  return m.declare({{"tokens", Tensor({1, 1}, DType::i32)}});
}

std::vector<train::Batch> read_gpt_batches(const io::File& f, const GptConfig& c, bool stacked) {
  auto fail = [&](const std::string& why) { throw InputError(fmt::format("{}: {}", io::cut(f.path, 80), why)); };
  auto shape = [](const std::vector<std::int64_t>& s) { return io::cut(to_string(s), 40); };
  const io::Entry* tok = f.find("tokens");
  const io::Entry* tgt = f.find("targets");
  if (!tok || !tgt) fail(fmt::format("needs tensors 'tokens' and 'targets'{}", stacked ? " of shape [N, B, T]" : " of shape [B, T]"));
  const std::size_t rank = stacked ? 3 : 2;
  if (tok->shape.size() != rank) fail(fmt::format("'tokens' has shape {}, expected rank {}", shape(tok->shape), rank));
  if (tgt->shape != tok->shape)
    fail(fmt::format("'targets' has shape {} but 'tokens' has {}", shape(tgt->shape), shape(tok->shape)));
  for (auto d : tok->shape)
    if (d < 1) fail(fmt::format("'tokens' has an empty dimension: {}", shape(tok->shape)));
  const std::int64_t N = stacked ? tok->shape[0] : 1, B = tok->shape[rank - 2], T = tok->shape[rank - 1];
  if (T > c.block_size) fail(fmt::format("sequence length {} exceeds block_size {}", T, c.block_size));
  std::vector<std::int32_t> tokens, targets;
  try {
    tokens = f.get_i32("tokens");
    targets = f.get_i32("targets");
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      fail(fmt::format("'tokens' holds {} at flat index {}, outside [0, vocab_size = {})", tokens[i], i, c.vocab_size));
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (targets[i] < -1 || targets[i] >= c.vocab_size)
      fail(fmt::format("'targets' holds {} at flat index {}, outside [-1, vocab_size = {})", targets[i], i, c.vocab_size));
  std::vector<train::Batch> out;
  const std::size_t n = std::size_t(B * T);
  for (std::int64_t k = 0; k < N; ++k) {
    std::span<const std::int32_t> x(tokens.data() + std::size_t(k) * n, n), y(targets.data() + std::size_t(k) * n, n);
    bool any = false;
    for (std::int32_t t : y) any = any || t != -1;
    if (!any) fail(stacked ? fmt::format("batch {} has no target that is not -1 (ignored)", k)
                           : std::string("the batch has no target that is not -1 (ignored)"));
    out.push_back({{"tokens", Tensor::i32({B, T}, x)}, {"targets", Tensor::i32({B, T}, y)}});
  }
  return out;
}

}  // namespace gg::models
