// gpt_step_flops: N from the declared parameter table, so it is the model that is counted,
// not a second formula for its parameters.
#include "models/gpt_flops.h"

#include <fmt/format.h>

#include "train/error.h"

namespace gg::models {

StepFlops gpt_step_flops(const GptConfig& c, std::int64_t B, std::int64_t T) {
  if (B < 1) throw train::InputError(fmt::format("batch size must be >= 1, got {}", B));
  if (T < 1 || T > c.block_size)
    throw train::InputError(fmt::format("sequence length must be in [1, block_size = {}], got {}", c.block_size, T));
  StepFlops f;
  for (const train::ParamInfo& p : gpt_params(c)) f.params += numel(p.shape);
  f.tokens = B * T;
  f.dense = 6.0 * double(f.params) * double(f.tokens);
  f.attention = 12.0 * double(c.n_layer) * double(B) * double(T) * double(T) * double(c.n_embd);
  f.total = f.dense + f.attention;
  f.formula = fmt::format("6*N*B*T + 12*L*B*T*T*D = 6*{}*{}*{} + 12*{}*{}*{}*{}*{} = {:.0f} + {:.0f} = {:.0f}", f.params,
                          B, T, c.n_layer, B, T, T, c.n_embd, f.dense, f.attention, f.total);
  return f;
}

}  // namespace gg::models
