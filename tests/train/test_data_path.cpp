// Tests for train/data_path: find_data_file() finds the bundled data from the source root,
// from anywhere else (next to the running executable: build/data links to data/), through
// GRADGRAPH_DATA_DIR first, and otherwise throws InputError listing the places it looked.
#include "train/data_path.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/test_util.h"
#include "train/error.h"

namespace {

using namespace gg;
namespace fs = std::filesystem;

// Runs the test body with the working directory and GRADGRAPH_DATA_DIR set, restoring both.
struct Scope {
  fs::path cwd = fs::current_path();
  std::string env;
  bool had_env = false;
  Scope(const fs::path& dir, const char* data_dir) {
    if (const char* e = std::getenv("GRADGRAPH_DATA_DIR")) had_env = true, env = e;
    if (data_dir) ::setenv("GRADGRAPH_DATA_DIR", data_dir, 1);
    else ::unsetenv("GRADGRAPH_DATA_DIR");
    fs::current_path(dir);
  }
  ~Scope() {
    fs::current_path(cwd);
    if (had_env) ::setenv("GRADGRAPH_DATA_DIR", env.c_str(), 1);
    else ::unsetenv("GRADGRAPH_DATA_DIR");
  }
};

TEST_CASE("find_data_file finds the bundled data from the source root") {
  Scope s(GG_SOURCE_DIR, nullptr);
  CHECK(train::find_data_file("digits.csv") == "data/digits.csv");
}

TEST_CASE("find_data_file finds the bundled data from another directory, next to the executable") {
  test::TempDir elsewhere;
  Scope s(elsewhere.path, nullptr);
  const std::string p = train::find_data_file("tinyshakespeare.txt");
  INFO(p);
  CHECK(fs::path(p).is_absolute());
  CHECK(fs::equivalent(p, fs::path(GG_SOURCE_DIR) / "data" / "tinyshakespeare.txt"));
}

TEST_CASE("GRADGRAPH_DATA_DIR comes first") {
  test::TempDir dir;
  std::ofstream(dir.file("digits.csv")) << "0\n";
  Scope s(GG_SOURCE_DIR, dir.path.c_str());
  CHECK(fs::equivalent(train::find_data_file("digits.csv"), dir.file("digits.csv")));
}

TEST_CASE("a missing data file is an InputError naming it and every place looked at") {
  test::TempDir dir;
  Scope s(dir.path, dir.path.c_str());
  try {
    train::find_data_file("no_such_corpus.txt");
    FAIL("no error");
  } catch (const train::InputError& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(test::contains(m, "'no_such_corpus.txt' not found"));
    CHECK(test::contains(m, (dir.path / "no_such_corpus.txt").string()));
    CHECK(test::contains(m, "data/no_such_corpus.txt"));
    CHECK(test::contains(m, "share/gradgraph/data/no_such_corpus.txt"));
    CHECK(m.find('\n') == std::string::npos);
  }
}

}  // namespace
