#include <cstdint>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/buffer.h"
#include "mcx/core/error.h"
#include "mcx/core/shape.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

TEST(ShapeTest, ParseAndPrint) {
  auto s = parse_shape("b, 2*b + 1, c // 2");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[1], 2 * DimExpr::var("b") + 1);
  EXPECT_EQ(shape_to_string(*s), "[b,2*b + 1,c // 2]");
  EXPECT_EQ(*parse_shape(shape_to_string(*s)), *s);
  auto m = parse_shape("[max(b, 16), min(b, c), 784]");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->size(), 3u);
  EXPECT_EQ(shape_to_string(*m), "[max(b, 16),min(b, c),784]");
  EXPECT_EQ(*parse_shape(shape_to_string(*m)), *m);
  EXPECT_TRUE(parse_shape("[]")->empty());
  EXPECT_TRUE(parse_shape("")->empty());
  EXPECT_EQ(shape_to_string({}), "[]");
}

TEST(ShapeTest, ParseErrors) {
  auto s = parse_shape("b, , 3");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("dimension 1 is empty"));
  s = parse_shape("b, 2*+");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("bad dimension 1 '2*+'"));
  s = parse_shape("[b, 3");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("']'"));
  EXPECT_THROW(symbolic_shape("b,,"), InvalidArgument);
  EXPECT_EQ(symbolic_shape("b, 784").size(), 2u);
}

TEST(ShapeTest, ConcreteHelpers) {
  const Shape c = concrete_shape({2, 3, 4});
  EXPECT_TRUE(is_static(c));
  EXPECT_EQ(*to_concrete(c), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(num_elements(c), DimExpr(24));
  const Shape s = symbolic_shape("b, 3, c*b");
  EXPECT_FALSE(is_static(s));
  auto bad = to_concrete(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("dimension 0 is symbolic 'b'"));
  EXPECT_EQ(num_elements(s), *DimExpr::parse("3*b^2*c"));
  EXPECT_EQ(shape_variables(symbolic_shape("c, b // a, c + b")), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(num_elements({}), DimExpr(1));
}

TEST(ShapeTest, AbstractValue) {
  auto av = parse_abstract_value("f32[b,784]");
  ASSERT_TRUE(av.ok()) << av.status();
  EXPECT_EQ(av->dtype, DType::kFloat32);
  EXPECT_EQ(av->rank(), 2);
  EXPECT_EQ(av->to_string(), "f32[b,784]");
  EXPECT_EQ(*parse_abstract_value("bf16[]"), (AbstractValue{DType::kBFloat16, {}}));
  EXPECT_EQ(parse_abstract_value("int32[2, max(b, 3)]")->to_string(), "i32[2,max(b, 3)]");
  EXPECT_NE(*parse_abstract_value("f32[2]"), *parse_abstract_value("f64[2]"));
  EXPECT_FALSE(parse_abstract_value("f32").ok());
  auto bad = parse_abstract_value("q7[2]");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'q7'"));
}

TEST(BufferTest, ZerosAlignmentAndMetadata) {
  for (DType t : {DType::kBool, DType::kInt8, DType::kFloat16, DType::kFloat64}) {
    Buffer b = Buffer::zeros(t, {3, 5});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    EXPECT_EQ(b.num_elements(), 15);
    EXPECT_EQ(b.nbytes(), 15u * dtype_size(t));
    EXPECT_EQ(b.rank(), 2);
    for (double v : b.to_doubles()) EXPECT_EQ(v, 0.0);
  }
  Buffer empty = Buffer::zeros(DType::kFloat32, {0, 4});
  EXPECT_EQ(empty.num_elements(), 0);
  EXPECT_TRUE(empty.valid());
  EXPECT_EQ(empty.to_string(), "f32[0,4]{}");
  Buffer s = Buffer::scalar<int32_t>(-7);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.element_as_double(0), -7.0);
  EXPECT_EQ(s.abstract_value().to_string(), "i32[]");
}

TEST(BufferTest, ConversionsAndPrinting) {
  Buffer f = Buffer::from_vector<float>({1, 2.5f, -3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f.to_string(), "f32[2,3]{1, 2.5, -3, 4, 5, 6}");
  EXPECT_EQ(f.to_doubles(), (std::vector<double>{1, 2.5, -3, 4, 5, 6}));
  Buffer h = Buffer::from_vector<float16_t>({float16_t(0.5f), float16_t(-2.0f)}, {2});
  EXPECT_EQ(h.to_doubles(), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(h.to_string(), "f16[2]{0.5, -2}");
  Buffer bf = Buffer::from_vector<bfloat16_t>({bfloat16_t(3.0f)}, {1});
  EXPECT_EQ(bf.element_as_double(0), 3.0);
  Buffer u = Buffer::from_vector<uint8_t>({200, 7}, {2});
  EXPECT_EQ(u.to_string(), "u8[2]{200, 7}");
  Buffer bl = Buffer::from_vector<bool>({true, false}, {2});
  EXPECT_EQ(bl.to_string(), "bool[2]{true, false}");
  EXPECT_EQ(Buffer::scalar<double>(0.1).to_string(), "f64[]{0.1}");
  Buffer big = Buffer::zeros(DType::kInt32, {100});
  for (int i = 0; i < 100; ++i) big.mutable_data<int32_t>()[i] = i;
  EXPECT_EQ(big.to_string(4), "i32[100]{0, 1, ..., 98, 99}");
  EXPECT_EQ(big.to_string(3), "i32[100]{0, 1, ..., 99}");
  EXPECT_EQ(big.to_string(), big.to_string(64));
  EXPECT_THAT(big.to_string(), HasSubstr("31, ..., 68"));
}

TEST(BufferTest, CopyReshapeAndEquality) {
  Buffer a = Buffer::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Buffer r = a.reshaped({3, 2});
  EXPECT_EQ(r.data(), a.data());  // shared storage
  EXPECT_EQ(r.dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_FALSE(r.bitwise_equal(a));  // dims differ
  Buffer c = a.copy();
  EXPECT_NE(c.data(), a.data());
  EXPECT_TRUE(c.bitwise_equal(a));
  c.mutable_data<int64_t>()[5] = 7;
  EXPECT_FALSE(c.bitwise_equal(a));
  EXPECT_EQ(a.data<int64_t>()[5], 6);
  Buffer f = Buffer::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(f.bitwise_equal(a));
  Buffer d = Buffer::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_FALSE(d.bitwise_equal(a));  // dtype differs
  // NaNs with the same bits are bitwise equal, +0 and -0 are not.
  Buffer n1 = Buffer::from_vector<float>({std::nanf(""), 0.0f}, {2});
  Buffer n2 = Buffer::from_vector<float>({std::nanf(""), -0.0f}, {2});
  EXPECT_TRUE(n1.bitwise_equal(n1.copy()));
  EXPECT_FALSE(n1.bitwise_equal(n2));
  {
    Buffer keep = a.reshaped({6});
    a = Buffer();
    EXPECT_EQ(keep.data<int64_t>()[2], 3);  // storage outlives the original handle
  }
}

}  // namespace
}  // namespace mcx
