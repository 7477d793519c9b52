#include "mcx/checkpoint/shard_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/checkpoint/files.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/core/npy.h"
#include "mcx/runtime/box_copy.h"

namespace mcx::checkpoint {
namespace {

// Feeds bytes to the whole-file hash and to one hash per chunk.
class ChunkedHasher {
 public:
  void update(const uint8_t* p, size_t n) {
    whole_.update(std::span<const uint8_t>(p, n));
    while (n > 0) {
      const size_t room = static_cast<size_t>(kChunkBytes) - in_chunk_;
      const size_t take = std::min(room, n);
      chunk_.update(std::span<const uint8_t>(p, take));
      in_chunk_ += take;
      p += take;
      n -= take;
      if (in_chunk_ == static_cast<size_t>(kChunkBytes)) flush();
    }
  }
  void finish(FragmentEntry& e) {
    if (in_chunk_ > 0) flush();
    e.sha256 = to_hex(whole_.digest());
    e.chunk_sha256 = std::move(chunks_);
  }

 private:
  void flush() {
    chunks_.push_back(to_hex(chunk_.digest()));
    in_chunk_ = 0;
  }
  Sha256 whole_, chunk_;
  size_t in_chunk_ = 0;
  std::vector<std::string> chunks_;
};

absl::Status write_all(int fd, const std::string& path, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return io_error("write", path);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Closes the descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) absl::StrAppend(&s, i ? "," : "", dims[i]);
  return s + "]";
}

}  // namespace

absl::StatusOr<FragmentEntry> write_shard(const std::string& path, const Buffer& buffer) {
  MCX_ASSIGN_OR_RETURN(std::string header, npy_header(buffer.dtype(), buffer.dims()));
  Fd f;
  f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (f.fd < 0) return io_error("create", path);
  ChunkedHasher hasher;
  const auto* h = reinterpret_cast<const uint8_t*>(header.data());
  hasher.update(h, header.size());
  MCX_RETURN_IF_ERROR(write_all(f.fd, path, h, header.size()));
  // Hash a slice while it is still in cache, then write it.
  constexpr size_t kSlice = size_t{4} << 20;
  const auto* data = static_cast<const uint8_t*>(buffer.data());
  for (size_t off = 0; off < buffer.nbytes(); off += kSlice) {
    const size_t n = std::min(kSlice, buffer.nbytes() - off);
    hasher.update(data + off, n);
    MCX_RETURN_IF_ERROR(write_all(f.fd, path, data + off, n));
  }
  if (::fsync(f.fd) != 0) return io_error("fsync", path);
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) return io_error("close", path);
  FragmentEntry e;
  e.bytes = static_cast<int64_t>(header.size() + buffer.nbytes());
  hasher.finish(e);
  return e;
}

absl::Status read_region(const std::string& dir, const LeafRecord& leaf, const ShardRecord& stored,
                         const IndexBox& region, Buffer& dst, const IndexBox& dst_box) {
  if (region.num_elements() == 0) return absl::OkStatus();
  const std::string path = dir + "/" + stored.file;
  const std::string who = absl::StrCat("[checkpoint] leaf '", leaf.path, "': file '", path, "'");
  auto fail = [&](const std::string& what) { return absl::DataLossError(absl::StrCat(who, " ", what)); };

  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat(who, " is missing (listed in the manifest)"));
    errno = e;
    return io_error("open", path);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return io_error("stat", path);
  if (st.st_size != stored.bytes) {
    return fail(absl::StrCat(st.st_size < stored.bytes ? "is truncated" : "has the wrong size", ": expected ",
                             stored.bytes, " bytes (manifest), found ", st.st_size));
  }

  // Which bytes the region needs: rows [r0, r1) of the stored box's leading dimension (rank 0: the element).
  const std::vector<int64_t> shape = stored.box.shape();
  const size_t esize = dtype_size(leaf.dtype);
  MCX_ASSIGN_OR_RETURN(std::string header, npy_header(leaf.dtype, shape));
  const int64_t data_offset = static_cast<int64_t>(header.size());
  int64_t row_bytes = static_cast<int64_t>(esize);
  for (size_t d = 1; d < shape.size(); ++d) row_bytes *= shape[d];
  const int64_t r0 = shape.empty() ? 0 : region.start[0] - stored.box.start[0];
  const int64_t r1 = shape.empty() ? 1 : region.limit[0] - stored.box.start[0];
  const int64_t need_begin = data_offset + r0 * row_bytes, need_end = data_offset + r1 * row_bytes;
  if (need_end > stored.bytes) {
    return fail(absl::StrCat("is smaller than its shape ", dims_string(shape), " needs: expected at least ",
                             need_end, " bytes, manifest says ", stored.bytes));
  }

  // Reads chunks [c0, c1) into out (which then starts at byte c0 * kChunkBytes), verifying each.
  auto read_chunks = [&](int64_t c0, int64_t c1, std::vector<uint8_t>& out) -> absl::Status {
    const int64_t begin = c0 * kChunkBytes, end = std::min(c1 * kChunkBytes, stored.bytes);
    out.resize(static_cast<size_t>(end - begin));
    MCX_RETURN_IF_ERROR(pread_exact(f.fd, path, begin, out));
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t a = c * kChunkBytes, b = std::min(a + kChunkBytes, stored.bytes);
      const std::string found =
          to_hex(sha256(std::span<const uint8_t>(out.data() + (a - begin), static_cast<size_t>(b - a))));
      if (found != stored.chunk_sha256[static_cast<size_t>(c)]) {
        return fail(absl::StrCat("is corrupted: SHA-256 of bytes [", a, ", ", b, ") expected ",
                                 stored.chunk_sha256[static_cast<size_t>(c)], " (manifest), found ", found));
      }
    }
    return absl::OkStatus();
  };

  // The header lies in chunk 0: it must be the one the manifest's dtype and shape give.
  const int64_t c0 = need_begin / kChunkBytes, c1 = (need_end + kChunkBytes - 1) / kChunkBytes;
  std::vector<uint8_t> bytes;
  MCX_RETURN_IF_ERROR(read_chunks(c0, c1, bytes));
  std::vector<uint8_t> first;
  if (c0 > 0) MCX_RETURN_IF_ERROR(read_chunks(0, 1, first));
  const std::vector<uint8_t>& head = c0 > 0 ? first : bytes;
  if (head.size() < header.size() || std::memcmp(head.data(), header.data(), header.size()) != 0) {
    auto layout = parse_npy_layout(head, static_cast<size_t>(stored.bytes), path);
    if (!layout.ok()) return fail(absl::StrCat("has an unreadable .npy header: ", layout.status().message()));
    return fail(absl::StrCat("holds ", std::string(dtype_name(layout->dtype)), dims_string(layout->dims), "; expected ",
                             std::string(dtype_name(leaf.dtype)), dims_string(shape), " (manifest)"));
  }

  IndexBox slab = stored.box;
  if (!shape.empty()) {
    slab.start[0] = stored.box.start[0] + r0;
    slab.limit[0] = stored.box.start[0] + r1;
  }
  const uint8_t* src = bytes.data() + (need_begin - c0 * kChunkBytes);
  copy_box(src, slab.start, slab.shape(), dst.mutable_data(), dst_box.start, dst_box.shape(), region, esize);
  return absl::OkStatus();
}

}  // namespace mcx::checkpoint
