// `gradgraph bench` as a user runs it, on a tiny model with 2 steps: every field is
// printed, the FLOP count is the formula's, --peak prints positive GFLOPS. No timing
// assertions (the machine may be busy).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "run_cli.h"
#include "tests/test_util.h"

using namespace gg_cli_test;
using gg::test::contains;

namespace {

// The number after "`key` " at the start of a line of `out` (NaN if none).
double number_after(const std::string& out, const std::string& key) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + " ", 0) == 0) return std::stod(line.substr(key.size() + 1));
  return std::nan("");
}

std::string tiny_config(const TempDir& d) {
  const std::string path = d.file("tiny.json");
  std::ofstream(path) << R"({"vocab_size": 5, "block_size": 4, "n_layer": 1, "n_head": 2, "n_embd": 4, "bias": true,
    "pos_encoding": "learned", "tie_weights": true, "gelu": "erf", "layernorm_eps": 1e-5})";
  return path;
}

// `gradgraph bench` on the tiny config with `args`: it must succeed, with nothing on stderr.
Result bench_tiny(const TempDir& d, const std::string& args) {
  const Result r = run("bench --config " + quote(tiny_config(d)) + " " + args);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(r.err.empty());
  return r;
}

}  // namespace

TEST_CASE("cli: bench prints the step time, throughput, FLOPs, peak fraction, memory and profile") {
  TempDir d;
  const Result r = bench_tiny(d, "--batch 2 --seq 3 --steps 2 --warmup 1 --profile-steps 1 --threads 1");
  INFO("stdout: " << r.out);
  for (const char* key : {"ms_per_step", "tokens_per_s", "gflops", "fraction_of_peak", "peak_rss_mib", "arena_bytes",
                          "peak_gflops", "peak_gflops_per_core"}) {
    INFO(key);
    CHECK(number_after(r.out, key) > 0);
  }
  // N = 288 for this config (tests/models/test_gpt_flops.cpp counts it by hand).
  CHECK(number_after(r.out, "flops_per_step") == doctest::Approx(6.0 * 288 * 6 + 12.0 * 2 * 3 * 3 * 4));
  CHECK(contains(r.out, "6*N*B*T + 12*L*B*T*T*D = 6*288*2*3 + 12*1*2*3*3*4"));
  CHECK(contains(r.out, "1 threads"));
  CHECK(contains(r.out, "per-op profile over 1 profiled"));
  CHECK(contains(r.out, "matmul"));
}

