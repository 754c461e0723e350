// The machine's single-precision FMA peak, measured: a loop of fused multiply-adds on
// independent accumulators that never leave the registers, on one thread and then on
// every thread of the pool (ops/cpu/parallel.h). What a kernel's GFLOPS are compared against.
// Not a model of the machine: no memory traffic, no frequency or cache reasoning.
#pragma once

#include <cstdint>
#include <string>

namespace gg {

struct FmaPeak {
  double per_core_gflops = 0;  // one thread alone
  double total_gflops = 0;     // every thread of the pool at once (wall time)
  int threads = 0;             // the pool's thread count during the measurement
  int vector_floats = 0;       // floats per register the loop ran on (1 in the scalar build)
  int chains = 0;              // independent accumulators per thread
  int total_rounds = 0;  // rounds of `repeats` runs the all-threads figure took (at most max_total_rounds)

  static constexpr double concurrent_share = 0.85;
  static constexpr int max_total_rounds = 5;

  // The all-threads figure as a share of threads x per_core_gflops.
  double concurrency() const { return total_gflops / (threads * per_core_gflops); }
  // Whether the threads ran at once: that share reached concurrent_share (on a shared VM a
  // vCPU can be held by the host for the whole probe, and then the figure is one core's).
  bool concurrent() const { return concurrency() >= concurrent_share; }

  // What a kernel's GFLOPS are compared against: the all-threads figure when the threads ran
  // at once, else threads x per_core_gflops (larger than what was seen: a fraction of it
  // never flatters).
  double reference_gflops() const { return concurrent() ? total_gflops : threads * per_core_gflops; }
};

// Measures both figures, each as the best of `repeats` runs of about `seconds` each; the
// all-threads figure takes up to max_total_rounds such rounds, 50 ms apart, until the
// threads run at once (FmaPeak::concurrent()). Requires seconds > 0 and repeats >= 1. Counts
// an FMA as 2 flops per float.
FmaPeak measure_fma_peak(double seconds = 0.05, int repeats = 10);

// Whether this CPU runs AVX-512 (F) instructions (false off x86).
bool cpu_has_avx512();

// The widest vector ISA this CPU has, which the figures depend on: "AVX-512",
// "AVX2+FMA, no AVX-512", "AVX2, no AVX-512", "no AVX2" or "not x86".
std::string cpu_vector_isa();

}  // namespace gg
