// Tests for train/progress: the line format, and that plain (non-TTY) output stays short.
#include "train/progress.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

using gg::train::Progress;

namespace {

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("Progress formats one line and keeps plain logs short") {
  CHECK(Progress::format_line(120, 2000, 2.34123, 15234, 192) ==
        "step  120/2000 [#...................]   6% | loss 2.3412 | 15.2k tok/s | ETA 3m12s");
  CHECK(Progress::format_line(2000, 2000, 0.5, 950, 0) ==
        "step 2000/2000 [####################] 100% | loss 0.5000 | 950 tok/s | ETA 0s");
  CHECK(Progress::format_line(1, 3, std::numeric_limits<double>::quiet_NaN(), 2.5e6, -1) ==
        "step 1/3 [######..............]  33% | loss nan | 2.50M tok/s | ETA --");
  CHECK(Progress::format_duration(3725) == "1h02m");
  CHECK(Progress::format_duration(59.4) == "59s");
  CHECK_THROWS_AS(Progress(0), std::invalid_argument);

  // A file is not a TTY: a line at the first step and at every 10%, then the summary.
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    Progress pr(1000, f);
    for (int step = 1; step <= 1000; ++step) pr.update(step, 1.0, 1000);
    pr.finish();
    pr.finish();
  }
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  CHECK(count(text, "\n") == 12);  // step 1, 10%, ..., 100%, "done"
  CHECK(count(text, "\r") == 0);
  CHECK(text.find("step    1/1000") != std::string::npos);
  CHECK(text.find("step 1000/1000 [####################] 100%") != std::string::npos);
  CHECK(text.find("done: 1000/1000 steps in ") != std::string::npos);
}

TEST_CASE("Progress: messages in plain mode and a silent Progress") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    Progress pr(4, f);
    pr.update(1, 2.0, 10);
    pr.message("step 1: val loss 1.9");
    pr.update(2, 1.5, 10);
  }  // the destructor finishes
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  CHECK(text.find("step 1/4") < text.find("step 1: val loss 1.9\n"));
  CHECK(text.find("step 1: val loss 1.9\n") < text.find("step 2/4"));
  CHECK(text.find("done: 2/4 steps in ") != std::string::npos);

  Progress quiet(10, nullptr);
  quiet.update(3, 1.0, 1.0);
  quiet.message("nothing");
  quiet.finish();
}
