// fit(): the step loop, evaluation, checkpoints, curves and the report, for any model.
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <sstream>

#include "io/message.h"
#include "ops/cpu/bf16.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/plot.h"
#include "train/progress.h"
#include "train/run_util.h"

namespace gg::train {

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
      : m_(m), data_(data), o_(o), info_(info), out_(World::get().rank() == 0 ? out : nullptr),
        rng_(std::uint64_t(o.seed)), optim_(make_optimizer(o)), ck_path_(o.out_dir + "/checkpoint.safetensors") {
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

  // Under mpirun: every rank checked to run the same options, model and data, then the
  // share's plan and the gradient buckets.
  void setup_parallel(const Batch& first) {
    if (!w_.distributed()) return;
    check_same_run(w_, run_facts(o_, m_, first));
    dp_ = std::make_unique<DataParallel>(w_, m_, std::size_t(o_.bucket_mb * 1e6));
    if (data_.loss_terms) dp_->set_loss_terms(data_.loss_terms);
    dp_->plan(first);
  }
  double lr_at(std::int64_t step) const { return scheduled_lr(o_, step); }

  // The first batch, drawn from a copy of the generator: declares the model, sizes its plan.
  Batch first_batch() {
    std::mt19937_64 probe = rng_;
    return data_.train(probe);
  }

  // Parameters, optimizer state, generators and curves from the checkpoint; returns its step.
  std::int64_t resume() {
    Checkpoint ck = load_checkpoint(ck_path_);
    const std::string at = io::cut(ck_path_, 80);  // the path as messages show it
    if (ck.model_kind != m_.kind() || ck.model_options != m_.options_json())
      throw InputError(fmt::format("{}: the checkpoint {}; the model cannot change on resume", at,
                                   model_difference(ck.model_kind, ck.model_options, m_.kind(), m_.options_json())));
    if (ck.optimizer != o_.optimizer)
      throw InputError(fmt::format("{}: the checkpoint was trained with {}, not {}", at, ck.optimizer, o_.optimizer));
    if (ck.step > o_.steps)
      throw InputError(fmt::format("{}: the checkpoint is at step {}, beyond --steps {}", at, ck.step, o_.steps));
    TrainOptions saved;
    read_json(ck.train_options, at + " (train_options)", {bind(saved)});
    if (saved.schedule != o_.schedule)
      throw InputError(fmt::format("{}: the checkpoint was trained with schedule '{}', this run asks for '{}'", at,
                                   io::cut(saved.schedule, 40), io::cut(o_.schedule, 40)));
    if (saved.groups != o_.groups)
      throw InputError(fmt::format("{}: the checkpoint's parameter groups are {}, this run's {}; groups cannot "
                                   "change on resume (start a new run from its weights)", at,
                                   io::in_quotes(saved.groups, 40), io::in_quotes(o_.groups, 40)));
    if (saved.precision != o_.precision)
      say("note: the precision changes on resume: the checkpoint was trained in {}, this run trains in {} (the "
          "weights and optimizer state are f32 in both)\n", io::cut(saved.precision, 10), o_.precision);
    load_params(m_.params(), ck.params, m_.param_table(), at);
    ParamShapes trained = param_shapes(m_.params());
    for (const std::string& name : frozen_) trained.erase(name);
    try {
      optim_->load_state(ck.optim_state, ck.step, trained);
    } catch (const std::exception& e) {  // the optimizer names the state; this names the file
      throw InputError(fmt::format("{}: {}", at, e.what()));
    }
    restore_rngs(ck.rng_state, at, rng_, m_.rng());
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
    if (m_.bf16_products())
      say("precision: bf16 operands and f32 sums in every matrix product, f32 master weights and optimizer; {}\n",
          bf16_path_name());
    if (!frozen_.empty())
      say("frozen: {} of {} parameter tensors ({}{}): no gradient, update or optimizer state\n", frozen_.size(),
          m_.param_table().size(), fmt::join(frozen_.begin(), frozen_.begin() + std::ptrdiff_t(std::min<std::size_t>(4, frozen_.size())), ", "),
          frozen_.size() > 4 ? ", ..." : "");
    const Executor& plan = m_.plan_for(dp_ ? dp_->share(first) : first, /*training=*/true);  // built now: its size is known up front
    say("plan: {} steps (forward and backward, a fused group counted once), arena {:.1f} MiB (without reuse {:.1f} MiB)\n",
        plan.step_count(), double(plan.arena_bytes()) / (1 << 20), double(plan.unshared_bytes()) / (1 << 20));
    if (dp_) say("{}\n", dp_->describe());
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
    // o.accum micro-batches, drawn one after another from the generator: their gradients'
    // mean is the gradient of their mean loss, one batch accum times as large.
    double loss = 0;
    std::vector<ParamGrad> pg;
    Batch b;
    std::mt19937_64 model_rng;
    if (dp_) {
      // Data parallel: each micro-batch is a global batch; this rank runs its share, and the
      // last one's backward all-reduces the weighted sum of every micro-batch's gradient.
      for (std::int64_t k = 0; k < o_.accum; ++k) {
        b = data_.train(rng_);
        model_rng = m_.rng();
        const bool last = k + 1 == o_.accum;
        const double share_loss = dp_->step(b, last, last && o_.accum > 1 ? &sums_ : nullptr, 1.f / float(o_.accum));
        loss += dp_->step_weight() * share_loss;
        items_ += batch_items(data_, b);
        if (!last) accumulate(m_.grads(), k);
      }
      pg = dp_->reduced(m_.grads());
      loss = w_.sum(loss) / double(o_.accum);  // the global batches' mean loss, the same on every rank
      if (!std::isfinite(loss)) {
        w_.shared_error();
        diverged(step + 1, loss, NAN, cause(b, model_rng));
      }
    } else {
      for (std::int64_t k = 0; k < o_.accum; ++k) {
        b = data_.train(rng_);
        model_rng = m_.rng();  // to rerun the micro-batch, should it diverge
        const double micro = m_.forward_backward(b);
        if (!std::isfinite(micro)) diverged(step + 1, micro, NAN, cause(b, model_rng));
        loss += micro;
        items_ += batch_items(data_, b);
        pg = m_.grads();
        if (o_.accum > 1) accumulate(pg, k);
      }
      loss /= double(o_.accum);
      if (o_.accum > 1) pg = averaged(pg);
    }
    if (o_.grad_stats) record_stats(step + 1, grad_stats(pg, o_.clip));
    const double norm = grad_norm(pg);  // under mpirun: of the global gradient, the same on every rank
    if (!std::isfinite(norm)) {
      w_.shared_error();
      diverged(step + 1, loss, norm, cause(b, model_rng));
    }
    // Clipping rides along the update (the same numbers as clip_grad_norm, one pass fewer).
    optim_->step(pg, lr_at(step), clip_scale(norm, o_.clip));
    add_point("train", step + 1, loss);
    add_point("grad_norm", step + 1, norm);
    ema_ = std::isnan(ema_) ? loss : 0.9 * ema_ + 0.1 * loss;
    res_.final_train_loss = loss;
  }

  // Gradient accumulation: micro-batch k's gradients added into sums_ (copied at k = 0).
  void accumulate(const std::vector<ParamGrad>& pg, std::int64_t k) {
    sums_.resize(pg.size());
    for (std::size_t i = 0; i < pg.size(); ++i) {
      if (k == 0) {
        sums_[i].assign(pg[i].grad.begin(), pg[i].grad.end());
      } else {
        float* s = sums_[i].data();
        const float* g = pg[i].grad.data();
        for (std::size_t j = 0; j < sums_[i].size(); ++j) s[j] += g[j];
      }
    }
  }
  // The sums divided by accum, as the gradients the optimizer steps with.
  std::vector<ParamGrad> averaged(std::vector<ParamGrad> pg) {
    const float inv = 1.f / float(o_.accum);
    for (std::size_t i = 0; i < pg.size(); ++i) {
      for (float& v : sums_[i]) v *= inv;
      pg[i].grad = std::span<float>(sums_[i]);
    }
    return pg;
  }

  // Validation loss over `iters` batches and the user's metrics, after `step` steps.
  void evaluate(std::int64_t step, std::int64_t iters) {
    res_.final_val_loss = dp_ ? evaluate_split(iters) : evaluate_loss(m_, data_, iters, res_.metrics);
    if (dp_) check_params_agree(w_, m_, step);
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

  // The parameters' global L2 norm (in double).
  double param_norm() const {
    double s = 0;
    for (const ParamInfo& p : m_.param_table()) {
      const Tensor& t = m_.params().at(p.name);
      for (std::int64_t i = 0; i < t.numel(); ++i) s += double(t.f()[i]) * t.f()[i];
    }
    return std::sqrt(s);
  }
  // The norm at the start, the bound a checkpoint's parameters are held to.
  void note_start() { largest_norm_ = param_norm(); }

  // Writes the checkpoint of step `step` if it is a good one: finite training and validation
  // losses, and a parameter norm at most kGrowth times the largest of the start's and the
  // earlier checkpoints' (and of 1, for parameters that start at zero): a run whose weights
  // explode between two evaluations is diverging, even before its loss is infinite.
  // Otherwise the file keeps the last good one, and the run says so.
  static constexpr double kGrowth = 10;
  void save(std::int64_t step) {
    const double norm = param_norm();
    std::string bad;
    if (!std::isfinite(ema_) && !std::isnan(ema_)) bad = fmt::format("the training loss is {}", ema_);
    else if (std::isnan(ema_) && step > 0) bad = "the training loss is NaN";
    else if (data_.val && !std::isfinite(res_.final_val_loss)) bad = fmt::format("the validation loss is {}", res_.final_val_loss);
    else if (!std::isfinite(norm) || norm > kGrowth * std::max(largest_norm_, 1.0))  // 1: a model that starts at 0
      bad = fmt::format("the parameters' norm is {:.4g}, over {} times the largest before ({:.4g})", norm, kGrowth,
                        std::max(largest_norm_, 1.0));
    if (!bad.empty()) {
      say("note: step {}: no checkpoint written: {}; {} keeps {}\n", step, bad, ck_path_,
          last_good_ >= 0 ? fmt::format("step {}", last_good_) : std::string("nothing (none was written)"));
      return;
    }
    largest_norm_ = std::max(largest_norm_, norm);
    last_good_ = step;
    w_.set_stop_note(fmt::format("the last checkpoint (step {}) is in {}", step, ck_path_));
    if (w_.rank() != 0) return;  // rank 0 writes for every rank
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
    write_curves_now();
    res_.curves = curves_;
    if (o_.grad_stats) say("wrote {}/grad_stats.csv\n", o_.out_dir);
    say("trained {} steps in {:.1f} s ({:.0f} {}/s)\n", res_.steps, seconds, res_.items_per_sec, data_.item_name);
    say("wrote {}, {}/loss.csv, {}/loss.svg{}\n", ck_path_, o_.out_dir, o_.out_dir,
        res_.metrics.empty() ? "" : fmt::format(", {}/metrics.csv, {}/metrics.svg", o_.out_dir, o_.out_dir));
    if (dp_) say("{}\n", dp_->stats().describe());
    if (data_.val) say("val loss {:.4f}\n", res_.final_val_loss);
    for (auto& [name, v] : res_.metrics) say("{} {:.4f}\n", name, v);
    flush();
    return res_;
  }

  // The curves as they are, when the run ends by an error.
  void write_curves_now() const {
    if (w_.rank() == 0) write_curves(o_.out_dir, info_.title, curves_);
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

  std::string cause(const Batch& b, const std::mt19937_64& model_rng) {
    return divergence_cause(m_, b, model_rng, o_.detect_anomaly);
  }

  // The loss or the gradient norm of step `step` (1-based) is not finite: the curves so far
  // are written, the last checkpoint stays as it is.
  [[noreturn]] void diverged(std::int64_t step, double loss, double norm, const std::string& why) {
    write_curves_now();
    const bool have_ck = std::filesystem::exists(ck_path_);
    const std::string where = ck_path_.size() > 60 ? "..." + ck_path_.substr(ck_path_.size() - 57) : ck_path_;
    const double bad = std::isfinite(loss) ? norm : loss;
    throw Diverged(fmt::format("training diverged at step {}: the {} is {}; {}; {}", step,
                               std::isfinite(loss) ? "gradient norm" : "loss", std::isnan(bad) ? NAN : bad, why,
                               have_ck ? fmt::format("the last good checkpoint is kept in {}", where)
                                       : std::string("no checkpoint was written before it")),
                   step, curves_);
  }

  // Under mpirun: the validation batches shared out across the ranks (batch i to rank
  // i mod N), their losses and measures gathered and summed in batch order on every rank.
  double evaluate_split(std::int64_t iters) {
    const std::int64_t N = w_.size(), r = w_.rank();
    if (!data_.val || iters < N) return evaluate_loss(m_, data_, iters, res_.metrics);
    DataSource one = data_;
    std::vector<double> mine;
    std::vector<std::pair<std::string, double>> means;
    std::size_t per = 0;  // values per batch: its loss and its measures
    for (std::int64_t i = r; i < iters; i += N) {
      one.val = [this, i](std::int64_t) { return data_.val(i); };
      mine.push_back(evaluate_loss(m_, one, 1, means));
      for (auto& [name, v] : means) mine.push_back(v);
      per = 1 + means.size();
    }
    const std::int64_t rows = (iters + N - 1) / N;  // batches per rank, the last ranks' padded
    mine.resize(std::size_t(rows) * per, 0.0);
    const std::vector<double> all = w_.allgather(mine);
    double total = 0;
    std::vector<double> sums(per - 1, 0.0);
    for (std::int64_t i = 0; i < iters; ++i) {
      const double* v = all.data() + std::size_t(((i % N) * rows + i / N)) * per;
      total += v[0];
      for (std::size_t k = 1; k < per; ++k) sums[k - 1] += v[k];
    }
    res_.metrics.clear();
    for (std::size_t k = 0; k + 1 < per; ++k) res_.metrics.emplace_back(means[k].first, sums[k] / double(iters));
    return total / double(iters);
  }

  const World& w_ = World::get();
  std::unique_ptr<DataParallel> dp_;  // under mpirun
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
  std::vector<std::vector<float>> sums_;  // gradient accumulation's sums, per parameter
  double largest_norm_ = 0;   // the parameters' norm at the start and at the checkpoints written
  std::int64_t last_good_ = -1;  // the step of the last checkpoint written
};

}  // namespace

namespace {
FitResult fit_here(Model& m, const DataSource& data, const TrainOptions& opts, const RunInfo& info, std::FILE* out) {
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
  m.set_bf16_products(o.precision == "bf16");
  Run run(m, data, o, info, out);
  const Batch first = run.first_batch();
  m.declare(first);
  run.setup_groups();
  run.setup_parallel(first);
  try {
    std::filesystem::create_directories(o.out_dir);
  } catch (const std::filesystem::filesystem_error& e) {
    throw InputError(fmt::format("out_dir {}: cannot create the directory: {}", io::in_quotes(o.out_dir, 60),
                                 e.code().message()));
  }
  const std::int64_t start = o.resume ? run.resume() : 0;
  if (!o.resume) m.rng().seed(std::uint64_t(o.seed) + 1);
  m.set_detect_anomaly(o.detect_anomaly);
  m.init_params(std::uint64_t(o.seed));  // only parameters not loaded or set by the user
  run.note_start();
  if (asked_warmup >= 0)
    run.say("note: warmup {} is not shorter than the run's {} steps and would never reach lr {}; capped at {} (a "
            "tenth of the run)\n", asked_warmup, o.steps, o.lr, o.warmup);
  run.print_header(first);

  Progress progress(o.steps, o.quiet || World::get().rank() != 0 ? nullptr : stderr, data.item_name);
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

}  // namespace

FitResult fit(Model& m, const DataSource& data, const TrainOptions& opts, const RunInfo& info, std::FILE* out) {
  try {
    return fit_here(m, data, opts, info, out);
  } catch (...) {
    World::get().failed();  // under mpirun: no collective finalise that a failed peer would block
    throw;
  }
}

}  // namespace gg::train
