// Tests for io/read_file: regular files are read whole, anything else (missing, a
// directory, a FIFO without writer, /dev/zero, a file over the cap) is one short Error
// naming the file and what it was for, and nothing blocks.
#include "io/read_file.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "../test_util.h"

using gg::io::Error;
using gg::io::read_file;

namespace {

std::string read_error(const std::string& path, std::size_t cap = 1000) {
  try {
    read_file(path, cap, "config");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void write(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

}  // namespace

TEST_CASE("read_file: regular files, up to and at the cap") {
  gg::test::TempDir dir;
  const std::string p = dir.file("a.json");
  write(p, std::string("{\"a\":1}\0x", 9));
  CHECK(read_file(p, 1000, "config") == std::string("{\"a\":1}\0x", 9));
  CHECK(read_file(p, 9, "config").size() == 9);
  CHECK(read_error(p, 8) == p + ": config: is 9 bytes, more than the limit of 8");
  write(p, "");
  CHECK(read_file(p, 0, "config").empty());
  write(p, std::string(70'000, 'z'));  // more than one read
  CHECK(read_file(p, 70'000, "config") == std::string(70'000, 'z'));
  CHECK(read_error(p, 69'999) == p + ": config: is 70,000 bytes, more than the limit of 69,999");
}

TEST_CASE("read_file: what is not a regular file is refused without blocking") {
  gg::test::TempDir dir;
  CHECK(read_error(dir.file("missing.json")) == dir.file("missing.json") + ": config: cannot open: No such file or directory");
  CHECK(read_error(dir.path.string()) == dir.path.string() + ": config: is a directory, expected a regular file");
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(read_error(fifo) == fifo + ": config: is a FIFO (named pipe), expected a regular file");
  CHECK(read_error("/dev/zero") == "/dev/zero: config: is a character device, expected a regular file");
}

TEST_CASE("read_file: a huge path is cut in the message") {
  const std::string msg = read_error("/" + std::string(100'000, 'd'));
  CHECK(msg.size() < 300);
  CHECK(msg.find("... (100,001 bytes): config: cannot open") != std::string::npos);
}
