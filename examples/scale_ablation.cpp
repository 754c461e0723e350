// Ablation of the attention scale: the reference GPT (models/gpt.h) trained twice on the
// bundled text by the generic trainer, with scores q k^T * hs^-0.5 (scaled) and with q k^T
// (unscaled). The query and key weights start at N(0, 1/n_embd), so q and k have
// unit-variance components as the paper's argument assumes: unscaled scores then have std
// sqrt(hs) = 8 with one wide head (hs = n_embd = 64), the softmax saturates and its
// gradient vanishes. Both runs start from the same weights and see the same batches.
// Writes each run's curves and checkpoint under --out/scaled and --out/unscaled, both
// training curves in --out/loss.csv and loss.svg, and prints the final losses.
// Checks: both runs stay finite; with enough steps (--steps >= 200) the scaled run's
// validation loss is not worse than the unscaled one's by more than --margin.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "models/char_lm.h"
#include "train/checkpoint.h"
#include "examples/variants.h"
#include "train/data.h"
#include "train/plot.h"
#include "train/trainer.h"

using namespace gg;

struct Run {
  std::string name;
  train::Series curve;  // training loss per step
  double val_loss = NAN;  // mean over the 20 fixed validation batches after training
  double seconds = 0;
};

// Trains `cfg` with W_Q and W_K rescaled from N(0, 0.02) to N(0, qk_std) at init.
static Run train_one(const std::string& name, const std::string& dir, const models::GptConfig& cfg,
                     const train::DataSource& data, train::TrainOptions o, double qk_std) {
  o.out_dir = dir;
  train::Model m = models::gpt_model(cfg);
  m.declare(data.val(0));
  m.init_params(std::uint64_t(o.seed));  // fit() keeps parameters that are already there
  for (auto& [pname, w] : m.params().all())
    if (pname.ends_with("attn.query.weight") || pname.ends_with("attn.key.weight"))
      for (float& v : w.fspan()) v *= float(qk_std / 0.02);
  train::RunInfo info;
  info.title = "attention scale ablation: " + name;
  train::FitResult r = train::fit(m, data, o, info);
  Run run{name, {name, {}, {}}, r.final_val_loss, r.seconds};
  for (const train::Series& s : train::load_checkpoint(r.checkpoint).curves)
    if (s.name == "train") run.curve.x = s.x, run.curve.y = s.y;
  return run;
}

int main(int argc, char** argv) {
  std::int64_t steps = 1000, batch = 16, n_embd = 64, n_head = 1, n_layer = 2, block = 32;
  double lr = 3e-3, margin = 0.02, qk_std = 0;
  std::string out = "runs/scale_ablation";
  CLI::App app{"attention with and without the 1/sqrt(d_k) scale"};
  app.add_option("--steps", steps, "training steps per run")->check(CLI::Range(1, 10000000));
  app.add_option("--out", out, "output directory");
  app.add_option("--lr", lr, "peak learning rate (AdamW, warm-up then cosine)");
  app.add_option("--n-embd", n_embd, "model width (the head size when --n-head 1)");
  app.add_option("--n-head", n_head, "attention heads");
  app.add_option("--n-layer", n_layer, "transformer blocks");
  app.add_option("--batch", batch, "batch size");
  app.add_option("--qk-std", qk_std, "std of the query/key weights at init (0 = 1/sqrt(n_embd); GPT's is 0.02)");
  app.add_option("--margin", margin, "allowed excess of the scaled run's val loss over the unscaled one's");
  CLI11_PARSE(app, argc, argv);
  if (qk_std <= 0) qk_std = 1.0 / std::sqrt(double(n_embd));

  // The data (random windows of the text, 20 fixed validation batches) and the run (AdamW,
  // warm-up for a tenth of the steps, cosine to lr / 10, clip at 1.0), the same for both.
  const examples::CharBudget b = examples::char_budget(block, batch, steps, lr);
  const train::CharData& text = b.text;
  const train::DataSource& data = b.data;
  const train::TrainOptions& o = b.options;

  models::GptConfig cfg;
  cfg.vocab_size = std::int64_t(text.vocab.size()), cfg.block_size = block, cfg.n_layer = n_layer;
  cfg.n_head = n_head, cfg.n_embd = n_embd;
  fmt::print("{} layers, {} head(s) of size {}, block {}, batch {}, {} steps, lr {}, W_Q/W_K std {:.3f}\n",
             n_layer, n_head, n_embd / n_head, block, batch, steps, lr, qk_std);

  Run scaled, unscaled;
  try {
    cfg.attn_scale = true;
    scaled = train_one("scaled (hs^-0.5)", out + "/scaled", cfg, data, o, qk_std);
    cfg.attn_scale = false;
    unscaled = train_one("unscaled", out + "/unscaled", cfg, data, o, qk_std);
  } catch (const train::InputError& e) {  // a run diverged: its curves are in its directory
    fmt::print("{}\nclaim: both runs stay finite: DOES NOT HOLD\n", e.what());
    return 1;
  }

  train::write_csv(out + "/loss.csv", {scaled.curve, unscaled.curve});
  train::write_svg(out + "/loss.svg", "attention scale ablation: training loss", "step", "loss",
            {scaled.curve, unscaled.curve});

  // Result table: the mean of the last 10% of training losses smooths batch noise.
  auto tail_mean = [](const train::Series& s) {
    const std::size_t n = std::max<std::size_t>(1, s.y.size() / 10);
    double t = 0;
    for (std::size_t i = s.y.size() - n; i < s.y.size(); ++i) t += s.y[i];
    return t / double(n);
  };
  fmt::print("\n{:<18} {:>12} {:>10} {:>8}\n", "run", "train (end)", "val", "seconds");
  for (const Run* r : {&scaled, &unscaled})
    fmt::print("{:<18} {:>12.4f} {:>10.4f} {:>8.1f}\n", r->name, tail_mean(r->curve), r->val_loss, r->seconds);

  const bool finite = std::isfinite(scaled.val_loss) && std::isfinite(unscaled.val_loss) &&
                      std::isfinite(tail_mean(scaled.curve)) && std::isfinite(tail_mean(unscaled.curve));
  const bool written = std::filesystem::exists(out + "/loss.csv") && std::filesystem::exists(out + "/loss.svg");
  fmt::print("\nwrote {0}/loss.csv, {0}/loss.svg (each run's in {0}/scaled, {0}/unscaled)\n", out);
  fmt::print("better: {} (val {:.4f} vs {:.4f})\n", scaled.val_loss <= unscaled.val_loss ? scaled.name : unscaled.name,
             std::min(scaled.val_loss, unscaled.val_loss), std::max(scaled.val_loss, unscaled.val_loss));
  bool ok = finite && written;
  if (steps >= 200) {  // below that both runs are still near the unigram loss: nothing to compare
    const bool holds = scaled.val_loss <= unscaled.val_loss + margin;
    fmt::print("claim: scaled val loss <= unscaled + {}: {}\n", margin, holds ? "holds" : "DOES NOT HOLD");
    ok = ok && holds;
  } else {
    fmt::print("claim: both runs finite, curves written: {} (too few steps to compare the losses)\n",
               finite && written ? "holds" : "DOES NOT HOLD");
  }
  if (!finite) fmt::print("a run did not stay finite\n");
  return ok ? 0 : 1;
}
