// Reading and writing safetensors files: the header checks, the data reads and the atomic
// writer. POSIX file calls (open/pread/fsync/rename) so that sizes are known before any
// allocation and a written file is durable before it replaces the old one.
// Not here: anything about graphs, models or what the tensors mean.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/json.h"
#include "io/message.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace gg::io {

namespace {

// HF's reader refuses headers above 100 MB; so do we (a header that big is not a header).
constexpr std::uint64_t max_header_bytes = 100'000'000;

// A name as it appears in messages: 'name', cut to 80 bytes, with control characters and
// quotes escaped so that the message stays on one line.
std::string quote_name(std::string_view s) { return in_quotes(s); }

// "[2, 3]"; a shape of more than 8 dimensions shows the first 8 and the count.
std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size() && i < 8; ++i) out += fmt::format("{}{}", i ? ", " : "", shape[i]);
  if (shape.size() > 8) out += fmt::format(", ... ({} dims)", with_commas(shape.size()));
  return out + "]";
}

// Where a message comes from: the path (cut), or "<memory>" for a File never read.
std::string where(const std::string& path) { return path.empty() ? "<memory>" : cut(path, 200); }

// a * b, or false on uint64 overflow.
bool mul_ok(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

// Product of the shape, checking each dim >= 0 and no int64 overflow; `what` prefixes errors.
std::int64_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& what) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error(fmt::format("{}: shape {} has a negative dimension", what, shape_str(shape)));
    if (__builtin_mul_overflow(n, d, &n))
      throw Error(fmt::format("{}: shape {} has too many elements", what, shape_str(shape)));
  }
  return n;
}

std::vector<float> to_f32_in(const Entry& e, const std::string& what) {
  if (e.dtype != DType::f32)
    throw Error(fmt::format("{}: is {}, expected F32", what, dtype_name(e.dtype)));
  std::int64_t n = checked_numel(e.shape, what);
  if (e.data.size() != static_cast<std::uint64_t>(n) * 4)
    throw Error(fmt::format("{}: holds {} bytes but shape {} of F32 needs {}", what, e.data.size(),
                            shape_str(e.shape), n * 4));
  std::vector<float> v(static_cast<std::size_t>(n));
  if (n > 0) std::memcpy(v.data(), e.data.data(), e.data.size());
  return v;
}

std::vector<std::int32_t> to_i32_in(const Entry& e, const std::string& what) {
  if (e.dtype != DType::i32 && e.dtype != DType::i64)
    throw Error(fmt::format("{}: is {}, expected I32 or I64", what, dtype_name(e.dtype)));
  std::int64_t n = checked_numel(e.shape, what);
  std::size_t item = dtype_size(e.dtype);
  if (e.data.size() != static_cast<std::uint64_t>(n) * item)
    throw Error(fmt::format("{}: holds {} bytes but shape {} of {} needs {}", what, e.data.size(),
                            shape_str(e.shape), dtype_name(e.dtype), n * static_cast<std::int64_t>(item)));
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  if (e.dtype == DType::i32) {
    if (n > 0) std::memcpy(v.data(), e.data.data(), e.data.size());
    return v;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t x;
    std::memcpy(&x, e.data.data() + i * 8, 8);
    if (x < std::numeric_limits<std::int32_t>::min() || x > std::numeric_limits<std::int32_t>::max())
      throw Error(fmt::format("{}: I64 value {} at index {} does not fit in I32", what, x, i));
    v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(x);
  }
  return v;
}

// Index of the first byte that is not well-formed UTF-8 (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF), or npos.
std::size_t find_bad_utf8(std::string_view s) {
  std::size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { ++i; continue; }
    std::size_t len;
    unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c == 0xe0) { len = 3; lo = 0xa0; }
    else if (c >= 0xe1 && c <= 0xec) len = 3;
    else if (c == 0xed) { len = 3; hi = 0x9f; }
    else if (c >= 0xee && c <= 0xef) len = 3;
    else if (c == 0xf0) { len = 4; lo = 0x90; }
    else if (c >= 0xf1 && c <= 0xf3) len = 4;
    else if (c == 0xf4) { len = 4; hi = 0x8f; }
    else return i;
    if (i + len > n) return i;
    auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      auto ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xbf) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// Reads exactly `size` bytes at `offset`; false on a short read or an error.
