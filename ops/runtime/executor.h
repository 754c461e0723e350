// The executor: plans the part of a graph that the requested outputs need (the pipeline of
// passes in ops/passes/plan.h: simplify, remat, fusion, batch-slice chains and their local
// values, in-place permutes, masked products, epilogues, memory; each with its switch in
// ExecutorOptions, none changing a value), binds the plan to one arena whose size is known
// before the first run and to a list of steps, and runs it as a flat loop over them
// (executor_run.cpp), which profiling and anomaly checks observe. Inputs are fed by name;
// parameters come from a ParamStore and persist across runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "../passes/fuse.h"
#include "../ir/graph.h"
#include "../ir/op_rule.h"
#include "../ir/tensor.h"

namespace gg {

struct MaskedBlocks;  // ops/passes/masked.h
struct Plan;          // ops/passes/plan.h

// Timing only (gradgraph bench --without): kinds of a plan's work that run() can leave out,
// so that what a kind costs inside the whole step is measured where it runs, with the
// caches and threads as they are there: an upper bound on what making it faster could buy.
// Work left out writes nothing, so every value after it is wrong.
enum SkipWork : unsigned {
  skip_products = 1,        // matrix products outside batch-slice chains
  skip_groups = 2,          // fused groups outside chains, a product's epilogue included
  skip_ops = 4,             // every other op (sums, adds, gathers, ...), in chains too; views aside
  skip_chain_products = 8,  // inside the chains (attention's products)
  skip_chain_groups = 16,   // inside the chains (softmax and its gradient)
};
// The kinds above by name: "products", "groups", "ops", "chain-products", "chain-groups".
const std::vector<std::pair<std::string, unsigned>>& skip_work_names();

class Executor {
 public:
  // Plans the nodes that `outputs` depend on (simplified first, unless options say no).
  // Outputs stay readable after run() by their ids in `g`.
  // Requires: g and params outlive the executor; every param of the plan is in the store
  // at run(). Throws GraphError for an output id that is not a node of `g`.
  Executor(const Graph& g, std::vector<NodeId> outputs, ParamStore& params, std::uint64_t seed = 0,
           ExecutorOptions options = {});
  ~Executor();

  // Bytes of the arena holding every intermediate value (known before the first run).
  std::size_t arena_bytes() const;
  // Bytes the intermediates would take without buffer reuse.
  std::size_t unshared_bytes() const;
  // Node ids (of the graph given) in execution order: for a node the pass merged with
  // others, the first of them.
  const std::vector<NodeId>& order() const;
  // The graph that was planned: after simplify and remat, or the one given when both are off.
  const Graph& planned_graph() const { return g_; }
  // The element-wise groups run as one step each (none when the pass is off), in ids of
  // planned_graph().
  const Fusion& fusion() const;
  // How many batch-slice chains the plan runs (ExecutorOptions::slice).
  std::size_t slice_chains() const { return chains_.size(); }
  // How many values the chains keep in per-thread scratch instead of the arena: those only
  // the same slice's pass reads (attention's scores, weights and their gradients).
  std::size_t chain_local_values() const;
  // How many of the chains' matrix products skip a mask's zeros (ExecutorOptions::masked).
  std::size_t masked_products() const;
  // How many of the chains' fused groups compute only the parts of their rows a mask keeps.
  std::size_t masked_groups() const;
  // How many permutes the chains' products read or write in place (ExecutorOptions::in_place).
  std::size_t in_place_permutes() const;
  // Steps of the flat loop (a fused group is one).
  std::size_t step_count() const { return steps_.size(); }
  // How many fused groups run as a matrix product's epilogue (ExecutorOptions::epilogue).
  std::size_t epilogue_groups() const;

  // Feeds the input node named `name`; throws GraphError on a wrong shape or dtype, on an
  // input declared in the graph but not needed by the requested outputs, and on an unknown
  // name (suggesting the closest declared names).
  void set_input(const std::string& name, const Tensor& t);
  void set_input(const std::string& name, std::span<const float> values);
  void set_input(const std::string& name, std::span<const std::int32_t> values);
  bool has_input(const std::string& name) const;

