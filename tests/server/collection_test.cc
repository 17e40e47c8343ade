// Collection and Database without gRPC: upserts, gets, deletes and
// overwrites against an in-memory model, exact search against a brute-force
// oracle (double precision) over the live points, indexed search recall,
// background and automatic builds, recovery (snapshot load, replay of the
// vector log past the snapshot, a torn vector-file tail, a corrupt snapshot,
// a crash during create, left-over files), compaction, drop, and searches
// racing writers, builds and compactions.
#include "server/engine/collection.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/database.h"
#include "storage/block_reader.h"
#include "storage/metadata_store.h"
#include "storage/vector_store.h"
#include "tests/testing/fault_injecting_file_system.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom::server {
namespace {

namespace fs = std::filesystem;

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::zoom::testing::IsOk;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

// One query of `dim` floats through Collection::Search, its hits (and,
// when asked, stats) split out for the assertions.
absl::Status SearchInto(const Collection& c, const float* q, size_t dim,
                        const CollectionSearchParams& p, std::vector<Hit>* hits,
                        QueryStats* stats = nullptr) {
  QueryResult r;
  absl::Status st = c.Search(absl::MakeConstSpan(q, dim), p, &r);
  *hits = std::move(r.hits);
  if (stats != nullptr) *stats = r.stats;
  return st;
}

// Recall@10 floor of the indexed search (ivf_hnsw_pq with the default knobs:
// ef 64, nprobe 16, rerank 100) against the oracle over the live points.
// Measured on this data (one build thread, so deterministic): 0.990 (l2),
// 0.995 (ip), 0.997 (cosine), 0.991-0.995 after more writes, 1.0 after
// compaction. The floor leaves room for other SIMD kernels' rounding.
constexpr double kRecallFloor = 0.95;

// ---- Data -------------------------------------------------------------------

// n points around `clusters` overlapping Gaussian centres (closer to real
// embeddings than isotropic noise, hard enough to keep recall below 1),
// fixed by the seed.
std::vector<float> ClusteredVectors(size_t n, uint32_t dim, uint32_t seed,
                                    uint32_t clusters = 24) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> centre(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  // The centres depend on the dimension only, so that queries drawn with
  // another seed come from the same distribution as the points.
  std::mt19937 crng(7 + dim);
  std::vector<float> centres(size_t{clusters} * dim);
  for (float& c : centres) c = centre(crng);
  std::vector<float> out(n * dim);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = rng() % clusters;
    for (uint32_t j = 0; j < dim; ++j) {
      out[i * dim + j] = centres[c * dim + j] + noise(rng);
    }
  }
  return out;
}

// External ids that are neither dense nor small.
uint64_t ExtId(size_t i) { return 1000003ull * i + 17; }

struct Point {
  std::vector<float> vector;
  std::string payload;
};
// The expected live points of a collection.
using Model = std::map<uint64_t, Point>;

struct Scored {
  uint64_t id;
  double score;
};

double TrueScore(Metric metric, const float* q, const std::vector<float>& x) {
  const size_t d = x.size();
  if (metric == Metric::kL2) {
    double s = 0;
    for (size_t j = 0; j < d; ++j) {
      const double t = double{q[j]} - x[j];
      s += t * t;
    }
    return s;
  }
  double dot = 0, qq = 0, xx = 0;
  for (size_t j = 0; j < d; ++j) {
    dot += double{q[j]} * x[j];
    qq += double{q[j]} * q[j];
    xx += double{x[j]} * x[j];
  }
  if (metric == Metric::kInnerProduct) return dot;
  return dot / std::sqrt(qq * xx);
}

// The brute-force oracle: the best `k` live points of `model`, best first.
std::vector<Scored> Oracle(const Model& model, Metric metric, const float* q,
                           size_t k) {
  std::vector<Scored> all;
  all.reserve(model.size());
  for (const auto& [id, p] : model) {
    all.push_back({id, TrueScore(metric, q, p.vector)});
  }
  auto better = [metric](const Scored& a, const Scored& b) {
    return HigherIsBetter(metric) ? a.score > b.score : a.score < b.score;
  };
  const size_t m = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + m, all.end(), better);
  all.resize(m);
  return all;
}

double Tolerance(double score) { return 1e-4 * std::max(1.0, std::abs(score)); }

// An exact search must return the oracle's points with the oracle's scores.
// Ids may differ only where two oracle scores are closer than float
// rounding could separate.
void ExpectMatchesOracle(const std::vector<Hit>& hits,
                         const Model& model, Metric metric, const float* q,
                         size_t k) {
  const std::vector<Scored> want = Oracle(model, metric, q, k + 1);
  const size_t n = std::min(k, want.size());
  ASSERT_EQ(hits.size(), n);
  std::set<uint64_t> got_ids;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(hits[i].score, want[i].score, Tolerance(want[i].score))
        << "rank " << i;
    auto it = model.find(hits[i].id);
    ASSERT_NE(it, model.end())
        << "rank " << i << ": id " << hits[i].id << " is not a live point";
    EXPECT_NEAR(hits[i].score, TrueScore(metric, q, it->second.vector),
                Tolerance(hits[i].score))
        << "rank " << i << ": the score is not the point's own";
    EXPECT_TRUE(got_ids.insert(hits[i].id).second)
        << "id " << hits[i].id << " returned twice";
  }
  const bool boundary_tie =
      want.size() > n && std::abs(want[n].score - want[n - 1].score) <
                             Tolerance(want[n - 1].score);
  if (!boundary_tie) {
    std::set<uint64_t> want_ids;
    for (size_t i = 0; i < n; ++i) want_ids.insert(want[i].id);
    EXPECT_EQ(got_ids, want_ids);
  }
}

double RecallOf(const std::vector<Hit>& hits,
                const std::vector<Scored>& exact) {
  if (exact.empty()) return 1.0;
  size_t found = 0;
  for (const Scored& s : exact) {
    for (const Hit& h : hits) {
      if (h.id == s.id) {
        ++found;
        break;
      }
    }
  }
  return double(found) / double(exact.size());
}

// A BlockReader that holds one chosen thread's next read until released:
// a search can be stopped between finding its points and reading their
// payloads, deterministically, while another thread changes the collection.
struct ReadGate {
  absl::Mutex mu;
  std::thread::id thread ABSL_GUARDED_BY(mu);
  bool armed ABSL_GUARDED_BY(mu) = false;
  bool entered ABSL_GUARDED_BY(mu) = false;
  bool released ABSL_GUARDED_BY(mu) = false;

  // The calling thread's next read waits for Release().
  void ArmForThisThread() {
    absl::MutexLock l(&mu);
    thread = std::this_thread::get_id();
    armed = true;
  }
  // False if no read came (a guard against hanging, not a timing check).
  bool AwaitEntered() {
    absl::MutexLock l(&mu);
    return mu.AwaitWithTimeout(absl::Condition(&entered), absl::Seconds(60));
  }
  void Release() {
    absl::MutexLock l(&mu);
    released = true;
  }
};

class GatedBlockReader final : public storage::BlockReader {
 public:
  GatedBlockReader(std::unique_ptr<storage::BlockReader> inner,
                   std::shared_ptr<ReadGate> gate)
      : inner_(std::move(inner)), gate_(std::move(gate)) {}

  absl::Status ReadBatch(
      absl::Span<storage::ReadRequest> requests) const override {
    {
      absl::MutexLock l(&gate_->mu);
      if (gate_->armed && gate_->thread == std::this_thread::get_id()) {
        gate_->armed = false;
        gate_->entered = true;
        gate_->mu.Await(absl::Condition(&gate_->released));
      }
    }
    return inner_->ReadBatch(requests);
  }
  absl::StatusOr<uint8_t*> Scratch(size_t bytes) const override {
    return inner_->Scratch(bytes);
  }
  size_t alignment() const override { return inner_->alignment(); }
  storage::IoBackend backend() const override { return inner_->backend(); }
  bool direct_io() const override { return inner_->direct_io(); }
  const std::string& path() const override { return inner_->path(); }
  std::string Describe() const override {
    return "gated " + inner_->Describe();
  }

 private:
  std::unique_ptr<storage::BlockReader> inner_;
  std::shared_ptr<ReadGate> gate_;
};

// ---- Fixture ----------------------------------------------------------------

class CollectionTest : public ::testing::Test {
 protected:
  CollectionTest() {
    options_.data_dir = tmp_.File("data");
    options_.collection.auto_build_min_points = 0;
    // One build thread: a deterministic graph, so recall does not drift.
    options_.collection.build_threads = 1;
  }
  ~CollectionTest() override { db_.reset(); }

  // Every vector file of the database is read through `gate`.
  void UseGatedReads(const std::shared_ptr<ReadGate>& gate) {
    options_.collection.store.reader_factory =
        [gate](const std::string& path, const storage::BlockReaderOptions& o)
        -> absl::StatusOr<std::unique_ptr<storage::BlockReader>> {
      auto inner = storage::MakeBlockReader(path, o);
      if (!inner.ok()) return inner.status();
      return std::make_unique<GatedBlockReader>(std::move(*inner), gate);
    };
  }

  void OpenDb() {
    auto db = Database::Open(options_);
    ASSERT_OK(db.status());
    db_ = std::move(db).value();
  }
  // Callers drop their Collection pointers first: the Database owns the
  // metadata store the collections write their last snapshot to.
  void CloseDb() { db_.reset(); }
  void ReopenDb() {
    CloseDb();
    OpenDb();
  }
  // With the database closed: a function counting the records of a record
  // space in its metadata store (which it keeps open).
  std::function<size_t(uint32_t)> RecordCounter() {
    auto meta = storage::MetadataStore::Open((fs::path(options_.data_dir) / "meta").string(),
                                             storage::MetadataOptions());
    EXPECT_OK(meta.status());
    std::shared_ptr<storage::MetadataStore> store(meta.ok() ? std::move(*meta) : nullptr);
    return [store](uint32_t space) {
      size_t n = 0;
      if (store == nullptr) return n;
      EXPECT_OK(store->ScanRecords(space, [&](InternalId, uint64_t) {
        ++n;
        return absl::OkStatus();
      }));
      return n;
    };
  }

  std::shared_ptr<Collection> Create(
      const std::string& name, uint32_t dim, Metric metric,
      storage::DType dtype = storage::DType::kFloat32) {
    CollectionConfig config;
    config.name = name;
    config.dim = dim;
    config.metric = metric;
    config.dtype = dtype;
    auto c = db_->CreateCollection(config);
    EXPECT_OK(c.status());
    return c.ok() ? *c : nullptr;
  }
  std::shared_ptr<Collection> Get(const std::string& name) {
    auto c = db_->GetCollection(name);
    EXPECT_OK(c.status());
    return c.ok() ? *c : nullptr;
  }

  // Upserts ids[i] with vectors[i * dim ...] and payloads[i] (none when
  // `payloads` is empty), and records them in `model` on success.
  static absl::Status Upsert(Collection& c, const std::vector<uint64_t>& ids,
                             const std::vector<float>& vectors,
                             const std::vector<std::string>& payloads,
                             Model* model) {
    const uint32_t d = c.config().dim;
    std::vector<PointRef> points;
    for (size_t i = 0; i < ids.size(); ++i) {
      points.push_back({ids[i], vectors.data() + i * d,
                        payloads.empty() ? std::string_view() : payloads[i]});
    }
    absl::Status st = c.Upsert(points);
    if (st.ok() && model != nullptr) {
      for (size_t i = 0; i < ids.size(); ++i) {
        Point& p = (*model)[ids[i]];
        p.vector.assign(vectors.begin() + i * d, vectors.begin() + (i + 1) * d);
        p.payload = payloads.empty() ? "" : payloads[i];
      }
    }
    return st;
  }

  // Mean recall@10 (L2) of `queries` at K' 12 and a quarter of the index's
  // lists: equal work whatever nlist a build chose (a retrain on more
  // points picks more lists). The nprobe used goes to *nprobe if not null.
  static double RecallAtAQuarterOfTheLists(Collection& c, const std::vector<float>& queries,
                                           const Model& model, uint32_t* nprobe = nullptr) {
    const uint32_t d = c.config().dim;
    const size_t nq = queries.size() / d;
    const uint32_t np = std::max<uint32_t>(1, c.engine()->index()->spec().nlist / 4);
    if (nprobe != nullptr) *nprobe = np;
    double sum = 0;
    for (size_t q = 0; q < nq; ++q) {
      CollectionSearchParams p;
      p.engine.k = 10;
      p.engine.nprobe = np;
      p.engine.rerank_candidates = 12;
      QueryResult r;
      EXPECT_OK(c.Search(absl::MakeConstSpan(queries.data() + q * d, d), p, &r));
      EXPECT_FALSE(r.stats.exact);
      sum += RecallOf(r.hits, Oracle(model, Metric::kL2, queries.data() + q * d, 10));
    }
    return sum / static_cast<double>(nq);
  }

  // Upserts n points ExtId(first) .. ExtId(first + n - 1) from `vectors`
  // (n * dim) with payloads "p<i>", in batches.
  static void UpsertRange(Collection& c, size_t first, size_t n,
                          const std::vector<float>& vectors, Model* model,
                          size_t batch = 500) {
    const uint32_t d = c.config().dim;
    for (size_t b = 0; b < n; b += batch) {
      const size_t m = std::min(batch, n - b);
      std::vector<uint64_t> ids(m);
      std::vector<std::string> payloads(m);
      for (size_t i = 0; i < m; ++i) {
        ids[i] = ExtId(first + b + i);
        payloads[i] = absl::StrCat("p", first + b + i);
      }
      std::vector<float> v(vectors.begin() + b * d,
                           vectors.begin() + (b + m) * d);
      ASSERT_OK(Upsert(c, ids, v, payloads, model));
    }
  }

  static absl::Status Delete(Collection& c, const std::vector<uint64_t>& ids,
                             Model* model, uint64_t* deleted = nullptr) {
    auto n = c.Delete(ids);
    if (!n.ok()) return n.status();
    if (deleted != nullptr) *deleted = *n;
    for (uint64_t id : ids) model->erase(id);
    return absl::OkStatus();
  }

  static std::vector<Hit> Search(const Collection& c, const float* q,
                                           uint32_t k, bool exact,
                                           bool* exact_used = nullptr,
                                           bool with_payload = false,
                                           bool with_vectors = false) {
    CollectionSearchParams p;
    p.engine.k = k;
    p.engine.exact = exact;
    p.with_payload = with_payload;
    p.engine.with_vectors = with_vectors;
    QueryResult r;
    EXPECT_OK(c.Search(absl::MakeConstSpan(q, c.config().dim), p, &r));
    if (exact_used != nullptr) *exact_used = r.stats.exact;
    return r.hits;
  }

  // Mean recall@10 of the indexed search over `nq` queries (nq * dim).
  static double IndexedRecall(const Collection& c, const Model& model,
                              const std::vector<float>& queries, size_t nq) {
    const uint32_t d = c.config().dim;
    double sum = 0;
    for (size_t q = 0; q < nq; ++q) {
      bool exact_used = true;
      auto hits = Search(c, queries.data() + q * d, 10, false, &exact_used);
      EXPECT_FALSE(exact_used);
      // Whatever the index returns must be live, once, with its own score.
      std::set<uint64_t> seen;
      for (const Hit& h : hits) {
        auto it = model.find(h.id);
        EXPECT_NE(it, model.end()) << "id " << h.id << " is not live";
        EXPECT_TRUE(seen.insert(h.id).second) << "id " << h.id << " twice";
        if (it != model.end()) {
          EXPECT_NEAR(h.score,
                      TrueScore(c.config().metric, queries.data() + q * d,
                                it->second.vector),
                      Tolerance(h.score));
        }
      }
      sum += RecallOf(
          hits, Oracle(model, c.config().metric, queries.data() + q * d, 10));
    }
    return sum / double(nq);
  }

  static void ExpectExactSearchesMatchOracle(const Collection& c,
                                             const Model& model,
                                             const std::vector<float>& queries,
                                             size_t nq, uint32_t k = 10) {
    const uint32_t d = c.config().dim;
    for (size_t q = 0; q < nq; ++q) {
      SCOPED_TRACE(absl::StrCat("query ", q));
      auto hits = Search(c, queries.data() + q * d, k, /*exact=*/true);
      ExpectMatchesOracle(hits, model, c.config().metric,
                          queries.data() + q * d, k);
    }
  }

  // Get returns every point of `model` with its payload and vector (for
  // cosine, the vector normalised).
  static void ExpectGetMatchesModel(const Collection& c, const Model& model) {
    std::vector<uint64_t> ids;
    for (const auto& [id, p] : model) ids.push_back(id);
    std::vector<PointData> got;
    ASSERT_OK(c.Get(ids, true, true, &got));
    ASSERT_EQ(got.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const Point& p = model.at(ids[i]);
      ASSERT_EQ(got[i].id, ids[i]);
      ASSERT_EQ(got[i].payload, p.payload) << ids[i];
      if (c.config().metric != Metric::kCosine) {
        ASSERT_EQ(got[i].vector, p.vector) << ids[i];
      } else {
        ASSERT_EQ(got[i].vector.size(), p.vector.size());
        double norm = 0;
        for (float x : p.vector) norm += double{x} * x;
        norm = std::sqrt(norm);
        for (size_t j = 0; j < p.vector.size(); ++j) {
          ASSERT_NEAR(got[i].vector[j], p.vector[j] / norm, 1e-5) << ids[i];
        }
      }
    }
  }

  // The name of the (last) index snapshot file in `dir`; "" if none.
  static std::string IndexSnapshotIn(const std::string& dir) {
    std::string snapshot;
    for (const std::string& f : FilesIn(dir)) {
      if (f.rfind("index-", 0) == 0) snapshot = f;
    }
    return snapshot;
  }
  static std::vector<std::string> FilesIn(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  TempDir tmp_;
  DatabaseOptions options_;
  std::unique_ptr<Database> db_;
};

// ---- Upsert / Get -----------------------------------------------------------

TEST_F(CollectionTest, UpsertThenGetReturnsVectorsAndPayloads) {
  OpenDb();
  auto c = Create("points", 16, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto v = ClusteredVectors(100, 16, 1);
  std::vector<uint64_t> ids;
  std::vector<std::string> payloads;
  for (size_t i = 0; i < 100; ++i) {
    ids.push_back(ExtId(i));
    // Some without payload, one binary, one large.
    payloads.push_back(i % 3 == 0 ? ""
                       : i == 1   ? std::string("\0bin\xff", 5)
                       : i == 2   ? std::string(50000, 'z')
                                  : absl::StrCat("payload of ", i));
  }
  ASSERT_OK(Upsert(*c, ids, v, payloads, &model));
  ExpectGetMatchesModel(*c, model);

  // Request order, missing ids skipped, nothing asked -> nothing returned.
  std::vector<PointData> got;
  const std::vector<uint64_t> ask = {ExtId(7), 42, ExtId(3), ExtId(7)};
  ASSERT_OK(c->Get(ask, /*with_vectors=*/false, /*with_payload=*/false, &got));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, ExtId(7));
  EXPECT_EQ(got[1].id, ExtId(3));
  EXPECT_EQ(got[2].id, ExtId(7));
  for (const PointData& p : got) {
    EXPECT_THAT(p.vector, IsEmpty());
    EXPECT_THAT(p.payload, IsEmpty());
  }
  ASSERT_OK(c->Get(ask, /*with_vectors=*/false, /*with_payload=*/true, &got));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "payload of 7");
  EXPECT_EQ(got[1].payload, "");
  EXPECT_THAT(got[0].vector, IsEmpty());

  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 100u);
  EXPECT_EQ(info.stored_records, 100u);
  EXPECT_EQ(info.deleted_records, 0u);
  EXPECT_EQ(info.index_state, IndexState::kNone);
}

