// The `gradgraph` program: the command line (cli/app.h), its one-line errors on stderr, and
// under mpirun one voice for the job.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "cli/app.h"
#include "train/distributed.h"

using namespace gg;

// "gradgraph: error: ..." on stderr; under mpirun, with the rank when not rank 0, and only
// once (by rank 0) for an error every rank raised.
static void report_error(const std::string& msg) {
  const train::World* w = train::World::started();
  if (w) w->failed();
  if (w && !w->reports_errors()) return;
  const int rank = train::World::launched_rank();
  // Messages are one short line at their source (the fuzzer checks it); this is the last
  // guard, for a path or name a lower layer (the file system, the standard library) echoed.
  std::string line = msg.size() > 270 ? msg.substr(0, 240) + "..." : msg;
  for (char& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  fmt::print(stderr, "gradgraph: error: {}{}\n", rank > 0 ? fmt::format("rank {}: ", rank) : "", line);
}

int main(int argc, char** argv) {
  // Under mpirun, rank 0 speaks for the job: the other ranks' reports and samples are
  // rank 0's, so their standard output goes nowhere (their errors still reach stderr).
  if (train::World::launched_rank() > 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  // Every option of every command, one a line ("command<TAB>--flag<TAB>TYPE<TAB>takes a
  // value<TAB>required"), read by the generated bad-input matrix (tests/cli): a new option
  // is tested without a test written for it. Not in --help.
  if (argc == 2 && std::string_view(argv[1]) == "--list-options") {
    for (const cli::OptionRow& r : cli::list_options())
      fmt::print("{}\t{}\t{}\t{}\t{}\n", r.command, r.flag, r.type, r.takes_value ? 1 : 0, r.required ? 1 : 0);
    return 0;
  }
  std::string error;
  const int status = cli::run(argc, argv, error);
  if (!error.empty()) {
    report_error(error);
  }
  return status;
}
