// Replay (docs/reference-model.md, "Training step"): N optimizer steps on given batches
// with a constant learning rate, recording each step's loss and pre-clip gradient norm.
// Shared by `gradgraph replay` and the agreement tests.
#pragma once

#include <string>
#include <vector>

#include "model.h"
#include "error.h"

namespace gg::train {

struct ReplayOptions {
  std::string optimizer = "adamw";  // "adamw" or "sgd"
  double lr = 0, momentum = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  double clip = 0;                  // max global grad norm; 0 = off
  // Throws InputError naming the first bad option (as its command-line flag).
  void validate() const;
};

struct ReplayResult {
  std::vector<float> losses;      // (N): loss of each step before its update
  std::vector<float> grad_norms;  // (N): gradient norm before clipping
};

// Runs one step per batch on any model, updating its parameters in place.
ReplayResult replay(Model& m, const std::vector<Batch>& batches, const ReplayOptions& o);

}  // namespace gg::train
