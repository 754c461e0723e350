// Checkpoints for any model: one safetensors file with the parameters (under their own
// names, so a checkpoint is also a weights file), the optimizer's state ("optim.<key>"),
// the loss curves so far ("curve.<series>", (n, 2) of step and value), and metadata: the
// model's kind and options, the optimizer and its hyperparameters, the run's options
// (with the LR schedule), the step, the RNG states and the user's own entries. Written to
// a temporary file and renamed: a crash never leaves half a file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../io/safetensors.h"
#include "../ops/ir/tensor.h"
#include "error.h"
#include "plot.h"

namespace gg::train {

struct Checkpoint {
  std::string model_kind;                      // "gpt", "vit", ... (Model::kind())
  std::string model_options;                   // JSON of the model's option table
  std::map<std::string, Tensor> params;        // by parameter name
  std::string optimizer;                       // "adamw" or "sgd"
  std::map<std::string, Tensor> optim_state;   // Optimizer::state()
  std::int64_t step = 0;                       // optimizer steps taken
  std::string train_options;                   // JSON of the run's TrainOptions
  std::string rng_state;                       // the data and dropout generators, as text
  std::vector<Series> curves;                  // the loss (and metric) curves up to `step`
  std::map<std::string, std::string> user;     // the user's own metadata (e.g. a vocabulary)
};

void save_checkpoint(const std::string& path, const Checkpoint& ck);
// Throws InputError naming the file for anything missing or inconsistent.
Checkpoint load_checkpoint(const std::string& path);

// Every tensor of a weights file (F32 and I32; I64 as I32 when it fits) by name, for
// load_params; throws InputError.
std::map<std::string, Tensor> read_tensors(const std::string& path);
std::map<std::string, Tensor> tensors_of(const io::File& f);

}  // namespace gg::train
