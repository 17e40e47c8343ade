// Filters: the reference semantics (filter.h; the proto conversion is
// tests/server/filter_proto_test.cc), the payload indexes against
// them (property test over random payloads, edits, deletes and random
// filters), filtered search through a Collection against a brute-force
// filtered oracle for every strategy and both preview kinds, the
// never-fewer-than-k property, index consistency through upserts,
// overwrites, SetPayload, deletes, compaction, restart and snapshots, the
// scan fallback, bad input, and filtered searches racing writers.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/texmex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "server/engine/filter.h"
#include "server/engine/payload_index.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

// ---- Random payloads and filters ----------------------------------------------

constexpr int kTags = 12;

// A tag drawn from a Zipf law over kTags values (t0 the most common).
std::string ZipfTag(std::mt19937& rng) {
  static const std::vector<double> weights = [] {
    std::vector<double> w;
    for (int i = 0; i < kTags; ++i) w.push_back(1.0 / (i + 1));
    return w;
  }();
  std::discrete_distribution<int> d(weights.begin(), weights.end());
  return absl::StrCat("t", d(rng));
}

// Fields with every shape the semantics distinguish: missing, null, a
// scalar, a list (empty, one, several), values of a foreign type.
PayloadFields RandomFields(std::mt19937& rng) {
  PayloadFields f;
  const auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  switch (pick(10)) {
    case 0: break;  // missing
    case 1: f["tag"] = FieldValue::Null(); break;
    case 2: f["tag"] = FieldValue::List({ZipfTag(rng), ZipfTag(rng)}); break;
    case 3: f["tag"] = FieldValue::List({}); break;
    case 4: f["tag"] = FieldValue::Of(int64_t{pick(5)}); break;  // not a string
    default: f["tag"] = FieldValue::Of(ZipfTag(rng)); break;
  }
  switch (pick(8)) {
    case 0: break;
    case 1: f["price"] = FieldValue::Of(pick(1000) + 0.5); break;  // a double
    case 2: f["price"] = FieldValue::List({int64_t{pick(1000)}, int64_t{pick(1000)}}); break;
    case 3: f["price"] = FieldValue::Null(); break;
    default: f["price"] = FieldValue::Of(int64_t{pick(1000)}); break;
  }
  if (pick(4) != 0) {
    f["score"] = pick(3) == 0 ? FieldValue::Of(int64_t{pick(100)})
                              : FieldValue::Of(std::uniform_real_distribution<double>(0, 100)(rng));
  }
  if (pick(3) != 0) f["flag"] = FieldValue::Of(pick(2) == 0);
  if (pick(3) != 0) {
    const auto geo = [&] {
      return GeoPoint{std::uniform_real_distribution<double>(40, 50)(rng),
                      std::uniform_real_distribution<double>(-5, 15)(rng)};
    };
    f["loc"] = pick(5) == 0 ? FieldValue::List({geo(), geo()}) : FieldValue::Of(geo());
  }
  return f;
}

Condition RandomCondition(std::mt19937& rng, int depth, const std::vector<uint64_t>& ids);

Filter RandomFilter(std::mt19937& rng, int depth, const std::vector<uint64_t>& ids) {
  Filter f;
  const auto some = [&](std::vector<Condition>* cs, int max) {
    const int n = static_cast<int>(rng() % (max + 1));
    for (int i = 0; i < n; ++i) cs->push_back(RandomCondition(rng, depth, ids));
  };
  some(&f.must, 2);
  some(&f.must_not, 1);
  some(&f.should, 2);
  if (rng() % 4 == 0) {
    some(&f.min_should, 3);
    if (!f.min_should.empty()) f.min_should_count = 1 + rng() % f.min_should.size();
  }
  return f;
}

Condition RandomCondition(std::mt19937& rng, int depth, const std::vector<uint64_t>& ids) {
  using T = Condition::Type;
  Condition c;
  const auto tag = [&] { return FieldScalar(absl::StrCat("t", rng() % (kTags + 2))); };
  const auto price = [&] { return FieldScalar(int64_t(rng() % 1000)); };
  const auto bounds = [&](double lo, double hi) {
    RangeBounds r;
    std::uniform_real_distribution<double> u(lo, hi);
    double a = u(rng), b = u(rng);
    if (a > b) std::swap(a, b);
    switch (rng() % 4) {
      case 0: r.gte = a; r.lte = b; break;
      case 1: r.gt = a; r.lt = b; break;
      case 2: r.lte = b; break;
      default: r.gt = std::floor(a); break;
    }
    return r;
  };
  switch (rng() % (depth < 3 ? 15 : 14)) {
    case 0: c.type = T::kMatch; c.key = "tag"; c.value = tag(); break;
    case 1: c.type = T::kMatchAny; c.key = "tag"; c.values = {tag(), tag(), tag()}; break;
    case 2: c.type = T::kMatchExcept; c.key = "tag"; c.values = {tag(), tag()}; break;
    case 3: c.type = T::kMatch; c.key = "price"; c.value = price(); break;
    case 4: c.type = T::kMatchAny; c.key = "price"; c.values = {price(), price()}; break;
    case 5: c.type = T::kRange; c.key = "price"; c.range = bounds(-10, 1010); break;
    case 6: c.type = T::kRange; c.key = "score"; c.range = bounds(-1, 101); break;
    case 7: c.type = T::kMatch; c.key = "flag"; c.value = rng() % 2 == 0; break;
    case 8:
      c.type = T::kGeoRadius;
      c.key = "loc";
      c.center = {45 + (rng() % 100) / 20.0, 5 + (rng() % 100) / 10.0};
      c.radius_m = 50000.0 + (rng() % 400000);
      break;
    case 9:
      c.type = T::kGeoBox;
      c.key = "loc";
      c.top_left = {46 + (rng() % 40) / 10.0, -2 + (rng() % 60) / 10.0};
      c.bottom_right = {c.top_left.lat - (rng() % 50) / 10.0, c.top_left.lon + (rng() % 80) / 10.0};
      break;
    case 10:
      c.type = rng() % 2 == 0 ? T::kIsEmpty : T::kIsNull;
      c.key = rng() % 2 == 0 ? "tag" : "price";
      break;
    case 11:
      c.type = T::kValuesCount;
      c.key = rng() % 2 == 0 ? "tag" : "price";
      c.range = bounds(-0.5, 2.5);
      break;
    case 12:
      c.type = T::kHasId;
      for (int i = 0; i < 20; ++i) c.ids.insert(ids[rng() % ids.size()]);
      break;
    case 13: c.type = T::kMatchExcept; c.key = "price"; c.values = {price()}; break;
    default:
      c.type = T::kNested;
      c.nested = std::make_shared<Filter>(RandomFilter(rng, depth + 1, ids));
      break;
  }
  return c;
}

