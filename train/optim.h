// Optimizers, gradient clipping and the learning-rate schedule, applied to the parameter
// store with the gradients an executor computed (ParamGrad: autodiff/param_grad.h).
// Formulas follow PyTorch (torch.optim.SGD, torch.optim.AdamW,
// torch.nn.utils.clip_grad_norm_) exactly, as the reference-model spec requires.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "../autodiff/param_grad.h"
#include "../ops/ir/tensor.h"

namespace gg {

// The parameters an optimizer steps, by name, with their shapes: what load_state checks
// a saved state against.
using ParamShapes = std::map<std::string, Shape>;
ParamShapes param_shapes(const ParamStore& store);
ParamShapes param_shapes(std::span<const ParamGrad> pg);

// L2 norm over all gradients together, accumulated in double in one parallel pass: the
// gradients are cut into fixed chunks of grad_chunk values (a parameter's last chunk may be
// shorter), each chunk summed in a fixed order, the chunk sums added in order, so the result
// is the same at any thread count.
double grad_norm(std::span<const ParamGrad> pg);
// The factor clipping to max_norm applies: min(1, max_norm / (norm + 1e-6)) as a float, or
// 1 when max_norm <= 0.
float clip_scale(double norm, double max_norm);
// grad_norm(pg), then (if max_norm > 0) every gradient scaled by clip_scale(norm, max_norm)
// in place. Returns the norm before clipping. To save that second pass over the gradients,
// pass the scale to Optimizer::step instead (same numbers, bit for bit).
double clip_grad_norm(std::span<const ParamGrad> pg, double max_norm);
// Values per chunk of the passes over all parameters (norm, scale, optimizer updates).
inline constexpr std::int64_t grad_chunk = 16384;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate lr, reading each gradient value as g * grad_scale (the
  // clip_scale of a deferred clipping: the result equals scaling the gradients first, bit for
  // bit; the gradients are left as they are). One parallel pass over all parameters, chunked
  // as grad_norm is; every value is updated independently, so any thread count gives the
  // same result. Increments steps().
  virtual void step(std::span<const ParamGrad> pg, double lr, float grad_scale = 1.f) = 0;
  std::int64_t steps() const { return t_; }
  // Everything needed to resume bit-exactly: buffers by "<prefix>.<param name>", and the step.
  virtual std::map<std::string, Tensor> state() const = 0;
  // Restores state() taken after `steps` steps, checked against the parameters it will
  // step: once any step was taken, every buffer of every parameter must be there with the
  // parameter's shape, and nothing else; steps >= 0; a state of another optimizer kind is
  // refused naming both. Throws GraphError (naming the parameter, the key and the shapes)
  // and leaves the optimizer unchanged on a mismatch.
  void load_state(const std::map<std::string, Tensor>& s, std::int64_t steps, const ParamShapes& params);
  virtual const char* kind() const = 0;  // "sgd", "adamw"

  // Per parameter (by name): a factor on the learning rate, and (AdamW) a weight decay of
  // its own (>= 0; -1: the optimizer's); parameters not listed take 1 and the optimizer's.
  // A parameter group's settings (train/trainer.h's TrainOptions::groups).
  struct ParamSetting {
    double lr_scale = 1;
    double weight_decay = -1;
  };
  void set_param_settings(std::map<std::string, ParamSetting> s) { settings_ = std::move(s); }

 protected:
  // The key prefixes of this optimizer's buffers ("adam_m", "adam_v"); none: no state.
  virtual std::vector<std::string> buffer_prefixes() const = 0;
  virtual void set_buffers(const std::map<std::string, Tensor>& s) = 0;
  // Throws GraphError unless every gradient has its parameter's size and every buffer of
  // it (if any) its parameter's shape.
  void check_sizes(std::span<const ParamGrad> pg, const std::vector<const std::map<std::string, Tensor>*>& bufs) const;
  ParamSetting setting(const std::string& name) const;
  std::int64_t t_ = 0;
  std::map<std::string, ParamSetting> settings_;
};

// p -= lr * g; with momentum m > 0: buf = m * buf + g (buf = g at the first step), p -= lr * buf.
class Sgd : public Optimizer {
 public:
  explicit Sgd(double momentum = 0) : momentum_(momentum) {}
  void step(std::span<const ParamGrad> pg, double lr, float grad_scale = 1.f) override;
  std::map<std::string, Tensor> state() const override;
  const char* kind() const override { return "sgd"; }

 private:
  std::vector<std::string> buffer_prefixes() const override;
  void set_buffers(const std::map<std::string, Tensor>& s) override;
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
  void step(std::span<const ParamGrad> pg, double lr, float grad_scale = 1.f) override;
  std::map<std::string, Tensor> state() const override;
  const char* kind() const override { return "adamw"; }

 private:
  std::vector<std::string> buffer_prefixes() const override { return {"adam_m", "adam_v"}; }
  void set_buffers(const std::map<std::string, Tensor>& s) override;
  AdamWOptions o_;
  std::map<std::string, Tensor> m_, v_;
};

// Linear warm-up over `warmup` steps to lr_max, then cosine decay to lr_min at `total`
// (and lr_min after it). step counts from 0.
double cosine_lr(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max, double lr_min);
// The same warm-up, then a straight line from lr_max to lr_min at `total`.
double linear_lr(std::int64_t step, std::int64_t warmup, std::int64_t total, double lr_max, double lr_min);
// The same warm-up, then lr_max.
double constant_lr(std::int64_t step, std::int64_t warmup, double lr_max);

}  // namespace gg
