// The trainer's controls beyond the defaults, and the mistakes a new user made with them:
// each regression test here failed on the code before the fix (issue 42's list).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "dsl/nn.h"
#include "tests/regression_data.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace {

using namespace gg;
using namespace gg::dsl;
using gg::test::contains;
using gg::test::read_all;
using gg::test::TempDir;
namespace fs = std::filesystem;

// y = sin(x0) + x1 / 2 by a 2 -> 8 -> 1 tanh MLP; `width` columns of x (2 by default).
train::Model mlp(std::string kind = "mlp") {
  return train::Model(kind, [](train::ModelInputs& in) {
    Expr pred = linear(tanh(linear(in["x"], 8, "fc1")), 1, "fc2");
    Expr err = pred - in["y"];
    return train::ModelOutputs{mean_all(err * err), {{"pred", pred}}};
  });
}

train::DataSource source(bool with_val = true) {
  train::DataSource d;
  d.train = [](std::mt19937_64& rng) { return gg::test::regression_batch(rng, 16); };
  if (with_val)
    d.val = [](std::int64_t i) {
      std::mt19937_64 rng(1000 + std::uint64_t(i));
      return gg::test::regression_batch(rng, 32);
    };
  return d;
}

train::TrainOptions options(const std::string& dir, std::int64_t steps = 40) {
  train::TrainOptions o;
  o.out_dir = dir;
  o.steps = steps;
  o.warmup = 5;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.eval_interval = 20;
  o.eval_iters = 2;
  o.final_eval_iters = 2;
  o.quiet = true;
  o.seed = 5;
  return o;
}

train::FitResult quiet_fit(train::Model& m, const train::DataSource& d, const train::TrainOptions& o,
                           std::string* report = nullptr) {
  return gg::test::capture([&](std::FILE* out) { return train::fit(m, d, o, {}, out); }, report);
}

const auto error_of = [](auto&& f) { return gg::test::error_of<gg::train::InputError>(f); };

}  // namespace

TEST_CASE("fit regression: a null output stream silences the run instead of crashing") {
  TempDir dir;
  train::Model m = mlp();
  const train::FitResult r = train::fit(m, source(), options(dir.file("run")), {}, nullptr);
  CHECK(r.steps == 40);
  CHECK(fs::exists(dir.file("run/loss.csv")));
}

TEST_CASE("fit regression: a data source without validation batches says so once") {
  TempDir dir;
  train::Model m = mlp();
  std::string report;
  const train::FitResult r = quiet_fit(m, source(false), options(dir.file("run")), &report);
  CHECK(std::isnan(r.final_val_loss));
  CHECK(contains(report, "no validation batches (DataSource::val)"));
  CHECK(report.find("no validation batches") == report.rfind("no validation batches"));
  CHECK_FALSE(contains(report, "val nan"));
}

TEST_CASE("fit regression: a warm-up longer than the run is capped, with one line saying so") {
  TempDir dir;
  train::Model m = mlp();
  train::TrainOptions o = options(dir.file("run"), 50);
  o.warmup = 100;  // the default, over a 50-step run
  std::string report;
  quiet_fit(m, source(), o, &report);
  INFO(report);
  CHECK(contains(report, "note: warmup 100 is not shorter than the run's 50 steps"));
  CHECK(contains(report, "capped at 5"));
  const train::Checkpoint ck = train::load_checkpoint(dir.file("run/checkpoint.safetensors"));
  CHECK(contains(ck.train_options, "\"warmup\":5"));
}

TEST_CASE("fit regression: a changed batch width names the input and the parameter it changes") {
  train::Model m = mlp();
  std::mt19937_64 rng(1);
  m.declare(gg::test::regression_batch(rng, 8, 3));
  m.init_params(1);
  m.forward_backward(gg::test::regression_batch(rng, 8, 3));
  const std::string e = error_of([&] { m.forward_backward(gg::test::regression_batch(rng, 8, 4)); });
  INFO(e);
  CHECK(contains(e, "input 'x'"));
  CHECK(contains(e, "(8, 4)"));
  CHECK(contains(e, "(8, 3)"));
  CHECK(contains(e, "parameter 'fc1.weight' would be (8, 4) instead of (8, 3)"));  // (out, in)
  CHECK_FALSE(contains(e, "train|"));
  CHECK(e.size() <= 300);
}