void DeclareAll(PayloadIndex* index, bool ready = true) {
  index->AddField("tag", FieldIndexType::kKeyword, ready);
  index->AddField("price", FieldIndexType::kInteger, ready);
  index->AddField("score", FieldIndexType::kFloat, ready);
  index->AddField("flag", FieldIndexType::kBool, ready);
  index->AddField("loc", FieldIndexType::kGeo, ready);
}

// ---- The reference semantics ------------------------------------------------------

TEST(FilterSemanticsTest, EachConditionAsDocumented) {
  PayloadFields p;
  p["tag"] = FieldValue::List({std::string("a"), std::string("b")});
  p["price"] = FieldValue::Of(int64_t{500});
  p["half"] = FieldValue::Of(2.5);
  p["none"] = FieldValue::Null();
  p["empty"] = FieldValue::List({});
  p["loc"] = FieldValue::Of(GeoPoint{52.52, 13.405});  // Berlin
  const auto one = [](Condition c) {
    Filter f;
    f.must.push_back(std::move(c));
    return f;
  };
  const auto cond = [](Condition::Type t, std::string key) {
    Condition c;
    c.type = t;
    c.key = std::move(key);
    return c;
  };
  using T = Condition::Type;
  Condition m = cond(T::kMatch, "tag");
  m.value = std::string("b");
  EXPECT_TRUE(Matches(one(m), 1, p));  // some element equals
  m.value = std::string("c");
  EXPECT_FALSE(Matches(one(m), 1, p));
  m = cond(T::kMatch, "price");
  m.value = int64_t{500};
  EXPECT_TRUE(Matches(one(m), 1, p));
  m = cond(T::kMatch, "half");
  m.value = int64_t{2};
  EXPECT_FALSE(Matches(one(m), 1, p));  // an int64 never equals a double
  Condition ex = cond(T::kMatchExcept, "tag");
  ex.values = {std::string("a")};
  EXPECT_TRUE(Matches(one(ex), 1, p));  // "b" is not listed
  ex.values = {std::string("a"), std::string("b")};
  EXPECT_FALSE(Matches(one(ex), 1, p));
  ex.key = "missing";
  EXPECT_FALSE(Matches(one(ex), 1, p));
  ex.key = "none";
  EXPECT_FALSE(Matches(one(ex), 1, p));
  Condition r = cond(T::kRange, "half");
  r.range.gt = 2.5;
  EXPECT_FALSE(Matches(one(r), 1, p));
  r.range.gt.reset();
  r.range.gte = 2.5;
  EXPECT_TRUE(Matches(one(r), 1, p));
  r.key = "tag";
  EXPECT_FALSE(Matches(one(r), 1, p));  // strings are not numbers
  Condition vc = cond(T::kValuesCount, "tag");
  vc.range.gte = 2;
  EXPECT_TRUE(Matches(one(vc), 1, p));
  vc.key = "none";
  EXPECT_FALSE(Matches(one(vc), 1, p));
  EXPECT_TRUE(Matches(one(cond(T::kIsEmpty, "none")), 1, p));
  EXPECT_TRUE(Matches(one(cond(T::kIsEmpty, "empty")), 1, p));
  EXPECT_TRUE(Matches(one(cond(T::kIsEmpty, "missing")), 1, p));
  EXPECT_FALSE(Matches(one(cond(T::kIsEmpty, "tag")), 1, p));
  EXPECT_TRUE(Matches(one(cond(T::kIsNull, "none")), 1, p));
  EXPECT_FALSE(Matches(one(cond(T::kIsNull, "missing")), 1, p));
  Condition g = cond(T::kGeoRadius, "loc");
  g.center = {52.3676, 4.9041};  // Amsterdam, about 577 km away
  g.radius_m = 570000;
  EXPECT_FALSE(Matches(one(g), 1, p));
  g.radius_m = 585000;
  EXPECT_TRUE(Matches(one(g), 1, p));
  Condition box = cond(T::kGeoBox, "loc");
  box.top_left = {53, 13};
  box.bottom_right = {52, 14};
  EXPECT_TRUE(Matches(one(box), 1, p));
  box.top_left = {53, 170};  // across the antimeridian: lon >= 170 or <= 14
  EXPECT_TRUE(Matches(one(box), 1, p));
  box.bottom_right = {52, -170};
  EXPECT_FALSE(Matches(one(box), 1, p));
  Condition id;
  id.type = T::kHasId;
  id.ids = {7};
  EXPECT_TRUE(Matches(one(id), 7, p));
  EXPECT_FALSE(Matches(one(id), 8, p));
  Filter f;
  f.should = {m, id};  // at least one
  EXPECT_TRUE(Matches(f, 7, p));
  EXPECT_FALSE(Matches(f, 8, p));
  EXPECT_TRUE(Matches(Filter(), 8, p));  // an empty filter passes every point
}

TEST(FilterSemanticsTest, BadFiltersSayWhatToFix) {
  Filter deep;
  Filter* at = &deep;
  for (int i = 0; i < 12; ++i) {
    Condition c;
    c.type = Condition::Type::kNested;
    auto next = std::make_shared<Filter>();
    Filter* raw = next.get();
    c.nested = next;
    at->must.push_back(c);
    at = raw;
  }
  EXPECT_THAT(ValidateFilter(deep), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("nests deeper than 8")));
  Filter any;
  Condition c;
  c.type = Condition::Type::kMatchAny;
  c.key = "tag";
  for (int i = 0; i < 2000; ++i) c.values.push_back(absl::StrCat("v", i));
  any.must.push_back(c);
  EXPECT_THAT(ValidateFilter(any), StatusIs(absl::StatusCode::kResourceExhausted,
                                            HasSubstr("at most 1024")));
  Filter range;
  c = Condition();
  c.type = Condition::Type::kRange;
  c.key = "price";
  range.must.push_back(c);
  EXPECT_THAT(ValidateFilter(range), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("at least one of gt, gte, lt, lte")));
  range.must[0].range.lt = std::nan("");
  EXPECT_THAT(ValidateFilter(range), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("NaN")));
  Filter geo;
  c = Condition();
  c.type = Condition::Type::kGeoRadius;
  c.key = "loc";
  c.center = {91, 0};
  geo.must.push_back(c);
  EXPECT_THAT(ValidateFilter(geo), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("off the globe")));
  Filter ms;
  ms.min_should.push_back(range.must[0]);
  ms.min_should[0].range.lt = 3;
  ms.min_should_count = 2;
  EXPECT_THAT(ValidateFilter(ms), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("min_count")));
}

// ---- Payload indexes against the reference ------------------------------------------

