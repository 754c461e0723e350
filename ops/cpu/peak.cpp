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
#include "ops/cpu/probe.h"
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

const Probe kFma{fma_loop, 2.0 * double(W) * CHAINS};

volatile float sink;

}  // namespace

double probe_gflops(const Probe& p, int threads, std::int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  if (threads == 1) {
    sink = p.loop(iters, 1.f);
  } else {
    std::vector<float> out(std::size_t(threads), 0.f);
    parallel_for(threads, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = b; t < e; ++t) out[std::size_t(t)] = p.loop(iters, float(t));
    });
    float s = 0;
    for (float v : out) s += v;
    sink = s;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p.flops_per_iter * double(iters) * threads / sec * 1e-9;
}

std::int64_t probe_iterations(const Probe& p, double seconds, std::int64_t iters) {
  for (;;) {
    const double took = p.flops_per_iter * double(iters) / (probe_gflops(p, 1, iters) * 1e9);
    if (took >= seconds / 4 || iters > (std::int64_t(1) << 40))
      return std::max<std::int64_t>(1, std::int64_t(double(iters) * seconds / took));
    iters *= 4;
  }
}

FmaPeak measure_fma_peak(double seconds, int repeats) {
  seconds = std::max(seconds, 1e-3);
  repeats = std::max(repeats, 1);
  const std::int64_t iters = probe_iterations(kFma, seconds, 1 << 16);
  FmaPeak p;
  p.threads = num_threads();
  p.vector_floats = W;
  p.chains = CHAINS;
  for (int r = 0; r < repeats; ++r) p.per_core_gflops = std::max(p.per_core_gflops, probe_gflops(kFma, 1, iters));
  while (p.total_rounds < FmaPeak::max_total_rounds) {
    if (p.total_rounds++ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int r = 0; r < repeats; ++r) p.total_gflops = std::max(p.total_gflops, probe_gflops(kFma, p.threads, iters));
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
