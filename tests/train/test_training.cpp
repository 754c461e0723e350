// End-to-end tests of train/trainer: a tiny transformer learns a small repetitive text in a
// few seconds, and --resume continues a run bit-exactly (same parameters, optimizer state
// and data RNG as a run that was never interrupted).
#include "tests/test_util.h"
#include "train/trainer.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "train/checkpoint.h"
#include "train/config.h"

namespace {

using namespace gg;
namespace fs = std::filesystem;

using gg::test::TempDir;
using gg::test::read_all;



// About 3.5 KB of text with a short repeating structure (16 distinct bytes): easy to learn.
std::string write_pattern_text(const TempDir& dir) {
  std::string text;
  const char* lines[] = {"the cat sat on the mat.\n", "a dog ran to the log.\n", "the cat ran to the mat.\n"};
  for (int i = 0; i < 150; ++i) text += lines[i % 3];
  const std::string path = dir.file("pattern.txt");
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

train::TrainOptions tiny_options(const std::string& data, const std::string& out_dir) {
  train::TrainOptions o;
  o.data = data;
  o.out_dir = out_dir;
  o.n_layer = 1;
  o.n_embd = 16;
  o.n_head = 2;
  o.block_size = 16;
  o.batch_size = 8;
  o.steps = 150;
  o.warmup = 10;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.eval_interval = 50;
  o.eval_iters = 4;
  o.final_eval_iters = 8;
  o.sample_tokens = 20;
  o.quiet = true;
  o.seed = 1;
  return o;
}

// Runs the job with its report going to a temporary file; returns the result and the report.
train::TrainResult run(const train::TrainOptions& o, std::string* report = nullptr) {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  train::TrainResult r;
  try {
    r = train::run_training(o, f);
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  if (report) *report = text;
  return r;
}

}  // namespace

TEST_CASE("training: a tiny transformer learns a repetitive text") {
  TempDir dir;
  const std::string data = write_pattern_text(dir);
  const train::TrainOptions o = tiny_options(data, dir.file("run"));
  std::string report;
  const train::TrainResult r = run(o, &report);

  // The first step's loss, from the CSV of the loss curve ("train,1,<loss>").
  const std::string csv = read_all(dir.file("run/loss.csv"));
  REQUIRE(csv.rfind("series,x,y\ntrain,1,", 0) == 0);
  const double first = std::stod(csv.substr(std::string("series,x,y\ntrain,1,").size()));
  const std::string text = read_all(data);
  const std::size_t V = std::set<char>(text.begin(), text.end()).size();
  REQUIRE(V == 16);
  const double uniform = std::log(double(V));
  MESSAGE("first step loss " << first << ", final train loss " << r.final_train_loss << ", final val loss "
                             << r.final_val_loss << " (ln V = " << uniform << "), " << r.seconds << " s");
  CHECK(r.steps == 150);
  CHECK(std::abs(first - uniform) < 0.5);  // a fresh model is close to uniform
  CHECK(r.final_val_loss < 0.25 * uniform);
  CHECK(r.final_val_loss < first - 1.5);
  CHECK(r.final_train_loss < 0.4 * uniform);
  CHECK(std::isfinite(r.tokens_per_sec));

  // The reports: checkpoint, CSV (150 train points + 2 interim + 1 final val point), SVG.
  CHECK(fs::exists(dir.file("run/checkpoint.safetensors")));
  CHECK(fs::exists(dir.file("run/loss.svg")));
  std::size_t train_rows = 0, val_rows = 0;
  std::istringstream lines(csv);
  for (std::string line; std::getline(lines, line);) {
    train_rows += line.rfind("train,", 0) == 0;
    val_rows += line.rfind("val,", 0) == 0;
  }
  CHECK(train_rows == 150);
  CHECK(val_rows == 3);
  CHECK(report.find("val loss") != std::string::npos);
  CHECK(r.sample.size() == 1 + 20);  // the default prompt "\n" and 20 characters
  CHECK(report.find(r.sample) != std::string::npos);

  const train::Checkpoint ck = train::load_checkpoint(dir.file("run/checkpoint.safetensors"));
  CHECK(ck.step == 150);
  CHECK(ck.vocab.size() == V);
  CHECK(ck.config.n_embd == 16);
  CHECK(ck.optimizer == "adamw");
}

namespace {
// Trains 60 steps, resumes to 120, and compares with a straight 120-step run. Returns the
// number of parameters that differ.
std::size_t resume_vs_straight(double dropout) {
  TempDir dir;
  const std::string data = write_pattern_text(dir);
  // A constant learning rate: the cosine schedule depends on the total step count, so a
  // 60-step run and the first 60 steps of a 120-step run differ by design.
  train::TrainOptions o = tiny_options(data, dir.file("resumed"));
  o.warmup = 0;
  o.min_lr = o.lr;
  o.eval_interval = 40;
  o.sample_tokens = 0;
  o.final_eval_iters = 2;
  o.dropout = dropout;

  train::TrainOptions first = o;
  first.steps = 60;
  run(first);
  train::TrainOptions second = o;
  second.steps = 120;
  second.resume = true;
  std::string report;
  const train::TrainResult resumed = run(second, &report);
  CHECK(resumed.steps == 60);
  CHECK(report.find("resuming") != std::string::npos);

  train::TrainOptions straight = o;
  straight.steps = 120;
  straight.out_dir = dir.file("straight");
  const train::TrainResult whole = run(straight);

  const train::Checkpoint a = train::load_checkpoint(dir.file("resumed/checkpoint.safetensors"));
  const train::Checkpoint b = train::load_checkpoint(dir.file("straight/checkpoint.safetensors"));
  CHECK(a.step == 120);
  CHECK(b.step == 120);
  CHECK(a.rng_state == b.rng_state);
  REQUIRE(a.params.all().size() == b.params.all().size());
  std::size_t differing = 0;
  for (auto& [name, t] : b.params.all()) {
    INFO(name);
    const bool same = a.params.at(name).to_vector() == t.to_vector();
    CHECK(same);
    differing += !same;
  }
  REQUIRE(a.optim_state.size() == b.optim_state.size());
  for (auto& [name, t] : b.optim_state) {
    INFO(name);
    CHECK(a.optim_state.at(name).to_vector() == t.to_vector());
  }
  CHECK(resumed.final_val_loss == whole.final_val_loss);
  CHECK(resumed.final_train_loss == whole.final_train_loss);
  MESSAGE("dropout " << dropout << ": resume vs straight: " << differing << " parameters differ; val loss "
                     << resumed.final_val_loss << " vs " << whole.final_val_loss);
  return differing;
}
}  // namespace

TEST_CASE("training: --resume continues bit-exactly") {
  CHECK(resume_vs_straight(0.0) == 0);
  // Dropout draws from the executor's RNG, which the checkpoint must carry too.
  CHECK(resume_vs_straight(0.1) == 0);
}

TEST_CASE("training: bad --resume and bad data are refused before training") {
  TempDir dir;
  const std::string data = write_pattern_text(dir);
  train::TrainOptions o = tiny_options(data, dir.file("run"));
  o.steps = 2;
  o.sample_tokens = 0;
  o.final_eval_iters = 1;
  auto error_of = [](const train::TrainOptions& opts) -> std::string {
    try {
      run(opts);
    } catch (const train::InputError& e) {
      return e.what();
    }
    return "";
  };
  // No checkpoint yet.
  train::TrainOptions r = o;
  r.resume = true;
  CHECK(error_of(r).find("checkpoint.safetensors") != std::string::npos);
  run(o);
  // A checkpoint of another model or optimizer.
  r.n_embd = 32;
  CHECK(error_of(r).find("differs") != std::string::npos);
  r = o;
  r.resume = true;
  r.optimizer = "sgd";
  CHECK(error_of(r).find("adamw") != std::string::npos);
  r = o;
  r.resume = true;
  r.steps = 4;
  CHECK(error_of(r) == "");
  CHECK(train::load_checkpoint(dir.file("run/checkpoint.safetensors")).step == 4);
  // Resuming a checkpoint that is already past --steps would write one with a wrong step.
  r.steps = 3;
  CHECK(error_of(r).find("beyond --steps 3") != std::string::npos);
  CHECK(train::load_checkpoint(dir.file("run/checkpoint.safetensors")).step == 4);
  // Data errors name the file.
  train::TrainOptions d = o;
  d.data = dir.file("missing.txt");
  CHECK(error_of(d).find("missing.txt") != std::string::npos);
  // Bad options are refused up front.
  d = o;
  d.temperature = -1;
  CHECK(error_of(d).find("--temperature") != std::string::npos);
}
