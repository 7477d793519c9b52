#include "mcx/checkpoint/shard_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/checkpoint/files.h"
#include "mcx/checkpoint/parallel.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/core/npy.h"
#include "mcx/runtime/box_copy.h"

namespace mcx::checkpoint {
namespace {

// Closes the descriptor on every path out.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Bytes [offset, offset + size) of a file, held at ptr.
struct Piece {
  int64_t offset = 0;
  const uint8_t* ptr = nullptr;
  int64_t size = 0;
};

// The digest of bytes [a, b) of a file, from pieces that together cover that range.
Digest hash_range(Checksum checksum, std::span<const Piece> pieces, int64_t a, int64_t b) {
  ChunkHasher h(checksum);
  for (const Piece& p : pieces) {
    const int64_t lo = std::max(a, p.offset), hi = std::min(b, p.offset + p.size);
    if (lo < hi) h.update(std::span<const uint8_t>(p.ptr + (lo - p.offset), static_cast<size_t>(hi - lo)));
  }
  return h.digest();
}

int64_t chunk_count(int64_t bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; }

// Writes bytes [a, b) of the file made of pieces (header, data) at offset a with pwritev, however many calls
// the kernel needs.
absl::Status pwrite_range(int fd, const std::string& path, std::span<const Piece> pieces, int64_t a, int64_t b) {
  while (a < b) {
    iovec iov[2];
    int n = 0;
    for (const Piece& p : pieces) {
      const int64_t lo = std::max(a, p.offset), hi = std::min(b, p.offset + p.size);
      if (lo < hi && n < 2) iov[n++] = {const_cast<uint8_t*>(p.ptr) + (lo - p.offset), static_cast<size_t>(hi - lo)};
    }
    const ssize_t w = ::pwritev(fd, iov, n, static_cast<off_t>(a));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return io_error("write", path);
    a += w;
  }
  return absl::OkStatus();
}

// Direct I/O for the shard files: a slab is copied into an aligned bounce buffer (a memcpy into memory that
// stays hot), hashed there and written with O_DIRECT (no copy into the page cache, which on some hosts costs
// several times the hashing); the last slab is padded to kDirectAlign and the file cut to its size after.
constexpr int64_t kDirectAlign = 4096;

// Aligned slab buffers, reused by the tasks of one write_shards call.
class BouncePool {
 public:
  explicit BouncePool(size_t bytes) : bytes_(bytes) {}
  BouncePool(const BouncePool&) = delete;
  BouncePool& operator=(const BouncePool&) = delete;
  ~BouncePool() {
    for (uint8_t* p : all_) std::free(p);
  }
  // nullptr when out of memory.
  uint8_t* take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        uint8_t* p = free_.back();
        free_.pop_back();
        return p;
      }
    }
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(static_cast<size_t>(kDirectAlign), bytes_));
    if (p == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    all_.push_back(p);
    return p;
  }
  void give(uint8_t* p) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(p);
  }

 private:
  const size_t bytes_;
  std::mutex mu_;
  std::vector<uint8_t*> all_;   // guarded by mu_
  std::vector<uint8_t*> free_;  // guarded by mu_
};

// Writes buf[0, len) at offset `at` of a file opened with O_DIRECT (at a multiple of kDirectAlign; buf has room
// for len rounded up to it, padded with zeros). A file system that refuses the direct write (EINVAL) gets the
// descriptor switched to buffered writes and the exact bytes.
absl::Status write_direct(int fd, const std::string& path, uint8_t* buf, int64_t len, int64_t at) {
  const int64_t padded = (len + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  std::memset(buf + len, 0, static_cast<size_t>(padded - len));
  int64_t done = 0;
  while (done < padded) {
    const ssize_t w = ::pwrite(fd, buf + done, static_cast<size_t>(padded - done), static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL) {
      const int flags = ::fcntl(fd, F_GETFL);
      if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) return io_error("write", path);
      const Piece rest{at + done, buf + done, std::max<int64_t>(len - done, 0)};
      return pwrite_range(fd, path, std::span<const Piece>(&rest, 1), rest.offset, rest.offset + rest.size);
    }
    if (w <= 0) return io_error("write", path);
    done += w;
  }
  return absl::OkStatus();
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) absl::StrAppend(&s, i ? "," : "", dims[i]);
  return s + "]";
}

}  // namespace

