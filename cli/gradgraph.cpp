// The `gradgraph` command: train (the main job), train-vit (a Vision Transformer on the 8x8
// digits), train-seq2seq (the encoder-decoder), sample, grad and replay (the reference
// model's command-line contract, docs/reference-model.md), inspect, gradcheck, hvp and
// attention (look inside a model and its gradients), bench (speed against the peak and PyTorch). Every user mistake ends in one line on stderr and a
// non-zero exit.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "cli/app.h"
#include "cli/bench.h"
#include "cli/debug.h"
#include "cli/input_file.h"
#include "cli/table_flags.h"
#include "io/message.h"
#include "io/safetensors.h"
#include "models/char_lm.h"
#include "models/gpt.h"
#include "models/seq2seq.h"
#include "models/vit.h"
#include "ops/passes/simplify.h"
#include "ops/cpu/threads.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/optim.h"
#include "train/replay.h"
#include "train/trainer.h"

using namespace gg;
using gg::train::InputError;

namespace {

// ---- grad ----------------------------------------------------------------------------
struct GradCmd {
  std::string config, weights, batch, out, precision = "f32";
  bool detect_anomaly = false;
  static const train::OptionTable<GradCmd>& table() {
    using train::opt;
    static const train::OptionTable<GradCmd> t{{
        opt("config", &GradCmd::config, "Model config JSON").must_give().reads_file(),
        opt("weights", &GradCmd::weights, "Weights (safetensors)").must_give().reads_file(),
        opt("batch", &GradCmd::batch, "tokens and targets [B, T] (safetensors)").must_give().reads_file(),
        opt("out", &GradCmd::out, "Output safetensors").must_give().writes_file(),
        opt("detect_anomaly", &GradCmd::detect_anomaly,
            "Stop at the first node, forward or backward, that makes a NaN or Inf, naming it"),
        train::precision_option(&GradCmd::precision)}};
    return t;
  }
};

int run_grad(const GradCmd& a) {
  models::GptConfig c = models::load_gpt_config(a.config);
  train::Model m = models::gpt_model(c);
  m.set_bf16_products(a.precision == "bf16");
  train::load_params(m.params(), train::read_tensors(a.weights), models::gpt_params(c), a.weights);
  std::vector<train::Batch> b = models::read_gpt_batches(io::read_safetensors(a.batch), c, /*stacked=*/false);
  if (a.detect_anomaly) m.plan_for(b[0], /*training=*/true).set_detect_anomaly(true);
  const double loss = m.forward_backward(b[0]);
  io::File out;
  out.add_f32("loss", {}, {float(loss)});
  View lg = m.train_output("logits");
  out.add_f32("logits", *lg.shape, std::vector<float>(lg.f(), lg.f() + lg.numel()));
  std::vector<ParamGrad> grads = m.grads();
  for (const ParamGrad& pg : grads)
    out.add_f32("grad." + pg.name, pg.param->shape(), std::vector<float>(pg.grad.begin(), pg.grad.end()));
  io::write_safetensors(a.out, out);
  fmt::print("loss {:.6f}; wrote {} ({} gradients)\n", loss, a.out, grads.size());
  return 0;
}

// ---- replay --------------------------------------------------------------------------
struct ReplayCmd {
  std::string config, weights, batches, optimizer, out, betas = "0.9,0.999", precision = "f32";
  double lr = 0, momentum = 0, eps = 1e-8, weight_decay = 0.01, clip = 0;
  bool allow_nonfinite = false, detect_anomaly = false;

