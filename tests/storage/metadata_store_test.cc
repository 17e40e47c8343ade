// MetadataStore: the catalog (create / list / drop collections, state), the
// record map of a record space (Commit / ScanRecords / GetPayloads /
// DropRecords), id allocation, and that everything survives a reopen.
//
// Not covered: a database whose schema version entry is newer than
// kSchemaVersion must be refused with FailedPrecondition, but the public API
// cannot write that entry and the tests do not use RocksDB directly.
#include "storage/metadata_store.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::storage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::zoom::testing::IsOk;
using ::zoom::testing::IsOkAndHolds;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

std::unique_ptr<MetadataStore> OpenOrDie(const std::string& dir,
                                         bool sync = true) {
  MetadataOptions options;
  options.sync = sync;
  auto store = MetadataStore::Open(dir, options);
  EXPECT_OK(store.status());
  return store.ok() ? std::move(store).value() : nullptr;
}

// All records of `space` as (internal id, external id), in scan order.
std::vector<std::pair<InternalId, uint64_t>> Scan(const MetadataStore& store,
                                                  uint32_t space) {
  std::vector<std::pair<InternalId, uint64_t>> out;
  EXPECT_OK(store.ScanRecords(space, [&](InternalId id, uint64_t ext) {
    out.emplace_back(id, ext);
    return absl::OkStatus();
  }));
  return out;
}

std::vector<std::string> Payloads(const MetadataStore& store, uint32_t space,
                                  std::vector<InternalId> ids) {
  std::vector<std::string> out;
  EXPECT_OK(store.GetPayloads(space, ids, &out));
  return out;
}

// name -> (id, config, state)
struct Entry {
  uint32_t id;
  std::string config;
  std::string state;
  bool operator==(const Entry& o) const {
    return id == o.id && config == o.config && state == o.state;
  }
};
std::map<std::string, Entry> Catalog(const MetadataStore& store) {
  std::map<std::string, Entry> out;
  auto list = store.ListCollections();
  EXPECT_OK(list.status());
  if (!list.ok()) return out;
  for (const CollectionRecord& rec : *list) {
    EXPECT_TRUE(
        out.emplace(rec.name, Entry{rec.id, rec.config, rec.state}).second)
        << "listed twice: " << rec.name;
  }
  return out;
}

TEST(MetadataStoreTest, FreshStoreIsEmpty) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(Catalog(*store), IsEmpty());
  EXPECT_THAT(Scan(*store, 1), IsEmpty());
  EXPECT_THAT(Payloads(*store, 1, {0, 1, 2}), ElementsAre("", "", ""));
}

TEST(MetadataStoreTest, CreateListAndDuplicateNames) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(const uint32_t a,
                       store->CreateCollection("alpha", "config-a"));
  ASSERT_OK_AND_ASSIGN(const uint32_t b,
                       store->CreateCollection("beta", std::string("x\0y", 3)));
  ASSERT_OK_AND_ASSIGN(const uint32_t c, store->CreateCollection("gamma", ""));
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);

  EXPECT_THAT(store->CreateCollection("beta", "other"),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("beta")));

  ASSERT_OK(store->PutState(b, "state-b"));
  const auto catalog = Catalog(*store);
  ASSERT_EQ(catalog.size(), 3u);
  EXPECT_EQ(catalog.at("alpha"), (Entry{a, "config-a", ""}));
  // The duplicate create did not replace the config.
  EXPECT_EQ(catalog.at("beta"), (Entry{b, std::string("x\0y", 3), "state-b"}));
  EXPECT_EQ(catalog.at("gamma"), (Entry{c, "", ""}));

  // State is replaced, not appended.
  ASSERT_OK(store->PutState(b, "state-b2"));
  EXPECT_EQ(Catalog(*store).at("beta").state, "state-b2");
}

