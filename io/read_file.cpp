// read_file: stat before open (a FIFO or device is refused without opening it), open with
// O_NONBLOCK in case the path was swapped for a FIFO in between, fstat again on the
// descriptor, then read with the cap enforced on the bytes actually read.
#include "io/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "io/message.h"

namespace gg::io {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string read_file(const std::string& path, std::size_t max_bytes, const std::string& what) {
  const std::string name = cut(path, 200);
  auto fail = [&](const std::string& problem) { return Error(fmt::format("{}: {}: {}", name, what, problem)); };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw fail(fmt::format("is {}, expected a regular file", kind_of(st.st_mode)));
  auto too_big = [&](std::uint64_t size) {
    return fail(fmt::format("is {} bytes, more than the limit of {}", with_commas(size), with_commas(max_bytes)));
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) throw too_big(static_cast<std::uint64_t>(st.st_size));

  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) throw fail(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw fail(fmt::format("is {}, expected a regular file", kind_of(st.st_mode)));
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);

  // The file may grow after fstat: read up to the cap plus one byte and refuse if it is there.
  const std::size_t expect = static_cast<std::size_t>(st.st_size);
  std::string out(expect, '\0');
  std::size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (out.size() > max_bytes) throw too_big(out.size());
      std::size_t grow = out.size() + 65536;
      if (max_bytes < grow) grow = max_bytes + 1;  // max_bytes < grow, so no overflow
      out.resize(grow);
    }
    ssize_t got = ::read(fd, out.data() + have, out.size() - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw fail(fmt::format("cannot read: {}", std::strerror(errno)));
    if (got == 0) break;
    have += static_cast<std::size_t>(got);
  }
  out.resize(have);
  if (have > max_bytes) throw too_big(have);
  return out;
}

}  // namespace gg::io
