// server/api/convert.h and FilterToProto: what a router sends its nodes
// converts back to the same request, and what a node answers converts to
// the same answer (the cluster and a standalone must answer alike: the
// conformance suite checks it end to end, these the conversions alone).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "google/protobuf/util/json_util.h"
#include "server/api/convert.h"
#include "server/api/payload_convert.h"
#include "server/engine/filter.h"
#include "tests/testing/status_matchers.h"

namespace zoom::server {
namespace {

Filter Parse(const std::string& json) {
  v1::Filter proto;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &proto).ok()) << json;
  Filter f;
  EXPECT_OK(FilterFromProto(proto, &f)) << json;
  return f;
}

// Points whose fields exercise every condition of the filters below.
std::vector<std::pair<uint64_t, PayloadFields>> Points() {
  std::vector<std::pair<uint64_t, PayloadFields>> out;
  for (uint64_t id = 0; id < 40; ++id) {
    PayloadFields f;
    f["cat"] = FieldValue::Of(std::string(id % 3 == 0 ? "a" : id % 3 == 1 ? "b" : "c"));
    f["n"] = FieldValue::Of(static_cast<int64_t>(id % 7));
    f["price"] = FieldValue::Of(static_cast<double>(id) * 1.5);
    f["ok"] = FieldValue::Of(id % 2 == 0);
    if (id % 5 == 0) f["tags"] = FieldValue::List({});
    if (id % 5 == 1) f["tags"] = FieldValue::List({std::string("x"), std::string("y")});
    if (id % 4 == 0) f["maybe"] = FieldValue();
    f["where"] = FieldValue::Of(GeoPoint{50.0 + static_cast<double>(id % 10) * 0.1, 8.0});
    out.emplace_back(id, std::move(f));
  }
  return out;
}

TEST(FilterToProtoTest, EveryConditionConvertsBackToTheSameFilter) {
  const std::vector<std::string> filters = {
      R"({"must":[{"key":"cat","match":{"value":"a"}}]})",
      R"({"must":[{"key":"n","match":{"value":3}}]})",
      R"({"must":[{"key":"ok","match":{"value":true}}]})",
      R"({"must":[{"key":"cat","match":{"any":["a","b"]}}]})",
      R"({"must":[{"key":"n","match":{"any":[1,2,5]}}]})",
      R"({"must":[{"key":"cat","match":{"except":["a"]}}]})",
      R"({"must":[{"key":"n","match":{"except_integers":{"values":[0,1]}}}]})",
      R"({"must":[{"key":"n","match":{"integers":{"values":[4]}}}]})",
      R"({"must":[{"key":"price","range":{"gt":3,"lte":30.5}}]})",
      R"({"must":[{"key":"tags","values_count":{"gte":1}}]})",
      R"({"must":[{"key":"where","geo_radius":{"center":{"lat":50.2,"lon":8},"radius":20000}}]})",
      R"({"must":[{"key":"where","geo_bounding_box":{"top_left":{"lat":50.6,"lon":7},)"
      R"("bottom_right":{"lat":50.3,"lon":9}}}]})",
      R"({"must":[{"is_empty":{"key":"tags"}}]})",
      R"({"must":[{"is_null":{"key":"maybe"}}]})",
      R"({"must_not":[{"has_id":[1,2,3]}]})",
      R"({"should":[{"key":"cat","match":{"value":"a"}},{"key":"n","match":{"value":2}}]})",
      R"({"min_should":{"conditions":[{"key":"cat","match":{"value":"b"}},)"
      R"({"key":"ok","match":{"value":true}},{"key":"n","range":{"lt":3}}],"min_count":2}})",
      R"({"must":[{"filter":{"should":[{"key":"cat","match":{"value":"c"}},)"
      R"({"filter":{"must_not":[{"key":"n","match":{"value":0}}]}}]}}]})",
      R"({"must":[{"filter":{}}]})",
      R"({"must_not":[{"filter":{}}]})",
  };
  const auto points = Points();
  for (const std::string& json : filters) {
    const Filter first = Parse(json);
    v1::Filter sent;
    FilterToProto(first, &sent);
    Filter back;
    ASSERT_OK(FilterFromProto(sent, &back)) << json;
    v1::Filter again;
    FilterToProto(back, &again);
    EXPECT_EQ(sent.SerializeAsString(), again.SerializeAsString()) << json;
    int matched = 0;
    for (const auto& [id, fields] : points) {
      const bool a = Matches(first, id, fields);
      EXPECT_EQ(a, Matches(back, id, fields)) << json << " point " << id;
      matched += a ? 1 : 0;
    }
    // Each filter above selects something and not everything, or is one of
    // the two that match all / nothing whatever the payloads.
    if (json.find(R"({"filter":{}})") == std::string::npos) {
      EXPECT_GT(matched, 0) << json;
      EXPECT_LT(matched, static_cast<int>(points.size())) << json;
    }
  }
}

