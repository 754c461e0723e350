// Tests of the `gradgraph` program as a user runs it: help, the grad/replay output files of
// docs/reference-model.md, and every mistake ending in exactly one line on stderr,
// "gradgraph: error: ...", naming the thing, with a non-zero exit status.
#include <doctest/doctest.h>

#include "tests/test_util.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "run_cli.h"
#include "models/gpt.h"

using namespace gg_cli_test;

namespace {

using gg::test::contains;

// A refusal: non-zero exit, one line on stderr starting "gradgraph: error:" and naming
// each of `names`.
void check_refusal(const std::string& what, const Result& r, const std::vector<std::string>& names) {
  INFO(what << "\nexit " << r.status << "\nstderr: " << r.err << "stdout: " << r.out);
  CHECK(r.status > 0);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind("gradgraph: error: ", 0) == 0);
  for (const std::string& n : names) CHECK_MESSAGE(contains(r.err, n), "the message should name '" << n << "'");
}

const std::string kConfig = quote(golden("ref_basic.config.json"));
const std::string kWeights = quote(golden("ref_basic.weights.safetensors"));
const std::string kBatch = quote(golden("ref_basic.batch.safetensors"));
const std::string kBatches = quote(golden("ref_basic.batches.safetensors"));

std::string grad_args(const std::string& config, const std::string& weights, const std::string& out) {
  return "grad --config " + config + " --weights " + weights + " --batch " + kBatch + " --out " + out;
}
std::string replay_args(const std::string& out) {
  return "replay --config " + kConfig + " --weights " + kWeights + " --batches " + kBatches + " --out " + quote(out);
}

}  // namespace

TEST_CASE("cli: the gradgraph binary is there") {
  INFO("GG_CLI_PATH = '" GG_CLI_PATH "'");
  CHECK(fs::is_regular_file(GG_CLI_PATH));
}

TEST_CASE("cli: --help on the program and on each subcommand") {
  const std::pair<const char*, const char*> cases[] = {
      {"--help", "grad"},
      {"train --help", "--steps"},
      {"sample --help", "--checkpoint"},
      {"grad --help", "--batch"},
      {"replay --help", "--optimizer"},
      {"inspect --help", "--config"}};
  for (auto& [args, shows] : cases) {
    const Result r = run(args);
    INFO(args << "\nstderr: " << r.err << "stdout: " << r.out);
    CHECK(r.status == 0);
    CHECK(contains(r.out, shows));
    CHECK(r.err.empty());
  }
}

TEST_CASE("cli: command-line mistakes") {
  TempDir dir;
  const std::string out = quote(dir.file("g.safetensors"));
  check_refusal("no subcommand", run(""), {"subcommand"});
  check_refusal("unknown subcommand", run("frobnicate"), {"frobnicate"});
  check_refusal("unknown option before the subcommand", run("--bogus"), {"--bogus"});
  check_refusal("bad --threads", run("--threads 0 grad --help"), {"--threads"});
  check_refusal("unknown flag", run(grad_args(kConfig, kWeights, out) + " --bogus"), {"--bogus"});
  check_refusal("missing --out", run("grad --config " + kConfig + " --weights " + kWeights + " --batch " + kBatch),
                {"--out"});
  check_refusal("missing --lr", run("replay --config " + kConfig + " --weights " + kWeights + " --batches " + kBatches +
                                    " --optimizer sgd --out " + out),
                {"--lr"});
  const std::string replay = replay_args(dir.file("r.safetensors"));
  check_refusal("--lr abc", run(replay + " --optimizer sgd --lr abc"), {"--lr", "abc"});
  check_refusal("--lr 0", run(replay + " --optimizer sgd --lr 0"), {"--lr"});
  check_refusal("--lr nan", run(replay + " --optimizer sgd --lr nan"), {"--lr"});
  check_refusal("--betas 0.9", run(replay + " --optimizer adamw --lr 0.01 --betas 0.9"), {"--betas", "0.9"});
  check_refusal("--betas 0.9,1.5", run(replay + " --optimizer adamw --lr 0.01 --betas 0.9,1.5"), {"--betas"});
  check_refusal("--optimizer adam", run(replay + " --optimizer adam --lr 0.01"), {"--optimizer", "adam"});
  check_refusal("--momentum 1", run(replay + " --optimizer sgd --lr 0.1 --momentum 1"), {"--momentum"});
  check_refusal("--momentum nan", run(replay + " --optimizer sgd --lr 0.1 --momentum nan"), {"--momentum"});
  check_refusal("--clip -1", run(replay + " --optimizer sgd --lr 0.1 --clip -1"), {"--clip"});
  check_refusal("--clip nan", run(replay + " --optimizer sgd --lr 0.1 --clip nan"), {"--clip"});
  check_refusal("--weight-decay nan", run(replay + " --optimizer adamw --lr 0.1 --weight-decay nan"),
                {"--weight-decay"});
  check_refusal("train --steps x", run("train --steps x"), {"--steps"});
  check_refusal("train --temperature 0", run("train --temperature 0 --out-dir " + quote(dir.file("t"))),
                {"--temperature"});
  CHECK_FALSE(fs::exists(dir.file("t")));  // refused before anything was written
  CHECK_FALSE(fs::exists(dir.file("r.safetensors")));
  CHECK_FALSE(fs::exists(dir.file("g.safetensors")));
}

