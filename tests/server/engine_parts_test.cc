// Tests of the collection's parts on their own: the key=value text, the
// manifest (with its golden files), the id tracker and the maintenance task.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/calibration.h"
#include "server/engine/collection_config.h"
#include "server/engine/collection_manifest.h"
#include "server/engine/id_map.h"
#include "server/engine/id_tracker.h"
#include "server/engine/index_builder.h"
#include "server/engine/job_runner.h"
#include "server/engine/key_value_text.h"
#include "server/engine/payload_fields.h"
#include "server/engine/query.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TestDataPath;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- KeyValueText ------------------------------------------------------------

TEST(KeyValueTextTest, ReadsNumbersStringsAndListsAndKeepsDefaults) {
  ASSERT_OK_AND_ASSIGN(auto kv, KeyValueText::Parse("a=1\nb=x=y\nl=3,4,5\nbig=5000000000\n",
                                                    "test"));
  uint32_t a = 9, missing = 9;
  ASSERT_OK(kv.Number("a", &a));
  ASSERT_OK(kv.Number("missing", &missing));
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(missing, 9u);  // absent: the default stays
  EXPECT_EQ(kv.String("b"), "x=y");
  EXPECT_EQ(kv.String("nope", "fallback"), "fallback");
  std::vector<uint32_t> l;
  ASSERT_OK(kv.NumberList("l", &l));
  EXPECT_THAT(l, ElementsAre(3, 4, 5));
  uint64_t big64 = 0;
  ASSERT_OK(kv.Number("big", &big64));
  EXPECT_EQ(big64, 5000000000u);
  uint32_t big32 = 0;  // out of range: refused, not truncated
  EXPECT_THAT(kv.Number("big", &big32), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("big")));
}

TEST(KeyValueTextTest, MalformedTextIsDataLoss) {
  EXPECT_THAT(KeyValueText::Parse("a=1\nno equals sign\n", "collection state"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("collection state")));
  ASSERT_OK_AND_ASSIGN(auto kv, KeyValueText::Parse("n=12x\nl=1,z\n", "t"));
  uint64_t n = 0;
  EXPECT_THAT(kv.Number("n", &n), StatusIs(absl::StatusCode::kDataLoss));
  std::vector<uint32_t> l;
  EXPECT_THAT(kv.NumberList("l", &l), StatusIs(absl::StatusCode::kDataLoss));
}

// ---- CollectionManifest ------------------------------------------------------

// Manifests as the landed format 1 writes them (the first as written
// before retired_spaces existed), checked in: every later zoomd reads them
// and writes them byte for byte.
TEST(CollectionManifestTest, GoldenFilesOfVersion1) {
  {
    const std::string text = ReadFile(TestDataPath("golden/collection_manifest_v1.txt"));
    ASSERT_FALSE(text.empty());
    ASSERT_OK_AND_ASSIGN(auto m, CollectionManifest::Decode(text, 1));
    EXPECT_EQ(m.space, 7u);
    EXPECT_EQ(m.vectors, "vectors-3.zvec");
    EXPECT_EQ(m.snapshot, "index-4.zidx");
    EXPECT_EQ(m.snapshot_count, 1200u);
    EXPECT_EQ(m.seq, 5u);
    EXPECT_EQ(m.pending_space, 9u);
    EXPECT_THAT(m.retired_spaces, IsEmpty());
    EXPECT_EQ(m.Encode(), text);
  }
  {
    const std::string text =
        ReadFile(TestDataPath("golden/collection_manifest_v1_retired.txt"));
    ASSERT_FALSE(text.empty());
    ASSERT_OK_AND_ASSIGN(auto m, CollectionManifest::Decode(text, 1));
    EXPECT_EQ(m.space, 12u);
    EXPECT_EQ(m.snapshot, "");
    EXPECT_EQ(m.pending_space, 0u);
    EXPECT_THAT(m.retired_spaces, ElementsAre(7, 10));
    EXPECT_EQ(m.Encode(), text);
  }
  {
    // Declared payload indexes (names hex-encoded: any bytes but NUL,
    // here one with a space, a newline, '=' and ',').
    const std::string text =
        ReadFile(TestDataPath("golden/collection_manifest_v1_field_indexes.txt"));
    ASSERT_FALSE(text.empty());
    ASSERT_OK_AND_ASSIGN(auto m, CollectionManifest::Decode(text, 1));
    ASSERT_EQ(m.field_indexes.size(), 3u);
    EXPECT_EQ(m.field_indexes[0].field, "category");
    EXPECT_EQ(m.field_indexes[0].type, "keyword");
    EXPECT_EQ(m.field_indexes[1].field, "price");
    EXPECT_EQ(m.field_indexes[1].type, "integer");
    EXPECT_EQ(m.field_indexes[2].field, "at n\n=,");
    EXPECT_EQ(m.field_indexes[2].type, "geo");
    EXPECT_EQ(m.Encode(), text);
    EXPECT_THAT(CollectionManifest::Decode("version=1\nfield_indexes=keyword:6g\n", 1).status(),
                StatusIs(absl::StatusCode::kDataLoss));
    EXPECT_THAT(CollectionManifest::Decode("version=1\nfield_indexes=:61\n", 1).status(),
                StatusIs(absl::StatusCode::kDataLoss));
  }
  {
    // The points the index was trained on (what the automatic retrain
    // compares the live count with); absent in the older files above (0).
    const std::string text = ReadFile(TestDataPath("golden/collection_manifest_v1_trained.txt"));
    ASSERT_FALSE(text.empty());
    ASSERT_OK_AND_ASSIGN(auto m, CollectionManifest::Decode(text, 1));
    EXPECT_EQ(m.snapshot_count, 90000u);
    EXPECT_EQ(m.trained_points, 20000u);
    EXPECT_EQ(m.code_error, 0.125);
    EXPECT_EQ(m.Encode(), text);
    ASSERT_OK_AND_ASSIGN(auto old, CollectionManifest::Decode(
                                       ReadFile(TestDataPath("golden/collection_manifest_v1.txt")), 1));
    EXPECT_EQ(old.trained_points, 0u);
    EXPECT_EQ(old.code_error, 0.0);
    EXPECT_EQ(old.index_epoch, 0u);
    EXPECT_EQ(old.calibration, "");
    // A baseline that is no error at all is refused, not believed.
    for (const char* bad : {"nan", "-1", "inf"}) {
      EXPECT_EQ(CollectionManifest::Decode(absl::StrCat("version=1\ncode_error=", bad, "\n"), 1)
                    .status()
                    .code(),
                absl::StatusCode::kDataLoss)
          << bad;
    }
  }
}

