// fit(): the step loop, evaluation, checkpoints, curves and the report, for any model.
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <sstream>

#include "train/checkpoint.h"
#include "train/plot.h"
#include "train/progress.h"
#include "train/run_util.h"

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
           "flags parameters whose gradient is zero by construction"),
       opt("schedule", &T::schedule,
           "Learning-rate schedule: cosine, linear, constant (each after the warm-up), or the name of a "
           "TrainOptions::lr_schedule")
           .optional(),
       opt("groups", &T::groups,
           "Parameter groups: 'pattern:lr=X,weight_decay=Y;pattern:frozen' ('*' and '?' match names; first match wins)")
           .optional()},
      [](const T& o) -> std::pair<std::string, std::string> {
        if (o.min_lr > o.lr) return {"min_lr", fmt::format("{} is above lr = {}", o.min_lr, o.lr)};
        if (o.schedule.empty()) return {"schedule", "is empty"};
        try {
          parse_groups(o.groups);
        } catch (const InputError& e) {
          return {"groups", e.what()};
        }
        return {};
      }};
  return t;
}

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o) {
  if (o.optimizer == "sgd") return std::make_unique<Sgd>(o.momentum);
  return std::make_unique<AdamW>(AdamWOptions{o.beta1, o.beta2, o.eps, o.weight_decay});
}

double evaluate_loss(Model& m, const DataSource& data, std::int64_t iters) {
  std::vector<std::pair<std::string, double>> unused;
  return evaluate_loss(m, data, iters, unused);
}

double evaluate_loss(Model& m, const DataSource& data, std::int64_t iters,
                     std::vector<std::pair<std::string, double>>& batch_means) {
  batch_means.clear();
  if (!data.val) return NAN;
  double total = 0;
  for (std::int64_t i = 0; i < iters; ++i) {
    const Batch b = data.val(i);
    if (!data.batch_metrics) {
      total += m.loss(b);
      continue;
    }
    const std::map<std::string, Tensor> out = m.evaluate(b);
    if (auto it = out.find("loss"); it != out.end()) total += double(it->second.f()[0]);
    else total = NAN;
    const std::vector<std::pair<std::string, double>> got = data.batch_metrics(b, out);
    if (i == 0) {
      for (auto& [name, v] : got) batch_means.emplace_back(name, 0.0);
    } else if (got.size() != batch_means.size()) {
      throw InputError(fmt::format("DataSource::batch_metrics gave {} measures for validation batch {} but {} for "
                                   "batch 0", got.size(), i, batch_means.size()));
    }
    for (std::size_t k = 0; k < got.size(); ++k) {
      if (got[k].first != batch_means[k].first)
        throw InputError(fmt::format("DataSource::batch_metrics named measure {} '{}' for validation batch {} but '{}' "
                                     "for batch 0", k, got[k].first.substr(0, 60), i, batch_means[k].first.substr(0, 60)));
      batch_means[k].second += got[k].second;
    }
  }
  for (auto& [name, v] : batch_means) v /= double(iters);
  return total / double(iters);
}

