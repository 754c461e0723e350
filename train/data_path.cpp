// find_data_file(): the bundled data's place at run time, from fixed candidates.
#include "train/data_path.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "train/error.h"

namespace gg::train {

namespace fs = std::filesystem;

namespace {
std::string& installed_dir() {
  static std::string dir;
  return dir;
}
}  // namespace

void set_installed_data_dir(std::string dir) { installed_dir() = std::move(dir); }

std::string find_data_file(const std::string& name) {
  std::vector<fs::path> places;
  if (const char* dir = std::getenv("GRADGRAPH_DATA_DIR"); dir && *dir) places.push_back(fs::path(dir) / name);
  places.push_back(fs::path("data") / name);
  if (!installed_dir().empty()) places.push_back(fs::path(installed_dir()) / name);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path()) {
    const fs::path dir = exe.parent_path();
    places.push_back(dir / ".." / "share" / "gradgraph" / "data" / name);
    places.push_back(dir / "data" / name);
    places.push_back(dir / ".." / "data" / name);
    places.push_back(dir / ".." / ".." / "data" / name);
  }
  std::string looked;
  for (const fs::path& p : places) {
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
    looked += (looked.empty() ? "" : ", ") + p.lexically_normal().string();
  }
  throw InputError(fmt::format("data file '{}' not found; looked at {} (set GRADGRAPH_DATA_DIR to its directory)",
                               name, looked));
}

}  // namespace gg::train
