// The checking and debugging commands of `gradgraph`: gradcheck (every parameter's
// gradient against f64 central differences), hvp (a Hessian-vector product, checked) and
// attention (SVG heatmaps of a checkpoint's attention weights). Each registers its
// subcommand and runs it; main() calls them in turn.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli/table_flags.h"

namespace gg::cli {

struct GradcheckOptions {
  std::string config, weights, batch;
  std::int64_t batch_size = 2;
  std::uint64_t seed = 1;
  std::int64_t samples = 16;
  double rtol = 0;  // 0: the precision's own (kRtolF32, kRtolBf16 in cli/debug.cpp)
  std::string precision = "f32";
  static const train::OptionTable<GradcheckOptions>& table();
};
struct HvpOptions {
  std::string config, weights, batch;
  std::int64_t batch_size = 2;
  std::uint64_t seed = 1;
  static const train::OptionTable<HvpOptions>& table();
};
struct AttentionOptions {
  std::string checkpoint, prompt, source, out = ".";
  static const train::OptionTable<AttentionOptions>& table();
};

struct DebugCommands {
  GradcheckOptions gradcheck;
  HvpOptions hvp;
  AttentionOptions attention;
  TableFlags gradcheck_flags{{train::bind(gradcheck)}}, hvp_flags{{train::bind(hvp)}},
      attention_flags{{train::bind(attention)}};
  CLI::App *gradcheck_cmd = nullptr, *hvp_cmd = nullptr, *attention_cmd = nullptr;

  DebugCommands() = default;
  DebugCommands(const DebugCommands&) = delete;  // the flags point into this object
  void add_to(CLI::App& app);
  // Runs the subcommand that was given and returns its exit status, or -1 if none of these
  // was. With `check_only`, stops after its options are checked (0).
  int run(bool check_only = false);
};

}  // namespace gg::cli
