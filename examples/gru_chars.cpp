// A recurrent character model: a GRU reads the bundled Shakespeare one character at a time,
// unrolled over --seq steps (32 by default), and predicts each next character. Each step is
// built in a StepScope, which names the step's nodes ("step.3.gru.hh") but not its weights
// ("gru.hh.weight", "emb.weight"): every step uses the same weights, and the gradient of
// each is the sum over the steps. The cell is PyTorch's GRU, written with the sigmoid and tanh primitives:
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)        (reset gate)
//   z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)        (update gate)
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))     (candidate)
//   h' = (1 - z) * n + z * h
// with the three input and the three hidden products stacked as PyTorch stores them
// (gru.ih: (3H, E), gru.hh: (3H, H)). The generic trainer fits it (AdamW, warm-up, cosine,
// clipping); the report compares the validation loss with the uniform baseline ln(vocab).
// --dot FILE writes the training graph's gradient as Graphviz dot, the steps drawn as runs
// of boxes, --expand step.5 drawing one step node by node.
// Checks: the loss stays finite and the validation loss ends below ln(vocab).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>

#include "dsl/nn.h"
#include "models/char_lm.h"
#include "train/data.h"
#include "train/trainer.h"

using namespace gg;
using namespace gg::dsl;

// One GRU step: x (B, E), h (B, H) -> h' (B, H). Inside a step scope, the linears' weights
// are declared at the first step and found again at every later one.
static Expr gru_cell(Expr x, Expr h) {
  const std::int64_t H = h.dim(-1);
  const Init init = uniform_init(-1.f / std::sqrt(float(H)), 1.f / std::sqrt(float(H)));  // PyTorch's
  Expr gi = linear(x, 3 * H, "gru.ih", true, init);   // gi: (B, 3H), the r, z, n thirds
  Expr gh = linear(h, 3 * H, "gru.hh", true, init);   // gh: (B, 3H)
  auto third = [H](Expr v, std::int64_t k) { return slice(v, -1, k * H, (k + 1) * H); };  // (B, H)
  Expr r = sigmoid(third(gi, 0) + third(gh, 0));
  Expr z = sigmoid(third(gi, 1) + third(gh, 1));
  Expr n = tanh(third(gi, 2) + r * third(gh, 2));
  return (1.f - z) * n + z * h;
}

struct GruSize {
  std::int64_t V, embd, hidden;
};

// Inputs: tokens, targets (B, T) i32. Loss: cross-entropy of every step's prediction.
static train::Model gru_model(GruSize s) {
  return train::Model("gru_chars", [=](train::ModelInputs& in) {
    Graph& g = in.graph();
    Expr tokens = in["tokens"];                                   // tokens: (B, T)
    const std::int64_t B = tokens.dim(0), T = tokens.dim(1);
    Expr h = constant(g, std::vector<float>(std::size_t(B * s.hidden), 0.f), {B, s.hidden});  // h: (B, H)
    std::vector<Expr> hs;
    for (std::int64_t t = 0; t < T; ++t) {
      StepScope step(g, "step", t);                               // nodes "step.<t>...", weights shared
      Expr x = embedding(reshape(slice(tokens, 1, t, t + 1), {B}), s.V, s.embd, "emb");  // x: (B, E)
      h = gru_cell(x, h);
      hs.push_back(reshape(h, {B, 1, s.hidden}));
    }
    Expr states;
    {
      Scope name(g, "states");                                    // names the value and its gradient
      states = concat(hs, 1);                                     // states: (B, T, H)
    }
    Expr logits = linear(states, s.V, "head");                    // logits: (B, T, V)
    return train::ModelOutputs{cross_entropy(logits, in["targets"]), {{"logits", logits}}};
  });
}

// The training graph's gradient (every parameter's) as dot, the steps collapsed.
static void write_dot(const train::Model& m, const train::Batch& b, const std::string& path,
                      const std::vector<std::string>& expand) {
  train::ModelOutputs outs;
  std::unique_ptr<Graph> g = m.graph_for(b, true, &outs);
  DotOptions o;
  o.expand = expand;
  const std::string text = to_dot(*g, node_ids(*g, grad(outs.loss, params(*g))), o);
  std::ofstream f(path);
  f << text;
  if (!f) throw train::InputError(fmt::format("{}: cannot write", path));
  fmt::print("wrote {} ({} nodes in the graph)\n", path, g->size());
}

int main(int argc, char** argv) {
  std::int64_t steps = 1000, batch = 32, seq = 32, embd = 32, hidden = 128;
  double lr = 1e-2;
  std::string out = "runs/gru_chars", dot;
  std::vector<std::string> expand;
  CLI::App app{"a GRU character model on tinyshakespeare, unrolled over --seq steps"};
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 10000000));
  app.add_option("--seq", seq, "characters per window: the steps the GRU is unrolled over")->check(CLI::Range(1, 4096));
  app.add_option("--hidden", hidden, "GRU state size")->check(CLI::Range(1, 65536));
  app.add_option("--embd", embd, "character embedding size")->check(CLI::Range(1, 65536));
  app.add_option("--batch", batch, "windows per batch")->check(CLI::Range(1, 65536));
  app.add_option("--lr", lr, "peak learning rate (AdamW, warm-up then cosine)");
  app.add_option("--out", out, "output directory (checkpoint, loss.csv, loss.svg)");
  app.add_option("--dot", dot, "also write the gradient graph as Graphviz dot to this file");
  app.add_option("--expand", expand, "with --dot: draw this step (e.g. step.5) node by node; repeatable");
  CLI11_PARSE(app, argc, argv);

  // Data: random windows of the text, targets shifted by one; 20 fixed validation batches.
  const train::CharData text = train::CharData::load(models::default_text_path(), seq);
  const train::DataSource data = models::char_windows(text, batch, seq, /*val_seed=*/1338);
  const GruSize s{std::int64_t(text.vocab.size()), embd, hidden};
  train::Model m = gru_model(s);
  if (!dot.empty()) {
    std::mt19937_64 rng(0);
    write_dot(m, data.train(rng), dot, expand);
  }

  // The run: AdamW, warm-up for a tenth of the steps, cosine to lr / 10, clip at 1.0.
  train::TrainOptions o;
  o.out_dir = out, o.steps = steps, o.lr = lr, o.min_lr = lr / 10, o.warmup = steps / 10, o.seed = 1337;
  o.weight_decay = 0.01, o.quiet = true;
  o.eval_interval = std::max<std::int64_t>(1, steps / 5), o.eval_iters = o.final_eval_iters = 20;
  fmt::print("GRU over {} steps, vocab {}, embd {}, hidden {}, batch {}, {} steps, AdamW lr {}\n", seq, s.V, embd,
             hidden, batch, steps, lr);
  train::RunInfo info;
  info.title = fmt::format("GRU unrolled over {} characters", seq);
  train::FitResult r;
  try {
    r = train::fit(m, data, o, info);
  } catch (const train::InputError& e) {  // diverged: the curves are written
    fmt::print("{}\nclaim: training stays finite: DOES NOT HOLD\n", e.what());
    return 1;
  }
  const double uniform = std::log(double(s.V));
  fmt::print("val loss {:.4f} against the uniform baseline ln({}) = {:.4f} ({:.1f} s)\n", r.final_val_loss, s.V,
             uniform, r.seconds);
  const bool holds = std::isfinite(r.final_val_loss) && r.final_val_loss < uniform;
  fmt::print("claim: val loss below ln(vocab): {}\n", holds ? "holds" : "DOES NOT HOLD");
  return holds ? 0 : 1;
}
