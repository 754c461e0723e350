// Golden tests for dsl/transformer.cpp against PyTorch computed in float64
// (tests/golden/cross_attention.safetensors and decoder_block.safetensors, written by
// tools/make_golden_transformer.py), and for dsl/nn.h's rms_norm, rotary_embedding and
// grouped_query_attention (rmsnorm_rope_gqa.safetensors, tools/make_golden_rope_gqa.py);
// conventions in tests/golden/README.md. Outputs, per-head attention weights and the
// gradients of sum(out * cotangent) must agree to 1e-5.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dsl/transformer.h"
#include "io/safetensors.h"
#include "ops/runtime/executor.h"
#include "tests/test_util.h"

namespace {

using namespace gg;
using namespace gg::dsl;

constexpr double kTolerance = 1e-5;

double max_abs_diff(const Tensor& got, const std::vector<float>& want) {
  REQUIRE(got.numel() == std::int64_t(want.size()));
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(double(got.f()[i]) - double(want[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

Shape shape_of(const io::File& f, const std::string& name) {
  const auto& s = f.at(name).shape;
  return Shape(s.begin(), s.end());
}

// Every tensor of f whose name starts with prefix, as parameters of the same name.
ParamStore params_from(const io::File& f, const std::string& prefix) {
  ParamStore ps;
  for (const auto& [name, e] : f.tensors)
    if (name.starts_with(prefix)) ps.set(name, Tensor::f32(shape_of(f, name), e.to_f32()));
  return ps;
}

std::vector<float> as_floats(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

struct Golden {
  const char* name;
  Expr got;
};

// Runs the graph on the file's tensors of the inputs' names (by default x, memory and
// memory_keep as "keep"), and compares each output with the file's tensor of the same name.
// Returns the worst error.
double compare(Graph& g, const io::File& f, ParamStore& ps, const std::vector<Golden>& outs,
               const std::vector<std::string>& inputs = {}) {
  std::vector<NodeId> ids;
  for (const Golden& o : outs) ids.push_back(o.got.id);
  const std::int64_t n_params = ps.count();
  Executor ex(g, ids, ps);
  CHECK(ps.count() == n_params);  // the graph's parameters are exactly the file's
  if (inputs.empty()) {
    ex.set_input("x", f.get_f32("x"));
    ex.set_input("memory", f.get_f32("memory"));
    ex.set_input("keep", as_floats(f.get_i32("memory_keep")));
  }
  for (const std::string& name : inputs) ex.set_input(name, f.get_f32(name));
  ex.run();
  double worst = 0;
  for (const Golden& o : outs) {
    REQUIRE(o.got.shape() == shape_of(f, o.name));
    const double err = max_abs_diff(ex.get(o.got.id), f.get_f32(o.name));
    const std::string name = o.name;
    MESSAGE(name << ": max abs error " << err);
    CHECK_MESSAGE(err <= kTolerance, name << ": max abs error " << err);
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace

TEST_CASE("golden: cross_attention matches torch.nn.MultiheadAttention (Tq 3, Tk 5, 2 heads, key padding)") {
  const io::File f = io::read_safetensors(test::golden("cross_attention.safetensors"));
  Graph g;
  Expr x = input(g, "x", shape_of(f, "x"));                 // x: (2, 3, 8)
  Expr memory = input(g, "memory", shape_of(f, "memory"));  // memory: (2, 5, 8)
  Expr keep = input(g, "keep", shape_of(f, "memory_keep"));  // keep: (2, 5)
  AttentionResult r = cross_attention(x, memory, 2, "xattn", true, {.mask = padding_mask(keep)});
  Expr loss = sum_all(r.out * constant(g, f.get_f32("cotangent"), r.out.shape()));
  std::vector<Expr> d = grad(loss, {x, memory});
  ParamStore ps = params_from(f, "xattn.");
  CHECK(ps.count() == 4 * (8 * 8 + 8));
  const double worst = compare(g, f, ps, {{"out", r.out}, {"weights", r.weights}, {"grad.x", d[0]}, {"grad.memory", d[1]}});
  MESSAGE("cross_attention: worst max abs error " << worst);
}

TEST_CASE("golden: decoder_block matches torch.nn.TransformerDecoderLayer(norm_first, gelu) with causal and memory padding masks") {
  const io::File f = io::read_safetensors(test::golden("decoder_block.safetensors"));
  Graph g;
  Expr x = input(g, "x", shape_of(f, "x"));                 // x: (2, 4, 8)
  Expr memory = input(g, "memory", shape_of(f, "memory"));  // memory: (2, 5, 8)
  Expr keep = input(g, "keep", shape_of(f, "memory_keep"));  // keep: (2, 5)
  Expr y = decoder_block(x, memory, "dec", {.n_head = 2}, padding_mask(keep));
  Expr loss = sum_all(y * constant(g, f.get_f32("cotangent"), y.shape()));
  std::vector<Expr> d = grad(loss, {x, memory});
  ParamStore ps = params_from(f, "dec.");
  CHECK(ps.count() == 2 * 4 * (8 * 8 + 8) + 2 * (32 * 8) + 32 + 8 + 3 * 2 * 8);
  const double worst = compare(g, f, ps, {{"out", y}, {"grad.x", d[0]}, {"grad.memory", d[1]}});
  MESSAGE("decoder_block: worst max abs error " << worst);
}

TEST_CASE("golden: rms_norm, rotary_embedding and grouped_query_attention (4 query heads, 2 key/value heads, causal) "
          "match their PyTorch definitions") {
  const io::File f = io::read_safetensors(test::golden("rmsnorm_rope_gqa.safetensors"));
  Graph g;
  Expr x = input(g, "x", shape_of(f, "x"));  // x: (2, 5, 16)
  Expr norm = rms_norm(x, "blk.norm");
  AttentionResult r = grouped_query_attention(
      norm, "blk.attn", {.n_head = 4, .n_kv_head = 2, .attn = {.mask = causal_mask(g, x.dim(1))}});
  Expr out = x + r.out;
  Expr z = input(g, "z", shape_of(f, "z"));  // z: (2, 3, 6, 4), rotated from position 3, base 500
  Expr rope = rotary_embedding(z, 3, 500.f);
  Expr loss = sum_all(out * constant(g, f.get_f32("cotangent"), out.shape())) +
              sum_all(rope * constant(g, f.get_f32("z_cotangent"), rope.shape()));
  std::vector<Expr> wrt{x, z};
  std::vector<Golden> outs{{"norm", norm}, {"weights", r.weights}, {"out", out}, {"rope", rope}};
  const std::vector<std::string> names{"blk.norm.weight", "blk.attn.query.weight", "blk.attn.key.weight",
                                       "blk.attn.value.weight", "blk.attn.proj.weight"};
  for (const std::string& n : names) wrt.push_back(Expr{&g, g.find(n, OpKind::param)});
  std::vector<Expr> d = grad(loss, wrt);
  outs.push_back({"grad.x", d[0]});
  outs.push_back({"grad.z", d[1]});
  std::vector<std::string> grad_names;
  for (const std::string& n : names) grad_names.push_back("grad." + n);
  for (std::size_t i = 0; i < names.size(); ++i) outs.push_back({grad_names[i].c_str(), d[i + 2]});
  ParamStore ps = params_from(f, "blk.");
  CHECK(ps.count() == 16 + 16 * 16 + 2 * (8 * 16) + 16 * 16);
  const double worst = compare(g, f, ps, outs, {"x", "z"});
  MESSAGE("rms_norm, rotary_embedding, grouped_query_attention: worst max abs error " << worst);
}
