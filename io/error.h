// gg::io::Error: the one error type of the io library (safetensors, JSON, file reading).
// what() is one line naming the file (or tensor, or option source) and the problem.
#pragma once

#include <stdexcept>

namespace gg::io {

// e.g. "w.safetensors: tensor 'x': unknown dtype 'BF16' (...)".
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

}  // namespace gg::io
