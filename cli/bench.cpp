// gradgraph bench: warm-up, then timed steps exactly as the trainer takes them
// (forward_backward, grads, clip_grad_norm, AdamW step), the median reported with the
// model FLOPs and the FMA peak; then profiled steps (timed apart: profiling adds a clock
// read per kernel) and, on request, the PyTorch peer as child processes, one per setting.
#include "cli/bench.h"


#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <optional>
#include <ranges>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "cli/input_file.h"
#include "train/trainer.h"
#include "models/gpt.h"
#include "models/gpt_flops.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/peak.h"
#include "ops/cpu/threads.h"
#include "train/distributed.h"
#include "train/optim.h"

#ifndef GG_SOURCE_DIR
#define GG_SOURCE_DIR ""
#endif

namespace gg::cli {
namespace {

using train::InputError;
using clock_type = std::chrono::steady_clock;

// "AMD EPYC, family 25 model 1 (2 CPUs, AVX2+FMA, no AVX-512, L2 512K a core)": the first
// "model name" of /proc/cpuinfo with its "cpu family" and "model" (a VM's model name often
// says only "AMD EPYC": the family and model tell a Zen 3 from a Zen 5), the online CPU
// count, the vector ISA and the first CPU's level-2 cache from sysfs. What is not found is
// left out.
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, name = "unknown CPU", family, model;
  while (std::getline(f, line)) {  // "key\t: value" lines; a blank line ends the first CPU's block
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      if (line.find_first_not_of(" \t") == std::string::npos) break;
      continue;
    }
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const auto at = line.find_first_not_of(" \t", colon + 1);
    const std::string value = at == std::string::npos ? std::string() : line.substr(at);
    if (key == "model name") name = value;
    else if (key == "cpu family") family = value;
    else if (key == "model") model = value;
  }
  if (!family.empty() && !model.empty()) name += fmt::format(", family {} model {}", family, model);
  std::ifstream size_file("/sys/devices/system/cpu/cpu0/cache/index2/size"),
      level_file("/sys/devices/system/cpu/cpu0/cache/index2/level");
  std::string size;
  int level = 0;
  const std::string l2 = size_file >> size && level_file >> level && level == 2 ? fmt::format(", L2 {} a core", size) : "";
  return fmt::format("{} ({} CPUs, {}{})", name, std::thread::hardware_concurrency(), cpu_vector_isa(), l2);
}

// The 1-minute load average (/proc/loadavg), or -1: how busy the machine was.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return f ? l : -1;
}

// The process's peak resident set so far, in MiB (ru_maxrss is KiB on Linux).
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// The FMA peak, then the bf16 one (its all-threads GFLOPS in *bf16_gflops, 0 without AVX512_BF16).
FmaPeak print_peak(const std::string& cpu, double* bf16_gflops = nullptr) {
  const FmaPeak p = measure_fma_peak();
  fmt::print("peak_gflops_per_core {:.1f} ({}; FMA probe: {} chains of {}-float FMAs, register-only, best of 10 runs of 50 ms)\n",
             p.per_core_gflops, cpu, p.chains, p.vector_floats);
  fmt::print("peak_gflops {:.1f} ({} threads, one per core through the thread pool; {})\n", p.total_gflops, p.threads,
             cpu);
  if (!p.concurrent())
    fmt::print("peak_note the {} threads reached only {:.0f}% of {} x the per-core figure in {} rounds of the probe (a vCPU "
               "held by other work); fractions below are of {} x per-core = {:.1f} GFLOPS\n",
               p.threads, 100.0 * p.concurrency(), p.threads, p.total_rounds, p.threads,
               p.reference_gflops());
  // The bf16 dot-product peak, and what the bf16 product reaches of it on the medium model's
  // MLP shape (2048 x 384 @ 384 x 1536).
  if (!cpu_has_avx512_bf16()) {
    fmt::print("bf16_peak none: this CPU has no AVX512_BF16; bf16 products are {}\n", bf16_path_name());
    return p;
  }
  const Bf16Peak b = measure_bf16_peak();
  if (bf16_gflops) *bf16_gflops = b.total_gflops;
  fmt::print("bf16_peak_gflops {:.1f} ({:.1f} a core; VDPBF16PS probe, 4 flops per f32 lane; {:.2f}x the FMA peak)\n",
             b.total_gflops, b.per_core_gflops, b.total_gflops / p.total_gflops);
  const std::int64_t M = 2048, K = 384, N = 1536;
  std::vector<float> A(std::size_t(M * K), 0.5f), B(std::size_t(K * N), 0.25f), C(std::size_t(M * N));
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    const auto t0 = clock_type::now();
    gemm_bf16(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
    if (i >= 2) ms.push_back(ms_since(t0));
  }
  const double gf = 2.0 * double(M * N * K) / (median(ms) * 1e-3) * 1e-9;
  fmt::print("bf16_gemm_gflops {:.1f} ({}x{} @ {}x{}, {}: {:.1f}% of the bf16 peak, {:.2f}x the FMA peak; median of 10)\n",
             gf, M, K, K, N, bf16_path_name(), 100 * gf / b.total_gflops, gf / p.total_gflops);
  return p;
}

