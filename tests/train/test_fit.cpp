// End-to-end tests of train/trainer on a model that is not the GPT: a small MLP regression
// learns, evaluates on validation batches of another shape, reports the user's metric,
// writes its curves and a checkpoint with the user's metadata, resumes bit-exactly, refuses
// a checkpoint of another model, and a diverging run keeps the last good checkpoint.
#include "train/trainer.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "dsl/nn.h"
#include "tests/regression_data.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"

namespace {

using namespace gg;
using namespace gg::dsl;
using gg::test::contains;
using gg::test::read_all;
using gg::test::TempDir;
using train::Series;
namespace fs = std::filesystem;

// y = sin(x0) + x1 / 2, learned by a 2 -> 16 -> 1 tanh MLP of a given width option.
train::Model mlp(std::int64_t hidden = 16) {
  return train::Model(
      "mlp",
      [hidden](train::ModelInputs& in) {
        Expr h = tanh(linear(in["x"], hidden, "fc1"));                         // h: (B, hidden)
        Expr pred = linear(h, 1, "fc2");                                        // pred: (B, 1)
        Expr err = pred - in["y"];
        return train::ModelOutputs{mean_all(err * err), {{"pred", pred}}};
      },
      fmt::format("{{\"hidden\": {}}}", hidden));
}

train::DataSource source() {
  train::DataSource d;
  d.train = [](std::mt19937_64& rng) { return gg::test::regression_batch(rng, 16); };
  d.val = [](std::int64_t i) {  // another batch shape: 64 rows
    std::mt19937_64 rng(1000 + std::uint64_t(i));
    return gg::test::regression_batch(rng, 64);
  };
  d.metrics = [](train::Model& m) {
    std::mt19937_64 rng(7);
    auto out = m.evaluate(gg::test::regression_batch(rng, 64));
    return std::vector<std::pair<std::string, double>>{{"rmse", std::sqrt(double(out.at("loss").f()[0]))}};
  };
  return d;
}

train::TrainOptions options(const std::string& dir) {
  train::TrainOptions o;
  o.out_dir = dir;
  o.steps = 300;
  o.warmup = 10;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.weight_decay = 0;
  o.eval_interval = 100;
  o.eval_iters = 2;
  o.final_eval_iters = 4;
  o.quiet = true;
  o.seed = 3;
  return o;
}

train::FitResult quiet_fit(train::Model& m, const train::DataSource& d, const train::TrainOptions& o,
                           const train::RunInfo& info = {}, std::string* report = nullptr) {
  return gg::test::capture([&](std::FILE* out) { return train::fit(m, d, o, info, out); }, report);
}

const auto error_of = [](auto&& f) { return gg::test::error_of<gg::train::InputError>(f); };

}  // namespace

TEST_CASE("fit: any model learns, with validation at another shape, metrics, curves and a checkpoint") {
  TempDir dir;
  train::Model m = mlp();
  train::RunInfo info;
  info.title = "mlp regression";
  info.metadata["dataset"] = "sin(x0) + x1/2";
  std::string report;
  const train::FitResult r = quiet_fit(m, source(), options(dir.file("run")), info, &report);
  MESSAGE("final val loss " << r.final_val_loss << ", rmse " << r.metrics.at(0).second);
  CHECK(r.steps == 300);
  CHECK(r.final_val_loss < 0.05);  // the variance of y is about 0.7
  REQUIRE(r.metrics.size() == 1);
  CHECK(r.metrics[0].first == "rmse");
  CHECK(r.metrics[0].second < 0.25);
  CHECK(contains(report, "step   100: train loss"));
  CHECK(contains(report, "rmse"));
  // The curves: 300 losses and gradient norms, validation and the metric at each evaluation.
  std::map<std::string, std::size_t> points;
  for (const Series& s : r.curves) points[s.name] = s.x.size();
  CHECK(points == std::map<std::string, std::size_t>{{"train", 300}, {"grad_norm", 300}, {"val", 3}, {"rmse", 3}});
  CHECK(contains(report, "plan: "));
  CHECK(contains(read_all(dir.file("run/loss.csv")), "grad_norm,300,"));
  for (const char* f : {"checkpoint.safetensors", "loss.csv", "loss.svg", "metrics.csv", "metrics.svg"})
    CHECK(fs::exists(dir.file(std::string("run/") + f)));
  CHECK(contains(read_all(dir.file("run/metrics.csv")), "rmse,300,"));
  const train::Checkpoint ck = train::load_checkpoint(dir.file("run/checkpoint.safetensors"));
  CHECK(ck.model_kind == "mlp");
  CHECK(ck.model_options == "{\"hidden\": 16}");
  CHECK(ck.user.at("dataset") == "sin(x0) + x1/2");
  CHECK(ck.step == 300);
  CHECK(ck.params.size() == 4);
  CHECK(ck.optim_state.size() == 8);  // adam m and v for each parameter
  CHECK(contains(ck.train_options, "\"steps\":300"));
}

