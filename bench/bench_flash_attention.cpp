// bench_flash_attention: the fused causal attention's two kernels (ops/primitives/attention.cpp:
// attention, by blocks of keys with an online softmax; attention_back, the weights recomputed)
// on Google Benchmark, each run as a one-node plan, with GFLOPS and the fraction of the FMA
// peak (ops/cpu/peak.h) of the threads used as counters. FLOPs are the products' terms the
// kernels compute: the causal blocks they skip are not counted (about half of T x T).
//
// Usage: bench_flash_attention [--benchmark_...]
//   Shapes: small (B 12, H 4, T 64, hs 32: bench/gpt_small.json at batch 12), medium (B 12,
//   H 6, T 256, hs 64), T1024 (B 4, H 4, hs 32) and T4096 (B 1, H 4, hs 32). Benchmarks are
//   named <shapes>/<forward|backward>/threads:<n> (the library appends /real_time).
//     bench_flash_attention --benchmark_filter='^T1024/'
// No timing assertion anywhere: a benchmark, not a test.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/peak.h"
#include "ops/cpu/threads.h"
#include "ops/ir/build.h"
#include "ops/runtime/executor.h"

namespace {

using i64 = std::int64_t;

struct Shapes {
  const char* name;
  i64 B, H, T, hs;
};
const Shapes kShapes[] = {{"small", 12, 4, 64, 32}, {"medium", 12, 6, 256, 64}, {"T1024", 4, 4, 1024, 32},
                          {"T4096", 1, 4, 4096, 32}};

std::vector<float> draw(i64 n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// The multiply-adds of the products over the blocks the causal mask leaves (64 x 64 blocks:
// the diagonal ones in full), times 2 flops: forward QK^T and PV, backward those two and
// dP, dQ, dK.
double causal_flops(const Shapes& s, bool backward) {
  const i64 nb = (s.T + 63) / 64;
  double terms = 0;
  for (i64 qb = 0; qb < nb; ++qb)
    for (i64 kb = 0; kb <= qb; ++kb) terms += double(std::min<i64>(64, s.T - qb * 64)) * double(std::min<i64>(64, s.T - kb * 64));
  return 2.0 * terms * double(s.hs) * double(s.B * s.H) * (backward ? 5 : 2);
}

void run(benchmark::State& state, const Shapes& s, bool backward, double core_peak) {
  const int threads = int(state.range(0));
  const int before = gg::num_threads();
  gg::set_num_threads(threads);
  gg::Graph g;
  const gg::Shape x{s.B, s.H, s.T, s.hs}, f{s.B, s.H, s.T, s.hs + 1};
  const gg::NodeId q = gg::op::input(g, "q", x), k = gg::op::input(g, "k", x), v = gg::op::input(g, "v", x);
  std::vector<float> causal(static_cast<std::size_t>(s.T * s.T));
  for (i64 i = 0; i < s.T; ++i)
    for (i64 j = 0; j <= i; ++j) causal[static_cast<std::size_t>(i * s.T + j)] = 1.f;
  const gg::NodeId mask = gg::op::constant(g, causal, {1, 1, s.T, s.T});
  const float scale = 1.f / std::sqrt(float(s.hs));
  const gg::NodeId fwd = gg::op::attention(g, q, k, v, mask, scale);
  const gg::NodeId out = backward ? gg::op::attention_back(g, q, k, v, mask, gg::op::input(g, "fwd", f),
                                                           gg::op::input(g, "gout", f), scale)
                                  : fwd;
  gg::ParamStore ps;
  gg::Executor ex(g, {out}, ps);
  ex.set_input("q", gg::Tensor::f32(x, draw(gg::numel(x), 1)));
  ex.set_input("k", gg::Tensor::f32(x, draw(gg::numel(x), 2)));
  ex.set_input("v", gg::Tensor::f32(x, draw(gg::numel(x), 3)));
  if (backward) {
    // The forward's own output as fwd (its log-sum-exp must be the scores'), and a drawn gout.
    gg::Executor fx(g, {fwd}, ps);
    for (const char* n : {"q", "k", "v"}) fx.set_input(n, gg::Tensor::f32(x, draw(gg::numel(x), n[0] == 'q' ? 1 : n[0] == 'k' ? 2 : 3)));
    fx.run();
    ex.set_input("fwd", fx.get(fwd));
    ex.set_input("gout", gg::Tensor::f32(f, draw(gg::numel(f), 4)));
  }
  for (auto _ : state) ex.run();
  const double flops = causal_flops(s, backward);
  const double peak = core_peak * threads;
  state.counters["GFLOPS"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_fraction"] =
      benchmark::Counter(flops * 1e-9 / peak, benchmark::Counter::kIsIterationInvariantRate);
  gg::set_num_threads(before);
}

}  // namespace

int main(int argc, char** argv) {
  const double core_peak = gg::measure_fma_peak().per_core_gflops;
  for (const Shapes& s : kShapes)
    for (bool backward : {false, true})
      benchmark::RegisterBenchmark(fmt::format("{}/{}", s.name, backward ? "backward" : "forward").c_str(),
                                   [s, backward, core_peak](benchmark::State& st) { run(st, s, backward, core_peak); })
          ->ArgName("threads")
          ->Arg(1)
          ->Arg(2)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