bool pread_all(int fd, void* buf, std::size_t size, std::uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (size > 0) {
    ssize_t got = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    size -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* buf, std::size_t size) {
  const auto* p = static_cast<const char*>(buf);
  while (size > 0) {
    ssize_t put = ::write(fd, p, size);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    size -= static_cast<std::size_t>(put);
  }
  return true;
}

// Closes the descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The dtype named `s`, or false. Other HF dtypes are refused by the caller.
bool parse_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::f32;
  else if (s == "I32") out = DType::i32;
  else if (s == "I64") out = DType::i64;
  else return false;
  return true;
}

// What kind of JSON value this is, for messages.
const char* json_kind(const nlohmann::json& j) {
  if (j.is_number_float()) return "a non-integer number";
  return j.type_name();
}

// A non-negative JSON integer that fits in int64, or an Error built from `what`.
std::uint64_t json_count(const nlohmann::json& j, const std::string& what) {
  if (j.is_number_unsigned()) {
    auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw Error(fmt::format("{} is too large ({})", what, v));
    return v;
  }
  if (j.is_number_integer()) {
    auto v = j.get<std::int64_t>();
    if (v < 0) throw Error(fmt::format("{} is negative ({})", what, v));
    return static_cast<std::uint64_t>(v);
  }
  throw Error(fmt::format("{} is {}, expected a non-negative integer", what, json_kind(j)));
}

// One tensor's header entry, validated but not yet read.
struct Slot {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin, end;
};

// Validates one header entry against the data block size; throws Error with `prefix`.
Slot parse_entry(const std::string& name, const nlohmann::json& j, std::uint64_t data_size,
                 const std::string& prefix) {
  std::string where = fmt::format("{}: tensor {}", prefix, quote_name(name));
  if (!j.is_object())
    throw Error(fmt::format("{}: entry is {}, expected an object with dtype, shape and data_offsets",
                            where, json_kind(j)));
  for (const auto& [key, value] : j.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      throw Error(fmt::format("{}: unexpected key {} (an entry holds exactly dtype, shape and data_offsets)",
                              where, quote_name(key)));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(key)) throw Error(fmt::format("{}: missing '{}'", where, key));
  }
  Slot s;
  s.name = name;

  const auto& jd = j["dtype"];
  if (!jd.is_string()) throw Error(fmt::format("{}: dtype is {}, expected a string", where, json_kind(jd)));
  const auto& ds = jd.get_ref<const std::string&>();
  if (!parse_dtype(ds, s.dtype))
    throw Error(fmt::format("{}: dtype {} is not supported (supported: F32, I32, I64)", where, quote_name(ds)));

  const auto& js = j["shape"];
  if (!js.is_array()) throw Error(fmt::format("{}: shape is {}, expected an array", where, json_kind(js)));
  std::uint64_t bytes = dtype_size(s.dtype);
  bool overflow = false;
  for (std::size_t i = 0; i < js.size(); ++i) {
    std::uint64_t d = json_count(js[i], fmt::format("{}: shape[{}]", where, i));
    s.shape.push_back(static_cast<std::int64_t>(d));
    if (!mul_ok(bytes, d, bytes)) overflow = true;
  }

  const auto& jo = j["data_offsets"];
  if (!jo.is_array() || jo.size() != 2)
    throw Error(fmt::format("{}: data_offsets is {}, expected an array [begin, end]", where,
                            jo.is_array() ? fmt::format("an array of {} values", jo.size())
                                          : std::string(json_kind(jo))));
  s.begin = json_count(jo[0], fmt::format("{}: data_offsets[0]", where));
  s.end = json_count(jo[1], fmt::format("{}: data_offsets[1]", where));
  if (s.begin > s.end)
    throw Error(fmt::format("{}: data_offsets [{}, {}] end before they begin", where, s.begin, s.end));
  if (s.end > data_size)
    throw Error(fmt::format("{}: data_offsets [{}, {}] reach past the data block of {} bytes", where,
                            s.begin, s.end, data_size));
  if (overflow)
    throw Error(fmt::format("{}: shape {} of {} needs more bytes than a file can hold", where,
                            shape_str(s.shape), ds));
  if (s.end - s.begin != bytes)
    throw Error(fmt::format("{}: data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", where,
                            s.begin, s.end, s.end - s.begin, shape_str(s.shape), ds, bytes));
  return s;
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

