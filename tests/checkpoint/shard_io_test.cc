// shard_io: a reader fetches and verifies only the chunks a region needs, so damage elsewhere in the file does
// not stop it, while a region over the damaged chunk is refused naming the byte range.
#include "mcx/checkpoint/shard_io.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
  ShardRecord rec{box, "s.npy", e.bytes, e.sha256, e.chunk_sha256, 0, 0};

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

}  // namespace
}  // namespace mcx::checkpoint
