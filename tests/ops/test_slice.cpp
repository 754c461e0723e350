// Tests for the executor's batch-slice chains (ExecutorOptions::slice): which steps form a
// chain, and that running a chain slice by slice gives the values of the plan run step by
// step, bit for bit, whatever the fusion, threads or the buffers the memory plan reuses.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/ir/build.h"
#include "ops/runtime/executor.h"
#include "ops/cpu/parallel.h"
#include "tests/test_util.h"

using namespace gg;

namespace {


struct Attention {
  Graph g;
  std::vector<NodeId> outs;
};

// Masked softmax attention over (B, H, T, hs) with a causal (T, T) mask and a (B, 1, 1, T)
// padding mask, and a value read again after the chain.
void build(Attention& a, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t hs) {
  Graph& g = a.g;
  NodeId q = op::input(g, "q", {B, H, T, hs}), k = op::input(g, "k", {B, H, T, hs}), v = op::input(g, "v", {B, H, T, hs});
  NodeId causal = op::input(g, "causal", {T, T}), pad = op::input(g, "pad", {B, 1, 1, T});
  NodeId s = op::mul(g, op::matmul(g, q, k, false, true), op::scalar(g, 0.25f));
  s = op::where(g, causal, s, op::scalar(g, -INFINITY));
  s = op::where(g, pad, s, op::scalar(g, -1e9f));
  NodeId e = op::exp(g, op::sub(g, s, op::max(g, s, -1, true)));
  NodeId p = op::div(g, e, op::sum(g, e, -1, true));
  NodeId y = op::matmul(g, p, v);
  NodeId z = op::matmul(g, op::tanh(g, y), v, false, true);  // (B, H, T, T) again
  NodeId after = op::add(g, op::sum(g, z, 0, false), op::sum(g, p, 0, false));  // read after the chain
  a.outs = {y, z, after};
}

// The first run's outputs go into want; every later run must give their bits.
void check_same_bits(const Executor& ex, const std::vector<NodeId>& outs, std::vector<std::vector<float>>& want) {
  for (std::size_t o = 0; o < outs.size(); ++o) {
    const std::vector<float> got = ex.get(outs[o]).to_vector();
    if (want.size() <= o) want.push_back(got);
    INFO("output " << o);
    CHECK(std::memcmp(got.data(), want[o].data(), got.size() * 4) == 0);
  }
}

void feed(Executor& ex, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t hs) {
  ex.set_input("q", std::span<const float>(test::wave(B * H * T * hs, 1.f, 1, 0.37)));
  ex.set_input("k", std::span<const float>(test::wave(B * H * T * hs, 1.f, 2, 0.37)));
  ex.set_input("v", std::span<const float>(test::wave(B * H * T * hs, 1.f, 3, 0.37)));
  std::vector<float> causal(std::size_t(T * T)), pad(std::size_t(B * T));
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < T; ++j) causal[std::size_t(i * T + j)] = j <= i ? 1.f : 0.f;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < T; ++j) pad[std::size_t(b * T + j)] = j < T - b ? 1.f : 0.f;
  ex.set_input("causal", std::span<const float>(causal));
  ex.set_input("pad", std::span<const float>(pad));
}

}  // namespace

TEST_CASE("slice: attention chains give the step-by-step bits, fused or not, at 1 and 2 threads") {
  const std::int64_t B = 3, H = 2, hs = 8;
  for (std::int64_t T : {16, 32, 40}) {
    Attention a;
    build(a, B, H, T, hs);
    ParamStore ps;
    const int before = num_threads();
    for (bool fuse : {false, true}) {
      std::vector<std::vector<float>> want;
      for (int threads : {1, 2})
        for (bool slice : {false, true}) {
          INFO("T " << T << " fuse " << fuse << " threads " << threads << " slice " << slice);
          set_num_threads(threads);
          Executor ex(a.g, a.outs, ps, 0, {.fuse = fuse, .slice = slice});
          // T = 40: rows per slice not a multiple of the SIMD width, so no group joins a
          // chain (a chain needs two steps); the others slice.
          if (slice && T != 40) CHECK(ex.slice_chains() >= 1);
          if (!slice) CHECK(ex.slice_chains() == 0);
          feed(ex, B, H, T, hs);
          ex.run();
          check_same_bits(ex, a.outs, want);
        }
    }
    set_num_threads(before);
  }
}