bool glob_match(const std::string& pattern, const std::string& name) {
  // Iterative matching with one backtrack point (the last '*').
  std::size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<ParamGroup> parse_groups(const std::string& text) {
  std::vector<ParamGroup> groups;
  auto cut = [](const std::string& x) { return x.size() > 60 ? x.substr(0, 60) + "..." : x; };
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const std::size_t end = std::min(text.find(';', start), text.size());
    const std::string part = text.substr(start, end - start);
    start = end + 1;
    if (part.empty()) {
      if (end == text.size()) break;
      throw InputError("an empty group between two ';'");
    }
    const std::size_t colon = part.find(':');
    ParamGroup g;
    g.pattern = part.substr(0, colon);
    if (g.pattern.empty()) throw InputError(fmt::format("group '{}' has no name pattern before ':'", cut(part)));
    if (colon == std::string::npos)
      throw InputError(fmt::format("group '{}' sets nothing: add ':lr=X', ':weight_decay=Y' or ':frozen'", cut(part)));
    std::size_t k = colon + 1;
    while (k <= part.size()) {
      const std::size_t e = std::min(part.find(',', k), part.size());
      const std::string kv = part.substr(k, e - k);
      k = e + 1;
      const std::size_t eq = kv.find('=');
      const std::string key = kv.substr(0, eq), value = eq == std::string::npos ? "" : kv.substr(eq + 1);
      if (key == "frozen" && (value.empty() || value == "true")) {
        g.frozen = true;
      } else if (key == "lr" || key == "weight_decay") {
        char* stop = nullptr;
        const double v = std::strtod(value.c_str(), &stop);
        const bool ok = !value.empty() && stop == value.c_str() + value.size() && std::isfinite(v) &&
                        (key == "lr" ? v > 0 && v <= 10 : v >= 0 && v <= 100);
        if (!ok)
          throw InputError(fmt::format("group '{}': {} must be a number in {}, got '{}'", cut(g.pattern), key,
                                       key == "lr" ? "(0, 10]" : "[0, 100]", cut(value)));
        (key == "lr" ? g.lr : g.weight_decay) = v;
      } else {
        throw InputError(fmt::format("group '{}': unknown setting '{}' (lr=X, weight_decay=Y or frozen)", cut(g.pattern),
                                     cut(kv)));
      }
      if (e == part.size()) break;
    }
    if (g.frozen && (g.lr >= 0 || g.weight_decay >= 0))
      throw InputError(fmt::format("group '{}' is frozen: it takes no lr or weight_decay", cut(g.pattern)));
    groups.push_back(std::move(g));
    if (end == text.size()) break;
  }
  return groups;
}

Series* series(std::vector<Series>& curves, const std::string& name) {
  for (Series& s : curves)
    if (s.name == name) return &s;
  curves.push_back({name, {}, {}});
  return &curves.back();
}

