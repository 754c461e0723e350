// The checking and debugging tools on the reference GPT (ref_basic: 2 layers, 4 heads,
// width 16): every gradient against f64 central differences, the attention key bias found
// structurally zero, a Hessian-vector product against differences of the f64 gradient, and
// anomaly mode tracing a NaN planted in one weight.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autodiff/grad.h"
#include "autodiff/grad_stats.h"
#include "autodiff/gradcheck.h"
#include "autodiff/hvp.h"
#include "models/gpt.h"
#include "ops/ir/eval_f64.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"

using namespace gg;
using gg::test::golden;

namespace {
struct Ref {
  models::GptConfig c = models::load_gpt_config(golden("ref_basic.config.json"));
  Graph g;
  models::Gpt m;
  ParamStore params;
  std::map<std::string, Tensor> batch;
  std::vector<NodeId> ps;
  Ref() {
    batch = models::read_gpt_batches(io::read_safetensors(golden("ref_basic.batch.safetensors")), c, false)[0];
    const Shape& bt = batch.at("tokens").shape();
    m = models::build_gpt(g, c, bt[0], bt[1]);
    train::load_params(params, train::read_tensors(golden("ref_basic.weights.safetensors")), models::gpt_params(c),
                       "ref_basic");
    for (const dsl::Expr& p : m.params) ps.push_back(p.id);
  }
};
}  // namespace

TEST_CASE("gradcheck_params: every parameter of the reference GPT agrees with f64 central differences") {
  Ref r;
  ParamCheckOptions o;
  o.max_elements = 6;
  std::vector<ParamCheck> res = gradcheck_params(r.g, r.m.loss.id, r.ps, r.params, r.batch, o);
  CHECK(res.size() == r.ps.size());
  for (const ParamCheck& p : res) {
    INFO(p.name << ": rel " << p.worst_rel << " at " << p.worst_index << ": " << p.analytic << " vs " << p.numeric);
    CHECK(p.ok);
    CHECK(p.checked >= 6);
    CHECK(p.worst_rel_f64 < 1e-5);  // limited by the differences themselves
  }
}

TEST_CASE("structurally_zero_grads: the reference GPT's attention key biases, and nothing else") {
  Ref r;
  std::vector<ZeroGrad> z = structurally_zero_grads(r.g, r.m.loss.id, r.ps);
  REQUIRE(z.size() == 2);
  CHECK(z[0].name == "blocks.0.attn.key.bias");
  CHECK(z[1].name == "blocks.1.attn.key.bias");
  for (const ZeroGrad& zg : z) CHECK(zg.reason.find("shift invariance") != std::string::npos);
  // Without biases there is none; with every target of a parameter cut off by argmax, it is.
  models::GptConfig nb = r.c;
  nb.bias = false;
  Graph g;
  models::Gpt m = models::build_gpt(g, nb, 2, 4);
  std::vector<NodeId> ps;
  for (const dsl::Expr& p : m.params) ps.push_back(p.id);
  CHECK(structurally_zero_grads(g, m.loss.id, ps).empty());
}

TEST_CASE("hvp on the reference GPT agrees with central differences of the f64 gradient") {
  Ref r;
  std::vector<NodeId> vs;
  std::map<std::string, Tensor> feeds = r.batch;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const dsl::Expr& p : r.m.params) {
    vs.push_back(op::input(r.g, "v." + p.name(), p.shape()));
    Tensor v(p.shape());
    for (float& x : v.fspan()) x = normal(rng);
    feeds["v." + p.name()] = v;
  }
  std::vector<NodeId> hv = hvp(r.g, r.m.loss.id, r.ps, vs);
  std::vector<NodeId> gs = grad(r.g, r.m.loss.id, r.ps);
  Executor ex(r.g, hv, r.params);
  for (auto& [name, t] : feeds)
    if (ex.has_input(name)) ex.set_input(name, t);
  ex.run();
  const double eps = 1e-4;
  F64Leaves plus = f64_leaves(r.params, feeds), minus = plus;
  for (const dsl::Expr& p : r.m.params)
    for (std::size_t i = 0; i < plus.at(p.name()).v.size(); ++i) {
      plus.at(p.name()).v[i] += eps * plus.at("v." + p.name()).v[i];
      minus.at(p.name()).v[i] -= eps * minus.at("v." + p.name()).v[i];
    }
  std::vector<F64Value> gp = eval_f64(r.g, gs, plus), gm = eval_f64(r.g, gs, minus);
  double diff = 0, norm = 0;
  for (std::size_t k = 0; k < hv.size(); ++k) {
    Tensor h = ex.get(hv[k]);
    for (std::int64_t i = 0; i < h.numel(); ++i) {
      const double fd = (gp[k].v[std::size_t(i)] - gm[k].v[std::size_t(i)]) / (2 * eps);
      diff += (fd - h.f()[i]) * (fd - h.f()[i]);
      norm += fd * fd;
    }
  }
  INFO("|H v - fd| = " << std::sqrt(diff) << ", |fd| = " << std::sqrt(norm));
  CHECK(std::sqrt(norm) > 1.0);
  CHECK(std::sqrt(diff) < 1e-3 * std::sqrt(norm));
}

TEST_CASE("anomaly mode on the reference GPT: a NaN planted in one weight is traced to the node that reads it") {
  Ref r;
  std::vector<NodeId> gs = grad(r.g, r.m.loss.id, r.ps);
  std::vector<NodeId> outs = gs;
  outs.push_back(r.m.loss.id);
  r.params.at("blocks.1.attn.value.weight").f()[5] = std::nanf("");
  Executor ex(r.g, outs, r.params);
  for (auto& [name, t] : r.batch) ex.set_input(name, t);
  ex.set_detect_anomaly(true);
  std::string msg;
  try {
    ex.run();
  } catch (const GraphError& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.rfind("matmul at gpt.cpp:", 0) == 0);
  CHECK(msg.find("('blocks.1.attn.value'): anomaly") != std::string::npos);
  CHECK(msg.find("forward node") != std::string::npos);
  CHECK(msg.find("param f32(16, 16) 'blocks.1.attn.value.weight' at gpt.cpp:") != std::string::npos);
  CHECK(msg.find(", 1 NaN, 0 Inf") != std::string::npos);
}
