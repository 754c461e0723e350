// Switches read from the environment: planning passes and kernel paths a user can turn off
// to compare or debug (GG_FUSE=0, GG_SLICE=0, ...; README's list). Internal: not installed.
#pragma once

#include <cstdlib>
#include <string_view>

namespace gg {

// False when the environment sets `name` to "0", else true.
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::string_view(v) == "0");
}

}  // namespace gg
