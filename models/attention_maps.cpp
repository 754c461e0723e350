// attention_maps(): one inference plan with every block's weights as outputs.
// attention_svg(): plain SVG text, one <rect> per cell.
#include "models/attention_maps.h"

#include <fmt/format.h>

#include <cmath>

#include "io/message.h"
#include "train/checkpoint.h"
#include "train/data.h"

namespace gg::models {

using train::InputError;

AttentionMaps attention_maps(const GptConfig& c, const ParamStore& store, const std::string& vocab,
                             const std::string& prompt) {
  if (prompt.empty()) throw InputError("--prompt: empty; attention needs at least one character");
  train::CharData d;
  d.vocab = vocab;
  std::vector<std::int32_t> ids;
  try {
    ids = d.encode(prompt);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--prompt: {}", e.what()));
  }
  // A heatmap of more than kMaxAttentionChars characters is neither readable nor small (T x T
  // weights a head): the prompt's last characters, whatever the context allows.
  const std::int64_t T = std::min({c.block_size, std::int64_t(ids.size()), kMaxAttentionChars});
  ids.erase(ids.begin(), ids.end() - T);
  Graph g;
  Gpt m = build_gpt(g, c, 1, T, /*with_loss=*/false, /*training=*/false);
  std::vector<NodeId> outs;
  for (const dsl::Expr& w : m.attn_weights) outs.push_back(w.id);
  ParamStore params = store;
  Executor ex(g, outs, params);
  ex.set_input("tokens", std::span<const std::int32_t>(ids));
  ex.run();
  AttentionMaps r;
  r.text = prompt.substr(prompt.size() - std::size_t(T));
  r.n_layer = c.n_layer;
  r.n_head = c.n_head;
  r.T = T;
  for (NodeId id : outs) r.weights.push_back(ex.get(id).to_vector());  // (1, H, T, T)
  return r;
}

namespace {
std::string label(char ch) {
  switch (ch) {
    case '\n': return "\\n";
    case ' ': return "\u2423";  // open box
    case '&': return "&amp;";
    case '<': return "&lt;";
    case '>': return "&gt;";
    case '"': return "&quot;";
    case '\'': return "&apos;";
    default:
      if (static_cast<unsigned char>(ch) < 32 || static_cast<unsigned char>(ch) >= 127)
        return fmt::format("\\x{:02x}", static_cast<unsigned char>(ch));
      return std::string(1, ch);
  }
}
// White at 0, dark blue (8, 48, 107) at 1.
std::string color(float v) {
  const double t = std::clamp(double(v), 0.0, 1.0);
  auto mix = [&](int hi) { return int(std::lround(255.0 + t * (hi - 255.0))); };
  return fmt::format("rgb({},{},{})", mix(8), mix(48), mix(107));
}
constexpr int cell = 16, margin = 28, title = 18;

std::string escape(const std::string& t) {
  std::string r;
  for (char ch : t) r += label(ch);
  return r;
}

// One heatmap with its top-left corner at (x0, y0): rows x cols cells, value(q, k).
template <class F>
std::string heatmap(const std::string& id, const std::string& caption, const std::vector<std::string>& rows,
                    const std::vector<std::string>& cols, F value, int x0, int y0, int left = margin, int top = margin) {
  std::string s = fmt::format("<g class=\"heatmap\" id=\"{}\">\n", id);
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">{}</text>\n", x0, y0 + 12, caption);
  const int gx = x0 + left, gy = y0 + title + top;
  for (std::size_t i = 0; i < cols.size(); ++i) {  // key labels on top; words turned upward
    const int x = gx + int(i) * cell + cell / 2;
    if (top == margin)
      s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>\n", x, gy - 6, cols[i]);
    else
      s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" transform=\"rotate(-90 {} {})\">{}</text>\n", x + 4,
                       gy - 4, x + 4, gy - 4, cols[i]);
  }
  for (std::size_t i = 0; i < rows.size(); ++i)  // query labels on the left
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>\n", gx - 4,
                     gy + int(i) * cell + cell - 4, rows[i]);
  for (std::size_t q = 0; q < rows.size(); ++q)
    for (std::size_t k = 0; k < cols.size(); ++k) {
      const float v = value(std::int64_t(q), std::int64_t(k));
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" data-q=\"{}\" data-k=\"{}\">"
                       "<title>query {} '{}' key {} '{}': {:.4f}</title></rect>\n",
                       gx + int(k) * cell, gy + int(q) * cell, cell, cell, color(v), q, k, q, rows[q], k, cols[k], v);
    }
  return s + "</g>\n";
}

std::string heatmap(const AttentionMaps& m, std::int64_t l, std::int64_t h, int x0, int y0) {
  std::vector<std::string> labels;
  for (char ch : m.text) labels.push_back(label(ch));
  return heatmap(fmt::format("l{}h{}", l, h), fmt::format("layer {} head {}", l, h), labels, labels,
                 [&](std::int64_t q, std::int64_t k) { return m.at(l, h, q, k); }, x0, y0);
}
}  // namespace