// Random points, edits and deletes; for random filters the index's
// evaluation is exactly the reference's over the live points.
// A random filter with always-true and always-false nested filters mixed
// in at every level: {} (every point), must_not [{}] (none), and filters
// built only of those.
Filter WithConstants(std::mt19937& rng, Filter f, int depth) {
  const auto constant = [&](bool all) {
    Condition c;
    c.type = Condition::Type::kNested;
    auto inner = std::make_shared<Filter>();
    if (!all) {
      Condition empty;
      empty.type = Condition::Type::kNested;
      empty.nested = std::make_shared<Filter>();
      inner->must_not.push_back(empty);
    } else if (rng() % 2 == 0) {
      // A filter of nothing but always-true parts is always true too.
      Condition empty;
      empty.type = Condition::Type::kNested;
      empty.nested = std::make_shared<Filter>();
      (rng() % 2 == 0 ? inner->must : inner->should).push_back(empty);
    }
    c.nested = inner;
    return c;
  };
  for (std::vector<Condition>* cs : {&f.must, &f.must_not, &f.should, &f.min_should}) {
    for (Condition& c : *cs) {
      if (c.type == Condition::Type::kNested && depth < 3) {
        c.nested = std::make_shared<Filter>(WithConstants(rng, *c.nested, depth + 1));
      }
    }
    if (rng() % 3 == 0) cs->push_back(constant(rng() % 3 != 0));
  }
  if (!f.min_should.empty() && f.min_should_count == 0) f.min_should_count = 1;
  if (f.min_should_count > f.min_should.size()) f.min_should_count = f.min_should.size();
  return f;
}

// NormalizeFilter never changes what a filter matches, and names the
// filters that match everything or nothing whatever the payloads.
TEST(FilterSemanticsTest, NormalizingKeepsTheMeaningAndFindsMatchAll) {
  std::mt19937 rng(45);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 200; ++i) ids.push_back(i * 3);
  std::vector<PayloadFields> fields;
  for (int i = 0; i < 200; ++i) fields.push_back(RandomFields(rng));
  int all = 0, none = 0;
  for (int round = 0; round < 2000; ++round) {
    const Filter f = WithConstants(rng, RandomFilter(rng, 1, ids), 1);
    ASSERT_OK(ValidateFilter(f));
    Filter g = f;
    const FilterShape shape = NormalizeFilter(&g);
    ASSERT_OK(ValidateFilter(g));
    Filter h = g;
    EXPECT_EQ(NormalizeFilter(&h), shape) << "idempotent";
    size_t passed = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool before = Matches(f, ids[i], fields[i]);
      ASSERT_EQ(before, Matches(g, ids[i], fields[i])) << "round " << round << " point " << i;
      passed += before ? 1 : 0;
    }
    if (shape == FilterShape::kAll) {
      ++all;
      EXPECT_TRUE(g.empty());
      EXPECT_EQ(passed, ids.size());
    }
    if (shape == FilterShape::kNone) {
      ++none;
      EXPECT_EQ(passed, 0u);
    }
  }
  EXPECT_GT(all, 10);
  EXPECT_GT(none, 10);
  // The issue's case: a nested empty filter is a match-all filter.
  Filter nested_empty;
  Condition c;
  c.type = Condition::Type::kNested;
  c.nested = std::make_shared<Filter>();
  nested_empty.must.push_back(c);
  EXPECT_EQ(NormalizeFilter(&nested_empty), FilterShape::kAll);
  EXPECT_TRUE(nested_empty.empty());
  Filter only_empty_should;
  only_empty_should.should.push_back(c);
  only_empty_should.min_should = {c, c};
  only_empty_should.min_should_count = 2;
  EXPECT_EQ(NormalizeFilter(&only_empty_should), FilterShape::kAll);
}

TEST(PayloadIndexTest, AgreesWithTheReferenceOnRandomFilters) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937 rng(seed);
    constexpr uint32_t kN = 3000;
    IdTracker ids;
    ids.Reserve(kN);
    std::vector<uint64_t> ext(kN);
    std::vector<PayloadFields> fields(kN);
    // Range bins from 64 numeric values on (re-cut at 128, 256, ...), so
    // the ranges below run through them, the edits move values between
    // them, and the later Fill builds them as it goes.
    PayloadIndex index(/*min_binned=*/64);
    DeclareAll(&index);
    for (uint32_t i = 0; i < kN; ++i) {
      ext[i] = 1000003ull * i + 17;
      ids.Set(i, ext[i]);
      fields[i] = RandomFields(rng);
      index.Update(i, nullptr, &fields[i]);
    }
    // SetPayload-like edits, and deletes.
    for (int e = 0; e < 1500; ++e) {
      const uint32_t i = rng() % kN;
      PayloadFields after = RandomFields(rng);
      index.Update(i, &fields[i], &after);
      fields[i] = std::move(after);
    }
    for (int e = 0; e < 300; ++e) ids.Kill(rng() % kN);
    ids.Publish(kN);
    // A field declared later fills by Fill (a background build).
    index.RemoveField("score");
    index.AddField("score", FieldIndexType::kFloat, false);
    for (uint32_t i = 0; i < kN; ++i) {
      if (auto it = fields[i].find("score"); it != fields[i].end()) index.Fill("score", i, it->second);
    }
    index.MarkReady("score");
    int nonempty = 0;
    for (int q = 0; q < 400; ++q) {
      const Filter f = RandomFilter(rng, 1, ext);
      ASSERT_OK(ValidateFilter(f));
      MatchSet got;
      ASSERT_OK(index.Evaluate(f, ids, kN, &got));
      uint64_t want = 0;
      for (uint32_t i = 0; i < kN; ++i) {
        const bool pass = ids.IsLive(i) && Matches(f, ext[i], fields[i]);
        want += pass ? 1 : 0;
        ASSERT_EQ(got.Contains(i), pass) << "filter #" << q << ", record " << i;
      }
      EXPECT_EQ(got.Count(), want);
      nonempty += want > 0 && want < kN ? 1 : 0;
    }
    EXPECT_GT(nonempty, 100);  // the filters are not trivial
    EXPECT_GT(index.Bytes(), 0u);
  }
}

// A broad keyword (bitset containers, OR'ed in word by word) and a sparse
// one (array containers), over more than three containers of 2^16 ids and
// a size that is not a multiple of 64: every id as the stored values say,
// dead ones left out.
TEST(PayloadIndexTest, BroadAndSparseKeywordsAcrossContainers) {
  constexpr uint32_t kN = 3 * 65536 + 1003;
  IdTracker ids;
  ids.Reserve(kN);
  PayloadIndex index;
  DeclareAll(&index);
  auto tag_of = [](uint32_t i) {
    return i % 977 == 0 ? "sparse" : i % 2 == 0 ? "even" : i >= kN - 70 ? "tail" : "odd";
  };
  for (uint32_t i = 0; i < kN; ++i) {
    ids.Set(i, i);
    PayloadFields f;
    f["tag"] = FieldValue::Of(std::string(tag_of(i)));
    index.Update(i, nullptr, &f);
  }
  for (uint32_t i = 0; i < kN; i += 5) ids.Kill(i);
  ids.Publish(kN);
  for (const std::vector<std::string>& tags :
       std::vector<std::vector<std::string>>{{"even"}, {"sparse"}, {"tail"}, {"even", "tail"}}) {
    SCOPED_TRACE(absl::StrJoin(tags, ","));
    Filter f;
    Condition c;
    c.key = "tag";
    c.type = Condition::Type::kMatchAny;
    for (const std::string& t : tags) c.values.push_back(t);
    f.must.push_back(c);
    MatchSet got;
    ASSERT_OK(index.Evaluate(f, ids, kN, &got));
    uint64_t want = 0;
    for (uint32_t i = 0; i < kN; ++i) {
      const bool pass = i % 5 != 0 && std::count(tags.begin(), tags.end(), tag_of(i)) > 0;
      want += pass;
      ASSERT_EQ(got.Contains(i), pass) << "record " << i;
    }
    EXPECT_EQ(got.Count(), want);
  }
}

