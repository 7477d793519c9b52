// mcx/data sources: IDX (raw, gzip, multi-byte), .npy (file, shard directory), CSV, and every bad-data error
// naming the file and the record.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/core/npy.h"
#include "mcx/data/csv_source.h"
#include "mcx/data/idx_source.h"
#include "mcx/data/npy_source.h"

namespace mcx::data {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class Sources : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mcx_data_sources_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string write_gz(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return p;
  }
  fs::path dir_;
};

// u8 IDX with n examples of rows x cols, example i filled with value i.
std::string idx_u8(int n, int rows, int cols) {
  std::string s = {0, 0, 0x08, 3};
  for (int d : {n, rows, cols}) {
    s += static_cast<char>(d >> 24); s += static_cast<char>(d >> 16); s += static_cast<char>(d >> 8); s += static_cast<char>(d);
  }
  for (int i = 0; i < n; ++i) s += std::string(rows * cols, static_cast<char>(i));
  return s;
}

std::vector<uint8_t> read_u8(const Source& s, int64_t i) {
  std::vector<std::byte> out(s.spec().nbytes());
  EXPECT_TRUE(s.read(i, out).ok());
  std::vector<uint8_t> v(out.size());
  std::memcpy(v.data(), out.data(), out.size());
  return v;
}

TEST_F(Sources, IdxRawAndGzipReadTheSameExamples) {
  const std::string bytes = idx_u8(5, 3, 4);
  for (const std::string& p : {write("a.idx", bytes), write_gz("a.idx.gz", bytes)}) {
    SourcePtr s = open_idx(p);
    EXPECT_EQ(s->size(), 5);
    EXPECT_EQ(s->spec(), (ExampleSpec{DType::kUInt8, {3, 4}}));
    EXPECT_EQ(read_u8(*s, 3), std::vector<uint8_t>(12, 3));
    std::vector<std::byte> two(24);
    std::vector<int64_t> idx = {4, 1};
    ASSERT_TRUE(s->read_batch(idx, two).ok());
    EXPECT_EQ(static_cast<int>(two[0]), 4);
    EXPECT_EQ(static_cast<int>(two[12]), 1);
    EXPECT_THAT(std::string(s->read(5, two).message()), HasSubstr("record 5 out of range"));
  }
}

TEST_F(Sources, IdxBigEndianInt32IsConverted) {
  std::string s = {0, 0, 0x0C, 1, 0, 0, 0, 2};
  s += std::string{0, 0, 1, 2};
  s += std::string{'\xff', '\xff', '\xff', '\xfe'};
  SourcePtr src = open_idx(write("i.idx", s));
  std::vector<std::byte> out(4);
  ASSERT_TRUE(src->read(0, out).ok());
  int32_t v;
  std::memcpy(&v, out.data(), 4);
  EXPECT_EQ(v, 258);
  ASSERT_TRUE(src->read(1, out).ok());
  std::memcpy(&v, out.data(), 4);
  EXPECT_EQ(v, -2);
}

TEST_F(Sources, IdxWrongMagicNamesTheFile) {
  const std::string p = write("bad.idx", std::string("\x08\x03\x00\x00", 4) + idx_u8(1, 1, 1));
  absl::StatusOr<SourcePtr> s = load_idx(p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(p));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("not an IDX file: expected the magic 00 00 <type> <ndims>, found 08 03 00 00"));
}

TEST_F(Sources, IdxTruncatedDataNamesTheRecord) {
  std::string bytes = idx_u8(4, 2, 2);
  bytes.resize(bytes.size() - 3);
  absl::StatusOr<SourcePtr> s = load_idx(write("t.idx", bytes));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("record 3 of 4 is incomplete"));
}

TEST_F(Sources, TruncatedGzipIsDataLossNamingTheFile) {
  const std::string p = write_gz("full.gz", idx_u8(200, 28, 28));
  std::string gz;
  {
    std::ifstream in(p, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = write("cut.idx.gz", gz.substr(0, gz.size() / 2));
  absl::StatusOr<SourcePtr> s = load_idx(cut);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(cut + ": truncated gzip stream"));
  std::string corrupt = gz;
  for (size_t i = 20; i < 60 && i < corrupt.size(); ++i) corrupt[i] = static_cast<char>(0xff);
  s = load_idx(write("corrupt.idx.gz", corrupt));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("gzip stream"));
}

TEST_F(Sources, MissingFileIsNotFound) {
  absl::StatusOr<SourcePtr> s = load_idx((dir_ / "nope").string());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THROW(open_idx((dir_ / "nope").string()), mcx::Error);
}