absl::StatusOr<std::vector<FragmentEntry>> write_shards(std::span<const ShardFile> files, int threads,
                                                        bool durable, Checksum checksum) {
  // Each file is cut into slabs of kSlabChunks chunks; one task hashes a slab's chunks from the source buffer
  // and then writes the slab with one pwritev, while its bytes are still in cache (one pass from memory).
  constexpr int64_t kSlabChunks = 4;
  const size_t n = files.size();
  std::vector<std::string> headers(n);
  std::vector<int64_t> bytes(n);
  std::vector<int64_t> first_chunk(n + 1, 0);  // chunk digests of file i: [first_chunk[i], first_chunk[i + 1])
  std::vector<int64_t> first_slab(n + 1, 0);   // slab tasks of file i: [first_slab[i], first_slab[i + 1])
  for (size_t i = 0; i < n; ++i) {
    MCX_ASSIGN_OR_RETURN(headers[i], npy_header(files[i].data->dtype(), files[i].data->dims()));
    bytes[i] = static_cast<int64_t>(headers[i].size() + files[i].data->nbytes());
    const int64_t chunks = chunk_count(bytes[i]);
    first_chunk[i + 1] = first_chunk[i] + chunks;
    first_slab[i + 1] = first_slab[i] + (chunks + kSlabChunks - 1) / kSlabChunks;
  }
  std::vector<Digest> digests(static_cast<size_t>(first_chunk[n]));
  std::vector<Fd> fds(n);
  auto pieces_of = [&](size_t i) {
    const std::string& h = headers[i];
    const Buffer& data = *files[i].data;
    return std::array<Piece, 2>{Piece{0, reinterpret_cast<const uint8_t*>(h.data()), static_cast<int64_t>(h.size())},
                                Piece{static_cast<int64_t>(h.size()), static_cast<const uint8_t*>(data.data()),
                                      static_cast<int64_t>(data.nbytes())}};
  };
  // Every file is created before any slab task runs (a slab of file i needs its descriptor): durable, with
  // O_DIRECT where the file system takes it (a refusal: EINVAL at open), else buffered.
  std::vector<char> direct(n, 0);
  for (size_t i = 0; i < n; ++i) {
    constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    if (durable) fds[i].fd = ::open(files[i].path.c_str(), kFlags | O_DIRECT, 0644);
    direct[i] = fds[i].fd >= 0;
    if (fds[i].fd < 0 && (!durable || errno == EINVAL)) fds[i].fd = ::open(files[i].path.c_str(), kFlags, 0644);
    if (fds[i].fd < 0) return io_error("create", files[i].path);
  }
  BouncePool bounce(static_cast<size_t>(kSlabChunks * kChunkBytes));
  MCX_RETURN_IF_ERROR(parallel_for_status(first_slab[n], threads, [&](int64_t t) -> absl::Status {
    const size_t i = static_cast<size_t>(std::upper_bound(first_slab.begin(), first_slab.end(), t) -
                                         first_slab.begin() - 1);
    const std::array<Piece, 2> pieces = pieces_of(i);
    const int64_t c0 = (t - first_slab[i]) * kSlabChunks;
    const int64_t c1 = std::min(c0 + kSlabChunks, first_chunk[i + 1] - first_chunk[i]);
    const int64_t a = c0 * kChunkBytes, b = std::min(c1 * kChunkBytes, bytes[i]);
    if (direct[i]) {
      uint8_t* buf = bounce.take();
      if (buf == nullptr) return absl::ResourceExhaustedError("[checkpoint] out of memory for a write buffer");
      for (const Piece& p : pieces) {
        const int64_t lo = std::max(a, p.offset), hi = std::min(b, p.offset + p.size);
        if (lo < hi) std::memcpy(buf + (lo - a), p.ptr + (lo - p.offset), static_cast<size_t>(hi - lo));
      }
      const Piece slab{a, buf, b - a};
      for (int64_t c = c0; c < c1; ++c) {
        digests[static_cast<size_t>(first_chunk[i] + c)] =
            hash_range(checksum, std::span<const Piece>(&slab, 1), c * kChunkBytes,
                       std::min((c + 1) * kChunkBytes, bytes[i]));
      }
      absl::Status s = write_direct(fds[i].fd, files[i].path, buf, b - a, a);
      bounce.give(buf);
      return s;
    }
    for (int64_t c = c0; c < c1; ++c) {
      digests[static_cast<size_t>(first_chunk[i] + c)] =
          hash_range(checksum, pieces, c * kChunkBytes, std::min((c + 1) * kChunkBytes, bytes[i]));
    }
    MCX_RETURN_IF_ERROR(pwrite_range(fds[i].fd, files[i].path, pieces, a, b));
#ifdef SYNC_FILE_RANGE_WRITE
    // Start this slab's writeback now, so the fsync below finds most of the file on its way to the disk. Only
    // a hint: the fsync is what makes it durable, so a file system without it (EINVAL, ENOSYS) is fine.
    if (durable) (void)::sync_file_range(fds[i].fd, a, b - a, SYNC_FILE_RANGE_WRITE);
#endif
    return absl::OkStatus();
  }));
  MCX_RETURN_IF_ERROR(parallel_for_status(static_cast<int64_t>(n), threads, [&](int64_t i) -> absl::Status {
    Fd& fd = fds[static_cast<size_t>(i)];
    const std::string& path = files[static_cast<size_t>(i)].path;
    // A direct write padded the last slab: cut the file to its size before the fsync makes it durable.
    if (direct[static_cast<size_t>(i)] && ::ftruncate(fd.fd, static_cast<off_t>(bytes[static_cast<size_t>(i)])) != 0) {
      return io_error("truncate", path);
    }
    if (durable && ::fsync(fd.fd) != 0) return io_error("fsync", path);
    const int raw = std::exchange(fd.fd, -1);
    if (::close(raw) != 0) return io_error("close", path);
    return absl::OkStatus();
  }));
  std::vector<FragmentEntry> out(n);
  for (size_t i = 0; i < n; ++i) {
    const std::span<const Digest> mine(digests.data() + first_chunk[i],
                                        static_cast<size_t>(first_chunk[i + 1] - first_chunk[i]));
    out[i].bytes = bytes[i];
    out[i].digest = file_digest(checksum, mine);
    for (const Digest& d : mine) out[i].chunk_digests.push_back(d.hex());
  }
  return out;
}

