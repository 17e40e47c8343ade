// ivf_hnsw_pq (ivf_hnsw_pq_index.h): construction, assignment and encoding,
// Add, the points' places in the lists, the code error windows,
// ResidentBytes, Save and the load (LoadIvfHnswPq). The search is in
// ivf_hnsw_pq_search.cc; k-means, training and the builds are in
// ivf_hnsw_pq_build.cc.
#include "index/ivf_hnsw_pq_index.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "index/index_internal.h"

namespace zoom::index {
namespace {
// SetPlacePositionBitsForTesting's cap (32: none).
std::atomic<int> g_place_position_bits{32};
}  // namespace

void SetPlacePositionBitsForTesting(int bits) {
  g_place_position_bits.store(bits <= 0 || bits > 32 ? 32 : bits, std::memory_order_relaxed);
}
}  // namespace zoom::index

namespace zoom::index::internal {
namespace {

// First-chunk rows of a list that grows by Add (not sized by a bulk load).
constexpr uint64_t kListBaseRows = 16;

}  // namespace

IvfHnswPqIndex::IvfHnswPqIndex(const IndexSpec& spec, std::vector<float> centroids,
                               ProductQuantizer pq)
    : spec_(spec),
      pq4_(pq.nbits() == 4),
      rabitq_(pq.code() == CodeKind::kRabitq),
      centroids_(std::move(centroids)),
      pq_(std::move(pq)),
      graph_(spec.hnsw),
      place_bits_cap_(
          static_cast<uint32_t>(g_place_position_bits.load(std::memory_order_relaxed))) {
  const uint32_t nlist = spec_.nlist;
  centroid_norms_.resize(nlist);
  for (uint32_t c = 0; c < nlist; ++c) {
    const float* cc = centroids_.data() + size_t{c} * spec_.dim;
    centroid_norms_[c] = InnerProduct(cc, cc, spec_.dim);
  }
  lists_.reserve(nlist);
  for (uint32_t i = 0; i < nlist; ++i) {
    lists_.push_back(NewList(kListBaseRows));
  }
}

void IvfHnswPqIndex::BuildGraph() {
  graph_.Grow(spec_.nlist);
  MatrixOracle oracle(spec_.metric, centroids_.data(), spec_.dim);
  std::vector<HnswScratch> scratch(spec_.build_threads);
  ParallelFor(spec_.nlist, spec_.build_threads, [&](size_t i, int t) {
    graph_.Insert(static_cast<InternalId>(i), oracle, scratch[t]);
  });
}

void IvfHnswPqIndex::Encode(const float* x, size_t n, uint32_t* assign, uint8_t* codes,
                            float* terms, float* factors, float* errors) const {
  const size_t d = spec_.dim, pd = pq_.padded_dim(), m = pq_.code_size();
  Assign(x, n, assign);
  ParallelFor(n, spec_.build_threads, [&](size_t i, int) {
    thread_local std::vector<float> r, rt, rhat, ct;
    const float* xi = x + i * d;
    const uint32_t c = assign[i];
    r.resize(d);
    const float* ci = centroids_.data() + size_t{c} * d;
    for (size_t j = 0; j < d; ++j) r[j] = xi[j] - ci[j];
    rt.resize(pd);
    rhat.resize(pd);
    pq_.Transform(r.data(), rt.data());
    uint8_t* code = codes + i * m;
    const float factor = pq_.EncodeTransformed(rt.data(), code);
    pq_.DecodeTransformed(code, rhat.data());
    if (rabitq_) {
      for (size_t j = 0; j < pd; ++j) rhat[j] *= factor;
      factors[i] = factor;
    }
    {
      // The transform is a rotation (and zero padding): the error in its
      // space is the error in the original one.
      float e = 0;
      for (size_t j = 0; j < pd; ++j) e += (rt[j] - rhat[j]) * (rt[j] - rhat[j]);
      errors[i] = e;
    }
    ct.resize(pd);
    pq_.Transform(ci, ct.data());  // the centroid in the quantiser's space
    terms[i] = (rabitq_ ? InnerProduct(rt.data(), rt.data(), pd)
                        : InnerProduct(rhat.data(), rhat.data(), pd)) +
               2 * InnerProduct(ct.data(), rhat.data(), pd);
  });
}

std::unique_ptr<IvfHnswPqIndex> IvfHnswPqIndex::WithSameQuantizer(int build_threads) const {
  IndexSpec spec = spec_;
  spec.build_threads = build_threads;
  auto index = std::make_unique<IvfHnswPqIndex>(spec, centroids_, pq_);
  index->BuildGraph();
  index->radius_unit_ = radius_unit_;
  index->error_dims_ = error_dims_;
  return index;
}

void IvfHnswPqIndex::Assign(const float* x, size_t n, uint32_t* assign) const {
  const size_t d = spec_.dim, nlist = spec_.nlist;
  const size_t block_rows = std::clamp<size_t>((size_t{2} << 20) / nlist, 1, 128);
  BlasSingleThreadScope single_thread;
  ParallelFor((n + block_rows - 1) / block_rows, spec_.build_threads, [&](size_t b, int) {
    thread_local std::vector<float> ip;
    const size_t first = b * block_rows, rows = std::min(block_rows, n - first);
    ip.resize(rows * nlist);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                static_cast<int>(nlist), static_cast<int>(d), 1.0f, x + first * d,
                static_cast<int>(d), centroids_.data(), static_cast<int>(d), 0.0f, ip.data(),
                static_cast<int>(nlist));
    for (size_t i = 0; i < rows; ++i) {
      const float* row = ip.data() + i * nlist;
      uint32_t best = 0;
      float best_d = centroid_norms_[0] - 2 * row[0];
      for (uint32_t c = 1; c < nlist; ++c) {
        const float dc = centroid_norms_[c] - 2 * row[c];
        if (dc < best_d) {
          best_d = dc;
          best = c;
        }
      }
      assign[first + i] = best;
    }
  });
}

