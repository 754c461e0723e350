// Golden tests: the reference model's loss, logits and every parameter gradient against
// PyTorch float32 (tests/golden/ref_<case>.*, produced by tools/make_golden.py), with the
// spec's Agreement tolerances. No Python at test time. The replay (training-step) goldens
// are checked through the command-line program in tests/cli/test_replay_golden.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/gpt.h"
#include "train/checkpoint.h"

namespace {

using namespace gg;

std::string golden(const std::string& file) { return std::string(GG_SOURCE_DIR) + "/tests/golden/" + file; }

// max|a-b| and max|b| over two equally long arrays; a NaN anywhere counts as infinite error.
struct Diff {
  double max_err = 0, max_ref = 0;
};
Diff diff(const float* a, const std::vector<float>& b) {
  Diff d;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double e = std::abs(double(a[i]) - double(b[i]));
    d.max_err = std::isnan(e) ? INFINITY : std::max(d.max_err, e);
    d.max_ref = std::max(d.max_ref, std::abs(double(b[i])));
  }
  return d;
}

// Runs one grad case and returns the worst error as a fraction of its tolerance.
double check_grad_case(const std::string& name) {
  INFO("case ref_" << name);
  const std::string base = "ref_" + name;
  const models::GptConfig c = models::load_gpt_config(golden(base + ".config.json"));
  train::Model r = models::gpt_model(c);
  train::load_params(r.params(), train::read_tensors(golden(base + ".weights.safetensors")), models::gpt_params(c), base);
  const train::Batch b =
      models::read_gpt_batches(io::read_safetensors(golden(base + ".batch.safetensors")), c, false).at(0);
  const io::File ref = io::read_safetensors(golden(base + ".grad.safetensors"));
  const Shape& BT = b.at("tokens").shape();

  const double loss = r.forward_backward(b);
  double worst = 0;  // fraction of tolerance

  // loss: relative 1e-5
  const std::vector<float> ref_loss = ref.get_f32("loss");
  REQUIRE(ref_loss.size() == 1);
  const double loss_frac = std::abs(loss - double(ref_loss[0])) / (1e-5 * std::abs(double(ref_loss[0])));
  CHECK_MESSAGE(loss_frac <= 1.0, "loss " << loss << " vs torch " << ref_loss[0]);
  worst = std::max(worst, loss_frac);
  std::string worst_name = "loss";

  // logits (B, T, V) and every gradient: max|a-b| <= 1e-4 * max(max|b|, 1e-3)
  auto compare = [&](const std::string& what, const float* got, const Shape& got_shape, const std::string& ref_name) {
    const io::Entry* e = ref.find(ref_name);
    REQUIRE_MESSAGE(e != nullptr, "golden file has no '" << ref_name << "'");
    REQUIRE_MESSAGE(e->shape == got_shape, what << ": shape " << to_string(got_shape) << " vs torch " << to_string(e->shape));
    const Diff d = diff(got, e->to_f32());
    const double tol = 1e-4 * std::max(d.max_ref, 1e-3);
    const double frac = d.max_err / tol;
    CHECK_MESSAGE(frac <= 1.0, what << ": max|a-b| = " << d.max_err << " > tolerance " << tol);
    if (!(frac <= worst)) {
      worst = std::isnan(frac) ? INFINITY : frac;
      worst_name = what;
    }
  };
  const View lg = r.train_output("logits");
  CHECK(*lg.shape == Shape{BT[0], BT[1], c.vocab_size});
  compare("logits", lg.f(), *lg.shape, "logits");

  const std::vector<ParamGrad> grads = r.grads();
  const auto table = models::gpt_params(c);
  REQUIRE(grads.size() == table.size());
  std::size_t ref_grads = 0;
  for (auto& [n, e] : ref.tensors) ref_grads += n.rfind("grad.", 0) == 0;
  CHECK(ref_grads == grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    CHECK(grads[i].name == table[i].name);  // the spec's table order
    compare("grad." + grads[i].name, grads[i].grad.data(), grads[i].param->shape(), "grad." + grads[i].name);
  }
  MESSAGE("ref_" << name << ": loss " << loss << ", worst error " << worst << " of tolerance (" << worst_name << ")");
  return worst;
}

}  // namespace

TEST_CASE("golden: reference model loss, logits and gradients agree with PyTorch float32") {
  for (const char* name : {"basic", "odd", "headsize1", "sinus"}) {
    SUBCASE(name) { CHECK(check_grad_case(name) <= 1.0); }
  }
}

