// The process's configuration from the environment: every GG_* variable the library reads,
// read once, in one place (env_config()), and the table that documents them
// (env_switches()). Plans take their switches from ExecutorOptions, whose defaults come from
// here; the kernels' and thread pool's switches are read from here directly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gg {

struct EnvConfig {
  // Planning passes (ExecutorOptions' defaults): on unless the variable is "0".
  bool simplify = true, remat = true, fuse = true, compiled = true, slice = true, masked = true, in_place = true,
       epilogue = true;
  bool detect_anomaly = false;  // GG_DETECT_ANOMALY: on when set to anything but "" or "0"
  // GG_FUSED_ATTENTION: how dsl::attention builds attention where its options and the graph
  // leave it open (dsl/nn.h's AttentionOptions::fused): "1" the fused primitive pair wherever
  // it can, "0" always the composition of primitives; unset (or anything else), by size.
  std::optional<bool> fused_attention;
  // Kernels and threads: on unless the variable is "0".
  bool steal = true, split_depth = true, shares = true;
  // GG_BF16_NATIVE: bf16 products use AVX512_BF16 where the CPU has it, unless "0" (then the
  // emulated path, same rounding and order, for testing it on any machine).
  bool bf16_native = true;
  int num_threads = 0;  // GG_NUM_THREADS: 0 when unset or below 1 (then: hardware concurrency)
  // Processes an MPI launcher started on this host (OMPI_COMM_WORLD_LOCAL_SIZE or
  // MPI_LOCALNRANKS; 1 without one): the default thread count is the cores shared among them.
  int local_ranks = 1;
  // The processes an MPI launcher started and this one's rank among them (OMPI_COMM_WORLD_SIZE
  // and _RANK, or PMI_SIZE and PMI_RANK; 1 and 0 without one): train/distributed.h's world.
  int launched_size = 1, launched_rank = 0;
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

// A plan's switches (ops/passes/plan.h): one per planning pass, each defaulting to its GG_*
// variable above.
struct ExecutorOptions {
  // Run the simplification pass (ops/passes/simplify.h) on the needed subgraph before planning;
  // a plan only computes values, so it also drops stop_gradient marks. Off with
  // GG_SIMPLIFY=0 in the environment, or here.
  bool simplify = env_config().simplify;
  // Run chains of element-wise ops as one step each (ops/passes/fuse.h), after simplification.
  // Off with GG_FUSE=0 in the environment, or here.
  bool fuse = env_config().fuse;
  // Recompute cheap element-wise values next to their late readers instead of keeping
  // them (ops/passes/remat.h), after simplification. Off with GG_REMAT=0, or here.
  bool remat = env_config().remat;
  // Run chains of batch-parallel steps (attention: the scores' batched matmul, the softmax
  // groups, the matmul with V; and their gradients) one batch slice at a time through the
  // whole chain, so a slice's intermediates stay in cache. Values are unchanged bit for
  // bit. Off with GG_SLICE=0, or here.
  bool slice = env_config().slice;
  // Inside batch-slice chains, run the matrix products that a constant mask makes partly
  // irrelevant (causal attention's) in row blocks that skip that part (ops/passes/masked.h):
  // about half the work. Values are unchanged wherever they are finite. Off with
  // GG_MASKED=0, or here.
  bool masked = env_config().masked;
  // Inside batch-slice chains, let a matrix product read an operand that is a permute of
  // some X straight from X, and write a result that only a permute reads straight into
  // that permute's output, where a slice is then a matrix with a row stride (attention's
  // head split and merge): those permutes are not run, and their values take no place in
  // the arena. Values are unchanged bit for bit. Off with GG_IN_PLACE=0, or here.
  bool in_place = env_config().in_place;
  // Run a fused group with a transcendental member (erf, exp, ...) that reads a matrix
  // product's result, and is the next step after it, as the product's epilogue: on each
  // block of the product's rows as soon as the block is final, on the thread that computed
  // it, while the rows are in its cache (the MLP's bias and GELU after its first layer).
  // Values are unchanged bit for bit. Off with GG_EPILOGUE=0, or here.
  bool epilogue = env_config().epilogue;
  // Fused groups that match a program compiled ahead of time run it (ops/passes/fuse_compiled.h);
  // off, every group is interpreted. Values are unchanged bit for bit. Off with
  // GG_COMPILED=0, or here.
  bool compiled = env_config().compiled;
  // Anomaly mode from the start (Executor::set_detect_anomaly). On with GG_DETECT_ANOMALY=1,
  // or here.
  bool detect_anomaly = env_config().detect_anomaly;
};

// The switches above by name ("simplify", "remat", "fuse", "slice", "masked", "in-place",
// "epilogue"), for tools that set them from a command line or compare two plans of one model
// (gradgraph bench --ab).
const std::vector<std::string>& executor_switch_names();
// Sets the switch called `name`; false (and o unchanged) when there is none.
bool set_executor_switch(ExecutorOptions& o, std::string_view name, bool on);
// The switches that are off, by name ("" when all are on): options as a plan's key or label.
std::string switches_off(const ExecutorOptions& o);

}  // namespace gg
