// The peak probes' shared loop (private to ops/cpu): a register-only kernel timed on one
// thread and on every thread, its iteration count calibrated to a duration first. The FMA
// probe (peak.cpp) and the bf16 dot-product probe (bf16.cpp) differ only in their kernel.
#pragma once

#include <cstdint>

namespace gg {

struct Probe {
  float (*loop)(std::int64_t iters, float seed);  // returns a value that depends on every iteration
  double flops_per_iter;
};

// GFLOPS of `threads` threads each running `iters` iterations (threads == 1: the caller alone).
double probe_gflops(const Probe& p, int threads, std::int64_t iters);
// The iteration count that takes about `seconds` on one thread, found from `start` up.
std::int64_t probe_iterations(const Probe& p, double seconds, std::int64_t start);

}  // namespace gg
