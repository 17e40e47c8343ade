// zoombench --benchmarks=baselines: the in-memory ANN baselines (FAISS HNSW,
// HNSW-PQ + refine, IVF-HNSW-PQ + refine, hnswlib) on the same data set,
// each swept over its search knob, ending with a side-by-side at recall@10
// targets. See bench_baselines.h for the configurations.
//
// This is the one file that calls FAISS and hnswlib for the benchmarks: every
// call is wrapped so that their exceptions become a Status.
#include "bench/bench_baselines.h"

#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVFPQ.h>
#include <faiss/IndexPQ.h>
#include <faiss/IndexRefine.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/utils/distances.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>
#include <faiss/invlists/InvertedLists.h>
#include <faiss/utils/utils.h>
#include <hnswlib/hnswlib.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_session.h"
#include "absl/strings/str_split.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "common/timer.h"

extern "C" void openblas_set_num_threads(int);

ABSL_FLAG(std::string, baselines,
          "faiss_hnsw_flat,faiss_hnsw_pq_refine,faiss_ivf_hnsw_pq_refine,hnswlib",
          "Baselines to run (comma list): faiss_hnsw_flat, faiss_hnsw_pq_refine, "
          "faiss_ivf_hnsw_pq_refine, hnswlib (= hnswlib_M16 + hnswlib_M32), "
          "hnswlib_M16, hnswlib_M32");
ABSL_FLAG(bool, baseline_quick, false, "Short sweeps (smoke runs)");
ABSL_FLAG(int32_t, baseline_build_threads, 2,
          "OpenMP / std::thread threads for adding vectors to the baselines "
          "(training always uses one)");
ABSL_FLAG(std::string, baseline_cache_dir, "",
          "If set, built indexes are saved here and loaded by later runs with "
          "the same data set, metric and build parameters (builds of the FAISS "
          "baselines take minutes on this machine); the original build times are "
          "kept beside them");

