// shard_io: a reader fetches and verifies only the chunks a region needs, so damage elsewhere in the file does
// not stop it, while a region over the damaged chunk is refused naming the byte range.
#include "mcx/checkpoint/shard_io.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mcx/checkpoint/checksum.h"
#include "mcx/core/hash.h"
#include "mcx/runtime/box_copy.h"
#include "tests/support/test_util.h"

namespace mcx::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Known answers from an independent implementation (Python's xxhash and hashlib).
TEST(Checksum, KnownAnswersAndNames) {
  auto hex = [](Checksum c, std::string_view text) {
    ChunkHasher h(c);
    h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    return h.digest().hex();
  };
  EXPECT_EQ(hex(Checksum::kXxh3_128, ""), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(hex(Checksum::kXxh3_128, "abc"), "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(hex(Checksum::kSha256, "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // In pieces across the internal block sizes: bytes(range(256)) * 8193 (2 MiB + 256).
  std::string big;
  for (int k = 0; k < 8193; ++k) {
    for (int b = 0; b < 256; ++b) big.push_back(static_cast<char>(b));
  }
  ChunkHasher h(Checksum::kXxh3_128);
  for (size_t off = 0; off < big.size(); off += 100003) {
    const size_t n = std::min<size_t>(100003, big.size() - off);
    h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(big.data()) + off, n));
  }
  EXPECT_EQ(h.digest().hex(), "375efb95e134def970a8d0c2b0df158d");
  EXPECT_EQ(*parse_checksum("xxh3-128"), Checksum::kXxh3_128);
  EXPECT_EQ(*parse_checksum("sha256"), Checksum::kSha256);
  absl::StatusOr<Checksum> bad = parse_checksum("md5");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown checksum 'md5'; expected 'xxh3-128' or 'sha256'"));
}

class ShardIo : public ::testing::TestWithParam<Checksum> {};
INSTANTIATE_TEST_SUITE_P(Checksums, ShardIo, ::testing::Values(Checksum::kXxh3_128, Checksum::kSha256),
                         [](const auto& info) { return info.param == Checksum::kSha256 ? "sha256" : "xxh3"; });

TEST_P(ShardIo, ReadsOnlyTheChunksARegionNeeds) {
  const Checksum checksum = GetParam();
  const std::string dir = (fs::temp_directory_path() / ("mcx_shard_io_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  // f32 [1024, 1024] = 4 MiB of data: chunks 0..4 (the header shifts the data by 128 bytes).
  const Buffer data = test::random_buffer(DType::kFloat32, {1024, 1024}, 7);
  const IndexBox box = full_box(data.dims());
  FragmentEntry e = *write_shard(dir + "/s.npy", data, checksum);
  ASSERT_EQ(e.chunk_digests.size(), 5u);
  ASSERT_EQ(e.bytes, static_cast<int64_t>(data.nbytes() + 128));
  LeafRecord leaf{"params/w", DType::kFloat32, {1024, 1024}, {}};
  ShardRecord rec{box, "s.npy", e.bytes, e.digest, e.chunk_digests, 0, 0};

  // Damage one byte in chunk 3 (rows ~768..1023).
  {
    std::fstream f(dir + "/s.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3 * kChunkBytes + 100);
    f.put('\x7f');
  }
  // Rows 0..255 lie in chunks 0 and 1 only: read and equal.
  const IndexBox top{{0, 0}, {256, 1024}};
  Buffer out = Buffer::uninitialized(DType::kFloat32, top.shape());
  ASSERT_TRUE(read_region(dir, checksum, leaf, rec, top, out, top).ok());
  EXPECT_TRUE(out.bitwise_equal(extract_box(data, box, top)));
  // A region whose rows cross chunk 3 is refused, naming the leaf, the file and the bytes.
  const IndexBox bottom{{900, 10}, {1000, 20}};
  Buffer out2 = Buffer::uninitialized(DType::kFloat32, bottom.shape());
  absl::Status s = read_region(dir, checksum, leaf, rec, bottom, out2, bottom);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("[checkpoint] leaf 'params/w': file '"));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("s.npy' is corrupted: ", std::string(checksum_name(checksum)),
                                                  " of bytes [3145728, 4194304) expected")));
  fs::remove_all(dir);
}

// write_shards on several threads gives each file the bytes and hashes a one-thread write gives, each chunk's
// digest is the checksum of its bytes computed in one piece, the file's digest is the checksum of its chunk
// digests, and full rows are read straight into a larger destination box.
TEST_P(ShardIo, ParallelWritesHashLikeOneThreadAndRowsReadIntoPlace) {
  const Checksum checksum = GetParam();
  const std::string dir = (fs::temp_directory_path() / ("mcx_shard_io_par_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Buffer a = test::random_buffer(DType::kFloat32, {600, 1000}, 1);  // 2.3 MiB: 3 chunks
  const Buffer b = test::random_buffer(DType::kInt32, {7}, 2);            // one small chunk
  const Buffer c = test::random_buffer(DType::kFloat64, {300, 1000}, 3);  // 2.3 MiB
  const std::vector<ShardFile> files = {{dir + "/a.npy", &a}, {dir + "/b.npy", &b}, {dir + "/c.npy", &c}};
  absl::StatusOr<std::vector<FragmentEntry>> par = write_shards(files, 4, /*durable=*/true, checksum);
  ASSERT_TRUE(par.ok()) << par.status();
  ASSERT_EQ(par->size(), 3u);
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StatusOr<FragmentEntry> one =
        write_shard(dir + "/one" + std::to_string(i) + ".npy", *files[i].data, checksum);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ((*par)[i].bytes, one->bytes);
    EXPECT_EQ((*par)[i].chunk_digests, one->chunk_digests);
    EXPECT_EQ((*par)[i].digest, one->digest);
    // The chunk hashes are those of the file's bytes; the digest is over the chunk digests.
    std::ifstream in(files[i].path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), one->bytes);
    std::vector<Digest> digests;
    for (size_t off = 0; off < bytes.size(); off += kChunkBytes) {
      const std::string_view chunk = std::string_view(bytes).substr(off, kChunkBytes);
      ChunkHasher h(checksum);
      h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size()));
      digests.push_back(h.digest());
      if (checksum == Checksum::kSha256) EXPECT_EQ(digests.back().hex(), to_hex(sha256(chunk)));
      EXPECT_EQ(digests.back().hex(), one->chunk_digests[digests.size() - 1]);
    }
    EXPECT_EQ(one->digest, file_digest(checksum, digests));
  }
  EXPECT_FALSE(write_shards(files, 2, /*durable=*/true, checksum).ok());  // the files exist: O_EXCL
  // Rows 100..399 of a (whole rows) into a destination holding rows 50..449.
  const IndexBox a_box = full_box(a.dims());
  LeafRecord leaf{"a", DType::kFloat32, a.dims(), {}};
  const ShardRecord rec{a_box, "a.npy", (*par)[0].bytes, (*par)[0].digest, (*par)[0].chunk_digests, 0, 0};
  const IndexBox dst_box{{50, 0}, {450, 1000}}, region{{100, 0}, {400, 1000}};
  Buffer dst = Buffer::zeros(DType::kFloat32, dst_box.shape());
  ASSERT_TRUE(read_region(dir, checksum, leaf, rec, region, dst, dst_box).ok());
  EXPECT_TRUE(extract_box(dst, dst_box, region).bitwise_equal(extract_box(a, a_box, region)));
  EXPECT_EQ(extract_box(dst, dst_box, IndexBox{{50, 0}, {100, 1000}}).to_doubles(), std::vector<double>(50000, 0.0));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mcx::checkpoint
