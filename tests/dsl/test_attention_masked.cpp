// Masked products (ops/passes/masked.h, ExecutorOptions::masked): attention's products under a
// constant mask skip what the mask makes irrelevant, and every value is the one the full
// products give, bit for bit, wherever it is finite.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "autodiff/grad.h"
#include "dsl/nn.h"
#include "ops/passes/fuse_compiled.h"
#include "ops/cpu/parallel.h"
#include "tests/dsl/dsl_test_util.h"

using namespace gg;
using namespace gg::dsl;

namespace {

struct Case {
  Graph g;
  Expr q, k, v, out, scores;
  std::vector<NodeId> outs;  // out, the loss and the gradients of q, k and v
};

// softmax(q k^T / sqrt(hs), masked) @ v over (B, H, T, hs), a weighted sum as the loss, and
// its gradients. `mask` (T, T) as 0/1 floats; `scores_out`: the unmasked scores are an
// output too.
// `finite_fill`: the masked scores get -1e9 (where(mask, s, -1e9)), as many tutorials write
// it, instead of masked_fill's -inf.
void build(Case& c, std::int64_t T, std::int64_t hs, const std::vector<float>& mask, bool scores_out = false,
           bool finite_fill = false, bool bf16 = false) {
  Graph& g = c.g;
  Bf16Products precision(g, bf16);
  c.q = input(g, "q", {2, 2, T, hs});
  c.k = input(g, "k", {2, 2, T, hs});
  c.v = input(g, "v", {2, 2, T, hs});
  c.scores = matmul(c.q, c.k, false, true) * float(1.0 / std::sqrt(double(hs)));
  Expr m = constant(g, mask, {T, T});
  Expr w = softmax(finite_fill ? where(m, c.scores, constant(g, {-1e9f}, {})) : masked_fill(c.scores, m), -1);
  c.out = matmul(w, c.v);
  Expr loss = test::weighted_sum(c.out);
  c.outs = {c.out.id, loss.id};
  for (NodeId d : grad(g, loss.id, {c.q.id, c.k.id, c.v.id})) c.outs.push_back(d);
  if (scores_out) c.outs.push_back(c.scores.id);
}

std::vector<float> causal(std::int64_t T) {
  std::vector<float> m(std::size_t(T * T));
  for (std::int64_t r = 0; r < T; ++r)
    for (std::int64_t col = 0; col < T; ++col) m[std::size_t(r * T + col)] = col <= r ? 1.f : 0.f;
  return m;
}

struct Run {
  std::vector<Tensor> values;
  std::size_t masked = 0, chains = 0, groups = 0;
};

Run run(Case& c, ExecutorOptions o, std::vector<float> v_values = {}) {
  ParamStore ps;
  Executor ex(c.g, c.outs, ps, 0, o);
  const Shape s = c.q.shape();
  ex.set_input("q", test::tensor(s, -1.5f, 1.5f, 1));
  ex.set_input("k", test::tensor(s, -1.5f, 1.5f, 2));
  ex.set_input("v", v_values.empty() ? test::tensor(s, -1, 1, 3) : Tensor::f32(s, v_values));
  ex.run();
  Run r{{}, ex.masked_products(), ex.slice_chains(), ex.masked_groups()};
  for (NodeId id : c.outs) r.values.push_back(ex.get(id));
  return r;
}

// Row limits apply to compiled groups (a SIMD build, GG_COMPILED not 0): softmax's and
// its gradient's.
std::size_t compiled_softmax_groups() { return compiled_count() > 0 && compiled_by_default() ? 2 : 0; }

void check_same_bits(const Run& got, const Run& want, const std::string& what) {
  REQUIRE(got.values.size() == want.values.size());
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    INFO(what << ", output " << i);
    CHECK(std::memcmp(got.values[i].data(), want.values[i].data(), std::size_t(got.values[i].numel()) * 4) == 0);
  }
}

}  // namespace

