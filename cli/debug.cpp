// gradcheck, hvp and attention: each builds the reference GPT, reads or makes its weights and
// batch, and prints one line per parameter (or writes SVG files).
#include "cli/debug.h"


#include <fmt/format.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "cli/input_file.h"
#include "autodiff/grad.h"
#include "autodiff/grad_stats.h"
#include "autodiff/gradcheck.h"
#include "ops/cpu/bf16.h"
#include "autodiff/hvp.h"
#include "io/message.h"
#include "io/safetensors.h"
#include "models/attention_maps.h"
#include "models/char_lm.h"
#include "models/gpt.h"
#include "ops/ir/eval_f64.h"
#include "train/checkpoint.h"

namespace gg::cli {
namespace {

using train::InputError;

// The model's parameters (from --weights, or the initializers with `seed`) and one batch
// (from --batch, or uniform random tokens and targets with `seed`).
struct Setup {
  models::GptConfig c;
  train::Batch batch;
  ParamStore params;
  std::string described;  // "2x8 batch (random, seed 1), weights from the initializers (seed 1)"
};

Setup setup(const std::string& config, const std::string& weights, const std::string& batch, std::int64_t B,
            std::uint64_t seed) {
  Setup s;
  s.c = models::load_gpt_config(config);
  if (!batch.empty()) {
    s.batch = models::read_gpt_batches(io::read_safetensors(batch), s.c, /*stacked=*/false)[0];
  } else {
    const std::int64_t T = s.c.block_size;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int32_t> tok(0, std::int32_t(s.c.vocab_size - 1));
    std::vector<std::int32_t> x(std::size_t(B * T)), y(std::size_t(B * T));
    for (auto& v : x) v = tok(rng);
    for (auto& v : y) v = tok(rng);
    s.batch = {{"tokens", Tensor::i32({B, T}, x)}, {"targets", Tensor::i32({B, T}, y)}};
  }
  const Shape& bt = s.batch.at("tokens").shape();
  s.described = fmt::format("{}x{} batch ({}), weights {}", bt[0], bt[1],
                            batch.empty() ? fmt::format("random, seed {}", seed) : batch,
                            weights.empty() ? fmt::format("from the initializers (seed {})", seed) : weights);
  if (!weights.empty()) {
    train::load_params(s.params, train::read_tensors(weights), models::gpt_params(s.c), weights);
    // Differences of NaN are NaN: no check could pass, so say why before checking.
    for (const train::ParamInfo& p : models::gpt_params(s.c)) {
      const Tensor& t = s.params.at(p.name);
      std::int64_t nan = 0, inf = 0;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        nan += std::isnan(t.f()[i]);
        inf += std::isinf(t.f()[i]);
      }
      if (nan + inf > 0)
        throw InputError(fmt::format("--weights {}: parameter '{}' holds {} NaN and {} Inf values; the checks need "
                                     "finite weights", io::cut(weights, 80), io::cut(p.name, 60), nan, inf));
    }
  }
  return s;
}

// The relative error gradcheck accepts by default. In f32 the gradient graph's rounding is
// far below it. With bf16 products each product's operands are rounded to 8 significant
// bits (unit roundoff u = 2^-8), so each term of a sum is off by up to 2u = 2^-7 of its
// size, about 0.8%: an error relative to the terms, not to a coordinate whose terms cancel,
// so in bf16 the error is taken relative to the parameter's largest gradient as well
// (ParamCheckOptions::relative_to_largest). A gradient passes through several such
// products (its layer's forward and backward ones, every later layer's backward ones),
// whose errors add up; 5% is a few times what the reference config measures
// (docs/precision.md), and a wrong gradient rule is off by O(1). The f64 run of the same
// gradient graph computes the products exactly: its column stays near 1e-8 either way.
constexpr double kRtolF32 = 1e-3, kRtolBf16 = 5e-2;

int run_gradcheck(const DebugCommands& d) {
  const auto& a = d.gradcheck;
  Setup s = setup(a.config, a.weights, a.batch, a.batch_size, a.seed);
  const Shape& bt = s.batch.at("tokens").shape();
  Graph g;
  const bool bf16 = a.precision == "bf16";
  const double rtol = a.rtol > 0 ? a.rtol : bf16 ? kRtolBf16 : kRtolF32;
  Bf16Products precision(g, bf16);
  models::Gpt m = models::build_gpt(g, s.c, bt[0], bt[1], /*with_loss=*/true, /*training=*/false);
  if (a.weights.empty()) s.params.init_missing(g, a.seed);
  std::vector<NodeId> ps;
  for (const dsl::Expr& p : m.params) ps.push_back(p.id);
  std::map<std::string, std::string> zero;
  for (const ZeroGrad& z : structurally_zero_grads(g, m.loss.id, ps)) zero[z.name] = z.reason;
  ParamCheckOptions o;
  o.max_elements = a.samples;
  o.rtol = rtol;
  o.relative_to_largest = bf16;
  std::vector<ParamCheck> r = gradcheck_params(g, m.loss.id, ps, s.params, s.batch, o);
  fmt::print("gradcheck {}: {}\n", a.config, s.described);
  if (bf16)
    fmt::print("precision bf16: the executor's products take bf16 operands ({}); the f64 execution and the f64 "
               "graph compute them exactly, so 'worst rel err' is the bf16 rounding's (accepted up to {:g})\n",
               bf16_path_name(), rtol);
  fmt::print("f32 gradients vs central differences of an f64 execution of the same graph, up to {} coordinates per "
             "parameter; rel err = |a - n| / max(|a|, |n|, {:g}); 'f64 graph': the gradient graph itself run in f64\n",
             a.samples, o.floor);
  fmt::print("{:<28} {:<10} {:>7} {:>13} {:>13} {:>13} {:>12}\n", "parameter", "shape", "checked", "worst rel err",
             "analytic", "numeric", "f64 graph");
  int bad = 0;
  double worst = 0;
  for (const ParamCheck& p : r) {
    // With bf16 products a structurally zero gradient (exactly 0) comes out as rounding
    // noise, which no relative error can judge: it is listed, and the f64 graph checks it.
    const bool noise = bf16 && zero.count(p.name) && p.worst_rel_f64 <= kRtolF32;
    bad += !p.ok && !noise;
    if (!noise) worst = std::max(worst, p.worst_rel);
    fmt::print("{:<28} {:<10} {:>7} {:>13.2e} {:>13.5e} {:>13.5e} {:>12.2e}{}{}\n", p.name, to_string(p.shape),
               p.checked, p.worst_rel, p.analytic, p.numeric, p.worst_rel_f64,
               p.ok ? "" : noise ? "  (bf16 rounding noise)" : "  FAIL", zero.count(p.name) ? "  (structurally zero)" : "");
  }
  for (auto& [name, why] : zero) fmt::print("structurally zero: {}: {}\n", name, why);
  if (bad) {
    fmt::print("{} of {} parameters disagree (rel err > {:g})\n", bad, r.size(), rtol);
    // The verdict on stderr too, one line: a script sees why it failed without the table.
    throw InputError(fmt::format("gradcheck: {} of {} parameters disagree with the f64 differences (rel err > {:g}; "
                                 "the table is on stdout)", bad, r.size(), rtol));
  }
  fmt::print("all {} parameters agree (worst rel err {:.2e} <= {:g})\n", r.size(), worst, rtol);
  return 0;
}

int run_hvp(const DebugCommands& d) {
  const auto& a = d.hvp;
  Setup s = setup(a.config, a.weights, a.batch, a.batch_size, a.seed);
  const Shape& bt = s.batch.at("tokens").shape();
  Graph g;
  // Attention as its composition at any length: the fused pair has no second derivatives.
  FusedAttention composed(g, false);
  models::Gpt m = models::build_gpt(g, s.c, bt[0], bt[1], /*with_loss=*/true, /*training=*/false);
  if (a.weights.empty()) s.params.init_missing(g, a.seed);
  std::vector<NodeId> ps, vs;
  std::map<std::string, Tensor> feeds = s.batch;
  std::mt19937_64 rng(a.seed + 1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const dsl::Expr& p : m.params) {
    ps.push_back(p.id);
    const std::string name = "v." + p.name();
    vs.push_back(op::input(g, name, p.shape()));
    Tensor v(p.shape());
    for (float& x : v.fspan()) x = normal(rng);
    feeds[name] = v;
  }
  std::vector<NodeId> hv = hvp(g, m.loss.id, ps, vs);
  std::vector<NodeId> gs = grad(g, m.loss.id, ps);
  Executor ex(g, hv, s.params);
  for (auto& [name, t] : feeds)
    if (ex.has_input(name)) ex.set_input(name, t);
  ex.run();
  // The check: central differences of the f64 gradient along v.
  const double eps = 1e-4;
  F64Leaves plus = f64_leaves(s.params, feeds), minus = plus;
  for (const dsl::Expr& p : m.params) {
    const std::vector<double>& v = plus.at("v." + p.name()).v;
    for (std::size_t i = 0; i < v.size(); ++i) {
      plus.at(p.name()).v[i] += eps * v[i];
      minus.at(p.name()).v[i] -= eps * v[i];
    }
  }
  std::vector<F64Value> gp = eval_f64(g, gs, plus), gm = eval_f64(g, gs, minus);
  fmt::print("hvp {}: {}; v ~ N(0, 1) (seed {})\n", a.config, s.described, a.seed + 1);
  fmt::print("H v built as graph (grad of grad . v: {} nodes) vs central differences of the f64 gradient along v "
             "(eps {:g})\n", g.size(), eps);
  fmt::print("{:<28} {:<10} {:>12} {:>12}\n", "parameter", "shape", "|H v|", "rel err");
  double vhv = 0, worst = 0, total_fd = 0;
  std::vector<std::array<double, 3>> rows;  // |H v|, |H v - fd|, |fd| per parameter
  for (std::size_t k = 0; k < ps.size(); ++k) {
    Tensor h = ex.get(hv[k]);
    const std::vector<double>& v = plus.at("v." + m.params[k].name()).v;
    double nh = 0, diff = 0, nfd = 0;
    for (std::int64_t i = 0; i < h.numel(); ++i) {
      const double fd = (gp[k].v[std::size_t(i)] - gm[k].v[std::size_t(i)]) / (2 * eps);
      nh += double(h.f()[i]) * h.f()[i];
      nfd += fd * fd;
      diff += (fd - h.f()[i]) * (fd - h.f()[i]);
      vhv += double(h.f()[i]) * v[std::size_t(i)];
    }
    rows.push_back({std::sqrt(nh), std::sqrt(diff), std::sqrt(nfd)});
    total_fd += nfd;
  }
  // Relative to the parameter's own |fd|, or to a thousandth of the whole |fd| when smaller
  // (a structurally zero block, like the key bias, has only rounding on both sides).
  for (std::size_t k = 0; k < ps.size(); ++k) {
    const double rel = rows[k][1] / std::max({rows[k][2], 1e-3 * std::sqrt(total_fd), 1e-12});
    worst = std::max(worst, rel);
    fmt::print("{:<28} {:<10} {:>12.4e} {:>12.2e}\n", m.params[k].name(), to_string(m.params[k].shape()), rows[k][0],
               rel);
  }
  fmt::print("v . H v = {:.6g}; worst rel err {:.2e}\n", vhv, worst);
  if (!(worst <= 1e-2))
    throw InputError(fmt::format("hvp: H v disagrees with the differences of the gradient (worst rel err {:.2e} > 1e-2; "
                                 "the table is on stdout)", worst));
  return 0;
}

int run_attention(const DebugCommands& d) {
  const auto& a = d.attention;
  const bool seq2seq = train::load_checkpoint(a.checkpoint).model_kind == "seq2seq";
  if (seq2seq && !a.prompt.empty())
    throw InputError(fmt::format("--prompt: {} is an encoder-decoder checkpoint; give --source", a.checkpoint));
  if (!seq2seq && !a.source.empty())
    throw InputError(fmt::format("--source: {} is not an encoder-decoder checkpoint; give --prompt", a.checkpoint));
  if (seq2seq ? a.source.empty() : a.prompt.empty())
    throw InputError(fmt::format("{}: the text to look at is missing", seq2seq ? "--source" : "--prompt"));
  if (a.out.empty()) throw InputError("--out: empty; give a directory for the SVG files");
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec)
    throw InputError(fmt::format("--out {}: cannot create the directory: {}", io::in_quotes(a.out, 80), ec.message()));
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::path(a.out) / name).string();
    std::ofstream f(path);
    if (!(f << text)) throw InputError(fmt::format("{}: cannot write", path));
    return path;
  };
  if (seq2seq) {
    const models::Seq2SeqCheckpoint ck = models::load_seq2seq(a.checkpoint);
    const models::CrossAttentionMaps m = models::cross_attention_maps(ck, a.source);
    std::string out;
    for (const std::string& r : m.rows) out += (out.empty() ? "" : " ") + r;
    for (std::int64_t h = 0; h < m.n_head; ++h) write(fmt::format("cross_attention_h{}.svg", h), models::cross_attention_svg(m, h));
    fmt::print("task {}: {} source tokens -> {} decoder steps ({}); last decoder layer's cross-attention, {} heads: "
               "wrote {} files cross_attention_h<H>.svg in {}\n",
               ck.task, m.cols.size(), m.rows.size(), out, m.n_head, m.n_head, a.out);
    return 0;
  }
  models::CharLmCheckpoint ck = models::load_char_lm(a.checkpoint);
  models::AttentionMaps m = models::attention_maps(ck.config, ck.params, ck.vocab, a.prompt);
  for (std::int64_t l = 0; l < m.n_layer; ++l)
    for (std::int64_t h = 0; h < m.n_head; ++h) write(fmt::format("attention_l{}h{}.svg", l, h), models::attention_svg(m, l, h));
  const std::string all = write("attention.svg", models::attention_svg(m));
  fmt::print("{} characters{}, {} layers x {} heads: wrote {} and {} per-head files attention_l<L>h<H>.svg in {}\n", m.T,
             std::int64_t(a.prompt.size()) > m.T
                 ? fmt::format(" (the prompt's last; it has {}, the context {}, a heatmap at most {})", a.prompt.size(),
                               ck.config.block_size, models::kMaxAttentionChars)
                 : "",
             m.n_layer, m.n_head, all, m.n_layer * m.n_head, a.out);
  return 0;
}

}  // namespace

