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
#include <sstream>
#include <string_view>

#include "cli/bench.h"
#include "cli/debug.h"
#include "cli/input_file.h"
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

// Flags generated from option tables: each option of each set becomes --name-with-dashes,
// with its help, kind and default. The texts are applied after parsing, over a --config
// file's values, so flags win over the file.
struct TableFlags {
  std::vector<train::BoundOptions> sets;
  std::vector<std::pair<std::string, std::string>> given;  // (option, text), in order
  std::string config;                                       // --config file, if any
  std::vector<std::string> derived;                         // options the command sets itself
  std::string why;                                          // ... and from what
  std::vector<std::string> inputs = {"data"};               // options that name a file to read (empty: the default)

  // Flags for every option but `skip`, which the command sets itself (`reason` says from
  // what): a --config file naming one of them is refused.
  void add_to(CLI::App* app, const std::vector<std::string>& skip, const std::string& reason) {
    derived = skip;
    why = reason;
    for (const train::BoundOptions& b : sets)
      for (const train::Option& o : b.list->options()) {
        if (std::find(skip.begin(), skip.end(), o.name) != skip.end()) continue;
        const std::string name = o.name;
        const std::string help = fmt::format("{} ({}; default {})", o.help, o.describe(), train::to_text(o.get(b.target)));
        auto* flag = app->add_option_function<std::string>(
            train::flag_name(name),
            [this, name, boolean = o.kind == train::Option::Kind::boolean](const std::string& v) {
              given.push_back({name, boolean && v.empty() ? "true" : v});  // "--resume" alone; an empty text stays empty
            },
            help);
        static const char* kind_names[] = {"BOOL", "INT", "FLOAT", "TEXT", "CHOICE"};
        flag->type_name(kind_names[int(o.kind)]);
        if (o.kind == train::Option::Kind::boolean) flag->expected(0, 1);  // "--resume" alone means true
      }
    app->add_option("--config", config, "JSON file of options (the keys above, with '_'); flags override it");
  }
  // The --config file, then the flags.
  void apply() {
    if (!config.empty()) {
      cli::require_input_file("--config", config);
      train::read_json_file(config, sets, derived, why);
    }
    for (auto& [name, text] : given)  // the input files among the options, before any work
      if (std::find(inputs.begin(), inputs.end(), name) != inputs.end() && !text.empty())
        cli::require_input_file(train::flag_name(name), text);
    for (auto& [name, text] : given) train::set_from_text(sets, name, text);
    for (const train::BoundOptions& b : sets) b.list->validate(b.target, "options");
  }
};

// ---- grad ----------------------------------------------------------------------------
struct GradCmd {
  std::string config, weights, batch, out;
  bool detect_anomaly = false;
};

int run_grad(const GradCmd& a) {
  for (auto& [flag, path] : {std::pair{"--config", a.config}, {"--weights", a.weights}, {"--batch", a.batch}})
    cli::require_input_file(flag, path);
  cli::require_output_file("--out", a.out);
  models::GptConfig c = models::load_gpt_config(a.config);
  train::Model m = models::gpt_model(c);
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
  std::string config, weights, batches, optimizer, out, betas = "0.9,0.999";
  double lr = 0, momentum = 0, eps = 1e-8, weight_decay = 0.01, clip = 0;
  bool allow_nonfinite = false, detect_anomaly = false;
};