TEST_CASE("slice: the step profile gives each step of a chain its share of the chain's time") {
  const std::int64_t B = 3, H = 2, T = 32, hs = 8;
  Attention a;
  build(a, B, H, T, hs);
  ParamStore ps;
  std::vector<std::vector<float>> want;
  for (bool profile : {false, true}) {
    Executor ex(a.g, a.outs, ps, 0, {.fuse = true, .slice = true});
    REQUIRE(ex.slice_chains() >= 1);
    ex.set_profile(profile);
    feed(ex, B, H, T, hs);
    ex.run();
    ex.run();
    check_same_bits(ex, a.outs, want);  // timing the steps changes no value
    const std::string report = ex.profile_steps_report(1000);
    if (!profile) continue;
    // "sliced chain of N steps over S slices [matmul NT: 30%, compiled x7 [...]: 50%, ...;
    // after each step its share of the chain's time]": N shares that add up to 100.
    const std::size_t at = report.find("sliced chain of ");
    REQUIRE(at != std::string::npos);
    const std::size_t line_end = report.find('\n', at);
    const std::string line = report.substr(at, line_end - at);
    INFO(line);
    CHECK(line.find("after each step its share of the chain's time") != std::string::npos);
    const int steps = std::stoi(line.substr(std::strlen("sliced chain of ")));
    int shares = 0, total = 0;
    for (std::size_t p = line.find(": "); p != std::string::npos; p = line.find(": ", p + 2)) {
      std::size_t used = 0;
      const int v = std::stoi(line.substr(p + 2), &used);
      if (line.compare(p + 2 + used, 1, "%") != 0) continue;
      ++shares;
      total += v;
    }
    CHECK(shares == steps);
    CHECK(total >= 100 - steps);  // each share rounded to a whole percent
    CHECK(total <= 100 + steps);
  }
}

TEST_CASE("slice: a chain's dead intermediates do not share buffers inside the chain") {
  // Unfused, every op is a step, and step by step the planner would hand the buffer of a
  // value read for the last time to the next step's output; run slice by slice, a later
  // step would then overwrite a slice an earlier step had not read yet.
  const std::int64_t B = 4, T = 16, hs = 16;
  Graph g;
  NodeId x = op::input(g, "x", {B, T, hs});
  NodeId s = op::matmul(g, x, x, false, true);  // (B, T, T)
  for (int i = 0; i < 6; ++i) s = op::exp(g, op::mul(g, op::tanh(g, s), op::scalar(g, 0.5f + 0.1f * float(i))));
  NodeId y = op::matmul(g, s, x);  // (B, T, hs)
  ParamStore ps;
  std::vector<float> want;
  for (bool slice : {false, true}) {
    Executor ex(g, {y}, ps, 0, {.fuse = false, .slice = slice});
    CHECK(ex.slice_chains() == (slice ? 1u : 0u));
    ex.set_input("x", std::span<const float>(test::wave(B * T * hs, 1.f, 7, 0.37)));
    ex.run();
    const std::vector<float> got = ex.get(y).to_vector();
    if (want.empty()) want = got;
    CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
  }
}

namespace {
// Multi-head attention's layout: x (B, T, H*hs) split into heads by reshape and permute to
// (B, H, T, hs), a softmax chain per (b, h), and the heads merged back by permute and
// reshape. With `leak`, the split q is also read outside the chain and the heads' output
// also by a sum, so neither of those two permutes can be done in place.
struct Heads {
  Graph g;
  std::vector<NodeId> outs;
};
void build_heads(Heads& a, std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t hs, bool leak) {
  Graph& g = a.g;
  auto split = [&](NodeId x) { return op::permute(g, op::reshape(g, x, {B, T, H, hs}), {0, 2, 1, 3}); };
  NodeId x = op::input(g, "x", {B, T, H * hs});
  NodeId q = split(op::tanh(g, x)), k = split(op::mul(g, x, op::scalar(g, 0.5f))), v = split(op::exp(g, x));
  NodeId s = op::mul(g, op::matmul(g, q, k, false, true), op::scalar(g, 0.25f));
  NodeId e = op::exp(g, op::sub(g, s, op::max(g, s, -1, true)));
  NodeId y = op::matmul(g, op::div(g, e, op::sum(g, e, -1, true)), v);  // (B, H, T, hs)
  NodeId merged = op::reshape(g, op::permute(g, y, {0, 2, 1, 3}), {B, T, H * hs});
  a.outs = {op::tanh(g, merged)};
  if (leak) a.outs.push_back(op::add(g, op::sum(g, q, 1, false), op::sum(g, y, 1, false)));
}
}  // namespace

TEST_CASE("slice: head split and merge permutes done in place give the bits of running them") {
  const std::int64_t B = 2, H = 3, hs = 8;
  for (std::int64_t T : {16, 32})
    for (bool leak : {false, true}) {
      Heads a;
      build_heads(a, B, T, H, hs, leak);
      ParamStore ps;
      const int before = num_threads();
      std::vector<std::vector<float>> want;
      std::size_t unshared_run = 0;
      for (int threads : {1, 2})
        for (int mode : {0, 1, 2, 3}) {  // step by step, sliced, sliced in place, that in anomaly mode
          INFO("T " << T << " leak " << leak << " threads " << threads << " mode " << mode);
          set_num_threads(threads);
          Executor ex(a.g, a.outs, ps, 0, {.slice = mode > 0, .in_place = mode >= 2});
          // q, k, v read from x's layout and y written into the merge's; with the leaks, q
          // and y's permutes run.
          CHECK(ex.in_place_permutes() == (mode >= 2 ? (leak ? 2u : 4u) : 0u));
          if (mode == 1) unshared_run = ex.unshared_bytes();
          if (mode >= 2) CHECK(ex.unshared_bytes() < unshared_run);
          ex.set_detect_anomaly(mode == 3);
          ex.set_input("x", std::span<const float>(test::wave(B * T * H * hs, 1.f, 5, 0.37)));
          ex.run();
          check_same_bits(ex, a.outs, want);
        }
      set_num_threads(before);
    }
}