namespace {
// The options gradcheck and hvp share: the model, its weights and one batch, given or drawn
// with --seed (`seed_help` says what else the seed draws); then `more` of the command's own.
template <class S>
std::vector<train::Option> model_and_batch(const std::string& seed_help, std::vector<train::Option> more = {}) {
  using train::opt;
  std::vector<train::Option> o;
  o.push_back(opt("config", &S::config, "Model config JSON").must_give().reads_file());
  o.push_back(opt("weights", &S::weights, "Weights (safetensors; default: the initializers with --seed)").reads_file());
  o.push_back(opt("batch", &S::batch, "tokens and targets [B, T] (safetensors; default: random with --seed)").reads_file());
  o.push_back(opt("batch_size", &S::batch_size, "Rows of the random batch").at_least(1).at_most(64));
  o.push_back(opt("seed", &S::seed, seed_help));
  for (train::Option& m : more) o.push_back(std::move(m));
  return o;
}
}  // namespace

const train::OptionTable<GradcheckOptions>& GradcheckOptions::table() {
  using train::opt;
  using G = GradcheckOptions;
  static const train::OptionTable<G> t{model_and_batch<G>(
      "Seed of the initial weights and the random batch",
      {opt("samples", &G::samples, "Coordinates checked per parameter (plus its largest gradient)").at_least(1).at_most(1 << 20),
       opt("rtol", &G::rtol, "Largest relative error accepted (0: 1e-3 in f32, 5e-2 with --precision bf16)")
           .at_least(0)
           .at_most(1),
       train::precision_option(&G::precision)})};
  return t;
}

