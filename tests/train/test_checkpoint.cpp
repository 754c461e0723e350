// Tests for train/checkpoint (bit-exact round trip of everything a run needs, atomic write,
// refusals naming the file) and train/data (loading, encoding, batches of next-char
// targets).
#include "tests/test_util.h"
#include "train/checkpoint.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "train/data.h"

namespace {

using namespace gg;
using train::InputError;
namespace fs = std::filesystem;

using gg::test::TempDir;
using gg::test::golden;
using gg::test::contains;




void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

const auto error_of = [](auto&& f) { return gg::test::error_of<gg::train::InputError>(f); };

// The golden ref_basic weights: any model's parameters will do.
std::map<std::string, Tensor> some_params() { return train::read_tensors(golden("ref_basic.weights.safetensors")); }

}  // namespace

TEST_CASE("checkpoint: save and load round trip, bit-exact") {
  TempDir dir;
  train::Checkpoint ck;
  ck.model_kind = "my_model";
  ck.model_options = R"({"width": 16, "act": "gelu"})";
  ck.user["vocab"] = "[0,10,32,255]";
  ck.user["note"] = "the user's own words";
  ck.params = some_params();
  ck.optimizer = "adamw";
  ck.optim_state.emplace("adam_m.tok_emb.weight", Tensor::f32({13, 16}, std::vector<float>(13 * 16, 0.125f)));
  std::vector<float> v(16);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1e-30f * float(i + 1);  // tiny values survive exactly
  ck.optim_state.emplace("adam_v.norm_f.bias", Tensor::f32({16}, v));
  ck.step = 1234567890123;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 1000; ++i) rng();
  std::ostringstream rs;
  rs << rng;
  ck.rng_state = rs.str();
  ck.train_options = R"({"lr": 0.001, "steps": 10})";
  ck.curves = {{"train", {1, 2, 3}, {4.5, 4.25, NAN}}, {"accuracy", {2}, {0.75}}};

  const std::string path = dir.file("checkpoint.safetensors");
  train::save_checkpoint(path, ck);
  // Written through a temporary file and renamed: nothing else is left in the directory.
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(dir.path)) files.push_back(e.path().filename().string());
  CHECK(files == std::vector<std::string>{"checkpoint.safetensors"});
  // Saving again over an existing checkpoint works the same way.
  train::save_checkpoint(path, ck);
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}) == 1);

  const train::Checkpoint back = train::load_checkpoint(path);
  CHECK(back.model_kind == "my_model");
  CHECK(back.model_options == ck.model_options);
  CHECK(back.user == ck.user);
  CHECK(back.optimizer == "adamw");
  CHECK(back.step == ck.step);
  CHECK(back.rng_state == ck.rng_state);
  CHECK(back.train_options == ck.train_options);
  REQUIRE(back.curves.size() == 2);
  CHECK(back.curves[0].name == "accuracy");  // stored by name
  CHECK(back.curves[0].y == std::vector<double>{0.75});
  CHECK(back.curves[1].x == std::vector<double>{1, 2, 3});
  CHECK(back.curves[1].y[1] == 4.25);
  CHECK(std::isnan(back.curves[1].y[2]));
  REQUIRE(back.params.size() == ck.params.size());
  for (auto& [name, t] : ck.params) {
    INFO(name);
    CHECK(back.params.at(name).shape() == t.shape());
    CHECK(back.params.at(name).to_vector() == t.to_vector());
  }
  REQUIRE(back.optim_state.size() == 2);
  CHECK(back.optim_state.at("adam_m.tok_emb.weight").shape() == Shape{13, 16});
  CHECK(back.optim_state.at("adam_m.tok_emb.weight").to_vector() == std::vector<float>(13 * 16, 0.125f));
  CHECK(back.optim_state.at("adam_v.norm_f.bias").to_vector() == v);
  // The RNG continues where it stopped.
  std::mt19937_64 restored;
  std::istringstream(back.rng_state) >> restored;
  CHECK(restored() == rng());
}