  // --betas B1,B2 as two numbers, or nothing.
  std::optional<std::pair<double, double>> parsed_betas() const {
    double b1 = 0, b2 = 0;
    char comma = 0;
    std::istringstream bs(betas);
    if (!(bs >> b1 >> comma >> b2) || comma != ',' || !bs.eof()) return std::nullopt;
    return std::pair{b1, b2};
  }
  static const train::OptionTable<ReplayCmd>& table() {
    using train::opt;
    using R = ReplayCmd;
    static const train::OptionTable<ReplayCmd> t{
        {opt("config", &R::config, "Model config JSON").must_give().reads_file(),
         opt("weights", &R::weights, "Initial weights (safetensors)").must_give().reads_file(),
         opt("batches", &R::batches, "tokens and targets [N, B, T] (safetensors)").must_give().reads_file(),
         train::choice("optimizer", &R::optimizer, {{"sgd", "sgd"}, {"adamw", "adamw"}}, "The optimizer").must_give(),
         opt("lr", &R::lr, "Learning rate (constant)").must_give(),
         opt("momentum", &R::momentum, "SGD momentum").at_least(0),
         opt("betas", &R::betas, "AdamW betas B1,B2, each in [0, 1)"),
         opt("eps", &R::eps, "AdamW epsilon").at_least(0),
         opt("weight_decay", &R::weight_decay, "AdamW weight decay").at_least(0),
         opt("clip", &R::clip, "Clip the global gradient norm (0 = off)").at_least(0),
         opt("out", &R::out, "Output safetensors").must_give().writes_file(),
         opt("allow_nonfinite", &R::allow_nonfinite, "Write the parameters even when some are NaN or infinite"),
         opt("detect_anomaly", &R::detect_anomaly,
             "Stop at the first node, forward or backward, that makes a NaN or Inf, naming it"),
         train::precision_option(&R::precision)},
        [](const ReplayCmd& r) -> std::pair<std::string, std::string> {
          const auto b = r.parsed_betas();
          if (!b || !(b->first >= 0 && b->first < 1 && b->second >= 0 && b->second < 1))
            return {"betas", fmt::format("expected two numbers in [0, 1) as B1,B2, got '{}'", io::cut(r.betas, 40))};
          return {};
        }};
    return t;
  }
};

int run_replay(const ReplayCmd& a) {
  models::GptConfig c = models::load_gpt_config(a.config);
  train::Model m = models::gpt_model(c);
  m.set_bf16_products(a.precision == "bf16");
  train::load_params(m.params(), train::read_tensors(a.weights), models::gpt_params(c), a.weights);
  std::vector<train::Batch> b = models::read_gpt_batches(io::read_safetensors(a.batches), c, /*stacked=*/true);
  const auto [beta1, beta2] = *a.parsed_betas();  // checked with the options
  train::ReplayOptions o{a.optimizer, a.lr, a.momentum, beta1, beta2, a.eps, a.weight_decay, a.clip};
  if (a.detect_anomaly) m.plan_for(b[0], /*training=*/true).set_detect_anomaly(true);  // every batch has b[0]'s shape
  train::ReplayResult r = train::replay(m, b, o);
  if (!a.allow_nonfinite) {
    std::vector<std::string> bad;
    for (const train::ParamInfo& p : m.param_table())
      for (float v : m.params().at(p.name).fspan())
        if (!std::isfinite(v)) {
          bad.push_back(p.name);
          break;
        }
    if (!bad.empty())
      throw InputError(fmt::format("replay diverged at --lr {}: {} parameter tensors hold non-finite values after {} "
                                   "steps (first: {}); nothing written to {} (--allow-nonfinite writes them anyway)",
                                   a.lr, bad.size(), b.size(), io::cut(bad.front(), 40), io::cut(a.out, 80)));
  }
  io::File out;
  for (const train::ParamInfo& p : m.param_table()) out.add_f32(p.name, p.shape, m.params().at(p.name).to_vector());
  out.add_f32("losses", {std::int64_t(b.size())}, r.losses);
  out.add_f32("grad_norms", {std::int64_t(b.size())}, r.grad_norms);
  io::write_safetensors(a.out, out);
  fmt::print("{} steps of {}: loss {:.6f} -> {:.6f}; wrote {}\n", b.size(), a.optimizer, r.losses.front(),
             r.losses.back(), a.out);
  return 0;
}

// ---- sample --------------------------------------------------------------------------
// The sampling options are models::SampleOptions' own table; these are the command's.
struct SampleCmd {
  std::string checkpoint;
  models::SampleOptions o;
  std::int64_t samples = 1;
  static const train::OptionTable<SampleCmd>& table() {
    using train::opt;
    using S = SampleCmd;
    static const train::OptionTable<SampleCmd> t{{
        opt("checkpoint", &S::checkpoint, "Checkpoint written by train").must_give().reads_file(),
        opt("samples", &S::samples, "Continuations of the prompt drawn side by side, one batch row each")
            .at_least(1)
            .at_most(4096)}};
    return t;
  }
};

int run_sample(const SampleCmd& a) {
  models::CharLmCheckpoint ck = models::load_char_lm(a.checkpoint);
  const std::vector<std::string> texts = models::sample_texts(ck.config, ck.params, ck.vocab, a.o, a.samples);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (texts.size() > 1) fmt::print("--- sample {} (seed {}) ---\n", i + 1, a.o.seed + i);
    fmt::print("{}\n", texts[i]);
  }
  return 0;
}

