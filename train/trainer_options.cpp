// The trainer's option table, its parameter groups' text, the optimizer a run asks for and
// the evaluation over validation batches.
#include "io/message.h"
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

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
       opt("accum", &T::accum,
           "Gradient accumulation: micro-batches per optimizer step (their mean gradient; a batch accum times as large)")
           .at_least(1)
           .at_most(1e6)
           .optional(),
       opt("bucket_mb", &T::bucket_mb,
           "Data parallel (mpirun): MB of gradients per all-reduce, each started as soon as the backward made it")
           .above(0)
           .at_most(1024)
           .optional(),
       opt("schedule", &T::schedule,
           "Learning-rate schedule: cosine, linear, constant (each after the warm-up), or the name of a "
           "TrainOptions::lr_schedule")
           .optional(),
       opt("groups", &T::groups,
           "Parameter groups: 'pattern:lr=X,weight_decay=Y;pattern:frozen' ('*' and '?' match names; first match wins)")
           .optional(),
       precision_option(&T::precision).optional()},
      [](const T& o) -> std::pair<std::string, std::string> {
        if (o.out_dir.empty()) return {"out_dir", "is empty (give the directory for the checkpoint and curves)"};
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
  auto cut = [](const std::string& x) { return io::cut(x, 60); };
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

}  // namespace gg::train
