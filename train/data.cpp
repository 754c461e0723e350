// Loading and batching character data.
#include "train/data.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "io/message.h"
#include "io/read_file.h"
#include "train/error.h"

namespace gg::train {

CharData CharData::load(const std::string& path, std::int64_t block_size, double train_fraction) {
  std::string text;
  try {
    text = io::read_file(path, max_text_bytes, "training text");
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
  return from_text(text, path, block_size, train_fraction);
}

CharData CharData::from_text(const std::string& text, const std::string& path_in, std::int64_t block_size,
                             double train_fraction) {
  const std::string path = io::cut(path_in, 200);
  if (block_size < 0) throw InputError(fmt::format("{}: block_size {} is negative", path, block_size));
  if (!(train_fraction > 0 && train_fraction < 1))
    throw InputError(fmt::format("{}: train_fraction {} is not between 0 and 1", path, train_fraction));
  if (text.empty()) throw InputError(fmt::format("{}: the training text is empty", path));
  CharData d;
  d.size = std::int64_t(text.size());
  std::array<bool, 256> seen{};
  for (unsigned char ch : text) seen[ch] = true;
  for (int ch = 0; ch < 256; ++ch)
    if (seen[std::size_t(ch)]) d.vocab.push_back(char(ch));
  std::vector<std::int32_t> ids = d.encode(text);
  const std::size_t n_train = std::size_t(double(ids.size()) * train_fraction);
  d.train.assign(ids.begin(), ids.begin() + std::ptrdiff_t(n_train));
  d.val.assign(ids.begin() + std::ptrdiff_t(n_train), ids.end());
  const std::size_t need = std::size_t(block_size) + 1;
  if (d.train.size() < need || d.val.size() < need)
    throw InputError(fmt::format("{}: {} characters is too short: each of the train/validation splits needs at least "
                                 "block_size + 1 = {} characters",
                                 path, text.size(), need));
  return d;
}

std::vector<std::int32_t> CharData::encode(const std::string& text) const {
  std::array<std::int32_t, 256> id;
  id.fill(-1);
  for (std::size_t i = 0; i < vocab.size(); ++i) id[static_cast<unsigned char>(vocab[i])] = std::int32_t(i);
  std::vector<std::int32_t> out;
  out.reserve(text.size());
  for (unsigned char ch : text) {
    if (id[ch] < 0)
      throw InputError(fmt::format("character {:?} (byte {}) is not in the model's vocabulary", std::string(1, char(ch)), int(ch)));
    out.push_back(id[ch]);
  }
  return out;
}

std::string CharData::decode(const std::vector<std::int32_t>& ids) const {
  std::string s;
  for (auto i : ids) s.push_back(vocab[std::size_t(i)]);
  return s;
}

void sample_batch(const std::vector<std::int32_t>& split, std::int64_t B, std::int64_t T, std::mt19937_64& rng,
                  std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) {
  tokens.resize(std::size_t(B * T));
  targets.resize(std::size_t(B * T));
  std::uniform_int_distribution<std::int64_t> start(0, std::int64_t(split.size()) - T - 1);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t s = start(rng);
    for (std::int64_t t = 0; t < T; ++t) {
      tokens[std::size_t(b * T + t)] = split[std::size_t(s + t)];
      targets[std::size_t(b * T + t)] = split[std::size_t(s + t + 1)];
    }
  }
}

}  // namespace gg::train
