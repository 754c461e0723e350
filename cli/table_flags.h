// A command's flags made from option tables (train/options.h): each option of each bound
// set becomes --name-with-dashes with its help, kind, default and range, so every option of
// every command is declared once, checked one way, listed by `--list-options` and covered by
// the generated bad-input matrix and the command-line fuzzer without a test of its own.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "train/options.h"

namespace gg::cli {

struct TableFlags {
  std::vector<train::BoundOptions> sets;
  std::vector<std::pair<std::string, std::string>> given;  // (option, text), in order
  std::string config;                                       // --config options file, if any
  std::vector<std::string> derived;                         // options the command sets itself
  std::string why;                                          // ... and from what

  explicit TableFlags(std::vector<train::BoundOptions> s) : sets(std::move(s)) {}

  // Flags for every option but `skip`, which the command sets itself (`reason` says from
  // what; a --config file naming one of them is refused). With `options_file`, also
  // --config FILE: a JSON object of the same options, which the flags override.
  void add_to(CLI::App* app, const std::vector<std::string>& skip = {}, const std::string& reason = "",
              bool options_file = false);
  // After parsing: the --config file, then the flags in order (a list option given more
  // than once collects every value), then every set validated and the files the options
  // name checked, all before any work. Throws InputError naming the flag.
  void apply();
};

}  // namespace gg::cli
