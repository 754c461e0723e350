// The FMA probe (ops/peak.h): it measures something, on the pool's threads. No timing
// thresholds (the machine may be busy); only that the figures are positive and finite.
#include <doctest/doctest.h>

#include <cmath>

#include "ops/parallel.h"
#include "ops/peak.h"

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