void write_curves(const std::string& dir, const std::string& title, const std::vector<Series>& curves) {
  std::vector<Series> loss, plotted, metrics;
  for (const Series& s : curves) {
    const bool is_loss = s.name == "train" || s.name == "val" || s.name.ends_with(".loss");
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

std::string rng_text(const std::mt19937_64& data, const std::mt19937_64& dropout) { return rngs_text({&data, &dropout}); }
void restore_rngs(const std::string& text, const std::string& path, std::mt19937_64& data, std::mt19937_64& dropout) {
  restore_rngs(text, path, std::vector<std::mt19937_64*>{&data, &dropout});
}

std::string rngs_text(const std::vector<const std::mt19937_64*>& gens) {
  std::ostringstream s;
  for (std::size_t i = 0; i < gens.size(); ++i) s << (i ? " " : "") << *gens[i];
  return s.str();
}

void restore_rngs(const std::string& text, const std::string& path, const std::vector<std::mt19937_64*>& gens) {
  std::istringstream s(text);
  for (std::mt19937_64* g : gens)
    if (!(s >> *g)) break;
  if (!s || !(s >> std::ws).eof())
    throw InputError(fmt::format("{}: the RNG state is damaged (expected {} mt19937_64 states)", path, gens.size()));
}

void check_schedule(const TrainOptions& o) {
  const bool builtin = o.schedule == "cosine" || o.schedule == "linear" || o.schedule == "constant";
  if (!builtin && !o.lr_schedule)
    throw InputError(fmt::format("training options: key 'schedule': '{}' is none of cosine, linear, constant, and no "
                                 "lr_schedule function is given", o.schedule.substr(0, 60)));
  if (builtin && o.lr_schedule)
    throw InputError(fmt::format("training options: key 'schedule': an lr_schedule function needs a name of its own, "
                                 "not '{}'", o.schedule));
}

std::vector<std::string> apply_groups(Model& m, Optimizer& optim, const TrainOptions& o) {
  const std::vector<ParamGroup> groups = parse_groups(o.groups);
  std::vector<std::string> frozen;
  std::map<std::string, Optimizer::ParamSetting> settings;
  std::vector<std::size_t> matched(groups.size(), 0);
  for (const ParamInfo& p : m.param_table())
    for (std::size_t k = 0; k < groups.size(); ++k) {
      if (!glob_match(groups[k].pattern, p.name)) continue;
      ++matched[k];
      if (groups[k].frozen) frozen.push_back(p.name);
      else settings[p.name] = {groups[k].lr > 0 ? groups[k].lr / o.lr : 1.0, groups[k].weight_decay};
      break;
    }
  for (std::size_t k = 0; k < groups.size(); ++k)
    if (matched[k] == 0) {
      std::vector<std::string> names;
      for (const ParamInfo& p : m.param_table()) names.push_back(p.name);
      names.resize(std::min<std::size_t>(names.size(), 4));
      throw InputError(fmt::format("training options: key 'groups': pattern '{}' matches no parameter (the model has "
                                   "{}{})", groups[k].pattern.substr(0, 60), fmt::join(names, ", "),
                                   m.param_table().size() > 4 ? ", ..." : ""));
    }
  if (frozen.size() == m.param_table().size())
    throw InputError("training options: key 'groups': every parameter is frozen; nothing would train");
  m.set_frozen(frozen);
  optim.set_param_settings(std::move(settings));
  return frozen;
}

// The learning rate of optimizer step `step` (0-based), at the run's peak lr.
double scheduled_lr(const TrainOptions& o, std::int64_t step) {
  if (o.lr_schedule) {
    const double lr = o.lr_schedule(step);
    if (!std::isfinite(lr) || lr < 0)
      throw InputError(fmt::format("schedule '{}' gave learning rate {} at step {}", o.schedule, lr, step));
    return lr;
  }
  if (o.schedule == "linear") return linear_lr(step, o.warmup, o.steps, o.lr, o.min_lr);
  if (o.schedule == "constant") return constant_lr(step, o.warmup, o.lr);
  return cosine_lr(step, o.warmup, o.steps, o.lr, o.min_lr);
}


namespace {

std::int64_t batch_items(const DataSource& d, const Batch& b) {
  if (d.items) return d.items(b);
  const Shape& s = b.begin()->second.shape();
  return s.empty() ? 1 : s[0];
}

// One call of fit(): its state and its phases.
class Run {
 public:
  Run(Model& m, const DataSource& data, const TrainOptions& o, const RunInfo& info, std::FILE* out)
      : m_(m), data_(data), o_(o), info_(info), out_(out), rng_(std::uint64_t(o.seed)), optim_(make_optimizer(o)),
        ck_path_(o.out_dir + "/checkpoint.safetensors") {
    res_.checkpoint = ck_path_;
  }

  // Prints to the run's stream; none: silent.
  template <class... A>
  void say(fmt::format_string<A...> f, A&&... a) {
    if (out_) fmt::print(out_, f, std::forward<A>(a)...);
  }
  void flush() {
    if (out_) std::fflush(out_);
  }

  void setup_groups() { frozen_ = apply_groups(m_, *optim_, o_); }

  double lr_at(std::int64_t step) const { return scheduled_lr(o_, step); }

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
    TrainOptions saved;
    read_json(ck.train_options, ck_path_ + " (train_options)", {bind(saved)});
    if (saved.schedule != o_.schedule)
      throw InputError(fmt::format("{}: the checkpoint was trained with schedule '{}', this run asks for '{}'", ck_path_,
                                   saved.schedule.substr(0, 60), o_.schedule.substr(0, 60)));
    if (saved.groups != o_.groups)
      throw InputError(fmt::format("{}: the checkpoint's parameter groups are '{}', this run's '{}'; groups cannot "
                                   "change on resume (start a new run from its weights)", ck_path_,
                                   saved.groups.substr(0, 60), o_.groups.substr(0, 60)));
    load_params(m_.params(), ck.params, m_.param_table(), ck_path_);
    ParamShapes trained = param_shapes(m_.params());
    for (const std::string& name : frozen_) trained.erase(name);
    try {
      optim_->load_state(ck.optim_state, ck.step, trained);
    } catch (const std::exception& e) {  // the optimizer names the state; this names the file
      throw InputError(fmt::format("{}: {}", ck_path_, e.what()));
    }
    restore_rngs(ck.rng_state, ck_path_, rng_, m_.rng());
    if (saved.steps != o_.steps || saved.warmup != o_.warmup || saved.lr != o_.lr || saved.min_lr != o_.min_lr)
      say("note: the learning-rate schedule changes on resume: the checkpoint's is steps {} warmup {} lr {} "
                       "min_lr {}, this run's steps {} warmup {} lr {} min_lr {}\n",
                 saved.steps, saved.warmup, saved.lr, saved.min_lr, o_.steps, o_.warmup, o_.lr, o_.min_lr);
    if (!ck.curves.empty()) curves_ = ck.curves;
    say("resuming {} at step {}\n", ck_path_, ck.step);
    return ck.step;
  }

  void print_header(const Batch& first) {
    std::int64_t n_params = 0;
    for (const ParamInfo& p : m_.param_table()) n_params += numel(p.shape);
    say("gradgraph fit: model '{}', {} parameters in {} tensors; {} steps with {} lr {} ({} schedule)\n", m_.kind(),
        n_params, m_.param_table().size(), o_.steps, o_.optimizer, o_.lr, o_.schedule);
    if (!frozen_.empty())
      say("frozen: {} of {} parameter tensors ({}{}): no gradient, update or optimizer state\n", frozen_.size(),
          m_.param_table().size(), fmt::join(frozen_.begin(), frozen_.begin() + std::ptrdiff_t(std::min<std::size_t>(4, frozen_.size())), ", "),
          frozen_.size() > 4 ? ", ..." : "");
    const Executor& plan = m_.plan_for(first, /*training=*/true);  // built now: its size is known up front
    say("plan: {} steps (forward and backward, a fused group counted once), arena {:.1f} MiB (without reuse {:.1f} MiB)\n",
        plan.step_count(), double(plan.arena_bytes()) / (1 << 20), double(plan.unshared_bytes()) / (1 << 20));
    if (!data_.val)
      say("note: no validation batches (DataSource::val): evaluations report the training loss and metrics only\n");
    if (o_.detect_anomaly) say("anomaly mode: every node's output is checked for NaN and Inf\n");
    if (o_.grad_stats)
      for (const ZeroGrad& z : m_.structurally_zero(first))
        say("note: the gradient of '{}' is zero by construction: {}\n", z.name, z.reason);
    flush();  // before the progress bar (stderr) starts
  }

  // Optimizer step `step` (0-based): forward, backward, clip, update, curves.
  void step(std::int64_t step) {
    Batch b = data_.train(rng_);
    const std::mt19937_64 model_rng = m_.rng();  // to rerun the step, should it diverge
    const double loss = m_.forward_backward(b);
    std::vector<ParamGrad> pg = m_.grads();
    if (o_.grad_stats && std::isfinite(loss)) record_stats(step + 1, grad_stats(pg, o_.clip));
    const double norm = std::isfinite(loss) ? grad_norm(pg) : NAN;
    if (!std::isfinite(loss) || !std::isfinite(norm)) diverged(step + 1, loss, norm, cause(b, model_rng));
    // Clipping rides along the update (the same numbers as clip_grad_norm, one pass fewer).
    optim_->step(pg, lr_at(step), clip_scale(norm, o_.clip));
    items_ += batch_items(data_, b);
    add_point("train", step + 1, loss);
    add_point("grad_norm", step + 1, norm);
    ema_ = std::isnan(ema_) ? loss : 0.9 * ema_ + 0.1 * loss;
    res_.final_train_loss = loss;
  }

  // Validation loss over `iters` batches and the user's metrics, after `step` steps.
  void evaluate(std::int64_t step, std::int64_t iters) {
    res_.final_val_loss = evaluate_loss(m_, data_, iters, res_.metrics);
    if (data_.val) add_point("val", step, res_.final_val_loss);
    if (data_.metrics)
      for (auto& m : data_.metrics(m_)) res_.metrics.push_back(std::move(m));
    for (auto& [name, v] : res_.metrics) add_point(name, step, v);
  }

  // The user's callback on the evaluation just made at `step`.
  EvalAction decide(std::int64_t step, bool final) const {
    if (!o_.on_eval) return {};
    return o_.on_eval(Evaluation{step, ema_, res_.final_val_loss, res_.metrics, final});
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

  // The end of the run after `end` steps (o.steps, or where a callback stopped it).
  FitResult finish(std::int64_t start, std::int64_t end, double seconds) {
    res_.seconds = seconds;
    res_.steps = end - start;
    res_.items_per_sec = double(items_) / std::max(seconds, 1e-9);
    evaluate(end, o_.final_eval_iters);
    if (end < o_.steps) say("stopped at step {} of {} by the evaluation callback\n", end, o_.steps);
    if (decide(end, /*final=*/true).save) save(end);
    write_curves(o_.out_dir, info_.title, curves_);
    res_.curves = curves_;
    if (o_.grad_stats) say("wrote {}/grad_stats.csv\n", o_.out_dir);
    say("trained {} steps in {:.1f} s ({:.0f} {}/s)\n", res_.steps, seconds, res_.items_per_sec, data_.item_name);
    say("wrote {}, {}/loss.csv, {}/loss.svg{}\n", ck_path_, o_.out_dir, o_.out_dir,
        res_.metrics.empty() ? "" : fmt::format(", {}/metrics.csv, {}/metrics.svg", o_.out_dir, o_.out_dir));
    if (data_.val) say("val loss {:.4f}\n", res_.final_val_loss);
    for (auto& [name, v] : res_.metrics) say("{} {:.4f}\n", name, v);
    flush();
    return res_;
  }

  // The curves as they are, when the run ends by an error.
  void write_curves_now() const { write_curves(o_.out_dir, info_.title, curves_); }

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

  // A point of curve `name`; a second one at the same step (the final evaluation where a
  // callback stopped the run) replaces the first.
  void add_point(const std::string& name, std::int64_t step, double y) {
    Series* s = series(curves_, name);
    if (!s->x.empty() && s->x.back() == double(step)) {
      s->y.back() = y;
      return;
    }
    s->x.push_back(double(step));
    s->y.push_back(y);
  }

  // Why a step's loss or gradient norm is not finite: a non-finite value in the batch, or
  // the first node that makes one, found by rerunning the step (same batch, parameters and
  // dropout draws) in anomaly mode.
  std::string cause(const Batch& b, const std::mt19937_64& model_rng) {
    for (auto& [name, t] : b) {
      if (t.dtype() != DType::f32) continue;
      std::int64_t nan = 0, inf = 0;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        nan += std::isnan(t.f()[i]);
        inf += std::isinf(t.f()[i]);
      }
      if (nan + inf > 0)
        return fmt::format("the batch's tensor '{}' holds {} NaN and {} Inf", name.substr(0, 40), nan, inf);
    }
    std::string found;
    const std::mt19937_64 after = m_.rng();
    const ExecutorOptions plan_options = m_.plan_options();
    ExecutorOptions unfused = plan_options;  // every node checked on its own, a fused group's members too
    unfused.fuse = false;
    m_.set_plan_options(unfused);
    m_.rng() = model_rng;
    m_.set_detect_anomaly(true);
    try {
      m_.forward_backward(b);
    } catch (const GraphError& e) {
      // "<op> at <site> ('<name>'): anomaly: the first non-finite value of this run: <forward> node %i f32(..) holds ..."
      std::string what = e.what();
      if (const auto at = what.find(": anomaly: the first non-finite value of this run: "); at != std::string::npos)
        what = what.substr(0, at) + ", " + what.substr(at + 51);
      what = what.substr(0, what.find(" holds "));
      found = fmt::format("the first to make one is {}", what.size() > 150 ? what.substr(0, 150) + "..." : what);
    }
    m_.set_detect_anomaly(o_.detect_anomaly);
    m_.set_plan_options(plan_options);
    m_.rng() = after;
    return found.empty() ? "a rerun of the step in anomaly mode finds no node that makes a new NaN or Inf" : found;
  }

  // The loss or the gradient norm of step `step` (1-based) is not finite: the curves so far
  // are written, the last checkpoint stays as it is.
  [[noreturn]] void diverged(std::int64_t step, double loss, double norm, const std::string& why) {
    write_curves(o_.out_dir, info_.title, curves_);
    const bool have_ck = std::filesystem::exists(ck_path_);
    const std::string where = ck_path_.size() > 60 ? "..." + ck_path_.substr(ck_path_.size() - 57) : ck_path_;
    const double bad = std::isfinite(loss) ? norm : loss;
    throw Diverged(fmt::format("training diverged at step {}: the {} is {}; {}; {}", step,
                               std::isfinite(loss) ? "gradient norm" : "loss", std::isnan(bad) ? NAN : bad, why,
                               have_ck ? fmt::format("the last good checkpoint is kept in {}", where)
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
  std::vector<std::string> frozen_;  // the parameters the groups freeze
};

}  // namespace

FitResult fit(Model& m, const DataSource& data, const TrainOptions& opts, const RunInfo& info, std::FILE* out) {
  TrainOptions o = opts;
  TrainOptions::table().validate(&o, "training options");
  if (!data.train) throw InputError("fit: the data source has no training batches");
  check_schedule(o);
  // A warm-up as long as the run never reaches the peak rate: a tenth of the run instead.
  std::int64_t asked_warmup = -1;
  if (o.warmup > 0 && o.warmup >= o.steps && !o.lr_schedule) {
    asked_warmup = o.warmup;
    o.warmup = o.steps / 10;
  }
  Run run(m, data, o, info, out);
  const Batch first = run.first_batch();
  m.declare(first);
  run.setup_groups();
  std::filesystem::create_directories(o.out_dir);
  const std::int64_t start = o.resume ? run.resume() : 0;
  if (!o.resume) m.rng().seed(std::uint64_t(o.seed) + 1);
  m.set_detect_anomaly(o.detect_anomaly);
  m.init_params(std::uint64_t(o.seed));  // only parameters not loaded or set by the user
  if (asked_warmup >= 0)
    run.say("note: warmup {} is not shorter than the run's {} steps and would never reach lr {}; capped at {} (a "
            "tenth of the run)\n", asked_warmup, o.steps, o.lr, o.warmup);
  run.print_header(first);

  Progress progress(o.steps, o.quiet ? nullptr : stderr, data.item_name);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::int64_t end = o.steps;
  try {
    for (std::int64_t step = start; step < o.steps; ++step) {
      run.step(step);  // a Diverged error ends the progress line (Progress's destructor) on its way out
      progress.update(step + 1, run.ema(), double(run.items()) / std::max(seconds(), 1e-9));
      if ((step + 1) % o.eval_interval == 0 && step + 1 < o.steps) {
        run.evaluate(step + 1, o.eval_iters);
        if (o.quiet) {
          run.say("{}\n", run.report_line(step + 1));
          run.flush();
        } else {
          progress.message(run.report_line(step + 1));
        }
        const EvalAction act = run.decide(step + 1, /*final=*/false);
        if (act.stop) {
          end = step + 1;
          break;
        }
        if (act.save) run.save(step + 1);
      }
    }
  } catch (const Diverged&) {
    throw;  // its curves are written
  } catch (...) {
    run.write_curves_now();  // an error from the user's data, metrics or callback: the curves so far
    throw;
  }
  progress.finish();
  return run.finish(start, end, seconds());
}

}  // namespace gg::train
