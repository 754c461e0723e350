// Gradient clipping as a safety rail: the reference GPT (models/gpt.h) trained twice by the
// generic trainer with plain SGD at a learning rate far too high, once with the global
// gradient norm clipped to 1.0 (autodiff's clip_grad_norm, as torch.nn.utils.clip_grad_norm_)
// and once without. Unclipped, one large gradient throws the weights so far that the loss
// blows up; clipped, every update has norm <= lr * 1.0 and training stays finite.
// Each run writes its curves under --out/clipped and --out/unclipped (fit() stops a run at
// its first non-finite loss, still writes them and hands them back with the Diverged error);
// the comparison goes to --out/loss.csv and loss.svg, and the global gradient norm of every
// step, before clipping, to --out/grad_norm.csv.
// Checks: the unclipped run diverges (a loss non-finite or above twice the uniform guess's
// ln V), the clipped one stays finite and ends below its initial loss.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "models/char_lm.h"
#include "train/data.h"
#include "train/plot.h"
#include "train/trainer.h"

using namespace gg;

// The curve `series` of a run, renamed `name`.
static train::Series find_series(const std::vector<train::Series>& curves, const std::string& series,
                                 const std::string& name) {
  for (const train::Series& s : curves)
    if (s.name == series) return {name, s.x, s.y};
  return {name, {}, {}};
}

struct Run {
  std::string name;
  train::Series loss, grad_norm;  // per step
  std::string stopped;            // why fit() stopped the run early, if it did
  std::int64_t blew_up_at = -1;   // first step whose loss was non-finite or above the blow-up level
  double seconds = 0;
};

