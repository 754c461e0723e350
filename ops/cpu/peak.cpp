// The FMA probe: CHAINS independent vector accumulators, each updated acc = acc * a + b
// per iteration, so the loop is bound by FMA throughput, not latency (latency 4-5 cycles x
// 2 FMA ports needs at least 10 chains in flight; 16 also fit AVX2's 16 registers with
// the two operands). Nothing is loaded or stored inside the loop.
#include "ops/cpu/peak.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/cpu/simd.h"

namespace gg {
namespace {

#ifndef GG_SCALAR
using vec = simd::vf;
constexpr int W = int(simd::width);
#else
using vec = float;
constexpr int W = 1;
#endif
constexpr int CHAINS = 12;

// Runs `iters` iterations of CHAINS FMAs; returns a value that depends on every one of them
// (so the compiler keeps the loop; without -ffast-math it cannot merge iterations).
float fma_loop(std::int64_t iters, float seed) {
  volatile float va = 0.999999f, vb = 1e-7f;  // volatile: not folded at compile time
  const vec a = vec(float(va)), b = vec(float(vb));
  vec acc[CHAINS];
  for (int c = 0; c < CHAINS; ++c) acc[c] = vec(seed + float(c));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < CHAINS; ++c) acc[c] = simd::fma(acc[c], a, b);
  }
  vec s = acc[0];
  for (int c = 1; c < CHAINS; ++c) s = s + acc[c];
#ifndef GG_SCALAR
  return simd::hsum(s);
#else
  return s;
#endif
}

double flops(std::int64_t iters) { return 2.0 * double(W) * CHAINS * double(iters); }

volatile float sink;

// GFLOPS of `threads` threads each running `iters` iterations (threads == 1: the caller alone).
double run_once(int threads, std::int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  if (threads == 1) {
    sink = fma_loop(iters, 1.f);
  } else {
    std::vector<float> out(std::size_t(threads), 0.f);
    parallel_for(threads, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = b; t < e; ++t) out[std::size_t(t)] = fma_loop(iters, float(t));
    });
    float s = 0;
    for (float v : out) s += v;
    sink = s;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flops(iters) * threads / sec * 1e-9;
}

}  // namespace

FmaPeak measure_fma_peak(double seconds, int repeats) {
  seconds = std::max(seconds, 1e-3);
  repeats = std::max(repeats, 1);
  // Calibrate the iteration count for `seconds` on one thread.
  std::int64_t iters = 1 << 16;
  for (;;) {
    const double g = run_once(1, iters);
    const double took = flops(iters) / (g * 1e9);
    if (took >= seconds / 4 || iters > (std::int64_t(1) << 40)) {
      iters = std::max<std::int64_t>(1, std::int64_t(double(iters) * seconds / took));
      break;
    }
    iters *= 4;
  }
  FmaPeak p;
  p.threads = num_threads();
  p.vector_floats = W;
  p.chains = CHAINS;
  for (int r = 0; r < repeats; ++r) p.per_core_gflops = std::max(p.per_core_gflops, run_once(1, iters));
  while (p.total_rounds < FmaPeak::max_total_rounds) {
    if (p.total_rounds++ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int r = 0; r < repeats; ++r) p.total_gflops = std::max(p.total_gflops, run_once(p.threads, iters));
    if (p.concurrent()) break;
  }
  return p;
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

std::string cpu_vector_isa() {
#if defined(__x86_64__) || defined(__i386__)
  if (cpu_has_avx512()) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return __builtin_cpu_supports("fma") ? "AVX2+FMA, no AVX-512" : "AVX2, no AVX-512";
  return "no AVX2";
#else
  return "not x86";
#endif
}

}  // namespace gg
