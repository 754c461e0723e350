// A user's own fit() program, unchanged for data parallel: started alone or under
// `mpirun -np N`, it trains the same MLP on the same global batches. tests/dist/run.sh runs
// it both ways and compares the checkpoints it writes (`dist_fit compare`).
//
//   dist_fit train <out_dir> <steps> [--batch B] [--accum K] [--resume] [--seed S]
//                  [--perturb-at S] [--eval-interval E]
//   dist_fit compare <a.safetensors> <b.safetensors> <relative tolerance>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "dsl/nn.h"
#include "tests/regression_data.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/trainer.h"

using namespace gg;
using namespace gg::dsl;

namespace {

// y = sin(x0) + x1 / 2 from 2 -> 16 -> 16 -> 1 tanh layers (a mean over rows as the loss).
train::Model mlp() {
  return train::Model("mlp", [](train::ModelInputs& in) {
    Expr h = tanh(linear(tanh(linear(in["x"], 16, "fc1")), 16, "fc2"));
    Expr err = linear(h, 1, "out") - in["y"];
    return train::ModelOutputs{mean_all(err * err), {}};
  });
}

int compare(const char* a, const char* b, double tol) {
  const train::Checkpoint x = train::load_checkpoint(a), y = train::load_checkpoint(b);
  // Per parameter tensor: its largest difference over its largest magnitude (an entry that
  // one step moved close to zero would make an entry's own relative difference meaningless).
  double worst = 0, worst_entry = 0;
  std::string where;
  for (auto& [name, t] : x.params) {
    auto it = y.params.find(name);
    if (it == y.params.end() || it->second.numel() != t.numel()) {
      fmt::print(stderr, "compare: {} has no parameter '{}' of {} values\n", b, name, t.numel());
      return 1;
    }
    double diff = 0, scale = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const double p = t.f()[i], q = it->second.f()[i];
      diff = std::max(diff, std::abs(p - q));
      scale = std::max(scale, std::abs(p));
      worst_entry = std::max(worst_entry, std::abs(p - q) / std::max(std::abs(p), 1e-30));
    }
    const double rel = diff / std::max(scale, 1e-30);
    if (rel > worst || where.empty()) worst = rel, where = name;
  }
  fmt::print("compare: largest relative difference of a parameter {:.3g} ({}; of an entry {:.3g}), tolerance {:.3g}\n",
             worst, where, worst_entry, tol);
  return worst <= tol ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 5 && std::strcmp(argv[1], "compare") == 0) return compare(argv[2], argv[3], std::atof(argv[4]));
    if (argc < 4 || std::strcmp(argv[1], "train") != 0) {
      fmt::print(stderr, "usage: dist_fit train <out_dir> <steps> [options] | compare <a> <b> <tol>\n");
      return 2;
    }
    train::TrainOptions o;
    o.out_dir = argv[2];
    o.steps = std::atoll(argv[3]);
    o.warmup = 0;
    o.schedule = "constant";  // a run resumed from step k continues as the uninterrupted one
    o.lr = 1e-2;
    o.eval_interval = 2;
    o.eval_iters = 3;
    o.final_eval_iters = 3;
    o.quiet = true;
    std::int64_t B = 16, perturb_at = -1;
    for (int i = 4; i < argc; ++i) {
      const std::string a = argv[i];
      const char* v = i + 1 < argc ? argv[i + 1] : "0";
      if (a == "--batch") B = std::atoll(v), ++i;
      else if (a == "--accum") o.accum = std::atoll(v), ++i;
      else if (a == "--seed") o.seed = std::atoll(v), ++i;
      else if (a == "--eval-interval") o.eval_interval = std::atoll(v), ++i;
      else if (a == "--perturb-at") perturb_at = std::atoll(v), ++i;
      else if (a == "--resume") o.resume = true;
      else if (a == "--sgd") o.optimizer = "sgd";
      else throw train::InputError(fmt::format("unknown argument '{}'", a));
    }
    train::Model m = mlp();
    train::DataSource d;
    d.train = [B](std::mt19937_64& rng) { return gg::test::regression_batch(rng, B); };
    d.val = [](std::int64_t i) {
      std::mt19937_64 rng(1000 + std::uint64_t(i));
      return gg::test::regression_batch(rng, 8);
    };
    // A test of the ranks' agreement check: rank 1 nudges one weight at an evaluation, so
    // the parameters no longer match at the next one.
    if (perturb_at > 0)
      o.on_eval = [&m, perturb_at](const train::Evaluation& e) {
        if (e.step == perturb_at && train::World::get().rank() == 1) m.params().at("fc1.weight").f()[0] += 1e-3f;
        return train::EvalAction{};
      };
    const train::FitResult r = train::fit(m, d, o, {}, stdout);
    if (train::World::get().rank() == 0) fmt::print("final val loss {:.9g}\n", r.final_val_loss);
    return 0;
  } catch (const std::exception& e) {
    const train::World* w = train::World::started();
    if (!w || w->reports_errors()) fmt::print(stderr, "dist_fit: error: {}\n", e.what());
    return 1;
  }
}
