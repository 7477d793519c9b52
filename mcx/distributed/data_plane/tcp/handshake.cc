#include "mcx/distributed/data_plane/tcp/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/distributed/data_plane/tcp/little_endian.h"

namespace mcx::distributed {
namespace {

constexpr char kMagic[8] = {'M', 'C', 'X', 'D', 'P', 1, 0, 0};

}  // namespace

std::string encode_hello(const DataPlaneHello& hello) {
  std::string out;
  append_u32(out, hello.from_process);
  append_u32(out, hello.from_rank);
  append_u32(out, hello.to_process);
  append_u32(out, hello.to_rank);
  out.append(reinterpret_cast<const char*>(hello.nonce.data()), hello.nonce.size());
  out += hello.group;
  return out;
}

absl::StatusOr<DataPlaneHello> decode_hello(std::string_view body) {
  constexpr size_t kFixed = 16 + 32;
  if (body.size() <= kFixed || body.size() > kMaxHelloBytes) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] malformed hello: expected ", kFixed + 1, " to ",
                                                   kMaxHelloBytes, " bytes, found ", body.size()));
  }
  DataPlaneHello h;
  h.from_process = load_u32(body.data());
  h.from_rank = load_u32(body.data() + 4);
  h.to_process = load_u32(body.data() + 8);
  h.to_rank = load_u32(body.data() + 12);
  std::memcpy(h.nonce.data(), body.data() + 16, 32);
  h.group = std::string(body.substr(kFixed));
  return h;
}

std::array<uint8_t, 32> handshake_proof(std::string_view secret, std::string_view role, std::string_view body,
                                        const std::array<uint8_t, 32>& acceptor_nonce) {
  std::string msg = absl::StrCat("mcx data plane ", std::string(role), " v1");
  append_u32(msg, static_cast<uint32_t>(body.size()));
  msg.append(body.data(), body.size());
  msg.append(reinterpret_cast<const char*>(acceptor_nonce.data()), acceptor_nonce.size());
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out.data(), &len);
  return out;
}

absl::Status connector_handshake(DataPlaneStream& stream, const DataPlaneHello& hello, std::string_view secret,
                                 absl::Time deadline) {
  const std::string body = encode_hello(hello);
  std::string first(kMagic, sizeof(kMagic));
  append_u32(first, static_cast<uint32_t>(body.size()));
  first += body;
  const std::string peer = absl::StrCat("process ", hello.to_process);
  MCX_RETURN_IF_ERROR(stream.write_all(first.data(), first.size(), deadline, absl::StrCat("sending the hello to ", peer)));
  std::array<uint8_t, 64> answer{};
  MCX_RETURN_IF_ERROR(
      stream.read_exact(answer.data(), answer.size(), deadline, absl::StrCat("reading the handshake of ", peer)));
  std::array<uint8_t, 32> acceptor_nonce{};
  std::memcpy(acceptor_nonce.data(), answer.data(), 32);
  const std::array<uint8_t, 32> expected = handshake_proof(secret, "acceptor", body, acceptor_nonce);
  if (CRYPTO_memcmp(expected.data(), answer.data() + 32, 32) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("[data plane] the listener of ", peer,
                                                    " does not know the job's secret: it is not a process of this job"));
  }
  const std::array<uint8_t, 32> mine = handshake_proof(secret, "connector", body, acceptor_nonce);
  MCX_RETURN_IF_ERROR(stream.write_all(mine.data(), mine.size(), deadline, absl::StrCat("proving to ", peer)));
  uint8_t verdict = 0;
  MCX_RETURN_IF_ERROR(stream.read_exact(&verdict, 1, deadline, absl::StrCat("reading the verdict of ", peer)));
  if (verdict != 1) {
    return absl::PermissionDeniedError(absl::StrCat("[data plane] ", peer, " refused the connection for '",
                                                    hello.group, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DataPlaneHello> acceptor_handshake(DataPlaneStream& stream, int self_process,
                                                  const ClaimCheck& check_claim, const SecretSource& secret,
                                                  absl::Time deadline) {
  char head[sizeof(kMagic) + 4];
  MCX_RETURN_IF_ERROR(stream.read_exact(head, sizeof(head), deadline, "reading a hello"));
  if (std::memcmp(head, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("[data plane] the connection does not speak the mcx data plane (bad magic)");
  }
  const uint32_t n = load_u32(head + sizeof(kMagic));
  if (n > kMaxHelloBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("[data plane] hello of ", n, " bytes; expected at most ", kMaxHelloBytes));
  }
  std::string body(n, '\0');
  MCX_RETURN_IF_ERROR(stream.read_exact(body.data(), n, deadline, "reading a hello"));
  MCX_ASSIGN_OR_RETURN(DataPlaneHello hello, decode_hello(body));
  if (hello.to_process != static_cast<uint32_t>(self_process)) {
    return absl::PermissionDeniedError(absl::StrCat("[data plane] a hello for process ", hello.to_process,
                                                    " reached process ", self_process));
  }
  if (check_claim) MCX_RETURN_IF_ERROR(check_claim(hello));
  MCX_ASSIGN_OR_RETURN(std::string key, secret(deadline));
  const std::array<uint8_t, 32> nonce = random_32_bytes();
  const std::array<uint8_t, 32> proof = handshake_proof(key, "acceptor", body, nonce);
  std::array<uint8_t, 64> answer{};
  std::memcpy(answer.data(), nonce.data(), 32);
  std::memcpy(answer.data() + 32, proof.data(), 32);
  MCX_RETURN_IF_ERROR(stream.write_all(answer.data(), answer.size(), deadline, "answering a hello"));
  std::array<uint8_t, 32> theirs{};
  MCX_RETURN_IF_ERROR(stream.read_exact(theirs.data(), theirs.size(), deadline, "reading the connector's proof"));
  const std::array<uint8_t, 32> expected = handshake_proof(key, "connector", body, nonce);
  const bool ok = CRYPTO_memcmp(expected.data(), theirs.data(), 32) == 0;
  const uint8_t verdict = ok ? 1 : 0;
  (void)stream.write_all(&verdict, 1, deadline, "answering the connector");
  if (!ok) {
    return absl::PermissionDeniedError(absl::StrCat("[data plane] a connection claiming to be process ",
                                                    hello.from_process, " (group '", hello.group,
                                                    "') does not know the job's secret"));
  }
  return hello;
}

}  // namespace mcx::distributed