absl::StatusOr<FragmentEntry> write_shard(const std::string& path, const Buffer& buffer, Checksum checksum) {
  const ShardFile file{path, &buffer};
  MCX_ASSIGN_OR_RETURN(std::vector<FragmentEntry> entries,
                       write_shards(std::span<const ShardFile>(&file, 1), 1, /*durable=*/true, checksum));
  return std::move(entries[0]);
}

absl::Status read_region(const std::string& dir, Checksum checksum, const LeafRecord& leaf,
                         const ShardRecord& stored, const IndexBox& region, Buffer& dst, const IndexBox& dst_box) {
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
  const int64_t c0 = need_begin / kChunkBytes, c1 = (need_end + kChunkBytes - 1) / kChunkBytes;
  const int64_t begin = c0 * kChunkBytes, end = std::min(c1 * kChunkBytes, stored.bytes);

  // Rows contiguous in both the file and dst: read them into dst, the partial chunks around them aside.
  bool direct = true;
  for (size_t d = 1; d < shape.size(); ++d) {
    direct = direct && region.start[d] == stored.box.start[d] && region.limit[d] == stored.box.limit[d] &&
             region.start[d] == dst_box.start[d] && region.limit[d] == dst_box.limit[d];
  }
  std::vector<uint8_t> side;  // direct: [begin, need_begin) then [need_end, end); else [begin, end)
  std::vector<Piece> pieces;
  if (direct) {
    const int64_t head = need_begin - begin, tail = end - need_end;
    side.resize(static_cast<size_t>(head + tail));
    uint8_t* into = static_cast<uint8_t*>(dst.mutable_data()) +
                    (shape.empty() ? 0 : (region.start[0] - dst_box.start[0]) * row_bytes);
    pieces = {{begin, side.data(), head}, {need_begin, into, need_end - need_begin}, {need_end, side.data() + head, tail}};
    MCX_RETURN_IF_ERROR(pread_exact(f.fd, path, begin, std::span<uint8_t>(side.data(), static_cast<size_t>(head))));
    MCX_RETURN_IF_ERROR(pread_exact(f.fd, path, need_begin, std::span<uint8_t>(into, static_cast<size_t>(need_end - need_begin))));
    MCX_RETURN_IF_ERROR(pread_exact(f.fd, path, need_end, std::span<uint8_t>(side.data() + head, static_cast<size_t>(tail))));
  } else {
    side.resize(static_cast<size_t>(end - begin));
    pieces = {{begin, side.data(), end - begin}};
    MCX_RETURN_IF_ERROR(pread_exact(f.fd, path, begin, side));
  }
  // Verifies chunk c against the manifest from pieces covering it.
  auto verify = [&](int64_t c, std::span<const Piece> from) -> absl::Status {
    const int64_t a = c * kChunkBytes, b = std::min(a + kChunkBytes, stored.bytes);
    const std::string found = hash_range(checksum, from, a, b).hex();
    if (found != stored.chunk_digests[static_cast<size_t>(c)]) {
      return fail(absl::StrCat("is corrupted: ", std::string(checksum_name(checksum)), " of bytes [", a, ", ", b, ") expected ",
                               stored.chunk_digests[static_cast<size_t>(c)], " (manifest), found ", found));
    }
    return absl::OkStatus();
  };
  for (int64_t c = c0; c < c1; ++c) MCX_RETURN_IF_ERROR(verify(c, pieces));

  // The header lies in chunk 0 (in the bytes read above when c0 == 0): it must be the one the manifest's
  // dtype and shape give.
  std::vector<uint8_t> first;
  std::span<const uint8_t> head;
  if (c0 == 0) {
    head = std::span<const uint8_t>(side.data(), static_cast<size_t>(need_begin));
  } else {
    first.resize(static_cast<size_t>(std::min(kChunkBytes, stored.bytes)));
    MCX_RETURN_IF_ERROR(pread_exact(f.fd, path, 0, first));
    const Piece chunk0[1] = {{0, first.data(), static_cast<int64_t>(first.size())}};
    MCX_RETURN_IF_ERROR(verify(0, chunk0));
    head = first;
  }
  if (head.size() < header.size() || std::memcmp(head.data(), header.data(), header.size()) != 0) {
    auto layout = parse_npy_layout(head, static_cast<size_t>(stored.bytes), path);
    if (!layout.ok()) return fail(absl::StrCat("has an unreadable .npy header: ", layout.status().message()));
    return fail(absl::StrCat("holds ", std::string(dtype_name(layout->dtype)), dims_string(layout->dims),
                             "; expected ", std::string(dtype_name(leaf.dtype)), dims_string(shape), " (manifest)"));
  }
  if (direct) return absl::OkStatus();

  IndexBox slab = stored.box;
  if (!shape.empty()) {
    slab.start[0] = stored.box.start[0] + r0;
    slab.limit[0] = stored.box.start[0] + r1;
  }
  const uint8_t* src = side.data() + (need_begin - begin);
  copy_box(src, slab.start, slab.shape(), dst.mutable_data(), dst_box.start, dst_box.shape(), region, esize);
  return absl::OkStatus();
}

}  // namespace mcx::checkpoint
