// Character-level text data: the vocabulary (the distinct bytes of the text, sorted),
// encoding, a 90/10 train/validation split and random (B, T) batches of next-char targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gg::train {

struct CharData {
  std::string vocab;                      // vocab[id] = the byte of token id
  std::vector<std::int32_t> train, val;   // encoded splits
  std::int64_t size = 0;                  // bytes in the text

  // The largest training text load() reads (1 GiB): /dev/zero or a huge file is refused.
  static constexpr std::size_t max_text_bytes = std::size_t(1) << 30;

  // Reads `path` (a regular file of at most max_text_bytes; a FIFO is refused without
  // blocking) and calls from_text. Throws InputError naming the file and the problem.
  static CharData load(const std::string& path, std::int64_t block_size, double train_fraction = 0.9);
  // The same from text in memory; `name` names it in messages. Requires block_size >= 0
  // and 0 < train_fraction < 1; throws InputError if the text is empty or either split is
  // shorter than block_size + 1 characters.
  static CharData from_text(const std::string& text, const std::string& name, std::int64_t block_size,
                            double train_fraction = 0.9);
  // Token ids of `text`; throws InputError naming a character not in the vocabulary.
  std::vector<std::int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;
};

// Fills tokens/targets (B, T) with random windows of `split`: targets are tokens shifted by one.
void sample_batch(const std::vector<std::int32_t>& split, std::int64_t B, std::int64_t T, std::mt19937_64& rng,
                  std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets);

}  // namespace gg::train
