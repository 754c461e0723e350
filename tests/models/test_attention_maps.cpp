// Tests for models/attention_maps.cpp: the weights of every block's attention (rows sum to
// 1, zero above the diagonal) and their SVG heatmaps (L x H of them, masked cells white).
#include "models/attention_maps.h"

#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "tests/test_util.h"
#include "train/checkpoint.h"

using namespace gg;
using gg::test::golden;

namespace {
struct BasicModel {  // the golden ref_basic model (V = 13) with a 13-character vocabulary
  models::GptConfig config = models::load_gpt_config(golden("ref_basic.config.json"));
  ParamStore params;
  std::string vocab = "\nabcdefghijkl";
  BasicModel() {
    train::load_params(params, train::read_tensors(golden("ref_basic.weights.safetensors")), models::gpt_params(config),
                       "ref_basic");
  }
};
int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("attention_maps: one (H, T, T) map per block; rows sum to 1; the causal triangle is zero") {
  BasicModel b;  // block_size 8: a 10-character prompt keeps its last 8
  models::AttentionMaps m = models::attention_maps(b.config, b.params, b.vocab, "ab\nabcabcd");
  CHECK(m.text == "\nabcabcd");
  CHECK(m.n_layer == 2);
  CHECK(m.n_head == 4);
  CHECK(m.T == 8);
  REQUIRE(m.weights.size() == 2);
  for (std::int64_t l = 0; l < 2; ++l)
    for (std::int64_t h = 0; h < 4; ++h)
      for (std::int64_t q = 0; q < 8; ++q) {
        double row = 0;
        for (std::int64_t k = 0; k < 8; ++k) {
          row += m.at(l, h, q, k);
          if (k > q) CHECK(m.at(l, h, q, k) == 0.f);
        }
        CHECK(row == doctest::Approx(1.0).epsilon(1e-5));
        CHECK(m.at(l, h, q, 0) > 0.f);
      }
  CHECK(m.at(0, 0, 0, 0) == doctest::Approx(1.0));  // the first query sees only itself
}

TEST_CASE("attention_svg: L x H heatmaps, cells above the diagonal white, labels escaped") {
  BasicModel b;
  const std::string vocab = "<& abcdefghij";  // 13 characters, three that need care in SVG
  REQUIRE(vocab.size() == 13);
  models::AttentionMaps m = models::attention_maps(b.config, b.params, vocab, "a <b&c");
  const std::string all = models::attention_svg(m);
  CHECK(all.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(count(all, "<g class=\"heatmap\"") == 2 * 4);
  CHECK(count(all, "<rect x=") == 2 * 4 * 6 * 6);
  CHECK(count(all, "id=\"l1h3\"") == 1);
  CHECK(all.find("&lt;") != std::string::npos);
  CHECK(all.find("&amp;") != std::string::npos);
  CHECK(all.find("<b") == std::string::npos);  // no raw '<' from the text
  // A cell above the diagonal (query 1, key 4) is white; the diagonal of query 0 is the darkest blue.
  const std::string one = models::attention_svg(m, 1, 2);
  CHECK(count(one, "<g class=\"heatmap\"") == 1);
  std::smatch hit;
  REQUIRE(std::regex_search(one, hit, std::regex("fill=\"([^\"]+)\" data-q=\"1\" data-k=\"4\"")));
  CHECK(hit[1] == "rgb(255,255,255)");
  REQUIRE(std::regex_search(one, hit, std::regex("fill=\"([^\"]+)\" data-q=\"0\" data-k=\"0\"")));
  CHECK(hit[1] == "rgb(8,48,107)");
  CHECK_THROWS_AS(models::attention_svg(m, 2, 0), train::InputError);
}

TEST_CASE("attention_maps refuses an empty prompt and characters outside the vocabulary") {
  BasicModel b;
  CHECK_THROWS_WITH_AS(models::attention_maps(b.config, b.params, b.vocab, ""), doctest::Contains("--prompt: empty"),
                       train::InputError);
  CHECK_THROWS_WITH_AS(models::attention_maps(b.config, b.params, b.vocab, "abz"), doctest::Contains("--prompt"),
                       train::InputError);
}
