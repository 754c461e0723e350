// Two models, two optimizers, one run: a small GAN learns a ring of 8 Gaussians in 2-D, through
// the step-level Session (train/session.h) that fit() does not need. The discriminator D and
// the generator G are two Models over one parameter store: G's loss reads D's weights, which
// G's optimizer leaves alone (its parameter group "disc.*:frozen", so G's plan computes no
// gradient for them). Least-squares GAN losses. Every `--eval` steps it samples G and reports
// how many of the 8 modes it covers; one checkpoint holds both models, both AdamW states,
// the generators and the curves, and `--resume` continues the run bit for bit.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "dsl/nn.h"
#include "train/session.h"

using namespace gg;
using namespace gg::dsl;

namespace {
constexpr int kModes = 8;
constexpr float kRadius = 2.f, kStd = 0.05f;
constexpr std::int64_t kNoise = 4, kHidden = 64;

Expr discriminator(Expr x) {  // (B, 2) -> (B, 1) scores
  Scope s(*x.g, "disc");
  Expr h = relu(linear(x, kHidden, "fc1"));
  h = relu(linear(h, kHidden, "fc2"));
  return linear(h, 1, "out");
}

Expr generator(Expr z) {  // (B, kNoise) -> (B, 2) points
  Scope s(*z.g, "gen");
  Expr h = relu(linear(z, kHidden, "fc1"));
  h = relu(linear(h, kHidden, "fc2"));
  return linear(h, 2, "out");
}

Tensor real_points(std::mt19937_64& rng, std::int64_t B) {
  std::uniform_int_distribution<int> mode(0, kModes - 1);
  std::normal_distribution<float> noise(0.f, kStd);
  std::vector<float> v(std::size_t(2 * B));
  for (std::int64_t i = 0; i < B; ++i) {
    const double a = 2 * std::numbers::pi * mode(rng) / kModes;
    v[std::size_t(2 * i)] = kRadius * float(std::cos(a)) + noise(rng);
    v[std::size_t(2 * i + 1)] = kRadius * float(std::sin(a)) + noise(rng);
  }
  return Tensor::f32({B, 2}, v);
}

Tensor noise(std::mt19937_64& rng, std::int64_t B) {
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> v(std::size_t(kNoise * B));
  for (float& x : v) x = n(rng);
  return Tensor::f32({B, kNoise}, v);
}

// Modes with at least 2% of G's samples within 4 standard deviations of their centre, and
// the fraction of samples that are within 4 of any centre.
std::pair<int, double> modes_covered(train::Model& gen, std::int64_t samples) {
  std::mt19937_64 rng(12345);  // the same noise at every evaluation
  const Tensor x = gen.evaluate({{"z", noise(rng, samples)}}).at("x");
  std::vector<int> near(kModes, 0);
  std::int64_t good = 0;
  for (std::int64_t i = 0; i < samples; ++i)
    for (int k = 0; k < kModes; ++k) {
      const double a = 2 * std::numbers::pi * k / kModes;
      const double dx = x.f()[2 * i] - kRadius * std::cos(a), dy = x.f()[2 * i + 1] - kRadius * std::sin(a);
      if (std::hypot(dx, dy) < 4 * kStd) {
        ++near[std::size_t(k)];
        ++good;
      }
    }
  int covered = 0;
  for (int n : near) covered += n >= samples / 50;
  return {covered, double(good) / double(samples)};
}
}  // namespace

int main(int argc, char** argv) {
  train::SessionOptions so{.out_dir = "runs/gan_mixture", .steps = 3000, .seed = 1, .quiet = true};
  std::int64_t batch = 128, eval = 500, samples = 2000;
  int want_modes = 0;
  CLI::App app{"A GAN on a ring of 8 Gaussians, two models and two optimizers in one Session"};
  app.add_option("--steps", so.steps, "training steps (each: one D step, one G step)")->check(CLI::Range(1, 1000000));
  app.add_option("--batch", batch, "points per batch")->check(CLI::Range(1, 65536));
  app.add_option("--eval", eval, "steps between mode counts and checkpoints")->check(CLI::Range(1, 1000000));
  app.add_option("--out-dir", so.out_dir, "checkpoint and curves");
  app.add_flag("--resume", so.resume, "continue from the checkpoint in --out-dir");
  app.add_option("--expect-modes", want_modes, "exit 1 unless at least this many modes are covered at the end")
      ->check(CLI::Range(0, kModes));
  CLI11_PARSE(app, argc, argv);
  try {
    train::Model disc("gan_disc", [](train::ModelInputs& in) {
      Expr real = discriminator(in["real"]), fake = discriminator(in["fake"]);
      Expr loss = 0.5f * (mean_all((real - 1.f) * (real - 1.f)) + mean_all(fake * fake));
      return train::ModelOutputs{loss};
    });
    train::Model gen("gan_gen", [](train::ModelInputs& in) {
      Expr x = generator(in["z"]);
      Expr score = discriminator(x);
      return train::ModelOutputs{0.5f * mean_all((score - 1.f) * (score - 1.f)), {{"x", x}}};
    });
    gen.share_params(disc);  // one "disc.*": what D learns, G's loss reads

    train::TrainOptions d_opts, g_opts;
    for (train::TrainOptions* o : {&d_opts, &g_opts}) {
      o->lr = 1e-3, o->min_lr = 1e-4, o->warmup = 50, o->beta1 = 0.5, o->beta2 = 0.999, o->weight_decay = 0;
    }
    g_opts.groups = "disc.*:frozen";

    train::Session s(so, {.title = "GAN on 8 Gaussians"});
    s.add("disc", disc, d_opts);
    s.add("gen", gen, g_opts);
    std::mt19937_64 probe(0);
    const std::int64_t start = s.start({{"disc", {{"real", real_points(probe, batch)}, {"fake", real_points(probe, batch)}}},
                                        {"gen", {{"z", noise(probe, batch)}}}});
    for (std::int64_t t = start; t < so.steps; ++t) {
      const Tensor fake = gen.evaluate({{"z", noise(s.rng(), batch)}}).at("x");
      s.step("disc", t, {{"real", real_points(s.rng(), batch)}, {"fake", fake}});
      s.step("gen", t, {{"z", noise(s.rng(), batch)}});
      if ((t + 1) % eval == 0 && t + 1 < so.steps) {
        const auto [modes, good] = modes_covered(gen, samples);
        s.log("modes", t + 1, modes);
        s.log("near_a_mode", t + 1, good);
        fmt::print("step {:>5}: modes covered {}/{}, {:.1f}% of samples near a mode\n", t + 1, modes, kModes, 100 * good);
        s.save(t + 1);
      }
    }
    const auto [modes, good] = modes_covered(gen, samples);
    s.log("modes", so.steps, modes);
    s.log("near_a_mode", so.steps, good);
    s.finish(so.steps);
    fmt::print("modes covered {}/{} ({:.1f}% of {} samples within 4 std of a mode's centre)\n", modes, kModes, 100 * good,
               samples);
    return modes >= want_modes ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gan_mixture: {}\n", e.what());
    return 1;
  }
}
