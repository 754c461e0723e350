// fit(): the step loop, evaluation, checkpoints, curves and the report, for any model.
#include "train/trainer.h"

#include <fmt/format.h>

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
       opt("quiet", &T::quiet, "No progress bar")},
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

}  // namespace

FitResult fit(Model& m, const DataSource& data, const TrainOptions& opts, const RunInfo& info, std::FILE* out) {
  TrainOptions o = opts;
  TrainOptions::table().validate(&o, "training options");
  if (!data.train) throw InputError("fit: the data source has no training batches");
  std::mt19937_64 rng(std::uint64_t(o.seed));
  Batch first;  // drawn from a copy of the generator: declares the model, sizes its plan
  {
    std::mt19937_64 probe = rng;
    first = data.train(probe);
  }
  m.declare(first);
  std::filesystem::create_directories(o.out_dir);
  const std::string ck_path = o.out_dir + "/checkpoint.safetensors";
  std::unique_ptr<Optimizer> optim = make_optimizer(o);
  std::vector<Series> curves{{"train", {}, {}}, {"grad_norm", {}, {}}};
  std::int64_t start = 0;
  if (o.resume) {
    Checkpoint ck = load_checkpoint(ck_path);
    if (ck.model_kind != m.kind() || ck.model_options != m.options_json())
      throw InputError(fmt::format("{}: the checkpoint holds model '{}' {} but this run builds '{}' {}", ck_path,
                                   ck.model_kind, ck.model_options.substr(0, 120), m.kind(),
                                   m.options_json().substr(0, 120)));
    if (ck.optimizer != o.optimizer)
      throw InputError(fmt::format("{}: the checkpoint was trained with {}, not {}", ck_path, ck.optimizer, o.optimizer));
    if (ck.step > o.steps)
      throw InputError(fmt::format("{}: the checkpoint is at step {}, beyond --steps {}", ck_path, ck.step, o.steps));
    load_params(m.params(), ck.params, m.param_table(), ck_path);
    optim->load_state(ck.optim_state, ck.step, param_shapes(m.params()));
    restore_rngs(ck.rng_state, ck_path, rng, m.rng());
    TrainOptions saved;
    read_json(ck.train_options, ck_path + " (train_options)", {bind(saved)});
    if (saved.steps != o.steps || saved.warmup != o.warmup || saved.lr != o.lr || saved.min_lr != o.min_lr)
      fmt::print(out, "note: the learning-rate schedule changes on resume: the checkpoint's is steps {} warmup {} lr {} "
                      "min_lr {}, this run's steps {} warmup {} lr {} min_lr {}\n",
                 saved.steps, saved.warmup, saved.lr, saved.min_lr, o.steps, o.warmup, o.lr, o.min_lr);
    if (!ck.curves.empty()) curves = ck.curves;
    start = ck.step;
    fmt::print(out, "resuming {} at step {}\n", ck_path, start);
  } else {
    m.rng().seed(std::uint64_t(o.seed) + 1);
  }
  m.init_params(std::uint64_t(o.seed));  // only parameters not loaded or set by the user

  std::int64_t n_params = 0;
  for (const ParamInfo& p : m.param_table()) n_params += numel(p.shape);
  fmt::print(out, "gradgraph fit: model '{}', {} parameters in {} tensors; {} steps with {} lr {}\n", m.kind(),
             n_params, m.param_table().size(), o.steps, o.optimizer, o.lr);
  {
    const Executor& plan = m.plan_for(first, /*training=*/true);  // built now: its size is known up front
    fmt::print(out, "plan: {} steps, arena {:.1f} MiB (without reuse {:.1f} MiB)\n", plan.order().size(),
               double(plan.arena_bytes()) / (1 << 20), double(plan.unshared_bytes()) / (1 << 20));
  }
  std::fflush(out);  // before the progress bar (stderr) starts

  auto save_at = [&](std::int64_t step) {
    Checkpoint ck{m.kind(), m.options_json(), m.params().all(), o.optimizer, optim->state(), step,
                  TrainOptions::table().to_json(&o), rng_text(rng, m.rng()), curves, info.metadata};
    save_checkpoint(ck_path, ck);
  };
  auto evaluation = [&](std::int64_t step, std::int64_t iters, FitResult& res) {
    res.final_val_loss = evaluate_loss(m, data, iters);
    if (data.val) {
      series(curves, "val")->x.push_back(double(step));
      series(curves, "val")->y.push_back(res.final_val_loss);
    }
    res.metrics = data.metrics ? data.metrics(m) : std::vector<std::pair<std::string, double>>{};
    for (auto& [name, v] : res.metrics) {
      series(curves, name)->x.push_back(double(step));
      series(curves, name)->y.push_back(v);
    }
  };
  auto report = [&](std::int64_t step, const FitResult& res, double ema) {
    std::string line = fmt::format("step {:>5}: train loss {:.4f}", step, ema);
    if (data.val) line += fmt::format(", val loss {:.4f}", res.final_val_loss);
    for (auto& [name, v] : res.metrics) line += fmt::format(", {} {:.4f}", name, v);
    return line;
  };

  FitResult res;
  res.checkpoint = ck_path;
  Progress progress(o.steps, o.quiet ? nullptr : stderr, data.item_name);
  auto t0 = std::chrono::steady_clock::now();
  std::int64_t items = 0;
  double ema = NAN;
  for (std::int64_t step = start; step < o.steps; ++step) {
    Batch b = data.train(rng);
    const double loss = m.forward_backward(b);
    std::vector<ParamGrad> pg = m.grads();
    const double norm = std::isfinite(loss) ? clip_grad_norm(pg, o.clip) : NAN;
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      progress.finish();
      write_curves(o.out_dir, info.title, curves);
      const bool have_ck = std::filesystem::exists(ck_path);
      throw Diverged(fmt::format("training diverged at step {}: the {} is {}; {}", step + 1,
                                   std::isfinite(loss) ? "gradient norm" : "loss", std::isfinite(loss) ? norm : loss,
                                   have_ck ? fmt::format("the last good checkpoint is kept in {}", ck_path)
                                           : std::string("no checkpoint was written before it")),
                     step + 1, curves);
    }
    optim->step(pg, cosine_lr(step, o.warmup, o.steps, o.lr, o.min_lr));
    items += batch_items(data, b);
    series(curves, "train")->x.push_back(double(step + 1));
    series(curves, "train")->y.push_back(loss);
    series(curves, "grad_norm")->x.push_back(double(step + 1));
    series(curves, "grad_norm")->y.push_back(norm);
    ema = std::isnan(ema) ? loss : 0.9 * ema + 0.1 * loss;
    res.final_train_loss = loss;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress.update(step + 1, ema, double(items) / std::max(secs, 1e-9));
    if ((step + 1) % o.eval_interval == 0 && step + 1 < o.steps) {
      evaluation(step + 1, o.eval_iters, res);
      const std::string line = report(step + 1, res, ema);
      if (o.quiet) {
        fmt::print(out, "{}\n", line);
        std::fflush(out);
      } else {
        progress.message(line);
      }
      save_at(step + 1);
    }
  }
  progress.finish();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.steps = o.steps - start;
  res.items_per_sec = double(items) / std::max(res.seconds, 1e-9);
  evaluation(o.steps, o.final_eval_iters, res);
  save_at(o.steps);
  write_curves(o.out_dir, info.title, curves);
  res.curves = curves;
  fmt::print(out, "trained {} steps in {:.1f} s ({:.0f} {}/s)\n", res.steps, res.seconds, res.items_per_sec,
             data.item_name);
  fmt::print(out, "wrote {}, {}/loss.csv, {}/loss.svg{}\n", ck_path, o.out_dir, o.out_dir,
             res.metrics.empty() ? "" : fmt::format(", {}/metrics.csv, {}/metrics.svg", o.out_dir, o.out_dir));
  if (data.val) fmt::print(out, "val loss {:.4f}\n", res.final_val_loss);
  for (auto& [name, v] : res.metrics) fmt::print(out, "{} {:.4f}\n", name, v);
  std::fflush(out);
  return res;
}

}  // namespace gg::train
