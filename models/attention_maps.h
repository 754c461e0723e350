// Attention maps of the reference GPT: the weights of every block's attention for one
// prompt, and an SVG heatmap per layer and head (rows are queries, columns keys, the
// prompt's characters as labels). What `gradgraph attention` writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpt.h"

namespace gg::models {

struct AttentionMaps {
  std::string text;  // the characters fed: the prompt's last block_size
  std::int64_t n_layer = 0, n_head = 0, T = 0;
  std::vector<std::vector<float>> weights;  // [layer]: (H, T, T), weights[l][(h * T + q) * T + k]
  float at(std::int64_t layer, std::int64_t head, std::int64_t q, std::int64_t k) const {
    return weights[std::size_t(layer)][std::size_t((head * T + q) * T + k)];
  }
};

// Runs `prompt` (its last block_size characters; every one in `vocab`) through the GPT
// and returns each block's attention weights. Throws InputError for an empty prompt or a
// character outside the vocabulary.
AttentionMaps attention_maps(const GptConfig& c, const ParamStore& params, const std::string& vocab,
                             const std::string& prompt);

// An SVG of one heatmap (layer, head), or, with layer = head = -1, of all of them in a grid
// (a row per layer, a column per head). Each heatmap is a <g class="heatmap" id="l<L>h<H>">
// of T x T <rect> cells with data-q/data-k attributes, white at weight 0 and dark blue at 1,
// each titled with its characters and value.
std::string attention_svg(const AttentionMaps& m, std::int64_t layer = -1, std::int64_t head = -1);

}  // namespace gg::models
