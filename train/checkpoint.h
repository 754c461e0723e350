// Checkpoints: one safetensors file with the weights, the optimizer's state, the step,
// the data-sampling RNG, the vocabulary and the model config, so `--resume` continues a
// run exactly. Written to a temporary file and renamed: a crash never leaves half a file.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "../dsl/gpt.h"
#include "../ops/tensor.h"

namespace gg::train {

struct Checkpoint {
  dsl::GptConfig config;
  std::string vocab;                            // vocab[id] = byte of token id
  ParamStore params;
  std::string optimizer;                        // "adamw" or "sgd"
  std::map<std::string, Tensor> optim_state;    // Optimizer::state()
  std::int64_t step = 0;                        // optimizer steps taken
  std::string rng_state;                        // std::mt19937_64 states (data, then dropout), as text
  std::string options_json;                     // the training options of the run
};

void save_checkpoint(const std::string& path, const Checkpoint& ck);
// Throws InputError naming the file for anything missing or inconsistent.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace gg::train
