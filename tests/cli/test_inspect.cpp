// Tests for `gradgraph inspect` (cli/gradgraph.cpp, run_inspect): forward and gradient
// sections, node counts and arenas before and after the simplification pass, --grad NAME
// (only that parameter's gradient; an unknown name is a one-line error with suggestions),
// lines "user > composite", --dot with collapsed scopes and --expand, --svg with and
// without Graphviz (skipped, saying so, when `dot` is not installed).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"
#include "tests/test_util.h"

using namespace gg_cli_test;
using gg::test::contains;

namespace {

const std::string kConfig = quote(golden("ref_basic.config.json"));

bool have_dot() {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (::access(((dir.empty() ? std::string(".") : dir) + "/dot").c_str(), X_OK) == 0) return true;
  return false;
}

// The two numbers after `label` on the line that has it, e.g. "nodes as built:  208 forward,  310 gradient".
std::pair<long, long> counts(const std::string& out, const std::string& label) {
  std::smatch m;
  const std::regex re(label + R"(\s+(\d+) forward,\s+(\d+) gradient; arena (\d+) bytes)");
  if (!std::regex_search(out, m, re)) return {-1, -1};
  return {std::stol(m[1]), std::stol(m[2])};
}

}  // namespace

TEST_CASE("inspect: forward and gradient sections, counts before and after the pass") {
  const Result r = run("inspect --config " + kConfig + " --grad");
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto built = counts(r.out, "nodes as built:"), simple = counts(r.out, "nodes simplified:");
  CHECK(built.first > 0);
  CHECK(simple.first > 0);
  CHECK(simple.first <= built.first);
  CHECK(simple.second < built.second);  // the layer norms' repeated products are merged
  CHECK(contains(r.out, "merged"));
  const auto fwd = r.out.find("\n## forward (simplified)\n"), grad = r.out.find("\n## gradient (simplified)\n");
  REQUIRE(fwd != std::string::npos);
  REQUIRE(grad != std::string::npos);
  CHECK(fwd < grad);
  const std::string fwd_part = r.out.substr(fwd, grad - fwd), grad_part = r.out.substr(grad);
  CHECK_FALSE(contains(fwd_part, "# grad("));
  CHECK(contains(grad_part, "# grad(blocks.0.norm1.weight)"));
  CHECK(contains(grad_part, "> nn.cpp:"));  // the composite's own line after the user's
  CHECK_FALSE(std::regex_search(r.out, std::regex(R"(grad\(%\d+)")));  // no gradient named after a bare id

  const Result raw = run("inspect --config " + kConfig + " --grad --no-simplify");
  REQUIRE(raw.status == 0);
  CHECK(contains(raw.out, "## gradient (as built)"));
  long listed = 0;
  for (std::size_t at = raw.out.find("\n%"); at != std::string::npos; at = raw.out.find("\n%", at + 1)) ++listed;
  CHECK(listed == built.first + built.second);
}

TEST_CASE("inspect --grad NAME: only that parameter's gradient; a wrong name suggests the closest") {
  const Result all = run("inspect --config " + kConfig + " --grad");
  const Result one = run("inspect --config " + kConfig + " --grad blocks.1.norm2.weight");
  INFO(one.err);
  REQUIRE(one.status == 0);
  CHECK(contains(one.out, "## gradient (simplified) of blocks.1.norm2.weight"));
  CHECK_FALSE(contains(one.out, "## forward"));
  CHECK(contains(one.out, "# reads "));
  CHECK(contains(one.out, "grad(blocks.1.norm2.weight)"));
  CHECK_FALSE(contains(one.out, "grad(blocks.0."));  // block 0 comes before block 1's norm2
  CHECK_FALSE(contains(one.out, "grad(tok_emb"));
  CHECK(one.out.size() < all.out.size() / 2);

  const Result bad = run("inspect --config " + kConfig + " --grad blocks.1.norm.weight");
  CHECK(bad.status > 0);
  CHECK(bad.err_lines() == 1);
  CHECK(contains(bad.err, "no parameter 'blocks.1.norm.weight'"));
  CHECK(contains(bad.err, "did you mean 'blocks.1.norm1.weight' or 'blocks.1.norm2.weight'?"));
}

TEST_CASE("inspect --dot: one box per scope for the whole model, a scope expanded on request") {
  TempDir dir;
  const std::string dot = dir.file("g.dot");
  Result r = run("inspect --config " + kConfig + " --grad --dot " + quote(dot));
  REQUIRE(r.status == 0);
  std::string text = read_all(dot);
  CHECK(contains(text, "label=\"blocks.0\\n("));
  CHECK(contains(text, "label=\"grad:blocks.1\\n("));
  CHECK_FALSE(contains(text, "subgraph cluster_"));

  r = run("inspect --config " + kConfig + " --grad --dot " + quote(dot) + " --expand blocks.1.attn");
  REQUIRE(r.status == 0);
  text = read_all(dot);
  CHECK(contains(text, "label=\"blocks.1.attn\";"));
  CHECK(contains(text, "label=\"grad:blocks.1.attn\";"));
  CHECK(contains(text, "label=\"blocks.0\\n("));

  r = run("inspect --config " + kConfig + " --dot " + quote(dot) + " --expand blocks.9");
  CHECK(r.status > 0);
  CHECK(r.err_lines() == 1);
  CHECK(contains(r.err, "no scope 'blocks.9'"));
}

TEST_CASE("inspect --svg: renders with Graphviz, or one clear line when it is missing") {
  TempDir dir;
  const std::string svg = dir.file("g.svg");
  // Without dot on the PATH: one line, non-zero exit, whatever this machine has.
  const std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", "/nonexistent", 1);  // the shell and the binary are started by absolute paths
  const Result missing = run("inspect --config " + kConfig + " --svg " + quote(svg));
  ::setenv("PATH", saved.c_str(), 1);
  CHECK(missing.status > 0);
  CHECK(missing.err_lines() == 1);
  CHECK(contains(missing.err, "needs Graphviz's `dot`, which is not installed"));
  if (!have_dot()) {
    MESSAGE("skipped: Graphviz's dot is not installed, so --svg is not rendered here");
    return;
  }
  const Result r = run("inspect --config " + kConfig + " --grad --svg " + quote(svg));
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "# wrote "));
  CHECK(contains(read_all(svg), "<svg"));
}

TEST_CASE("inspect --precision bf16: every product of the forward and the gradient is marked, nothing else") {
  const Result r = run("inspect --config " + kConfig + " --grad --precision bf16");
  INFO(r.err);
  REQUIRE(r.status == 0);
  long products = 0, marked = 0, other_marked = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const bool product = std::regex_search(line, std::regex(R"(^%\d+ = matmul)"));
    const bool bf16 = contains(line, "bf16]");
    products += product;
    marked += product && bf16;
    other_marked += !product && bf16;
  }
  CHECK(products > 10);
  CHECK(marked == products);
  CHECK(other_marked == 0);
  const Result f32 = run("inspect --config " + kConfig + " --grad");
  CHECK_FALSE(contains(f32.out, "bf16]"));
}
