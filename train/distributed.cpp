// Data parallel over MPI (train/distributed.h): the world, the batch's shares and the
// bucketed, deterministic gradient reduction that overlaps the backward. Every MPI call of
// gradgraph is in this file; built without MPI, a world of one process remains.
#include "train/distributed.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include <unistd.h>

#include "ops/runtime/config.h"

#ifdef GG_HAVE_MPI
#include <mpi.h>
#endif

namespace gg::train {

namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// What the signal handler and the exit handler read: written before they can run.
std::atomic<bool> g_failed{false}, g_shared_error{false};
char g_note[2][320];
std::atomic<int> g_note_at{0};
int g_rank = 0;
#ifdef GG_HAVE_MPI
// Non-blocking collectives must be started in the same order on every rank of a
// communicator: the buckets' all-to-alls go in bucket order on one, their all-gathers
// (which start as the all-to-alls finish) in bucket order on another.
MPI_Comm g_spread = MPI_COMM_NULL, g_gather = MPI_COMM_NULL;
#endif

extern "C" void on_sigterm(int) {
  if (!g_shared_error.load()) {
    const char* n = g_note[g_note_at.load()];
    std::size_t len = 0;
    while (n[len] != 0) ++len;
    const ssize_t wrote = write(2, n, len);
    (void)wrote;
  }
  _exit(1);
}

#ifdef GG_HAVE_MPI
void finalize_at_exit() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done && !g_failed.load()) MPI_Finalize();
}
#endif

}  // namespace

World::World() {
  const int launched = env_config().launched_size;
#ifdef GG_HAVE_MPI
  if (launched > 1) {
    int provided = 0, inited = 0;
    MPI_Initialized(&inited);
    // Open MPI's shared-memory transport copies between processes either directly (CMA) or
    // through shared buffers: the buffers are faster here (a blocking all-reduce of the small
    // model's 3.24 MB: 0.6 ms against 1.1) and a rank that dies mid-copy makes no "Read -1"
    // lines on the others' stderr. Unless the user chose (setenv does not overwrite).
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    if (!inited) MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_dup(MPI_COMM_WORLD, &g_spread);
    MPI_Comm_dup(MPI_COMM_WORLD, &g_gather);
    std::atexit(finalize_at_exit);
  }
#else
  if (launched > 1)
    throw InputError(fmt::format("started as {} processes (by mpirun), but this gradgraph was built without MPI: "
                                 "install libopenmpi-dev and rebuild, or run one process", launched));
#endif
  g_rank = rank_;
  if (distributed()) {
    set_stop_note("");
    std::signal(SIGTERM, on_sigterm);
  }
}

namespace {
std::atomic<const World*> g_world{nullptr};
}

World& World::get() {
  static World w;
  g_world = &w;
  return w;
}

const World* World::started() { return g_world.load(); }
int World::launched_rank() { return env_config().launched_rank; }

std::vector<std::string> World::allgather(const std::string& mine) const {
  if (!distributed()) return {mine};
#ifdef GG_HAVE_MPI
  const int n = int(mine.size());
  std::vector<int> sizes(static_cast<std::size_t>(size_)), at(static_cast<std::size_t>(size_), 0);
  MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 1; r < size_; ++r) at[std::size_t(r)] = at[std::size_t(r - 1)] + sizes[std::size_t(r - 1)];
  std::string all(std::size_t(at.back() + sizes.back()), '\0');
  MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), at.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> r;
  for (int k = 0; k < size_; ++k) r.push_back(all.substr(std::size_t(at[std::size_t(k)]), std::size_t(sizes[std::size_t(k)])));
  return r;
#else
  return {mine};
#endif
}

std::vector<double> World::allgather(std::span<const double> mine) const {
  if (!distributed()) return {mine.begin(), mine.end()};
  std::vector<double> all(mine.size() * std::size_t(size_));
#ifdef GG_HAVE_MPI
  MPI_Allgather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, MPI_COMM_WORLD);
#endif
  return all;
}

