// The generic trainer: from a model the user declared (train/model.h) and a source of
// batches to a trained checkpoint. It supplies the loop: AdamW or SGD (no weight decay on
// 1-D parameters), warm-up and cosine decay, clipping, evaluation on fixed validation
// batches (of any shape: plans per shape are cached by the model), the user's own metrics,
// a progress bar, loss and metric curves as CSV and SVG, periodic checkpoints, exact
// resume, and a final report. A diverging run stops at the first non-finite loss or
// gradient norm, keeps the last good checkpoint and still writes its curves.
//
//   Model m("mlp", build);
//   DataSource d{.train = [&](std::mt19937_64& rng) { return random_batch(rng); }};
//   TrainOptions o;  o.steps = 500;  o.out_dir = "runs/mlp";
//   FitResult r = fit(m, d, o);
#pragma once

#include <cstdint>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "model.h"
#include "optim.h"
#include "options.h"
#include "plot.h"

namespace gg::train {

// One parameter group of TrainOptions::groups: the parameters whose names match `pattern`
// ('*' any run of characters, '?' one; the first group that matches a name wins) train at
// their own peak learning rate `lr` (the run's schedule scaled by lr / TrainOptions::lr), with
// their own weight decay (AdamW, parameters of 2+ dimensions), or not at all (`frozen`: no
// gradient in the plan, no update, no decay, no optimizer state).
struct ParamGroup {
  std::string pattern;
  double lr = -1;            // -1: the run's
  double weight_decay = -1;  // -1: the run's
  bool frozen = false;
};
// TrainOptions::groups' text, "pattern:key=value,...;pattern:frozen" with the keys lr,
// weight_decay and frozen, as groups; throws InputError naming the part that is wrong.
std::vector<ParamGroup> parse_groups(const std::string& text);
// Whether `name` matches the glob `pattern`.
bool glob_match(const std::string& pattern, const std::string& name);

// What an evaluation callback sees (TrainOptions::on_eval).
struct Evaluation {
  std::int64_t step = 0;
  double train_loss = NAN;  // the moving average the progress line shows
  double val_loss = NAN;    // NaN without validation batches
  std::vector<std::pair<std::string, double>> metrics;
  bool final = false;       // the evaluation at the end of the run (stopping is moot there)
};
// What it decides: stop the run here (it ends as at its last step: final evaluation, curves,
// checkpoint and report), and whether this evaluation's checkpoint is written (false: the
// file keeps the one before, e.g. the best so far).
struct EvalAction {
  bool stop = false;
  bool save = true;
};

// The run's options; table() describes each once (flags, JSON, checks, checkpoint).
struct TrainOptions {
  std::string out_dir = "runs/run";   // checkpoint.safetensors, loss.csv, loss.svg
  std::int64_t steps = 1000, warmup = 100;
  std::string optimizer = "adamw";
  double lr = 1e-3, min_lr = 1e-4, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, momentum = 0.9;
  double clip = 1.0;                  // max global gradient norm; 0 = off
  std::int64_t eval_interval = 250;   // steps between evaluations (and checkpoints)
  std::int64_t eval_iters = 20;       // validation batches per evaluation
  std::int64_t final_eval_iters = 200;
  std::int64_t seed = 1337;           // initial weights, data order, dropout
  bool resume = false;                // continue from <out_dir>/checkpoint.safetensors
  bool quiet = false;                 // no progress bar (evaluations print as lines)
  bool detect_anomaly = false;        // stop at the first node that makes a NaN or an Inf, naming it
  bool grad_stats = false;            // per-parameter gradient statistics: grad_stats.csv, the log
  std::int64_t accum = 1;             // micro-batches per optimizer step (gradient accumulation)
  // Under mpirun (train/distributed.h): gradients are all-reduced in buckets of about this
  // many MB, each started as soon as the backward has made it.
  double bucket_mb = 1;
  // The learning-rate schedule by name: "cosine" (warm-up, then cosine decay to min_lr),
  // "linear" (warm-up, then a straight line to min_lr), "constant" (warm-up, then lr), or the
  // name of lr_schedule. Stored in the checkpoint: a resume under another name is refused.
  std::string schedule = "cosine";
  // Parameter groups, "pattern:lr=3e-4,weight_decay=0;encoder.*:frozen" (ParamGroup).
  std::string groups;
  // "f32", or "bf16": mixed precision, every matrix product (forward and backward) with bf16
  // operands and f32 sums (Model::set_bf16_products); parameters, gradients, the optimizer's
  // moments and clipping stay f32 (master weights). Stored in the checkpoint: a resume in the
  // other precision says so.
  std::string precision = "f32";
  // Not options (not in the table, not stored): a schedule of one's own, the learning rate
  // at a 0-based step (give it a name in `schedule`), and a callback at each evaluation.
  std::function<double(std::int64_t step)> lr_schedule;
  std::function<EvalAction(const Evaluation&)> on_eval;
  static const OptionTable<TrainOptions>& table();
};

// The precision option of a table ("f32" or "bf16", as TrainOptions::precision): the run's,
// and that of every command that builds a model.
template <class S>
Option precision_option(std::string S::*member) {
  return choice("precision", member, {{"f32", "f32"}, {"bf16", "bf16"}},
                "Matrix products in f32, or with bf16 operands and f32 sums (master weights, optimizer and clipping "
                "in f32)");
}

// Where batches come from. Only `train` is required.
struct DataSource {
  // A training batch; all its randomness must come from `rng` (so a resumed run draws the
  // same batches as an uninterrupted one).
  std::function<Batch(std::mt19937_64& rng)> train;
  // The i-th validation batch (the same every evaluation): TrainOptions::eval_iters of them
  // at each evaluation (20 by default) and final_eval_iters at the end (200). None: the
  // evaluations report the training loss and `metrics` only (the run says so once).
  std::function<Batch(std::int64_t i)> val;
  // The user's own measures at each evaluation and at the end (e.g. accuracy), by name,
  // from each validation batch and the evaluation pass's named outputs (and "loss"), averaged
  // over the evaluation's batches: no second pass over them.
  std::function<std::vector<std::pair<std::string, double>>(const Batch& batch,
                                                            const std::map<std::string, Tensor>& outputs)>
      batch_metrics;
  // Measures of one's own making at each evaluation and at the end, by name. Use evaluation
  // passes (m.evaluate, m.loss): a training pass here would replace the gradients of the step
  // just taken.
  std::function<std::vector<std::pair<std::string, double>>(Model& m)> metrics;
  // Under mpirun, what the loss is a mean over in a batch, when not its rows: e.g. the target
  // tokens that are not padding. Each rank's gradient is weighted by its share of them, so
  // the sum is the global batch's gradient (train/distributed.h). Default: rows.
  std::function<double(const Batch&)> loss_terms;
  // Items in a batch for the throughput figure (e.g. tokens); default: its first dimension.
  std::function<std::int64_t(const Batch&)> items;
  std::string item_name = "ex";       // "tok" for tokens
};

// Also written into the checkpoint and the report.
struct RunInfo {
  std::string title = "training";                 // of the loss plot
  std::map<std::string, std::string> metadata;    // the user's own checkpoint entries
};

struct FitResult {
  std::int64_t steps = 0;                         // optimizer steps taken in this call
  double final_train_loss = NAN, final_val_loss = NAN;
  std::vector<std::pair<std::string, double>> metrics;  // the last evaluation's
  double seconds = 0, items_per_sec = 0;
  std::string checkpoint;                         // its path
  // Every curve of the run, a resumed run's earlier part included: "train" (loss per step),
  // "grad_norm" (global gradient norm before clipping, per step), "val" (at evaluations)
  // and one per metric.
  std::vector<Series> curves;
};

// What fit() throws when the loss or the gradient norm stops being finite: the step, and
// the curves up to the step before (also written to loss.csv). The last good checkpoint
// is kept.
class Diverged : public InputError {
 public:
  Diverged(const std::string& what, std::int64_t step, std::vector<Series> curves)
      : InputError(what), step(step), curves(std::move(curves)) {}
  std::int64_t step;            // the 1-based step whose loss or norm was not finite
  std::vector<Series> curves;
};

// Trains `m` (parameters created from their initializers with o.seed unless resumed or
// already in m.params()), printing progress and reports to `out` (null: silent). Throws InputError on bad
// options or a checkpoint that does not fit, and on divergence (after saving the curves).
FitResult fit(Model& m, const DataSource& data, const TrainOptions& o, const RunInfo& info = {},
              std::FILE* out = stdout);

// The optimizer a run's options ask for.
std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o);

// Mean loss of the model over validation batches 0..iters-1 (evaluation pass).
double evaluate_loss(Model& m, const DataSource& data, std::int64_t iters);
// The same, and the means of data.batch_metrics over those batches (in one pass).
double evaluate_loss(Model& m, const DataSource& data, std::int64_t iters,
                     std::vector<std::pair<std::string, double>>& batch_means);

}  // namespace gg::train
