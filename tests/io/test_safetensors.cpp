// Tests for io/safetensors: round trips, a byte-exact file crafted from the HF format
// description, and one crafted bad file per validation rule with its exact message.
// Bad files are written into a fresh temporary directory that is removed at exit.
#include "io/safetensors.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using gg::io::DType;
using gg::io::Entry;
using gg::io::Error;
using gg::io::File;
using gg::io::read_safetensors;
using gg::io::write_safetensors;

namespace {

// A temporary directory for this process, removed when the tests end.
struct TempDir {
  fs::path dir;
  TempDir() {
    dir = fs::temp_directory_path() / fmt::format("gg_test_safetensors_{}", ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::string tmp_path(const std::string& name) {
  static TempDir t;
  return (t.dir / name).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file with this header text and `data_bytes` zero bytes of data.
std::string crafted(const std::string& header, std::size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// Writes a crafted file called `name` and returns its path.
std::string bad_file(const std::string& name, const std::string& header, std::size_t data_bytes) {
  std::string p = tmp_path(name);
  write_bytes(p, crafted(header, data_bytes));
  return p;
}

// The message read_safetensors(path) throws, or "no error".
std::string error_of(const std::string& path) {
  try {
    read_safetensors(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Same, for a header crafted on the spot.
std::string header_error(const std::string& header, std::size_t data_bytes = 24) {
  std::string p = bad_file("bad.safetensors", header, data_bytes);
  std::string msg = error_of(p);
  if (msg == "no error") return msg;
  const std::string prefix = p + ": ";
  CHECK(msg.rfind(prefix, 0) == 0);  // every message names the file first
  return msg.rfind(prefix, 0) == 0 ? msg.substr(prefix.size()) : msg;
}

// A valid entry for tensor x: F32 [2, 3] at [0, 24].
const std::string x_ok = R"("x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";

}  // namespace

TEST_CASE("safetensors round trip keeps dtypes, shapes, values and metadata") {
  File f;
  f.metadata["format"] = "pt";
  f.metadata["note"] = "héllo, \"quoted\"";
  f.add_f32("w", {2, 3}, {1.f, -2.f, 3.5f, 0.f, -0.f, 1e-30f});
  f.add_i32("tokens", {4}, {0, -1, 2147483647, -2147483647 - 1});
  f.add_f32("loss", {}, {2.5f});
  f.add_f32("empty", {0, 5}, {});
  f.add_f32("nonfinite", {3}, {INFINITY, -INFINITY, NAN});
  std::string p = tmp_path("round.safetensors");
  write_safetensors(p, f);
  CHECK_FALSE(fs::exists(p + ".tmp"));

  File g = read_safetensors(p);
  CHECK(g.path == p);
  CHECK(g.metadata == f.metadata);
  REQUIRE(g.tensors.size() == 5);
  CHECK(g.at("w").dtype == DType::f32);
  CHECK(g.at("w").shape == std::vector<std::int64_t>{2, 3});
  CHECK(g.get_f32("w") == std::vector<float>{1.f, -2.f, 3.5f, 0.f, -0.f, 1e-30f});
  CHECK(std::signbit(g.get_f32("w")[4]));
  CHECK(g.at("tokens").dtype == DType::i32);
  CHECK(g.get_i32("tokens") == std::vector<std::int32_t>{0, -1, 2147483647, -2147483647 - 1});
  CHECK(g.at("loss").shape.empty());
  CHECK(g.at("loss").numel() == 1);
  CHECK(g.get_f32("loss") == std::vector<float>{2.5f});
  CHECK(g.at("empty").shape == std::vector<std::int64_t>{0, 5});
  CHECK(g.at("empty").numel() == 0);
  CHECK(g.get_f32("empty").empty());
  auto nf = g.get_f32("nonfinite");
  CHECK(std::isinf(nf[0]));
  CHECK(nf[0] > 0);
  CHECK(std::isinf(nf[1]));
  CHECK(nf[1] < 0);
  CHECK(std::isnan(nf[2]));
  CHECK(g.find("absent") == nullptr);

  SUBCASE("the header is padded to 8 bytes and the output is deterministic") {
    std::string bytes = read_bytes(p);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    CHECK(n % 8 == 0);
    CHECK(bytes[8] == '{');
    CHECK(bytes.substr(8, 16) == R"({"__metadata__":)");
    // Rewriting what was read (tensors now in file order) gives the same bytes.
    std::string p2 = tmp_path("round2.safetensors");
    write_safetensors(p2, g);
    CHECK(read_bytes(p2) == bytes);
    // So does the same content added in another order.
    File h;
    h.metadata = f.metadata;
    for (auto it = f.tensors.rbegin(); it != f.tensors.rend(); ++it) h.add(it->first, it->second);
    write_safetensors(p2, h);
    CHECK(read_bytes(p2) == bytes);
  }
  SUBCASE("an empty file round-trips") {
    std::string pe = tmp_path("empty.safetensors");
    write_safetensors(pe, File{});
    CHECK(read_bytes(pe) == le64(8) + "{}      ");
    File e = read_safetensors(pe);
    CHECK(e.tensors.empty());
    CHECK(e.metadata.empty());
  }
  SUBCASE("writing replaces an existing file") {
    File small;
    small.add_f32("only", {1}, {7.f});
    write_safetensors(p, small);
    File r = read_safetensors(p);
    REQUIRE(r.tensors.size() == 1);
    CHECK(r.get_f32("only") == std::vector<float>{7.f});
  }
}

TEST_CASE("safetensors: a file crafted byte by byte from the HF format description") {
  // 8 bytes little-endian N = 144, then 144 bytes of header (142 bytes of compact JSON and
  // 2 spaces of padding), then the data: I32 [2, 2] = 1, 2, 3, -4 and F32 [] = 1.5.
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"F32","shape":[],"data_offsets":[16,20]}})";
  REQUIRE(json.size() == 142);
  const unsigned char prefix[8] = {144, 0, 0, 0, 0, 0, 0, 0};
  const unsigned char data[20] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff,
                                  0x00, 0x00, 0xc0, 0x3f};
  std::string bytes(reinterpret_cast<const char*>(prefix), 8);
  bytes += json + std::string(2, ' ');
  bytes += std::string(reinterpret_cast<const char*>(data), 20);
  std::string p = tmp_path("golden.safetensors");
  write_bytes(p, bytes);

  File f = read_safetensors(p);
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].first == "a");
  CHECK(f.tensors[1].first == "b");
  CHECK(f.at("a").shape == std::vector<std::int64_t>{2, 2});
  CHECK(f.get_i32("a") == std::vector<std::int32_t>{1, 2, 3, -4});
  CHECK(f.get_f32("b") == std::vector<float>{1.5f});

  // Our writer produces exactly these bytes (the HF library's layout: compact JSON,
  // __metadata__ first, dtype/shape/data_offsets, space padding to 8).
  std::string q = tmp_path("golden_rewritten.safetensors");
  write_safetensors(q, f);
  CHECK(read_bytes(q) == bytes);
}

TEST_CASE("safetensors: I64 token tensors are read and converted to I32 with a range check") {
  std::int64_t vals[3] = {5, -1, 64};
  std::string data(reinterpret_cast<const char*>(vals), 24);
  std::string header = R"({"tokens":{"dtype":"I64","shape":[1,3],"data_offsets":[0,24]}})";
  std::string p = tmp_path("tokens64.safetensors");
  write_bytes(p, le64(header.size()) + header + data);
  File f = read_safetensors(p);
  CHECK(f.at("tokens").dtype == DType::i64);
  CHECK(f.get_i32("tokens") == std::vector<std::int32_t>{5, -1, 64});
  CHECK_THROWS_WITH_AS(f.get_f32("tokens"), (p + ": tensor 'tokens': is I64, expected F32").c_str(), Error);

  vals[2] = std::int64_t{1} << 32;
  write_bytes(p, le64(header.size()) + header + std::string(reinterpret_cast<const char*>(vals), 24));
  File g = read_safetensors(p);
  CHECK_THROWS_WITH_AS(g.get_i32("tokens"),
                       (p + ": tensor 'tokens': I64 value 4294967296 at index 2 does not fit in I32").c_str(),
                       Error);
  CHECK_THROWS_WITH_AS(g.at("targets"), (p + ": no tensor 'targets'").c_str(), Error);
}

TEST_CASE("safetensors: the file itself") {
  std::string missing = tmp_path("missing.safetensors");
  CHECK(error_of(missing) == missing + ": cannot open: No such file or directory");
  std::string dir = tmp_path("a_directory");
  fs::create_directories(dir);
  CHECK(error_of(dir) == dir + ": not a regular file");
  std::string p = tmp_path("short.safetensors");
  write_bytes(p, std::string(5, '\0'));
  CHECK(error_of(p) == p + ": file is 5 bytes, too short for the 8-byte header length");
}

TEST_CASE("safetensors: header length") {
  std::string p = tmp_path("len.safetensors");
  SUBCASE("longer than the file") {
    write_bytes(p, le64(100) + "{}        ");
    CHECK(error_of(p) == p + ": header length 100 exceeds the 10 bytes that follow it");
  }
  SUBCASE("2^63 is refused before any allocation") {
    write_bytes(p, le64(std::uint64_t{1} << 63) + "{}");
    CHECK(error_of(p) == p + ": header length 9223372036854775808 exceeds the 2 bytes that follow it");
  }
  SUBCASE("2^64 - 1") {
    write_bytes(p, le64(~std::uint64_t{0}));
    CHECK(error_of(p) == p + ": header length 18446744073709551615 exceeds the 0 bytes that follow it");
  }
  SUBCASE("above the format's 100 MB limit, even when the file is that long") {
    write_bytes(p, le64(100'000'001) + "{}");
    fs::resize_file(p, 8 + 100'000'001);  // sparse: nothing is read before the check
    CHECK(error_of(p) == p + ": header length 100000001 exceeds the format's limit of 100000000 bytes");
    fs::remove(p);
  }
  SUBCASE("zero: an empty header is not JSON") {
    write_bytes(p, le64(0));
    CHECK(error_of(p).rfind(p + ": header is not valid JSON: ", 0) == 0);
  }
}

TEST_CASE("safetensors: header text") {
  CHECK(header_error("{\"x\xff\":1}") == "header is not valid UTF-8 (byte 0xff at header offset 3)");
  // An overlong encoding of '/' and a UTF-16 surrogate are not UTF-8 either.
  CHECK(header_error("{\"\xc0\xaf\":1}") == "header is not valid UTF-8 (byte 0xc0 at header offset 2)");
  CHECK(header_error("{\"\xed\xa0\x80\":1}") == "header is not valid UTF-8 (byte 0xed at header offset 2)");
  CHECK(header_error(R"({"x":)") ==
        "header is not valid JSON: parse error at line 1, column 6: syntax error while parsing value - "
        "unexpected end of input; expected '[', '{', or a literal");
  CHECK(header_error(R"({"x":{}} trailing)").rfind("header is not valid JSON: ", 0) == 0);
  CHECK(header_error("[1, 2]") == "header is array, expected a JSON object");
  CHECK(header_error("\"text\"") == "header is string, expected a JSON object");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[[[[1]]]],"data_offsets":[0,4]}})") ==
        "header nests deeper than 3 levels");
  // Valid UTF-8 in names and metadata is fine, and so is trailing padding.
  std::string p = bad_file("utf8.safetensors",
                           "{\"__metadata__\":{\"k\xc3\xa9\":\"\xe2\x82\xac\"},"
                           "\"\xf0\x9f\x98\x80\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}   ",
                           4);
  File f = read_safetensors(p);
  CHECK(f.find("\xf0\x9f\x98\x80") != nullptr);
  CHECK(f.metadata.at("k\xc3\xa9") == "\xe2\x82\xac");
}

