// The small regression task the trainer's tests and the data-parallel program train on:
// y = sin(x0) + x1 / 2 from x uniform in [-2, 2], `width` columns of x (the first two used).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "train/model.h"

namespace gg::test {

// B rows drawn one after another from rng (so k batches of B rows are one batch of k * B).
inline train::Batch regression_batch(std::mt19937_64& rng, std::int64_t B, std::int64_t width = 2) {
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> x(std::size_t(width * B)), y(static_cast<std::size_t>(B));
  for (std::int64_t i = 0; i < B; ++i) {
    for (std::int64_t j = 0; j < width; ++j) x[std::size_t(width * i + j)] = u(rng);
    y[std::size_t(i)] = std::sin(x[std::size_t(width * i)]) + x[std::size_t(width * i + 1)] / 2;
  }
  return {{"x", Tensor::f32({B, width}, x)}, {"y", Tensor::f32({B, 1}, y)}};
}

}  // namespace gg::test