TEST_CASE("cli: bad input files") {
  TempDir dir;
  const std::string out = quote(dir.file("g.safetensors"));

  const std::string missing = dir.file("no_such_weights.safetensors");
  check_refusal("nonexistent weights", run(grad_args(kConfig, quote(missing), out)), {missing});

  // Weights with a missing tensor and an extra one: both are listed.
  gg::io::File w = gg::io::read_safetensors(golden("ref_basic.weights.safetensors"));
  gg::io::File cut;
  for (auto& [name, e] : w.tensors)
    if (name != "blocks.1.mlp.fc2.bias") cut.add(name, e);
  cut.add_f32("head.weight", {13, 16}, std::vector<float>(13 * 16));
  const std::string cut_path = dir.file("cut.safetensors");
  gg::io::write_safetensors(cut_path, cut);
  check_refusal("weights with a missing tensor", run(grad_args(kConfig, quote(cut_path), out)),
                {cut_path, "blocks.1.mlp.fc2.bias", "missing", "head.weight", "unexpected"});

  // Random bytes: a huge header length, and a small header length followed by garbage.
  std::mt19937 rng(5);
  for (int variant = 0; variant < 2; ++variant) {
    std::string bytes(1000, '\0');
    for (char& c : bytes) c = char(rng());
    if (variant == 1) {
      bytes[0] = 100;
      for (int i = 1; i < 8; ++i) bytes[std::size_t(i)] = 0;
    }
    const std::string corrupt = dir.file("corrupt" + std::to_string(variant) + ".safetensors");
    std::ofstream(corrupt, std::ios::binary) << bytes;
    check_refusal("corrupt weights", run(grad_args(kConfig, quote(corrupt), out)), {corrupt});
    check_refusal("corrupt batch", run("grad --config " + kConfig + " --weights " + kWeights + " --batch " +
                                       quote(corrupt) + " --out " + out),
                  {corrupt});
    check_refusal("corrupt checkpoint", run("sample --checkpoint " + quote(corrupt)), {corrupt});
  }

  // Config with an unknown key, and with a missing one.
  std::string text = read_all(golden("ref_basic.config.json"));
  const std::string bad_key = dir.file("bad_key.json");
  std::ofstream(bad_key) << text.substr(0, text.rfind('}')) + ", \"n_heads\": 4}";
  check_refusal("unknown config key", run(grad_args(quote(bad_key), kWeights, out)), {bad_key, "n_heads"});
  const std::string no_key = dir.file("no_key.json");
  std::ofstream(no_key) << "{\"vocab_size\": 13}";
  check_refusal("missing config key", run(grad_args(quote(no_key), kWeights, out)), {no_key, "missing key"});
  check_refusal("config of another model", run(grad_args(quote(golden("ref_odd.config.json")), kWeights, out)),
                {"ref_basic.weights.safetensors", "mis-shaped"});
  // A weights file where a batch is expected.
  check_refusal("weights as batch", run("grad --config " + kConfig + " --weights " + kWeights + " --batch " + kWeights +
                                        " --out " + out),
                {"tokens"});
  check_refusal("a weights file is not a checkpoint", run("sample --checkpoint " + kWeights),
                {"ref_basic.weights.safetensors", "checkpoint"});
  // Training options file with an unknown option; training text that does not exist.
  const std::string opts = dir.file("opts.json");
  std::ofstream(opts) << "{\"stepz\": 3}";
  check_refusal("train --config with an unknown option", run("train --config " + quote(opts)), {opts, "stepz"});
  check_refusal("train --data missing",
                run("train --data " + quote(dir.file("nope.txt")) + " --steps 1 --out-dir " + quote(dir.file("t"))),
                {dir.file("nope.txt")});
  CHECK_FALSE(fs::exists(dir.file("g.safetensors")));
}