  // Runs the plan; throws GraphError if an input was never fed, a parameter is missing, a
  // kernel refuses its data (an index out of range) or a value check of a planned node
  // fails (Graph::add_check: the check runs right after its node is computed).
  void run();

  // The value of an output (or of a leaf the plan reads) of the last run, by its id in the
  // graph given; throws GraphError otherwise.
  View value(NodeId id) const;
  Tensor get(NodeId id) const;
  float scalar(NodeId id) const { return value(id).f()[0]; }

  // Values watched as they become final, so a caller can start work on them while the rest
  // of the plan runs (data parallel's gradient all-reduces). run() calls on_ready(i) on its
  // own thread as soon as the loop item computing ids[i] is done (a leaf's before the first
  // item, a value a chain writes in place after the last), each once per run. Empty ids stop
  // the watching. Throws GraphError for an id that is not an output of this plan.
  void watch(const std::vector<NodeId>& ids, std::function<void(std::size_t)> on_ready);
  // Where each of ids becomes final in a run: 0 before the first step, k after step k - 1
  // (of step_count(); a chain's steps count one by one). Throws as watch() does.
  std::vector<std::size_t> ready_at(const std::vector<NodeId>& ids) const;

  std::mt19937_64& rng() { return rng_; }
  // The options the plan was made with.
  const ExecutorOptions& options() const { return options_; }

  // Anomaly mode: when on, run() checks each computed node's f32 output for NaN and Inf
  // right after its kernel, and the first node, forward or backward, that makes one stops
  // the run with a GraphError naming its op, shape, user name, source line, and the min/max
  // and NaN/Inf counts of each of its inputs. A NaN always counts; an Inf only when no input
  // holds one (a mask's -inf carried through `where` is by design; exp overflow, log(0) and
  // x/0 are caught). A NaN or Inf in a parameter is reported at the first node reading it.
  // Off by default (ExecutorOptions::detect_anomaly: GG_DETECT_ANOMALY=1 in the environment
  // turns it on for every executor). Costs one pass over each
  // output per step.
  void set_detect_anomaly(bool on) { detect_anomaly_ = on; }
  bool detect_anomaly() const { return detect_anomaly_; }

  // Timing only: the SkipWork kinds run() leaves out (0: none, the default). Their values,
  // and every value computed from them, are then wrong; value checks are not run. Ignored in
  // anomaly mode.
  void set_skip_for_timing(unsigned kinds) { skip_ = kinds; }
  unsigned skip_for_timing() const { return skip_; }

  // Per-op timing: when on, run() adds each kernel's wall time to its op kind's total.
  void set_profile(bool on) { profile_ = on; }
  // "op  calls  total ms  share", one line per op kind that ran, slowest first.
  std::string profile_report() const;
  // The `top` steps that took longest over the profiled runs: op (or fused group), shapes,
  // total ms, and GFLOPS for matrix products.
  std::string profile_steps_report(int top) const;

 private:
  // Copies `count` values of `dtype` (with `shape`, if given) into the input named `name`.
  void feed(const std::string& name, const void* data, std::int64_t count, DType dtype, const Shape* shape);

