// Test helpers for the command-line program: run `gradgraph` (path from GG_CLI_PATH, set by
// tests/CMakeLists.txt to $<TARGET_FILE:gradgraph>) with its stdout and stderr captured
// separately, and a temporary directory removed at the end of the scope.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_util.h"

// tests/CMakeLists.txt defines GG_CLI_PATH; without it every test here fails, saying so.
#ifndef GG_CLI_PATH
#define GG_CLI_PATH ""
#endif

namespace gg_cli_test {

using gg::test::TempDir;
using gg::test::read_all;
using gg::test::golden;

namespace fs = std::filesystem;



// Writes `text` to `path` (bytes as they are).
inline void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// dir/t.txt: a small training text (2,760 characters, 16 distinct), for runs of a few steps.
inline std::string text_file(const TempDir& dir) {
  std::string t;
  for (int i = 0; i < 60; ++i) t += "the cat sat on the mat. a dog ran to the log.\n";
  write(dir.file("t.txt"), t);
  return dir.file("t.txt");
}

// Single-quotes `s` for /bin/sh.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Result {
  int status = -1;  // exit status (-1: did not exit normally)
  std::string out, err;
  // Lines of stderr (a last line without '\n' counts).
  int err_lines() const {
    int n = 0;
    for (char c : err) n += c == '\n';
    return n + (!err.empty() && err.back() != '\n');
  }
};

// Runs `gradgraph <args>` (args already quoted as needed). With seconds > 0 the command is
// killed after that long and its address space is limited to `mib` MiB (not in an
// AddressSanitizer build): a command that would hang or grow without bound fails the test
// instead of stalling it.
// With cwd, the command runs there (relative paths it writes land in a temporary directory).
inline Result run(const std::string& args, int seconds = 0, long mib = 0, const std::string& cwd = "") {
  Result r;
  if (!fs::exists(GG_CLI_PATH)) {
    r.err = "the gradgraph binary GG_CLI_PATH = '" GG_CLI_PATH "' does not exist (see tests/CMakeLists.txt)\n";
    return r;
  }
  static int n = 0;
  const std::string out_file =
      (fs::temp_directory_path() / ("gg_test_cli_stdout_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
          .string();
  // stderr to the pipe, stdout to a file.
  std::string cmd = std::string(quote(GG_CLI_PATH)) + " " + args + " 2>&1 >" + quote(out_file);
  // AddressSanitizer reserves terabytes of address space for its shadow at start, which an
  // address-space limit forbids: under it only the time is limited.
#if defined(__SANITIZE_ADDRESS__)
  mib = 0;
#endif
  if (seconds > 0)
    cmd = (mib > 0 ? "ulimit -v " + std::to_string(mib * 1024) + "; " : std::string()) + "exec timeout -s KILL " +
          std::to_string(seconds) + " " + cmd;
  if (!cwd.empty()) cmd = "cd " + quote(cwd) + " && " + cmd;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (std::size_t k; (k = std::fread(buf, 1, sizeof buf, p)) > 0;) r.err.append(buf, k);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_all(out_file);
  std::error_code ec;
  fs::remove(out_file, ec);
  return r;
}


}  // namespace gg_cli_test