// ---- the PyTorch peer --------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

// Runs `cmd` under /bin/sh; its stdout, and whether it exited 0.
std::pair<std::string, bool> capture(const std::string& cmd) {
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {out, false};
  char buf[4096];
  for (std::size_t k; (k = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
  const int st = ::pclose(p);
  return {out, WIFEXITED(st) && WEXITSTATUS(st) == 0};
}

// The value after `key ` on the line that starts with it, or "".
std::string field(const std::string& out, const std::string& key) {
  for (std::size_t at = 0; at < out.size();) {
    std::size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(at, end - at);
    if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
    at = end + 1;
  }
  return "";
}

struct TorchRun {
  std::string setting, core, blas, cmd;
  double ms = 0, rss_mib = 0;
};

std::string find_torch_script(const std::string& given) {
  if (!given.empty()) return given;
  return std::string(GG_SOURCE_DIR) + "/bench/torch_bench.py";
}

// time_ours: times gradgraph's steps again (the median ms of --steps steps), for the
// paired rounds after the sweep.
void compare_torch(const BenchCommand& a, std::int64_t T, double ours_ms, double ours_rss,
                   const std::function<double()>& time_ours) {
  const std::string& python = a.python;
  const std::string script = find_torch_script(a.torch_script);
  fmt::print("\ncompare-torch:\n");
  if (!std::filesystem::exists(python)) {
    fmt::print("compare-torch skipped: {} not found\n", python);
    return;
  }
  if (!std::filesystem::exists(script)) {
    fmt::print("compare-torch skipped: the PyTorch script {} does not exist (give it with --torch-script)\n", script);
    return;
  }
  auto [version, has_torch] = capture(python + " -c 'import torch; print(torch.__version__)' 2>/dev/null");
  if (!has_torch) {
    fmt::print("compare-torch skipped: PyTorch is not installed ({} cannot import torch; apt-get install python3-torch)\n",
               python);
    return;
  }
  version.erase(version.find_last_not_of("\n ") + 1);
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const char* env_core = std::getenv("OPENBLAS_CORETYPE");
  const char* env_l2 = std::getenv("OPENBLAS_L2_SIZE");
  // Core types: the environment's (if it sets one), OpenBLAS's own detection (both
  // variables unset, as the machine's note says to benchmark), and SkylakeX; on a CPU
  // without AVX-512, where SkylakeX's kernels die of an illegal instruction, Haswell's
  // (AVX2) instead, so that two core types are still compared.
  struct Core {
    std::string name, env;
  };
  std::vector<Core> cores_tried;
  if (env_core)
    cores_tried.push_back({fmt::format("environment (OPENBLAS_CORETYPE={}{})", env_core,
                                       env_l2 ? fmt::format(" OPENBLAS_L2_SIZE={}", env_l2) : ""),
                           ""});
  cores_tried.push_back({"detected (OPENBLAS_CORETYPE unset)", "-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"});
  const bool avx512 = cpu_has_avx512();
  if (avx512) cores_tried.push_back({"SkylakeX", "-u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX"});
  else cores_tried.push_back({"Haswell", "-u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=Haswell"});
  fmt::print("PyTorch {} ({}), {} steps per setting after at least max({}, 3) warm-up steps (more while its steps still "
             "speed up: glibc's malloc settles in a few steps); the machine's OPENBLAS_CORETYPE is {}\n",
             version, python, a.torch_steps > 0 ? a.torch_steps : a.steps, a.warmup, env_core ? env_core : "unset");
  if (!avx512)
    fmt::print("OPENBLAS_CORETYPE=SkylakeX not tried: this CPU has no AVX-512 (its kernels would die of an illegal "
               "instruction); Haswell (AVX2) tried instead\n");
  std::vector<TorchRun> runs;
  std::string notes;
  for (const Core& core : cores_tried)
    for (int tt : {1, cores})
      for (int bt : {1, cores}) {
        if (cores > 1 && tt == cores && bt == cores) continue;  // oversubscribed
        if (cores == 1 && (tt != 1 || bt != 1)) continue;
        const std::string cmd = fmt::format(
            "env {} OPENBLAS_NUM_THREADS={} OMP_NUM_THREADS={} {} {} --config {} --batch {} --seq {} --steps {} "
            "--warmup {} --threads {}{} 2>&1",
            core.env, bt, tt, python, shell_quote(script), shell_quote(a.config), a.batch, T,
            a.torch_steps > 0 ? a.torch_steps : a.steps, a.warmup, tt,
            a.precision == "bf16" ? " --autocast-bf16" : "");
        auto [out, ok] = capture(cmd);
        TorchRun r;
        r.cmd = cmd;
        r.setting = fmt::format("torch threads {}, OpenBLAS threads {}, core {}", tt, bt, core.name);
        const std::string ms = field(out, "torch_ms_per_step");
        if (!ok || ms.empty()) {
          std::string last = out.substr(0, std::min<std::size_t>(out.size(), 400));
          for (char& ch : last)
            if (ch == '\n') ch = ' ';
          fmt::print("  {:<80} failed: {}\n", r.setting, last);
          continue;
        }
        r.ms = std::stod(ms);
        r.rss_mib = std::stod(field(out, "torch_peak_rss_kb").empty() ? "0" : field(out, "torch_peak_rss_kb")) / 1024.0;
        r.core = field(out, "openblas_core");
        r.blas = field(out, "blas_library");
        if (notes.empty()) notes = field(out, "torch_code");
        const bool named = !r.core.empty() && r.core != "?";
        const std::string warm = field(out, "torch_warmup_steps");
        fmt::print("  {:<80} {:9.2f} ms/step  peak RSS {:7.1f} MiB  ({}; warm-up {}; load average {:.2f})\n", r.setting,
                   r.ms, r.rss_mib, named ? "OpenBLAS runs " + r.core : "BLAS " + (r.blas.empty() ? "?" : r.blas),
                   warm.substr(0, warm.find(' ')), load_average());
        runs.push_back(r);
      }
  if (runs.empty()) {
    fmt::print("compare-torch: no PyTorch setting ran\n");
    return;
  }
  if (!notes.empty()) fmt::print("PyTorch code: {}\n", notes);
  // Debian's torch calls libblas.so.3, which Debian's alternatives point at OpenBLAS only
  // when it is installed; otherwise at the reference BLAS, some 30x slower on these products,
  // and a ratio against it would flatter gradgraph by as much.
  const bool any_openblas = std::any_of(runs.begin(), runs.end(), [](const TorchRun& r) {
    return r.blas.find("openblas") != std::string::npos || (!r.core.empty() && r.core != "?");
  });
  if (!any_openblas)
    fmt::print("WARNING: PyTorch ran without OpenBLAS (its BLAS: {}): this is not PyTorch at its best, and the "
               "ratios below flatter gradgraph; apt-get install libopenblas0-pthread and run again\n",
               runs.front().blas.empty() ? "unknown" : runs.front().blas);
  const TorchRun& best = *std::min_element(runs.begin(), runs.end(), [](auto& x, auto& y) { return x.ms < y.ms; });
  fmt::print("torch_best_ms_per_step {:.2f} ({})\n", best.ms, best.setting);
  fmt::print("speedup {:.2f}x (PyTorch's best / gradgraph: {:.2f} / {:.2f} ms)\n", best.ms / ours_ms, best.ms, ours_ms);
  fmt::print("peak_rss_mib gradgraph {:.1f}, PyTorch {:.1f} (its best setting's process; ratio {:.2f})\n", ours_rss,
             best.rss_mib, ours_rss / std::max(best.rss_mib, 1e-9));
  // The sweep takes long enough for a shared machine's speed to change under it: pair
  // gradgraph and PyTorch's best setting back to back, a few times, and take the median.
  if (a.rounds < 1) return;
  std::vector<double> ratios;
  for (int r = 0; r < a.rounds; ++r) {
    const double ours = time_ours();
    auto [out, ok] = capture(best.cmd);
    const std::string ms = field(out, "torch_ms_per_step");
    if (!ok || ms.empty()) {
      fmt::print("  round {}: PyTorch's best setting failed this time\n", r + 1);
      continue;
    }
    const double theirs = std::stod(ms);
    ratios.push_back(theirs / ours);
    fmt::print("  round {}: gradgraph {:.2f} ms/step, PyTorch {:.2f} ms/step, {:.2f}x (load average {:.2f})\n", r + 1,
               ours, theirs, theirs / ours, load_average());
  }
  if (ratios.empty()) return;
  std::sort(ratios.begin(), ratios.end());
  fmt::print("paired_speedup {:.2f}x (median of {} rounds, each gradgraph then PyTorch's best setting back to back; "
             "range {:.2f}-{:.2f}x)\n",
             ratios[ratios.size() / 2], ratios.size(), ratios.front(), ratios.back());
}

// ---- one plan against another, in one process ----------------------------------------------

// The other side of an --ab / --without comparison: its planning options, the kinds of the
// plan's work it leaves out (ops/runtime/executor.h's SkipWork, timing only), and whether it runs
// clipping and AdamW.
struct AbSide {
  ExecutorOptions options;
  bool composite_attention = false;  // "fused-attention": attention built as its composition (Model::set_fused_attention)
  bool f32_products = false;  // "bf16" named: the other side's products in f32
  unsigned skip = 0;
  bool optimizer = true;
  std::string label;  // "epilogue", "left out: groups,optimizer (timing only: ...)", ...
};

// The --ab names that change how the model's graph is built rather than planned: attention
// as its composition instead of the fused primitive pair (dsl/nn.h's AttentionOptions::fused),
// and the products in f32 instead of bf16 (Model::set_bf16_products).
constexpr const char* kFusedAttention = "fused-attention";
constexpr const char* kBf16 = "bf16";

// The first unknown name of --ab (planning switches turned off) or --without (kinds of work
// left out, "optimizer" being clipping and AdamW): {"ab" or "without", the problem, listing
// the known names}, or {} when every name is known. The options' cross check.
std::pair<std::string, std::string> ab_problem(const std::vector<std::string>& ab,
                                               const std::vector<std::string>& without, const std::string& precision) {
  ExecutorOptions o;
  for (const std::string& name : ab) {
    if (name == kFusedAttention) continue;
    if (name == kBf16) {
      if (precision != "bf16") return {"ab", "'bf16' (products in f32 on the other side) needs --precision bf16"};
    } else if (!set_executor_switch(o, name, false)) {
      return {"ab", fmt::format("'{}' is not a planning switch (the switches: {}, {}, {})", io::cut(name, 40),
                                fmt::join(executor_switch_names(), ", "), kBf16, kFusedAttention)};
    }
  }
  const auto& kinds = skip_work_names();
  for (const std::string& name : without)
    if (name != "optimizer" && std::none_of(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == name; }))
      return {"without", fmt::format("'{}' is not a kind of work (the kinds: {}, optimizer)", io::cut(name, 40),
                                     fmt::join(kinds | std::views::keys, ", "))};
  return {};
}

// The other side of the comparison from names ab_problem found known.
AbSide ab_side(const std::vector<std::string>& ab, const std::vector<std::string>& without) {
  AbSide side;
  for (const std::string& name : ab)
    if (name == kFusedAttention) side.composite_attention = true;
    else if (name == kBf16) side.f32_products = true;
    else set_executor_switch(side.options, name, false);
  side.label = switches_off(side.options);
  auto add = [&](const std::string& what) { side.label += (side.label.empty() ? "" : ",") + what; };
  if (side.f32_products) add(std::string(kBf16) + " (products in f32)");
  if (side.composite_attention) add(kFusedAttention);
  for (const std::string& name : without) {
    const auto& kinds = skip_work_names();
    const auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == name; });
    if (it != kinds.end()) side.skip |= it->second;
    else side.optimizer = false;  // "optimizer"
  }
  if (!without.empty())
    side.label += fmt::format("{}left out: {} (timing only: the values are wrong)", side.label.empty() ? "" : "; ",
                              fmt::join(without, ","));
  return side;
}

