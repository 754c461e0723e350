// Tests of `gradgraph train-seq2seq` as a user runs it: its help lists the flags of its
// three option tables (not the ones the task sets), mistakes end in one line on stderr,
// and a checkpoint of one task is refused when resuming the other.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "run_cli.h"
#include "tests/test_util.h"

using namespace gg_cli_test;

namespace {

using gg::test::contains;

void check_refused(const std::string& what, const Result& r, const std::vector<std::string>& names) {
  INFO(what << "\nexit " << r.status << "\nstderr: " << r.err << "stdout: " << r.out);
  CHECK(r.status > 0);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind("gradgraph: error: ", 0) == 0);
  for (const std::string& n : names) CHECK_MESSAGE(contains(r.err, n), "the message should name '" << n << "'");
}

const std::string kTiny =
    " --steps 4 --eval-interval 2 --held-out 20 --eval-examples 10 --d-model 8 --n-head 2 --enc-layers 1"
    " --dec-layers 1 --batch-size 4 --quiet --show 1";

}  // namespace

TEST_CASE("cli: train-seq2seq --help shows the job's, the model's and the run's flags") {
  const Result r = run("train-seq2seq --help");
  INFO(r.err << r.out);
  CHECK(r.status == 0);
  for (const char* flag : {"--task", "--held-out", "--d-model", "--enc-layers", "--dec-layers", "--dropout", "--steps",
                           "--resume", "--config"})
    CHECK_MESSAGE(contains(r.out, flag), flag);
  CHECK_FALSE(contains(r.out, "--src-vocab"));  // set by the task
  CHECK_FALSE(contains(r.out, "--max-src-len"));
}

TEST_CASE("cli: train-seq2seq mistakes and a resumed checkpoint of the other task") {
  TempDir dir;
  const std::string out = " --out-dir " + quote(dir.file("run"));
  check_refused("--task bogus", run("train-seq2seq --task bogus" + out), {"--task", "bogus"});
  check_refused("--n-head 3", run("train-seq2seq --n-head 3" + out), {"n_head", "divisible"});
  check_refused("--min-len 5 --max-len 4", run("train-seq2seq --task reverse --min-len 5 --max-len 4" + out),
                {"--max-len"});
  CHECK_FALSE(fs::exists(dir.file("run")));  // refused before anything was written

  const Result ok = run("train-seq2seq" + kTiny + out);
  INFO(ok.err << ok.out);
  REQUIRE(ok.status == 0);
  CHECK(contains(ok.out, "exact match"));
  CHECK(fs::exists(dir.file("run/metrics.csv")));
  CHECK(contains(read_all(dir.file("run/metrics.csv")), "exact_match"));
  check_refused("resume on the other task", run("train-seq2seq --task reverse --resume" + kTiny + out),
                {"checkpoint", "numbers", "reverse"});
}
