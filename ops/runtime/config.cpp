// The GG_* environment variables: one table (name, default, what it does, how its value is
// read), which both reads the environment into an EnvConfig and documents it.
#include "ops/runtime/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

namespace gg {
namespace {

bool off_if_zero(const char* v) { return std::string_view(v) != "0"; }

struct Entry {
  const char* name;
  const char* default_value;
  const char* what;
  void (*read)(EnvConfig&, const char* value);  // called when the variable is set
};

#define GG_ENV_SWITCH(member) [](EnvConfig& c, const char* v) { c.member = off_if_zero(v); }
const Entry kEntries[] = {
    {"GG_SIMPLIFY", "1", "0: plan without the simplification pass (ExecutorOptions::simplify)",
     GG_ENV_SWITCH(simplify)},
    {"GG_REMAT", "1", "0: plan without rematerializing cheap element-wise values (ExecutorOptions::remat)",
     GG_ENV_SWITCH(remat)},
    {"GG_FUSE", "1", "0: plan without fusing element-wise chains into one step each (ExecutorOptions::fuse)",
     GG_ENV_SWITCH(fuse)},
    {"GG_COMPILED", "1", "0: run every fused group interpreted, none compiled ahead of time (ExecutorOptions::compiled)",
     GG_ENV_SWITCH(compiled)},
    {"GG_SLICE", "1", "0: plan without batch-slice chains (ExecutorOptions::slice)", GG_ENV_SWITCH(slice)},
    {"GG_MASKED", "1", "0: chains' products compute the parts a mask removes too (ExecutorOptions::masked)",
     GG_ENV_SWITCH(masked)},
    {"GG_IN_PLACE", "1", "0: chains' products do not read or write attention's permutes in place (ExecutorOptions::in_place)",
     GG_ENV_SWITCH(in_place)},
    {"GG_EPILOGUE", "1", "0: no fused group runs as a matrix product's epilogue (ExecutorOptions::epilogue)",
     GG_ENV_SWITCH(epilogue)},
    {"GG_DETECT_ANOMALY", "0", "1: anomaly mode for every plan, as --detect-anomaly (ExecutorOptions::detect_anomaly)",
     [](EnvConfig& c, const char* v) { c.detect_anomaly = *v && std::string_view(v) != "0"; }},
    {"GG_FUSED_ATTENTION", "by size",
     "1: attention is the fused primitive pair wherever it can be; 0: always its composition (scores, mask, softmax, @ v); "
     "by size: fused above 512 keys",
     [](EnvConfig& c, const char* v) {
       const std::string_view s(v);
       c.fused_attention = s == "1" ? std::optional<bool>(true) : s == "0" ? std::optional<bool>(false) : std::nullopt;
     }},
    {"GG_STEAL", "1", "0: products' row blocks in fixed stripes, no taking of another thread's (bit-identical)",
     GG_ENV_SWITCH(steal)},
    {"GG_SPLIT_DEPTH", "1", "0: weight gradients x^T @ dy summed in one piece instead of two halves (other bits)",
     GG_ENV_SWITCH(split_depth)},
    {"GG_BF16_NATIVE", "1", "0: bf16 products take the emulated path even where the CPU has AVX512_BF16 (same bits)",
     GG_ENV_SWITCH(bf16_native)},
    {"GG_SHARES", "1", "0: threads get equal shares of a job instead of shares learned from their speed",
     GG_ENV_SWITCH(shares)},
    {"GG_NUM_THREADS", "all cores", "N: worker threads (as --threads N); by default the cores, shared among the ranks mpirun starts on the host",
     [](EnvConfig& c, const char* v) { c.num_threads = std::max(0, std::atoi(v)); }},
    {"GG_SPIN_US", "200", "microseconds a thread polls for work before it sleeps (0: always sleep)",
     [](EnvConfig& c, const char* v) { c.spin_us = std::max(0L, std::atol(v)); }},
};
#undef GG_ENV_SWITCH

}  // namespace

EnvConfig read_env_config() {
  EnvConfig c;
  for (const Entry& e : kEntries)
    if (const char* v = std::getenv(e.name)) e.read(c, v);
  // The MPI launcher's variables (Open MPI's, then MPICH's): the first one set and in range.
  auto launcher = [](std::initializer_list<const char*> names, int low, int none) {
    for (const char* name : names)
      if (const char* v = std::getenv(name)) {
        char* end = nullptr;
        const long n = std::strtol(v, &end, 10);
        if (end != v && n >= low && n < (1 << 20)) return int(n);
      }
    return none;
  };
  c.local_ranks = launcher({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1, 1);
  c.launched_size = launcher({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1, 1);
  c.launched_rank = launcher({"OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0, 0);
  return c;
}

const EnvConfig& env_config() {
  static const EnvConfig c = read_env_config();
  return c;
}

const std::vector<EnvSwitch>& env_switches() {
  static const std::vector<EnvSwitch> rows = [] {
    std::vector<EnvSwitch> v;
    for (const Entry& e : kEntries) v.push_back({e.name, e.default_value, e.what});
    return v;
  }();
  return rows;
}

std::string env_switches_markdown() {
  std::string s = "| Variable | Default | What it does |\n|---|---|---|\n";
  for (const EnvSwitch& e : env_switches()) s += fmt::format("| `{}` | {} | {} |\n", e.name, e.default_value, e.what);
  return s;
}

namespace {
// Each switch's name and member, in the order the passes run.
struct Switch {
  std::string_view name;
  bool ExecutorOptions::*member;
};
constexpr Switch kSwitches[] = {{"simplify", &ExecutorOptions::simplify}, {"remat", &ExecutorOptions::remat},
                                {"fuse", &ExecutorOptions::fuse},         {"slice", &ExecutorOptions::slice},
                                {"masked", &ExecutorOptions::masked},     {"in-place", &ExecutorOptions::in_place},
                                {"epilogue", &ExecutorOptions::epilogue}};
}  // namespace

const std::vector<std::string>& executor_switch_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Switch& s : kSwitches) v.emplace_back(s.name);
    return v;
  }();
  return names;
}

bool set_executor_switch(ExecutorOptions& o, std::string_view name, bool on) {
  for (const Switch& s : kSwitches)
    if (s.name == name) {
      o.*s.member = on;
      return true;
    }
  return false;
}

std::string switches_off(const ExecutorOptions& o) {
  std::string off;
  for (const Switch& s : kSwitches)
    if (!(o.*s.member)) off += (off.empty() ? "" : ",") + std::string(s.name);
  return off;
}

}  // namespace gg