// Trains into `dir` from o.seed (the same weights and batches for every run).
static Run train_one(const std::string& name, const std::string& dir, const models::GptConfig& cfg,
                     const train::DataSource& data, train::TrainOptions o, double blowup) {
  Run r;
  r.name = name, o.out_dir = dir;
  train::Model m = models::gpt_model(cfg);
  train::RunInfo info;
  info.title = fmt::format("SGD at lr {}, {}", o.lr, name);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<train::Series> curves;
  try {
    curves = train::fit(m, data, o, info).curves;
  } catch (const train::Diverged& e) {  // the curves up to the step before
    r.stopped = e.what();
    curves = e.curves;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.loss = find_series(curves, "train", name);
  r.grad_norm = find_series(curves, "grad_norm", name);
  for (std::size_t i = 0; i < r.loss.y.size() && r.blew_up_at < 0; ++i)
    if (!(r.loss.y[i] <= blowup)) r.blew_up_at = std::int64_t(r.loss.x[i]);  // catches nan too
  if (r.blew_up_at < 0 && !r.stopped.empty()) r.blew_up_at = std::int64_t(r.loss.y.size()) + 1;
  return r;
}

int main(int argc, char** argv) {
  std::int64_t steps = 1000, batch = 16, n_embd = 64, n_head = 4, n_layer = 2, block = 32;
  double lr = 2.0, max_norm = 1.0;
  std::int64_t seed = 7;
  std::string out = "runs/clipping";
  CLI::App app{"gradient clipping keeps an unstable SGD run finite"};
  app.add_option("--steps", steps, "training steps per run")->check(CLI::Range(1, 10000000));
  app.add_option("--out", out, "output directory");
  app.add_option("--lr", lr, "SGD learning rate (deliberately too high)");
  app.add_option("--max-norm", max_norm, "clipping threshold of the global gradient norm");
  app.add_option("--seed", seed, "initial weights and batches (the same for both runs)");
  app.add_option("--n-layer", n_layer, "transformer blocks");
  app.add_option("--batch", batch, "batch size");
  CLI11_PARSE(app, argc, argv);

  // The run: plain SGD (no momentum) at a constant lr, evaluated about 20 times.
  train::TrainOptions o;
  o.optimizer = "sgd", o.momentum = 0, o.lr = lr, o.min_lr = lr, o.warmup = 0, o.steps = steps;
  o.seed = seed, o.quiet = true, o.eval_interval = std::max<std::int64_t>(1, steps / 20);
  o.clip = max_norm;
  try {
    train::TrainOptions::table().validate(&o, "options");
  } catch (const train::InputError& e) {
    fmt::print(stderr, "clipping: {}\n", e.what());
    return 2;
  }

  // Data: random (batch, block) windows of the text, targets shifted by one (no validation:
  // the claim is about the training loss).
  train::CharData text = train::CharData::load(models::default_text_path(), block);
  train::DataSource data = models::char_windows(text, batch, block, /*val_seed=*/0);
  data.val = nullptr;

  const std::int64_t V = std::int64_t(text.vocab.size());
  models::GptConfig cfg;
  cfg.vocab_size = V, cfg.block_size = block, cfg.n_layer = n_layer, cfg.n_head = n_head, cfg.n_embd = n_embd;
  const double blowup = 2 * std::log(double(V));  // twice the loss of a uniform guess
  fmt::print("{} layers x {} heads x {} dims, block {}, batch {}, {} steps, SGD lr {}\n", n_layer, n_head, n_embd,
             block, batch, steps, lr);

  Run clipped = train_one(fmt::format("clipped at {}", max_norm), out + "/clipped", cfg, data, o, blowup);
  o.clip = 0;
  Run unclipped = train_one("unclipped", out + "/unclipped", cfg, data, o, blowup);

  train::write_csv(out + "/loss.csv", {clipped.loss, unclipped.loss});
  // The chart draws a loss above the blow-up level at that level, so both curves stay readable.
  auto capped = [&](train::Series s) {
    for (double& v : s.y) v = v > blowup ? blowup : v;
    return s;
  };
  train::write_svg(out + "/loss.svg", fmt::format("SGD at lr {}: clipped vs unclipped (capped at 2 ln V)", lr), "step",
                   "training loss", {capped(clipped.loss), capped(unclipped.loss)});
  train::write_csv(out + "/grad_norm.csv", {clipped.grad_norm, unclipped.grad_norm});

  auto fmt_step = [](std::int64_t s) { return s < 0 ? std::string("never") : std::to_string(s); };
  auto max_of = [](const train::Series& s) {  // "-" when the run stopped before its first evaluation
    double m = 0;
    for (double v : s.y) m = std::isfinite(v) ? std::max(m, v) : INFINITY;
    return s.y.empty() ? std::string("-") : fmt::format("{:.4g}", m);
  };
  fmt::print("\n{:<16} {:>10} {:>11} {:>15} {:>8}\n", "run", "blew up at", "last loss", "max probe norm", "seconds");
  for (const Run* r : {&clipped, &unclipped})
    fmt::print("{:<16} {:>10} {:>11.5g} {:>15} {:>8.1f}\n", r->name, fmt_step(r->blew_up_at),
               r->loss.y.empty() ? NAN : r->loss.y.back(), max_of(r->grad_norm), r->seconds);
  for (const Run* r : {&clipped, &unclipped})
    if (!r->stopped.empty()) fmt::print("{}: {}\n", r->name, r->stopped);
  fmt::print("\nwrote {0}/loss.csv, {0}/loss.svg, {0}/grad_norm.csv (each run's in {0}/clipped, {0}/unclipped)\n", out);

  bool clipped_finite = clipped.stopped.empty() && !clipped.loss.y.empty();
  for (double l : clipped.loss.y) clipped_finite = clipped_finite && std::isfinite(l);
  const bool clipped_learns = clipped_finite && clipped.loss.y.back() < clipped.loss.y.front();
  const bool holds = unclipped.blew_up_at > 0 && clipped_finite && clipped_learns;
  fmt::print("claim: unclipped diverges (step {}), clipped stays finite (final loss {:.4f} < initial {:.4f}): {}\n",
             fmt_step(unclipped.blew_up_at), clipped.loss.y.empty() ? NAN : clipped.loss.y.back(),
             clipped.loss.y.empty() ? NAN : clipped.loss.y.front(), holds ? "holds" : "DOES NOT HOLD");
  return holds ? 0 : 1;
}
