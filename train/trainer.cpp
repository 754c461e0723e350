// fit(): the step loop, evaluation, checkpoints, curves and the report, for any model.
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "train/checkpoint.h"
#include "train/plot.h"
#include "train/progress.h"

namespace gg::train {

const OptionTable<TrainOptions>& TrainOptions::table() {
  using T = TrainOptions;
  static const OptionTable<T> t{
      {opt("out_dir", &T::out_dir, "Where checkpoint.safetensors, loss.csv and loss.svg go"),
       opt("steps", &T::steps, "Optimizer steps").at_least(1).at_most(1e9),
       opt("warmup", &T::warmup, "Linear warm-up steps before the cosine decay").at_least(0).at_most(1e9),
       choice("optimizer", &T::optimizer, {{"adamw", "adamw"}, {"sgd", "sgd"}}, "adamw or sgd"),
       opt("lr", &T::lr, "Peak learning rate").above(0).at_most(10),
       opt("min_lr", &T::min_lr, "Learning rate at the end of the cosine decay").at_least(0).at_most(10),
       opt("beta1", &T::beta1, "AdamW beta1").at_least(0).below(1),
       opt("beta2", &T::beta2, "AdamW beta2").at_least(0).below(1),
       opt("eps", &T::eps, "AdamW epsilon").above(0).at_most(1),
       opt("weight_decay", &T::weight_decay, "AdamW decoupled weight decay (parameters of 2+ dimensions)")
           .at_least(0)
           .at_most(100),
       opt("momentum", &T::momentum, "SGD momentum").at_least(0).below(1),
       opt("clip", &T::clip, "Clip the global gradient norm to this (0 = off)").at_least(0).at_most(1e9),
       opt("eval_interval", &T::eval_interval, "Steps between evaluations and checkpoints").at_least(1).at_most(1e9),
       opt("eval_iters", &T::eval_iters, "Validation batches per evaluation").at_least(1).at_most(1e6),
       opt("final_eval_iters", &T::final_eval_iters, "Validation batches for the final evaluation").at_least(1).at_most(1e6),
       opt("seed", &T::seed, "Random seed (weights, data order, dropout)").at_least(0),
       opt("resume", &T::resume, "Continue from <out_dir>/checkpoint.safetensors"),
       opt("quiet", &T::quiet, "No progress bar"),
       opt("detect_anomaly", &T::detect_anomaly,
           "Stop at the first node (forward or backward) whose output holds a NaN or a new Inf, naming it"),
       opt("grad_stats", &T::grad_stats,
           "Gradient statistics per parameter and step (norm, max, zeros) in grad_stats.csv and the log; "
           "flags parameters whose gradient is zero by construction")},
      [](const T& o) -> std::pair<std::string, std::string> {
        if (o.min_lr > o.lr) return {"min_lr", fmt::format("{} is above lr = {}", o.min_lr, o.lr)};
        return {};
      }};
  return t;
}

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o) {
  if (o.optimizer == "sgd") return std::make_unique<Sgd>(o.momentum);
  return std::make_unique<AdamW>(AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
}

double evaluate_loss(Model& m, const DataSource& data, std::int64_t iters) {
  if (!data.val) return NAN;
  double total = 0;
  for (std::int64_t i = 0; i < iters; ++i) total += m.loss(data.val(i));
  return total / double(iters);
}

namespace {

std::int64_t batch_items(const DataSource& d, const Batch& b) {
  if (d.items) return d.items(b);
  const Shape& s = b.begin()->second.shape();
  return s.empty() ? 1 : s[0];
}

Series* series(std::vector<Series>& curves, const std::string& name) {
  for (Series& s : curves)
    if (s.name == name) return &s;
  curves.push_back({name, {}, {}});
  return &curves.back();
}

// loss.csv: train, val and grad_norm; loss.svg: train and val; metrics.csv/svg: the
// user's measures, when there are any.
void write_curves(const std::string& dir, const std::string& title, const std::vector<Series>& curves) {
  std::vector<Series> loss, plotted, metrics;
  for (const Series& s : curves) {
    const bool is_loss = s.name == "train" || s.name == "val";
    if (is_loss || s.name == "grad_norm") loss.push_back(s);
    if (is_loss) plotted.push_back(s);
    if (!is_loss && s.name != "grad_norm") metrics.push_back(s);
  }
  write_csv(dir + "/loss.csv", loss);
  write_svg(dir + "/loss.svg", title, "step", "loss", plotted);
  if (!metrics.empty()) {
    write_csv(dir + "/metrics.csv", metrics);
    write_svg(dir + "/metrics.svg", title, "step", "value", metrics);
  }
}

// The data and dropout generators as one line of text, and back.
std::string rng_text(const std::mt19937_64& data, const std::mt19937_64& dropout) {
  std::ostringstream s;
  s << data << ' ' << dropout;
  return s.str();
}
void restore_rngs(const std::string& text, const std::string& path, std::mt19937_64& data, std::mt19937_64& dropout) {
  std::istringstream s(text);
  if (!(s >> data >> dropout) || !(s >> std::ws).eof())
    throw InputError(fmt::format("{}: the RNG state is damaged (expected two mt19937_64 states)", path));
}

// One call of fit(): its state and its phases.
class Run {
 public:
  Run(Model& m, const DataSource& data, const TrainOptions& o, const RunInfo& info, std::FILE* out)
      : m_(m), data_(data), o_(o), info_(info), out_(out), rng_(std::uint64_t(o.seed)), optim_(make_optimizer(o)),
        ck_path_(o.out_dir + "/checkpoint.safetensors") {
    res_.checkpoint = ck_path_;
  }

  // The first batch, drawn from a copy of the generator: declares the model, sizes its plan.
  Batch first_batch() {
    std::mt19937_64 probe = rng_;
    return data_.train(probe);
  }

  // Parameters, optimizer state, generators and curves from the checkpoint; returns its step.
  std::int64_t resume() {
    Checkpoint ck = load_checkpoint(ck_path_);
    if (ck.model_kind != m_.kind() || ck.model_options != m_.options_json())
      throw InputError(fmt::format("{}: the checkpoint holds model '{}' {} but this run builds '{}' {}", ck_path_,
                                   ck.model_kind, ck.model_options.substr(0, 120), m_.kind(),
                                   m_.options_json().substr(0, 120)));
    if (ck.optimizer != o_.optimizer)
      throw InputError(fmt::format("{}: the checkpoint was trained with {}, not {}", ck_path_, ck.optimizer, o_.optimizer));
    if (ck.step > o_.steps)
      throw InputError(fmt::format("{}: the checkpoint is at step {}, beyond --steps {}", ck_path_, ck.step, o_.steps));
    load_params(m_.params(), ck.params, m_.param_table(), ck_path_);
    try {
      optim_->load_state(ck.optim_state, ck.step, param_shapes(m_.params()));
    } catch (const std::exception& e) {  // the optimizer names the state; this names the file
      throw InputError(fmt::format("{}: {}", ck_path_, e.what()));
    }
    restore_rngs(ck.rng_state, ck_path_, rng_, m_.rng());
    TrainOptions saved;
    read_json(ck.train_options, ck_path_ + " (train_options)", {bind(saved)});
    if (saved.steps != o_.steps || saved.warmup != o_.warmup || saved.lr != o_.lr || saved.min_lr != o_.min_lr)
      fmt::print(out_, "note: the learning-rate schedule changes on resume: the checkpoint's is steps {} warmup {} lr {} "
                       "min_lr {}, this run's steps {} warmup {} lr {} min_lr {}\n",
                 saved.steps, saved.warmup, saved.lr, saved.min_lr, o_.steps, o_.warmup, o_.lr, o_.min_lr);
    if (!ck.curves.empty()) curves_ = ck.curves;
    fmt::print(out_, "resuming {} at step {}\n", ck_path_, ck.step);
    return ck.step;
  }

  void print_header(const Batch& first) {
    std::int64_t n_params = 0;
    for (const ParamInfo& p : m_.param_table()) n_params += numel(p.shape);
    fmt::print(out_, "gradgraph fit: model '{}', {} parameters in {} tensors; {} steps with {} lr {}\n", m_.kind(),
               n_params, m_.param_table().size(), o_.steps, o_.optimizer, o_.lr);
    const Executor& plan = m_.plan_for(first, /*training=*/true);  // built now: its size is known up front
    fmt::print(out_, "plan: {} steps, arena {:.1f} MiB (without reuse {:.1f} MiB)\n", plan.order().size(),
               double(plan.arena_bytes()) / (1 << 20), double(plan.unshared_bytes()) / (1 << 20));
    if (o_.detect_anomaly) fmt::print(out_, "anomaly mode: every node's output is checked for NaN and Inf\n");
    if (o_.grad_stats)
      for (const ZeroGrad& z : m_.structurally_zero(first))
        fmt::print(out_, "note: the gradient of '{}' is zero by construction: {}\n", z.name, z.reason);
    std::fflush(out_);  // before the progress bar (stderr) starts
  }

  // Optimizer step `step` (0-based): forward, backward, clip, update, curves.
  void step(std::int64_t step) {
    Batch b = data_.train(rng_);
    const double loss = m_.forward_backward(b);
    std::vector<ParamGrad> pg = m_.grads();
    if (o_.grad_stats && std::isfinite(loss)) record_stats(step + 1, grad_stats(pg, o_.clip));
    const double norm = std::isfinite(loss) ? grad_norm(pg) : NAN;
    if (!std::isfinite(loss) || !std::isfinite(norm)) diverged(step + 1, loss, norm);
    // Clipping rides along the update (the same numbers as clip_grad_norm, one pass fewer).
    optim_->step(pg, cosine_lr(step, o_.warmup, o_.steps, o_.lr, o_.min_lr), clip_scale(norm, o_.clip));
    items_ += batch_items(data_, b);
    add_point("train", step + 1, loss);
    add_point("grad_norm", step + 1, norm);
    ema_ = std::isnan(ema_) ? loss : 0.9 * ema_ + 0.1 * loss;
    res_.final_train_loss = loss;
  }

  // Validation loss over `iters` batches and the user's metrics, after `step` steps.
  void evaluate(std::int64_t step, std::int64_t iters) {
    res_.final_val_loss = evaluate_loss(m_, data_, iters);
    if (data_.val) add_point("val", step, res_.final_val_loss);
    res_.metrics = data_.metrics ? data_.metrics(m_) : std::vector<std::pair<std::string, double>>{};
    for (auto& [name, v] : res_.metrics) add_point(name, step, v);
  }

  // "step   250: train loss 2.4355, val loss 2.4402, accuracy 0.9123", and with grad_stats
  // the norms before and after clipping and the three largest per-parameter norms.
  std::string report_line(std::int64_t step) const {
    std::string line = fmt::format("step {:>5}: train loss {:.4f}", step, ema_);
    if (data_.val) line += fmt::format(", val loss {:.4f}", res_.final_val_loss);
    for (auto& [name, v] : res_.metrics) line += fmt::format(", {} {:.4f}", name, v);
    if (o_.grad_stats && !last_stats_.params.empty()) {
      line += fmt::format("; grad norm {:.4g} (clipped {:.4g})", last_stats_.global_norm, last_stats_.clipped_norm);
      std::vector<const ParamGradStats*> top;
      for (const ParamGradStats& p : last_stats_.params) top.push_back(&p);
      std::partial_sort(top.begin(), top.begin() + std::ptrdiff_t(std::min<std::size_t>(3, top.size())), top.end(),
                        [](auto* a, auto* b) { return a->norm > b->norm; });
      for (std::size_t i = 0; i < std::min<std::size_t>(3, top.size()); ++i)
        line += fmt::format(", {} {:.3g}", top[i]->name, top[i]->norm);
    }
    return line;
  }

  void save(std::int64_t step) {
    if (o_.grad_stats) write_stats();
    save_checkpoint(ck_path_, Checkpoint{m_.kind(), m_.options_json(), m_.params().all(), o_.optimizer,
                                         optim_->state(), step, TrainOptions::table().to_json(&o_),
                                         rng_text(rng_, m_.rng()), curves_, info_.metadata});
  }

  FitResult finish(std::int64_t start, double seconds) {
    res_.seconds = seconds;
    res_.steps = o_.steps - start;
    res_.items_per_sec = double(items_) / std::max(seconds, 1e-9);
    evaluate(o_.steps, o_.final_eval_iters);
    save(o_.steps);
    write_curves(o_.out_dir, info_.title, curves_);
    res_.curves = curves_;
    if (o_.grad_stats) fmt::print(out_, "wrote {}/grad_stats.csv\n", o_.out_dir);
    fmt::print(out_, "trained {} steps in {:.1f} s ({:.0f} {}/s)\n", res_.steps, seconds, res_.items_per_sec,
               data_.item_name);
    fmt::print(out_, "wrote {}, {}/loss.csv, {}/loss.svg{}\n", ck_path_, o_.out_dir, o_.out_dir,
               res_.metrics.empty() ? "" : fmt::format(", {}/metrics.csv, {}/metrics.svg", o_.out_dir, o_.out_dir));
    if (data_.val) fmt::print(out_, "val loss {:.4f}\n", res_.final_val_loss);
    for (auto& [name, v] : res_.metrics) fmt::print(out_, "{} {:.4f}\n", name, v);
    std::fflush(out_);
    return res_;
  }

  double ema() const { return ema_; }
  std::int64_t items() const { return items_; }

 private:
  // One step's gradient statistics, kept for grad_stats.csv (long format, like loss.csv).
  void record_stats(std::int64_t step, GradStats s) {
    for (const ParamGradStats& p : s.params)
      stats_rows_ += fmt::format("{},{},{},{},{},{}\n", step, p.name, p.norm, p.max_abs, p.zero_fraction, p.nonfinite);
    stats_rows_ += fmt::format("{},(global),{},,,\n{},(global clipped),{},,,\n", step, s.global_norm, step,
                               s.clipped_norm);
    last_stats_ = std::move(s);
  }
  void write_stats() const {
    const std::string path = o_.out_dir + "/grad_stats.csv", tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) throw InputError(fmt::format("{}: cannot write", tmp));
    const std::string text = "step,parameter,norm,max_abs,zero_fraction,nonfinite\n" + stats_rows_;
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) throw InputError(fmt::format("{}: write failed", tmp));
    std::filesystem::rename(tmp, path);
  }

  void add_point(const std::string& name, std::int64_t step, double y) {
    Series* s = series(curves_, name);
    s->x.push_back(double(step));
    s->y.push_back(y);
  }

  // The loss or the gradient norm of step `step` (1-based) is not finite: the curves so far
  // are written, the last checkpoint stays as it is.
  [[noreturn]] void diverged(std::int64_t step, double loss, double norm) {
    write_curves(o_.out_dir, info_.title, curves_);
    const bool have_ck = std::filesystem::exists(ck_path_);
    throw Diverged(fmt::format("training diverged at step {}: the {} is {}; {}", step,
                               std::isfinite(loss) ? "gradient norm" : "loss", std::isfinite(loss) ? norm : loss,
                               have_ck ? fmt::format("the last good checkpoint is kept in {}", ck_path_)
                                       : std::string("no checkpoint was written before it")),
                   step, curves_);
  }

  Model& m_;
  const DataSource& data_;
  const TrainOptions& o_;
  const RunInfo& info_;
  std::FILE* out_;
  std::mt19937_64 rng_;  // the data generator
  std::unique_ptr<Optimizer> optim_;
  std::string ck_path_;
  std::vector<Series> curves_{{"train", {}, {}}, {"grad_norm", {}, {}}};
  FitResult res_;
  std::int64_t items_ = 0;
  double ema_ = NAN;  // of the training loss, for the progress line
  GradStats last_stats_;
  std::string stats_rows_;
};

}  // namespace