std::int64_t Entry::numel() const { return checked_numel(shape, "tensor"); }

Entry Entry::from_f32(std::vector<std::int64_t> shape, const std::vector<float>& values) {
  std::int64_t n = checked_numel(shape, "tensor");
  if (static_cast<std::uint64_t>(n) != values.size())
    throw Error(fmt::format("tensor: shape {} needs {} values, got {}", shape_str(shape), n, values.size()));
  Entry e;
  e.dtype = DType::f32;
  e.shape = std::move(shape);
  e.data.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(e.data.data(), values.data(), e.data.size());
  return e;
}

Entry Entry::from_i32(std::vector<std::int64_t> shape, const std::vector<std::int32_t>& values) {
  std::int64_t n = checked_numel(shape, "tensor");
  if (static_cast<std::uint64_t>(n) != values.size())
    throw Error(fmt::format("tensor: shape {} needs {} values, got {}", shape_str(shape), n, values.size()));
  Entry e;
  e.dtype = DType::i32;
  e.shape = std::move(shape);
  e.data.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(e.data.data(), values.data(), e.data.size());
  return e;
}

std::vector<float> Entry::to_f32() const { return to_f32_in(*this, "tensor"); }
std::vector<std::int32_t> Entry::to_i32() const { return to_i32_in(*this, "tensor"); }

const Entry* File::find(std::string_view name) const {
  for (const auto& [n, e] : tensors)
    if (n == name) return &e;
  return nullptr;
}

Entry* File::find(std::string_view name) {
  for (auto& [n, e] : tensors)
    if (n == name) return &e;
  return nullptr;
}

const Entry& File::at(std::string_view name) const {
  const Entry* e = find(name);
  if (!e) throw Error(fmt::format("{}: no tensor {}", where(path), quote_name(name)));
  return *e;
}

void File::add(std::string name, Entry entry) {
  std::string what = fmt::format("{}: tensor {}", where(path), quote_name(name));
  if (name.empty()) throw Error(fmt::format("{}: a tensor needs a non-empty name", where(path)));
  if (name == "__metadata__") throw Error(fmt::format("{}: the name is reserved for metadata", what));
  if (find(name)) throw Error(fmt::format("{}: already present", what));
  std::int64_t n = checked_numel(entry.shape, what);
  std::uint64_t need = static_cast<std::uint64_t>(n) * dtype_size(entry.dtype);
  if (entry.data.size() != need)
    throw Error(fmt::format("{}: holds {} bytes but shape {} of {} needs {}", what, entry.data.size(),
                            shape_str(entry.shape), dtype_name(entry.dtype), need));
  tensors.emplace_back(std::move(name), std::move(entry));
}

void File::add_f32(std::string name, std::vector<std::int64_t> shape, const std::vector<float>& values) {
  std::int64_t n = checked_numel(shape, fmt::format("{}: tensor {}", where(path), quote_name(name)));
  if (static_cast<std::uint64_t>(n) != values.size())
    throw Error(fmt::format("{}: tensor {}: shape {} needs {} values, got {}", where(path), quote_name(name),
                            shape_str(shape), n, values.size()));
  add(std::move(name), Entry::from_f32(std::move(shape), values));
}

void File::add_i32(std::string name, std::vector<std::int64_t> shape,
                   const std::vector<std::int32_t>& values) {
  std::int64_t n = checked_numel(shape, fmt::format("{}: tensor {}", where(path), quote_name(name)));
  if (static_cast<std::uint64_t>(n) != values.size())
    throw Error(fmt::format("{}: tensor {}: shape {} needs {} values, got {}", where(path), quote_name(name),
                            shape_str(shape), n, values.size()));
  add(std::move(name), Entry::from_i32(std::move(shape), values));
}

