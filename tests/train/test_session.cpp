// The step-level Session: two models over one store and two optimizers, one checkpoint,
// resumed bit for bit; the parts' mistakes refused.
#include "train/session.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "dsl/nn.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"

namespace {

using namespace gg;
using namespace gg::dsl;
using gg::test::contains;
using gg::test::read_all;
using gg::test::TempDir;

Expr critic(Expr x) {
  Scope s(*x.g, "disc");
  return linear(relu(linear(x, 8, "fc1")), 1, "out");
}
Expr maker(Expr z) {
  Scope s(*z.g, "gen");
  return linear(relu(linear(z, 8, "fc1")), 2, "out");
}

struct Gan {
  train::Model disc{"d", [](train::ModelInputs& in) {
                      Expr r = critic(in["real"]), f = critic(in["fake"]);
                      return train::ModelOutputs{mean_all((r - 1.f) * (r - 1.f)) + mean_all(f * f)};
                    }};
  train::Model gen{"g", [](train::ModelInputs& in) {
                     Expr x = maker(in["z"]);
                     Expr s = critic(x);
                     return train::ModelOutputs{mean_all((s - 1.f) * (s - 1.f)), {{"x", x}}};
                   }};
  Gan() { gen.share_params(disc); }
};

Tensor randn(std::mt19937_64& rng, std::int64_t rows, std::int64_t cols, float shift = 0) {
  std::normal_distribution<float> n(shift, 1.f);
  std::vector<float> v(std::size_t(rows * cols));
  for (float& x : v) x = n(rng);
  return Tensor::f32({rows, cols}, v);
}

// Runs steps [start, until) of a session in `dir` (resuming when start > 0), saving at 10.
train::FitResult run(Gan& gan, const std::string& dir, std::int64_t until, bool resume) {
  train::SessionOptions so{.out_dir = dir, .steps = 20, .seed = 3, .resume = resume, .quiet = true};
  train::TrainOptions d, g;
  d.warmup = g.warmup = 2;
  g.groups = "disc.*:frozen";
  d.optimizer = "sgd";  // two kinds of optimizer state in one file
  train::Session s(so, {}, nullptr);
  s.add("disc", gan.disc, d);
  s.add("gen", gan.gen, g);
  std::mt19937_64 probe(0);
  const std::int64_t start = s.start({{"disc", {{"real", randn(probe, 4, 2)}, {"fake", randn(probe, 4, 2)}}},
                                      {"gen", {{"z", randn(probe, 4, 3)}}}});
  std::int64_t t = start;
  for (; t < until; ++t) {
    const Tensor fake = gan.gen.evaluate({{"z", randn(s.rng(), 4, 3)}}).at("x");
    s.step("disc", t, {{"real", randn(s.rng(), 4, 2, 2.f)}, {"fake", fake}});
    s.step("gen", t, {{"z", randn(s.rng(), 4, 3)}});
    if (t + 1 == 10) s.save(10);
  }
  return t == 20 ? s.finish(20) : train::FitResult{};
}

}  // namespace

TEST_CASE("Session: two models, two optimizers, one checkpoint, resumed bit for bit") {
  TempDir dir;
  Gan straight;
  const train::FitResult r = run(straight, dir.file("straight"), 20, false);
  CHECK(r.steps == 20);
  Gan first;
  run(first, dir.file("resumed"), 10, false);  // stops after the save at step 10
  Gan second;
  const train::FitResult r2 = run(second, dir.file("resumed"), 20, true);
  CHECK(r2.steps == 10);
  for (auto& [name, t] : straight.disc.params().all()) {
    INFO(name);
    CHECK(second.disc.params().at(name).to_vector() == t.to_vector());
  }
  const train::Checkpoint a = train::load_checkpoint(dir.file("straight/checkpoint.safetensors"));
  const train::Checkpoint b = train::load_checkpoint(dir.file("resumed/checkpoint.safetensors"));
  CHECK(a.params.size() == 8);  // disc's 4 and gen's 4, once
  CHECK(a.optim_state.count("gen/adam_m.gen.fc1.weight") == 1);
  CHECK(a.optim_state.count("gen/adam_m.disc.fc1.weight") == 0);  // frozen for gen
  CHECK(a.optim_state.count("disc/momentum.disc.out.bias") == 1);
  for (auto& [k, t] : a.optim_state) CHECK(b.optim_state.at(k).to_vector() == t.to_vector());
  CHECK(a.rng_state == b.rng_state);
  CHECK(contains(read_all(dir.file("resumed/loss.csv")), "gen.loss,20,"));
  CHECK(contains(read_all(dir.file("resumed/loss.csv")), "disc.loss,1,"));  // the curves continue
}

TEST_CASE("Session: the parts' mistakes are one-line errors") {
  TempDir dir;
  Gan gan;
  train::Session s({.out_dir = dir.file("s"), .steps = 5, .quiet = true}, {}, nullptr);
  s.add("disc", gan.disc, {});
  const auto error_of = [](auto&& f) { return gg::test::error_of<gg::train::InputError>(f); };
  CHECK(contains(error_of([&] { s.add("disc", gan.gen, {}); }), "part 'disc' is added twice"));
  train::TrainOptions bad;
  bad.optimizer = "adam";
  CHECK(contains(error_of([&] { s.add("gen", gan.gen, bad); }), "'adam'"));
  CHECK(contains(error_of([&] { s.step("disc", 0, {}); }), "step() before start()"));
  CHECK(contains(error_of([&] { s.start({}); }), "no example batch for part 'disc'"));
  // Two models with a parameter of one name in stores of their own.
  Gan other;
  train::Model lone("lone", [](train::ModelInputs& in) { return train::ModelOutputs{mean_all(critic(in["x"]))}; });
  train::Session t({.out_dir = dir.file("t"), .steps = 5, .quiet = true}, {}, nullptr);
  t.add("a", other.disc, {});
  t.add("b", lone, {});
  std::mt19937_64 rng(1);
  CHECK(contains(error_of([&] {
                   t.start({{"a", {{"real", randn(rng, 2, 2)}, {"fake", randn(rng, 2, 2)}}}, {"b", {{"x", randn(rng, 2, 2)}}}});
                 }),
                 "in stores of their own"));
}
