// The encoder-decoder's two tasks (numbers to words, reversal): examples, held-out sets,
// vocabularies, batches, and reversal's attention-alignment score. The model, its decoder
// and the job are in seq2seq.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "models/seq2seq.h"

namespace gg::models {

using namespace gg::dsl;
using train::InputError;

// ---- tasks -------------------------------------------------------------------------------

namespace {

const char* const small_words[] = {"zero",    "one",     "two",       "three",    "four",
                                   "five",    "six",     "seven",     "eight",    "nine",
                                   "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                                   "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const char* const tens_words[] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};

std::string below_100(std::int64_t n) {
  if (n < 20) return small_words[n];
  return n % 10 == 0 ? tens_words[n / 10] : fmt::format("{}-{}", tens_words[n / 10], small_words[n % 10]);
}

std::string below_1000(std::int64_t n) {  // n in [1, 999]
  if (n < 100) return below_100(n);
  const std::int64_t rest = n % 100;
  return rest == 0 ? fmt::format("{} hundred", small_words[n / 100])
                   : fmt::format("{} hundred and {}", small_words[n / 100], below_100(rest));
}

// Half uniform over [0, 1e6), half with a uniform number of digits (1..6), so that small
// numbers, rare under the uniform draw, are seen.
std::int64_t draw_number(std::mt19937_64& rng) {
  if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) return std::uniform_int_distribution<std::int64_t>(0, 999999)(rng);
  const int digits = std::uniform_int_distribution<int>(1, 6)(rng);
  const std::int64_t lo = digits == 1 ? 0 : std::int64_t(std::pow(10, digits - 1)), hi = std::int64_t(std::pow(10, digits)) - 1;
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

Example number_example(std::int64_t n) {
  Example e;
  e.src = encode_number_words(number_words(n));
  for (char ch : std::to_string(n)) e.tgt.push_back(std::int32_t(3 + (ch - '0')));
  return e;
}

}  // namespace

std::string number_words(std::int64_t n) {
  if (n < 0 || n > 999999) throw InputError(fmt::format("number_words: {} is outside [0, 999999]", n));
  if (n == 0) return "zero";
  const std::int64_t th = n / 1000, rest = n % 1000;
  if (th == 0) return below_1000(rest);
  if (rest == 0) return below_1000(th) + " thousand";
  if (rest < 100) return fmt::format("{} thousand and {}", below_1000(th), below_100(rest));
  return fmt::format("{} thousand {}", below_1000(th), below_1000(rest));
}

const std::vector<std::string>& number_vocab() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> w{"<pad>"};
    for (const char* s : small_words) w.push_back(s);
    for (int i = 2; i < 10; ++i) w.push_back(tens_words[i]);
    w.push_back("hundred"), w.push_back("thousand"), w.push_back("and");
    return w;
  }();
  return v;
}

std::vector<std::int32_t> encode_number_words(const std::string& words) {
  const std::vector<std::string>& v = number_vocab();
  std::vector<std::int32_t> ids;
  std::string w;
  auto flush = [&] {
    if (w.empty()) return;
    auto it = std::find(v.begin() + 1, v.end(), w);
    if (it == v.end()) throw InputError(fmt::format("encode_number_words: unknown word '{}'", w));
    ids.push_back(std::int32_t(it - v.begin()));
    w.clear();
  };
  for (char ch : words) {
    if (ch == ' ' || ch == '-') flush();
    else w.push_back(ch);
  }
  flush();
  return ids;
}

std::vector<std::int64_t> held_out_numbers(std::uint64_t seed, std::int64_t held_out) {
  if (held_out < 1 || held_out > 100000) throw InputError(fmt::format("held_out must be in [1, 100000], got {}", held_out));
  std::mt19937_64 rng(seed);
  std::set<std::int64_t> seen;
  std::vector<std::int64_t> v;
  // Uniform over the range: the digit-count draw would hold out nearly every number below
  // 100 (0..9 each come up once in 120 draws) and leave none of them for training.
  std::uniform_int_distribution<std::int64_t> uniform(0, 999999);
  while (std::int64_t(v.size()) < held_out) {
    const std::int64_t n = uniform(rng);
    if (seen.insert(n).second) v.push_back(n);
  }
  return v;
}