// Integer ranges near the ends of int64 and past 2^53, where int64 ->
// double rounds: the index agrees with the reference (which compares as
// double).
TEST(PayloadIndexTest, IntegerRangesAtTheEdgesOfInt64) {
  const std::vector<int64_t> values = {
      std::numeric_limits<int64_t>::min(), -(int64_t{1} << 60) - 41, -9007199254740993,
      -1, 0, 1, 9007199254740993, (int64_t{1} << 60) - 41, (int64_t{1} << 60),
      9210000000000000000, std::numeric_limits<int64_t>::max() - 5,
      std::numeric_limits<int64_t>::max()};
  IdTracker ids;
  ids.Reserve(values.size());
  PayloadIndex index;
  index.AddField("n", FieldIndexType::kInteger, true);
  std::vector<PayloadFields> fields(values.size());
  for (uint32_t i = 0; i < values.size(); ++i) {
    ids.Set(i, i);
    fields[i]["n"] = FieldValue::Of(values[i]);
    index.Update(i, nullptr, &fields[i]);
  }
  ids.Publish(values.size());
  const std::vector<double> bounds = {-9.3e18, -9223372036854775808.0, -1.152921504606847e18,
                                      -9007199254740992.0, -0.5, 0, 0.5,
                                      9007199254740992.0, 1152921504606846976.0, 9.2e18,
                                      9223372036854775808.0, 9.3e18};
  for (double b : bounds) {
    for (int kind = 0; kind < 4; ++kind) {
      Condition c;
      c.type = Condition::Type::kRange;
      c.key = "n";
      if (kind == 0) c.range.gte = b;
      if (kind == 1) c.range.gt = b;
      if (kind == 2) c.range.lte = b;
      if (kind == 3) c.range.lt = b;
      Filter f;
      f.must.push_back(c);
      MatchSet got;
      ASSERT_OK(index.Evaluate(f, ids, values.size(), &got));
      for (uint32_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(got.Contains(i), Matches(f, i, fields[i]))
            << "value " << values[i] << " bound " << b << " kind " << kind;
      }
    }
  }
}

// A build of an older declaration of a field cannot mark a newer one
// ready (a delete and re-create during a build).
TEST(PayloadIndexTest, AnOlderGenerationDoesNotMarkANewerIndexReady) {
  PayloadIndex index;
  const uint64_t g1 = index.AddField("f", FieldIndexType::kKeyword, false);
  const uint64_t g2 = index.AddField("f", FieldIndexType::kKeyword, false);
  EXPECT_NE(g1, g2);
  EXPECT_FALSE(index.IsCurrent("f", g1));
  index.MarkReady("f", g1);
  EXPECT_FALSE(index.IsReady("f"));
  index.MarkReady("f", g2);
  EXPECT_TRUE(index.IsReady("f"));
}

TEST(PayloadIndexTest, ConditionsAnIndexCannotAnswerAreInvalidArgument) {
  IdTracker ids;
  ids.Reserve(1);
  ids.Set(0, 5);
  ids.Publish(1);
  PayloadIndex index;
  DeclareAll(&index);
  const auto eval = [&](Condition c) {
    Filter f;
    f.must.push_back(std::move(c));
    MatchSet m;
    return index.Evaluate(f, ids, 1, &m);
  };
  Condition c;
  c.type = Condition::Type::kRange;
  c.key = "tag";
  c.range.lt = 3;
  EXPECT_THAT(eval(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("has a keyword index; a range needs an integer or a float")));
  c = Condition();
  c.type = Condition::Type::kMatch;
  c.key = "price";
  c.value = std::string("cheap");
  EXPECT_THAT(eval(c), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("keyword")));
  c.key = "unindexed";
  EXPECT_THAT(eval(c), StatusIs(absl::StatusCode::kFailedPrecondition));
  std::string unindexed;
  bool building = true;
  Filter f;
  f.must.push_back(c);
  EXPECT_FALSE(index.CanEvaluate(f, &unindexed, &building));
  EXPECT_EQ(unindexed, "unindexed");
  EXPECT_FALSE(building);
  index.AddField("unindexed", FieldIndexType::kKeyword, /*ready=*/false);
  EXPECT_FALSE(index.CanEvaluate(f, &unindexed, &building));
  EXPECT_TRUE(building);
}

// ---- Filtered search through a Collection -----------------------------------------

constexpr uint32_t kDim = 16;

std::vector<float> ClusteredVectors(size_t n, uint32_t seed, uint32_t clusters = 24,
                                    std::vector<int>* cluster_of = nullptr) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::mt19937 crng(7 + kDim);
  std::vector<float> centres(size_t{clusters} * kDim);
  for (float& c : centres) c = 2.0f * g(crng);
  std::vector<float> out(n * kDim);
  if (cluster_of != nullptr) cluster_of->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = rng() % clusters;
    if (cluster_of != nullptr) (*cluster_of)[i] = static_cast<int>(c);
    for (uint32_t j = 0; j < kDim; ++j) out[i * kDim + j] = centres[c * kDim + j] + g(rng);
  }
  return out;
}

class FilteredCollectionTest : public ::testing::Test {
 protected:
  FilteredCollectionTest() {
    options_.data_dir = tmp_.File("data");
    options_.collection.auto_build_min_points = 0;
    options_.collection.build_threads = 1;
  }
  ~FilteredCollectionTest() override { db_.reset(); }
  void OpenDb() {
    auto db = Database::Open(options_);
    ASSERT_OK(db.status());
    db_ = std::move(db).value();
  }
  std::shared_ptr<Collection> Create(const std::string& name, index::IndexKind kind,
                                     uint32_t dim = kDim) {
    CollectionConfig config;
    config.name = name;
    config.dim = dim;
    config.metric = Metric::kL2;
    config.index.kind = kind;
    auto c = db_->CreateCollection(config);
    EXPECT_OK(c.status());
    return c.ok() ? *c : nullptr;
  }
  std::shared_ptr<Collection> Get(const std::string& name) {
    auto c = db_->GetCollection(name);
    EXPECT_OK(c.status());
    return c.ok() ? *c : nullptr;
  }