absl::Status IvfHnswPqIndex::AddPrepared(const float* x, size_t n, bool bulk) {
  if (size() + n > kMaxInternalIds) {
    return absl::ResourceExhaustedError("too many vectors for one index");
  }
  const size_t m = pq_.code_size();
  std::vector<uint32_t> assign(n);
  std::vector<uint8_t> codes(n * m);
  std::vector<float> terms(n);
  std::vector<float> factors(rabitq_ ? n : 0);
  std::vector<float> errors(n);
  Encode(x, n, assign.data(), codes.data(), terms.data(), factors.data(), errors.data());
  if (BuildCancelled()) return BuildCancelledError();  // rows left unencoded
  ZOOM_RETURN_IF_ERROR(AddEncoded(assign.data(), codes.data(), terms.data(), factors.data(),
                                  errors.data(), n, bulk));
  if (!bulk) {
    for (float e : errors) CountCodeError(e);
  }
  return absl::OkStatus();
}

CodeErrorStats IvfHnswPqIndex::CodeError() const {
  absl::MutexLock l(&error_mu_);
  return error_stats_;
}

void IvfHnswPqIndex::ReserveExactly(const uint32_t* assign, size_t n) {
  if (size() == 0) list_of_.SetFirstChunk(std::max<size_t>(1, n));
  std::vector<uint64_t> count(spec_.nlist, 0);
  for (size_t i = 0; i < n; ++i) ++count[assign[i]];
  for (uint32_t l = 0; l < spec_.nlist; ++l) {
    if (lists_[l]->size.load() == 0 && count[l] > 0) lists_[l] = NewList(count[l]);
  }
}