double World::sum(double mine) const {
  if (!distributed()) return mine;
  const std::vector<double> all = allgather(std::span<const double>(&mine, 1));
  double s = 0;
  for (double v : all) s += v;  // rank order
  return s;
}

void World::shared_error() const { g_shared_error = true; }
bool World::reports_errors() const { return rank_ == 0 || !g_shared_error.load(); }
void World::failed() const { g_failed = true; }

void World::set_stop_note(const std::string& note) const {
  std::string line = fmt::format("gradgraph: rank {}: stopped: mpirun ended the job (another rank exited or was killed){}{}",
                                 rank_, note.empty() ? "" : "; ", note.substr(0, 200));
  line = line.substr(0, sizeof g_note[0] - 2) + "\n";
  const int next = 1 - g_note_at.load();
  std::memcpy(g_note[next], line.c_str(), line.size() + 1);
  g_note_at = next;
}

std::string SyncStats::describe() const {
  const double n = double(std::max<std::int64_t>(steps, 1));
  return fmt::format("{:.2f} MB all-reduced per step in {} buckets; a step spends {:.2f} ms filling and starting them "
                     "during the backward and waits {:.2f} ms after it (a blocking all-reduce of them: {:.2f} ms)",
                     bytes / 1e6, buckets, during_ms / n, wait_ms / n, blocking_ms);
}

// ---- the buckets ---------------------------------------------------------------------------

struct DataParallel::Buckets {
  struct Bucket {
    std::vector<std::size_t> params;  // indices into the model's grads()
    std::size_t floats = 0, chunk = 0;  // its values; each rank's part (floats / ranks, rounded up)
    std::size_t ready_at = 0;           // final after this many steps of rank 0's plan
    std::vector<float> send, recv, part, result;  // ranks * chunk, ranks * chunk, chunk, ranks * chunk
    int waiting = 0;                              // gradients still to come this step
    int phase = 0;                                // 0 waiting, 1 all-to-all, 2 all-gather, 3 done
#ifdef GG_HAVE_MPI
    MPI_Request req = MPI_REQUEST_NULL;
#endif
  };
  std::vector<Bucket> all;
  std::vector<std::pair<std::size_t, std::size_t>> at;  // per gradient: its bucket and offset there
  std::vector<std::size_t> numel;                       // per gradient
  std::vector<char> given;                              // per gradient: filled this step
  std::size_t steps = 0;  // rank 0's plan's steps
  std::size_t next = 0;   // the next bucket to start (buckets start in order on every rank)
  int ranks = 1;
  bool reducing = false;
  double comm_ms = 0;  // this step's time in the callbacks
  std::vector<float> weights;  // per rank, the factor on its gradients (its rows' share, over micro-batches)
  const std::vector<std::vector<float>>* prior = nullptr;  // earlier micro-batches' sums, or null

  // Gradient i into its bucket, plus prior[i] (a copy: the weights are applied in the sum).
  void fill(std::size_t i, std::span<const float> g) {
    const auto [k, off] = at[i];
    Bucket& b = all[k];
    float* dst = b.send.data() + off;
    if (prior) {
      const float* p = (*prior)[i].data();
      for (std::size_t j = 0; j < g.size(); ++j) dst[j] = g[j] + p[j];
    } else {
      std::copy(g.begin(), g.end(), dst);
    }
    given[i] = 1;
    --b.waiting;
  }

