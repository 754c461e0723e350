// Weights, batches and the step runner of the reference model.
#include "train/model.h"

#include <fmt/format.h>

#include <set>

#include "autodiff/grad.h"

namespace gg::train {

void load_weights(ParamStore& store, const io::File& f, const dsl::GptConfig& c, bool allow_extra) {
  std::vector<std::string> missing, misshaped, unexpected;
  std::set<std::string> known;
  for (auto& [name, shape] : dsl::gpt_param_shapes(c)) {
    known.insert(name);
    const io::Entry* e = f.find(name);
    if (!e) {
      missing.push_back(name);
      continue;
    }
    if (e->dtype != io::DType::f32 || e->shape != shape) {
      misshaped.push_back(fmt::format("{} is {}{} but the config needs F32{}", name, io::dtype_name(e->dtype),
                                      to_string(e->shape), to_string(shape)));
      continue;
    }
  }
  if (!allow_extra)
    for (auto& [name, e] : f.tensors)
      if (!known.count(name)) unexpected.push_back(name);
  if (!missing.empty() || !misshaped.empty() || !unexpected.empty()) {
    std::string msg = fmt::format("{}: weights do not match the config:", f.path);
    if (!missing.empty()) msg += fmt::format(" missing [{}];", fmt::join(missing, ", "));
    if (!unexpected.empty()) msg += fmt::format(" unexpected [{}];", fmt::join(unexpected, ", "));
    if (!misshaped.empty()) msg += fmt::format(" mis-shaped [{}];", fmt::join(misshaped, "; "));
    msg.pop_back();
    throw InputError(msg);
  }
  for (auto& [name, shape] : dsl::gpt_param_shapes(c)) {
    std::vector<float> v = f.find(name)->to_f32();
    store.set(name, Tensor::f32(shape, v));
  }
}

void add_weights(io::File& f, const ParamStore& store, const dsl::GptConfig& c) {
  for (auto& [name, shape] : dsl::gpt_param_shapes(c)) {
    const Tensor& t = store.at(name);
    f.add_f32(name, t.shape(), t.to_vector());
  }
}

Batches read_batches(const io::File& f, const dsl::GptConfig& c, bool stacked) {
  auto fail = [&](const std::string& why) { throw InputError(fmt::format("{}: {}", f.path, why)); };
  const io::Entry* tok = f.find("tokens");
  const io::Entry* tgt = f.find("targets");
  if (!tok || !tgt) fail(fmt::format("needs tensors 'tokens' and 'targets'{}", stacked ? " of shape [N, B, T]" : " of shape [B, T]"));
  const std::size_t rank = stacked ? 3 : 2;
  if (tok->shape.size() != rank) fail(fmt::format("'tokens' has shape {}, expected rank {}", to_string(tok->shape), rank));
  if (tgt->shape != tok->shape)
    fail(fmt::format("'targets' has shape {} but 'tokens' has {}", to_string(tgt->shape), to_string(tok->shape)));
  for (auto d : tok->shape)
    if (d < 1) fail(fmt::format("'tokens' has an empty dimension: {}", to_string(tok->shape)));
  Batches b;
  b.N = stacked ? tok->shape[0] : 1;
  b.B = tok->shape[rank - 2];
  b.T = tok->shape[rank - 1];
  if (b.T > c.block_size) fail(fmt::format("sequence length {} exceeds block_size {}", b.T, c.block_size));
  try {
    b.tokens = f.get_i32("tokens");
    b.targets = f.get_i32("targets");
  } catch (const io::Error& e) {
    throw InputError(e.what());
  }
  for (std::size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= c.vocab_size)
      fail(fmt::format("'tokens' holds {} at flat index {}, outside [0, vocab_size = {})", b.tokens[i], i, c.vocab_size));
  for (std::size_t i = 0; i < b.targets.size(); ++i)
    if (b.targets[i] < -1 || b.targets[i] >= c.vocab_size)
      fail(fmt::format("'targets' holds {} at flat index {}, outside [-1, vocab_size = {})", b.targets[i], i, c.vocab_size));
  for (std::int64_t n = 0; n < b.N; ++n) {
    bool any = false;
    for (std::int64_t i = 0; i < b.B * b.T; ++i) any = any || b.targets_at(n)[i] != -1;
    if (!any) fail(stacked ? fmt::format("batch {} has no target that is not -1 (ignored)", n)
                           : std::string("the batch has no target that is not -1 (ignored)"));
  }
  return b;
}

StepRunner::StepRunner(const dsl::GptConfig& c, std::int64_t B, std::int64_t T, ParamStore& store, bool training,
                       std::uint64_t seed)
    : c_(c), store_(store) {
  m_ = dsl::build_gpt(g_, c, B, T, true, training);
  std::vector<NodeId> wrt;
  for (const dsl::Expr& p : m_.params) wrt.push_back(p.id);
  grads_ = grad(g_, m_.loss.id, wrt);
  std::vector<NodeId> outs = grads_;
  outs.push_back(m_.loss.id);
  outs.push_back(m_.logits.id);
  train_ = std::make_unique<Executor>(g_, outs, store_, seed);
  eval_m_ = dsl::build_gpt(eval_g_, c, B, T, true, false);
  eval_ = std::make_unique<Executor>(eval_g_, std::vector<NodeId>{eval_m_.loss.id}, store_, seed);
}

// Feeds one (B, T) batch to `ex` and runs it; returns its loss.
static double run_batch(Executor& ex, NodeId loss, std::size_t n, const std::int32_t* tokens,
                        const std::int32_t* targets) {
  ex.set_input("tokens", std::span<const std::int32_t>(tokens, n));
  ex.set_input("targets", std::span<const std::int32_t>(targets, n));
  ex.run();
  return ex.scalar(loss);
}

double StepRunner::forward_backward(const std::int32_t* tokens, const std::int32_t* targets) {
  return run_batch(*train_, m_.loss.id, std::size_t(numel(m_.tokens.shape())), tokens, targets);
}

double StepRunner::loss(const std::int32_t* tokens, const std::int32_t* targets) {
  return run_batch(*eval_, eval_m_.loss.id, std::size_t(numel(eval_m_.tokens.shape())), tokens, targets);
}

std::vector<ParamGrad> StepRunner::grads() {
  std::vector<ParamGrad> r;
  for (std::size_t i = 0; i < m_.params.size(); ++i) {
    const std::string& name = m_.params[i].name();
    r.push_back({name, &store_.at(name), train_->value(grads_[i]).fspan()});
  }
  return r;
}

View StepRunner::logits() const { return train_->value(m_.logits.id); }

}  // namespace gg::train
