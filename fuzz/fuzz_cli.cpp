// Fuzz target: the gradgraph command line. Each input is read as a choice of command and a
// few options, drawn from the option tables themselves (cli::list_options, so a new option
// is fuzzed without a line written for it), with values from a list of hostile texts (empty,
// zero, negative, NaN, infinities, 2^31, 2^63, a 100,000-character string, paths to a
// directory, a device, the committed files) or raw bytes, flags of other commands, stray
// words and `--flag=value` forms. cli::run checks them as the command would (check_only:
// parsing, the tables' kinds and ranges, the cross checks, the files named), with no work.
// Every input must end in exit 0 with no error, or non-zero with one line of at most 300
// bytes (with its "gradgraph: error: " prefix); anything else traps.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "cli/app.h"

namespace {

const std::vector<gg::cli::OptionRow>& rows() {
  static const std::vector<gg::cli::OptionRow> r = gg::cli::list_options();
  return r;
}

const std::vector<std::string>& commands() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const auto& r : rows())
      if (seen.insert(r.command).second) out.push_back(r.command);
    return out;
  }();
  return c;
}

const std::vector<std::string>& hostile() {
  static const std::vector<std::string> v = {
      "", "0", "-1", "1", "2", "-0", "nan", "NaN", "inf", "-inf", "1e308", "-1e308", "1e-320", "2147483648",
      "4294967296", "9223372036854775807", "9223372036854775808", "18446744073709551616", "0x10", "1.5", " 1",
      "true", "false", "yes", ",", ",,", "a,b", "-", "--", "--help", std::string(100000, 'x'), std::string(300, '/'),
      "/", "/dev/zero", "/dev/null", "/nonexistent/dir/file", "bench/gpt_small.json", "tests/golden/ref_basic.config.json",
      "tests/golden/ref_basic.weights.safetensors", "tests/golden/ref_basic.batch.safetensors", "data/digits.csv",
      "data/tinyshakespeare.txt", "adamw", "sgd", "simplify,fuse", "products", "learned", "\xff\xfe", "a\nb"};
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<std::string> args{"gradgraph"};
  if (in.ConsumeIntegralInRange(0, 15) == 0) {  // the global option
    args.push_back("--threads");
    args.push_back(hostile()[in.ConsumeIntegralInRange<std::size_t>(0, hostile().size() - 1)]);
  }
  const std::string command = commands()[in.ConsumeIntegralInRange<std::size_t>(0, commands().size() - 1)];
  args.push_back(command);
  std::vector<const gg::cli::OptionRow*> own;
  for (const auto& r : rows())
    if (r.command == command) own.push_back(&r);
  auto value = [&] {
    if (in.ConsumeBool()) return hostile()[in.ConsumeIntegralInRange<std::size_t>(0, hostile().size() - 1)];
    return in.ConsumeRandomLengthString(64);
  };
  // Every required option first (else nearly every input stops at "--x is required").
  for (const auto* r : own)
    if (r->required && in.ConsumeIntegralInRange(0, 7) != 0) args.insert(args.end(), {r->flag, value()});
  const int n = in.ConsumeIntegralInRange(0, 6);
  for (int i = 0; i < n && in.remaining_bytes() > 0; ++i) {
    switch (in.ConsumeIntegralInRange(0, 9)) {
      case 0:  // a stray word
        args.push_back(value());
        break;
      case 1: {  // an option of any command
        const auto& r = rows()[in.ConsumeIntegralInRange<std::size_t>(0, rows().size() - 1)];
        args.push_back(r.flag);
        if (r.takes_value) args.push_back(value());
        break;
      }
      default: {  // an option of this command, as --flag VALUE, --flag=VALUE or --flag alone
        const auto* r = own[in.ConsumeIntegralInRange<std::size_t>(0, own.size() - 1)];
        const int form = in.ConsumeIntegralInRange(0, 3);
        if (form == 0) args.push_back(r->flag + "=" + value());
        else if (form == 1) args.push_back(r->flag);
        else args.insert(args.end(), {r->flag, value()});
      }
    }
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::string error;
  const int status = gg::cli::run(int(argv.size()), argv.data(), error, /*check_only=*/true);
  // The command line and what went wrong, for the crash report; then the trap.
  auto fail = [&](const char* why) {
    std::fprintf(stderr, "fuzz_cli: %s; exit %d; error (%zu bytes): %.400s\nargs:", why, status, error.size(),
                 error.c_str());
    for (const std::string& a : args) std::fprintf(stderr, " [%.80s%s]", a.c_str(), a.size() > 80 ? "..." : "");
    std::fprintf(stderr, "\n");
    __builtin_trap();
  };
  if (status == 0 && !error.empty()) fail("an error, yet exit 0");
  if (status != 0 && error.empty()) fail("a failure that says nothing");
  if (std::string("gradgraph: error: ").size() + error.size() > 300) fail("an error line over 300 bytes");
  if (error.find_first_of("\n\r") != std::string::npos) fail("an error of more than one line");
  return 0;
}
