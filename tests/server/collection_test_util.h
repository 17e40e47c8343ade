// The fixture and helpers shared by the Collection and Database tests
// (collection_test.cc, collection_write_test.cc, collection_read_test.cc,
// collection_maintenance_test.cc, collection_compaction_test.cc,
// collection_snapshot_test.cc): the data generators, the brute-force oracle
// (double precision) over a model of the live points, a BlockReader that
// holds a read until released, and CollectionTest, a database in a
// temporary directory with helpers to write, search and check it.
#ifndef ZOOM_TESTS_SERVER_COLLECTION_TEST_UTIL_H_
#define ZOOM_TESTS_SERVER_COLLECTION_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "server/engine/collection.h"
#include "server/engine/database.h"
#include "storage/block_reader.h"
#include "storage/metadata_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

// Everything here is inline (or a class): each test file includes it.
namespace zoom::server::collection_testing {

namespace fs = std::filesystem;

using ::zoom::testing::TempDir;

// One query of `dim` floats through Collection::Search, its hits (and,
// when asked, stats) split out for the assertions.
inline absl::Status SearchInto(const Collection& c, const float* q, size_t dim,
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
inline constexpr double kRecallFloor = 0.95;

// ---- Data -------------------------------------------------------------------

// n points around `clusters` overlapping Gaussian centres (closer to real
// embeddings than isotropic noise, hard enough to keep recall below 1),
// fixed by the seed.
inline std::vector<float> ClusteredVectors(size_t n, uint32_t dim, uint32_t seed,
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
inline uint64_t ExtId(size_t i) { return 1000003ull * i + 17; }

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

inline double TrueScore(Metric metric, const float* q, const std::vector<float>& x) {
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
inline std::vector<Scored> Oracle(const Model& model, Metric metric, const float* q,
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

inline double Tolerance(double score) { return 1e-4 * std::max(1.0, std::abs(score)); }

// An exact search must return the oracle's points with the oracle's scores.
// Ids may differ only where two oracle scores are closer than float
// rounding could separate.
inline void ExpectMatchesOracle(const std::vector<Hit>& hits,
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

inline double RecallOf(const std::vector<Hit>& hits,
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
    const uint32_t np = std::max<uint32_t>(1, c.core().engine()->index()->spec().nlist / 4);
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

}  // namespace zoom::server::collection_testing

#endif  // ZOOM_TESTS_SERVER_COLLECTION_TEST_UTIL_H_