TEST_CASE("checkpoint: refusals name the file") {
  TempDir dir;
  // A safetensors file that is not a checkpoint.
  const std::string weights = golden("ref_basic.weights.safetensors");
  std::string m = error_of([&] { train::load_checkpoint(weights); });
  CHECK(contains(m, weights));
  CHECK(contains(m, "not a gradgraph checkpoint"));
  // A missing file.
  m = error_of([&] { train::load_checkpoint(dir.file("nope.safetensors")); });
  CHECK(contains(m, dir.file("nope.safetensors")));

  // A truncated checkpoint.
  train::Checkpoint ck;
  ck.model_kind = "gpt";
  ck.params = some_params();
  ck.optimizer = "sgd";
  ck.step = 3;
  const std::string path = dir.file("ck.safetensors");
  train::save_checkpoint(path, ck);
  CHECK(train::load_checkpoint(path).step == 3);
  const auto size = fs::file_size(path);
  for (auto keep : {size - 1, size / 2, std::uintmax_t(20), std::uintmax_t(5), std::uintmax_t(0)}) {
    const std::string cut = dir.file("cut.safetensors");
    fs::copy_file(path, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, keep);
    m = error_of([&] { train::load_checkpoint(cut); });
    INFO("truncated to " << keep << " bytes: " << m);
    CHECK(contains(m, cut));
  }

  // Damaged metadata: each names the file and the field.
  auto damaged = [&](const char* key, const std::string& value) {
    io::File f = io::read_safetensors(path);
    f.metadata[key] = value;
    const std::string bad = dir.file("damaged.safetensors");
    io::write_safetensors(bad, f);
    const std::string msg = error_of([&] { train::load_checkpoint(bad); });
    INFO(key << " = " << value << ": " << msg);
    CHECK(contains(msg, bad));
    return msg;
  };
  CHECK(contains(damaged("step", "2abc"), "step"));
  CHECK(contains(damaged("step", "-1"), "step"));
  CHECK(contains(damaged("step", ""), "step"));
  CHECK(contains(damaged("optimizer", "adam"), "optimizer"));
  CHECK(contains(damaged("format", "gradgraph-checkpoint-1"), "format"));
  // Reserved prefixes are refused for parameters.
  train::Checkpoint reserved = ck;
  reserved.params.emplace("optim.x", Tensor({1}));
  CHECK(contains(error_of([&] { train::save_checkpoint(path, reserved); }), "reserved"));
}

TEST_CASE("CharData: loading, errors, encode/decode") {
  TempDir dir;
  const std::string missing = dir.file("missing.txt");
  CHECK(contains(error_of([&] { train::CharData::load(missing, 8); }), missing));
  const std::string empty = dir.file("empty.txt");
  write_text(empty, "");
  std::string m = error_of([&] { train::CharData::load(empty, 8); });
  CHECK(contains(m, empty));
  CHECK(contains(m, "empty"));
  const std::string shortf = dir.file("short.txt");
  write_text(shortf, std::string(50, 'x'));  // val split 5 chars < block_size + 1
  m = error_of([&] { train::CharData::load(shortf, 8); });
  CHECK(contains(m, shortf));
  CHECK(contains(m, "too short"));

  const std::string text = "hello world\nthe quick brown fox jumps over the lazy dog\n";
  const std::string path = dir.file("text.txt");
  std::string many;
  for (int i = 0; i < 10; ++i) many += text;
  write_text(path, many);
  const train::CharData d = train::CharData::load(path, 8);
  CHECK(d.size == std::int64_t(many.size()));
  CHECK(d.vocab == "\n abcdefghijklmnopqrstuvwxyz");  // distinct bytes, sorted
  CHECK(d.train.size() + d.val.size() == many.size());
  CHECK(d.train.size() == std::size_t(double(many.size()) * 0.9));
  CHECK(d.decode(d.train) + d.decode(d.val) == many);
  CHECK(d.decode(d.encode(text)) == text);
  CHECK(d.encode("\n a")  == std::vector<std::int32_t>{0, 1, 2});
  m = error_of([&] { d.encode("hello World"); });
  CHECK(contains(m, "W"));
  CHECK(contains(m, "vocabulary"));
}

TEST_CASE("sample_batch: random windows, targets are the tokens shifted by one") {
  std::vector<std::int32_t> split(100);
  for (std::size_t i = 0; i < split.size(); ++i) split[i] = std::int32_t(i);
  std::mt19937_64 rng(7);
  std::vector<std::int32_t> x, y;
  std::set<std::int32_t> starts;
  for (int rep = 0; rep < 50; ++rep) {
    train::sample_batch(split, 4, 10, rng, x, y);
    REQUIRE(x.size() == 40);
    REQUIRE(y.size() == 40);
    for (int b = 0; b < 4; ++b) {
      starts.insert(x[std::size_t(b * 10)]);
      CHECK(x[std::size_t(b * 10)] >= 0);
      CHECK(y[std::size_t(b * 10 + 9)] <= 99);  // the window stays inside the split
      for (int t = 0; t < 10; ++t) {
        CHECK(y[std::size_t(b * 10 + t)] == x[std::size_t(b * 10 + t)] + 1);
        if (t > 0) CHECK(x[std::size_t(b * 10 + t)] == x[std::size_t(b * 10 + t - 1)] + 1);
      }
    }
  }
  CHECK(starts.size() > 20);  // random, not one fixed window
  // The same seed gives the same batches.
  std::mt19937_64 a(3), b(3);
  std::vector<std::int32_t> xa, ya, xb, yb;
  train::sample_batch(split, 2, 5, a, xa, ya);
  train::sample_batch(split, 2, 5, b, xb, yb);
  CHECK(xa == xb);
  // The shortest split that fits: one window only.
  std::vector<std::int32_t> tiny{5, 6, 7};
  train::sample_batch(tiny, 3, 2, rng, x, y);
  CHECK(x == std::vector<std::int32_t>{5, 6, 5, 6, 5, 6});
  CHECK(y == std::vector<std::int32_t>{6, 7, 6, 7, 6, 7});
}