TEST_CASE("safetensors: entry keys") {
  CHECK(header_error(R"({"x":3})") ==
        "tensor 'x': entry is number, expected an object with dtype, shape and data_offsets");
  CHECK(header_error(R"({"x":{"shape":[2,3],"data_offsets":[0,24]}})") == "tensor 'x': missing 'dtype'");
  CHECK(header_error(R"({"x":{"dtype":"F32","data_offsets":[0,24]}})") == "tensor 'x': missing 'shape'");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3]}})") == "tensor 'x': missing 'data_offsets'");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24],"extra":1}})") ==
        "tensor 'x': unexpected key 'extra' (an entry holds exactly dtype, shape and data_offsets)");
  CHECK(header_error(R"({"x":{"dtype":"F32","dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})") ==
        "header has a duplicate key 'dtype' inside an object");
  CHECK(header_error("{" + x_ok + "," + x_ok + "}", 48) == "header has a duplicate key 'x'");
  // A name with a control character stays on one line in the message.
  CHECK(header_error(R"({"a\nb":3})") ==
        "tensor 'a\\x0ab': entry is number, expected an object with dtype, shape and data_offsets");
}

TEST_CASE("safetensors: dtype") {
  CHECK(header_error(R"({"x":{"dtype":4,"shape":[2,3],"data_offsets":[0,24]}})") ==
        "tensor 'x': dtype is number, expected a string");
  CHECK(header_error(R"({"x":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})") ==
        "tensor 'x': dtype 'BF16' is not supported (supported: F32, I32, I64)");
  CHECK(header_error(R"({"x":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})") ==
        "tensor 'x': dtype 'F16' is not supported (supported: F32, I32, I64)");
  CHECK(header_error(R"({"x":{"dtype":"f32","shape":[2,3],"data_offsets":[0,24]}})") ==
        "tensor 'x': dtype 'f32' is not supported (supported: F32, I32, I64)");
}