TEST(MetadataStoreTest,
     DropRemovesEntryStateRecordsAndPayloadsOfThatCollectionOnly) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(const uint32_t a, store->CreateCollection("a", "ca"));
  ASSERT_OK_AND_ASSIGN(const uint32_t b, store->CreateCollection("b", "cb"));
  ASSERT_OK(store->PutState(a, "sa"));
  ASSERT_OK(store->PutState(b, "sb"));
  const std::vector<RecordWrite> writes = {
      {0, 100, "p0"}, {1, 101, ""}, {7, 107, "p7"}};
  ASSERT_OK(store->Commit(a, writes, {}));
  ASSERT_OK(store->Commit(b, writes, {}));

  ASSERT_OK(store->DropCollection("a", a));
  const auto catalog = Catalog(*store);
  EXPECT_EQ(catalog.count("a"), 0u);
  ASSERT_EQ(catalog.count("b"), 1u);
  EXPECT_EQ(catalog.at("b"), (Entry{b, "cb", "sb"}));
  EXPECT_THAT(Scan(*store, a), IsEmpty());
  EXPECT_THAT(Payloads(*store, a, {0, 1, 7}), ElementsAre("", "", ""));
  EXPECT_THAT(Scan(*store, b),
              ElementsAre(Pair(0u, 100u), Pair(1u, 101u), Pair(7u, 107u)));
  EXPECT_THAT(Payloads(*store, b, {0, 1, 7}), ElementsAre("p0", "", "p7"));

  // The name can be taken again: a new id, no records, no state.
  ASSERT_OK_AND_ASSIGN(const uint32_t a2, store->CreateCollection("a", "ca2"));
  EXPECT_NE(a2, a);
  EXPECT_NE(a2, b);
  EXPECT_EQ(Catalog(*store).at("a"), (Entry{a2, "ca2", ""}));
  EXPECT_THAT(Scan(*store, a2), IsEmpty());
}

TEST(MetadataStoreTest, CommitWritesAndErasesInOneBatch) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  constexpr uint32_t kSpace = 5;
  ASSERT_OK(store->Commit(
      kSpace,
      std::vector<RecordWrite>{
          {0, 10, "zero"}, {1, 11, "one"}, {2, 12, ""}, {3, 13, "three"}},
      {}));
  // Overwrite of external 11 and delete of external 13 in one commit: the
  // old records (and their payloads) go, the new ones come.
  const std::vector<InternalId> erased = {1, 3};
  ASSERT_OK(store->Commit(
      kSpace, std::vector<RecordWrite>{{4, 11, "one-v2"}, {5, 15, ""}},
      erased));
  EXPECT_THAT(Scan(*store, kSpace), ElementsAre(Pair(0u, 10u), Pair(2u, 12u),
                                                Pair(4u, 11u), Pair(5u, 15u)));
  EXPECT_THAT(Payloads(*store, kSpace, {0, 1, 2, 3, 4, 5}),
              ElementsAre("zero", "", "", "", "one-v2", ""));

  // Erasing ids that have no record is harmless; an erase-only commit works.
  const std::vector<InternalId> erase_more = {0, 99};
  ASSERT_OK(store->Commit(kSpace, {}, erase_more));
  EXPECT_THAT(Scan(*store, kSpace),
              ElementsAre(Pair(2u, 12u), Pair(4u, 11u), Pair(5u, 15u)));
  EXPECT_THAT(Payloads(*store, kSpace, {0}), ElementsAre(""));
}

