// A parameter and its gradient as a step hands them on: to the gradient statistics here
// and to train/'s optimizers and clipping. Only the pairing; what is done with it is theirs.
#pragma once

#include <span>
#include <string>

#include "../ops/ir/tensor.h"

namespace gg {

// One parameter and its gradient, which must have the parameter's number of elements
// (the optimizers and clipping throw GraphError naming the parameter and both sizes).
struct ParamGrad {
  std::string name;
  Tensor* param;
  std::span<float> grad;
};

}  // namespace gg