// The index epoch and the recall curve (calibration.h) measured on an
// earlier epoch (2 of 3: stale, measured again after the open).
TEST(CollectionManifestTest, GoldenFileWithACalibration) {
  const std::string text =
      ReadFile(TestDataPath("golden/collection_manifest_v1_calibration.txt"));
  ASSERT_FALSE(text.empty());
  ASSERT_OK_AND_ASSIGN(auto m, CollectionManifest::Decode(text, 1));
  EXPECT_EQ(m.index_epoch, 3u);
  EXPECT_EQ(m.calibration_epoch, 2u);
  ASSERT_OK_AND_ASSIGN(Calibration cal, Calibration::Decode(m.calibration));
  EXPECT_EQ(cal.queries, 500u);
  ASSERT_EQ(cal.points.size(), 2u);
  EXPECT_EQ(cal.points[1].rerank_candidates, 160u);
  EXPECT_EQ(m.Encode(), text);
  // A curve without its epoch is dropped (measured again), not an error.
  ASSERT_OK_AND_ASSIGN(
      auto no_epoch,
      CollectionManifest::Decode("version=1\ncalibration=1 10 500 9 0;64 12 15 0.9 0.9 1 1\n", 1));
  EXPECT_EQ(no_epoch.calibration, "");
}

// A config named `name` of `dim` float dimensions with the defaults
// applied; `code` set before them (they depend on it).
CollectionConfig DefaultConfig(const std::string& name, uint32_t dim,
                               index::CodeKind code = index::CodeKind::kPq) {
  CollectionConfig c;
  c.name = name;
  c.dim = dim;
  c.index.pq.code = code;
  if (code != index::CodeKind::kPq) c.index.pq.nbits = 0;  // as CreateCollection leaves it
  c.ApplyDefaults();
  return c;
}

// The collection's default target (a key written only when set).
TEST(CollectionConfigTest, TargetRecallKey) {
  CollectionConfig c = DefaultConfig("t", 4);
  EXPECT_EQ(c.Encode().find("target_recall"), std::string::npos);
  c.default_target_recall = 0.9;
  ASSERT_OK_AND_ASSIGN(CollectionConfig back, CollectionConfig::Decode(c.Encode()));
  EXPECT_DOUBLE_EQ(back.default_target_recall, 0.9);
  for (const char* bad : {"1.5", "-0.1", "nan"}) {
    std::string text = c.Encode();
    text.replace(text.find("target_recall=0.9"), 17, absl::StrCat("target_recall=", bad));
    EXPECT_EQ(CollectionConfig::Decode(text).status().code(), absl::StatusCode::kDataLoss) << bad;
  }
  c.default_target_recall = 1.01;
  EXPECT_THAT(c.Validate(4096, 0), StatusIs(absl::StatusCode::kInvalidArgument));
}

// The rabitq code: pq_m and pq_nbits default to dim and 4, the key
// pq_code is written only for it (a config without it reads as pq), and an
// unknown code is DataLoss.
TEST(CollectionConfigTest, QuantizerKey) {
  const CollectionConfig c = DefaultConfig("r", 24);
  EXPECT_EQ(c.Encode().find("pq_code"), std::string::npos);
  EXPECT_EQ(c.index.pq.code, index::CodeKind::kPq);
  CollectionConfig r = DefaultConfig("r", 24, index::CodeKind::kRabitq);
  EXPECT_EQ(r.index.pq.m, 24u);
  EXPECT_EQ(r.index.pq.nbits, 4u);
  EXPECT_OK(r.Validate(4096, 0));
  ASSERT_OK_AND_ASSIGN(CollectionConfig back, CollectionConfig::Decode(r.Encode()));
  EXPECT_EQ(back.index.pq.code, index::CodeKind::kRabitq);
  EXPECT_EQ(back.Encode(), r.Encode());
  std::string text = r.Encode();
  text.replace(text.find("pq_code=rabitq"), 14, "pq_code=sq8");
  EXPECT_THAT(CollectionConfig::Decode(text),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("pq or rabitq")));
  r.index.kind = index::IndexKind::kHnswPq;
  EXPECT_THAT(r.Validate(4096, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("needs index kind ivf_hnsw_pq")));
}

