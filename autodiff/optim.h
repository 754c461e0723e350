// Optimizers and gradient clipping, applied to the parameter store with the gradients
// an executor computed. Formulas follow PyTorch (torch.optim.SGD, torch.optim.AdamW,
// torch.nn.utils.clip_grad_norm_) exactly, as the reference-model spec requires.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "../ops/tensor.h"

namespace gg {

// One parameter and its gradient (same number of elements).
struct ParamGrad {
  std::string name;
  Tensor* param;
  float* grad;
};

// L2 norm over all gradients together (accumulated in double); if max_norm > 0, scales
// every gradient by min(1, max_norm / (norm + 1e-6)). Returns the norm before clipping.
double clip_grad_norm(std::span<const ParamGrad> pg, double max_norm);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate lr; increments step().
  virtual void step(std::span<const ParamGrad> pg, double lr) = 0;
  std::int64_t steps() const { return t_; }
  // Everything needed to resume bit-exactly: buffers by "<kind>.<param name>", and the step.
  virtual std::map<std::string, Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& s, std::int64_t steps) = 0;

 protected:
  std::int64_t t_ = 0;
};

// p -= lr * g; with momentum m > 0: buf = m * buf + g (buf = g at the first step), p -= lr * buf.
class Sgd : public Optimizer {
 public:
  explicit Sgd(double momentum = 0) : momentum_(momentum) {}
  void step(std::span<const ParamGrad> pg, double lr) override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& s, std::int64_t steps) override;

 private:
  double momentum_;
  std::map<std::string, Tensor> buf_;
};

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// Decoupled weight decay on parameters of 2+ dimensions, then Adam with bias correction.
class AdamW : public Optimizer {
 public:
  explicit AdamW(AdamWOptions o = {}) : o_(o) {}
  void step(std::span<const ParamGrad> pg, double lr) override;
  std::map<std::string, Tensor> state() const override;
  void load_state(const std::map<std::string, Tensor>& s, std::int64_t steps) override;

 private:
  AdamWOptions o_;
  std::map<std::string, Tensor> m_, v_;
};

// Linear warm-up over `warmup` steps to lr_max, then cosine decay to lr_min at `total`
// (and lr_min after it). step counts from 0.
double cosine_lr(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max, double lr_min);

}  // namespace gg