TEST_CASE("safetensors: shape") {
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":6,"data_offsets":[0,24]}})") ==
        "tensor 'x': shape is number, expected an array");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})") ==
        "tensor 'x': shape[1] is negative (-3)");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3.0],"data_offsets":[0,24]}})") ==
        "tensor 'x': shape[1] is a non-integer number, expected a non-negative integer");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":["2",3],"data_offsets":[0,24]}})") ==
        "tensor 'x': shape[0] is string, expected a non-negative integer");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,24]}})") ==
        "tensor 'x': shape[0] is too large (9223372036854775808)");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,24]}})") ==
        "tensor 'x': shape[0] is a non-integer number, expected a non-negative integer");
  // The product overflows 64 bits (2^32 * 2^32 * 4 bytes).
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})") ==
        "tensor 'x': shape [4294967296, 4294967296] of F32 needs more bytes than a file can hold");
  // A product that wraps around to exactly the stored size is still refused.
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[4611686018427387904,1],"data_offsets":[0,0]}})") ==
        "tensor 'x': shape [4611686018427387904, 1] of F32 needs more bytes than a file can hold");
  // A zero dimension makes an empty tensor even next to a huge one.
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0]}})") ==
        "no error");
}

TEST_CASE("safetensors: data_offsets") {
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":24}})") ==
        "tensor 'x': data_offsets is number, expected an array [begin, end]");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12,24]}})") ==
        "tensor 'x': data_offsets is an array of 3 values, expected an array [begin, end]");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[-1,23]}})") ==
        "tensor 'x': data_offsets[0] is negative (-1)");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,null]}})") ==
        "tensor 'x': data_offsets[1] is null, expected a non-negative integer");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[24,0]}})") ==
        "tensor 'x': data_offsets [24, 0] end before they begin");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}})") ==
        "tensor 'x': data_offsets [8, 32] reach past the data block of 24 bytes");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})") ==
        "tensor 'x': data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24");
  CHECK(header_error(R"({"x":{"dtype":"I64","shape":[2,3],"data_offsets":[0,24]}})") ==
        "tensor 'x': data_offsets [0, 24] hold 24 bytes but shape [2, 3] of I64 needs 48");
  CHECK(header_error(R"({"x":{"dtype":"F32","shape":[],"data_offsets":[0,0]}})") ==
        "tensor 'x': data_offsets [0, 0] hold 0 bytes but shape [] of F32 needs 4");
  // The example from the task brief, with the file name first.
  std::string p = bad_file("bad.safetensors", R"({"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", 24);
  CHECK(error_of(p) == p + ": tensor 'x': data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24");
}