TEST_CASE("golden: the comparison detects a wrong gradient") {
  // The same check with one weight nudged must fail: guards against a vacuous comparison.
  const models::GptConfig c = models::load_gpt_config(golden("ref_basic.config.json"));
  train::Model r = models::gpt_model(c);
  train::load_params(r.params(), train::read_tensors(golden("ref_basic.weights.safetensors")), models::gpt_params(c),
                     "ref_basic");
  r.params().at("blocks.1.mlp.fc1.weight").f()[3] += 0.01f;
  const train::Batch b =
      models::read_gpt_batches(io::read_safetensors(golden("ref_basic.batch.safetensors")), c, false).at(0);
  const io::File ref = io::read_safetensors(golden("ref_basic.grad.safetensors"));
  r.forward_backward(b);
  bool any_out = false;
  for (const ParamGrad& pg : r.grads()) {
    const Diff d = diff(pg.grad.data(), ref.get_f32("grad." + pg.name));
    any_out = any_out || d.max_err > 1e-4 * std::max(d.max_ref, 1e-3);
  }
  CHECK(any_out);
}

// ---- bf16 products against PyTorch's CPU autocast (tools/make_golden_bf16.py) --------------
// The two round differently (autocast also returns each product's result in bf16 and adds
// biases in bf16; gradgraph keeps results in f32), so they agree within bf16's rounding of
// the f32 values, not bit for bit. Per gradient tensor, with d(x, y) = |x - y|_2 / max(|f32|_2,
// 1e-2 * the largest |f32|_2 of any tensor) (a floor for the structurally zero key biases):
//   d(gradgraph bf16, autocast) <= 0.06: each is off f32 by 2^-7 of the sums' terms per
//     product, a few products deep (measured: at most 0.032);
//   d(gradgraph bf16, f32) <= 2 d(autocast, f32) + 0.01: not farther from f32 than
//     PyTorch's own bf16 (measured: at most 0.025, autocast's at most 0.029).
// The loss within 2e-3 of autocast's, relative (measured 3.4e-4).
TEST_CASE("golden: bf16 products agree with PyTorch's autocast within bf16's rounding") {
  const models::GptConfig c = models::load_gpt_config(golden("ref_basic.config.json"));
  train::Model r = models::gpt_model(c);
  r.set_bf16_products(true);
  train::load_params(r.params(), train::read_tensors(golden("ref_basic.weights.safetensors")), models::gpt_params(c),
                     "ref_basic");
  const train::Batch b =
      models::read_gpt_batches(io::read_safetensors(golden("ref_basic.batch.safetensors")), c, false).at(0);
  const io::File ref = io::read_safetensors(golden("ref_basic.grad_bf16.safetensors"));
  const double loss = r.forward_backward(b), torch_loss = ref.get_f32("loss")[0];
  CHECK(std::abs(loss - torch_loss) <= 2e-3 * std::abs(torch_loss));
  CHECK(loss != doctest::Approx(ref.get_f32("f32.loss")[0]).epsilon(1e-6));  // the products really were bf16
  auto norm = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
  };
  auto minus = [](const float* a, const std::vector<float>& b) {
    std::vector<double> d(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) d[i] = double(a[i]) - double(b[i]);
    return d;
  };
  double largest = 0;
  for (const ParamGrad& pg : r.grads()) {
    const std::vector<float> f = ref.get_f32("f32.grad." + pg.name);
    largest = std::max(largest, norm(std::vector<double>(f.begin(), f.end())));
  }
  int checked = 0;
  for (const ParamGrad& pg : r.grads()) {
    INFO(pg.name);
    const std::vector<float> torch = ref.get_f32("grad." + pg.name), f32 = ref.get_f32("f32.grad." + pg.name);
    REQUIRE(torch.size() == pg.grad.size());
    const double scale = std::max(norm(std::vector<double>(f32.begin(), f32.end())), 1e-2 * largest);
    const double ours_torch = norm(minus(pg.grad.data(), torch)) / scale;
    const double ours_f32 = norm(minus(pg.grad.data(), f32)) / scale;
    const double torch_f32 = norm(minus(torch.data(), f32)) / scale;
    CHECK(ours_torch <= 0.06);
    CHECK(ours_f32 <= 2 * torch_f32 + 0.01);
    ++checked;
  }
  CHECK(checked == 36);
}