TEST(MetadataStoreTest, ScanRecordsIsInNumericIdOrderAndKeepsSpacesApart) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  // Ids that sort wrongly as little-endian or text, committed shuffled.
  std::vector<InternalId> ids = {0,
                                 1,
                                 2,
                                 255,
                                 256,
                                 257,
                                 65535,
                                 65536,
                                 70000,
                                 1u << 24,
                                 (1u << 24) + 1,
                                 3u << 30,
                                 0xfffffffeu};
  std::vector<InternalId> shuffled = ids;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  auto ext_of = [&](InternalId id) -> uint64_t {
    // Exercise every byte of the external id, including the top bit.
    return id == 0
               ? kMax
               : (uint64_t{id} * 0x9e3779b97f4a7c15ull) | (uint64_t{1} << 63);
  };
  // Neighbouring spaces (incl. ones whose big-endian prefix ends in 0xff)
  // hold records too; none may show up in another space's scan.
  const std::vector<uint32_t> spaces = {
      1, 2, 255, 256, 0x01000000u, 0xfffffffeu, 0xffffffffu};
  for (uint32_t space : spaces) {
    std::vector<RecordWrite> writes;
    for (InternalId id : shuffled)
      writes.push_back({id, ext_of(id) ^ space, ""});
    ASSERT_OK(store->Commit(space, writes, {}));
  }
  for (uint32_t space : spaces) {
    SCOPED_TRACE(space);
    std::vector<std::pair<InternalId, uint64_t>> want;
    for (InternalId id : ids) want.emplace_back(id, ext_of(id) ^ space);
    EXPECT_EQ(Scan(*store, space), want);
  }
  EXPECT_THAT(Scan(*store, 3), IsEmpty());
  EXPECT_THAT(Scan(*store, 0), IsEmpty());
}

TEST(MetadataStoreTest, ScanRecordsStopsAtTheFirstError) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  std::vector<RecordWrite> writes;
  for (InternalId id = 0; id < 10; ++id) writes.push_back({id, id + 1000u, ""});
  ASSERT_OK(store->Commit(1, writes, {}));
  int calls = 0;
  absl::Status st = store->ScanRecords(1, [&](InternalId id, uint64_t) {
    ++calls;
    return id == 3 ? absl::AbortedError("stop at 3") : absl::OkStatus();
  });
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kAborted, HasSubstr("stop at 3")));
  EXPECT_EQ(calls, 4);
}

TEST(MetadataStoreTest, GetPayloadsInRequestOrderWithEmptyForMissing) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  const std::string binary("\0\x01\xff payload \0", 13);
  const std::string big(100000, 'x');
  ASSERT_OK(
      store->Commit(9,
                    std::vector<RecordWrite>{
                        {2, 1, "two"}, {4, 2, binary}, {6, 3, ""}, {8, 4, big}},
                    {}));
  // Another space with the same internal ids and other payloads.
  ASSERT_OK(store->Commit(10, std::vector<RecordWrite>{{2, 1, "other"}}, {}));
  EXPECT_THAT(Payloads(*store, 9, {8, 6, 4, 2, 3, 4, 1000}),
              ElementsAre(big, "", binary, "two", "", binary, ""));
  EXPECT_THAT(Payloads(*store, 10, {2, 4}), ElementsAre("other", ""));
  std::vector<std::string> out = {"stale"};
  ASSERT_OK(store->GetPayloads(9, {}, &out));
  EXPECT_THAT(out, IsEmpty());
}

TEST(MetadataStoreTest,
     AllocateIdNeverRepeatsAnIdAndDropRecordsErasesOneSpace) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  std::set<uint32_t> seen;
  ASSERT_OK_AND_ASSIGN(const uint32_t c, store->CreateCollection("c", ""));
  seen.insert(c);
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(const uint32_t id, store->AllocateId());
    EXPECT_TRUE(seen.insert(id).second) << "id " << id << " handed out twice";
  }
  ASSERT_OK_AND_ASSIGN(const uint32_t d, store->CreateCollection("d", ""));
  EXPECT_TRUE(seen.insert(d).second) << d;

  ASSERT_OK_AND_ASSIGN(const uint32_t space, store->AllocateId());
  ASSERT_OK(store->Commit(c, std::vector<RecordWrite>{{0, 1, "c0"}}, {}));
  ASSERT_OK(store->Commit(
      space, std::vector<RecordWrite>{{0, 1, "s0"}, {1, 2, "s1"}}, {}));
  ASSERT_OK(store->DropRecords(space));
  EXPECT_THAT(Scan(*store, space), IsEmpty());
  EXPECT_THAT(Payloads(*store, space, {0, 1}), ElementsAre("", ""));
  EXPECT_THAT(Scan(*store, c), ElementsAre(Pair(0u, 1u)));
  EXPECT_THAT(Payloads(*store, c, {0}), ElementsAre("c0"));
  // The catalog is untouched by DropRecords.
  EXPECT_EQ(Catalog(*store).size(), 2u);
}