FitResult fit(Model& m, const DataSource& data, const TrainOptions& opts, const RunInfo& info, std::FILE* out) {
  const TrainOptions o = opts;
  TrainOptions::table().validate(&o, "training options");
  if (!data.train) throw InputError("fit: the data source has no training batches");
  Run run(m, data, o, info, out);
  const Batch first = run.first_batch();
  m.declare(first);
  std::filesystem::create_directories(o.out_dir);
  const std::int64_t start = o.resume ? run.resume() : 0;
  if (!o.resume) m.rng().seed(std::uint64_t(o.seed) + 1);
  m.set_detect_anomaly(o.detect_anomaly);
  m.init_params(std::uint64_t(o.seed));  // only parameters not loaded or set by the user
  run.print_header(first);

  Progress progress(o.steps, o.quiet ? nullptr : stderr, data.item_name);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (std::int64_t step = start; step < o.steps; ++step) {
    run.step(step);  // a Diverged error ends the progress line (Progress's destructor) on its way out
    progress.update(step + 1, run.ema(), double(run.items()) / std::max(seconds(), 1e-9));
    if ((step + 1) % o.eval_interval == 0 && step + 1 < o.steps) {
      run.evaluate(step + 1, o.eval_iters);
      if (o.quiet) {
        fmt::print(out, "{}\n", run.report_line(step + 1));
        std::fflush(out);
      } else {
        progress.message(run.report_line(step + 1));
      }
      run.save(step + 1);
    }
  }
  progress.finish();
  return run.finish(start, seconds());
}

}  // namespace gg::train
