#include "mcx/distributed/data_plane/tcp/shared_memory_link.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/distributed/data_plane/tcp/little_endian.h"
#include "mcx/distributed/data_plane/tcp/stream.h"
#include "mcx/distributed/security/job_secret.h"

namespace mcx::distributed {
namespace {

constexpr uint32_t kMaxHostBytes = 1024;
constexpr uint32_t kMaxNameBytes = 255;

size_t ring_span(size_t capacity) { return (shared_memory_ring_bytes(capacity) + 63) / 64 * 64; }
size_t segment_bytes(size_t capacity) { return 2 * ring_span(capacity); }

absl::Status write_string(DataPlaneStream& s, const std::string& text, absl::Time deadline, const std::string& what) {
  std::string frame;
  append_u32(frame, static_cast<uint32_t>(text.size()));
  frame += text;
  return s.write_all(frame.data(), frame.size(), deadline, what);
}

absl::StatusOr<std::string> read_string(DataPlaneStream& s, uint32_t max, absl::Time deadline, const std::string& what) {
  char n[4];
  MCX_RETURN_IF_ERROR(s.read_exact(n, 4, deadline, what));
  const uint32_t len = load_u32(n);
  if (len > max) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] ", what, ": a field of ", len,
                                                   " bytes; expected at most ", max));
  }
  std::string text(len, '\0');
  if (len > 0) MCX_RETURN_IF_ERROR(s.read_exact(text.data(), len, deadline, what));
  return text;
}

// Why a connection stays on TCP: a warning the first time in this process (a /dev/shm too small fails every
// connection alike), at debug level after.
void say_stays_on_tcp(const absl::Status& why) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    log_warn("{}; this connection stays on TCP (and others that fail alike, said at debug level)",
             std::string(why.message()));
  } else {
    log_debug("{}; this connection stays on TCP", std::string(why.message()));
  }
}

absl::Status write_byte(DataPlaneStream& s, char b, absl::Time deadline, const std::string& what) {
  return s.write_all(&b, 1, deadline, what);
}
absl::StatusOr<char> read_byte(DataPlaneStream& s, absl::Time deadline, const std::string& what) {
  char b = 0;
  MCX_RETURN_IF_ERROR(s.read_exact(&b, 1, deadline, what));
  return b;
}

}  // namespace

SharedMemorySegment::SharedMemorySegment(std::string name, void* memory, size_t bytes, size_t ring_capacity,
                                         bool initialize)
    : name_(std::move(name)), memory_(memory), bytes_(bytes) {
  char* base = static_cast<char*>(memory);
  to_acceptor_ = std::make_unique<SharedMemoryRing>(base, ring_capacity, initialize);
  to_connector_ = std::make_unique<SharedMemoryRing>(base + ring_span(ring_capacity), ring_capacity, initialize);
}

SharedMemorySegment::~SharedMemorySegment() {
  unlink();
  munmap(memory_, bytes_);
}

void SharedMemorySegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());
}

absl::StatusOr<std::unique_ptr<SharedMemorySegment>> SharedMemorySegment::create(size_t ring_capacity) {
  if (ring_capacity == 0 || (ring_capacity & (ring_capacity - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] a shared-memory ring of ", ring_capacity,
                                                   " bytes; expected a power of two"));
  }
  const std::string name = absl::StrCat(kSharedMemoryNamePrefix, new_job_secret().substr(0, 32));
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("[data plane] cannot create shared memory ", name, ": ", strerror(errno)));
  }
  const size_t bytes = segment_bytes(ring_capacity);
  // Reserved now: a /dev/shm too small for it fails here, not with SIGBUS at the first write past its end.
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* memory = rc == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_errno = errno;
  close(fd);
  if (rc != 0 || memory == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::UnavailableError(absl::StrCat("[data plane] cannot reserve ", bytes, " bytes of shared memory (",
                                               rc != 0 ? strerror(rc) : strerror(map_errno),
                                               "; /dev/shm full or too small?)"));
  }
  return std::unique_ptr<SharedMemorySegment>(new SharedMemorySegment(name, memory, bytes, ring_capacity, true));
}