TEST_CASE("fit: resume is bit-exact; another model's checkpoint is refused") {
  TempDir dir;
  train::TrainOptions o = options(dir.file("resumed"));
  o.steps = 150;
  o.eval_interval = 50;
  o.min_lr = o.lr;  // a constant rate: the schedule of a 150-step run would differ by design
  o.warmup = 0;
  train::Model a = mlp();
  quiet_fit(a, source(), o);
  train::TrainOptions more = o;
  more.steps = 300;
  more.resume = true;
  train::Model b = mlp();
  std::string report;
  quiet_fit(b, source(), more, {}, &report);
  CHECK(contains(report, "resuming"));
  CHECK(contains(report, "the learning-rate schedule changes on resume"));

  train::TrainOptions straight = more;
  straight.resume = false;
  straight.out_dir = dir.file("straight");
  train::Model c = mlp();
  quiet_fit(c, source(), straight);
  for (auto& [name, t] : c.params().all()) {
    INFO(name);
    CHECK(b.params().at(name).to_vector() == t.to_vector());
  }
  // A model with other options cannot resume this checkpoint.
  train::Model wide = mlp(32);
  const std::string e = error_of([&] { quiet_fit(wide, source(), more); });
  CHECK(contains(e, "has model option hidden = 16, this run 32; the model cannot change on resume"));
}

TEST_CASE("fit: a diverging run stops, keeps the last good checkpoint and writes its curves") {
  TempDir dir;
  train::TrainOptions o = options(dir.file("run"));
  o.eval_interval = 20;
  o.optimizer = "sgd";
  o.momentum = 0;
  o.clip = 0;
  o.lr = 0.05;
  o.min_lr = 0.05;
  o.warmup = 0;
  // The targets blow up from step 51 on: the loss becomes infinite. (fit() draws one batch
  // from a copy of the generator first, to declare the model: hence 51 calls.)
  train::DataSource d = source();
  std::int64_t calls = 0;
  d.train = [&](std::mt19937_64& rng) {
    train::Batch b = gg::test::regression_batch(rng, 16);
    if (++calls > 51) b["y"].f()[0] = INFINITY;
    return b;
  };
  train::Model m = mlp();
  std::string e;
  std::int64_t diverged_at = 0;
  std::size_t curve_points = 0;
  try {
    quiet_fit(m, d, o);
  } catch (const train::Diverged& x) {
    e = x.what();
    diverged_at = x.step;
    for (const Series& s : x.curves)
      if (s.name == "train") curve_points = s.x.size();
  }
  INFO(e);
  CHECK(diverged_at == 51);
  CHECK(curve_points == 50);
  CHECK(contains(e, "training diverged at step 51: the loss is inf"));
  CHECK(contains(e, "the last good checkpoint is kept in"));
  const train::Checkpoint ck = train::load_checkpoint(dir.file("run/checkpoint.safetensors"));
  CHECK(ck.step == 40);
  for (auto& [name, t] : ck.params)
    for (float v : t.to_vector()) CHECK(std::isfinite(v));
  CHECK(contains(read_all(dir.file("run/loss.csv")), "train,50,"));
  CHECK_FALSE(contains(read_all(dir.file("run/loss.csv")), "train,51,"));
}

TEST_CASE("fit: bad options and data sources are refused before any step") {
  TempDir dir;
  train::Model m = mlp();
  train::TrainOptions o = options(dir.file("run"));
  o.lr = -1;
  CHECK(contains(error_of([&] { quiet_fit(m, source(), o); }), "key 'lr'"));
  o = options(dir.file("run"));
  CHECK(contains(error_of([&] { quiet_fit(m, train::DataSource{}, o); }), "no training batches"));
  CHECK_FALSE(fs::exists(dir.file("run/checkpoint.safetensors")));
}