TEST_CASE("fit regression: divergence names the first non-finite node, or the batch tensor it came in with") {
  TempDir dir;
  train::TrainOptions o = options(dir.file("run"));
  o.optimizer = "sgd";
  o.clip = 0;
  // A log of a value that turns negative: the node that makes the NaN is named.
  train::Model m("logmlp", [](train::ModelInputs& in) {
    Expr pred = linear(in["x"], 1, "fc");
    Expr err = log(pred) - in["y"];
    return train::ModelOutputs{mean_all(err * err)};
  });
  std::string e;
  try {
    quiet_fit(m, source(), o);
  } catch (const train::Diverged& x) {
    e = x.what();
  }
  INFO(e);
  CHECK(contains(e, "training diverged at step 1"));
  CHECK(contains(e, "log"));
  CHECK(contains(e, "forward node"));
  CHECK(e.size() <= 300);

  // An infinity in the data: the batch's tensor is named.
  train::DataSource d = source();
  d.train = [](std::mt19937_64& rng) {
    train::Batch b = gg::test::regression_batch(rng, 16);
    b["y"].f()[2] = INFINITY;
    return b;
  };
  train::Model n = mlp();
  std::string e2;
  try {
    quiet_fit(n, d, options(dir.file("run2")));
  } catch (const train::Diverged& x) {
    e2 = x.what();
  }
  INFO(e2);
  CHECK(contains(e2, "the batch's tensor 'y' holds 0 NaN and 1 Inf"));
  CHECK(e2.size() <= 300);
}

TEST_CASE("fit regression: an unknown optimizer is named with the choices") {
  TempDir dir;
  train::Model m = mlp();
  train::TrainOptions o = options(dir.file("run"));
  o.optimizer = "adam";
  const std::string e = error_of([&] { quiet_fit(m, source(), o); });
  INFO(e);
  CHECK(contains(e, "'adam'"));
  CHECK(contains(e, "adamw"));
  CHECK(contains(e, "sgd"));
  CHECK_FALSE(contains(e, "'?'"));
}

TEST_CASE("fit regression: a model that returns no loss is told so, not that a tensor is unread") {
  TempDir dir;
  train::Model m("noloss", [](train::ModelInputs& in) {
    Expr pred = linear(in["x"], 1, "fc");
    return train::ModelOutputs{Expr{}, {{"pred", pred}}};  // forgot the loss; never reads y
  });
  const std::string e = error_of([&] { quiet_fit(m, source(), options(dir.file("run"))); });
  INFO(e);
  CHECK(contains(e, "no loss"));
  CHECK_FALSE(contains(e, "not read"));
}

