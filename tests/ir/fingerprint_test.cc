#include "mcx/ir/fingerprint.h"

#include <set>

#include "gtest/gtest.h"
#include "ir_test_programs.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/text.h"

namespace mcx::ir {
namespace {

using testing_programs::all_ops_program;
using testing_programs::type_of;
using Ints = std::vector<int64_t>;

Program small_program(std::string name = "loss", std::vector<std::string> constraints = {"b >= 16"}) {
  ProgramBuilder b(std::move(name), value_or_throw(SymbolicScope::create(constraints)));
  ValueId x = b.add_parameter(type_of("f32[b,784]"));
  ValueId w = b.add_parameter(type_of("f32[784,10]"));
  ValueId d = b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                              {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}}, {"lhs_contracting", Ints{1}},
                               {"rhs_contracting", Ints{0}}});
  ValueId c = b.constant(Buffer::from_vector<float>({0.5f}, {}));
  ValueId e = b.binary(OpKind::kMul, d, b.full_like(d, 2.0));
  ValueId s = b.reduce_sum(e, {0, 1});
  return std::move(b).build({b.binary(OpKind::kAdd, s, c)});
}

TEST(Fingerprint, GoldenValuePinsTheEncoding) {
  // If this changes, the canonical encoding changed: every persistent cache entry is invalidated. Bump
  // kFormatTag in fingerprint.cc deliberately and update the value. The value was cross-checked against
  // an independent Python (hashlib + struct) re-implementation of the encoding documented in
  // fingerprint.h: op kind numbers 56/0/41/24/50/22, f32 = 9, attributes sorted by name.
  EXPECT_EQ(fingerprint_hex(small_program()), "5f277364324f3b940163f2bb7754f0c1cedeffccbea5833dcf26f898092c6139");
}

TEST(Fingerprint, StableAcrossRebuildRenamingAndProgramName) {
  std::string fp = fingerprint_hex(small_program());
  EXPECT_EQ(fp.size(), 64u);
  EXPECT_EQ(fingerprint_hex(small_program()), fp);
  EXPECT_EQ(fingerprint_hex(small_program("another_name")), fp);  // the name is not part of the key
  // Round trip through the text form, with every value renamed.
  std::string text = print_program(small_program());
  for (int i = 9; i >= 0; --i) {
    std::string from = "%" + std::to_string(i);
    std::string to = "%v" + std::to_string(i) + "_renamed";
    for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
      if (pos + from.size() < text.size() && std::isdigit(static_cast<unsigned char>(text[pos + from.size()])))
        continue;
      text.replace(pos, from.size(), to);
    }
  }
  ASSERT_NE(text.find("%v2_renamed"), std::string::npos) << text;
  auto parsed = parse_program(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << text;
  EXPECT_EQ(fingerprint_hex(*parsed), fp);
  // Constraint order and spelling do not matter; their content does.
  EXPECT_EQ(fingerprint_hex(small_program("loss", {"b >= 16", "c <= 8"})),
            fingerprint_hex(small_program("loss", {"c<=8", "b>=16"})));
  EXPECT_NE(fingerprint_hex(small_program("loss", {"b >= 17"})), fp);
  EXPECT_NE(fingerprint_hex(small_program("loss", {})), fp);
  Program all = all_ops_program();
  EXPECT_EQ(fingerprint_hex(all), fingerprint_hex(value_or_throw(parse_program(print_program(all)))));
}

