// Tests for train/model: a model is the user's build function; plans per batch shape are
// built once and cached; the parameter table comes from declaring the model; mistakes in
// the build function or the batch are one-line InputErrors; load_params lists every
// mismatch, counted past the first few.
#include "train/model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "dsl/nn.h"
#include "tests/test_util.h"

namespace {

using namespace gg;
using namespace gg::dsl;
using gg::test::contains;
using train::InputError;

// y = fc(x): a linear model with a loss when the batch has targets.
train::Model linear_model() {
  return train::Model("linear", [](train::ModelInputs& in) {
    Expr pred = linear(in["x"], 2, "fc");                                  // x: (B, 3) -> pred: (B, 2)
    train::ModelOutputs o{{}, {{"pred", pred}}};
    if (in.has("y")) o.loss = mean_all((pred - in["y"]) * (pred - in["y"]));
    return o;
  });
}

train::Batch batch(std::int64_t B, bool with_y = true) {
  std::vector<float> x(std::size_t(B * 3)), y(std::size_t(B * 2));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) * 0.25f - 0.5f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = float(i % 3) - 1.f;
  train::Batch b{{"x", Tensor::f32({B, 3}, x)}};
  if (with_y) b.emplace("y", Tensor::f32({B, 2}, y));
  return b;
}

const auto error_of = [](auto&& f) { return gg::test::error_of<gg::train::InputError>(f); };

}  // namespace

TEST_CASE("Model: declared by a build function; parameters in declaration order; plans per batch shape") {
  train::Model m = linear_model();
  const auto& table = m.declare(batch(4));
  REQUIRE(table.size() == 2);
  CHECK(table[0].name == "fc.weight");
  CHECK(table[0].shape == Shape{2, 3});
  CHECK(table[1].name == "fc.bias");
  m.init_params(7);
  CHECK(m.params().at("fc.weight").shape() == Shape{2, 3});

  const double loss4 = m.forward_backward(batch(4));
  CHECK(std::isfinite(loss4));
  std::vector<ParamGrad> g = m.grads();
  REQUIRE(g.size() == 2);
  CHECK(g[0].name == "fc.weight");
  CHECK(g[0].param == &m.params().at("fc.weight"));
  CHECK(m.train_output("pred").numel() == 8);
  // The evaluation pass at the same shape gives the same loss (no dropout here).
  CHECK(m.loss(batch(4)) == doctest::Approx(loss4).epsilon(1e-6));
  // Another batch shape builds another plan over the same parameters.
  std::map<std::string, Tensor> out = m.evaluate(batch(9));
  CHECK(out.at("pred").shape() == Shape{9, 2});
  CHECK(out.count("loss") == 1);
  // Inference batches without targets: no loss, the outputs still come back.
  std::map<std::string, Tensor> inf = m.evaluate(batch(5, /*with_y=*/false));
  CHECK(inf.count("loss") == 0);
  CHECK(inf.at("pred").shape() == Shape{5, 2});
  CHECK(std::isnan(m.loss(batch(5, false))));
  // Training needs a loss.
  CHECK(contains(error_of([&] { m.forward_backward(batch(5, false)); }), "no loss to train"));
}

