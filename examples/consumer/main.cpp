// A program outside the source tree that uses an installed gradgraph (CTest's
// install_consumer builds it against `cmake --install` output). A linear layer with known
// weights, an MSE loss and its gradient, run by an Executor on two threads, then one SGD
// step; exits 1 unless every number matches the hand computation in the comments.
#include <gradgraph/gradgraph.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace gg;
using namespace gg::dsl;

int main() {
  set_num_threads(2);  // thread control is public API (ops/cpu/threads.h)
  Graph g;
  Expr x = input(g, "x", {2, 3});                      // x: (2, 3)
  Expr y = input(g, "y", {2, 1});                      // y: (2, 1)
  Expr pred = linear(x, 1, "fc");                      // pred: (2, 1) = x @ fc.weight^T + fc.bias
  Expr loss = mean_all((pred - y) * (pred - y));       // MSE: scalar
  Expr w = param(g, "fc.weight", {1, 3});              // the same node linear() declared
  Expr b = param(g, "fc.bias", {1});
  std::vector<Expr> grads = grad(loss, {w, b});

  ParamStore store;
  store.set("fc.weight", Tensor::f32({1, 3}, std::vector<float>{1, 2, 3}));
  store.set("fc.bias", Tensor::f32({1}, std::vector<float>{0.5f}));
  Executor ex(g, {loss.id, grads[0].id, grads[1].id}, store);
  ex.set_input("x", std::vector<float>{1, 1, 1, 0, 1, 2});
  ex.set_input("y", std::vector<float>{6, 8});
  ex.run();

  // pred = (6.5, 8.5), residuals (0.5, 0.5): loss 0.25; dL/db = mean(2 r) = 1;
  // dL/dW = mean over rows of 2 r x = ((1,1,1) + (0,1,2)) / 2 = (0.5, 1, 1.5).
  std::vector<float> want = {0.25f, 0.5f, 1.0f, 1.5f, 1.0f};
  std::vector<float> got = {ex.scalar(loss.id)};
  for (int i = 0; i < 3; ++i) got.push_back(ex.value(grads[0].id).f()[i]);
  got.push_back(ex.value(grads[1].id).f()[0]);
  // One SGD step with lr 0.1 (train/optim.h): fc.weight - 0.1 dW = (0.95, 1.9, 2.85).
  std::vector<float> dw(got.begin() + 1, got.begin() + 4);
  std::vector<ParamGrad> pg = {{"fc.weight", &store.at("fc.weight"), dw}};
  Sgd().step(pg, 0.1);
  for (int i = 0; i < 3; ++i) got.push_back(store.at("fc.weight").f()[i]);
  want.insert(want.end(), {0.95f, 1.9f, 2.85f});
  bool ok = true;
  for (std::size_t i = 0; i < want.size(); ++i) ok = ok && std::fabs(got[i] - want[i]) < 1e-5f;
  // The installed package's data, found from wherever this program runs (CTest runs it in
  // its build directory, with no GRADGRAPH_DATA_DIR).
  const std::string digits = train::find_data_file("digits.csv");
  std::printf("data: %s\n", digits.c_str());
  ok = ok && digits.find("share/gradgraph/data/digits.csv") != std::string::npos;
  std::printf("loss %.4f, dW (%.4f, %.4f, %.4f), db %.4f, after SGD W (%.4f, %.4f, %.4f): %s\n", got[0], got[1],
              got[2], got[3], got[4], got[5], got[6], got[7], ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
