// The smallest training program: a 2 -> 8 -> 1 tanh MLP learns XOR. Declare the model as a
// function of its inputs (a graph: nothing runs), give the trainer a source of batches, and
// fit() does the rest: gradients (more graph), plans, AdamW, the loss curve, checkpoints.
// Exits 1 unless the MSE ends below 0.01.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>

#include "dsl/nn.h"
#include "train/trainer.h"

using namespace gg;
using namespace gg::dsl;

int main(int argc, char** argv) {
  train::TrainOptions o;
  o.steps = 500, o.lr = 0.05, o.warmup = 0, o.min_lr = 0.05, o.weight_decay = 0, o.quiet = true;
  o.out_dir = "runs/xor_mlp";
  CLI::App app{"XOR with a tiny MLP"};
  app.add_option("--steps", o.steps, "training steps");
  CLI11_PARSE(app, argc, argv);

  train::Model model("xor_mlp", [](train::ModelInputs& in) {
    Expr pred = linear(tanh(linear(in["x"], 8, "fc1")), 1, "fc2");      // x: (4, 2) -> pred: (4, 1)
    Expr err = pred - in["y"];                                          // y: (4, 1), the XOR of each pair
    return train::ModelOutputs{mean_all(err * err), {{"pred", pred}}};  // MSE, and the predictions
  });
  train::Batch xor_table{{"x", Tensor::f32({4, 2}, std::vector<float>{0, 0, 0, 1, 1, 0, 1, 1})},
                         {"y", Tensor::f32({4, 1}, std::vector<float>{0, 1, 1, 0})}};
  train::DataSource data{.train = [&](std::mt19937_64&) { return xor_table; },
                         .val = [&](std::int64_t) { return xor_table; }};
  train::fit(model, data, o);

  auto out = model.evaluate(xor_table);  // loss and predictions after the last update
  const float* p = out["pred"].f();
  for (int i = 0; i < 4; ++i) fmt::print("{} xor {} -> {} ({:+.3f})\n", i / 2, i % 2, std::lround(p[i]), p[i]);
  const bool learned = out["loss"].f()[0] < 0.01f;
  fmt::print("loss after {} steps: {:.5f} ({})\n", o.steps, out["loss"].f()[0], learned ? "learned" : "NOT learned");
  return learned ? 0 : 1;
}
