// `gradgraph bench`: the time of full training steps of the reference GPT (forward,
// backward, clipping, AdamW) against the machine's measured FMA peak and, with
// --compare-torch, against PyTorch at its best in the same run (bench/torch_bench.py).
// `gradgraph bench --peak` prints the FMA probe alone. Registers its subcommand; main()
// calls run().
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/table_flags.h"

namespace gg::cli {

struct BenchCommand {
  std::string config, torch_script;
  std::string python = "/usr/bin/python3";  // --python: the interpreter that runs the PyTorch peer
  std::string precision = "f32";            // --precision: "bf16" for bf16 products
  std::vector<std::string> ab;       // --ab: planning switches to turn off in the comparison
  std::vector<std::string> without;  // --without: kinds of work left out of it (timing only)
  std::int64_t batch = 12, seq = 0;  // seq 0: the config's block_size
  int steps = 20, warmup = 3, threads = 0, profile_steps = 5, profile_top = 0, torch_steps = 0, rounds = 3, ab_steps = 400;
  double bucket_mb = 1;  // under mpirun: MB of gradients per all-reduce (TrainOptions::bucket_mb)
  bool peak = false, compare_torch = false;
  CLI::App* cmd = nullptr;
  TableFlags flags{{train::bind(*this)}};

  BenchCommand() = default;
  BenchCommand(const BenchCommand&) = delete;  // the flags point into this object
  static const train::OptionTable<BenchCommand>& table();
  void add_to(CLI::App& app);
  // Runs the benchmark if its subcommand was given and returns its exit status, or -1. With
  // `check_only`, stops after its options are checked (0).
  int run(bool check_only = false);
};

}  // namespace gg::cli