int run_replay(const ReplayCmd& a) {
  for (auto& [flag, path] : {std::pair{"--config", a.config}, {"--weights", a.weights}, {"--batches", a.batches}})
    cli::require_input_file(flag, path);
  cli::require_output_file("--out", a.out);
  models::GptConfig c = models::load_gpt_config(a.config);
  train::Model m = models::gpt_model(c);
  train::load_params(m.params(), train::read_tensors(a.weights), models::gpt_params(c), a.weights);
  std::vector<train::Batch> b = models::read_gpt_batches(io::read_safetensors(a.batches), c, /*stacked=*/true);
  train::ReplayOptions o{a.optimizer, a.lr, a.momentum, 0, 0, a.eps, a.weight_decay, a.clip};
  char comma = 0;
  std::istringstream bs(a.betas);
  if (!(bs >> o.beta1 >> comma >> o.beta2) || comma != ',' || !bs.eof())
    throw InputError(fmt::format("--betas: expected two numbers as B1,B2, got '{}'", a.betas));
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
struct SampleCmd {
  std::string checkpoint;
  models::SampleOptions o;
  std::int64_t samples = 1;
};

int run_sample(const SampleCmd& a) {
  cli::require_input_file("--checkpoint", a.checkpoint);
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
  std::string config, dot, svg;
  std::int64_t batch = 1, seq = 0;
  bool grad = false;       // --grad given
  std::string grad_param;  // --grad NAME: only this parameter's gradient
  bool raw = false;        // --no-simplify: list the graph as built
  bool full = false;       // --no-collapse
  std::vector<std::string> expand;
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
  cli::require_input_file("--config", a.config);
  models::GptConfig c = models::load_gpt_config(a.config);
  const std::int64_t T = a.seq > 0 ? a.seq : c.block_size;
  Graph g;
  models::Gpt m = models::build_gpt(g, c, a.batch, T);
  const NodeId forward_end = g.size();
  std::vector<NodeId> roots{m.loss.id};
  std::string what = "the loss";
  if (a.grad) {
    std::vector<NodeId> wrt;
    std::vector<std::string> names;
    for (auto& p : m.params) wrt.push_back(p.id), names.push_back(p.name());
    std::vector<NodeId> grads = gg::grad(g, m.loss.id, wrt);
    roots = grads;
    what = "every parameter's gradient";
    if (!a.grad_param.empty()) {
      auto at = std::find(names.begin(), names.end(), a.grad_param);
      if (at == names.end())
        throw InputError(fmt::format("--grad: no parameter '{}' in this model{}", io::cut(a.grad_param, 60),
                                     did_you_mean(a.grad_param, names)));
      roots = {grads[std::size_t(at - names.begin())]};
      what = fmt::format("the gradient of {}", a.grad_param);
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
  const bool one_param = !a.grad_param.empty();
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
  if (a.grad) {
    fmt::print("\n## gradient ({}){}\n", kind, one_param ? fmt::format(" of {}", a.grad_param) : "");
    if (one_param) {
      std::sort(reads.begin(), reads.end());
      std::vector<std::string> r;
      for (NodeId id : reads) r.push_back(fmt::format("%{} ({})", id, lg.node(id).name.empty() ? op_name(lg.node(id).op) : lg.node(id).name));
      fmt::print("# reads {} forward values: {}\n", reads.size(), fmt::join(r, ", "));
    }
    fmt::print("{}", grad_text);
  }

  if (!a.dot.empty()) cli::require_output_file("--dot", a.dot);
  if (!a.svg.empty()) cli::require_output_file("--svg", a.svg);
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

// CLI11's message on one short line: newlines as spaces, every word of more than 40 bytes
// (an echoed value, a range bound of 1.8e308) cut, and the whole at most 240 bytes.
static std::string short_parse_message(const std::string& msg) {
  std::string out, word;
  auto flush = [&] {
    out += word.size() > 40 ? io::cut(word, 24) : word;
    word.clear();
  };
  for (char ch : msg) {
    if (ch == '\n' || ch == ' ') {
      flush();
      out += ' ';
    } else {
      word += ch;
    }
  }
  flush();
  return out.size() > 240 ? io::cut(out, 200) : out;
}

// "gradgraph: error: ..." on stderr; under mpirun, with the rank when not rank 0, and only
// once (by rank 0) for an error every rank raised.
static void report_error(const std::string& msg) {
  const train::World* w = train::World::started();
  if (w) w->failed();
  if (w && !w->reports_errors()) return;
  const int rank = train::World::launched_rank();
  // Messages are one short line by construction; this keeps a path or name echoed whole by a
  // lower layer (the file system's, the standard library's) from making a long one.
  std::string line;
  std::size_t word = 0;
  for (char ch : msg) {
    word = ch == ' ' ? 0 : word + 1;
    if (ch == '\n') ch = ' ';
    if (word <= 120) line += ch;
    else if (word == 121) line += "...";
  }
  if (line.size() > 270) line = io::cut(line, 240);
  fmt::print(stderr, "gradgraph: error: {}{}\n", rank > 0 ? fmt::format("rank {}: ", rank) : "", line);
}

int main(int argc, char** argv) {
  // Under mpirun, rank 0 speaks for the job: the other ranks' reports and samples are
  // rank 0's, so their standard output goes nowhere (their errors still reach stderr).
  if (train::World::launched_rank() > 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  CLI::App app{"gradgraph: transformers as expression graphs, gradients as graphs, trained on a CPU"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "Worker threads (default: all cores, or GG_NUM_THREADS)")->check(CLI::Range(1, 256));

  // train: the char-LM job; its flags come from the three option tables.
  models::GptConfig model;
  models::CharLmOptions job;
  train::TrainOptions run = models::char_lm_train_defaults();
  TableFlags train_flags{{train::bind(job), train::bind(model), train::bind(run)}, {}, {}};
  auto* tr = app.add_subcommand("train", "Train the character-level transformer (defaults: tinyshakespeare, 2000 steps)");
  train_flags.add_to(tr, {"vocab_size"}, "the vocabulary is the data's characters");

  // train-seq2seq: the encoder-decoder job; flags from its three option tables.
  models::Seq2SeqOptions s2s_job;
  models::Seq2SeqConfig s2s_model = models::seq2seq_defaults();
  train::TrainOptions s2s_run = models::seq2seq_train_defaults();
  TableFlags s2s_flags{{train::bind(s2s_job), train::bind(s2s_model), train::bind(s2s_run)}, {}, {}};
  auto* s2s = app.add_subcommand("train-seq2seq",
                                 "Train the encoder-decoder transformer (defaults: English number words to digits)");
  s2s_flags.add_to(s2s, {"src_vocab", "tgt_vocab", "max_src_len", "max_tgt_len"},
                   "the vocabularies and lengths are the task's");

  // train-vit: the ViT job; its flags come from its three option tables (image size and
  // classes are the data's; the whole test set is evaluated, so no eval-iters flags).
  models::VitConfig vit_model;
  models::VitJobOptions vit_job;
  train::TrainOptions vit_run = models::vit_train_defaults();
  TableFlags vit_flags{{train::bind(vit_job), train::bind(vit_model), train::bind(vit_run)}, {}, {}};
  auto* tv = app.add_subcommand("train-vit",
                                "Train a Vision Transformer on the 8x8 handwritten digits (prints test accuracy and "
                                "the confusion matrix)");
  vit_flags.add_to(tv, {"image_size", "n_classes", "eval_iters", "final_eval_iters"},
                   "the image size and classes are the data's (8x8 digits, 10 classes), and the whole test set is evaluated");

  // sample
  SampleCmd sa;
  auto* sm = app.add_subcommand("sample", "Generate text from a checkpoint");
  sm->add_option("--checkpoint", sa.checkpoint, "Checkpoint written by train")->required();
  sm->add_option("--prompt", sa.o.prompt, "Text to continue")->capture_default_str();
  sm->add_option("--temperature", sa.o.temperature, "Sampling temperature (> 0)")->capture_default_str();
  sm->add_option("--top-k", sa.o.top_k, "Sample among the k likeliest (0 = all)")->capture_default_str()->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 24));
  sm->add_option("--tokens", sa.o.tokens, "Characters to generate")->capture_default_str()->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 24));
  sm->add_option("--seed", sa.o.seed, "Random seed (sample i of --samples draws with seed + i)")->capture_default_str();
  sm->add_option("--samples", sa.samples, "Continuations of the prompt drawn side by side, one batch row each")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t(1), std::int64_t(4096)));

  // grad
  GradCmd ga;
  auto* gr = app.add_subcommand("grad", "Loss, logits and every parameter's gradient for one batch");
  gr->add_option("--config", ga.config, "Model config JSON")->required();
  gr->add_option("--weights", ga.weights, "Weights (safetensors)")->required();
  gr->add_option("--batch", ga.batch, "tokens and targets [B, T] (safetensors)")->required();
  gr->add_option("--out", ga.out, "Output safetensors")->required();
  gr->add_flag("--detect-anomaly", ga.detect_anomaly, "Stop at the first node, forward or backward, that makes a NaN or Inf, naming it");

  // replay
  ReplayCmd ra;
  auto* rp = app.add_subcommand("replay", "Training steps on given batches; writes the final parameters");
  rp->add_option("--config", ra.config, "Model config JSON")->required();
  rp->add_option("--weights", ra.weights, "Initial weights (safetensors)")->required();
  rp->add_option("--batches", ra.batches, "tokens and targets [N, B, T] (safetensors)")->required();
  rp->add_option("--optimizer", ra.optimizer, "sgd or adamw")->required()->check(CLI::IsMember({"sgd", "adamw"}));
  rp->add_option("--lr", ra.lr, "Learning rate (constant)")->required();
  rp->add_option("--momentum", ra.momentum, "SGD momentum")->capture_default_str();
  rp->add_option("--betas", ra.betas, "AdamW betas B1,B2")->capture_default_str();
  rp->add_option("--eps", ra.eps, "AdamW epsilon")->capture_default_str();
  rp->add_option("--weight-decay", ra.weight_decay, "AdamW weight decay")->capture_default_str();
  rp->add_option("--clip", ra.clip, "Clip the global gradient norm (0 = off)")->capture_default_str();
  rp->add_option("--out", ra.out, "Output safetensors")->required();
  rp->add_flag("--allow-nonfinite", ra.allow_nonfinite, "Write the parameters even when some are NaN or infinite");
  rp->add_flag("--detect-anomaly", ra.detect_anomaly, "Stop at the first node, forward or backward, that makes a NaN or Inf, naming it");

  // inspect
  InspectCmd ia;
  auto* in = app.add_subcommand("inspect", "Print the model's forward (and gradient) graph, one node a line");
  in->add_option("--config", ia.config, "Model config JSON")->required();
  in->add_option("--batch", ia.batch, "Batch size")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  in->add_option("--seq", ia.seq, "Sequence length (default: block_size)")->check(CLI::Range(0, 1 << 20));
  in->add_option("--grad", ia.grad_param, "Also print the gradient graph; with a NAME, only that parameter's")
      ->expected(0, 1);
  in->add_flag("--no-simplify", ia.raw, "List the graph as built, not simplified");
  in->add_option("--dot", ia.dot, "Write Graphviz dot to this file (one box per name scope for large graphs)");
  in->add_option("--svg", ia.svg, "Render the graph to this SVG file with Graphviz's dot");
  in->add_option("--expand", ia.expand, "Draw this name scope node by node (e.g. blocks.1.attn); repeatable");
  in->add_flag("--no-collapse", ia.full, "Draw every node, whatever the size of the graph");

  // gradcheck, hvp, attention
  cli::DebugCommands debug;
  debug.add_to(app);
  cli::BenchCommand bench;
  bench.add_to(app);

  // Every option of every command, one a line ("command<TAB>--flag<TAB>TYPE<TAB>takes a
  // value<TAB>required"), read by the generated bad-input matrix (tests/cli): a new option
  // is tested without a test written for it. Not in --help.
  if (argc == 2 && std::string_view(argv[1]) == "--list-options") {
    for (const CLI::App* sub : app.get_subcommands({}))
      for (const CLI::Option* o : sub->get_options()) {
        if (o->get_lnames().empty() || o->get_lnames()[0] == "help") continue;
        fmt::print("{}\t--{}\t{}\t{}\t{}\n", sub->get_name(), o->get_lnames()[0], o->get_type_name(),
                   o->get_items_expected_max() > 0 ? 1 : 0, o->get_required() ? 1 : 0);
      }
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    // CLI11 reports a misspelled subcommand or option before any subcommand only as
    // "A subcommand is required": name it.
    if (app.get_subcommands().empty() && !app.remaining().empty()) {
      const std::string first = app.remaining().front();
      msg = first.rfind("-", 0) == 0
                ? fmt::format("unknown option '{}'", first)
                : fmt::format("unknown subcommand '{}' (expected train, train-vit, train-seq2seq, sample, grad, replay, inspect, gradcheck, hvp, attention or bench)", first);
    }
    fmt::print(stderr, "gradgraph: error: {} (see --help)\n", short_parse_message(msg));
    return 2;
  }
  if (threads > 0) gg::set_num_threads(threads);
  try {
    if (*tr) {
      train_flags.apply();
      models::run_char_lm(job, model, run);
      return 0;
    }
    if (*s2s) {
      s2s_flags.apply();
      models::run_seq2seq(s2s_job, s2s_model, s2s_run);
      return 0;
    }
    if (*tv) {
      vit_flags.apply();
      models::run_vit(vit_job, vit_model, vit_run);
      return 0;
    }
    if (*sm) return run_sample(sa);
    if (*gr) return run_grad(ga);
    if (*rp) return run_replay(ra);
    if (*in) {
      ia.grad = in->count("--grad") > 0;
      return run_inspect(ia);
    }
    if (int status = debug.run(); status >= 0) return status;
    if (int status = bench.run(); status >= 0) return status;
  } catch (const std::bad_alloc&) {
    report_error("out of memory (is the model or batch too large?)");
  } catch (const std::exception& e) {  // InputError, io::Error, GraphError, ...
    report_error(e.what());
  }
  return 1;
}