// A collection's own DRAM cache budget (CollectionConfig::cache_bytes):
// allocated with its engine and counted in its resident bytes, kept across
// a restart, capped by the server's limit (rejected at creation, clamped
// for a stored config once the limit is lowered).
TEST_F(CollectionTest, ACollectionHasItsOwnCacheBudget) {
  OpenDb();
  CollectionConfig config;
  config.name = "cached";
  config.dim = 8;
  config.cache_bytes = 1 << 20;
  ASSERT_OK(db_->CreateCollection(config).status());
  auto plain = Create("plain", 8, Metric::kL2);
  ASSERT_NE(plain, nullptr);
  const uint64_t plain_bytes = plain->Info().resident_bytes;
  auto cached = Get("cached");
  ASSERT_NE(cached, nullptr);
  EXPECT_GT(cached->Info().resident_bytes, plain_bytes + (900 << 10));
  EXPECT_LE(cached->Info().resident_bytes, plain_bytes + (1 << 20));
  config.name = "huge";
  config.cache_bytes = options_.collection.max_cache_bytes + 1;
  EXPECT_THAT(db_->CreateCollection(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--max_cache_bytes")));
  cached.reset();
  plain.reset();
  ReopenDb();
  cached = Get("cached");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->config().cache_bytes, uint64_t{1} << 20);
  EXPECT_GT(cached->Info().resident_bytes, plain_bytes + (900 << 10));
  cached.reset();
  options_.collection.max_cache_bytes = 256 << 10;
  ReopenDb();
  cached = Get("cached");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ(cached->config().cache_bytes, uint64_t{1} << 20);  // as stored
  EXPECT_LE(cached->Info().resident_bytes, plain_bytes + (256 << 10));
}

// One budget for every collection's cache (--max_total_cache_bytes): a
// creation past it is ResourceExhausted and says what is left; a drop gives
// its share back; a collection without cache_bytes counts the server's
// default; after the budget is lowered, an open gives each collection at
// most what is left.
TEST_F(CollectionTest, TheServerHasOneCacheBudgetForAllCollections) {
  constexpr uint64_t kMiB = 1 << 20;
  options_.max_total_cache_bytes = 5 * kMiB / 2;
  OpenDb();
  CollectionConfig config;
  config.dim = 8;
  config.cache_bytes = kMiB;
  for (const char* name : {"a", "b"}) {
    config.name = name;
    ASSERT_OK(db_->CreateCollection(config).status());
  }
  EXPECT_EQ(db_->CacheBytesInUse(), 2 * kMiB);
  config.name = "c";
  EXPECT_THAT(db_->CreateCollection(config).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("524288 of 2621440 bytes left"),
                             HasSubstr("--max_total_cache_bytes"))));
  EXPECT_THAT(db_->GetCollection("c").status(), StatusIs(absl::StatusCode::kNotFound));
  config.cache_bytes = kMiB / 2;
  ASSERT_OK(db_->CreateCollection(config).status());
  EXPECT_EQ(db_->CacheBytesLeft(), 0u);
  ASSERT_NE(Create("plain", 8, Metric::kL2), nullptr);  // no cache: no share
  ASSERT_OK(db_->DropCollection("a"));
  EXPECT_EQ(db_->CacheBytesLeft(), kMiB);
  config.name = "d";
  config.cache_bytes = kMiB;
  ASSERT_OK(db_->CreateCollection(config).status());
  // The server's default cache counts for a collection that sets none.
  options_.collection.engine.cache_bytes = kMiB / 4;
  options_.max_total_cache_bytes = 23 * kMiB / 8;  // an eighth left after the four
  ReopenDb();
  EXPECT_EQ(db_->CacheBytesInUse(), 5 * kMiB / 2 + kMiB / 4);  // b, c, d and plain
  CollectionConfig plain2;
  plain2.name = "plain2";
  plain2.dim = 8;  // a quarter more does not fit
  EXPECT_THAT(db_->CreateCollection(plain2).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("--cache_bytes")));
  // Lowered: the collections opened first keep theirs, the rest get what
  // is left.
  options_.collection.engine.cache_bytes = 0;
  options_.max_total_cache_bytes = 3 * kMiB / 2;
  ReopenDb();
  EXPECT_EQ(db_->CacheBytesInUse(), 3 * kMiB / 2);
  for (const char* name : {"b", "c", "d"}) {
    auto c = Get(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_LE(c->cache_bytes(), c->config().cache_bytes) << name;
  }
}

TEST_F(CollectionTest, CosineVectorsComeBackNormalised) {
  OpenDb();
  auto c = Create("cos", 8, Metric::kCosine);
  ASSERT_NE(c, nullptr);
  const std::vector<float> v = {3, 4, 0, 0, 0, 0, 0, 0,  //
                                1, 1, 1, 1, 1, 1, 1, 1,  //
                                0, 0, 0, 0, 0, 0, 0, -1e-3f};
  ASSERT_OK(Upsert(*c, {1, 2, 3}, v, {}, nullptr));
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{1, 2, 3}, true, false, &got));
  ASSERT_EQ(got.size(), 3u);
  const float r = 1 / std::sqrt(8.0f);
  const std::vector<float> want = {0.6f, 0.8f, 0, 0, 0, 0, 0, 0,  //
                                   r,    r,    r, r, r, r, r, r,  //
                                   0,    0,    0, 0, 0, 0, 0, -1};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(got[i].vector.size(), 8u);
    for (size_t j = 0; j < 8; ++j) {
      EXPECT_NEAR(got[i].vector[j], want[i * 8 + j], 1e-6) << i << "," << j;
    }
  }
  // The score of a cosine search is the cosine, whatever the query's norm.
  const float q[8] = {30, 40, 0, 0, 0, 0, 0, 0};
  auto hits = Search(*c, q, 3, /*exact=*/true);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].id, 1u);
  EXPECT_NEAR(hits[0].score, 1.0, 1e-6);
  EXPECT_EQ(hits[1].id, 2u);
  EXPECT_NEAR(hits[1].score, 7 / (5 * std::sqrt(8.0)), 1e-6);
  EXPECT_EQ(hits[2].id, 3u);
  EXPECT_NEAR(hits[2].score, 0.0, 1e-6);
}

TEST_F(CollectionTest, Uint8CollectionStoresIntegersAndRejectsOthers) {
  OpenDb();
  auto c = Create("bytes", 4, Metric::kL2, storage::DType::kUint8);
  ASSERT_NE(c, nullptr);
  Model model;
  ASSERT_OK(Upsert(*c, {10, 11}, {0, 1, 254, 255, 17, 0, 128, 3}, {"a", "b"},
                   &model));
  ExpectGetMatchesModel(*c, model);

  // Out of range or fractional: InvalidArgument, and the whole batch is
  // refused (the good point of it is not stored either).
  for (float bad : {1.5f, 256.0f, -1.0f, 0.5f}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(
        Upsert(*c, {20, 21}, {1, 2, 3, 4, 1, 2, bad, 4}, {}, nullptr),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("uint8")));
  }
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 2u);
  EXPECT_EQ(info.stored_records, 2u);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{20, 21}, true, true, &got));
  EXPECT_THAT(got, IsEmpty());
  ExpectGetMatchesModel(*c, model);
  const float q[4] = {0, 1, 254, 255};
  auto hits = Search(*c, q, 2, true);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].id, 10u);
  EXPECT_EQ(hits[0].score, 0.0f);
}

TEST_F(CollectionTest, NonFiniteVectorsAreRejectedAllOrNothing) {
  OpenDb();
  auto c = Create("finite", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(
        Upsert(*c, {1, 2}, {1, 2, 3, 4, 1, bad, 3, 4}, {}, nullptr),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  }
  EXPECT_EQ(c->Info().points, 0u);
  EXPECT_EQ(c->Info().stored_records, 0u);
  // Queries too.
  ASSERT_OK(Upsert(*c, {1}, {1, 2, 3, 4}, {}, nullptr));
  const float q[4] = {0, nan, 0, 0};
  CollectionSearchParams p;
  std::vector<Hit> hits;
  EXPECT_THAT(
      SearchInto(*c, q, 4, p, &hits),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
}

TEST_F(CollectionTest, ZeroVectorIsRejectedForCosineOnly) {
  OpenDb();
  auto cos = Create("cos", 4, Metric::kCosine);
  auto l2 = Create("l2", 4, Metric::kL2);
  auto ip = Create("ip", 4, Metric::kInnerProduct);
  ASSERT_NE(cos, nullptr);
  ASSERT_NE(l2, nullptr);
  ASSERT_NE(ip, nullptr);
  const std::vector<float> v = {1, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_THAT(Upsert(*cos, {1, 2}, v, {}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero")));
  EXPECT_EQ(cos->Info().points, 0u);
  EXPECT_OK(Upsert(*l2, {1, 2}, v, {}, nullptr));
  EXPECT_OK(Upsert(*ip, {1, 2}, v, {}, nullptr));
  EXPECT_EQ(l2->Info().points, 2u);
  EXPECT_EQ(ip->Info().points, 2u);
}

TEST_F(CollectionTest, LaterDuplicateInOneBatchWins) {
  OpenDb();
  auto c = Create("dups", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(Upsert(*c, {7, 8, 7, 7},
                   {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4},
                   {"first", "eight", "second", "third"}, nullptr));
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{7, 8}, true, true, &got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].vector, (std::vector<float>{4, 4, 4, 4}));
  EXPECT_EQ(got[0].payload, "third");
  EXPECT_EQ(got[1].vector, (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ(got[1].payload, "eight");
  EXPECT_EQ(c->Info().points, 2u);
  // An exact search sees id 7 once, with its last vector.
  const float q[4] = {1, 1, 1, 1};
  auto hits = Search(*c, q, 10, true);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].id, 8u);
  EXPECT_FLOAT_EQ(hits[0].score, 4.0f);
  EXPECT_EQ(hits[1].id, 7u);
  EXPECT_FLOAT_EQ(hits[1].score, 36.0f);
}

TEST_F(CollectionTest, BadRequestsAreInvalidArgument) {
  OpenDb();
  auto c = Create("bad", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->Upsert({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("no points")));
  EXPECT_THAT(c->Delete({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("no ids")));
  const float q[5] = {0, 0, 0, 0, 0};
  CollectionSearchParams p;
  std::vector<Hit> hits;
  EXPECT_THAT(
      SearchInto(*c, q, 5, p, &hits),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5 dimensions")));
  p.engine.k = 0;
  EXPECT_THAT(SearchInto(*c, q, 4, p, &hits),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("k")));
  // An empty collection answers with nothing.
  p.engine.k = 3;
  ASSERT_OK(SearchInto(*c, q, 4, p, &hits));
  EXPECT_THAT(hits, IsEmpty());
  // Names and configs.
  CollectionConfig config;
  config.name = "bad name";
  config.dim = 4;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  config.name = "bad";
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("bad")));
  config.name = "zero_dim";
  config.dim = 0;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim")));
  EXPECT_THAT(db_->GetCollection("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  EXPECT_THAT(db_->DropCollection("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
}

// ---- Exact search -----------------------------------------------------------

class ExactSearchTest : public CollectionTest,
                        public ::testing::WithParamInterface<Metric> {};

TEST_P(ExactSearchTest, BeforeAnyIndexEqualsTheOracleOverLivePoints) {
  const Metric metric = GetParam();
  constexpr uint32_t kDim = 24;
  OpenDb();
  auto c = Create("exact", kDim, metric);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 11), &model);
  // Some deleted, some overwritten with other vectors.
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 2000; i += 7) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  std::vector<uint64_t> over;
  for (size_t i = 3; i < 2000; i += 11) {
    if (model.count(ExtId(i))) over.push_back(ExtId(i));
  }
  ASSERT_OK(
      Upsert(*c, over, ClusteredVectors(over.size(), kDim, 12), {}, &model));

  const auto queries = ClusteredVectors(50, kDim, 99);
  bool exact_used = false;
  Search(*c, queries.data(), 10, /*exact=*/false, &exact_used);
  EXPECT_TRUE(exact_used) << "no index yet: the search must be exact";
  ExpectExactSearchesMatchOracle(*c, model, queries, 50, 10);
  // k larger than the collection's live points is fine elsewhere; here a
  // deep k checks the ordering further down.
  ExpectExactSearchesMatchOracle(*c, model, queries, 5, 200);
}

INSTANTIATE_TEST_SUITE_P(Metrics, ExactSearchTest,
                         ::testing::Values(Metric::kL2, Metric::kInnerProduct,
                                           Metric::kCosine),
                         [](const auto& info) {
                           return std::string(MetricName(info.param));
                         });

// ---- Overwrite and delete ---------------------------------------------------

TEST_F(CollectionTest, OverwriteReturnsThePointOnceWithItsNewVector) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("over", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(1000, kDim, 21);
  UpsertRange(*c, 0, 1000, base, &model);

  auto check = [&](bool exact) {
    // Move point 5 onto point 600's old place... and 600 far away.
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(absl::StrCat(exact ? "exact" : "indexed", " round ", round));
      const uint64_t id = ExtId(5 + round);
      std::vector<float> target(base.begin() + (600 + round) * kDim,
                                base.begin() + (601 + round) * kDim);
      for (float& x : target) x += 0.001f;  // not a tie with 600
      const std::vector<float> old = model.at(id).vector;
      const uint64_t stored = c->Info().stored_records;
      ASSERT_OK(Upsert(*c, {id}, target, {"moved"}, &model));
      const CollectionInfo info = c->Info();
      EXPECT_EQ(info.points, model.size());
      EXPECT_EQ(info.stored_records, stored + 1);
      EXPECT_EQ(info.deleted_records, info.stored_records - model.size());

      auto hits = Search(*c, target.data(), 10, exact, nullptr, true, true);
      ASSERT_FALSE(hits.empty());
      EXPECT_EQ(hits[0].id, id);
      EXPECT_NEAR(hits[0].score, 0.0, 1e-3);
      EXPECT_EQ(hits[0].payload, "moved");
      EXPECT_EQ(hits[0].vector, target);
      int seen = 0;
      for (const auto& h : hits) seen += h.id == id;
      EXPECT_EQ(seen, 1);
      // Searching the old place does not find it there any more.
      hits = Search(*c, old.data(), 10, exact);
      for (const auto& h : hits) {
        if (h.id == id) {
          EXPECT_NEAR(h.score, TrueScore(Metric::kL2, old.data(), target),
                      1e-2);
        }
      }
      if (exact) ExpectMatchesOracle(hits, model, Metric::kL2, old.data(), 10);
    }
  };
  check(/*exact=*/true);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  ASSERT_EQ(c->Info().index_state, IndexState::kReady);
  // Round 2 moves the same ids again, now through the index.
  check(/*exact=*/false);
}

TEST_F(CollectionTest, DeletedPointsAreNeverReturnedAndAreCounted) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("del", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(1000, kDim, 31);
  UpsertRange(*c, 0, 1000, base, &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1000; i += 4) del.push_back(ExtId(i));
  // Duplicates and unknown ids are not counted.
  std::vector<uint64_t> request = del;
  request.push_back(del[0]);
  request.push_back(123456789);
  uint64_t n = 0;
  ASSERT_OK(Delete(*c, request, &model, &n));
  EXPECT_EQ(n, del.size());
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 750u);
  EXPECT_EQ(info.deleted_records, 250u);
  EXPECT_EQ(info.stored_records, 1000u);
  // Again: nothing left to delete.
  ASSERT_OK(Delete(*c, del, &model, &n));
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(c->Info().deleted_records, 250u);

  std::vector<PointData> got;
  ASSERT_OK(c->Get(del, true, true, &got));
  EXPECT_THAT(got, IsEmpty());

  // A query sitting on each deleted point never returns it.
  const absl::flat_hash_set<uint64_t> gone(del.begin(), del.end());
  auto check = [&](bool exact) {
    for (size_t i = 0; i < 1000; i += 4) {
      auto hits = Search(*c, base.data() + i * kDim, 10, exact);
      ASSERT_EQ(hits.size(), 10u);
      for (const auto& h : hits) ASSERT_FALSE(gone.contains(h.id)) << h.id;
    }
  };
  check(true);
  ExpectExactSearchesMatchOracle(*c, model, ClusteredVectors(20, kDim, 32), 20);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  check(false);
  // Deleting after the build works the same.
  std::vector<uint64_t> del2;
  for (size_t i = 1; i < 1000; i += 4) del2.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del2, &model, &n));
  EXPECT_EQ(n, 250u);
  for (size_t i = 1; i < 1000; i += 4) {
    auto hits = Search(*c, base.data() + i * kDim, 10, false);
    for (const auto& h : hits) {
      ASSERT_TRUE(model.count(h.id)) << h.id;
    }
  }
  info = c->Info();
  EXPECT_EQ(info.points, 500u);
  EXPECT_EQ(info.deleted_records, 500u);
}

// ---- Index builds -----------------------------------------------------------

class IndexedSearchTest : public CollectionTest,
                          public ::testing::WithParamInterface<Metric> {};