// The model's training step as it is against `other`'s (other planning options, work left
// out), over the same parameters and batch: `steps` steps of each in blocks of 5,
// alternating as with, without, without, with, ... (so a drift of the machine's speed falls
// on both), after `warmup` steps of the other side. The host's speed moves by several
// percent from one minute to the next here, so two runs can only tell apart what differs by
// more; paired blocks a few milliseconds apart tell apart a few tenths of a percent.
// step(optimizer): one training step, with or without clipping and AdamW.
void ab_compare(train::Model& m, const train::Batch& batch, const AbSide& other, int steps, int warmup,
                const std::function<void(bool)>& step) {
  const ExecutorOptions with = m.plan_options();
  const std::optional<bool> with_fused = m.fused_attention();
  const bool bf16 = m.bf16_products();
  auto side = [&](bool without, unsigned skip) {  // the plan of one side, set up to run
    m.set_plan_options(without ? other.options : with);
    m.set_fused_attention(without && other.composite_attention ? std::optional<bool>(false) : with_fused);
    m.set_bf16_products(without && other.f32_products ? false : bf16);
    m.plan_for(batch, /*training=*/true).set_skip_for_timing(skip);
  };
  side(true, other.skip);
  fmt::print("ab_without {} (arena {:.1f} MiB)\n", other.label,
             double(m.plan_for(batch, /*training=*/true).arena_bytes()) / (1 << 20));
  for (int i = 0; i < warmup; ++i) step(other.optimizer);
  constexpr int block = 5;
  std::vector<double> ms[2], ratios;  // ms[0]: with, ms[1]: without
  for (int pair = 0; pair < steps / block; ++pair) {
    double med[2] = {0, 0};
    for (int half = 0; half < 2; ++half) {
      const int k = pair % 2 ? 1 - half : half;
      side(k == 1, k == 1 ? other.skip : 0u);
      std::vector<double> b;
      for (int i = 0; i < block; ++i) {
        const auto t0 = clock_type::now();
        step(k == 0 || other.optimizer);
        b.push_back(ms_since(t0));
      }
      ms[k].insert(ms[k].end(), b.begin(), b.end());
      med[k] = median(b);
    }
    ratios.push_back(med[1] / med[0]);
  }
  side(true, 0u);  // a cached plan keeps no skips
  side(false, 0u);
  std::sort(ratios.begin(), ratios.end());
  fmt::print("ab_ms_per_step with {:.3f}, without {:.3f} (medians of {} steps each, in blocks of {} alternating)\n",
             median(ms[0]), median(ms[1]), ms[0].size(), block);
  fmt::print("ab_ratio {:.4f} (without / with: the median of {} paired blocks' ratios, quartiles {:.4f}-{:.4f}; above 1: "
             "the step is faster with what was switched off; below 1: what was left out costs 1 - ratio of it)\n",
             median(ratios), ratios.size(), ratios[ratios.size() / 4], ratios[ratios.size() * 3 / 4]);
}

