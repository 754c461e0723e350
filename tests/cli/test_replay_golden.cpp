// Golden tests of `gradgraph replay` against PyTorch float32 (tests/golden/ref_*.replay_*):
// the program is run with the options of each ref_<case>.replay_<opt>.json and its output
// compared with the spec's Agreement tolerances: losses and grad_norms within 1e-3
// relative, every parameter with max|a-b| <= 2e-3 * max(max|b|, 1e-2); after AdamW the
// attention key biases need only be finite.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "run_cli.h"
#include "models/gpt.h"

using namespace gg_cli_test;

namespace {

bool is_key_bias(const std::string& name) {
  return name.rfind("blocks.", 0) == 0 && name.size() > 14 && name.ends_with(".attn.key.bias");
}

// Runs one replay case; returns the worst error as a fraction of its tolerance.
double check_replay(const std::string& spec_file) {
  INFO("case " << spec_file);
  const nlohmann::json j = nlohmann::json::parse(read_all(golden(spec_file)));
  const std::string optimizer = j.at("optimizer").get<std::string>();
  const std::string ref_file = spec_file.substr(0, spec_file.size() - 5) + ".safetensors";
  TempDir dir;
  const std::string out = dir.file("final.safetensors");
  const std::string args = fmt::format(
      "replay --config {} --weights {} --batches {} --optimizer {} --lr {} --momentum {} --betas {},{} --eps {} "
      "--weight-decay {} --clip {} --out {}",
      quote(golden(j.at("config").get<std::string>())), quote(golden(j.at("weights").get<std::string>())),
      quote(golden(j.at("batches").get<std::string>())), optimizer, j.at("lr").get<double>(),
      j.at("momentum").get<double>(), j.at("betas")[0].get<double>(), j.at("betas")[1].get<double>(),
      j.at("eps").get<double>(), j.at("weight_decay").get<double>(), j.at("clip").get<double>(), quote(out));
  const Result r = run(args);
  INFO("gradgraph " << args << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);

  const gg::io::File got = gg::io::read_safetensors(out);
  const gg::io::File ref = gg::io::read_safetensors(golden(ref_file));
  double worst = 0;
  std::string worst_name;
  auto note = [&](const std::string& what, double frac) {
    if (std::isnan(frac)) frac = INFINITY;
    if (frac > worst || worst_name.empty()) {
      worst = std::max(worst, frac);
      worst_name = what;
    }
  };

  const std::int64_t N = j.at("steps").get<std::int64_t>();
  for (const char* series : {"losses", "grad_norms"}) {
    REQUIRE(got.find(series));
    const std::vector<float> a = got.get_f32(series), b = ref.get_f32(series);
    REQUIRE(std::int64_t(b.size()) == N);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < b.size(); ++i) {
      const double frac = std::abs(double(a[i]) - double(b[i])) / (1e-3 * std::abs(double(b[i])));
      CHECK_MESSAGE(frac <= 1.0, series << "[" << i << "] = " << a[i] << " vs torch " << b[i]);
      note(fmt::format("{}[{}]", series, i), frac);
    }
  }

  const gg::models::GptConfig c = gg::models::load_gpt_config(golden(j.at("config").get<std::string>()));
  const auto table = gg::models::gpt_params(c);
  CHECK(got.tensors.size() == table.size() + 2);
  for (auto& [name, shape] : table) {
    INFO(name);
    REQUIRE(got.find(name));
    REQUIRE(got.at(name).shape == shape);
    const std::vector<float> a = got.get_f32(name), b = ref.get_f32(name);
    if (optimizer == "adamw" && is_key_bias(name)) {
      for (float x : a) CHECK(std::isfinite(x));
      continue;
    }
    double max_err = 0, max_ref = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      const double e = std::abs(double(a[i]) - double(b[i]));
      max_err = std::isnan(e) ? INFINITY : std::max(max_err, e);
      max_ref = std::max(max_ref, std::abs(double(b[i])));
    }
    const double tol = 2e-3 * std::max(max_ref, 1e-2);
    CHECK_MESSAGE(max_err <= tol, name << ": max|a-b| = " << max_err << " > tolerance " << tol);
    note(name, max_err / tol);
  }
  MESSAGE(ref_file << ": worst error " << worst << " of tolerance (" << worst_name << ")");
  return worst;
}

}  // namespace

TEST_CASE("golden: replay agrees with PyTorch float32") {
  for (const char* spec : {"ref_basic.replay_adamw.json", "ref_basic.replay_sgd.json", "ref_odd.replay_adamw.json",
                           "ref_basic.replay_adamw20.json"}) {
    SUBCASE(spec) { CHECK(check_replay(spec) <= 1.0); }
  }
}

TEST_CASE("golden: the replay comparison detects a wrong update") {
  // The same case with another learning rate must be out of tolerance.
  TempDir dir;
  const std::string out = dir.file("final.safetensors");
  const Result r = run("replay --config " + quote(golden("ref_basic.config.json")) + " --weights " +
                       quote(golden("ref_basic.weights.safetensors")) + " --batches " +
                       quote(golden("ref_basic.batches.safetensors")) +
                       " --optimizer sgd --lr 0.11 --momentum 0.9 --out " + quote(out));
  REQUIRE(r.status == 0);
  const gg::io::File got = gg::io::read_safetensors(out);
  const gg::io::File ref = gg::io::read_safetensors(golden("ref_basic.replay_sgd.safetensors"));
  bool any_out = false;
  for (auto& [name, e] : ref.tensors) {
    if (name == "losses" || name == "grad_norms") continue;
    const std::vector<float> a = got.get_f32(name), b = e.to_f32();
    double max_err = 0, max_ref = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      max_err = std::max(max_err, std::abs(double(a[i]) - double(b[i])));
      max_ref = std::max(max_ref, std::abs(double(b[i])));
    }
    any_out = any_out || max_err > 2e-3 * std::max(max_ref, 1e-2);
  }
  CHECK(any_out);
}
