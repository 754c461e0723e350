// What fit() and Session share (train/run_util.h).
#include "train/run_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <map>

#include <nlohmann/json.hpp>

#include "io/json_object.h"
#include "io/message.h"

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

namespace {
// The first place where JSON values a and b differ: its path ("n_embd", "[1].options.n_embd";
// "" for the values themselves) and the two values there.
struct JsonDiff {
  std::string path;
  const nlohmann::json* a;
  const nlohmann::json* b;
};
JsonDiff first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path) {
  static const nlohmann::json none;  // null: a key or element one side lacks
  if (a.is_object() && b.is_object()) {
    for (auto& [k, v] : a.items()) {
      const std::string at = path.empty() ? k : path + "." + k;
      if (!b.contains(k)) return {at, &v, &none};
      if (v != b.at(k)) return first_difference(v, b.at(k), at);
    }
    for (auto& [k, v] : b.items())
      if (!a.contains(k)) return {path.empty() ? k : path + "." + k, &none, &v};
  } else if (a.is_array() && b.is_array()) {
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string at = fmt::format("{}[{}]", path, i);
      if (i >= a.size()) return {at, &none, &b[i]};
      if (i >= b.size()) return {at, &a[i], &none};
      if (a[i] != b[i]) return first_difference(a[i], b[i], at);
    }
  }
  return {path, &a, &b};
}
std::string shown(const nlohmann::json& v) { return v.is_null() ? "(none)" : io::cut(v.dump(), 30); }
}  // namespace

std::string model_difference(const std::string& saved_kind, const std::string& saved, const std::string& kind,
                             const std::string& now) {
  if (saved_kind != kind)
    return fmt::format("holds model {}, this run builds {}", io::in_quotes(saved_kind, 30), io::in_quotes(kind, 30));
  // The saved text is outside data: read strictly, nested at most 64 deep (which keeps the
  // recursion below shallow), before the JSON library parses it.
  try {
    io::parse_json_object(saved, "model options", 64);
  } catch (const io::Error&) {
    return fmt::format("holds model options that are not valid JSON ({} bytes)", io::with_commas(saved.size()));
  }
  const nlohmann::json a = nlohmann::json::parse(saved, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json b = nlohmann::json::parse(now, nullptr, /*allow_exceptions=*/false);
  if (a == b) return "holds model options that differ from this run's only in how they are written";
  const JsonDiff d = first_difference(a, b, "");
  if (d.path.empty()) return fmt::format("has model options {}, this run {}", shown(a), io::cut(now, 30));
  return fmt::format("has model option {} = {}, this run {}", io::cut(d.path, 40), shown(*d.a), shown(*d.b));
}

void check_schedule(const TrainOptions& o) {
  const bool builtin = o.schedule == "cosine" || o.schedule == "linear" || o.schedule == "constant";
  if (!builtin && !o.lr_schedule)
    throw InputError(fmt::format("training options: key 'schedule': '{}' is none of cosine, linear, constant, and no "
                                 "lr_schedule function is given", io::cut(o.schedule, 60)));
  if (builtin && o.lr_schedule)
    throw InputError(fmt::format("training options: key 'schedule': an lr_schedule function needs a name of its own, "
                                 "not '{}'", io::cut(o.schedule, 60)));
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
                                   "{}{})", io::cut(groups[k].pattern, 60), fmt::join(names, ", "),
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
// FNV-1a, 64 bits, over bytes.
std::uint64_t fnv(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
std::string clipped(const std::string& s, std::size_t n = 40) { return s.size() > n ? s.substr(0, n) + "..." : s; }
}  // namespace

std::vector<std::pair<std::string, std::string>> run_facts(const TrainOptions& o, Model& m, const Batch& first) {
  std::vector<std::pair<std::string, std::string>> facts;
  const nlohmann::json opts = nlohmann::json::parse(TrainOptions::table().to_json(&o));
  for (auto& [key, v] : opts.items()) facts.emplace_back(fmt::format("option {} =", key), v.dump());
  facts.emplace_back("model", m.kind());
  const nlohmann::json mo = nlohmann::json::parse(m.options_json(), nullptr, /*allow_exceptions=*/false);
  if (mo.is_object()) {
    for (auto& [key, v] : mo.items()) facts.emplace_back(fmt::format("model option {} =", key), v.dump());
  } else {
    facts.emplace_back("model options", m.options_json());
  }
  std::string shapes;
  for (const ParamInfo& p : m.param_table()) shapes += p.name + to_string(p.shape) + ";";
  facts.emplace_back("parameters", fmt::format("{} tensors (shapes hash {:016x})", m.param_table().size(),
                                               fnv(shapes.data(), shapes.size())));
  for (auto& [name, t] : first)
    facts.emplace_back(fmt::format("first batch's '{}':", clipped(name)),
                       fmt::format("{}{} hash {:016x}", to_string(t.dtype()), to_string(t.shape()),
                                   fnv(t.data(), std::size_t(t.numel()) * 4)));
  return facts;
}

void check_same_run(const World& w, const std::vector<std::pair<std::string, std::string>>& facts) {
  std::string mine;
  for (auto& [label, value] : facts) mine += label + '\x1e' + value + '\x1f';
  const std::vector<std::string> all = w.allgather(mine);
  auto parse = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> r;
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t sep = text.find('\x1e', at), end = text.find('\x1f', at);
      if (sep == std::string::npos || end == std::string::npos || sep > end) break;
      r.emplace_back(text.substr(at, sep - at), text.substr(sep + 1, end - sep - 1));
      at = end + 1;
    }
    return r;
  };
  const auto zero = parse(all[0]);
  for (std::size_t r = 1; r < all.size(); ++r) {
    const auto other = parse(all[r]);
    for (std::size_t k = 0; k < std::max(zero.size(), other.size()); ++k) {
      const std::string label = k < other.size() ? other[k].first : zero[k].first;
      const std::string a = k < other.size() && other[k].first == label ? other[k].second : "(none)";
      std::string b = "(none)";
      for (auto& [l, v] : zero)
        if (l == label) b = v;
      if (a == b) continue;
      w.shared_error();
      throw InputError(fmt::format("data parallel: rank {} has {} {} but rank 0 has {}; every rank must be started with "
                                   "the same options, model and data", r, clipped(label, 60), clipped(a), clipped(b)));
    }
  }
}

