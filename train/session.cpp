// Session: the step-level run below fit(), for several models and optimizers.
#include "train/session.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include "io/message.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/progress.h"
#include "train/run_util.h"

namespace gg::train {

struct Session::Part {
  std::string name;
  Model* m = nullptr;
  TrainOptions o;
  std::unique_ptr<Optimizer> opt;
  std::vector<std::string> frozen;
  double loss = NAN;
};

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Session::Session(SessionOptions o, RunInfo info, std::FILE* out)
    : o_(std::move(o)), info_(std::move(info)), out_(out), rng_(std::uint64_t(o_.seed)),
      ck_path_(o_.out_dir + "/checkpoint.safetensors") {
  if (o_.steps < 1) throw InputError(fmt::format("session: steps must be >= 1, got {}", o_.steps));
  if (o_.seed < 0) throw InputError(fmt::format("session: seed must be >= 0, got {}", o_.seed));
  if (o_.out_dir.empty()) throw InputError("session: out_dir is empty");
  if (const int n = World::get().size(); n > 1)  // N copies would train apart and race for one checkpoint
    throw InputError(fmt::format("session: started as {} ranks by mpirun, but a Session trains in one process "
                                 "(data parallel covers train::fit)", n));
}

Session::~Session() = default;

Session::Part& Session::part(const std::string& name) {
  for (auto& p : parts_)
    if (p->name == name) return *p;
  std::vector<std::string> names;
  for (auto& p : parts_) names.push_back(p->name);
  throw InputError(fmt::format("session: no part '{}' (the parts are {})", io::cut(name, 60), io::count_list(names, 6)));
}

void Session::add(const std::string& name, Model& m, TrainOptions o) {
  if (started_) throw InputError(fmt::format("session: part '{}' added after start()", io::cut(name, 60)));
  if (name.empty() || name.find_first_of("/\t\n") != std::string::npos)
    throw InputError(fmt::format("session: part name '{}' is empty or holds '/', a tab or a newline", io::cut(name, 60)));
  for (auto& p : parts_)
    if (p->name == name) throw InputError(fmt::format("session: part '{}' is added twice", name));
  o.steps = o_.steps;
  o.out_dir = o_.out_dir;
  o.seed = o_.seed;
  o.resume = o_.resume;
  TrainOptions::table().validate(&o, fmt::format("session part '{}' options", name));
  check_schedule(o);
  auto p = std::make_unique<Part>();
  p->name = name;
  p->m = &m;
  p->opt = make_optimizer(o);
  p->o = std::move(o);
  parts_.push_back(std::move(p));
}

// Each part's name, model kind and options: what a checkpoint must match to be resumed.
std::string Session::parts_json() const {
  std::string s = "[";
  for (std::size_t i = 0; i < parts_.size(); ++i)
    s += fmt::format("{}{{\"part\": \"{}\", \"model\": \"{}\", \"options\": {}}}", i ? ", " : "", parts_[i]->name,
                     parts_[i]->m->kind(), parts_[i]->m->options_json());
  return s + "]";
}

std::int64_t Session::start(const std::map<std::string, Batch>& examples) {
  if (parts_.empty()) throw InputError("session: start() with no parts (add them first)");
  if (started_) throw InputError("session: start() called twice");
  started_ = true;
  // Parameters of one name in two models are one tensor only when the models share a store.
  std::map<std::string, const Model*> owner;
  for (auto& p : parts_) {
    auto ex = examples.find(p->name);
    if (ex == examples.end()) throw InputError(fmt::format("session: no example batch for part '{}'", p->name));
    p->m->declare(ex->second);
    for (const ParamInfo& pi : p->m->param_table()) {
      auto [it, fresh] = owner.emplace(pi.name, p->m);
      if (!fresh && it->second != p->m && !p->m->shares_params_with(*it->second))
        throw InputError(fmt::format("session: two models declare parameter '{}' in stores of their own; share them "
                                     "(Model::share_params) or rename one", io::cut(pi.name, 60)));
    }
    p->frozen = apply_groups(*p->m, *p->opt, p->o);
  }
  std::filesystem::create_directories(o_.out_dir);
  if (o_.resume) {
    resume();
  } else {
    for (std::size_t i = 0; i < parts_.size(); ++i) parts_[i]->m->rng().seed(std::uint64_t(o_.seed) + 1 + i);
  }
  for (auto& p : parts_) p->m->init_params(std::uint64_t(o_.seed));
  if (out_) {
    for (auto& p : parts_) {
      std::int64_t n = 0;
      for (const ParamInfo& pi : p->m->param_table()) n += numel(pi.shape);
      fmt::print(out_, "part '{}': model '{}', {} parameters in {} tensors ({} frozen); {} lr {} ({} schedule)\n", p->name,
                 p->m->kind(), n, p->m->param_table().size(), p->frozen.size(), p->o.optimizer, p->o.lr, p->o.schedule);
    }
    std::fflush(out_);
  }
  progress_ = std::make_unique<Progress>(o_.steps, o_.quiet ? nullptr : stderr, "step");
  seconds_at_start_ = now_seconds();
  return start_;
}

void Session::resume() {
  Checkpoint ck = load_checkpoint(ck_path_);
  const std::string where = io::cut(ck_path_, 80);  // the path as messages show it
  const std::string want = parts_json();
  if (ck.model_kind != "session" || ck.model_options != want)
    throw InputError(fmt::format("{}: the checkpoint {}; the models cannot change on resume", where,
                                 model_difference(ck.model_kind, ck.model_options, "session", want)));
  if (ck.step > o_.steps)
    throw InputError(fmt::format("{}: the checkpoint is at step {}, beyond the session's {} steps", where, ck.step,
                                 o_.steps));
  // train_options: a line "<part>\t<json>" per part.
  std::map<std::string, std::string> saved_options;
  for (std::size_t at = 0; at < ck.train_options.size();) {
    const std::size_t end = std::min(ck.train_options.find('\n', at), ck.train_options.size());
    const std::string line = ck.train_options.substr(at, end - at);
    const std::size_t tab = line.find('\t');
    if (tab != std::string::npos) saved_options[line.substr(0, tab)] = line.substr(tab + 1);
    at = end + 1;
  }
  std::vector<std::mt19937_64*> gens{&rng_};
  for (auto& p : parts_) {
    auto it = saved_options.find(p->name);
    if (it == saved_options.end())
      throw InputError(fmt::format("{}: the checkpoint has no options for part {}", where, io::in_quotes(p->name, 40)));
    TrainOptions saved;
    read_json(it->second, fmt::format("{} (part {})", where, io::in_quotes(p->name, 40)), {bind(saved)});
    for (auto [what, then, now] : {std::tuple{"optimizer", saved.optimizer, p->o.optimizer},
                                   std::tuple{"schedule", saved.schedule, p->o.schedule},
                                   std::tuple{"groups", saved.groups, p->o.groups}})
      if (then != now)
        throw InputError(fmt::format("{}: part {} was trained with {} {}, this run asks for {}; it cannot change on "
                                     "resume", where, io::in_quotes(p->name, 40), what, io::in_quotes(then, 40),
                                     io::in_quotes(now, 40)));
    load_params(p->m->params(), ck.params, p->m->param_table(), where, /*allow_extra=*/true);
    std::map<std::string, Tensor> state;
    const std::string prefix = p->name + "/";
    for (auto& [k, t] : ck.optim_state)
      if (k.starts_with(prefix)) state.emplace(k.substr(prefix.size()), t);
    ParamShapes trained;
    const std::set<std::string> frozen(p->frozen.begin(), p->frozen.end());
    for (const ParamInfo& pi : p->m->param_table())
      if (!frozen.count(pi.name)) trained.emplace(pi.name, pi.shape);
    try {
      p->opt->load_state(state, ck.step, trained);
    } catch (const std::exception& e) {
      throw InputError(fmt::format("{}: part {}: {}", where, io::in_quotes(p->name, 40), e.what()));
    }
    gens.push_back(&p->m->rng());
  }
  restore_rngs(ck.rng_state, where, gens);
  curves_ = ck.curves;
  start_ = ck.step;
  if (out_) fmt::print(out_, "resuming {} at step {}\n", ck_path_, ck.step);
}

double Session::step(const std::string& name, std::int64_t step, const Batch& b) {
  if (!started_) throw InputError("session: step() before start()");
  Part& p = part(name);
  const std::mt19937_64 model_rng = p.m->rng();  // to rerun the pass, should it diverge
  const double loss = p.m->forward_backward(b);
  std::vector<ParamGrad> pg = p.m->grads();
  const double norm = std::isfinite(loss) ? grad_norm(pg) : NAN;
  if (!std::isfinite(loss) || !std::isfinite(norm)) {
    write_curves(o_.out_dir, info_.title, curves_);
    const bool have_ck = std::filesystem::exists(ck_path_);
    const std::string why = divergence_cause(*p.m, b, model_rng, p.o.detect_anomaly);
    throw Diverged(fmt::format("session part '{}' diverged at step {}: the {} is {}; {}; {}", io::cut(p.name, 40),
                               step + 1, std::isfinite(loss) ? "gradient norm" : "loss",
                               std::isnan(loss) || std::isnan(norm) ? NAN : std::isfinite(loss) ? norm : loss, why,
                               have_ck ? "the last good checkpoint is kept" : "no checkpoint was written before it"),
                   step + 1, curves_);
  }
  p.opt->step(pg, scheduled_lr(p.o, step), clip_scale(norm, p.o.clip));
  p.loss = loss;
  log(p.name + ".loss", step + 1, loss);
  if (&p == parts_.front().get())
    progress_->update(step + 1, loss, double(step + 1 - start_) / std::max(now_seconds() - seconds_at_start_, 1e-9));
  return loss;
}

void Session::log(const std::string& curve, std::int64_t step, double value) {
  Series* s = series(curves_, curve);
  s->x.push_back(double(step));
  s->y.push_back(value);
}

void Session::save(std::int64_t step) {
  if (!started_) throw InputError("session: save() before start()");
  Checkpoint ck;
  ck.model_kind = "session";
  ck.model_options = parts_json();
  ck.optimizer = parts_.front()->opt->kind();
  ck.step = step;
  std::vector<const std::mt19937_64*> gens{&rng_};
  for (auto& p : parts_) {
    for (auto& [n, t] : p->m->params().all()) ck.params.emplace(n, t);  // a shared store's tensors once
    for (auto& [k, t] : p->opt->state()) ck.optim_state.emplace(p->name + "/" + k, t);
    ck.train_options += p->name + "\t" + TrainOptions::table().to_json(&p->o) + "\n";
    gens.push_back(&p->m->rng());
  }
  ck.rng_state = rngs_text(gens);
  ck.curves = curves_;
  ck.user = info_.metadata;
  save_checkpoint(ck_path_, ck);
  write_curves(o_.out_dir, info_.title, curves_);
}

FitResult Session::finish(std::int64_t step) {
  if (!started_) throw InputError("session: finish() before start()");
  progress_->finish();
  save(step);
  FitResult r;
  r.steps = step - start_;
  r.seconds = now_seconds() - seconds_at_start_;
  r.items_per_sec = double(r.steps) / std::max(r.seconds, 1e-9);
  r.final_train_loss = parts_.front()->loss;
  r.checkpoint = ck_path_;
  r.curves = curves_;
  if (out_) {
    fmt::print(out_, "trained {} steps in {:.1f} s\n", r.steps, r.seconds);
    for (auto& p : parts_) fmt::print(out_, "{} loss {:.4f}\n", p->name, p->loss);
    fmt::print(out_, "wrote {}, {}/loss.csv, {}/loss.svg\n", ck_path_, o_.out_dir, o_.out_dir);
    std::fflush(out_);
  }
  return r;
}

}  // namespace gg::train
