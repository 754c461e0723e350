// The training job: a character-level model on a text file, AdamW (or SGD) with warm-up
// and cosine decay, clipping, periodic validation, a progress bar, the loss curve as CSV
// and SVG, a checkpoint (resumable) and a sample of generated text at the end.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "../dsl/gpt.h"
#include "sample.h"

namespace gg::train {

struct TrainOptions {
  std::string data;                 // text file; empty = the bundled tinyshakespeare.txt
  std::string out_dir = "runs/shakespeare";
  // model (vocab_size comes from the data)
  std::int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64;
  bool bias = true, tie_weights = true, attn_scale = true;
  std::string pos_encoding = "learned", gelu = "erf";
  double dropout = 0.0;
  // optimization
  std::int64_t batch_size = 12, steps = 2000, warmup = 100;
  std::string optimizer = "adamw";
  double lr = 1e-3, min_lr = 1e-4, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, momentum = 0.9;
  double clip = 1.0;                // max global grad norm; 0 = off
  // reporting
  std::int64_t eval_interval = 250, eval_iters = 20, final_eval_iters = 200;
  std::int64_t sample_tokens = 300;
  double temperature = 0.8;
  int top_k = 0;
  std::uint64_t seed = 1337;
  bool resume = false;
  bool quiet = false;               // no progress bar

  // Reads a JSON object whose keys are option names (as on the command line, with '_');
  // throws InputError naming an unknown key or a mistyped value.
  void merge_json(const std::string& json_text, const std::string& source);
  std::string to_json() const;
  // Throws InputError naming the first impossible option.
  void validate() const;
  dsl::GptConfig model_config(std::int64_t vocab_size) const;
};

struct TrainResult {
  double final_val_loss = 0, final_train_loss = 0;
  double seconds = 0, tokens_per_sec = 0;
  std::int64_t steps = 0;
  std::string sample;
};

// Runs the job, printing progress and reports to `out`. Throws InputError on bad input.
TrainResult run_training(const TrainOptions& o, std::FILE* out = stdout);

// The bundled data/tinyshakespeare.txt, found by find_data_file() (train/data_path.h).
std::string default_data_path();

}  // namespace gg::train
