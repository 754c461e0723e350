// Running the reference model: weights files to and from a ParamStore (checked against
// the config's parameter table), token batches (checked against the config), and a
// step runner that computes the loss, logits and every parameter's gradient.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../autodiff/optim.h"
#include "../dsl/gpt.h"
#include "../io/safetensors.h"
#include "../ops/executor.h"
#include "config.h"

namespace gg::train {

// Puts the model's parameters from `f` into `store`. Throws InputError naming `f.path` and
// listing every missing, unexpected and mis-shaped name (extra names allowed if `allow_extra`).
void load_weights(ParamStore& store, const io::File& f, const dsl::GptConfig& c, bool allow_extra = false);
// Adds every model parameter of `store` to `f` under its own name.
void add_weights(io::File& f, const ParamStore& store, const dsl::GptConfig& c);

// Tokens and targets of one or more batches: (N, B, T) row-major, N = 1 for one batch.
struct Batches {
  std::int64_t N = 1, B = 0, T = 0;
  std::vector<std::int32_t> tokens, targets;
  const std::int32_t* tokens_at(std::int64_t n) const { return tokens.data() + n * B * T; }
  const std::int32_t* targets_at(std::int64_t n) const { return targets.data() + n * B * T; }
};
// Reads "tokens" and "targets" ([B, T], or [N, B, T] when `stacked`), I32 or I64, and checks
// them against the config: T <= block_size, tokens in [0, V), targets in [-1, V), and each
// batch with at least one target that is not -1. Throws InputError naming the file.
Batches read_batches(const io::File& f, const dsl::GptConfig& c, bool stacked);

// The model's graph for (B, T) batches with its gradients and two plans: forward+backward
// (loss, logits, gradients; dropout on when training) and forward only (loss, no dropout).
class StepRunner {
 public:
  StepRunner(const dsl::GptConfig& c, std::int64_t B, std::int64_t T, ParamStore& store, bool training = false,
             std::uint64_t seed = 0);
  // Loss of the batch, and the gradients of every parameter (read with grads()).
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets);
  // Loss only (no gradients computed).
  double loss(const std::int32_t* tokens, const std::int32_t* targets);
  // (parameter, gradient) pairs of the last forward_backward, in the spec's table order.
  std::vector<ParamGrad> grads();
  // Logits (B, T, V) of the last forward_backward.
  View logits() const;
  const Graph& graph() const { return g_; }
  const dsl::Gpt& model() const { return m_; }
  const Executor& train_plan() const { return *train_; }
  // The generator of the training plan's dropout masks (a checkpoint carries its state).
  std::mt19937_64& dropout_rng() { return train_->rng(); }

 private:
  dsl::GptConfig c_;
  ParamStore& store_;
  Graph g_, eval_g_;  // eval_g_: the same model without dropout
  dsl::Gpt m_, eval_m_;
  std::vector<NodeId> grads_;
  std::unique_ptr<Executor> train_, eval_;
};

}  // namespace gg::train