  // Rank r's part of bucket b summed over the ranks in rank order, then gathered by all.
  void start(Bucket& b) {
#ifdef GG_HAVE_MPI
    MPI_Ialltoall(b.send.data(), int(b.chunk), MPI_FLOAT, b.recv.data(), int(b.chunk), MPI_FLOAT, g_spread, &b.req);
#endif
    b.phase = 1;
  }
  void gather(Bucket& b) {
    float* p = b.part.data();
    const float w0 = weights[0];
    for (std::size_t k = 0; k < b.chunk; ++k) p[k] = w0 * b.recv[k];
    for (int r = 1; r < ranks; ++r) {
      const float* q = b.recv.data() + std::size_t(r) * b.chunk;
      const float w = weights[std::size_t(r)];
      for (std::size_t k = 0; k < b.chunk; ++k) p[k] += w * q[k];
    }
#ifdef GG_HAVE_MPI
    MPI_Iallgather(b.part.data(), int(b.chunk), MPI_FLOAT, b.result.data(), int(b.chunk), MPI_FLOAT, g_gather, &b.req);
#endif
    b.phase = 2;
  }
  // Moves the started buckets on as far as they go without waiting; a bucket's all-gather
  // starts only after the earlier buckets' (the same order on every rank).
  void poll() {
#ifdef GG_HAVE_MPI
    for (std::size_t k = 0; k < next; ++k) {
      Bucket& b = all[k];
      int done = 0;
      if (b.phase == 1) {
        MPI_Test(&b.req, &done, MPI_STATUS_IGNORE);
        if (!done) break;  // later buckets' all-gathers wait for this one's
        gather(b);
      }
      if (b.phase == 2) {
        MPI_Test(&b.req, &done, MPI_STATUS_IGNORE);
        if (done) b.phase = 3;
      }
    }
#endif
  }
  // Starts the buckets whose gradients are all in, in order.
  void start_ready() {
    while (next < all.size() && all[next].waiting == 0) start(all[next++]);
  }
  // Waits for every bucket (starting those not yet started, in order).
  void wait_all() {
    while (next < all.size()) start(all[next++]);
#ifdef GG_HAVE_MPI
    for (Bucket& b : all)
      if (b.phase == 1) {
        MPI_Wait(&b.req, MPI_STATUS_IGNORE);
        gather(b);
      }
    for (Bucket& b : all)
      if (b.phase == 2) {
        MPI_Wait(&b.req, MPI_STATUS_IGNORE);
        b.phase = 3;
      }
#endif
  }
  void reset() {
    for (Bucket& b : all) {
      b.waiting = int(b.params.size());
      b.phase = 0;
    }
    std::fill(given.begin(), given.end(), 0);
    next = 0;
    comm_ms = 0;
  }
};

DataParallel::DataParallel(const World& w, Model& m, std::size_t bucket_bytes)
    : w_(w), m_(m), bucket_bytes_(std::max<std::size_t>(bucket_bytes, 4)) {}
DataParallel::~DataParallel() = default;

namespace {
std::int64_t batch_rows(const Batch& b) {
  if (b.empty()) throw InputError("data parallel: the batch has no tensors");
  const auto& [first, t0] = *b.begin();
  if (t0.shape().empty()) throw InputError(fmt::format("data parallel: batch tensor '{}' is a scalar; each tensor's "
                                                       "first axis must be the batch's rows", first.substr(0, 60)));
  for (auto& [name, t] : b)
    if (t.shape().empty() || t.shape()[0] != t0.shape()[0])
      throw InputError(fmt::format("data parallel: batch tensor '{}' has {} rows but '{}' has {}: each tensor's first "
                                   "axis must be the batch's rows", name.substr(0, 60),
                                   t.shape().empty() ? 0 : t.shape()[0], first.substr(0, 60), t0.shape()[0]));
  return t0.shape()[0];
}
}  // namespace

Batch DataParallel::share(const Batch& global) const { return share_of(global, w_.rank()); }

Batch DataParallel::share_of(const Batch& global, int rank) const {
  const std::int64_t B = batch_rows(global), N = w_.size(), r = rank;
  if (N == 1) return global;
  if (B < N)
    throw InputError(fmt::format("data parallel: the global batch has {} rows for {} ranks; give each rank one at least",
                                 B, N));
  const std::int64_t lo = r * B / N, hi = (r + 1) * B / N;
  Batch s;
  for (auto& [name, t] : global) {
    Shape shape = t.shape();
    const std::int64_t row = t.numel() / B;  // values per row
    shape[0] = hi - lo;
    Tensor part(shape, t.dtype());
    std::memcpy(part.data(), static_cast<const char*>(t.data()) + std::size_t(lo * row) * 4,
                std::size_t((hi - lo) * row) * 4);
    s.emplace(name, std::move(part));
  }
  return s;
}

