// Gradient clipping as a safety rail: the same small character transformer trained twice
// with plain SGD at a learning rate far too high, once with the global gradient norm
// clipped to 1.0 (autodiff's clip_grad_norm, as torch.nn.utils.clip_grad_norm_) and once
// without. Unclipped, one large gradient throws the weights so far that the loss blows up;
// clipped, every update has norm <= lr * 1.0 and training stays finite.
// Writes both loss curves (CSV, SVG) and the gradient norms, and prints where the unclipped
// run diverged. Checks: the unclipped run diverges (a loss non-finite or above twice the
// uniform guess's ln V), the clipped one stays finite and ends below its initial loss.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "autodiff/optim.h"
#include "train/data.h"
#include "train/model.h"
#include "train/plot.h"
#include "train/trainer.h"

using namespace gg;
using namespace gg::train;

struct Run {
  std::string name;
  Series loss, grad_norm;         // per step; grad_norm before clipping
  std::int64_t blew_up_at = -1;   // first step whose loss was non-finite or above the blow-up level
  double seconds = 0;
};

// Trains from `seed` (the same weights and batches for every run) with max_norm (0 = no clipping).
static Run train_one(const std::string& name, const dsl::GptConfig& cfg, const CharData& data, std::int64_t B,
                     std::int64_t steps, double lr, double max_norm, double blowup, std::uint64_t seed) {
  Run r{name, {name, {}, {}}, {name, {}, {}}};
  auto t0 = std::chrono::steady_clock::now();
  ParamStore store;
  StepRunner runner(cfg, B, cfg.block_size, store, /*training=*/false, seed);
  store.init_missing(runner.graph(), seed);
  Sgd opt;                                   // p -= lr * g
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> x, y;            // x, y: (B, T)
  for (std::int64_t step = 0; step < steps; ++step) {
    sample_batch(data.train, B, cfg.block_size, rng, x, y);
    const double loss = runner.forward_backward(x.data(), y.data());
    r.loss.x.push_back(double(step + 1));
    r.loss.y.push_back(loss);
    if (r.blew_up_at < 0 && !(loss <= blowup)) r.blew_up_at = step + 1;  // catches nan too
    if (!std::isfinite(loss)) break;         // nothing left to learn from
    std::vector<ParamGrad> pg = runner.grads();
    const double norm = clip_grad_norm(pg, max_norm);
    r.grad_norm.x.push_back(double(step + 1));
    r.grad_norm.y.push_back(norm);
    opt.step(pg, lr);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

int main(int argc, char** argv) {
  std::int64_t steps = 1000, batch = 16, n_embd = 64, n_head = 4, n_layer = 2, block = 32;
  double lr = 2.0, max_norm = 1.0;
  std::uint64_t seed = 7;
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

  CharData data = CharData::load(default_data_path(), block);
  const std::int64_t V = std::int64_t(data.vocab.size());
  dsl::GptConfig cfg{.vocab_size = V, .block_size = block, .n_layer = n_layer, .n_head = n_head, .n_embd = n_embd};
  const double blowup = 2 * std::log(double(V));  // twice the loss of a uniform guess
  fmt::print("{} layers x {} heads x {} dims, block {}, batch {}, {} steps, SGD lr {}\n", n_layer, n_head, n_embd,
             block, batch, steps, lr);

  Run clipped = train_one(fmt::format("clipped at {}", max_norm), cfg, data, batch, steps, lr, max_norm, blowup, seed);
  Run unclipped = train_one("unclipped", cfg, data, batch, steps, lr, 0, blowup, seed);

  std::filesystem::create_directories(out);
  write_csv(out + "/loss.csv", {clipped.loss, unclipped.loss});
  // The chart draws a loss above the blow-up level at that level, so both curves stay readable.
  auto capped = [&](Series s) {
    for (double& v : s.y) v = v > blowup ? blowup : v;
    return s;
  };
  write_svg(out + "/loss.svg", fmt::format("SGD at lr {}: clipped vs unclipped (capped at 2 ln V)", lr), "step",
            "training loss", {capped(clipped.loss), capped(unclipped.loss)});
  write_csv(out + "/grad_norm.csv", {clipped.grad_norm, unclipped.grad_norm});

  auto fmt_step = [](std::int64_t s) { return s < 0 ? std::string("never") : std::to_string(s); };
  auto max_norm_of = [](const Series& s) {
    double m = 0;
    for (double v : s.y) m = std::isfinite(v) ? std::max(m, v) : INFINITY;
    return m;
  };
  fmt::print("\n{:<16} {:>10} {:>11} {:>14} {:>8}\n", "run", "blew up at", "final loss", "max grad norm", "seconds");
  for (const Run* r : {&clipped, &unclipped})
    fmt::print("{:<16} {:>10} {:>11.5g} {:>14.4g} {:>8.1f}\n", r->name, fmt_step(r->blew_up_at), r->loss.y.back(),
               max_norm_of(r->grad_norm), r->seconds);
  fmt::print("\nwrote {0}/loss.csv, {0}/loss.svg, {0}/grad_norm.csv\n", out);

  bool clipped_finite = true;
  for (double l : clipped.loss.y) clipped_finite = clipped_finite && std::isfinite(l);
  const bool clipped_learns = clipped.loss.y.back() < clipped.loss.y.front();
  const bool holds = unclipped.blew_up_at > 0 && clipped_finite && clipped_learns;
  fmt::print("claim: unclipped diverges (step {}), clipped stays finite (final loss {:.4f} < initial {:.4f}): {}\n",
             fmt_step(unclipped.blew_up_at), clipped.loss.y.back(), clipped.loss.y.front(),
             holds ? "holds" : "DOES NOT HOLD");
  return holds ? 0 : 1;
}