TEST(ApiConvertTest, AQueryGoesToANodeAndItsAnswerComesBackUnchanged) {
  v1::SearchRequest req;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"collection":"docs","vector":[0.5,-1,2],"k":7,)"
                  R"("knobs":{"ef":40,"nprobe":9,"rerank_candidates":30,"rerank_stop_sd":2,)"
                  R"("target_recall":0.9},"with_payload":true,"allow_partial":true,)"
                  R"("filter":{"must":[{"key":"cat","match":{"keyword":"a"}}]},)"
                  R"("consistency":"SESSION","after":[{"shard":1,"sequence":44}]})",
                  &req)
                  .ok());
  ASSERT_OK_AND_ASSIGN(api::SearchRequest typed, api::FromProto(req, ServiceLimits()));
  v1::SearchRequest sent;
  api::ToProto(typed.query, "docs_s1_9", &sent);
  EXPECT_EQ(sent.collection(), "docs_s1_9");
  sent.set_collection("docs");
  EXPECT_EQ(sent.SerializeAsString(), req.SerializeAsString());

  v1::SearchResponse resp;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"hits":[{"id":4,"score":0.25,"payload":"cA==",)"
                  R"("fields":{"cat":{"string_value":"a"}},"vector":[1,2,3]}],)"
                  R"("stats":{"preview_us":10,"fullview_us":20,"rerank_us":3,"ssd_reads":5,)"
                  R"("bytes_read":20480,"candidates":30,"distance_evals":400,"cache_hits":1,)"
                  R"("exact":false,"filter_strategy":"filtered_preview","filter_matches":12,)"
                  R"("filter_expansions":1,"filter_scan":true,"warning":"w",)"
                  R"("fullview_rounds":2,"target_recall":0.9,"calibrated_recall":0.93,)"
                  R"("target_reached":true,"knobs":{"ef":40,"nprobe":9,)"
                  R"("rerank_candidates":30}},"coverage":1})",
                  &resp)
                  .ok());
  ASSERT_OK_AND_ASSIGN(api::SearchAnswer answer, api::FromProto(resp));
  v1::SearchResponse back;
  api::ToProto(std::move(answer), &back);
  EXPECT_EQ(back.SerializeAsString(), resp.SerializeAsString());
}

TEST(ApiConvertTest, ACollectionInfoComesBackUnchanged) {
  v1::CollectionInfo info;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"spec":{"name":"docs_s0_9","dim":8,"metric":"COSINE","dtype":"FLOAT32",)"
                  R"("index":{"kind":"IVF_HNSW_PQ","m":16,"ef_construction":200,"pq_m":4,)"
                  R"("pq_nbits":8,"nlist":64,"quantizer":"QUANTIZER_PQ"},)"
                  R"("default_knobs":{"ef":64,"nprobe":16,)"
                  R"("rerank_candidates":100,"target_recall":0.95},"cache_bytes":4096},)"
                  R"("points":100,"deleted_points":2,"stored_records":102,)"
                  R"("index_state":"READY","indexed_points":100,"resident_bytes":999,)"
                  R"("disk_bytes":5000,"field_indexes":[{"field":"cat","type":"KEYWORD",)"
                  R"("ready":true,"points":100,"bytes":64}],"trained_points":100,)"
                  R"("calibration":{"k":10,"queries":50,"indexed_points":100,)"
                  R"("created_unix_ms":5,"points":[{"ef":32,"nprobe":8,)"
                  R"("rerank_candidates":20,"recall":0.9,"recall_lower":0.88,)"
                  R"("mean_us":100,"ssd_reads":10,"work":300}]},)"
                  R"("calibration_current":true,"default_target_recall":0.95})",
                  &info)
                  .ok());
  ASSERT_OK_AND_ASSIGN(api::CollectionDescription d, api::FromProto(info));
  EXPECT_EQ(api::ToProto(d).SerializeAsString(), info.SerializeAsString());
}

}  // namespace
}  // namespace zoom::server
