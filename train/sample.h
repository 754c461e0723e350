// Text generation from a trained character model: the last block_size tokens go in, the
// next token is drawn from softmax(logits / temperature), optionally among the top k.
#pragma once

#include <cstdint>
#include <string>

#include "../dsl/gpt.h"
#include "../ops/tensor.h"

namespace gg::train {

struct SampleOptions {
  std::string prompt = "\n";
  double temperature = 0.8;  // > 0
  int top_k = 0;             // 0 = all tokens
  std::int64_t tokens = 300;
  std::uint64_t seed = 1337;
};

// Returns the prompt followed by the generated characters. Throws InputError for a prompt
// character outside the vocabulary or bad options.
std::string sample_text(const dsl::GptConfig& c, ParamStore& params, const std::string& vocab, const SampleOptions& o);

}  // namespace gg::train
