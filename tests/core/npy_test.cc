#include "mcx/core/npy.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/python_helper.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

// Value i of the test pattern for a dtype; the Python side computes the same formula with numpy.
double pattern(DType t, int64_t i) {
  switch (t) {
    case DType::kBool: return i % 3 == 0 ? 1 : 0;
    case DType::kInt8: return static_cast<double>((i * 37) % 256 - 128);
    case DType::kInt16: return static_cast<double>((i * 1237) % 65536 - 32768);
    case DType::kInt32: return static_cast<double>(i * 100003 - 7);
    case DType::kInt64: return static_cast<double>(i * 1000000007LL - 3);
    case DType::kUInt8: return static_cast<double>((i * 37) % 256);
    case DType::kUInt32: return static_cast<double>(i * 100003);
    default: return static_cast<double>(i) * 0.25 - 3.5;  // exact in f16/f32/f64 for small i
  }
}

const char* kPythonPattern = R"(
import sys, numpy as np
def pattern(code, n):
    i = np.arange(n, dtype=np.int64)
    if code == 'b1': return (i % 3 == 0)
    if code == 'i1': return ((i * 37) % 256 - 128).astype('i1')
    if code == 'i2': return ((i * 1237) % 65536 - 32768).astype('<i2')
    if code == 'i4': return (i * 100003 - 7).astype('<i4')
    if code == 'i8': return (i * 1000000007 - 3).astype('<i8')
    if code == 'u1': return ((i * 37) % 256).astype('u1')
    if code == 'u4': return (i * 100003).astype('<u4')
    return (i * 0.25 - 3.5).astype('<' + code)
CASES = [('b1', (2, 3)), ('i1', (7,)), ('i2', (3, 2, 2)), ('i4', (4, 5)), ('i8', (6,)), ('u1', (0, 3)),
         ('u4', ()), ('f2', (5, 1)), ('f4', (2, 3, 4)), ('f8', (9,))]
)";

struct Case {
  const char* code;
  DType dtype;
  std::vector<int64_t> dims;
};
const std::vector<Case> kCases = {
    {"b1", DType::kBool, {2, 3}},   {"i1", DType::kInt8, {7}},         {"i2", DType::kInt16, {3, 2, 2}},
    {"i4", DType::kInt32, {4, 5}},  {"i8", DType::kInt64, {6}},        {"u1", DType::kUInt8, {0, 3}},
    {"u4", DType::kUInt32, {}},     {"f2", DType::kFloat16, {5, 1}},   {"f4", DType::kFloat32, {2, 3, 4}},
    {"f8", DType::kFloat64, {9}},
};

Buffer make_pattern(DType t, const std::vector<int64_t>& dims) {
  Buffer b = Buffer::zeros(t, dims);
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
        b.mutable_data<T>()[i] = T(static_cast<float>(pattern(t, i)));
      } else {
        b.mutable_data<T>()[i] = static_cast<T>(pattern(t, i));
      }
    }
  });
  return b;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(NpyTest, ReadsFilesWrittenByNumpy) {
  if (!testing::have_numpy()) GTEST_SKIP() << "numpy not available";
  testing::TempDir dir;
  ASSERT_EQ(testing::run_python(dir, std::string(kPythonPattern) + R"(
d = sys.argv[1]
for code, shape in CASES:
    n = int(np.prod(shape))
    np.save(d + '/' + code + '.npy', pattern(code, n).reshape(shape))
    with open(d + '/' + code + '_v2.npy', 'wb') as f:
        np.lib.format.write_array(f, pattern(code, n).reshape(shape), version=(2, 0))
)"),
            0);
  for (const Case& c : kCases) {
    for (const char* suffix : {"", "_v2"}) {
      SCOPED_TRACE(std::string(c.code) + suffix);
      auto b = read_npy(dir.file(std::string(c.code) + suffix + ".npy"));
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->dtype(), c.dtype);
      EXPECT_EQ(b->dims(), c.dims);
      const auto values = b->to_doubles();
      for (int64_t i = 0; i < b->num_elements(); ++i) ASSERT_EQ(values[i], pattern(c.dtype, i)) << i;
      // Byte-identical to what we write (numpy 1.24 pads v1 headers to 64 bytes like we do).
      if (std::string(suffix).empty()) {
        EXPECT_EQ(*serialize_npy(*b), slurp(dir.file(std::string(c.code) + ".npy")));
      }
      // The in-memory parser agrees with the file reader.
      const std::string bytes = slurp(dir.file(std::string(c.code) + suffix + ".npy"));
      auto m = parse_npy(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_TRUE(m->bitwise_equal(*b));
    }
  }
}

TEST(NpyTest, NumpyReadsFilesWeWrite) {
  if (!testing::have_numpy()) GTEST_SKIP() << "numpy not available";
  testing::TempDir dir;
  for (const Case& c : kCases) {
    ASSERT_TRUE(write_npy(dir.file(std::string(c.code) + ".npy"), make_pattern(c.dtype, c.dims)).ok());
  }
  ASSERT_EQ(testing::run_python(dir, std::string(kPythonPattern) + R"(
d = sys.argv[1]
for code, shape in CASES:
    a = np.load(d + '/' + code + '.npy')
    want = pattern(code, int(np.prod(shape))).reshape(shape)
    assert a.dtype == want.dtype, (code, a.dtype, want.dtype)
    assert a.shape == tuple(shape), (code, a.shape, shape)
    assert a.flags['C_CONTIGUOUS']
    assert np.array_equal(a, want), (code, a, want)
print('numpy verified', len(CASES), 'files')
)"),
            0);
}