  TempDir tmp_;
  DatabaseOptions options_;
  std::unique_ptr<Database> db_;
};

// The model's ids passing `f`, best first for query q (the oracle).
std::vector<uint64_t> FilteredOracle(const std::map<uint64_t, std::pair<std::vector<float>, PayloadFields>>& model,
                                     const Filter& f, const float* q, size_t k) {
  std::vector<std::pair<double, uint64_t>> d;
  for (const auto& [id, p] : model) {
    if (!Matches(f, id, p.second)) continue;
    double s = 0;
    for (size_t j = 0; j < p.first.size(); ++j) s += double(q[j] - p.first[j]) * (q[j] - p.first[j]);
    d.emplace_back(s, id);
  }
  std::sort(d.begin(), d.end());
  std::vector<uint64_t> out;
  for (size_t i = 0; i < std::min(k, d.size()); ++i) out.push_back(d[i].second);
  return out;
}

Filter TagFilter(const std::string& tag) {
  Filter f;
  Condition c;
  c.type = Condition::Type::kMatch;
  c.key = "tag";
  c.value = tag;
  f.must.push_back(c);
  return f;
}

// Recall@10 against the filtered oracle for every strategy (forced, and
// the planner's choice) and both preview kinds, on real SIFT descriptors
// (tests/data/sift-ngt-5k, 4,500 points) with filters from 50% down to a
// handful of points; never fewer than min(k, matches) hits, and every hit
// passes the filter.
TEST_F(FilteredCollectionTest, EveryStrategyFindsTheFilteredNeighbours) {
  OpenDb();
  constexpr size_t kQ = 40, kK = 10;
  std::mt19937 rng(11);
  auto sift = LoadVecsAsFloat(::zoom::testing::TestDataPath("sift-ngt-5k/base.bvecs"));
  ASSERT_OK(sift.status());
  auto sift_queries =
      LoadVecsAsFloat(::zoom::testing::TestDataPath("sift-ngt-5k/query.bvecs"), kQ);
  ASSERT_OK(sift_queries.status());
  const uint32_t kDim = sift->dim;  // 128 (shadows the synthetic tests' 16)
  const size_t kN = sift->rows;
  const std::vector<float>& base = sift->data;
  const std::vector<float>& queries = sift_queries->data;
  for (index::IndexKind kind : {index::IndexKind::kHnswPq, index::IndexKind::kIvfHnswPq}) {
    SCOPED_TRACE(index::IndexKindName(kind));
    auto c = Create(absl::StrCat("c", static_cast<int>(kind)), kind, kDim);
    ASSERT_NE(c, nullptr);
    ASSERT_OK(c->field_indexes().Create("tag", FieldIndexType::kKeyword, /*background=*/false));
    ASSERT_OK(c->field_indexes().Create("price", FieldIndexType::kInteger, /*background=*/false));
    std::map<uint64_t, std::pair<std::vector<float>, PayloadFields>> model;
    std::vector<PayloadFields> fields(kN);
    std::vector<PointRef> refs;
    for (size_t i = 0; i < kN; ++i) {
      fields[i]["tag"] = FieldValue::Of(ZipfTag(rng));
      fields[i]["price"] = FieldValue::Of(int64_t(rng() % 10000));
      refs.push_back({i, base.data() + i * kDim, "", &fields[i]});
      model[i] = {std::vector<float>(base.data() + i * kDim, base.data() + (i + 1) * kDim),
                  fields[i]};
    }
    ASSERT_OK(c->Upsert(refs));
    ASSERT_OK(c->maintenance().StartBuild());
    ASSERT_OK(c->maintenance().WaitForBuild());
    std::vector<Filter> filters = {TagFilter("t0"), TagFilter("t3"), TagFilter("t11")};
    Filter narrow;  // about 1%
    Condition r;
    r.type = Condition::Type::kRange;
    r.key = "price";
    r.range.lt = 100;
    narrow.must.push_back(r);
    filters.push_back(narrow);
    Filter tiny = narrow;  // a few points: t5 and price < 100
    tiny.must.push_back(TagFilter("t5").must[0]);
    filters.push_back(tiny);
    for (size_t fi = 0; fi < filters.size(); ++fi) {
      const Filter& f = filters[fi];
      auto count = c->Count(&f);
      ASSERT_OK(count.status());
      EXPECT_FALSE(count->scan);
      for (FilterStrategy s : {FilterStrategy::kNone, FilterStrategy::kExact,
                               FilterStrategy::kMatchScan, FilterStrategy::kFilteredPreview,
                               FilterStrategy::kPostFilter}) {
        SCOPED_TRACE(absl::StrCat("filter #", fi, " (", count->count, " matches), forced ",
                                  FilterStrategyName(s)));
        double recall = 0;
        for (size_t q = 0; q < kQ; ++q) {
          const float* qv = queries.data() + q * kDim;
          const std::vector<uint64_t> want = FilteredOracle(model, f, qv, kK);
          CollectionSearchParams p;
          p.engine.k = kK;
          // Modest knobs (unfiltered recall@10 ~0.95-0.99 here), so that the
          // preview's ranking matters.
          p.engine.rerank_candidates = 40;
          p.engine.ef = 40;
          p.engine.nprobe = 8;
          p.engine.force_strategy = s;
          p.filter = &f;
          QueryResult res;
          ASSERT_OK(c->Search(absl::MakeConstSpan(qv, kDim), p, &res));
          ASSERT_EQ(res.hits.size(), std::min<size_t>(kK, count->count));
          EXPECT_EQ(res.stats.filter_matches, count->count);
          size_t hit = 0;
          for (const Hit& h : res.hits) {
            ASSERT_TRUE(Matches(f, h.id, model.at(h.id).second)) << "hit " << h.id;
            hit += std::count(want.begin(), want.end(), h.id);
          }
          recall += want.empty() ? 1.0 : double(hit) / want.size();
        }
        recall /= kQ;
        // The planner, exact and the match scan (every matching code
        // ranked): the issue's floor. A forced strategy still finds k
        // (widened, or exact as the last resort); a forced post-filter at
        // mid shares misses the matches its nprobe lists do not hold (why
        // the planner takes it only for near-unfiltered queries).
        const double floor = s == FilterStrategy::kNone || s == FilterStrategy::kExact ||
                                     s == FilterStrategy::kMatchScan
                                 ? 0.95
                             : s == FilterStrategy::kPostFilter ? 0.8
                                                                : 0.85;
        EXPECT_GE(recall, floor);
      }
    }
  }
}

