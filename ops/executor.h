// The executor: compiles the part of a graph that the requested outputs need into a
// plan (topological order, liveness, one arena whose size is known before the first
// run) and runs it as a flat loop of kernel calls. Inputs are fed by name; parameters
// come from a ParamStore and persist across runs.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "graph.h"
#include "op_rule.h"
#include "tensor.h"

namespace gg {

class Executor {
 public:
  // Plans the nodes that `outputs` depend on. Outputs stay readable after run().
  // Requires: params outlives the executor; every param of the plan is in it at run().
  // Throws GraphError for an output id that is not a node of `g`.
  Executor(const Graph& g, std::vector<NodeId> outputs, ParamStore& params, std::uint64_t seed = 0);

  // Bytes of the arena holding every intermediate value (known before the first run).
  std::size_t arena_bytes() const { return arena_bytes_; }
  // Bytes the intermediates would take without buffer reuse.
  std::size_t unshared_bytes() const { return unshared_bytes_; }
  // Node ids in execution order.
  const std::vector<NodeId>& order() const { return order_; }

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

  // The value of an output (or a leaf) of the last run; throws GraphError otherwise.
  View value(NodeId id) const;
  Tensor get(NodeId id) const;
  float scalar(NodeId id) const { return value(id).f()[0]; }

  std::mt19937_64& rng() { return rng_; }

  // Anomaly mode: when on, run() checks each computed node's f32 output for NaN and Inf
  // right after its kernel, and the first node, forward or backward, that makes one stops
  // the run with a GraphError naming its op, shape, user name, source line, and the min/max
  // and NaN/Inf counts of each of its inputs. A NaN always counts; an Inf only when no input
  // holds one (a mask's -inf carried through `where` is by design; exp overflow, log(0) and
  // x/0 are caught). A NaN or Inf in a parameter is reported at the first node reading it. Off by default; GG_DETECT_ANOMALY=1 in the
  // environment turns it on for every executor built afterwards. Costs one pass over each
  // output per step.
  void set_detect_anomaly(bool on) { detect_anomaly_ = on; }
  bool detect_anomaly() const { return detect_anomaly_; }

  // Per-op timing: when on, run() adds each kernel's wall time to its op kind's total.
  void set_profile(bool on) { profile_ = on; }
  // "op  calls  total ms  share", one line per op kind that ran, slowest first.
  std::string profile_report() const;

 private:
  // Copies `count` values of `dtype` (with `shape`, if given) into the input named `name`.
  void feed(const std::string& name, const void* data, std::int64_t count, DType dtype, const Shape* shape);

  struct Step {
    NodeId id;
    void (*kernel)(const KernelArgs&);
    std::vector<View> in;
    View out;
    std::vector<std::size_t> checks;  // indices into g_.checks() to run after this step
  };
  void plan_checks(const std::vector<int>& step_of);
  void run_check(std::size_t c) const;
  void check_anomaly(const Step& st) const;  // throws GraphError if st's output is not finite
  const Graph& g_;
  ParamStore& params_;
  std::vector<NodeId> outputs_, order_;
  std::vector<Step> steps_;
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
  std::vector<double> op_seconds_ = std::vector<double>(op_count, 0.0);
  std::vector<std::int64_t> op_calls_ = std::vector<std::int64_t>(op_count, 0);
};

}  // namespace gg