namespace zoom::bench {
namespace {

using FaissIdx = faiss::Index::idx_t;
static_assert(std::is_same_v<FaissIdx, int64_t>,
              "FAISS labels are written straight into the harness's int64 ids");

constexpr int kHnswM = 32;
constexpr int kEfConstruction = 200;
// A configuration group stops once recall@10 reaches this: its costlier
// configurations cannot be the fastest at any target.
constexpr double kSaturatedRecall = 0.9995;

// Runs `f`, turning what FAISS, hnswlib or the allocator throw into a Status.
template <typename F>
absl::Status Guard(const std::string& what, F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const faiss::FaissException& e) {
    return absl::InternalError(absl::StrCat(what, ": FAISS: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

// omp_set_num_threads sets the *calling thread's* team size (an OpenMP ICV):
// threads the harness starts keep the default (all cores) unless each sets
// it, and FAISS opens a parallel region per search call.
void OneOmpThreadOnThisThread() {
  thread_local const bool done = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)done;
}

// The vectors the indexes are built and queried with.
struct Vectors {
  size_t n = 0, nq = 0, d = 0, n_train = 0;
  const float* base = nullptr;     // n x d
  const float* queries = nullptr;  // nq x d
  const float* train = nullptr;    // n_train x d (a sample of base)
  Metric metric = Metric::kL2;     // the data set's metric
  bool inner_product = false;      // searched as IP (ip, cosine) else L2
  std::vector<float> base_copy, query_copy, train_copy;

  faiss::MetricType faiss_metric() const {
    return inner_product ? faiss::METRIC_INNER_PRODUCT : faiss::METRIC_L2;
  }
};

Vectors PrepareVectors(const Dataset& ds, size_t max_train) {
  Vectors v;
  v.n = ds.base.rows;
  v.nq = ds.queries.rows;
  v.d = ds.base.dim;
  v.metric = ds.metric;
  v.inner_product = ds.metric != Metric::kL2;
  if (ds.metric == Metric::kCosine) {
    v.base_copy = ds.base.data;
    v.query_copy = ds.queries.data;
    for (size_t i = 0; i < v.n; ++i) NormalizeL2(v.base_copy.data() + i * v.d, v.d);
    for (size_t i = 0; i < v.nq; ++i) NormalizeL2(v.query_copy.data() + i * v.d, v.d);
    v.base = v.base_copy.data();
    v.queries = v.query_copy.data();
  } else {
    v.base = ds.base.data.data();
    v.queries = ds.queries.data.data();
  }
  if (v.n <= max_train) {
    v.train = v.base;
    v.n_train = v.n;
  } else {
    std::vector<size_t> rows(v.n);
    for (size_t i = 0; i < v.n; ++i) rows[i] = i;
    std::mt19937_64 rng(1234);
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(max_train);
    std::sort(rows.begin(), rows.end());
    v.train_copy.resize(max_train * v.d);
    for (size_t i = 0; i < max_train; ++i) {
      std::copy_n(v.base + rows[i] * v.d, v.d, v.train_copy.data() + i * v.d);
    }
    v.train = v.train_copy.data();
    v.n_train = max_train;
  }
  return v;
}

// PQ sub-quantisers: the divisor of d closest to d/4 (the larger on a tie).
int PqM(size_t d) {
  const double want = static_cast<double>(d) / 4.0;
  int best = 1;
  for (size_t m = 1; m <= d; ++m) {
    if (d % m != 0) continue;
    if (std::abs(static_cast<double>(m) - want) <=
        std::abs(static_cast<double>(best) - want)) {
      best = static_cast<int>(m);
    }
  }
  return best;
}

// IVF lists: 4 sqrt(n) rounded to the nearest power of two (2048 for 200K).
int IvfNlist(size_t n) {
  const double want = 4.0 * std::sqrt(static_cast<double>(n));
  const int log2 = std::max(0, static_cast<int>(std::lround(std::log2(want))));
  int nlist = 1 << log2;
  while (nlist > 1 && static_cast<size_t>(nlist) * 4 > n) nlist /= 2;
  return nlist;
}

// The search knobs of one configuration (0 = not used by this baseline).
struct Knobs {
  int ef = 0;        // HNSW efSearch / hnswlib ef
  int nprobe = 0;    // IVF lists visited
  int k_factor = 0;  // refine: k * k_factor candidates re-ranked exactly
  // Configurations of one group are ordered by cost; the sweep drops the
  // rest of a group once it saturates.
  int group = 0;

  std::string Label() const {
    std::vector<std::string> parts;
    if (nprobe > 0) parts.push_back(absl::StrCat("np=", nprobe));
    if (ef > 0) parts.push_back(absl::StrCat("ef=", ef));
    if (k_factor > 0) parts.push_back(absl::StrCat("kf=", k_factor));
    return absl::StrJoin(parts, ",");
  }
};

std::vector<int> EfSweep(bool quick) {
  if (quick) return {16, 64, 256};
  return {16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};
}

// efSearch x k_factor for HNSW-PQ + refine. FAISS searches with
// max(efSearch, k * k_factor), so smaller efSearch values are duplicates.
std::vector<Knobs> EfKfSweep(bool quick, size_t k) {
  const std::vector<int> efs =
      quick ? std::vector<int>{32, 128}
            : std::vector<int>{16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768};
  const std::vector<int> kfs = quick ? std::vector<int>{1, 4}
                                     : std::vector<int>{1, 2, 4, 8, 16, 32};
  std::vector<Knobs> out;
  for (size_t g = 0; g < kfs.size(); ++g) {
    const int kb = static_cast<int>(k) * kfs[g];
    bool any = false;
    for (int ef : efs) {
      if (ef < kb) continue;
      out.push_back({.ef = ef, .k_factor = kfs[g], .group = static_cast<int>(g)});
      any = true;
    }
    if (!any) out.push_back({.ef = kb, .k_factor = kfs[g], .group = static_cast<int>(g)});
  }
  return out;
}

// ---- Memory accounting from the structures --------------------------------

template <typename T>
uint64_t VecBytes(const std::vector<T>& v) {
  return static_cast<uint64_t>(v.size()) * sizeof(T);
}

uint64_t HnswGraphBytes(const faiss::HNSW& h) {
  return VecBytes(h.neighbors) + VecBytes(h.offsets) + VecBytes(h.levels) +
         VecBytes(h.assign_probas) + VecBytes(h.cum_nneighbor_per_level);
}

uint64_t PqTableBytes(const faiss::ProductQuantizer& pq) {
  return VecBytes(pq.centroids) + VecBytes(pq.transposed_centroids) +
         VecBytes(pq.centroids_sq_lengths) + VecBytes(pq.sdc_table);
}

uint64_t FlatCodeBytes(const faiss::Index* index) {
  const auto* flat = dynamic_cast<const faiss::IndexFlatCodes*>(index);
  return flat == nullptr ? 0 : VecBytes(flat->codes);
}

std::string MiB(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

// ---- The baselines ---------------------------------------------------------

// One baseline: built once, then configured and searched per configuration.
// Search() is thread-safe; Configure() runs between timed runs only.
class Baseline {
 public:
  explicit Baseline(std::string name) : name_(std::move(name)) {}
  virtual ~Baseline() = default;
  const std::string& name() const { return name_; }

  // Fixes the build parameters for the data (before BuildParams()).
  virtual void Plan(const Vectors&) {}
  virtual std::string BuildParams() const = 0;
  // Unimplemented for a metric the library cannot serve (then skipped).
  virtual absl::Status CheckSupported(const Vectors&) const { return absl::OkStatus(); }
  // Trains on v.train (if the index needs it).
  virtual absl::Status Train(const Vectors& v) = 0;
  virtual absl::Status Add(const Vectors& v, int build_threads) = 0;
  // Writes the built index to `path` / replaces this index by the one there.
  virtual absl::Status Save(const std::string& path) const = 0;
  virtual absl::Status Load(const std::string& path, const Vectors& v) = 0;
  // The index's memory, computed from its structures.
  virtual uint64_t ResidentBytes() const = 0;
  virtual std::string MemoryBreakdown() const = 0;
  virtual std::vector<Knobs> Sweep(bool quick, size_t k) const = 0;
  virtual absl::Status Configure(const Knobs& knobs) = 0;
  // Writes up to k ids, best first, -1 padded.
  virtual absl::Status Search(const float* query, size_t k,
                              int64_t* out_ids) const = 0;
  // Filtered search (--benchmarks=filter): only rows whose bit is set in
  // `bitmap` (bit i of byte i / 8, LSB first; `matches` of them) may be
  // returned. Unimplemented when the baseline has no filtered form.
  virtual absl::Status SearchFiltered(const float*, size_t, const FilterKnobs&, const uint8_t*,
                                      uint64_t, uint64_t, int64_t*) const {
    return absl::UnimplementedError(absl::StrCat(name_, " has no filtered search"));
  }
  virtual std::vector<FilterKnobs> FilterSweep() const { return {}; }

 private:
  std::string name_;
};

// Per-thread distance scratch for FAISS's one-query calls.
float* DistanceScratch(size_t k) {
  thread_local std::vector<float> dist;
  if (dist.size() < k) dist.resize(k);
  return dist.data();
}

class FaissHnswFlat final : public Baseline {
 public:
  FaissHnswFlat() : Baseline("faiss_hnsw_flat") {}

  std::string BuildParams() const override {
    return absl::StrCat("M=", kHnswM, ",efC=", kEfConstruction);
  }
  absl::Status Train(const Vectors& v) override {
    return Guard("IndexHNSWFlat", [&] {
      index_ = std::make_unique<faiss::IndexHNSWFlat>(static_cast<int>(v.d), kHnswM,
                                                      v.faiss_metric());
      index_->hnsw.efConstruction = kEfConstruction;
    });
  }
  absl::Status Add(const Vectors& v, int) override {
    return Guard("IndexHNSWFlat::add",
                 [&] { index_->add(static_cast<FaissIdx>(v.n), v.base); });
  }
  absl::Status Save(const std::string& path) const override {
    return Guard("write_index " + path, [&] { faiss::write_index(index_.get(), path.c_str()); });
  }
  absl::Status Load(const std::string& path, const Vectors&) override {
    return Guard("read_index " + path, [&] {
      std::unique_ptr<faiss::Index> raw(faiss::read_index(path.c_str()));
      auto* hnsw = dynamic_cast<faiss::IndexHNSWFlat*>(raw.get());
      if (hnsw == nullptr) throw std::runtime_error("not an IndexHNSWFlat");
      raw.release();
      index_.reset(hnsw);
    });
  }
  uint64_t ResidentBytes() const override {
    return FlatCodeBytes(index_->storage) + HnswGraphBytes(index_->hnsw);
  }
  std::string MemoryBreakdown() const override {
    return absl::StrCat("vectors ", MiB(FlatCodeBytes(index_->storage)), " + graph ",
                        MiB(HnswGraphBytes(index_->hnsw)));
  }
  std::vector<Knobs> Sweep(bool quick, size_t) const override {
    std::vector<Knobs> out;
    for (int ef : EfSweep(quick)) out.push_back({.ef = ef});
    return out;
  }
  // FAISS 1.7.3's HNSW::search reads hnsw.efSearch and ignores
  // SearchParametersHNSW::efSearch (fixed in 1.7.4), so the knob is set on
  // the index between timed runs, as for the refine variants.
  absl::Status Configure(const Knobs& knobs) override {
    index_->hnsw.efSearch = knobs.ef;
    return absl::OkStatus();
  }
  absl::Status Search(const float* query, size_t k, int64_t* out_ids) const override {
    return Guard("IndexHNSWFlat::search", [&] {
      index_->search(1, query, static_cast<FaissIdx>(k), DistanceScratch(k), out_ids);
    });
  }

 private:
  std::unique_ptr<faiss::IndexHNSWFlat> index_;
};

// FAISS 1.7.3's IndexRefine rejects SearchParameters, so the knobs of the
// refine variants are set on the indexes between timed runs.
class FaissHnswPqRefine final : public Baseline {
 public:
  FaissHnswPqRefine() : Baseline("faiss_hnsw_pq_refine") {}

  void Plan(const Vectors& v) override { pq_m_ = PqM(v.d); }
  std::string BuildParams() const override {
    return absl::StrCat("M=", kHnswM, ",efC=", kEfConstruction, ",PQ", pq_m_,
                        "x8,refine=flat");
  }
  absl::Status CheckSupported(const Vectors& v) const override {
    if (v.metric == Metric::kInnerProduct) {
      // IndexHNSWPQ has no metric argument in 1.7.3 and its graph build uses
      // an L2 symmetric (SDC) table: it cannot rank by raw inner product.
      return absl::UnimplementedError(
          "FAISS 1.7.3 IndexHNSWPQ is L2-only (its build uses an L2 SDC table)");
    }
    return absl::OkStatus();
  }
  absl::Status Train(const Vectors& v) override {
    // L2 on the unit vectors for cosine: the same ranking as inner product.
    return Guard("IndexHNSWPQ train", [&] {
      base_ = std::make_unique<faiss::IndexHNSWPQ>(static_cast<int>(v.d), pq_m_, kHnswM);
      base_->hnsw.efConstruction = kEfConstruction;
      refine_ = std::make_unique<faiss::IndexRefineFlat>(base_.get());
      refine_->train(static_cast<FaissIdx>(v.n_train), v.train);
    });
  }
  absl::Status Add(const Vectors& v, int) override {
    return Guard("IndexHNSWPQ add",
                 [&] { refine_->add(static_cast<FaissIdx>(v.n), v.base); });
  }
  absl::Status Save(const std::string& path) const override {
    return Guard("write_index " + path, [&] { faiss::write_index(refine_.get(), path.c_str()); });
  }
  absl::Status Load(const std::string& path, const Vectors&) override {
    return Guard("read_index " + path, [&] {
      std::unique_ptr<faiss::Index> raw(faiss::read_index(path.c_str()));
      auto* refine = dynamic_cast<faiss::IndexRefineFlat*>(raw.get());
      auto* base = refine == nullptr ? nullptr
                                     : dynamic_cast<faiss::IndexHNSWPQ*>(refine->base_index);
      if (base == nullptr) throw std::runtime_error("not an IndexRefineFlat(IndexHNSWPQ)");
      raw.release();
      refine_.reset();
      base_.reset(base);
      refine->own_fields = false;  // base_ owns it, as after a build
      refine_.reset(refine);
    });
  }
  uint64_t ResidentBytes() const override {
    return PqBytes() + HnswGraphBytes(base_->hnsw) + FlatCodeBytes(refine_->refine_index);
  }
  std::string MemoryBreakdown() const override {
    return absl::StrCat("PQ codes+tables ", MiB(PqBytes()), " + graph ",
                        MiB(HnswGraphBytes(base_->hnsw)), " + refine vectors ",
                        MiB(FlatCodeBytes(refine_->refine_index)));
  }
  std::vector<Knobs> Sweep(bool quick, size_t k) const override {
    return EfKfSweep(quick, k);
  }
  absl::Status Configure(const Knobs& knobs) override {
    base_->hnsw.efSearch = knobs.ef;
    refine_->k_factor = static_cast<float>(knobs.k_factor);
    return absl::OkStatus();
  }
  absl::Status Search(const float* query, size_t k, int64_t* out_ids) const override {
    return Guard("IndexRefineFlat(HNSWPQ)::search", [&] {
      refine_->search(1, query, static_cast<FaissIdx>(k), DistanceScratch(k), out_ids);
    });
  }

 private:
  uint64_t PqBytes() const {
    const auto* pq = dynamic_cast<const faiss::IndexPQ*>(base_->storage);
    return pq == nullptr ? 0 : VecBytes(pq->codes) + PqTableBytes(pq->pq);
  }

  int pq_m_ = 0;
  // Declared before refine_, which points at it: destroyed after it.
  std::unique_ptr<faiss::IndexHNSWPQ> base_;
  std::unique_ptr<faiss::IndexRefineFlat> refine_;
};

class FaissIvfHnswPqRefine final : public Baseline {
 public:
  FaissIvfHnswPqRefine() : Baseline("faiss_ivf_hnsw_pq_refine") {}

  std::string BuildParams() const override {
    return absl::StrCat(factory_, ",refine=flat");
  }
  void Plan(const Vectors& v) override {
    nlist_ = IvfNlist(v.n);
    factory_ = absl::StrFormat("IVF%d_HNSW%d,PQ%d", nlist_, kHnswM, PqM(v.d));
  }
  absl::Status Train(const Vectors& v) override {
    return Guard(absl::StrCat("index_factory ", factory_), [&] {
      base_.reset(faiss::index_factory(static_cast<int>(v.d), factory_.c_str(),
                                       v.faiss_metric()));
      ivf_ = dynamic_cast<faiss::IndexIVFPQ*>(base_.get());
      if (ivf_ == nullptr) throw std::runtime_error("not an IndexIVFPQ");
      quantizer_ = dynamic_cast<faiss::IndexHNSW*>(ivf_->quantizer);
      if (quantizer_ == nullptr) throw std::runtime_error("quantizer is not HNSW");
      // index_factory turns on polysemous training for "PQ<m>": a simulated
      // annealing that only serves polysemous_ht filtering (unused here)
      // and takes minutes. It does not change ADC distances.
      ivf_->do_polysemous_training = false;
      quantizer_->hnsw.efConstruction = kEfConstruction;
      // Accurate list assignment while adding (searches set their own).
      quantizer_->hnsw.efSearch = 128;
      refine_ = std::make_unique<faiss::IndexRefineFlat>(base_.get());
      refine_->train(static_cast<FaissIdx>(v.n_train), v.train);
    });
  }
  absl::Status Add(const Vectors& v, int) override {
    return Guard("IVF add", [&] {
      refine_->add(static_cast<FaissIdx>(v.n), v.base);
      // Lists grew by doubling; a served index would be loaded at its size.
      if (auto* lists = dynamic_cast<faiss::ArrayInvertedLists*>(ivf_->invlists)) {
        for (auto& c : lists->codes) c.shrink_to_fit();
        for (auto& i : lists->ids) i.shrink_to_fit();
      }
    });
  }
  absl::Status Save(const std::string& path) const override {
    return Guard("write_index " + path, [&] { faiss::write_index(refine_.get(), path.c_str()); });
  }
  absl::Status Load(const std::string& path, const Vectors&) override {
    return Guard("read_index " + path, [&] {
      std::unique_ptr<faiss::Index> raw(faiss::read_index(path.c_str()));
      auto* refine = dynamic_cast<faiss::IndexRefineFlat*>(raw.get());
      auto* ivf = refine == nullptr ? nullptr
                                    : dynamic_cast<faiss::IndexIVFPQ*>(refine->base_index);
      auto* quantizer = ivf == nullptr ? nullptr : dynamic_cast<faiss::IndexHNSW*>(ivf->quantizer);
      if (quantizer == nullptr) {
        throw std::runtime_error("not an IndexRefineFlat(IndexIVFPQ with an HNSW quantizer)");
      }
      raw.release();
      refine_.reset();
      base_.reset(ivf);
      refine->own_fields = false;  // base_ owns it, as after a build
      refine_.reset(refine);
      ivf_ = ivf;
      quantizer_ = quantizer;
      nlist_ = static_cast<int>(ivf->nlist);
    });
  }
  uint64_t ResidentBytes() const override {
    return ListBytes() + QuantizerBytes() + PqBytes() + FlatCodeBytes(refine_->refine_index);
  }
  std::string MemoryBreakdown() const override {
    return absl::StrCat("lists (codes+ids) ", MiB(ListBytes()), " + quantizer ",
                        MiB(QuantizerBytes()), " + PQ tables ", MiB(PqBytes()),
                        " + refine vectors ", MiB(FlatCodeBytes(refine_->refine_index)));
  }
  std::vector<Knobs> Sweep(bool quick, size_t) const override {
    const std::vector<int> nprobes =
        quick ? std::vector<int>{4, 16, 64}
              : std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    const std::vector<int> kfs = quick ? std::vector<int>{1, 4}
                                       : std::vector<int>{1, 2, 4, 8, 16, 32};
    std::vector<Knobs> out;
    for (size_t g = 0; g < kfs.size(); ++g) {
      for (int np : nprobes) {
        if (np > nlist_) continue;
        out.push_back({.nprobe = np, .k_factor = kfs[g], .group = static_cast<int>(g)});
      }
    }
    return out;
  }
  absl::Status Configure(const Knobs& knobs) override {
    ivf_->nprobe = static_cast<size_t>(knobs.nprobe);
    quantizer_->hnsw.efSearch = std::max(2 * knobs.nprobe, 32);
    refine_->k_factor = static_cast<float>(knobs.k_factor);
    return absl::OkStatus();
  }
  absl::Status Search(const float* query, size_t k, int64_t* out_ids) const override {
    return Guard("IndexRefineFlat(IVF)::search", [&] {
      refine_->search(1, query, static_cast<FaissIdx>(k), DistanceScratch(k), out_ids);
    });
  }
  // FAISS's own filter: the IVF-PQ scan with an IDSelectorBitmap (only
  // selected ids are scored), k * k_factor candidates, then the exact
  // re-rank IndexRefineFlat does, over the selected candidates (IndexRefine
  // takes no SearchParameters in FAISS 1.7.3, so the re-rank is done here,
  // with FAISS's own distance functions).
  std::vector<FilterKnobs> FilterSweep() const override {
    std::vector<FilterKnobs> out;
    for (int kf : {2, 8}) {
      for (int np : {16, 64, 256, 1024}) {
        if (np <= nlist_) out.push_back({.nprobe = np, .k_factor = kf});
      }
    }
    return out;
  }
  absl::Status SearchFiltered(const float* query, size_t k, const FilterKnobs& knobs,
                              const uint8_t* bitmap, uint64_t n, uint64_t,
                              int64_t* out_ids) const override {
    return Guard("IndexIVFPQ::search(IDSelectorBitmap)", [&] {
      const faiss::IDSelectorBitmap sel(n, bitmap);
      faiss::SearchParametersIVF sp;
      sp.nprobe = static_cast<size_t>(knobs.nprobe);
      sp.sel = const_cast<faiss::IDSelectorBitmap*>(&sel);
      const size_t kk = k * static_cast<size_t>(std::max(1, knobs.k_factor));
      thread_local std::vector<float> dist;
      thread_local std::vector<FaissIdx> ids;
      dist.resize(kk);
      ids.resize(kk);
      ivf_->search(1, query, static_cast<FaissIdx>(kk), dist.data(), ids.data(), &sp);
      const auto* flat = dynamic_cast<const faiss::IndexFlat*>(refine_->refine_index);
      if (flat == nullptr) throw std::runtime_error("refine index is not flat");
      const size_t d = static_cast<size_t>(ivf_->d);
      const bool ip = ivf_->metric_type == faiss::METRIC_INNER_PRODUCT;
      std::vector<std::pair<float, FaissIdx>> scored;
      for (size_t i = 0; i < kk; ++i) {
        if (ids[i] < 0) continue;
        const float* x = flat->get_xb() + static_cast<size_t>(ids[i]) * d;
        const float s = ip ? -faiss::fvec_inner_product(query, x, d) : faiss::fvec_L2sqr(query, x, d);
        scored.emplace_back(s, ids[i]);
      }
      std::sort(scored.begin(), scored.end());
      std::fill(out_ids, out_ids + k, int64_t{-1});
      for (size_t i = 0; i < k && i < scored.size(); ++i) out_ids[i] = scored[i].second;
    });
  }

 private:
  uint64_t ListBytes() const {
    const auto* lists = dynamic_cast<const faiss::ArrayInvertedLists*>(ivf_->invlists);
    if (lists == nullptr) return 0;
    uint64_t bytes = (lists->codes.size() + lists->ids.size()) * sizeof(std::vector<uint8_t>);
    for (const auto& c : lists->codes) bytes += c.capacity();
    for (const auto& i : lists->ids) bytes += i.capacity() * sizeof(FaissIdx);
    return bytes;
  }
  uint64_t QuantizerBytes() const {
    return FlatCodeBytes(quantizer_->storage) + HnswGraphBytes(quantizer_->hnsw);
  }
  uint64_t PqBytes() const {
    return PqTableBytes(ivf_->pq) + ivf_->precomputed_table.nbytes();
  }

  int nlist_ = 0;
  std::string factory_;
  std::unique_ptr<faiss::Index> base_;
  faiss::IndexIVFPQ* ivf_ = nullptr;        // == base_
  faiss::IndexHNSW* quantizer_ = nullptr;   // owned by *ivf_
  std::unique_ptr<faiss::IndexRefineFlat> refine_;
};

class Hnswlib final : public Baseline {
 public:
  explicit Hnswlib(int m) : Baseline(absl::StrCat("hnswlib_M", m)), m_(m) {}

  std::string BuildParams() const override {
    return absl::StrCat("M=", m_, ",efC=", kEfConstruction);
  }
  absl::Status Train(const Vectors& v) override {
    return Guard("hnswlib space", [&] {
      if (v.inner_product) {
        space_ = std::make_unique<hnswlib::InnerProductSpace>(v.d);
      } else {
        space_ = std::make_unique<hnswlib::L2Space>(v.d);
      }
    });
  }
  absl::Status Save(const std::string& path) const override {
    return Guard("hnswlib saveIndex " + path, [&] { index_->saveIndex(path); });
  }
  absl::Status Load(const std::string& path, const Vectors& v) override {
    ZOOM_RETURN_IF_ERROR(Train(v));  // the space
    return Guard("hnswlib loadIndex " + path, [&] {
      index_ = std::make_unique<hnswlib::HierarchicalNSW<float>>(space_.get(), path,
                                                                 /*nmslib=*/false, v.n);
      if (index_->cur_element_count != v.n) {
        throw std::runtime_error(absl::StrCat("holds ", index_->cur_element_count,
                                              " vectors, not ", v.n));
      }
    });
  }
  absl::Status Add(const Vectors& v, int build_threads) override {
    ZOOM_RETURN_IF_ERROR(Guard("hnswlib HierarchicalNSW", [&] {
      index_ = std::make_unique<hnswlib::HierarchicalNSW<float>>(
          space_.get(), v.n, static_cast<size_t>(m_), kEfConstruction, /*random_seed=*/100);
    }));
    std::atomic<size_t> next{0};
    std::mutex mu;
    absl::Status first_error;
    std::vector<std::thread> pool;
    for (int t = 0; t < std::max(1, build_threads); ++t) {
      pool.emplace_back([&] {
        for (size_t i = next.fetch_add(1); i < v.n; i = next.fetch_add(1)) {
          absl::Status st = Guard("hnswlib addPoint",
                                  [&] { index_->addPoint(v.base + i * v.d, i); });
          if (!st.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (first_error.ok()) first_error = st;
            next = v.n;
            return;
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    return first_error;
  }
  uint64_t ResidentBytes() const override {
    return Level0Bytes() + UpperBytes() + LabelMapBytes() + BookkeepingBytes();
  }
  std::string MemoryBreakdown() const override {
    return absl::StrCat("level 0 (vectors+links+labels) ", MiB(Level0Bytes()),
                        " + upper links ", MiB(UpperBytes()), " + label map ~",
                        MiB(LabelMapBytes()), " + locks/pointers/levels ",
                        MiB(BookkeepingBytes()));
  }
  std::vector<Knobs> Sweep(bool quick, size_t) const override {
    std::vector<Knobs> out;
    if (!quick) out.push_back({.ef = 10});
    for (int ef : EfSweep(quick)) out.push_back({.ef = ef});
    return out;
  }
  absl::Status Configure(const Knobs& knobs) override {
    index_->setEf(static_cast<size_t>(knobs.ef));
    return absl::OkStatus();
  }
  absl::Status Search(const float* query, size_t k, int64_t* out_ids) const override {
    return Guard("hnswlib searchKnn", [&] {
      auto result = index_->searchKnn(query, k);  // worst on top
      std::fill(out_ids, out_ids + k, int64_t{-1});
      size_t i = std::min(result.size(), k);
      while (!result.empty() && i > 0) {
        out_ids[--i] = static_cast<int64_t>(result.top().second);
        result.pop();
      }
    });
  }
  // Debian 12's hnswlib (0.6.2) has no filter functor (0.7.0 added it):
  // its filtered form is a post-filter, searchKnn for k * k_factor / share
  // candidates (at most kMaxPostFilter; hnswlib searches with ef =
  // max(ef, that)) keeping the matching ones. The share is the filter's
  // exact one (generous to the baseline).
  static constexpr size_t kMaxPostFilter = 20000;
  std::vector<FilterKnobs> FilterSweep() const override {
    std::vector<FilterKnobs> out;
    for (int kf : {2, 4, 8}) {
      for (int ef : {64, 256}) out.push_back({.ef = ef, .k_factor = kf});
    }
    return out;
  }
  absl::Status SearchFiltered(const float* query, size_t k, const FilterKnobs& knobs,
                              const uint8_t* bitmap, uint64_t n, uint64_t matches,
                              int64_t* out_ids) const override {
    return Guard("hnswlib searchKnn (post-filter)", [&] {
      const double share = std::max<double>(1.0, static_cast<double>(matches)) / static_cast<double>(n);
      size_t want = static_cast<size_t>(std::ceil(static_cast<double>(k * std::max(1, knobs.k_factor)) / share));
      want = std::min({want, kMaxPostFilter, static_cast<size_t>(n)});
      want = std::max({want, k, static_cast<size_t>(knobs.ef)});
      auto result = index_->searchKnn(query, want);  // worst on top
      std::vector<int64_t> kept;
      while (!result.empty()) {
        const size_t id = result.top().second;
        if ((bitmap[id >> 3] >> (id & 7)) & 1) kept.push_back(static_cast<int64_t>(id));
        result.pop();
      }
      std::fill(out_ids, out_ids + k, int64_t{-1});
      // kept is worst first.
      for (size_t i = 0; i < k && i < kept.size(); ++i) out_ids[i] = kept[kept.size() - 1 - i];
    });
  }

 private:
  uint64_t Level0Bytes() const {
    return static_cast<uint64_t>(index_->max_elements_) * index_->size_data_per_element_;
  }
  uint64_t UpperBytes() const {
    uint64_t bytes = 0;
    for (size_t i = 0; i < index_->cur_element_count; ++i) {
      bytes += static_cast<uint64_t>(index_->element_levels_[i]) *
               index_->size_links_per_element_;
    }
    return bytes;
  }
  // std::unordered_map node (next pointer + key + value) and bucket array.
  uint64_t LabelMapBytes() const {
    const auto& map = index_->label_lookup_;
    return map.size() * (sizeof(void*) + sizeof(std::pair<const size_t, unsigned>)) +
           map.bucket_count() * sizeof(void*);
  }
  uint64_t BookkeepingBytes() const {
    return static_cast<uint64_t>(index_->max_elements_) * sizeof(char*) +
           VecBytes(index_->element_levels_) +
           (index_->link_list_locks_.size() + index_->link_list_update_locks_.size()) *
               sizeof(std::mutex);
  }

  int m_;
  std::unique_ptr<hnswlib::SpaceInterface<float>> space_;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> index_;
};

std::vector<std::string> AllNames() {
  return {"faiss_hnsw_flat", "faiss_hnsw_pq_refine", "faiss_ivf_hnsw_pq_refine",
          "hnswlib", "hnswlib_M16", "hnswlib_M32"};
}

std::vector<std::unique_ptr<Baseline>> MakeBaselines(const std::vector<std::string>& names) {
  std::vector<std::unique_ptr<Baseline>> out;
  auto wanted = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  if (wanted("faiss_hnsw_flat")) out.push_back(std::make_unique<FaissHnswFlat>());
  if (wanted("faiss_hnsw_pq_refine")) out.push_back(std::make_unique<FaissHnswPqRefine>());
  if (wanted("faiss_ivf_hnsw_pq_refine")) {
    out.push_back(std::make_unique<FaissIvfHnswPqRefine>());
  }
  if (wanted("hnswlib") || wanted("hnswlib_M16")) out.push_back(std::make_unique<Hnswlib>(16));
  if (wanted("hnswlib") || wanted("hnswlib_M32")) out.push_back(std::make_unique<Hnswlib>(32));
  return out;
}

// ---- The index cache (--baseline_cache_dir) --------------------------------

// One file per data set, metric, size, baseline and build parameters.
std::string CachePath(const std::string& dir, const Dataset& ds, const Vectors& v,
                      const Baseline& b) {
  std::string params = b.BuildParams();
  for (char& c : params) {
    if (c == ',' || c == '=') c = '_';
  }
  return absl::StrCat(dir, "/", ds.name, ".", MetricName(v.metric), ".n", v.n, ".",
                      b.name(), ".", params, ".index");
}

// The build times stored beside a cached index; false when there is none.
bool ReadBuildTimes(const std::string& path, double* train_s, double* add_s) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path + ".build_s");
  return static_cast<bool>(in >> *train_s >> *add_s);
}

absl::Status SaveToCache(const Baseline& b, const std::string& path, double train_s,
                         double add_s) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir for ", path, ": ", ec.message()));
  const std::string tmp = path + ".tmp";
  ZOOM_RETURN_IF_ERROR(b.Save(tmp));
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename to ", path, ": ", ec.message()));
  std::ofstream out(path + ".build_s");
  out << absl::StrFormat("%.3f %.3f\n", train_s, add_s);
  if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", path, ".build_s"));
  return absl::OkStatus();
}

// Builds `b` over v (or loads it from options.cache_dir, with the build
// times saved beside it, and saves a new build there).
absl::Status BuildOrLoad(Baseline& b, const Vectors& v, const Dataset& ds,
                         const BaselineOptions& options, double* train_s, double* add_s,
                         bool* cached) {
  *cached = false;
  const std::string cache_path =
      options.cache_dir.empty() ? std::string() : CachePath(options.cache_dir, ds, v, b);
  if (!cache_path.empty() && ReadBuildTimes(cache_path, train_s, add_s)) {
    Stopwatch sw;
    ZOOM_RETURN_IF_ERROR(b.Load(cache_path, v));
    *cached = true;
    std::printf("%s: loaded %s in %.1f s\n", b.name().c_str(), cache_path.c_str(),
                sw.ElapsedSeconds());
  } else {
    // Training (k-means) runs many tiny OpenMP regions: on this shared
    // 2-core machine two threads spin in barriers far more than they gain,
    // so it runs on one; adding (long regions) uses build_threads.
    omp_set_num_threads(1);
    Stopwatch sw;
    ZOOM_RETURN_IF_ERROR(b.Train(v));
    *train_s = sw.ElapsedSeconds();
    sw.Reset();
    omp_set_num_threads(options.build_threads);
    ZOOM_RETURN_IF_ERROR(b.Add(v, options.build_threads));
    *add_s = sw.ElapsedSeconds();
    if (!cache_path.empty()) ZOOM_RETURN_IF_ERROR(SaveToCache(b, cache_path, *train_s, *add_s));
  }
  omp_set_num_threads(1);
  return absl::OkStatus();
}

void PrintBuild(const Baseline& b, const Vectors& v, const BaselineOptions& options, bool cached,
                double train_s, double add_s, double load_before) {
  const uint64_t resident = b.ResidentBytes();
  const double per_vector = static_cast<double>(resident) / static_cast<double>(v.n);
  std::printf("%s (%s): %s in %.1f s (train %.1f s on 1 thread, add %.1f s on %d; "
              "load average %.1f); resident %s = %.1f B/vector: %s\n",
              b.name().c_str(), b.BuildParams().c_str(),
              cached ? "cached, originally built" : "built", train_s + add_s, train_s, add_s,
              options.build_threads, load_before, MiB(resident).c_str(), per_vector,
              b.MemoryBreakdown().c_str());
  std::fflush(stdout);
}

// Builds `b`, sweeps it and appends its configurations to `results`.
absl::Status RunOne(Baseline& b, const Vectors& v, const Dataset& ds,
                    const std::vector<int>& threads, size_t k,
                    const BaselineOptions& options, JsonLines& rep, Table& table,
                    std::vector<ConfigResult>* results) {
  b.Plan(v);
  if (absl::Status st = b.CheckSupported(v); !st.ok()) {
    if (!absl::IsUnimplemented(st)) return st;
    std::printf("%s: skipped for metric %s: %s\n", b.name().c_str(),
                std::string(MetricName(v.metric)).c_str(), std::string(st.message()).c_str());
    return absl::OkStatus();
  }
  const double load_before = LoadAverage1m();
  double train_s = 0, add_s = 0;
  bool cached = false;
  ZOOM_RETURN_IF_ERROR(BuildOrLoad(b, v, ds, options, &train_s, &add_s, &cached));
  PrintBuild(b, v, options, cached, train_s, add_s, load_before);
  const uint64_t resident = b.ResidentBytes();
  const double per_vector = static_cast<double>(resident) / static_cast<double>(v.n);
  rep.Line({{"record", std::string("build")},
            {"name", b.name()},
            {"dataset", ds.name},
            {"params", b.BuildParams()},
            {"build_s", train_s + add_s},
            {"train_s", train_s},
            {"add_s", add_s},
            {"cached", cached},
            {"build_threads", int64_t{options.build_threads}},
            {"loadavg_1m", load_before},
            {"resident_bytes", static_cast<int64_t>(resident)},
            {"bytes_per_vector", per_vector},
            {"rss_bytes", static_cast<int64_t>(CurrentRssBytes())},
            {"peak_rss_bytes", static_cast<int64_t>(PeakRssBytes())}});

  std::vector<bool> saturated;
  for (const Knobs& knobs : b.Sweep(options.quick, k)) {
    if (knobs.group >= static_cast<int>(saturated.size())) {
      saturated.resize(static_cast<size_t>(knobs.group) + 1, false);
    }
    if (saturated[static_cast<size_t>(knobs.group)]) continue;
    ZOOM_RETURN_IF_ERROR(b.Configure(knobs));
    double recall10 = 0;
    for (int t : threads) {
      const SearchFn fn = [&](size_t q, size_t kk, int64_t* out, QueryStats*) {
        OneOmpThreadOnThisThread();
        return b.Search(v.queries + q * v.d, kk, out);
      };
      ZOOM_ASSIGN_OR_RETURN(RunResult run, RunQueries(ds, k, t, fn));
      ConfigResult r;
      r.name = b.name();
      r.dataset = ds.name;
      r.params = knobs.Label();
      r.threads = t;
      r.k = k;
      r.run = run;
      r.resident_bytes = resident;
      r.n_vectors = v.n;
      r.rss_bytes = CurrentRssBytes();
      Report(rep, table, r);
      results->push_back(r);
      recall10 = run.recall_at_10;
    }
    if (recall10 >= kSaturatedRecall) saturated[static_cast<size_t>(knobs.group)] = true;
  }
  std::printf("%s: sweep done, load average %.1f\n", b.name().c_str(), LoadAverage1m());
  return absl::OkStatus();
}

void PrintParetoFronts(const std::vector<ConfigResult>& results) {
  std::vector<std::pair<std::string, int>> keys;
  for (const ConfigResult& r : results) {
    const std::pair<std::string, int> key(r.name, r.threads);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  std::printf("\nPareto fronts (recall@10 / QPS [params]):\n");
  for (const auto& [name, t] : keys) {
    std::vector<ConfigResult> mine;
    for (const ConfigResult& r : results) {
      if (r.name == name && r.threads == t) mine.push_back(r);
    }
    std::vector<std::string> points;
    for (const ConfigResult& r : ParetoFront(mine)) {
      points.push_back(absl::StrFormat("%.4f/%.0f [%s]", r.run.recall_at_10, r.run.qps,
                                       r.params));
    }
    std::printf("  %s, %d thread%s: %s\n", name.c_str(), t, t == 1 ? "" : "s",
                absl::StrJoin(points, "  ").c_str());
  }
}

// The workload: Setup reads the flags and loads the data set; Run builds
// (or loads) each baseline and sweeps it; Report prints them side by side
// at the recall targets and their Pareto fronts.
class BaselinesWorkload : public Workload {
 public:
  absl::Status Setup() override;
  absl::Status Run(JsonLines& rep) override;
  absl::Status Report(JsonLines& rep) override;

 private:
  std::vector<int> threads_;
  int32_t k_ = 10;
  BaselineOptions options_;
  Dataset ds_;
  std::vector<ConfigResult> results_;
};

absl::Status BaselinesWorkload::Setup() {
  const std::string dir = DatasetDirFlag();
  ZOOM_ASSIGN_OR_RETURN(const Metric metric, MetricFlag(dir));
  ZOOM_ASSIGN_OR_RETURN(threads_, ThreadsFlag());
  k_ = absl::GetFlag(FLAGS_k);
  if (k_ < 1) return absl::InvalidArgumentError("--k must be >= 1");
  const int64_t max_queries = absl::GetFlag(FLAGS_max_queries);
  if (max_queries < 0) return absl::InvalidArgumentError("--max_queries must be >= 0");
  ZOOM_ASSIGN_OR_RETURN(options_, BaselineOptionsFromFlags());

  Stopwatch load;
  ZOOM_ASSIGN_OR_RETURN(ds_, LoadDataset(dir, metric, static_cast<size_t>(max_queries)));
  std::printf("baselines on %s: %llu x %u %s, %llu queries, metric %s%s, k=%d, "
              "threads %s%s (loaded in %.1f s)\n",
              ds_.name.c_str(), static_cast<unsigned long long>(ds_.base.rows), ds_.base.dim,
              ds_.is_uint8 ? "uint8 (widened to float)" : "float32",
              static_cast<unsigned long long>(ds_.queries.rows),
              std::string(MetricName(metric)).c_str(),
              metric == Metric::kCosine ? " (inner product on unit-normalised copies)" : "",
              k_, absl::StrJoin(threads_, ",").c_str(), options_.quick ? ", quick sweep" : "",
              load.ElapsedSeconds());
  std::printf("%s\n", BaselineSimdSummary().c_str());
  std::printf("load average %.1f on %u cores (timings of a shared machine: compare "
              "systems within one run)\n",
              LoadAverage1m(), std::thread::hardware_concurrency());
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status BaselinesWorkload::Run(JsonLines& rep) {
  Table table = MakeResultTable();
  ZOOM_ASSIGN_OR_RETURN(results_, RunBaselines(ds_, threads_, static_cast<size_t>(k_), options_,
                                               rep, table));
  return absl::OkStatus();
}

absl::Status BaselinesWorkload::Report(JsonLines& /*rep*/) {
  PrintSideBySide(results_, {0.90, 0.95, 0.99});
  // zoombench_main prints them again beside zoomd's when both ran.
  SessionResults().insert(SessionResults().end(), results_.begin(), results_.end());
  PrintParetoFronts(results_);
  std::printf("\npeak RSS %s\n", MiB(PeakRssBytes()).c_str());
  return absl::OkStatus();
}

const RegisterWorkload kRegisterBaselines("baselines", RunWorkload<BaselinesWorkload>);

}  // namespace

absl::StatusOr<BaselineOptions> BaselineOptionsFromFlags() {
  BaselineOptions options;
  options.quick = absl::GetFlag(FLAGS_baseline_quick);
  options.names.clear();
  const std::vector<std::string> known = AllNames();
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_baselines), ',', absl::SkipEmpty())) {
    const std::string name(part);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown baseline '", name, "'; known: ", absl::StrJoin(known, ", ")));
    }
    options.names.push_back(name);
  }
  if (options.names.empty()) return absl::InvalidArgumentError("--baselines is empty");
  options.cache_dir = absl::GetFlag(FLAGS_baseline_cache_dir);
  options.build_threads = absl::GetFlag(FLAGS_baseline_build_threads);
  if (options.build_threads < 1) {
    return absl::InvalidArgumentError("--baseline_build_threads must be >= 1");
  }
  return options;
}

absl::StatusOr<std::vector<ConfigResult>> RunBaselines(
    const Dataset& ds, const std::vector<int>& threads, size_t k,
    const BaselineOptions& options, JsonLines& rep, Table& table) {
  if (ds.base.rows == 0 || ds.queries.rows == 0) {
    return absl::InvalidArgumentError("empty data set");
  }
  if (threads.empty()) return absl::InvalidArgumentError("no thread counts");
  // OpenBLAS keeps its own pool; FAISS's k-means already runs under OpenMP.
  openblas_set_num_threads(1);
  const Vectors v = PrepareVectors(ds, options.max_train);
  std::vector<ConfigResult> results;
  for (std::unique_ptr<Baseline>& b : MakeBaselines(options.names)) {
    ZOOM_RETURN_IF_ERROR(RunOne(*b, v, ds, threads, k, options, rep, table, &results));
    b.reset();  // free it before the next one is built
  }
  return results;
}

absl::StatusOr<std::vector<ConfigResult>> RunBaselines(
    const Dataset& ds, const std::vector<int>& threads, size_t k, JsonLines& rep,
    Table& table) {
  ZOOM_ASSIGN_OR_RETURN(const BaselineOptions options, BaselineOptionsFromFlags());
  return RunBaselines(ds, threads, k, options, rep, table);
}

namespace {

// A built baseline and the vectors it was built with (its queries, prepared
// as it takes them).
class FilteredAdapter final : public FilteredBaseline {
 public:
  FilteredAdapter(std::unique_ptr<Baseline> b, std::shared_ptr<const Vectors> v)
      : b_(std::move(b)), v_(std::move(v)) {}
  std::string name() const override { return b_->name(); }
  std::string BuildParams() const override { return b_->BuildParams(); }
  uint64_t ResidentBytes() const override { return b_->ResidentBytes(); }
  std::vector<FilterKnobs> Sweep() const override { return b_->FilterSweep(); }
  absl::Status Search(size_t q, size_t k, const FilterKnobs& knobs, const uint8_t* bitmap,
                      uint64_t matches, int64_t* out) const override {
    OneOmpThreadOnThisThread();
    return b_->SearchFiltered(v_->queries + q * v_->d, k, knobs, bitmap, v_->n, matches, out);
  }

 private:
  std::unique_ptr<Baseline> b_;
  std::shared_ptr<const Vectors> v_;
};

}  // namespace

std::string FilterKnobs::Label() const {
  std::vector<std::string> parts;
  if (nprobe > 0) parts.push_back(absl::StrCat("np=", nprobe));
  if (ef > 0) parts.push_back(absl::StrCat("ef=", ef));
  if (k_factor > 0) parts.push_back(absl::StrCat("kf=", k_factor));
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::vector<std::unique_ptr<FilteredBaseline>>> BuildFilteredBaselines(
    const Dataset& ds, const BaselineOptions& options) {
  openblas_set_num_threads(1);
  auto v = std::make_shared<const Vectors>(PrepareVectors(ds, options.max_train));
  std::vector<std::unique_ptr<FilteredBaseline>> out;
  std::vector<std::unique_ptr<Baseline>> all;
  all.push_back(std::make_unique<Hnswlib>(32));
  all.push_back(std::make_unique<FaissIvfHnswPqRefine>());
  for (std::unique_ptr<Baseline>& b : all) {
    const bool wanted = std::find(options.names.begin(), options.names.end(), b->name()) !=
                            options.names.end() ||
                        (b->name().rfind("hnswlib", 0) == 0 &&
                         std::find(options.names.begin(), options.names.end(), "hnswlib") !=
                             options.names.end());
    if (!wanted) continue;
    b->Plan(*v);
    if (absl::Status st = b->CheckSupported(*v); !st.ok()) continue;
    double train_s = 0, add_s = 0;
    bool cached = false;
    const double load = LoadAverage1m();
    ZOOM_RETURN_IF_ERROR(BuildOrLoad(*b, *v, ds, options, &train_s, &add_s, &cached));
    PrintBuild(*b, *v, options, cached, train_s, add_s, load);
    out.push_back(std::make_unique<FilteredAdapter>(std::move(b), v));
  }
  return out;
}

std::string BaselineSimdSummary() {
#if defined(USE_AVX512)
  const char* compiled = "AVX-512";
#elif defined(USE_AVX)
  const char* compiled = "AVX";
#elif defined(USE_SSE)
  const char* compiled = "SSE only";
#else
  const char* compiled = "scalar";
#endif
#if defined(USE_SSE)
  const char* cpu = AVX512Capable() ? "AVX-512" : (AVXCapable() ? "AVX" : "SSE");
#else
  const char* cpu = "unknown";
#endif
#if defined(USE_AVX)
  const char* advice = "";
#else
  const char* advice = " (configure with -DZOOM_MARCH=native for a fair hnswlib)";
#endif
  const std::string faiss_options = faiss::get_compile_options();
  const bool generic = faiss_options.find("GENERIC") != std::string::npos;
  return absl::StrCat(
      "hnswlib 0.6.2 distance kernels: ", compiled, advice, "; CPU has ", cpu, ". FAISS ",
      FAISS_VERSION_MAJOR, ".", FAISS_VERSION_MINOR, ".", FAISS_VERSION_PATCH,
      " (Debian libfaiss-dev) built with: ", faiss_options,
      generic ? " (no SSE3/AVX2 kernels: its float distances are the scalar reference "
                "loops, so hnswlib is the fair in-memory anchor)"
              : "");
}

}  // namespace zoom::bench
