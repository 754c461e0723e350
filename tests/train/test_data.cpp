// Tests for train/data: CharData::from_text (what load() calls after reading the file)
// and load()'s refusal of what is not a regular file of bounded size.
#include "train/data.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <string>

#include "../test_util.h"
#include "train/error.h"

using gg::test::contains;
using gg::train::CharData;
using gg::train::InputError;

namespace {

std::string load_error(auto&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("CharData::from_text: splits, vocabulary and refusals") {
  const std::string text = "abcabcabcabcabcabcabcabcabcabcx";  // 31 bytes: train 27, val 4
  const CharData d = CharData::from_text(text, "t.txt", 3);
  CHECK(d.vocab == "abcx");
  CHECK(d.train.size() == 27);
  CHECK(d.val.size() == 4);
  CHECK(d.decode(d.train) + d.decode(d.val) == text);
  CHECK(load_error([&] { CharData::from_text(text, "t.txt", 4); }) ==
        "t.txt: 31 characters is too short: each of the train/validation splits needs at least block_size + 1 = 5 "
        "characters");
  CHECK(load_error([&] { CharData::from_text("", "t.txt", 1); }) == "t.txt: the training text is empty");
  CHECK(load_error([&] { CharData::from_text(text, "t.txt", -1); }) == "t.txt: block_size -1 is negative");
  CHECK(load_error([&] { CharData::from_text(text, "t.txt", 1, 1.0); }) ==
        "t.txt: train_fraction 1 is not between 0 and 1");
}

TEST_CASE("CharData::load: /dev/zero and a FIFO without writer are refused at once") {
  CHECK(load_error([] { CharData::load("/dev/zero", 8); }) ==
        "/dev/zero: training text: is a character device, expected a regular file");
  gg::test::TempDir dir;
  const std::string fifo = dir.file("fifo.txt");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(load_error([&] { CharData::load(fifo, 8); }) ==
        fifo + ": training text: is a FIFO (named pipe), expected a regular file");
  CHECK(contains(load_error([&] { CharData::load(dir.file("missing.txt"), 8); }), "cannot open"));
}
