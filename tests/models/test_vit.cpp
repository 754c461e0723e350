// Tests for models/digits and models/vit: the loader's one-line errors, the fixed split,
// the ViT's parameter table, a gradient check of the whole model at a tiny size, and
// short training runs of the train-vit job that beat chance (both patch sizes).
#include "models/vit.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "models/digits.h"
#include "tests/dsl/dsl_test_util.h"
#include "tests/test_util.h"

namespace {

using namespace gg;
using gg::test::contains;
using gg::test::TempDir;
using train::InputError;

std::string load_error(const std::string& path) {
  try {
    models::load_digits(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A valid line: 64 pixels then the label.
std::string line(int label, int pixel = 3) {
  std::string s;
  for (int i = 0; i < 64; ++i) s += std::to_string((pixel + i) % 17) + ",";
  return s + std::to_string(label);
}

std::map<std::string, Shape> shapes_of(const std::vector<train::ParamInfo>& table) {
  std::map<std::string, Shape> m;
  for (const train::ParamInfo& p : table) m[p.name] = p.shape;
  return m;
}

}  // namespace

TEST_CASE("digits: the bundled file loads: 1,797 images of 64 pixels in [0, 1], labels 0..9") {
  const models::Digits d = models::load_digits(models::default_digits_path());
  CHECK(d.size() == 1797);
  CHECK(d.images.size() == 1797u * 64u);
  CHECK(*std::min_element(d.images.begin(), d.images.end()) == 0.f);
  CHECK(*std::max_element(d.images.begin(), d.images.end()) == 1.f);
  std::set<int> labels(d.labels.begin(), d.labels.end());
  CHECK(labels == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("digits: every bad line is refused with <file>:<line> and the problem") {
  TempDir dir;
  struct Case {
    std::string text, wants;
  };
  std::string short_line = line(1);
  short_line.erase(short_line.rfind(','));  // 64 fields
  std::string bad_pixel = line(2);
  bad_pixel.replace(0, 1, "17");
  std::string word = line(2);
  word.replace(0, 1, "x");
  std::string negative = line(2);
  negative.replace(0, 1, "-1");
  const Case cases[] = {
      {line(0) + "\n" + short_line + "\n", ":2: expected 65 comma-separated fields"},
      {line(0) + "\n" + line(1) + "\n" + bad_pixel + "\n", ":3: pixel 0 (field 1) is 17, out of range 0..16"},
      {word + "\n", ":1: field 1 is 'x', not an integer"},
      {negative + "\n", ":1: pixel 0 (field 1) is -1"},
      {line(10) + "\n", ":1: label 10 is out of range 0..9"},
      {line(3) + ",\n", ":1: expected 65"},
      {line(3) + "\n\n" + line(4) + "\n", ":2: empty line"},
      {line(3).substr(0, line(3).size() - 1) + "4.5\n", ":1: field 65 is '4.5', not an integer"},
      {"", "no images"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string path = dir.file("d" + std::to_string(n++) + ".csv");
    std::ofstream(path, std::ios::binary) << c.text;
    const std::string err = load_error(path);
    INFO("case " << n << ": " << err);
    CHECK(contains(err, path));
    CHECK(contains(err, c.wants));
    CHECK(err.find('\n') == std::string::npos);
  }
  CHECK(contains(load_error(dir.file("missing.csv")), "missing.csv: no such file"));
  CHECK(contains(load_error(dir.path.string()), "is a directory"));
  // Windows line ends are fine.
  const std::string crlf = dir.file("crlf.csv");
  std::ofstream(crlf, std::ios::binary) << line(7) << "\r\n" << line(8) << "\r\n";
  const models::Digits d = models::load_digits(crlf);
  CHECK(d.labels == std::vector<std::int32_t>{7, 8});
}

TEST_CASE("digits: the 80/20 split is fixed, disjoint and covers every row") {
  const models::DigitsSplit s = models::split_rows(1797);
  CHECK(s.test.size() == 359);
  CHECK(s.train.size() == 1438);
  std::set<std::int64_t> all(s.train.begin(), s.train.end());
  for (std::int64_t i : s.test) CHECK(all.insert(i).second);  // no test row is a training row
  CHECK(all.size() == 1797);
  CHECK(*all.begin() == 0);
  CHECK(*all.rbegin() == 1796);
  // The same split every time; another seed gives another one.
  const models::DigitsSplit again = models::split_rows(1797);
  CHECK(again.test == s.test);
  CHECK(again.train == s.train);
  CHECK(models::split_rows(1797, 0.2, 7).test != s.test);
  // Pinned: mt19937_64's output is fixed by the standard and the draw is rng() % (i + 1), so
  // these are the test rows on every platform. A change here changes every published number.
  const std::vector<std::int64_t> first{s.test.begin(), s.test.begin() + 6};
  INFO("first test rows: " << first[0] << ", " << first[1] << ", " << first[2] << ", " << first[3] << ", " << first[4]
                            << ", " << first[5]);
  CHECK(first == std::vector<std::int64_t>{347, 1405, 930, 703, 489, 182});
  // Bad fractions are refused.
  CHECK_THROWS_AS(models::split_rows(1797, 0.0), InputError);
  CHECK_THROWS_AS(models::split_rows(1797, 1.0), InputError);
  CHECK_THROWS_AS(models::split_rows(2, 0.1), InputError);
}

TEST_CASE("vit: parameter names and shapes follow the options") {
  models::VitConfig c;  // patch 4, d_model 64, 2 layers, sinusoidal, mean pooling
  std::map<std::string, Shape> p = shapes_of(models::vit_params(c));
  CHECK(p.at("patch_emb.weight") == Shape{64, 16});
  CHECK(p.at("patch_emb.bias") == Shape{64});
  CHECK(p.at("blocks.0.attn.query.weight") == Shape{64, 64});
  CHECK(p.at("blocks.1.mlp.fc1.weight") == Shape{256, 64});
  CHECK(p.at("norm_f.weight") == Shape{64});
  CHECK(p.at("head.weight") == Shape{10, 64});
  CHECK(p.at("head.bias") == Shape{10});
  CHECK(p.count("pos_emb.weight") == 0);  // sinusoidal: a constant, no parameter
  CHECK(p.count("cls_token") == 0);
  CHECK(p.count("blocks.2.attn.query.weight") == 0);

  c.patch = 2;
  c.pos = models::VitConfig::Pos::learned;
  c.pool = models::VitConfig::Pool::cls;
  c.d_model = 32;
  p = shapes_of(models::vit_params(c));
  CHECK(p.at("patch_emb.weight") == Shape{32, 4});
  CHECK(p.at("pos_emb.weight") == Shape{16, 32});  // one row per patch of the 4x4 grid
  CHECK(p.at("cls_token") == Shape{1, 1, 32});
  CHECK(p.at("head.weight") == Shape{10, 32});
}

TEST_CASE("vit: bad options and images are refused, naming the key or the shape") {
  auto error_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  models::VitConfig c;
  c.patch = 3;
  CHECK(contains(error_of([&] { models::vit_model(c); }), "key 'patch': 3 does not divide image_size = 8"));
  c = {};
  c.d_model = 36;
  c.n_head = 8;
  CHECK(contains(error_of([&] { models::vit_model(c); }), "key 'd_model': 36 is not divisible by n_head = 8"));
  c = {};
  c.d_model = 30;
  c.n_head = 2;
  CHECK(contains(error_of([&] { models::vit_model(c); }), "key 'd_model': 30 is not divisible by 4"));
  c = {};
  train::Model m = models::vit_model(c);
  CHECK(contains(error_of([&] { m.declare({{"images", Tensor({2, 8, 7}, DType::f32)}}); }),
                 "vit: images must be (B, 8, 8), got (2, 8, 7)"));
}

TEST_CASE("vit: gradient check of the whole model at a tiny size, every variant") {
  for (auto pos : {models::VitConfig::Pos::sinusoidal, models::VitConfig::Pos::learned})
    for (auto pool : {models::VitConfig::Pool::mean, models::VitConfig::Pool::cls}) {
      models::VitConfig c;
      c.image_size = 4, c.patch = 2, c.d_model = 8, c.n_layer = 1, c.n_head = 2, c.n_classes = 3;
      c.pos = pos, c.pool = pool;
      INFO("pos " << int(pos) << ", pool " << int(pool));
      Graph g;
      dsl::Expr images = dsl::input(g, "images", {2, 4, 4});
      dsl::Expr labels = dsl::input(g, "labels", {2}, DType::i32);
      models::Vit v = models::build_vit(c, images, labels);
      ParamStore ps;
      gg::test::randomize(g, ps);
      const std::map<std::string, Tensor> in{{"images", gg::test::tensor({2, 4, 4}, 0.f, 1.f, 3)},
                                             {"labels", Tensor::i32({2}, std::vector<std::int32_t>{2, 0})}};
      gg::test::check_grads(g, v.loss, ps, in, {images});
    }
}

TEST_CASE("vit: the model's argmax is the logits' argmax") {
  models::VitConfig c;
  c.d_model = 16, c.n_layer = 1, c.n_head = 2;
  Graph g;
  dsl::Expr images = dsl::input(g, "images", {5, 8, 8});
  models::Vit v = models::build_vit(c, images, std::nullopt);
  ParamStore ps;
  gg::test::randomize(g, ps);
  std::vector<Tensor> r = gg::test::run(g, {v.logits, v.pred}, ps, {{"images", gg::test::tensor({5, 8, 8}, 0.f, 1.f, 4)}});
  for (int b = 0; b < 5; ++b) {
    const float* row = r[0].f() + b * 10;
    CHECK(r[1].i()[b] == std::max_element(row, row + 10) - row);
  }
}

namespace {

// A short run of the job (300 steps, no augmentation, d_model 32) and its test accuracy.
models::VitResult short_run(const TempDir& dir, std::int64_t patch, float patch_init = 0.f) {
  models::VitJobOptions o;
  o.shift = 0;
  models::VitConfig c;
  c.patch = patch;
  c.d_model = 32;
  c.patch_init = patch_init;
  train::TrainOptions t = models::vit_train_defaults();
  t.out_dir = dir.file(fmt::format("p{}_{}", patch, patch_init));
  t.steps = 300;
  t.warmup = 20;
  t.eval_interval = 1000;
  t.quiet = true;
  std::FILE* sink = std::tmpfile();
  models::VitResult r = models::run_vit(o, c, t, sink);
  std::fclose(sink);
  return r;
}

}  // namespace

TEST_CASE("vit: short training runs of the job beat chance by far, both patch sizes") {
  TempDir dir;
  for (std::int64_t patch : {4, 2}) {
    const models::VitResult r = short_run(dir, patch);
    INFO("patch " << patch << ": test accuracy " << r.test_accuracy);
    CHECK(r.n_test == 359);
    CHECK(r.test_accuracy > 0.4);  // chance is 0.1
    std::int64_t total = 0, diagonal = 0;
    for (int i = 0; i < 10; ++i)
      for (int j = 0; j < 10; ++j) total += r.confusion[i][j], diagonal += i == j ? r.confusion[i][j] : 0;
    CHECK(total == 359);
    CHECK(double(diagonal) / 359.0 == doctest::Approx(r.test_accuracy));
  }
}

TEST_CASE("vit: issue 7: a patch-2 ViT at N(0, 0.02) under a unit table stays near chance") {
  // The unit sinusoidal table is tens of times larger than a 2x2 patch embedded at N(0, 0.02): the
  // pixels are drowned and a short run stays near chance. The default init (1/sqrt(fan_in) =
  // 0.5) keeps them audible: the same run with it beats 0.4 in the short-run case above
  // (measured: about 0.53 vs 0.20), so it is not trained a second time here.
  TempDir dir;
  const double issue = short_run(dir, 2, 0.02f).test_accuracy;
  INFO("N(0, 0.02): test accuracy " << issue);
  CHECK(issue < 0.3);
}