absl::StatusOr<std::unique_ptr<SharedMemorySegment>> SharedMemorySegment::open(const std::string& name,
                                                                              size_t ring_capacity) {
  if (ring_capacity == 0 || (ring_capacity & (ring_capacity - 1)) != 0 || ring_capacity > (size_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] a shared-memory ring of ", ring_capacity,
                                                   " bytes; expected a power of two up to 1 GiB"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("[data plane] cannot open shared memory ", name, ": ", strerror(errno)));
  }
  const size_t bytes = segment_bytes(ring_capacity);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    shm_unlink(name.c_str());
    return absl::InvalidArgumentError(absl::StrCat("[data plane] shared memory ", name, " has ", st.st_size,
                                                   " bytes; expected ", bytes));
  }
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (memory == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::UnavailableError(absl::StrCat("[data plane] cannot map shared memory ", name, ": ", strerror(map_errno)));
  }
  return std::unique_ptr<SharedMemorySegment>(new SharedMemorySegment(name, memory, bytes, ring_capacity, false));
}

absl::Status offer_shared_memory(DataPlaneStream& stream, const std::string& host, absl::Time deadline) {
  const std::string what = "the shared-memory negotiation";
  MCX_RETURN_IF_ERROR(write_string(stream, host, deadline, what));
  MCX_ASSIGN_OR_RETURN(char same, read_byte(stream, deadline, what));
  if (same != 1) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment = SharedMemorySegment::create(kSharedMemoryRingBytes);
  if (!segment.ok()) {
    say_stays_on_tcp(segment.status());
    return write_string(stream, "", deadline, what);  // no name: stay on TCP
  }
  MCX_RETURN_IF_ERROR(write_string(stream, (*segment)->name(), deadline, what));
  std::string capacity;
  append_u32(capacity, static_cast<uint32_t>(kSharedMemoryRingBytes));
  MCX_RETURN_IF_ERROR(stream.write_all(capacity.data(), capacity.size(), deadline, what));
  absl::StatusOr<char> mapped = read_byte(stream, deadline, what);
  (*segment)->unlink();
  if (!mapped.ok()) return mapped.status();
  if (*mapped == 1) stream.use_shared_memory(std::move(*segment), /*connector=*/true);
  return absl::OkStatus();
}

absl::Status answer_shared_memory(DataPlaneStream& stream, const std::string& host, absl::Time deadline) {
  const std::string what = "the shared-memory negotiation";
  MCX_ASSIGN_OR_RETURN(std::string peer_host, read_string(stream, kMaxHostBytes, deadline, what));
  const bool same = !host.empty() && peer_host == host;
  MCX_RETURN_IF_ERROR(write_byte(stream, same ? 1 : 0, deadline, what));
  if (!same) return absl::OkStatus();
  MCX_ASSIGN_OR_RETURN(std::string name, read_string(stream, kMaxNameBytes, deadline, what));
  if (name.empty()) return absl::OkStatus();  // the connector could not create it
  char capacity[4];
  MCX_RETURN_IF_ERROR(stream.read_exact(capacity, 4, deadline, what));
  if (name.rfind(kSharedMemoryNamePrefix, 0) != 0 || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] ", what, ": '", name,
                                                   "' is not a data-plane segment name"));
  }
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment = SharedMemorySegment::open(name, load_u32(capacity));
  if (!segment.ok()) {
    say_stays_on_tcp(segment.status());
    return write_byte(stream, 0, deadline, what);
  }
  (*segment)->unlink();
  MCX_RETURN_IF_ERROR(write_byte(stream, 1, deadline, what));
  stream.use_shared_memory(std::move(*segment), /*connector=*/false);
  return absl::OkStatus();
}

}  // namespace mcx::distributed