TEST_CASE("cli: grad writes loss, logits and every gradient") {
  TempDir dir;
  const std::string out = dir.file("g.safetensors");
  const Result r = run(grad_args(kConfig, kWeights, quote(out)));
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  const gg::io::File f = gg::io::read_safetensors(out);
  const gg::models::GptConfig c = gg::models::load_gpt_config(golden("ref_basic.config.json"));
  const auto table = gg::models::gpt_params(c);
  CHECK(f.tensors.size() == 2 + table.size());
  REQUIRE(f.find("loss"));
  CHECK(f.at("loss").dtype == gg::io::DType::f32);
  CHECK(f.at("loss").shape.empty());
  REQUIRE(f.find("logits"));
  CHECK(f.at("logits").shape == std::vector<std::int64_t>{3, 8, 13});
  for (auto& [name, shape] : table) {
    INFO(name);
    REQUIRE(f.find("grad." + name));
    CHECK(f.at("grad." + name).dtype == gg::io::DType::f32);
    CHECK(f.at("grad." + name).shape == shape);
  }
  // Same numbers as PyTorch (the full tolerance check is in tests/train/test_reference_golden.cpp).
  const gg::io::File ref = gg::io::read_safetensors(golden("ref_basic.grad.safetensors"));
  CHECK(std::abs(f.get_f32("loss")[0] - ref.get_f32("loss")[0]) <= 1e-5 * std::abs(ref.get_f32("loss")[0]));
}

TEST_CASE("cli: replay writes every parameter, losses and grad_norms") {
  TempDir dir;
  const std::string out = dir.file("r.safetensors");
  const Result r = run(replay_args(out) + " --optimizer sgd --lr 0.1 --momentum 0.9");
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  const gg::io::File f = gg::io::read_safetensors(out);
  const gg::models::GptConfig c = gg::models::load_gpt_config(golden("ref_basic.config.json"));
  const auto table = gg::models::gpt_params(c);
  CHECK(f.tensors.size() == 2 + table.size());
  for (auto& [name, shape] : table) {
    INFO(name);
    REQUIRE(f.find(name));
    CHECK(f.at(name).dtype == gg::io::DType::f32);
    CHECK(f.at(name).shape == shape);
  }
  REQUIRE(f.find("losses"));
  REQUIRE(f.find("grad_norms"));
  CHECK(f.at("losses").shape == std::vector<std::int64_t>{5});
  CHECK(f.at("grad_norms").shape == std::vector<std::int64_t>{5});
  // The parameters moved.
  const gg::io::File w = gg::io::read_safetensors(golden("ref_basic.weights.safetensors"));
  CHECK(f.get_f32("tok_emb.weight") != w.get_f32("tok_emb.weight"));
}

TEST_CASE("cli: replay refuses to write non-finite parameters unless asked") {
  TempDir dir;
  const std::string out = dir.file("r.safetensors");
  const Result r = run(replay_args(out) + " --optimizer sgd --lr 1e8");
  check_refusal("replay --lr 1e8", r, {"non-finite", "--allow-nonfinite"});
  CHECK_FALSE(fs::exists(out));
  const Result forced = run(replay_args(out) + " --optimizer sgd --lr 1e8 --allow-nonfinite");
  INFO(forced.err);
  CHECK(forced.status == 0);
  CHECK(fs::exists(out));
}

TEST_CASE("cli: train refuses out-of-range and mistyped numbers, naming the flag") {
  struct Bad {
    const char* args;
    const char* names;
  };
  const Bad bads[] = {{"--steps 99999999999999999999", "--steps"}, {"--steps 0", "--steps"},
                      {"--top-k 4294967297", "--top-k"},           {"--seed -1", "--seed"},
                      {"--sample-tokens -5", "--sample-tokens"},   {"--weight-decay inf", "--weight-decay"},
                      {"--layernorm-eps 1e300", "--layernorm-eps"}, {"--steps 2abc", "--steps"},
                      {"--n-head 3", "--n-embd"},                    {"--gelu relu", "--gelu"},
                      {"--bias maybe", "--bias"}};
  for (const Bad& b : bads) check_refusal(b.args, run(std::string("train --quiet ") + b.args), {b.names});
}

TEST_CASE("cli: train at a long context (block 1024, batch 1) runs on the bundled text, its arena linear in T") {
  TempDir dir;
  const Result r = run("train --block-size 1024 --batch-size 1 --steps 2 --eval-interval 2 --eval-iters 1 "
                       "--final-eval-iters 1 --sample-tokens 0 --out-dir " + quote(dir.file("run")),
                       120, 4096);
  INFO("exit " << r.status << "\nstderr: " << r.err << "stdout: " << r.out);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "block 1024, batch 1"));
  CHECK(contains(r.out, "val loss"));
  // The attention is fused (above 512 keys): no (1, 4, 1024, 1024) weights or scores are
  // kept, and the arena is that of a few (1024, 128) activations a layer.
  const std::size_t at = r.out.find("arena ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(r.out.substr(at + 6)) < 64.0);  // MiB
}
