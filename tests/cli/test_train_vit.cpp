// `gradgraph train-vit` as a user runs it: --help lists the flags of its three option
// tables, a short run (the CTest size) exits 0, prints the test accuracy and the confusion
// matrix and writes the curves, --resume continues it, and mistakes are one-line refusals.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "run_cli.h"
#include "tests/test_util.h"

using namespace gg_cli_test;
using gg::test::contains;

namespace {

void check_refusal(const std::string& what, const Result& r, const std::vector<std::string>& names) {
  INFO(what << "\nexit " << r.status << "\nstderr: " << r.err << "stdout: " << r.out);
  CHECK(r.status > 0);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind("gradgraph: error: ", 0) == 0);
  for (const std::string& n : names) CHECK_MESSAGE(contains(r.err, n), "the message should name '" << n << "'");
}

}  // namespace

TEST_CASE("cli: train-vit --help lists the model's, the job's and the run's flags") {
  const Result r = run("train-vit --help");
  INFO("stderr: " << r.err << "stdout: " << r.out);
  CHECK(r.status == 0);
  for (const char* flag : {"--patch", "--pos", "--pool", "--d-model", "--n-layer", "--dropout", "--batch-size",
                           "--shift", "--steps", "--lr", "--resume", "--out-dir", "--config"})
    CHECK_MESSAGE(contains(r.out, flag), flag);
  CHECK_FALSE(contains(r.out, "--image-size"));  // the data's, not a flag
  CHECK_FALSE(contains(r.out, "--eval-iters"));  // the whole test set is always evaluated
}

TEST_CASE("cli: train-vit at a small size: test accuracy, confusion matrix, curves, resume") {
  TempDir dir;
  const std::string out = quote(dir.file("vit"));
  const std::string small = " --quiet --d-model 16 --n-layer 1 --n-head 2 --batch-size 32 --eval-interval 10 --warmup 5"
                            " --out-dir " + out;
  const Result r = run("train-vit --steps 30" + small);
  INFO("stderr: " << r.err << "stdout: " << r.out);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "1438 train, 359 test"));
  CHECK(contains(r.out, "test accuracy "));
  CHECK(contains(r.out, "confusion matrix"));
  for (const char* f : {"checkpoint.safetensors", "loss.csv", "loss.svg", "metrics.csv", "metrics.svg"})
    CHECK_MESSAGE(fs::exists(dir.file("vit") + "/" + f), f);
  CHECK(contains(read_all(dir.file("vit") + "/metrics.csv"), "test_accuracy"));

  const Result more = run("train-vit --steps 40 --resume" + small);
  INFO("resumed stderr: " << more.err << "stdout: " << more.out);
  CHECK(more.status == 0);
  CHECK(contains(more.out, "resuming"));
  CHECK(contains(more.out, "at step 30"));
  CHECK(contains(more.out, "test accuracy "));

  // Another model from the same directory is refused (the checkpoint names its options).
  check_refusal("resume with another patch size", run("train-vit --steps 50 --resume --patch 2" + small),
                {"checkpoint"});
}

TEST_CASE("cli: train-vit mistakes") {
  TempDir dir;
  const std::string out = " --out-dir " + quote(dir.file("v"));
  check_refusal("--patch 3", run("train-vit --patch 3" + out), {"patch", "3"});
  check_refusal("--pool max", run("train-vit --pool max" + out), {"--pool", "max"});
  check_refusal("--d-model 30", run("train-vit --d-model 30" + out), {"--d-model", "30"});
  check_refusal("--data missing", run("train-vit --steps 1 --data " + quote(dir.file("none.csv")) + out),
                {"none.csv"});
  std::ofstream(dir.file("bad.csv")) << "0,1,2\n";
  check_refusal("--data malformed", run("train-vit --steps 1 --data " + quote(dir.file("bad.csv")) + out),
                {"bad.csv:1"});
}