TEST_CASE("fit: gradient statistics on request, and anomaly mode names the node that made a NaN") {
  TempDir dir;
  train::TrainOptions o = options(dir.file("run"));
  o.steps = 20;
  o.eval_interval = 10;
  o.grad_stats = true;
  // A parameter the loss never reads: flagged once, by name, with the reason.
  train::Model m("mlp_spare", [](train::ModelInputs& in) {
    Expr pred = linear(tanh(linear(in["x"], 8, "fc1")), 1, "fc2");
    (void)param(in.graph(), "spare", {3}, normal_init(0.1f));
    Expr err = pred - in["y"];
    return train::ModelOutputs{mean_all(err * err)};
  });
  std::string report;
  quiet_fit(m, source(), o, {}, &report);
  CHECK(contains(report, "note: the gradient of 'spare' is zero by construction"));
  CHECK(contains(report, "grad norm"));
  const std::string csv = read_all(dir.file("run/grad_stats.csv"));
  CHECK(csv.rfind("step,parameter,norm,max_abs,zero_fraction,nonfinite\n", 0) == 0);
  CHECK(contains(csv, "\n20,fc1.weight,"));
  CHECK(contains(csv, "\n20,spare,0,0,1,0\n"));  // all zeros
  CHECK(contains(csv, "\n20,(global clipped),"));

  // A NaN planted in a weight after step 5 is traced to the first node that reads it.
  train::TrainOptions a = options(dir.file("anomaly"));
  a.steps = 10;
  a.detect_anomaly = true;
  train::Model n = mlp();
  train::DataSource d = source();
  std::int64_t calls = 0;
  d.train = [&](std::mt19937_64& rng) {
    if (++calls == 6) n.params().at("fc2.weight").f()[3] = NAN;
    return gg::test::regression_batch(rng, 16);
  };
  std::string msg;
  try {
    quiet_fit(n, d, a);
  } catch (const GraphError& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(contains(msg, "anomaly"));
  CHECK(contains(msg, "fc2"));
  CHECK(contains(msg, "1 NaN"));
}

TEST_CASE("fit: --precision bf16 trains with bf16 products and f32 master weights, and a resume may change it") {
  TempDir dir;
  train::TrainOptions o = options(dir.file("f32"));
  train::Model f = mlp();
  const train::FitResult rf = quiet_fit(f, source(), o);
  o.out_dir = dir.file("bf16");
  o.precision = "bf16";
  train::Model b = mlp();
  std::string report;
  const train::FitResult rb = quiet_fit(b, source(), o, {}, &report);
  MESSAGE("final val loss f32 " << rf.final_val_loss << ", bf16 " << rb.final_val_loss);
  CHECK(contains(report, "precision: bf16 operands and f32 sums in every matrix product"));
  CHECK(b.bf16_products());
  CHECK(rb.final_val_loss < 0.05);                                   // it learns as well
  CHECK(std::fabs(rb.final_val_loss - rf.final_val_loss) < 0.02);    // and about as far
  CHECK(rb.final_val_loss != rf.final_val_loss);                     // in another precision
  for (auto& [name, t] : b.params().all()) {  // master weights: f32 values that no bf16 holds
    const std::vector<float> v = t.to_vector();
    CHECK(std::any_of(v.begin(), v.end(), [](float x) { return (std::bit_cast<std::uint32_t>(x) & 0xffffu) != 0; }));
  }
  const train::Checkpoint ck = train::load_checkpoint(dir.file("bf16/checkpoint.safetensors"));
  CHECK(contains(ck.train_options, "\"precision\":\"bf16\""));
  // Resumed in f32: said in one line, and it goes on.
  train::TrainOptions more = o;
  more.precision = "f32";
  more.steps = 350;
  more.resume = true;
  train::Model c = mlp();
  std::string again;
  quiet_fit(c, source(), more, {}, &again);
  CHECK(contains(again, "note: the precision changes on resume: the checkpoint was trained in bf16, this run trains in f32"));
  CHECK_FALSE(c.bf16_products());
}