  struct Step {
    NodeId id;                          // the node computed (a group's root)
    void (*kernel)(const KernelArgs&);  // nullptr for a fused group
    int group;                          // its index in fusion_.groups, or -1
    std::vector<View> in;
    View out;
    std::vector<View> stored;         // a fused group's stored members but the root
    std::vector<std::size_t> checks;  // indices into g_.checks() to run after this step
    bool in_place = false;            // a permute the chains do without: skipped when they run sliced
  };
  // A run of consecutive steps that all work batch slice by batch slice over the same
  // leading dims L (prod(L) = slices): batched matmuls, fused groups whose rows start
  // with L, element-wise ops and reductions over later axes. Run slice-major.
  struct SliceStep {
    std::vector<std::vector<std::int64_t>> in_stride;  // per read: element stride per L dim (0: broadcast)
    std::vector<Shape> in_shape;                       // per read: its shape with the L dims set to 1
    Shape out_shape;                                   // the output's, likewise
    std::int64_t out_elems = 0;                        // values of the output per slice
    std::int64_t extent = 0;                           // a group's rows (or flat values) per slice
    std::shared_ptr<const MaskedBlocks> masked;        // a matmul that skips a mask's zeros, or null
    std::shared_ptr<const RowLimits> rows;             // a group that skips a mask's zeros, or null
    // Values only this slice's pass reads live in a per-thread scratch block (Plan::local_off):
    // per read, the output and (groups) the stored members, the byte offset there or -1.
    std::vector<std::int64_t> in_local, stored_local;
    std::int64_t out_local = -1;
    bool any_local = false;
    // A matmul's operand read in place from the input of its permute, or its result written
    // into the permute that reads it: that node (or -1), its strides per L dim, and the row
    // strides of a, b and c (ops/passes/masked.h's SliceStrides; 0 when that side is not in place).
    std::vector<NodeId> in_from;
    std::vector<std::int64_t> out_stride;
    NodeId out_to = -1;
    std::int64_t ld_a = 0, ld_b = 0, ld_c = 0;
    bool strided = false;
  };
  struct SliceChain {
    std::size_t first = 0, last = 0;  // indices in steps_ of its first and last steps
    Shape lead;                       // L
    std::int64_t slices = 0;
    std::vector<SliceStep> steps;     // per step of the chain
    std::size_t scratch_bytes = 0;    // a thread's scratch for one slice's local values
    std::vector<std::uint32_t> all_steps;  // first..last: the steps a run as planned goes through
  };
  // Binding the plan to memory and steps, in the constructor's order.
  void bind_memory();  // the arena, and each planned node's view
  void make_steps();   // one step per computed node (a fused group is one)
  std::vector<int> step_index() const;  // per node of g_: its step's index, or -1
  void bind_slices(const std::vector<int>& step_at);  // the chains' step indices and per-slice views
  void bind_epilogues(const std::vector<int>& step_at);  // the products' epilogue steps
  void bind_checks(const std::vector<int>& step_at);     // each value check after its node's step
  void bind_locals_unsliced();  // full-size storage for local and in-place values, when a run goes step by step
  // Runs chain c slice-major through `run` (its steps, or fewer: timing skips), with each
  // step's time summed per thread when Timed (profiling).
  void run_chain(const SliceChain& c, const std::vector<std::uint32_t>& run);
  template <bool Timed>
  void run_chain_slices(const SliceChain& c, const std::vector<std::uint32_t>& run);
  // Slice i of chain c through step t, on this thread (run_chain's body).
  struct ChainThread;
  void run_chain_step(const SliceChain& c, std::size_t t, std::int64_t i, ChainThread& th);
  bool skipped(const Step& st, unsigned kinds, bool in_chain) const;  // whether `kinds` leave st out
  // The flat loop run() goes through: one item per step, a chain's steps as one item, a
  // product and the group run as its epilogue as one item. Built once per way of running.
  struct RunItem {
    enum Kind : std::uint8_t { kernel, group, product_epilogue, chain, checks_only } kind;
    std::uint32_t step;  // the step run (a chain's first)
    std::int32_t other;  // a chain's index, or a product's epilogue step, else -1
    const std::vector<std::uint32_t>* chain_steps = nullptr;  // a chain's steps to run
  };
  std::vector<RunItem> run_items() const;                 // the plan as planned
  std::vector<RunItem> step_by_step_items() const;        // every step apart (anomaly mode)
  std::vector<RunItem> skip_items(unsigned kinds);  // run_items() with `kinds` left out (chain_skip_steps_)
  void run_item(const RunItem& it);
  void bind_params();
  // Watches the loop: called before and after each item (profiling, anomaly checks); one
  // virtual call per item and observer, none when no observer is on.
  struct RunObserver {
    virtual ~RunObserver() = default;
    virtual void before(const RunItem&) {}
    virtual void after(const RunItem&) {}
  };
  class Profiler;
  class AnomalyCheck;
  class ReadyNotifier;
  // watch(): per step, the watched indices final after it; those final before the first
  // step and those final only after the last; the callback.
  std::vector<std::vector<std::uint32_t>> watch_at_;
  std::vector<std::uint32_t> watch_first_, watch_last_;
  std::function<void(std::size_t)> on_ready_;
  std::vector<RunItem> items_, items_by_step_, items_skip_;
  unsigned items_skip_kinds_ = 0;  // what items_skip_ leaves out
  std::vector<std::vector<std::uint32_t>> chain_skip_steps_;  // per chain: its steps items_skip_ runs
  // Asks for the lines step t of chain c reads from outside the chain for `slice` (idx: scratch for its multi-index).
  void prefetch_slice(const SliceChain& c, std::size_t t, std::int64_t slice, std::vector<std::int64_t>& idx) const;
  void run_check(std::size_t c) const;
  void check_anomaly(const Step& st) const;  // throws GraphError if st's output is not finite
  void check_value(const Step& st, NodeId id, const View& v) const;
  void bind_inputs(Step& st);           // st.in: the current views of what st reads
  std::string group_ops(int group) const;    // a fused group's ops, in order
  const std::vector<NodeId>& reads(const Step& st) const;  // the nodes whose values st.in holds
  const Graph& user_g_;              // the graph given
  std::unique_ptr<const Plan> plan_;  // the passes' result (ops/passes/plan.h)
  const Graph& g_;                    // the planned graph: plan_->g()
  const Fusion& fusion_;              // plan_->fusion
  ParamStore& params_;
  std::vector<Step> steps_;
  std::vector<SliceChain> chains_;  // plan_->chains, bound to steps
  std::vector<int> chain_at_;       // per step: the chain starting there, or -1
  ExecutorOptions options_;
  // Per step: the epilogue group's step of a product, else -1; and whether a group's step is
  // run by its product (then it only runs its checks).
  std::vector<int> epilogue_step_;
  std::vector<char> by_epilogue_;
  // Run step by step (anomaly mode), the chains' local values and the in-place ones get
  // full-size storage of their own, made on demand.
  std::unique_ptr<void, void (*)(void*)> local_full_{nullptr, aligned_free};
  std::vector<View> views_;          // per node id (valid for planned nodes)
  std::vector<char> kept_;           // per node id: readable after run
  std::vector<Tensor> inputs_;       // storage for input nodes, by node id
  std::vector<char> input_fed_;
  std::vector<std::size_t> leaf_checks_;  // value checks of leaves, run before the first step
  std::unique_ptr<void, void (*)(void*)> arena_{nullptr, aligned_free};
  std::mt19937_64 rng_;
  bool profile_ = false;
  bool detect_anomaly_ = false;
  unsigned skip_ = 0;  // SkipWork kinds left out (timing only)
  std::vector<double> op_seconds_ = std::vector<double>(op_count, 0.0);
  std::vector<std::int64_t> op_calls_ = std::vector<std::int64_t>(op_count, 0);
  double sliced_seconds_ = 0;  // batch-slice chains' time, profiled apart from the ops
  std::int64_t sliced_calls_ = 0, sliced_steps_ = 0;
  std::vector<double> step_seconds_;  // per step, over the profiled runs
  // Per step inside a chain: its time summed over the slices and the threads that ran them.
  std::vector<double> chain_step_seconds_;
  std::mutex chain_profile_mu_;  // the threads of a chain add their sums under it
  std::int64_t profiled_runs_ = 0;
  double fused_seconds_ = 0;  // fused groups' time, profiled apart from the ops
  std::int64_t fused_calls_ = 0, fused_members_ = 0;
};

}  // namespace gg
