// Tests for models/char_lm: sampling (deterministic, greedy with top_k = 1, prompt checked
// against the vocabulary) and the char-LM checkpoint (vocabulary in the user metadata).
#include "models/char_lm.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/test_util.h"
#include "train/data.h"

namespace {

using namespace gg;
using train::InputError;
using gg::test::contains;
using gg::test::golden;
using gg::test::TempDir;

const auto error_of = [](auto&& f) { return gg::test::error_of<gg::train::InputError>(f); };

// The golden ref_basic model (V = 13) with a 13-character vocabulary.
struct BasicModel {
  models::GptConfig config = models::load_gpt_config(golden("ref_basic.config.json"));
  ParamStore params;
  std::string vocab = "\nabcdefghijkl";
  BasicModel() {
    train::load_params(params, train::read_tensors(golden("ref_basic.weights.safetensors")), models::gpt_params(config),
                       "ref_basic");
  }
};

}  // namespace

TEST_CASE("char-LM checkpoint: the vocabulary travels in the user metadata and must fit the model") {
  TempDir dir;
  BasicModel m;
  train::Checkpoint ck;
  ck.model_kind = "gpt";
  ck.model_options = models::to_json(m.config);
  ck.params = m.params.all();
  ck.optimizer = "adamw";
  ck.user["vocab"] = "[0,10,32,97,98,99,100,101,102,103,104,105,255]";  // every byte value is a token
  const std::string path = dir.file("ck.safetensors");
  train::save_checkpoint(path, ck);
  const models::CharLmCheckpoint back = models::load_char_lm(path);
  CHECK(back.vocab == std::string("\0\n abcdefghi\xff", 13));
  CHECK(models::to_json(back.config) == models::to_json(m.config));
  CHECK(back.params.at("tok_emb.weight").to_vector() == m.params.at("tok_emb.weight").to_vector());

  for (const char* bad : {"[0,1,2]", "[0,1,", "0,1", "[256,1,2,3,4,5,6,7,8,9,10,11,12]", "[a]", ""}) {
    ck.user["vocab"] = bad;
    train::save_checkpoint(path, ck);
    const std::string msg = error_of([&] { models::load_char_lm(path); });
    INFO(bad << ": " << msg);
    CHECK(contains(msg, path));
    CHECK(contains(msg, "vocab"));
  }
  ck.user.erase("vocab");
  train::save_checkpoint(path, ck);
  CHECK(contains(error_of([&] { models::load_char_lm(path); }), "not a character-model checkpoint"));
}

TEST_CASE("sample_text: deterministic, greedy with top_k = 1, prompt checked") {
  BasicModel m;  // block_size 8
  models::SampleOptions o;
  o.prompt = "abc";
  o.tokens = 12;
  o.seed = 5;
  const std::string s1 = models::sample_text(m.config, m.params, m.vocab, o);
  const std::string s2 = models::sample_text(m.config, m.params, m.vocab, o);
  CHECK(s1 == s2);
  CHECK(s1.size() == 3 + 12);
  CHECK(s1.substr(0, 3) == "abc");
  for (char ch : s1) CHECK(m.vocab.find(ch) != std::string::npos);
  // Other seeds give other text (a random model at temperature 0.8 is far from greedy).
  bool differs = false;
  for (std::uint64_t seed = 6; seed < 10 && !differs; ++seed) {
    o.seed = seed;
    differs = models::sample_text(m.config, m.params, m.vocab, o) != s1;
  }
  CHECK(differs);

  // top_k = 1 is greedy decoding: the argmax of a plain (1, len) forward pass of the last
  // block_size tokens, whatever the seed or temperature.
  o.top_k = 1;
  o.seed = 1;
  o.temperature = 0.8;
  const std::string greedy = models::sample_text(m.config, m.params, m.vocab, o);
  o.seed = 99;
  o.temperature = 5.0;
  CHECK(models::sample_text(m.config, m.params, m.vocab, o) == greedy);

  train::CharData d;
  d.vocab = m.vocab;
  std::vector<std::int32_t> ids = d.encode("abc");
  const std::int64_t V = m.config.vocab_size;
  for (int step = 0; step < 12; ++step) {
    const std::int64_t len = std::min<std::int64_t>(m.config.block_size, std::int64_t(ids.size()));
    Graph g;
    const models::Gpt gpt = models::build_gpt(g, m.config, 1, len, /*with_loss=*/false);
    ParamStore ps = m.params;
    Executor ex(g, {gpt.logits.id}, ps);
    ex.set_input("tokens", std::span<const std::int32_t>(ids.data() + ids.size() - std::size_t(len), std::size_t(len)));
    ex.run();
    const float* last = ex.value(gpt.logits.id).f() + (len - 1) * V;
    ids.push_back(std::int32_t(std::max_element(last, last + V) - last));
  }
  CHECK(greedy == d.decode(ids));

  // Prompt outside the vocabulary, bad options.
  o.prompt = "abz";
  std::string msg = error_of([&] { models::sample_text(m.config, m.params, m.vocab, o); });
  CHECK(contains(msg, "z"));
  CHECK(contains(msg, "vocabulary"));
  o.prompt = "a";
  o.temperature = 0;
  CHECK(contains(error_of([&] { models::sample_text(m.config, m.params, m.vocab, o); }), "temperature"));
  o.temperature = 1;
  o.tokens = 0;
  CHECK(models::sample_text(m.config, m.params, m.vocab, o) == "a");
}

TEST_CASE("sample_texts: continuations side by side, the i-th the one sample_text draws with seed + i") {
  BasicModel m;  // block_size 8: 20 tokens slide the window
  models::SampleOptions o;
  o.prompt = "ab";
  o.tokens = 20;
  o.seed = 40;
  const std::vector<std::string> batch = models::sample_texts(m.config, m.params, m.vocab, o, 4);
  REQUIRE(batch.size() == 4);
  std::set<std::string> distinct(batch.begin(), batch.end());
  CHECK(distinct.size() > 1);  // four seeds, not one text four times
  for (std::size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(i);
    models::SampleOptions one = o;
    one.seed = o.seed + i;
    CHECK(batch[i] == models::sample_text(m.config, m.params, m.vocab, one));
  }
  // Greedy rows are all the same text.
  o.top_k = 1;
  const std::vector<std::string> greedy = models::sample_texts(m.config, m.params, m.vocab, o, 3);
  CHECK(greedy[0] == greedy[1]);
  CHECK(greedy[1] == greedy[2]);
  for (std::int64_t bad : {0, 4097})
    CHECK(contains(error_of([&] { models::sample_texts(m.config, m.params, m.vocab, o, bad); }),
                   fmt::format("--samples must be in [1, 4096], got {}", bad)));
  o.tokens = 1 << 20;  // 4096 rows of a million characters: refused before anything is allocated
  CHECK(contains(error_of([&] { models::sample_texts(m.config, m.params, m.vocab, o, 4096); }),
                 "--samples 4096 x 1048578 characters each is more than 67108864 characters in all"));
  models::GptConfig wide = m.config;  // a window of 2^10 tokens: 1025 rows pass more than 2^20 a forward
  wide.block_size = 1024;
  CHECK(contains(error_of([&] { models::sample_texts(wide, m.params, m.vocab, o, 1025); }),
                 "--samples 1025 with a window of 1024 tokens is 1049600 tokens a forward pass, more than 1048576"));
}