TEST_P(IndexedSearchTest, BuildReachesReadyWithRecallAndSeesLaterWrites) {
  const Metric metric = GetParam();
  constexpr uint32_t kDim = 24;
  constexpr size_t kN = 3000;
  OpenDb();
  auto c = Create("indexed", kDim, metric);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(kN, kDim, 41);
  UpsertRange(*c, 0, kN, base, &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < kN; i += 10) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));

  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, kN);  // dead records are indexed, filtered
  EXPECT_THAT(info.index_error, IsEmpty());

  const auto queries = ClusteredVectors(100, kDim, 42);
  const double recall = IndexedRecall(*c, model, queries, 100);
  RecordProperty("recall_at_10", std::to_string(recall));
  std::printf("[ recall@10 %s ] %.4f\n", MetricName(metric), recall);
  EXPECT_GE(recall, kRecallFloor);

  // Points upserted after the build are found at once, by the index too;
  // points deleted after it never.
  const auto later = ClusteredVectors(200, kDim, 43);
  UpsertRange(*c, kN, 200, later, &model);
  std::vector<uint64_t> del2;
  for (size_t i = 5; i < kN; i += 10) del2.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del2, &model));
  info = c->Info();
  EXPECT_EQ(info.indexed_points, kN + 200);
  EXPECT_EQ(info.points, model.size());
  // Exact search equals the oracle over the new live set; the new points
  // the oracle ranks in a top 10 are found by the index too.
  size_t new_in_oracle = 0, new_found = 0;
  for (size_t i = 0; i < 200; ++i) {
    SCOPED_TRACE(i);
    const float* v = later.data() + i * kDim;
    auto hits = Search(*c, v, 10, /*exact=*/true);
    ExpectMatchesOracle(hits, model, metric, v, 10);
    // For L2 and cosine the point itself is the best match (for IP a
    // longer vector may beat it).
    if (metric != Metric::kInnerProduct) {
      ASSERT_FALSE(hits.empty());
      EXPECT_EQ(hits[0].id, ExtId(kN + i));
    }
    hits = Search(*c, v, 10, /*exact=*/false);
    for (const Scored& want : Oracle(model, metric, v, 10)) {
      if (want.id < ExtId(kN)) continue;
      ++new_in_oracle;
      for (const auto& h : hits) new_found += h.id == want.id;
    }
  }
  RecordProperty("later_points_found", std::to_string(new_found));
  std::printf("[ later points found %s ] %zu of %zu\n", MetricName(metric),
              new_found, new_in_oracle);
  EXPECT_GE(new_in_oracle, metric == Metric::kInnerProduct ? 20u : 200u);
  EXPECT_GE(double(new_found), 0.95 * double(new_in_oracle));
  // Queries on the points deleted after the build never return them.
  for (size_t i = 5; i < kN; i += 10) {
    const float* v = base.data() + i * kDim;
    for (const auto& h : Search(*c, v, 10, /*exact=*/false)) {
      ASSERT_TRUE(model.count(h.id)) << "deleted id " << h.id << " returned";
    }
  }
  const double recall_after = IndexedRecall(*c, model, queries, 100);
  std::printf("[ recall@10 after writes %s ] %.4f\n", MetricName(metric),
              recall_after);
  EXPECT_GE(recall_after, kRecallFloor);
}

INSTANTIATE_TEST_SUITE_P(Metrics, IndexedSearchTest,
                         ::testing::Values(Metric::kL2, Metric::kInnerProduct,
                                           Metric::kCosine),
                         [](const auto& info) {
                           return std::string(MetricName(info.param));
                         });

// Non-default index options end to end: pq_nbits 4 (ivf_hnsw_pq's fast
// scan) and compact_links (hnsw_pq's bit-packed graph). The config is kept,
// the build reaches the recall floor, and a reopened database serves the
// same answers from the saved index.
TEST_F(CollectionTest, NonDefaultIndexOptionsBuildAndSurviveReopen) {
  constexpr uint32_t kDim = 24;
  constexpr size_t kN = 3000;
  OpenDb();
  std::vector<CollectionConfig> configs(2);
  configs[0].name = "pq4";
  configs[0].index.kind = index::IndexKind::kIvfHnswPq;
  configs[0].index.pq.m = 24;
  configs[0].index.pq.nbits = 4;
  configs[1].name = "compact";
  configs[1].index.kind = index::IndexKind::kHnswPq;
  configs[1].index.pq.m = 12;
  configs[1].index.hnsw.compact_links = true;
  const auto queries = ClusteredVectors(100, kDim, 52);
  std::vector<std::vector<std::vector<uint64_t>>> before(configs.size());
  for (size_t k = 0; k < configs.size(); ++k) {
    CollectionConfig& config = configs[k];
    SCOPED_TRACE(config.name);
    config.dim = kDim;
    config.metric = Metric::kL2;
    ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
    Model model;
    const auto base = ClusteredVectors(kN, kDim, 51);
    UpsertRange(*c, 0, kN, base, &model);
    ASSERT_OK(c->StartBuild());
    ASSERT_OK(c->WaitForBuild());
    EXPECT_EQ(c->Info().index_state, IndexState::kReady);
    EXPECT_EQ(c->config().index.pq.nbits, config.index.pq.nbits);
    EXPECT_EQ(c->config().index.hnsw.compact_links,
              config.index.hnsw.compact_links);
    const double recall = IndexedRecall(*c, model, queries, 100);
    std::printf("[ recall@10 %s ] %.4f\n", config.name.c_str(), recall);
    EXPECT_GE(recall, kRecallFloor);
    for (size_t q = 0; q < 20; ++q) {
      std::vector<uint64_t> ids;
      for (const auto& h : Search(*c, queries.data() + q * kDim, 10, false))
        ids.push_back(h.id);
      before[k].push_back(ids);
    }
  }
  ReopenDb();
  for (size_t k = 0; k < configs.size(); ++k) {
    const CollectionConfig& config = configs[k];
    SCOPED_TRACE(config.name);
    auto again = Get(config.name);
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(again->config().index.pq.nbits, config.index.pq.nbits);
    EXPECT_EQ(again->config().index.hnsw.compact_links,
              config.index.hnsw.compact_links);
    EXPECT_EQ(again->Info().index_state, IndexState::kReady);
    for (size_t q = 0; q < 20; ++q) {
      std::vector<uint64_t> ids;
      for (const auto& h :
           Search(*again, queries.data() + q * kDim, 10, false)) {
        ids.push_back(h.id);
      }
      EXPECT_EQ(ids, before[k][q]) << "query " << q;
    }
  }
}

TEST_F(CollectionTest, StartBuildNeedsAtLeast256LivePoints) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("small", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->StartBuild(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("0 points")));
  Model model;
  UpsertRange(*c, 0, 255, ClusteredVectors(255, kDim, 51), &model);
  EXPECT_THAT(c->StartBuild(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("255 points")));
  // Stored records count only while live.
  UpsertRange(*c, 255, 45, ClusteredVectors(45, kDim, 52), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 100; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  EXPECT_THAT(c->StartBuild(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("200 points")));
  EXPECT_EQ(c->Info().index_state, IndexState::kNone);
  UpsertRange(*c, 300, 56, ClusteredVectors(56, kDim, 53), &model);
  ASSERT_EQ(model.size(), 256u);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
}

TEST_F(CollectionTest, AutoBuildStartsAtTheThreshold) {
  constexpr uint32_t kDim = 16;
  options_.collection.auto_build_min_points = 500;
  OpenDb();
  auto c = Create("auto", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto v = ClusteredVectors(600, kDim, 61);
  UpsertRange(*c, 0, 400, v, &model, 100);
  // Below the threshold nothing starts.
  EXPECT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kNone);
  EXPECT_EQ(c->Info().indexed_points, 0u);
  UpsertRange(*c, 400, 200, std::vector<float>(v.begin() + 400 * kDim, v.end()),
              &model, 100);
  ASSERT_OK(c->WaitForBuild());
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, 600u);
  bool exact_used = true;
  Search(*c, v.data(), 10, false, &exact_used);
  EXPECT_FALSE(exact_used);
}

// ---- Recovery ---------------------------------------------------------------

TEST_F(CollectionTest, ReopenRecoversPointsPayloadsDeletesAndTheIndex) {
  constexpr uint32_t kDim = 24;
  OpenDb();
  auto c = Create("durable", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 71), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 2000; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  std::vector<uint64_t> over = {ExtId(1), ExtId(2), ExtId(4)};
  ASSERT_OK(Upsert(*c, over, ClusteredVectors(3, kDim, 72), {"o1", "", "o4"},
                   &model));
  // A second collection must come back too, untouched.
  auto other = Create("other", 4, Metric::kInnerProduct);
  ASSERT_NE(other, nullptr);
  Model other_model;
  ASSERT_OK(Upsert(*other, {1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, {"x", "y"},
                   &other_model));

  const auto queries = ClusteredVectors(50, kDim, 73);
  std::vector<std::vector<Hit>> exact_before, indexed_before;
  for (size_t q = 0; q < 50; ++q) {
    exact_before.push_back(Search(*c, queries.data() + q * kDim, 10, true));
    indexed_before.push_back(Search(*c, queries.data() + q * kDim, 10, false));
  }
  const CollectionInfo before = c->Info();
  const uint32_t id = c->id();
  c.reset();
  other.reset();
  ReopenDb();

  ASSERT_EQ(db_->ListCollections().size(), 2u);
  c = Get("durable");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->id(), id);
  EXPECT_EQ(c->config().dim, kDim);
  EXPECT_EQ(c->config().metric, Metric::kL2);
  const CollectionInfo after = c->Info();
  EXPECT_EQ(after.points, before.points);
  EXPECT_EQ(after.points, model.size());
  EXPECT_EQ(after.deleted_records, before.deleted_records);
  EXPECT_EQ(after.stored_records, before.stored_records);
  EXPECT_EQ(after.index_state, IndexState::kReady);
  EXPECT_EQ(after.indexed_points, before.indexed_points);
  ExpectGetMatchesModel(*c, model);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(del, false, false, &got));
  EXPECT_THAT(got, IsEmpty());
  for (size_t q = 0; q < 50; ++q) {
    SCOPED_TRACE(q);
    bool exact_used = true;
    auto exact = Search(*c, queries.data() + q * kDim, 10, true);
    auto indexed =
        Search(*c, queries.data() + q * kDim, 10, false, &exact_used);
    EXPECT_FALSE(exact_used);
    ASSERT_EQ(exact.size(), exact_before[q].size());
    ASSERT_EQ(indexed.size(), indexed_before[q].size());
    for (size_t i = 0; i < exact.size(); ++i) {
      EXPECT_EQ(exact[i].id, exact_before[q][i].id);
      EXPECT_EQ(exact[i].score, exact_before[q][i].score);
    }
    for (size_t i = 0; i < indexed.size(); ++i) {
      EXPECT_EQ(indexed[i].id, indexed_before[q][i].id);
      EXPECT_EQ(indexed[i].score, indexed_before[q][i].score);
    }
  }
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  other = Get("other");
  ASSERT_NE(other, nullptr);
  ExpectGetMatchesModel(*other, other_model);
  // Writes continue after the reopen, and survive the next one.
  UpsertRange(*c, 5000, 100, ClusteredVectors(100, kDim, 74), &model);
  c.reset();
  other.reset();
  ReopenDb();
  c = Get("durable");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
}

// Points stored after the last snapshot are replayed into the index on
// open. MarkDropped() keeps the collection from saving a snapshot when it
// closes, which leaves the files as a crash right after the last
// acknowledged write would (the catalog entry is untouched).
TEST_F(CollectionTest, PointsAfterTheLastSnapshotAreReplayedIntoTheIndex) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("replay", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 81), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  const std::string dir = c->dir();
  const auto files_after_build = FilesIn(dir);
  const auto later = ClusteredVectors(300, kDim, 82);
  UpsertRange(*c, 1000, 300, later, &model, 100);
  std::vector<uint64_t> del = {ExtId(1000), ExtId(1001), ExtId(10)};
  ASSERT_OK(Delete(*c, del, &model));
  c->MarkDropped();
  c.reset();
  CloseDb();
  // No newer snapshot was written: the open has to replay.
  ASSERT_EQ(FilesIn(dir), files_after_build);
  OpenDb();
  c = Get("replay");
  ASSERT_NE(c, nullptr);
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, 1300u);
  EXPECT_EQ(info.points, model.size());
  ExpectGetMatchesModel(*c, model);
  size_t found = 0;
  for (size_t i = 2; i < 300; ++i) {
    bool exact_used = true;
    auto hits = Search(*c, later.data() + i * kDim, 10, false, &exact_used);
    ASSERT_FALSE(exact_used);
    for (const auto& h : hits) {
      found += h.id == ExtId(1000 + i);
      ASSERT_TRUE(model.count(h.id)) << h.id;
    }
  }
  std::printf("[ replayed points found by the index ] %zu of 298\n", found);
  EXPECT_GE(found, 290u);
  // The normal close saves a snapshot covering everything; the next open
  // needs no replay and still finds the points.
  c.reset();
  ReopenDb();
  EXPECT_NE(FilesIn(dir), files_after_build);
  c = Get("replay");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, 1300u);
  for (size_t i = 2; i < 300; i += 10) {
    auto hits = Search(*c, later.data() + i * kDim, 1, true);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].id, ExtId(1000 + i));
  }
}

// Vectors in the file that the record map never acknowledged (a crash
// between the vector append and the commit) are never served.
TEST_F(CollectionTest, TornTailOfTheVectorFileIsNeverServed) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kTorn = 40;
  OpenDb();
  auto c = Create("torn", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 91), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  const std::string vectors = (fs::path(c->dir()) / "vectors-1.zvec").string();
  c.reset();
  CloseDb();

  // The torn records sit exactly on the queries: if served, they would win.
  const auto queries = ClusteredVectors(kTorn, kDim, 92);
  {
    ASSERT_OK_AND_ASSIGN(auto store, storage::VectorStore::Open(vectors));
    ASSERT_EQ(store->count(), 1000u);
    ASSERT_OK(store->Append(queries.data(), kTorn));
  }
  OpenDb();
  c = Get("torn");
  ASSERT_NE(c, nullptr);
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 1000u);
  EXPECT_EQ(info.stored_records, 1000u + kTorn);
  EXPECT_EQ(info.deleted_records, kTorn);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  auto check = [&] {
    ExpectExactSearchesMatchOracle(*c, model, queries, kTorn);
    for (size_t q = 0; q < kTorn; ++q) {
      auto hits = Search(*c, queries.data() + q * kDim, 10, false);
      ASSERT_EQ(hits.size(), 10u);
      for (const auto& h : hits) {
        ASSERT_TRUE(model.count(h.id)) << "query " << q << ": id " << h.id;
        EXPECT_GT(h.score, 1e-3) << "query " << q << " found a torn record";
      }
    }
  };
  check();
  // New points go after the torn records and are served; the torn ones
  // stay dead across another reopen.
  const auto more = ClusteredVectors(50, kDim, 93);
  UpsertRange(*c, 2000, 50, more, &model);
  for (size_t i = 0; i < 50; ++i) {
    auto hits = Search(*c, more.data() + i * kDim, 1, true);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].id, ExtId(2000 + i));
  }
  c.reset();
  ReopenDb();
  c = Get("torn");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.points, 1050u);
  EXPECT_EQ(info.deleted_records, kTorn);
  ExpectGetMatchesModel(*c, model);
  check();
}

// ---- Compaction -------------------------------------------------------------

TEST_F(CollectionTest, CompactDropsDeadRecordsAndKeepsPointsAndResults) {
  constexpr uint32_t kDim = 24;
  OpenDb();
  auto c = Create("compact", kDim, Metric::kCosine);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 101), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  std::mt19937 rng(102);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 2000; ++i) {
    if (rng() % 2 == 0) del.push_back(ExtId(i));
  }
  ASSERT_OK(Delete(*c, del, &model));
  // Overwrites leave dead records too.
  std::vector<uint64_t> over;
  for (const auto& [id, p] : model) {
    if (over.size() < 100) over.push_back(id);
  }
  ASSERT_OK(Upsert(*c, over, ClusteredVectors(100, kDim, 103), {}, &model));
  const uint32_t space_before = c->record_space();

  const auto queries = ClusteredVectors(50, kDim, 104);
  std::vector<std::vector<Hit>> before;
  for (size_t q = 0; q < 50; ++q) {
    before.push_back(
        Search(*c, queries.data() + q * kDim, 10, true, nullptr, true));
  }
  const std::vector<std::string> files_before = FilesIn(c->dir());

  ASSERT_OK(c->Compact());
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.stored_records, model.size());
  EXPECT_EQ(info.deleted_records, 0u);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, model.size());
  EXPECT_NE(c->record_space(), space_before);
  // The old vector file and snapshot are gone; one of each is left.
  const std::vector<std::string> files_after = FilesIn(c->dir());
  ASSERT_EQ(files_after.size(), 2u) << ::testing::PrintToString(files_after);
  for (const std::string& f : files_after) {
    EXPECT_EQ(std::count(files_before.begin(), files_before.end(), f), 0) << f;
  }

  auto same_as_before = [&] {
    for (size_t q = 0; q < 50; ++q) {
      SCOPED_TRACE(q);
      auto hits =
          Search(*c, queries.data() + q * kDim, 10, true, nullptr, true);
      ASSERT_EQ(hits.size(), before[q].size());
      for (size_t i = 0; i < hits.size(); ++i) {
        EXPECT_EQ(hits[i].id, before[q][i].id) << i;
        EXPECT_EQ(hits[i].score, before[q][i].score) << i;
        EXPECT_EQ(hits[i].payload, before[q][i].payload) << i;
      }
    }
  };
  same_as_before();
  ExpectGetMatchesModel(*c, model);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(del, false, false, &got));
  EXPECT_THAT(got, IsEmpty());
  const double recall = IndexedRecall(*c, model, queries, 50);
  std::printf("[ recall@10 after compaction ] %.4f\n", recall);
  EXPECT_GE(recall, kRecallFloor);
  // Nothing dead: a second compaction is a no-op.
  ASSERT_OK(c->Compact());
  EXPECT_EQ(FilesIn(c->dir()), files_after);

  c.reset();
  ReopenDb();
  c = Get("compact");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.stored_records, model.size());
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(FilesIn(c->dir()), files_after);
  same_as_before();
  ExpectGetMatchesModel(*c, model);
  // And writes go on in the new generation.
  ASSERT_OK(Upsert(*c, {ExtId(5000)}, ClusteredVectors(1, kDim, 105), {"new"},
                   &model));
  ASSERT_OK(Delete(*c, {over[0]}, &model));
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  c.reset();
  ReopenDb();
  c = Get("compact");
  ASSERT_NE(c, nullptr);
  ExpectGetMatchesModel(*c, model);
  EXPECT_EQ(c->Info().points, model.size());
  const uint32_t space_after = c->record_space();
  c.reset();
  CloseDb();

  // The old record space was erased, the new one holds the live points.
  auto count = RecordCounter();
  EXPECT_EQ(count(space_before), 0u);
  EXPECT_EQ(count(space_after), model.size());
}

TEST_F(CollectionTest, CompactWithoutAnIndexStaysExact) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("compact_exact", kDim, Metric::kInnerProduct);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 111), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 600; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(c->Compact());
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 300u);
  EXPECT_EQ(info.stored_records, 300u);
  EXPECT_EQ(info.index_state, IndexState::kNone);
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, ClusteredVectors(20, kDim, 112),
                                 20);
  c.reset();
  ReopenDb();
  c = Get("compact_exact");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, 300u);
  ExpectGetMatchesModel(*c, model);
}

