// The coordinator's malformed-input surface (label slow): a real mcx-coordinator process gets, on its one port,
// raw malformed protobuf payloads for every RPC (random bytes, and random protobuf-shaped field sequences) over
// gRPC, the same as fast-path frames for every op plus broken frames, oversized gRPC metadata, and hundreds of
// slow-loris connections that never finish their preface. After each round a well-behaved client must still get
// answers within its deadline, and the process must still be running.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/distributed/rpc/handlers.h"
#include "mcx/distributed/rpc/fast_path_wire.h"
#include "mcx/distributed/rpc/grpc_client.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

const std::vector<std::string> kMethods = {"Register", "Heartbeat", "ReportError", "Shutdown", "Watch",
                                           "KvInsert", "KvGet",     "KvIncrement", "KvDir",    "KvDelete",
                                           "Barrier",  "CancelBarrier", "GetLiveTasks", "GetStatus"};

// Random bytes, or a random sequence of protobuf fields (varints, fixed, length-delimited with random content),
// which gets past the first byte of a parser more often than noise does.
std::string fuzz_payload(std::mt19937_64& rng) {
  std::string out;
  auto varint = [&](uint64_t v) {
    do {
      out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
      v >>= 7;
    } while (v != 0);
  };
  if (rng() % 3 == 0) {
    const size_t n = rng() % 512;
    for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(rng()));
    return out;
  }
  const int fields = static_cast<int>(rng() % 8);
  for (int f = 0; f < fields; ++f) {
    const uint64_t number = 1 + rng() % 12, type = std::vector<uint64_t>{0, 1, 2, 5}[rng() % 4];
    varint(number << 3 | type);
    if (type == 0) {
      varint(rng() % 4 == 0 ? rng() : rng() % 8);  // small ids and huge ones
    } else if (type == 1) {
      for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(rng()));
    } else if (type == 5) {
      for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(rng()));
    } else {
      const size_t n = rng() % 5 == 0 ? (rng() % 100000) : rng() % 40;  // and lengths that lie
      varint(n);
      const size_t real = rng() % 2 == 0 ? n : rng() % (n + 1);
      for (size_t i = 0; i < real; ++i) out.push_back(static_cast<char>('a' + rng() % 26));
    }
  }
  return out;
}

// One raw gRPC call of `method` with `payload` as its serialized request; returns the status code.
grpc::StatusCode raw_call(grpc::GenericStub& stub, grpc::CompletionQueue& cq, const std::string& method,
                          const std::string& payload, const std::string& big_metadata = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  if (!big_metadata.empty()) ctx.AddMetadata("x-fuzz", big_metadata);
  grpc::Slice slice(payload);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&ctx, "/mcx.distributed.proto.Coordination/" + method, request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  return status.error_code();
}

int dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int port_of(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// A well-behaved client's round trip: insert, read back, status.
void expect_serving(const std::string& address, int round, Harness& h) {
  auto client = distributed::make_grpc_client({address, {}});
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string key = absl::StrCat("fuzz/alive/", round);
  absl::Status put = (*client)->kv_insert(key, "yes", true, absl::Seconds(5));
  ASSERT_TRUE(put.ok()) << "round " << round << ": " << put << "\n" << h.dump(h.coordinator_index());
  absl::StatusOr<std::string> got = (*client)->kv_try_get(key, absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "yes");
  (void)h.run_until([] { return false; }, milliseconds(1));  // reap it, had it exited
  EXPECT_FALSE(h.proc(h.coordinator_index()).status.has_value())
      << "the coordinator exited\n" << h.dump(h.coordinator_index());
}

TEST(CoordinatorFuzz, MalformedInputNeverStopsTheCoordinator) {
  Harness h;
  // No rate limit: every malformed request must reach the parsers.
  const std::string address = h.start_coordinator(2, {"--rate-limit", "0"});
  ASSERT_FALSE(address.empty());
  std::mt19937_64 rng(20261203);

  // 1. gRPC: every method, 300 malformed requests each.
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  for (const std::string& m : kMethods) {
    std::map<grpc::StatusCode, int> codes;
    for (int i = 0; i < 300; ++i) ++codes[raw_call(stub, cq, m, fuzz_payload(rng))];
    std::string summary;
    for (const auto& [code, n] : codes) absl::StrAppend(&summary, " code ", static_cast<int>(code), " x", n);
    std::printf("grpc fuzz %s:%s\n", m.c_str(), summary.c_str());
    // gRPC answers a request it cannot parse with UNIMPLEMENTED; the others reached the handler (a wrong method
    // name would make every answer UNIMPLEMENTED, testing nothing).
    EXPECT_LT(codes[grpc::StatusCode::UNIMPLEMENTED], 300) << m << ": no request reached the handler";
  }
  expect_serving(address, 1, h);

  // 2. Oversized metadata (1 MiB header value): refused, nothing else.
  EXPECT_NE(raw_call(stub, cq, "GetStatus", "", std::string(1 << 20, 'm')), grpc::StatusCode::OK);
  expect_serving(address, 2, h);

  // 3. The fast path: well-framed requests with malformed payloads for every op (and unknown ops), on a few
  //    connections; then broken frames (bad magic, a length over the limit, a header cut short).
  const int port = port_of(address);
  for (int c = 0; c < 8; ++c) {
    const int fd = dial(port);
    ASSERT_GE(fd, 0);
    std::string out = distributed::encode_frame(distributed::kHelloOp, 0, 0, std::string_view());
    for (int i = 0; i < 400; ++i) {
      const uint16_t op = static_cast<uint16_t>(rng() % 20);
      if (op == static_cast<uint16_t>(distributed::Rpc::kWatch)) continue;  // a watch holds the connection
      out += distributed::encode_frame(op, 0, static_cast<uint64_t>(i), fuzz_payload(rng));
    }
    (void)!write(fd, out.data(), out.size());
    char sink[65536];
    struct timeval tv{0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (read(fd, sink, sizeof(sink)) > 0) {
    }
    close(fd);
  }
  for (const std::string& broken : {std::string("MCF0garbage-garbage-garbage"),
                                    distributed::encode_frame(1, 0, 1, std::string(16, 'x')).substr(0, 10),
                                    std::string("\x4d\x43\x46\x31\xff\xff\xff\x7f", 8) + std::string(16, '\0')}) {
    const int fd = dial(port);
    ASSERT_GE(fd, 0);
    (void)!write(fd, broken.data(), broken.size());
    close(fd);
  }
  expect_serving(address, 3, h);

  // 4. Slow loris: 300 connections that send half an HTTP/2 preface (or nothing) and stay open while a
  //    well-behaved client works.
  std::vector<int> loris;
  for (int i = 0; i < 300; ++i) {
    const int fd = dial(port);
    if (fd < 0) break;
    if (i % 2 == 0) (void)!write(fd, "PRI * HTTP/2", 12);
    loris.push_back(fd);
  }
  EXPECT_EQ(loris.size(), 300u);
  const auto before = Clock::now();
  expect_serving(address, 4, h);
  std::printf("a round trip with %zu slow-loris connections open: %.1f ms\n", loris.size(),
              1000 * seconds_between(before, Clock::now()));
  for (int fd : loris) close(fd);
  expect_serving(address, 5, h);
}

}  // namespace
}  // namespace mcx::mptest
