// Shared memory between two processes of one host, for the data plane's connection between them
// (tcp_peer_group.h): a segment of two SharedMemoryRings (shared_memory_ring.h), one per direction, that carries
// the connection's bytes instead of TCP. The TCP connection stays: it is the doorbell that wakes a side sleeping
// on its ring (one byte, sent only when that side said it sleeps) and the liveness signal (a process that exits
// or is killed closes it, and its peer sees the end). stream.h switches a connection over.
//
// Negotiation, right after the connection's handshake (handshake.h), through the authenticated (and, with TLS,
// encrypted) stream; both ends always run it, every integer little-endian:
//   connector -> acceptor  u32 n, its host (n bytes; empty: it does not want shared memory)
//   acceptor  -> connector one byte: 1 when the hosts are the same and it wants shared memory, else 0
//   if 1: the connector creates the segment (a random name, mode 0600, its memory reserved at once, so a full
//   /dev/shm fails here instead of with SIGBUS later) and sends u32 n, the name, u64 ring capacity; the acceptor
//   maps it, unlinks the name and answers one byte: 1 mapped, 0 not (both then stay on TCP); the connector
//   unlinks the name too. From then on nothing names the segment: it goes when both processes unmap it or die,
//   so a kill -9 leaves nothing behind (only a process killed between the creation and the answer, a few
//   round trips at the group's setup, could).
// Hosts: the caller's host identity (the topology's: hostname, boot id, network namespace), so processes in
// different network namespaces of one machine, which the job treats as different hosts, keep to TCP.
//
// Errors: the stream's (DeadlineExceeded, Unavailable); a segment that cannot be created or mapped is not an
// error but a connection that stays on TCP (with a warning naming why).
// Thread-safety: one thread per connection.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/distributed/data_plane/tcp/shared_memory_ring.h"

namespace mcx::distributed {

class DataPlaneStream;

// The mapped segment: ring(true) carries the connector's bytes to the acceptor, ring(false) the other way.
class SharedMemorySegment {
 public:
  // A new segment of two rings of `ring_capacity` bytes (a power of two) under a fresh random name.
  static absl::StatusOr<std::unique_ptr<SharedMemorySegment>> create(size_t ring_capacity);
  // Maps the segment `name` made by create() with the same capacity.
  static absl::StatusOr<std::unique_ptr<SharedMemorySegment>> open(const std::string& name, size_t ring_capacity);
  ~SharedMemorySegment();
  SharedMemorySegment(const SharedMemorySegment&) = delete;
  SharedMemorySegment& operator=(const SharedMemorySegment&) = delete;

  const std::string& name() const { return name_; }
  // Removes the name (the memory stays while mapped). Idempotent.
  void unlink();
  SharedMemoryRing& ring(bool from_connector) { return from_connector ? *to_acceptor_ : *to_connector_; }

 private:
  SharedMemorySegment(std::string name, void* memory, size_t bytes, size_t ring_capacity, bool initialize);
  std::string name_;
  void* memory_;
  size_t bytes_;
  bool linked_ = true;
  std::unique_ptr<SharedMemoryRing> to_acceptor_, to_connector_;
};

// Every segment's name starts with this (then 32 random hex digits); a peer's offer of any other name is refused.
inline constexpr char kSharedMemoryNamePrefix[] = "/mcx-data-plane-";

// The capacity of each ring of a link (1 MiB).
inline constexpr size_t kSharedMemoryRingBytes = size_t{1} << 20;

// The connector's side of the negotiation. `host`: this process's host identity, empty to decline. On success
// the stream carries its bytes through shared memory when both ends agreed (stream.h), else stays on TCP.
absl::Status offer_shared_memory(DataPlaneStream& stream, const std::string& host, absl::Time deadline);
// The acceptor's side.
absl::Status answer_shared_memory(DataPlaneStream& stream, const std::string& host, absl::Time deadline);

}  // namespace mcx::distributed
