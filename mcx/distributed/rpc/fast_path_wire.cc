#include "mcx/distributed/rpc/fast_path_wire.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"

namespace mcx::distributed {
namespace {

void put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

std::string encode_frame(uint16_t op, uint16_t flags, uint64_t id, std::string_view payload) {
  std::string out;
  out.reserve(kFastPathHeaderBytes + payload.size());
  put(out, kFastPathMagic, 4);
  put(out, payload.size(), 4);
  put(out, op, 2);
  put(out, flags, 2);
  put(out, 0, 4);
  put(out, id, 8);
  out.append(payload);
  return out;
}

std::string encode_frame(uint16_t op, uint16_t flags, uint64_t id, const google::protobuf::MessageLite& message) {
  std::string out = encode_frame(op, flags, id, std::string_view());
  message.AppendToString(&out);  // serialized in place, after the header
  const uint64_t length = out.size() - kFastPathHeaderBytes;
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out;
}

absl::StatusOr<FrameHeader> decode_frame_header(const char* bytes) {
  if (uint32_t magic = static_cast<uint32_t>(get(bytes, 4)); magic != kFastPathMagic) {
    return absl::DataLossError(absl::StrCat("[coordination] fast path: expected a frame starting with magic 0x",
                                            absl::Hex(kFastPathMagic), ", found 0x", absl::Hex(magic),
                                            " (not an mcx fast-path peer, or a different protocol version)"));
  }
  FrameHeader h;
  h.length = static_cast<uint32_t>(get(bytes + 4, 4));
  h.op = static_cast<uint16_t>(get(bytes + 8, 2));
  h.flags = static_cast<uint16_t>(get(bytes + 10, 2));
  h.id = get(bytes + 16, 8);
  if (h.length > kFastPathMaxPayload) {
    return absl::DataLossError(absl::StrCat("[coordination] fast path: a frame of ", h.length,
                                            " bytes is over the limit of ", kFastPathMaxPayload, " bytes"));
  }
  return h;
}

std::string address_host(std::string_view address) {
  if (!address.empty() && address[0] == '[') {
    size_t close = address.find(']');
    return close == std::string_view::npos ? "" : std::string(address.substr(1, close - 1));
  }
  size_t colon = address.rfind(':');
  return std::string(colon == std::string_view::npos ? address : address.substr(0, colon));
}

void set_socket_options(int fd) {
  int one = 1, idle = 10, interval = 5, count = 2;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace mcx::distributed
