// What the examples that train variants of one small character model on the same data and
// budget share (positional_concat, llama_style, scale_ablation): the data and the run's
// options, training one variant, and the table that compares them with its claim.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/char_lm.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/plot.h"
#include "train/trainer.h"

namespace gg::examples {

// The bundled text as random (batch, block) windows, targets shifted by one, 20 fixed
// validation batches (the same for every variant); AdamW at lr with warm-up for a tenth of
// the steps, cosine to lr / 10, clipping at 1.0, seed 1337, evaluated 5 times.
struct CharBudget {
  train::CharData text;
  train::DataSource data;
  train::TrainOptions options;
};

inline CharBudget char_budget(std::int64_t block, std::int64_t batch, std::int64_t steps, double lr) {
  CharBudget b{train::CharData::load(models::default_text_path(), block), {}, {}};
  b.data = models::char_windows(b.text, batch, block, /*val_seed=*/1337 + 1);
  train::TrainOptions& o = b.options;
  o.steps = steps, o.lr = lr, o.min_lr = lr / 10, o.warmup = steps / 10, o.seed = 1337, o.quiet = true;
  o.eval_interval = std::max<std::int64_t>(1, steps / 5), o.eval_iters = o.final_eval_iters = 20;
  return b;
}

struct Run {
  std::string name;
  train::Series curve;  // training loss per step
  double val_before = NAN, val_after = NAN;
  std::int64_t n_params = 0;
  double seconds = 0;
};

// Trains m into out/<name> from o.seed; the validation loss is measured before and after.
inline Run train_variant(const std::string& name, train::Model m, const train::DataSource& data, train::TrainOptions o,
                         const std::string& out, const std::string& title) {
  o.out_dir = out + "/" + name;
  m.declare(data.val(0));
  m.init_params(std::uint64_t(o.seed));  // fit() keeps these
  Run r{name, {name, {}, {}}};
  r.n_params = m.params().count();
  r.val_before = train::evaluate_loss(m, data, o.eval_iters);
  train::RunInfo info;
  info.title = title;
  train::FitResult res = train::fit(m, data, o, info);
  r.val_after = res.final_val_loss;
  r.seconds = res.seconds;
  for (const train::Series& c : train::load_checkpoint(res.checkpoint).curves)
    if (c.name == "train") r.curve.x = c.x, r.curve.y = c.y;
  return r;
}

// Writes the runs' training curves to out/loss.csv and loss.svg, prints the table and which
// variant ended lower, and whether every variant stayed finite and learned (its validation
// loss fell): the claim, also returned.
inline bool compare_variants(const std::vector<Run>& runs, const std::string& out, const std::string& chart_title) {
  std::vector<train::Series> curves;
  for (const Run& r : runs) curves.push_back(r.curve);
  train::write_csv(out + "/loss.csv", curves);
  train::write_svg(out + "/loss.svg", chart_title, "step", "training loss", curves);

  fmt::print("\n{:<8} {:>8} {:>11} {:>10} {:>11} {:>8}\n", "variant", "params", "val before", "val after",
             "train last", "seconds");
  bool ok = true;
  std::vector<std::string> dirs;
  for (const Run& r : runs) {
    fmt::print("{:<8} {:>8} {:>11.4f} {:>10.4f} {:>11.4f} {:>8.1f}\n", r.name, r.n_params, r.val_before, r.val_after,
               r.curve.y.back(), r.seconds);
    bool finite = std::isfinite(r.val_after);
    for (double l : r.curve.y) finite = finite && std::isfinite(l);
    const bool learned = r.val_after < r.val_before;
    if (!finite) fmt::print("  {}: a loss was not finite\n", r.name);
    if (!learned) fmt::print("  {}: validation loss did not fall\n", r.name);
    ok = ok && finite && learned;
    dirs.push_back(out + "/" + r.name);
  }
  fmt::print("\nwrote {0}/loss.csv, {0}/loss.svg (each run's in {1})\n", out, fmt::join(dirs, ", "));
  const auto [best, worst] =
      std::minmax_element(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.val_after < b.val_after; });
  fmt::print("better: {} (val {:.4f} vs {:.4f})\n", best->name, best->val_after, worst->val_after);
  fmt::print("claim: both stay finite and learn: {}\n", ok ? "holds" : "DOES NOT HOLD");
  return ok;
}

}  // namespace gg::examples
