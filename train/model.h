// A model as the trainer sees it: the user's function that declares the graph for a batch,
// the parameters, and plans built and cached per batch shape (a training plan with every
// parameter's gradient, an evaluation plan without dropout). Any model declared with the DSL
// fits: the GPT, the ViT, the encoder-decoder and the user's own.
//
//   Model m("mlp", [](ModelInputs& in) {
//     Expr pred = linear(tanh(linear(in["x"], 8, "fc1")), 1, "fc2");
//     return ModelOutputs{mean_all((pred - in["y"]) * (pred - in["y"])), {{"pred", pred}}};
//   });
//   double loss = m.forward_backward(batch);   // then m.grads()
//
// Not here: optimizers and the loop (train/trainer.h), files (train/checkpoint.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../autodiff/grad_stats.h"
#include "../dsl/expr.h"
#include "../ops/runtime/executor.h"
#include "../ops/ir/tensor.h"
#include "error.h"
#include "optim.h"

namespace gg::train {

// One batch: named tensors, fed to the model's inputs of the same names.
using Batch = std::map<std::string, Tensor>;

// What the build function sees: the graph, the batch's tensors as inputs, the pass.
class ModelInputs {
 public:
  ModelInputs(Graph& g, const Batch& b, bool training) : g_(g), batch_(b), training_(training) {}
  Graph& graph() { return g_; }
  // True for the training pass (dropout on), false for evaluation.
  bool training() const { return training_; }
  // Whether the batch has a tensor `name` (e.g. targets only when a loss is wanted).
  bool has(const std::string& name) const { return batch_.count(name) > 0; }
  // The input `name`, shaped like the batch's tensor (declared at first use).
  // Throws InputError when the batch has no such tensor, naming the closest it has.
  dsl::Expr operator[](const std::string& name);
  // The batch's tensor shape, without declaring an input.
  const Shape& shape(const std::string& name) const;

 private:
  Graph& g_;
  const Batch& batch_;
  bool training_;
  std::map<std::string, dsl::Expr> declared_;
};

struct ModelOutputs {
  dsl::Expr loss;  // scalar f32; may be left empty for inference-only batches (no targets)
  std::vector<std::pair<std::string, dsl::Expr>> outputs;  // values to read back, by name
};

using BuildFn = std::function<ModelOutputs(ModelInputs&)>;

// A parameter as declared: name, shape, initializer.
struct ParamInfo {
  std::string name;
  Shape shape;
};

class Model {
 public:
  // `kind` and `options_json` identify the model in checkpoints (a checkpoint of another kind
  // or other options is refused); `build` declares the graph for a batch.
  Model(std::string kind, BuildFn build, std::string options_json = "{}");
  Model(Model&&) noexcept;
  ~Model();

  const std::string& kind() const { return kind_; }
  const std::string& options_json() const { return options_json_; }
  ParamStore& params() { return *params_; }
  const ParamStore& params() const { return *params_; }
  // From now on this model's parameters are `other`'s: one store, so a parameter both
  // declare (a GAN's discriminator, read by the generator's loss) is one tensor. Before the
  // first pass (InputError otherwise).
  void share_params(Model& other);
  bool shares_params_with(const Model& other) const { return params_ == other.params_; }

  // Declares the model for a batch's shapes (if not yet) and returns its parameters in
  // declaration order. Every batch shape declares the same parameters.
  const std::vector<ParamInfo>& declare(const Batch& example);
  const std::vector<ParamInfo>& param_table() const;  // requires declare() or a run first
  // Creates the parameters not yet in the store from their initializers (seeded by name).
  void init_params(std::uint64_t seed);

  // The training pass: loss and every parameter's gradient (read with grads()).
  double forward_backward(const Batch& b);
  // The same, calling on_grad(i, gradient) as soon as the gradient grads()[i] is final, while
  // the rest of the backward runs (data parallel starts its all-reduces there; train/distributed.h).
  double forward_backward(const Batch& b, const std::function<void(std::size_t, std::span<const float>)>& on_grad);
  // Where each of grads()'s gradients becomes final in the training plan for b's shapes:
  // after that many of its steps (Executor::ready_at); with names, the parameters' names.
  std::vector<std::size_t> grad_ready_at(const Batch& b, std::vector<std::string>* names = nullptr);
  // (parameter, gradient) pairs of the last forward_backward, in declaration order.
  std::vector<ParamGrad> grads();
  // The evaluation pass (no dropout): the loss (NaN when the model declared none).
  double loss(const Batch& b);
  // The evaluation pass, returning the named outputs (and "loss" when there is one).
  std::map<std::string, Tensor> evaluate(const Batch& b);
  // An output of the last forward_backward ("loss" or a named output), without a copy.
  View train_output(const std::string& name) const;