const train::OptionTable<HvpOptions>& HvpOptions::table() {
  static const train::OptionTable<HvpOptions> t{model_and_batch<HvpOptions>("Seed of the weights, the batch and v")};
  return t;
}

const train::OptionTable<AttentionOptions>& AttentionOptions::table() {
  using train::opt;
  using A = AttentionOptions;
  static const train::OptionTable<A> t{{
      opt("checkpoint", &A::checkpoint, "Checkpoint written by train, or by train-seq2seq").must_give().reads_file(),
      opt("prompt", &A::prompt, "char-LM: text to look at (its last block_size characters, at most 256)"),
      opt("source", &A::source, "Encoder-decoder: source to translate (\"three hundred and seven\", \"abcd\")"),
      opt("out", &A::out, "Directory for the SVG files")}};
  return t;
}

void DebugCommands::add_to(CLI::App& app) {
  gradcheck_cmd = app.add_subcommand(
      "gradcheck", "Check every parameter's gradient against central differences of an f64 execution of the model");
  gradcheck_flags.add_to(gradcheck_cmd);
  hvp_cmd = app.add_subcommand("hvp", "A Hessian-vector product of the model's loss, built as graph and checked");
  hvp_flags.add_to(hvp_cmd);
  attention_cmd = app.add_subcommand("attention", "SVG heatmaps of attention weights: every layer and head of a char-LM on --prompt, or "
                               "the last decoder layer's cross-attention of an encoder-decoder on --source");
  attention_flags.add_to(attention_cmd);
}

int DebugCommands::run(bool check_only) {
  auto go = [&](TableFlags& flags, auto&& work) {
    flags.apply();
    return check_only ? 0 : work();
  };
  if (gradcheck_cmd && *gradcheck_cmd) return go(gradcheck_flags, [&] { return run_gradcheck(*this); });
  if (hvp_cmd && *hvp_cmd) return go(hvp_flags, [&] { return run_hvp(*this); });
  if (attention_cmd && *attention_cmd) return go(attention_flags, [&] { return run_attention(*this); });
  return -1;
}

}  // namespace gg::cli