TEST_F(CollectionTest, AutomaticCompactionAtTheDeadThreshold) {
  constexpr uint32_t kDim = 8;
  options_.collection.auto_compact_dead_ratio = 0.4;
  options_.collection.auto_compact_min_dead = 100;
  OpenDb();
  auto c = Create("auto_compact", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 500, ClusteredVectors(500, kDim, 7), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 150; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  // 150 of 500 dead: below the 0.4 ratio.
  EXPECT_FALSE(c->NeedsCompaction());
  EXPECT_EQ(db_->RunMaintenance(), 0);
  del.clear();
  for (size_t i = 150; i < 250; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  EXPECT_TRUE(c->NeedsCompaction());  // 250 of 500
  EXPECT_EQ(db_->RunMaintenance(), 1);
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, 250u);
  EXPECT_EQ(info.stored_records, 250u);
  EXPECT_FALSE(c->NeedsCompaction());
  ExpectGetMatchesModel(*c, model);
}

TEST_F(CollectionTest, WritesThroughADroppedCollectionAreRefused) {
  constexpr uint32_t kDim = 4;
  OpenDb();
  auto c = Create("gone", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  ASSERT_OK(db_->DropCollection("gone"));
  const float v[kDim] = {1, 2, 3, 4};
  PointRef p{1, v, {}};
  EXPECT_THAT(c->Upsert({&p, 1}), StatusIs(absl::StatusCode::kNotFound));
  const uint64_t id = 1;
  EXPECT_THAT(c->Delete({&id, 1}).status(), StatusIs(absl::StatusCode::kNotFound));
}

// ---- Drop -------------------------------------------------------------------

TEST_F(CollectionTest, DropCollectionRemovesItsFilesAndRecords) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("doomed", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  auto keep = Create("keep", kDim, Metric::kL2);
  ASSERT_NE(keep, nullptr);
  Model model, keep_model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 121), &model);
  UpsertRange(*keep, 0, 100, ClusteredVectors(100, kDim, 122), &keep_model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 300; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(c->Compact());  // the records now live in another space
  const uint32_t old_id = c->id();
  const uint32_t old_space = c->record_space();
  ASSERT_NE(old_space, old_id);
  const std::string old_dir = c->dir();
  ASSERT_TRUE(fs::exists(old_dir));
  c.reset();

  ASSERT_OK(db_->DropCollection("doomed"));
  EXPECT_FALSE(fs::exists(old_dir));
  EXPECT_THAT(db_->GetCollection("doomed"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("doomed")));
  ASSERT_EQ(db_->ListCollections().size(), 1u);
  EXPECT_EQ(db_->ListCollections()[0]->name(), "keep");
  EXPECT_THAT(db_->DropCollection("doomed"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("doomed")));

  // The same name starts empty.
  c = Create("doomed", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->id(), old_id);
  EXPECT_EQ(c->Info().points, 0u);
  EXPECT_EQ(c->Info().stored_records, 0u);
  EXPECT_EQ(c->Info().index_state, IndexState::kNone);
  std::vector<PointData> got;
  ASSERT_OK(
      c->Get(std::vector<uint64_t>{ExtId(400), ExtId(500)}, true, true, &got));
  EXPECT_THAT(got, IsEmpty());
  const auto q = ClusteredVectors(1, kDim, 123);
  EXPECT_THAT(Search(*c, q.data(), 10, false), IsEmpty());
  const uint32_t new_id = c->id();
  c.reset();
  keep.reset();
  ReopenDb();
  c = Get("doomed");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->id(), new_id);
  EXPECT_EQ(c->Info().points, 0u);
  keep = Get("keep");
  ASSERT_NE(keep, nullptr);
  ExpectGetMatchesModel(*keep, keep_model);
  c.reset();
  keep.reset();
  CloseDb();

  // No records of the dropped collection are left in the metadata store,
  // neither in its first space nor in the one compaction moved them to.
  ASSERT_OK_AND_ASSIGN(auto meta,
                       storage::MetadataStore::Open(
                           (fs::path(options_.data_dir) / "meta").string(),
                           storage::MetadataOptions()));
  for (uint32_t space : {old_id, old_space}) {
    int records = 0;
    ASSERT_OK(meta->ScanRecords(space, [&](InternalId, uint64_t) {
      ++records;
      return absl::OkStatus();
    }));
    EXPECT_EQ(records, 0) << "space " << space;
  }
}

TEST_F(CollectionTest, ASecondDatabaseOnTheSameDataDirIsRefused) {
  OpenDb();
  auto second = Database::Open(options_);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("in use")));
}

TEST_F(CollectionTest, ConfigDefaultsKeepExplicitChoicesAndSurviveReopen) {
  OpenDb();
  CollectionConfig config;
  config.name = "auto_m";
  config.dim = 64;
  ASSERT_OK_AND_ASSIGN(auto a, db_->CreateCollection(config));
  EXPECT_EQ(a->config().index.pq.m, 32u);  // automatic: about dim / 2
  config.name = "explicit_m";
  config.index.pq.m = 16;
  config.index.hnsw.M = 12;
  config.default_rerank = 40;
  config.metric = Metric::kInnerProduct;
  config.dtype = storage::DType::kUint8;
  ASSERT_OK_AND_ASSIGN(auto b, db_->CreateCollection(config));
  EXPECT_EQ(b->config().index.pq.m, 16u);
  config.name = "too_big_m";
  config.index.pq.m = 65;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pq_m")));
  a.reset();
  b.reset();
  ReopenDb();
  b = Get("explicit_m");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->config().dim, 64u);
  EXPECT_EQ(b->config().index.pq.m, 16u);
  EXPECT_EQ(b->config().index.hnsw.M, 12u);
  EXPECT_EQ(b->config().default_rerank, 40u);
  EXPECT_EQ(b->config().metric, Metric::kInnerProduct);
  EXPECT_EQ(b->config().dtype, storage::DType::kUint8);
  EXPECT_EQ(Get("auto_m")->config().index.pq.m, 32u);
}

TEST_F(CollectionTest, MaxCollectionsIsEnforced) {
  options_.max_collections = 2;
  OpenDb();
  ASSERT_NE(Create("a", 4, Metric::kL2), nullptr);
  ASSERT_NE(Create("b", 4, Metric::kL2), nullptr);
  CollectionConfig config;
  config.name = "c";
  config.dim = 4;
  EXPECT_THAT(db_->CreateCollection(config),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2")));
  ASSERT_OK(db_->DropCollection("a"));
  EXPECT_OK(db_->CreateCollection(config).status());
}

// A cosine collection of uint8 vectors could not store anything (vectors
// are normalised at insert, which makes them fractional): it is refused when
// created, instead of failing every upsert.
TEST_F(CollectionTest, CosineOverUint8IsRefusedAtCreation) {
  OpenDb();
  CollectionConfig config;
  config.name = "cos8";
  config.dim = 4;
  config.metric = Metric::kCosine;
  config.dtype = storage::DType::kUint8;
  EXPECT_THAT(
      db_->CreateCollection(config),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cosine")));
  EXPECT_THAT(db_->GetCollection("cos8"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cos8")));
  // The other metrics take uint8 vectors.
  config.metric = Metric::kInnerProduct;
  ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
  EXPECT_OK(Upsert(*c, {1}, {3, 4, 0, 0}, {}, nullptr));
}

// A crash after the catalog entry of a new collection was written but
// before the collection saved its state (Database::CreateCollection never
// returned) must not keep the database from opening.
TEST_F(CollectionTest, CrashDuringCreateDoesNotBlockTheNextOpen) {
  OpenDb();
  ASSERT_NE(Create("fine", 4, Metric::kL2), nullptr);
  CloseDb();
  CollectionConfig config;
  config.name = "half";
  config.dim = 4;
  config.ApplyDefaults();
  {
    ASSERT_OK_AND_ASSIGN(auto meta,
                         storage::MetadataStore::Open(
                             (fs::path(options_.data_dir) / "meta").string(),
                             storage::MetadataOptions()));
    ASSERT_OK(meta->CreateCollection("half", config.Encode()).status());
  }
  OpenDb();
  ASSERT_NE(db_, nullptr);
  auto fine = Get("fine");
  ASSERT_NE(fine, nullptr);
  // Whatever became of "half", its name is usable again.
  std::shared_ptr<Collection> half;
  if (auto got = db_->GetCollection("half"); got.ok()) {
    half = *got;
  } else {
    half = Create("half", 4, Metric::kL2);
  }
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->Info().points, 0u);
  ASSERT_OK(Upsert(*half, {1}, {1, 2, 3, 4}, {"p"}, nullptr));
  half.reset();
  fine.reset();
  ReopenDb();
  ASSERT_OK_AND_ASSIGN(half, db_->GetCollection("half"));
  EXPECT_EQ(half->Info().points, 1u);
}

// A rabitq collection whose index snapshot holds another code (written by a
// zoomd that ignored the config's pq_code: a downgrade and back) does not
// serve it: FAILED with the reason, exact searches, and the next build
// makes the collection's own code again.
TEST_F(CollectionTest, ASnapshotOfAnotherCodeIsNotServed) {
  constexpr uint32_t kDim = 16, kN = 800;
  OpenDb();
  CollectionConfig config;
  config.name = "rq";
  config.dim = kDim;
  config.index.pq.code = index::CodeKind::kRabitq;
  config.index.pq.nbits = 0;
  ASSERT_OK(db_->CreateCollection(config).status());
  auto c = Get("rq");
  ASSERT_NE(c, nullptr);
  Model model;
  const std::vector<float> x = ClusteredVectors(kN, kDim, 161);
  UpsertRange(*c, 0, kN, x, &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->engine()->index()->spec().pq.code, index::CodeKind::kRabitq);
  index::IndexSpec pq_spec = c->engine()->index()->spec();
  pq_spec.pq.code = index::CodeKind::kPq;  // what an older zoomd builds from this config
  const std::string dir = c->dir();
  c.reset();
  CloseDb();
  const std::string snapshot = IndexSnapshotIn(dir);
  ASSERT_FALSE(snapshot.empty());
  ASSERT_OK_AND_ASSIGN(auto pq_index, index::BuildIndex(pq_spec, x.data(), kN));
  ASSERT_OK(pq_index->Save((fs::path(dir) / snapshot).string()));
  OpenDb();
  c = Get("rq");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kFailed);
  EXPECT_THAT(c->Info().index_error, HasSubstr("its code is pq, the collection's rabitq"));
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  EXPECT_EQ(c->engine()->index()->spec().pq.code, index::CodeKind::kRabitq);
}

// A snapshot that cannot be loaded leaves the collection searchable
// (exactly) with the index FAILED, until a build replaces it.
TEST_F(CollectionTest, CorruptSnapshotFallsBackToExactSearchUntilRebuilt) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("snap", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 800, ClusteredVectors(800, kDim, 151), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  const std::string dir = c->dir();
  c.reset();
  CloseDb();
  const std::string snapshot = IndexSnapshotIn(dir);
  ASSERT_FALSE(snapshot.empty());
  {
    // Keep the size, break the content.
    const std::string path = (fs::path(dir) / snapshot).string();
    const auto size = fs::file_size(path);
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(size / 2), SEEK_SET);
    const char junk[64] = {1, 2, 3};
    std::fwrite(junk, 1, sizeof(junk), f);
    std::fclose(f);
  }
  OpenDb();
  c = Get("snap");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kFailed);
  EXPECT_THAT(c->Info().index_error, Not(IsEmpty()));
  const auto queries = ClusteredVectors(20, kDim, 152);
  bool exact_used = false;
  Search(*c, queries.data(), 10, false, &exact_used);
  EXPECT_TRUE(exact_used);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  EXPECT_THAT(c->Info().index_error, IsEmpty());
  c.reset();
  ReopenDb();
  c = Get("snap");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  Search(*c, queries.data(), 10, false, &exact_used);
  EXPECT_FALSE(exact_used);
}

// Files the collection's state does not name (left by a crash during a
// snapshot or a compaction) are removed on open and do not disturb it.
TEST_F(CollectionTest, LeftoverFilesAreRemovedOnOpen) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("tidy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 300, ClusteredVectors(300, kDim, 161), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  const std::string dir = c->dir();
  c.reset();
  CloseDb();
  const auto files = FilesIn(dir);
  for (const char* name :
       {"index-99.zidx", "vectors-98.zvec", "index-7.zidx.tmp"}) {
    FILE* f = std::fopen((fs::path(dir) / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("left over", f);
    std::fclose(f);
  }
  OpenDb();
  EXPECT_EQ(FilesIn(dir), files);
  c = Get("tidy");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  ExpectGetMatchesModel(*c, model);
}

// ---- Concurrency ------------------------------------------------------------

// Searches (exact and indexed) and gets run while one writer upserts new
// ids, overwrites others and deletes a planned sequence of ids. A search
// must never return an id whose Delete returned before the search started,
// never return an id twice, and must find a new point whose Upsert
// returned before it started.
TEST_F(CollectionTest, ConcurrentSearchDuringUpsertAndDelete) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kInitial = 1200;
  constexpr size_t kRounds = 30;
  constexpr size_t kPerRound = 10;
  OpenDb();
  auto c = Create("race", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const auto base = ClusteredVectors(kInitial, kDim, 131);
  UpsertRange(*c, 0, kInitial, base, nullptr);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());

  // The writer's plan, fixed before any thread starts (read-only after).
  std::vector<uint64_t> delete_plan;  // ExtId(0), ExtId(2), ...
  for (size_t i = 0; i < kRounds * kPerRound; ++i)
    delete_plan.push_back(ExtId(2 * i));
  absl::flat_hash_map<uint64_t, size_t> delete_pos;
  for (size_t i = 0; i < delete_plan.size(); ++i)
    delete_pos[delete_plan[i]] = i;
  const auto fresh = ClusteredVectors(kRounds * kPerRound, kDim, 132);
  const auto moved = ClusteredVectors(kRounds * kPerRound, kDim, 133);
  auto fresh_id = [](size_t i) { return ExtId(100000 + i); };

  std::atomic<size_t> deleted{0};   // delete_plan[0, deleted) are gone
  std::atomic<size_t> inserted{0};  // fresh points [0, inserted) are in
  std::atomic<bool> done{false};
  std::atomic<int> violations{0};
  std::atomic<int> errors{0};
  std::atomic<uint64_t> searches{0};

  std::thread writer([&] {
    for (size_t r = 0; r < kRounds; ++r) {
      std::vector<PointRef> points;
      for (size_t i = r * kPerRound; i < (r + 1) * kPerRound; ++i) {
        points.push_back({fresh_id(i), fresh.data() + i * kDim, "fresh"});
      }
      if (!c->Upsert(points).ok()) ++errors;
      inserted.store((r + 1) * kPerRound, std::memory_order_release);
      // Overwrite odd ids (never deleted) with other vectors.
      points.clear();
      for (size_t i = r * kPerRound; i < (r + 1) * kPerRound; ++i) {
        points.push_back({ExtId(2 * i + 1), moved.data() + i * kDim, "moved"});
      }
      if (!c->Upsert(points).ok()) ++errors;
      std::vector<uint64_t> ids(delete_plan.begin() + r * kPerRound,
                                delete_plan.begin() + (r + 1) * kPerRound);
      auto n = c->Delete(ids);
      if (!n.ok() || *n != kPerRound) ++errors;
      deleted.store((r + 1) * kPerRound, std::memory_order_release);
    }
    done = true;
  });

  auto reader = [&](int t) {
    std::mt19937 rng(140 + t);
    bool last_round = false;
    while (!last_round) {
      last_round = done.load();
      const size_t gone = deleted.load(std::memory_order_acquire);
      const size_t in = inserted.load(std::memory_order_acquire);
      auto was_deleted = [&](uint64_t id) {
        auto it = delete_pos.find(id);
        return it != delete_pos.end() && it->second < gone;
      };
      // Query on a deleted point, a fresh one, or anywhere.
      const float* q;
      size_t fresh_i = 0;
      const int kind = rng() % 3;
      if (kind == 0 && gone > 0) {
        q = base.data() + (2 * (rng() % gone)) * kDim;
      } else if (kind == 1 && in > 0) {
        fresh_i = rng() % in;
        q = fresh.data() + fresh_i * kDim;
      } else {
        q = base.data() + (rng() % kInitial) * kDim;
      }
      const bool exact = rng() % 2 == 0;
      CollectionSearchParams p;
      p.engine.k = 10;
      p.engine.exact = exact;
      std::vector<Hit> hits;
      if (!SearchInto(*c, q, kDim, p, &hits).ok()) {
        ++errors;
        continue;
      }
      ++searches;
      absl::flat_hash_set<uint64_t> seen;
      for (const Hit& h : hits) {
        if (was_deleted(h.id) || !seen.insert(h.id).second) ++violations;
      }
      if (kind == 1 && in > 0 && exact &&
          (hits.empty() || hits[0].id != fresh_id(fresh_i))) {
        ++violations;
      }
      // Get agrees.
      std::vector<uint64_t> ask = {delete_plan[rng() % delete_plan.size()]};
      std::vector<PointData> got;
      if (!c->Get(ask, false, false, &got).ok()) {
        ++errors;
      } else if (was_deleted(ask[0]) && !got.empty()) {
        ++violations;
      }
    }
  };
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) readers.emplace_back(reader, t);
  writer.join();
  for (auto& th : readers) th.join();

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(searches.load(), 0u);
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, kInitial);  // + fresh - deleted
  EXPECT_EQ(info.deleted_records, 2 * kRounds * kPerRound);
  // After the writer: every planned id is gone, every fresh one is found.
  for (size_t i = 0; i < kRounds * kPerRound; i += 7) {
    auto hits = Search(*c, base.data() + 2 * i * kDim, 10, false);
    for (const auto& h : hits) EXPECT_FALSE(delete_pos.contains(h.id)) << h.id;
    hits = Search(*c, fresh.data() + i * kDim, 1, true);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].id, fresh_id(i));
  }
}

// Points written while a build runs are indexed when it is installed,
// whether they land before, during or after the build reads the file.
TEST_F(CollectionTest, WritesDuringABuildAreInTheInstalledIndex) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("busy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 171), &model);
  ASSERT_OK(c->StartBuild());
  const auto later = ClusteredVectors(400, kDim, 172);
  UpsertRange(*c, 1000, 400, later, &model, 50);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1000; i += 10) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(c->WaitForBuild());
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.indexed_points, info.stored_records);
  EXPECT_EQ(info.stored_records, 1400u);
  EXPECT_EQ(info.points, model.size());
  size_t found = 0;
  for (size_t i = 0; i < 400; ++i) {
    bool exact_used = true;
    auto hits = Search(*c, later.data() + i * kDim, 10, false, &exact_used);
    ASSERT_FALSE(exact_used);
    for (const auto& h : hits) {
      ASSERT_TRUE(model.count(h.id)) << h.id;
      found += h.id == ExtId(1000 + i);
    }
  }
  std::printf("[ written during the build, found ] %zu of 400\n", found);
  EXPECT_GE(found, 380u);
  ExpectExactSearchesMatchOracle(*c, model, ClusteredVectors(20, kDim, 173),
                                 20);
}

