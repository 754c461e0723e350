// Tests for models/seq2seq.cpp: the number-words generator and its held-out split, the
// model's parameter names and its equality with dsl::encoder / dsl::decoder, a gradient
// check at a tiny size, KV-cached greedy decoding against re-running the whole prefix, and
// a tiny model trained on reversal whose cross-attention lines up with the mirrored source.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "models/seq2seq.h"
#include "tests/dsl/dsl_test_util.h"
#include "tests/test_util.h"

using namespace gg;
using namespace gg::dsl;
using namespace gg::models;

namespace {

// An independent reading of the words back to the number: "hundred" multiplies what came
// since the last "thousand", "thousand" closes the thousands, "and" is filler.
std::int64_t parse_words(const std::string& words) {
  static const std::map<std::string, std::int64_t> value = [] {
    std::map<std::string, std::int64_t> v;
    const char* small[] = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                           "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                           "eighteen", "nineteen"};
    const char* tens[] = {"twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};
    for (int i = 0; i < 20; ++i) v[small[i]] = i;
    for (int i = 0; i < 8; ++i) v[tens[i]] = 20 + 10 * i;
    return v;
  }();
  std::int64_t total = 0, current = 0;
  std::string w;
  auto flush = [&] {
    if (w == "hundred") current *= 100;
    else if (w == "thousand") total += current * 1000, current = 0;
    else if (!w.empty() && w != "and") current += value.at(w);
    w.clear();
  };
  for (char ch : words) {
    if (ch == ' ' || ch == '-') flush();
    else w.push_back(ch);
  }
  flush();
  return total + current;
}

std::int64_t target_number(const Example& e) {
  std::int64_t n = 0;
  for (std::int32_t d : e.tgt) n = n * 10 + (d - 3);
  return n;
}

Seq2SeqConfig tiny_config() {
  Seq2SeqConfig c;
  c.src_vocab = 7, c.tgt_vocab = 9, c.d_model = 8, c.n_head = 2, c.enc_layers = 1, c.dec_layers = 2;
  c.max_src_len = 5, c.max_tgt_len = 6;
  return c;
}

}  // namespace

TEST_CASE("number_words: British wording with 'and', spot checks, range") {
  CHECK(number_words(307012) == "three hundred and seven thousand and twelve");
  CHECK(number_words(0) == "zero");
  CHECK(number_words(999999) == "nine hundred and ninety-nine thousand nine hundred and ninety-nine");
  CHECK(number_words(100) == "one hundred");
  CHECK(number_words(1000) == "one thousand");
  CHECK(number_words(42) == "forty-two");
  CHECK(number_words(5201) == "five thousand two hundred and one");
  CHECK(number_words(700000) == "seven hundred thousand");
  CHECK(number_words(110) == "one hundred and ten");
  CHECK_THROWS_AS(number_words(1000000), train::InputError);
  CHECK_THROWS_AS(number_words(-1), train::InputError);
  CHECK(encode_number_words("forty-two").size() == 2);
  CHECK_THROWS_AS(encode_number_words("forty-tw0"), train::InputError);
  // Every number reads back to itself and fits the task's 11 source tokens: the wording
  // is one-to-one over the whole range.
  std::size_t longest = 0;
  int wrong = 0;
  for (std::int64_t n = 0; n <= 999999; ++n) {
    const std::string w = number_words(n);
    wrong += parse_words(w) != n;
    longest = std::max(longest, encode_number_words(w).size());
  }
  CHECK(wrong == 0);
  CHECK(longest == 11);
}

TEST_CASE("number task: 1,000 distinct held-out numbers, seeded, never drawn for training") {
  Seq2SeqTask t = number_task(7, 1000);
  REQUIRE(t.held_out.size() == 1000);
  std::set<std::int64_t> held;
  for (const Example& e : t.held_out) held.insert(target_number(e));
  CHECK(held.size() == 1000);
  CHECK(held_out_numbers(7, 1000) == std::vector<std::int64_t>(held_out_numbers(7, 1000)));
  CHECK(held_out_numbers(8, 1000) != held_out_numbers(7, 1000));
  std::mt19937_64 rng(1);
  int hits = 0, small = 0;
  for (int i = 0; i < 50000; ++i) {
    Example e = t.draw_train(rng);
    const std::int64_t n = target_number(e);
    hits += held.count(n) > 0;
    small += n < 1000;
    CHECK_MESSAGE(e.src == encode_number_words(number_words(n)), n);
  }
  CHECK(hits == 0);
  CHECK(small > 5000);  // a third of the digit-count draws is below 1000
  // A batch: BOS + target in, target + EOS out, padding 0.
  train::Batch b = make_batch(t, std::span<const Example>(t.held_out).first(2));
  CHECK(b.at("src").shape() == Shape{2, 11});
  CHECK(b.at("tgt_in").shape() == Shape{2, 7});
  const std::int32_t* tin = b.at("tgt_in").i();
  const std::int32_t* tout = b.at("tgt_out").i();
  const std::size_t n0 = t.held_out[0].tgt.size();
  CHECK(tin[0] == seq_bos);
  CHECK(tin[1] == t.held_out[0].tgt[0]);
  CHECK(tout[n0] == seq_eos);
  for (std::size_t i = n0 + 1; i < 7; ++i) CHECK(tout[i] == seq_pad);
}

TEST_CASE("seq2seq parameters: dsl::encoder / dsl::decoder names, and the same logits as those stacks") {
  const Seq2SeqConfig c = tiny_config();
  std::set<std::string> names;
  for (const train::ParamInfo& p : seq2seq_params(c)) names.insert(p.name);
  CHECK(names.count("src_embed.weight"));
  CHECK(names.count("tgt_embed.weight"));
  CHECK(names.count("enc.0.attn.query.weight"));
  CHECK(names.count("enc.norm_f.weight"));
  CHECK(names.count("dec.1.self_attn.key.bias"));
  CHECK(names.count("dec.1.cross_attn.value.weight"));
  CHECK(names.count("dec.0.mlp.fc2.weight"));
  CHECK(names.count("dec.norm_f.bias"));
  CHECK(names.count("head.weight"));
  CHECK(names.size() == 2 + 16 + 2 + 2 * 26 + 2 + 2);

  // The model's decoder layers are dsl::decoder_block written out to return the weights:
  // the same graph built from dsl::encoder and dsl::decoder gives the same logits.
  const std::int64_t B = 2, Ts = 4, Tt = 5, D = c.d_model;
  Graph g;
  Expr src = input(g, "src", {B, Ts}, DType::i32), tin = input(g, "tgt_in", {B, Tt}, DType::i32);
  Seq2Seq m = build_seq2seq(c, src, tin, std::nullopt);
  CHECK(m.cross_weights.shape() == Shape{B, c.n_head, Tt, Ts});
  const TransformerOptions to{.n_head = c.n_head, .resid_init = normal_init(0.01f)};
  const float scale = std::sqrt(float(D));
  Expr mask = padding_mask_from_ids(src, seq_pad);
  Expr xs = embedding(src, c.src_vocab, D, "src_embed") * scale + slice(positional_encoding(g, c.max_src_len, D), 0, 0, Ts);
  Expr mem = encoder(xs, c.enc_layers, "enc", to, mask);
  Expr xt = embedding(tin, c.tgt_vocab, D, "tgt_embed") * scale + slice(positional_encoding(g, c.max_tgt_len, D), 0, 0, Tt);
  Expr ref = linear(decoder(xt, mem, c.dec_layers, "dec", to, mask), c.tgt_vocab, "head");
  ParamStore ps;
  test::randomize(g, ps, 0.4f);
  std::map<std::string, Tensor> in{{"src", Tensor::i32({B, Ts}, std::vector<std::int32_t>{1, 2, 3, 0, 4, 5, 6, 6})},
                                   {"tgt_in", Tensor::i32({B, Tt}, std::vector<std::int32_t>{1, 3, 4, 5, 0, 1, 8, 7, 0, 0})}};
  auto out = test::run(g, {m.logits, ref}, ps, in);
  float worst = 0;
  for (std::int64_t i = 0; i < out[0].numel(); ++i) worst = std::max(worst, std::abs(out[0].f()[i] - out[1].f()[i]));
  CHECK(worst == 0.f);
}

TEST_CASE("gradcheck: the seq2seq loss at a tiny size (B 2, Ts 4 with padding, Tt 3, D 8, 2 heads, 1+2 layers)") {
  const Seq2SeqConfig c = tiny_config();
  Graph g;
  Expr src = input(g, "src", {2, 4}, DType::i32), tin = input(g, "tgt_in", {2, 3}, DType::i32),
       tout = input(g, "tgt_out", {2, 3}, DType::i32);
  Seq2Seq m = build_seq2seq(c, src, tin, tout);
  ParamStore ps;
  test::randomize(g, ps, 0.4f);
  test::check_grads(g, m.loss, ps,
                    {{"src", Tensor::i32({2, 4}, std::vector<std::int32_t>{1, 2, 3, 0, 4, 5, 6, 6})},
                     {"tgt_in", Tensor::i32({2, 3}, std::vector<std::int32_t>{1, 3, 4, 1, 8, 0})},
                     {"tgt_out", Tensor::i32({2, 3}, std::vector<std::int32_t>{3, 4, 2, 8, 2, 0})}});
}

TEST_CASE("build_seq2seq refuses a source longer than max_src_len and a bad head count") {
  Seq2SeqConfig c = tiny_config();
  Graph g;
  Expr src = input(g, "src", {1, 6}, DType::i32), tin = input(g, "tgt_in", {1, 2}, DType::i32);
  CHECK_THROWS_WITH_AS(build_seq2seq(c, src, tin, std::nullopt), doctest::Contains("max_src_len = 5"), GraphError);
  c.n_head = 3;
  CHECK_THROWS_AS(seq2seq_model(c), train::InputError);
}

TEST_CASE("KV-cached greedy decoding gives the tokens and logits of re-running the whole prefix") {
  const Seq2SeqConfig c = tiny_config();
  train::Model m = seq2seq_model(c);
  const std::int64_t B = 3, Ts = 5;
  const train::Batch b{{"src", Tensor({B, Ts}, DType::i32)}, {"tgt_in", Tensor({B, 2}, DType::i32)}};
  m.declare(b);
  std::unique_ptr<Graph> g = m.graph_for(b, false);
  test::randomize(*g, m.params(), 0.6f, 5);  // larger than the initial values, so the tokens vary
  const std::vector<std::int32_t> src{1, 2, 3, 0, 0, 4, 5, 6, 6, 1, 3, 0, 0, 0, 0};
  GreedyDecoder dec(c, m.params(), B, Ts);
  std::vector<Tensor> cached_logits, full_logits;
  auto cached = dec.decode(src, &cached_logits);
  auto full = greedy_decode_recompute(c, m.params(), src, B, Ts, &full_logits);
  CHECK(cached == full);
  REQUIRE(cached_logits.size() == full_logits.size());
  CHECK(cached_logits.size() >= 2);
  float worst = 0;
  for (std::size_t t = 0; t < cached_logits.size(); ++t)
    for (std::int64_t i = 0; i < cached_logits[t].numel(); ++i)
      worst = std::max(worst, std::abs(cached_logits[t].f()[i] - full_logits[t].f()[i]));
  CHECK(worst < 1e-4f);
  std::set<std::int32_t> seen;
  for (auto& row : cached) seen.insert(row.begin(), row.end());
  CHECK(seen.size() >= 2);  // not a degenerate constant output
  // Decoding again with the same decoder gives the same answer (the caches start empty).
  CHECK(dec.decode(src) == cached);
  CHECK_THROWS_AS(dec.decode(std::vector<std::int32_t>(4, 1)), train::InputError);
}

TEST_CASE("a tiny model trained on reversal decodes held-out sequences and its cross-attention is mirrored") {
  test::TempDir dir;
  Seq2SeqOptions o;
  o.task = Seq2SeqOptions::Task::reverse;
  o.held_out = 200, o.eval_examples = 100, o.show = 2, o.symbols = 8, o.min_len = 3, o.max_len = 6;
  o.batch_size = 32;
  Seq2SeqConfig c;
  c.d_model = 32, c.n_head = 2, c.enc_layers = 1, c.dec_layers = 2;
  train::TrainOptions t = seq2seq_train_defaults();
  t.out_dir = dir.file("rev");
  t.steps = 300, t.warmup = 30, t.lr = 3e-3, t.eval_interval = 1000, t.quiet = true;
  t.final_eval_iters = 1;
  std::FILE* sink = std::fopen("/dev/null", "w");
  Seq2SeqResult r = run_seq2seq(o, c, t, sink);
  std::fclose(sink);
  INFO("exact match " << r.exact_match << ", alignment " << r.alignment.value_or(-1));
  REQUIRE(r.alignment);
  CHECK(*r.alignment >= 0.9);
  CHECK(r.exact_match >= 0.5);
}
