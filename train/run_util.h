// What fit() and Session share: the curves' files, the generators as text, the parameter
// groups and the learning-rate schedule. Internal to train/: not installed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "train/distributed.h"
#include "train/trainer.h"

namespace gg::train {

// The curve `name` of `curves`, added (empty) when there is none.
Series* series(std::vector<Series>& curves, const std::string& name);
// loss.csv: train, val and grad_norm (and any "<part>.loss"); loss.svg: the losses;
// metrics.csv/svg: everything else, when there is anything.
void write_curves(const std::string& dir, const std::string& title, const std::vector<Series>& curves);
// Generators as one line of text, and back (InputError naming `path` when damaged).
std::string rng_text(const std::mt19937_64& data, const std::mt19937_64& dropout);
void restore_rngs(const std::string& text, const std::string& path, std::mt19937_64& data, std::mt19937_64& dropout);
std::string rngs_text(const std::vector<const std::mt19937_64*>& gens);
void restore_rngs(const std::string& text, const std::string& path, const std::vector<std::mt19937_64*>& gens);

// How a checkpoint's model (kind `saved_kind`, options JSON `saved`) differs from this run's,
// in a bounded phrase for a refusal: "holds model 'vit', this run builds 'gpt'" or "has model
// option n_embd = 64, this run 32" (the first differing key; values and names cut short).
std::string model_difference(const std::string& saved_kind, const std::string& saved, const std::string& kind,
                             const std::string& now);

// Throws InputError unless `schedule` names a built-in schedule and no lr_schedule is given,
// or another name and an lr_schedule.
void check_schedule(const TrainOptions& o);
// The learning rate of optimizer step `step` (0-based) under o's schedule.
double scheduled_lr(const TrainOptions& o, std::int64_t step);
// o.groups applied to a declared model and its optimizer: per-parameter learning-rate
// factors and weight decays, the frozen parameters (returned). InputError for a pattern that
// matches nothing, or when every parameter would be frozen.
std::vector<std::string> apply_groups(Model& m, Optimizer& optim, const TrainOptions& o);

// Why a training pass's loss or gradient norm is not finite: a non-finite value in the
// batch, or the first node that makes one, found by rerunning the pass (same batch,
// parameters and dropout draws: model_rng as it was before it) in anomaly mode, unfused.
// The model's plan options, anomaly mode (back to detect_anomaly) and generator are restored.
std::string divergence_cause(Model& m, const Batch& b, const std::mt19937_64& model_rng, bool detect_anomaly);

// Data parallel's agreement checks. What one rank's run is made of, as (label, value) pairs:
// every training option, the model's kind and options, its parameters' shapes and the first
// global batch's shapes and bytes.
std::vector<std::pair<std::string, std::string>> run_facts(const TrainOptions& o, Model& m, const Batch& first);
// Throws InputError (an error every rank shares) naming the first fact in which a rank
// differs from rank 0, with both values.
void check_same_run(const World& w, const std::vector<std::pair<std::string, std::string>>& facts);
// Throws InputError (shared) naming the step when a rank's parameters are not bit for bit
// rank 0's.
void check_params_agree(const World& w, Model& m, std::int64_t step);

}  // namespace gg::train