// Compaction swaps the generation under running searches and queued
// writes: searches never fail, never see a point deleted before they
// started, never see one twice; writes queued behind it land in the new
// generation.
TEST_F(CollectionTest, CompactDuringSearchesAndWrites) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kInitial = 1200;
  constexpr size_t kRounds = 20;
  constexpr size_t kPerRound = 10;
  OpenDb();
  auto c = Create("swap", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(kInitial, kDim, 181);
  UpsertRange(*c, 0, kInitial, base, &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  std::vector<uint64_t> dead;
  for (size_t i = 0; i < kInitial; i += 2) dead.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, dead, &model));

  // The writer deletes odd ids in this order and inserts fresh ones.
  std::vector<uint64_t> plan;
  for (size_t i = 0; i < kRounds * kPerRound; ++i)
    plan.push_back(ExtId(2 * i + 1));
  absl::flat_hash_map<uint64_t, size_t> plan_pos;
  for (size_t i = 0; i < plan.size(); ++i) plan_pos[plan[i]] = i;
  const absl::flat_hash_set<uint64_t> dead_set(dead.begin(), dead.end());
  const auto fresh = ClusteredVectors(kRounds * kPerRound, kDim, 182);

  std::atomic<size_t> deleted{0};
  std::atomic<int> writers_left{2};
  std::atomic<int> violations{0};
  std::atomic<int> errors{0};
  std::atomic<uint64_t> searches{0};
  Model writer_model = model;  // the writer's view; joined before reading
  std::atomic<int> payload_violations{0};
  absl::Mutex first_bad_mu;
  std::string first_bad;  // the first payload violation, for the message
  // UpsertRange gave point i the payload "p<i>"; fresh points have none.
  auto payload_of = [&](uint64_t id) -> std::string {
    const uint64_t i = (id - ExtId(0)) / (ExtId(1) - ExtId(0));
    return i < kInitial ? absl::StrCat("p", i) : "";
  };

  std::thread compactor([&] {
    if (!c->Compact().ok()) ++errors;
    --writers_left;
  });
  std::thread writer([&] {
    for (size_t r = 0; r < kRounds; ++r) {
      std::vector<uint64_t> ids;
      std::vector<float> v;
      for (size_t i = r * kPerRound; i < (r + 1) * kPerRound; ++i) {
        ids.push_back(ExtId(100000 + i));
        v.insert(v.end(), fresh.begin() + i * kDim,
                 fresh.begin() + (i + 1) * kDim);
      }
      if (!Upsert(*c, ids, v, {}, &writer_model).ok()) ++errors;
      std::vector<uint64_t> del(plan.begin() + r * kPerRound,
                                plan.begin() + (r + 1) * kPerRound);
      if (!Delete(*c, del, &writer_model).ok()) ++errors;
      deleted.store((r + 1) * kPerRound, std::memory_order_release);
    }
    --writers_left;
  });
  auto reader = [&](int t) {
    std::mt19937 rng(190 + t);
    bool last_round = false;
    while (!last_round) {
      last_round = writers_left.load() == 0;
      const size_t gone = deleted.load(std::memory_order_acquire);
      const float* q = base.data() + (rng() % kInitial) * kDim;
      CollectionSearchParams p;
      p.engine.k = 10;
      p.engine.exact = rng() % 2 == 0;
      p.with_payload = true;
      std::vector<Hit> hits;
      if (!SearchInto(*c, q, kDim, p, &hits).ok()) {
        ++errors;
        continue;
      }
      ++searches;
      if (hits.size() != 10) ++violations;
      absl::flat_hash_set<uint64_t> seen;
      for (const Hit& h : hits) {
        auto it = plan_pos.find(h.id);
        if (dead_set.contains(h.id) ||
            (it != plan_pos.end() && it->second < gone) ||
            !seen.insert(h.id).second) {
          ++violations;
        }
        // (A point deleted while the search runs may come back without its
        // payload; the others must always have theirs.)
        if (!plan_pos.contains(h.id) && h.payload != payload_of(h.id)) {
          if (payload_violations++ == 0) {
            absl::MutexLock lock(&first_bad_mu);
            first_bad =
                absl::StrCat("search hit ", h.id, ": payload '", h.payload,
                             "', want '", payload_of(h.id), "'");
          }
        }
      }
      // Get of a point that stays live returns its payload.
      const uint64_t keep = ExtId(2 * (kRounds * kPerRound + rng() % 100) + 1);
      std::vector<PointData> got;
      if (!c->Get({keep}, false, true, &got).ok()) {
        ++errors;
      } else if (got.size() != 1 || got[0].payload != payload_of(keep)) {
        if (payload_violations++ == 0) {
          absl::MutexLock lock(&first_bad_mu);
          first_bad =
              absl::StrCat("get ", keep, ": ", got.size(), " points, payload '",
                           got.empty() ? "" : got[0].payload, "', want '",
                           payload_of(keep), "'");
        }
      }
    }
  };
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) readers.emplace_back(reader, t);
  compactor.join();
  writer.join();
  for (auto& th : readers) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(payload_violations.load(), 0)
      << "payloads went missing while the compaction switched generations; "
      << "the first: " << first_bad;
  EXPECT_GT(searches.load(), 0u);

  model = writer_model;
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.index_state, IndexState::kReady);
  // The dead records of before the compaction are gone; at most the
  // writer's deletes made after it remain.
  EXPECT_LE(info.deleted_records, kRounds * kPerRound);
  ExpectGetMatchesModel(*c, model);
  const auto queries = ClusteredVectors(20, kDim, 183);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  c.reset();
  ReopenDb();
  c = Get("swap");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
}

// A search or get that started on the generation a compaction retires
// still returns the payloads of its points (the retired record space is
// erased only after its last reader).
TEST_F(CollectionTest, ReadsHeldAcrossACompactionKeepTheirPayloads) {
  constexpr uint32_t kDim = 8;
  auto gate = std::make_shared<ReadGate>();
  UseGatedReads(gate);
  OpenDb();
  auto c = Create("held", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(400, kDim, 201);
  UpsertRange(*c, 0, 400, base, &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 400; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));

  for (const bool use_get : {false, true}) {
    SCOPED_TRACE(use_get ? "get" : "search");
    {
      absl::MutexLock l(&gate->mu);
      gate->entered = gate->released = false;
    }
    std::vector<Hit> hits;
    std::vector<PointData> got;
    absl::Status st;
    std::thread reader([&] {
      gate->ArmForThisThread();
      if (use_get) {
        std::vector<uint64_t> ids;
        for (size_t i = 1; i < 400; i += 20) ids.push_back(ExtId(i));
        st = c->Get(ids, /*with_vectors=*/true, /*with_payload=*/true, &got);
      } else {
        CollectionSearchParams p;
        p.engine.k = 10;
        p.engine.exact = true;
        p.with_payload = true;
        st = SearchInto(*c, base.data() + kDim, kDim, p, &hits);
      }
    });
    // Whatever fails below, the reader is released and joined (a joinable
    // thread at scope exit would terminate and hide the failure).
    absl::Cleanup release_reader = [&] {
      gate->Release();
      if (reader.joinable()) reader.join();
    };
    // The reader now holds the current generation, its points found.
    if (!gate->AwaitEntered()) {
      gate->Release();
      reader.join();
      FAIL() << "the reader never read a vector";
    }
    // Make something dead for the second compaction to drop.
    ASSERT_OK(Delete(*c, {ExtId(use_get ? 5 : 3)}, &model));
    ASSERT_OK(c->Compact());
    gate->Release();
    reader.join();
    ASSERT_OK(st);
    if (use_get) {
      ASSERT_EQ(got.size(), 20u);
      for (const PointData& p : got) {
        EXPECT_EQ(p.payload, absl::StrCat("p", (p.id - 17) / 1000003)) << p.id;
      }
    } else {
      ASSERT_EQ(hits.size(), 10u);
      for (const Hit& h : hits) {
        EXPECT_EQ(h.payload, absl::StrCat("p", (h.id - 17) / 1000003)) << h.id;
      }
    }
  }
  EXPECT_EQ(c->Info().deleted_records, 0u);
  ExpectGetMatchesModel(*c, model);
}

}  // namespace
}  // namespace zoom::server

// ---- Hardening: the magnitude rule and failing maintenance -------------------

namespace zoom::server {
namespace {

// Components at and beyond the rule (common/vector_limits.h): refused with
// the point and component named; accepted vectors near the bound build an
// index (FAISS k-means and PQ training abort on overflowing distances: this
// test process would die) and score finitely.
TEST_F(CollectionTest, MagnitudeRuleRefusesOverflowAndBuildsAtTheBound) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  const std::vector<float> huge(kDim, 1e20f);
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
    for (index::IndexKind kind : {index::IndexKind::kIvfHnswPq, index::IndexKind::kHnswPq}) {
      SCOPED_TRACE(absl::StrCat(MetricName(metric), " ", index::IndexKindName(kind)));
      CollectionConfig config;
      config.name = absl::StrCat("m", static_cast<int>(metric), "_", static_cast<int>(kind));
      config.dim = kDim;
      config.metric = metric;
      config.index.kind = kind;
      config.index.nlist = 16;
      auto created = db_->CreateCollection(config);
      ASSERT_OK(created.status());
      Collection& c = **created;
      std::vector<float> v = ClusteredVectors(300, kDim, 5);
      Model model;
      std::vector<uint64_t> ids(300);
      for (size_t i = 0; i < 300; ++i) ids[i] = i;
      ASSERT_OK(Upsert(c, ids, v, {}, &model));
      // 1e20 and 3e38 (whose square overflows) are refused, naming the point
      // and the component; nothing of the batch is stored.
      std::vector<float> bad = {1, 1, 1, 1, 1, 1, 1, 1};
      bad.insert(bad.end(), huge.begin(), huge.end());
      EXPECT_THAT(Upsert(c, {500, 501}, bad, {}, nullptr),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           ::testing::AllOf(HasSubstr("point 501 (#1)"), HasSubstr("component 0"),
                                 HasSubstr("1e18"))));
      std::vector<float> max_float(kDim, 3e38f);
      EXPECT_THAT(Upsert(c, {502}, max_float, {}, nullptr),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("point 502")));
      EXPECT_EQ(c.Info().points, 300u);
      EXPECT_EQ(c.Info().stored_records, 300u);
      // Just inside the bound (norm 8.5e17) is accepted and indexed.
      std::vector<float> big(kDim, 3e17f);
      ASSERT_OK(Upsert(c, {600}, big, {}, &model));
      ASSERT_OK(c.StartBuild());
      ASSERT_OK(c.WaitForBuild());
      EXPECT_EQ(c.Info().index_state, IndexState::kReady);
      // Queries follow the same rule; an accepted one scores finitely.
      CollectionSearchParams p;
      p.engine.k = 5;
      std::vector<Hit> hits;
      EXPECT_THAT(SearchInto(c, huge.data(), kDim, p, &hits),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("query")));
      for (bool exact : {false, true}) {
        p.engine.exact = exact;
        ASSERT_OK(SearchInto(c, big.data(), kDim, p, &hits));
        ASSERT_FALSE(hits.empty());
        for (const Hit& h : hits) EXPECT_TRUE(std::isfinite(h.score)) << h.id;
        if (metric == Metric::kL2) EXPECT_EQ(hits[0].id, 600u);
      }
    }
  }
  // Cosine takes any finite non-zero vector (normalised in double), and
  // refuses the zero query as it refuses the zero point.
  auto cos = Create("cos", kDim, Metric::kCosine);
  ASSERT_NE(cos, nullptr);
  std::vector<float> max_float(kDim, 3e38f);
  max_float[1] = -3e38f;
  ASSERT_OK(Upsert(*cos, {1}, max_float, {}, nullptr));
  std::vector<PointData> got;
  ASSERT_OK(cos->Get(std::vector<uint64_t>{1}, true, false, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0].vector[0], 1 / std::sqrt(8.0), 1e-6);
  auto hits = Search(*cos, max_float.data(), 1, true);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_NEAR(hits[0].score, 1.0, 1e-5);
  const std::vector<float> zero(kDim, 0.0f);
  CollectionSearchParams p;
  std::vector<Hit> out;
  EXPECT_THAT(SearchInto(*cos, zero.data(), kDim, p, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero")));
}

// What an older zoomd (before the magnitude rule) could leave in a data
// dir: a committed point of [1e20] * 8, written past the collection's
// vector file end as Upsert would have.
void InjectLegacyPoint(const std::string& data_dir, uint32_t collection_id, uint64_t external_id,
                       float value) {
  auto meta = storage::MetadataStore::Open((fs::path(data_dir) / "meta").string(), {});
  ASSERT_OK(meta.status());
  const std::string file =
      (fs::path(data_dir) / "collections" / std::to_string(collection_id) / "vectors-1.zvec")
          .string();
  auto store = storage::VectorStore::Open(file);
  ASSERT_OK(store.status());
  const InternalId id = static_cast<InternalId>((*store)->count());
  const std::vector<float> v((*store)->dim(), value);
  ASSERT_OK((*store)->Append(v.data(), 1));
  const storage::RecordWrite w{id, external_id, {}};
  ASSERT_OK((*meta)->Commit(collection_id, {&w, 1}, {}));
}

// The crash loop of issue 14: a data dir holding a point that trips FAISS.
// After a restart it serves; builds and compactions fail with a Status that
// names the point (FAILED / compaction_error, retried with backoff, never a
// process exit); deleting the point lets compaction train on the live
// points only and succeed.
TEST_F(CollectionTest, LegacyPointBreakingTheRuleNeverStopsTheCollection) {
  constexpr uint32_t kDim = 8;
  options_.collection.auto_compact_dead_ratio = 0.3;
  options_.collection.auto_compact_min_dead = 100;
  options_.collection.maintenance_retry_base = absl::Hours(1);
  OpenDb();
  auto c = Create("legacy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const uint32_t id = c->id();
  Model model;
  const auto v = ClusteredVectors(600, kDim, 81);
  UpsertRange(*c, 0, 600, v, &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  c.reset();
  CloseDb();
  InjectLegacyPoint(options_.data_dir, id, 9999, 1e20f);
  if (HasFatalFailure()) return;

  OpenDb();  // replays the point into the index: no crash
  c = Get("legacy");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, 601u);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  const auto queries = ClusteredVectors(10, kDim, 82);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);  // 9999 scores +Inf: never in a top 10
  (void)Search(*c, queries.data(), 10, false);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{9999}, true, false, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].vector[0], 1e20f);

  // A build fails with the point named; the old index keeps serving.
  ASSERT_OK(c->StartBuild());
  EXPECT_THAT(c->WaitForBuild(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("point 9999")));
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_THAT(info.index_error, HasSubstr("9999"));
  EXPECT_EQ(info.maintenance_failures, 1u);
  EXPECT_GT(info.maintenance_retry_at, absl::Now());

  // Deletes that pass the compaction threshold: the compaction fails the
  // same way and the automatic one waits for its backoff.
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 300; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  EXPECT_FALSE(c->NeedsCompaction());  // backing off
  EXPECT_EQ(db_->RunMaintenance(), 0);
  EXPECT_THAT(c->Compact(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("point 9999")));
  info = c->Info();
  EXPECT_THAT(info.compaction_error, HasSubstr("9999"));
  EXPECT_EQ(info.maintenance_failures, 2u);
  EXPECT_EQ(info.stored_records, 601u);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  EXPECT_GT(IndexedRecall(*c, model, queries, 10), 0.8);

  // Deleting the point: the compaction trains on live points only.
  ASSERT_OK(c->Delete(std::vector<uint64_t>{9999}).status());
  ASSERT_OK(c->Compact());
  info = c->Info();
  EXPECT_EQ(info.points, 300u);
  EXPECT_EQ(info.stored_records, 300u);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_THAT(info.compaction_error, IsEmpty());
  EXPECT_EQ(info.maintenance_failures, 0u);
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  c.reset();
  ReopenDb();
  c = Get("legacy");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, 300u);
  ExpectGetMatchesModel(*c, model);
}

// Dead records do not train: a build over a collection whose only
// rule-breaking record is deleted succeeds (the record is indexed as a
// placeholder and never returned).
TEST_F(CollectionTest, BuildTrainsOnLivePointsOnly) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("dead_bad", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const uint32_t id = c->id();
  Model model;
  UpsertRange(*c, 0, 400, ClusteredVectors(400, kDim, 91), &model);
  c.reset();
  CloseDb();
  InjectLegacyPoint(options_.data_dir, id, 7777, 1e20f);
  if (HasFatalFailure()) return;
  OpenDb();
  c = Get("dead_bad");
  ASSERT_NE(c, nullptr);
  ASSERT_OK(c->Delete(std::vector<uint64_t>{7777}).status());
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  const auto queries = ClusteredVectors(10, kDim, 92);
  EXPECT_GT(IndexedRecall(*c, model, queries, 10), 0.8);
}

// An unindexed collection whose automatic build fails is FAILED with the
// reason, keeps answering exactly, and does not start the build again on
// every write (it waits for the backoff).
TEST_F(CollectionTest, FailedAutomaticBuildBacksOffAndKeepsServing) {
  constexpr uint32_t kDim = 8;
  options_.collection.auto_build_min_points = 400;
  options_.collection.maintenance_retry_base = absl::Hours(1);
  OpenDb();
  auto c = Create("auto_bad", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const uint32_t id = c->id();
  Model model;
  const auto v = ClusteredVectors(500, kDim, 95);
  UpsertRange(*c, 0, 300, v, &model);
  c.reset();
  CloseDb();
  InjectLegacyPoint(options_.data_dir, id, 5555, 1e20f);
  if (HasFatalFailure()) return;
  OpenDb();
  c = Get("auto_bad");
  ASSERT_NE(c, nullptr);
  UpsertRange(*c, 300, 100, std::vector<float>(v.begin() + 300 * kDim, v.begin() + 400 * kDim),
              &model);  // 401 live: the automatic build starts and fails
  EXPECT_THAT(c->WaitForBuild(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("point 5555")));
  CollectionInfo info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kFailed);
  EXPECT_THAT(info.index_error, HasSubstr("5555"));
  EXPECT_EQ(info.maintenance_failures, 1u);
  UpsertRange(*c, 400, 100, std::vector<float>(v.begin() + 400 * kDim, v.end()), &model);
  EXPECT_THAT(c->WaitForBuild(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(c->Info().maintenance_failures, 1u);  // not started again
  bool exact_used = false;
  const auto queries = ClusteredVectors(5, kDim, 96);
  Search(*c, queries.data(), 10, false, &exact_used);
  EXPECT_TRUE(exact_used);
  ExpectExactSearchesMatchOracle(*c, model, queries, 5);
}

// A Compact racing a Drop answered NOT_FOUND with an internal path: the
// drop waits for a running compaction, and a compaction after it answers
// that the collection was dropped.
TEST_F(CollectionTest, CompactAfterADropSaysSoWithoutPaths) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("gone", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 300, ClusteredVectors(300, kDim, 3), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 100; ++i) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  ASSERT_OK(db_->DropCollection("gone"));
  const absl::Status st = c->Compact();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kNotFound, HasSubstr("was dropped")));
  EXPECT_THAT(std::string(st.message()), Not(HasSubstr(tmp_.path())));
  EXPECT_THAT(Upsert(*c, {1}, std::vector<float>(kDim, 1.0f), {}, nullptr),
              StatusIs(absl::StatusCode::kNotFound));
}

