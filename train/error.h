// The one error type for bad user input to training (configs, options, data, weights,
// checkpoints): what() is one line naming the thing and the problem.
#pragma once

#include <stdexcept>

namespace gg::train {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gg::train
