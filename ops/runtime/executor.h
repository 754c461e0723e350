// The executor: compiles the part of a graph that the requested outputs need into a
// plan (topological order, liveness, one arena whose size is known before the first
// run) and runs it as a flat loop of kernel calls. Inputs are fed by name; parameters
// come from a ParamStore and persist across runs. Planning passes, in order: simplify
// and remat (graph to graph; ops/passes/simplify.h, ops/passes/remat.h), fusion and compiled groups
// (ops/passes/fuse.h), batch-slice chains and their local values (plan_slices.cpp), in-place
// permutes (plan_in_place.cpp), epilogues (plan_epilogues.cpp), memory (plan_memory.cpp),
// then the steps, the chains' masked products (ops/passes/masked.h) and the value checks. Each has
// its switch in ExecutorOptions, and none changes a value. The run is a flat loop over the
// plan's items (executor_run.cpp), which profiling and anomaly checks observe.
#pragma once

#include <cstdint>
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
#include "../passes/remat.h"
#include "../passes/simplify.h"
#include "../ir/tensor.h"

namespace gg {

struct MaskedBlocks;  // ops/passes/masked.h

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

  // Bytes of the arena holding every intermediate value (known before the first run).
  std::size_t arena_bytes() const { return arena_bytes_; }
  // Bytes the intermediates would take without buffer reuse.
  std::size_t unshared_bytes() const { return unshared_bytes_; }
  // Node ids (of the graph given) in execution order: for a node the pass merged with
  // others, the first of them.
  const std::vector<NodeId>& order() const { return user_order_; }
  // The graph that was planned: after simplify and remat, or the one given when both are off.
  const Graph& planned_graph() const { return g_; }
  // The element-wise groups run as one step each (none when the pass is off), in ids of
  // planned_graph().
  const Fusion& fusion() const { return fusion_; }
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
    // Values only this slice's pass reads live in a per-thread scratch block (local_off_):
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
    std::size_t first = 0, last = 0;  // positions in order_ of its first and last step nodes, then step indices
    Shape lead;                       // L
    std::int64_t slices = 0;
    std::vector<SliceStep> steps;     // per step of the chain
    std::size_t scratch_bytes = 0;    // a thread's scratch for one slice's local values
  };
  // The passes of the constructor, in order (each with its own switch in options_).
  static Simplified prepare(const Graph& g, const std::vector<NodeId>& outputs, const ExecutorOptions& options);
  void number_order();  // step_of_ from order_
  void plan_slices();  // finds the chains (positions in order_), before plan_memory
  void plan_locals();  // the chains' values read only inside one slice's pass, before plan_memory
  void plan_in_place();  // the permutes the chains' products read or write in place, before plan_memory
  void plan_fusion();  // fusion_: the element-wise groups (options_.fuse)
  void number_user_order();  // user_order_ from order_ and the passes' id map
  void plan_epilogues();  // the groups run as a product's epilogue, before plan_memory
  void bind_epilogues(const std::vector<int>& step_at);  // their steps, after make_steps
  void bind_locals_unsliced();  // full-size storage for them and for in-place values, when a run goes step by step
  std::vector<int> step_index() const;  // per node of g_: its step's index, or -1 (after make_steps)
  void bind_slices(const std::vector<int>& step_at);  // the chains' step indices and per-slice shapes, after make_steps
  void run_chain(const SliceChain& c);
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
  };
  std::vector<RunItem> run_items() const;                 // the plan as planned
  std::vector<RunItem> step_by_step_items() const;        // every step apart (anomaly mode)
  std::vector<RunItem> skip_items(unsigned kinds) const;  // run_items() with `kinds` left out
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
  std::vector<RunItem> items_, items_by_step_, items_skip_;
  unsigned items_skip_kinds_ = 0;  // what items_skip_ leaves out
  // Asks for the lines step t of chain c reads from outside the chain for `slice` (idx: scratch for its multi-index).
  void prefetch_slice(const SliceChain& c, std::size_t t, std::int64_t slice, std::vector<std::int64_t>& idx) const;
  void plan_memory(std::vector<std::size_t>& offset, std::vector<NodeId>& root);
  // plan_memory's liveness: per node the last step that reads it (INT_MAX: an output), the
  // buffer each node lives in (a view's: its input's), and per position the values placed
  // there early (a permute a chain writes in place: at the chain's start).
  std::vector<int> liveness(std::vector<NodeId>& root, std::vector<std::vector<NodeId>>& early,
                            std::vector<char>& placed_early);
  void leaves_first();  // plan_slices: the leaves first in order_, before any step
  // plan_slices: whether node id can run slice by slice over L (inside: nodes already in the chain)
  bool sliceable(NodeId id, const Shape& L, const std::vector<char>& inside) const;
  void bind_views(const std::vector<std::size_t>& offset, const std::vector<NodeId>& root);
  void make_steps();
  void plan_checks(const std::vector<int>& step_of, const std::vector<int>& step_index);
  void run_check(std::size_t c) const;
  NodeId planned_id(NodeId user_id) const;
  // The outputs and the checked nodes: values read after their step (by the caller or a
  // check), so every one of them is computed and stored in full.
  std::vector<NodeId> read_after_steps() const;
  void check_anomaly(const Step& st) const;  // throws GraphError if st's output is not finite
  void check_value(const Step& st, NodeId id, const View& v) const;
  bool never_stored(NodeId id) const;  // a member of a fused group read only inside it
  int group_at(NodeId id) const;        // the fused group node id belongs to, or -1
  void bind_inputs(Step& st);           // st.in: the current views of what st reads
  std::string group_ops(int group) const;    // a fused group's ops, in order
  const std::vector<NodeId>& reads(const Step& st) const;  // the nodes whose values st.in holds
  const Graph& user_g_;        // the graph given
  Simplified simplified_;      // the graph after the passes and the id map (the map only, when all are off)
  const Graph& g_;             // the planned graph: simplified_.graph or user_g_
  Fusion fusion_;              // element-wise groups of g_ (empty when the pass is off)
  ParamStore& params_;
  std::vector<NodeId> outputs_, order_, user_order_;  // outputs_, order_: ids in g_
  std::vector<int> step_of_;   // per node of g_: its index in order_, or -1
  std::vector<Step> steps_;
  std::vector<SliceChain> chains_;
  std::vector<int> chain_at_;  // per step: the chain starting there, or -1
  ExecutorOptions options_;    // each pass reads its own switch here
  // Per node of g_, for a permute a chain's products read in place: its input and, per axis
  // of the permute, that axis's stride in its input; for a chain's product whose result is
  // written into the permute that reads it: that permute and, per axis of the product, the
  // stride in the permute's output. `to` is -1 for every other node; such nodes have no
  // arena place (storage of their own only when a run goes step by step).
  struct InPlace {
    NodeId to = -1;
    bool writes = false;
    std::vector<std::int64_t> axis_stride;
  };
  std::vector<InPlace> in_place_;
  std::vector<char> in_place_step_;  // per node: a permute the chains do without
  // Per node of g_: for a matrix product, the root of the fused group run as its epilogue,
  // else -1 (plan_epilogues). Per step: the epilogue group's step of a product, else -1;
  // and whether a group's step is run by its product (then it only runs its checks).
  std::vector<NodeId> epilogue_for_;
  std::vector<int> epilogue_step_;
  std::vector<char> by_epilogue_;
  // Per node of g_: its byte offset in its chain's per-thread scratch when only the chain's
  // pass over one slice reads it (no arena place), else -1. Run step by step (anomaly
  // mode), such values get full-size storage of their own (local_full_), made on demand.
  std::vector<std::int64_t> local_off_;
  std::unique_ptr<void, void (*)(void*)> local_full_{nullptr, aligned_free};
  std::vector<View> views_;          // per node id (valid for planned nodes)
  std::vector<char> kept_;           // per node id: readable after run
  std::vector<Tensor> inputs_;       // storage for input nodes, by node id
  std::vector<char> input_fed_;
  std::vector<std::size_t> leaf_checks_;  // value checks of leaves, run before the first step
  std::unique_ptr<void, void (*)(void*)> arena_{nullptr, aligned_free};
  std::size_t arena_bytes_ = 0, unshared_bytes_ = 0;
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
