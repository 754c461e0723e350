// Tests for train/replay.cpp on the reference model: the replay loop agrees with PyTorch on a golden case (the
// full agreement suite runs the command itself, in tests/cli), and bad options are refused
// naming their flag.
#include <doctest/doctest.h>

#include <cmath>

#include "io/safetensors.h"
#include "tests/test_util.h"
#include "models/gpt.h"
#include "train/checkpoint.h"
#include "train/replay.h"

using namespace gg;
using gg::test::golden;

TEST_CASE("replay of the golden SGD-with-momentum case matches PyTorch's losses and norms") {
  models::GptConfig c = models::load_gpt_config(golden("ref_basic.config.json"));
  train::Model m = models::gpt_model(c);
  train::load_params(m.params(), train::read_tensors(golden("ref_basic.weights.safetensors")), models::gpt_params(c),
                     "ref_basic");
  std::vector<train::Batch> b =
      models::read_gpt_batches(io::read_safetensors(golden("ref_basic.batches.safetensors")), c, true);
  train::ReplayOptions o;
  o.optimizer = "sgd";
  o.lr = 0.1;
  o.momentum = 0.9;
  train::ReplayResult r = train::replay(m, b, o);
  io::File ref = io::read_safetensors(golden("ref_basic.replay_sgd.safetensors"));
  const std::vector<float> losses = ref.get_f32("losses"), norms = ref.get_f32("grad_norms");
  REQUIRE(r.losses.size() == losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) {
    CHECK(std::abs(r.losses[i] - losses[i]) <= 1e-3 * std::abs(losses[i]));
    CHECK(std::abs(r.grad_norms[i] - norms[i]) <= 1e-3 * std::abs(norms[i]));
  }
  const std::vector<float> w = ref.get_f32("blocks.0.mlp.fc1.weight");
  const float* got = m.params().at("blocks.0.mlp.fc1.weight").f();
  double max_err = 0, max_ref = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    max_err = std::max(max_err, std::abs(double(got[i]) - w[i]));
    max_ref = std::max(max_ref, std::abs(double(w[i])));
  }
  CHECK(max_err <= 2e-3 * std::max(max_ref, 1e-2));
}

TEST_CASE("replay options are validated, naming the flag") {
  auto message = [](train::ReplayOptions o) -> std::string {
    try {
      o.validate();
    } catch (const train::InputError& e) {
      return e.what();
    }
    return "";
  };
  train::ReplayOptions ok;
  ok.lr = 0.1;
  CHECK(message(ok).empty());
  train::ReplayOptions o = ok;
  o.optimizer = "adam";
  CHECK(message(o).find("--optimizer") == 0);
  o = ok;
  o.lr = NAN;
  CHECK(message(o).find("--lr") == 0);
  o = ok;
  o.beta2 = 1.0;
  CHECK(message(o).find("--betas") == 0);
  o = ok;
  o.momentum = -0.1;
  CHECK(message(o).find("--momentum") == 0);
  o = ok;
  o.clip = -1;
  CHECK(message(o).find("--clip") == 0);
  o = ok;
  o.weight_decay = INFINITY;
  CHECK(message(o).find("--weight-decay") == 0);
}
