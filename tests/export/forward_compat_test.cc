// Forward compatibility with a real schema change: a "future" writer whose schema appends a field to the
// Exported table (tests/export/CMakeLists.txt derives that schema from today's). Today's reader must read
// its artifacts while min_reader_version allows, and reject them, naming both versions, when the writer
// declares that the new field must not be ignored.
#include "exported_future_generated.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/export/artifact.h"
#include "tests/export/export_test_util.h"

namespace mcx::exporting {
namespace {

using ::testing::HasSubstr;

// Re-encodes today's artifact bytes with the future schema, setting the new field and the versions.
std::string as_future_writer(const std::string& bytes, uint32_t format, uint32_t min_reader) {
  std::unique_ptr<fb_future::ExportedT> t(fb_future::GetSizePrefixedExported(bytes.data())->UnPack());
  t->format_version = format;
  t->min_reader_version = min_reader;
  t->future_feature = "something today's reader does not know";
  flatbuffers::FlatBufferBuilder fbb;
  fb_future::FinishSizePrefixedExportedBuffer(fbb, fb_future::Exported::Pack(fbb, t.get()));
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

TEST(ForwardCompat, IgnorableNewFieldIsReadByTodaysReader) {
  Artifact a = testutil::mlp_artifact(3);
  std::string future = as_future_writer(value_or_throw(serialize(a)), kFormatVersion + 1, 1);
  auto r = deserialize(future);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->format_version, kFormatVersion + 1);
  EXPECT_TRUE(ir::structurally_equal(r->program, a.program));
  EXPECT_EQ(r->in_avals, a.in_avals);
  // The future field really is in the bytes (the future reader sees it).
  EXPECT_EQ(fb_future::GetSizePrefixedExported(future.data())->future_feature()->str(),
            "something today's reader does not know");
}

TEST(ForwardCompat, NonIgnorableNewFieldIsRejectedNamingBothVersions) {
  std::string future =
      as_future_writer(value_or_throw(serialize(testutil::mlp_artifact(3))), kFormatVersion + 1, kFormatVersion + 1);
  auto r = deserialize(future);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("needs a reader of format version >= ", kFormatVersion + 1)));
  EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("this reader implements format version ", kFormatVersion)));
}

TEST(ForwardCompat, FutureWriterReadsTodaysArtifacts) {
  // The backward direction for the future reader: today's bytes decode with the future schema, the new
  // field absent.
  std::string bytes = value_or_throw(serialize(testutil::mlp_artifact(2)));
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(fb_future::VerifySizePrefixedExportedBuffer(v));
  EXPECT_EQ(fb_future::GetSizePrefixedExported(bytes.data())->future_feature(), nullptr);
}

}  // namespace
}  // namespace mcx::exporting