std::vector<float> File::get_f32(std::string_view name) const {
  return to_f32_in(at(name), fmt::format("{}: tensor {}", where(path), quote_name(name)));
}

std::vector<std::int32_t> File::get_i32(std::string_view name) const {
  return to_i32_in(at(name), fmt::format("{}: tensor {}", where(path), quote_name(name)));
}

namespace {

// Reads exactly `size` bytes at `offset` of the source; false when they are not there.
using ReadAt = std::function<bool(void* buf, std::size_t size, std::uint64_t offset)>;

// The reader proper, over any byte source of `file_size` bytes. `path` is File::path;
// messages name where(path).
File read_from(const ReadAt& read_at, std::uint64_t file_size, const std::string& path_in) {
  const std::string path = where(path_in);
  if (file_size < 8)
    throw Error(fmt::format("{}: file is {} bytes, too short for the 8-byte header length", path, file_size));

  unsigned char len_bytes[8];
  if (!read_at(len_bytes, 8, 0)) throw Error(fmt::format("{}: cannot read the header length", path));
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > file_size - 8)
    throw Error(fmt::format("{}: header length {} exceeds the {} bytes that follow it", path, n, file_size - 8));
  if (n > max_header_bytes)
    throw Error(fmt::format("{}: header length {} exceeds the format's limit of {} bytes", path, n,
                            max_header_bytes));
  std::uint64_t data_start = 8 + n;
  std::uint64_t data_size = file_size - data_start;

  std::string header(static_cast<std::size_t>(n), '\0');
  if (n > 0 && !read_at(header.data(), header.size(), 8))
    throw Error(fmt::format("{}: cannot read the {}-byte header", path, n));
  if (std::size_t bad = find_bad_utf8(header); bad != std::string_view::npos)
    throw Error(fmt::format("{}: header is not valid UTF-8 (byte 0x{:02x} at header offset {})", path,
                            static_cast<unsigned char>(header[bad]), bad));

  // Strict JSON: no duplicate keys (nlohmann alone would keep the last), no NUL or BOM
  // (the reference implementation refuses both; JSON whitespace as padding is fine), and
  // no needless nesting (a header is at most 3 deep: object, entry, shape array).
  const nlohmann::json j = parse_json_strict(header, path + ": header", 3);
  if (!j.is_object())
    throw Error(fmt::format("{}: header is {}, expected a JSON object", path, json_kind(j)));

  File file;
  file.path = path_in;
  std::vector<Slot> slots;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object())
        throw Error(fmt::format("{}: __metadata__ is {}, expected an object of strings", path, json_kind(value)));
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          throw Error(fmt::format("{}: __metadata__ {} is {}, expected a string", path, quote_name(k), json_kind(v)));
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (name.empty()) throw Error(fmt::format("{}: a tensor needs a non-empty name", path));
    slots.push_back(parse_entry(name, value, data_size, path));
  }

  // No two non-empty byte ranges may overlap.
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  const Slot* prev = nullptr;
  for (const Slot& s : slots) {
    if (s.begin == s.end) continue;
    if (prev && s.begin < prev->end)
      throw Error(fmt::format("{}: tensors {} [{}, {}] and {} [{}, {}] overlap", path, quote_name(prev->name),
                              prev->begin, prev->end, quote_name(s.name), s.begin, s.end));
    if (!prev || s.end > prev->end) prev = &s;
  }

  for (Slot& s : slots) {
    Entry e;
    e.dtype = s.dtype;
    e.shape = std::move(s.shape);
    e.data.resize(static_cast<std::size_t>(s.end - s.begin));  // bounded by the file size
    if (!e.data.empty() && !read_at(e.data.data(), e.data.size(), data_start + s.begin))
      throw Error(fmt::format("{}: tensor {}: cannot read bytes [{}, {}] of the data block (file changed?)",
                              path, quote_name(s.name), s.begin, s.end));
    file.tensors.emplace_back(std::move(s.name), std::move(e));
  }
  return file;
}

}  // namespace