std::vector<double> DataParallel::weights(const Batch& global) const {
  const std::int64_t B = batch_rows(global), N = w_.size();
  std::vector<double> w(static_cast<std::size_t>(N));
  if (!terms_) {
    for (std::int64_t r = 0; r < N; ++r) w[std::size_t(r)] = double((r + 1) * B / N - r * B / N) / double(B);
    return w;
  }
  double total = 0;  // every rank counts every share's terms from the global batch: no messages
  for (std::int64_t r = 0; r < N; ++r) total += w[std::size_t(r)] = terms_(share_of(global, int(r)));
  if (!(total > 0) || !std::isfinite(total))
    throw InputError(fmt::format("data parallel: DataSource::loss_terms gives {} terms for the whole batch", total));
  for (double& v : w) v /= total;
  return w;
}

void DataParallel::plan(const Batch& global) {
  const Batch mine = share(global);
  std::vector<std::string> names;
  const std::vector<std::size_t> ready = m_.grad_ready_at(mine, &names);
  const std::size_t steps = m_.plan_for(mine, /*training=*/true).step_count();
  // Rank 0's order for everyone: "steps;name ready;name ready;...".
  std::string text = fmt::format("{}", steps);
  for (std::size_t i = 0; i < names.size(); ++i) text += fmt::format(";{} {}", names[i], ready[i]);
  const std::vector<std::string> all = w_.allgather(text);
  // "steps;name ready;..." -> (name, ready) pairs.
  auto parse = [](const std::string& t) {
    std::vector<std::pair<std::string, std::size_t>> r;
    for (std::size_t at = t.find(';'); at != std::string::npos;) {
      const std::size_t end = t.find(';', at + 1);
      const std::string item = t.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
      const std::size_t space = item.rfind(' ');
      r.emplace_back(item.substr(0, space), std::size_t(std::strtoull(item.c_str() + space + 1, nullptr, 10)));
      at = end;
    }
    return r;
  };
  const std::vector<std::pair<std::string, std::size_t>> zero = parse(all[0]);
  for (int r = 1; r < w_.size(); ++r) {
    const std::vector<std::pair<std::string, std::size_t>> other = parse(all[std::size_t(r)]);
    if (!std::equal(other.begin(), other.end(), zero.begin(), zero.end(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      w_.shared_error();
      throw InputError(fmt::format("data parallel: rank {} trains other parameters than rank 0 ({} and {} gradients)",
                                   r, other.size(), zero.size()));
    }
  }
  std::vector<std::size_t> ready0;
  for (const auto& p : zero) ready0.push_back(p.second);
  b_ = std::make_unique<Buckets>();
  Buckets& bk = *b_;
  bk.ranks = w_.size();
  bk.steps = std::size_t(std::strtoull(all[0].c_str(), nullptr, 10));
  for (const std::string& n : names)
    for (const ParamInfo& p : m_.param_table())
      if (p.name == n) bk.numel.push_back(std::size_t(gg::numel(p.shape)));
  if (bk.numel.size() != names.size()) throw InputError("data parallel: a gradient's parameter is not in the model's table");
  bk.at.resize(names.size());
  bk.given.assign(names.size(), 0);
  std::vector<std::size_t> order(names.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ready0[a] < ready0[b]; });
  for (std::size_t i : order) {
    if (bk.all.empty() || bk.all.back().floats * 4 >= bucket_bytes_) bk.all.emplace_back();
    Buckets::Bucket& b = bk.all.back();
    bk.at[i] = {bk.all.size() - 1, b.floats};
    b.params.push_back(i);
    b.floats += bk.numel[i];
    b.ready_at = std::max(b.ready_at, ready0[i]);
  }
  stats_ = {};
  for (Buckets::Bucket& b : bk.all) {
    b.chunk = (b.floats + std::size_t(bk.ranks) - 1) / std::size_t(bk.ranks);
    const std::size_t padded = b.chunk * std::size_t(bk.ranks);
    b.send.assign(padded, 0.f);
    b.recv.assign(padded, 0.f);
    b.result.assign(padded, 0.f);
    b.part.assign(b.chunk, 0.f);
    stats_.bytes += double(b.floats) * 4;
  }
  stats_.buckets = bk.all.size();
  bk.weights.assign(std::size_t(bk.ranks), 1.f / float(bk.ranks));
  // One blocking reduction of every bucket, the best of three: what hiding is measured against.
  double best = 1e300;
  for (int k = 0; k < 3; ++k) {
    bk.reset();
    const auto t0 = clock_type::now();
    bk.wait_all();
    best = std::min(best, ms_since(t0));
  }
  stats_.blocking_ms = w_.distributed() ? best : 0;
}

std::string DataParallel::describe() const {
  if (!b_) return "data parallel: not planned";
  const Buckets& bk = *b_;
  std::string where;
  for (std::size_t k = 0; k < bk.all.size() && k < 6; ++k)
    where += fmt::format("{}{:.2f} MB after step {}", k ? ", " : "", double(bk.all[k].floats) * 4 / 1e6,
                         bk.all[k].ready_at);
  if (bk.all.size() > 6) where += ", ...";
  return fmt::format("data parallel: {} ranks, gradients in {} buckets of {:.2f} MB in all, each all-reduced "
                     "(deterministic: summed in rank order) as soon as the backward has made it ({} of {} steps: {}); "
                     "a blocking all-reduce of them takes {:.2f} ms",
                     w_.size(), bk.all.size(), stats_.bytes / 1e6, bk.all.size() > 6 ? "the first 6" : "final",
                     bk.steps, where, stats_.blocking_ms);
}

double DataParallel::step(const Batch& global, bool reduce, const std::vector<std::vector<float>>* prior, float scale) {
  const Batch mine = share(global);
  // Dropout: each rank draws its own masks from a stream of its own, seeded by one draw of
  // the shared generator, which every rank then holds in the same state (the checkpoint's).
  const std::uint64_t draw = m_.rng()();
  const std::mt19937_64 shared = m_.rng();
  m_.rng().seed(draw ^ (0x9e3779b97f4a7c15ull * std::uint64_t(w_.rank() + 1)));
  struct Restore {
    Model& m;
    const std::mt19937_64& state;
    ~Restore() { m.rng() = state; }
  } restore{m_, shared};
  const std::vector<double> w = weights(global);
  step_weight_ = w[std::size_t(w_.rank())];
  if (!reduce) return m_.forward_backward(mine);
  if (!b_) throw InputError("data parallel: step() before plan()");
  Buckets& bk = *b_;
  bk.reset();
  bk.reducing = true;
  bk.weights.resize(w.size());
  for (std::size_t r = 0; r < w.size(); ++r) bk.weights[r] = float(double(scale) * w[r]);
  bk.prior = prior;
  return m_.forward_backward(mine, [&bk, overlap = overlap_](std::size_t i, std::span<const float> g) {
    const auto t0 = clock_type::now();
    bk.fill(i, g);
    if (overlap) {
      bk.start_ready();
      bk.poll();
    }
    bk.comm_ms += ms_since(t0);
  });
}

std::vector<ParamGrad> DataParallel::reduced(std::vector<ParamGrad> pg) {
  if (!b_ || !b_->reducing) throw InputError("data parallel: reduced() without a reducing step()");
  Buckets& bk = *b_;
  if (pg.size() != bk.numel.size())
    throw InputError(fmt::format("data parallel: {} gradients to reduce, the plan has {}", pg.size(), bk.numel.size()));
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < pg.size(); ++i)
    if (!bk.given[i]) bk.fill(i, pg[i].grad);  // a gradient the run did not announce (timing skips leave work out)
  bk.wait_all();
  stats_.during_ms += bk.comm_ms;
  stats_.wait_ms += ms_since(t0);
  ++stats_.steps;
  bk.reducing = false;
  for (std::size_t i = 0; i < pg.size(); ++i) {
    const auto [k, off] = bk.at[i];
    pg[i].grad = std::span<float>(bk.all[k].result.data() + off, bk.numel[i]);
  }
  return pg;
}

}  // namespace gg::train
