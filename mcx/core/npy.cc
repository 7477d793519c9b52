#include "mcx/core/npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct NpyHeader {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  int64_t num_elements = 1;
};

absl::Status bad(std::string_view where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("[read_npy] ", std::string(where), ": ", what));
}

// A tiny reader for the Python dict literal of the header:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view where) : t_(text), where_(where) {}

  absl::StatusOr<NpyHeader> parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<int64_t>> shape;
    if (!eat('{')) return err("expected '{'");
    while (!eat('}')) {
      MCX_ASSIGN_OR_RETURN(std::string key, string_lit());
      if (!eat(':')) return err("expected ':' after '" + key + "'");
      if (key == "descr") {
        MCX_ASSIGN_OR_RETURN(descr, string_lit());
      } else if (key == "fortran_order") {
        MCX_ASSIGN_OR_RETURN(fortran, bool_lit());
      } else if (key == "shape") {
        MCX_ASSIGN_OR_RETURN(shape, tuple_lit());
      } else {
        return err("unexpected header key '" + key + "'");
      }
      if (!eat(',')) {
        if (!eat('}')) return err("expected ',' or '}'");
        break;
      }
    }
    space();
    if (pos_ != t_.size()) return err("unexpected text after the header dict");
    if (!descr || !fortran || !shape) return err("header lacks one of 'descr', 'fortran_order', 'shape'");
    if (*fortran) {
      return bad(where_, "Fortran-order arrays are not supported (expected fortran_order False; save a "
                         "C-contiguous array, e.g. np.ascontiguousarray)");
    }
    NpyHeader h;
    MCX_ASSIGN_OR_RETURN(h.dtype, dtype_from_descr(*descr));
    h.dims = *shape;
    for (int64_t d : h.dims) {
      if (d < 0) return err("negative dimension in shape");
      if (d != 0 && h.num_elements > (int64_t{1} << 48) / d) return err("shape has too many elements");
      h.num_elements *= d;
    }
    return h;
  }

 private:
  absl::Status err(const std::string& what) const {
    return bad(where_, absl::StrCat("malformed header (", what, " at offset ", pos_, " of '", std::string(t_),
                                    "')"));
  }
  void space() {
    while (pos_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    space();
    if (pos_ < t_.size() && t_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::StatusOr<std::string> string_lit() {
    space();
    if (pos_ >= t_.size() || (t_[pos_] != '\'' && t_[pos_] != '"')) return err("expected a string");
    const char q = t_[pos_++];
    const size_t end = t_.find(q, pos_);
    if (end == std::string_view::npos) return err("unterminated string");
    std::string s(t_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  absl::StatusOr<bool> bool_lit() {
    space();
    if (t_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (t_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return err("expected True or False");
  }
  absl::StatusOr<std::vector<int64_t>> tuple_lit() {
    std::vector<int64_t> v;
    if (!eat('(')) return err("expected '(' for the shape");
    while (!eat(')')) {
      space();
      size_t start = pos_;
      while (pos_ < t_.size() && (std::isdigit(static_cast<unsigned char>(t_[pos_])) || t_[pos_] == '-')) ++pos_;
      if (start == pos_) return err("expected an integer in the shape");
      errno = 0;
      const std::string num(t_.substr(start, pos_ - start));
      char* endp = nullptr;
      const long long x = std::strtoll(num.c_str(), &endp, 10);
      if (errno != 0 || *endp != '\0') return err("bad integer '" + num + "' in the shape");
      v.push_back(x);
      if (eat('L')) {}  // Python 2 long suffix
      if (!eat(',')) {
        if (!eat(')')) return err("expected ',' or ')' in the shape");
        break;
      }
    }
    return v;
  }
  absl::StatusOr<DType> dtype_from_descr(const std::string& d) const {
    struct Entry { const char* code; DType dtype; };
    static const Entry kTable[] = {
        {"b1", DType::kBool},   {"i1", DType::kInt8},    {"i2", DType::kInt16},   {"i4", DType::kInt32},
        {"i8", DType::kInt64},  {"u1", DType::kUInt8},   {"u4", DType::kUInt32},  {"f2", DType::kFloat16},
        {"f4", DType::kFloat32}, {"f8", DType::kFloat64},
    };
    if (d.size() == 3 && (d[0] == '<' || d[0] == '|' || d[0] == '=' || d[0] == '>')) {
      for (const Entry& e : kTable) {
        if (d.substr(1) != e.code) continue;
        if (d[0] == '>' && dtype_size(e.dtype) > 1) {
          return bad(where_, absl::StrCat("big-endian dtype '", d, "' is not supported (expected little-endian '<",
                                          e.code, "')"));
        }
        return e.dtype;
      }
    }
    return bad(where_, absl::StrCat("unsupported dtype '", d,
                                    "' (supported: |b1 |i1 <i2 <i4 <i8 |u1 <u4 <f2 <f4 <f8)"));
  }

  std::string_view t_;
  std::string_view where_;
  size_t pos_ = 0;
};

// Parses the fixed prefix (magic, version, header length). Returns {header_len, prefix_len}.
absl::StatusOr<std::pair<size_t, size_t>> parse_prefix(std::span<const uint8_t> p, std::string_view where) {
  if (p.size() < 10 || std::memcmp(p.data(), kMagic, kMagicLen) != 0) {
    return bad(where, "not a .npy file (expected the magic string \\x93NUMPY at the start)");
  }
  const int major = p[6];
  const int minor = p[7];
  if (major == 1) return std::pair<size_t, size_t>(p[8] | (p[9] << 8), 10);
  if (major == 2 || major == 3) {
    if (p.size() < 12) return absl::DataLossError(absl::StrCat("[read_npy] ", std::string(where), ": truncated header"));
    const size_t len = static_cast<size_t>(p[8]) | (static_cast<size_t>(p[9]) << 8) |
                       (static_cast<size_t>(p[10]) << 16) | (static_cast<size_t>(p[11]) << 24);
    return std::pair<size_t, size_t>(len, 12);
  }
  return bad(where, absl::StrCat("unsupported .npy format version ", major, ".", minor,
                                 " (expected 1.0, 2.0 or 3.0)"));
}

absl::StatusOr<NpyHeader> parse_header_text(std::span<const uint8_t> header, std::string_view where) {
  std::string_view text(reinterpret_cast<const char*>(header.data()), header.size());
  return HeaderParser(text, where).parse();
}

absl::Status check_header_len(size_t len, std::string_view where) {
  if (len > kMaxNpyHeaderBytes) {
    return bad(where, absl::StrCat("header of ", len, " bytes exceeds the limit of ", kMaxNpyHeaderBytes,
                                   " bytes"));
  }
  return absl::OkStatus();
}

absl::Status size_mismatch(std::string_view where, size_t expected, size_t found) {
  if (found < expected) {
    return absl::DataLossError(absl::StrCat("[read_npy] ", std::string(where), ": truncated data: expected ",
                                            expected, " bytes after the header, found ", found));
  }
  return bad(where, absl::StrCat("expected ", expected, " data bytes after the header, found ", found,
                                 " (trailing bytes)"));
}

absl::Status io_error(std::string_view api, const std::string& path, const char* what) {
  const int e = errno;
  const std::string msg = absl::StrCat("[", std::string(api), "] cannot ", what, " '", path, "': ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::StatusOr<std::string> npy_descr(DType dtype) {
  switch (dtype) {
    case DType::kBool: return std::string("|b1");
    case DType::kInt8: return std::string("|i1");
    case DType::kInt16: return std::string("<i2");
    case DType::kInt32: return std::string("<i4");
    case DType::kInt64: return std::string("<i8");
    case DType::kUInt8: return std::string("|u1");
    case DType::kUInt32: return std::string("<u4");
    case DType::kFloat16: return std::string("<f2");
    case DType::kFloat32: return std::string("<f4");
    case DType::kFloat64: return std::string("<f8");
    case DType::kBFloat16: break;
  }
  return absl::InvalidArgumentError(
      "[write_npy] bfloat16 has no .npy dtype (numpy has no bfloat16); convert the buffer to float32 first");
}

namespace {
struct Layout {
  NpyHeader header;
  size_t data_offset = 0;
};

// Validates the prefix, header and data size of a file of total_size bytes whose first (up to) 12
// bytes are prefix; read_header(offset, len) fetches the header text.
absl::StatusOr<Layout> parse_layout(
    std::span<const uint8_t> prefix, size_t total_size, std::string_view where,
    const std::function<absl::StatusOr<std::vector<uint8_t>>(size_t, size_t)>& read_header) {
  MCX_ASSIGN_OR_RETURN(auto lens, parse_prefix(prefix, where));
  const auto [header_len, prefix_len] = lens;
  MCX_RETURN_IF_ERROR(check_header_len(header_len, where));
  if (total_size < prefix_len + header_len) {
    return absl::DataLossError(absl::StrCat("[read_npy] ", std::string(where), ": truncated header: expected ",
                                            header_len, " header bytes, found ", total_size - prefix_len));
  }
  MCX_ASSIGN_OR_RETURN(std::vector<uint8_t> text, read_header(prefix_len, header_len));
  Layout layout;
  MCX_ASSIGN_OR_RETURN(layout.header, parse_header_text(text, where));
  layout.data_offset = prefix_len + header_len;
  const size_t data_len = total_size - layout.data_offset;
  const size_t expected = static_cast<size_t>(layout.header.num_elements) * dtype_size(layout.header.dtype);
  if (data_len != expected) return size_mismatch(where, expected, data_len);
  return layout;
}
}  // namespace

absl::StatusOr<Buffer> parse_npy(std::span<const uint8_t> bytes) {
  MCX_ASSIGN_OR_RETURN(NpyLayout layout, parse_npy_layout(bytes, bytes.size(), "<memory>"));
  Buffer b = Buffer::uninitialized(layout.dtype, layout.dims);
  if (b.nbytes() > 0) std::memcpy(b.mutable_data(), bytes.data() + layout.data_offset, b.nbytes());
  return b;
}

absl::StatusOr<Buffer> read_npy(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("read_npy", path, "open");
  in.seekg(0, std::ios::end);
  const size_t file_size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  uint8_t prefix[12] = {};
  const size_t prefix_size = std::min<size_t>(12, file_size);
  in.read(reinterpret_cast<char*>(prefix), static_cast<std::streamsize>(prefix_size));
  if (!in) return io_error("read_npy", path, "read");
  MCX_ASSIGN_OR_RETURN(
      Layout layout,
      parse_layout(std::span<const uint8_t>(prefix, prefix_size), file_size, path,
                   [&](size_t off, size_t len) -> absl::StatusOr<std::vector<uint8_t>> {
                     std::vector<uint8_t> h(len);
                     in.seekg(static_cast<std::streamoff>(off));
                     in.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(len));
                     if (!in) return io_error("read_npy", path, "read the header of");
                     return h;
                   }));
  Buffer b = Buffer::uninitialized(layout.header.dtype, layout.header.dims);
  if (b.nbytes() > 0) {
    in.seekg(static_cast<std::streamoff>(layout.data_offset));
    in.read(static_cast<char*>(b.mutable_data()), static_cast<std::streamsize>(b.nbytes()));
    if (!in) return io_error("read_npy", path, "read the data of");
  }
  return b;
}

absl::StatusOr<std::string> npy_header(DType dtype, std::span<const int64_t> dims) {
  MCX_ASSIGN_OR_RETURN(std::string descr, npy_descr(dtype));
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    absl::StrAppend(&shape, i ? ", " : "", dims[i]);
  }
  if (dims.size() == 1) shape += ",";
  shape += ")";
  std::string dict = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces and a final newline so that data starts at a multiple of 64 bytes (as numpy does).
  size_t prefix_len = 10;
  if (dict.size() + 1 + prefix_len > 65535) prefix_len = 12;
  const size_t total = ((prefix_len + dict.size() + 1 + 63) / 64) * 64;
  const size_t header_len = total - prefix_len;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(prefix_len == 10 ? 1 : 2);
  out += '\0';
  for (size_t i = 0; i < prefix_len - 8; ++i) out += static_cast<char>((header_len >> (8 * i)) & 0xff);
  out += dict;
  return out;
}

absl::StatusOr<std::string> serialize_npy(const Buffer& buffer) {
  MCX_ASSIGN_OR_RETURN(std::string out, npy_header(buffer.dtype(), buffer.dims()));
  out.append(static_cast<const char*>(buffer.data()), buffer.nbytes());
  return out;
}

absl::StatusOr<NpyLayout> parse_npy_layout(std::span<const uint8_t> prefix, size_t file_size, std::string_view where) {
  MCX_ASSIGN_OR_RETURN(
      Layout layout,
      parse_layout(prefix.first(std::min<size_t>(12, prefix.size())), file_size, where,
                   [&](size_t off, size_t len) -> absl::StatusOr<std::vector<uint8_t>> {
                     if (off + len > prefix.size()) {
                       return absl::DataLossError(absl::StrCat("[read_npy] ", std::string(where),
                                                               ": truncated header: expected ", off + len,
                                                               " bytes, found ", prefix.size()));
                     }
                     return std::vector<uint8_t>(prefix.begin() + off, prefix.begin() + off + len);
                   }));
  NpyLayout out;
  out.dtype = layout.header.dtype;
  out.dims = layout.header.dims;
  out.data_offset = layout.data_offset;
  return out;
}

absl::Status write_npy(const std::string& path, const Buffer& buffer) {
  auto bytes = serialize_npy(buffer);
  if (!bytes.ok()) return bytes.status();
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("write_npy", path, "open");
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return io_error("write_npy", path, "write");
  return absl::OkStatus();
}

}  // namespace mcx
