// What fit() and Session share (train/run_util.h).
#include "train/run_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <map>

namespace gg::train {

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

}  // namespace gg::train