TEST(MetadataStoreTest, EverythingSurvivesAReopen) {
  TempDir tmp;
  const std::string dir = tmp.File("meta");
  uint32_t a = 0, b = 0, space = 0;
  {
    auto store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(a, store->CreateCollection("a", "config a"));
    ASSERT_OK_AND_ASSIGN(b, store->CreateCollection("b", "config b"));
    ASSERT_OK(store->PutState(a, "state a"));
    ASSERT_OK_AND_ASSIGN(space, store->AllocateId());
    ASSERT_OK(store->Commit(
        a, std::vector<RecordWrite>{{0, 5, "five"}, {1, 6, ""}}, {}));
    ASSERT_OK(
        store->Commit(space, std::vector<RecordWrite>{{3, 7, "seven"}}, {}));
    const std::vector<InternalId> erased = {1};
    ASSERT_OK(
        store->Commit(a, std::vector<RecordWrite>{{2, 8, "eight"}}, erased));
    ASSERT_OK(store->DropCollection("b", b));
    EXPECT_GT(store->ApproximateBytes(), 0u);
  }
  auto store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  const auto catalog = Catalog(*store);
  ASSERT_EQ(catalog.size(), 1u);
  EXPECT_EQ(catalog.at("a"), (Entry{a, "config a", "state a"}));
  EXPECT_THAT(Scan(*store, a), ElementsAre(Pair(0u, 5u), Pair(2u, 8u)));
  EXPECT_THAT(Payloads(*store, a, {0, 1, 2}), ElementsAre("five", "", "eight"));
  EXPECT_THAT(Scan(*store, space), ElementsAre(Pair(3u, 7u)));
  EXPECT_THAT(Scan(*store, b), IsEmpty());
  // Ids handed out before the reopen are not handed out again.
  ASSERT_OK_AND_ASSIGN(const uint32_t next, store->AllocateId());
  EXPECT_NE(next, a);
  EXPECT_NE(next, b);
  EXPECT_NE(next, space);
  ASSERT_OK_AND_ASSIGN(const uint32_t c, store->CreateCollection("b", ""));
  EXPECT_NE(c, next);
  EXPECT_NE(c, b);
  EXPECT_THAT(store->CreateCollection("a", ""),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("a")));
}

