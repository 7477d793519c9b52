#include "mcx/data/file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

namespace mcx::data {
namespace {

absl::Status io_error(const std::string& path, const char* what) {
  const int e = errno;
  const std::string msg = absl::StrCat("[data] cannot ", what, " '", path, "': ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

struct Mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, len);
  }
};

absl::StatusOr<FileBytes> gunzip(const std::string& path, std::span<const std::byte> in) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return absl::InternalError(absl::StrCat("[data] ", path, ": inflateInit2 failed"));
  auto out = std::make_shared<std::vector<std::byte>>();
  out->resize(std::max<size_t>(in.size() * 4, 1 << 16));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());  // files over 4 GiB: fed in pieces below
  size_t fed = z.avail_in;
  int rc = Z_OK;
  while (true) {
    if (z.total_out == out->size()) out->resize(out->size() * 2);
    z.next_out = reinterpret_cast<Bytef*>(out->data() + z.total_out);
    z.avail_out = static_cast<uInt>(std::min<size_t>(out->size() - z.total_out, 1u << 30));
    if (z.avail_in == 0 && fed < in.size()) {
      z.avail_in = static_cast<uInt>(std::min<size_t>(in.size() - fed, 1u << 30));
      fed += z.avail_in;
    }
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      // Concatenated gzip members (as `cat a.gz b.gz`) continue the stream.
      if (z.avail_in == 0 && fed == in.size()) break;
      const uLong total = z.total_out;
      inflateReset(&z);
      z.total_out = total;
      continue;
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0 && fed == in.size()) {
      const uLong consumed = z.total_in;
      inflateEnd(&z);
      return absl::DataLossError(absl::StrCat("[data] ", path, ": truncated gzip stream: expected more compressed data after byte ",
                                              consumed, " of ", in.size(), " (decompressed so far: ", z.total_out, " bytes)"));
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string msg = z.msg != nullptr ? z.msg : absl::StrCat("zlib error ", rc);
      inflateEnd(&z);
      return absl::DataLossError(absl::StrCat("[data] ", path, ": corrupt gzip stream: ", msg));
    }
  }
  out->resize(z.total_out);
  inflateEnd(&z);
  std::span<const std::byte> view(out->data(), out->size());
  return FileBytes{view, std::move(out)};
}

}  // namespace

absl::StatusOr<FileBytes> map_file(const std::string& path) {
  errno = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "open");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    absl::Status s = io_error(path, "stat");
    ::close(fd);
    return s;
  }
  auto m = std::make_shared<Mapping>();
  m->len = static_cast<size_t>(st.st_size);
  if (m->len > 0) {
    void* addr = mmap(nullptr, m->len, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
      absl::Status s = io_error(path, "map");
      ::close(fd);
      return s;
    }
    m->addr = addr;
  }
  ::close(fd);
  std::span<const std::byte> view(static_cast<const std::byte*>(m->addr), m->len);
  return FileBytes{view, std::move(m)};
}

absl::StatusOr<FileBytes> read_maybe_gzip(const std::string& path) {
  MCX_ASSIGN_OR_RETURN(FileBytes f, map_file(path));
  if (f.bytes.size() >= 2 && f.bytes[0] == std::byte{0x1f} && f.bytes[1] == std::byte{0x8b}) return gunzip(path, f.bytes);
  return f;
}

}  // namespace mcx::data
