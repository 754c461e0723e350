// The `gradgraph` command: train (the main job), sample, grad and replay (the reference
// model's command-line contract, spec/reference-model.md), and inspect (print the forward
// and gradient graphs of a model). Every user mistake ends in one line on stderr and a
// non-zero exit.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "autodiff/optim.h"
#include "io/safetensors.h"
#include "ops/parallel.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/model.h"
#include "train/replay.h"
#include "train/sample.h"
#include "train/trainer.h"

using namespace gg;
using gg::train::InputError;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError(fmt::format("{}: cannot open", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- grad ----------------------------------------------------------------------------
struct GradCmd {
  std::string config, weights, batch, out;
};

int run_grad(const GradCmd& a) {
  dsl::GptConfig c = train::load_config(a.config);
  ParamStore params;
  train::load_weights(params, io::read_safetensors(a.weights), c);
  train::Batches b = train::read_batches(io::read_safetensors(a.batch), c, /*stacked=*/false);
  train::StepRunner r(c, b.B, b.T, params);
  const double loss = r.forward_backward(b.tokens_at(0), b.targets_at(0));
  io::File out;
  out.add_f32("loss", {}, {float(loss)});
  View lg = r.logits();
  out.add_f32("logits", *lg.shape, std::vector<float>(lg.f(), lg.f() + lg.numel()));
  for (const ParamGrad& pg : r.grads())
    out.add_f32("grad." + pg.name, pg.param->shape(), std::vector<float>(pg.grad.begin(), pg.grad.end()));
  io::write_safetensors(a.out, out);
  fmt::print("loss {:.6f}; wrote {} ({} gradients)\n", loss, a.out, r.grads().size());
  return 0;
}

// ---- replay --------------------------------------------------------------------------
struct ReplayCmd {
  std::string config, weights, batches, optimizer, out, betas = "0.9,0.999";
  double lr = 0, momentum = 0, eps = 1e-8, weight_decay = 0.01, clip = 0;
};

int run_replay(const ReplayCmd& a) {
  dsl::GptConfig c = train::load_config(a.config);
  ParamStore params;
  train::load_weights(params, io::read_safetensors(a.weights), c);
  train::Batches b = train::read_batches(io::read_safetensors(a.batches), c, /*stacked=*/true);
  train::ReplayOptions o{a.optimizer, a.lr, a.momentum, 0, 0, a.eps, a.weight_decay, a.clip};
  char comma = 0;
  std::istringstream bs(a.betas);
  if (!(bs >> o.beta1 >> comma >> o.beta2) || comma != ',' || !bs.eof())
    throw InputError(fmt::format("--betas: expected two numbers as B1,B2, got '{}'", a.betas));
  train::ReplayResult r = train::replay(c, params, b, o);
  io::File out;
  train::add_weights(out, params, c);
  out.add_f32("losses", {b.N}, r.losses);
  out.add_f32("grad_norms", {b.N}, r.grad_norms);
  io::write_safetensors(a.out, out);
  fmt::print("{} steps of {}: loss {:.6f} -> {:.6f}; wrote {}\n", b.N, a.optimizer, r.losses.front(), r.losses.back(),
             a.out);
  return 0;
}

// ---- sample --------------------------------------------------------------------------
struct SampleCmd {
  std::string checkpoint;
  train::SampleOptions o;
};

int run_sample(SampleCmd a) {
  train::Checkpoint ck = train::load_checkpoint(a.checkpoint);
  fmt::print("{}\n", train::sample_text(ck.config, ck.params, ck.vocab, a.o));
  return 0;
}

// ---- inspect -------------------------------------------------------------------------
struct InspectCmd {
  std::string config, dot;
  std::int64_t batch = 1, seq = 0;
  bool grad = false;
};

int run_inspect(const InspectCmd& a) {
  dsl::GptConfig c = train::load_config(a.config);
  const std::int64_t T = a.seq > 0 ? a.seq : c.block_size;
  Graph g;
  dsl::Gpt m = dsl::build_gpt(g, c, a.batch, T);
  const NodeId forward_end = g.size();
  std::vector<NodeId> roots{m.loss.id};
  if (a.grad) {
    std::vector<NodeId> wrt;
    for (auto& p : m.params) wrt.push_back(p.id);
    roots = gg::grad(g, m.loss.id, wrt);
  }
  fmt::print("{}", to_text(g, roots));
  fmt::print("# {} forward nodes, {} gradient nodes\n", forward_end, g.size() - forward_end);
  if (!a.dot.empty()) {
    std::ofstream f(a.dot);
    if (!f) throw InputError(fmt::format("{}: cannot write", a.dot));
    f << to_dot(g, roots);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradgraph: transformers as expression graphs, gradients as graphs, trained on a CPU"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "Worker threads (default: all cores, or GG_NUM_THREADS)")->check(CLI::Range(1, 256));

  // train
  train::TrainOptions to;
  std::string train_config;
  auto* tr = app.add_subcommand("train", "Train the character-level transformer (defaults: tinyshakespeare, 2000 steps)");
  tr->add_option("--config", train_config, "JSON file of options (keys as below, with '_'); flags override it");
  tr->add_option("--data", to.data, "Text file to train on (default: the bundled tinyshakespeare.txt)");
  tr->add_option("--out-dir", to.out_dir, "Where the checkpoint, loss.csv and loss.svg go")->capture_default_str();
  tr->add_option("--n-layer", to.n_layer, "Transformer blocks")->capture_default_str();
  tr->add_option("--n-head", to.n_head, "Attention heads")->capture_default_str();
  tr->add_option("--n-embd", to.n_embd, "Embedding width")->capture_default_str();
  tr->add_option("--block-size", to.block_size, "Context length")->capture_default_str();
  tr->add_option("--bias", to.bias, "Biases in Linear and LayerNorm (true/false)")->capture_default_str();
  tr->add_option("--tie-weights", to.tie_weights, "Share the token embedding with the head")->capture_default_str();
  tr->add_option("--attn-scale", to.attn_scale, "Scale attention scores by head_size^-0.5")->capture_default_str();
  tr->add_option("--pos-encoding", to.pos_encoding, "learned or sinusoidal")->capture_default_str();
  tr->add_option("--gelu", to.gelu, "erf or tanh")->capture_default_str();
  tr->add_option("--dropout", to.dropout, "Dropout on attention weights")->capture_default_str();
  tr->add_option("--batch-size", to.batch_size, "Sequences per step")->capture_default_str();
  tr->add_option("--steps", to.steps, "Optimizer steps")->capture_default_str();
  tr->add_option("--warmup", to.warmup, "Linear warm-up steps before cosine decay")->capture_default_str();
  tr->add_option("--optimizer", to.optimizer, "adamw or sgd")->capture_default_str();
  tr->add_option("--lr", to.lr, "Peak learning rate")->capture_default_str();
  tr->add_option("--min-lr", to.min_lr, "Learning rate at the end of the cosine decay")->capture_default_str();
  tr->add_option("--beta1", to.beta1, "AdamW beta1")->capture_default_str();
  tr->add_option("--beta2", to.beta2, "AdamW beta2")->capture_default_str();
  tr->add_option("--eps", to.eps, "AdamW epsilon")->capture_default_str();
  tr->add_option("--weight-decay", to.weight_decay, "AdamW decoupled weight decay (2-D+ parameters)")->capture_default_str();
  tr->add_option("--momentum", to.momentum, "SGD momentum")->capture_default_str();
  tr->add_option("--clip", to.clip, "Clip the global gradient norm (0 = off)")->capture_default_str();
  tr->add_option("--eval-interval", to.eval_interval, "Steps between validation runs")->capture_default_str();
  tr->add_option("--eval-iters", to.eval_iters, "Batches per validation run")->capture_default_str();
  tr->add_option("--final-eval-iters", to.final_eval_iters, "Batches for the final validation loss")->capture_default_str();
  tr->add_option("--sample-tokens", to.sample_tokens, "Characters to generate at the end")->capture_default_str();
  tr->add_option("--temperature", to.temperature, "Sampling temperature")->capture_default_str();
  tr->add_option("--top-k", to.top_k, "Sample among the k likeliest (0 = all)")->capture_default_str();
  tr->add_option("--seed", to.seed, "Random seed")->capture_default_str();
  tr->add_flag("--resume", to.resume, "Continue from <out-dir>/checkpoint.safetensors");
  tr->add_flag("--quiet", to.quiet, "No progress bar");

  // sample
  SampleCmd sa;
  auto* sm = app.add_subcommand("sample", "Generate text from a checkpoint");
  sm->add_option("--checkpoint", sa.checkpoint, "Checkpoint written by train")->required();
  sm->add_option("--prompt", sa.o.prompt, "Text to continue")->capture_default_str();
  sm->add_option("--temperature", sa.o.temperature, "Sampling temperature (> 0)")->capture_default_str();
  sm->add_option("--top-k", sa.o.top_k, "Sample among the k likeliest (0 = all)")->capture_default_str();
  sm->add_option("--tokens", sa.o.tokens, "Characters to generate")->capture_default_str();
  sm->add_option("--seed", sa.o.seed, "Random seed")->capture_default_str();

  // grad
  GradCmd ga;
  auto* gr = app.add_subcommand("grad", "Loss, logits and every parameter's gradient for one batch");
  gr->add_option("--config", ga.config, "Model config JSON")->required();
  gr->add_option("--weights", ga.weights, "Weights (safetensors)")->required();
  gr->add_option("--batch", ga.batch, "tokens and targets [B, T] (safetensors)")->required();
  gr->add_option("--out", ga.out, "Output safetensors")->required();

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

  // inspect
  InspectCmd ia;
  auto* in = app.add_subcommand("inspect", "Print the model's forward (and gradient) graph, one node a line");
  in->add_option("--config", ia.config, "Model config JSON")->required();
  in->add_option("--batch", ia.batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  in->add_option("--seq", ia.seq, "Sequence length (default: block_size)")->check(CLI::NonNegativeNumber);
  in->add_flag("--grad", ia.grad, "Also build and print the gradient graph");
  in->add_option("--dot", ia.dot, "Write Graphviz dot to this file");

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
                : fmt::format("unknown subcommand '{}' (expected train, sample, grad, replay or inspect)", first);
    }
    for (char& ch : msg)
      if (ch == '\n') ch = ' ';
    fmt::print(stderr, "gradgraph: error: {} (see --help)\n", msg);
    return 2;
  }
  if (threads > 0) gg::set_num_threads(threads);
  try {
    if (*tr) {
      if (!train_config.empty()) {
        // Options from the file first, then every flag given on the command line again.
        train::TrainOptions from_file;
        from_file.merge_json(read_text(train_config), train_config);
        to = from_file;
        app.clear();
        app.parse(argc, argv);
      }
      train::run_training(to);
      return 0;
    }
    if (*sm) return run_sample(sa);
    if (*gr) return run_grad(ga);
    if (*rp) return run_replay(ra);
    if (*in) return run_inspect(ia);
  } catch (const InputError& e) {
    fmt::print(stderr, "gradgraph: error: {}\n", e.what());
  } catch (const io::Error& e) {
    fmt::print(stderr, "gradgraph: error: {}\n", e.what());
  } catch (const GraphError& e) {
    fmt::print(stderr, "gradgraph: error: {}\n", e.what());
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "gradgraph: error: out of memory (is the model or batch too large?)\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "gradgraph: error: {}\n", e.what());
  }
  return 1;
}
