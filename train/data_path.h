// find_data_file(): where the bundled data (data/tinyshakespeare.txt, data/digits.csv) is
// at run time, for an installed program, a build tree and a source checkout alike. No
// source path is compiled in; the places looked at are fixed and listed in the error.
#pragma once

#include <string>

namespace gg::train {

// Returns the path of the first existing file among, in order:
//   $GRADGRAPH_DATA_DIR/<name>
//   ./data/<name>                                (run from the source root)
//   <installed data dir>/<name>                  (a program linked against an installed package)
//   <exe dir>/../share/gradgraph/data/<name>     (installed: P/bin next to P/share)
//   <exe dir>/data/<name>
//   <exe dir>/../data/<name>                     (build tree: build/data links to the source's data/)
//   <exe dir>/../../data/<name>                  (build dir inside the source tree)
// where <exe dir> is the running program's directory (/proc/self/exe).
// Throws InputError naming `name` and every place looked at when none has it.
std::string find_data_file(const std::string& name);

// The installed package's data directory, for find_data_file. find_package(gradgraph) defines
// GRADGRAPH_INSTALLED_DATA_DIR for the programs that link it, and this header registers it
// when such a program starts, so library code that looks for data finds it too.
void set_installed_data_dir(std::string dir);

#ifdef GRADGRAPH_INSTALLED_DATA_DIR
namespace detail {
inline const bool installed_data_dir_registered = (set_installed_data_dir(GRADGRAPH_INSTALLED_DATA_DIR), true);
}
#endif

}  // namespace gg::train