// Randomized filters (seeded): never fewer than min(k, matches) hits, all
// passing, whatever the strategy.
TEST_F(FilteredCollectionTest, NeverFewerThanKWhenKMatch) {
  OpenDb();
  constexpr size_t kN = 3000;
  std::mt19937 rng(5);
  const std::vector<float> base = ClusteredVectors(kN, 3);
  auto c = Create("c", index::IndexKind::kHnswPq);
  ASSERT_NE(c, nullptr);
  for (const auto& [f, t] : std::vector<std::pair<std::string, FieldIndexType>>{
           {"tag", FieldIndexType::kKeyword}, {"price", FieldIndexType::kInteger},
           {"score", FieldIndexType::kFloat}, {"flag", FieldIndexType::kBool},
           {"loc", FieldIndexType::kGeo}}) {
    ASSERT_OK(c->field_indexes().Create(f, t, /*background=*/false));
  }
  std::vector<PayloadFields> fields(kN);
  std::vector<uint64_t> ids(kN);
  std::vector<PointRef> refs;
  for (size_t i = 0; i < kN; ++i) {
    fields[i] = RandomFields(rng);
    ids[i] = i;
    refs.push_back({i, base.data() + i * kDim, "", &fields[i]});
  }
  ASSERT_OK(c->Upsert(refs));
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  int tried = 0;
  for (int q = 0; q < 150; ++q) {
    const Filter f = RandomFilter(rng, 1, ids);
    auto count = c->Count(&f);
    ASSERT_OK(count.status());
    for (FilterStrategy s : {FilterStrategy::kNone, FilterStrategy::kMatchScan,
                             FilterStrategy::kFilteredPreview, FilterStrategy::kPostFilter}) {
      CollectionSearchParams p;
      p.engine.k = 10;
      p.engine.force_strategy = s;
      p.filter = &f;
      QueryResult res;
      ASSERT_OK(c->Search(absl::MakeConstSpan(base.data() + (q % kN) * kDim, kDim), p, &res));
      ASSERT_EQ(res.hits.size(), std::min<uint64_t>(10, count->count))
          << "filter #" << q << " forced " << FilterStrategyName(s);
      for (const Hit& h : res.hits) ASSERT_TRUE(Matches(f, h.id, fields[h.id]));
      ++tried;
    }
  }
  EXPECT_EQ(tried, 600);
}

// The Collection's counts follow every write; the index is rebuilt at
// open and at compaction, and travels in snapshots; a filter on a field
// without an index is evaluated from the stored payloads, flagged, with
// the same answer.
TEST_F(FilteredCollectionTest, IndexesFollowEveryWriteCompactionRestartAndSnapshot) {
  OpenDb();
  constexpr size_t kN = 2000;
  std::mt19937 rng(9);
  std::vector<float> base = ClusteredVectors(kN, 4);
  auto c = Create("c", index::IndexKind::kIvfHnswPq);
  ASSERT_NE(c, nullptr);
  // Declared before any point: it fills as they arrive (built in the
  // background over nothing).
  ASSERT_OK(c->field_indexes().Create("tag", FieldIndexType::kKeyword));
  std::map<uint64_t, PayloadFields> model;
  std::vector<PayloadFields> fields(kN);
  std::vector<PointRef> refs;
  for (size_t i = 0; i < kN; ++i) {
    fields[i] = RandomFields(rng);
    refs.push_back({i, base.data() + i * kDim, "", &fields[i]});
    model[i] = fields[i];
  }
  ASSERT_OK(c->Upsert(refs));
  // Declared after: built in the background over the points present.
  ASSERT_OK(c->field_indexes().Create("price", FieldIndexType::kInteger));
  ASSERT_OK(c->field_indexes().Create("price", FieldIndexType::kInteger));  // again: OK
  EXPECT_THAT(c->field_indexes().Create("price", FieldIndexType::kKeyword),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("delete it first")));
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < kN; ++i) ids.push_back(i);
  std::vector<Filter> filters;
  for (int i = 0; i < 60; ++i) {
    Filter f = RandomFilter(rng, 1, ids);
    // Only tag, price and has_id conditions stay indexed; others scan.
    filters.push_back(std::move(f));
  }
  const auto check = [&](const char* when) {
    SCOPED_TRACE(when);
    std::shared_ptr<Collection> col = Get("c");
    for (size_t fi = 0; fi < filters.size(); ++fi) {
      uint64_t want = 0;
      for (const auto& [id, f] : model) want += Matches(filters[fi], id, f) ? 1 : 0;
      // Until the background build has finished, counts scan: same answer.
      auto got = col->Count(&filters[fi]);
      ASSERT_OK(got.status());
      ASSERT_EQ(got->count, want) << "filter #" << fi;
    }
  };
  check("after upsert");
  // Overwrites (new records), SetPayload / DeletePayload (same records),
  // deletes.
  std::vector<PointRef> again;
  std::vector<PayloadFields> newer(300);
  for (size_t i = 0; i < 300; ++i) {
    newer[i] = RandomFields(rng);
    again.push_back({i * 3, base.data() + i * kDim, "", &newer[i]});
    model[i * 3] = newer[i];
  }
  ASSERT_OK(c->Upsert(again));
  PayloadFields set;
  set["tag"] = FieldValue::Of(std::string("t1"));
  std::vector<uint64_t> some = {1, 2, 4, 5, 7};
  ASSERT_OK(c->SetPayload(some, set, /*overwrite=*/false).status());
  for (uint64_t id : some) model[id]["tag"] = set["tag"];
  ASSERT_OK(c->DeletePayload(std::vector<uint64_t>{8, 10}, std::vector<std::string>{"tag"}).status());
  model[8].erase("tag");
  model[10].erase("tag");
  ASSERT_OK(c->SetPayload(std::vector<uint64_t>{11}, set, /*overwrite=*/true).status());
  model[11] = set;
  std::vector<uint64_t> gone;
  for (uint64_t i = 100; i < 700; ++i) gone.push_back(i);
  ASSERT_OK(c->Delete(gone).status());
  for (uint64_t id : gone) model.erase(id);
  check("after overwrites, payload edits and deletes");
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  ASSERT_OK(c->maintenance().Compact());
  check("after compaction");
  CollectionInfo info = c->Info();
  ASSERT_EQ(info.field_indexes.size(), 2u);
  EXPECT_TRUE(info.field_indexes[0].ready);
  EXPECT_GT(info.field_indexes[0].bytes, 0u);
  const std::string snap = tmp_.File("c.zsnap");
  ASSERT_OK(c->WriteSnapshot(snap).status());
  c.reset();
  db_.reset();
  OpenDb();
  check("after restart");
  info = Get("c")->Info();
  ASSERT_EQ(info.field_indexes.size(), 2u);
  EXPECT_TRUE(info.field_indexes[1].ready);
  // A filter on an unindexed field: a scan, flagged, the same answer.
  Filter flag;
  Condition fc;
  fc.type = Condition::Type::kMatch;
  fc.key = "flag";
  fc.value = true;
  flag.must.push_back(fc);
  uint64_t want = 0;
  for (const auto& [id, f] : model) want += Matches(flag, id, f) ? 1 : 0;
  auto got = Get("c")->Count(&flag);
  ASSERT_OK(got.status());
  EXPECT_TRUE(got->scan);
  EXPECT_EQ(got->count, want);
  CollectionSearchParams p;
  p.engine.k = 5;
  p.filter = &flag;
  QueryResult res;
  ASSERT_OK(Get("c")->Search(absl::MakeConstSpan(base.data(), kDim), p, &res));
  EXPECT_TRUE(res.stats.filter_scan);
  EXPECT_EQ(res.hits.size(), 5u);
  // A range on the keyword-indexed field: what to fix.
  Filter bad;
  fc = Condition();
  fc.type = Condition::Type::kRange;
  fc.key = "tag";
  fc.range.gt = 1;
  bad.must.push_back(fc);
  EXPECT_THAT(Get("c")->Search(absl::MakeConstSpan(base.data(), kDim), [&] {
    CollectionSearchParams b;
    b.engine.k = 5;
    b.filter = &bad;
    return b;
  }(), &res), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("keyword index")));
  // Restored from the snapshot: the same declared indexes and counts.
  auto restored = db_->RestoreSnapshot(snap, "r", /*overwrite=*/false);
  if (restored.ok()) {
    EXPECT_EQ((*restored)->Info().field_indexes.size(), 2u);
    for (const Filter& f : filters) {
      auto a = (*restored)->Count(&f);
      auto b = Get("c")->Count(&f);
      ASSERT_OK(a.status());
      ASSERT_OK(b.status());
      EXPECT_EQ(a->count, b->count);
    }
  } else {
    ADD_FAILURE() << restored.status();
  }
  ASSERT_OK(Get("c")->field_indexes().Delete("price"));
  EXPECT_THAT(Get("c")->field_indexes().Delete("price"), StatusIs(absl::StatusCode::kNotFound));
  check("after deleting an index (scans)");
}