TEST_CASE("safetensors: overlapping tensors are refused, gaps and empty tensors are not") {
  CHECK(header_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})") ==
        "tensors 'a' [0, 16] and 'b' [12, 20] overlap");
  CHECK(header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                     R"("b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})") ==
        "tensors 'b' [0, 16] and 'a' [4, 8] overlap");
  CHECK(header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})") ==
        "tensors 'a' [0, 4] and 'b' [0, 4] overlap");
  // A big tensor covering two others is caught even when they do not touch each other.
  CHECK(header_error(R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                     R"("c":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})") ==
        "tensors 'a' [0, 24] and 'b' [4, 8] overlap");
  CHECK(header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})") == "no error");
  std::string p = bad_file("gap.safetensors",
                           R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[12,16]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                           24);
  File f = read_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].first == "a");  // in the order of their data
  CHECK(f.tensors[1].first == "b");
}

TEST_CASE("safetensors: __metadata__") {
  CHECK(header_error(R"({"__metadata__":["a"],)" + x_ok + "}") ==
        "__metadata__ is array, expected an object of strings");
  CHECK(header_error(R"({"__metadata__":{"step":3},)" + x_ok + "}") ==
        "__metadata__ 'step' is number, expected a string");
  CHECK(header_error(R"({"__metadata__":{"a":"1","a":"2"},)" + x_ok + "}") ==
        "header has a duplicate key 'a' inside an object");
  CHECK(header_error(R"({"__metadata__":{},)" + x_ok + "}") == "no error");
}

