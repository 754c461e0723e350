// Reading a whole input file with a size cap: the one way the project reads outside text
// (configs, training text). Refuses what is not a regular file (a FIFO, a device such as
// /dev/zero, a directory) before opening it, so nothing blocks or reads without end.
// Not here: parsing; stdin (a caller that documents "-" handles it itself).
#pragma once

#include <cstddef>
#include <string>

#include "error.h"

namespace gg::io {

// The bytes of `path`. `what` says what the file is for, in messages ("config",
// "training text"). Requires nothing; throws Error "<path>: <what>: <problem>" when the
// file is missing, unreadable, not a regular file, or larger than max_bytes.
// Ensures: at most max_bytes bytes are allocated; a FIFO without writer never blocks.
std::string read_file(const std::string& path, std::size_t max_bytes, const std::string& what);

}  // namespace gg::io