  // The generator of dropout masks, shared by every plan (a checkpoint carries its state).
  std::mt19937_64& rng() { return rng_; }
  // The training plan of the last forward_backward (its arena size, order, profile).
  Executor& last_train_plan();
  // The plan for a batch's shapes (built and cached if new), without running it.
  Executor& plan_for(const Batch& b, bool training);
  // The planning options of the plans used from now on (ops/runtime/executor.h; by default the
  // environment's switches). A plan is cached per batch shapes and options, so a tool can
  // alternate two plans of one model over the same parameters (gradgraph bench --ab).
  void set_plan_options(const ExecutorOptions& o);
  const ExecutorOptions& plan_options() const { return plan_options_; }
  // Mixed precision: with bf16, every matrix product of the plans built from now on, forward
  // and backward, takes bf16 operands and sums in f32 (ops/ir/graph.h, Bf16Products);
  // parameters, gradients and everything else stay f32. Plans are cached per precision.
  void set_bf16_products(bool on);
  bool bf16_products() const { return bf16_; }
  // Whether dsl::attention builds the fused attention primitive pair in the plans built from
  // now on (a FusedAttention scope around each graph; dsl/nn.h's AttentionOptions::fused);
  // unset, GG_FUSED_ATTENTION or else the number of keys decides. Plans are cached per setting.
  void set_fused_attention(std::optional<bool> on);
  const std::optional<bool>& fused_attention() const { return fused_attention_; }

  // Anomaly mode for every plan, built or to be built: the first node whose output holds a
  // NaN (or makes an Inf) stops the run with a GraphError naming it (ops/runtime/executor.h).
  void set_detect_anomaly(bool on);
  // The parameters whose gradient is zero by construction in the training plan of `b`, with
  // the reason (autodiff/grad_stats.h), each once.
  std::vector<ZeroGrad> structurally_zero(const Batch& b);
  // Builds a plan's graph without running it, for listings and tests: the evaluation pass,
  // or (training) the training pass with the gradient of the loss for every parameter that
  // is not frozen appended as graph (their ids in `grads`, in declaration order).
  std::unique_ptr<Graph> graph_for(const Batch& b, bool training, ModelOutputs* outs = nullptr,
                                   std::vector<NodeId>* grads = nullptr) const;

  // Parameters no training pass computes a gradient for (grads() leaves them out, and so
  // the optimizer never sees them): an encoder pretrained then frozen. Plans are cached
  // per frozen set.
  void set_frozen(const std::vector<std::string>& names);
  const std::set<std::string>& frozen() const { return frozen_; }

 private:
  struct Plan;
  std::unique_ptr<Graph> build_graph(const Batch& b, bool training, ModelOutputs* outs) const;
  std::string other_params(const Batch& b, const std::vector<ParamInfo>& table) const;
  Plan& plan(const Batch& b, bool training);
  double run(Plan& p, const Batch& b);

  std::string kind_, options_json_;
  BuildFn build_;
  std::shared_ptr<ParamStore> params_ = std::make_shared<ParamStore>();
  std::vector<ParamInfo> table_;
  bool declared_ = false;
  std::unique_ptr<Graph> decl_graph_;  // the graph that declared the table (for init_params)
  std::map<std::string, Shape> decl_batch_;  // the shapes of the batch that declared it
  std::set<std::string> frozen_;
  std::string frozen_key_;
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  Plan* last_train_ = nullptr;
  bool detect_anomaly_ = false;
  bool bf16_ = false;
  std::optional<bool> fused_attention_;
  ExecutorOptions plan_options_;
  std::string options_key_ = "|off:" + switches_off(plan_options_);  // plan_options_'s part of a plan's key
  std::mt19937_64 rng_{0};
};

// Puts the model's parameters from `tensors` into `store`. Throws InputError naming `source`
// and listing every missing, unexpected (unless allow_extra) and mis-shaped name, counted
// past the first few.
void load_params(ParamStore& store, const std::map<std::string, Tensor>& tensors, const std::vector<ParamInfo>& table,
                 const std::string& source, bool allow_extra = false);

}  // namespace gg::train
