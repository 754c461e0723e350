// attention_maps(): one inference plan with every block's weights as outputs.
// attention_svg(): plain SVG text, one <rect> per cell.
#include "models/attention_maps.h"

#include <fmt/format.h>

#include <cmath>

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
  const std::int64_t T = std::min<std::int64_t>(c.block_size, std::int64_t(ids.size()));
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

// One heatmap with its top-left corner at (x0, y0).
std::string heatmap(const AttentionMaps& m, std::int64_t l, std::int64_t h, int x0, int y0) {
  std::string s = fmt::format("<g class=\"heatmap\" id=\"l{}h{}\">\n", l, h);
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">layer {} head {}</text>\n", x0, y0 + 12, l, h);
  const int gx = x0 + margin, gy = y0 + title + margin;
  for (std::int64_t i = 0; i < m.T; ++i) {
    const std::string ch = label(m.text[std::size_t(i)]);
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>\n",
                     gx + int(i) * cell + cell / 2, gy - 6, ch);  // key labels on top
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>\n", gx - 4,
                     gy + int(i) * cell + cell - 4, ch);  // query labels on the left
  }
  for (std::int64_t q = 0; q < m.T; ++q)
    for (std::int64_t k = 0; k < m.T; ++k) {
      const float v = m.at(l, h, q, k);
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" data-q=\"{}\" data-k=\"{}\">"
                       "<title>query {} '{}' key {} '{}': {:.4f}</title></rect>\n",
                       gx + int(k) * cell, gy + int(q) * cell, cell, cell, color(v), q, k, q,
                       label(m.text[std::size_t(q)]), k, label(m.text[std::size_t(k)]), v);
    }
  return s + "</g>\n";
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

}  // namespace gg::models
