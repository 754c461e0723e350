// find_data_file(): where the bundled data (data/tinyshakespeare.txt, data/digits.csv) is
// at run time, for an installed program, a build tree and a source checkout alike. No
// source path is compiled in; the places looked at are fixed and listed in the error.
#pragma once

#include <string>

namespace gg::train {

// Returns the path of the first existing file among, in order:
//   $GRADGRAPH_DATA_DIR/<name>
//   ./data/<name>                                (run from the source root)
//   <exe dir>/../share/gradgraph/data/<name>     (installed: P/bin next to P/share)
//   <exe dir>/data/<name>
//   <exe dir>/../data/<name>                     (build tree: build/data links to the source's data/)
//   <exe dir>/../../data/<name>                  (build dir inside the source tree)
// where <exe dir> is the running program's directory (/proc/self/exe).
// Throws InputError naming `name` and every place looked at when none has it.
std::string find_data_file(const std::string& name);

}  // namespace gg::train
