// Training quality in bf16 (issue 45): the ViT and encoder-decoder jobs on their bundled
// defaults with --precision bf16 reach the accuracy targets their f32 runs are held to
// (ViT test accuracy 97%, encoder-decoder exact match 95%). Whole default runs (about 6 s
// and 13 s on 2 cores): skipped under the sanitizers, whose build runs the same code paths
// in the shorter tests and would take minutes here.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "run_cli.h"
#include "tests/test_util.h"

using namespace gg_cli_test;
using gg::test::contains;

namespace {
// The number after `key` in `text` (-1 when absent).
double after(const std::string& text, const std::string& key) {
  const std::size_t at = text.rfind(key);
  return at == std::string::npos ? -1.0 : std::atof(text.c_str() + at + key.size());
}
bool sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  return true;
#else
  return false;
#endif
}

// The figure after `key` in the output of `command --precision bf16` on its defaults.
double bf16_default_run(const std::string& command, const std::string& key) {
  TempDir d;
  const Result r = run(command + " --precision bf16 --out-dir " + quote(d.file("run")));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "precision: bf16"));
  return after(r.out, key);
}
}  // namespace

TEST_CASE("bf16 accuracy: train-vit --precision bf16 on its defaults reaches 97% test accuracy") {
  if (!sanitized()) CHECK(bf16_default_run("train-vit", "test accuracy ") >= 97.0);
}

TEST_CASE("bf16 accuracy: train-seq2seq --precision bf16 on its defaults reaches 95% exact match") {
  if (!sanitized()) CHECK(bf16_default_run("train-seq2seq", "exact match ") >= 95.0);
}
