// The bad-input matrix generated from the commands' own option lists (`gradgraph
// --list-options`): every option of every command gets the empty string, zero, a negative
// number, NaN, infinity, 2^31, 2^63, a 100,000-character string and a word where a number
// belongs, on top of a small valid invocation of its command. Each must be accepted (exit 0)
// or refused with one line on stderr of at most 300 bytes that names the option, within 20 s
// and 2 GiB. A new option is covered without a test written for it; a new command needs its
// small invocation below (the test fails naming it until it has one).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"

using namespace gg_cli_test;

namespace {

using gg::test::contains;

struct OptionRow {
  std::string command, flag, type;
  bool takes_value = true;
};

std::vector<OptionRow> list_options() {
  const Result r = run("--list-options");
  REQUIRE_MESSAGE(r.status == 0, r.err);
  std::vector<OptionRow> rows;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::istringstream l(line);
    for (std::string x; std::getline(l, x, '\t');) f.push_back(x);
    REQUIRE_MESSAGE(f.size() == 5, line);
    rows.push_back({f[0], f[1], f[2], f[3] == "1"});
  }
  return rows;
}

// The files the small invocations read, made once per command's matrix in `dir`.
struct Fixture {
  TempDir dir;
  std::string text, checkpoint, tiny_config;
  Fixture() {
    text = text_file(dir);
    const Result r = run("train --quiet --steps 1 --data " + quote(text) + " --block-size 8 --n-layer 1 --n-embd 16 "
                         "--n-head 2 --batch-size 2 --eval-iters 1 --final-eval-iters 1 --sample-tokens 0 --out-dir " +
                         quote(dir.file("ck")), 60, 4096);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    checkpoint = dir.file("ck/checkpoint.safetensors");
    fs::create_directories(dir.file("cwd"));
    tiny_config = dir.file("tiny.json");
    std::ofstream(tiny_config) << R"({"vocab_size": 13, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 16,
      "bias": true, "pos_encoding": "learned", "tie_weights": true, "gelu": "erf", "layernorm_eps": 1e-05})";
  }
};

// A small valid invocation of each command, as (flag, value) pairs ("" for a flag alone);
// the matrix replaces one of them, or adds the option.
std::vector<std::pair<std::string, std::string>> base(const std::string& command, const Fixture& f) {
  const std::string out = f.dir.file("out");
  const std::string config = golden("ref_basic.config.json");
  if (command == "train")
    return {{"--data", f.text}, {"--steps", "1"}, {"--n-layer", "1"}, {"--n-embd", "16"}, {"--n-head", "2"},
            {"--block-size", "8"}, {"--batch-size", "2"}, {"--eval-iters", "1"}, {"--final-eval-iters", "1"},
            {"--sample-tokens", "0"}, {"--quiet", ""}, {"--out-dir", out}};
  if (command == "train-seq2seq")
    return {{"--task", "reverse"}, {"--steps", "1"}, {"--held-out", "8"}, {"--eval-examples", "8"}, {"--d-model", "16"},
            {"--n-head", "2"}, {"--enc-layers", "1"}, {"--dec-layers", "1"}, {"--batch-size", "4"}, {"--quiet", ""},
            {"--out-dir", out}};
  if (command == "train-vit")
    return {{"--steps", "1"}, {"--d-model", "16"}, {"--n-head", "2"}, {"--n-layer", "1"}, {"--batch-size", "8"},
            {"--quiet", ""}, {"--out-dir", out}};
  if (command == "sample") return {{"--checkpoint", f.checkpoint}, {"--tokens", "5"}};
  if (command == "grad")
    return {{"--config", config}, {"--weights", golden("ref_basic.weights.safetensors")},
            {"--batch", golden("ref_basic.batch.safetensors")}, {"--out", f.dir.file("g.safetensors")}};
  if (command == "replay")
    return {{"--config", config}, {"--weights", golden("ref_basic.weights.safetensors")},
            {"--batches", golden("ref_basic.batches.safetensors")}, {"--optimizer", "sgd"}, {"--lr", "0.1"},
            {"--out", f.dir.file("r.safetensors")}};
  if (command == "inspect") return {{"--config", config}};
  if (command == "gradcheck") return {{"--config", config}, {"--samples", "2"}};
  if (command == "hvp") return {{"--config", config}};
  if (command == "attention") return {{"--checkpoint", f.checkpoint}, {"--prompt", "the cat"}, {"--out", f.dir.file("maps")}};
  if (command == "bench")
    return {{"--config", f.tiny_config}, {"--batch", "1"}, {"--seq", "8"}, {"--steps", "1"}, {"--warmup", "0"},
            {"--profile-steps", "0"}, {"--ab-steps", "10"}};
  return {};
}