// Issue 14 #11: Compact blocked every write to the collection for its whole
// run (17.9 s at ~90K points). Now the copy and the index build run without
// the write lock: with the compaction held in its first read, upserts,
// overwrites and deletes go through, and they are all in the new generation
// after the switch (and after a restart).
TEST_F(CollectionTest, WritesGoOnDuringACompactionAndLandInTheNewGeneration) {
  constexpr uint32_t kDim = 8;
  auto gate = std::make_shared<ReadGate>();
  UseGatedReads(gate);
  OpenDb();
  auto c = Create("live_compact", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(1000, kDim, 301);
  UpsertRange(*c, 0, 1000, base, &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1000; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));

  absl::Status compacted;
  std::thread compactor([&] {
    gate->ArmForThisThread();
    compacted = c->Compact();
  });
  absl::Cleanup release = [&] {
    gate->Release();
    if (compactor.joinable()) compactor.join();
  };
  ASSERT_TRUE(gate->AwaitEntered()) << "the compaction never read";
  // The compaction is held in its copy; the writes must not wait for it
  // (a bounded wait: a blocked write would hang here until the bound).
  auto writes = std::async(std::launch::async, [&] {
    const auto fresh = ClusteredVectors(100, kDim, 302);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < 50; ++i) ids.push_back(ExtId(5000 + i));
    EXPECT_OK(Upsert(*c, ids, std::vector<float>(fresh.begin(), fresh.begin() + 50 * kDim), {},
                     &model));
    // Overwrite 20 copied points, delete 30 others and 5 of the new ones.
    std::vector<uint64_t> over;
    for (size_t i = 1; i < 40; i += 2) over.push_back(ExtId(i));
    std::vector<std::string> payloads(over.size(), "overwritten");
    EXPECT_OK(Upsert(*c, over,
                     std::vector<float>(fresh.begin() + 50 * kDim,
                                        fresh.begin() + (50 + over.size()) * kDim),
                     payloads, &model));
    std::vector<uint64_t> gone;
    for (size_t i = 41; i < 101; i += 2) gone.push_back(ExtId(i));
    for (size_t i = 0; i < 5; ++i) gone.push_back(ExtId(5000 + i));
    EXPECT_OK(Delete(*c, gone, &model));
  });
  ASSERT_EQ(writes.wait_for(std::chrono::seconds(120)), std::future_status::ready)
      << "writes waited for the compaction";
  writes.get();
  // A build cannot start on the generation being replaced.
  EXPECT_THAT(c->StartBuild(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("compaction")));
  std::move(release).Invoke();
  ASSERT_OK(compacted);
  const CollectionInfo info = c->Info();
  EXPECT_EQ(info.points, model.size());
  // The 500 dead of before are gone; copied records that died during the
  // compaction (20 overwritten, 30 deleted) are dead in the new file until
  // the next one; of the 50 + 20 records added meanwhile, the 5 deleted
  // again before the switch were never copied.
  EXPECT_EQ(info.stored_records, 500u + 45u + 20u);
  EXPECT_EQ(info.deleted_records, 20u + 30u);
  EXPECT_EQ(info.index_state, IndexState::kReady);
  ExpectGetMatchesModel(*c, model);
  const auto queries = ClusteredVectors(20, kDim, 303);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  EXPECT_GT(IndexedRecall(*c, model, queries, 20), kRecallFloor);
  c.reset();
  ReopenDb();
  c = Get("live_compact");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 20);
  EXPECT_GT(IndexedRecall(*c, model, queries, 20), kRecallFloor);
}

}  // namespace
}  // namespace zoom::server

namespace zoom::server {
namespace {

// ---- Snapshots ----------------------------------------------------------------

std::vector<Hit> IndexedSearch(const Collection& c, const float* q, uint32_t k) {
  CollectionSearchParams p;
  p.engine.k = k;
  p.with_payload = true;
  std::vector<Hit> hits;
  EXPECT_OK(SearchInto(c, q, c.config().dim, p, &hits));
  return hits;
}

// A restored collection answers as the original did at the snapshot's
// point: same ids, same scores, same payloads (indexed and exact), also
// after a restart; the original is unchanged.
TEST_F(CollectionTest, SnapshotRestoresToTheSameAnswers) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("src", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1200, ClusteredVectors(1200, kDim, 401), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 1200; i += 7) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  // Some written after the index snapshot (replayed after a restore).
  UpsertRange(*c, 5000, 40, ClusteredVectors(40, kDim, 402), &model);
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("src"));
  EXPECT_EQ(info.points, model.size());
  EXPECT_EQ(info.sha256.size(), 64u);
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("src", info.name));
  ASSERT_OK_AND_ASSIGN(auto dst, db_->RestoreSnapshot(file.first, "dst", false));
  EXPECT_EQ(dst->Info().points, model.size());
  EXPECT_EQ(dst->Info().index_state, IndexState::kReady);
  // What the index was trained on travels with it.
  EXPECT_EQ(c->Info().trained_points, 1200u);
  EXPECT_EQ(dst->Info().trained_points, 1200u);
  ExpectGetMatchesModel(*dst, model);
  const auto queries = ClusteredVectors(30, kDim, 403);
  auto same = [&](const Collection& a, const Collection& b) {
    for (size_t q = 0; q < 30; ++q) {
      const auto ha = IndexedSearch(a, queries.data() + q * kDim, 10);
      const auto hb = IndexedSearch(b, queries.data() + q * kDim, 10);
      ASSERT_EQ(ha.size(), hb.size()) << q;
      for (size_t i = 0; i < ha.size(); ++i) {
        EXPECT_EQ(ha[i].id, hb[i].id) << q << " " << i;
        EXPECT_EQ(ha[i].score, hb[i].score) << q << " " << i;
        EXPECT_EQ(ha[i].payload, hb[i].payload);
      }
    }
  };
  same(*c, *dst);
  ExpectExactSearchesMatchOracle(*dst, model, queries, 30);
  // Listed, and kept across a restart with the restored collection.
  ASSERT_OK_AND_ASSIGN(auto list, db_->ListSnapshots("src"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, info.name);
  c.reset();
  dst.reset();
  ReopenDb();
  c = Get("src");
  dst = Get("dst");
  ASSERT_NE(dst, nullptr);
  same(*c, *dst);
  // Not into an existing name unless asked; then it replaces it.
  EXPECT_THAT(db_->RestoreSnapshot(file.first, "dst", false).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  UpsertRange(*dst, 9000, 10, ClusteredVectors(10, kDim, 404), nullptr);
  dst.reset();
  ASSERT_OK_AND_ASSIGN(dst, db_->RestoreSnapshot(file.first, "dst", true));
  EXPECT_EQ(dst->Info().points, model.size());
  ExpectGetMatchesModel(*dst, model);
  ASSERT_OK(db_->DeleteSnapshot("src", info.name));
  EXPECT_THAT(db_->SnapshotFile("src", info.name).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(db_->ListCollections().size(), 2u);
}

// A cluster replica's applied log position: kept across a restart, carried
// by a snapshot to the collection restored from it, gone with a drop.
TEST_F(CollectionTest, LogPositionSurvivesRestartAndTravelsWithSnapshots) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("replica", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->log_position(), 0u);
  UpsertRange(*c, 0, 50, ClusteredVectors(50, kDim, 411), nullptr);
  ASSERT_OK(c->SetLogPosition(41));
  EXPECT_EQ(c->log_position(), 41u);
  c.reset();
  ReopenDb();
  c = Get("replica");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->log_position(), 41u);
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("replica"));
  ASSERT_OK(c->SetLogPosition(99));  // after the snapshot: not in it
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("replica", info.name));
  ASSERT_OK_AND_ASSIGN(auto restored, db_->RestoreSnapshot(file.first, "peer", false));
  EXPECT_EQ(restored->log_position(), 41u);
  EXPECT_EQ(restored->Info().points, 50u);
  restored.reset();
  c.reset();
  ReopenDb();
  EXPECT_EQ(Get("peer")->log_position(), 41u);
  EXPECT_EQ(Get("replica")->log_position(), 99u);
  // A restore over an existing collection takes the archive's position.
  ASSERT_OK_AND_ASSIGN(restored, db_->RestoreSnapshot(file.first, "replica", true));
  EXPECT_EQ(restored->log_position(), 41u);
  restored.reset();
  ASSERT_OK(db_->DropCollection("peer"));
  auto again = Create("peer", kDim, Metric::kL2);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->log_position(), 0u);
}

// A snapshot taken during a stream of acknowledged upserts restores to a
// prefix of them: every write acknowledged before it began is in it, and
// what it holds of the others is an unbroken run.
TEST_F(CollectionTest, SnapshotDuringWritesRestoresAPrefixOfTheAcknowledged) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("busy", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 411), &model);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  const auto fresh = ClusteredVectors(20000, kDim, 412);
  std::thread writer([&] {
    for (uint64_t i = 0; i < 20000 && !stop; ++i) {
      const std::vector<float> v(fresh.begin() + i * kDim, fresh.begin() + (i + 1) * kDim);
      if (!Upsert(*c, {100000 + i}, v, {absl::StrCat("w", i)}, nullptr).ok()) break;
      acked = i + 1;
    }
  });
  absl::Cleanup join = [&] {
    stop = true;
    writer.join();
  };
  for (absl::Time end = absl::Now() + absl::Seconds(120); acked < 20 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GE(acked.load(), 20u);
  const uint64_t before = acked.load();
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("busy"));
  std::move(join).Invoke();
  const uint64_t total = acked.load();
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("busy", info.name));
  ASSERT_OK_AND_ASSIGN(auto restored, db_->RestoreSnapshot(file.first, "busy_copy", false));
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < total; ++i) ids.push_back(100000 + i);
  std::vector<PointData> got;
  ASSERT_OK(restored->Get(ids, true, true, &got));
  ASSERT_GE(got.size(), before);
  ASSERT_LE(got.size(), total);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].id, 100000 + i) << "not a prefix";
    EXPECT_EQ(got[i].payload, absl::StrCat("w", i));
    EXPECT_EQ(got[i].vector,
              std::vector<float>(fresh.begin() + i * kDim, fresh.begin() + (i + 1) * kDim));
  }
  EXPECT_EQ(restored->Info().points, 600 + got.size());
  ExpectGetMatchesModel(*restored, model);
}

// A corrupt or truncated archive is refused with DATA_LOSS before anything
// is created.
TEST_F(CollectionTest, CorruptOrTruncatedSnapshotsAreRefused) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("orig", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  UpsertRange(*c, 0, 300, ClusteredVectors(300, kDim, 421), nullptr);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("orig"));
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("orig", info.name));
  const uint64_t size = fs::file_size(file.first);
  const std::string bad = tmp_.File("bad.zsnap");
  for (uint64_t at : {uint64_t{3}, uint64_t{20}, size / 3, size / 2, size - 40, size - 1}) {
    SCOPED_TRACE(at);
    fs::copy_file(file.first, bad, fs::copy_options::overwrite_existing);
    {
      FILE* f = std::fopen(bad.c_str(), "r+b");
      ASSERT_NE(f, nullptr);
      std::fseek(f, static_cast<long>(at), SEEK_SET);
      const int b = std::fgetc(f);
      std::fseek(f, static_cast<long>(at), SEEK_SET);
      std::fputc(b ^ 0x5a, f);
      std::fclose(f);
    }
    EXPECT_THAT(db_->RestoreSnapshot(bad, "copy", false).status(),
                StatusIs(absl::StatusCode::kDataLoss));
    fs::copy_file(file.first, bad, fs::copy_options::overwrite_existing);
    fs::resize_file(bad, at);
    EXPECT_THAT(db_->RestoreSnapshot(bad, "copy", false).status(),
                StatusIs(absl::StatusCode::kDataLoss));
  }
  EXPECT_EQ(db_->ListCollections().size(), 1u);
  c.reset();
  ReopenDb();  // no half-restored collection comes back
  EXPECT_EQ(db_->ListCollections().size(), 1u);
}

// tests/data/golden/snapshot_v1_0.zsnap was written by format 1.0 (run with
// ZOOM_WRITE_GOLDEN=1 to write it, only for a new format version): every
// later version must restore it.
TEST_F(CollectionTest, RestoresTheGoldenSnapshotOfFormat1_0) {
  constexpr uint32_t kDim = 8;
  const std::string golden = zoom::testing::TestDataPath("golden/snapshot_v1_0.zsnap");
  OpenDb();
  const auto v = ClusteredVectors(300, kDim, 431);
  Model model;
  if (std::getenv("ZOOM_WRITE_GOLDEN") != nullptr) {
    CollectionConfig config;
    config.name = "golden";
    config.dim = kDim;
    config.index.nlist = 16;
    ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
    UpsertRange(*c, 0, 300, v, &model);
    ASSERT_OK(c->StartBuild());
    ASSERT_OK(c->WaitForBuild());
    ASSERT_OK_AND_ASSIGN(SnapshotInfo info, db_->CreateSnapshot("golden"));
    ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("golden", info.name));
    fs::copy_file(file.first, golden, fs::copy_options::overwrite_existing);
  }
  model.clear();
  for (size_t i = 0; i < 300; ++i) {
    model[ExtId(i)] = {std::vector<float>(v.begin() + i * kDim, v.begin() + (i + 1) * kDim),
                       absl::StrCat("p", i)};
  }
  ASSERT_OK_AND_ASSIGN(auto c, db_->RestoreSnapshot(golden, "restored", false));
  EXPECT_EQ(c->Info().points, 300u);
  EXPECT_EQ(c->Info().index_state, IndexState::kReady);
  EXPECT_EQ(c->config().index.nlist, 16u);
  // The stored vectors as written, against the generator's vectors made
  // again here: equal up to the last bits (the generator's arithmetic is
  // compiled into this test, and -march=native contracts it to FMA: exact
  // equality failed there).
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : model) ids.push_back(id);
  std::vector<PointData> got;
  ASSERT_OK(c->Get(ids, true, true, &got));
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Point& p = model.at(ids[i]);
    ASSERT_EQ(got[i].id, ids[i]);
    ASSERT_EQ(got[i].payload, p.payload) << ids[i];
    ASSERT_EQ(got[i].vector.size(), p.vector.size());
    for (size_t j = 0; j < p.vector.size(); ++j) {
      ASSERT_NEAR(got[i].vector[j], p.vector[j], 1e-5f * (1 + std::abs(p.vector[j]))) << ids[i];
    }
  }
  EXPECT_GT(IndexedRecall(*c, model, ClusteredVectors(20, kDim, 432), 20), 0.9);
}

}  // namespace
}  // namespace zoom::server

namespace zoom::server {
namespace {

// ---- Lifetimes of replaced parts ----------------------------------------------

// A replaced index is freed once no search holds it: ten rebuilds under
// concurrent searches leave one index alive (the resident bytes stay those
// of one index), and an index a caller held is freed when it lets go.
TEST_F(CollectionTest, RebuildsUnderSearchesDoNotAccumulateIndexes) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("rebuilds", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 2000, ClusteredVectors(2000, kDim, 401), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  const uint64_t resident = c->Info().resident_bytes;
  const uint64_t one_index = c->engine()->IndexBytes();
  ASSERT_GT(one_index, 0u);
  std::weak_ptr<const index::VectorIndex> first = c->engine()->index();
  ASSERT_FALSE(first.expired());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> searches{0};
  const auto queries = ClusteredVectors(16, kDim, 402);
  std::vector<std::thread> searchers;
  for (int t = 0; t < 2; ++t) {
    searchers.emplace_back([&, t] {
      for (size_t q = t; !stop.load(); q = (q + 1) % 16) {
        CollectionSearchParams p;
        p.engine.k = 10;
        std::vector<Hit> hits;
        EXPECT_OK(SearchInto(*c, queries.data() + q * kDim, kDim, p, &hits));
        EXPECT_EQ(hits.size(), 10u);
        searches.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(c->StartBuild());
    ASSERT_OK(c->WaitForBuild());
  }
  stop = true;
  for (auto& t : searchers) t.join();
  EXPECT_GT(searches.load(), 0u);
  // No search runs now: only the serving index is alive.
  EXPECT_TRUE(first.expired()) << "the first index outlived its last search";
  // (The same data and one build thread: each rebuild is the same size.)
  EXPECT_LE(c->engine()->IndexBytes(), one_index + one_index / 4);
  const uint64_t after = c->Info().resident_bytes;
  EXPECT_LE(after, resident + one_index / 4)
      << "resident bytes grew from " << resident << " to " << after << " over 10 rebuilds";

  // A caller holding the serving index keeps it (and its bytes) alive past
  // the next rebuild, and frees it by letting go.
  std::shared_ptr<const index::VectorIndex> held = c->engine()->index();
  std::weak_ptr<const index::VectorIndex> held_weak = held;
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_FALSE(held_weak.expired());
  EXPECT_GE(c->engine()->IndexBytes(), one_index + one_index * 3 / 4);  // two alive
  EXPECT_GE(c->Info().resident_bytes, after + one_index * 3 / 4);
  held.reset();
  EXPECT_TRUE(held_weak.expired());
  EXPECT_LE(c->engine()->IndexBytes(), one_index + one_index / 4);
  EXPECT_LE(c->Info().resident_bytes, resident + one_index / 4);
}

// Retraining as a collection grows: an index trained on N live points is
// rebuilt in the background once the collection holds auto_retrain_growth
// (here 4) times N. The data drifts (later points come from a shifted
// distribution the first index never trained on), searches from two
// threads never fail while each retrain runs, the switch frees the old
// index, recall at fixed knobs is at least the old index's, and what the
// index was trained on survives a restart (no retrain at reopen).
TEST_F(CollectionTest, GrowthRetrainsInTheBackgroundWhileSearchesGoOn) {
  constexpr uint32_t kDim = 16;
  options_.collection.auto_build_min_points = 400;
  options_.collection.auto_retrain_growth = 4.0;
  options_.collection.auto_retrain_drift = 0;  // growth alone (drift: the next test)
  OpenDb();
  auto c = Create("grows", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  // Point i: a clustered vector, shifted by +3 on every axis for i >= 400.
  constexpr size_t kMax = 6400;
  std::vector<float> all = ClusteredVectors(kMax, kDim, 501);
  for (size_t i = 400; i < kMax; ++i) {
    for (uint32_t j = 0; j < kDim; ++j) all[i * kDim + j] += 3.0f;
  }
  auto upsert = [&](size_t first, size_t n) {
    UpsertRange(*c, first, n,
                std::vector<float>(all.begin() + first * kDim, all.begin() + (first + n) * kDim),
                &model, 100);
  };
  // Queries from both distributions, low knobs (so the preview's quality
  // shows through the re-rank) at equal work: a quarter of the lists, so
  // the same share of the codes is scanned whatever nlist the index chose
  // (a retrain on more points picks more lists).
  std::vector<float> queries = ClusteredVectors(60, kDim, 502);
  for (size_t q = 30; q < 60; ++q) {
    for (uint32_t j = 0; j < kDim; ++j) queries[q * kDim + j] += 3.0f;
  }
  uint32_t nprobe = 0;
  auto recall = [&] { return RecallAtAQuarterOfTheLists(*c, queries, model, &nprobe); };
  // While `build` runs, two threads search; every search succeeds with k
  // hits (each thread searches at least once).
  auto searched_through = [&](const std::function<void()>& build) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> searches{0}, failures{0};
    std::vector<std::thread> searchers;
    for (int t = 0; t < 2; ++t) {
      searchers.emplace_back([&, t] {
        size_t q = t;
        do {
          CollectionSearchParams p;
          p.engine.k = 10;
          std::vector<Hit> hits;
          absl::Status st = SearchInto(*c, queries.data() + q * kDim, kDim, p, &hits);
          if (!st.ok() || hits.size() != 10) failures.fetch_add(1);
          searches.fetch_add(1);
          q = (q + 1) % 60;
        } while (!stop.load());
      });
    }
    build();
    stop = true;
    for (auto& t : searchers) t.join();
    EXPECT_GE(searches.load(), 2u);
    EXPECT_EQ(failures.load(), 0u) << "of " << searches.load() << " searches";
  };

  // A point far from every query (never in an oracle's top 10): recall is
  // measured before it is written and after, over the same top 10s.
  auto upsert_far = [&](size_t id) {
    std::vector<float> v(kDim, 1000.0f + float(id));
    UpsertRange(*c, id, 1, v, &model);
  };

  upsert(0, 400);  // the first automatic build, on 400 points
  ASSERT_OK(c->WaitForBuild());
  CollectionInfo info = c->Info();
  ASSERT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.trained_points, 400u);
  EXPECT_EQ(info.auto_retrains, 0u);

  upsert(400, 1199);  // 1,599 points: under 4x, no retrain
  ASSERT_OK(c->WaitForBuild());
  info = c->Info();
  EXPECT_EQ(info.trained_points, 400u);
  EXPECT_EQ(info.indexed_points, 1599u);
  EXPECT_EQ(info.auto_retrains, 0u);
  const double recall_400 = recall();
  const uint32_t nprobe_400 = nprobe;
  std::weak_ptr<const index::VectorIndex> old_index = c->engine()->index();
  searched_through([&] {
    upsert_far(1599);  // the 1,600th point: 4x, the retrain starts
    ASSERT_OK(c->WaitForBuild());
  });
  info = c->Info();
  EXPECT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.trained_points, 1600u);
  EXPECT_EQ(info.indexed_points, 1600u);
  EXPECT_EQ(info.auto_retrains, 1u);
  EXPECT_THAT(info.index_error, IsEmpty());
  // Only the serving index is alive: the switch freed the old one.
  EXPECT_TRUE(old_index.expired()) << "the replaced index outlived its last search";
  EXPECT_EQ(c->engine()->IndexBytes(), c->engine()->index()->ResidentBytes());
  const double recall_1600 = recall();
  std::printf("[ recall@10, K' 12, a quarter of the lists, 1,600 points ] trained on 400: "
              "%.4f (nprobe %u), retrained on 1,600: %.4f (nprobe %u)\n",
              recall_400, nprobe_400, recall_1600, nprobe);
  EXPECT_GE(recall_1600, recall_400);

  // Once more at 6,400 (4 x 1,600), with writes during the retrain: they
  // are in the new index at the switch.
  upsert(1600, 4799);  // 6,399
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().auto_retrains, 1u);
  const uint64_t resident_before = c->Info().resident_bytes;
  const double recall_old = recall();
  const uint32_t nprobe_old = nprobe;
  old_index = c->engine()->index();
  searched_through([&] {
    upsert_far(6399);  // the retrain starts
    for (size_t id = kMax; id < kMax + 50; ++id) upsert_far(id);
    ASSERT_OK(c->WaitForBuild());
  });
  info = c->Info();
  // (It trains on the live points when it starts: 6,400 plus those of the
  // 50 writes that came before.)
  EXPECT_GE(info.trained_points, 6400u);
  EXPECT_LE(info.trained_points, 6450u);
  EXPECT_EQ(info.indexed_points, 6450u);
  EXPECT_EQ(info.auto_retrains, 2u);
  EXPECT_TRUE(old_index.expired()) << "the replaced index outlived its last search";
  EXPECT_EQ(c->engine()->IndexBytes(), c->engine()->index()->ResidentBytes());
  // Resident bytes after the switch: one index (more lists now), not two.
  std::printf("[ resident bytes ] before the retrain %llu, after %llu\n",
              static_cast<unsigned long long>(resident_before),
              static_cast<unsigned long long>(info.resident_bytes));
  EXPECT_LE(info.resident_bytes, resident_before + resident_before / 4);
  const double recall_new = recall();
  std::printf("[ recall@10, K' 12, a quarter of the lists, 6,400 points ] trained on 1,600: "
              "%.4f (nprobe %u), retrained on 6,400: %.4f (nprobe %u)\n",
              recall_old, nprobe_old, recall_new, nprobe);
  EXPECT_GE(recall_new, recall_old);
  const uint64_t trained = info.trained_points;

  // A restart keeps what the index was trained on: no retrain at reopen,
  // nor at the next write.
  c.reset();
  ReopenDb();
  c = Get("grows");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  EXPECT_EQ(info.trained_points, trained);
  EXPECT_EQ(info.auto_retrains, 0u);
  upsert_far(kMax + 50);
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().auto_retrains, 0u);
  EXPECT_EQ(c->Info().trained_points, trained);

