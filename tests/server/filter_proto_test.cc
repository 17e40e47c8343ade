// The gRPC form of a filter (v1::Filter, and its JSON mapping, which
// zoomctl takes) converted to the engine's (server/api/payload_convert.h).
// Apart from filter_test so that the sanitizer build of the engine tests
// does not compile the protos and the service.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "server/engine/filter.h"
#include "server/api/payload_convert.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;

// The proto's JSON form (zoomctl's --filter) converts as docs/filters.md shows,
// and the shapes that say nothing or two things are refused.
TEST(FilterProtoTest, JsonFormConvertsAndBadShapesAreRefused) {
  const auto parse = [](const std::string& json, Filter* out) {
    v1::Filter proto;
    auto st = google::protobuf::util::JsonStringToMessage(json, &proto);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return FilterFromProto(proto, out);
  };
  Filter f;
  ASSERT_OK(parse(R"({"must":[{"key":"category","match":{"value":"laptop"}},)"
                  R"({"key":"price","range":{"lte":1000}}],)"
                  R"("must_not":[{"has_id":[7,9]}],)"
                  R"("should":[{"is_empty":{"key":"tags"}},{"filter":{"must":[)"
                  R"({"key":"n","match":{"any":[1,2]}}]}}]})",
                  &f));
  ASSERT_EQ(f.must.size(), 2u);
  EXPECT_EQ(f.must[0].type, Condition::Type::kMatch);
  EXPECT_EQ(std::get<std::string>(f.must[0].value), "laptop");
  EXPECT_EQ(f.must[1].type, Condition::Type::kRange);
  EXPECT_EQ(*f.must[1].range.lte, 1000);
  ASSERT_EQ(f.must_not.size(), 1u);
  EXPECT_EQ(f.must_not[0].ids.size(), 2u);
  ASSERT_EQ(f.should.size(), 2u);
  EXPECT_EQ(f.should[1].type, Condition::Type::kNested);
  EXPECT_EQ(std::get<int64_t>(f.should[1].nested->must[0].values[1]), 2);

  EXPECT_THAT(parse(R"({"must":[{"key":"x"}]})", &f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exactly one of match")));
  EXPECT_THAT(parse(R"({"must":[{}]})", &f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sets none")));
  EXPECT_THAT(parse(R"({"must":[{"key":"x","match":{"value":1.5}}]})", &f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("use range")));
  EXPECT_THAT(parse(R"({"must":[{"has_id":[1],"is_null":{"key":"x"}}]})", &f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("several")));
  std::string deep = R"({"key":"x","match":{"value":1}})";
  for (int i = 0; i < 40; ++i) deep = absl::StrCat(R"({"filter":{"must":[)", deep, "]}}");
  EXPECT_THAT(parse(absl::StrCat(R"({"must":[)", deep, "]}"), &f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nests deeper")));
  // The condition limit is on the whole filter (checked as it is
  // converted, before more is allocated), not per list.
  v1::Filter wide;
  v1::Filter* level = &wide;
  for (int d = 0; d < 4; ++d) {
    for (int i = 0; i < 100; ++i) level->add_must()->mutable_is_null()->set_key("x");
    level = level->add_must()->mutable_filter();
  }
  EXPECT_THAT(FilterFromProto(wide, &f), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("more than 256 conditions")));
  v1::Filter huge;
  auto* any = huge.add_must();
  any->set_key("tag");
  for (int i = 0; i < 5000; ++i) any->mutable_match()->mutable_any()->add_values()->set_number_value(i);
  EXPECT_THAT(FilterFromProto(huge, &f), StatusIs(absl::StatusCode::kResourceExhausted));
}

// A vector sent as vector_bytes converts to the same floats; both forms at
// once are refused, naming the point.
TEST(VectorProtoTest, BytesConvertAndBothFormsAreRefused) {
  v1::Point p;
  p.set_vector_bytes(std::string("\x00\x07\xff", 3));
  std::vector<float> scratch;
  ASSERT_OK_AND_ASSIGN(absl::Span<const float> v,
                       VectorFromProto(p.vector(), p.vector_bytes(), &scratch, "point 1"));
  EXPECT_EQ(std::vector<float>(v.begin(), v.end()), (std::vector<float>{0, 7, 255}));
  p.add_vector(1.0f);
  EXPECT_THAT(VectorFromProto(p.vector(), p.vector_bytes(), &scratch, "point 1").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("point 1 has both")));
  v1::Point f;
  f.add_vector(0.5f);
  ASSERT_OK_AND_ASSIGN(v, VectorFromProto(f.vector(), f.vector_bytes(), &scratch, "q"));
  EXPECT_EQ(v.data(), f.vector().data());  // floats are not copied
}

}  // namespace
}  // namespace zoom::server