// ---- inspect -------------------------------------------------------------------------
struct InspectCmd {
  std::string config, dot, svg, precision = "f32";
  std::int64_t batch = 1, seq = 0;
  std::string grad;  // "": the forward only; "*" (--grad alone): every gradient; NAME: that parameter's
  bool raw = false;   // --no-simplify: list the graph as built
  bool full = false;  // --no-collapse
  std::vector<std::string> expand;
  static const train::OptionTable<InspectCmd>& table() {
    using train::opt;
    using I = InspectCmd;
    static const train::OptionTable<InspectCmd> t{{
        opt("config", &I::config, "Model config JSON").must_give().reads_file(),
        opt("batch", &I::batch, "Batch size").at_least(1).at_most(1 << 20),
        opt("seq", &I::seq, "Sequence length (0: the config's block_size)").at_least(0).at_most(1 << 20),
        opt("grad", &I::grad, "Also print the gradient graph; with a NAME, only that parameter's").alone_means("*"),
        opt("no_simplify", &I::raw, "List the graph as built, not simplified"),
        opt("dot", &I::dot, "Write Graphviz dot to this file (one box per name scope for large graphs)").writes_file(),
        opt("svg", &I::svg, "Render the graph to this SVG file with Graphviz's dot").writes_file(),
        opt("expand", &I::expand, "Draw these name scopes node by node (e.g. blocks.1.attn); repeatable"),
        opt("no_collapse", &I::full, "Draw every node, whatever the size of the graph"),
        train::precision_option(&I::precision)}};
    return t;
  }
};

// `dot` on the PATH, or "".
std::string find_dot() {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');) {
    const std::string f = (dir.empty() ? std::string(".") : dir) + "/dot";
    if (::access(f.c_str(), X_OK) == 0) return f;
  }
  return "";
}

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

