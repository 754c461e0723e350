// gg::train::InputError, on its own so that readers of outside data (train/data.cpp, the
// fuzz targets) need not include the model headers.
#pragma once

#include <stdexcept>

namespace gg::train {

// The one error type for bad user input to training (config, data, weights, options):
// what() is one line naming the thing and the problem.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gg::train
