// The smallest training loop: a 2 -> 8 -> 1 tanh MLP learns XOR. Declare the model (a
// graph: nothing runs), ask for its gradients (more graph), plan both once, then run the
// plan and step the optimizer. Exits 1 unless the MSE ends below 0.01.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>

#include "autodiff/optim.h"
#include "dsl/nn.h"
#include "ops/executor.h"

using namespace gg;
using namespace gg::dsl;

int main(int argc, char** argv) {
  int steps = 500;
  CLI::App app{"XOR with a tiny MLP"};
  app.add_option("--steps", steps, "training steps");
  CLI11_PARSE(app, argc, argv);

  Graph g;
  Expr x = input(g, "x", {4, 2});                                    // x: (4, 2), the four input pairs
  Expr y = input(g, "y", {4, 1});                                    // y: (4, 1), their XOR
  Expr pred = linear(tanh(linear(x, 8, "fc1")), 1, "fc2");           // pred: (4, 1)
  Expr loss = mean_all((pred - y) * (pred - y));                     // MSE: scalar
  std::vector<Expr> ps = params(g);                                  // fc1.weight (8, 2), fc1.bias (8), fc2.*
  std::vector<Expr> grads = grad(loss, ps);                          // one gradient node per parameter

  ParamStore store;
  store.init_missing(g, /*seed=*/1);
  std::vector<NodeId> outputs = {loss.id, pred.id};
  for (Expr d : grads) outputs.push_back(d.id);
  Executor ex(g, outputs, store);                                    // the plan: order, arena, kernels
  ex.set_input("x", std::vector<float>{0, 0, 0, 1, 1, 0, 1, 1});
  ex.set_input("y", std::vector<float>{0, 1, 1, 0});

  AdamW opt;
  for (int step = 0; step < steps; ++step) {
    ex.run();
    std::vector<ParamGrad> pg;
    for (std::size_t i = 0; i < ps.size(); ++i)
      pg.push_back({ps[i].name(), &store.at(ps[i].name()), ex.value(grads[i].id).fspan()});
    opt.step(pg, /*lr=*/0.05);
  }

  ex.run();  // loss and predictions after the last update
  const float* p = ex.value(pred.id).f();
  for (int i = 0; i < 4; ++i) fmt::print("{} xor {} -> {} ({:+.3f})\n", i / 2, i % 2, std::lround(p[i]), p[i]);
  const bool learned = ex.scalar(loss.id) < 0.01f;
  fmt::print("loss after {} steps: {:.5f} ({})\n", steps, ex.scalar(loss.id), learned ? "learned" : "NOT learned");
  return learned ? 0 : 1;
}