TEST(Fingerprint, DiffersForEveryStructuralChange) {
  Program base = small_program();
  std::vector<Program> variants;
  auto variant = [&](auto&& edit) {
    Program p = base;
    edit(p);
    variants.push_back(std::move(p));
  };
  variant([](Program&) {});
  variant([](Program& p) { p.params[0] = type_of("f64[b,784]"); });   // dtype of a parameter
  variant([](Program& p) { p.params[0] = type_of("f32[c,784]"); });   // dimension variable
  variant([](Program& p) { p.instrs.back().kind = OpKind::kSub; });    // op kind
  variant([](Program& p) { std::swap(p.instrs.back().operands[0], p.instrs.back().operands[1]); });  // operand order
  variant([](Program& p) { p.instrs[0].attrs.set("lhs_contracting", Ints{0}); });  // ints attribute
  variant([](Program& p) { p.instrs[0].attrs.set("extra", int64_t{0}); });         // extra attribute
  variant([](Program& p) { p.instrs[0].attrs.set("lhs_batch", Shape{}); });        // attribute kind
  variant([](Program& p) {  // constant data, one bit
    p.instrs[1].attrs.set("value", Buffer::from_vector<float>({0.50000006f}, {}));
  });
  variant([](Program& p) { p.instrs[1].attrs.set("value", Buffer::from_vector<double>({0.5}, {})); });
  variant([](Program& p) { p.instrs[1].attrs.set("value", Buffer::from_vector<float>({0.5f}, {1})); });
  variant([](Program& p) { p.instrs[0].type = type_of("f32[b,11]"); });  // recorded type
  variant([](Program& p) { p.results.push_back(0); });                  // results
  variant([](Program& p) { p.results = {2}; });
  variant([](Program& p) { p.params.push_back(type_of("f32[]")); });
  std::set<std::string> seen;
  for (size_t i = 0; i < variants.size(); ++i)
    EXPECT_TRUE(seen.insert(fingerprint_hex(variants[i])).second) << "variant " << i << " collides";
}

TEST(CanonicalDecode, RoundTripsEveryOpWithRegionsConstantsAndConstraints) {
  for (const Program& p : {small_program(), all_ops_program(), testing_programs::custom_rules_program(),
                           testing_programs::shard_map_program()}) {
    const std::string bytes = canonical_encoding(p);
    absl::StatusOr<Program> back = decode_canonical_encoding(bytes, "again");
    ASSERT_TRUE(back.ok()) << p.name << ": " << back.status();
    EXPECT_EQ(back->name, "again");
    EXPECT_EQ(canonical_encoding(*back), bytes) << p.name;
  }
  // Without regions (whose names are not encoded) the text is the same but for the program's name.
  Program small = small_program();
  small.name = "again";
  EXPECT_EQ(print_program(value_or_throw(decode_canonical_encoding(canonical_encoding(small), "again"))),
            print_program(small));
}

TEST(CanonicalDecode, SharedRegionsStayShared) {
  const Program p = all_ops_program();
  absl::StatusOr<Program> back = decode_canonical_encoding(canonical_encoding(p));
  ASSERT_TRUE(back.ok()) << back.status();
  // Siblings of one control-flow op hold the same region objects, so nested loops stay linear in size.
  std::set<const Program*> original, decoded;
  auto collect = [](const Program& q, std::set<const Program*>& out) {
    int with_regions = 0;
    for (const Instr& in : q.instrs)
      if (auto r = in.attrs.get_regions("regions"); r.ok() && !r->empty()) {
        ++with_regions;
        out.insert(r->front().get());
      }
    return with_regions;
  };
  EXPECT_EQ(collect(p, original), collect(*back, decoded));
  EXPECT_EQ(original.size(), decoded.size());
}

TEST(CanonicalDecode, EveryTruncationAndExtensionIsAnErrorNamingTheOffset) {
  const std::string bytes = canonical_encoding(small_program());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<Program> r = decode_canonical_encoding(bytes.substr(0, n));
    ASSERT_FALSE(r.ok()) << "truncated to " << n;
    EXPECT_NE(r.status().message().find("[decode_canonical_encoding]"), std::string::npos) << r.status();
  }
  absl::StatusOr<Program> longer = decode_canonical_encoding(bytes + "x");
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("1 bytes after the end"), std::string::npos) << longer.status();
}

TEST(CanonicalDecode, EveryFlippedByteIsAnErrorOrAVerifiedProgramNeverACrash) {
  const std::string bytes = canonical_encoding(all_ops_program());
  int errors = 0;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    absl::StatusOr<Program> r = decode_canonical_encoding(bad);
    if (!r.ok()) {
      ++errors;
    } else {
      EXPECT_TRUE(verify(*r).ok());  // a flip that still decodes (e.g. inside constant data) is a valid program
    }
  }
  EXPECT_GT(errors, 0);
  absl::StatusOr<Program> huge = decode_canonical_encoding(std::string(bytes.substr(0, 32)) + std::string(8, '\xff'));
  ASSERT_FALSE(huge.ok());
}

}  // namespace
}  // namespace mcx::ir
