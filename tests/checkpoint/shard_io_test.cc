// shard_io: a reader fetches and verifies only the chunks a region needs, so damage elsewhere in the file does
// not stop it, while a region over the damaged chunk is refused naming the byte range.
#include "mcx/checkpoint/shard_io.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/hash.h"
#include "mcx/runtime/box_copy.h"
#include "tests/support/test_util.h"

namespace mcx::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(ShardIo, ReadsOnlyTheChunksARegionNeeds) {
  const std::string dir = (fs::temp_directory_path() / ("mcx_shard_io_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  // f32 [1024, 1024] = 4 MiB of data: chunks 0..4 (the header shifts the data by 128 bytes).
  const Buffer data = test::random_buffer(DType::kFloat32, {1024, 1024}, 7);
  const IndexBox box = full_box(data.dims());
  FragmentEntry e = *write_shard(dir + "/s.npy", data);
  ASSERT_EQ(e.chunk_sha256.size(), 5u);
  ASSERT_EQ(e.bytes, static_cast<int64_t>(data.nbytes() + 128));
  LeafRecord leaf{"params/w", DType::kFloat32, {1024, 1024}, {}};
  ShardRecord rec{box, "s.npy", e.bytes, e.chunk_list_sha256, e.chunk_sha256, 0, 0};

  // Damage one byte in chunk 3 (rows ~768..1023).
  {
    std::fstream f(dir + "/s.npy", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3 * kChunkBytes + 100);
    f.put('\x7f');
  }
  // Rows 0..255 lie in chunks 0 and 1 only: read and equal.
  const IndexBox top{{0, 0}, {256, 1024}};
  Buffer out = Buffer::uninitialized(DType::kFloat32, top.shape());
  ASSERT_TRUE(read_region(dir, leaf, rec, top, out, top).ok());
  EXPECT_TRUE(out.bitwise_equal(extract_box(data, box, top)));
  // A region whose rows cross chunk 3 is refused, naming the leaf, the file and the bytes.
  const IndexBox bottom{{900, 10}, {1000, 20}};
  Buffer out2 = Buffer::uninitialized(DType::kFloat32, bottom.shape());
  absl::Status s = read_region(dir, leaf, rec, bottom, out2, bottom);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("[checkpoint] leaf 'params/w': file '"));
  EXPECT_THAT(s.message(), HasSubstr("s.npy' is corrupted: SHA-256 of bytes [3145728, 4194304) expected"));
  fs::remove_all(dir);
}

// write_shards on several threads gives each file the bytes and hashes a one-thread write gives, the file's
// digest is the SHA-256 of its chunk digests, and full rows are read straight into a larger destination box.
TEST(ShardIo, ParallelWritesHashLikeOneThreadAndRowsReadIntoPlace) {
  const std::string dir = (fs::temp_directory_path() / ("mcx_shard_io_par_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Buffer a = test::random_buffer(DType::kFloat32, {600, 1000}, 1);  // 2.3 MiB: 3 chunks
  const Buffer b = test::random_buffer(DType::kInt32, {7}, 2);            // one small chunk
  const Buffer c = test::random_buffer(DType::kFloat64, {300, 1000}, 3);  // 2.3 MiB
  const std::vector<ShardFile> files = {{dir + "/a.npy", &a}, {dir + "/b.npy", &b}, {dir + "/c.npy", &c}};
  absl::StatusOr<std::vector<FragmentEntry>> par = write_shards(files, 4);
  ASSERT_TRUE(par.ok()) << par.status();
  ASSERT_EQ(par->size(), 3u);
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StatusOr<FragmentEntry> one = write_shard(dir + "/one" + std::to_string(i) + ".npy", *files[i].data);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ((*par)[i].bytes, one->bytes);
    EXPECT_EQ((*par)[i].chunk_sha256, one->chunk_sha256);
    EXPECT_EQ((*par)[i].chunk_list_sha256, one->chunk_list_sha256);
    // The chunk hashes are those of the file's bytes; the digest is over the chunk digests.
    std::ifstream in(files[i].path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), one->bytes);
    std::vector<Sha256Digest> digests;
    for (size_t off = 0; off < bytes.size(); off += kChunkBytes) {
      digests.push_back(sha256(std::string_view(bytes).substr(off, kChunkBytes)));
      EXPECT_EQ(to_hex(digests.back()), one->chunk_sha256[digests.size() - 1]);
    }
    EXPECT_EQ(one->chunk_list_sha256, chunk_list_sha256(digests));
  }
  EXPECT_FALSE(write_shards(files, 2).ok());  // the files exist: O_EXCL
  // Rows 100..399 of a (whole rows) into a destination holding rows 50..449.
  const IndexBox a_box = full_box(a.dims());
  LeafRecord leaf{"a", DType::kFloat32, a.dims(), {}};
  const ShardRecord rec{a_box, "a.npy", (*par)[0].bytes, (*par)[0].chunk_list_sha256, (*par)[0].chunk_sha256, 0, 0};
  const IndexBox dst_box{{50, 0}, {450, 1000}}, region{{100, 0}, {400, 1000}};
  Buffer dst = Buffer::zeros(DType::kFloat32, dst_box.shape());
  ASSERT_TRUE(read_region(dir, leaf, rec, region, dst, dst_box).ok());
  EXPECT_TRUE(extract_box(dst, dst_box, region).bitwise_equal(extract_box(a, a_box, region)));
  EXPECT_EQ(extract_box(dst, dst_box, IndexBox{{50, 0}, {100, 1000}}).to_doubles(), std::vector<double>(50000, 0.0));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mcx::checkpoint