TEST_CASE("Model: mistakes in the build function or the batch are one-line errors") {
  SUBCASE("an input the batch does not have, with the names it has") {
    train::Model m("m", [](train::ModelInputs& in) { return train::ModelOutputs{sum_all(in["tokens"])}; });
    const std::string e = error_of([&] { m.loss(train::Batch{{"token", Tensor({2}, DType::f32)}}); });
    CHECK(contains(e, "reads input 'tokens'"));
    CHECK(contains(e, "it has: token"));
  }
  SUBCASE("a batch tensor the model never reads") {
    train::Model m("m", [](train::ModelInputs& in) { return train::ModelOutputs{sum_all(in["x"])}; });
    CHECK(contains(error_of([&] { m.loss({{"x", Tensor({2})}, {"labels", Tensor({2})}}); }),
                   "the batch's tensor 'labels' is not read by the model"));
  }
  SUBCASE("a loss that is not a scalar") {
    train::Model m("m", [](train::ModelInputs& in) { return train::ModelOutputs{in["x"] * 2.f}; });
    const std::string e = error_of([&] { m.loss({{"x", Tensor({2})}}); });
    INFO(e);
    CHECK(contains(e, "the loss must be an f32 scalar, got f32(2,)"));
  }
  SUBCASE("an output built in another graph") {
    Graph other;
    Expr stray = scalar(other, 1.f);
    train::Model m("m", [&](train::ModelInputs& in) { return train::ModelOutputs{sum_all(in["x"]), {{"s", stray}}}; });
    CHECK(contains(error_of([&] { m.loss({{"x", Tensor({2})}}); }), "output 's' was not built in the graph"));
  }
  SUBCASE("two outputs of one name") {
    train::Model m("m", [](train::ModelInputs& in) {
      Expr s = sum_all(in["x"]);
      return train::ModelOutputs{s, {{"a", s}, {"a", s}}};
    });
    CHECK(contains(error_of([&] { m.loss({{"x", Tensor({2})}}); }), "output name 'a' is used twice"));
  }
  SUBCASE("a batch shape that declares other parameters") {
    train::Model m("m", [](train::ModelInputs& in) { return train::ModelOutputs{sum_all(linear(in["x"], 2, "fc"))}; });
    m.declare({{"x", Tensor({1, 3})}});
    CHECK(contains(error_of([&] { m.loss({{"x", Tensor({1, 4})}}); }), "parameter 'fc.weight' would be (2, 4) instead of (2, 3)"));
  }
  SUBCASE("an empty batch, grads before any training pass") {
    train::Model m = linear_model();
    CHECK(contains(error_of([&] { m.loss({}); }), "the batch has no tensors"));
    CHECK(contains(error_of([&] { m.grads(); }), "before any forward_backward"));
    CHECK(contains(error_of([&] { m.param_table(); }), "declare it with a batch"));
  }
}

TEST_CASE("load_params names the missing, unexpected and mis-shaped tensors, counted past a few") {
  const std::vector<train::ParamInfo> table = {{"a", {2}}, {"b", {3, 4}}, {"c", {1}}};
  std::map<std::string, Tensor> t{{"a", Tensor({2})}, {"b", Tensor({4, 3})}, {"z", Tensor({1})}};
  for (int i = 0; i < 20; ++i) t.emplace("extra." + std::to_string(i), Tensor({1}));
  ParamStore ps;
  const std::string e = error_of([&] { train::load_params(ps, t, table, "w.safetensors"); });
  CHECK(contains(e, "w.safetensors: the tensors do not match the model's parameters"));
  CHECK(contains(e, "missing [c]"));
  CHECK(contains(e, "mis-shaped [b is f32(4, 3) but the model needs f32(3, 4)]"));
  CHECK(contains(e, "and 18 more]"));  // 21 unexpected: three named, the rest counted
  CHECK(e.size() <= 280);
  CHECK(ps.all().empty());  // nothing loaded from a file that does not fit
  t.erase("z");
  for (int i = 0; i < 20; ++i) t.erase("extra." + std::to_string(i));
  t["b"] = Tensor({3, 4});
  t["c"] = Tensor({1});
  train::load_params(ps, t, table, "w.safetensors");
  CHECK(ps.all().size() == 3);
}

TEST_CASE("Model: plan options pick the plan, cached per options, over the same parameters") {
  // fc2(gelu(fc1(x))): the GELU runs as fc1's epilogue and fused by default.
  train::Model m("mlp", [](train::ModelInputs& in) {
    Expr h = gelu(linear(in["x"], 16, "fc1"));
    Expr pred = linear(h, 2, "fc2");
    return train::ModelOutputs{mean_all((pred - in["y"]) * (pred - in["y"])), {}};
  });
  m.declare(batch(8));
  m.init_params(3);
  const ExecutorOptions defaults = m.plan_options();
  const double loss = m.forward_backward(batch(8));
  Executor* const first = &m.last_train_plan();
  std::vector<std::vector<float>> grads;
  for (const ParamGrad& g : m.grads()) grads.emplace_back(g.grad.begin(), g.grad.end());

  ExecutorOptions off = defaults;
  REQUIRE(set_executor_switch(off, "epilogue", false));
  REQUIRE(set_executor_switch(off, "fuse", false));
  CHECK(switches_off(off) == "fuse,epilogue");
  m.set_plan_options(off);
  CHECK(m.forward_backward(batch(8)) == loss);  // these passes keep every bit
  CHECK(&m.last_train_plan() != first);
  std::size_t i = 0;
  for (const ParamGrad& g : m.grads()) CHECK(std::vector<float>(g.grad.begin(), g.grad.end()) == grads[i++]);

  m.set_plan_options(defaults);
  CHECK(m.forward_backward(batch(8)) == loss);
  CHECK(&m.last_train_plan() == first);  // cached, not planned again
}
