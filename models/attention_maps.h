// Attention maps of the reference GPT: the weights of every block's attention for one
// prompt, and an SVG heatmap per layer and head (rows are queries, columns keys, the
// prompt's characters as labels). What `gradgraph attention` writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpt.h"
#include "seq2seq.h"

namespace gg::models {

struct AttentionMaps {
  std::string text;  // the characters fed: the prompt's last block_size
  std::int64_t n_layer = 0, n_head = 0, T = 0;
  std::vector<std::vector<float>> weights;  // [layer]: (H, T, T), weights[l][(h * T + q) * T + k]
  float at(std::int64_t layer, std::int64_t head, std::int64_t q, std::int64_t k) const {
    return weights[std::size_t(layer)][std::size_t((head * T + q) * T + k)];
  }
};

// The most characters attention_maps looks at: a 256 x 256 heatmap a head.
inline constexpr std::int64_t kMaxAttentionChars = 256;

// Runs `prompt` (its last min(block_size, kMaxAttentionChars) characters; every one in `vocab`) through the GPT
// and returns each block's attention weights. Throws InputError for an empty prompt or a
// character outside the vocabulary.
AttentionMaps attention_maps(const GptConfig& c, const ParamStore& params, const std::string& vocab,
                             const std::string& prompt);

// An SVG of one heatmap (layer, head), or, with layer = head = -1, of all of them in a grid
// (a row per layer, a column per head). Each heatmap is a <g class="heatmap" id="l<L>h<H>">
// of T x T <rect> cells with data-q/data-k attributes, white at weight 0 and dark blue at 1,
// each titled with its characters and value.
std::string attention_svg(const AttentionMaps& m, std::int64_t layer = -1, std::int64_t head = -1);

// ---- the encoder-decoder (kind "seq2seq") ----------------------------------------------------

// A checkpoint written by `gradgraph train-seq2seq`: the model, its parameters and the task
// it was trained on ("numbers" or "reverse", from the run's metadata).
struct Seq2SeqCheckpoint {
  Seq2SeqConfig config;
  ParamStore params;
  std::string task;
};
// Throws InputError naming the file for another model kind, a missing task or bad params.
Seq2SeqCheckpoint load_seq2seq(const std::string& path);

// Non-square maps with their own labels: weights (H, rows, cols), each row summing to 1.
struct CrossAttentionMaps {
  std::vector<std::string> rows, cols;  // decoder steps by output token; source tokens
  std::int64_t n_head = 0;
  std::vector<float> weights;  // weights[(h * rows + r) * cols + c]
  float at(std::int64_t head, std::int64_t r, std::int64_t c) const {
    return weights[std::size_t((head * std::int64_t(rows.size()) + r) * std::int64_t(cols.size()) + c)];
  }
};

// Tokenizes `source` with the checkpoint's task (number words; or letters a.. of the
// reversal alphabet), decodes it greedily, runs the model teacher-forced on (source, output)
// and returns the last decoder layer's cross-attention: a row per decoder step, labelled
// with the token it output (the last one "<eos>" when decoding stopped there). Throws
// InputError for an empty or too long source or an unknown token.
CrossAttentionMaps cross_attention_maps(const Seq2SeqCheckpoint& ck, const std::string& source);

// The SVG of one head's map: rows (queries) labelled on the left, columns (keys) on top,
// cells as in attention_svg (class "heatmap", id "h<H>", data-q / data-k).
std::string cross_attention_svg(const CrossAttentionMaps& m, std::int64_t head);

}  // namespace gg::models