// Scroll pages through exactly the passing points in id order; Delete by
// filter removes exactly them (and a filter on nothing indexed works too).
TEST_F(FilteredCollectionTest, ScrollPagesAndDeleteByFilter) {
  OpenDb();
  constexpr size_t kN = 1500;
  std::mt19937 rng(21);
  const std::vector<float> base = ClusteredVectors(kN, 8);
  auto c = Create("c", index::IndexKind::kHnswPq);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->field_indexes().Create("tag", FieldIndexType::kKeyword, false));
  std::map<uint64_t, PayloadFields> model;
  std::vector<PayloadFields> fields(kN);
  std::vector<PointRef> refs;
  for (size_t i = 0; i < kN; ++i) {
    fields[i] = RandomFields(rng);
    const uint64_t id = 7 * i + 3;  // sparse ids
    refs.push_back({id, base.data() + i * kDim, "", &fields[i]});
    model[id] = fields[i];
  }
  ASSERT_OK(c->Upsert(refs));
  std::vector<uint64_t> ids;
  for (const auto& [id, f] : model) ids.push_back(id);
  for (int round = 0; round < 8; ++round) {
    const Filter f = round == 0 ? Filter() : RandomFilter(rng, 1, ids);
    std::vector<uint64_t> want;
    for (const auto& [id, p] : model) {
      if (Matches(f, id, p)) want.push_back(id);
    }
    std::vector<uint64_t> got;
    uint64_t offset = 0;
    for (int page = 0; page < 1000; ++page) {
      std::vector<PointData> points;
      std::optional<uint64_t> next;
      bool scan = false;
      ASSERT_OK(c->Scroll(&f, offset, 97, false, true, &points, &next, &scan));
      ASSERT_LE(points.size(), 97u);
      for (const PointData& p : points) {
        got.push_back(p.id);
        EXPECT_EQ(p.fields, model.at(p.id));
      }
      if (!next.has_value()) break;
      ASSERT_EQ(points.size(), 97u);
      ASSERT_GT(*next, got.back());
      offset = *next;
    }
    ASSERT_EQ(got, want) << "round " << round;
  }
  std::vector<PointData> none;
  std::optional<uint64_t> next;
  bool scan = false;
  EXPECT_THAT(c->Scroll(nullptr, 0, 0, false, false, &none, &next, &scan),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Delete by an indexed filter, then by an unindexed one (a scan).
  for (const Filter& f : {TagFilter("t0"), [] {
         Filter g;
         Condition c;
         c.type = Condition::Type::kMatch;
         c.key = "flag";
         c.value = true;
         g.must.push_back(c);
         return g;
       }()}) {
    uint64_t want = 0;
    for (auto it = model.begin(); it != model.end();) {
      if (Matches(f, it->first, it->second)) {
        ++want;
        it = model.erase(it);
      } else {
        ++it;
      }
    }
    ASSERT_GT(want, 0u);
    auto deleted = c->DeleteByFilter(f);
    ASSERT_OK(deleted.status());
    EXPECT_EQ(*deleted, want);
    auto left = c->Count(&f);
    ASSERT_OK(left.status());
    EXPECT_EQ(left->count, 0u);
    EXPECT_EQ(c->Info().points, model.size());
  }
}

