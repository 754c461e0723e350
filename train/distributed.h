// Data parallel over MPI. Started by `mpirun -np N`, every fit() program trains as N ranks:
// each draws the same global batch, runs forward and backward on its share of the rows, and
// the gradients, weighted by each share's rows, are summed across ranks while the backward
// still runs: buckets of gradients in the order the backward plan makes them, each bucket's
// reduction started as soon as its last gradient is final. The sum is deterministic: each
// rank adds its part of every bucket from all ranks in rank order, then every rank gathers
// the parts (an all-to-all and an all-gather), so every rank holds the same bits whatever the
// message order. Without MPI (not found at build time, or one process) nothing here runs.
//
//   World& w = World::get();          // rank 0 of 1 unless mpirun started several
//   DataParallel dp(w, model, 4 << 20);
//   dp.plan(global_batch);            // the share's plan and the buckets (dp.describe())
//   double loss = dp.step(global_batch, nullptr, 1);  // this rank's share, reduces as it goes
//   std::vector<ParamGrad> pg = dp.reduced(model.grads());  // the global batch's gradient
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model.h"

namespace gg::train {

// The processes of this run: MPI's world when an MPI launcher started more than one (seen
// from OMPI_COMM_WORLD_SIZE or PMI_SIZE), else this process alone. MPI is initialised on the
// first get() (only the calling thread calls MPI) and finalised at exit, unless the run
// failed (then the process exits without the collective finalise a failed peer would block).
// Throws InputError when started as several processes by a gradgraph built without MPI.
class World {
 public:
  static World& get();
  // The world if get() has made it, else null (an error path that must not start MPI).
  static const World* started();
  // This process's rank as the launcher's environment gives it (0 when none did), read
  // without starting MPI: a program can keep its own printing to rank 0 from the start.
  static int launched_rank();
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool distributed() const { return size_ > 1; }

  // Every rank's `mine`, in rank order (blocking; a copy of mine for one process).
  std::vector<std::string> allgather(const std::string& mine) const;
  // Every rank's values, in rank order: size() * mine.size() values (all ranks give as many).
  std::vector<double> allgather(std::span<const double> mine) const;
  // The sum over ranks in rank order: the same bits on every rank.
  double sum(double mine) const;

  // An error every rank raises at the same point (a mismatch they all see, a divergence of
  // the shared loss): from now on only rank 0 reports it, and no rank reports being stopped.
  void shared_error() const;
  // Whether this rank should print the error it is dying of (not: another rank says it).
  bool reports_errors() const;
  // The run failed: the process will exit without MPI's finalise (see above).
  void failed() const;
  // The line a rank prints when mpirun ends the job because another rank died (SIGTERM):
  // the stage reached and where the last checkpoint is. At most 200 bytes are kept.
  void set_stop_note(const std::string& note) const;

 private:
  World();
  int rank_ = 0, size_ = 1;
};

// The gradient reduction's figures, summed over the steps it has seen.
struct SyncStats {
  std::int64_t steps = 0;
  std::size_t buckets = 0;
  double bytes = 0;        // gradient bytes reduced per step
  double blocking_ms = 0;  // one blocking reduction of every bucket (timed at plan time, best of 3)
  // Summed over the steps: the time filling the buckets and starting and testing reductions
  // during the backward, and the wait for them after it (which includes waiting for the
  // slowest rank's backward).
  double during_ms = 0, wait_ms = 0;
  // "3.24 MB all-reduced per step in 4 buckets; a step spends 0.61 ms filling and starting them
  // during the backward and waits 1.20 ms after it (a blocking all-reduce of them: 0.60 ms)"
  std::string describe() const;
};

// One rank's side of a data-parallel step over a model.
class DataParallel {
 public:
  // bucket_bytes: gradients are grouped until a bucket holds at least that many bytes.
  DataParallel(const World& w, Model& m, std::size_t bucket_bytes);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // This rank's rows of a global batch: every tensor split along its first axis (which must
  // be the batch's rows in all of them; InputError otherwise, or when there are fewer rows
  // than ranks). Rank r takes rows [r * B / N, (r + 1) * B / N).
  Batch share(const Batch& global) const;
  // Rank r's share of a global batch (share() on rank r).
  Batch share_of(const Batch& global, int r) const;
  // Each rank's weight in the sum: its share of the loss terms (default: of the rows).
  std::vector<double> weights(const Batch& global) const;
  // What the loss is a mean over in a batch (DataSource::loss_terms), when not its rows.
  void set_loss_terms(std::function<double(const Batch&)> terms) { terms_ = std::move(terms); }
  // Plans the share's training pass and the buckets, from rank 0's plan (so every rank
  // groups the same gradients the same way, whatever its share's shapes), and times one
  // blocking reduction of them. Call after the model is declared and its groups are set.
  void plan(const Batch& global);
  // "gradient all-reduce: 2 ranks, 3 buckets of 3.4 MB in all (deterministic, rank order): 1.5 MB
  //  final after step 512 of 920, ..."
  std::string describe() const;

  // The training pass over this rank's share of `global`, each bucket's reduction started
  // as its gradients become final. A micro-batch before the last of an accumulated step
  // passes reduce = false (then nothing is reduced). With reduce: bucket values are
  // scale * weight * (gradient + prior[i]) (prior: the earlier micro-batches' sums per
  // parameter, or null). Returns this rank's loss on its share; step_weight() is then this
  // rank's weight in that batch (weights(global)[rank], computed once by the step).
  double step(const Batch& global, bool reduce, const std::vector<std::vector<float>>* prior, float scale);
  double step_weight() const { return step_weight_; }
  // Waits for the reductions and points pg's gradients at the global gradient.
  std::vector<ParamGrad> reduced(std::vector<ParamGrad> pg);
  const SyncStats& stats() const { return stats_; }
  // Off: the reductions start only after the backward, in reduced() (what the overlap
  // saves is measured against it: gradgraph bench under mpirun). On by default.
  void set_overlap(bool on) { overlap_ = on; }

 private:
  struct Buckets;
  const World& w_;
  Model& m_;
  std::size_t bucket_bytes_;
  std::unique_ptr<Buckets> b_;
  SyncStats stats_;
  bool overlap_ = true;
  std::function<double(const Batch&)> terms_;
  double step_weight_ = 0;  // this rank's weight in the last step()'s batch
};

}  // namespace gg::train