absl::Status IvfHnswPqIndex::AddEncoded(const uint32_t* assign, const uint8_t* codes,
                                        const float* terms, const float* factors,
                                        const float* errors, size_t n, bool bulk) {
  const uint64_t first = size();
  if (first + n > kMaxInternalIds) {
    return absl::ResourceExhaustedError("too many vectors for one index");
  }
  const size_t m = pq_.code_size();
  if (bulk) ReserveExactly(assign, n);
  list_of_.Grow(first + n);
  for (size_t i = 0; i < n; ++i) {
    InvertedList& list = *lists_[assign[i]];
    const uint32_t pos = list.size.load(std::memory_order_relaxed);
    PutCode(list, pos, codes + i * m);
    list.ids.Grow(pos + 1);
    list.terms.Grow(pos + 1);
    list.radii.Grow(pos + 1);
    *list.ids.Row(pos) = static_cast<uint32_t>(first + i);
    *list.terms.Row(pos) = terms[i];
    *list.radii.Row(pos) = RadiusByte(errors[i]);
    if (rabitq_) {
      list.factors.Grow(pos + 1);
      *list.factors.Row(pos) = factors[i];
    }
    *list_of_.Row(first + i) = Place(assign[i], pos);
    list.size.store(pos + 1, std::memory_order_release);
  }
  size_.store(first + n, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status IvfHnswPqIndex::Add(const float* vectors, size_t n) {
  if (n == 0) return absl::OkStatus();
  const std::vector<float> x = PrepareVectors(spec_.metric, vectors, n, spec_.dim);
  return AddPrepared(x.data(), n);
}

uint64_t IvfHnswPqIndex::ResidentBytes() const {
  uint64_t bytes = (centroids_.size() + centroid_norms_.size()) * sizeof(float) +
                   pq_.ResidentBytes() +
                   graph_.ResidentBytes() + list_of_.ResidentBytes();
  const bool l2 = UsesL2(spec_.metric);
  for (const auto& list : lists_) {
    bytes += sizeof(InvertedList) + list->codes.ResidentBytes() + list->ids.ResidentBytes() +
             (l2 ? list->terms.ResidentBytes() : 0) +
             (rabitq_ ? list->factors.ResidentBytes() : 0) +
             (radius_unit_ > 0 ? list->radii.ResidentBytes() : 0);
  }
  return bytes;
}

absl::Status IvfHnswPqIndex::Save(const std::string& path, FileSystem* fs) const {
  BinaryWriter w = IndexFileWriter(spec_, path, fs);
  SaveSpec(w, spec_);
  pq_.Save(w);
  w.PutVector(centroids_);
  graph_.Save(w);
  w.Put<uint64_t>(size());
  for (const auto& list : lists_) {
    const uint32_t n = list->size.load(std::memory_order_acquire);
    w.Put<uint32_t>(n);
    std::vector<uint8_t> code(pq_.code_size());
    for (uint32_t i = 0; i < n; ++i) {
      GetCode(*list, i, code.data());
      w.PutBytes(code.data(), code.size());
      w.Put<uint32_t>(*list->ids.Row(i));
      w.Put<float>(*list->terms.Row(i));
      if (rabitq_) w.Put<float>(*list->factors.Row(i));
    }
  }
  SaveSpecTail(w, spec_);
  // Format 1.2 / 2.1: the error radii.
  w.Put<float>(radius_unit_);
  w.Put<float>(error_dims_);
  for (const auto& list : lists_) {
    const uint32_t n = list->size.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < n; ++i) w.Put<uint8_t>(*list->radii.Row(i));
  }
  return w.Commit(path, fs);
}

absl::Status IvfHnswPqIndex::LoadBody(BinaryReader& r) {
  ZOOM_RETURN_IF_ERROR(graph_.Load(r));
  if (graph_.size() != spec_.nlist) return r.Corrupt("centroid graph size");
  uint64_t total = 0;
  ZOOM_RETURN_IF_ERROR(r.Get(&total));
  uint64_t seen = 0;
  list_of_.SetFirstChunk(std::max<uint64_t>(1, total));
  list_of_.Grow(total);
  std::vector<bool> placed(total, false);
  for (uint32_t l = 0; l < lists_.size(); ++l) {
    auto& list = lists_[l];
    uint32_t n = 0;
    ZOOM_RETURN_IF_ERROR(r.Get(&n));
    if (n > r.remaining() / (pq_.code_size() + 8)) return r.Corrupt("list size");
    if (n > 0) list = NewList(n);
    list->ids.Grow(n);
    list->terms.Grow(n);
    list->radii.Grow(n);
    if (rabitq_) list->factors.Grow(n);
    std::vector<uint8_t> code(pq_.code_size());
    for (uint32_t i = 0; i < n; ++i) {
      ZOOM_RETURN_IF_ERROR(r.GetBytes(code.data(), code.size()));
      for (uint8_t c : code) {
        if (c >= pq_.ksub()) return r.Corrupt("PQ code out of range");
      }
      PutCode(*list, i, code.data());
      ZOOM_RETURN_IF_ERROR(r.Get(list->ids.Row(i)));
      ZOOM_RETURN_IF_ERROR(r.Get(list->terms.Row(i)));
      if (rabitq_) {
        ZOOM_RETURN_IF_ERROR(r.Get(list->factors.Row(i)));
        // f is about |x'| / 4 at most, and |x'| is within the magnitude
        // rule (<= 2e18 for a residual): a larger one could overflow a
        // distance.
        const float f = *list->factors.Row(i);
        if (!(f >= 0 && f <= 1e18f)) return r.Corrupt("rabitq factor not in [0, 1e18]");
      }
      const uint32_t id = *list->ids.Row(i);
      if (id >= total) return r.Corrupt("list id out of range");
      if (placed[id]) return r.Corrupt("an id in two places of the lists");
      if (i > 0 && id <= *list->ids.Row(i - 1)) return r.Corrupt("list ids not ascending");
      placed[id] = true;
      *list_of_.Row(id) = Place(l, i);
    }
    list->size.store(n, std::memory_order_release);
    seen += n;
  }
  if (seen != total) return r.Corrupt("lists do not hold every id");
  ZOOM_RETURN_IF_ERROR(LoadSpecTail(r, &spec_));
  radius_unit_ = 0;
  if (HasErrorRadii(r)) {
    ZOOM_RETURN_IF_ERROR(r.Get(&radius_unit_));
    ZOOM_RETURN_IF_ERROR(r.Get(&error_dims_));
    if (!(radius_unit_ >= 0 && radius_unit_ <= 1e18f)) {
      return r.Corrupt("error radius unit not in [0, 1e18]");
    }
    // (Both 0: an index loaded from a file without radii, saved again.)
    if (radius_unit_ > 0 && !(error_dims_ >= 1 && error_dims_ <= 1e6f)) {
      return r.Corrupt("error dimensions not in [1, 1e6]");
    }
    if (r.remaining() < total) return r.Corrupt("error radii truncated");
    for (auto& list : lists_) {
      const uint32_t n = list->size.load(std::memory_order_relaxed);
      for (uint32_t i = 0; i < n; ++i) ZOOM_RETURN_IF_ERROR(r.Get(list->radii.Row(i)));
    }
  } else {
    // A file from before the radii: none known (points added later get
    // kUnknownRadius too: RadiusByte with no unit).
    for (auto& list : lists_) {
      const uint32_t n = list->size.load(std::memory_order_relaxed);
      for (uint32_t i = 0; i < n; ++i) *list->radii.Row(i) = kUnknownRadius;
    }
  }
  size_.store(total, std::memory_order_release);
  return absl::OkStatus();
}

uint32_t IvfHnswPqIndex::PosBits() const {
  const uint32_t fits =
      32 - static_cast<uint32_t>(std::bit_width(std::max<uint32_t>(spec_.nlist, 1) - 1));
  return std::min(fits, place_bits_cap_);
}

uint32_t IvfHnswPqIndex::UnknownPos() const {
  return static_cast<uint32_t>((uint64_t{1} << PosBits()) - 1);
}

uint32_t IvfHnswPqIndex::Place(uint32_t list, uint64_t pos) const {
  return static_cast<uint32_t>((uint64_t{list} << PosBits()) |
                               std::min<uint64_t>(pos, UnknownPos()));
}

std::unique_ptr<InvertedList> IvfHnswPqIndex::NewList(uint64_t rows) const {
  return std::make_unique<InvertedList>(pq_.code_size(), pq4_, rows);
}

void IvfHnswPqIndex::PutCode(InvertedList& list, uint32_t pos, const uint8_t* code) {
  if (!pq4_) {
    list.codes.Grow(pos + 1);
    std::memcpy(list.codes.Row(pos), code, pq_.code_size());
    return;
  }
  list.codes.Grow(pos / kPq4BlockSize + 1);
  Pq4SetCode(list.codes.Row(pos / kPq4BlockSize), pq_.code_size(), pos % kPq4BlockSize,
             code);
}

void IvfHnswPqIndex::CountCodeError(float e) {
  window_sum_ += e;
  if (++window_count_ < CodeErrorStats::kCodeErrorWindow) return;
  const double mean = window_sum_ / static_cast<double>(window_count_);
  window_sum_ = 0;
  window_count_ = 0;
  absl::MutexLock l(&error_mu_);
  if (error_stats_.windows == 0) error_stats_.first_window_mean = mean;
  error_stats_.latest_window_mean = mean;
  ++error_stats_.windows;
}

absl::StatusOr<std::unique_ptr<VectorIndex>> LoadIvfHnswPq(const IndexSpec& spec,
                                                           BinaryReader& r) {
  ProductQuantizer pq;
  ZOOM_RETURN_IF_ERROR(pq.Load(r, spec.pq.code));
  std::vector<float> centroids;
  ZOOM_RETURN_IF_ERROR(r.GetVector(&centroids));
  if (pq.dim() != spec.dim || pq.m() != spec.pq.m || pq.nbits() != spec.pq.nbits ||
      spec.nlist == 0 ||
      centroids.size() != size_t{spec.nlist} * spec.dim) {
    return r.Corrupt("quantizer or centroids do not match the spec");
  }
  auto index = std::make_unique<IvfHnswPqIndex>(spec, std::move(centroids), std::move(pq));
  ZOOM_RETURN_IF_ERROR(index->LoadBody(r));
  return std::unique_ptr<VectorIndex>(std::move(index));
}

}  // namespace zoom::index::internal