TEST_CASE("Tensor::f32 and i32 take braced lists") {
  const Tensor a = Tensor::f32({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(a.f()[7] == 7.f);
  const Tensor b = Tensor::i32({3}, {1, 2, 3});
  CHECK(b.i()[2] == 3);
  CHECK_THROWS_AS(Tensor::f32({4, 2}, {0, 1}), GraphError);
}

TEST_CASE("Model::graph_for returns the training graph with its gradient nodes; step counts agree") {
  TempDir dir;
  train::Model m = mlp();
  std::mt19937_64 rng(1);
  const train::Batch b = gg::test::regression_batch(rng, 16);
  m.declare(b);
  const std::unique_ptr<Graph> eval = m.graph_for(b, false);
  const std::unique_ptr<Graph> train_g = m.graph_for(b, true);
  CHECK(train_g->size() > eval->size());
  CHECK(train_g->find("grad(fc1.weight)", OpKind::param) < 0);  // a gradient, not a parameter
  std::size_t grads = 0;
  for (const Node& n : train_g->nodes()) grads += n.name.rfind("grad(", 0) == 0;
  CHECK(grads > 0);
  std::string report;
  quiet_fit(m, source(), options(dir.file("run")), &report);
  const std::size_t steps = m.last_train_plan().step_count();
  CHECK(contains(report, fmt::format("plan: {} steps", steps)));
}

TEST_CASE("fit: parameter groups freeze, and set their own learning rate and weight decay") {
  TempDir dir;
  std::mt19937_64 rng(1);
  train::Model init = mlp();
  init.declare(gg::test::regression_batch(rng, 16));
  init.init_params(5);  // the weights every run below starts from (seed 5)
  SUBCASE("frozen: not moved even by weight decay, no optimizer state, no gradient in the plan") {
    train::Model m = mlp();
    train::TrainOptions o = options(dir.file("frozen"));
    o.groups = "fc1.*:frozen";
    o.weight_decay = 0.1;
    std::string report;
    quiet_fit(m, source(), o, &report);
    CHECK(contains(report, "frozen: 2 of 4 parameter tensors (fc1.weight, fc1.bias)"));
    for (const char* name : {"fc1.weight", "fc1.bias"}) CHECK(m.params().at(name).to_vector() == init.params().at(name).to_vector());
    CHECK(m.params().at("fc2.weight").to_vector() != init.params().at("fc2.weight").to_vector());
    const train::Checkpoint ck = train::load_checkpoint(dir.file("frozen/checkpoint.safetensors"));
    CHECK(ck.optim_state.size() == 4);  // adam m and v of fc2's two tensors
    CHECK(ck.optim_state.count("adam_m.fc1.weight") == 0);
    CHECK(contains(ck.train_options, "\"groups\":\"fc1.*:frozen\""));
    std::vector<NodeId> grads;
    std::mt19937_64 r2(2);
    m.graph_for(gg::test::regression_batch(r2, 16), true, nullptr, &grads);
    CHECK(grads.size() == 2);
    CHECK(m.grads().size() == 2);
    // Resuming under other groups is refused.
    train::TrainOptions more = o;
    more.steps = 60;
    more.resume = true;
    more.groups = "";
    train::Model again = mlp();
    CHECK(contains(error_of([&] { quiet_fit(again, source(), more); }), "groups cannot change on resume"));
    more.groups = o.groups;
    quiet_fit(again, source(), more);
  }
  SUBCASE("a group's learning rate scales its updates; the same settings as the run's change no bit") {
    train::TrainOptions o = options(dir.file("lr"), 1);
    o.warmup = 0;
    o.schedule = "constant";
    o.weight_decay = 0;
    o.clip = 0;
    train::Model base = mlp();
    quiet_fit(base, source(), o);
    train::Model same = mlp();
    o.out_dir = dir.file("same");
    o.groups = fmt::format("*:lr={},weight_decay=0", o.lr);
    quiet_fit(same, source(), o);
    for (auto& [name, t] : base.params().all()) CHECK(same.params().at(name).to_vector() == t.to_vector());
    train::Model half = mlp();
    o.out_dir = dir.file("half");
    o.groups = fmt::format("fc2.*:lr={}", o.lr / 2);
    quiet_fit(half, source(), o);
    CHECK(half.params().at("fc1.weight").to_vector() == base.params().at("fc1.weight").to_vector());
    const std::vector<float> w0 = init.params().at("fc2.weight").to_vector(), wb = base.params().at("fc2.weight").to_vector(),
                             wh = half.params().at("fc2.weight").to_vector();
    for (std::size_t i = 0; i < w0.size(); ++i) CHECK(wh[i] - w0[i] == doctest::Approx((wb[i] - w0[i]) / 2).epsilon(1e-3));
  }
  SUBCASE("mistakes in the groups are refused naming the group") {
    train::Model m = mlp();
    train::TrainOptions o = options(dir.file("bad"));
    o.groups = "enc.*:frozen";
    CHECK(contains(error_of([&] { quiet_fit(m, source(), o); }), "pattern 'enc.*' matches no parameter (the model has fc1.weight"));
    o.groups = "fc1.*:lr=-1";
    CHECK(contains(error_of([&] { quiet_fit(m, source(), o); }), "group 'fc1.*': lr must be a number in (0, 10], got '-1'"));
    o.groups = "fc1.*:momentum=2";
    CHECK(contains(error_of([&] { quiet_fit(m, source(), o); }), "unknown setting 'momentum=2'"));
    o.groups = "*:frozen";
    CHECK(contains(error_of([&] { quiet_fit(m, source(), o); }), "every parameter is frozen"));
  }
  CHECK(train::glob_match("fc?.w*", "fc1.weight"));
  CHECK_FALSE(train::glob_match("fc?.w*", "fc12.weight"));
  CHECK(train::glob_match("*", ""));
}

TEST_CASE("fit: a schedule of one's own, stored by name; a resume under another is refused") {
  TempDir dir;
  train::TrainOptions o = options(dir.file("run"));
  o.weight_decay = 0;
  o.schedule = "zero";
  o.lr_schedule = [](std::int64_t) { return 0.0; };  // no step moves a weight
  train::Model m = mlp();
  std::string report;
  quiet_fit(m, source(), o, &report);
  CHECK(contains(report, "(zero schedule)"));
  std::mt19937_64 rng(1);
  train::Model init = mlp();
  init.declare(gg::test::regression_batch(rng, 16));
  init.init_params(5);
  for (auto& [name, t] : init.params().all()) CHECK(m.params().at(name).to_vector() == t.to_vector());
  CHECK(contains(train::load_checkpoint(dir.file("run/checkpoint.safetensors")).train_options, "\"schedule\":\"zero\""));
  train::TrainOptions more = options(dir.file("run"), 60);
  more.resume = true;
  train::Model b = mlp();
  std::string rep;
  const std::string e1 = error_of([&] { quiet_fit(b, source(), more, &rep); });
  INFO(e1 << rep);
  CHECK(contains(e1, "trained with schedule 'zero', this run asks for 'cosine'"));
  more.schedule = "halving";
  CHECK(contains(error_of([&] { quiet_fit(b, source(), more); }), "'halving' is none of cosine, linear, constant"));
  more.schedule = "cosine";
  more.lr_schedule = [](std::int64_t) { return 1e-3; };
  CHECK(contains(error_of([&] { quiet_fit(b, source(), more); }), "needs a name of its own"));
  CHECK(gg::linear_lr(10, 0, 20, 1.0, 0.0) == doctest::Approx(0.5));
  CHECK(gg::constant_lr(30, 5, 0.25) == 0.25);
}

TEST_CASE("fit: the evaluation callback stops the run or keeps the best checkpoint; metrics from the eval pass") {
  TempDir dir;
  SUBCASE("stop: the run ends as at its last step") {
    train::TrainOptions o = options(dir.file("stop"), 100);
    std::vector<std::int64_t> seen;
    o.on_eval = [&](const train::Evaluation& e) {
      seen.push_back(e.step);
      return train::EvalAction{.stop = e.step == 40};
    };
    train::Model m = mlp();
    std::string report;
    const train::FitResult r = quiet_fit(m, source(), o, &report);
    CHECK(seen == std::vector<std::int64_t>{20, 40, 40});  // the last: the final evaluation
    CHECK(r.steps == 40);
    CHECK(contains(report, "stopped at step 40 of 100 by the evaluation callback"));
    CHECK(train::load_checkpoint(dir.file("stop/checkpoint.safetensors")).step == 40);
    const std::string csv = read_all(dir.file("stop/loss.csv"));
    CHECK(contains(csv, "train,40,"));
    CHECK_FALSE(contains(csv, "train,41,"));
    CHECK(csv.find("val,40,") == csv.rfind("val,40,"));  // one point at the stopping step
  }
  SUBCASE("save: false keeps the checkpoint before") {
    train::TrainOptions o = options(dir.file("best"), 60);
    o.on_eval = [](const train::Evaluation& e) { return train::EvalAction{.save = e.step == 20}; };
    train::Model m = mlp();
    quiet_fit(m, source(), o);
    CHECK(train::load_checkpoint(dir.file("best/checkpoint.safetensors")).step == 20);
    CHECK(fs::exists(dir.file("best/loss.csv")));
  }
  SUBCASE("batch_metrics read the evaluation pass's outputs: no second pass over the batches") {
    train::TrainOptions o = options(dir.file("metrics"));
    train::DataSource d = source();
    std::int64_t val_calls = 0;
    d.val = [&](std::int64_t i) {
      ++val_calls;
      std::mt19937_64 rng(1000 + std::uint64_t(i));
      return gg::test::regression_batch(rng, 32);
    };
    d.batch_metrics = [](const train::Batch& b, const std::map<std::string, Tensor>& out) {
      double mae = 0;
      const Tensor& pred = out.at("pred");
      for (std::int64_t i = 0; i < pred.numel(); ++i) mae += std::fabs(pred.f()[i] - b.at("y").f()[i]);
      return std::vector<std::pair<std::string, double>>{{"mae", mae / double(pred.numel())}};
    };
    train::Model m = mlp();
    const train::FitResult r = quiet_fit(m, d, o);
    CHECK(val_calls == 2 * 1 + 2);  // one evaluation at step 20 and the final one, 2 batches each
    REQUIRE(r.metrics.size() == 1);
    CHECK(r.metrics[0].first == "mae");
    CHECK(r.metrics[0].second > 0);
    CHECK(r.metrics[0].second < 1);
  }
  SUBCASE("an error from the user's metrics still leaves the curves written") {
    train::TrainOptions o = options(dir.file("throws"));
    train::DataSource d = source();
    d.metrics = [](train::Model&) -> std::vector<std::pair<std::string, double>> { throw std::runtime_error("boom"); };
    train::Model m = mlp();
    CHECK_THROWS_AS(quiet_fit(m, d, o), std::runtime_error);
    CHECK(contains(read_all(dir.file("throws/loss.csv")), "train,20,"));
  }
}

TEST_CASE("fit: gradient accumulation matches one step on a batch accum times as large") {
  TempDir dir;
  for (const char* optimizer : {"sgd", "adamw"}) {
    INFO(optimizer);
    train::TrainOptions o = options(dir.file(std::string("big_") + optimizer), 1);
    o.optimizer = optimizer;
    o.warmup = 0;
    o.clip = 0;
    o.momentum = 0;
    train::DataSource big = source(), micro = source();
    // The same rows: a batch draws its rows one after another from the generator.
    big.train = [](std::mt19937_64& rng) { return gg::test::regression_batch(rng, 16); };
    micro.train = [](std::mt19937_64& rng) { return gg::test::regression_batch(rng, 4); };
    train::Model a = mlp(), b = mlp();
    const train::FitResult ra = quiet_fit(a, big, o);
    o.out_dir = dir.file(std::string("micro_") + optimizer);
    o.accum = 4;
    const train::FitResult rb = quiet_fit(b, micro, o);
    CHECK(rb.final_train_loss == doctest::Approx(ra.final_train_loss).epsilon(1e-6));
    for (auto& [name, t] : a.params().all()) {
      INFO(name);
      const std::vector<float> x = t.to_vector(), y = b.params().at(name).to_vector();
      for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(y[i] - x[i]) <= 1e-6 * std::fabs(x[i]));
    }
  }
}

TEST_CASE("fit: a model whose parameters start at zero still writes its checkpoints") {
  TempDir dir;
  // y = 2 x by one weight that starts at 0: the norm grows from 0 to about 2.
  train::Model m("zero", [](train::ModelInputs& in) {
    Expr w = param(in.graph(), "w", {1, 1}, zeros_init());
    Expr err = matmul(in["x"], w) - in["y"];
    return train::ModelOutputs{mean_all(err * err), {}};
  });
  train::DataSource d;
  d.train = [](std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> x(8), y(8);
    for (std::size_t i = 0; i < 8; ++i) y[i] = 2 * (x[i] = u(rng));
    return train::Batch{{"x", Tensor::f32({8, 1}, x)}, {"y", Tensor::f32({8, 1}, y)}};
  };
  train::TrainOptions o = options(dir.file("zero"), 40);
  o.eval_interval = 10;
  o.lr = 0.1;
  o.min_lr = 0.1;
  quiet_fit(m, d, o);
  const train::Checkpoint ck = train::load_checkpoint(dir.file("zero/checkpoint.safetensors"));
  CHECK(ck.step == 40);
  CHECK(ck.params.at("w").f()[0] == doctest::Approx(2).epsilon(0.05));
}