Seq2SeqTask number_task(std::uint64_t seed, std::int64_t held_out) {
  Seq2SeqTask t;
  t.name = "numbers";
  t.src_vocab = std::int64_t(number_vocab().size());
  t.tgt_vocab = 13;
  t.src_len = 11;  // "seven hundred and seventy-seven thousand seven hundred and seventy-seven"
  t.tgt_len = 7;   // six digits and EOS
  const std::vector<std::int64_t> nums = held_out_numbers(seed, held_out);
  auto excluded = std::make_shared<std::set<std::int64_t>>(nums.begin(), nums.end());
  for (std::int64_t n : nums) t.held_out.push_back(number_example(n));
  t.draw_train = [excluded](std::mt19937_64& rng) {
    std::int64_t n = draw_number(rng);
    while (excluded->count(n)) n = draw_number(rng);
    return number_example(n);
  };
  t.show_src = [](const std::vector<std::int32_t>& ids) {
    std::string s;
    for (std::int32_t i : ids) s += (s.empty() ? "" : " ") + number_vocab()[std::size_t(i)];
    return s;
  };
  t.show_tgt = [](const std::vector<std::int32_t>& ids) {
    std::string s;
    for (std::int32_t i : ids) s += i >= 3 && i <= 12 ? char('0' + i - 3) : '?';
    return s;
  };
  return t;
}

Seq2SeqTask reverse_task(std::uint64_t seed, std::int64_t held_out, std::int64_t symbols, std::int64_t min_len,
                         std::int64_t max_len) {
  if (symbols < 2 || symbols > 26 || min_len < 1 || max_len < min_len || max_len > 64)
    throw InputError(fmt::format("reverse task: wants symbols in [2, 26] and 1 <= min_len <= max_len <= 64, got {}, {}, {}",
                                 symbols, min_len, max_len));
  // The distinct sequences there are: sum over lengths of symbols^length (capped: it only
  // matters below the largest held-out set).
  std::int64_t distinct = 0;
  for (std::int64_t n = min_len; n <= max_len && distinct <= 100000; ++n) {
    std::int64_t k = 1;
    for (std::int64_t i = 0; i < n && k <= 100000; ++i) k *= symbols;
    distinct += k;
  }
  if (held_out >= distinct)
    throw InputError(fmt::format("held_out = {} leaves no sequence to train on: the reverse task over {} symbols of "
                                 "lengths {} to {} has {} distinct sequences", held_out, symbols, min_len, max_len,
                                 distinct));
  Seq2SeqTask t;
  t.name = "reverse";
  t.src_vocab = symbols + 1;  // 0 = PAD, symbol k = k + 1
  t.tgt_vocab = symbols + 3;  // symbol k = k + 3
  t.src_len = max_len;
  t.tgt_len = max_len + 1;
  auto draw = [=](std::mt19937_64& rng) {
    Example e;
    const std::int64_t n = std::uniform_int_distribution<std::int64_t>(min_len, max_len)(rng);
    for (std::int64_t i = 0; i < n; ++i) e.src.push_back(std::int32_t(1 + std::uniform_int_distribution<int>(0, int(symbols) - 1)(rng)));
    for (std::int64_t i = n - 1; i >= 0; --i) e.tgt.push_back(e.src[std::size_t(i)] + 2);
    return e;
  };
  std::mt19937_64 rng(seed);
  auto excluded = std::make_shared<std::set<std::vector<std::int32_t>>>();
  for (int tries = 0; std::int64_t(t.held_out.size()) < held_out && tries < 100 * held_out; ++tries) {
    Example e = draw(rng);
    if (excluded->insert(e.src).second) t.held_out.push_back(e);
  }
  if (std::int64_t(t.held_out.size()) < held_out)
    throw InputError(fmt::format("reverse task: cannot draw {} distinct held-out sequences", held_out));
  t.draw_train = [excluded, draw](std::mt19937_64& rng) {
    Example e = draw(rng);
    while (excluded->count(e.src)) e = draw(rng);
    return e;
  };
  t.show_src = [](const std::vector<std::int32_t>& ids) {
    std::string s;
    for (std::int32_t i : ids) s += char('a' + i - 1);
    return s;
  };
  t.show_tgt = [](const std::vector<std::int32_t>& ids) {
    std::string s;
    for (std::int32_t i : ids) s += i >= 3 ? char('a' + i - 3) : '?';
    return s;
  };
  return t;
}

