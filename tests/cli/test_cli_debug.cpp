// Tests of the checking and debugging commands as a user runs them: gradcheck, hvp,
// attention, and --detect-anomaly on grad and replay.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/gpt.h"
#include "run_cli.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"

using namespace gg_cli_test;

namespace {

using gg::test::contains;

const std::string kConfig = quote(golden("ref_basic.config.json"));
const std::string kWeights = quote(golden("ref_basic.weights.safetensors"));
const std::string kBatch = quote(golden("ref_basic.batch.safetensors"));
const std::string kBatches = quote(golden("ref_basic.batches.safetensors"));

int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

// The golden weights with one NaN planted in blocks.1.attn.value.weight, written to `path`.
void write_poisoned_weights(const std::string& path) {
  const gg::io::File w = gg::io::read_safetensors(golden("ref_basic.weights.safetensors"));
  gg::io::File out;
  for (const auto& [name, e] : w.tensors) {
    std::vector<float> v = w.get_f32(name);
    if (name == "blocks.1.attn.value.weight") v[5] = std::nanf("");
    out.add_f32(name, e.shape, v);
  }
  gg::io::write_safetensors(path, out);
}

}  // namespace

TEST_CASE("cli: gradcheck on the reference model, from initializers and from the golden weights") {
  for (const std::string& extra : {std::string(), " --weights " + kWeights + " --batch " + kBatch}) {
    const Result r = run("gradcheck --config " + kConfig + extra + " --samples 4");
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    CHECK(contains(r.out, "all 36 parameters agree"));
    CHECK(count(r.out, "(structurally zero)") == 2);
    CHECK(contains(r.out, "structurally zero: blocks.0.attn.key.bias: every path is cancelled by a shift invariance"));
  }
}

TEST_CASE("cli: gradcheck --precision bf16 holds the bf16 gradients to the stated tolerance, and sees the rounding") {
  const Result r = run("gradcheck --config " + kConfig + " --weights " + kWeights + " --batch " + kBatch +
                       " --precision bf16 --samples 8");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(contains(r.out, "precision bf16: the executor's products take bf16 operands"));
  CHECK(contains(r.out, "all 36 parameters agree"));
  CHECK(contains(r.out, "<= 0.05)"));
  // The f32 tolerance is too tight for bf16 products: they really are rounded.
  const Result tight = run("gradcheck --config " + kConfig + " --weights " + kWeights + " --batch " + kBatch +
                           " --precision bf16 --samples 8 --rtol 1e-3");
  CHECK(tight.status == 1);
  CHECK(contains(tight.out, "FAIL"));
}

TEST_CASE("cli: gradcheck exits non-zero when a gradient is off the tolerance") {
  const Result r = run("gradcheck --config " + kConfig + " --samples 2 --rtol 1e-12");
  INFO("stdout: " << r.out);
  CHECK(r.status == 1);
  CHECK(contains(r.out, "FAIL"));
  CHECK(contains(r.out, "parameters disagree (rel err > 1e-12)"));
}

TEST_CASE("cli: gradcheck refuses a missing config in one line") {
  const Result r = run("gradcheck --config /nonexistent/c.json");
  CHECK(r.status == 1);
  CHECK(r.err_lines() == 1);
  CHECK(contains(r.err, "/nonexistent/c.json"));
}

TEST_CASE("cli: hvp builds H v as graph and checks it against differences of the f64 gradient") {
  const Result r = run("hvp --config " + kConfig + " --weights " + kWeights + " --batch " + kBatch);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(contains(r.out, "v . H v = "));
  CHECK(contains(r.out, "tok_emb.weight"));
}

TEST_CASE("cli: grad and replay --detect-anomaly name the node that first reads a planted NaN") {
  TempDir dir;
  const std::string w = dir.file("poisoned.safetensors");
  write_poisoned_weights(w);
  const std::string grad = "grad --config " + kConfig + " --weights " + quote(w) + " --batch " + kBatch + " --out " +
                           quote(dir.file("g.safetensors"));
  const Result plain = run(grad);
  CHECK(plain.status == 0);  // without the flag the NaN flows into the loss and the file
  const Result r = run(grad + " --detect-anomaly");
  INFO("stderr: " << r.err);
  CHECK(r.status == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind("gradgraph: error: matmul at gpt.cpp:", 0) == 0);
  CHECK(contains(r.err, "('blocks.1.attn.value'): anomaly: the first non-finite value of this run: forward node"));
  CHECK(contains(r.err, "'blocks.1.attn.value.weight'"));

  const Result rp = run("replay --config " + kConfig + " --weights " + quote(w) + " --batches " + kBatches +
                        " --optimizer sgd --lr 0.1 --detect-anomaly --out " + quote(dir.file("r.safetensors")));
  INFO("stderr: " << rp.err);
  CHECK(rp.status == 1);
  CHECK(rp.err_lines() == 1);
  CHECK(contains(rp.err, "('blocks.1.attn.value'): anomaly"));
}