// Delete by filter cannot wipe a collection by accident: a filter that
// matches every point whatever the payloads is refused, one that matches
// every live point deletes nothing, unless `all` says so.
TEST_F(FilteredCollectionTest, DeleteByFilterRefusesAWipeUnlessAskedByName) {
  OpenDb();
  constexpr size_t kN = 300;
  const std::vector<float> base = ClusteredVectors(kN, 4);
  auto c = Create("c", index::IndexKind::kHnswPq);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->field_indexes().Create("tag", FieldIndexType::kKeyword, false));
  std::vector<PayloadFields> fields(kN);
  std::vector<PointRef> refs;
  for (size_t i = 0; i < kN; ++i) {
    fields[i]["tag"] = FieldValue::Of(std::string(i % 2 == 0 ? "even" : "odd"));
    refs.push_back({i, base.data() + i * kDim, "", &fields[i]});
  }
  ASSERT_OK(c->Upsert(refs));
  Condition empty;
  empty.type = Condition::Type::kNested;
  empty.nested = std::make_shared<Filter>();
  Filter nested_empty;  // {"must": [{"filter": {}}]}
  nested_empty.must.push_back(empty);
  EXPECT_THAT(c->DeleteByFilter(nested_empty),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("all: true")));
  EXPECT_THAT(c->DeleteByFilter(Filter()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("all: true")));
  Filter either;  // every live point, though not by its shape
  Condition any;
  any.type = Condition::Type::kMatchAny;
  any.key = "tag";
  any.values = {FieldScalar(std::string("even")), FieldScalar(std::string("odd"))};
  either.must.push_back(any);
  EXPECT_THAT(c->DeleteByFilter(either),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("all: true")));
  EXPECT_EQ(c->Info().points, kN);
  // A filter matching nothing by its shape deletes nothing.
  Filter none;
  none.must_not.push_back(empty);
  auto deleted = c->DeleteByFilter(none);
  ASSERT_OK(deleted.status());
  EXPECT_EQ(*deleted, 0u);
  // Narrow filters work as before; then the rest matches every live point.
  deleted = c->DeleteByFilter(TagFilter("even"));
  ASSERT_OK(deleted.status());
  EXPECT_EQ(*deleted, kN / 2);
  EXPECT_THAT(c->DeleteByFilter(TagFilter("odd")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(c->Info().points, kN / 2);
  deleted = c->DeleteByFilter(TagFilter("odd"), /*all=*/true);
  ASSERT_OK(deleted.status());
  EXPECT_EQ(*deleted, kN / 2);
  EXPECT_EQ(c->Info().points, 0u);
  // An empty collection: nothing matches, nothing to refuse.
  deleted = c->DeleteByFilter(TagFilter("odd"));
  ASSERT_OK(deleted.status());
  EXPECT_EQ(*deleted, 0u);
  ASSERT_OK(c->Upsert(refs));
  deleted = c->DeleteByFilter(Filter(), /*all=*/true);
  ASSERT_OK(deleted.status());
  EXPECT_EQ(*deleted, kN);
}

// Filtered searches and counts while writers upsert, overwrite, edit
// payloads and delete (the sanitizer build runs it): every hit passes the
// filter as the point stood at some moment, nothing crashes.
TEST_F(FilteredCollectionTest, ConcurrentFilteredSearchesDuringWrites) {
  OpenDb();
  constexpr size_t kN = 3000;
  const std::vector<float> base = ClusteredVectors(kN, 6);
  auto c = Create("c", index::IndexKind::kHnswPq);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->field_indexes().Create("tag", FieldIndexType::kKeyword, false));
  std::vector<PayloadFields> fields(kN);
  std::vector<PointRef> refs;
  for (size_t i = 0; i < kN; ++i) {
    fields[i]["tag"] = FieldValue::Of(std::string(i % 10 == 0 ? "rare" : "common"));
    refs.push_back({i, base.data() + i * kDim, "", &fields[i]});
  }
  ASSERT_OK(c->Upsert(refs));
  ASSERT_OK(c->maintenance().StartBuild());
  ASSERT_OK(c->maintenance().WaitForBuild());
  std::atomic<bool> stop{false};
  std::atomic<int> searches{0};
  const Filter rare = TagFilter("rare");
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      for (int q = 0; !stop.load() || q < 20; ++q) {
        CollectionSearchParams p;
        p.engine.k = 10;
        p.filter = &rare;
        p.engine.force_strategy = q % 3 == 0 ? FilterStrategy::kNone
                                  : q % 3 == 1 ? FilterStrategy::kFilteredPreview
                                               : FilterStrategy::kExact;
        QueryResult res;
        absl::Status st =
            c->Search(absl::MakeConstSpan(base.data() + ((q * 7 + t) % kN) * kDim, kDim), p, &res);
        EXPECT_OK(st);
        // Only multiples of 10 are ever tagged rare (the writer toggles
        // them).
        for (const Hit& h : res.hits) EXPECT_EQ(h.id % 10, 0u) << h.id;
        EXPECT_OK(c->Count(&rare).status());
        searches.fetch_add(1);
      }
    });
  }
  std::mt19937 rng(3);
  PayloadFields to_rare;
  to_rare["tag"] = FieldValue::Of(std::string("rare"));
  PayloadFields to_common;
  to_common["tag"] = FieldValue::Of(std::string("common"));
  for (int round = 0; round < 30; ++round) {
    std::vector<PointRef> batch;
    for (int j = 0; j < 50; ++j) {
      const size_t i = rng() % kN;
      batch.push_back({i, base.data() + i * kDim, "", &fields[i]});
    }
    ASSERT_OK(c->Upsert(batch));
    const uint64_t ten = (rng() % (kN / 10)) * 10;
    ASSERT_OK(c->SetPayload(std::vector<uint64_t>{ten}, rng() % 2 == 0 ? to_rare : to_common,
                            false)
                  .status());
    ASSERT_OK(c->Delete(std::vector<uint64_t>{rng() % kN}).status());
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_GE(searches.load(), 40);
}

// Delete by filter while a writer upserts and edits the payloads of other
// points (the evaluation runs without the write lock, so these writes
// invalidate it and it is redone): exactly the points that pass throughout
// are deleted, none of those that never pass.
TEST_F(FilteredCollectionTest, DeleteByFilterDuringWrites) {
  OpenDb();
  constexpr size_t kN = 3000;  // ids [0, kN) pass; [kN, 3 kN) never do
  const std::vector<float> base = ClusteredVectors(3 * kN, 9);
  auto c = Create("c", index::IndexKind::kHnswPq);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->field_indexes().Create("tag", FieldIndexType::kKeyword, false));
  std::vector<PayloadFields> fields(3 * kN);
  std::vector<PointRef> refs;
  for (size_t i = 0; i < 2 * kN; ++i) {
    fields[i]["tag"] = FieldValue::Of(std::string(i < kN ? "doomed" : "kept"));
    refs.push_back({i, base.data() + i * kDim, "", &fields[i]});
  }
  ASSERT_OK(c->Upsert(refs));
  for (size_t i = 2 * kN; i < 3 * kN; ++i) fields[i]["tag"] = FieldValue::Of(std::string("new"));
  const Filter doomed = TagFilter("doomed");
  for (int round = 0; round < 3; ++round) {
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      PayloadFields other;
      other["tag"] = FieldValue::Of(absl::StrCat("kept", round));
      for (size_t j = 0; !stop.load() || j < 10; ++j) {
        const size_t i = kN + j % kN;  // an edit in place of a kept point
        EXPECT_OK(c->SetPayload(std::vector<uint64_t>{i}, other, true).status());
        const size_t n = 2 * kN + j % kN;  // a new point that never passes
        EXPECT_OK(c->Upsert(std::vector<PointRef>{{n, base.data() + n * kDim, "", &fields[n]}}));
      }
    });
    auto deleted = c->DeleteByFilter(doomed);
    stop = true;
    writer.join();
    ASSERT_OK(deleted.status());
    EXPECT_EQ(*deleted, kN);
    auto left = c->Count(&doomed);
    ASSERT_OK(left.status());
    EXPECT_EQ(left->count, 0u);
    std::vector<PointData> got;
    std::vector<uint64_t> kept;
    for (uint64_t i = kN; i < 2 * kN; ++i) kept.push_back(i);
    ASSERT_OK(c->Get(kept, false, false, &got));
    EXPECT_EQ(got.size(), kN) << "a point that never passed was deleted";
    // The doomed ones back: each round deletes under a different mix of
    // concurrent writes.
    ASSERT_OK(c->Upsert(std::vector<PointRef>(refs.begin(), refs.begin() + kN)));
  }
}

}  // namespace
}  // namespace zoom::server
