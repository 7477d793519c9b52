#include "mcx/checkpoint/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mcx/checkpoint/format.h"

namespace mcx::checkpoint {
namespace fs = std::filesystem;

namespace {
absl::Status from_errno(int e, const std::string& what, const std::string& path) {
  const std::string msg = absl::StrCat("[checkpoint] cannot ", what, " '", path, "': ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

std::optional<int64_t> parse_step(const std::string& name) {
  if (name.empty() || name.size() > 18) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), v);
  if (ec != std::errc() || p != name.data() + name.size() || v < 0 || std::to_string(v) != name) return std::nullopt;
  return v;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
}  // namespace

absl::Status io_error(const std::string& what, const std::string& path) { return from_errno(errno, what, path); }

absl::Status write_new_file(const std::string& path, std::string_view bytes, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("create", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = io_error("write", path);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) {
    absl::Status s = io_error("fsync", path);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return io_error("close", path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    absl::Status s = io_error("stat", path);
    ::close(fd);
    return s;
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  absl::Status s = pread_exact(fd, path, 0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size()));
  ::close(fd);
  if (!s.ok()) return s;
  return out;
}

absl::Status fsync_dir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("open the directory", path);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) return from_errno(e, "fsync the directory", path);
  return absl::OkStatus();
}

absl::Status pread_exact(int fd, const std::string& path, int64_t offset, std::span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("read", path);
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "' is truncated: expected ", offset + out.size(),
                                              " bytes or more, found ", offset + done));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> committed_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::exists(root, ec)) return steps;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<int64_t> step = parse_step(it->path().filename().string());
    if (step && is_file(it->path() / std::string(kCommitFile))) steps.push_back(*step);
  }
  if (ec) return from_errno(ec.value(), "list", root);
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::vector<std::string>> partial_dirs(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool tmp = absl::StrContains(name, ".tmp-");
    const bool uncommitted = parse_step(name).has_value() && !is_file(it->path() / std::string(kCommitFile));
    if (tmp || uncommitted) out.push_back(it->path().string());
  }
  if (ec) return from_errno(ec.value(), "list", root);
  return out;
}

absl::Status remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return from_errno(ec.value(), "remove", path);
  return absl::OkStatus();
}

}  // namespace mcx::checkpoint
