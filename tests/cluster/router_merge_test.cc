// The router's merge over the API's types (server/cluster/router/merge.h):
// the shards' answers as the one a standalone would give.
#include "server/cluster/router/merge.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace zoom::server::router {
namespace {

api::SearchAnswer Answer(std::vector<std::pair<uint64_t, float>> hits, bool exact) {
  api::SearchAnswer a;
  for (auto [id, score] : hits) {
    Hit h;
    h.id = id;
    h.score = score;
    a.hits.push_back(h);
  }
  a.stats.exact = exact;
  a.stats.reads = 3;
  a.stats.preview_us = exact ? 10 : 30;
  return a;
}

std::vector<uint64_t> Ids(const api::SearchAnswer& a) {
  std::vector<uint64_t> out;
  for (const Hit& h : a.hits) out.push_back(h.id);
  return out;
}

TEST(RouterMergeTest, TopKByTheMetricsOrderTiesById) {
  std::vector<api::SearchAnswer> parts;
  parts.push_back(Answer({{5, 0.9f}, {1, 0.5f}}, false));
  parts.push_back(Answer({{2, 0.9f}, {7, 0.7f}, {3, 0.1f}}, false));
  api::SearchAnswer ip = MergeSearch(Metric::kInnerProduct, 3, parts, 2);
  EXPECT_EQ(Ids(ip), (std::vector<uint64_t>{2, 5, 7}));  // 0.9 twice: by id
  EXPECT_EQ(ip.stats.reads, 6u);                         // summed
  EXPECT_EQ(ip.stats.preview_us, 30);                    // the slowest shard's
  EXPECT_EQ(ip.coverage, 1.0f);
  EXPECT_FALSE(ip.degraded);
  api::SearchAnswer l2 = MergeSearch(Metric::kL2, 2, parts, 2);
  EXPECT_EQ(Ids(l2), (std::vector<uint64_t>{3, 1}));  // lower is better
}

TEST(RouterMergeTest, ExactWhenEveryShardWithHitsRanExact) {
  std::vector<api::SearchAnswer> parts;
  parts.push_back(Answer({{5, 0.9f}}, true));
  parts.push_back(Answer({}, false));  // nothing matched there: no search ran
  EXPECT_TRUE(MergeSearch(Metric::kL2, 10, parts, 2).stats.exact);
  parts.push_back(Answer({{6, 0.2f}}, false));
  EXPECT_FALSE(MergeSearch(Metric::kL2, 10, parts, 3).stats.exact);
}

TEST(RouterMergeTest, AMissingShardLowersTheCoverage) {
  std::vector<api::SearchAnswer> parts;
  parts.push_back(Answer({{5, 0.9f}}, false));
  api::SearchAnswer a = MergeSearch(Metric::kCosine, 10, parts, 4);
  EXPECT_FLOAT_EQ(a.coverage, 0.25f);
  EXPECT_TRUE(a.degraded);
}

TEST(RouterMergeTest, InfoSumsTheShardsAndTheirFieldIndexes) {
  cluster::ShardMap m;
  m.collection = "docs";
  m.shards = 2;
  m.replicas = 2;
  m.config.name = "docs";
  std::vector<std::pair<uint32_t, api::CollectionDescription>> parts(2);
  for (uint32_t k = 0; k < 2; ++k) {
    parts[k].first = k;
    CollectionInfo& i = parts[k].second.info;
    i.points = 100 + k;
    i.index_state = k == 0 ? IndexState::kReady : IndexState::kBuilding;
    FieldIndexInfo f;
    f.field = "cat";
    f.ready = k == 0;
    f.points = 10 + k;
    f.bytes = 64;
    i.field_indexes.push_back(f);
  }
  api::CollectionDescription d = MergeInfo(m, parts, 0.95);
  EXPECT_EQ(d.info.points, 201u);
  EXPECT_EQ(d.info.index_state, IndexState::kBuilding);  // the least ready shard's
  ASSERT_EQ(d.info.field_indexes.size(), 1u);
  EXPECT_EQ(d.info.field_indexes[0].points, 21u);
  EXPECT_EQ(d.info.field_indexes[0].bytes, 128u);
  EXPECT_FALSE(d.info.field_indexes[0].ready);
  EXPECT_EQ(d.info.default_target_recall, 0.95);
  EXPECT_EQ(d.shards, 2u);
  EXPECT_EQ(d.info.config.name, "docs");
}

TEST(RouterMergeTest, AScrollPageStopsWhereAShardStoppedEarly) {
  std::vector<api::ScrollAnswer> parts(2);
  for (uint64_t id : {1, 3, 5}) parts[0].points.push_back(PointData{id});
  parts[0].next_offset = 7;  // its page ended before 7
  for (uint64_t id : {2, 4, 8, 10}) parts[1].points.push_back(PointData{id});
  api::ScrollAnswer page = MergeScroll(parts, 100, 1 << 20);
  std::vector<uint64_t> ids;
  for (const PointData& p : page.points) ids.push_back(p.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 4, 5}));  // 8 and 10 wait for the next page
  ASSERT_TRUE(page.next_offset.has_value());
  EXPECT_EQ(*page.next_offset, 7u);
  api::ScrollAnswer short_page = MergeScroll(parts, 2, 1 << 20);
  EXPECT_EQ(short_page.points.size(), 2u);
  EXPECT_EQ(*short_page.next_offset, 3u);
}

}  // namespace
}  // namespace zoom::server::router