TEST_CASE("safetensors: a tensor with an empty name is refused on reading, as on writing") {
  // Found by fuzz_safetensors (CI, 2026-12-02): the reader accepted {"": {...}}, which
  // File::add refuses and no lookup by name can reach.
  CHECK(header_error(R"({"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", 4) ==
        "a tensor needs a non-empty name");
  CHECK(header_error("{" + x_ok + R"(,"":{"dtype":"F32","shape":[],"data_offsets":[24,28]}})", 28) ==
        "a tensor needs a non-empty name");
}

TEST_CASE("safetensors: every truncation of a valid file is an Error, never a crash") {
  File f;
  f.metadata["m"] = "v";
  f.add_f32("a", {2, 2}, {1, 2, 3, 4});
  f.add_i32("b", {3}, {1, 2, 3});
  f.add_f32("s", {}, {9});
  std::string p = tmp_path("whole.safetensors");
  write_safetensors(p, f);
  std::string bytes = read_bytes(p);
  std::string q = tmp_path("truncated.safetensors");
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    CAPTURE(len);
    write_bytes(q, bytes.substr(0, len));
    CHECK_THROWS_AS(read_safetensors(q), Error);
  }
  write_bytes(q, bytes);
  CHECK_NOTHROW(read_safetensors(q));
}

TEST_CASE("safetensors: random byte corruption never crashes") {
  File f;
  f.add_f32("a", {2, 2}, {1, 2, 3, 4});
  f.add_i32("b", {3}, {1, 2, 3});
  std::string p = tmp_path("fuzz_src.safetensors");
  write_safetensors(p, f);
  const std::string bytes = read_bytes(p);
  std::string q = tmp_path("fuzz.safetensors");
  std::mt19937 rng(1234);
  int refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string b = bytes;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng() & 0xff);
    write_bytes(q, b);
    try {
      read_safetensors(q);
    } catch (const Error&) {
      ++refused;
    }
  }
  CHECK(refused > 0);
}