TEST(MetadataStoreTest, LogPositionsAndWriteVersionsSurviveAReopenAndGoWithTheirCollection) {
  TempDir tmp;
  const std::string dir = tmp.File("meta");
  uint32_t a = 0, b = 0;
  {
    auto store = OpenOrDie(dir);
    ASSERT_NE(store, nullptr);
    ASSERT_OK_AND_ASSIGN(a, store->CreateCollection("a", "config a"));
    ASSERT_OK_AND_ASSIGN(b, store->CreateCollection("b", "config b"));
    EXPECT_THAT(store->GetLogPosition(a), IsOkAndHolds(0u));
    ASSERT_OK(store->PutLogPosition(a, 17));
    ASSERT_OK(store->PutLogPosition(a, (uint64_t{1} << 40) + 3));
    ASSERT_OK(store->PutLogPosition(b, 5, 900));
    // Write versions: put in a batch, read back in request order.
    ASSERT_OK(store->PutWriteVersions(b, {{7, 100}, {uint64_t{1} << 63, 200}, {3, 50}}));
    ASSERT_OK(store->PutWriteVersions(a, {{7, 1}}));
    ASSERT_OK(store->PutWriteVersions(b, {{3, 60}}));
    // A synced write after them makes them durable with it.
    ASSERT_OK(store->PutState(a, "state a"));
  }
  auto store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->GetLogPosition(a), IsOkAndHolds((uint64_t{1} << 40) + 3));
  EXPECT_THAT(store->GetLogVersion(a), IsOkAndHolds(0u));  // an 8-byte position
  EXPECT_THAT(store->GetLogPosition(b), IsOkAndHolds(5u));
  EXPECT_THAT(store->GetLogVersion(b), IsOkAndHolds(900u));
  std::vector<uint64_t> v;
  ASSERT_OK(store->GetWriteVersions(b, {uint64_t{1} << 63, 3, 8, 7}, &v));
  EXPECT_EQ(v, (std::vector<uint64_t>{200, 60, 0, 100}));
  std::vector<std::pair<uint64_t, uint64_t>> scanned;
  ASSERT_OK(store->ScanWriteVersions(b, [&](uint64_t id, uint64_t version) {
    scanned.push_back({id, version});
    return absl::OkStatus();
  }));
  EXPECT_EQ(scanned, (std::vector<std::pair<uint64_t, uint64_t>>{
                         {3, 60}, {7, 100}, {uint64_t{1} << 63, 200}}));
  ASSERT_OK(store->DropCollection("b", b));
  EXPECT_THAT(store->GetLogPosition(b), IsOkAndHolds(0u));
  EXPECT_THAT(store->GetLogVersion(b), IsOkAndHolds(0u));
  ASSERT_OK(store->GetWriteVersions(b, {7}, &v));
  EXPECT_EQ(v, (std::vector<uint64_t>{0}));
  ASSERT_OK(store->GetWriteVersions(a, {7}, &v));
  EXPECT_EQ(v, (std::vector<uint64_t>{1}));
}

// A write version may carry its point's field edits (opaque here): read
// back with it, scanned alone, and cleared by a version put without them.
TEST(MetadataStoreTest, WriteVersionsCarryFieldEdits) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(uint32_t a, store->CreateCollection("a", "config a"));
  using PointWrite = MetadataStore::PointWrite;
  ASSERT_OK(store->PutWriteRecords(a, std::vector<PointWrite>{
                                          {5, 10, "edits of 5"}, {6, 0, "edits of 6"}, {7, 30, ""}}));
  std::vector<PointWrite> got;
  ASSERT_OK(store->GetWriteRecords(a, {7, 5, 6, 8}, &got));
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].version, 30u);
  EXPECT_EQ(got[0].edits, "");
  EXPECT_EQ(got[1].version, 10u);
  EXPECT_EQ(got[1].edits, "edits of 5");
  EXPECT_EQ(got[2].version, 0u);  // only edits: an absent point's
  EXPECT_EQ(got[2].edits, "edits of 6");
  EXPECT_EQ(got[3].id, 8u);
  EXPECT_EQ(got[3].version, 0u);
  std::vector<uint64_t> v;
  ASSERT_OK(store->GetWriteVersions(a, {5, 6, 7}, &v));
  EXPECT_EQ(v, (std::vector<uint64_t>{10, 0, 30}));
  std::vector<uint64_t> edited;
  ASSERT_OK(store->ScanFieldEdits(a, [&](const PointWrite& w) {
    edited.push_back(w.id);
    return absl::OkStatus();
  }));
  EXPECT_EQ(edited, (std::vector<uint64_t>{5, 6}));
  ASSERT_OK(store->PutWriteVersions(a, {{5, 40}}));
  ASSERT_OK(store->GetWriteRecords(a, {5}, &got));
  EXPECT_EQ(got[0].version, 40u);
  EXPECT_EQ(got[0].edits, "");
}