File read_safetensors(const std::string& path) {
  const std::string name = where(path);
  Fd f;
  // O_NONBLOCK: a FIFO without a writer must not block the open (it is refused below).
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd < 0) throw Error(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw Error(fmt::format("{}: cannot stat: {}", name, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(fmt::format("{}: not a regular file", name));
  int flags = ::fcntl(f.fd, F_GETFL);
  if (flags >= 0) ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK);
  auto read_at = [&](void* buf, std::size_t size, std::uint64_t offset) { return pread_all(f.fd, buf, size, offset); };
  return read_from(read_at, static_cast<std::uint64_t>(st.st_size), path);
}

File parse_safetensors(std::string_view bytes, const std::string& name) {
  auto read_at = [&](void* buf, std::size_t size, std::uint64_t offset) {
    if (offset > bytes.size() || size > bytes.size() - offset) return false;
    if (size > 0) std::memcpy(buf, bytes.data() + offset, size);
    return true;
  };
  return read_from(read_at, bytes.size(), name);
}

void write_safetensors(const std::string& path, const File& file) {
  // Check every entry first, so a bad File never leaves a partial .tmp behind.
  std::set<std::string_view> seen;
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    const auto& [name, e] = file.tensors[i];
    std::string what = fmt::format("{}: tensor {}", path, quote_name(name));
    if (name.empty()) throw Error(fmt::format("{}: a tensor needs a non-empty name", path));
    if (name == "__metadata__") throw Error(fmt::format("{}: the name is reserved for metadata", what));
    if (!seen.insert(name).second) throw Error(fmt::format("{}: appears twice", what));
    std::int64_t n = checked_numel(e.shape, what);
    std::uint64_t need = static_cast<std::uint64_t>(n) * dtype_size(e.dtype);
    if (e.data.size() != need)
      throw Error(fmt::format("{}: holds {} bytes but shape {} of {} needs {}", what, e.data.size(),
                              shape_str(e.shape), dtype_name(e.dtype), need));
    order.push_back(i);
  }
  // 8-byte types first (so every tensor stays aligned to its element size), then by name.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& [na, ea] = file.tensors[a];
    const auto& [nb, eb] = file.tensors[b];
    if (dtype_size(ea.dtype) != dtype_size(eb.dtype)) return dtype_size(ea.dtype) > dtype_size(eb.dtype);
    return na < nb;
  });

  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : file.metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (std::size_t i : order) {
    const auto& [name, e] = file.tensors[i];
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(dtype_name(e.dtype));
    entry["shape"] = e.shape;
    entry["data_offsets"] = {offset, offset + e.data.size()};
    h[name] = std::move(entry);
    offset += e.data.size();
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("{}: a tensor name or metadata string is not valid UTF-8", path));
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(n >> (8 * i));

  std::string tmp = path + ".tmp";
  {
    Fd f;
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd < 0) throw Error(fmt::format("{}: cannot create {}: {}", path, tmp, std::strerror(errno)));
    bool ok = write_all(f.fd, len_bytes, 8) && write_all(f.fd, header.data(), header.size());
    for (std::size_t i = 0; ok && i < order.size(); ++i) {
      const auto& data = file.tensors[order[i]].second.data;
      ok = write_all(f.fd, data.data(), data.size());
    }
    if (ok) ok = ::fsync(f.fd) == 0;
    int err = errno;
    if (ok) {
      int fd = f.fd;
      f.fd = -1;
      ok = ::close(fd) == 0;
      err = errno;
    }
    if (!ok) {
      ::unlink(tmp.c_str());
      throw Error(fmt::format("{}: cannot write {}: {}", path, tmp, std::strerror(err)));
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: cannot rename {} over it: {}", path, tmp, std::strerror(err)));
  }
  // Make the rename itself durable (best effort: some filesystems refuse a directory fsync).
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  int dfd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace gg::io