TEST(CollectionManifestTest, RoundTripsAndDefaults) {
  CollectionManifest m;
  m.space = 3;
  m.vectors = "vectors-5.zvec";
  m.snapshot = "index-6.zidx";
  m.snapshot_count = 77;
  m.trained_points = 70;
  m.code_error = 0.25;
  m.seq = 8;
  m.retired_spaces = {1, 2};
  ASSERT_OK_AND_ASSIGN(auto back, CollectionManifest::Decode(m.Encode(), 99));
  EXPECT_EQ(back, m);
  // The oldest states name neither space nor vectors.
  ASSERT_OK_AND_ASSIGN(auto old, CollectionManifest::Decode("version=1\n", 42));
  EXPECT_EQ(old.space, 42u);
  EXPECT_EQ(old.vectors, "vectors-1.zvec");
  EXPECT_EQ(m.NextFile("index", ".zidx"), "index-8.zidx");
  EXPECT_EQ(m.seq, 9u);
}

TEST(CollectionManifestTest, NewerOrHostileStatesAreRefused) {
  EXPECT_THAT(CollectionManifest::Decode("version=2\nspace=1\n", 1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("version 2")));
  EXPECT_THAT(CollectionManifest::Decode("version=1\nvectors=../../etc/passwd\n", 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside")));
  EXPECT_THAT(CollectionManifest::Decode("version=1\nsnapshot=/tmp/x\n", 1),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(CollectionManifest::Decode("version=1\nretired_spaces=1,x\n", 1),
              StatusIs(absl::StatusCode::kDataLoss));
}

// ---- CollectionConfig --------------------------------------------------------

TEST(CollectionConfigTest, MinIndexPointsAndBuildSpec) {
  CollectionConfig c;
  c.name = "c";
  c.dim = 8;
  c.metric = Metric::kInnerProduct;
  c.ApplyDefaults();
  c.index.kind = index::IndexKind::kHnswPq;
  EXPECT_EQ(c.MinIndexPoints(), kMinIndexPoints);
  c.index.kind = index::IndexKind::kIvfHnswPq;
  c.index.nlist = 1000;
  EXPECT_EQ(c.MinIndexPoints(), 1000u);
  const index::IndexSpec spec = c.BuildSpec(3);
  EXPECT_EQ(spec.dim, 8u);
  EXPECT_EQ(spec.metric, Metric::kInnerProduct);
  EXPECT_EQ(spec.build_threads, 3);
}

TEST(CollectionConfigTest, CacheBytesRoundTripsAndOlderConfigsReadZero) {
  CollectionConfig c;
  c.name = "c";
  c.dim = 8;
  c.ApplyDefaults();
  c.cache_bytes = 123456789;
  ASSERT_OK_AND_ASSIGN(CollectionConfig back, CollectionConfig::Decode(c.Encode()));
  EXPECT_EQ(back.cache_bytes, 123456789u);
  EXPECT_EQ(back.Encode(), c.Encode());
  // A config written before the field existed (the fuzz corpus' golden).
  ASSERT_OK_AND_ASSIGN(CollectionConfig old, CollectionConfig::Decode(
                                                 "version=1\nname=golden\ndim=8\nmetric=l2\n"
                                                 "dtype=float32\nindex_kind=ivf_hnsw_pq\n"
                                                 "hnsw_m=16\nef_construction=200\npq_m=4\n"
                                                 "pq_nbits=8\nopq=0\nnlist=16\n"
                                                 "compact_links=0\nef=64\nnprobe=16\n"
                                                 "rerank=100\n"));
  EXPECT_EQ(old.cache_bytes, 0u);
  EXPECT_OK(old.Validate(4096, 0));
  EXPECT_OK(c.Validate(4096, 123456789));
  EXPECT_THAT(c.Validate(4096, 123456788),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cache_bytes 123456789 is above this server's limit")));
}

// ---- IdTracker ---------------------------------------------------------------

TEST(IdTrackerTest, CommitProtocolKeepsBothDirectionsInStep) {
  IdTracker t;
  t.Reserve(3);
  t.Set(0, 100);
  t.Set(1, 200);
  EXPECT_FALSE(t.IsLive(0));  // not published yet
  t.Publish(2);
  EXPECT_TRUE(t.IsLive(0));
  EXPECT_TRUE(t.IsLive(1));
  EXPECT_FALSE(t.IsLive(2));
  EXPECT_EQ(t.live(), 2u);
  // Overwrite 100: the map names the new record at once, the old one dies.
  t.Set(2, 100);
  EXPECT_EQ(t.Find(100), std::optional<InternalId>(2));
  t.Kill(0);
  t.Publish(3);
  EXPECT_FALSE(t.IsLive(0));
  EXPECT_TRUE(t.IsLive(2));
  EXPECT_EQ(t.live(), 2u);
  EXPECT_EQ(t.dead(), 1u);
  EXPECT_EQ(t.Find(100), std::optional<InternalId>(2));
  // Delete 200; killing twice changes nothing. The live count moves at the
  // publish.
  t.Kill(1);
  t.Kill(1);
  EXPECT_EQ(t.Find(200), std::nullopt);
  EXPECT_EQ(t.live(), 2u);
  t.Publish(3);
  EXPECT_EQ(t.live(), 1u);
  std::vector<std::optional<InternalId>> found;
  t.FindAll(std::vector<uint64_t>{200, 100, 5}, &found);
  EXPECT_THAT(found, ElementsAre(std::nullopt, std::optional<InternalId>(2), std::nullopt));
  EXPECT_THAT(t.LiveRecords(), ElementsAre(std::make_pair(InternalId{2}, uint64_t{100})));
  EXPECT_GT(t.Bytes(), 0u);
}

TEST(IdTrackerTest, LoadKeepsTheNewestRecordOfAnIdAndIgnoresRecordsPastTheEnd) {
  IdTracker t;
  uint64_t beyond = 0;
  // Records in any order: 7 at ids 3 and 1 (3 is newer), 8 at 0, one past
  // the file's end (5 records).
  const std::vector<std::pair<InternalId, uint64_t>> records = {
      {3, 7}, {0, 8}, {1, 7}, {9, 11}, {4, 12}};
  ASSERT_OK(t.Load(
      5,
      [&](const std::function<absl::Status(InternalId, uint64_t)>& fn) {
        for (const auto& [id, ext] : records) ZOOM_RETURN_IF_ERROR(fn(id, ext));
        return absl::OkStatus();
      },
      &beyond));
  EXPECT_EQ(beyond, 1u);
  EXPECT_EQ(t.visible(), 5u);
  EXPECT_EQ(t.live(), 3u);
  EXPECT_EQ(t.Find(7), std::optional<InternalId>(3));
  EXPECT_FALSE(t.IsLive(1));
  EXPECT_FALSE(t.IsLive(2));  // no record at all
  EXPECT_TRUE(t.IsLive(0));
  EXPECT_TRUE(t.IsLive(4));
}

TEST(IdTrackerTest, SpansBlocks) {
  IdTracker t;
  const uint64_t n = (1u << 16) + 10;  // past the first block
  t.Reserve(n);
  for (uint64_t i = 0; i < n; ++i) t.Set(static_cast<InternalId>(i), i * 3);
  t.Publish(n);
  EXPECT_EQ(t.live(), n);
  EXPECT_EQ(t.External(static_cast<InternalId>(n - 1)), (n - 1) * 3);
  EXPECT_EQ(t.Find((n - 1) * 3), std::optional<InternalId>(n - 1));
}

TEST(IdTrackerTest, LiveCountMovesOnlyAtPublish) {
  // A reader's Count never sees a batch half applied (found under load by
  // the Python client's import test: 14 of 100).
  IdTracker t;
  t.Reserve(100);
  for (InternalId i = 0; i < 50; ++i) t.Set(i, i);
  EXPECT_EQ(t.live(), 0u);
  t.Publish(50);
  EXPECT_EQ(t.live(), 50u);
  for (InternalId i = 50; i < 100; ++i) t.Set(i, i - 50);  // replaces 0..49
  for (InternalId i = 0; i < 50; ++i) t.Kill(i);
  EXPECT_EQ(t.live(), 50u);
  for (InternalId i = 50; i < 60; ++i) t.Kill(i);
  EXPECT_EQ(t.live(), 50u);
  t.Publish(100);
  EXPECT_EQ(t.live(), 40u);
  EXPECT_EQ(t.dead(), 60u);
}

TEST(IdTrackerTest, ManyReplacementsAcrossMergesMatchAReferenceMap) {
  // Upserts of random ids over a growing tracker: the reverse map merges
  // many times (appends and full merges) and always agrees with std::map.
  IdTracker t;
  std::map<uint64_t, InternalId> ref;
  std::mt19937_64 rng(11);
  InternalId next = 0;
  for (int round = 0; round < 40; ++round) {
    const uint32_t n = 2000;
    t.Reserve(next + n);
    for (uint32_t i = 0; i < n; ++i) {
      // Early rounds import growing ids; later ones overwrite and delete.
      const uint64_t ext = round < 10 ? next : rng() % (next + 1);
      auto had = ref.find(ext);
      t.Set(next, ext);
      if (had != ref.end()) t.Kill(had->second);
      ref[ext] = next++;
      if (round >= 10 && rng() % 8 == 0) {
        const uint64_t gone = rng() % next;
        auto it = ref.find(gone);
        if (it != ref.end()) {
          t.Kill(it->second);
          ref.erase(it);
        }
      }
    }
    t.Publish(next);
    ASSERT_EQ(t.live(), ref.size()) << "round " << round;
  }
  for (uint64_t ext = 0; ext < next + 5; ++ext) {
    auto it = ref.find(ext);
    const std::optional<InternalId> want =
        it == ref.end() ? std::nullopt : std::optional<InternalId>(it->second);
    ASSERT_EQ(t.Find(ext), want) << ext;
  }
  std::vector<std::pair<InternalId, uint64_t>> want;
  for (const auto& [ext, id] : ref) want.emplace_back(id, ext);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(t.LiveRecords(), want);
}

// ---- ExternalIdMap -------------------------------------------------------------

std::optional<InternalId> RefFind(const std::map<uint64_t, InternalId>& ref, uint64_t ext) {
  auto it = ref.find(ext);
  if (it == ref.end()) return std::nullopt;
  return it->second;
}

TEST(ExternalIdMapTest, RandomOperationsAgreeWithAReferenceMap) {
  for (const uint64_t key_space : {uint64_t{5000}, uint64_t{1} << 40, ~uint64_t{0}}) {
    ExternalIdMap m;
    std::map<uint64_t, InternalId> ref;
    std::mt19937_64 rng(key_space);
    std::vector<uint64_t> keys;
    for (int step = 0; step < 60000; ++step) {
      const uint64_t r = rng();
      uint64_t ext;
      if (!keys.empty() && r % 3 == 0) {
        ext = keys[rng() % keys.size()];
      } else {
        ext = key_space == ~uint64_t{0} ? rng() : rng() % key_space;
        keys.push_back(ext);
      }
      if (r % 5 == 0) {
        m.Erase(ext);
        ref.erase(ext);
      } else {
        const InternalId id = static_cast<InternalId>(rng() % 1000000);
        m.Put(ext, id);
        ref[ext] = id;
      }
      if (m.NeedsMerge()) {
        if (m.CanAppend()) {
          m.AppendDelta();
        } else {
          m.Install(m.MergedBase());
        }
      }
      ASSERT_EQ(m.size(), ref.size());
      if (step % 97 == 0) {
        ASSERT_EQ(m.Find(ext), RefFind(ref, ext));
      }
    }
    for (uint64_t ext : keys) {
      ASSERT_EQ(m.Find(ext), RefFind(ref, ext)) << ext;
    }
    for (int i = 0; i < 1000; ++i) {
      const uint64_t ext = rng();
      ASSERT_EQ(m.Find(ext), RefFind(ref, ext));
    }
    std::vector<std::pair<uint64_t, InternalId>> all;
    m.ForEach([&](uint64_t ext, InternalId id) { all.emplace_back(ext, id); });
    const std::vector<std::pair<uint64_t, InternalId>> want(ref.begin(), ref.end());
    EXPECT_EQ(all, want);
  }
}

TEST(ExternalIdMapTest, BytesPerEntryByBlockKind) {
  const uint64_t n = 640000;
  auto build = [&](auto key_of, auto id_of) {
    ExternalIdMap::BaseBuilder b;
    for (uint64_t i = 0; i < n; ++i) b.Add(key_of(i), static_cast<InternalId>(id_of(i)));
    ExternalIdMap m;
    m.Reset(b.Finish());
    return m;
  };
  // Per block of 64: a 16-byte header and at most 8 bytes of bucket table.
  // An import of ids 0, 1, 2, ...: runs, the header and table alone.
  ExternalIdMap runs = build([](uint64_t i) { return i + 7; }, [](uint64_t i) { return i; });
  EXPECT_EQ(runs.Find(7 + 1234), std::optional<InternalId>(1234));
  EXPECT_EQ(runs.Find(6), std::nullopt);
  EXPECT_EQ(runs.Find(7 + n), std::nullopt);
  EXPECT_LE(runs.Bytes(), n * 3 / 8 + 64);
  // Sparse ids within 2^32 of each other, ids scattered: 8 bytes each + header.
  ExternalIdMap narrow = build([](uint64_t i) { return i * 1000; },
                               [](uint64_t i) { return (i * 7919) % 1000003; });
  EXPECT_EQ(narrow.Find(5000), std::optional<InternalId>((5 * 7919) % 1000003));
  EXPECT_EQ(narrow.Find(5001), std::nullopt);
  EXPECT_LE(narrow.Bytes(), n * 8 + n * 3 / 8 + 64);
  // Random 64-bit ids: 12 bytes each + header.
  ExternalIdMap wide = build([](uint64_t i) { return i << 40; }, [](uint64_t i) { return i; });
  EXPECT_EQ(wide.Find(uint64_t{99} << 40), std::optional<InternalId>(99));
  EXPECT_EQ(wide.Find((uint64_t{99} << 40) + 1), std::nullopt);
  EXPECT_LE(wide.Bytes(), n * 12 + n * 3 / 8 + 64);
  // The delta: one overwrite and one erase leave the base as it was.
  runs.Put(7 + 10, 999999);
  runs.Erase(7 + 11);
  EXPECT_EQ(runs.Find(7 + 10), std::optional<InternalId>(999999));
  EXPECT_EQ(runs.Find(7 + 11), std::nullopt);
  EXPECT_EQ(runs.size(), n - 1);
  runs.Install(runs.MergedBase());
  EXPECT_EQ(runs.Find(7 + 10), std::optional<InternalId>(999999));
  EXPECT_EQ(runs.Find(7 + 11), std::nullopt);
  EXPECT_EQ(runs.Find(7 + 12), std::optional<InternalId>(12));
  EXPECT_EQ(runs.size(), n - 1);
}

// ---- JobRunner ---------------------------------------------------------------

JobRunner::Job MakeJob(std::string key, std::function<absl::Status()> run,
                       JobRunner::Priority priority = JobRunner::Priority::kAuto,
                       std::string group = "g") {
  JobRunner::Job job;
  job.key = std::move(key);
  job.group = std::move(group);
  job.priority = priority;
  job.run = std::move(run);
  return job;
}

// (Was MaintenanceTaskTest: the collection's background work moved onto
// the database's JobRunner; the same guarantees, per key.)
TEST(JobRunnerTest, OneJobOfAKeyAtATimeWithWaitersAndCallbacks) {
  JobRunner runner(JobRunner::Options{});
  EXPECT_OK(runner.Wait("build"));  // none ran: OK at once
  absl::Notification release, started;
  ASSERT_TRUE(runner.TrySubmit(MakeJob("build", [&] {
    started.Notify();
    release.WaitForNotification();
    return absl::InternalError("job failed");
  })));
  EXPECT_TRUE(runner.Active("build"));
  EXPECT_FALSE(runner.TrySubmit(MakeJob("build", [] { return absl::OkStatus(); })));
  absl::Notification called;
  absl::Status seen;
  runner.WhenDone("build", [&](absl::Status st) {
    seen = st;
    called.Notify();
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_FALSE(called.HasBeenNotified());  // the job waits for `release`
  release.Notify();
  EXPECT_THAT(runner.Wait("build"), StatusIs(absl::StatusCode::kInternal, HasSubstr("job failed")));
  ASSERT_TRUE(called.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_THAT(seen, StatusIs(absl::StatusCode::kInternal));
  EXPECT_FALSE(runner.Active("build"));
  EXPECT_THAT(runner.LastStatus("build"), StatusIs(absl::StatusCode::kInternal));
  // Done: a new waiter is called at once, with the last status.
  bool at_once = false;
  runner.WhenDone("build", [&](absl::Status st) { at_once = !st.ok(); });
  EXPECT_TRUE(at_once);
  // And the next job starts.
  ASSERT_TRUE(runner.TrySubmit(MakeJob("build", [] { return absl::OkStatus(); })));
  EXPECT_OK(runner.Wait("build"));
}

TEST(JobRunnerTest, SubmitQueuesBehindTheRunningJobOfItsKeyAndReplacesAWaitingOne) {
  JobRunner runner(JobRunner::Options{});
  absl::Notification release, started;
  std::atomic<int> ran{0};
  ASSERT_TRUE(runner.Submit(MakeJob("field/a", [&] {
    started.Notify();
    release.WaitForNotification();
    ran.fetch_add(1);
    return absl::OkStatus();
  })));
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // Two more while it runs: the second replaces the first (one waits).
  ASSERT_TRUE(runner.Submit(MakeJob("field/a", [&] {
    ran.fetch_add(10);
    return absl::OkStatus();
  })));
  ASSERT_TRUE(runner.Submit(MakeJob("field/a", [&] {
    ran.fetch_add(100);
    return absl::OkStatus();
  })));
  release.Notify();
  EXPECT_OK(runner.Wait("field/a"));
  EXPECT_EQ(ran.load(), 101);
}

TEST(JobRunnerTest, HigherPriorityStartsFirstAndDelayedJobsWaitForTheirTime) {
  JobRunner::Options o;
  o.threads = 1;
  JobRunner runner(o);
  absl::Notification release, started;
  ASSERT_TRUE(runner.Submit(MakeJob("blocker", [&] {
    started.Notify();
    release.WaitForNotification();
    return absl::OkStatus();
  })));
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(60)));
  absl::Mutex mu;
  std::vector<std::string> order;
  auto record = [&](std::string name) {
    return [&, name] {
      absl::MutexLock l(&mu);
      order.push_back(name);
      return absl::OkStatus();
    };
  };
  ASSERT_TRUE(runner.Submit(MakeJob("idle", record("idle"), JobRunner::Priority::kIdle)));
  ASSERT_TRUE(runner.Submit(MakeJob("auto", record("auto"), JobRunner::Priority::kAuto)));
  ASSERT_TRUE(runner.Submit(MakeJob("user", record("user"), JobRunner::Priority::kUser)));
  JobRunner::Job later = MakeJob("later", record("later"), JobRunner::Priority::kUser);
  later.not_before = absl::InfiniteFuture();  // never due
  ASSERT_TRUE(runner.Submit(std::move(later)));
  release.Notify();
  EXPECT_OK(runner.Wait("idle"));
  {
    absl::MutexLock l(&mu);
    EXPECT_THAT(order, ::testing::ElementsAre("user", "auto", "idle"));
  }
  EXPECT_TRUE(runner.Active("later"));  // still waiting for its time
  // A past time is due at once.
  JobRunner::Job due = MakeJob("due", record("due"));
  due.not_before = absl::InfinitePast();
  ASSERT_TRUE(runner.Submit(std::move(due)));
  EXPECT_OK(runner.Wait("due"));
}

TEST(JobRunnerTest, CancelGroupDropsItsWaitingJobsAndWaitsForItsRunningOnes) {
  JobRunner::Options o;
  o.threads = 1;
  JobRunner runner(o);
  absl::Notification release, started;
  ASSERT_TRUE(runner.Submit(MakeJob("a/build", [&] {
    started.Notify();
    release.WaitForNotification();
    return absl::OkStatus();
  }, JobRunner::Priority::kUser, "a")));
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(60)));
  JobRunner::Job waiting = MakeJob("a/calibrate", [] { return absl::OkStatus(); },
                                   JobRunner::Priority::kIdle, "a");
  waiting.dropped = absl::UnavailableError("closing");
  bool put_back = false;
  waiting.on_dropped = [&] { put_back = true; };
  ASSERT_TRUE(runner.Submit(std::move(waiting)));
  bool other_ran = false;
  ASSERT_TRUE(runner.Submit(MakeJob("b/build", [&] {
    other_ran = true;
    return absl::OkStatus();
  }, JobRunner::Priority::kAuto, "b")));
  absl::Status heard;
  runner.WhenDone("a/calibrate", [&](absl::Status st) { heard = st; });
  runner.CancelGroup("a", /*wait=*/false);
  EXPECT_THAT(heard, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("closing")));
  EXPECT_TRUE(put_back);
  EXPECT_FALSE(runner.Active("a/calibrate"));
  EXPECT_TRUE(runner.Active("a/build"));  // running: its owner stops it
  EXPECT_TRUE(runner.Active("b/build"));  // another group's: kept
  release.Notify();
  runner.CancelGroup("a", /*wait=*/true);
  EXPECT_FALSE(runner.Active("a/build"));
  EXPECT_OK(runner.Wait("b/build"));
  EXPECT_TRUE(other_ran);
}

TEST(JobRunnerTest, BackoffDoublesUpToItsMaximumAndClearsOnSuccess) {
  JobRunner::Options o;
  o.retry_base = absl::Seconds(10);
  o.retry_max = absl::Seconds(25);
  JobRunner runner(o);
  EXPECT_TRUE(runner.Due("m"));
  const absl::Time t0 = absl::Now();
  JobRunner::Backoff b = runner.NoteResult("m", absl::InternalError("x"));
  EXPECT_EQ(b.failures, 1u);
  EXPECT_GE(b.retry_at, t0 + absl::Seconds(10));
  EXPECT_FALSE(runner.Due("m"));
  b = runner.NoteResult("m", absl::InternalError("x"));
  EXPECT_EQ(b.failures, 2u);
  EXPECT_GE(b.retry_at, t0 + absl::Seconds(20));
  b = runner.NoteResult("m", absl::InternalError("x"));
  EXPECT_EQ(b.failures, 3u);
  EXPECT_LE(b.retry_at, absl::Now() + absl::Seconds(25));  // capped
  EXPECT_EQ(runner.BackoffOf("m").failures, 3u);
  b = runner.NoteResult("m", absl::OkStatus());
  EXPECT_EQ(b.failures, 0u);
  EXPECT_TRUE(runner.Due("m"));
}

TEST(JobRunnerTest, StoppingDropsWaitingJobsAndRefusesNewOnes) {
  absl::Status heard;
  {
    JobRunner::Options o;
    o.threads = 1;
    JobRunner runner(o);
    JobRunner::Job later = MakeJob("later", [] { return absl::OkStatus(); });
    later.not_before = absl::InfiniteFuture();
    later.dropped = absl::CancelledError("stopped");
    ASSERT_TRUE(runner.Submit(std::move(later)));
    runner.WhenDone("later", [&](absl::Status st) { heard = st; });
  }
  EXPECT_THAT(heard, StatusIs(absl::StatusCode::kCancelled, HasSubstr("stopped")));
}

// ---- ValidateQuery: the one check of a query, its messages for the client --

TEST(ValidateQueryTest, SaysWhatToFix) {
  const std::vector<float> q4 = {1, 2, 3, 4};
  SearchParams p;
  SearchLimits limits;
  limits.max_k = 100;
  limits.max_ef = 500;
  limits.max_nprobe = 64;
  limits.max_rerank = 1000;
  EXPECT_OK(ValidateQuery(Metric::kL2, 4, q4, p, limits));
  const auto message = [&](Metric metric, absl::Span<const float> q, const SearchParams& sp) {
    absl::Status st = ValidateQuery(metric, 4, q, sp, limits);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    return std::string(st.message());
  };
  SearchParams bad = p;
  bad.k = 0;
  EXPECT_EQ(message(Metric::kL2, q4, bad), "k must be at least 1");
  bad.k = 101;
  EXPECT_EQ(message(Metric::kL2, q4, bad), "k 101 is above this server's limit of 100");
  bad = p;
  bad.ef = 0;
  EXPECT_EQ(message(Metric::kL2, q4, bad), "ef must be at least 1");
  bad.ef = 501;
  EXPECT_EQ(message(Metric::kL2, q4, bad), "ef 501 is above this server's limit of 500");
  bad = p;
  bad.nprobe = 65;
  EXPECT_EQ(message(Metric::kL2, q4, bad), "nprobe 65 is above this server's limit of 64");
  bad = p;
  bad.rerank_candidates = 1001;
  EXPECT_EQ(message(Metric::kL2, q4, bad),
            "rerank_candidates 1001 is above this server's limit of 1000");
  bad = p;
  bad.rerank_candidates = 0;  // K' = k
  EXPECT_OK(ValidateQuery(Metric::kL2, 4, q4, bad, limits));
  EXPECT_EQ(message(Metric::kL2, {}, p), "the query vector is empty");
  const std::vector<float> q3 = {1, 2, 3};
  EXPECT_EQ(message(Metric::kL2, q3, p), "query has 3 dimensions; the collection has 4");
  const std::vector<float> nan = {1, std::nanf(""), 3, 4};
  EXPECT_THAT(message(Metric::kL2, nan, p), HasSubstr("query: "));
  const std::vector<float> huge = {1e20f, 1e20f, 1e20f, 1e20f};
  EXPECT_THAT(message(Metric::kInnerProduct, huge, p), HasSubstr("is above 1e18"));
  EXPECT_OK(ValidateQuery(Metric::kCosine, 4, huge, p, limits));  // any finite non-zero
  const std::vector<float> zero(4, 0.0f);
  EXPECT_THAT(message(Metric::kCosine, zero, p), HasSubstr("zero"));
}

// ---- Typed payload fields: validation, encoding, golden file ------------------

PayloadFields GoldenFields() {
  PayloadFields f;
  f["brand"] = FieldValue::Of(std::string("zoomd"));
  f["count"] = FieldValue::Of(int64_t{-7});
  f["empty"] = FieldValue::List({});
  f["gone"] = FieldValue::Null();
  f["in_stock"] = FieldValue::Of(true);
  f["mixed"] = FieldValue::List({int64_t{1}, 2.5, false});
  f["price"] = FieldValue::Of(12.5);
  f["tags"] = FieldValue::List({std::string("a"), std::string("bc")});
  f["where"] = FieldValue::Of(GeoPoint{52.52, 13.405});
  return f;
}

TEST(PayloadFieldsTest, GoldenEncodingOfVersion1) {
  const std::string golden = ReadFile(TestDataPath("golden/payload_fields_v1.zpf"));
  ASSERT_FALSE(golden.empty());
  EXPECT_EQ(EncodeFields(GoldenFields()), golden);
  ASSERT_OK_AND_ASSIGN(PayloadFields decoded, DecodeFields(golden));
  EXPECT_EQ(decoded, GoldenFields());
}

TEST(PayloadFieldsTest, RoundTripsAndNoFieldsStoreNothing) {
  EXPECT_EQ(EncodeFields({}), "");
  ASSERT_OK_AND_ASSIGN(PayloadFields none, DecodeFields(""));
  EXPECT_TRUE(none.empty());
  PayloadFields f;
  f["big"] = FieldValue::Of(std::numeric_limits<int64_t>::min());
  f["s"] = FieldValue::Of(std::string("with\0nul", 8));
  f["d"] = FieldValue::List({-0.0, 1e308, std::numeric_limits<double>::denorm_min()});
  ASSERT_OK(ValidateFields(f));
  ASSERT_OK_AND_ASSIGN(PayloadFields back, DecodeFields(EncodeFields(f)));
  EXPECT_EQ(back, f);
}

TEST(PayloadFieldsTest, CorruptOrNewerBytesAreRefused) {
  const std::string good = EncodeFields(GoldenFields());
  // Every truncation is DataLoss, never a crash or a partial payload.
  for (size_t n = 1; n < good.size(); ++n) {
    EXPECT_THAT(DecodeFields(good.substr(0, n)).status(),
                StatusIs(absl::StatusCode::kDataLoss)) << "truncated to " << n;
  }
  EXPECT_THAT(DecodeFields(good + "x").status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("trailing")));
  std::string newer = good;
  newer[2] = 2;
  EXPECT_THAT(DecodeFields(newer).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("version 2")));
  // One encoding per payload: no fields are "", never a header of 0.
  EXPECT_THAT(DecodeFields(std::string("ZF\x01\0\0\0\0", 7)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no fields")));
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_THAT(DecodeFields(magic).status(), StatusIs(absl::StatusCode::kDataLoss));
  // Names out of order: "b" before "a".
  PayloadFields two;
  two["a"] = FieldValue::Of(int64_t{1});
  two["b"] = FieldValue::Of(int64_t{2});
  std::string swapped = EncodeFields(two);
  const size_t a = swapped.find('a'), b = swapped.find('b');
  std::swap(swapped[a], swapped[b]);
  EXPECT_THAT(DecodeFields(swapped).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("order")));
  // A huge list count in few bytes is refused before anything is allocated.
  std::string huge = EncodeFields(two);
  huge[huge.find('a') + 1] = 2;  // kind: list, its count is read from the value's bytes
  EXPECT_THAT(DecodeFields(huge).status(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(PayloadFieldsTest, ValidationSaysWhatToFix) {
  const auto message = [](const PayloadFields& f) {
    absl::Status st = ValidateFields(f);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    return std::string(st.message());
  };
  PayloadFields f;
  f[""] = FieldValue::Of(int64_t{1});
  EXPECT_THAT(message(f), HasSubstr("empty name"));
  f.clear();
  f[std::string(257, 'n')] = FieldValue::Of(int64_t{1});
  EXPECT_THAT(message(f), HasSubstr("at most 256"));
  f.clear();
  f[std::string("a\0b", 3)] = FieldValue::Of(int64_t{1});
  EXPECT_THAT(message(f), HasSubstr("NUL"));
  f.clear();
  f["x"] = FieldValue::Of(std::nan(""));
  EXPECT_THAT(message(f), HasSubstr("field 'x': nan is not a finite number"));
  f["x"] = FieldValue::List({1.0, std::numeric_limits<double>::infinity()});
  EXPECT_THAT(message(f), HasSubstr("not a finite number"));
  f["x"] = FieldValue::Of(GeoPoint{91, 0});
  EXPECT_THAT(message(f), HasSubstr("off the globe"));
  f["x"] = FieldValue::Of(GeoPoint{0, -180.5});
  EXPECT_THAT(message(f), HasSubstr("off the globe"));
  f["x"] = FieldValue::List(std::vector<FieldScalar>(1025, int64_t{0}));
  EXPECT_THAT(message(f), HasSubstr("at most 1024"));
  f.clear();
  for (int i = 0; i < 1025; ++i) f["f" + std::to_string(i)] = FieldValue::Null();
  EXPECT_THAT(message(f), HasSubstr("1025 payload fields"));
  f.clear();
  f["ok"] = FieldValue::Of(GeoPoint{-90, 180});
  EXPECT_OK(ValidateFields(f));
}

}  // namespace
}  // namespace zoom::server