TEST_CASE("safetensors: building and writing refuse inconsistent tensors") {
  File f;
  f.add_f32("a", {2}, {1, 2});
  CHECK_THROWS_WITH_AS(f.add_f32("a", {1}, {3}), "<memory>: tensor 'a': already present", Error);
  CHECK_THROWS_WITH_AS(f.add_f32("b", {2, 2}, {1, 2, 3}),
                       "<memory>: tensor 'b': shape [2, 2] needs 4 values, got 3", Error);
  CHECK_THROWS_WITH_AS(f.add_f32("__metadata__", {}, {1}),
                       "<memory>: tensor '__metadata__': the name is reserved for metadata", Error);
  CHECK_THROWS_WITH_AS(f.add_f32("", {}, {1}), "<memory>: a tensor needs a non-empty name", Error);
  CHECK_THROWS_WITH_AS(f.add_i32("c", {-1}, {}), "<memory>: tensor 'c': shape [-1] has a negative dimension",
                       Error);
  CHECK_THROWS_WITH_AS(Entry::from_f32({3}, {1, 2}), "tensor: shape [3] needs 3 values, got 2", Error);
  CHECK_THROWS_WITH_AS(Entry::from_i32({2}, {1, 2}).to_f32(), "tensor: is I32, expected F32", Error);

  std::string p = tmp_path("inconsistent.safetensors");
  File g = f;
  g.tensors[0].second.data.pop_back();
  CHECK_THROWS_WITH_AS(write_safetensors(p, g),
                       (p + ": tensor 'a': holds 7 bytes but shape [2] of F32 needs 8").c_str(), Error);
  g = f;
  g.tensors.push_back(g.tensors[0]);
  CHECK_THROWS_WITH_AS(write_safetensors(p, g), (p + ": tensor 'a': appears twice").c_str(), Error);
  CHECK_FALSE(fs::exists(p));
  CHECK_FALSE(fs::exists(p + ".tmp"));

  std::string nowhere = tmp_path("no_such_dir/out.safetensors");
  CHECK_THROWS_WITH_AS(write_safetensors(nowhere, f),
                       (nowhere + ": cannot create " + nowhere + ".tmp: No such file or directory").c_str(),
                       Error);
}

// ---- Reliability (issue 8): what a hostile file must not get through or break. ----

