#include "mcx/core/hash.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mcx {
namespace {

// FIPS 180-2 / NIST test vectors.
TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(to_hex(sha256(std::string_view(""))),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256(std::string_view("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(to_hex(sha256(std::string_view(million))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalMatchesOneShotAndResets) {
  std::vector<uint8_t> data(10000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
  const Sha256Digest whole = sha256(std::span<const uint8_t>(data));
  for (size_t chunk : {1u, 63u, 64u, 65u, 1000u, 9999u}) {
    Sha256 h;
    for (size_t i = 0; i < data.size(); i += chunk) {
      h.update(std::span<const uint8_t>(data).subspan(i, std::min(chunk, data.size() - i)));
    }
    EXPECT_EQ(h.digest(), whole) << chunk;
  }
  Sha256 h;
  h.update(std::string_view("ab"));
  h.update(std::string_view("c"));
  EXPECT_EQ(to_hex(h.digest()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(h.digest()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 moved = std::move(h);
  EXPECT_EQ(moved.update(std::string_view("abc")).digest(), sha256(std::string_view("abc")));
}

TEST(Sha256Test, U64AndHex) {
  const uint8_t le[8] = {0x01, 0x02, 0, 0, 0, 0, 0, 0x80};
  EXPECT_EQ(Sha256().update_u64(0x8000000000000201ull).digest(), sha256(std::span<const uint8_t>(le, 8)));
  const uint8_t bytes[] = {0x00, 0x0f, 0xa0, 0xff};
  EXPECT_EQ(to_hex(std::span<const uint8_t>(bytes)), "000fa0ff");
  EXPECT_EQ(to_hex(std::span<const uint8_t>()), "");
}

}  // namespace
}  // namespace mcx
