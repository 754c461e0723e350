// Golden test: single_head_attention (with its output projection) against PyTorch's
// nn.MultiheadAttention computed in float64 (tests/golden/attention_single_head.safetensors,
// conventions in tests/golden/README.md: W_* are [in, out], masks are 1 = keep).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dsl/nn.h"
#include "io/safetensors.h"
#include "ops/runtime/executor.h"

namespace {

using namespace gg;
using namespace gg::dsl;

double max_abs_diff(const Tensor& got, const std::vector<float>& want) {
  REQUIRE(got.numel() == std::int64_t(want.size()));
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(double(got.f()[i]) - double(want[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

std::vector<float> as_floats(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("golden: single_head_attention matches torch.nn.MultiheadAttention (no mask, causal, padding)") {
  const io::File f = io::read_safetensors(std::string(GG_SOURCE_DIR) + "/tests/golden/attention_single_head.safetensors");
  const std::int64_t B = 2, T = 4, D = 8;
  REQUIRE(f.at("x").shape == std::vector<std::int64_t>{B, T, D});
  REQUIRE(f.at("W_Q").shape == std::vector<std::int64_t>{D, D});
  REQUIRE(f.at("causal_mask").shape == std::vector<std::int64_t>{T, T});
  REQUIRE(f.at("pad_mask").shape == std::vector<std::int64_t>{B, T});

  Graph g;
  Expr x = input(g, "x", {B, T, D});         // x: (B, T, D)
  Expr keep = input(g, "keep", {B, T});      // keep: (B, T), 1 = real token
  Expr causal = constant(g, as_floats(f.get_i32("causal_mask")), {T, T});
  AttentionResult plain = single_head_attention(x, D, "attn", {}, /*out_proj=*/true);
  AttentionResult cz = single_head_attention(x, D, "attn", {.mask = causal}, /*out_proj=*/true);
  AttentionResult pd = single_head_attention(x, D, "attn", {.mask = padding_mask(keep)}, /*out_proj=*/true);
  CHECK(plain.out.shape() == Shape{B, T, D});
  CHECK(plain.weights.shape() == Shape{B, T, T});

  ParamStore ps;
  for (const char* w : {"W_Q", "W_K", "W_V", "W_O"})
    ps.set(std::string("attn.") + w, Tensor::f32({D, D}, f.get_f32(w)));
  Executor ex(g, {plain.out.id, plain.weights.id, cz.out.id, cz.weights.id, pd.out.id, pd.weights.id}, ps);
  ex.set_input("x", f.get_f32("x"));
  ex.set_input("keep", as_floats(f.get_i32("pad_mask")));
  ex.run();
  CHECK(ps.count() == 4 * D * D);  // the graph made no parameters of its own

  struct Cmp {
    const char* name;
    Expr got;
  };
  const Cmp cmps[] = {{"out", plain.out},           {"weights", plain.weights}, {"out_causal", cz.out},
                      {"weights_causal", cz.weights}, {"out_pad", pd.out},      {"weights_pad", pd.weights}};
  // The bound the tutorial states, met with fused multiply-add (the default -march=native
  // build). Without FMA (GG_PORTABLE: SSE2) each product is rounded on its own and the
  // outputs, up to |5|, land within 3 float ulps (1.4e-6) instead of 1.
#ifdef __FMA__
  const double kTolerance = 1e-6;
#else
  const double kTolerance = 2e-6;
#endif
  double worst = 0;
  for (const Cmp& c : cmps) {
    const double err = max_abs_diff(ex.get(c.got.id), f.get_f32(c.name));
    const std::string name = c.name;
    MESSAGE(name << ": max abs error " << err);
    CHECK_MESSAGE(err <= kTolerance, name << ": max abs error " << err);
    worst = std::max(worst, err);
  }
  MESSAGE("worst max abs error over the three cases: " << worst);

  // Masked keys get weight exactly 0.
  const Tensor wc = ex.get(cz.weights.id), wp = ex.get(pd.weights.id);
  const std::vector<std::int32_t> pad = f.get_i32("pad_mask");
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t q = 0; q < T; ++q)
      for (std::int64_t k = 0; k < T; ++k) {
        if (k > q) CHECK(wc.f()[(b * T + q) * T + k] == 0.f);
        if (!pad[std::size_t(b * T + k)]) CHECK(wp.f()[(b * T + q) * T + k] == 0.f);
      }
}
