// Refusals about checkpoints and weight files stay one short line at their source (at most
// 280 bytes, leaving room for "gradgraph: error: "), however long the model's options, the
// names in the file or the paths: resuming another model's checkpoint or one whose model
// options were edited, weights that do not fit the model, optimizer state and curves under
// huge names. Each case made a longer message before it was bounded.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <string>

#include "dsl/nn.h"
#include "io/safetensors.h"
#include "tests/regression_data.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace {

using namespace gg;
using namespace gg::dsl;
using gg::test::contains;
using gg::test::TempDir;

const auto error_of = [](auto&& f) { return gg::test::error_of<gg::train::InputError>(f); };

// A one-line message of at most 280 bytes.
void short_line(const std::string& e) {
  INFO(e.substr(0, 600));
  CHECK(!e.empty());
  CHECK(e.size() <= 280);
  CHECK(e.find('\n') == std::string::npos);
}

// A 2 -> hidden -> 1 MLP whose options JSON is as long as a real model's (a dozen keys).
train::Model mlp(const std::string& kind, std::int64_t hidden, double dropout = 0.0) {
  return train::Model(
      kind,
      [hidden](train::ModelInputs& in) {
        Expr h = tanh(linear(in["x"], hidden, "fc1"));
        Expr err = linear(h, 1, "fc2") - in["y"];
        return train::ModelOutputs{mean_all(err * err), {}};
      },
      fmt::format("{{\"d_model\": {}, \"dropout\": {}, \"image_size\": 8, \"layernorm_eps\": 1e-05, \"n_classes\": 10, "
                  "\"n_head\": 4, \"n_layer\": 1, \"patch\": 4, \"patch_init\": 0.0, \"pool\": \"mean\", "
                  "\"pos\": \"sinusoidal\", \"pos_scale\": 1.0}}",
                  hidden, dropout));
}

train::DataSource source() {
  train::DataSource d;
  d.train = [](std::mt19937_64& rng) { return gg::test::regression_batch(rng, 8); };
  return d;
}

train::TrainOptions options(const std::string& dir, std::int64_t steps) {
  train::TrainOptions o;
  o.out_dir = dir;
  o.steps = steps;
  o.warmup = 0;
  o.eval_interval = 100;
  o.eval_iters = 1;
  o.final_eval_iters = 1;
  o.quiet = true;
  o.resume = steps > 2;
  return o;
}

void fit(train::Model& m, const train::TrainOptions& o) {
  gg::test::capture([&](std::FILE* out) { return train::fit(m, source(), o, {}, out); }, nullptr);
}

}  // namespace

TEST_CASE("short refusals: resuming another model's checkpoint, or one with edited model options") {
  TempDir dir;
  // A long out dir, as a user's project path may be.
  const std::string out = dir.file("experiments/some-project-name/runs/2024-05-01-baseline-with-a-long-name");
  train::Model first = mlp("vit", 16);
  fit(first, options(out, 2));

  SUBCASE("another kind of model") {
    train::Model other = mlp("seq2seq", 16);
    const std::string e = error_of([&] { fit(other, options(out, 4)); });
    short_line(e);
    CHECK(contains(e, "holds model 'vit', this run builds 'seq2seq'"));
  }
  SUBCASE("the same kind, another option") {
    train::Model wide = mlp("vit", 32);
    const std::string e = error_of([&] { fit(wide, options(out, 4)); });
    short_line(e);
    CHECK(contains(e, "has model option d_model = 16, this run 32"));
  }
  SUBCASE("an option edited in the checkpoint's metadata") {
    const std::string path = out + "/checkpoint.safetensors";
    io::File f = io::read_safetensors(path);
    std::string& mo = f.metadata["model_options"];
    mo.replace(mo.find("\"dropout\": 0"), 12, "\"dropout\": 0.5");
    io::write_safetensors(path, f);
    train::Model same = mlp("vit", 16);
    const std::string e = error_of([&] { fit(same, options(out, 4)); });
    short_line(e);
    CHECK(contains(e, "dropout = 0.5, this run 0"));
  }
  SUBCASE("model options that are not JSON") {
    const std::string path = out + "/checkpoint.safetensors";
    io::File f = io::read_safetensors(path);
    f.metadata["model_options"] = std::string(100'000, '[');
    io::write_safetensors(path, f);
    train::Model same = mlp("vit", 16);
    const std::string e = error_of([&] { fit(same, options(out, 4)); });
    short_line(e);
    CHECK(contains(e, "not valid JSON (100,000 bytes)"));
  }
}

TEST_CASE("short refusals: weights that do not fit the model") {
  // A model of 30 parameters with long names, and a file that misses some, adds some and
  // shapes some otherwise.
  std::vector<train::ParamInfo> table;
  std::map<std::string, Tensor> t;
  for (int i = 0; i < 30; ++i) {
    const std::string name = fmt::format("encoder.blocks.{}.attention.query_projection.weight", i);
    table.push_back({name, {8, 8}});
    if (i % 3 == 1) t.emplace(name, Tensor({8, 4}));
    else if (i % 3 == 2) t.emplace(name, Tensor({8, 8}));
  }
  for (int i = 0; i < 12; ++i) t.emplace(fmt::format("decoder.blocks.{}.cross_attention.key_projection.bias", i), Tensor({8}));
  ParamStore ps;
  const std::string e = error_of([&] { train::load_params(ps, t, table, "runs/baseline/weights.safetensors"); });
  short_line(e);
  CHECK(contains(e, "runs/baseline/weights.safetensors: the tensors do not match the model's parameters"));
  CHECK(contains(e, "missing [encoder.blocks.0.attention.query"));
  CHECK(contains(e, "unexpected [12 tensors]"));
  CHECK(contains(e, "mis-shaped ["));
  CHECK(ps.all().empty());

  // A 100 KB path and a 100 KB tensor name holding a newline.
  std::map<std::string, Tensor> odd = t;
  odd.emplace(std::string(50'000, 'n') + "\n" + std::string(50'000, 'n'), Tensor({1}));
  const std::string e2 = error_of([&] { train::load_params(ps, odd, table, std::string(100'000, 'p')); });
  short_line(e2);
  CHECK(contains(e2, "the tensors do not match the model's parameters"));
}

TEST_CASE("short refusals: optimizer state and curves under huge names") {
  const std::string huge(100'000, 'k');
  const ParamShapes shapes{{"w", {2}}};
  AdamW adam;
  std::map<std::string, Tensor> state{{"adam_m." + huge, Tensor({2})}};
  std::string e;
  try {
    adam.load_state(state, 1, shapes);
  } catch (const std::exception& x) {
    e = x.what();
  }
  short_line(e);
  CHECK(contains(e, "adam_m.kkk"));

  TempDir dir;
  train::Checkpoint ck;
  ck.model_kind = "mlp";
  ck.optimizer = "adamw";
  ck.params.emplace("w", Tensor({2}));
  ck.curves.push_back({huge, {1}, {2}});
  const std::string path = dir.file("ck.safetensors");
  train::save_checkpoint(path, ck);
  io::File f = io::read_safetensors(path);
  for (auto& [name, entry] : f.tensors)
    if (name.starts_with("curve.")) entry = io::Entry::from_f32({2}, {1, 2});  // not (n, 2)
  io::write_safetensors(path, f);
  const std::string e2 = error_of([&] { train::load_checkpoint(path); });
  short_line(e2);
  CHECK(contains(e2, "expected (n, 2)"));
}
