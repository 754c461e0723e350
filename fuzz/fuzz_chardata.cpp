// Fuzz target: the text-data loader (train::CharData::from_text, what load() calls after
// reading the file) and batching. The first byte picks block_size (0..63), the rest is the
// text. Every input must be refused with InputError or give splits that batch and
// round-trip through encode/decode.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "train/error.h"
#include "train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gg::train;
  if (size == 0) return 0;
  const std::int64_t block = data[0] % 64;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  CharData d;
  try {
    d = CharData::from_text(text, "fuzz.txt", block);
  } catch (const InputError&) {
    return 0;
  }
  if (d.vocab.empty() || d.train.size() + d.val.size() != text.size()) __builtin_trap();
  std::string both = d.decode(d.train) + d.decode(d.val);
  if (both != text || d.encode(text).size() != text.size()) __builtin_trap();
  std::mt19937_64 rng(1);
  std::vector<std::int32_t> tokens, targets;
  sample_batch(d.train, 2, block, rng, tokens, targets);
  for (std::int32_t t : tokens)
    if (t < 0 || t >= static_cast<std::int32_t>(d.vocab.size())) __builtin_trap();
  return 0;
}
