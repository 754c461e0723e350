// The command line's input files checked before any work, so a refusal names the option:
// "--checkpoint ck.safetensors: no such file" rather than the reader's message about a path.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "io/message.h"
#include "train/error.h"

namespace gg::cli {

// Throws InputError naming `flag` unless `path` is an existing regular file (an empty path,
// a directory, a FIFO or a device is refused; its size and contents are the reader's to check).
inline void require_input_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw train::InputError(fmt::format("{}: empty; give a file", flag));
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    throw train::InputError(fmt::format("{} {}: no such file", flag, io::in_quotes(path, 80)));
  if (!fs::is_regular_file(st))
    throw train::InputError(fmt::format("{} {}: not a regular file", flag, io::in_quotes(path, 80)));
}

}  // namespace gg::cli

namespace gg::cli {

// Throws InputError naming `flag` unless `path` can name a file to write: not empty, no
// component over 255 bytes, at most 4096 bytes in all, its directory (if it names one) a
// directory that exists.
inline void require_output_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw train::InputError(fmt::format("{}: empty; give a file to write", flag));
  if (path.size() > 4096) throw train::InputError(fmt::format("{} {}: a path of {} bytes", flag, io::in_quotes(path, 60), path.size()));
  for (const fs::path& part : fs::path(path))
    if (part.native().size() > 255)
      throw train::InputError(fmt::format("{} {}: a name of more than 255 bytes", flag, io::in_quotes(path, 60)));
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec))
    throw train::InputError(fmt::format("{} {}: no directory {}", flag, io::in_quotes(path, 60), io::in_quotes(dir.string(), 60)));
}

}  // namespace gg::cli