TEST_CASE("masked products: causal attention's six products skip the mask's zeros, bits unchanged") {
  const int before = num_threads();
  // 272 > 256: the products' sums run in two passes, and the skipped ones keep the passes.
  // 640 >= 512: P^T dO and dS^T q are summed in two halves (gemm_depth_split), and the
  // skipped ones split there too (a multiple of every vector width, so that the chains keep
  // their row groups).
  for (std::int64_t T : {48, 64, 96, 272, 640}) {
    CAPTURE(T);
    Case c;
    build(c, T, 16, causal(T));
    const Run want = run(c, {.slice = false});
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      const Run plain = run(c, {.slice = true, .masked = false});
      const Run masked = run(c, {.slice = true, .masked = true});
      CHECK(plain.chains == 2);
      CHECK(plain.masked == 0);
      // q k^T and dO v^T compute only the kept scores; P v, P^T dO, dS k and dS^T q sum
      // only the terms the mask keeps.
      CHECK(masked.masked == 6);
      // softmax and its gradient compute each row only up to its last kept key (whole
      // registers): their sums and maxima skip the zeros and -inf past it.
      CHECK(plain.groups == 0);
      CHECK(masked.groups == compiled_softmax_groups());
      check_same_bits(plain, want, "sliced, " + std::to_string(threads) + " threads");
      check_same_bits(masked, want, "masked, " + std::to_string(threads) + " threads");
    }
  }
  set_num_threads(before);
}

TEST_CASE("masked products: with bf16 products, the skipped sums keep the full product's pairs, bits unchanged") {
  const int before = num_threads();
  for (std::int64_t T : {47, 64, 96, 272}) {  // an odd T: row limits fall inside a pair
    CAPTURE(T);
    Case c;
    build(c, T, 16, causal(T), false, false, /*bf16=*/true);
    const Run want = run(c, {.slice = false});
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      const Run masked = run(c, {.slice = true, .masked = true});
      if (T != 47) CHECK(masked.masked == 6);  // as in f32 (whose test has no odd T)
      else CHECK(masked.masked > 0);
      check_same_bits(masked, want, "bf16 masked, " + std::to_string(threads) + " threads");
    }
    Case f32;
    build(f32, T, 16, causal(T));
    const Run other = run(f32, {.slice = false});
    CHECK(std::memcmp(other.values[0].data(), want.values[0].data(), std::size_t(want.values[0].numel()) * 4) != 0);
  }
  set_num_threads(before);
}

TEST_CASE("masked products: an irregular mask with a kept key in every row gives the same bits") {
  const std::int64_t T = 80;
  std::mt19937 rng(5);
  std::vector<float> m(std::size_t(T * T));
  for (std::int64_t r = 0; r < T; ++r) {
    // rows keep different spans: some end early, some late, some have holes
    const std::int64_t end = 1 + std::int64_t(rng() % std::uint32_t(T));
    for (std::int64_t col = 0; col < end; ++col) m[std::size_t(r * T + col)] = (rng() % 3 != 0 || col == 0) ? 1.f : 0.f;
  }
  Case c;
  build(c, T, 8, m);
  const Run want = run(c, {.slice = false});
  const Run masked = run(c, {.slice = true, .masked = true});
  CHECK(masked.masked == 6);
  CHECK(masked.groups == compiled_softmax_groups());
  check_same_bits(masked, want, "irregular mask");
}

TEST_CASE("masked products: row blocks whose key limits fall as well as rise give the same bits") {
  // A causal mask's limits rise block by block (the products run a column band at a time);
  // here the first rows keep the most keys and later ones fewer, then more again, so the
  // products go row block by row block.
  for (std::int64_t T : {72, 160}) {
    std::vector<float> m(std::size_t(T * T));
    for (std::int64_t r = 0; r < T; ++r) {
      const std::int64_t end = r < T / 2 ? T - r : r - T / 2 + 1;
      for (std::int64_t col = 0; col < end; ++col) m[std::size_t(r * T + col)] = 1.f;
    }
    Case c;
    build(c, T, 16, m);
    const Run want = run(c, {.slice = false});
    const Run masked = run(c, {.slice = true, .masked = true});
    CHECK(masked.masked >= 5);  // at T = 72 the analysis leaves one of the six whole
    check_same_bits(masked, want, "falling then rising limits, T " + std::to_string(T));
  }
}

