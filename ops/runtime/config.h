// The process's configuration from the environment: every GG_* variable the library reads,
// read once, in one place (env_config()), and the table that documents them
// (env_switches()). Plans take their switches from ExecutorOptions, whose defaults come from
// here; the kernels' and thread pool's switches are read from here directly.
#pragma once

#include <string>
#include <vector>

namespace gg {

struct EnvConfig {
  // Planning passes (ExecutorOptions' defaults): on unless the variable is "0".
  bool simplify = true, remat = true, fuse = true, compiled = true, slice = true, masked = true, in_place = true,
       epilogue = true;
  bool detect_anomaly = false;  // GG_DETECT_ANOMALY: on when set to anything but "" or "0"
  // Kernels and threads: on unless the variable is "0".
  bool steal = true, split_depth = true, shares = true;
  int num_threads = 0;  // GG_NUM_THREADS: 0 when unset or below 1 (then: hardware concurrency)
  long spin_us = 200;   // GG_SPIN_US: how long a hand-off polls before sleeping (0: always sleep)
};

// The environment as it was at the first call (read then, once, and kept).
const EnvConfig& env_config();
// Reads the environment now (what env_config() read at its first call; for tests).
EnvConfig read_env_config();

// One row of the table of variables: its name, its default, what it does.
struct EnvSwitch {
  std::string name;     // "GG_FUSE"
  std::string default_value;  // "1"
  std::string what;     // one sentence
};
// Every GG_* variable the library reads, in the order of EnvConfig's fields.
const std::vector<EnvSwitch>& env_switches();
// The table as Markdown: a header row and one row per variable.
std::string env_switches_markdown();

}  // namespace gg