TEST_CASE("cli: bench --peak prints positive GFLOPS with the CPU model and its vector ISA") {
  const Result r = run("bench --peak");
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(number_after(r.out, "peak_gflops_per_core") > 0);
  CHECK(number_after(r.out, "peak_gflops") > 0);
  CHECK(contains(r.out, " CPUs, "));
  // The figures depend on the vector ISA: it is named with the CPU.
  CHECK((contains(r.out, "AVX-512") || contains(r.out, "no AVX2") || contains(r.out, "not x86")));
  // A VM's model name can be only "AMD EPYC": the family and model tell its core, and the
  // level-2 cache a core is named where sysfs has it.
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string info((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  if (info.find("cpu family") != std::string::npos && info.find("\nmodel\t") != std::string::npos)
    CHECK(contains(r.out, ", family "));
  if (std::ifstream("/sys/devices/system/cpu/cpu0/cache/index2/size")) CHECK(contains(r.out, ", L2 "));
}

TEST_CASE("cli: bench --compare-torch without the PyTorch script is skipped, not failed") {
  // The Python and the script are given, so each skip is tested whatever the machine has
  // (a fresh Debian has no /usr/bin/python3, let alone PyTorch).
  TempDir d;
  const std::string base = "bench --config " + quote(tiny_config(d)) +
                           " --batch 1 --steps 1 --warmup 0 --profile-steps 0 --compare-torch";
  const std::string no_torch = d.file("python-without-torch");
  std::ofstream(no_torch) << "#!/bin/sh\nexit 1\n";
  std::filesystem::permissions(no_torch, std::filesystem::perms::owner_all);
  const std::string script = d.file("torch_bench.py");
  std::ofstream(script) << "raise SystemExit(1)\n";
  const struct {
    std::string args, says;
  } cases[] = {
      {" --python " + quote(no_torch) + " --torch-script " + quote(d.file("missing.py")),
       "compare-torch skipped: the PyTorch script " + d.file("missing.py") + " does not exist"},
      {" --python " + quote(d.file("missing-python")) + " --torch-script " + quote(script),
       "compare-torch skipped: " + d.file("missing-python") + " not found"},
      {" --python " + quote(no_torch) + " --torch-script " + quote(script),
       "compare-torch skipped: PyTorch is not installed (" + no_torch + " cannot import torch"},
  };
  for (const auto& c : cases) {
    const Result r = run(base + c.args);
    INFO(c.args << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == 0);
    CHECK(contains(r.out, c.says));
  }
}

TEST_CASE("cli: bench without --config, or with a sequence past block_size, is one error line") {
  TempDir d;
  for (const std::string& args : {std::string("bench"), "bench --config " + quote(tiny_config(d)) + " --seq 9"}) {
    const Result r = run(args);
    INFO(args << "\nstderr: " << r.err);
    CHECK(r.status == 1);
    CHECK(r.err_lines() == 1);
    CHECK(contains(r.err, "gradgraph: error:"));
  }
}

TEST_CASE("cli: bench --ab times the plan with planning switches off against the default one, in one run") {
  TempDir d;
  const Result r =
      bench_tiny(d, "--batch 2 --seq 3 --steps 1 --warmup 1 --profile-steps 1 --threads 1 --ab epilogue,fuse --ab-steps 10");
  INFO("stdout: " << r.out);
  CHECK(contains(r.out, "ab_without fuse,epilogue (arena "));  // in the order the passes run
  CHECK(contains(r.out, "(medians of 10 steps each, in blocks of 5 alternating)"));
  CHECK(number_after(r.out, "ab_ratio") > 0);
  CHECK(contains(r.out, "per-op profile over 1 profiled"));  // the default plan again after the comparison
  CHECK(contains(r.out, "fused"));
  // bf16 against f32 products, the same parameters and batch
  const Result p = bench_tiny(d, "--batch 2 --seq 3 --steps 1 --warmup 1 --profile-steps 0 --threads 1 --precision bf16 "
                                 "--ab bf16,epilogue --ab-steps 10");
  INFO("stdout: " << p.out);
  CHECK(contains(p.out, "ab_without epilogue,bf16 (products in f32) (arena "));
  CHECK(number_after(p.out, "ab_ratio") > 0);
}

TEST_CASE("cli: bench --ab fused-attention times attention built as its composition against the fused pair") {
  TempDir d;
  ::setenv("GG_FUSED_ATTENTION", "1", 1);  // fused at any length, as the command inherits it
  const Result r = run("bench --config " + quote(tiny_config(d)) +
                       " --batch 2 --seq 3 --steps 1 --warmup 1 --profile-steps 1 --threads 1 --ab fused-attention,fuse --ab-steps 10");
  ::unsetenv("GG_FUSED_ATTENTION");
  INFO("stdout: " << r.out);
  CHECK(r.status == 0);
  CHECK(contains(r.out, "ab_without fuse,fused-attention (arena "));
  CHECK(number_after(r.out, "ab_ratio") > 0);
  CHECK(contains(r.out, "attention_back"));  // the profile of the default plan: the fused pair
}

TEST_CASE("cli: bench --without times the step with kinds of work left out, then profiles the whole plan") {
  TempDir d;
  const std::string base = "--batch 2 --seq 3 --steps 1 --warmup 1 --profile-steps 1 --threads 1 --ab-steps 10";
  const Result r = bench_tiny(d, base + " --without groups,chain-products,chain-groups,optimizer");
  INFO("stdout: " << r.out);
  CHECK(r.status == 0);
  CHECK(contains(r.out, "ab_without left out: groups,chain-products,chain-groups,optimizer (timing only: the values "
                        "are wrong) (arena "));
  CHECK(number_after(r.out, "ab_ratio") > 0);
  CHECK(contains(r.out, "per-op profile over 1 profiled"));
  CHECK(contains(r.out, "fused"));  // the groups run again after the comparison
  const Result both = bench_tiny(d, base + " --ab fuse --without ops,products");
  INFO("stdout: " << both.out);
  CHECK(both.status == 0);
  CHECK(contains(both.out, "ab_without fuse; left out: ops,products (timing only"));
}

TEST_CASE("cli: bench --ab or --without with an unknown name, or too few steps, is one error line naming it") {
  TempDir d;
  const std::string base = "bench --config " + quote(tiny_config(d)) + " --batch 1 --steps 1 --warmup 0 --profile-steps 0";
  const Result r = run(base + " --ab epilogue,fusion");
  INFO("stderr: " << r.err);
  CHECK(r.status == 1);
  CHECK(r.err_lines() == 1);
  CHECK(contains(r.err, "--ab: 'fusion' is not a planning switch (the switches: simplify, remat, fuse, slice, masked, "
                        "in-place, epilogue, bf16, fused-attention)"));
  CHECK(!contains(r.out, "ms_per_step"));  // refused before any step
  const Result f = run(base + " --ab bf16");  // products in f32 on the other side: only from bf16
  CHECK(f.status == 1);
  CHECK(contains(f.err, "--ab: 'bf16' (products in f32 on the other side) needs --precision bf16"));
  const Result w = run(base + " --without groups,softmax");
  CHECK(w.status == 1);
  CHECK(w.err_lines() == 1);
  CHECK(contains(w.err, "--without: 'softmax' is not a kind of work (the kinds: products, groups, ops, chain-products, "
                        "chain-groups, optimizer)"));
  CHECK(!contains(w.out, "ms_per_step"));
  const Result s = run(base + " --ab fuse --ab-steps 9");
  CHECK(s.status == 1);
  CHECK(s.err_lines() == 1);
  CHECK(contains(s.err, "--ab-steps: must be an integer in [10, 1048576], got 9"));
}
