// Tests for the configuration from the environment (ops/runtime/config.h): the table of GG_*
// variables is complete (every one the sources read or name is in it), the environment is
// read in one place only, and values are read as the table says.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "ops/runtime/config.h"

using namespace gg;
namespace fs = std::filesystem;

namespace {
std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
// The library's sources (not the CLI, tests or benches, whose environment reads are their own).
std::vector<fs::path> library_sources() {
  std::vector<fs::path> files;
  for (const char* layer : {"ops", "autodiff", "dsl", "train", "io", "models"}) {
    const fs::path dir = fs::path(GG_SOURCE_DIR) / layer;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (ext == ".cpp" || ext == ".h" || ext == ".inc") files.push_back(e.path());
    }
  }
  return files;
}
std::set<std::string> table_names() {
  std::set<std::string> names;
  for (const EnvSwitch& e : env_switches()) names.insert(e.name);
  return names;
}
}  // namespace

TEST_CASE("config: the table has one row per variable, each with a default and a description") {
  const std::set<std::string> names = table_names();
  CHECK(names.size() == env_switches().size());
  for (const EnvSwitch& e : env_switches()) {
    CHECK(e.name.rfind("GG_", 0) == 0);
    CHECK(!e.default_value.empty());
    CHECK(!e.what.empty());
  }
  const std::string md = env_switches_markdown();
  CHECK(std::count(md.begin(), md.end(), '\n') == std::ptrdiff_t(env_switches().size() + 2));
  for (const EnvSwitch& e : env_switches()) CHECK(md.find("`" + e.name + "`") != std::string::npos);
}

TEST_CASE("config: every GG_* variable the library names is in the table, and only ops/runtime/config.cpp reads the environment") {
  const std::set<std::string> names = table_names();
  REQUIRE(fs::exists(fs::path(GG_SOURCE_DIR) / "ops" / "runtime" / "config.cpp"));
  // A variable appears as a string ("GG_FUSE") or as a setting in a comment (GG_FUSE=0).
  const std::regex named("\"(GG_[A-Z0-9_]+)\"|\\b(GG_[A-Z0-9_]+)=");
  std::size_t files = 0;
  for (const fs::path& p : library_sources()) {
    ++files;
    const std::string text = read_text(p);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), named); it != std::sregex_iterator(); ++it) {
      const std::string name = (*it)[1].matched ? (*it)[1].str() : (*it)[2].str();
      INFO(p.string() << " names " << name);
      CHECK(names.count(name) == 1);
    }
    const std::string rel = fs::relative(p, GG_SOURCE_DIR).generic_string();
    if (rel != "ops/runtime/config.cpp" && rel != "train/data_path.cpp") {  // GRADGRAPH_DATA_DIR: where data lives
      INFO(rel << " reads the environment");
      CHECK(text.find("getenv(") == std::string::npos);
    }
  }
  CHECK(files > 20);
}

TEST_CASE("config: values are read as the table says") {
  auto with = [](const char* name, const char* value) {
    ::setenv(name, value, 1);
    const EnvConfig c = read_env_config();
    ::unsetenv(name);
    return c;
  };
  CHECK(!with("GG_FUSE", "0").fuse);
  CHECK(with("GG_FUSE", "1").fuse);
  CHECK(!with("GG_COMPILED", "0").compiled);
  CHECK(!with("GG_STEAL", "0").steal);
  CHECK(!with("GG_SPLIT_DEPTH", "0").split_depth);
  CHECK(!with("GG_SHARES", "0").shares);
  CHECK(with("GG_DETECT_ANOMALY", "1").detect_anomaly);
  CHECK(!with("GG_DETECT_ANOMALY", "").detect_anomaly);
  CHECK(with("GG_NUM_THREADS", "3").num_threads == 3);
  CHECK(with("GG_NUM_THREADS", "none").num_threads == 0);
  CHECK(with("GG_SPIN_US", "-5").spin_us == 0);
  CHECK(with("GG_SPIN_US", "50").spin_us == 50);
  // Each planning pass's variable turns its own field off and no other.
  const std::pair<const char*, bool EnvConfig::*> passes[] = {
      {"GG_SIMPLIFY", &EnvConfig::simplify}, {"GG_REMAT", &EnvConfig::remat},     {"GG_FUSE", &EnvConfig::fuse},
      {"GG_COMPILED", &EnvConfig::compiled}, {"GG_SLICE", &EnvConfig::slice},     {"GG_MASKED", &EnvConfig::masked},
      {"GG_IN_PLACE", &EnvConfig::in_place}, {"GG_EPILOGUE", &EnvConfig::epilogue}};
  for (const auto& [name, member] : passes) {
    const EnvConfig c = with(name, "0");
    INFO(name);
    for (const auto& [other, m] : passes) CHECK(c.*m == (m == member ? false : read_env_config().*m));
  }
}

TEST_CASE("config: docs/development.md shows the table as the code has it") {
  const std::string doc = read_text(fs::path(GG_SOURCE_DIR) / "docs" / "development.md");
  const std::string begin = "<!-- env-switches: generated from env_switches_markdown() -->\n", end = "<!-- env-switches end -->";
  const std::size_t b = doc.find(begin), e = doc.find(end);
  REQUIRE_MESSAGE(b != std::string::npos, "docs/development.md lacks the marker " << begin);
  REQUIRE(e != std::string::npos);
  INFO("the table docs/development.md should show:\n" << env_switches_markdown());
  CHECK(doc.substr(b + begin.size(), e - b - begin.size()) == env_switches_markdown());
}