  // A compaction with no retrain due keeps the quantiser: what the index
  // was trained on stays, and the points that stay keep their codes, so
  // the recall holds.
  std::vector<uint64_t> gone;
  for (size_t i = 0; i < kMax; i += 5) gone.push_back(ExtId(i));
  ASSERT_OK(c->Delete(gone).status());
  for (uint64_t ext : gone) model.erase(ext);
  const double recall_before = recall();
  ASSERT_OK(c->Compact());
  info = c->Info();
  EXPECT_EQ(info.trained_points, trained);
  EXPECT_EQ(info.auto_retrains, 0u);
  EXPECT_EQ(info.indexed_points, kMax + 51 - gone.size());
  EXPECT_GE(recall(), recall_before - 0.01);
}

// A collection whose new points come from elsewhere than those its index
// was trained on retrains once the codes fit the latest window of them
// twice as badly as the first window after the build, long before it has
// grown 4x; points from the trained distribution never trigger it, and the
// baseline survives a restart.
TEST_F(CollectionTest, DriftRetrainsBeforeGrowthWould) {
  constexpr uint32_t kDim = 16;
  constexpr size_t kWindow = index::CodeErrorStats::kCodeErrorWindow;
  options_.collection.auto_build_min_points = 2000;
  options_.collection.auto_retrain_growth = 0;  // drift alone
  options_.collection.auto_retrain_drift = 2.0;
  OpenDb();
  auto c = Create("drifts", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  // Points [0, 2000 + 2 windows): one distribution; then points shifted by
  // +4 on every axis (away from every trained centroid).
  constexpr size_t kBuilt = 2000;
  const size_t kSame = kBuilt + 2 * kWindow;
  const size_t kMax = kSame + 3 * kWindow;
  std::vector<float> all = ClusteredVectors(kMax, kDim, 601);
  for (size_t i = kSame; i < kMax; ++i) {
    for (uint32_t j = 0; j < kDim; ++j) all[i * kDim + j] += 4.0f;
  }
  auto upsert = [&](size_t first, size_t n) {
    UpsertRange(*c, first, n,
                std::vector<float>(all.begin() + first * kDim, all.begin() + (first + n) * kDim),
                &model, 64);
  };
  // Queries near the shifted points; recall at a quarter of the lists.
  std::vector<float> queries = ClusteredVectors(40, kDim, 602);
  for (float& x : queries) x += 4.0f;
  auto recall = [&] { return RecallAtAQuarterOfTheLists(*c, queries, model); };

  upsert(0, kBuilt);
  ASSERT_OK(c->WaitForBuild());
  CollectionInfo info = c->Info();
  ASSERT_EQ(info.index_state, IndexState::kReady);
  EXPECT_EQ(info.trained_points, kBuilt);
  EXPECT_EQ(info.code_error_ratio, 0.0);  // no window yet
  // Two windows from the trained distribution: the first is the baseline,
  // the second fits about as well. No retrain.
  upsert(kBuilt, kWindow);
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().code_error_ratio, 1.0);
  upsert(kBuilt + kWindow, kWindow);
  ASSERT_OK(c->WaitForBuild());
  info = c->Info();
  std::printf("[ code error, latest window / first ] same distribution: %.3f\n",
              info.code_error_ratio);
  EXPECT_GT(info.code_error_ratio, 0.5);
  EXPECT_LT(info.code_error_ratio, 1.5);
  EXPECT_EQ(info.auto_retrains, 0u);
  EXPECT_EQ(info.trained_points, kBuilt);

  // The shifted points, all but the last batch of a window: still the old
  // index (the window is not complete).
  upsert(kSame, kWindow - 64);
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().auto_retrains, 0u);
  const double recall_old = recall();
  std::weak_ptr<const index::VectorIndex> old_index = c->engine()->index();
  upsert(kSame + kWindow - 64, 64);  // the window completes: the retrain starts
  ASSERT_OK(c->WaitForBuild());
  info = c->Info();
  EXPECT_EQ(info.auto_retrains, 1u);
  EXPECT_EQ(info.drift_retrains, 1u);
  EXPECT_EQ(info.trained_points, kSame + kWindow);
  EXPECT_LT(info.trained_points, 4 * kBuilt);  // drift: growth at 4x would not have yet
  EXPECT_EQ(info.indexed_points, kSame + kWindow);
  EXPECT_EQ(info.code_error_ratio, 0.0);  // the new index has no window yet
  EXPECT_TRUE(old_index.expired());
  const double recall_new = recall();
  std::printf("[ recall@10 near the shifted points, K' 12, a quarter of the lists ] "
              "index trained before the drift: %.4f, retrained: %.4f\n",
              recall_old, recall_new);
  EXPECT_GE(recall_new, recall_old);

  // The new index's first window (both distributions now) is its baseline;
  // it is kept in the manifest: after a restart (which replays that window
  // into the loaded index) the next windows are judged against it, and
  // nothing retrains.
  upsert(kSame + kWindow, kWindow);
  ASSERT_OK(c->WaitForBuild());
  info = c->Info();
  EXPECT_EQ(info.code_error_ratio, 1.0);
  const double baseline = info.code_error_baseline;
  EXPECT_GT(baseline, 0.0);
  c.reset();
  ReopenDb();
  c = Get("drifts");
  ASSERT_NE(c, nullptr);
  EXPECT_NEAR(c->Info().code_error_baseline, baseline, baseline * 1e-5);
  upsert(kSame + 2 * kWindow, kWindow);
  ASSERT_OK(c->WaitForBuild());
  info = c->Info();
  EXPECT_NEAR(info.code_error_baseline, baseline, baseline * 1e-5);
  EXPECT_GT(info.code_error_ratio, 0.5);
  EXPECT_LT(info.code_error_ratio, 1.5);
  EXPECT_EQ(info.auto_retrains, 0u);
}

// A segment replaced by compaction is retired, not destroyed by its last
// reader: its records stay while a reader holds it, are dropped by the
// maintenance once none does, and a restart drops the records of a
// segment that was still held at close.
TEST_F(CollectionTest, RetiredSegmentsAreReleasedByMaintenanceNotByReaders) {
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("retire", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 411), &model);
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 600; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  const uint32_t first_space = c->record_space();

  // A reader holds the serving segment across the compaction.
  std::shared_ptr<const SearchEngine> reader = c->engine();
  ASSERT_OK(c->Compact());
  const uint32_t second_space = c->record_space();
  ASSERT_NE(second_space, first_space);
  EXPECT_THAT(c->record_spaces(), ::testing::UnorderedElementsAre(first_space, second_space));
  // The old segment still answers its reader (its file was unlinked, the
  // descriptor stays).
  EXPECT_EQ(reader->size(), 600u);
  ExpectGetMatchesModel(*c, model);
  db_->RunMaintenance();  // held: stays
  EXPECT_EQ(c->record_spaces().size(), 2u);
  reader.reset();  // the last reader lets go: no I/O here
  EXPECT_EQ(c->record_spaces().size(), 2u);
  db_->RunMaintenance();
  EXPECT_THAT(c->record_spaces(), ::testing::ElementsAre(second_space));

  // Held at close: the manifest lists the space, the next open drops it.
  for (size_t i = 1; i < 600; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  reader = c->engine();
  ASSERT_OK(c->Compact());
  const uint32_t third_space = c->record_space();
  EXPECT_EQ(c->record_spaces().size(), 2u);
  c.reset();
  ReopenDb();
  reader.reset();
  c = Get("retire");
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->record_spaces(), ::testing::ElementsAre(third_space));
  ExpectGetMatchesModel(*c, model);
  c.reset();
  CloseDb();
  auto count = RecordCounter();
  EXPECT_EQ(count(first_space), 0u);
  EXPECT_EQ(count(second_space), 0u);
  EXPECT_EQ(count(third_space), model.size());
}

}  // namespace
}  // namespace zoom::server

namespace zoom::server {
namespace {

// ---- Write faults --------------------------------------------------------------

// Every write path of a collection under injected disk faults (EIO, a full
// disk, a write cut short, failed syncs): each failing call reports the
// right code, the collection keeps serving what was acknowledged, and a
// restart finds exactly that: nothing acknowledged is lost, nothing
// half-written is served.
TEST_F(CollectionTest, WriteFaultsOnEveryPathLoseNothingAcknowledged) {
  using ::zoom::FaultInjectingFileSystem;
  using Op = FaultInjectingFileSystem::Op;
  constexpr uint32_t kDim = 8;
  FaultInjectingFileSystem faulty;
  options_.collection.store.file_system = &faulty;
  options_.snapshots_dir = tmp_.File("snapshots");
  OpenDb();
  auto c = Create("faults", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 600, ClusteredVectors(600, kDim, 501), &model);
  const auto fresh = ClusteredVectors(200, kDim, 502);
  auto upsert_some = [&](size_t first, Model* m) {
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < 20; ++i) ids.push_back(ExtId(1000 + first + i));
    return Upsert(*c, ids,
                  std::vector<float>(fresh.begin() + first * kDim,
                                     fresh.begin() + (first + 20) * kDim),
                  {}, m);
  };

  // Upserts: each write and sync of the vector file.
  const std::pair<FaultInjectingFileSystem::Fault, absl::StatusCode> upsert_faults[] = {
      {{Op::kWrite, ".zvec", 0, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kWrite, ".zvec", 0, ENOSPC, /*short_write=*/true},
       absl::StatusCode::kResourceExhausted},
      {{Op::kSync, ".zvec", 0, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kWrite, ".zvec", /*skip=*/1, EIO}, absl::StatusCode::kDataLoss},
      {{Op::kSync, ".zvec", /*skip=*/1, ENOSPC}, absl::StatusCode::kResourceExhausted},
  };
  size_t next = 0;
  for (const auto& [fault, code] : upsert_faults) {
    SCOPED_TRACE(absl::StrCat("op ", static_cast<int>(fault.op), " skip ", fault.skip));
    faulty.Inject(fault);
    EXPECT_THAT(upsert_some(next, nullptr), StatusIs(code, HasSubstr("injected")));
    faulty.Clear();
    EXPECT_EQ(c->Info().points, model.size());
    ASSERT_OK(upsert_some(next, &model));  // the same points, now acknowledged
    next += 20;
  }
  ExpectGetMatchesModel(*c, model);

  // The index snapshot at the end of a build: the build fails, the
  // collection serves (exactly), and the next build succeeds.
  faulty.Inject({Op::kWrite, ".zidx", 0, ENOSPC});
  ASSERT_OK(c->StartBuild());
  EXPECT_THAT(c->WaitForBuild(), StatusIs(absl::StatusCode::kResourceExhausted));
  faulty.Clear();
  const auto queries = ClusteredVectors(10, kDim, 503);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());

  // Compaction: its new vector file, its index file, and the switch.
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 600; i += 2) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model));
  for (const auto& fault : {FaultInjectingFileSystem::Fault{Op::kWrite, "vectors-", 0, EIO},
                            FaultInjectingFileSystem::Fault{Op::kSync, "vectors-", 1, EIO},
                            FaultInjectingFileSystem::Fault{Op::kWrite, "index-", 0, ENOSPC,
                                                            /*short_write=*/true}}) {
    SCOPED_TRACE(fault.path_contains);
    const uint32_t space = c->record_space();
    faulty.Inject(fault);
    EXPECT_FALSE(c->Compact().ok());
    faulty.Clear();
    EXPECT_EQ(c->record_space(), space);  // still the old segment
    ExpectGetMatchesModel(*c, model);
    EXPECT_GT(IndexedRecall(*c, model, queries, 10), kRecallFloor);
  }

  // A snapshot archive: refused, none listed, no file left behind.
  faulty.Inject({Op::kWrite, ".zsnap", 0, ENOSPC, /*short_write=*/true});
  EXPECT_THAT(db_->CreateSnapshot("faults"), StatusIs(absl::StatusCode::kResourceExhausted));
  faulty.Inject({Op::kRename, ".info", 0, EIO});
  EXPECT_THAT(db_->CreateSnapshot("faults"), StatusIs(absl::StatusCode::kDataLoss));
  faulty.Clear();
  ASSERT_OK_AND_ASSIGN(auto snaps, db_->ListSnapshots("faults"));
  EXPECT_TRUE(snaps.empty());
  size_t files = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(options_.snapshots_dir, ec)) {
    files += e.is_regular_file();
  }
  EXPECT_EQ(files, 0u);

  // After all of it, and a restart: exactly the acknowledged points.
  ASSERT_OK(c->Compact());
  c.reset();
  options_.collection.store.file_system = nullptr;
  ReopenDb();
  c = Get("faults");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Info().points, model.size());
  ExpectGetMatchesModel(*c, model);
  ExpectExactSearchesMatchOracle(*c, model, queries, 10);
}

}  // namespace
}  // namespace zoom::server

namespace zoom::server {
namespace {

// with_vectors takes the hits' vectors from the fullview that just read
// them: the same vectors as Get, and no read beyond the fullview's.
// Counts the read batches of every vector file.
class CountingReader final : public storage::BlockReader {
 public:
  CountingReader(std::unique_ptr<storage::BlockReader> inner, std::atomic<int>* batches)
      : inner_(std::move(inner)), batches_(batches) {}
  absl::Status ReadBatch(absl::Span<storage::ReadRequest> requests) const override {
    batches_->fetch_add(1);
    return inner_->ReadBatch(requests);
  }
  absl::StatusOr<uint8_t*> Scratch(size_t bytes) const override { return inner_->Scratch(bytes); }
  size_t alignment() const override { return inner_->alignment(); }
  storage::IoBackend backend() const override { return inner_->backend(); }
  bool direct_io() const override { return inner_->direct_io(); }
  const std::string& path() const override { return inner_->path(); }
  std::string Describe() const override { return "counting " + inner_->Describe(); }

