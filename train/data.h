// Character-level text data: the vocabulary (the distinct bytes of the text, sorted),
// encoding, a 90/10 train/validation split and random (B, T) batches of next-char targets.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gg::train {

struct CharData {
  std::string vocab;                      // vocab[id] = the byte of token id
  std::vector<std::int32_t> train, val;   // encoded splits
  std::int64_t size = 0;                  // bytes in the text

  // Reads `path`; throws InputError if it cannot be read, is empty, or either split is
  // shorter than block_size + 1 characters.
  static CharData load(const std::string& path, std::int64_t block_size, double train_fraction = 0.9);
  // Token ids of `text`; throws InputError naming a character not in the vocabulary.
  std::vector<std::int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;
};

// Fills tokens/targets (B, T) with random windows of `split`: targets are tokens shifted by one.
void sample_batch(const std::vector<std::int32_t>& split, std::int64_t B, std::int64_t T, std::mt19937_64& rng,
                  std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets);

}  // namespace gg::train
