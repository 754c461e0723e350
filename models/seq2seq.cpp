// The encoder-decoder: the model, the KV-cached greedy decoder and the job (the tasks are in seq2seq_tasks.cpp).
#include "models/seq2seq.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "io/message.h"
#include "train/checkpoint.h"

namespace gg::models {

using namespace gg::dsl;
using train::InputError;

const train::OptionTable<Seq2SeqConfig>& Seq2SeqConfig::table() {
  using C = Seq2SeqConfig;
  using train::opt;
  static const train::OptionTable<C> t{
      {opt("src_vocab", &C::src_vocab, "Source vocabulary size (set by the task)").at_least(2).at_most(1 << 24),
       opt("tgt_vocab", &C::tgt_vocab, "Target vocabulary size (set by the task)").at_least(4).at_most(1 << 24),
       opt("d_model", &C::d_model, "Model width").at_least(1).at_most(1 << 16),
       opt("n_head", &C::n_head, "Attention heads").at_least(1).at_most(1 << 16),
       opt("enc_layers", &C::enc_layers, "Encoder layers").at_least(0).at_most(1024),
       opt("dec_layers", &C::dec_layers, "Decoder layers").at_least(1).at_most(1024),
       opt("max_src_len", &C::max_src_len, "Longest source (set by the task)").at_least(1).at_most(1 << 20),
       opt("max_tgt_len", &C::max_tgt_len, "Longest target with BOS (set by the task)").at_least(1).at_most(1 << 20),
       opt("dropout", &C::dropout, "Dropout on attention weights").at_least(0).below(1)},
      [](const C& c) -> std::pair<std::string, std::string> {
        if (c.d_model % c.n_head != 0)
          return {"n_head", fmt::format("d_model {} is not divisible by n_head {}", c.d_model, c.n_head)};
        return {};
      }};
  return t;
}

namespace {

TransformerOptions layer_options(const Seq2SeqConfig& c, bool training) {
  const double n = double(std::max<std::int64_t>(1, c.enc_layers + c.dec_layers));
  return {.n_head = c.n_head, .dropout = c.dropout, .training = training,
          .resid_init = normal_init(float(0.02 / std::sqrt(2.0 * n)))};
}

// Token embedding scaled by sqrt(D) (the table starts at N(0, 0.02), the positions at
// amplitude 1) plus the sinusoidal positions of rows `pos` of the table.
Expr embed(Expr ids, std::int64_t vocab, std::int64_t D, const std::string& name, Expr positions) {
  return embedding(ids, vocab, D, name) * float(std::sqrt(double(D))) + positions;  // (B, T, D)
}

struct LayerOut {
  Expr x, cross_weights;
};

// dsl::decoder_block, written out so that its cross-attention weights can be returned: the
// same scopes and parameter names ("dec.0.norm1", "self_attn", "norm2", "cross_attn",
// "norm3", "mlp.fc1", "mlp.fc2"), the same computation (a test compares them).
LayerOut decoder_layer(Expr x, Expr memory, const std::string& name, const TransformerOptions& opt, Expr memory_mask) {
  Graph& g = *x.g;
  Scope scope(g, name);
  const std::int64_t T = x.dim(-2), D = x.dim(-1);
  const AttentionOptions self{.mask = causal_mask(g, T), .dropout = opt.dropout, .training = opt.training};
  const AttentionOptions cross{.mask = memory_mask, .dropout = opt.dropout, .training = opt.training};
  Expr h = layer_norm(x, "norm1", opt.eps, opt.bias);                                       // h: (B, Tq, D)
  x = x + multi_head_attention(h, opt.n_head, "self_attn", opt.bias, self, opt.resid_init).out;
  h = layer_norm(x, "norm2", opt.eps, opt.bias);
  AttentionResult c = cross_attention(h, memory, opt.n_head, "cross_attn", opt.bias, cross, opt.resid_init);
  x = x + c.out;                                                                             // x: (B, Tq, D)
  h = layer_norm(x, "norm3", opt.eps, opt.bias);
  Scope mlp(g, "mlp");
  h = gelu(linear(h, 4 * D, "fc1", opt.bias), opt.gelu);  // h: (B, Tq, 4D)
  return {x + linear(h, D, "fc2", opt.bias, opt.resid_init), c.weights};
}

void check_config(const Seq2SeqConfig& c) { Seq2SeqConfig::table().validate(&c, "seq2seq"); }

}  // namespace

Seq2Seq build_seq2seq(const Seq2SeqConfig& c, Expr src, Expr tgt_in, std::optional<Expr> tgt_out, bool training) {
  try {
    check_config(c);
  } catch (const InputError& e) {
    throw GraphError(e.what());
  }
  Graph& g = graph_of("build_seq2seq", Loc::current(), {src, tgt_in});
  if (src.rank() != 2 || tgt_in.rank() != 2 || src.dim(0) != tgt_in.dim(0) || src.dtype() != DType::i32 ||
      tgt_in.dtype() != DType::i32)
    throw GraphError(fmt::format("seq2seq: wants src (B, Ts) and tgt_in (B, Tt) i32 with the same B, got {} and {}",
                                 to_string(src.shape()), to_string(tgt_in.shape())));
  const std::int64_t Ts = src.dim(1), Tt = tgt_in.dim(1), D = c.d_model;
  if (Ts < 1 || Ts > c.max_src_len)
    throw GraphError(fmt::format("seq2seq: source length {} must be in [1, max_src_len = {}]", Ts, c.max_src_len));
  if (Tt < 1 || Tt > c.max_tgt_len)
    throw GraphError(fmt::format("seq2seq: target length {} must be in [1, max_tgt_len = {}]", Tt, c.max_tgt_len));
  const TransformerOptions to = layer_options(c, training);
  Seq2Seq m;
  Expr src_mask = padding_mask_from_ids(src, seq_pad);  // src_mask: (B, 1, Ts)
  Expr xs = embed(src, c.src_vocab, D, "src_embed", slice(positional_encoding(g, c.max_src_len, D), 0, 0, Ts));
  m.memory = encoder(xs, c.enc_layers, "enc", to, src_mask);  // memory: (B, Ts, D)
  Expr x = embed(tgt_in, c.tgt_vocab, D, "tgt_embed", slice(positional_encoding(g, c.max_tgt_len, D), 0, 0, Tt));
  {
    Scope dec(g, "dec");
    for (std::int64_t i = 0; i < c.dec_layers; ++i) {
      LayerOut l = decoder_layer(x, m.memory, std::to_string(i), to, src_mask);
      x = l.x;                         // x: (B, Tt, D)
      m.cross_weights = l.cross_weights;  // (B, H, Tt, Ts)
    }
    x = layer_norm(x, "norm_f", to.eps, to.bias);
  }
  m.logits = linear(x, c.tgt_vocab, "head");  // logits: (B, Tt, V)
  if (tgt_out) m.loss = cross_entropy(m.logits, *tgt_out, seq_pad);
  return m;
}

train::Model seq2seq_model(const Seq2SeqConfig& c) {
  check_config(c);
  return train::Model(
      "seq2seq",
      [c](train::ModelInputs& in) {
        std::optional<Expr> tgt_out;
        if (in.has("tgt_out")) tgt_out = in["tgt_out"];
        Seq2Seq m = build_seq2seq(c, in["src"], in["tgt_in"], tgt_out, in.training());
        return train::ModelOutputs{m.loss, {{"logits", m.logits}, {"cross_weights", m.cross_weights}}};
      },
      Seq2SeqConfig::table().to_json(&c));
}

std::vector<train::ParamInfo> seq2seq_params(const Seq2SeqConfig& c) {
  train::Model m = seq2seq_model(c);
  train::Batch b{{"src", Tensor({1, 1}, DType::i32)}, {"tgt_in", Tensor({1, 1}, DType::i32)}};
  return m.declare(b);
}

// ---- greedy decoding ---------------------------------------------------------------------

struct GreedyDecoder::Graphs {
  Seq2SeqConfig c;
  ParamStore* params;
  std::int64_t B, Ts, L, H, hs;
  Graph enc_g, step_g;
  std::vector<NodeId> mem_kv;          // encoder graph outputs: k0, v0, k1, v1, ...
  std::vector<NodeId> step_out;        // logits, next, then new k0, v0, k1, v1, ...
  std::unique_ptr<Executor> enc, step;
};

GreedyDecoder::GreedyDecoder(const Seq2SeqConfig& c, ParamStore& params, std::int64_t batch, std::int64_t src_len)
    : g_(std::make_unique<Graphs>()) {
  check_config(c);
  if (batch < 1 || src_len < 1 || src_len > c.max_src_len)
    throw InputError(fmt::format("GreedyDecoder: batch {} must be >= 1 and source length {} in [1, {}]", batch, src_len,
                                 c.max_src_len));
  Graphs& s = *g_;
  s.c = c, s.params = &params, s.B = batch, s.Ts = src_len, s.L = c.max_tgt_len;
  s.H = c.n_head, s.hs = c.d_model / c.n_head;
  const std::int64_t B = s.B, L = s.L, H = s.H, hs = s.hs, D = c.d_model;
  const TransformerOptions to = layer_options(c, false);

  // The encoder graph: memory, then each decoder layer's cross-attention keys and values.
  {
    Graph& g = s.enc_g;
    Expr src = input(g, "src", {B, s.Ts}, DType::i32);
    Expr xs = embed(src, c.src_vocab, D, "src_embed", slice(positional_encoding(g, c.max_src_len, D), 0, 0, s.Ts));
    Expr memory = encoder(xs, c.enc_layers, "enc", to, padding_mask_from_ids(src, seq_pad));  // (B, Ts, D)
    Scope dec(g, "dec");
    for (std::int64_t i = 0; i < c.dec_layers; ++i) {
      Scope layer(g, std::to_string(i));
      Scope cross(g, "cross_attn");
      s.mem_kv.push_back(split_heads(linear(memory, D, "key", to.bias), H).id);    // (B, H, Ts, hs)
      s.mem_kv.push_back(split_heads(linear(memory, D, "value", to.bias), H).id);  // (B, H, Ts, hs)
    }
  }
  // The one-step graph.
  {
    Graph& g = s.step_g;
    Expr token = input(g, "token", {B, 1}, DType::i32);
    Expr pos = input(g, "pos", {1}, DType::i32);
    Expr self_mask = input(g, "self_mask", {1, L + 1});  // (Tq 1, Tk L + 1): the filled slots and the new one
    Expr src = input(g, "src", {B, s.Ts}, DType::i32);
    Expr src_mask = padding_mask_from_ids(src, seq_pad);  // (B, 1, Ts)
    Expr x = embed(token, c.tgt_vocab, D, "tgt_embed", gather(positional_encoding(g, L, D), pos, 0));  // (B, 1, D)
    std::vector<Expr> new_kv, cache_kv, mem_kv;  // inputs are declared outside the scopes (names unprefixed)
    for (std::int64_t i = 0; i < c.dec_layers; ++i) {
      const std::string li = std::to_string(i);
      cache_kv.push_back(input(g, "cache_k." + li, {B, H, L, hs}));
      cache_kv.push_back(input(g, "cache_v." + li, {B, H, L, hs}));
      mem_kv.push_back(input(g, "mem_k." + li, {B, H, s.Ts, hs}));
      mem_kv.push_back(input(g, "mem_v." + li, {B, H, s.Ts, hs}));
    }
    {
      Scope dec(g, "dec");
      for (std::int64_t i = 0; i < c.dec_layers; ++i) {
        Scope layer(g, std::to_string(i));
        Expr cache_k = cache_kv[std::size_t(2 * i)], cache_v = cache_kv[std::size_t(2 * i + 1)];  // (B, H, L, hs)
        Expr mem_k = mem_kv[std::size_t(2 * i)], mem_v = mem_kv[std::size_t(2 * i + 1)];          // (B, H, Ts, hs)
        Expr h = layer_norm(x, "norm1", to.eps, to.bias);  // h: (B, 1, D)
        {
          Scope sa(g, "self_attn");
          Expr q = split_heads(linear(h, D, "query", to.bias), H);  // q: (B, H, 1, hs)
          Expr k = split_heads(linear(h, D, "key", to.bias), H);    // k: (B, H, 1, hs)
          Expr v = split_heads(linear(h, D, "value", to.bias), H);  // v: (B, H, 1, hs)
          new_kv.push_back(k), new_kv.push_back(v);
          AttentionResult r = attention(q, concat({cache_k, k}, 2), concat({cache_v, v}, 2), {.mask = self_mask});
          x = x + linear(merge_heads(r.out), D, "proj", to.bias, to.resid_init);  // x: (B, 1, D)
        }
        h = layer_norm(x, "norm2", to.eps, to.bias);
        {
          Scope ca(g, "cross_attn");
          Expr q = split_heads(linear(h, D, "query", to.bias), H);  // q: (B, H, 1, hs)
          AttentionResult r = attention(q, mem_k, mem_v, {.mask = src_mask});
          x = x + linear(merge_heads(r.out), D, "proj", to.bias, to.resid_init);
        }
        h = layer_norm(x, "norm3", to.eps, to.bias);
        Scope mlp(g, "mlp");
        h = gelu(linear(h, 4 * D, "fc1", to.bias), to.gelu);  // h: (B, 1, 4D)
        x = x + linear(h, D, "fc2", to.bias, to.resid_init);
      }
      x = layer_norm(x, "norm_f", to.eps, to.bias);
    }
    Expr logits = linear(x, c.tgt_vocab, "head");  // logits: (B, 1, V)
    s.step_out = {logits.id, argmax(logits, -1).id};
    for (Expr e : new_kv) s.step_out.push_back(e.id);
  }
  s.enc = std::make_unique<Executor>(s.enc_g, s.mem_kv, params);
  s.step = std::make_unique<Executor>(s.step_g, s.step_out, params);
}

GreedyDecoder::~GreedyDecoder() = default;
GreedyDecoder::GreedyDecoder(GreedyDecoder&&) noexcept = default;

std::vector<std::vector<std::int32_t>> GreedyDecoder::decode(std::span<const std::int32_t> src,
                                                             std::vector<Tensor>* step_logits) {
  Graphs& s = *g_;
  const std::int64_t B = s.B, L = s.L, H = s.H, hs = s.hs;
  if (std::int64_t(src.size()) != B * s.Ts)
    throw InputError(fmt::format("GreedyDecoder: src has {} ids, want B {} x Ts {}", src.size(), B, s.Ts));
  s.enc->set_input("src", src);
  s.enc->run();
  s.step->set_input("src", src);
  for (std::int64_t i = 0; i < s.c.dec_layers; ++i) {
    s.step->set_input("mem_k." + std::to_string(i), s.enc->get(s.mem_kv[2 * i]));
    s.step->set_input("mem_v." + std::to_string(i), s.enc->get(s.mem_kv[2 * i + 1]));
  }
  // The caches: (B, H, L, hs) per layer, slot t holds the key (value) of target position t.
  std::vector<Tensor> cache(std::size_t(2 * s.c.dec_layers), Tensor({B, H, L, hs}));
  std::vector<float> mask(std::size_t(L + 1), 0.f);
  mask[std::size_t(L)] = 1.f;  // the new token sees itself
  std::vector<std::int32_t> token(std::size_t(B), seq_bos);
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(B));
  std::vector<char> done(std::size_t(B), 0);
  if (step_logits) step_logits->clear();
  for (std::int64_t t = 0; t < L; ++t) {
    const std::int32_t pos = std::int32_t(t);
    s.step->set_input("token", std::span<const std::int32_t>(token));
    s.step->set_input("pos", std::span<const std::int32_t>(&pos, 1));
    s.step->set_input("self_mask", std::span<const float>(mask));
    for (std::int64_t i = 0; i < s.c.dec_layers; ++i) {
      s.step->set_input("cache_k." + std::to_string(i), cache[std::size_t(2 * i)]);
      s.step->set_input("cache_v." + std::to_string(i), cache[std::size_t(2 * i + 1)]);
    }
    s.step->run();
    if (step_logits) step_logits->push_back(s.step->get(s.step_out[0]));
    const std::int32_t* next = s.step->value(s.step_out[1]).i();  // next: (B, 1)
    for (std::int64_t b = 0; b < B; ++b) {
      token[std::size_t(b)] = next[b];
      if (done[std::size_t(b)]) continue;
      if (next[b] == seq_eos || t == L - 1) done[std::size_t(b)] = 1;
      if (next[b] != seq_eos) out[std::size_t(b)].push_back(next[b]);
    }
    if (std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
    // The new rows (B, H, 1, hs) into slot t of each cache.
    for (std::size_t j = 0; j < cache.size(); ++j) {
      const float* row = s.step->value(s.step_out[2 + j]).f();
      float* dst = cache[j].f();
      for (std::int64_t bh = 0; bh < B * H; ++bh) std::copy(row + bh * hs, row + (bh + 1) * hs, dst + (bh * L + t) * hs);
    }
    mask[std::size_t(t)] = 1.f;
  }
  return out;
}

std::vector<std::vector<std::int32_t>> greedy_decode_recompute(const Seq2SeqConfig& c, ParamStore& params,
                                                               std::span<const std::int32_t> src, std::int64_t B,
                                                               std::int64_t Ts, std::vector<Tensor>* step_logits) {
  if (std::int64_t(src.size()) != B * Ts)
    throw InputError(fmt::format("greedy_decode_recompute: src has {} ids, want B {} x Ts {}", src.size(), B, Ts));
  const std::int64_t L = c.max_tgt_len, V = c.tgt_vocab;
  std::vector<std::vector<std::int32_t>> prefix(static_cast<std::size_t>(B), {seq_bos}), out(static_cast<std::size_t>(B));
  std::vector<char> done(std::size_t(B), 0);
  if (step_logits) step_logits->clear();
  for (std::int64_t t = 0; t < L; ++t) {
    Graph g;
    Expr s = input(g, "src", {B, Ts}, DType::i32);
    Expr tin = input(g, "tgt_in", {B, t + 1}, DType::i32);
    Seq2Seq m = build_seq2seq(c, s, tin, std::nullopt, false);
    Expr last = slice(m.logits, 1, t, t + 1);  // last: (B, 1, V)
    Executor ex(g, {last.id}, params);
    std::vector<std::int32_t> tin_ids;
    for (auto& p : prefix) tin_ids.insert(tin_ids.end(), p.begin(), p.end());
    ex.set_input("src", src);
    ex.set_input("tgt_in", std::span<const std::int32_t>(tin_ids));
    ex.run();
    if (step_logits) step_logits->push_back(ex.get(last.id));
    const float* lg = ex.value(last.id).f();
    for (std::int64_t b = 0; b < B; ++b) {
      const float* row = lg + b * V;
      const std::int32_t next = std::int32_t(std::max_element(row, row + V) - row);
      prefix[std::size_t(b)].push_back(next);
      if (done[std::size_t(b)]) continue;
      if (next == seq_eos || t == L - 1) done[std::size_t(b)] = 1;
      if (next != seq_eos) out[std::size_t(b)].push_back(next);
    }
    if (std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
  }
  return out;
}

// ---- the job -----------------------------------------------------------------------------

const train::OptionTable<Seq2SeqOptions>& Seq2SeqOptions::table() {
  using O = Seq2SeqOptions;
  using train::opt;
  static const train::OptionTable<O> t{
      {train::choice("task", &O::task, {{"numbers", O::Task::numbers}, {"reverse", O::Task::reverse}},
                     "numbers: English number words to digits; reverse: reverse a sequence"),
       opt("batch_size", &O::batch_size, "Examples per step").at_least(1).at_most(1 << 20),
       opt("held_out", &O::held_out, "Held-out examples, never trained on").at_least(1).at_most(100000),
       opt("eval_examples", &O::eval_examples, "Held-out examples decoded at each evaluation (all at the end)")
           .at_least(1).at_most(100000),
       opt("data_seed", &O::data_seed, "Seed of the examples and the held-out split").at_least(0),
       opt("show", &O::show, "Translations printed at the end").at_least(0).at_most(1000),
       opt("symbols", &O::symbols, "Reversal task: alphabet size").at_least(2).at_most(26),
       opt("min_len", &O::min_len, "Reversal task: shortest sequence").at_least(1).at_most(64),
       opt("max_len", &O::max_len, "Reversal task: longest sequence").at_least(1).at_most(64)},
      [](const O& o) -> std::pair<std::string, std::string> {
        if (o.max_len < o.min_len) return {"max_len", fmt::format("must be >= min_len {}, got {}", o.min_len, o.max_len)};
        return {};
      }};
  return t;
}

train::TrainOptions seq2seq_train_defaults() {
  train::TrainOptions t;
  t.out_dir = "runs/seq2seq";
  t.steps = 1500;
  t.warmup = 100;
  t.lr = 2e-3;
  t.min_lr = 1e-4;
  t.beta2 = 0.99;
  t.weight_decay = 0.01;
  t.clip = 1.0;
  t.eval_interval = 250;
  t.eval_iters = 4;
  t.final_eval_iters = 4;  // the held-out examples are 4 batches of 250
  return t;
}

Seq2SeqConfig seq2seq_defaults() { return Seq2SeqConfig{}; }

Seq2SeqResult run_seq2seq(const Seq2SeqOptions& opts, Seq2SeqConfig model, const train::TrainOptions& t,
                          std::FILE* out) {
  Seq2SeqOptions o = opts;
  Seq2SeqOptions::table().validate(&o, "options");
  const Seq2SeqTask task = o.task == Seq2SeqOptions::Task::numbers
                               ? number_task(std::uint64_t(o.data_seed), o.held_out)
                               : reverse_task(std::uint64_t(o.data_seed), o.held_out, o.symbols, o.min_len, o.max_len);
  model.src_vocab = task.src_vocab, model.tgt_vocab = task.tgt_vocab;
  model.max_src_len = task.src_len, model.max_tgt_len = task.tgt_len;
  train::Model m = seq2seq_model(model);
  const std::span<const Example> held(task.held_out);
  const std::int64_t n_eval = std::min<std::int64_t>(o.eval_examples, std::int64_t(held.size()));

  // The final evaluation decodes every held-out example, the ones before a subset; fit()
  // does not say which evaluation is the last, so the data source counts its steps.
  std::int64_t start = 0, drawn = 0;
  const std::string ck_path = t.out_dir + "/checkpoint.safetensors";
  if (t.resume && std::filesystem::exists(ck_path)) {
    train::Checkpoint ck = train::load_checkpoint(ck_path);
    if (ck.user.count("task") && ck.user["task"] != task.name)
      throw InputError(fmt::format("{}: the checkpoint was trained on task {}, not '{}'", io::cut(ck_path, 80),
                                   io::in_quotes(ck.user["task"], 40), task.name));
    start = ck.step;
  }
  train::DataSource src;
  src.train = [&](std::mt19937_64& rng) {
    ++drawn;
    std::vector<Example> ex;
    for (std::int64_t i = 0; i < o.batch_size; ++i) ex.push_back(task.draw_train(rng));
    return make_batch(task, ex);
  };
  const std::int64_t val_chunk = std::min<std::int64_t>(250, std::int64_t(held.size()));
  const std::int64_t n_val = (std::int64_t(held.size()) + val_chunk - 1) / val_chunk;
  src.val = [&](std::int64_t i) {  // the held-out examples in chunks, cycling
    const std::size_t at = std::size_t((i % n_val) * val_chunk);
    return make_batch(task, held.subspan(at, std::min<std::size_t>(std::size_t(val_chunk), held.size() - at)));
  };
  src.metrics = [&](train::Model& mm) -> std::vector<std::pair<std::string, double>> {
    const bool last = start + drawn >= t.steps;
    const double em = exact_match(model, mm.params(), task, last ? held : held.first(std::size_t(n_eval)));
    std::vector<std::pair<std::string, double>> r{{"exact_match", em}};
    if (o.task == Seq2SeqOptions::Task::reverse)
      r.push_back({"alignment", reverse_alignment(mm, task, last ? held : held.first(std::size_t(n_eval)))});
    return r;
  };
  src.items = [](const train::Batch& b) { return b.at("src").shape()[0]; };
  src.loss_terms = [](const train::Batch& b) {  // the loss is a mean over the target tokens that are not padding
    const Tensor& t = b.at("tgt_out");
    return double(std::count_if(t.i(), t.i() + t.numel(), [](std::int32_t v) { return v != seq_pad; }));
  };

  fmt::print(out, "gradgraph train-seq2seq: task {} ({} held-out examples), d_model {}, {} heads, {}+{} layers, batch {}\n",
             task.name, held.size(), model.d_model, model.n_head, model.enc_layers, model.dec_layers, o.batch_size);
  train::RunInfo info;
  info.title = fmt::format("gradgraph encoder-decoder on {}", task.name);
  info.metadata["task"] = task.name;
  info.metadata["job"] = "seq2seq";
  Seq2SeqResult r;
  r.fit = train::fit(m, src, t, info, out);

  std::vector<std::vector<std::int32_t>> decoded;
  const auto t0 = std::chrono::steady_clock::now();
  r.exact_match = exact_match(model, m.params(), task, held, 250, &decoded);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The first few held-out examples, then the first few mistakes among the rest.
  std::int64_t shown_wrong = 0;
  for (std::size_t i = 0; i < held.size(); ++i) {
    const Example& e = held[i];
    const auto& d = decoded[i];
    const bool first = std::int64_t(i) < o.show, wrong = d != e.tgt;
    if (!first && !(wrong && shown_wrong < o.show)) continue;
    shown_wrong += !first && wrong;
    fmt::print(out, "  {:<64} -> {:<9} target {:<9} {}\n", task.show_src(e.src), task.show_tgt(d), task.show_tgt(e.tgt),
               wrong ? "WRONG" : "ok");
  }
  fmt::print(out, "greedy decoding (KV cache) of {} held-out examples in {:.2f} s\n", held.size(), secs);
  fmt::print(out, "exact match {:.1f}% ({} held-out examples)\n", 100 * r.exact_match, held.size());
  if (o.task == Seq2SeqOptions::Task::reverse) {
    r.alignment = reverse_alignment(m, task, held);
    fmt::print(out, "cross-attention alignment {:.1f}% (decoder steps whose largest last-layer weight, averaged over "
                    "heads, falls on the mirrored source position)\n",
               100 * *r.alignment);
  }
  std::fflush(out);
  return r;
}

}  // namespace gg::models
