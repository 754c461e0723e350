// The checking and debugging commands of `gradgraph`: gradcheck (every parameter's
// gradient against f64 central differences), hvp (a Hessian-vector product, checked) and
// attention (SVG heatmaps of a checkpoint's attention weights). Each registers its
// subcommand and runs it; main() calls them in turn.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace gg::cli {

struct DebugCommands {
  struct {
    std::string config, weights, batch;
    std::int64_t batch_size = 2;
    std::uint64_t seed = 1;
    int samples = 16;
    double rtol = 1e-3;
  } gradcheck;
  struct {
    std::string config, weights, batch;
    std::int64_t batch_size = 2;
    std::uint64_t seed = 1;
  } hvp;
  struct {
    std::string checkpoint, prompt, source, out = ".";
  } attention;
  CLI::App *gradcheck_cmd = nullptr, *hvp_cmd = nullptr, *attention_cmd = nullptr;

  void add_to(CLI::App& app);
  // Runs the subcommand that was given and returns its exit status, or -1 if none of these was.
  int run();
};

}  // namespace gg::cli