void check_params_agree(const World& w, Model& m, std::int64_t step) {
  std::uint64_t h = 1469598103934665603ull;
  for (const ParamInfo& p : m.param_table()) {
    const Tensor& t = m.params().at(p.name);
    h = fnv(t.data(), std::size_t(t.numel()) * 4, h);
  }
  const std::vector<std::string> all = w.allgather(fmt::format("{:016x}", h));
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      w.shared_error();
      throw InputError(fmt::format("data parallel: after step {} rank {}'s parameters differ from rank 0's (hash {} "
                                   "against {}): the ranks no longer train the same model", step, r, all[r], all[0]));
    }
}

std::string divergence_cause(Model& m, const Batch& b, const std::mt19937_64& model_rng, bool detect_anomaly) {
  for (auto& [name, t] : b) {
    if (t.dtype() != DType::f32) continue;
    std::int64_t nan = 0, inf = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      nan += std::isnan(t.f()[i]);
      inf += std::isinf(t.f()[i]);
    }
    if (nan + inf > 0)
      return fmt::format("the batch's tensor '{}' holds {} NaN and {} Inf", io::cut(name, 40), nan, inf);
  }
  std::string found;
  const std::mt19937_64 after = m.rng();
  const ExecutorOptions plan_options = m.plan_options();
  ExecutorOptions unfused = plan_options;  // every node checked on its own, a fused group's members too
  unfused.fuse = false;
  m.set_plan_options(unfused);
  m.rng() = model_rng;
  m.set_detect_anomaly(true);
  try {
    m.forward_backward(b);
  } catch (const GraphError& e) {
    // "<op> at <site> ('<name>'): anomaly: the first non-finite value of this run: <forward> node %i f32(..) holds ..."
    std::string what = e.what();
    if (const auto at = what.find(": anomaly: the first non-finite value of this run: "); at != std::string::npos)
      what = what.substr(0, at) + ", " + what.substr(at + 51);
    what = what.substr(0, what.find(" holds "));
    found = fmt::format("the first to make one is {}", what.size() > 150 ? what.substr(0, 150) + "..." : what);
  }
  m.set_detect_anomaly(detect_anomaly);
  m.set_plan_options(plan_options);
  m.rng() = after;
  return found.empty() ? "a rerun of the step in anomaly mode finds no node that makes a new NaN or Inf" : found;
}

}  // namespace gg::train