TEST_F(Sources, NpyFileAndShardDirectory) {
  fs::create_directories(dir_ / "shards");
  std::vector<float> a = {0, 1, 2, 3, 4, 5}, b = {6, 7};
  ASSERT_TRUE(write_npy((dir_ / "shards" / "00.npy").string(), Buffer::from_vector<float>(a, {3, 2})).ok());
  ASSERT_TRUE(write_npy((dir_ / "shards" / "01.npy").string(), Buffer::from_vector<float>(b, {1, 2})).ok());
  SourcePtr one = open_npy((dir_ / "shards" / "00.npy").string());
  EXPECT_EQ(one->size(), 3);
  SourcePtr all = open_npy_dir((dir_ / "shards").string());
  EXPECT_EQ(all->size(), 4);
  EXPECT_EQ(all->spec(), (ExampleSpec{DType::kFloat32, {2}}));
  std::vector<std::byte> out(8);
  ASSERT_TRUE(all->read(3, out).ok());
  float v[2];
  std::memcpy(v, out.data(), 8);
  EXPECT_EQ(v[0], 6);
  EXPECT_EQ(v[1], 7);
  ASSERT_TRUE(write_npy((dir_ / "shards" / "02.npy").string(), Buffer::from_vector<int32_t>({1, 2}, {1, 2})).ok());
  absl::StatusOr<SourcePtr> mixed = load_npy_dir((dir_ / "shards").string());
  ASSERT_FALSE(mixed.ok());
  EXPECT_THAT(std::string(mixed.status().message()), HasSubstr("02.npy: expected f32[2] examples like"));
  fs::create_directories(dir_ / "empty");
  EXPECT_THAT(std::string(load_npy_dir((dir_ / "empty").string()).status().message()), HasSubstr("found none"));
}

TEST_F(Sources, NpyTruncatedNamesTheFile) {
  auto bytes = serialize_npy(Buffer::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  ASSERT_TRUE(bytes.ok());
  const std::string p = write("t.npy", bytes->substr(0, bytes->size() - 4));
  absl::StatusOr<SourcePtr> s = load_npy(p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(p));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("truncated"));
}

TEST_F(Sources, CsvFeaturesAndLabelsAndRowErrors) {
  CsvSources c = open_csv(write_gz("d.csv.gz", "1,2,3,7\n4,5,6,8\n"));
  EXPECT_EQ(c.features->size(), 2);
  EXPECT_EQ(c.features->spec(), (ExampleSpec{DType::kFloat32, {3}}));
  std::vector<std::byte> l(4);
  ASSERT_TRUE(c.labels->read(1, l).ok());
  int32_t label;
  std::memcpy(&label, l.data(), 4);
  EXPECT_EQ(label, 8);
  absl::StatusOr<CsvSources> bad = load_csv(write("r.csv", "1,2,3,7\n1,2,3,4\n4,5,6\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("r.csv: line 3: expected 4 columns (as the first row), found 3"));
  bad = load_csv(write("n.csv", "1,2,x,7\n"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 1: column 3: expected a number, found 'x'"));
  bad = load_csv(write("l.csv", "1,2,3,7.5\n"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("expected an integer label"));
}

TEST_F(Sources, DigitsCsvWhenFetched) {
  const std::string p = std::string(MCX_SOURCE_DIR) + "/data/digits.csv.gz";
  if (!fs::exists(p)) GTEST_SKIP() << p << " is absent (bash scripts/fetch-digits.sh fetches it)";
  CsvSources c = open_csv(p);
  EXPECT_EQ(c.features->size(), 1797);
  EXPECT_EQ(c.features->spec().dims, std::vector<int64_t>{64});
}

TEST_F(Sources, FashionMnistWhenFetched) {
  const std::string d = std::string(MCX_SOURCE_DIR) + "/data/fashion-mnist";
  if (!fs::exists(d + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << d << " is absent (bash scripts/fetch-fashion-mnist.sh fetches it)";
  }
  SourcePtr images = open_idx(d + "/train-images-idx3-ubyte.gz");
  SourcePtr labels = open_idx(d + "/train-labels-idx1-ubyte.gz");
  EXPECT_EQ(images->size(), 60000);
  EXPECT_EQ(labels->size(), 60000);
  EXPECT_EQ(images->spec(), (ExampleSpec{DType::kUInt8, {28, 28}}));
  EXPECT_EQ(open_idx(d + "/t10k-images-idx3-ubyte.gz")->size(), 10000);
}

}  // namespace
}  // namespace mcx::data