TEST_CASE("cli: attention writes one heatmap per layer and head, and a grid of all") {
  TempDir dir;
  const gg::models::GptConfig c = gg::models::load_gpt_config(golden("ref_basic.config.json"));
  gg::ParamStore params;
  gg::train::load_params(params, gg::train::read_tensors(golden("ref_basic.weights.safetensors")),
                         gg::models::gpt_params(c), "ref_basic");
  gg::train::Checkpoint ck;
  ck.model_kind = "gpt";
  ck.model_options = gg::models::to_json(c);
  ck.params = params.all();
  ck.optimizer = "adamw";
  ck.user["vocab"] = "[10,97,98,99,100,101,102,103,104,105,106,107,108]";  // "\nabcdefghijkl"
  const std::string path = dir.file("ck.safetensors");
  gg::train::save_checkpoint(path, ck);
  const std::string out = dir.file("maps");
  const Result r = run("attention --checkpoint " + quote(path) + " --prompt " + quote("abc\nabcd") + " --out " + quote(out));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  const std::string all = read_all(out + "/attention.svg");
  CHECK(count(all, "<g class=\"heatmap\"") == 2 * 4);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h) CHECK(fs::exists(out + "/attention_l" + std::to_string(l) + "h" + std::to_string(h) + ".svg"));
  CHECK(contains(all, "fill=\"rgb(255,255,255)\" data-q=\"0\" data-k=\"1\""));  // above the diagonal: white

  const Result bad = run("attention --checkpoint " + quote(path) + " --prompt xyz --out " + quote(out));
  CHECK(bad.status == 1);
  CHECK(bad.err_lines() == 1);
  CHECK(contains(bad.err, "--prompt"));
  const Result source = run("attention --checkpoint " + quote(path) + " --source abc --out " + quote(out));
  CHECK(source.status == 1);
  CHECK(source.err_lines() == 1);
  CHECK(contains(source.err, "--source"));
}

TEST_CASE("cli: attention on an encoder-decoder checkpoint draws the cross-attention of each head on --source") {
  TempDir dir;
  const std::string run_dir = dir.file("s2s");
  const Result t = run("train-seq2seq --task reverse --steps 40 --d-model 16 --n-head 2 --enc-layers 1 --dec-layers 1 "
                       "--batch-size 16 --held-out 50 --eval-examples 20 --quiet --out-dir " + quote(run_dir));
  INFO("train stdout: " << t.out << "\nstderr: " << t.err);
  REQUIRE(t.status == 0);
  const std::string ck = run_dir + "/checkpoint.safetensors";
  const std::string out = dir.file("maps");
  const Result r = run("attention --checkpoint " + quote(ck) + " --source abcde --out " + quote(out));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "task reverse: 5 source tokens"));
  CHECK(contains(r.out, "2 heads"));
  for (int h = 0; h < 2; ++h) {
    const std::string svg = read_all(out + "/cross_attention_h" + std::to_string(h) + ".svg");
    CHECK(count(svg, "<g class=\"heatmap\"") == 1);
    // Every cell: data-q, data-k and its weight in the title; each decoder step's row sums to 1.
    std::map<int, double> row_sum;
    int cells = 0, max_k = -1;
    for (std::size_t at = svg.find("data-q=\""); at != std::string::npos; at = svg.find("data-q=\"", at + 1)) {
      const int q = std::stoi(svg.substr(at + 8));
      const int k = std::stoi(svg.substr(svg.find("data-k=\"", at) + 8));
      const std::size_t end = svg.find("</title>", at);
      const double v = std::stod(svg.substr(svg.rfind(": ", end) + 2));
      row_sum[q] += v;
      max_k = std::max(max_k, k);
      ++cells;
    }
    CHECK(max_k == 4);  // a column per source letter
    REQUIRE(!row_sum.empty());
    CHECK(cells == int(row_sum.size()) * 5);
    for (auto& [q, s] : row_sum) CHECK_MESSAGE(std::abs(s - 1) < 5 * 5e-5 + 1e-6, "row " << q << " sums to " << s);
  }
  CHECK_FALSE(fs::exists(out + "/cross_attention_h2.svg"));

  const Result prompt = run("attention --checkpoint " + quote(ck) + " --prompt abc --out " + quote(out));
  CHECK(prompt.status == 1);
  CHECK(prompt.err_lines() == 1);
  CHECK(contains(prompt.err, "--prompt"));
  const Result bad = run("attention --checkpoint " + quote(ck) + " --source abz --out " + quote(out));
  CHECK(bad.status == 1);
  CHECK(bad.err_lines() == 1);
  CHECK(contains(bad.err, "--source"));
}