TEST_CASE("masked products: none skip when a row is fully masked or when the scores are read") {
  const std::int64_t T = 64;
  SUBCASE("a row with every key masked keeps its NaN") {
    std::vector<float> m = causal(T);
    for (std::int64_t col = 0; col < T; ++col) m[std::size_t(5 * T + col)] = 0.f;
    Case c;
    build(c, T, 16, m);
    const Run masked = run(c, {.slice = true, .masked = true});
    CHECK(masked.masked == 0);
    CHECK(masked.groups == 0);
    CHECK(std::isnan(masked.values[0].f()[5 * 16]));  // out[0, 0, 5, 0]
  }
  SUBCASE("scores asked for as an output are computed in full") {
    Case c;
    build(c, T, 16, causal(T), /*scores_out=*/true);
    const Run want = run(c, {.slice = false});
    const Run masked = run(c, {.slice = true, .masked = true});
    CHECK(masked.masked == 5);  // all but q k^T
    check_same_bits(masked, want, "scores read");
  }
}

TEST_CASE("masked rows: a finite fill leaves softmax's rows whole, the same bits") {
  // exp(-1e9 - max) is 0 in float as exp(-inf) is, but the analysis knows values, not
  // ranges: the row maximum reads -1e9 past the kept keys, not -inf, so no group is
  // limited, and neither are the products that need exact zeros in the weights.
  for (std::int64_t T : {64, 96}) {
    CAPTURE(T);
    Case c;
    build(c, T, 16, causal(T), /*scores_out=*/false, /*finite_fill=*/true);
    const Run want = run(c, {.slice = false});
    const Run masked = run(c, {.slice = true, .masked = true});
    CHECK(masked.groups == 0);
    CHECK(masked.masked < 6);
    check_same_bits(masked, want, "finite fill");
  }
}

TEST_CASE("masked products: an Inf at a key a query cannot see stays out of that query's row") {
  // The full product adds 0 * Inf = NaN to the rows that cannot see the key; the masked
  // one leaves out the terms the mask zeroes in blocks of 32 rows, so the rows of the
  // blocks before the key's (r < 32) are those of a zero key. Rows 32-39 share the key's
  // block and may see it; the rows that attend to it (r >= 40) are not finite either way.
  const std::int64_t T = 64, hs = 16, key = 40;
  Case c;
  build(c, T, hs, causal(T));
  std::vector<float> v = test::vals(2 * 2 * T * hs, -1, 1, 3);
  std::vector<float> v_zero = v;
  for (std::int64_t bh = 0; bh < 4; ++bh)
    for (std::int64_t d = 0; d < hs; ++d) {
      v[std::size_t((bh * T + key) * hs + d)] = INFINITY;
      v_zero[std::size_t((bh * T + key) * hs + d)] = 0.f;
    }
  const Run full = run(c, {.slice = false}, v);
  const Run masked = run(c, {.slice = true, .masked = true}, v);
  const Run finite = run(c, {.slice = true, .masked = true}, v_zero);
  REQUIRE(masked.masked == 6);
  const float* f = full.values[0].f();
  const float* m = masked.values[0].f();
  const float* z = finite.values[0].f();
  for (std::int64_t bh = 0; bh < 4; ++bh)
    for (std::int64_t r = 0; r < T; ++r) {
      const std::size_t i = std::size_t((bh * T + r) * hs);
      CAPTURE(r);
      CHECK(!std::isfinite(f[i]));
      if (r < key) CHECK(std::isnan(f[i]));
      if (r < 32) CHECK(m[i] == z[i]);
      if (r >= key) CHECK(!std::isfinite(m[i]));
    }
}