 private:
  std::unique_ptr<storage::BlockReader> inner_;
  std::atomic<int>* batches_;
};

TEST_F(CollectionTest, SearchWithVectorsReadsNothingTwice) {
  constexpr uint32_t kDim = 16;
  std::atomic<int> batches{0};
  options_.collection.store.reader_factory =
      [&batches](const std::string& path, const storage::BlockReaderOptions& o)
      -> absl::StatusOr<std::unique_ptr<storage::BlockReader>> {
    auto inner = storage::MakeBlockReader(path, o);
    if (!inner.ok()) return inner.status();
    return std::make_unique<CountingReader>(std::move(*inner), &batches);
  };
  OpenDb();
  auto c = Create("vectors", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 601), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  const auto queries = ClusteredVectors(5, kDim, 602);
  for (size_t q = 0; q < 5; ++q) {
    CollectionSearchParams p;
    p.engine.k = 10;
    std::vector<Hit> plain, with;
    QueryStats plain_stats, with_stats;
    const int before = batches.load();
    ASSERT_OK(SearchInto(*c, queries.data() + q * kDim, kDim, p, &plain, &plain_stats));
    const int plain_batches = batches.load() - before;
    EXPECT_EQ(plain_batches, 1);  // the fullview
    p.engine.with_vectors = true;
    const int before_with = batches.load();
    ASSERT_OK(SearchInto(*c, queries.data() + q * kDim, kDim, p, &with, &with_stats));
    EXPECT_EQ(batches.load() - before_with, plain_batches);  // nothing read twice
    ASSERT_EQ(with.size(), plain.size());
    EXPECT_EQ(with_stats.reads, plain_stats.reads);
    for (size_t i = 0; i < with.size(); ++i) {
      EXPECT_EQ(with[i].id, plain[i].id);
      EXPECT_EQ(with[i].vector, model.at(with[i].id).vector) << "hit " << i;
    }
    // The batch path too.
    std::vector<QueryResult> batch;
    const int before_batch = batches.load();
    ASSERT_OK(c->SearchBatch(absl::MakeConstSpan(queries.data() + q * kDim, kDim), 1, p, &batch));
    EXPECT_EQ(batches.load() - before_batch, plain_batches);
    ASSERT_EQ(batch.size(), 1u);
    ASSERT_EQ(batch[0].hits.size(), with.size());
    EXPECT_EQ(batch[0].stats.reads, plain_stats.reads);
    for (size_t i = 0; i < with.size(); ++i) EXPECT_EQ(batch[0].hits[i].vector, with[i].vector);
  }
}

// ---- Typed payload fields -------------------------------------------------------

PayloadFields Shop(const std::string& category, int64_t price) {
  PayloadFields f;
  f["category"] = FieldValue::Of(category);
  f["price"] = FieldValue::Of(price);
  f["tags"] = FieldValue::List({std::string("new"), std::string("sale")});
  f["at"] = FieldValue::Of(GeoPoint{48.85, 2.35});
  return f;
}

// The fields of `id` as Get returns them (with_payload).
PayloadFields FieldsOf(const Collection& c, uint64_t id) {
  std::vector<PointData> got;
  EXPECT_OK(c.Get(std::vector<uint64_t>{id}, false, /*with_payload=*/true, &got));
  return got.size() == 1 ? got[0].fields : PayloadFields{{"<missing>", FieldValue::Null()}};
}

// Typed fields are stored with the point, returned by Get and Search (with
// payloads), replaced by an Upsert, edited by SetPayload / DeletePayload
// without touching the vector, erased by Delete, and survive restart,
// compaction and a snapshot's restore.
TEST_F(CollectionTest, TypedFieldsLiveWithThePointThroughEveryPath) {
  OpenDb();
  constexpr uint32_t kDim = 8;
  auto c = Create("shop", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const std::vector<float> base = ClusteredVectors(600, kDim, 901);
  std::vector<PayloadFields> fields(600);
  std::vector<PointRef> refs;
  for (uint64_t i = 0; i < 600; ++i) {
    fields[i] = Shop(i % 3 == 0 ? "laptop" : "phone", static_cast<int64_t>(i));
    refs.push_back({i, base.data() + i * kDim, i % 2 == 0 ? "opaque" : "", &fields[i]});
  }
  refs[599].fields = nullptr;  // no fields at all
  ASSERT_OK(c->Upsert(refs));
  EXPECT_EQ(FieldsOf(*c, 3), Shop("laptop", 3));
  EXPECT_TRUE(FieldsOf(*c, 599).empty());
  std::vector<PointData> got;
  ASSERT_OK(c->Get(std::vector<uint64_t>{4}, false, /*with_payload=*/false, &got));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].fields.empty());  // not asked for
  // Search answers carry them with payloads (exact, then indexed).
  for (bool exact : {true, false}) {
    if (!exact) {
      ASSERT_OK(c->StartBuild());
      ASSERT_OK(c->WaitForBuild());
    }
    CollectionSearchParams p;
    p.engine.k = 3;
    p.engine.exact = exact;
    p.with_payload = true;
    std::vector<Hit> hits;
    ASSERT_OK(SearchInto(*c, base.data() + 6 * kDim, kDim, p, &hits));
    ASSERT_FALSE(hits.empty());
    EXPECT_EQ(hits[0].id, 6u);
    EXPECT_EQ(hits[0].fields, Shop("laptop", 6));
    EXPECT_EQ(hits[0].payload, "opaque");
    p.with_payload = false;
    ASSERT_OK(SearchInto(*c, base.data() + 6 * kDim, kDim, p, &hits));
    EXPECT_TRUE(hits[0].fields.empty());
  }
  // SetPayload merges (or overwrites); unknown ids are skipped; a change
  // to nothing counts nothing.
  PayloadFields discount;
  discount["price"] = FieldValue::Of(int64_t{1});
  discount["sold"] = FieldValue::Of(true);
  ASSERT_OK_AND_ASSIGN(uint64_t n, c->SetPayload(std::vector<uint64_t>{3, 3, 5, 10000}, discount,
                                                 /*overwrite=*/false));
  EXPECT_EQ(n, 2u);
  PayloadFields want = Shop("laptop", 3);
  want["price"] = FieldValue::Of(int64_t{1});
  want["sold"] = FieldValue::Of(true);
  EXPECT_EQ(FieldsOf(*c, 3), want);
  ASSERT_OK_AND_ASSIGN(n, c->SetPayload(std::vector<uint64_t>{3}, discount, false));
  EXPECT_EQ(n, 0u);
  ASSERT_OK_AND_ASSIGN(n, c->SetPayload(std::vector<uint64_t>{5}, discount, /*overwrite=*/true));
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(FieldsOf(*c, 5), discount);
  PayloadFields bad;
  bad["x"] = FieldValue::Of(std::nan(""));
  EXPECT_THAT(c->SetPayload(std::vector<uint64_t>{5}, bad, false).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("field 'x'")));
  // DeletePayload: named keys, or every field.
  ASSERT_OK_AND_ASSIGN(n, c->DeletePayload(std::vector<uint64_t>{3}, std::vector<std::string>{
                                                                        "sold", "nope"}));
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(FieldsOf(*c, 3).count("sold"), 0u);
  ASSERT_OK_AND_ASSIGN(n, c->DeletePayload(std::vector<uint64_t>{9}, {}));
  EXPECT_EQ(n, 1u);
  EXPECT_TRUE(FieldsOf(*c, 9).empty());
  // The vector did not move: the point still finds itself first.
  {
    CollectionSearchParams p;
    p.engine.k = 1;
    p.engine.exact = true;
    std::vector<Hit> hits;
    ASSERT_OK(SearchInto(*c, base.data() + 3 * kDim, kDim, p, &hits));
    EXPECT_EQ(hits[0].id, 3u);
  }
  // An Upsert replaces the fields (none given: none kept); a Delete erases
  // them, and the id upserted again starts without.
  ASSERT_OK(c->Upsert(std::vector<PointRef>{{12, base.data() + 12 * kDim, "", nullptr}}));
  EXPECT_TRUE(FieldsOf(*c, 12).empty());
  ASSERT_OK(c->Delete(std::vector<uint64_t>{15}).status());
  ASSERT_OK(c->Upsert(std::vector<PointRef>{{15, base.data() + 15 * kDim, "", nullptr}}));
  EXPECT_TRUE(FieldsOf(*c, 15).empty());
  ASSERT_OK(c->Delete(std::vector<uint64_t>{18}).status());
  EXPECT_TRUE(c->SetPayload(std::vector<uint64_t>{18}, discount, false).value() == 0);
  // Restart, compaction, snapshot and restore keep every point's fields.
  const auto expected = [&](uint64_t id) -> PayloadFields {
    if (id == 3) {
      PayloadFields f = Shop("laptop", 3);
      f["price"] = FieldValue::Of(int64_t{1});
      return f;
    }
    if (id == 5) return discount;
    if (id == 9 || id == 12 || id == 15 || id == 599) return {};
    return fields[id];
  };
  const auto check_all = [&](const Collection& col, const char* when) {
    for (uint64_t id = 0; id < 600; ++id) {
      if (id == 18) continue;
      ASSERT_EQ(FieldsOf(col, id), expected(id)) << when << ": point " << id;
    }
  };
  c.reset();
  ReopenDb();
  c = Get("shop");
  ASSERT_NE(c, nullptr);
  check_all(*c, "after reopen");
  ASSERT_OK(c->Compact());
  check_all(*c, "after compaction");
  ASSERT_OK_AND_ASSIGN(SnapshotInfo snap, db_->CreateSnapshot("shop"));
  ASSERT_OK_AND_ASSIGN(auto file, db_->SnapshotFile("shop", snap.name));
  ASSERT_OK_AND_ASSIGN(auto restored, db_->RestoreSnapshot(file.first, "shop2", false));
  check_all(*restored, "restored");
  // Fields are per collection: the restored copy changes alone; dropping
  // the original leaves the copy's.
  ASSERT_OK(restored->SetPayload(std::vector<uint64_t>{1}, discount, true).status());
  EXPECT_EQ(FieldsOf(*c, 1), fields[1]);
  c.reset();
  ASSERT_OK(db_->DropCollection("shop"));
  EXPECT_EQ(FieldsOf(*restored, 1), discount);
  EXPECT_EQ(FieldsOf(*restored, 2), fields[2]);
}

TEST_F(CollectionTest, UpsertRefusesBadFieldsWhole) {
  OpenDb();
  auto c = Create("bad", 4, Metric::kL2);
  ASSERT_NE(c, nullptr);
  const float v[4] = {1, 2, 3, 4};
  PayloadFields ok = Shop("x", 1), off;
  off["where"] = FieldValue::Of(GeoPoint{0, 200});
  EXPECT_THAT(c->Upsert(std::vector<PointRef>{{1, v, "", &ok}, {2, v, "", &off}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("point 2 (#1): field 'where': geo point")));
  EXPECT_EQ(c->Info().points, 0u);  // all or nothing
}

// ---- Recall as a knob (calibration.h) ----------------------------------------

// A search's stats with `target` (0: none) and the knobs given (0: none).
QueryStats StatsOf(const Collection& c, const float* q, double target, uint32_t k = 10,
                   uint32_t nprobe = 0) {
  CollectionSearchParams p;
  p.engine.k = k;
  p.engine.ef = 0;
  p.engine.nprobe = nprobe;
  p.engine.rerank_candidates = 0;
  p.target_recall = target;
  QueryResult r;
  EXPECT_OK(c.Search(absl::MakeConstSpan(q, c.config().dim), p, &r));
  return r.stats;
}

TEST_F(CollectionTest, ABuildCalibratesAndATargetPicksTheCheapestKnobsReachingIt) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  auto c = Create("cal", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  const auto base = ClusteredVectors(3000, kDim, 41);
  UpsertRange(*c, 0, 3000, base, &model);
  // Without an index there is nothing to calibrate: the default knobs.
  const auto queries = ClusteredVectors(5, kDim, 42);
  QueryStats none = StatsOf(*c, queries.data(), 0.9);
  EXPECT_FALSE(none.knobs_calibrated);
  EXPECT_FLOAT_EQ(none.target_recall, 0.9f);
  EXPECT_THAT(c->CalibrateNow(), StatusIs(absl::StatusCode::kFailedPrecondition));

  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  CollectionInfo info = c->Info();
  ASSERT_NE(info.calibration, nullptr);
  EXPECT_TRUE(info.calibration_current);
  EXPECT_EQ(info.calibration_error, "");
  EXPECT_EQ(info.calibration->queries, 200u);  // max(200, 3000 / 100)
  EXPECT_EQ(info.calibration->indexed_points, 3000u);
  EXPECT_DOUBLE_EQ(info.default_target_recall, 0.95);  // the server's
  const Calibration cal = *info.calibration;

  // A request's target: the chosen point's knobs, and its recall.
  for (double target : {0.5, 0.9, 0.95, 0.99, 1.0}) {
    SCOPED_TRACE(target);
    const Calibration::Choice want = cal.Choose(target);
    QueryStats s = StatsOf(*c, queries.data(), target);
    EXPECT_TRUE(s.knobs_calibrated);
    EXPECT_FLOAT_EQ(s.target_recall, static_cast<float>(target));
    EXPECT_EQ(s.target_reached, want.reached);
    EXPECT_EQ(s.knob_ef, want.point.ef);
    EXPECT_EQ(s.knob_nprobe, want.point.nprobe);
    EXPECT_EQ(s.knob_rerank, want.point.rerank_candidates);
    EXPECT_FLOAT_EQ(s.calibrated_recall, static_cast<float>(want.point.recall));
  }
  // No target, no knobs: the server's default target.
  const Calibration::Choice def = cal.Choose(0.95);
  QueryStats s = StatsOf(*c, queries.data(), 0);
  EXPECT_FLOAT_EQ(s.target_recall, 0.95f);
  EXPECT_EQ(s.knob_nprobe, def.point.nprobe);
  // A knob the request sets is kept; the curve's recall no longer applies.
  s = StatsOf(*c, queries.data(), 0.95, 10, /*nprobe=*/7);
  EXPECT_EQ(s.knob_nprobe, 7u);
  EXPECT_EQ(s.knob_rerank, def.point.rerank_candidates);
  EXPECT_EQ(s.calibrated_recall, 0.0f);
  // k above the curve's 10: K' grows with it.
  s = StatsOf(*c, queries.data(), 0.95, 25);
  EXPECT_EQ(s.knob_rerank, (def.point.rerank_candidates * 25 + 9) / 10);
  // Exact searches take no knobs.
  CollectionSearchParams exact;
  exact.engine.k = 10;
  exact.engine.exact = true;
  exact.target_recall = 0.99;
  QueryResult r;
  ASSERT_OK(c->Search(absl::MakeConstSpan(queries.data(), kDim), exact, &r));
  EXPECT_FALSE(r.stats.knobs_calibrated);
  // Targets outside (0, 1].
  for (double bad : {-0.1, 1.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    CollectionSearchParams p;
    p.engine.k = 10;
    p.target_recall = bad;
    EXPECT_THAT(c->Search(absl::MakeConstSpan(queries.data(), kDim), p, &r),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_recall")));
  }

  // The curve survives a restart with its index.
  c.reset();
  ReopenDb();
  c = Get("cal");
  ASSERT_NE(c, nullptr);
  info = c->Info();
  ASSERT_NE(info.calibration, nullptr);
  EXPECT_TRUE(info.calibration_current);
  EXPECT_EQ(info.calibration->Encode(), cal.Encode());
  EXPECT_FALSE(c->MaybeStartCalibration());  // nothing to measure

  // A compaction makes a new index: the old curve serves until the new one
  // is measured (in the background, by maintenance).
  std::vector<uint64_t> del;
  for (size_t i = 0; i < 3000; i += 3) del.push_back(ExtId(i));
  ASSERT_OK(Delete(*c, del, &model, nullptr));
  ASSERT_OK(c->Compact());
  info = c->Info();
  ASSERT_NE(info.calibration, nullptr);
  EXPECT_FALSE(info.calibration_current);
  EXPECT_TRUE(StatsOf(*c, queries.data(), 0.95).knobs_calibrated);
  EXPECT_TRUE(c->MaybeStartCalibration());
  ASSERT_OK(c->WaitForCalibration());
  info = c->Info();
  EXPECT_TRUE(info.calibration_current);
  EXPECT_EQ(info.calibration->indexed_points, 2000u);
  EXPECT_FALSE(c->MaybeStartCalibration());
  // ... and is what a restart finds.
  const std::string measured = info.calibration->Encode();
  c.reset();
  ReopenDb();
  c = Get("cal");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Info().calibration_current);
  EXPECT_EQ(c->Info().calibration->Encode(), measured);
}

TEST_F(CollectionTest, TheCollectionsTargetOrKnobsBeatTheServersTarget) {
  constexpr uint32_t kDim = 16;
  OpenDb();
  const auto base = ClusteredVectors(1500, kDim, 43);
  const auto q = ClusteredVectors(1, kDim, 44);
  // Knobs of its own (not the built-in 64 / 16 / 100): no target applies
  // unless the request names one.
  CollectionConfig config;
  config.name = "knobs";
  config.dim = kDim;
  config.default_nprobe = 32;
  ASSERT_OK_AND_ASSIGN(auto c, db_->CreateCollection(config));
  Model model;
  UpsertRange(*c, 0, 1500, base, &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().default_target_recall, 0.0);
  QueryStats s = StatsOf(*c, q.data(), 0);
  EXPECT_FALSE(s.knobs_calibrated);
  EXPECT_EQ(s.target_recall, 0.0f);
  EXPECT_EQ(s.knob_nprobe, 32u);
  EXPECT_EQ(s.knob_rerank, 100u);
  EXPECT_TRUE(StatsOf(*c, q.data(), 0.9).knobs_calibrated);
  // A target of its own beats its knobs.
  config.name = "target";
  config.default_target_recall = 0.9;
  ASSERT_OK_AND_ASSIGN(auto t, db_->CreateCollection(config));
  UpsertRange(*t, 0, 1500, base, &model);
  ASSERT_OK(t->StartBuild());
  ASSERT_OK(t->WaitForBuild());
  EXPECT_DOUBLE_EQ(t->Info().default_target_recall, 0.9);
  s = StatsOf(*t, q.data(), 0);
  EXPECT_TRUE(s.knobs_calibrated);
  EXPECT_FLOAT_EQ(s.target_recall, 0.9f);
  EXPECT_EQ(s.knob_nprobe, t->Info().calibration->Choose(0.9).point.nprobe);
  // A target outside [0, 1] is refused at creation.
  config.name = "bad";
  config.default_target_recall = 1.01;
  EXPECT_THAT(db_->CreateCollection(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target_recall")));
}

TEST_F(CollectionTest, WithoutCalibrationATargetRunsTheDefaultKnobs) {
  options_.collection.calibration_queries = 0;
  constexpr uint32_t kDim = 8;
  OpenDb();
  auto c = Create("off", kDim, Metric::kL2);
  ASSERT_NE(c, nullptr);
  Model model;
  UpsertRange(*c, 0, 1000, ClusteredVectors(1000, kDim, 45), &model);
  ASSERT_OK(c->StartBuild());
  ASSERT_OK(c->WaitForBuild());
  EXPECT_EQ(c->Info().calibration, nullptr);
  EXPECT_FALSE(c->MaybeStartCalibration());
  const auto q = ClusteredVectors(1, kDim, 46);
  QueryStats s = StatsOf(*c, q.data(), 0.95);
  EXPECT_FALSE(s.knobs_calibrated);
  EXPECT_FALSE(s.target_reached);
  EXPECT_EQ(s.knob_nprobe, 16u);
  EXPECT_EQ(s.knob_rerank, 100u);
}

}  // namespace
}  // namespace zoom::server
