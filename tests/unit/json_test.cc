#include "core/json.h"

#include <gtest/gtest.h>

namespace npuflow {
namespace {

TEST(Json, ParsesTheReportShape) {
  auto parsed = JsonValue::parse(
      R"({"graph":"main","candidates":3,"claims":[{"k":1024,"ok":true,"name":"a\"b"}],"x":null})");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  const JsonValue& v = parsed.value();
  EXPECT_EQ(v["graph"].string(), "main");
  EXPECT_EQ(v["candidates"].number(), 3);
  ASSERT_EQ(v["claims"].array().size(), 1u);
  EXPECT_EQ(v["claims"].array()[0]["k"].number(), 1024);
  EXPECT_TRUE(v["claims"].array()[0]["ok"].boolean());
  EXPECT_EQ(v["claims"].array()[0]["name"].string(), "a\"b");
  EXPECT_EQ(v["missing"].kind(), JsonValue::Kind::kNull);
}

TEST(Json, RejectsMalformedText) {
  EXPECT_FALSE(JsonValue::parse("{\"a\":").is_ok());
  EXPECT_FALSE(JsonValue::parse("[1,2").is_ok());
  EXPECT_FALSE(JsonValue::parse("{} trailing").is_ok());
  EXPECT_FALSE(JsonValue::parse("\"unterminated").is_ok());
}

// A report is untrusted bytes: its counts and sizes are read as integers without casting a NaN,
// an infinity or a huge double (found by tests/fuzz_bytes/json_report_fuzzer).
TEST(Json, ReadsIntegersOnlyWhenTheNumberIsOne) {
  auto parsed = JsonValue::parse(
      R"({"k":1024,"neg":-16,"big":1e300,"frac":2.5,"inf":-1e999,"text":"7","edge":9007199254740992})");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  const JsonValue& v = parsed.value();
  EXPECT_EQ(v["k"].integer(), 1024);
  EXPECT_EQ(v["neg"].integer(), -16);
  EXPECT_EQ(v["edge"].integer(), int64_t{1} << 53);
  EXPECT_EQ(v["big"].integer(-1), -1);
  EXPECT_EQ(v["frac"].integer(-1), -1);
  EXPECT_EQ(v["inf"].integer(-1), -1);
  EXPECT_EQ(v["text"].integer(-1), -1);
  EXPECT_EQ(v["missing"].integer(), 0);
}

}  // namespace
}  // namespace npuflow
