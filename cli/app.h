// The `gradgraph` command line as a function: main() calls it, and so does the command-line
// fuzzer (fuzz/fuzz_cli.cpp), which builds argv from the option tables.
#pragma once

#include <string>
#include <vector>

namespace gg::cli {

// Parses argv (argv[0] is the program) and runs the command. Returns the exit status; a
// user's mistake returns non-zero with `error` set to its one line (without the
// "gradgraph: error: " prefix), printed by the caller. With `check_only`, stops once the
// options are parsed, checked against their tables and the files they name are found:
// everything the command line alone decides, and no work.
int run(int argc, const char* const* argv, std::string& error, bool check_only = false);

// Every option of every command, from the tables the flags are made of.
struct OptionRow {
  std::string command, flag, type;  // "train", "--n-layer", "INT"
  bool takes_value = true, required = false;
};
std::vector<OptionRow> list_options();

}  // namespace gg::cli
