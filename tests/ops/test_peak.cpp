// The FMA probe (ops/cpu/peak.h): it measures something, on the pool's threads. No timing
// thresholds (the machine may be busy); only that the figures are positive and finite.
#include <doctest/doctest.h>

#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/cpu/peak.h"

TEST_CASE("measure_fma_peak: positive per-core and total GFLOPS on the pool's threads") {
  const gg::FmaPeak p = gg::measure_fma_peak(0.005, 2);
  CHECK(p.per_core_gflops > 0);
  CHECK(std::isfinite(p.per_core_gflops));
  CHECK(p.total_gflops > 0);
  CHECK(std::isfinite(p.total_gflops));
  CHECK(p.threads == gg::num_threads());
  CHECK(p.vector_floats >= 1);
  CHECK(p.chains >= 8);
}

TEST_CASE("measure_fma_peak: the all-threads figure takes 1 to max_total_rounds rounds, concurrent as defined") {
  const gg::FmaPeak p = gg::measure_fma_peak(0.005, 2);
  CHECK(p.total_rounds >= 1);
  CHECK(p.total_rounds <= gg::FmaPeak::max_total_rounds);
  CHECK(p.concurrent() == (p.total_gflops >= gg::FmaPeak::concurrent_share * p.threads * p.per_core_gflops));
  if (!p.concurrent()) CHECK(p.total_rounds == gg::FmaPeak::max_total_rounds);  // it retried before giving up
}

TEST_CASE("FmaPeak::reference_gflops: threads x per-core when the threads did not run at once, never less") {
  gg::FmaPeak p;
  p.threads = 2;
  p.per_core_gflops = 100;
  p.total_gflops = 190;
  CHECK(p.reference_gflops() == doctest::Approx(190));
  p.total_gflops = 110;  // one vCPU held by the host during the probe: one core's figure
  CHECK(p.reference_gflops() == doctest::Approx(200));
}