namespace {

// The message parse_safetensors(bytes) throws, or "no error".
std::string bytes_error(const std::string& bytes) {
  try {
    gg::io::parse_safetensors(bytes, "mem.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("safetensors: a NUL or a byte order mark around the header is refused, JSON whitespace is not") {
  const std::string h = "{" + x_ok + "}";
  // nlohmann stops at a NUL and skips a BOM; the reference implementation refuses both.
  CHECK(header_error(h + std::string(1, '\0') + "more bytes") ==
        fmt::format("header is not valid JSON: a NUL byte at offset {}", h.size()));
  CHECK(header_error(h + std::string(7, '\0')) == fmt::format("header is not valid JSON: a NUL byte at offset {}", h.size()));
  CHECK(header_error("\xef\xbb\xbf" + h) == "header starts with a UTF-8 byte order mark, which JSON does not allow");
  // serde_json (the reference) allows JSON whitespace before and after the value.
  CHECK(header_error(" \n" + h + " \t\r\n  ") == "no error");
}

TEST_CASE("safetensors: parse_safetensors reads the same bytes as read_safetensors") {
  File f;
  f.add_f32("w", {2, 2}, {1, 2, 3, 4});
  f.add_i32("t", {3}, {7, 8, 9});
  f.metadata["k"] = "v";
  const std::string p = tmp_path("mem.safetensors");
  write_safetensors(p, f);
  const File a = read_safetensors(p);
  const File b = gg::io::parse_safetensors(read_bytes(p), "copy");
  CHECK(b.path == "copy");
  CHECK(b.metadata == a.metadata);
  REQUIRE(b.tensors.size() == 2);
  CHECK(b.get_f32("w") == a.get_f32("w"));
  CHECK(b.get_i32("t") == a.get_i32("t"));
  CHECK(bytes_error("short") == "mem.safetensors: file is 5 bytes, too short for the 8-byte header length");
  CHECK(bytes_error(le64(100) + "{}") == "mem.safetensors: header length 100 exceeds the 2 bytes that follow it");
}

TEST_CASE("safetensors: a header of 100,000 tiny entries is parsed, and a duplicate among them refused") {
  // Each entry is a zero-size tensor. Before the fix this took minutes (quadratic callback).
  std::string h = "{";
  for (int i = 0; i < 100'000; ++i)
    h += fmt::format("{}\"t{}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", i ? "," : "", i);
  const File f = gg::io::parse_safetensors(crafted(h + "}", 0), "many");
  CHECK(f.tensors.size() == 100'000);
  CHECK(f.find("t99999") != nullptr);
  const std::string dup = h + R"(,"t5":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  CHECK(bytes_error(crafted(dup, 0)) == "mem.safetensors: header has a duplicate key 't5'");
}

TEST_CASE("safetensors: nesting 100,000 deep is refused without a stack overflow") {
  CHECK(bytes_error(crafted(std::string(100'000, '['), 0)) == "mem.safetensors: header nests deeper than 3 levels");
  const std::string deep = R"({"__metadata__":{"a":)" + std::string(100'000, '[') + std::string(100'000, ']') + "}}";
  CHECK(bytes_error(crafted(deep, 0)) == "mem.safetensors: header nests deeper than 3 levels");
}

TEST_CASE("safetensors: messages stay short when the file holds huge values") {
  const std::string long_name(200'000, 'n');
  SUBCASE("a 200 KB tensor name") {
    const std::string msg = bytes_error(crafted("{\"" + long_name + "\":3}", 0));
    INFO(msg.substr(0, 400));
    CHECK(msg.size() < 300);
    CHECK(msg.find("... (200,000 bytes)") != std::string::npos);
    CHECK(msg.find("entry is number") != std::string::npos);
  }
  SUBCASE("a 200 KB dtype") {
    const std::string msg =
        bytes_error(crafted(R"({"x":{"dtype":")" + long_name + R"(","shape":[1],"data_offsets":[0,4]}})", 4));
    CHECK(msg.size() < 300);
    CHECK(msg.find("is not supported") != std::string::npos);
  }
  SUBCASE("a shape of 100,000 dimensions") {
    std::string shape = "[";
    for (int i = 0; i < 100'000; ++i) shape += i ? ",1" : "1";
    const std::string msg =
        bytes_error(crafted(R"({"x":{"dtype":"F32","shape":)" + shape + R"(],"data_offsets":[0,8]}})", 8));
    INFO(msg);
    CHECK(msg.size() < 300);
    CHECK(msg.find("... (100,000 dims)]") != std::string::npos);
  }
  SUBCASE("a syntax error inside a 200 KB string") {
    const std::string msg = bytes_error(crafted("{\"x\":\"" + long_name + "\x01\"}", 0));
    INFO(msg.substr(0, 400));
    CHECK(msg.size() < 300);
    CHECK(msg.find("is not valid JSON") != std::string::npos);
  }
  SUBCASE("a 200 KB path") {
    const std::string msg = error_of(std::string(200'000, 'p'));
    CHECK(msg.size() < 300);
  }
}

TEST_CASE("safetensors: a FIFO without a writer is refused at once") {
  const std::string p = tmp_path("fifo.safetensors");
  fs::remove(p);
  REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
  CHECK(error_of(p) == p + ": not a regular file");
  fs::remove(p);
}