train::Batch make_batch(const Seq2SeqTask& task, std::span<const Example> ex) {
  const std::int64_t B = std::int64_t(ex.size()), Ts = task.src_len, Tt = task.tgt_len;
  std::vector<std::int32_t> src(std::size_t(B * Ts), seq_pad), tin(std::size_t(B * Tt), seq_pad),
      tout(std::size_t(B * Tt), seq_pad);
  for (std::int64_t b = 0; b < B; ++b) {
    const Example& e = ex[std::size_t(b)];
    if (std::int64_t(e.src.size()) > Ts || std::int64_t(e.tgt.size()) + 1 > Tt || e.src.empty())
      throw InputError(fmt::format("make_batch: an example of length {} -> {} does not fit {} -> {}", e.src.size(),
                                   e.tgt.size(), Ts, Tt - 1));
    std::copy(e.src.begin(), e.src.end(), src.begin() + b * Ts);
    tin[std::size_t(b * Tt)] = seq_bos;
    std::copy(e.tgt.begin(), e.tgt.end(), tin.begin() + b * Tt + 1);
    std::copy(e.tgt.begin(), e.tgt.end(), tout.begin() + b * Tt);
    tout[std::size_t(b * Tt) + e.tgt.size()] = seq_eos;
  }
  return {{"src", Tensor::i32({B, Ts}, src)}, {"tgt_in", Tensor::i32({B, Tt}, tin)}, {"tgt_out", Tensor::i32({B, Tt}, tout)}};
}

double exact_match(const Seq2SeqConfig& c, ParamStore& params, const Seq2SeqTask& task, std::span<const Example> ex,
                   std::int64_t chunk, std::vector<std::vector<std::int32_t>>* decoded) {
  if (chunk < 1) throw InputError(fmt::format("exact_match: chunk must be >= 1, got {}", chunk));
  if (ex.empty()) return 0;
  std::map<std::int64_t, GreedyDecoder> decoders;  // by batch size
  std::int64_t right = 0;
  if (decoded) decoded->clear();
  for (std::size_t i = 0; i < ex.size(); i += std::size_t(chunk)) {
    const std::int64_t B = std::min<std::int64_t>(chunk, std::int64_t(ex.size() - i));
    auto it = decoders.find(B);
    if (it == decoders.end()) it = decoders.emplace(B, GreedyDecoder(c, params, B, task.src_len)).first;
    const train::Batch b = make_batch(task, ex.subspan(i, std::size_t(B)));
    const Tensor& src = b.at("src");
    auto out = it->second.decode(std::span<const std::int32_t>(src.i(), std::size_t(src.numel())));
    for (std::int64_t j = 0; j < B; ++j) {
      right += out[std::size_t(j)] == ex[i + std::size_t(j)].tgt;
      if (decoded) decoded->push_back(out[std::size_t(j)]);
    }
  }
  return double(right) / double(ex.size());
}

double reverse_alignment(train::Model& m, const Seq2SeqTask& task, std::span<const Example> ex) {
  const train::Batch b = make_batch(task, ex);
  const Tensor w = m.evaluate(b).at("cross_weights");  // w: (B, H, Tt, Ts)
  const std::int64_t B = w.shape()[0], H = w.shape()[1], Tt = w.shape()[2], Ts = w.shape()[3];
  std::int64_t steps = 0, aligned = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const std::int64_t len = std::int64_t(ex[std::size_t(i)].src.size());
    for (std::int64_t t = 0; t < len && t < Tt; ++t) {
      std::int64_t best = 0;
      double best_w = -1;
      for (std::int64_t k = 0; k < Ts; ++k) {
        double sum = 0;
        for (std::int64_t h = 0; h < H; ++h) sum += w.f()[((i * H + h) * Tt + t) * Ts + k];
        if (sum > best_w) best_w = sum, best = k;
      }
      ++steps;
      aligned += best == len - 1 - t;
    }
  }
  return steps ? double(aligned) / double(steps) : 0;
}

}  // namespace gg::models