int run_inspect(const InspectCmd& a) {
  models::GptConfig c = models::load_gpt_config(a.config);
  const std::int64_t T = a.seq > 0 ? a.seq : c.block_size;
  Graph g;
  Bf16Products precision(g, a.precision == "bf16");  // the listing shows "bf16" on every product
  models::Gpt m = models::build_gpt(g, c, a.batch, T);
  const NodeId forward_end = g.size();
  std::vector<NodeId> roots{m.loss.id};
  std::string what = "the loss";
  if (!a.grad.empty()) {
    std::vector<NodeId> wrt;
    std::vector<std::string> names;
    for (auto& p : m.params) wrt.push_back(p.id), names.push_back(p.name());
    std::vector<NodeId> grads = gg::grad(g, m.loss.id, wrt);
    roots = grads;
    what = "every parameter's gradient";
    if (a.grad != "*") {
      auto at = std::find(names.begin(), names.end(), a.grad);
      if (at == names.end())
        throw InputError(fmt::format("--grad: no parameter '{}' in this model{}", io::cut(a.grad, 60),
                                     did_you_mean(a.grad, names)));
      roots = {grads[std::size_t(at - names.begin())]};
      what = fmt::format("the gradient of {}", a.grad);
    }
  }

  // Before and after the simplification pass: node counts and the planned arenas.
  ParamStore no_values;  // planning reads no values
  const Executor off(g, roots, no_values, 0, {.simplify = false});
  const Executor on(g, roots, no_values, 0, {.simplify = true});
  Simplified s = simplify(g, roots);
  std::int64_t fwd_before = 0, fwd_after = 0;
  for (NodeId id : ancestors(g, roots)) fwd_before += id < forward_end;
  std::vector<char> forward(std::size_t(s.graph.size()), 0);
  for (NodeId id = 0; id < forward_end; ++id)
    if (s.map[std::size_t(id)] >= 0) forward[std::size_t(s.map[std::size_t(id)])] = 1;
  for (char f : forward) fwd_after += f;
  fmt::print("# {} of the model in {} (batch {}, sequence {})\n", what, a.config, a.batch, T);
  fmt::print("# nodes as built:   {:>5} forward, {:>5} gradient; arena {} bytes\n", fwd_before,
             s.stats.before - fwd_before, off.arena_bytes());
  fmt::print("# nodes simplified: {:>5} forward, {:>5} gradient; arena {} bytes "
             "({} merged, {} folded, {} identities removed)\n",
             fwd_after, s.stats.after - fwd_after, on.arena_bytes(), s.stats.merged, s.stats.folded, s.stats.identities);

  // The listing, forward then gradient, of the graph as built or simplified.
  const Graph& lg = a.raw ? g : s.graph;
  const std::vector<NodeId>& lroots = a.raw ? roots : s.roots;
  auto is_forward = [&](NodeId id) { return a.raw ? id < forward_end : forward[std::size_t(id)] != 0; };
  const std::vector<NodeId> listed = ancestors(lg, lroots);
  const bool one_param = !a.grad.empty() && a.grad != "*";
  std::vector<NodeId> reads;  // with --grad NAME: the forward values its gradient reads
  std::string fwd_text, grad_text;
  for (NodeId id : listed) {
    if (!is_forward(id)) {
      grad_text += to_text_line(lg, id);
      for (NodeId in : lg.node(id).inputs)
        if (is_forward(in) && std::find(reads.begin(), reads.end(), in) == reads.end()) reads.push_back(in);
    } else if (!one_param) {
      fwd_text += to_text_line(lg, id);
    }
  }
  const char* kind = a.raw ? "as built" : "simplified";
  if (!one_param) fmt::print("\n## forward ({})\n{}", kind, fwd_text);
  if (!a.grad.empty()) {
    fmt::print("\n## gradient ({}){}\n", kind, one_param ? fmt::format(" of {}", a.grad) : "");
    if (one_param) {
      std::sort(reads.begin(), reads.end());
      std::vector<std::string> r;
      for (NodeId id : reads) r.push_back(fmt::format("%{} ({})", id, lg.node(id).name.empty() ? op_name(lg.node(id).op) : lg.node(id).name));
      fmt::print("# reads {} forward values: {}\n", reads.size(), fmt::join(r, ", "));
    }
    fmt::print("{}", grad_text);
  }

  if (!a.dot.empty() || !a.svg.empty()) {
    DotOptions o;
    if (a.full) o.collapse = false;
    o.expand = a.expand;
    const std::string text = to_dot(lg, lroots, o);
    const std::string dot_file = !a.dot.empty() ? a.dot : a.svg + ".dot";
    std::ofstream f(dot_file);
    if (!f) throw InputError(fmt::format("{}: cannot write", dot_file));
    f << text;
    f.close();
    if (!a.svg.empty()) {
      const std::string dot = find_dot();
      if (dot.empty())
        throw InputError(fmt::format("--svg needs Graphviz's `dot`, which is not installed (apt-get install graphviz); "
                                     "the graph is in {}", dot_file));
      const auto t0 = std::chrono::steady_clock::now();
      const std::string cmd = fmt::format("{} -Tsvg {} -o {}", shell_quote(dot), shell_quote(dot_file), shell_quote(a.svg));
      if (std::system(cmd.c_str()) != 0) throw InputError(fmt::format("--svg: `{}` failed", cmd));
      fmt::print("# wrote {} ({:.1f} s in dot)\n", a.svg,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return 0;
}

}  // namespace

namespace gg::cli {
namespace {

// CLI11's message on one short line: newlines as spaces, every word of more than 40 bytes
// (an echoed value, a range bound of 1.8e308) cut, and the whole at most 240 bytes.
std::string short_parse_message(const std::string& msg) {
  std::string out, word;
  auto flush = [&] {
    out += word.size() > 40 ? io::cut(word, 24) : word;
    word.clear();
  };
  for (char ch : msg) {
    if (ch == '\n' || ch == '\r' || ch == ' ') {
      flush();
      out += ' ';
    } else {
      word += ch;
    }
  }
  flush();
  return out.size() > 240 ? io::cut(out, 200) : out;
}

// Every command, its options and the state they fill. Built anew for each run: the flags
// point into it.
struct Commands {
  CLI::App app{"gradgraph: transformers as expression graphs, gradients as graphs, trained on a CPU"};
  int threads = 0;

  // train: the char-LM job; its flags come from the three option tables.
  models::GptConfig model;
  models::CharLmOptions job;
  train::TrainOptions run = models::char_lm_train_defaults();
  TableFlags train_flags{{train::bind(job), train::bind(model), train::bind(run)}};
  CLI::App* tr = nullptr;

  // train-seq2seq: the encoder-decoder job.
  models::Seq2SeqOptions s2s_job;
  models::Seq2SeqConfig s2s_model = models::seq2seq_defaults();
  train::TrainOptions s2s_run = models::seq2seq_train_defaults();
  TableFlags s2s_flags{{train::bind(s2s_job), train::bind(s2s_model), train::bind(s2s_run)}};
  CLI::App* s2s = nullptr;

  // train-vit: the ViT job (image size and classes are the data's; the whole test set is
  // evaluated, so no eval-iters flags).
  models::VitConfig vit_model;
  models::VitJobOptions vit_job;
  train::TrainOptions vit_run = models::vit_train_defaults();
  TableFlags vit_flags{{train::bind(vit_job), train::bind(vit_model), train::bind(vit_run)}};
  CLI::App* tv = nullptr;

  SampleCmd sa;
  TableFlags sample_flags{{train::bind(sa), train::bind(sa.o)}};
  CLI::App* sm = nullptr;
  GradCmd ga;
  TableFlags grad_flags{{train::bind(ga)}};
  CLI::App* gr = nullptr;
  ReplayCmd ra;
  TableFlags replay_flags{{train::bind(ra)}};
  CLI::App* rp = nullptr;
  InspectCmd ia;
  TableFlags inspect_flags{{train::bind(ia)}};
  CLI::App* in = nullptr;
  DebugCommands debug;  // gradcheck, hvp, attention
  BenchCommand bench;

  Commands() {
    app.require_subcommand(1);
    app.add_option("--threads", threads, "Worker threads (default: all cores, or GG_NUM_THREADS)")->check(CLI::Range(1, 256));
    tr = app.add_subcommand("train", "Train the character-level transformer (defaults: tinyshakespeare, 2000 steps)");
    train_flags.add_to(tr, {"vocab_size"}, "the vocabulary is the data's characters", /*options_file=*/true);
    s2s = app.add_subcommand("train-seq2seq",
                             "Train the encoder-decoder transformer (defaults: English number words to digits)");
    s2s_flags.add_to(s2s, {"src_vocab", "tgt_vocab", "max_src_len", "max_tgt_len"},
                     "the vocabularies and lengths are the task's", /*options_file=*/true);
    tv = app.add_subcommand("train-vit",
                            "Train a Vision Transformer on the 8x8 handwritten digits (prints test accuracy and "
                            "the confusion matrix)");
    vit_flags.add_to(tv, {"image_size", "n_classes", "eval_iters", "final_eval_iters"},
                     "the image size and classes are the data's (8x8 digits, 10 classes), and the whole test set is "
                     "evaluated", /*options_file=*/true);
    sm = app.add_subcommand("sample", "Generate text from a checkpoint");
    sample_flags.add_to(sm);
    gr = app.add_subcommand("grad", "Loss, logits and every parameter's gradient for one batch");
    grad_flags.add_to(gr);
    rp = app.add_subcommand("replay", "Training steps on given batches; writes the final parameters");
    replay_flags.add_to(rp);
    in = app.add_subcommand("inspect", "Print the model's forward (and gradient) graph, one node a line");
    inspect_flags.add_to(in);
    debug.add_to(app);
    bench.add_to(app);
  }
  Commands(const Commands&) = delete;

  // The command that was given: its options applied and checked, then (unless check_only)
  // its work. Throws for a user's mistake.
  int dispatch(bool check_only) {
    auto go = [&](TableFlags& flags, auto&& work) {
      flags.apply();
      if (check_only) return 0;
      return work();
    };
    if (*tr) return go(train_flags, [&] { return models::run_char_lm(job, model, run), 0; });
    if (*s2s) return go(s2s_flags, [&] { return models::run_seq2seq(s2s_job, s2s_model, s2s_run), 0; });
    if (*tv) return go(vit_flags, [&] { return models::run_vit(vit_job, vit_model, vit_run), 0; });
    if (*sm) return go(sample_flags, [&] { return run_sample(sa); });
    if (*gr) return go(grad_flags, [&] { return run_grad(ga); });
    if (*rp) return go(replay_flags, [&] { return run_replay(ra); });
    if (*in) return go(inspect_flags, [&] { return run_inspect(ia); });
    if (int status = debug.run(check_only); status >= 0) return status;
    if (int status = bench.run(check_only); status >= 0) return status;
    return 0;
  }
};

}  // namespace

std::vector<OptionRow> list_options() {
  Commands c;
  std::vector<OptionRow> rows;
  for (const CLI::App* sub : c.app.get_subcommands({}))
    for (const CLI::Option* o : sub->get_options()) {
      if (o->get_lnames().empty() || o->get_lnames()[0] == "help") continue;
      rows.push_back({sub->get_name(), "--" + o->get_lnames()[0], o->get_type_name(), o->get_items_expected_max() > 0,
                      o->get_required()});
    }
  return rows;
}

int run(int argc, const char* const* argv, std::string& error, bool check_only) {
  error.clear();
  Commands c;
  try {
    c.app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return c.app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return c.app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    // CLI11 reports a misspelled subcommand or option before any subcommand only as
    // "A subcommand is required": name it.
    if (c.app.get_subcommands().empty() && !c.app.remaining().empty()) {
      const std::string first = io::in_quotes(c.app.remaining().front(), 40);
      msg = c.app.remaining().front().rfind("-", 0) == 0
                ? fmt::format("unknown option {}", first)
                : fmt::format("unknown subcommand {} (expected train, train-vit, train-seq2seq, sample, grad, replay, "
                              "inspect, gradcheck, hvp, attention or bench)", first);
    }
    // An unknown flag: named, with the closest flag of its command.
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      std::vector<const CLI::App*> levels{&c.app};
      if (!c.app.get_subcommands().empty()) levels.insert(levels.begin(), c.app.get_subcommands().front());
      bool named = false;
      for (const CLI::App* level : levels)
        for (const std::string& arg : level->remaining(/*recurse=*/false))
          if (!named && arg.rfind("--", 0) == 0) {
            std::vector<std::string> flags;
            for (const CLI::Option* o : level->get_options())
              if (!o->get_lnames().empty()) flags.push_back("--" + o->get_lnames()[0]);
            const std::string name = arg.substr(0, arg.find('='));
            msg = fmt::format("{}: unknown option {}{}", level == &c.app ? "gradgraph" : level->get_name(),
                              io::in_quotes(name, 40), did_you_mean(name, flags));
            named = true;
          }
    }
    error = fmt::format("{} (see --help)", short_parse_message(msg));
    return 2;
  }
  if (c.threads > 0 && !check_only) gg::set_num_threads(c.threads);
  try {
    return c.dispatch(check_only);
  } catch (const std::bad_alloc&) {
    error = "out of memory (is the model or batch too large?)";
  } catch (const std::exception& e) {  // InputError, io::Error, GraphError, ...
    error = e.what();
  }
  return 1;
}

}  // namespace gg::cli
