// A training run below fit(), for loops fit() does not write: several models, each with its
// own optimizer, schedule and parameter groups, stepped in the caller's order (a GAN's
// discriminator and generator; an encoder trained, then frozen while a head trains). The
// session keeps what fit() keeps: one checkpoint file with every model's parameters, every
// optimizer's state, every generator and the curves, written to a temporary name and
// renamed, resumed bit for bit; the curves as CSV and SVG; a progress bar; a report.
//
//   Model disc(...), gen(...);  gen.share_params(disc);   // gen's loss reads disc's weights
//   Session s({.out_dir = "runs/gan", .steps = 2000});
//   s.add("disc", disc, d_opts);                           // d_opts.optimizer, lr, schedule, ...
//   s.add("gen", gen, g_opts);                             // g_opts.groups = "disc.*:frozen"
//   for (std::int64_t t = s.start({{"disc", d_example}, {"gen", g_example}}); t < 2000; ++t) {
//     s.step("disc", t, real_and_fake(s.rng()));
//     s.step("gen", t, noise(s.rng()));
//     if ((t + 1) % 250 == 0) { s.log("modes", t + 1, modes_covered(gen)); s.save(t + 1); }
//   }
//   s.finish(2000);
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model.h"
#include "trainer.h"

namespace gg::train {

struct SessionOptions {
  std::string out_dir = "runs/session";  // checkpoint.safetensors, loss.csv, loss.svg (metrics.*)
  std::int64_t steps = 1000;              // the run's length: the progress bar, the schedules' end
  std::int64_t seed = 1337;               // initial weights, the data generator, dropout
  bool resume = false;                    // continue from <out_dir>/checkpoint.safetensors
  bool quiet = false;                     // no progress bar
};

class Session {
 public:
  Session(SessionOptions o, RunInfo info = {}, std::FILE* out = stdout);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // A part of the run: model `m` trained on its loss by the optimizer, schedule, clipping
  // and parameter groups of `o` (its steps, out_dir, seed and resume are the session's).
  // `name` names its curve ("<name>.loss") and its optimizer state in the checkpoint. Before
  // start(); names are unique.
  void add(const std::string& name, Model& m, TrainOptions o);
  // Declares each part's model on its example batch (by part name), then resumes the
  // checkpoint or creates the parameters; returns the step to continue from.
  std::int64_t start(const std::map<std::string, Batch>& examples);
  // The data generator: draw every batch from it (the checkpoint carries its state).
  std::mt19937_64& rng() { return rng_; }

  // One optimizer step of part `name` at step `step` (0-based): forward and backward on
  // `b`, clipping, the update at its schedule's rate. Returns the loss (also on curve
  // "<name>.loss"). A loss or gradient norm that is not finite throws Diverged (the curves
  // are written, the last checkpoint kept).
  double step(const std::string& name, std::int64_t step, const Batch& b);
  // A point on curve `curve` (metrics.csv, or loss.csv for a name ending in ".loss").
  void log(const std::string& curve, std::int64_t step, double value);
  // The checkpoint after `step` steps, and the curves so far.
  void save(std::int64_t step);
  // The end after `step` steps: the checkpoint, the curves and the report.
  FitResult finish(std::int64_t step);

 private:
  struct Part;
  Part& part(const std::string& name);
  std::string parts_json() const;
  void resume();

  SessionOptions o_;
  RunInfo info_;
  std::FILE* out_;
  std::vector<std::unique_ptr<Part>> parts_;
  std::mt19937_64 rng_;
  std::vector<Series> curves_;
  std::unique_ptr<class Progress> progress_;
  std::int64_t start_ = 0;
  bool started_ = false;
  std::string ck_path_;
  double seconds_at_start_ = 0;
};

}  // namespace gg::train
