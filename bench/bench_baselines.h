// File: bench/bench_baselines.h
//
// The in-memory baselines zoomd is compared with, built on the same data and
// swept over their search knob (zoombench --benchmarks=baselines):
//
//   faiss_hnsw_flat           FAISS IndexHNSWFlat, M=32, efConstruction=200;
//                             sweeps efSearch.
//   faiss_hnsw_pq_refine      FAISS IndexHNSWPQ (M=32, PQ m ~ d/4 x 8 bits)
//                             in IndexRefineFlat (exact re-rank in RAM);
//                             sweeps efSearch x k_factor.
//   faiss_ivf_hnsw_pq_refine  FAISS "IVF<nlist>_HNSW32,PQ<m>" (nlist ~
//                             4 sqrt(n), a power of two) in IndexRefineFlat;
//                             sweeps nprobe x k_factor.
//   hnswlib_M16, hnswlib_M32  hnswlib HierarchicalNSW, ef_construction=200,
//                             compiled with our flags; sweeps ef.
//
// Metrics: l2 as is; ip as inner product on the raw vectors; cosine as inner
// product on unit-normalised copies (FAISS IndexHNSWPQ, which is L2-only in
// FAISS 1.7.3, uses L2 on the unit vectors: the same ranking). Recall is
// always the harness's tie-aware recall from true scores.
//
// Searches run one query per call from the harness's threads with one
// OpenMP thread each; training (k-means) uses one thread and adding uses
// --baseline_build_threads (2). FAISS and hnswlib exceptions become a Status
// here.
//
// FAISS 1.7.3 traps handled here: HNSW::search ignores
// SearchParametersHNSW::efSearch and IndexRefine rejects SearchParameters,
// so knobs are set on the indexes between timed runs (never during one);
// index_factory's "PQ<m>" turns on the (slow, here useless) polysemous
// training, which is switched off.
#ifndef ZOOM_BENCH_BASELINES_H_
#define ZOOM_BENCH_BASELINES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "bench/bench_dataset.h"
#include "bench/bench_util.h"

// Comma list of baselines to run ("hnswlib" = hnswlib_M16 and hnswlib_M32).
ABSL_DECLARE_FLAG(std::string, baselines);
// A short sweep per baseline, for smoke runs.
ABSL_DECLARE_FLAG(bool, baseline_quick);
// Threads for adding vectors (training uses one).
ABSL_DECLARE_FLAG(int32_t, baseline_build_threads);
// Directory of saved baseline indexes ("" = always build).
ABSL_DECLARE_FLAG(std::string, baseline_cache_dir);

namespace zoom::bench {

struct BaselineOptions {
  // Names as in the header comment; "hnswlib" selects both hnswlib variants.
  std::vector<std::string> names = {"faiss_hnsw_flat", "faiss_hnsw_pq_refine",
                                    "faiss_ivf_hnsw_pq_refine", "hnswlib"};
  bool quick = false;  // short sweeps
  // Rows sampled (fixed seed) to train PQ / IVF when the base is larger.
  size_t max_train = 100000;
  // Threads for adding vectors (training and searches use one OpenMP thread
  // per calling thread).
  int build_threads = 2;
  // If not empty, built indexes are saved here and reused (with their
  // original build times) by later runs with the same data and parameters.
  std::string cache_dir;
};

// --baselines and --baseline_quick; unknown names are an error.
absl::StatusOr<BaselineOptions> BaselineOptionsFromFlags();

// Builds each selected baseline on `ds` (one at a time, freed after its
// sweep), runs every configuration of its sweep at each of `threads` with
// `k` neighbours, prints and reports each (Report) plus one JSON line per
// build (name, build_s, resident_bytes, ...), and returns all configuration
// results. A baseline that cannot run this metric is skipped with a message.
absl::StatusOr<std::vector<ConfigResult>> RunBaselines(
    const Dataset& ds, const std::vector<int>& threads, size_t k,
    const BaselineOptions& options, JsonLines& rep, Table& table);
// As above with the options from the flags.
absl::StatusOr<std::vector<ConfigResult>> RunBaselines(
    const Dataset& ds, const std::vector<int>& threads, size_t k,
    JsonLines& rep, Table& table);

// ---- Filtered search (zoombench --benchmarks=filter) ----------------------------
//
//   hnswlib_M32               a post-filter: Debian 12's hnswlib 0.6.2 has no
//                             filter functor (0.7.0 added it), so its filtered
//                             form is searchKnn for k * k_factor / share
//                             candidates (at most 20,000) keeping the matching
//                             ones; sweeps ef x k_factor.
//   faiss_ivf_hnsw_pq_refine  FAISS's own filter: the IVF-PQ list scan with an
//                             IDSelectorBitmap (only selected ids are scored),
//                             k * k_factor candidates re-ranked exactly in RAM;
//                             sweeps nprobe x k_factor.
struct FilterKnobs {
  int ef = 0, nprobe = 0, k_factor = 0;
  std::string Label() const;
};

class FilteredBaseline {
 public:
  virtual ~FilteredBaseline() = default;
  virtual std::string name() const = 0;
  virtual std::string BuildParams() const = 0;
  virtual uint64_t ResidentBytes() const = 0;
  virtual std::vector<FilterKnobs> Sweep() const = 0;
  // Up to k ids for query row q, best first, -1 padded, only rows whose bit
  // is set in `bitmap` (bit i of byte i / 8, LSB first: a MatchSet's words
  // on a little-endian machine), `matches` of them. Thread-safe.
  virtual absl::Status Search(size_t q, size_t k, const FilterKnobs& knobs,
                              const uint8_t* bitmap, uint64_t matches,
                              int64_t* out) const = 0;
};

// Builds (or loads from options.cache_dir) the filtered baselines among
// options.names ("hnswlib" selects hnswlib_M32).
absl::StatusOr<std::vector<std::unique_ptr<FilteredBaseline>>> BuildFilteredBaselines(
    const Dataset& ds, const BaselineOptions& options);

// One line naming the SIMD level hnswlib was compiled with (and what the CPU
// offers), and the FAISS library's build options.
std::string BaselineSimdSummary();

}  // namespace zoom::bench

#endif  // ZOOM_BENCH_BASELINES_H_