TEST(NpyTest, RoundTripInProcess) {
  testing::TempDir dir;
  for (const Case& c : kCases) {
    const Buffer b = make_pattern(c.dtype, c.dims);
    ASSERT_TRUE(write_npy(dir.file("x.npy"), b).ok());
    auto back = read_npy(dir.file("x.npy"));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->bitwise_equal(b)) << c.code;
    EXPECT_EQ(slurp(dir.file("x.npy")).size() % 64, b.nbytes() % 64);  // data starts at a 64-byte boundary
  }
}

TEST(NpyTest, BFloat16IsRejected) {
  const Buffer b = Buffer::zeros(DType::kBFloat16, {2});
  testing::TempDir dir;
  const absl::Status s = write_npy(dir.file("bf.npy"), b);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bfloat16 has no .npy dtype"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("bf.npy")));
}

absl::Status parse_status(const std::string& bytes) {
  return parse_npy(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())).status();
}

std::string with_header(const std::string& dict, const std::string& data, int version = 1) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(version);
  out += '\0';
  const size_t len = dict.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (version >= 2) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  return out + dict + data;
}

TEST(NpyTest, MalformedInputs) {
  const std::string good_dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n";
  const std::string data(8, '\1');
  ASSERT_TRUE(parse_status(with_header(good_dict, data)).ok());
  struct Bad {
    std::string bytes;
    absl::StatusCode code;
    const char* text;
  };
  const Bad cases[] = {
      {"PK\3\4 not numpy", absl::StatusCode::kInvalidArgument, "magic"},
      {"", absl::StatusCode::kInvalidArgument, "magic"},
      {with_header(good_dict, data, 9), absl::StatusCode::kInvalidArgument, "version 9.0"},
      {with_header(good_dict, data.substr(0, 5)), absl::StatusCode::kDataLoss, "expected 8 bytes after the header, found 5"},
      {with_header(good_dict, data + "xx"), absl::StatusCode::kInvalidArgument, "trailing"},
      {with_header(good_dict, "").substr(0, 30), absl::StatusCode::kDataLoss, "truncated header"},
      {with_header("{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }", data), absl::StatusCode::kInvalidArgument, "Fortran"},
      {with_header("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", data), absl::StatusCode::kInvalidArgument, "big-endian"},
      {with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data), absl::StatusCode::kInvalidArgument, "unsupported dtype '<c8'"},
      {with_header("{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }", data), absl::StatusCode::kInvalidArgument, "unsupported dtype '<u8'"},
      {with_header("{'descr': '<i4', 'shape': (2,), }", data), absl::StatusCode::kInvalidArgument, "lacks"},
      {with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data), absl::StatusCode::kInvalidArgument, "unexpected header key 'x'"},
      {with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (-2,), }", data), absl::StatusCode::kInvalidArgument, "negative"},
      {with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (2, }", data), absl::StatusCode::kInvalidArgument, "malformed header"},
      {with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }", data), absl::StatusCode::kInvalidArgument, "too many elements"},
      {with_header(std::string(70000, ' '), data, 2), absl::StatusCode::kInvalidArgument, "exceeds the limit"},
  };
  for (const Bad& c : cases) {
    const absl::Status s = parse_status(c.bytes);
    EXPECT_EQ(s.code(), c.code) << c.text << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.text));
  }
  // A huge declared header in a tiny file is rejected before anything is allocated or read.
  std::string huge = with_header("", "", 2);
  huge[8] = huge[9] = huge[10] = '\xff';
  huge[11] = '\x7f';
  EXPECT_THAT(std::string(parse_status(huge).message()), HasSubstr("exceeds the limit"));
}

TEST(NpyTest, FileErrors) {
  testing::TempDir dir;
  auto missing = read_npy(dir.file("missing.npy"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("missing.npy"));
  std::ofstream(dir.file("trunc.npy"), std::ios::binary)
      << with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }\n", std::string(16, '\0'));
  auto trunc = read_npy(dir.file("trunc.npy"));
  ASSERT_FALSE(trunc.ok());
  EXPECT_EQ(trunc.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(trunc.status().message()), HasSubstr("trunc.npy: truncated data: expected 32"));
  const absl::Status w = write_npy(dir.file("no/such/dir/x.npy"), Buffer::zeros(DType::kFloat32, {1}));
  EXPECT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.message()), HasSubstr("[write_npy]"));
}

TEST(NpyTest, RejectsNumpyFortranAndBigEndianFiles) {
  if (!testing::have_numpy()) GTEST_SKIP() << "numpy not available";
  testing::TempDir dir;
  ASSERT_EQ(testing::run_python(dir, R"(
import sys, numpy as np
d = sys.argv[1]
np.save(d + '/fortran.npy', np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3)))
np.save(d + '/big_endian.npy', np.arange(3, dtype='>i4'))
)"),
            0);
  auto f = read_npy(dir.file("fortran.npy"));
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("Fortran-order"));
  auto be = read_npy(dir.file("big_endian.npy"));
  ASSERT_FALSE(be.ok());
  EXPECT_THAT(std::string(be.status().message()), HasSubstr("big-endian dtype '>i4'"));
}

}  // namespace
}  // namespace mcx
