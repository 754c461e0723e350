// The main job: the reference GPT as a character-level language model on a text file,
// trained by the generic trainer. The vocabulary (the text's distinct bytes) travels in the
// checkpoint's user metadata, so `sample` needs nothing but the checkpoint.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gpt.h"
#include "../train/checkpoint.h"
#include "../train/data.h"
#include "../train/trainer.h"

namespace gg::models {

// The job's own options (the model's are GptConfig's, the run's TrainOptions').
struct CharLmOptions {
  std::string data;                  // text file; empty = the bundled tinyshakespeare.txt
  std::int64_t batch_size = 12;
  std::int64_t sample_tokens = 300;  // generated at the end
  double temperature = 0.8;
  std::int64_t top_k = 0;
  static const train::OptionTable<CharLmOptions>& table();
};

// The defaults of the main job: GptConfig's and these (4 layers, 128 wide, context 64,
// batch 12, 2000 steps of AdamW 1e-3, warm-up 100, cosine to 1e-4, clip 1.0, beta2 0.99,
// weight decay 0.1, out_dir runs/shakespeare).
train::TrainOptions char_lm_train_defaults();

// Random (B, T) windows of a text as a data source: "tokens" and "targets" (the tokens
// shifted by one), i32. Training windows come from the trainer's generator; validation
// window batch i is the i-th of a fixed sequence seeded by val_seed (drawn once, kept), so
// every evaluation sees the same batches. `text` must outlive the source.
train::DataSource char_windows(const train::CharData& text, std::int64_t B, std::int64_t T, std::uint64_t val_seed);

struct CharLmResult {
  train::FitResult fit;
  std::string sample;
};

// Trains on o.data (vocab_size of `model` is replaced by the data's), then samples.
CharLmResult run_char_lm(const CharLmOptions& o, GptConfig model, const train::TrainOptions& t,
                         std::FILE* out = stdout);

struct SampleOptions {
  std::string prompt = "\n";
  double temperature = 0.8;  // > 0
  std::int64_t top_k = 0;    // 0 = all tokens
  std::int64_t tokens = 300;
  std::uint64_t seed = 1337;
  static const train::OptionTable<SampleOptions>& table();
};

// The prompt followed by the generated characters: the last block_size tokens go in, the
// next token is drawn from softmax(logits / temperature), optionally among the top k.
// Throws InputError for a prompt character outside the vocabulary or bad options.
std::string sample_text(const GptConfig& c, const ParamStore& params, const std::string& vocab, const SampleOptions& o);

// `samples` continuations of the same prompt drawn side by side, one batch row each, one
// forward pass per generated token for all of them: continuation i is the one sample_text
// draws with seed o.seed + i (each row's logits do not depend on the other rows).
// Throws InputError as sample_text does, for samples outside [1, 4096], and when the batch
// would pass more than 2^20 tokens a forward or keep more than 2^26 characters.
std::vector<std::string> sample_texts(const GptConfig& c, const ParamStore& params, const std::string& vocab,
                                      const SampleOptions& o, std::int64_t samples);

// A char-LM checkpoint's model, weights and vocabulary; throws InputError naming the file.
struct CharLmCheckpoint {
  GptConfig config;
  ParamStore params;
  std::string vocab;
};
CharLmCheckpoint load_char_lm(const std::string& path);

// The bundled text (found like every bundled data file: see train/data_path.h).
std::string default_text_path();

}  // namespace gg::models