// ---- the benchmark -----------------------------------------------------------------------

int run_bench(const BenchCommand& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  const std::string cpu = cpu_model();
  if (a.peak) {
    print_peak(cpu);
    return 0;
  }
  const AbSide ab_other = ab_side(a.ab, a.without);  // the names were checked with the options
  const models::GptConfig c = models::load_gpt_config(a.config);
  const std::int64_t B = a.batch, T = a.seq > 0 ? a.seq : c.block_size;
  if (T > c.block_size)
    throw InputError(fmt::format("--seq {} is longer than the config's block_size {}", T, c.block_size));
  const models::StepFlops flops = models::gpt_step_flops(c, B, T);

  train::Model m = models::gpt_model(c);
  m.set_bf16_products(a.precision == "bf16");
  std::mt19937_64 rng(0);
  std::vector<std::int32_t> x(std::size_t(B * T)), y(std::size_t(B * T));
  for (auto& v : x) v = std::int32_t(rng() % std::uint64_t(c.vocab_size));
  for (auto& v : y) v = std::int32_t(rng() % std::uint64_t(c.vocab_size));
  const train::Batch batch{{"tokens", Tensor::i32({B, T}, x)}, {"targets", Tensor::i32({B, T}, y)}};
  m.declare(batch);
  m.init_params(1);
  AdamW opt({0.9, 0.99, 1e-8, 0.1});
  // Under mpirun: the step fit() takes as a rank, on its share of the same global batch.
  const train::World& world = train::World::get();
  std::optional<train::DataParallel> dp;
  if (world.distributed()) {
    if (a.compare_torch) throw InputError("bench: --compare-torch runs in one process; leave it out under mpirun");
    dp.emplace(world, m, std::size_t(a.bucket_mb * 1e6));
    dp->plan(batch);
  }
  const train::Batch& mine = dp ? dp->share(batch) : batch;

  fmt::print("gradgraph bench: {} (L{} H{} D{} V{}), batch {} x seq {}, {} threads{}; {}\n", a.config, c.n_layer,
             c.n_head, c.n_embd, c.vocab_size, B, T, num_threads(),
             dp ? fmt::format(" in each of {} ranks", world.size()) : "", cpu);
  if (dp) fmt::print("{}\n", dp->describe());
  Executor& plan = m.plan_for(mine, /*training=*/true);
  fmt::print("arena_bytes {} ({:.1f} MiB, planned before the first step; without buffer reuse {:.1f} MiB)\n",
             plan.arena_bytes(), double(plan.arena_bytes()) / (1 << 20), double(plan.unshared_bytes()) / (1 << 20));
  fmt::print("flops_per_step {:.0f} = {}\n", flops.total, flops.formula);
  fmt::print("  N = {} parameters, each counted once (the tied head is the token embedding), biases, norms and "
             "position embeddings included; B*T = {} tokens; the attention term is QK^T and weights@V over the full "
             "T x T, forward (4*B*T*T*D per layer) and backward (twice that); matrix products only\n",
             flops.params, flops.tokens);
  double bf16_peak = 0;
  const FmaPeak peak = print_peak(cpu, &bf16_peak);

  // One training step as train/trainer.cpp takes it (constant lr; the schedule costs nothing).
  auto step = [&](double* fb_ms, bool optimizer = true) {
    const auto t0 = clock_type::now();
    if (dp) dp->step(batch, /*reduce=*/true, nullptr, 1.f);
    else m.forward_backward(batch);
    if (fb_ms) *fb_ms = ms_since(t0);
    std::vector<ParamGrad> pg = dp ? dp->reduced(m.grads()) : m.grads();
    if (!optimizer) return;
    opt.step(pg, 1e-3, clip_scale(grad_norm(pg), 1.0));  // clipping folded into the update, as fit() does
  };
  for (int i = 0; i < a.warmup; ++i) step(nullptr);
  // --steps timed steps: each step's ms, and its forward+backward ms.
  auto timed_steps = [&](std::vector<double>& ms, std::vector<double>& fb) {
    for (int i = 0; i < a.steps; ++i) {
      double f = 0;
      const auto t0 = clock_type::now();
      step(&f);
      ms.push_back(ms_since(t0));
      fb.push_back(f);
    }
  };
  std::vector<double> ms, fb;
  timed_steps(ms, fb);
  const double step_ms = median(ms), fb_ms = median(fb);
  const double gflops = flops.total / (step_ms * 1e-3) * 1e-9;
  fmt::print("ms_per_step {:.3f} (median of {} steps after {} warm-up; min {:.3f}, max {:.3f}; forward+backward "
             "{:.3f}, clip+AdamW {:.3f})\n",
             step_ms, a.steps, a.warmup, *std::min_element(ms.begin(), ms.end()),
             *std::max_element(ms.begin(), ms.end()), fb_ms, step_ms - fb_ms);
  fmt::print("tokens_per_s {:.0f}\n", double(flops.tokens) / (step_ms * 1e-3));
  fmt::print("gflops {:.4g}\n", gflops);
  const double ref = peak.reference_gflops() * world.size();  // every rank's threads, each rank measured as it ran
  fmt::print("fraction_of_peak {:.4g} ({:.1f}% of {:.1f} GFLOPS on {} threads; {})\n", gflops / ref, 100.0 * gflops / ref,
             ref, peak.threads, cpu);
  if (a.precision == "bf16")
    fmt::print("precision bf16: every product with bf16 operands and f32 sums, {}{}\n", bf16_path_name(),
               bf16_peak > 0 ? fmt::format("; fraction_of_bf16_peak {:.4g} ({:.1f}% of {:.1f} GFLOPS)",
                                           gflops / (bf16_peak * world.size()), 100.0 * gflops / (bf16_peak * world.size()),
                                           bf16_peak * world.size())
                             : "");
  const double rss = peak_rss_mib();
  fmt::print("peak_rss_mib {:.1f}{}\n", rss, dp ? " (rank 0)" : "");
  if (dp) {
    fmt::print("all_reduce: {} (over {} steps)\n", dp->stats().describe(), dp->stats().steps);
    // What the overlap hides: steps with the reductions during the backward against steps
    // with them after it, in alternating blocks of 5.
    std::vector<double> during, after;
    for (int round = 0; round < std::max(2, a.steps / 5); ++round)
      for (bool overlap : {true, false}) {
        dp->set_overlap(overlap);
        for (int i = 0; i < 5; ++i) {
          const auto t0 = clock_type::now();
          step(nullptr);
          (overlap ? during : after).push_back(ms_since(t0));
        }
      }
    dp->set_overlap(true);
    const double saved = median(after) - median(during), blocking = dp->stats().blocking_ms;
    fmt::print("overlap: {:.3f} ms a step with each bucket reduced as the backward makes it, {:.3f} ms with every "
               "reduction after the backward: {:.3f} ms saved of a {:.3f} ms blocking all-reduce ({:.0f}% hidden; "
               "medians of {} steps each)\n", median(during), median(after), saved, blocking,
               blocking > 0 ? 100 * std::clamp(saved / blocking, 0.0, 1.0) : 0.0, during.size());
  }
  fmt::print("load_average {:.2f} (1 minute, {} CPUs: above 0 means other work shared the machine)\n", load_average(),
             std::thread::hardware_concurrency());

  if (!a.ab.empty() || !a.without.empty())
    ab_compare(m, batch, ab_other, a.ab_steps, a.warmup, [&](bool optimizer) { step(nullptr, optimizer); });

  // Where the time goes: the executor's per-op totals over profiled steps.
  Executor& train_plan = m.plan_for(mine, /*training=*/true);
  train_plan.set_profile(true);
  for (int i = 0; i < a.profile_steps; ++i) step(nullptr);
  train_plan.set_profile(false);
  fmt::print("\nper-op profile over {} profiled forward+backward runs (clipping and AdamW are outside the plan):\n{}",
             a.profile_steps, train_plan.profile_report());
  if (a.profile_top > 0)
    fmt::print("\nslowest {} steps of the plan (per forward+backward run):\n{}", a.profile_top,
               train_plan.profile_steps_report(a.profile_top));

  if (a.compare_torch)
    compare_torch(a, T, step_ms, rss, [&] {
      std::vector<double> again, again_fb;
      timed_steps(again, again_fb);
      return median(again);
    });
  return 0;
}

}  // namespace