// Options that start another program (PyTorch, Graphviz): their values are tested by the
// command's own tests, not run here a thousand times.
const std::set<std::string> kExternal = {"bench --compare-torch", "bench --python", "bench --torch-script",
                                         "bench --torch-steps", "bench --rounds", "inspect --svg"};

const std::vector<std::pair<std::string, std::string>> kValues = {
    {"empty", ""},          {"zero", "0"},      {"negative", "-1"},           {"NaN", "nan"},
    {"infinity", "inf"},    {"2^31", "2147483648"}, {"2^63", "9223372036854775808"},
    {"100,000 characters", std::string(100000, 'x')}, {"wrong type", "abc"}};

void check_matrix(const std::string& command) {
  Fixture f;
  const std::vector<std::pair<std::string, std::string>> b = base(command, f);
  REQUIRE_MESSAGE(!b.empty(), "no small invocation of '" << command << "' in tests/cli/test_option_matrix.cpp");
  int rows = 0, refused = 0;
  for (const OptionRow& o : list_options()) {
    // A flag alone has no value to get wrong; the options that start other programs are skipped.
    if (o.command != command || !o.takes_value || kExternal.count(command + " " + o.flag)) continue;
    for (auto& [what, value] : kValues) {
      std::string args = command;
      bool replaced = false;
      for (auto& [flag, v] : b) {
        if (flag == o.flag) {
          replaced = true;
          continue;
        }
        args += " " + flag + (v.empty() ? "" : " " + quote(v));
      }
      (void)replaced;
      args += " " + o.flag + " " + quote(value);
      const Result r = run(args, 20, 2048, f.dir.file("cwd"));
      ++rows;
      INFO(command << " " << o.flag << " <" << what << ">\nexit " << r.status << "\nstderr: " << r.err.substr(0, 400));
      CHECK_MESSAGE((r.status >= 0 && r.status <= 2), "a crash, a kill or a timeout");
      if (r.status != 0) {
        ++refused;
        const std::string key = o.flag.substr(2);
        std::string underscored = key;
        for (char& c : underscored) c = c == '-' ? '_' : c;
        CHECK(r.err_lines() == 1);
        CHECK(r.err.size() <= 300);
        CHECK_MESSAGE((contains(r.err, o.flag) || contains(r.err, underscored)), "the refusal should name " << o.flag);
      }
    }
  }
  MESSAGE(command << ": " << rows << " rows, " << refused << " refused, the others accepted");
}

}  // namespace

TEST_CASE("option matrix: train") { check_matrix("train"); }
TEST_CASE("option matrix: train-seq2seq") { check_matrix("train-seq2seq"); }
TEST_CASE("option matrix: train-vit") { check_matrix("train-vit"); }
TEST_CASE("option matrix: sample") { check_matrix("sample"); }
TEST_CASE("option matrix: grad") { check_matrix("grad"); }
TEST_CASE("option matrix: replay") { check_matrix("replay"); }
TEST_CASE("option matrix: inspect") { check_matrix("inspect"); }
TEST_CASE("option matrix: gradcheck") { check_matrix("gradcheck"); }
TEST_CASE("option matrix: hvp") { check_matrix("hvp"); }
TEST_CASE("option matrix: attention") { check_matrix("attention"); }
TEST_CASE("option matrix: bench") { check_matrix("bench"); }

TEST_CASE("option matrix: every command has its small invocation") {
  Fixture f;
  std::set<std::string> commands;
  for (const OptionRow& o : list_options()) commands.insert(o.command);
  for (const std::string& c : commands) CHECK_MESSAGE(!base(c, f).empty(), "no small invocation of '" << c << "'");
}