std::string attention_svg(const AttentionMaps& m, std::int64_t layer, std::int64_t head) {
  const bool all = layer < 0 && head < 0;
  if (!all && (layer < 0 || layer >= m.n_layer || head < 0 || head >= m.n_head))
    throw InputError(fmt::format("attention_svg: layer {} head {} outside {} layers x {} heads", layer, head, m.n_layer,
                                 m.n_head));
  const int w = margin + int(m.T) * cell + 12, h = title + margin + int(m.T) * cell + 12;
  const std::int64_t rows = all ? m.n_layer : 1, cols = all ? m.n_head : 1;
  std::string s = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                              "font-family=\"monospace\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
                              cols * w, rows * h);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      s += heatmap(m, all ? r : layer, all ? c : head, int(c) * w, int(r) * h);
  return s + "</svg>\n";
}

// ---- the encoder-decoder ----------------------------------------------------------------------

Seq2SeqCheckpoint load_seq2seq(const std::string& path) {
  train::Checkpoint ck = train::load_checkpoint(path);
  if (ck.model_kind != "seq2seq")
    throw InputError(fmt::format("{}: not an encoder-decoder checkpoint (model {})", io::cut(path, 80),
                                 io::in_quotes(ck.model_kind, 40)));
  Seq2SeqCheckpoint r;
  train::read_json(ck.model_options, path + " (model_options)", {train::bind(r.config)}, /*require_all=*/true);
  if (!ck.user.count("task") || (ck.user["task"] != "numbers" && ck.user["task"] != "reverse"))
    throw InputError(fmt::format("{}: no task 'numbers' or 'reverse' in the metadata", path));
  r.task = ck.user["task"];
  train::load_params(r.params, ck.params, seq2seq_params(r.config), path);
  return r;
}

CrossAttentionMaps cross_attention_maps(const Seq2SeqCheckpoint& ck, const std::string& source) {
  const Seq2SeqConfig& c = ck.config;
  const bool numbers = ck.task == "numbers";
  std::vector<std::int32_t> src;
  CrossAttentionMaps r;
  if (numbers) {
    try {
      src = encode_number_words(source);
    } catch (const InputError& e) {
      throw InputError(fmt::format("--source: {}", e.what()));
    }
    for (std::int32_t id : src) r.cols.push_back(number_vocab()[std::size_t(id)]);
  } else {
    const std::int64_t symbols = c.src_vocab - 1;  // reverse_task: 0 = PAD, letter k = k + 1
    for (char ch : source) {
      if (ch < 'a' || ch >= 'a' + symbols)
        throw InputError(fmt::format("--source: '{}' is not one of the {} letters a..{} of the reversal task",
                                     label(ch), symbols, char('a' + symbols - 1)));
      src.push_back(std::int32_t(ch - 'a' + 1));
      r.cols.push_back(std::string(1, ch));
    }
  }
  const std::int64_t Ts = std::int64_t(src.size());
  if (Ts < 1 || Ts > c.max_src_len)
    throw InputError(fmt::format("--source: {} tokens; the model takes 1 to {}", Ts, c.max_src_len));
  train::Model m = seq2seq_model(c);
  m.params() = ck.params;
  const std::vector<std::int32_t> out = GreedyDecoder(c, m.params(), 1, Ts).decode(src)[0];
  // Teacher forcing on the decoded output: step t reads BOS + out[:t] and outputs out[t]
  // (EOS after the last, when it fits in max_tgt_len).
  const std::int64_t Tt = std::min<std::int64_t>(std::int64_t(out.size()) + 1, c.max_tgt_len);
  std::vector<std::int32_t> tgt_in{seq_bos};
  for (std::int64_t t = 0; t < Tt; ++t) {
    const std::int32_t o = t < std::int64_t(out.size()) ? out[std::size_t(t)] : seq_eos;
    if (t + 1 < Tt) tgt_in.push_back(o);
    r.rows.push_back(o == seq_eos ? "<eos>"
                     : o == seq_bos ? "<bos>"
                     : o == seq_pad ? "<pad>"
                     : numbers    ? std::string(1, char('0' + o - 3))
                                  : std::string(1, char('a' + o - 3)));
  }
  train::Batch b{{"src", Tensor::i32({1, Ts}, src)},
                 {"tgt_in", Tensor::i32({1, Tt}, tgt_in)}};
  const Tensor w = m.evaluate(b).at("cross_weights");  // (1, H, Tt, Ts)
  r.n_head = w.shape()[1];
  r.weights = w.to_vector();
  return r;
}

std::string cross_attention_svg(const CrossAttentionMaps& m, std::int64_t head) {
  if (head < 0 || head >= m.n_head)
    throw InputError(fmt::format("cross_attention_svg: head {} outside {} heads", head, m.n_head));
  std::size_t widest = 1, tallest = 1;
  for (const std::string& r : m.rows) widest = std::max(widest, r.size());
  for (const std::string& c : m.cols) tallest = std::max(tallest, c.size());
  const int left = std::max(margin, 8 + 7 * int(widest)), top = tallest > 1 ? 8 + 7 * int(tallest) : margin;
  const int w = std::max(left + int(m.cols.size()) * cell + 12, 170), h = title + top + int(m.rows.size()) * cell + 12;
  std::string s = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                              "font-family=\"monospace\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
                              w, h);
  std::vector<std::string> rows, cols;
  for (const std::string& r : m.rows) rows.push_back(escape(r));
  for (const std::string& c : m.cols) cols.push_back(escape(c));
  s += heatmap(fmt::format("h{}", head), fmt::format("cross-attention head {}", head), rows, cols,
               [&](std::int64_t q, std::int64_t k) { return m.at(head, q, k); }, 0, 0, left, top);
  return s + "</svg>\n";
}

}  // namespace gg::models