const train::OptionTable<BenchCommand>& BenchCommand::table() {
  using train::opt;
  using B = BenchCommand;
  constexpr std::int64_t many = 1 << 20;
  static const train::OptionTable<B> t{
      {opt("config", &B::config, "Model config JSON (bench/gpt_small.json, bench/gpt_medium.json)").reads_file(),
       opt("batch", &B::batch, "Batch size").at_least(1).at_most(65536),
       opt("seq", &B::seq, "Sequence length (0: the config's block_size)").at_least(0).at_most(many),
       opt("steps", &B::steps, "Timed steps (the median is reported)").at_least(1).at_most(many),
       opt("warmup", &B::warmup, "Untimed steps first").at_least(0).at_most(many),
       opt("profile_top", &B::profile_top, "Also list the slowest steps of the plan, with their shapes").at_least(0).at_most(many),
       opt("profile_steps", &B::profile_steps, "Steps run with the per-op profile, after the timed ones").at_least(0).at_most(many),
       opt("threads", &B::threads, "Worker threads (0: all cores, or GG_NUM_THREADS)").at_least(0).at_most(256),
       opt("peak", &B::peak, "Measure and print the FMA peak only"),
       opt("compare_torch", &B::compare_torch,
           "Also time the model in PyTorch (--python) at every thread and OpenBLAS setting"),
       opt("torch_steps", &B::torch_steps, "Timed steps per PyTorch setting (0: --steps)").at_least(0).at_most(many),
       opt("rounds", &B::rounds,
           "After the sweep, rounds of gradgraph then PyTorch's best setting back to back (the median ratio)")
           .at_least(0)
           .at_most(many),
       opt("ab", &B::ab,
           "Also time the plan with these planning switches off (simplify, remat, fuse, slice, masked, in-place, "
           "epilogue; bf16: the products in f32, with --precision bf16; fused-attention: attention built as its "
           "composition) against the default one, alternating blocks of 5 steps in this process"),
       opt("without", &B::without,
           "Timing only: also time the step with these kinds of work left out (products, groups, ops, "
           "chain-products, chain-groups, optimizer), in the --ab comparison; what is left out writes nothing, so "
           "the values are wrong"),
       opt("bucket_mb", &B::bucket_mb, "Under mpirun: MB of gradients per all-reduce (as train's --bucket-mb)")
           .at_least(1e-6)
           .at_most(1024),
       opt("ab_steps", &B::ab_steps, "Steps of each side in the --ab / --without comparison (two blocks of 5 at least)")
           .at_least(10)
           .at_most(many),
       opt("torch_script", &B::torch_script,
           "The PyTorch peer script (default: bench/torch_bench.py in the source tree; when missing, the comparison "
           "is skipped with a note)"),
       opt("python", &B::python, "The Python that runs the PyTorch peer (--compare-torch)"),
       train::precision_option(&B::precision)},
      [](const B& b) -> std::pair<std::string, std::string> {
        if (b.config.empty() && !b.peak) return {"config", "required (or give --peak alone)"};
        return ab_problem(b.ab, b.without, b.precision);
      }};
  return t;
}

void BenchCommand::add_to(CLI::App& app) {
  cmd = app.add_subcommand("bench", "Time training steps of the reference GPT against the FMA peak (and PyTorch)");
  flags.add_to(cmd);
}

int BenchCommand::run(bool check_only) {
  if (!cmd || !*cmd) return -1;
  flags.apply();
  return check_only ? 0 : run_bench(*this);
}

}  // namespace gg::cli
