// End-to-end tests of the char-LM job on the generic trainer: a tiny transformer learns a
// small repetitive text in a few seconds, and --resume continues a run bit-exactly (same
// parameters, optimizer state and data and dropout RNGs as a run never interrupted).
#include "tests/test_util.h"
#include "models/char_lm.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <set>
#include <sstream>
#include <string>

#include "train/checkpoint.h"

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

// The job's three option sets.
struct Opts {
  models::CharLmOptions job;
  models::GptConfig model;
  train::TrainOptions run;
  // o->steps etc.: the run options, the ones the tests change most
  train::TrainOptions* operator->() { return &run; }
};

Opts tiny_options(const std::string& data, const std::string& out_dir) {
  Opts opts;
  train::TrainOptions& o = opts.run;
  opts.job.data = data;
  o.out_dir = out_dir;
  opts.model.n_layer = 1;
  opts.model.n_embd = 16;
  opts.model.n_head = 2;
  opts.model.block_size = 16;
  opts.job.batch_size = 8;
  o.steps = 150;
  o.warmup = 10;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.eval_interval = 50;
  o.eval_iters = 4;
  o.final_eval_iters = 8;
  opts.job.sample_tokens = 20;
  o.quiet = true;
  o.seed = 1;
  return opts;
}

// Runs the job with its report going to a temporary file; returns the result and the report.
models::CharLmResult run(const Opts& o, std::string* report = nullptr) {
  return gg::test::capture([&](std::FILE* out) { return models::run_char_lm(o.job, o.model, o.run, out); }, report);
}

}  // namespace

TEST_CASE("training: a tiny transformer learns a repetitive text") {
  TempDir dir;
  const std::string data = write_pattern_text(dir);
  const Opts o = tiny_options(data, dir.file("run"));
  std::string report;
  const models::CharLmResult res = run(o, &report);
  const train::FitResult& r = res.fit;

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
  CHECK(std::isfinite(r.items_per_sec));
  CHECK(report.find("tok/s") != std::string::npos);

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
  CHECK(res.sample.size() == 1 + 20);  // the default prompt "\n" and 20 characters
  CHECK(report.find(res.sample) != std::string::npos);

  const train::Checkpoint ck = train::load_checkpoint(dir.file("run/checkpoint.safetensors"));
  CHECK(ck.step == 150);
  CHECK(ck.optimizer == "adamw");
  CHECK(ck.model_kind == "gpt");
  const models::CharLmCheckpoint lm = models::load_char_lm(dir.file("run/checkpoint.safetensors"));
  CHECK(lm.vocab.size() == V);
  CHECK(lm.config.n_embd == 16);
}

namespace {
// Trains 60 steps, resumes to 120, and compares with a straight 120-step run. Returns the
// number of parameters that differ.
std::size_t resume_vs_straight(double dropout) {
  TempDir dir;
  const std::string data = write_pattern_text(dir);
  // A constant learning rate: the cosine schedule depends on the total step count, so a
  // 60-step run and the first 60 steps of a 120-step run differ by design.
  Opts o = tiny_options(data, dir.file("resumed"));
  o->warmup = 0;
  o->min_lr = o->lr;
  o->eval_interval = 40;
  o.job.sample_tokens = 0;
  o->final_eval_iters = 2;
  o.model.dropout = float(dropout);

  Opts first = o;
  first->steps = 60;
  run(first);
  Opts second = o;
  second->steps = 120;
  second->resume = true;
  std::string report;
  const train::FitResult resumed = run(second, &report).fit;
  CHECK(resumed.steps == 60);
  CHECK(report.find("resuming") != std::string::npos);

  Opts straight = o;
  straight->steps = 120;
  straight->out_dir = dir.file("straight");
  const train::FitResult whole = run(straight).fit;
  // The loss curve continues across the resume: the same 120 training points in both (the
  // resumed run also has the validation point the first part ended with, at step 60).
  auto train_rows = [](const std::string& csv) {
    std::string rows;
    std::istringstream lines(csv);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("train,", 0) == 0) rows += line + "\n";
    return rows;
  };
  const std::string resumed_rows = train_rows(read_all(dir.file("resumed/loss.csv")));
  CHECK(std::count(resumed_rows.begin(), resumed_rows.end(), '\n') == 120);
  CHECK(resumed_rows == train_rows(read_all(dir.file("straight/loss.csv"))));

  const train::Checkpoint a = train::load_checkpoint(dir.file("resumed/checkpoint.safetensors"));
  const train::Checkpoint b = train::load_checkpoint(dir.file("straight/checkpoint.safetensors"));
  CHECK(a.step == 120);
  CHECK(b.step == 120);
  CHECK(a.rng_state == b.rng_state);
  REQUIRE(a.params.size() == b.params.size());
  std::size_t differing = 0;
  for (auto& [name, t] : b.params) {
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
  Opts o = tiny_options(data, dir.file("run"));
  o->steps = 2;
  o.job.sample_tokens = 0;
  o->final_eval_iters = 1;
  auto error_of = [](const Opts& opts) -> std::string {
    try {
      run(opts);
    } catch (const train::InputError& e) {
      return e.what();
    }
    return "";
  };
  // No checkpoint yet.
  Opts r = o;
  r->resume = true;
  CHECK(error_of(r).find("checkpoint.safetensors") != std::string::npos);
  run(o);
  // A checkpoint of another model or optimizer.
  r.model.n_embd = 32;
  CHECK(error_of(r).find("has model option n_embd = 16, this run 32") != std::string::npos);
  r = o;
  r->resume = true;
  r->optimizer = "sgd";
  CHECK(error_of(r).find("adamw") != std::string::npos);
  r = o;
  r->resume = true;
  r->steps = 4;
  CHECK(error_of(r) == "");
  CHECK(train::load_checkpoint(dir.file("run/checkpoint.safetensors")).step == 4);
  // Resuming a checkpoint that is already past --steps would write one with a wrong step.
  r->steps = 3;
  CHECK(error_of(r).find("beyond --steps 3") != std::string::npos);
  CHECK(train::load_checkpoint(dir.file("run/checkpoint.safetensors")).step == 4);
  // Data errors name the file.
  Opts d = o;
  d.job.data = dir.file("missing.txt");
  CHECK(error_of(d).find("missing.txt") != std::string::npos);
  // Bad options are refused up front, before any data is read.
  d = o;
  d.job.temperature = -1;
  CHECK(error_of(d).find("key 'temperature'") != std::string::npos);
}