TEST(MetadataStoreTest, UnsyncedCommitsSurviveACleanReopenAfterSyncWal) {
  TempDir tmp;
  const std::string dir = tmp.File("meta");
  {
    auto store = OpenOrDie(dir, /*sync=*/false);
    ASSERT_NE(store, nullptr);
    for (InternalId id = 0; id < 50; ++id) {
      ASSERT_OK(
          store->Commit(4, std::vector<RecordWrite>{{id, id + 1u, "p"}}, {}));
    }
    ASSERT_OK(store->SyncWal());
  }
  auto store = OpenOrDie(dir);
  ASSERT_NE(store, nullptr);
  const auto records = Scan(*store, 4);
  ASSERT_EQ(records.size(), 50u);
  for (InternalId id = 0; id < 50; ++id)
    EXPECT_EQ(records[id], (std::pair<InternalId, uint64_t>(id, id + 1u)));
}

TEST(MetadataStoreTest, ASecondOpenOfTheSameDirectoryIsRefused) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  auto second = MetadataStore::Open(tmp.File("meta"), MetadataOptions());
  EXPECT_FALSE(second.ok());
  // The database relies on the word to report "in use by another zoomd".
  EXPECT_THAT(second.status().message(), HasSubstr("lock"));
  // The first one still works.
  EXPECT_THAT(store->CreateCollection("x", ""), IsOk());
}

// Typed payload fields live by (collection, external id), apart from the
// record spaces: committed with the records, scanned in external id order
// (big-endian keys: 2^32 after 255), dropped with the collection.
TEST(MetadataStoreTest, FieldsByExternalIdCommitScanAndDrop) {
  TempDir tmp;
  auto store = OpenOrDie(tmp.File("meta"));
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(uint32_t cid, store->CreateCollection("c", "cfg"));
  const uint64_t big = uint64_t{1} << 32;
  const std::vector<FieldsWrite> put = {{255, "f255"}, {big, "fbig"}, {7, "f7"}};
  ASSERT_OK(store->Commit(cid, std::vector<RecordWrite>{{0, 255, ""}, {1, big, ""}, {2, 7, ""}},
                          {}, cid, put));
  std::vector<std::string> got;
  ASSERT_OK(store->GetFields(cid, std::vector<uint64_t>{7, 8, big}, &got));
  EXPECT_EQ(got, (std::vector<std::string>{"f7", "", "fbig"}));
  std::vector<std::pair<uint64_t, std::string>> scanned;
  auto scan = [&](const MetadataSnapshot* at = nullptr) {
    scanned.clear();
    return store->ScanFields(
        cid,
        [&](uint64_t ext, std::string_view f) {
          scanned.emplace_back(ext, std::string(f));
          return absl::OkStatus();
        },
        at);
  };
  ASSERT_OK(scan());
  EXPECT_EQ(scanned, (std::vector<std::pair<uint64_t, std::string>>{
                         {7, "f7"}, {255, "f255"}, {big, "fbig"}}));
  // A snapshot keeps seeing what was there; empty bytes erase.
  auto snap = store->TakeSnapshot();
  ASSERT_OK(store->CommitFields(cid, std::vector<FieldsWrite>{{7, ""}, {255, "new"}}));
  ASSERT_OK(scan(snap.get()));
  EXPECT_EQ(scanned.size(), 3u);
  ASSERT_OK(scan());
  EXPECT_EQ(scanned, (std::vector<std::pair<uint64_t, std::string>>{{255, "new"}, {big, "fbig"}}));
  snap.reset();
  // Another collection's fields are apart; a drop takes the collection's.
  ASSERT_OK_AND_ASSIGN(uint32_t other, store->CreateCollection("d", "cfg"));
  ASSERT_OK(store->CommitFields(other, std::vector<FieldsWrite>{{255, "other"}}));
  ASSERT_OK(store->DropCollection("c", cid));
  ASSERT_OK(scan());
  EXPECT_TRUE(scanned.empty());
  ASSERT_OK(store->GetFields(other, std::vector<uint64_t>{255}, &got));
  EXPECT_EQ(got, std::vector<std::string>{"other"});
}

}  // namespace
}  // namespace zoom::storage
